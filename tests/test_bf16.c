/*
 * test_bf16 — ATTN_PRECISION_BF16 (attn/sdpa.h) on every engine this
 * machine runs (bf16_engine.h), and the AMX tile model.
 *
 *   tile model      the plain-C TDPBF16PS against values worked out by hand
 *                   from the SDM's operation (two accumulators per element,
 *                   DAZ, FTZ), and the shape checks the hardware makes.
 *   engine gemm     each engine's pair GEMM over shapes with row, column
 *                   and k tails in every mode: the AMX kernel on the model
 *                   bit for bit against this file's own emulation of the
 *                   SDM order; AVX512_BF16 (and AMX on the hardware) within
 *                   the float32 accumulation bound of a float64 product.
 *   contract        README "bfloat16 products": against the float64 oracle
 *                   (ref64_variants.h) on the same bfloat16 inputs, attn's
 *                   max error <= 2 × the plain bfloat16 baseline's
 *                   (support/bf16_ref.h) + slack, for out, LSE, dQ, dK, dV,
 *                   in the stress regimes (large logits, finfo.min masks,
 *                   hidden NaN keys, underflow, long rows) and with every
 *                   variant (both causal alignments, window, ALiBi, softcap,
 *                   sinks, dropout, GQA, masks).
 *   composition     bitwise the same for 1, 2 and 3 threads; varlen bitwise
 *                   one call per sequence; strided views and bfloat16
 *                   tensors; the backward from softmax_stats; the mode ran
 *                   (bits differ from the exact call's), or with f32 is the
 *                   exact call.
 * It prints which engines ran and which could not ("AMX: not on this CPU").
 * Off x86 the last three groups run the f32 engine only (AMX is x86's).
 */
#include "attn.h"
#include "bf16_ref.h"
#include "ref64.h"
#include "ref64_variants.h"
#include "bf16_judge.h"
#include "testutil.h"

#include "../src/kernels/bf16_engine.h"
#include "../src/kernels/tile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FINFO_MIN (-3.4028234663852886e38)

static void *xcalloc(int64_t n, size_t size)
{
    void *p = calloc((size_t)(n > 0 ? n : 1), size);
    if (!p) abort();
    return p;
}

/* ------------------------------------------------------------ engines */

typedef struct {
    const char *name; /* ATTN_ENGINE value */
    sdpa_engine_id id;
    const sdpa_bf16_engine *eng; /* NULL: f32 */
} engine_entry;

static int engines_here(engine_entry *out)
{
    int n = 0;
#if defined(__x86_64__)
    const sdpa_kernels *kern = sdpa_kernels_for(sdpa_isa_best());
    if (sdpa_engine_runs(SDPA_ENGINE_AMX, kern))
        out[n++] = (engine_entry){"amx", SDPA_ENGINE_AMX, &sdpa_engine_amx};
    else
        printf("AMX: not on this CPU (or the tile state not granted): its kernel runs on the model only\n");
    if (sdpa_engine_runs(SDPA_ENGINE_AVX512BF16, kern))
        out[n++] = (engine_entry){"avx512bf16", SDPA_ENGINE_AVX512BF16, &sdpa_engine_avx512bf16};
    else
        printf("AVX512_BF16: not on this CPU\n");
#else
    printf("AMX, AVX512_BF16: not on this architecture\n");
#endif
    out[n++] = (engine_entry){"amx-model", SDPA_ENGINE_AMX_MODEL, &sdpa_engine_amx_model};
    out[n++] = (engine_entry){"f32", SDPA_ENGINE_F32, NULL};
    return n;
}

/* ---------------------------------------------------------- tile model */

static uint16_t bf(float x)
{
    return (uint16_t)(attn_f32_to_bits(x) >> 16); /* exact for the values used here */
}

static uint32_t pair(float lo, float hi)
{
    return bf(lo) | (uint32_t)bf(hi) << 16;
}

/* One 1 × 1 product of K pairs (rows of A and B given as pairs). */
static float model_dot(const uint32_t *a, const uint32_t *b, int K, float c0)
{
    sdpa_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    cfg.rows[0] = 1, cfg.colsb[0] = 4;          /* C: 1 × 1 fp32 */
    cfg.rows[1] = 1, cfg.colsb[1] = (uint16_t)(4 * K); /* A: 1 × K pairs */
    cfg.rows[2] = (uint8_t)K, cfg.colsb[2] = 4;  /* B: K pair rows × 1 */
    sdpa_tile_model_config(&cfg);
    sdpa_tile_model_load(0, &c0, 4);
    sdpa_tile_model_load(1, a, 4 * K);
    sdpa_tile_model_load(2, b, 4);
    sdpa_tile_model_dpbf16ps(0, 1, 2);
    float c;
    sdpa_tile_model_store(0, &c, 4);
    sdpa_tile_model_release();
    return c;
}

static void group_tile_model(tu_suite *suite)
{
    tu_group g;
    tu_group_begin(&g, suite, "tile model");
    const unsigned long faults0 = sdpa_tile_model_faults();
    const float u = ldexpf(1.0f, -24); /* half an ulp of 1 */
    /* Even products go to t0, odd ones to t1: t0 = fl(1 + u) = 1 (a tie,
     * to even), t1 = u + u = 2u, C = 1 + 2u. One running sum in k order
     * (the intrinsics guide's shorter text) would give 1. */
    {
        const uint32_t a[2] = {pair(1.0f, u), pair(u, u)}, b[2] = {pair(1.0f, 1.0f), pair(1.0f, 1.0f)};
        const float c = model_dot(a, b, 2, 0.0f);
        tu_check(&g, c == 1.0f + 2 * u, "even/odd accumulators: got %a, want %a", (double)c,
                 (double)(1.0f + 2 * u));
    }
    /* t0 + t1 is formed before it meets C: C = 1, t0 = t1 = u: fl(1 + 2u). */
    {
        const uint32_t a[1] = {pair(u, u)}, b[1] = {pair(1.0f, 1.0f)};
        const float c = model_dot(a, b, 1, 1.0f);
        tu_check(&g, c == 1.0f + 2 * u, "horizontal sum first: got %a", (double)c);
    }
    /* DAZ: a subnormal bfloat16 operand counts as 0 (2^-130 · 2^100 would
     * be 2^-30). */
    {
        const uint32_t a[1] = {0x0008u}, b[1] = {pair(ldexpf(1.0f, 100), 0.0f)};
        const float c = model_dot(a, b, 1, 0.0f);
        tu_check(&g, c == 0.0f, "DAZ: got %a, want 0", (double)c);
    }
    /* FTZ: 2^-70 · -2^-70 = -2^-140 is subnormal in float32: t0 = -0, and
     * -0 + t1 (+0) = +0. */
    {
        const uint32_t a[1] = {pair(ldexpf(1.0f, -70), 0.0f)}, b[1] = {pair(-ldexpf(1.0f, -70), 0.0f)};
        const float c = model_dot(a, b, 1, 0.0f);
        tu_check(&g, c == 0.0f && !signbit(c), "FTZ: got %a, want +0", (double)c);
    }
    /* NaN and infinity propagate: inf · 0 is NaN. */
    {
        const uint32_t a[1] = {pair(INFINITY, 1.0f)}, b[1] = {pair(0.0f, 1.0f)};
        tu_check(&g, isnan(model_dot(a, b, 1, 0.0f)), "inf·0 is not NaN");
    }
    tu_check(&g, sdpa_tile_model_faults() == faults0, "a correct sequence counted faults");
    /* Shapes the hardware rejects: A.colsb / 4 != B.rows. C is left alone. */
    {
        sdpa_tilecfg cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.palette_id = 1;
        cfg.rows[0] = 2, cfg.colsb[0] = 8;
        cfg.rows[1] = 2, cfg.colsb[1] = 8;
        cfg.rows[2] = 3, cfg.colsb[2] = 8;
        sdpa_tile_model_config(&cfg);
        const float c0[4] = {1, 2, 3, 4};
        const uint32_t ab[6] = {pair(1, 1), pair(1, 1), pair(1, 1), pair(1, 1), pair(1, 1), pair(1, 1)};
        sdpa_tile_model_load(0, c0, 8);
        sdpa_tile_model_load(1, ab, 8);
        sdpa_tile_model_load(2, ab, 8);
        sdpa_tile_model_dpbf16ps(0, 1, 2);
        float c[4] = {0};
        sdpa_tile_model_store(0, c, 8);
        tu_check(&g, sdpa_tile_model_faults() == faults0 + 1 && memcmp(c, c0, sizeof c) == 0,
                 "a shape mismatch was not counted, or changed C");
        /* a store writes configured rows and bytes only */
        float big[3][4] = {{9, 9, 9, 9}, {9, 9, 9, 9}, {9, 9, 9, 9}};
        sdpa_tile_model_store(0, big, 16);
        tu_check(&g, big[0][2] == 9 && big[2][0] == 9 && big[1][1] == 4,
                 "a store wrote outside its rows × colsb");
        sdpa_tile_model_release();
    }
    tu_group_end(&g);
}

