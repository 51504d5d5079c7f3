/* Float64 SDPA oracle, written from the formulas in ref64.h: score matrix per
 * (batch, query head), softmax per row, then the chain rule term by term. */
#include "ref64.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Index helpers over contiguous C-order arrays. */
#define IDX4(n1, n2, n3, a, b, c, d) ((((a) * (n1) + (b)) * (n2) + (c)) * (n3) + (d))

bool ref64_causal_visible(attn_causal causal, int64_t Nq, int64_t Nk, int64_t i, int64_t j)
{
    switch (causal) {
    case ATTN_CAUSAL_TOP_LEFT: return j <= i;
    case ATTN_CAUSAL_BOTTOM_RIGHT: return j <= i + Nk - Nq;
    default: return true;
    }
}

bool ref64_add_mask(double *bias, int64_t B, int64_t Hq, int64_t Nq, int64_t Nk,
                    const attn_tensor *mask)
{
    const int64_t full[4] = {B, Hq, Nq, Nk};
    int64_t stride[4];
    if (mask->ndim < 1 || mask->ndim > 4) return false;
    /* Right-align the mask's dims with (B,Hq,Nq,Nk); missing or size-1 dims
     * repeat, anything else must match exactly. */
    for (int d = 0; d < 4; ++d) {
        int md = d - (4 - mask->ndim);
        if (md < 0 || mask->shape[md] == 1) {
            stride[d] = 0;
        } else if (mask->shape[md] == full[d]) {
            stride[d] = mask->stride[md];
        } else {
            return false;
        }
    }
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < Hq; ++h)
            for (int64_t i = 0; i < Nq; ++i)
                for (int64_t j = 0; j < Nk; ++j) {
                    int64_t off = b * stride[0] + h * stride[1] + i * stride[2] + j * stride[3];
                    double *dst = &bias[IDX4(Hq, Nq, Nk, b, h, i, j)];
                    if (mask->dtype == ATTN_BOOL)
                        *dst += ((const uint8_t *)mask->data)[off] ? 0.0 : -INFINITY;
                    else
                        *dst += (double)((const float *)mask->data)[off];
                }
    return true;
}

/* Scores of (b, h) into s (Nq x Nk), -inf where not visible. */
static void scores(const ref64_sdpa *p, const double *q, const double *k, int64_t b, int64_t h,
                   double *s)
{
    const int64_t hk = h / (p->Hq / p->Hkv);
    for (int64_t i = 0; i < p->Nq; ++i)
        for (int64_t j = 0; j < p->Nk; ++j) {
            double bias = p->bias ? p->bias[IDX4(p->Hq, p->Nq, p->Nk, b, h, i, j)] : 0.0;
            if (!ref64_causal_visible(p->causal, p->Nq, p->Nk, i, j) || bias == -INFINITY) {
                s[i * p->Nk + j] = -INFINITY;
                continue;
            }
            double dot = 0.0;
            for (int64_t d = 0; d < p->D; ++d)
                dot += q[IDX4(p->Hq, p->Nq, p->D, b, h, i, d)] *
                       k[IDX4(p->Hkv, p->Nk, p->D, b, hk, j, d)];
            s[i * p->Nk + j] = p->scale * dot + bias;
        }
}

/* Row-wise softmax of s in place into probabilities; lse per row. */
static void softmax_rows(int64_t Nq, int64_t Nk, double *s, double *lse)
{
    for (int64_t i = 0; i < Nq; ++i) {
        double *row = s + i * Nk, m = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j < Nk; ++j) m = row[j] > m ? row[j] : m;
        if (m == -INFINITY) { /* nothing visible */
            for (int64_t j = 0; j < Nk; ++j) row[j] = 0.0;
            lse[i] = -INFINITY;
            continue;
        }
        for (int64_t j = 0; j < Nk; ++j) sum += exp(row[j] - m);
        for (int64_t j = 0; j < Nk; ++j) row[j] = exp(row[j] - m) / sum;
        lse[i] = m + log(sum);
    }
}

/* Probabilities P (Nq x Nk) and lse (Nq) of head (b, h). */
static void probabilities(const ref64_sdpa *p, const double *q, const double *k, int64_t b,
                          int64_t h, double *P, double *lse)
{
    scores(p, q, k, b, h, P);
    softmax_rows(p->Nq, p->Nk, P, lse);
}

static size_t at_least_one(int64_t n) { return (size_t)(n > 0 ? n : 1); }

