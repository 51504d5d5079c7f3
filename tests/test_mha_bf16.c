/*
 * test_mha_bf16 — MHA under ATTN_PRECISION_BF16 (attn_mha_opts.precision)
 * on every bf16 engine this machine runs (support/bf16_engines.h).
 *
 *   linear       the bf16 linear layers behind the projections
 *                (core/linear_bf16.h): y = x·Wᵀ + b into column
 *                groups, dx = dy·W (set and accumulated), dW += dyᵀ·x, over
 *                row, column and k tails (several k blocks), within the
 *                float32 accumulation bound of the float64 product of the
 *                same bfloat16 operands; bitwise the same for 1 and 3
 *                threads.
 *   contract     README "bfloat16 products": against the float64 oracle
 *                (support/mha_ref64.h) on the same bfloat16 inputs and
 *                parameters, attn's max error <= 2 × the plain bfloat16
 *                MHA's (support/mha_bf16_ref.h) + slack, for out, every
 *                input gradient and every parameter gradient (weights,
 *                biases, bias_k/bias_v): self-attention with the packed
 *                in_proj, causal; cross-attention with kdim != vdim (odd),
 *                add_bias_kv, add_zero_attn and a key padding mask; long
 *                rows with large logits.
 *   composition  bitwise the same for 1, 2 and 3 threads and with a caller
 *                workspace (the pair operands in it); the mode ran
 *                (bits differ from the exact call's), or with f32 is the
 *                exact call; the reference path ignores it; an unknown
 *                precision is refused.
 * It prints which engines ran and which could not ("AMX: not on this CPU").
 */
#include "attn.h"
#include "bf16_engines.h"
#include "bf16_judge.h"
#include "bf16_ref.h"
#include "mha_bf16_ref.h"
#include "mha_ref64.h"
#include "testutil.h"

#include "../src/core/linear_bf16.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bf16_engine_entry g_eng[BF16_MAX_ENGINES];
static int g_neng;
static uint64_t g_seed;

static double bf(double x)
{
    return bf16_round(x);
}

/* ------------------------------------------------------------- linear */

/* Random bfloat16 values as floats. */
static float *bf_floats(int64_t n, tu_rng *r)
{
    float *x = tu_xcalloc(n, sizeof(float));
    for (int64_t e = 0; e < n; ++e) x[e] = (float)bf(tu_rng_normal(r));
    return x;
}

/* |got - Σ terms| <= (2·kp + 3)·2^-24·(|init| + Σ|terms|): float32
 * accumulation of the pairs, a store. */
static bool within(double got, double exact, double mag, int64_t k)
{
    return fabs(got - exact) <= (double)(k + 4) * 0x1p-24 * mag;
}