/* ------------------------------------------------------- engine gemms */

/* The SDM's TDPBF16PS order on the AMX kernel's blocking (16 pairs per
 * instruction), for normal values (no DAZ or FTZ case arises). */
static float sdm_element(const uint32_t *a, const uint32_t *b, int64_t ldb, int64_t kp, float c)
{
    for (int64_t l0 = 0; l0 < kp; l0 += 16) {
        float t0 = 0.0f, t1 = 0.0f;
        for (int64_t l = l0; l < kp && l < l0 + 16; ++l) {
            t0 = fmaf(attn_bf16_to_f32((uint16_t)a[l]), attn_bf16_to_f32((uint16_t)b[l * ldb]), t0);
            t1 = fmaf(attn_bf16_to_f32((uint16_t)(a[l] >> 16)),
                      attn_bf16_to_f32((uint16_t)(b[l * ldb] >> 16)), t1);
        }
        c = c + (t0 + t1);
    }
    return c;
}

static uint32_t random_pair(tu_rng *r)
{
    return attn_f32_to_bf16((float)tu_rng_normal(r)) |
           (uint32_t)attn_f32_to_bf16((float)tu_rng_normal(r)) << 16;
}

static void group_engine_gemm(tu_suite *suite, const engine_entry *eng, int neng, uint64_t seed)
{
    tu_group g;
    tu_group_begin(&g, suite, "engine gemm");
    tu_rng rng;
    tu_rng_seed(&rng, tu_mix(seed ^ 0x6E77ull));
    static const int64_t ms[] = {1, 5, 16, 17, 31, 32, 33, 47};
    static const int64_t ns[] = {32, 64, 96};
    static const int64_t kps[] = {0, 1, 15, 16, 17, 32, 33, 64};
    const unsigned long faults0 = sdpa_tile_model_faults();
    for (int x = 0; x < neng; ++x) {
        if (!eng[x].eng) continue;
        int64_t cases = 0, bad = 0;
        for (size_t mi = 0; mi < sizeof ms / sizeof *ms; ++mi)
            for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ++ni)
                for (size_t ki = 0; ki < sizeof kps / sizeof *kps; ++ki)
                    for (int mode = 0; mode < 3; ++mode) {
                        const int64_t m = ms[mi], n = ns[ni], kp = kps[ki];
                        const int64_t a_rs = kp + 3, ldb = n + 16, ldc = n + 8;
                        uint32_t *a = xcalloc(m * a_rs + 1, 4), *b = xcalloc(kp * ldb + 1, 4);
                        float *c = xcalloc(m * ldc, 4), *c0 = xcalloc(m * ldc, 4);
                        float *scale = xcalloc(m, 4);
                        for (int64_t e = 0; e < m * a_rs; ++e) a[e] = random_pair(&rng);
                        for (int64_t e = 0; e < kp * ldb; ++e) b[e] = random_pair(&rng);
                        for (int64_t e = 0; e < m * ldc; ++e) c0[e] = c[e] = (float)tu_rng_normal(&rng);
                        for (int64_t r = 0; r < m; ++r) scale[r] = (float)tu_rng_range(&rng, 0.1, 1.0);
                        eng[x].eng->gemm(m, n, kp, a, a_rs, b, ldb, c, ldc, scale, (sdpa_gemm_mode)mode);
                        for (int64_t r = 0; r < m; ++r)
                            for (int64_t j = 0; j < ldc; ++j) {
                                const float was = c0[r * ldc + j], got = c[r * ldc + j];
                                if (j >= n) { /* past n: untouched */
                                    bad += memcmp(&was, &got, 4) != 0;
                                    continue;
                                }
                                const float init = mode == SDPA_GEMM_SET ? 0.0f
                                                   : mode == SDPA_GEMM_ADD ? was : was * scale[r];
                                double exact = mode == SDPA_GEMM_SET ? 0.0 : (double)init, mag = fabs(exact);
                                for (int64_t l = 0; l < kp; ++l)
                                    for (int h = 0; h < 2; ++h) {
                                        const double pa = attn_bf16_to_f32((uint16_t)(a[r * a_rs + l] >> (16 * h)));
                                        const double pb = attn_bf16_to_f32((uint16_t)(b[l * ldb + j] >> (16 * h)));
                                        exact += pa * pb, mag += fabs(pa * pb);
                                    }
                                bool ok;
                                if (eng[x].id == SDPA_ENGINE_AMX_MODEL) {
                                    const float want = sdm_element(a + r * a_rs, b + j, ldb, kp, init);
                                    ok = memcmp(&want, &got, 4) == 0;
                                } else { /* float32 accumulation of 2kp + 1 terms */
                                    ok = fabs((double)got - exact) <= (2.0 * kp + 2) * 0x1p-24 * mag;
                                }
                                bad += !ok;
                            }
                        ++cases;
                        free(a), free(b), free(c), free(c0), free(scale);
                    }
        tu_check(&g, bad == 0, "%s: %lld wrong elements in %lld products", eng[x].name,
                 (long long)bad, (long long)cases);
        printf("engine gemm: %s ran %lld products (%s)\n", eng[x].name, (long long)cases,
               eng[x].id == SDPA_ENGINE_AMX_MODEL ? "bit for bit, the SDM order" : "within the bound");
    }
    tu_check(&g, sdpa_tile_model_faults() == faults0, "the AMX kernel made %lu shape faults",
             sdpa_tile_model_faults() - faults0);
    tu_group_end(&g);
}

/* ------------------------------------------------------- fused softmax */

static bool same_value(float a, float b)
{
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0;
}