void ref64_sdpa_forward(const ref64_sdpa *p, const double *q, const double *k, const double *v,
                        double *out, double *lse, double *weights)
{
    double *P = malloc(at_least_one(p->Nq * p->Nk) * sizeof *P);
    double *L = malloc(at_least_one(p->Nq) * sizeof *L);
    const int64_t group = p->Hq / p->Hkv;
    for (int64_t b = 0; b < p->B; ++b)
        for (int64_t h = 0; h < p->Hq; ++h) {
            probabilities(p, q, k, b, h, P, L);
            for (int64_t i = 0; i < p->Nq; ++i) {
                for (int64_t e = 0; e < p->Dv; ++e) {
                    double acc = 0.0;
                    for (int64_t j = 0; j < p->Nk; ++j)
                        acc += P[i * p->Nk + j] * v[IDX4(p->Hkv, p->Nk, p->Dv, b, h / group, j, e)];
                    out[IDX4(p->Hq, p->Nq, p->Dv, b, h, i, e)] = acc;
                }
                if (lse) lse[(b * p->Hq + h) * p->Nq + i] = L[i];
                if (weights)
                    memcpy(&weights[IDX4(p->Hq, p->Nq, p->Nk, b, h, i, 0)], &P[i * p->Nk],
                           (size_t)p->Nk * sizeof *P);
            }
        }
    free(P);
    free(L);
}

/* dP (Nq x Nk) = dout_i · v_j for head (b, h), and rowsum_i = Σ_j P_ij dP_ij. */
static void prob_grad(const ref64_sdpa *p, const double *v, const double *dout, int64_t b,
                      int64_t h, const double *P, double *dP, double *rowsum)
{
    const int64_t hk = h / (p->Hq / p->Hkv);
    for (int64_t i = 0; i < p->Nq; ++i) {
        rowsum[i] = 0.0;
        for (int64_t j = 0; j < p->Nk; ++j) {
            double acc = 0.0;
            for (int64_t e = 0; e < p->Dv; ++e)
                acc += dout[IDX4(p->Hq, p->Nq, p->Dv, b, h, i, e)] *
                       v[IDX4(p->Hkv, p->Nk, p->Dv, b, hk, j, e)];
            dP[i * p->Nk + j] = acc;
            rowsum[i] += P[i * p->Nk + j] * acc;
        }
    }
}

void ref64_sdpa_backward(const ref64_sdpa *p, const double *q, const double *k, const double *v,
                         const double *dout, double *dq, double *dk, double *dv)
{
    const size_t nn = at_least_one(p->Nq * p->Nk);
    double *P = malloc(nn * sizeof *P), *dP = malloc(nn * sizeof *dP);
    double *L = malloc(at_least_one(p->Nq) * sizeof *L), *R = malloc(at_least_one(p->Nq) * sizeof *R);
    const int64_t group = p->Hq / p->Hkv;
    if (dk) memset(dk, 0, (size_t)(p->B * p->Hkv * p->Nk * p->D) * sizeof *dk);
    if (dv) memset(dv, 0, (size_t)(p->B * p->Hkv * p->Nk * p->Dv) * sizeof *dv);
    for (int64_t b = 0; b < p->B; ++b)
        for (int64_t h = 0; h < p->Hq; ++h) {
            const int64_t hk = h / group;
            probabilities(p, q, k, b, h, P, L);
            prob_grad(p, v, dout, b, h, P, dP, R);
            for (int64_t i = 0; i < p->Nq; ++i) {
                if (dq)
                    for (int64_t d = 0; d < p->D; ++d) dq[IDX4(p->Hq, p->Nq, p->D, b, h, i, d)] = 0.0;
                for (int64_t j = 0; j < p->Nk; ++j) {
                    const double Pij = P[i * p->Nk + j];
                    const double dS = Pij * (dP[i * p->Nk + j] - R[i]);
                    if (dv)
                        for (int64_t e = 0; e < p->Dv; ++e)
                            dv[IDX4(p->Hkv, p->Nk, p->Dv, b, hk, j, e)] +=
                                Pij * dout[IDX4(p->Hq, p->Nq, p->Dv, b, h, i, e)];
                    for (int64_t d = 0; d < p->D; ++d) {
                        if (dq)
                            dq[IDX4(p->Hq, p->Nq, p->D, b, h, i, d)] +=
                                p->scale * dS * k[IDX4(p->Hkv, p->Nk, p->D, b, hk, j, d)];
                        if (dk)
                            dk[IDX4(p->Hkv, p->Nk, p->D, b, hk, j, d)] +=
                                p->scale * dS * q[IDX4(p->Hq, p->Nq, p->D, b, h, i, d)];
                    }
                }
            }
        }
    free(P);
    free(dP);
    free(L);
    free(R);
}