static void group_linear(tu_suite *suite)
{
    tu_group g;
    tu_group_begin(&g, suite, "linear");
    tu_rng rng;
    tu_rng_seed(&rng, tu_mix(g_seed ^ 0x11ull));
    /* two batches of M rows, one flat call of B·M rows; K odd: a lone last
     * pair; more than one k block of 256 pairs; N past a 128-column tile */
    const int64_t B = 2, M = 101, K = 601, N = 205, G = 48;
    float *x = bf_floats(B * M * K, &rng), *W = bf_floats(N * K, &rng), *bias = bf_floats(N, &rng);
    float *dy = bf_floats(B * M * N, &rng), *dx0 = bf_floats(B * M * K, &rng);
    float *dW0 = bf_floats(N * K, &rng);
    const int64_t groups = (N + G - 1) / G, gstride = B * M * G + 5;
    float *y[2], *dx[2], *dxa[2], *dW[2];
    for (int t = 0; t < 2; ++t) {
        y[t] = tu_xcalloc(groups * gstride, sizeof(float));
        dx[t] = tu_xcalloc(B * M * K, sizeof(float));
        dxa[t] = tu_xcalloc(B * M * K, sizeof(float));
        dW[t] = tu_xcalloc(N * K, sizeof(float));
    }
    for (int e = 0; e < g_neng; ++e) {
        if (!g_eng[e].eng) continue;
        for (int t = 0; t < 2; ++t) {
            const linear_engine le = {t ? 3 : 1, false};
            const linear_bf16 eng = {g_eng[e].eng, NULL, 0}; /* operands allocated */
            const linear_rows xr = {x, M * K, K, 0, 0}, dyr = {dy, M * N, N, 0, 0};
            const linear_rows yr = {y[t], M * G, G, G, gstride};
            const linear_rows dxr = {dx[t], M * K, K, 0, 0}, dxar = {dxa[t], M * K, K, 0, 0};
            linear_forward_bf16(eng, &xr, B, M, K, W, K, bias, 1, &yr, N, le);
            linear_backward_input_bf16(eng, &dyr, B, M, N, W, K, &dxr, K, false, le);
            memcpy(dxa[t], dx0, (size_t)(B * M * K) * sizeof(float));
            linear_backward_input_bf16(eng, &dyr, B, M, N, W, K, &dxar, K, true, le);
            memcpy(dW[t], dW0, (size_t)(N * K) * sizeof(float));
            linear_backward_params_bf16(eng, &dyr, &xr, B, M, N, K, dW[t], K, NULL, 1, le);
        }
        int64_t bad_y = 0, bad_dx = 0, bad_dxa = 0, bad_dw = 0;
        for (int64_t r = 0; r < B * M; ++r)
            for (int64_t j = 0; j < N; ++j) {
                double s = bias[j], mag = fabs(bias[j]);
                for (int64_t c = 0; c < K; ++c)
                    s += (double)x[r * K + c] * W[j * K + c], mag += fabs((double)x[r * K + c] * W[j * K + c]);
                bad_y += !within(y[0][(j / G) * gstride + r * G + j % G], s, mag, K);
            }
        for (int64_t r = 0; r < B * M; ++r)
            for (int64_t c = 0; c < K; ++c) {
                double s = 0, mag = 0;
                for (int64_t j = 0; j < N; ++j)
                    s += (double)dy[r * N + j] * W[j * K + c], mag += fabs((double)dy[r * N + j] * W[j * K + c]);
                bad_dx += !within(dx[0][r * K + c], s, mag, N);
                const double init = dx0[r * K + c];
                bad_dxa += !within(dxa[0][r * K + c], s + init, mag + fabs(init), N);
            }
        for (int64_t j = 0; j < N; ++j)
            for (int64_t c = 0; c < K; ++c) {
                double s = dW0[j * K + c], mag = fabs(s);
                for (int64_t r = 0; r < B * M; ++r)
                    s += (double)dy[r * N + j] * x[r * K + c], mag += fabs((double)dy[r * N + j] * x[r * K + c]);
                bad_dw += !within(dW[0][j * K + c], s, mag, B * M);
            }
        tu_check(&g, bad_y + bad_dx + bad_dxa + bad_dw == 0,
                 "%s: wrong elements: y %lld, dx %lld, dx accumulated %lld, dW %lld", g_eng[e].name,
                 (long long)bad_y, (long long)bad_dx, (long long)bad_dxa, (long long)bad_dw);
        const bool same = memcmp(y[0], y[1], (size_t)(groups * gstride) * sizeof(float)) == 0 &&
                          memcmp(dx[0], dx[1], (size_t)(B * M * K) * sizeof(float)) == 0 &&
                          memcmp(dxa[0], dxa[1], (size_t)(B * M * K) * sizeof(float)) == 0 &&
                          memcmp(dW[0], dW[1], (size_t)(N * K) * sizeof(float)) == 0;
        tu_check(&g, same, "%s: 1 and 3 threads differ", g_eng[e].name);
        printf("linear: %s ran\n", g_eng[e].name);
    }
    for (int t = 0; t < 2; ++t) free(y[t]), free(dx[t]), free(dxa[t]), free(dW[t]);
    free(x), free(W), free(bias), free(dy), free(dx0), free(dW0);
    tu_group_end(&g);
}

/* ------------------------------------------------------------ contract */

typedef struct {
    const char *name;
    int64_t B, L, S, E, H, kdim, vdim; /* kdim 0: self-attention */
    bool bias, bias_kv, zero_attn, causal, kpm;
    double xmag; /* inputs' scale: logit size */
} mcase;

static const mcase k_cases[] = {
    {"self, packed in_proj, causal", 2, 40, 40, 64, 4, 0, 0, true, false, false, true, false, 1},
    {"cross, kdim/vdim, bias_kv, zero_attn, key padding", 2, 23, 37, 48, 3, 33, 20, true, true, true,
     false, true, 1},
    {"long rows, large logits", 1, 260, 260, 32, 2, 0, 0, true, false, false, false, false, 3},
};

