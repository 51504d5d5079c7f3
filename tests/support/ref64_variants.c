/* Float64 oracle and naive float32 SDPA with the score variants; see
 * ref64_variants.h. The math is written once (ref64_variants_impl.h) and
 * instantiated for double and for float. */
#include "ref64_variants.h"
#include "testutil.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool rv_visible(const rv_problem *p, int64_t b, int64_t h, int64_t i, int64_t j)
{
    switch (p->causal) {
    case ATTN_CAUSAL_TOP_LEFT:
        if (j > i) return false;
        break;
    case ATTN_CAUSAL_BOTTOM_RIGHT:
        if (j > i + p->Nk - p->Nq) return false;
        break;
    default: break;
    }
    if (p->window.enabled) {
        const int64_t c = i + p->Nk - p->Nq;
        if (p->window.left >= 0 && j < c - p->window.left) return false;
        if (p->window.right >= 0 && j > c + p->window.right) return false;
    }
    if (p->bias && p->bias[((b * p->Hq + h) * p->Nq + i) * p->Nk + j] == -INFINITY) return false;
    return true;
}

int64_t rv_empty_rows(const rv_problem *p)
{
    int64_t n = 0;
    for (int64_t b = 0; b < p->B; ++b)
        for (int64_t h = 0; h < p->Hq; ++h)
            for (int64_t i = 0; i < p->Nq; ++i) {
                bool any = false;
                for (int64_t j = 0; j < p->Nk && !any; ++j) any = rv_visible(p, b, h, i, j);
                n += !any;
            }
    return n;
}

/* ---- float64 instantiation */
#define R double
#define RX(x) ((double)(x))
#define REXP exp
#define RLOG log
#define RTANH tanh
#define RFMA(a, b, c) ((a) * (b) + (c))
#define SUFFIX(name) name##64
#include "ref64_variants_impl.h"
#undef R
#undef RX
#undef REXP
#undef RLOG
#undef RTANH
#undef RFMA
#undef SUFFIX

/* ---- float32 instantiations: products and sums rounded separately, and
 * every multiply-add fused (what FMA GEMMs such as torch's CPU matmul do) */
static float mul_add_f(float a, float b, float c)
{
    volatile float p = a * b; /* no contraction into an FMA */
    return p + c;
}
#define R float
#define RX(x) ((float)(x))
#define REXP expf
#define RLOG logf
#define RTANH tanhf
#define RFMA(a, b, c) mul_add_f((a), (b), (c))
#define SUFFIX(name) name##32
#include "ref64_variants_impl.h"
#undef RFMA
#undef SUFFIX
#define SUFFIX(name) name##32fma
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && !defined(__clang__)
/* Hardware FMA inline where the CPU has it (fmaf through libm is a call per
 * multiply-add, several times slower); the same rounding either way. */
static void rv_forward32fma_hw(const rv_problem *, const double *, const double *, const double *,
                               double *, double *, double *, double *);
static void rv_backward32fma_hw(const rv_problem *, const double *, const double *,
                                const double *, const double *, double *, double *, double *,
                                double *);
static void rv_forward32fma_sw(const rv_problem *, const double *, const double *, const double *,
                               double *, double *, double *, double *);
static void rv_backward32fma_sw(const rv_problem *, const double *, const double *,
                                const double *, const double *, double *, double *, double *,
                                double *);
#pragma GCC push_options
#pragma GCC target("fma")
#define RFMA(a, b, c) __builtin_fmaf((a), (b), (c))
#define rv_forward32fma rv_forward32fma_hw
#define rv_backward32fma rv_backward32fma_hw
#include "ref64_variants_impl.h"
#undef rv_forward32fma
#undef rv_backward32fma
#pragma GCC pop_options
#undef RFMA
#undef SUFFIX
#define SUFFIX(name) name##32fmasw
#define RFMA(a, b, c) fmaf((a), (b), (c))
#define rv_forward32fmasw rv_forward32fma_sw
#define rv_backward32fmasw rv_backward32fma_sw
#include "ref64_variants_impl.h"
#undef rv_forward32fmasw
#undef rv_backward32fmasw
#define RV_FMA_DISPATCH 1
#else
#define RFMA(a, b, c) fmaf((a), (b), (c))
#include "ref64_variants_impl.h"
#endif
#undef R
#undef RX
#undef REXP
#undef RLOG
#undef RTANH
#undef RFMA
#undef SUFFIX