/* The bfloat16 forward's fused pieces, bitwise the unfused ones they
 * replace: an engine's gemm_max is its gemm plus the rows' lane maxima in
 * column order (vmax = vmax > x ? vmax : x); softmax_online_p16 stores the
 * statistics softmax_online computes and P as sdpa_pairs_narrow rounds
 * softmax_online's floats, on every path (every column, a prefix, bounds,
 * softcap and bias), with NaN and infinite scores and rows that saw
 * nothing. */
static void group_fused(tu_suite *suite, const engine_entry *eng, int neng, uint64_t seed)
{
    tu_group g;
    tu_group_begin(&g, suite, "fused softmax");
    tu_rng rng;
    tu_rng_seed(&rng, tu_mix(seed ^ 0xF05Eull));
    for (int x = 0; x < neng; ++x) {
        if (!eng[x].eng || !eng[x].eng->gemm_max) continue;
        int64_t bad = 0, cases = 0;
        for (int trial = 0; trial < 40; ++trial) {
            const int64_t m = tu_rng_int(&rng, 1, 40), n = 32 * tu_rng_int(&rng, 1, 8);
            const int64_t kp = tu_rng_int(&rng, 0, 40), ldc = n + 16;
            uint32_t *a = xcalloc(m * kp + 1, 4), *b = xcalloc(kp * n + 1, 4);
            float *c = xcalloc(m * ldc, 4), *want = xcalloc(m * ldc, 4);
            float *vmax = xcalloc(m * SDPA_MAX_VW, 4);
            for (int64_t e = 0; e < m * kp; ++e) a[e] = random_pair(&rng);
            for (int64_t e = 0; e < kp * n; ++e)
                b[e] = tu_rng_int(&rng, 0, 50) == 0 ? 0x7fc07f80u : random_pair(&rng); /* NaN, inf */
            eng[x].eng->gemm(m, n, kp, a, kp, b, n, want, ldc, NULL, SDPA_GEMM_SET);
            eng[x].eng->gemm_max(m, n, kp, a, kp, b, n, c, ldc, vmax);
            for (int64_t r = 0; r < m; ++r) {
                for (int64_t j = 0; j < n; ++j) bad += !same_value(c[r * ldc + j], want[r * ldc + j]);
                for (int l = 0; l < SDPA_MAX_VW; ++l) {
                    float mx = -INFINITY;
                    for (int64_t j = l; j < n; j += SDPA_MAX_VW) {
                        const float v = want[r * ldc + j];
                        mx = mx > v ? mx : v;
                    }
                    bad += !same_value(vmax[r * SDPA_MAX_VW + l], mx);
                }
            }
            ++cases;
            free(a), free(b), free(c), free(want), free(vmax);
        }
        tu_check(&g, bad == 0, "%s gemm_max: %lld wrong values in %lld products", eng[x].name,
                 (long long)bad, (long long)cases);
    }
    { /* Kᵀ of float32 keys as pairs (the forward's packer): any n, D, strides */
        int64_t wrong = 0;
        for (int trial = 0; trial < 60; ++trial) {
            const int64_t n = tu_rng_int(&rng, 1, 128), D = tu_rng_int(&rng, 1, 140);
            const int64_t rs = D + tu_rng_int(&rng, 0, 5), ld = 32 * tu_rng_int(&rng, (n + 31) / 32, 5);
            const int64_t kp = (D + 1) / 2;
            float *k = xcalloc(n * rs, 4);
            uint32_t *got = xcalloc(kp * ld, 4);
            for (int64_t e = 0; e < n * rs; ++e) k[e] = (float)tu_rng_normal(&rng);
            memset(got, 0xEE, (size_t)(kp * ld) * 4);
            sdpa_pairs_kt(ATTN_F32, k, rs, 1, n, D, got, ld);
            for (int64_t l = 0; l < kp; ++l)
                for (int64_t j = 0; j < ld; ++j) {
                    const uint32_t want =
                        j >= n ? 0u
                               : attn_f32_to_bf16(k[j * rs + 2 * l]) |
                                     (2 * l + 1 < D ? (uint32_t)attn_f32_to_bf16(k[j * rs + 2 * l + 1]) << 16 : 0u);
                    wrong += got[l * ld + j] != want;
                }
            free(k), free(got);
        }
        tu_check(&g, wrong == 0, "sdpa_pairs_kt of float32 keys: %lld wrong pairs", (long long)wrong);
    }
#if defined(__x86_64__)
    const sdpa_kernels *kern = sdpa_kernels_for(sdpa_isa_best());
    if (!kern->softmax_online_p16 || !sdpa_engine_runs(SDPA_ENGINE_AVX512BF16, kern)) {
        printf("softmax_online_p16: not on this CPU\n");
        tu_group_end(&g);
        return;
    }
    enum { M = 40, LD = 192 };
    static float s0[M * LD], fs[M * LD], us[M * LD], bias[M * LD];
    static uint16_t fp[M * LD], up[M * LD];
    float st[2][3][M]; /* [fused, unfused][rowmax, rowsum, alpha][row] */
    int32_t start[M], end[M];
    int64_t bad = 0, cases = 0;
    for (int64_t c0 = 0; c0 <= 32; c0 += 32)
        for (int64_t w = 32; w <= SDPA_KEY_TILE; w += 32)
            for (int trial = 0; trial < 30; ++trial) {
                const int64_t m = tu_rng_int(&rng, 1, M), n = c0 + w;
                const int kind = trial % 5; /* every column, a prefix, bounds, softcap, bias */
                for (int i = 0; i < M * LD; ++i) {
                    const double u = tu_rng_uniform(&rng);
                    s0[i] = u < 0.01 ? NAN : u < 0.02 ? INFINITY : u < 0.03 ? -INFINITY
                                                       : (float)(u * 60.0 - 30.0);
                    bias[i] = tu_rng_int(&rng, 0, 9) == 0 ? -INFINITY : (float)tu_rng_normal(&rng);
                }
                for (int64_t r = 0; r < m; ++r) {
                    start[r] = (int32_t)(kind == 0 || kind == 1 ? c0 : tu_rng_int(&rng, c0, n));
                    end[r] = (int32_t)(kind == 0 ? n : tu_rng_int(&rng, start[r], n));
                    st[0][0][r] = tu_rng_int(&rng, 0, 3) == 0 ? -INFINITY : (float)tu_rng_uniform(&rng);
                    st[0][1][r] = st[0][0][r] == -INFINITY ? 0.0f : 1.0f;
                }
                memcpy(st[1], st[0], sizeof st[0]);
                memcpy(fs, s0, sizeof s0);
                memcpy(us, s0, sizeof s0);
                memset(fp, 0xAB, sizeof fp);
                memset(up, 0xCD, sizeof up);
                const sdpa_logits lg = {.scale = 0.125f,
                                        .softcap = kind == 3 ? 5.0f : 0.0f,
                                        .inv_softcap = kind == 3 ? 0.2f : 0.0f,
                                        .start = start,
                                        .end = end,
                                        .bias = kind == 4 ? bias : NULL,
                                        .ldbias = LD};
                kern->softmax_online_p16(m, c0, n, &lg, fs, LD, fp, st[0][0], st[0][1], st[0][2],
                                         NULL);
                kern->softmax_online(m, c0, n, &lg, us, LD, st[1][0], st[1][1], st[1][2], NULL);
                for (int64_t r = 0; r < m; ++r) {
                    sdpa_pairs_narrow(us + r * LD + c0, n - c0, up + r * LD + c0);
                    bad += memcmp(fp + r * LD + c0, up + r * LD + c0, (size_t)(n - c0) * 2) != 0;
                    if (c0 > 0) bad += fp[r * LD + c0 - 1] != 0xABAB; /* nothing before c0 */
                    for (int q = 0; q < 3; ++q) bad += !same_value(st[0][q][r], st[1][q][r]);
                }
                ++cases;
            }
    tu_check(&g, bad == 0, "softmax_online_p16: %lld differences in %lld tiles", (long long)bad,
             (long long)cases);
#endif
    tu_group_end(&g);
}