/* A case's module (parameters rounded to bfloat16), inputs and the float64
 * arrays of the same values. */
typedef struct {
    const mcase *c;
    attn_mha *m;
    size_t count;
    double *p64; /* the module's flat parameters */
    mha64_config cfg;
    mha64_params p;
    mha64_inputs in;
    double *x, *k, *v, *dout, *kpm;
    float *xf, *kf, *vf, *doutf;
    uint8_t *kpm8;
    int64_t kdim, vdim;
} mdata;

static double *bf_doubles(int64_t n, double mag, tu_rng *r)
{
    double *x = tu_xcalloc(n, sizeof(double));
    for (int64_t e = 0; e < n; ++e) x[e] = bf(mag * tu_rng_normal(r));
    return x;
}

static float *floats_of(const double *x, int64_t n)
{
    float *f = tu_xcalloc(n, sizeof(float));
    for (int64_t e = 0; e < n; ++e) f[e] = (float)x[e];
    return f;
}

static void mdata_make(mdata *d, const mcase *c, uint64_t seed)
{
    memset(d, 0, sizeof *d);
    d->c = c;
    tu_rng rng;
    tu_rng_seed(&rng, seed);
    const bool self = c->kdim == 0;
    d->kdim = self ? c->E : c->kdim, d->vdim = self ? c->E : c->vdim;
    attn_mha_config cfg = {.embed_dim = c->E, .num_heads = c->H, .kdim = d->kdim,
                           .vdim = d->vdim, .bias = c->bias, .add_bias_kv = c->bias_kv,
                           .add_zero_attn = c->zero_attn};
    attn_error err;
    if (attn_mha_create(&cfg, &d->m, &err) != ATTN_OK) abort();
    attn_mha_init(d->m, seed);
    float *P = attn_mha_params_flat(d->m, &d->count);
    d->p64 = tu_xcalloc((int64_t)d->count, sizeof(double));
    for (size_t i = 0; i < d->count; ++i) {
        /* xavier-sized weights; biases (zero at init) made non-zero */
        const double v = P[i] != 0.0f ? P[i] : 0.1 * tu_rng_normal(&rng);
        P[i] = (float)bf(v);
        d->p64[i] = P[i];
    }
    mha64_map_params(d->m, d->p64, &d->p);
    d->cfg = (mha64_config){c->E, c->H, d->kdim, d->vdim, c->bias, c->bias_kv, c->zero_attn};
    d->x = bf_doubles(c->B * c->L * c->E, c->xmag, &rng);
    d->xf = floats_of(d->x, c->B * c->L * c->E);
    d->dout = bf_doubles(c->B * c->L * c->E, 1.0, &rng);
    d->doutf = floats_of(d->dout, c->B * c->L * c->E);
    d->in = (mha64_inputs){.B = c->B, .L = c->L, .S = c->S, .query = d->x, .causal = c->causal};
    if (!self) {
        d->k = bf_doubles(c->B * c->S * d->kdim, c->xmag, &rng);
        d->v = bf_doubles(c->B * c->S * d->vdim, c->xmag, &rng);
        d->kf = floats_of(d->k, c->B * c->S * d->kdim);
        d->vf = floats_of(d->v, c->B * c->S * d->vdim);
        d->in.key = d->k, d->in.value = d->v;
    }
    if (c->kpm) { /* every fourth key ignored, and one batch's last 5 */
        d->kpm = tu_xcalloc(c->B * c->S, sizeof(double));
        d->kpm8 = tu_xcalloc(c->B * c->S, 1);
        for (int64_t b = 0; b < c->B; ++b)
            for (int64_t j = 0; j < c->S; ++j)
                d->kpm8[b * c->S + j] = j % 4 == 1 || (b == 1 && j >= c->S - 5);
        for (int64_t e = 0; e < c->B * c->S; ++e) d->kpm[e] = d->kpm8[e];
        d->in.kpm_kind = MHA64_MASK_BOOL, d->in.kpm = d->kpm;
    }
}

static void mdata_free(mdata *d)
{
    attn_mha_free(d->m);
    free(d->p64), free(d->x), free(d->k), free(d->v), free(d->dout), free(d->kpm);
    free(d->xf), free(d->kf), free(d->vf), free(d->doutf), free(d->kpm8);
}

