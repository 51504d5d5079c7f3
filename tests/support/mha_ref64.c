/* Float64 multi-head attention oracle; see mha_ref64.h for the math. Plain
 * loops, every intermediate materialised, nothing shared with the library. */
#include "mha_ref64.h"

#include "attn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int64_t mha64_src_len(const mha64_config *c, int64_t S)
{
    return S + (c->add_bias_kv ? 1 : 0) + (c->add_zero_attn ? 1 : 0);
}

/* Forward intermediates. */
typedef struct {
    int64_t B, L, S, Sp, E, H, hd;
    double *q, *k, *v; /* (B,L,E), (B,S',E), (B,S',E) */
    double *P;         /* (B,H,L,S') */
    double *a;         /* (B,L,E) */
} fwd;

/* y[r][o] = b[o] + Σ_c W[o][c] x[r][c] for rows r < R of x (R, C). */
static void linear(const double *x, int64_t R, int64_t C, const double *W, const double *b,
                   int64_t O, double *y, int64_t y_row_stride)
{
    for (int64_t r = 0; r < R; ++r)
        for (int64_t o = 0; o < O; ++o) {
            double s = b ? b[o] : 0.0;
            for (int64_t c = 0; c < C; ++c) s += W[o * C + c] * x[r * C + c];
            y[r * y_row_stride + o] = s;
        }
}

static double mask_value(const mha64_config *c, const mha64_inputs *in, int64_t b, int64_t h,
                         int64_t i, int64_t j)
{
    if (j >= in->S) return 0.0; /* appended keys are never masked */
    double m = 0.0;
    if (in->kpm_kind != MHA64_MASK_NONE) {
        double x = in->kpm[b * in->S + j];
        m += in->kpm_kind == MHA64_MASK_BOOL ? (x != 0.0 ? -INFINITY : 0.0) : x;
    }
    if (in->am_kind != MHA64_MASK_NONE) {
        int64_t idx = in->am_per_head ? ((b * c->H + h) * in->L + i) * in->S + j : i * in->S + j;
        double x = in->am[idx];
        m += in->am_kind == MHA64_MASK_BOOL ? (x != 0.0 ? -INFINITY : 0.0) : x;
    }
    if (in->causal && j > i) m += -INFINITY;
    return m;
}

static void forward(const mha64_config *c, const mha64_params *p, const mha64_inputs *in, fwd *f)
{
    const int64_t B = in->B, L = in->L, S = in->S, E = c->E, H = c->H;
    const int64_t Sp = mha64_src_len(c, S), hd = E / H;
    const double *key = in->key ? in->key : in->query, *value = in->key ? in->value : in->query;
    const int64_t kdim = in->key ? c->kdim : E, vdim = in->key ? c->vdim : E;
    f->B = B, f->L = L, f->S = S, f->Sp = Sp, f->E = E, f->H = H, f->hd = hd;
    f->q = calloc((size_t)(B * L * E) + 1, sizeof(double));
    f->k = calloc((size_t)(B * Sp * E) + 1, sizeof(double));
    f->v = calloc((size_t)(B * Sp * E) + 1, sizeof(double));
    f->P = calloc((size_t)(B * H * L * Sp) + 1, sizeof(double));
    f->a = calloc((size_t)(B * L * E) + 1, sizeof(double));

    linear(in->query, B * L, E, p->wq, p->bq, E, f->q, E);
    for (int64_t b = 0; b < B; ++b) {
        linear(key + b * S * kdim, S, kdim, p->wk, p->bk, E, f->k + b * Sp * E, E);
        linear(value + b * S * vdim, S, vdim, p->wv, p->bv, E, f->v + b * Sp * E, E);
        if (c->add_bias_kv)
            for (int64_t e = 0; e < E; ++e) {
                f->k[(b * Sp + S) * E + e] = p->bias_k[e];
                f->v[(b * Sp + S) * E + e] = p->bias_v[e];
            }
        /* the add_zero_attn row stays 0 (calloc) */
    }

    const double scale = 1.0 / sqrt((double)hd);
    double *s = malloc((size_t)(Sp + 1) * sizeof(double));
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < L; ++i) {
                double mx = -INFINITY;
                for (int64_t j = 0; j < Sp; ++j) {
                    double dot = 0.0;
                    for (int64_t d = 0; d < hd; ++d)
                        dot += f->q[(b * L + i) * E + h * hd + d] * f->k[(b * Sp + j) * E + h * hd + d];
                    s[j] = dot * scale + mask_value(c, in, b, h, i, j);
                    if (s[j] > mx) mx = s[j];
                }
                double *P = f->P + ((b * H + h) * L + i) * Sp;
                if (mx == -INFINITY) continue; /* nothing visible: P = 0, a = 0 */
                double sum = 0.0;
                for (int64_t j = 0; j < Sp; ++j) sum += (P[j] = exp(s[j] - mx));
                for (int64_t j = 0; j < Sp; ++j) P[j] /= sum;
                for (int64_t d = 0; d < hd; ++d) {
                    double acc = 0.0;
                    for (int64_t j = 0; j < Sp; ++j) acc += P[j] * f->v[(b * Sp + j) * E + h * hd + d];
                    f->a[(b * L + i) * E + h * hd + d] = acc;
                }
            }
    free(s);
}