/* ----------------------------------------------------------- contract */

typedef struct {
    const char *name;
    int64_t B, Hq, Hkv, Nq, Nk, D, Dv;
    attn_causal causal;
    int64_t wl, wr;  /* window, when wl or wr != -2 */
    double qmag;     /* Q's scale: logit size */
    int mask;        /* 0 none, 1 finfo.min key padding, 2 random bool, 3 bool key padding + NaN keys */
    bool gap;        /* every third row's Q × 40: logits far past exp's range */
    bool alibi, softcap, sinks;
    float dropout;
} bcase;

static const bcase k_cases[] = {
    {"GQA", 2, 4, 2, 70, 133, 64, 48, ATTN_CAUSAL_NONE, -2, -2, 1, 0, false, false, false, false, 0},
    {"causal top-left", 1, 2, 2, 150, 150, 32, 32, ATTN_CAUSAL_TOP_LEFT, -2, -2, 1, 0, false, false, false, false, 0},
    {"causal bottom-right + window", 1, 2, 1, 37, 301, 64, 64, ATTN_CAUSAL_BOTTOM_RIGHT, 64, 0, 1, 0, false, false, false, false, 0},
    {"large logits", 1, 2, 2, 64, 200, 64, 64, ATTN_CAUSAL_NONE, -2, -2, 8, 0, false, false, false, false, 0},
    {"finfo.min mask", 2, 2, 2, 40, 160, 32, 32, ATTN_CAUSAL_NONE, -2, -2, 1, 1, false, false, false, false, 0},
    {"random bool mask", 1, 2, 2, 50, 90, 16, 24, ATTN_CAUSAL_NONE, -2, -2, 1, 2, false, false, false, false, 0},
    {"hidden NaN keys", 2, 2, 1, 33, 140, 64, 64, ATTN_CAUSAL_NONE, -2, -2, 1, 3, false, false, false, false, 0},
    {"underflow", 1, 2, 2, 60, 130, 64, 64, ATTN_CAUSAL_NONE, -2, -2, 1, 0, true, false, false, false, 0},
    {"long rows", 1, 1, 1, 40, 1500, 64, 64, ATTN_CAUSAL_NONE, -2, -2, 2, 0, false, false, false, false, 0},
    {"ALiBi softcap sinks", 1, 4, 2, 45, 97, 32, 32, ATTN_CAUSAL_BOTTOM_RIGHT, -2, -2, 3, 0, false, true, true, true, 0},
    {"dropout", 1, 2, 1, 30, 70, 32, 40, ATTN_CAUSAL_NONE, -2, -2, 1, 0, false, false, false, false, 0.2f},
    {"odd D", 1, 2, 2, 29, 83, 17, 9, ATTN_CAUSAL_TOP_LEFT, -2, -2, 1, 0, false, false, false, false, 0},
    /* more row blocks than a task holds: the key tiles (Kᵀ and V pairs) are
     * packed once per call and shared by the tasks, NaN values included */
    {"shared key tiles, NaN keys", 1, 4, 2, 700, 301, 64, 64, ATTN_CAUSAL_NONE, -2, -2, 1, 3, false, false, false, false, 0},
    {"shared key tiles, window", 1, 2, 1, 700, 700, 32, 32, ATTN_CAUSAL_TOP_LEFT, 128, 0, 1, 0, false, false, false, false, 0},
};
enum { CASE_SHARED_TILES = 12 }; /* k_cases' first shape with shared key tiles */

/* Inputs of a case: float64 arrays of bfloat16 values, and their float32
 * copies for the library. */
typedef struct {
    const bcase *c;
    double *q, *k, *v, *dout, *bias, *alibi, *sinks;
    float *qf, *kf, *vf, *df, *alibif, *sinksf;
    tu_tensor mask;
    bool has_mask;
    uint8_t *keep;
    rv_problem rp;
} bdata;

static float *to_f32(const double *x, int64_t n)
{
    float *f = xcalloc(n, sizeof(float));
    for (int64_t e = 0; e < n; ++e) f[e] = (float)x[e];
    return f;
}

static attn_sdpa_opts case_opts(const bdata *d, attn_tensor *alibi, attn_tensor *sinks)
{
    const bcase *c = d->c;
    attn_sdpa_opts o = attn_sdpa_opts_default();
    o.precision = ATTN_PRECISION_BF16;
    o.causal = c->causal;
    o.num_threads = 2;
    if (c->wl != -2 || c->wr != -2) o.window = (attn_window){true, c->wl, c->wr};
    if (d->has_mask) o.mask[0] = &d->mask.view;
    if (c->alibi) {
        *alibi = attn_tensor_make(d->alibif, ATTN_F32, 1, (int64_t[]){c->Hq});
        o.alibi_slopes = alibi;
    }
    if (c->softcap) o.softcap = 20.0f;
    if (c->sinks) {
        *sinks = attn_tensor_make(d->sinksf, ATTN_F32, 1, (int64_t[]){c->Hq});
        o.sinks = sinks;
    }
    o.dropout_p = c->dropout;
    o.dropout_seed = 77, o.dropout_offset = 5;
    return o;
}

/* The library's dropout keep mask for the case's shape: with Q = 0 every
 * visible probability is 1/Nk, and with V = the identity (Dv = Nk) out
 * holds each kept key's 1/(Nk(1-p)) and 0 for a dropped one. */
static void extract_keep(const bcase *c, uint8_t *keep)
{
    const int64_t nq = c->B * c->Hq * c->Nq, Nk = c->Nk;
    float *q = xcalloc(nq * 8, 4), *k = xcalloc(c->B * c->Hkv * Nk * 8, 4);
    float *v = xcalloc(c->B * c->Hkv * Nk * Nk, 4), *o = xcalloc(nq * Nk, 4);
    for (int64_t bh = 0; bh < c->B * c->Hkv; ++bh)
        for (int64_t j = 0; j < Nk; ++j) v[(bh * Nk + j) * Nk + j] = 1.0f;
    attn_tensor Q = attn_tensor_make(q, ATTN_F32, 4, (int64_t[]){c->B, c->Hq, c->Nq, 8});
    attn_tensor K = attn_tensor_make(k, ATTN_F32, 4, (int64_t[]){c->B, c->Hkv, Nk, 8});
    attn_tensor V = attn_tensor_make(v, ATTN_F32, 4, (int64_t[]){c->B, c->Hkv, Nk, Nk});
    attn_tensor O = attn_tensor_make(o, ATTN_F32, 4, (int64_t[]){c->B, c->Hq, c->Nq, Nk});
    attn_sdpa_opts opts = attn_sdpa_opts_default();
    opts.dropout_p = c->dropout, opts.dropout_seed = 77, opts.dropout_offset = 5;
    attn_error err;
    if (attn_sdpa(&Q, &K, &V, &O, NULL, NULL, &opts, &err) != ATTN_OK) abort();
    for (int64_t e = 0; e < nq * Nk; ++e) keep[e] = o[e] != 0.0f;
    free(q), free(k), free(v), free(o);
}

