/* The plain bfloat16 MHA baseline (mha_bf16_ref.h). */
#include "mha_bf16_ref.h"

#include "bf16_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float b16(double x)
{
    return (float)bf16_round((float)x);
}

static double *dalloc(int64_t n)
{
    double *p = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    if (!p) abort();
    return p;
}

/* y[r][o] = bf16(Σ_c x[r][c]·W[o][c] + b[o]) for r < R, rows of y ys apart. */
static void linear_fwd(const double *x, int64_t R, int64_t C, const double *W, const double *b,
                       int64_t O, double *y, int64_t ys)
{
    for (int64_t r = 0; r < R; ++r)
        for (int64_t o = 0; o < O; ++o) {
            float s = 0.0f;
            for (int64_t c = 0; c < C; ++c) s = fmaf(b16(x[r * C + c]), b16(W[o * C + c]), s);
            y[r * ys + o] = b16(b ? s + b16(b[o]) : s);
        }
}

/* dW = bf16(Σ_r dy_rᵀ x_r) (O,C) and db = bf16(Σ_r dy_r), dy rows dys apart. */
static void linear_params(const double *x, int64_t R, int64_t C, const double *dy, int64_t dys,
                          int64_t O, double *dW, double *db)
{
    for (int64_t o = 0; o < O; ++o) {
        if (db) {
            float s = 0.0f;
            for (int64_t r = 0; r < R; ++r) s += b16(dy[r * dys + o]);
            db[o] = b16(s);
        }
        if (dW)
            for (int64_t c = 0; c < C; ++c) {
                float s = 0.0f;
                for (int64_t r = 0; r < R; ++r) s = fmaf(b16(dy[r * dys + o]), b16(x[r * C + c]), s);
                dW[o * C + c] = b16(s);
            }
    }
}

/* Up to three (dy, W) terms of dx = bf16(Σ_t dy_t·W_t), one float32 sum
 * per element; dy rows dys apart, W (O,C). */
typedef struct {
    const double *dy, *W;
} grad_term;

static void linear_input(const grad_term *t, int nt, int64_t R, int64_t C, int64_t dys,
                         int64_t O, double *dx)
{
    for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < C; ++c) {
            float s = 0.0f;
            for (int i = 0; i < nt; ++i)
                for (int64_t o = 0; o < O; ++o)
                    s = fmaf(b16(t[i].dy[r * dys + o]), b16(t[i].W[o * C + c]), s);
            dx[r * C + c] = b16(s);
        }
}

/* The forward's tensors. */
typedef struct {
    int64_t B, L, S, Sp, E, H, hd, kdim, vdim;
    const double *key, *value;
    double *q, *k, *v;          /* (B,L,E), (B,S',E), (B,S',E) */
    double *qh, *kh, *vh, *ah;  /* per head: (B,H,N,hd) */
    double *a;                  /* (B,L,E) */
    double *bias;               /* (B,H,L,S') masks, or NULL */
    rv_problem rp;
} fwd;

static double mask_sum(const mha64_config *c, const mha64_inputs *in, int64_t b, int64_t h,
                       int64_t i, int64_t j)
{
    if (j >= in->S) return 0.0; /* appended keys are never masked */
    double m = 0.0;
    if (in->kpm_kind != MHA64_MASK_NONE) {
        const double x = in->kpm[b * in->S + j];
        m += in->kpm_kind == MHA64_MASK_BOOL ? (x != 0.0 ? -INFINITY : 0.0) : x;
    }
    if (in->am_kind != MHA64_MASK_NONE) {
        const double x =
            in->am[in->am_per_head ? ((b * c->H + h) * in->L + i) * in->S + j : i * in->S + j];
        m += in->am_kind == MHA64_MASK_BOOL ? (x != 0.0 ? -INFINITY : 0.0) : x;
    }
    if (in->causal && j > i) m = -INFINITY;
    return m;
}

/* (B,N,E) <-> (B,H,N,hd). */
static void split_heads(const fwd *f, double *x, int64_t N, double *xh, bool back)
{
    for (int64_t b = 0; b < f->B; ++b)
        for (int64_t h = 0; h < f->H; ++h)
            for (int64_t n = 0; n < N; ++n)
                for (int64_t d = 0; d < f->hd; ++d) {
                    const int64_t flat = (b * N + n) * f->E + h * f->hd + d;
                    const int64_t head = ((b * f->H + h) * N + n) * f->hd + d;
                    if (back) x[flat] = xh[head];
                    else xh[head] = x[flat];
                }
}