static void fwd_free(fwd *f)
{
    free(f->q);
    free(f->k);
    free(f->v);
    free(f->P);
    free(f->a);
}

void mha64_forward(const mha64_config *c, const mha64_params *p, const mha64_inputs *in,
                   double *out, double *weights)
{
    fwd f;
    forward(c, p, in, &f);
    linear(f.a, f.B * f.L, f.E, p->wo, p->bo, f.E, out, f.E);
    if (weights) memcpy(weights, f.P, (size_t)(f.B * f.H * f.L * f.Sp) * sizeof(double));
    fwd_free(&f);
}

double mha64_loss(const mha64_config *c, const mha64_params *p, const mha64_inputs *in,
                  const double *dout)
{
    const int64_t n = in->B * in->L * c->E;
    double *out = malloc((size_t)(n + 1) * sizeof(double)), loss = 0.0;
    mha64_forward(c, p, in, out, NULL);
    for (int64_t i = 0; i < n; ++i) loss += out[i] * dout[i];
    free(out);
    return loss;
}

/* For y = x·Wᵀ + b over R rows: dW = Σ_r dy_rᵀ x_r (O,C), db = Σ_r dy_r,
 * and dx = dy·W (added into dx when dx is non-NULL). */
static void linear_backward(const double *x, int64_t R, int64_t C, const double *W,
                            const double *dy, int64_t dy_row_stride, int64_t O, double *dW,
                            double *db, double *dx)
{
    for (int64_t r = 0; r < R; ++r)
        for (int64_t o = 0; o < O; ++o) {
            const double g = dy[r * dy_row_stride + o];
            if (db) db[o] += g;
            for (int64_t cc = 0; cc < C; ++cc) {
                if (dW) dW[o * C + cc] += g * x[r * C + cc];
                if (dx) dx[r * C + cc] += g * W[o * C + cc];
            }
        }
}

static void zero(double *x, int64_t n)
{
    if (x) memset(x, 0, (size_t)n * sizeof(double));
}

