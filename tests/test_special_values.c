/* Special values and hostile arguments: NaN inputs propagate as in torch
 * (never silently become a "masked" zero row), and arguments that could
 * crash or overflow are refused with a status. Both SDPA paths. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 1, H = 2, NQ = 5, NK = 6, D = 8 };

static const attn_path paths[2] = {ATTN_PATH_REFERENCE, ATTN_PATH_FUSED};
static const char *const path_names[2] = {"reference", "fused"};

static void fill(float *x, int64_t n, tu_rng *r)
{
    for (int64_t i = 0; i < n; ++i) x[i] = (float)tu_rng_normal(r);
}

static bool row_nan(const float *o, int64_t row, int64_t width)
{
    for (int64_t c = 0; c < width; ++c)
        if (!isnan(o[row * width + c])) return false;
    return true;
}

static bool row_finite(const float *o, int64_t row, int64_t width)
{
    for (int64_t c = 0; c < width; ++c)
        if (!isfinite(o[row * width + c])) return false;
    return true;
}

/* ------------------------------------------------------------ one rule
 * README "NaN, inf and empty rows": a non-finite value reaches only the
 * outputs that depend on it through visible keys. The same cases on every
 * path (ATTN_ARCH reference, generic, avx2, avx512, neon as the CPU has them). */

enum { RH = 2, RNQ = 6, RNK = 7, RD = 8 };

typedef struct {
    float o[RH * RNQ * RD], l[RH * RNQ], w[RH * RNQ * RNK], dq[RH * RNQ * RD], dk[RH * RNK * RD],
        dv[RH * RNK * RD], ds[RH];
} rule_out;

typedef enum { IS_NAN, IS_POSINF, IS_FINITE, IS_ZERO } cls;

static bool is(float x, cls c)
{
    return c == IS_NAN ? isnan(x) : c == IS_POSINF ? x == INFINITY : c == IS_FINITE ? isfinite(x) : x == 0.0f;
}

/* Every element of rows [r0, r1) (width w) of head h of a (H, n, w) array is c. */
static bool rows_are(const float *x, int64_t n, int64_t w, int h, int64_t r0, int64_t r1, cls c)
{
    for (int64_t r = r0; r < r1; ++r)
        for (int64_t e = 0; e < w; ++e)
            if (!is(x[(h * n + r) * w + e], c)) return false;
    return true;
}

/* Columns [c0, c1) of row r of head h of the (H, RNQ, nk) weights are c. */
static bool weights_are(const float *w, int64_t nk, int h, int64_t r, int64_t c0, int64_t c1, cls c)
{
    for (int64_t j = c0; j < c1; ++j)
        if (!is(w[(h * RNQ + r) * nk + j], c)) return false;
    return true;
}

static bool run_rule(const float *q, const float *k, const float *v, const float *dout, int64_t nk,
                     attn_sdpa_opts o, rule_out *r)
{
    attn_tensor Q = attn_tensor_4d((float *)q, 1, RH, RNQ, RD), K = attn_tensor_4d((float *)k, 1, RH, nk, RD),
                V = attn_tensor_4d((float *)v, 1, RH, nk, RD), dO = attn_tensor_4d((float *)dout, 1, RH, RNQ, RD),
                O = attn_tensor_4d(r->o, 1, RH, RNQ, RD), L = attn_tensor_3d(r->l, 1, RH, RNQ),
                W = attn_tensor_4d(r->w, 1, RH, RNQ, nk), dQ = attn_tensor_4d(r->dq, 1, RH, RNQ, RD),
                dK = attn_tensor_4d(r->dk, 1, RH, nk, RD), dV = attn_tensor_4d(r->dv, 1, RH, nk, RD),
                dS = attn_tensor_1d(r->ds, RH);
    o.num_threads = 1;
    if (attn_sdpa(&Q, &K, &V, &O, &L, &W, &o, NULL) != ATTN_OK) return false;
    if (o.sinks) o.grad_sinks = &dS;
    return attn_sdpa_backward(&Q, &K, &V, &O, &L, &dO, &dQ, &dK, &dV, &o, NULL) == ATTN_OK;
}

/* The ATTN_ARCH values, and whether this CPU runs archs[a]. */
static const char *const archs[5] = {"reference", "generic", "avx2", "avx512", "neon"};