static void bdata_make(bdata *d, const bcase *c, uint64_t seed)
{
    memset(d, 0, sizeof *d);
    d->c = c;
    tu_rng r;
    tu_rng_seed(&r, tu_mix(seed));
    const int64_t nq = c->B * c->Hq * c->Nq * c->D, nk = c->B * c->Hkv * c->Nk * c->D;
    const int64_t nv = c->B * c->Hkv * c->Nk * c->Dv, no = c->B * c->Hq * c->Nq * c->Dv;
    d->q = xcalloc(nq, 8), d->k = xcalloc(nk, 8), d->v = xcalloc(nv, 8), d->dout = xcalloc(no, 8);
    for (int64_t e = 0; e < nq; ++e) d->q[e] = bf16_round(c->qmag * tu_rng_normal(&r));
    for (int64_t e = 0; e < nk; ++e) d->k[e] = bf16_round(tu_rng_normal(&r));
    for (int64_t e = 0; e < nv; ++e) d->v[e] = bf16_round(tu_rng_normal(&r));
    for (int64_t e = 0; e < no; ++e) d->dout[e] = bf16_round(tu_rng_normal(&r));
    if (c->gap)
        for (int64_t row = 1; row < c->B * c->Hq * c->Nq; row += 3)
            for (int64_t e = 0; e < c->D; ++e) d->q[row * c->D + e] = bf16_round(d->q[row * c->D + e] * 40);
    const int64_t nsc = c->B * c->Hq * c->Nq * c->Nk;
    if (c->mask) {
        d->has_mask = true;
        const int64_t shape[4] = {c->B, 1, c->mask == 2 ? c->Nq : 1, c->Nk};
        const tu_layout lay = tu_layout_contiguous(4);
        tu_tensor_alloc(&d->mask, c->mask == 1 ? ATTN_F32 : ATTN_BOOL, 4, shape, &lay);
        for (int64_t b = 0; b < c->B; ++b)
            for (int64_t i = 0; i < shape[2]; ++i)
                for (int64_t j = 0; j < c->Nk; ++j) {
                    const int64_t e = (b * shape[2] + i) * c->Nk + j;
                    if (c->mask == 1) tu_set(&d->mask.view, e, j >= c->Nk - 30 - 20 * b ? FINFO_MIN : 0.0);
                    else if (c->mask == 2) tu_set(&d->mask.view, e, tu_rng_chance(&r, 0.8));
                    else tu_set(&d->mask.view, e, j < c->Nk - 10 - 7 * b);
                }
        d->bias = xcalloc(nsc, 8);
        ref64_add_mask(d->bias, c->B, c->Hq, c->Nq, c->Nk, &d->mask.view);
        if (c->mask == 3) /* the padded keys (hidden from every row) hold NaN */
            for (int64_t b = 0; b < c->B; ++b)
                for (int64_t hk = 0; hk < c->Hkv; ++hk)
                    for (int64_t j = c->Nk - 10 - 7 * b; j < c->Nk; ++j) {
                        const int64_t kr = (b * c->Hkv + hk) * c->Nk + j;
                        for (int64_t e = 0; e < c->D; ++e) d->k[kr * c->D + e] = NAN;
                        for (int64_t e = 0; e < c->Dv; ++e) d->v[kr * c->Dv + e] = NAN;
                    }
    }
    if (c->alibi) {
        d->alibi = xcalloc(c->B * c->Hq, 8);
        double *sl = xcalloc(c->Hq, 8);
        rv_alibi_slopes64(c->Hq, sl);
        for (int64_t h = 0; h < c->Hq; ++h) sl[h] = (float)sl[h];
        for (int64_t e = 0; e < c->B * c->Hq; ++e) d->alibi[e] = sl[e % c->Hq];
        d->alibif = to_f32(sl, c->Hq);
        free(sl);
    }
    if (c->sinks) {
        d->sinks = xcalloc(c->Hq, 8);
        for (int64_t h = 0; h < c->Hq; ++h) d->sinks[h] = (float)tu_rng_range(&r, -1, 3);
        d->sinksf = to_f32(d->sinks, c->Hq);
    }
    if (c->dropout > 0) {
        d->keep = xcalloc(nsc, 1);
        extract_keep(c, d->keep);
    }
    d->qf = to_f32(d->q, nq), d->kf = to_f32(d->k, nk), d->vf = to_f32(d->v, nv);
    d->df = to_f32(d->dout, no);
    rv_problem *p = &d->rp;
    p->B = c->B, p->Hq = c->Hq, p->Hkv = c->Hkv, p->Nq = c->Nq, p->Nk = c->Nk, p->D = c->D;
    p->Dv = c->Dv;
    p->scale = (double)(1.0f / sqrtf((float)c->D));
    p->causal = c->causal;
    if (c->wl != -2 || c->wr != -2) p->window = (attn_window){true, c->wl, c->wr};
    p->bias = d->bias;
    p->softcap = c->softcap ? 20.0 : 0.0;
    p->alibi = d->alibi;
    p->sinks = d->sinks;
    p->dropout_p = c->dropout;
    p->keep = d->keep;
}

static void bdata_free(bdata *d)
{
    free(d->q), free(d->k), free(d->v), free(d->dout), free(d->bias), free(d->alibi);
    free(d->sinks), free(d->qf), free(d->kf), free(d->vf), free(d->df), free(d->alibif);
    free(d->sinksf), free(d->keep);
    if (d->has_mask) tu_tensor_free(&d->mask);
}

/* Outputs of one library run. */
typedef struct {
    float *o, *lse, *dq, *dk, *dv;
} bout;

static void bout_alloc(bout *r, const bcase *c)
{
    r->o = xcalloc(c->B * c->Hq * c->Nq * c->Dv, 4);
    r->lse = xcalloc(c->B * c->Hq * c->Nq, 4);
    r->dq = xcalloc(c->B * c->Hq * c->Nq * c->D, 4);
    r->dk = xcalloc(c->B * c->Hkv * c->Nk * c->D, 4);
    r->dv = xcalloc(c->B * c->Hkv * c->Nk * c->Dv, 4);
}

static void bout_free(bout *r)
{
    free(r->o), free(r->lse), free(r->dq), free(r->dk), free(r->dv);
}