void mha64_backward(const mha64_config *c, const mha64_params *p, const mha64_inputs *in,
                    const double *dout, mha64_params *g, double *dquery, double *dkey,
                    double *dvalue)
{
    fwd f;
    forward(c, p, in, &f);
    const int64_t B = f.B, L = f.L, S = f.S, Sp = f.Sp, E = f.E, H = f.H, hd = f.hd;
    const bool self = !in->key;
    const double *key = self ? in->query : in->key, *value = self ? in->query : in->value;
    const int64_t kdim = self ? E : c->kdim, vdim = self ? E : c->vdim;

    zero(g->wq, E * E), zero(g->wk, E * kdim), zero(g->wv, E * vdim), zero(g->wo, E * E);
    zero(g->bq, E), zero(g->bk, E), zero(g->bv, E), zero(g->bo, E);
    zero(g->bias_k, E), zero(g->bias_v, E);
    zero(dquery, B * L * E);
    if (!self) zero(dkey, B * S * kdim), zero(dvalue, B * S * vdim);

    /* out = a·Woᵀ + bo */
    double *da = calloc((size_t)(B * L * E) + 1, sizeof(double));
    linear_backward(f.a, B * L, E, p->wo, dout, E, E, g->wo, g->bo, da);

    /* a_i = Σ_j P_ij v_j ; P = softmax(s) ; s_ij = q_i·k_j·scale + mask */
    double *dq = calloc((size_t)(B * L * E) + 1, sizeof(double));
    double *dk = calloc((size_t)(B * Sp * E) + 1, sizeof(double));
    double *dv = calloc((size_t)(B * Sp * E) + 1, sizeof(double));
    double *dP = malloc((size_t)(Sp + 1) * sizeof(double));
    const double scale = 1.0 / sqrt((double)hd);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < L; ++i) {
                const double *P = f.P + ((b * H + h) * L + i) * Sp;
                const double *dai = da + (b * L + i) * E + h * hd;
                double dot = 0.0;
                for (int64_t j = 0; j < Sp; ++j) {
                    dP[j] = 0.0;
                    for (int64_t d = 0; d < hd; ++d) {
                        dP[j] += dai[d] * f.v[(b * Sp + j) * E + h * hd + d];
                        dv[(b * Sp + j) * E + h * hd + d] += P[j] * dai[d];
                    }
                    dot += P[j] * dP[j];
                }
                for (int64_t j = 0; j < Sp; ++j) {
                    const double ds = P[j] * (dP[j] - dot) * scale;
                    for (int64_t d = 0; d < hd; ++d) {
                        dq[(b * L + i) * E + h * hd + d] += ds * f.k[(b * Sp + j) * E + h * hd + d];
                        dk[(b * Sp + j) * E + h * hd + d] += ds * f.q[(b * L + i) * E + h * hd + d];
                    }
                }
            }

    /* appended rows: bias_k / bias_v row S; the zero row has no parameters */
    if (c->add_bias_kv)
        for (int64_t b = 0; b < B; ++b)
            for (int64_t e = 0; e < E; ++e) {
                g->bias_k[e] += dk[(b * Sp + S) * E + e];
                g->bias_v[e] += dv[(b * Sp + S) * E + e];
            }

    /* projections */
    double *dx_k = self ? dquery : dkey, *dx_v = self ? dquery : dvalue;
    linear_backward(in->query, B * L, E, p->wq, dq, E, E, g->wq, g->bq, dquery);
    for (int64_t b = 0; b < B; ++b) {
        linear_backward(key + b * S * kdim, S, kdim, p->wk, dk + b * Sp * E, E, E, g->wk, g->bk,
                        dx_k ? dx_k + b * S * kdim : NULL);
        linear_backward(value + b * S * vdim, S, vdim, p->wv, dv + b * Sp * E, E, E, g->wv, g->bv,
                        dx_v ? dx_v + b * S * vdim : NULL);
    }
    free(da), free(dq), free(dk), free(dv), free(dP);
    fwd_free(&f);
}

void mha64_map_params(attn_mha *m, double *flat, mha64_params *p)
{
    memset(p, 0, sizeof *p);
    float *base = attn_mha_params_flat(m, NULL);
    const int64_t E = attn_mha_get_config(m)->embed_dim;
    for (int i = 0; i < attn_mha_num_params(m); ++i) {
        const char *name;
        attn_tensor v;
        attn_mha_param_at(m, i, &name, &v, NULL);
        double *x = flat + ((float *)v.data - base);
        if (!strcmp(name, "in_proj_weight")) p->wq = x, p->wk = x + E * E, p->wv = x + 2 * E * E;
        else if (!strcmp(name, "q_proj_weight")) p->wq = x;
        else if (!strcmp(name, "k_proj_weight")) p->wk = x;
        else if (!strcmp(name, "v_proj_weight")) p->wv = x;
        else if (!strcmp(name, "in_proj_bias")) p->bq = x, p->bk = x + E, p->bv = x + 2 * E;
        else if (!strcmp(name, "bias_k")) p->bias_k = x;
        else if (!strcmp(name, "bias_v")) p->bias_v = x;
        else if (!strcmp(name, "out_proj.weight")) p->wo = x;
        else if (!strcmp(name, "out_proj.bias")) p->bo = x;
    }
}