#ifdef RV_FMA_DISPATCH
void rv_forward32fma(const rv_problem *p, const double *q, const double *k, const double *v,
                     double *out, double *lse, double *weights, double *stats)
{
    if (__builtin_cpu_supports("fma"))
        rv_forward32fma_hw(p, q, k, v, out, lse, weights, stats);
    else
        rv_forward32fma_sw(p, q, k, v, out, lse, weights, stats);
}

void rv_backward32fma(const rv_problem *p, const double *q, const double *k, const double *v,
                      const double *dout, double *dq, double *dk, double *dv, double *dsinks)
{
    if (__builtin_cpu_supports("fma"))
        rv_backward32fma_hw(p, q, k, v, dout, dq, dk, dv, dsinks);
    else
        rv_backward32fma_sw(p, q, k, v, dout, dq, dk, dv, dsinks);
}
#endif

double rv_loss64(const rv_problem *p, const double *q, const double *k, const double *v,
                 const double *dout)
{
    const int64_t n = p->B * p->Hq * p->Nq * p->Dv;
    double *out = tu_xcalloc(n, sizeof *out), loss = 0.0;
    rv_forward64(p, q, k, v, out, NULL, NULL, NULL);
    for (int64_t e = 0; e < n; ++e) loss += out[e] * dout[e];
    free(out);
    return loss;
}

static double max_finite_abs(const double *x, int64_t n)
{
    double m = 0.0;
    for (int64_t e = 0; e < n; ++e)
        if (isfinite(x[e]) && fabs(x[e]) > m) m = fabs(x[e]);
    return m;
}

void rv_natural(const rv_problem *p, const double *q, const double *k, const double *v,
                const double *dout, double *nat_out, double *nat_lse, double *nat_w,
                double *nat_dq, double *nat_dk, double *nat_dv, double *nat_dsinks)
{
    const int64_t group = p->Hq / p->Hkv;
    const int64_t nq = p->B * p->Hq * p->Nq * p->D, nk = p->B * p->Hkv * p->Nk * p->D,
                  nv = p->B * p->Hkv * p->Nk * p->Dv;
    const double maxQ = max_finite_abs(q, nq), maxK = max_finite_abs(k, nk),
                 maxV = max_finite_abs(v, nv);
    const double inv_keep = p->keep ? 1.0 / (1.0 - p->dropout_p) : 1.0;
    const double scale = fabs(p->scale);
    double *x0 = tu_xcalloc(p->Nk, sizeof *x0), *P = tu_xcalloc(p->Nk, sizeof *P);
    uint8_t *vis = tu_xcalloc(p->Nk, 1);
    if (nat_dk) memset(nat_dk, 0, (size_t)nk * sizeof *nat_dk);
    if (nat_dv) memset(nat_dv, 0, (size_t)nv * sizeof *nat_dv);
    if (nat_dsinks) memset(nat_dsinks, 0, (size_t)p->Hq * sizeof *nat_dsinks);
    for (int64_t b = 0; b < p->B; ++b)
        for (int64_t h = 0; h < p->Hq; ++h) {
            const int64_t hk = h / group;
            const double *kh = k + (b * p->Hkv + hk) * p->Nk * p->D;
            for (int64_t i = 0; i < p->Nq; ++i) {
                if (p->rows && !p->rows[i]) continue;
                const int64_t row = (b * p->Hq + h) * p->Nq + i;
                double m, Z, ps;
                row_probs64(p, q + row * p->D, kh, b, h, i, x0, P, vis, &m, &Z, &ps);
                const double *doi = dout ? dout + row * p->Dv : NULL;
                double do1 = 0.0;
                if (doi)
                    for (int64_t e = 0; e < p->Dv; ++e) do1 += fabs(doi[e]);
                if (nat_out)
                    for (int64_t e = 0; e < p->Dv; ++e) nat_out[row * p->Dv + e] = maxV;
                /* the size a logit of this row is built from: a float dot
                 * product's error is a multiple of eps·scale·Σ_d|q_d k_d| */
                double smag = 0.0;
                if (nat_lse || nat_w)
                    for (int64_t j = 0; j < p->Nk; ++j) {
                        if (!vis[j]) continue;
                        double a = 0.0;
                        for (int64_t d = 0; d < p->D; ++d)
                            a += fabs(q[row * p->D + d] * kh[j * p->D + d]);
                        smag = fmax(smag, scale * a);
                    }
                if (nat_lse) nat_lse[row] = 1.0 + (isfinite(m) ? fabs(m) : 0.0) + smag;
                if (nat_w) {
                    double pm = 0.0;
                    for (int64_t j = 0; j < p->Nk; ++j) pm = P[j] > pm ? P[j] : pm;
                    for (int64_t j = 0; j < p->Nk; ++j) nat_w[row * p->Nk + j] = pm * (1.0 + smag);
                }
                if (!doi) continue;
                if (nat_dq)
                    for (int64_t d = 0; d < p->D; ++d)
                        nat_dq[row * p->D + d] = scale * do1 * maxV * maxK * inv_keep;
                if (nat_dsinks) nat_dsinks[h] += ps * do1 * maxV;
                for (int64_t j = 0; j < p->Nk; ++j) {
                    if (!vis[j] || P[j] == 0.0) continue;
                    if (nat_dk)
                        for (int64_t d = 0; d < p->D; ++d)
                            nat_dk[((b * p->Hkv + hk) * p->Nk + j) * p->D + d] +=
                                scale * maxV * maxQ * P[j] * do1 * inv_keep;
                    if (nat_dv) {
                        const double kf = keep_factor64(p, b, h, i, j);
                        for (int64_t e = 0; e < p->Dv; ++e)
                            nat_dv[((b * p->Hkv + hk) * p->Nk + j) * p->Dv + e] +=
                                P[j] * kf * fabs(doi[e]);
                    }
                }
            }
        }
    free(x0), free(P), free(vis);
}