/* Forward then backward (from out and lse) on engine `engine`. */
static bool run_attn(const bdata *d, const char *engine, attn_precision prec, int threads,
                     bout *r, attn_error *err)
{
    const bcase *c = d->c;
    setenv("ATTN_ENGINE", engine, 1);
    attn_tensor al, sk;
    attn_sdpa_opts o = case_opts(d, &al, &sk);
    o.precision = prec;
    o.num_threads = threads;
    attn_tensor Q = attn_tensor_make(d->qf, ATTN_F32, 4, (int64_t[]){c->B, c->Hq, c->Nq, c->D});
    attn_tensor K = attn_tensor_make(d->kf, ATTN_F32, 4, (int64_t[]){c->B, c->Hkv, c->Nk, c->D});
    attn_tensor V = attn_tensor_make(d->vf, ATTN_F32, 4, (int64_t[]){c->B, c->Hkv, c->Nk, c->Dv});
    attn_tensor dO = attn_tensor_make(d->df, ATTN_F32, 4, (int64_t[]){c->B, c->Hq, c->Nq, c->Dv});
    attn_tensor O = attn_tensor_make(r->o, ATTN_F32, 4, (int64_t[]){c->B, c->Hq, c->Nq, c->Dv});
    attn_tensor L = attn_tensor_make(r->lse, ATTN_F32, 3, (int64_t[]){c->B, c->Hq, c->Nq});
    attn_tensor dQ = attn_tensor_make(r->dq, ATTN_F32, 4, (int64_t[]){c->B, c->Hq, c->Nq, c->D});
    attn_tensor dK = attn_tensor_make(r->dk, ATTN_F32, 4, (int64_t[]){c->B, c->Hkv, c->Nk, c->D});
    attn_tensor dV = attn_tensor_make(r->dv, ATTN_F32, 4, (int64_t[]){c->B, c->Hkv, c->Nk, c->Dv});
    /* the caller's workspace of the reported size, full of NaN: what the
     * calls read must be what they wrote (shared key tiles, padding) */
    size_t bytes = 0;
    bool ok = attn_sdpa_workspace_size(&Q, &K, &V, true, &o, &bytes, err) == ATTN_OK;
    void *ws = xcalloc((int64_t)bytes + 1, 1);
    memset(ws, 0xFF, bytes);
    o.workspace = ws;
    o.workspace_size = bytes;
    ok = ok && attn_sdpa(&Q, &K, &V, &O, &L, NULL, &o, err) == ATTN_OK &&
         attn_sdpa_backward(&Q, &K, &V, &O, &L, &dO, &dQ, &dK, &dV, &o, err) == ATTN_OK;
    free(ws);
    unsetenv("ATTN_ENGINE");
    return ok;
}

static double *widen(const float *x, int64_t n)
{
    double *d = xcalloc(n, 8);
    for (int64_t e = 0; e < n; ++e) d[e] = x[e];
    return d;
}

/* Slack of the contract, relative to the tensor's largest magnitude: a
 * sixteenth of bfloat16's unit roundoff (2^-13), so that a baseline
 * whose error happens to be tiny does not demand better than bfloat16. */
#define CONTRACT_SLACK 0x1p-13

/* One tensor: attn's error <= 2 × the baseline's + slack. */
static void judge(tu_group *g, const char *what, const double *got, const double *ref,
                  const double *base, int64_t n, double *worst)
{
    double mx, mx2;
    const double ea = bf16_max_err(got, ref, n, &mx), eb = bf16_max_err(base, ref, n, &mx2);
    const double allow = 2.0 * eb + CONTRACT_SLACK * mx;
    const double ratio = allow > 0 ? ea / allow : (ea > 0 ? INFINITY : 0);
    if (ratio > *worst) *worst = ratio;
    if (tu_check(g, ea <= allow, "%s: error %.3g > 2 × baseline %.3g + slack %.3g (max |ref| %.3g)",
                 what, ea, eb, CONTRACT_SLACK * mx, mx) &&
        g->suite && g->suite->verbose)
        tu_group_note(g, "%s: error %.3g, baseline %.3g (%.2f of the allowance)", what, ea, eb, ratio);
}

static void group_contract(tu_suite *suite, const engine_entry *eng, int neng, uint64_t seed)
{
    tu_group g;
    tu_group_begin(&g, suite, "contract");
    const size_t ncases = sizeof k_cases / sizeof *k_cases;
    double worst_all = 0;
    char worst_what[160] = "";
    for (size_t ci = 0; ci < ncases; ++ci) {
        const bcase *c = &k_cases[ci];
        bdata d;
        bdata_make(&d, c, seed ^ (0xB16ull + ci));
        const int64_t no = c->B * c->Hq * c->Nq * c->Dv, nl = c->B * c->Hq * c->Nq;
        const int64_t nq = c->B * c->Hq * c->Nq * c->D, nk = c->B * c->Hkv * c->Nk * c->D;
        const int64_t nv = c->B * c->Hkv * c->Nk * c->Dv;
        double *ro = xcalloc(no, 8), *rl = xcalloc(nl, 8), *rq = xcalloc(nq, 8);
        double *rk = xcalloc(nk, 8), *rvv = xcalloc(nv, 8);
        double *bo = xcalloc(no, 8), *bl = xcalloc(nl, 8), *bq = xcalloc(nq, 8);
        double *bk = xcalloc(nk, 8), *bv = xcalloc(nv, 8);
        rv_forward64(&d.rp, d.q, d.k, d.v, ro, rl, NULL, NULL);
        rv_backward64(&d.rp, d.q, d.k, d.v, d.dout, rq, rk, rvv, NULL);
        bf16_forward(&d.rp, d.q, d.k, d.v, bo, bl);
        bf16_backward(&d.rp, d.q, d.k, d.v, d.dout, bq, bk, bv);
        for (int x = 0; x < neng; ++x) {
            bout r;
            bout_alloc(&r, c);
            attn_error err;
            char what[160];
            snprintf(what, sizeof what, "%s [%s]", c->name, eng[x].name);
            if (tu_check(&g, run_attn(&d, eng[x].name, ATTN_PRECISION_BF16, 2, &r, &err),
                         "%s: %s", what, err.message)) {
                double worst = 0, *go = widen(r.o, no), *gl = widen(r.lse, nl);
                double *gq = widen(r.dq, nq), *gk = widen(r.dk, nk), *gv = widen(r.dv, nv);
                char t[200];
                snprintf(t, sizeof t, "%s out", what), judge(&g, t, go, ro, bo, no, &worst);
                snprintf(t, sizeof t, "%s lse", what), judge(&g, t, gl, rl, bl, nl, &worst);
                snprintf(t, sizeof t, "%s dq", what), judge(&g, t, gq, rq, bq, nq, &worst);
                snprintf(t, sizeof t, "%s dk", what), judge(&g, t, gk, rk, bk, nk, &worst);
                snprintf(t, sizeof t, "%s dv", what), judge(&g, t, gv, rvv, bv, nv, &worst);
                if (suite->verbose) tu_group_note(&g, "%s: worst %.2f of the allowance", what, worst);
                if (eng[x].eng && worst > worst_all) {
                    worst_all = worst;
                    snprintf(worst_what, sizeof worst_what, "%s", what);
                }
                free(go), free(gl), free(gq), free(gk), free(gv);
            }
            bout_free(&r);
        }
        free(ro), free(rl), free(rq), free(rk), free(rvv), free(bo), free(bl), free(bq), free(bk), free(bv);
        bdata_free(&d);
    }
    printf("contract: largest error %.2f of the allowance (%s)\n", worst_all, worst_what);
    tu_group_end(&g);
}

/* -------------------------------------------------------- composition */