static void forward(const mha64_config *c, const mha64_params *p, const mha64_inputs *in, fwd *f)
{
    memset(f, 0, sizeof *f);
    const int64_t B = in->B, L = in->L, S = in->S, E = c->E, H = c->H;
    const int64_t Sp = mha64_src_len(c, S);
    f->B = B, f->L = L, f->S = S, f->Sp = Sp, f->E = E, f->H = H, f->hd = E / H;
    f->key = in->key ? in->key : in->query, f->value = in->key ? in->value : in->query;
    f->kdim = in->key ? c->kdim : E, f->vdim = in->key ? c->vdim : E;
    f->q = dalloc(B * L * E), f->k = dalloc(B * Sp * E), f->v = dalloc(B * Sp * E);
    f->qh = dalloc(B * L * E), f->kh = dalloc(B * Sp * E), f->vh = dalloc(B * Sp * E);
    f->ah = dalloc(B * L * E), f->a = dalloc(B * L * E);

    linear_fwd(in->query, B * L, E, p->wq, p->bq, E, f->q, E);
    for (int64_t b = 0; b < B; ++b) {
        linear_fwd(f->key + b * S * f->kdim, S, f->kdim, p->wk, p->bk, E, f->k + b * Sp * E, E);
        linear_fwd(f->value + b * S * f->vdim, S, f->vdim, p->wv, p->bv, E, f->v + b * Sp * E, E);
        if (c->add_bias_kv)
            for (int64_t e = 0; e < E; ++e) {
                f->k[(b * Sp + S) * E + e] = b16(p->bias_k[e]);
                f->v[(b * Sp + S) * E + e] = b16(p->bias_v[e]);
            }
    }
    split_heads(f, f->q, L, f->qh, false);
    split_heads(f, f->k, Sp, f->kh, false);
    split_heads(f, f->v, Sp, f->vh, false);

    const bool masked = in->kpm_kind != MHA64_MASK_NONE || in->am_kind != MHA64_MASK_NONE ||
                        in->causal;
    if (masked) {
        f->bias = dalloc(B * H * L * Sp);
        for (int64_t b = 0; b < B; ++b)
            for (int64_t h = 0; h < H; ++h)
                for (int64_t i = 0; i < L; ++i)
                    for (int64_t j = 0; j < Sp; ++j)
                        f->bias[((b * H + h) * L + i) * Sp + j] = mask_sum(c, in, b, h, i, j);
    }
    f->rp = (rv_problem){.B = B, .Hq = H, .Hkv = H, .Nq = L, .Nk = Sp, .D = f->hd, .Dv = f->hd,
                         .scale = 1.0 / sqrt((double)f->hd), .bias = f->bias};
    bf16_forward(&f->rp, f->qh, f->kh, f->vh, f->ah, NULL);
    split_heads(f, f->a, L, f->ah, true);
}

static void fwd_free(fwd *f)
{
    free(f->q), free(f->k), free(f->v), free(f->qh), free(f->kh), free(f->vh), free(f->ah);
    free(f->a), free(f->bias);
}

void mhabf_forward(const mha64_config *c, const mha64_params *p, const mha64_inputs *in,
                   double *out)
{
    fwd f;
    forward(c, p, in, &f);
    linear_fwd(f.a, f.B * f.L, f.E, p->wo, p->bo, f.E, out, f.E);
    fwd_free(&f);
}

void mhabf_backward(const mha64_config *c, const mha64_params *p, const mha64_inputs *in,
                    const double *dout, mha64_params *g, double *dquery, double *dkey,
                    double *dvalue)
{
    fwd f;
    forward(c, p, in, &f);
    const int64_t B = f.B, L = f.L, S = f.S, Sp = f.Sp, E = f.E;
    const bool self = !in->key;

    /* out = a·Woᵀ + bo */
    double *da = dalloc(B * L * E), *dah = dalloc(B * L * E);
    linear_params(f.a, B * L, E, dout, E, E, g->wo, g->bo);
    linear_input(&(grad_term){dout, p->wo}, 1, B * L, E, E, E, da);

    /* a = attention(q, k, v) per head */
    double *dqh = dalloc(B * L * E), *dkh = dalloc(B * Sp * E), *dvh = dalloc(B * Sp * E);
    double *dq = dalloc(B * L * E), *dk = dalloc(B * Sp * E), *dv = dalloc(B * Sp * E);
    split_heads(&f, da, L, dah, false);
    bf16_backward(&f.rp, f.qh, f.kh, f.vh, dah, dqh, dkh, dvh);
    split_heads(&f, dq, L, dqh, true);
    split_heads(&f, dk, Sp, dkh, true);
    split_heads(&f, dv, Sp, dvh, true);

    if (c->add_bias_kv)
        for (int64_t e = 0; e < E; ++e) {
            float sk = 0.0f, sv = 0.0f;
            for (int64_t b = 0; b < B; ++b)
                sk += (float)dk[(b * Sp + S) * E + e], sv += (float)dv[(b * Sp + S) * E + e];
            g->bias_k[e] = b16(sk), g->bias_v[e] = b16(sv);
        }

    /* projections: the batch's first S rows of dk, dv, gathered contiguous */
    double *dks = dalloc(B * S * E), *dvs = dalloc(B * S * E);
    for (int64_t b = 0; b < B; ++b) {
        memcpy(dks + b * S * E, dk + b * Sp * E, (size_t)(S * E) * sizeof(double));
        memcpy(dvs + b * S * E, dv + b * Sp * E, (size_t)(S * E) * sizeof(double));
    }
    linear_params(in->query, B * L, E, dq, E, E, g->wq, g->bq);
    linear_params(f.key, B * S, f.kdim, dks, E, E, g->wk, g->bk);
    linear_params(f.value, B * S, f.vdim, dvs, E, E, g->wv, g->bv);
    if (self) {
        const grad_term t[3] = {{dq, p->wq}, {dks, p->wk}, {dvs, p->wv}};
        if (dquery) linear_input(t, 3, B * L, E, E, E, dquery);
    } else {
        if (dquery) linear_input(&(grad_term){dq, p->wq}, 1, B * L, E, E, E, dquery);
        if (dkey) linear_input(&(grad_term){dks, p->wk}, 1, B * S, f.kdim, E, E, dkey);
        if (dvalue) linear_input(&(grad_term){dvs, p->wv}, 1, B * S, f.vdim, E, E, dvalue);
    }
    free(da), free(dah), free(dqh), free(dkh), free(dvh), free(dq), free(dk), free(dv);
    free(dks), free(dvs);
    fwd_free(&f);
}