/* One run's results: out, the input gradients, the parameter gradients. */
typedef struct {
    float *out, *dx, *dk, *dv, *grads;
} mout;

static void mout_alloc(mout *r, const mdata *d)
{
    const mcase *c = d->c;
    r->out = tu_xcalloc(c->B * c->L * c->E, 4);
    r->dx = tu_xcalloc(c->B * c->L * c->E, 4);
    r->dk = tu_xcalloc(c->B * c->S * d->kdim, 4);
    r->dv = tu_xcalloc(c->B * c->S * d->vdim, 4);
    r->grads = tu_xcalloc((int64_t)d->count, 4);
}

static void mout_free(mout *r)
{
    free(r->out), free(r->dx), free(r->dk), free(r->dv), free(r->grads);
}

static bool mout_same(const mout *a, const mout *b, const mdata *d)
{
    const mcase *c = d->c;
    return !memcmp(a->out, b->out, (size_t)(c->B * c->L * c->E) * 4) &&
           !memcmp(a->dx, b->dx, (size_t)(c->B * c->L * c->E) * 4) &&
           !memcmp(a->dk, b->dk, (size_t)(c->B * c->S * d->kdim) * 4) &&
           !memcmp(a->dv, b->dv, (size_t)(c->B * c->S * d->vdim) * 4) &&
           !memcmp(a->grads, b->grads, d->count * 4);
}

/* Forward and backward on engine `engine` (ATTN_ENGINE), with a caller
 * workspace (the backward's size, for both) when `workspace`. */
static bool run_mha_ws(const mdata *d, const char *engine, attn_precision prec, int threads,
                       attn_path path, bool workspace, mout *r, attn_error *err)
{
    const mcase *c = d->c;
    const bool self = c->kdim == 0;
    setenv("ATTN_ENGINE", engine, 1);
    attn_mha_opts o = attn_mha_opts_default();
    o.precision = prec;
    o.num_threads = threads;
    o.path = path;
    o.causal = c->causal;
    attn_tensor kpm;
    if (d->kpm8) {
        kpm = attn_tensor_make(d->kpm8, ATTN_BOOL, 2, (int64_t[]){c->B, c->S});
        o.key_padding_mask = &kpm;
    }
    attn_tensor X = attn_tensor_3d(d->xf, c->B, c->L, c->E), Y = attn_tensor_3d(r->out, c->B, c->L, c->E);
    attn_tensor dY = attn_tensor_3d(d->doutf, c->B, c->L, c->E), dX = attn_tensor_3d(r->dx, c->B, c->L, c->E);
    attn_tensor K = attn_tensor_3d(d->kf, c->B, c->S, d->kdim), V = attn_tensor_3d(d->vf, c->B, c->S, d->vdim);
    attn_tensor dK = attn_tensor_3d(r->dk, c->B, c->S, d->kdim), dV = attn_tensor_3d(r->dv, c->B, c->S, d->vdim);
    void *ws = NULL;
    size_t ws_size = 0;
    if (workspace &&
        attn_mha_workspace_size(d->m, &X, self ? NULL : &K, self ? NULL : &V, true, &o, &ws_size,
                                err) == ATTN_OK) {
        ws = tu_xcalloc((int64_t)ws_size, 1);
        o.workspace = ws, o.workspace_size = ws_size;
    }
    attn_mha_zero_grad(d->m);
    bool ok = attn_mha_forward(d->m, &X, self ? NULL : &K, self ? NULL : &V, &Y, &o, err) == ATTN_OK &&
              attn_mha_backward(d->m, &X, self ? NULL : &K, self ? NULL : &V, &dY, &dX,
                                self ? NULL : &dK, self ? NULL : &dV, &o, err) == ATTN_OK;
    if (ok) memcpy(r->grads, attn_mha_grads_flat(d->m, NULL), d->count * 4);
    unsetenv("ATTN_ENGINE");
    free(ws);
    return ok && (!workspace || ws);
}

static bool run_mha(const mdata *d, const char *engine, attn_precision prec, int threads,
                    attn_path path, mout *r, attn_error *err)
{
    return run_mha_ws(d, engine, prec, threads, path, false, r, err);
}