static bool same_bits(const float *a, const float *b, int64_t n)
{
    return memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

static bool bout_same(const bout *a, const bout *b, const bcase *c)
{
    return same_bits(a->o, b->o, c->B * c->Hq * c->Nq * c->Dv) &&
           same_bits(a->lse, b->lse, c->B * c->Hq * c->Nq) &&
           same_bits(a->dq, b->dq, c->B * c->Hq * c->Nq * c->D) &&
           same_bits(a->dk, b->dk, c->B * c->Hkv * c->Nk * c->D) &&
           same_bits(a->dv, b->dv, c->B * c->Hkv * c->Nk * c->Dv);
}

/* Case c's threads and precisions compared bit for bit on every engine. */
static void composition_case(tu_group *g, const bcase *c, const engine_entry *eng, int neng,
                             uint64_t seed)
{
    bdata d;
    bdata_make(&d, c, seed ^ 0xC0ull);
    for (int x = 0; x < neng; ++x) {
        bout r[4];
        attn_error err;
        bool ok = true;
        for (int t = 0; t < 4; ++t) bout_alloc(&r[t], c);
        for (int t = 0; t < 3; ++t) ok &= run_attn(&d, eng[x].name, ATTN_PRECISION_BF16, t + 1, &r[t], &err);
        ok &= run_attn(&d, eng[x].name, ATTN_PRECISION_EXACT, 2, &r[3], &err);
        if (tu_check(g, ok, "%s: %s: %s", c->name, eng[x].name, err.message)) {
            tu_check(g, bout_same(&r[0], &r[1], c) && bout_same(&r[0], &r[2], c),
                     "%s: %s: 1, 2 and 3 threads differ", c->name, eng[x].name);
            const bool exact = bout_same(&r[1], &r[3], c);
            tu_check(g, eng[x].eng ? !exact : exact, "%s: %s: the bfloat16 call's bits %s the exact call's",
                     c->name, eng[x].name, exact ? "equal" : "differ from");
        }
        for (int t = 0; t < 4; ++t) bout_free(&r[t]);
    }
    bdata_free(&d);
}

static void group_composition(tu_suite *suite, const engine_entry *eng, int neng, uint64_t seed)
{
    tu_group g;
    tu_group_begin(&g, suite, "composition");
    composition_case(&g, &k_cases[0], eng, neng, seed);                  /* GQA, 2 batches */
    composition_case(&g, &k_cases[CASE_SHARED_TILES], eng, neng, seed);  /* shared key tiles */
    tu_group_end(&g);
}

/* Strided views (Q, K, V, out in (B, N, H, D) memory), bfloat16 tensors,
 * softmax_stats, and varlen: each against the plain contiguous float32 call
 * on the same engine (bit for bit where the data are the same, varlen per
 * sequence; within bfloat16's rounding of out for bfloat16 tensors). */
static void group_views(tu_suite *suite, const engine_entry *eng, int neng, uint64_t seed)
{
    tu_group g;
    tu_group_begin(&g, suite, "views, dtypes, varlen");
    const int64_t B = 1, H = 2, N = 77, D = 32;
    tu_rng r;
    tu_rng_seed(&r, tu_mix(seed ^ 0x51DEull));
    const int64_t n = B * H * N * D;
    float *q = xcalloc(n, 4), *k = xcalloc(n, 4), *v = xcalloc(n, 4);
    float *qt = xcalloc(n, 4), *kt = xcalloc(n, 4), *vt = xcalloc(n, 4);
    uint16_t *q16 = xcalloc(n, 2), *k16 = xcalloc(n, 2), *v16 = xcalloc(n, 2), *o16 = xcalloc(n, 2);
    float *o = xcalloc(n, 4), *ot = xcalloc(n, 4), *ov = xcalloc(n, 4), *os = xcalloc(n, 4);
    for (int64_t e = 0; e < n; ++e) {
        q[e] = (float)bf16_round(tu_rng_normal(&r)), k[e] = (float)bf16_round(tu_rng_normal(&r));
        v[e] = (float)bf16_round(tu_rng_normal(&r));
        q16[e] = attn_f32_to_bf16(q[e]), k16[e] = attn_f32_to_bf16(k[e]), v16[e] = attn_f32_to_bf16(v[e]);
    }
    /* (B, N, H, D) copies */
    for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < N; ++i)
            for (int64_t e = 0; e < D; ++e) {
                const int64_t a = (h * N + i) * D + e, t = (i * H + h) * D + e;
                qt[t] = q[a], kt[t] = k[a], vt[t] = v[a];
            }
    const int64_t shape[4] = {B, H, N, D}, tshape[4] = {B, N, H, D};
    for (int x = 0; x < neng; ++x) {
        setenv("ATTN_ENGINE", eng[x].name, 1);
        attn_sdpa_opts o1 = attn_sdpa_opts_default();
        o1.precision = ATTN_PRECISION_BF16;
        o1.causal = ATTN_CAUSAL_TOP_LEFT;
        attn_error err;
        attn_tensor Q = attn_tensor_make(q, ATTN_F32, 4, shape), K = attn_tensor_make(k, ATTN_F32, 4, shape);
        attn_tensor V = attn_tensor_make(v, ATTN_F32, 4, shape), O = attn_tensor_make(o, ATTN_F32, 4, shape);
        attn_tensor QT = attn_tensor_transpose(attn_tensor_make(qt, ATTN_F32, 4, tshape), 1, 2);
        attn_tensor KT = attn_tensor_transpose(attn_tensor_make(kt, ATTN_F32, 4, tshape), 1, 2);
        attn_tensor VT = attn_tensor_transpose(attn_tensor_make(vt, ATTN_F32, 4, tshape), 1, 2);
        attn_tensor OT = attn_tensor_transpose(attn_tensor_make(ot, ATTN_F32, 4, tshape), 1, 2);
        bool ok = attn_sdpa(&Q, &K, &V, &O, NULL, NULL, &o1, &err) == ATTN_OK;
        ok = ok && attn_sdpa(&QT, &KT, &VT, &OT, NULL, NULL, &o1, &err) == ATTN_OK;
        bool same = true;
        for (int64_t h = 0; h < H && ok; ++h)
            for (int64_t i = 0; i < N; ++i)
                for (int64_t e = 0; e < D; ++e)
                    same &= o[(h * N + i) * D + e] == ot[(i * H + h) * D + e];
        tu_check(&g, ok && same, "%s: strided views differ from contiguous ones (%s)", eng[x].name,
                 ok ? "values" : err.message);
        /* the backward with Q and dO whose features are 2 apart (the tiles
         * pack their pairs) is the contiguous call's (pairs packed once per
         * call), bit for bit */
        {
            float *lse = xcalloc(B * H * N, 4), *d = xcalloc(n, 4), *q2 = xcalloc(2 * n, 4);
            float *d2 = xcalloc(2 * n, 4), *grad[2][3];
            for (int64_t e = 0; e < n; ++e) {
                d[e] = (float)bf16_round(tu_rng_normal(&r));
                q2[2 * e] = q[e], d2[2 * e] = d[e];
                q2[2 * e + 1] = d2[2 * e + 1] = NAN; /* never read */
            }
            attn_tensor L = attn_tensor_make(lse, ATTN_F32, 3, (int64_t[]){B, H, N});
            attn_tensor dO = attn_tensor_make(d, ATTN_F32, 4, shape);
            attn_tensor Q2 = attn_tensor_make(q2, ATTN_F32, 4, shape), dO2 = attn_tensor_make(d2, ATTN_F32, 4, shape);
            for (int dim = 0; dim < 4; ++dim) Q2.stride[dim] *= 2, dO2.stride[dim] *= 2;
            ok = attn_sdpa(&Q, &K, &V, &O, &L, NULL, &o1, &err) == ATTN_OK;
            for (int run = 0; run < 2; ++run) {
                for (int t = 0; t < 3; ++t) grad[run][t] = xcalloc(n, 4);
                attn_tensor dQ = attn_tensor_make(grad[run][0], ATTN_F32, 4, shape);
                attn_tensor dK = attn_tensor_make(grad[run][1], ATTN_F32, 4, shape);
                attn_tensor dV = attn_tensor_make(grad[run][2], ATTN_F32, 4, shape);
                ok = ok && attn_sdpa_backward(run ? &Q2 : &Q, &K, &V, &O, &L, run ? &dO2 : &dO,
                                              &dQ, &dK, &dV, &o1, &err) == ATTN_OK;
            }
            same = ok;
            for (int t = 0; t < 3 && ok; ++t) same &= same_bits(grad[0][t], grad[1][t], n);
            tu_check(&g, ok && same, "%s: backward: strided Q and dO differ from contiguous ones (%s)",
                     eng[x].name, ok ? "values" : err.message);
            for (int run = 0; run < 2; ++run)
                for (int t = 0; t < 3; ++t) free(grad[run][t]);
            free(lse), free(d), free(q2), free(d2);
        }
        /* the weights output: the same out, rows that sum to 1 (probabilities
         * from the bfloat16 scores and the final statistics) */
        float *wts = xcalloc(B * H * N * N, 4), *ow = xcalloc(n, 4);
        attn_tensor W = attn_tensor_make(wts, ATTN_F32, 4, (int64_t[]){B, H, N, N});
        attn_tensor OW = attn_tensor_make(ow, ATTN_F32, 4, shape);
        ok = attn_sdpa(&Q, &K, &V, &OW, NULL, &W, &o1, &err) == ATTN_OK;
        double worst_sum = 0;
        for (int64_t row = 0; row < B * H * N && ok; ++row) {
            double sum = 0;
            for (int64_t j = 0; j < N; ++j) sum += wts[row * N + j];
            worst_sum = fabs(sum - 1) > worst_sum ? fabs(sum - 1) : worst_sum;
        }
        tu_check(&g, ok && same_bits(o, ow, n) && worst_sum < 1e-5,
                 "%s: with weights: out %s, rows sum to 1 within %.2g (%s)", eng[x].name,
                 ok && same_bits(o, ow, n) ? "the same" : "differs", worst_sum, ok ? "" : err.message);
        free(wts), free(ow);
        /* bfloat16 tensors: out is the float32 call's rounded */
        attn_tensor Q16 = attn_tensor_make(q16, ATTN_BF16, 4, shape), K16 = attn_tensor_make(k16, ATTN_BF16, 4, shape);
        attn_tensor V16 = attn_tensor_make(v16, ATTN_BF16, 4, shape), O16 = attn_tensor_make(o16, ATTN_BF16, 4, shape);
        ok = attn_sdpa(&Q16, &K16, &V16, &O16, NULL, NULL, &o1, &err) == ATTN_OK;
        same = true;
        for (int64_t e = 0; e < n && ok; ++e) same &= o16[e] == attn_f32_to_bf16(o[e]);
        tu_check(&g, ok && same, "%s: bfloat16 tensors' out is not the float32 call's rounded (%s)",
                 eng[x].name, ok ? "values" : err.message);
        /* varlen: two sequences of 30 and 47 tokens, each a separate call */
        const int64_t cu[3] = {0, 30, 77};
        attn_varlen_seqs seqs = {2, ATTN_OFFSETS_I64, cu, cu};
        attn_tensor Qv = attn_tensor_make(qt, ATTN_F32, 3, (int64_t[]){N, H, D});
        attn_tensor Kv = attn_tensor_make(kt, ATTN_F32, 3, (int64_t[]){N, H, D});
        attn_tensor Vv = attn_tensor_make(vt, ATTN_F32, 3, (int64_t[]){N, H, D});
        attn_tensor Ov = attn_tensor_make(ov, ATTN_F32, 3, (int64_t[]){N, H, D});
        o1.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        ok = attn_sdpa_varlen(&Qv, &Kv, &Vv, &seqs, &Ov, NULL, &o1, &err) == ATTN_OK;
        same = true;
        for (int s = 0; s < 2 && ok; ++s) {
            const int64_t len = cu[s + 1] - cu[s], off = cu[s] * H * D;
            attn_tensor qs = attn_tensor_transpose(attn_tensor_make(qt + off, ATTN_F32, 4, (int64_t[]){1, len, H, D}), 1, 2);
            attn_tensor ks = attn_tensor_transpose(attn_tensor_make(kt + off, ATTN_F32, 4, (int64_t[]){1, len, H, D}), 1, 2);
            attn_tensor vs = attn_tensor_transpose(attn_tensor_make(vt + off, ATTN_F32, 4, (int64_t[]){1, len, H, D}), 1, 2);
            attn_tensor ss = attn_tensor_transpose(attn_tensor_make(os + off, ATTN_F32, 4, (int64_t[]){1, len, H, D}), 1, 2);
            ok = attn_sdpa(&qs, &ks, &vs, &ss, NULL, NULL, &o1, &err) == ATTN_OK;
            for (int64_t e = 0; e < len * H * D && ok; ++e) same &= os[off + e] == ov[off + e];
        }
        tu_check(&g, ok && same, "%s: varlen differs from one call per sequence (%s)", eng[x].name,
                 ok ? "values" : err.message);
        unsetenv("ATTN_ENGINE");
    }
    free(q), free(k), free(v), free(qt), free(kt), free(vt), free(q16), free(k16), free(v16);
    free(o16), free(o), free(ot), free(ov), free(os);
    tu_group_end(&g);
}