static bool arch_available(int a)
{
#if defined(__x86_64__) || defined(__i386__)
    if (a == 2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (a == 3) return __builtin_cpu_supports("avx512f");
    return a != 4; /* NEON */
#elif defined(__aarch64__)
    return a != 2 && a != 3; /* x86 kernels; every AArch64 CPU has NEON */
#else
    return a < 2; /* SIMD kernels */
#endif
}

static void one_rule(tu_suite *suite, tu_rng *rng)
{
    tu_group g;
    tu_group_begin(&g, suite, "one rule for NaN and inf on every path");
    static float q[RH * RNQ * RD], k[RH * RNK * RD], v[RH * RNK * RD], dout[RH * RNQ * RD];
    static rule_out r;
    for (int a = 0; a < 5; ++a) {
        if (!arch_available(a)) continue;
        setenv("ATTN_ARCH", archs[a], 1);
        const char *an = archs[a];
        /* A. NaN in query row 2 of head 0, top-left causal (Nq 6, Nk 7): row 2
         * sees keys 0..2 only. */
        fill(q, RH * RNQ * RD, rng), fill(k, RH * RNK * RD, rng), fill(v, RH * RNK * RD, rng);
        fill(dout, RH * RNQ * RD, rng);
        q[2 * RD + 5] = NAN;
        attn_sdpa_opts o = attn_sdpa_opts_default();
        o.causal = ATTN_CAUSAL_TOP_LEFT;
        if (tu_check(&g, run_rule(q, k, v, dout, RNK, o, &r), "%s: NaN query: call failed", an)) {
            tu_check(&g, rows_are(r.o, RNQ, RD, 0, 2, 3, IS_NAN) && isnan(r.l[2]) &&
                             rows_are(r.o, RNQ, RD, 0, 0, 2, IS_FINITE) &&
                             rows_are(r.o, RNQ, RD, 0, 3, RNQ, IS_FINITE),
                     "%s: NaN in query row 2: out/LSE NaN in row 2 only", an);
            tu_check(&g, weights_are(r.w, RNK, 0, 2, 0, 3, IS_NAN) && weights_are(r.w, RNK, 0, 2, 3, RNK, IS_ZERO),
                     "%s: NaN in query row 2: its weights NaN on keys 0..2, 0 on hidden keys", an);
            tu_check(&g, rows_are(r.dq, RNQ, RD, 0, 2, 3, IS_NAN) && rows_are(r.dq, RNQ, RD, 0, 3, RNQ, IS_FINITE) &&
                             rows_are(r.dq, RNQ, RD, 0, 0, 2, IS_FINITE),
                     "%s: NaN in query row 2: dQ NaN in row 2 only", an);
            tu_check(&g, rows_are(r.dk, RNK, RD, 0, 0, 3, IS_NAN) && rows_are(r.dk, RNK, RD, 0, 3, RNK, IS_FINITE) &&
                             rows_are(r.dv, RNK, RD, 0, 0, 3, IS_NAN) && rows_are(r.dv, RNK, RD, 0, 3, RNK, IS_FINITE),
                     "%s: NaN in query row 2: dK, dV NaN in rows 0..2 (the keys it sees) only", an);
            tu_check(&g, rows_are(r.o, RNQ, RD, 1, 0, RNQ, IS_FINITE) && rows_are(r.dk, RNK, RD, 1, 0, RNK, IS_FINITE),
                     "%s: NaN in head 0 reaches head 1", an);
        }
        /* A2. NaN in dO row 2 of head 0 (same causal case): it reaches dQ
         * row 2 and dK, dV of the keys row 2 sees only. */
        fill(q, RH * RNQ * RD, rng);
        for (int d = 0; d < RD; ++d) dout[2 * RD + d] = NAN;
        if (tu_check(&g, run_rule(q, k, v, dout, RNK, o, &r), "%s: NaN dO: call failed", an))
            tu_check(&g, rows_are(r.dq, RNQ, RD, 0, 2, 3, IS_NAN) && rows_are(r.dq, RNQ, RD, 0, 3, RNQ, IS_FINITE) &&
                             rows_are(r.dq, RNQ, RD, 0, 1, 2, IS_FINITE) &&
                             rows_are(r.dk, RNK, RD, 0, 0, 3, IS_NAN) && rows_are(r.dk, RNK, RD, 0, 3, RNK, IS_FINITE) &&
                             rows_are(r.dv, RNK, RD, 0, 0, 3, IS_NAN) && rows_are(r.dv, RNK, RD, 0, 3, RNK, IS_FINITE),
                     "%s: NaN in dO row 2: dQ row 2, dK and dV rows 0..2 NaN, the rest finite", an);
        fill(dout, RH * RNQ * RD, rng);
        /* B. +inf logits in query row 4 (q = (+inf, 0, ...), k[., 0] > 0). */
        fill(q, RH * RNQ * RD, rng);
        for (int j = 0; j < RH * RNK; ++j) k[j * RD] = fabsf(k[j * RD]) + 0.5f;
        for (int d = 0; d < RD; ++d) q[4 * RD + d] = d == 0 ? INFINITY : 0.0f;
        if (tu_check(&g, run_rule(q, k, v, dout, RNK, o, &r), "%s: +inf logits: call failed", an)) {
            tu_check(&g, rows_are(r.o, RNQ, RD, 0, 4, 5, IS_NAN) && r.l[4] == INFINITY &&
                             rows_are(r.o, RNQ, RD, 0, 5, RNQ, IS_FINITE),
                     "%s: +inf logits in row 4: out NaN, LSE +inf in row 4 only", an);
            tu_check(&g, weights_are(r.w, RNK, 0, 4, 0, 5, IS_NAN) && weights_are(r.w, RNK, 0, 4, 5, RNK, IS_ZERO),
                     "%s: +inf logits in row 4: weights NaN on keys 0..4, 0 on hidden keys", an);
            tu_check(&g, rows_are(r.dk, RNK, RD, 0, 0, 5, IS_NAN) && rows_are(r.dk, RNK, RD, 0, 5, RNK, IS_FINITE) &&
                             rows_are(r.dv, RNK, RD, 0, 0, 5, IS_NAN) && rows_are(r.dv, RNK, RD, 0, 5, RNK, IS_FINITE) &&
                             rows_are(r.dq, RNQ, RD, 0, 4, 5, IS_NAN) && rows_are(r.dq, RNQ, RD, 0, 5, RNQ, IS_FINITE),
                     "%s: +inf logits in row 4: dK, dV NaN in rows 0..4 only, dQ in row 4 only", an);
        }
        /* C. Sinks +inf (head 0) and NaN (head 1); bottom-right, window (0, 0),
         * Nk 4 < Nq 6: rows 0, 1 see no key, rows 2..5 one key and the sink. */
        fill(q, RH * RNQ * RD, rng), fill(k, RH * RNK * RD, rng);
        for (int sv = 0; sv < 3; ++sv) {
            static const float sval[3][2] = {{INFINITY, NAN}, {-INFINITY, -INFINITY}, {NAN, INFINITY}};
            float sinks[RH] = {sval[sv][0], sval[sv][1]};
            attn_tensor S = attn_tensor_1d(sinks, RH);
            attn_sdpa_opts so = attn_sdpa_opts_default();
            so.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
            so.window = (attn_window){true, 0, 0};
            so.sinks = &S;
            memset(&r, 0, sizeof r);
            if (!tu_check(&g, run_rule(q, k, v, dout, 4, so, &r), "%s: sinks: call failed", an)) continue;
            for (int h = 0; h < RH; ++h) {
                const float sk = sinks[h];
                /* rows that see no key: out 0, LSE = sink, weights 0, dQ 0 */
                tu_check(&g, rows_are(r.o, RNQ, RD, h, 0, 2, IS_ZERO) &&
                                 rows_are(r.dq, RNQ, RD, h, 0, 2, IS_ZERO) &&
                                 weights_are(r.w, 4, h, 0, 0, 4, IS_ZERO) && weights_are(r.w, 4, h, 1, 0, 4, IS_ZERO) &&
                                 (isnan(sk) ? isnan(r.l[h * RNQ]) && isnan(r.l[h * RNQ + 1])
                                            : r.l[h * RNQ] == sk && r.l[h * RNQ + 1] == sk),
                         "%s: sink %g, rows that see no key: out 0, LSE = sink, weights 0, dQ 0 "
                         "(got out %g, lse %g, dq %g)", an, (double)sk, (double)r.o[h * RNQ * RD],
                         (double)r.l[h * RNQ], (double)r.dq[h * RNQ * RD]);
                /* rows that see a key: the sink is one more logit */
                const cls want = sk == -INFINITY ? IS_FINITE : IS_NAN;
                tu_check(&g, rows_are(r.o, RNQ, RD, h, 2, RNQ, want) &&
                                 rows_are(r.dq, RNQ, RD, h, 2, RNQ, want) &&
                                 rows_are(r.dk, 4, RD, h, 0, 4, want),
                         "%s: sink %g, rows that see a key: out, dQ, dK %s", an, (double)sk,
                         want == IS_NAN ? "NaN" : "finite");
            }
        }
        /* C2. The same sinks where no row sees a key (a mask hiding every
         * key): every output is the constant 0, so nothing reaches the sinks:
         * their gradients are 0, whatever the sinks hold. */
        for (int sv = 0; sv < 3; ++sv) {
            static const float sval[3][2] = {{INFINITY, NAN}, {-INFINITY, 1.0f}, {NAN, INFINITY}};
            float sinks[RH] = {sval[sv][0], sval[sv][1]};
            static uint8_t none[RNQ * 4];
            attn_tensor S = attn_tensor_1d(sinks, RH);
            attn_tensor M = attn_tensor_make(none, ATTN_BOOL, 2, (const int64_t[]){RNQ, 4});
            attn_sdpa_opts so = attn_sdpa_opts_default();
            so.sinks = &S;
            so.mask[0] = &M;
            memset(&r, 0, sizeof r);
            if (!tu_check(&g, run_rule(q, k, v, dout, 4, so, &r), "%s: sinks, no key: call failed", an)) continue;
            tu_check(&g, r.ds[0] == 0.0f && r.ds[1] == 0.0f && rows_are(r.o, RNQ, RD, 0, 0, RNQ, IS_ZERO),
                     "%s: sinks (%g, %g), no row sees a key: out 0, sink gradients 0 (got %g, %g)", an,
                     (double)sinks[0], (double)sinks[1], (double)r.ds[0], (double)r.ds[1]);
        }
        /* D. ALiBi slopes of -inf: the bias -slope·|d| is +inf off the
         * diagonal and NaN on it (-inf·0): every row that sees its diagonal
         * key is NaN (out and LSE). Nq = Nk = 6, no causal. */
        fill(q, RH * RNQ * RD, rng), fill(k, RH * RNK * RD, rng);
        {
            float slopes[RH] = {-INFINITY, 0.5f};
            attn_tensor A = attn_tensor_1d(slopes, RH);
            attn_sdpa_opts ao = attn_sdpa_opts_default();
            ao.alibi_slopes = &A;
            memset(&r, 0, sizeof r);
            if (tu_check(&g, run_rule(q, k, v, dout, RNQ, ao, &r), "%s: alibi: call failed", an)) {
                bool ok = true;
                for (int i = 0; i < RNQ; ++i) ok &= isnan(r.l[i]);
                tu_check(&g, ok && rows_are(r.o, RNQ, RD, 0, 0, RNQ, IS_NAN) &&
                                 rows_are(r.o, RNQ, RD, 1, 0, RNQ, IS_FINITE),
                         "%s: ALiBi slope -inf: LSE and out NaN (got lse %g)", an, (double)r.l[0]);
            }
        }
    }
    unsetenv("ATTN_ARCH");
    tu_group_end(&g);
}

/* A key the row sees whose probability underflows to exactly 0 (logit 204
 * below the others), with NaN in its value: 0·NaN makes out NaN in that
 * column, and the gradients NaN, on both paths (visibility, not p != 0). */
static void nan_value_underflow(tu_suite *suite)
{
    enum { UD = 16, UK = 4 };
    tu_group g;
    tu_group_begin(&g, suite, "NaN value under an underflowed probability");
    float q[UD] = {1.0f}, k[UK * UD] = {0}, v[UK * UD], dout[UD], o[UD], lse, dq[UD], dk[UK * UD],
          dv[UK * UD];
    for (int j = 0; j < UK; ++j) k[j * UD] = j == 1 ? -200.0f : 4.0f;
    for (int e = 0; e < UK * UD; ++e) v[e] = 0.25f;
    for (int e = 0; e < UD; ++e) dout[e] = 1.0f;
    v[1 * UD + 5] = NAN;
    attn_tensor Q = attn_tensor_4d(q, 1, 1, 1, UD), K = attn_tensor_4d(k, 1, 1, UK, UD),
                V = attn_tensor_4d(v, 1, 1, UK, UD), O = attn_tensor_4d(o, 1, 1, 1, UD),
                L = attn_tensor_3d(&lse, 1, 1, 1), dO = attn_tensor_4d(dout, 1, 1, 1, UD),
                dQ = attn_tensor_4d(dq, 1, 1, 1, UD), dK = attn_tensor_4d(dk, 1, 1, UK, UD),
                dV = attn_tensor_4d(dv, 1, 1, UK, UD);
    for (int pi = 0; pi < 2; ++pi) {
        attn_sdpa_opts opts = attn_sdpa_opts_default();
        opts.scale = 1.0f;
        opts.path = paths[pi];
        if (!tu_check(&g, attn_sdpa(&Q, &K, &V, &O, &L, NULL, &opts, NULL) == ATTN_OK &&
                              attn_sdpa_backward(&Q, &K, &V, &O, &L, &dO, &dQ, &dK, &dV, &opts,
                                                 NULL) == ATTN_OK,
                      "%s: call failed", path_names[pi]))
            continue;
        tu_check(&g, isnan(o[5]) && o[0] == 0.25f && isnan(dq[0]) && isnan(dk[0]),
                 "%s: out[5] %g (want NaN), out[0] %g (0.25), dq %g, dk %g (NaN)", path_names[pi],
                 (double)o[5], (double)o[0], (double)dq[0], (double)dk[0]);
    }
    tu_group_end(&g);
}

/* ------------------------------------------------ non-finite values, backward
 * Through the softmax dS_ij = P_ij (dP_ij - D_i), D_i = Σ_l P_il dP_il over
 * the keys l row i sees, dP_il = dO_i·v_l. A NaN or inf in v_l makes dP_il
 * non-finite and P_il dP_il with it even where P_il underflowed to 0
 * (0·NaN): D_i is NaN, and so is every dS_ij of the row, P_ij = 1 included
 * (1·(dP - NaN)). Hence dQ_i = Σ_j dS_ij k_j NaN, dK_j = Σ_i dS_ij q_i NaN
 * for every key j the row sees, while dV_j = Σ_i P_ij dO_i stays finite; a
 * key the row does not see is not in its softmax at all. (torch's
 * softmax(Q·Kᵀ·scale)·V under autograd gives these NaN; README "NaN, inf
 * and empty rows".) Every path, both precisions, O and its statistics
 * given three ways (LSE, softmax_stats, recomputed), 1 and 2 threads. */

typedef enum { GIVE_LSE, GIVE_STATS, RECOMPUTE } nv_given;
static const char *const given_names[3] = {"lse", "stats", "recomputed"};

typedef struct {
    int64_t hq, hkv, nq, nk, d;
    const float *q, *k, *v, *dout;
    attn_sdpa_opts opts;
    float *o, *lse, *stats, *dq, *dk, *dv;
} nv_call;

static bool nv_run(nv_call *c, nv_given given)
{
    attn_tensor Q = attn_tensor_4d((float *)c->q, 1, c->hq, c->nq, c->d),
                K = attn_tensor_4d((float *)c->k, 1, c->hkv, c->nk, c->d),
                V = attn_tensor_4d((float *)c->v, 1, c->hkv, c->nk, c->d),
                dO = attn_tensor_4d((float *)c->dout, 1, c->hq, c->nq, c->d),
                O = attn_tensor_4d(c->o, 1, c->hq, c->nq, c->d),
                L = attn_tensor_3d(c->lse, 1, c->hq, c->nq),
                St = attn_tensor_4d(c->stats, 1, c->hq, c->nq, 2),
                dQ = attn_tensor_4d(c->dq, 1, c->hq, c->nq, c->d),
                dK = attn_tensor_4d(c->dk, 1, c->hkv, c->nk, c->d),
                dV = attn_tensor_4d(c->dv, 1, c->hkv, c->nk, c->d);
    attn_sdpa_opts o = c->opts;
    if (given == GIVE_STATS) o.softmax_stats = &St;
    o.grad_mask = NULL, o.grad_sinks = NULL; /* the backward's */
    if (attn_sdpa(&Q, &K, &V, &O, &L, NULL, &o, NULL) != ATTN_OK) return false;
    o.grad_mask = c->opts.grad_mask, o.grad_sinks = c->opts.grad_sinks;
    const bool keep = given != RECOMPUTE;
    return attn_sdpa_backward(&Q, &K, &V, keep ? &O : NULL, keep && given == GIVE_LSE ? &L : NULL,
                              &dO, &dQ, &dK, &dV, &o, NULL) == ATTN_OK;
}

/* One query row, two keys, D = 8, scale 1: q = e0, k_0 = 100·e0, k_1 =
 * -100·e0, so P = (1, exp(-200) = 0 in float32); v = 0.25, dO = 1, and
 * v_1[5] = bad. */
static void nv_two_keys(tu_group *g, const char *an, attn_sdpa_opts opts, float bad, bool hide_key1)
{
    enum { ND = 8 };
    float q[ND] = {1.0f}, k[2 * ND] = {100.0f}, v[2 * ND], dout[ND], o[ND], lse, st[2], dq[ND],
          dk[2 * ND], dv[2 * ND];
    k[ND] = -100.0f;
    for (int e = 0; e < 2 * ND; ++e) v[e] = 0.25f;
    for (int e = 0; e < ND; ++e) dout[e] = 1.0f;
    v[ND + 5] = bad;
    uint8_t see0[2] = {1, 0};
    attn_tensor M = attn_tensor_make(see0, ATTN_BOOL, 2, (const int64_t[]){1, 2});
    if (hide_key1) opts.mask[0] = &M;
    opts.scale = 1.0f;
    const bool finite = isfinite(bad) || hide_key1;
    for (int gv = 0; gv < 3; ++gv) {
        nv_call c = {1, 1, 1, 2, ND, q, k, v, dout, opts, o, &lse, st, dq, dk, dv};
        if (!tu_check(g, nv_run(&c, (nv_given)gv), "%s: call failed", an)) continue;
        /* dV_0 = P_0·dO = dO, dV_1 = 0·dO = 0: exact either way */
        bool dv_ok = true;
        for (int e = 0; e < ND; ++e) dv_ok &= dv[e] == 1.0f && dv[ND + e] == 0.0f;
        /* finite: P_0 = 1 and P_1 = 0 make the softmax constant: dQ = dK = 0 exactly */
        const cls want = finite ? IS_ZERO : IS_NAN;
        tu_check(g, rows_are(dq, 1, ND, 0, 0, 1, want) && rows_are(dk, 2, ND, 0, 0, 2, want) && dv_ok,
                 "%s, %s, v_1[5] = %g%s: dQ, dK %s, dV (dO, 0) (got dq %g, dk_0 %g, dk_1 %g, dv %g %g)",
                 an, given_names[gv], (double)bad, hide_key1 ? " hidden" : "",
                 finite ? "0" : "NaN", (double)dq[0], (double)dk[0], (double)dk[ND], (double)dv[0],
                 (double)dv[ND]);
    }
}

/* One key: its softmax is 1 whatever the logit, and dS = 1·(dP - D) is 0
 * with finite dP = D; NaN with a NaN v (dP = D = NaN) or a NaN dO. */
static void nv_one_key(tu_group *g, const char *an, attn_sdpa_opts opts)
{
    enum { ND = 8 };
    for (int bad_do = 0; bad_do < 2; ++bad_do) {
        float q[ND], k[ND], v[ND], dout[ND], o[ND], lse, st[2], dq[ND], dk[ND], dv[ND];
        for (int e = 0; e < ND; ++e) {
            q[e] = 0.5f - 0.1f * (float)e, k[e] = 0.25f * (float)e;
            v[e] = 1.0f, dout[e] = 2.0f;
        }
        if (bad_do) dout[3] = NAN;
        else v[6] = NAN;
        nv_call c = {1, 1, 1, 1, ND, q, k, v, dout, opts, o, &lse, st, dq, dk, dv};
        if (!tu_check(g, nv_run(&c, GIVE_LSE), "%s: one key: call failed", an)) continue;
        /* dV = P·dO = dO: NaN where dO is */
        bool dv_ok = true;
        for (int e = 0; e < ND; ++e) dv_ok &= bad_do && e == 3 ? isnan(dv[e]) : dv[e] == 2.0f;
        tu_check(g, rows_are(dq, 1, ND, 0, 0, 1, IS_NAN) && rows_are(dk, 1, ND, 0, 0, 1, IS_NAN) && dv_ok,
                 "%s: one key, NaN in %s: dQ, dK NaN, dV = dO (got dq %g, dk %g)", an,
                 bad_do ? "dO" : "v", (double)dq[0], (double)dk[0]);
    }
}

/* GQA 4/2, Nq 6, Nk 7, bottom-right causal with window (2, 0): row i sees
 * keys i - 1 .. i + 1 (those there: ragged tiles). Row 5 of query heads 0, 1
 * (kv head 0) sees keys 4..6: q_5 = e0, k_4[0] = 200, k_5[0] = k_6[0] =
 * -200, so P = (1, 0, 0), and v_6 of kv head 0 holds a NaN; no other row
 * sees key 6. Expected, from the rule above: dQ NaN in row 5 of heads 0,
 * 1 only; dK NaN for keys 4..6 of kv head 0 only; dV finite. With a float
 * mask of zeros its gradient (summed over the heads) is NaN on row 5's keys
 * 4..6, 0 on the keys each row does not see, finite elsewhere; with sinks
 * (d sink_h = -Σ_i P_sink D_i) the gradients of heads 0, 1 are NaN. */
enum { GH = 4, GKV = 2, GNQ = 6, GNK = 7, GD = 8 };

static void nv_window_gqa(tu_group *g, const char *an, attn_sdpa_opts opts, tu_rng *rng,
                          bool with_mask, bool with_sinks)
{
    static float q[GH * GNQ * GD], k[GKV * GNK * GD], v[GKV * GNK * GD], dout[GH * GNQ * GD],
        o[GH * GNQ * GD], lse[GH * GNQ], st[GH * GNQ * 2], dq[GH * GNQ * GD], dk[GKV * GNK * GD],
        dv[GKV * GNK * GD], zeros[GNQ * GNK], dmask[GNQ * GNK];
    fill(q, GH * GNQ * GD, rng), fill(k, GKV * GNK * GD, rng), fill(v, GKV * GNK * GD, rng);
    fill(dout, GH * GNQ * GD, rng);
    for (int h = 0; h < 2; ++h)
        for (int e = 0; e < GD; ++e) q[(h * GNQ + 5) * GD + e] = e == 0 ? 1.0f : 0.0f;
    k[4 * GD] = 200.0f, k[5 * GD] = -200.0f, k[6 * GD] = -200.0f;
    v[6 * GD + 3] = NAN;
    opts.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    opts.window = (attn_window){true, 2, 0};
    attn_tensor M = attn_tensor_2d(zeros, GNQ, GNK), dM = attn_tensor_2d(dmask, GNQ, GNK);
    if (with_mask) opts.mask[0] = &M, opts.grad_mask = &dM;
    float sinks[GH] = {0.5f, -1.0f, 0.25f, 2.0f}, dsinks[GH];
    attn_tensor S = attn_tensor_1d(sinks, GH), dS = attn_tensor_1d(dsinks, GH);
    if (with_sinks) opts.sinks = &S, opts.grad_sinks = &dS;
    for (int gv = 0; gv < 3; ++gv) {
        nv_call c = {GH, GKV, GNQ, GNK, GD, q, k, v, dout, opts, o, lse, st, dq, dk, dv};
        if (!tu_check(g, nv_run(&c, (nv_given)gv), "%s: window GQA: call failed", an)) continue;
        const char *gn = given_names[gv];
        tu_check(g, rows_are(dq, GNQ, GD, 0, 5, 6, IS_NAN) && rows_are(dq, GNQ, GD, 1, 5, 6, IS_NAN) &&
                        rows_are(dq, GNQ, GD, 0, 0, 5, IS_FINITE) && rows_are(dq, GNQ, GD, 1, 0, 5, IS_FINITE) &&
                        rows_are(dq, GNQ, GD, 2, 0, GNQ, IS_FINITE) && rows_are(dq, GNQ, GD, 3, 0, GNQ, IS_FINITE),
                 "%s, %s: dQ NaN in row 5 of heads 0, 1 only (got %g, row 4: %g)", an, gn,
                 (double)dq[5 * GD], (double)dq[4 * GD]);
        tu_check(g, rows_are(dk, GNK, GD, 0, 4, 7, IS_NAN) && rows_are(dk, GNK, GD, 0, 0, 4, IS_FINITE) &&
                        rows_are(dk, GNK, GD, 1, 0, GNK, IS_FINITE),
                 "%s, %s: dK NaN for keys 4..6 of kv head 0 only (got key 4: %g, key 3: %g)", an, gn,
                 (double)dk[4 * GD], (double)dk[3 * GD]);
        tu_check(g, rows_are(dv, GNK, GD, 0, 0, GNK, IS_FINITE) && rows_are(dv, GNK, GD, 1, 0, GNK, IS_FINITE),
                 "%s, %s: dV finite", an, gn);
        if (with_sinks)
            tu_check(g, isnan(dsinks[0]) && isnan(dsinks[1]) && isfinite(dsinks[2]) && isfinite(dsinks[3]),
                     "%s, %s: sink gradients NaN for heads 0, 1 only (got %g %g %g %g)", an, gn,
                     (double)dsinks[0], (double)dsinks[1], (double)dsinks[2], (double)dsinks[3]);
        if (!with_mask) continue;
        bool ok = true;
        for (int i = 0; i < GNQ; ++i)
            for (int j = 0; j < GNK; ++j) {
                const bool seen = j >= i - 1 && j <= i + 1; /* i + Nk - Nq - 2 .. i + Nk - Nq */
                ok &= is(dmask[i * GNK + j], !seen ? IS_ZERO : i == 5 ? IS_NAN : IS_FINITE);
            }
        tu_check(g, ok, "%s, %s: d mask NaN on row 5's keys, 0 where hidden, finite elsewhere", an, gn);
    }
}

static void nan_value_backward(tu_suite *suite, tu_rng *rng)
{
    tu_group g;
    tu_group_begin(&g, suite, "non-finite values in the backward: every dS of the row");
    for (int a = 0; a < 5; ++a) {
        if (!arch_available(a)) continue;
        setenv("ATTN_ARCH", archs[a], 1);
        for (int pr = 0; pr < (a == 0 ? 1 : 2); ++pr)
            for (int threads = 1; threads <= 2; ++threads) {
                char an[64];
                snprintf(an, sizeof an, "%s%s, %d thread%s", archs[a], pr ? " bf16" : "", threads,
                         threads > 1 ? "s" : "");
                attn_sdpa_opts opts = attn_sdpa_opts_default();
                opts.precision = pr ? ATTN_PRECISION_BF16 : ATTN_PRECISION_EXACT;
                opts.num_threads = threads;
                nv_two_keys(&g, an, opts, NAN, false);
                nv_two_keys(&g, an, opts, INFINITY, false);
                nv_two_keys(&g, an, opts, -INFINITY, false);
                nv_two_keys(&g, an, opts, NAN, true);   /* hidden: not in the softmax */
                nv_two_keys(&g, an, opts, 0.5f, false); /* finite: the constant softmax */
                nv_one_key(&g, an, opts);
                nv_window_gqa(&g, an, opts, rng, false, false);
                nv_window_gqa(&g, an, opts, rng, true, false);
                nv_window_gqa(&g, an, opts, rng, false, true);
            }
    }
    unsetenv("ATTN_ARCH");
    tu_group_end(&g);
}

/* ------------------------------- zero terms of visible keys, backward
 * Where a product's zero meets a non-finite operand (0·inf, 0·NaN: NaN in
 * torch), a key the row sees is in the sum and a hidden key is not; a row
 * that sees no key adds nothing. The fused products skip zeros around
 * hidden keys and empty rows; these cases check that the zeros of visible
 * keys still multiply. Nq = Nk = 3, top-left causal (row i sees keys
 * 0..i), D = 8, scale 1, q_i = e0, v = 0.25, dO = 1 unless said. */
enum { ZN = 3, ZD = 8 };

typedef struct {
    float q[ZN * ZD], k[ZN * ZD], v[ZN * ZD], dout[ZN * ZD], o[ZN * ZD], lse[ZN], st[2 * ZN],
        dq[ZN * ZD], dk[ZN * ZD], dv[ZN * ZD];
} zt_case;

static void zt_init(zt_case *z)
{
    memset(z, 0, sizeof *z);
    for (int e = 0; e < ZN * ZD; ++e) z->v[e] = 0.25f, z->dout[e] = 1.0f;
    for (int i = 0; i < ZN; ++i) z->q[i * ZD] = 1.0f;
}

/* Row r of a (ZN, ZD) array: feature x NaN for x in [x0, x1), finite (and
 * equal to want where want is not NaN) elsewhere. */
static bool zt_row(const float *a, int r, int x0, int x1, float want)
{
    for (int x = 0; x < ZD; ++x) {
        const float e = a[r * ZD + x];
        if (x >= x0 && x < x1 ? !isnan(e) : isnan(want) ? !isfinite(e) : e != want) return false;
    }
    return true;
}

/* k_0 = k_2 = 2·e0, k_1 = -inf·e0: the logits of row i are (2, -inf, 2)
 * on the keys it sees, P_i1 = 0, and dP_ij = dO·v_j = 2 = D_i, so every
 * dS_ij = P_ij (dP_ij - D_i) is 0. torch: dQ_i = Σ_j dS_ij k_j holds
 * 0·(-inf) = NaN in feature 0 for rows 1 and 2 (they see key 1), 0
 * elsewhere; row 0 does not see key 1: dQ_0 = 0 (torch's masked key stays
 * in its product: NaN; README). dK_j = Σ_i dS_ij q_i = 0; dV_j = Σ_i P_ij
 * dO_i: 1 + 1 + 0.5, 0, 0.5. */
static void zt_inf_key(tu_group *g, const char *an, attn_sdpa_opts opts)
{
    static zt_case z;
    zt_init(&z);
    z.k[0] = 2.0f, z.k[ZD] = -INFINITY, z.k[2 * ZD] = 2.0f;
    opts.causal = ATTN_CAUSAL_TOP_LEFT;
    opts.scale = 1.0f;
    for (int gv = 0; gv < 3; ++gv) {
        nv_call c = {1, 1, ZN, ZN, ZD, z.q, z.k, z.v, z.dout, opts, z.o, z.lse, z.st, z.dq, z.dk, z.dv};
        if (!tu_check(g, nv_run(&c, (nv_given)gv), "%s: inf key: call failed", an)) continue;
        tu_check(g, zt_row(z.dq, 0, 0, 0, 0.0f) && zt_row(z.dq, 1, 0, 1, 0.0f) && zt_row(z.dq, 2, 0, 1, 0.0f),
                 "%s, %s, k_1 = -inf·e0: dQ rows 1, 2 NaN in feature 0 only, 0 elsewhere, row 0 "
                 "0 (got row 0: %g, row 1: %g %g, row 2: %g)", an, given_names[gv],
                 (double)z.dq[0], (double)z.dq[ZD], (double)z.dq[ZD + 1], (double)z.dq[2 * ZD]);
        tu_check(g, zt_row(z.dk, 0, 0, 0, 0.0f) && zt_row(z.dk, 1, 0, 0, 0.0f) && zt_row(z.dk, 2, 0, 0, 0.0f) &&
                        zt_row(z.dv, 0, 0, 0, 2.5f) && zt_row(z.dv, 1, 0, 0, 0.0f) && zt_row(z.dv, 2, 0, 0, 0.5f),
                 "%s, %s, k_1 = -inf·e0: dK 0, dV (2.5, 0, 0.5) (got dk_1 %g, dv %g %g %g)", an,
                 given_names[gv], (double)z.dk[ZD], (double)z.dv[0], (double)z.dv[ZD], (double)z.dv[2 * ZD]);
    }
}

/* k_0 = 100·e0, k_1 = k_2 = -100·e0: P = (1, 0, 0) on the keys each row
 * sees (exp(-200) = 0 in float32); dO_1[2] = NaN. torch: dV_j = Σ_i P_ij
 * dO_i is NaN in feature 2 for the keys row 1 sees, P_11 = 0 included
 * (0·NaN): dV_0 = (3, 3, NaN, ...), dV_1 = (0, 0, NaN, ...); dV_2 = 0 (row
 * 1 does not see key 2; torch: NaN, its masked key). D_1 = dO_1·O_1 is
 * NaN, so dS_1j is for j = 0, 1: dQ_1 NaN, dK_0 and dK_1 NaN, the rest 0. */
static void zt_nan_dout(tu_group *g, const char *an, attn_sdpa_opts opts)
{
    static zt_case z;
    zt_init(&z);
    z.k[0] = 100.0f, z.k[ZD] = -100.0f, z.k[2 * ZD] = -100.0f;
    z.dout[ZD + 2] = NAN;
    opts.causal = ATTN_CAUSAL_TOP_LEFT;
    opts.scale = 1.0f;
    for (int gv = 0; gv < 3; ++gv) {
        nv_call c = {1, 1, ZN, ZN, ZD, z.q, z.k, z.v, z.dout, opts, z.o, z.lse, z.st, z.dq, z.dk, z.dv};
        if (!tu_check(g, nv_run(&c, (nv_given)gv), "%s: NaN dO: call failed", an)) continue;
        tu_check(g, zt_row(z.dv, 0, 2, 3, 3.0f) && zt_row(z.dv, 1, 2, 3, 0.0f) && zt_row(z.dv, 2, 0, 0, 0.0f),
                 "%s, %s, dO_1[2] NaN: dV_0, dV_1 NaN in feature 2 (P_11 = 0 included), dV_2 0 "
                 "(got %g %g %g)", an, given_names[gv], (double)z.dv[2], (double)z.dv[ZD + 2],
                 (double)z.dv[2 * ZD + 2]);
        tu_check(g, zt_row(z.dq, 0, 0, 0, 0.0f) && zt_row(z.dq, 1, 0, ZD, NAN) && zt_row(z.dq, 2, 0, 0, 0.0f) &&
                        zt_row(z.dk, 0, 0, ZD, NAN) && zt_row(z.dk, 1, 0, ZD, NAN) && zt_row(z.dk, 2, 0, 0, 0.0f),
                 "%s, %s, dO_1[2] NaN: dQ_1, dK_0, dK_1 NaN, the rest 0", an, given_names[gv]);
    }
}

/* One query row, two keys whose logits are both -inf: k_j = -inf·e0
 * (q = e0), or an overflow (q = 1e20·e0, k_j = -1e20·e0); v_0[3] = NaN or
 * 0.25. With a finite sink s the softmax over (-inf, -inf, s) is (0, 0, 1)
 * (torch: cat the sink logit, softmax, drop its column): out = 0·v_0 +
 * 0·v_1, NaN in feature 3 with the NaN, else 0; LSE = s. Backward: dP_j =
 * dO·v_j, D = Σ_j P_j dP_j (NaN with the NaN, else 0), dS_j = P_j (dP_j - D)
 * (NaN, else 0), dQ = Σ_j dS_j k_j (NaN; else 0·(-inf) = NaN in feature 0
 * for the infinite keys, 0 for the overflow), dK_j = dS_j q (NaN, else 0),
 * dV_j = P_j dO = 0, d sink = -P_s D (NaN, else 0). Without a sink, or a
 * sink of -inf, +inf or NaN, the row's softmax is 0/0 (torch: NaN): attn's
 * row that sees no key, out 0, LSE the sink or -inf, gradients 0. */
static void zt_sink_row(tu_group *g, const char *an, attn_sdpa_opts opts)
{
    enum { SK = 2 };
    static const float sinks[5] = {0.5f, 0.0f, -INFINITY, INFINITY, NAN};
    for (int kind = 0; kind < 2; ++kind)
        for (int bad = 0; bad < 2; ++bad)
            for (int sv = 0; sv < 5; ++sv) {
                float q[ZD] = {kind ? 1e20f : 1.0f}, k[SK * ZD] = {0}, v[SK * ZD], dout[ZD], o[ZD],
                      lse, st[2], dq[ZD], dk[SK * ZD], dv[SK * ZD], sink = sinks[sv], dsink;
                for (int j = 0; j < SK; ++j) k[j * ZD] = kind ? -1e20f : -INFINITY;
                for (int e = 0; e < SK * ZD; ++e) v[e] = 0.25f;
                for (int e = 0; e < ZD; ++e) dout[e] = 1.0f;
                if (bad) v[3] = NAN;
                attn_tensor S = attn_tensor_1d(&sink, 1), dS = attn_tensor_1d(&dsink, 1);
                attn_sdpa_opts so = opts;
                so.scale = 1.0f;
                if (sv != 1) so.sinks = &S, so.grad_sinks = &dS;
                const bool soft = isfinite(sink) && sv != 1; /* the row has a softmax */
                char cn[160];
                snprintf(cn, sizeof cn, "%s, logits -inf by %s, v_0[3] %s, sink %s", an,
                         kind ? "overflow" : "k = -inf", bad ? "NaN" : "0.25",
                         sv == 1 ? "none" : sv == 0 ? "0.5" : sv == 2 ? "-inf" : sv == 3 ? "+inf" : "NaN");
                for (int gv = 0; gv < 3; ++gv) {
                    dsink = 7.0f;
                    nv_call c = {1, 1, 1, SK, ZD, q, k, v, dout, so, o, &lse, st, dq, dk, dv};
                    if (!tu_check(g, nv_run(&c, (nv_given)gv), "%s: call failed", cn)) continue;
                    const bool nan_row = soft && bad;
                    const float want_lse = sv == 1 ? -INFINITY : sink;
                    tu_check(g, zt_row(o, 0, 3, nan_row ? 4 : 3, 0.0f) &&
                                    (isnan(want_lse) ? isnan(lse) : lse == want_lse),
                             "%s, %s: out 0%s, LSE %g (got out[3] %g, out[0] %g, lse %g)", cn,
                             given_names[gv], nan_row ? " with NaN in feature 3" : "",
                             (double)want_lse, (double)o[3], (double)o[0], (double)lse);
                    const int dq_nan = nan_row ? ZD : soft && kind == 0 ? 1 : 0;
                    tu_check(g, zt_row(dq, 0, 0, dq_nan, 0.0f) && zt_row(dk, 0, 0, nan_row ? ZD : 0, 0.0f) &&
                                    zt_row(dk, 1, 0, nan_row ? ZD : 0, 0.0f) && zt_row(dv, 0, 0, 0, 0.0f) &&
                                    zt_row(dv, 1, 0, 0, 0.0f) &&
                                    (sv == 1 || (nan_row ? isnan(dsink) : dsink == 0.0f)),
                             "%s, %s: dQ NaN in %d features, dK %s, dV 0, d sink %s (got dq %g %g, "
                             "dk %g, dv %g, dsink %g)", cn, given_names[gv], dq_nan,
                             nan_row ? "NaN" : "0", nan_row ? "NaN" : "0", (double)dq[0],
                             (double)dq[1], (double)dk[0], (double)dv[0], (double)dsink);
                }
            }
}

/* One query row whose two keys a bool mask hides, sink 0.5, dO = (1, NaN,
 * 1, ...): a row that sees no key (README): out 0, LSE = the sink, every
 * gradient 0, the sink's included: D = Σ P·dP over no key is 0, whatever dO
 * (torch keeps its masked keys in that sum, 0·NaN: NaN). */
static void zt_sink_hidden(tu_group *g, const char *an, attn_sdpa_opts opts)
{
    enum { SK = 2 };
    float q[ZD] = {1.0f}, k[SK * ZD] = {0}, v[SK * ZD], dout[ZD], o[ZD], lse, st[2], dq[ZD],
          dk[SK * ZD], dv[SK * ZD], sink = 0.5f, dsink;
    for (int e = 0; e < SK * ZD; ++e) v[e] = 0.25f;
    for (int e = 0; e < ZD; ++e) dout[e] = e == 1 ? NAN : 1.0f;
    uint8_t none[SK] = {0, 0};
    attn_tensor M = attn_tensor_make(none, ATTN_BOOL, 2, (const int64_t[]){1, SK});
    attn_tensor S = attn_tensor_1d(&sink, 1), dS = attn_tensor_1d(&dsink, 1);
    opts.mask[0] = &M;
    opts.sinks = &S, opts.grad_sinks = &dS;
    for (int gv = 0; gv < 3; ++gv) {
        dsink = 7.0f;
        nv_call c = {1, 1, 1, SK, ZD, q, k, v, dout, opts, o, &lse, st, dq, dk, dv};
        if (!tu_check(g, nv_run(&c, (nv_given)gv), "%s: hidden keys, sink: call failed", an)) continue;
        tu_check(g, zt_row(o, 0, 0, 0, 0.0f) && lse == 0.5f && zt_row(dq, 0, 0, 0, 0.0f) &&
                        zt_row(dk, 0, 0, 0, 0.0f) && zt_row(dk, 1, 0, 0, 0.0f) && zt_row(dv, 0, 0, 0, 0.0f) &&
                        zt_row(dv, 1, 0, 0, 0.0f) && dsink == 0.0f,
                 "%s, %s: every key hidden, sink 0.5, NaN in dO: out 0, LSE 0.5, gradients 0 (got "
                 "out %g, lse %g, dq %g, dv %g, dsink %g)", an, given_names[gv], (double)o[0],
                 (double)lse, (double)dq[0], (double)dv[0], (double)dsink);
    }
}

/* One query row, two keys: q = (1, 0.5, 0, ...), k_0 = e1, k_1 = e0, so
 * P = (0.38, 0.62); v_0 = +inf·e0, v_1 = 0; dO = 1. With its O (out_0 =
 * P_0·inf = +inf, D = dO·O = +inf, as torch's Σ P·dP): dS_0 = P_0 (inf -
 * inf) = NaN, dS_1 = P_1 (0 - inf) = -inf, so dQ = NaN, dK_0 NaN, dK_1 =
 * -inf·q = (-inf, -inf, NaN, ...) (torch's autograd: the same), dV = P·dO.
 * With an O that contradicts V (finite: passed from elsewhere), D = dO·O
 * is finite and cannot be trusted: the backward takes torch's D = Σ P·dP
 * (torch never reads O), +inf, and the gradients are the same. */
static void zt_inconsistent_out(tu_group *g, const char *an, attn_sdpa_opts opts)
{
    enum { SK = 2 };
    float q[ZD] = {1.0f, 0.5f}, k[SK * ZD] = {0}, v[SK * ZD] = {0}, dout[ZD], o[ZD], lse, st[2],
          dq[ZD], dk[SK * ZD], dv[SK * ZD];
    k[1] = 1.0f, k[ZD] = 1.0f, v[0] = INFINITY;
    for (int e = 0; e < ZD; ++e) dout[e] = 1.0f;
    attn_tensor Q = attn_tensor_4d(q, 1, 1, 1, ZD), K = attn_tensor_4d(k, 1, 1, SK, ZD),
                V = attn_tensor_4d(v, 1, 1, SK, ZD), dO = attn_tensor_4d(dout, 1, 1, 1, ZD),
                O = attn_tensor_4d(o, 1, 1, 1, ZD), L = attn_tensor_3d(&lse, 1, 1, 1),
                St = attn_tensor_4d(st, 1, 1, 1, 2), dQ = attn_tensor_4d(dq, 1, 1, 1, ZD),
                dK = attn_tensor_4d(dk, 1, 1, SK, ZD), dV = attn_tensor_4d(dv, 1, 1, SK, ZD);
    opts.scale = 1.0f;
    for (int fake = 0; fake < 2; ++fake)
        for (int gv = 0; gv < 2; ++gv) {
            attn_sdpa_opts o2 = opts;
            if (gv == GIVE_STATS) o2.softmax_stats = &St;
            bool ok = attn_sdpa(&Q, &K, &V, &O, &L, NULL, &o2, NULL) == ATTN_OK;
            const float p0 = 1.0f / (1.0f + expf(0.5f)), p1 = 1.0f - p0;
            if (fake)
                for (int e = 0; e < ZD; ++e) o[e] = 0.25f;
            ok = ok && attn_sdpa_backward(&Q, &K, &V, &O, gv == GIVE_LSE ? &L : NULL, &dO, &dQ, &dK,
                                          &dV, &o2, NULL) == ATTN_OK;
            if (!tu_check(g, ok, "%s: O from elsewhere: call failed", an)) continue;
            bool dk1 = true, dv_ok = true;
            for (int x = 0; x < ZD; ++x) {
                const float e = dk[ZD + x];
                dk1 &= x >= 2 ? isnan(e) : e == -INFINITY;
                dv_ok &= fabsf(dv[x] - p0) < 1e-2f && fabsf(dv[ZD + x] - p1) < 1e-2f;
            }
            tu_check(g, zt_row(dq, 0, 0, ZD, NAN) && zt_row(dk, 0, 0, ZD, NAN) && dk1 && dv_ok,
                     "%s, %s, v_0 = +inf·e0, %s O: dQ, dK_0 NaN, dK_1 %s, dV = P·dO (got dk_1 %g "
                     "%g %g, dv %g %g)", an, given_names[gv], fake ? "a finite (contradicting)" : "its",
                     "(-inf, -inf, NaN...)", (double)dk[ZD], (double)dk[ZD + 1],
                     (double)dk[ZD + 2], (double)dv[0], (double)dv[ZD]);
        }
}

/* Finite inputs whose dP overflows: one query row, two keys, q = (1, 0.5,
 * 0, ...), k_0 = e1, k_1 = e0 (P = (0.38, 0.62)), v_0 = s·2^127·(e0 + e1),
 * v_1 = 0, dO = 1, scale 1, a float mask of zeros (and a sink 0.5). dP_0 =
 * dO·v_0 = s·2^128 overflows to s·inf in any order, while O and dO·O stay
 * finite. torch (which never reads O) takes D = Σ P·dP = s·inf: dS_0 =
 * P_0 (s·inf - s·inf) = NaN, dS_1 = P_1 (0 - s·inf) = -s·inf, so dQ NaN,
 * dK_0 NaN, dK_1 = -s·inf·q = (-s·inf, -s·inf, NaN, ...), d mask = (NaN,
 * -s·inf), d sink = -P_sink·D = -s·inf; dV = P·dO finite (torch 1.13's
 * autograd of softmax(q·kᵀ + mask)·v gives exactly these). */
static void zt_overflow_dp(tu_group *g, const char *an, attn_sdpa_opts opts)
{
    enum { SK = 2 };
    for (int sgn = 0; sgn < 2; ++sgn)
        for (int with_sink = 0; with_sink < 2; ++with_sink) {
            const float s = sgn ? -1.0f : 1.0f, big = s * 0x1p127f;
            float q[ZD] = {1.0f, 0.5f}, k[SK * ZD] = {0}, v[SK * ZD] = {0}, dout[ZD], o[ZD], lse,
                  st[2], dq[ZD], dk[SK * ZD], dv[SK * ZD], zeros[SK] = {0}, dmask[SK],
                  sink = 0.5f, dsink = 7.0f;
            k[1] = 1.0f, k[ZD] = 1.0f, v[0] = big, v[1] = big;
            for (int e = 0; e < ZD; ++e) dout[e] = 1.0f;
            attn_tensor M = attn_tensor_2d(zeros, 1, SK), dM = attn_tensor_2d(dmask, 1, SK);
            attn_tensor S = attn_tensor_1d(&sink, 1), dS = attn_tensor_1d(&dsink, 1);
            attn_sdpa_opts so = opts;
            so.scale = 1.0f;
            so.mask[0] = &M, so.grad_mask = &dM;
            if (with_sink) so.sinks = &S, so.grad_sinks = &dS;
            for (int gv = 0; gv < 3; ++gv) {
                nv_call c = {1, 1, 1, SK, ZD, q, k, v, dout, so, o, &lse, st, dq, dk, dv};
                if (!tu_check(g, nv_run(&c, (nv_given)gv), "%s: overflowing dP: call failed", an))
                    continue;
                const float p0 = with_sink ? 0.274f : 0.378f, p1 = with_sink ? 0.452f : 0.622f;
                bool dk1 = true, dv_ok = true;
                for (int x = 0; x < ZD; ++x) {
                    dk1 &= x >= 2 ? isnan(dk[ZD + x]) : dk[ZD + x] == -s * INFINITY;
                    dv_ok &= fabsf(dv[x] - p0) < 1e-2f && fabsf(dv[ZD + x] - p1) < 1e-2f;
                }
                tu_check(g, row_finite(o, 0, ZD) && zt_row(dq, 0, 0, ZD, NAN) &&
                                zt_row(dk, 0, 0, ZD, NAN) && dk1 && dv_ok && isnan(dmask[0]) &&
                                dmask[1] == -s * INFINITY && (!with_sink || dsink == -s * INFINITY),
                         "%s, %s, v_0 = %g·(e0 + e1)%s: dQ, dK_0 NaN, dK_1 (%s, %s, NaN...), "
                         "d mask (NaN, %s)%s, dV = P·dO (got dq %g, dk_0 %g, dk_1 %g %g %g, "
                         "dmask %g %g, dsink %g, dv %g %g)", an, given_names[gv], (double)big,
                         with_sink ? ", sink 0.5" : "", sgn ? "inf" : "-inf", sgn ? "inf" : "-inf",
                         sgn ? "inf" : "-inf", with_sink ? (sgn ? ", d sink inf" : ", d sink -inf") : "",
                         (double)dq[0], (double)dk[0], (double)dk[ZD], (double)dk[ZD + 1],
                         (double)dk[ZD + 2], (double)dmask[0], (double)dmask[1], (double)dsink,
                         (double)dv[0], (double)dv[ZD]);
            }
            if (!with_sink) continue;
            /* the sink's gradient alone (with dV): the same D */
            attn_tensor Q = attn_tensor_4d(q, 1, 1, 1, ZD), K = attn_tensor_4d(k, 1, 1, SK, ZD),
                        V = attn_tensor_4d(v, 1, 1, SK, ZD), dO = attn_tensor_4d(dout, 1, 1, 1, ZD),
                        O = attn_tensor_4d(o, 1, 1, 1, ZD), L = attn_tensor_3d(&lse, 1, 1, 1),
                        dV = attn_tensor_4d(dv, 1, 1, SK, ZD);
            so.grad_mask = NULL, so.grad_sinks = NULL;
            bool ok = attn_sdpa(&Q, &K, &V, &O, &L, NULL, &so, NULL) == ATTN_OK;
            so.grad_sinks = &dS, dsink = 7.0f;
            ok = ok && attn_sdpa_backward(&Q, &K, &V, &O, &L, &dO, NULL, NULL, &dV, &so, NULL) == ATTN_OK;
            tu_check(g, ok && dsink == -s * INFINITY, "%s, v_0 = %g·(e0 + e1), sink 0.5, only dV and "
                     "the sink's gradient: d sink %s (got %g)", an, (double)big,
                     sgn ? "inf" : "-inf", (double)dsink);
        }
}

/* The class of x: NaN, +inf, -inf or finite. */
static int fclass(float x)
{
    return isnan(x) ? 0 : x == INFINITY ? 1 : x == -INFINITY ? 2 : 3;
}

/* Overflowing dP in rows among many: GQA 4/2, Nq 130, Nk 200 (three key
 * tiles, several tasks), bottom-right causal, D 16, N(0, 1) inputs; dO of
 * row 100 of head 1 and row 7 of head 2 is 2^127·e0 and v_j[0] a multiple
 * of 1/4 in [-4, 4] (exact in bfloat16), so dP_ij = 2^127·v_j[0] overflows
 * exactly where |v_j[0]| >= 2, in any order. Every gradient has the class
 * (NaN, ±inf, finite) of the float32 reference with the same inputs (torch's
 * Σ P·dP), those rows' dQ is NaN, the others' finite, and 2 threads give
 * the bits of 1. */
static void zt_overflow_rows(tu_group *g, const char *an, const char *arch, attn_sdpa_opts opts,
                             tu_rng *rng)
{
    enum { OH = 4, OKV = 2, ONQ = 130, ONK = 200, OD = 16 };
    enum { NQO = OH * ONQ * OD, NKO = OKV * ONK * OD };
    static float q[NQO], k[NKO], v[NKO], dout[NQO], o[NQO], lse[OH * ONQ], st[OH * ONQ * 2];
    static float got[2][NQO + 2 * NKO], want[NQO + 2 * NKO];
    fill(q, NQO, rng), fill(k, NKO, rng), fill(v, NKO, rng), fill(dout, NQO, rng);
    for (int j = 0; j < OKV * ONK; ++j) v[j * OD] = (float)((int)(tu_rng_uniform(rng) * 33.0) - 16) / 4.0f;
    const int rows[2][2] = {{1, 100}, {2, 7}};
    for (int r = 0; r < 2; ++r)
        for (int e = 0; e < OD; ++e) dout[(rows[r][0] * ONQ + rows[r][1]) * OD + e] = e ? 0.0f : 0x1p127f;
    opts.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    for (int gv = 0; gv < 3; ++gv) {
        bool ok = true;
        for (int t = 0; t < 3; ++t) { /* the reference, then 1 and 2 threads */
            attn_sdpa_opts o2 = opts;
            float *out = t ? got[t - 1] : want;
            if (!t) o2.precision = ATTN_PRECISION_EXACT, setenv("ATTN_ARCH", "reference", 1);
            o2.num_threads = t ? t : 1;
            nv_call c = {OH, OKV, ONQ, ONK, OD, q, k, v, dout, o2, o, lse, st, out, out + NQO,
                         out + NQO + NKO};
            ok &= nv_run(&c, (nv_given)gv);
            if (!t) setenv("ATTN_ARCH", arch, 1);
        }
        if (!tu_check(g, ok, "%s: overflow rows: call failed", an)) continue;
        int differ = 0, first = -1;
        for (int x = 0; x < NQO + 2 * NKO; ++x)
            if (fclass(got[0][x]) != fclass(want[x]) && differ++ == 0) first = x;
        bool dq_ok = true;
        for (int h = 0; h < OH; ++h)
            for (int i = 0; i < ONQ; ++i) {
                const bool bad = (h == 1 && i == 100) || (h == 2 && i == 7);
                dq_ok &= rows_are(got[0], ONQ, OD, h, i, i + 1, bad ? IS_NAN : IS_FINITE);
            }
        tu_check(g, differ == 0 && dq_ok && memcmp(got[0], got[1], sizeof got[0]) == 0,
                 "%s, %s: overflowing dP in 2 of 520 rows: classes as the reference (%d differ, "
                 "the first at %d: %g vs %g), dQ NaN in those rows only, 2 threads = 1", an,
                 given_names[gv], differ, first, first < 0 ? 0.0 : (double)got[0][first],
                 first < 0 ? 0.0 : (double)want[first]);
    }
}

static void zero_terms_backward(tu_suite *suite)
{
    tu_group g;
    tu_group_begin(&g, suite, "non-finite values in the backward: zero terms of visible keys");
    tu_rng rng;
    tu_rng_seed(&rng, 11);
    for (int a = 0; a < 5; ++a) {
        if (!arch_available(a)) continue;
        setenv("ATTN_ARCH", archs[a], 1);
        /* exact; bfloat16 on the default engine; bfloat16 on the AMX model */
        for (int e = 0; e < (a == 0 ? 1 : 3); ++e) {
            if (e == 2) setenv("ATTN_ENGINE", "amx-model", 1);
            if (e == 2 && strcmp(attn_engine(), "amx-model") != 0) continue;
            const char *engine = e ? attn_engine() : "exact";
            for (int threads = 1; threads <= 2; ++threads) {
                char an[64];
                snprintf(an, sizeof an, "%s %s%s, %d thread%s", archs[a], e ? "bf16 " : "", engine,
                         threads, threads > 1 ? "s" : "");
                attn_sdpa_opts opts = attn_sdpa_opts_default();
                opts.precision = e ? ATTN_PRECISION_BF16 : ATTN_PRECISION_EXACT;
                opts.num_threads = threads;
                zt_inf_key(&g, an, opts);
                zt_nan_dout(&g, an, opts);
                zt_sink_row(&g, an, opts);
                zt_sink_hidden(&g, an, opts);
                zt_inconsistent_out(&g, an, opts);
                zt_overflow_dp(&g, an, opts);
                if (threads == 1) zt_overflow_rows(&g, an, archs[a], opts, &rng); /* runs both */
            }
        }
        unsetenv("ATTN_ENGINE");
    }
    unsetenv("ATTN_ARCH");
    tu_group_end(&g);
}

int main(int argc, char **argv)
{
    tu_options opt;
    if (!tu_parse_options(argc, argv, 7, &opt)) return 2;
    tu_suite suite = {0};
    tu_group g;
    tu_rng rng;
    tu_rng_seed(&rng, opt.seed);
    static float q[B * H * NQ * D], k[B * H * NK * D], v[B * H * NK * D], o[B * H * NQ * D],
        lse[B * H * NQ];
    attn_tensor Q = attn_tensor_4d(q, B, H, NQ, D), K = attn_tensor_4d(k, B, H, NK, D),
                V = attn_tensor_4d(v, B, H, NK, D), O = attn_tensor_4d(o, B, H, NQ, D),
                L = attn_tensor_3d(lse, B, H, NQ);

    for (int pi = 0; pi < 2; ++pi) {
        char name[64];
        snprintf(name, sizeof name, "NaN propagation (%s)", path_names[pi]);
        tu_group_begin(&g, &suite, name);
        attn_sdpa_opts opts = attn_sdpa_opts_default();
        opts.path = paths[pi];
        /* A query row of NaN: every score of that row is NaN. */
        fill(q, B * H * NQ * D, &rng);
        fill(k, B * H * NK * D, &rng);
        fill(v, B * H * NK * D, &rng);
        for (int d = 0; d < D; ++d) q[(0 * NQ + 1) * D + d] = NAN; /* head 0, row 1 */
        q[(1 * NQ + 2) * D + 3] = NAN;                            /* head 1, row 2: one entry */
        attn_status s = attn_sdpa(&Q, &K, &V, &O, &L, NULL, &opts, NULL);
        if (tu_check(&g, s == ATTN_OK, "attn_sdpa failed: %s", attn_status_string(s))) {
            tu_check(&g, row_nan(o, 0 * NQ + 1, D) && isnan(lse[0 * NQ + 1]),
                     "a NaN query row must give NaN output and LSE");
            tu_check(&g, row_nan(o, 1 * NQ + 2, D) && isnan(lse[1 * NQ + 2]),
                     "one NaN entry in a query must give a NaN row");
            tu_check(&g, row_finite(o, 0, D) && row_finite(o, 1 * NQ + 1, D),
                     "rows without NaN inputs must stay finite");
        }
        /* A NaN key that every query sees poisons every row ... */
        fill(q, B * H * NQ * D, &rng);
        for (int d = 0; d < D; ++d) k[(0 * NK + 4) * D + d] = NAN; /* head 0, key 4 */
        s = attn_sdpa(&Q, &K, &V, &O, &L, NULL, &opts, NULL);
        tu_check(&g, s == ATTN_OK && row_nan(o, 0, D) && row_finite(o, NQ, D),
                 "a NaN key must poison its head's rows only");
        /* ... unless causality hides it: top-left, rows 0..3 never see key 4. */
        opts.causal = ATTN_CAUSAL_TOP_LEFT;
        s = attn_sdpa(&Q, &K, &V, &O, &L, NULL, &opts, NULL);
        tu_check(&g, s == ATTN_OK && row_finite(o, 0, D) && row_finite(o, 3, D) && row_nan(o, 4, D),
                 "a NaN key hidden by causality must not reach earlier rows");
        tu_group_end(&g);
    }

    one_rule(&suite, &rng);

    tu_group_begin(&g, &suite, "hostile arguments");
    attn_sdpa_opts opts = attn_sdpa_opts_default();
    attn_error err;
    opts.num_threads = ATTN_MAX_THREADS + 1;
    tu_check(&g, attn_sdpa(&Q, &K, &V, &O, &L, NULL, &opts, &err) == ATTN_ERR_ARG &&
                     strstr(err.message, "num_threads"),
             "num_threads above ATTN_MAX_THREADS must be refused");
    opts = attn_sdpa_opts_default();
    opts.scale = -1.0f;
    tu_check(&g, attn_sdpa(&Q, &K, &V, &O, &L, NULL, &opts, &err) == ATTN_ERR_ARG &&
                     strstr(err.message, "scale"),
             "a negative scale must be refused");
    opts.scale = INFINITY;
    tu_check(&g, attn_sdpa(&Q, &K, &V, &O, &L, NULL, &opts, &err) == ATTN_ERR_ARG,
             "an infinite scale must be refused");
    opts = attn_sdpa_opts_default();
    opts.reserved32 = 1; /* room for future options: refused until it has a meaning */
    tu_check(&g, attn_sdpa(&Q, &K, &V, &O, &L, NULL, &opts, &err) == ATTN_ERR_ARG &&
                     strstr(err.message, "reserved32"),
             "a non-zero reserved32 must be refused");
    /* Keys broadcast (stride 0) to 2^61 rows: the reference's row buffers
     * would overflow size_t. */
    for (int pi = 0; pi < 2; ++pi) {
        opts = attn_sdpa_opts_default();
        opts.path = paths[pi];
        attn_tensor K2 = K, V2 = V;
        K2.shape[2] = V2.shape[2] = (int64_t)1 << 61;
        K2.stride[2] = V2.stride[2] = 0;
        attn_status s = attn_sdpa(&Q, &K2, &V2, &O, &L, NULL, &opts, &err);
        tu_check(&g, s == ATTN_ERR_OVERFLOW || s == ATTN_ERR_ALLOC || s == ATTN_ERR_UNSUPPORTED,
                 "%s: 2^61 broadcast keys must be refused, got %s", path_names[pi],
                 attn_status_string(s));
        /* Feature size 2^57 on broadcast (stride-0) queries and keys: the
         * workspace size products overflow (a known defect). */
        attn_tensor Q3 = Q, K3 = K;
        Q3.shape[3] = K3.shape[3] = (int64_t)1 << 57;
        Q3.stride[3] = K3.stride[3] = 0;
        s = attn_sdpa(&Q3, &K3, &V, &O, &L, NULL, &opts, &err);
        tu_check(&g, s == ATTN_ERR_OVERFLOW || s == ATTN_ERR_UNSUPPORTED,
                 "%s: D = 2^57 broadcast must be refused, got %s", path_names[pi],
                 attn_status_string(s));
    }
    /* No heads at all: an empty call (as torch), forward and backward, on
     * both paths; query heads without key heads stay an error. */
    for (int pi = 0; pi < 2; ++pi) {
        opts = attn_sdpa_opts_default();
        opts.path = paths[pi];
        attn_tensor Q0 = Q, K0 = K, V0 = V, O0 = O, L0 = L;
        Q0.shape[1] = K0.shape[1] = V0.shape[1] = O0.shape[1] = L0.shape[1] = 0;
        attn_tensor dQ0 = Q0, dK0 = K0, dV0 = V0;
        tu_check(&g, attn_sdpa(&Q0, &K0, &V0, &O0, &L0, NULL, &opts, &err) == ATTN_OK &&
                         attn_sdpa_backward(&Q0, &K0, &V0, &O0, &L0, &O0, &dQ0, &dK0, &dV0, &opts,
                                            &err) == ATTN_OK,
                 "%s: zero heads must be an empty call: %s", path_names[pi], err.message);
        tu_check(&g, attn_sdpa(&Q, &K0, &V0, &O, &L, NULL, &opts, &err) == ATTN_ERR_SHAPE,
                 "%s: query heads over zero key heads must be refused", path_names[pi]);
    }
    /* A finite scale whose scores overflow (a known defect): the same
     * answer on both paths, an overflowing logit is +-inf like any other. */
    {
        static float o2[2][B * H * NQ * D], l2[2][B * H * NQ];
        fill(q, B * H * NQ * D, &rng);
        for (int i = 0; i < B * H * NQ * D; ++i) q[i] *= 0.5f;
        fill(k, B * H * NK * D, &rng);
        fill(v, B * H * NK * D, &rng);
        for (int pi = 0; pi < 2; ++pi) {
            opts = attn_sdpa_opts_default();
            opts.path = paths[pi];
            opts.scale = 3e38f;
            attn_tensor Ox = attn_tensor_4d(o2[pi], B, H, NQ, D), Lx = attn_tensor_3d(l2[pi], B, H, NQ);
            tu_check(&g, attn_sdpa(&Q, &K, &V, &Ox, &Lx, NULL, &opts, &err) == ATTN_OK,
                     "%s: scale 3e38 must run", path_names[pi]);
        }
        /* Logits are 3e38·(q·k): rows with some q·k > ~1.1 overflow to +inf
         * (out NaN, LSE +inf, as torch's softmax and logsumexp), the others
         * stay finite; both paths must say the same. */
        bool same = true;
        int overflowed = 0;
        for (int i = 0; i < B * H * NQ; ++i) {
            overflowed += l2[0][i] == INFINITY;
            same &= (isinf(l2[0][i]) && l2[0][i] == l2[1][i]) ||
                    (isfinite(l2[0][i]) && fabsf(l2[0][i] - l2[1][i]) <= 1e-5f * fabsf(l2[0][i]));
            for (int c = 0; c < D; ++c) {
                const float a = o2[0][i * D + c], b = o2[1][i * D + c];
                same &= isinf(l2[0][i]) ? isnan(a) && isnan(b) : fabsf(a - b) <= 1e-4f;
            }
        }
        tu_check(&g, same, "scale 3e38: the reference and fused paths must agree");
        tu_check(&g, overflowed > 0 && overflowed < B * H * NQ,
                 "scale 3e38: the case must overflow some rows and not others (%d of %d)",
                 overflowed, B * H * NQ);
    }
    /* Outputs sharing memory with inputs are refused (a known defect). */
    {
        static float dq[B * H * NQ * D], dk[B * H * NK * D], dv[B * H * NK * D];
        attn_tensor dQ = attn_tensor_4d(dq, B, H, NQ, D), dK = attn_tensor_4d(dk, B, H, NK, D),
                    dV = attn_tensor_4d(dv, B, H, NK, D);
        opts = attn_sdpa_opts_default();
        tu_check(&g, attn_sdpa(&Q, &K, &V, &O, &L, NULL, &opts, &err) == ATTN_OK, "forward");
        tu_check(&g, attn_sdpa_backward(&Q, &K, &V, &O, &L, &O, &Q, &dK, &dV, &opts, &err) ==
                             ATTN_ERR_ARG && strstr(err.message, "grad_query") &&
                         strstr(err.message, "query"),
                 "grad_query sharing memory with query must be refused (got '%s')", err.message);
        tu_check(&g, attn_sdpa_backward(&Q, &K, &V, &O, &L, &O, &dQ, &K, &dV, &opts, &err) ==
                         ATTN_ERR_ARG,
                 "grad_key sharing memory with key must be refused");
        tu_check(&g, attn_sdpa(&Q, &K, &V, &Q, NULL, NULL, &opts, &err) == ATTN_ERR_ARG &&
                         strstr(err.message, "out"),
                 "out sharing memory with query must be refused");
        attn_tensor Lq = attn_tensor_3d(v, B, H, NQ); /* the LSE written over V */
        tu_check(&g, attn_sdpa(&Q, &K, &V, &O, &Lq, NULL, &opts, &err) == ATTN_ERR_ARG,
                 "lse sharing memory with value must be refused");
        tu_check(&g, attn_sdpa_backward(&Q, &K, &V, &O, &L, &O, &dQ, &dK, &dV, &opts, &err) ==
                         ATTN_OK,
                 "disjoint outputs must run");
    }
    /* An output whose rows alias each other. */
    opts = attn_sdpa_opts_default();
    attn_tensor O2 = O;
    O2.stride[2] = 1; /* rows 1 float apart, 8 floats wide */
    tu_check(&g, attn_sdpa(&Q, &K, &V, &O2, NULL, NULL, &opts, &err) == ATTN_ERR_STRIDE &&
                     strstr(err.message, "out"),
             "an output view whose elements alias must be refused");
    attn_tensor bad = attn_tensor_make(q, ATTN_F32, ATTN_MAX_DIMS + 2, (int64_t[10]){1});
    tu_check(&g, bad.ndim == -1, "attn_tensor_make with too many dimensions must be invalid");
    tu_group_end(&g);
    nan_value_underflow(&suite);
    nan_value_backward(&suite, &rng);
    zero_terms_backward(&suite);
    return tu_suite_finish(&suite);
}