/* bf16_judge on float32 results. */
static void judge(tu_group *g, const char *what, const float *got, const double *ref,
                  const double *base, int64_t n, double *worst)
{
    double *gd = tu_xcalloc(n, sizeof(double));
    for (int64_t e = 0; e < n; ++e) gd[e] = got[e];
    bf16_judge(g, what, gd, ref, base, n, worst);
    free(gd);
}

static void group_contract(tu_suite *suite)
{
    tu_group g;
    tu_group_begin(&g, suite, "contract");
    double worst_all = 0;
    char worst_what[200] = "";
    for (size_t ci = 0; ci < sizeof k_cases / sizeof *k_cases; ++ci) {
        const mcase *c = &k_cases[ci];
        mdata d;
        mdata_make(&d, c, tu_mix(g_seed ^ (0x3A0ull + ci)));
        const bool self = c->kdim == 0;
        const int64_t nx = c->B * c->L * c->E, nk = c->B * c->S * d.kdim, nv = c->B * c->S * d.vdim;
        /* oracle (r) and baseline (b): out, input gradients, flat parameter gradients */
        double *ro = tu_xcalloc(nx, 8), *rx = tu_xcalloc(nx, 8), *rk = tu_xcalloc(nk, 8);
        double *rv = tu_xcalloc(nv, 8), *rg = tu_xcalloc((int64_t)d.count, 8);
        double *bo = tu_xcalloc(nx, 8), *bx = tu_xcalloc(nx, 8), *bk = tu_xcalloc(nk, 8);
        double *bv = tu_xcalloc(nv, 8), *bg = tu_xcalloc((int64_t)d.count, 8);
        mha64_params rgp, bgp;
        mha64_map_params(d.m, rg, &rgp);
        mha64_map_params(d.m, bg, &bgp);
        mha64_forward(&d.cfg, &d.p, &d.in, ro, NULL);
        mha64_backward(&d.cfg, &d.p, &d.in, d.dout, &rgp, rx, self ? NULL : rk, self ? NULL : rv);
        mhabf_forward(&d.cfg, &d.p, &d.in, bo);
        mhabf_backward(&d.cfg, &d.p, &d.in, d.dout, &bgp, bx, self ? NULL : bk, self ? NULL : bv);
        for (int e = 0; e < g_neng; ++e) {
            mout r;
            mout_alloc(&r, &d);
            attn_error err;
            char what[200], t[260];
            snprintf(what, sizeof what, "%s [%s]", c->name, g_eng[e].name);
            if (tu_check(&g, run_mha(&d, g_eng[e].name, ATTN_PRECISION_BF16, 2, ATTN_PATH_AUTO, &r, &err),
                         "%s: %s", what, err.message)) {
                double worst = 0;
                snprintf(t, sizeof t, "%s out", what), judge(&g, t, r.out, ro, bo, nx, &worst);
                snprintf(t, sizeof t, "%s dquery", what), judge(&g, t, r.dx, rx, bx, nx, &worst);
                if (!self) {
                    snprintf(t, sizeof t, "%s dkey", what), judge(&g, t, r.dk, rk, bk, nk, &worst);
                    snprintf(t, sizeof t, "%s dvalue", what), judge(&g, t, r.dv, rv, bv, nv, &worst);
                }
                const float *base = attn_mha_params_flat(d.m, NULL);
                for (int i = 0; i < attn_mha_num_params(d.m); ++i) {
                    const char *name;
                    attn_tensor val;
                    attn_mha_param_at(d.m, i, &name, &val, NULL);
                    const int64_t off = (const float *)val.data - base, n = attn_tensor_numel(&val);
                    snprintf(t, sizeof t, "%s d%s", what, name);
                    judge(&g, t, r.grads + off, rg + off, bg + off, n, &worst);
                }
                if (suite->verbose) tu_group_note(&g, "%s: worst %.2f of the allowance", what, worst);
                if (g_eng[e].eng && worst > worst_all) {
                    worst_all = worst;
                    snprintf(worst_what, sizeof worst_what, "%s", what);
                }
            }
            mout_free(&r);
        }
        free(ro), free(rx), free(rk), free(rv), free(rg), free(bo), free(bx), free(bk), free(bv), free(bg);
        mdata_free(&d);
    }
    printf("contract: largest error %.2f of the allowance (%s)\n", worst_all, worst_what);
    tu_group_end(&g);
}

/* -------------------------------------------------------- composition */