int main(int argc, char **argv)
{
    tu_options opt;
    if (!tu_parse_options(argc, argv, 0xB16F00Dull, &opt)) return 2;
    tu_install_crash_handler();
    tu_suite suite = {0};
    suite.verbose = opt.verbose;
    unsetenv("ATTN_ARCH");
    engine_entry eng[4];
    const int neng = engines_here(eng);
    printf("engines run:");
    for (int x = 0; x < neng; ++x) printf(" %s", eng[x].name);
    printf(" (attn_engine(): %s)\n", attn_engine());
    if (tu_group_selected(&opt, "tile model")) group_tile_model(&suite);
    if (tu_group_selected(&opt, "engine gemm")) group_engine_gemm(&suite, eng, neng, opt.seed);
    if (tu_group_selected(&opt, "fused softmax")) group_fused(&suite, eng, neng, opt.seed);
#if defined(__x86_64__)
    const int e2e = 0;
#else
    /* AMX is x86's: elsewhere the whole calls run on the model would check
     * code no user of this machine runs (its kernel still runs above) */
    const int e2e = neng - 1; /* f32 only */
#endif
    if (tu_group_selected(&opt, "contract")) group_contract(&suite, eng + e2e, neng - e2e, opt.seed);
    if (tu_group_selected(&opt, "composition"))
        group_composition(&suite, eng + e2e, neng - e2e, opt.seed);
    if (tu_group_selected(&opt, "views")) group_views(&suite, eng + e2e, neng - e2e, opt.seed);
    return tu_suite_finish(&suite);
}