double rv_lse_rel_bound(double lse)
{
    if (lse == -INFINITY) return 0.0;
    if (!isfinite(lse)) return INFINITY;
    const float f = (float)lse;
    const double ulp = (double)nextafterf(fabsf(f), INFINITY) - (double)fabsf(f);
    return expm1(ulp / 2.0);
}

bool rv_criterion(const double *got, const double *ref, const double *fp32, const double *fp32b,
                  const double *nat, const double *extra, const uint8_t *skip, int64_t n, rv_cmp *c)
{
    memset(c, 0, sizeof *c);
    c->worst = -1;
    c->n = n;
    for (int64_t e = 0; e < n; ++e) {
        if (skip && skip[e]) continue;
        if (isfinite(ref[e]) && isfinite(fp32[e])) {
            const double d = fabs(fp32[e] - ref[e]);
            if (d > c->M) c->M = d;
        }
        if (fp32b && isfinite(ref[e]) && isfinite(fp32b[e])) {
            const double d = fabs(fp32b[e] - ref[e]);
            if (d > c->M) c->M = d;
        }
    }
    for (int64_t e = 0; e < n; ++e) {
        if (skip && skip[e]) continue;
        double ratio, tol = 3.0 * c->M + 1e-6 * nat[e] + (extra ? extra[e] : 0.0);
        if (isnan(ref[e]) || isinf(ref[e])) {
            ratio = got[e] == ref[e] ? 0.0 : INFINITY;
            if (got[e] != ref[e]) c->nonfinite++;
        } else if (!isfinite(got[e])) {
            ratio = INFINITY;
            c->nonfinite++;
        } else {
            const double err = fabs(got[e] - ref[e]);
            if (err > c->max_err) c->max_err = err;
            ratio = tol > 0 ? err / tol : (err > 0 ? INFINITY : 0.0);
        }
        if (ratio > 1.0) c->bad++;
        if (c->worst < 0 || ratio > c->worst_ratio) {
            c->worst_ratio = ratio;
            c->worst = e;
            c->worst_got = got[e];
            c->worst_ref = ref[e];
            c->worst_tol = tol;
            c->worst_fp32 = fp32[e];
        }
    }
    c->ok = c->bad == 0;
    return c->ok;
}

void rv_cmp_describe(const rv_cmp *c, const char *name, char *buf, size_t size)
{
    snprintf(buf, size,
             "%s: %" PRId64 "/%" PRId64 " outside (%" PRId64 " non-finite); worst [%" PRId64
             "] got %.9g ref %.9g fp32 %.9g |err| %.3g tol %.3g (ratio %.3g, 3M=%.3g)",
             name, c->bad, c->n, c->nonfinite, c->worst, c->worst_got, c->worst_ref,
             c->worst_fp32, fabs(c->worst_got - c->worst_ref), c->worst_tol, c->worst_ratio,
             3.0 * c->M);
}

void rv_alibi_slopes64(int64_t heads, double *out)
{
    int64_t n = 1;
    while (n * 2 <= heads) n *= 2;
    for (int64_t h = 0; h < heads; ++h) {
        if (h < n)
            out[h] = pow(2.0, -8.0 * (double)(h + 1) / (double)n);
        else
            out[h] = pow(2.0, -8.0 * (double)(2 * (h - n) + 1) / (double)(2 * n));
    }
}