static void group_composition(tu_suite *suite)
{
    tu_group g;
    tu_group_begin(&g, suite, "composition");
    mdata d;
    mdata_make(&d, &k_cases[1], tu_mix(g_seed ^ 0xC0ull)); /* cross-attention, every option */
    for (int e = 0; e < g_neng; ++e) {
        mout r[5];
        attn_error err = {0};
        bool ok = true;
        for (int t = 0; t < 5; ++t) mout_alloc(&r[t], &d);
        for (int t = 0; t < 3; ++t)
            ok &= run_mha(&d, g_eng[e].name, ATTN_PRECISION_BF16, t + 1, ATTN_PATH_AUTO, &r[t], &err);
        ok &= run_mha(&d, g_eng[e].name, ATTN_PRECISION_EXACT, 2, ATTN_PATH_AUTO, &r[3], &err);
        ok &= run_mha_ws(&d, g_eng[e].name, ATTN_PRECISION_BF16, 2, ATTN_PATH_AUTO, true, &r[4],
                         &err);
        if (tu_check(&g, ok, "%s: %s", g_eng[e].name, err.message)) {
            tu_check(&g, mout_same(&r[0], &r[1], &d) && mout_same(&r[0], &r[2], &d),
                     "%s: 1, 2 and 3 threads differ", g_eng[e].name);
            tu_check(&g, mout_same(&r[0], &r[4], &d), "%s: a caller workspace changes the bits",
                     g_eng[e].name);
            if (g_eng[e].eng)
                tu_check(&g, memcmp(r[0].out, r[3].out, 4) != 0 || !mout_same(&r[0], &r[3], &d),
                         "%s: the bf16 call gave the exact call's bits", g_eng[e].name);
            else
                tu_check(&g, mout_same(&r[0], &r[3], &d), "f32: the bf16 call is not the exact one");
        }
        for (int t = 0; t < 5; ++t) mout_free(&r[t]);
    }
    /* the reference path: plain float32 whatever the precision */
    {
        mout r[2];
        attn_error err = {0};
        mout_alloc(&r[0], &d), mout_alloc(&r[1], &d);
        const bool ok = run_mha(&d, g_eng[0].name, ATTN_PRECISION_BF16, 2, ATTN_PATH_REFERENCE, &r[0], &err) &&
                        run_mha(&d, g_eng[0].name, ATTN_PRECISION_EXACT, 2, ATTN_PATH_REFERENCE, &r[1], &err);
        tu_check(&g, ok && mout_same(&r[0], &r[1], &d), "reference path: bf16 differs from exact (%s)",
                 ok ? "values" : err.message);
        mout_free(&r[0]), mout_free(&r[1]);
    }
    /* an unknown precision is refused, naming the option */
    {
        const mcase *c = d.c;
        float *out = tu_xcalloc(c->B * c->L * c->E, 4);
        attn_tensor X = attn_tensor_3d(d.xf, c->B, c->L, c->E), Y = attn_tensor_3d(out, c->B, c->L, c->E);
        attn_tensor K = attn_tensor_3d(d.kf, c->B, c->S, d.kdim), V = attn_tensor_3d(d.vf, c->B, c->S, d.vdim);
        attn_mha_opts o = attn_mha_opts_default();
        o.precision = (attn_precision)7;
        attn_error err = {0};
        const attn_status s = attn_mha_forward(d.m, &X, &K, &V, &Y, &o, &err);
        tu_check(&g, s == ATTN_ERR_ARG && strstr(err.message, "precision"),
                 "precision 7: status %d, message '%s'", (int)s, err.message);
        free(out);
    }
    mdata_free(&d);
    tu_group_end(&g);
}

int main(int argc, char **argv)
{
    tu_options opt;
    tu_suite suite;
    if (!tu_begin(argc, argv, 0xB16A11ull, &opt, &suite)) return 2;
    g_seed = opt.seed;
    unsetenv("ATTN_ARCH");
    g_neng = bf16_engines_here(g_eng);
    printf("engines run:");
    for (int e = 0; e < g_neng; ++e) printf(" %s", g_eng[e].name);
    printf(" (attn_engine(): %s)\n", attn_engine());
    static const tu_group_entry groups[] = {
        {"linear", group_linear},
        {"contract", group_contract},
        {"composition", group_composition},
    };
    tu_run_groups(&suite, &opt, groups, (int)(sizeof groups / sizeof *groups));
    return tu_suite_finish(&suite);
}