void ref64_sdpa_magnitudes(const ref64_sdpa *p, const double *q, const double *k,
                           const double *v, const double *dout, const double *weights,
                           double *out_mag, double *dq_mag, double *dk_mag, double *dv_mag)
{
    const int64_t group = p->Hq / p->Hkv;
    const double scale = fabs(p->scale);
    double *absdP = malloc(at_least_one(p->Nk) * sizeof *absdP);
    if (dk_mag) memset(dk_mag, 0, (size_t)(p->B * p->Hkv * p->Nk * p->D) * sizeof *dk_mag);
    if (dv_mag) memset(dv_mag, 0, (size_t)(p->B * p->Hkv * p->Nk * p->Dv) * sizeof *dv_mag);
    for (int64_t b = 0; b < p->B; ++b)
        for (int64_t h = 0; h < p->Hq; ++h) {
            const int64_t hk = h / group;
            for (int64_t i = 0; i < p->Nq; ++i) {
                const double *P = &weights[IDX4(p->Hq, p->Nq, p->Nk, b, h, i, 0)];
                if (out_mag)
                    for (int64_t e = 0; e < p->Dv; ++e) {
                        double acc = 0.0;
                        for (int64_t j = 0; j < p->Nk; ++j)
                            acc += P[j] * fabs(v[IDX4(p->Hkv, p->Nk, p->Dv, b, hk, j, e)]);
                        out_mag[IDX4(p->Hq, p->Nq, p->Dv, b, h, i, e)] = acc;
                    }
                if (!dout) continue;
                double A = 0.0;
                for (int64_t j = 0; j < p->Nk; ++j) {
                    double acc = 0.0;
                    for (int64_t e = 0; e < p->Dv; ++e)
                        acc += fabs(dout[IDX4(p->Hq, p->Nq, p->Dv, b, h, i, e)] *
                                    v[IDX4(p->Hkv, p->Nk, p->Dv, b, hk, j, e)]);
                    absdP[j] = acc;
                    A += P[j] * acc;
                }
                if (dq_mag)
                    for (int64_t d = 0; d < p->D; ++d) {
                        double acc = 0.0;
                        for (int64_t j = 0; j < p->Nk; ++j)
                            acc += P[j] * (absdP[j] + A) *
                                   fabs(k[IDX4(p->Hkv, p->Nk, p->D, b, hk, j, d)]);
                        dq_mag[IDX4(p->Hq, p->Nq, p->D, b, h, i, d)] = scale * acc;
                    }
                for (int64_t j = 0; j < p->Nk; ++j) {
                    if (P[j] == 0.0) continue;
                    if (dk_mag)
                        for (int64_t d = 0; d < p->D; ++d)
                            dk_mag[IDX4(p->Hkv, p->Nk, p->D, b, hk, j, d)] +=
                                scale * P[j] * (absdP[j] + A) *
                                fabs(q[IDX4(p->Hq, p->Nq, p->D, b, h, i, d)]);
                    if (dv_mag)
                        for (int64_t e = 0; e < p->Dv; ++e)
                            dv_mag[IDX4(p->Hkv, p->Nk, p->Dv, b, hk, j, e)] +=
                                P[j] * fabs(dout[IDX4(p->Hq, p->Nq, p->Dv, b, h, i, e)]);
                }
            }
        }
    free(absdP);
}

double ref64_sdpa_score_magnitude(const ref64_sdpa *p, const double *q, const double *k)
{
    const int64_t group = p->Hq / p->Hkv;
    double worst = 0.0;
    for (int64_t b = 0; b < p->B; ++b)
        for (int64_t h = 0; h < p->Hq; ++h)
            for (int64_t i = 0; i < p->Nq; ++i)
                for (int64_t j = 0; j < p->Nk; ++j) {
                    double bias = p->bias ? p->bias[IDX4(p->Hq, p->Nq, p->Nk, b, h, i, j)] : 0.0;
                    if (!ref64_causal_visible(p->causal, p->Nq, p->Nk, i, j) || isinf(bias))
                        continue;
                    double acc = 0.0;
                    for (int64_t d = 0; d < p->D; ++d)
                        acc += fabs(q[IDX4(p->Hq, p->Nq, p->D, b, h, i, d)] *
                                    k[IDX4(p->Hkv, p->Nk, p->D, b, h / group, j, d)]);
                    acc = fabs(p->scale) * acc + fabs(bias);
                    worst = acc > worst ? acc : worst;
                }
    return worst;
}

double ref64_sdpa_loss(const ref64_sdpa *p, const double *q, const double *k, const double *v,
                       const double *dout)
{
    const int64_t n = p->B * p->Hq * p->Nq * p->Dv;
    double *out = malloc(at_least_one(n) * sizeof *out), loss = 0.0;
    ref64_sdpa_forward(p, q, k, v, out, NULL, NULL);
    for (int64_t i = 0; i < n; ++i) loss += out[i] * dout[i];
    free(out);
    return loss;
}

void ref64_fd_gradient(double (*f)(void *ctx), void *ctx, double *x, int64_t n, double h,
                       double *grad)
{
    for (int64_t i = 0; i < n; ++i) {
        const double saved = x[i];
        x[i] = saved + h;
        const double plus = f(ctx);
        x[i] = saved - h;
        const double minus = f(ctx);
        x[i] = saved;
        grad[i] = (plus - minus) / (2.0 * h);
    }
}
