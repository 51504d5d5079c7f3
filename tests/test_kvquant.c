/*
 * test_kvquant — quantized KV caches (attn_kvcache_config.quant).
 *
 * Groups:
 *   fp8      every finite e4m3 value, the midpoints between neighbours (ties
 *            go to the even code), just off the midpoints, subnormals,
 *            values past ±448 and ±inf (saturate), NaN, through append and
 *            attn_kvcache_read, against this file's own e4m3 table (values
 *            from the format's definition, nearest by search); per-head
 *            scales divide on the way in and multiply on the way out.
 *   int8     rows of random, zero and non-finite values: the read-back is
 *            s·q with s = max|x|/127 and q = rint(x / s) (computed here),
 *            |x - s·q| <= s/2.
 *   q4_0     rows of random values over 40 binades, zero, non-finite,
 *            past float16's range, and ties: the read-back is (c - 8)·d
 *            with d = float16(m / -8) (m the block's value of largest
 *            magnitude; float16 rounding computed here) and c - 8 =
 *            rint(x / d) clamped to [-8, 7]; |x - value| <= |d|/2 unless
 *            clamped or d saturated; a block with inf or NaN reads NaN.
 *   attend   random cases (int8, fp8 and q4_0; contiguous and paged, block sizes
 *            1..64, shuffled block tables; GQA; Nq 1..8; bottom-right
 *            causal, window, ALiBi, softcap, sinks; lengths up to 4500 so
 *            several decode splits merge): the output and LSE against the
 *            float64 oracle (tests/support/ref64_variants) over the
 *            dequantized cache, by the accuracy criterion; the same bits for
 *            1, 2 and 3 threads.
 *   nan      an fp8 / int8 / q4_0 cache holding a NaN key and value at position 0:
 *            hidden by the window, the output is finite and within float
 *            rounding of the same cache without the NaN (the exact e4m3
 *            widening and the per-row P·V over each row's keys run then); seen, it is NaN.
 *   rules    README's NaN/inf rules on small caches (contiguous, blocks of 1 and 4):
 *            a NaN or inf key or value row seen (out NaN where attn_sdpa
 *            over the read-back values is), a NaN value under a probability
 *            that underflowed to 0 (NaN), a score of +inf (out NaN, LSE
 *            +inf), a NaN query; window sides of INT64_MAX (unbounded);
 *            an fp8 scale of 2e36.
 *   errors   a quantized dtype other than float32, bad fp8 scales, q4_0
 *            with a head_dim not a multiple of 32, an unknown quant, view
 *            of a quantized cache.
 *
 * Usage: test_kvquant [--seed S] [--cases N] [--group NAME] [--quick] [-v]
 */
#include "attn.h"
#include "ref64_variants.h"
#include "testutil.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SEED 0x9a47c0deull

/* ------------------------------------------------------------------- fp8 */

/* e4m3fn from its definition: bias 7, exponent 0 subnormal, S.1111.111 NaN. */
static double e4m3_value(int code)
{
    const int e = code >> 3 & 15, m = code & 7;
    const double sign = code & 0x80 ? -1.0 : 1.0;
    if (e == 15 && m == 7) return NAN;
    return sign * (e == 0 ? ldexp(m / 8.0, -6) : ldexp(1.0 + m / 8.0, e - 7));
}

/* The e4m3 value x rounds to: the nearest finite value, ties to the even
 * code, |x| >= 448 saturating, NaN staying NaN. */
static double e4m3_expected(double x)
{
    if (isnan(x)) return NAN;
    if (fabs(x) >= 448.0) return x < 0 ? -448.0 : 448.0;
    int best = -1;
    double best_err = INFINITY;
    for (int c = 0; c < 0x7f; ++c) { /* non-negative finite codes, increasing */
        const double err = fabs(fabs(x) - e4m3_value(c));
        if (err < best_err || (err == best_err && (c & 1) == 0)) {
            best_err = err;
            best = c;
        }
    }
    return x < 0 || (x == 0 && signbit(x)) ? -e4m3_value(best) : e4m3_value(best);
}

/* Appends n values as one row each of a (1, 1, n, 1) cache and reads them back. */
static bool roundtrip(attn_kv_quant quant, float scale, const float *x, int64_t n, float *back)
{
    attn_kvcache_config cfg = {.batch = 1, .kv_heads = 1, .capacity = n, .head_dim = 1,
                               .quant = quant, .k_scale = &scale, .v_scale = &scale};
    attn_kvcache *c = NULL;
    attn_error err;
    if (attn_kvcache_create(&cfg, &c, &err) != ATTN_OK) return false;
    attn_tensor k = attn_tensor_4d((float *)x, 1, 1, n, 1);
    attn_tensor kb = attn_tensor_4d(back, 1, 1, n, 1);
    bool ok = attn_kvcache_append(c, &k, &k, NULL, &err) == ATTN_OK &&
              attn_kvcache_read(c, 0, &kb, NULL, &err) == ATTN_OK;
    attn_kvcache_free(c);
    return ok;
}

static void group_fp8(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "fp8");
    enum { N = 4096 };
    static float x[N], back[N];
    int64_t n = 0;
    for (int c = 0; c < 0x7f; ++c) {
        const double v = e4m3_value(c), next = c + 1 < 0x7f ? e4m3_value(c + 1) : 464.0;
        const double mid = 0.5 * (v + next);
        const double cand[] = {v, -v, mid, -mid, nextafter(mid, 0.0), nextafter(mid, 1e9)};
        for (int i = 0; i < 6; ++i) x[n++] = (float)cand[i];
    }
    const float extra[] = {448.0f, 449.0f, 463.9f, 464.0f, 500.0f, 1e30f, INFINITY, -INFINITY,
                           -1e30f, 0.0f, -0.0f, 1e-30f, -1e-30f, 0x1p-10f, 0x1p-9f, 3e-3f, NAN};
    for (size_t i = 0; i < sizeof extra / sizeof *extra; ++i) x[n++] = extra[i];
    tu_rng r;
    tu_rng_seed(&r, DEFAULT_SEED);
    while (n < N) x[n++] = (float)(tu_rng_normal(&r) * ldexp(1.0, (int)tu_rng_int(&r, -12, 9)));
    for (int si = 0; si < 3; ++si) {
        const float scale = si == 0 ? 1.0f : si == 1 ? 0.25f : 3.0f;
        float xs[N];
        for (int64_t i = 0; i < n; ++i) xs[i] = x[i] * scale; /* x·scale / scale = x exactly for 0.25 */
        if (!tu_check(&g, roundtrip(ATTN_KV_FP8_E4M3, scale, xs, n, back), "fp8 round trip failed"))
            break;
        int64_t bad = 0;
        for (int64_t i = 0; i < n && bad < 5; ++i) {
            const double want = (double)scale * e4m3_expected((double)(xs[i] / scale));
            const bool same = isnan(want) ? isnan(back[i]) : (double)back[i] == want &&
                                                                 !signbit(back[i]) == !signbit(want);
            if (!same) {
                tu_group_fail(&g, "fp8 scale %g: x = %a reads back %a, expected %a", (double)scale,
                              (double)xs[i], (double)back[i], want);
                bad++;
            }
        }
        if (!bad) tu_group_pass(&g);
    }
    tu_group_end(&g);
}

/* ------------------------------------------------------------------ int8 */

/* Appends the (T, D) rows x as keys and values of a paged cache of `quant`
 * (blocks of 16) and reads them back into back. */
static bool paged_round_trip(tu_group *g, attn_kv_quant quant, float *x, float *back, int64_t T,
                             int64_t D)
{
    attn_kvcache_config cfg = {.batch = 1, .kv_heads = 1, .capacity = T, .head_dim = D,
                               .quant = quant, .block_size = 16};
    attn_kvcache *c = NULL;
    attn_error err;
    attn_tensor k = attn_tensor_4d(x, 1, 1, T, D), kb = attn_tensor_4d(back, 1, 1, T, D);
    const bool ok =
        tu_check(g, attn_kvcache_create(&cfg, &c, &err) == ATTN_OK, "create: %s", err.message) &&
        tu_check(g, attn_kvcache_append(c, &k, &k, NULL, &err) == ATTN_OK, "append: %s", err.message) &&
        tu_check(g, attn_kvcache_read(c, 0, &kb, &kb, &err) == ATTN_OK, "read: %s", err.message);
    attn_kvcache_free(c);
    return ok;
}

static void group_int8(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "int8");
    enum { D = 37, T = 64 };
    static float x[T * D], back[T * D];
    tu_rng r;
    tu_rng_seed(&r, DEFAULT_SEED + 1);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < D; ++d) {
            double v = tu_rng_normal(&r) * ldexp(1.0, (int)tu_rng_int(&r, -20, 20));
            if (t == 1) v = 0.0;
            if (t == 2 && d == 5) v = INFINITY;
            if (t == 3 && d == 0) v = NAN;
            if (t == 4) v = d == 3 ? 1e-3 : 0.0;
            x[t * D + d] = (float)v;
        }
    if (paged_round_trip(&g, ATTN_KV_INT8, x, back, T, D)) {
        int64_t bad = 0;
        for (int64_t t = 0; t < T; ++t) {
            float amax = 0.0f;
            bool finite = true;
            for (int64_t d = 0; d < D; ++d) {
                finite &= isfinite(x[t * D + d]);
                amax = fmaxf(amax, fabsf(x[t * D + d]));
            }
            const float sc = amax / 127.0f;
            for (int64_t d = 0; d < D && bad < 5; ++d) {
                const float xv = x[t * D + d], got = back[t * D + d];
                const float want = !finite ? NAN : sc > 0.0f ? sc * rintf(xv / sc) : 0.0f;
                const bool same = isnan(want) ? isnan(got) : got == want;
                const bool close = !finite || fabsf(xv - got) <= 0.5f * sc * (1.0f + 1e-6f);
                if (!same || !close) {
                    tu_group_fail(&g, "int8 row %" PRId64 " [%" PRId64 "]: x = %a reads back %a, expected %a",
                                  t, d, (double)xv, (double)got, (double)want);
                    bad++;
                }
            }
        }
        if (!bad) tu_group_pass(&g);
    }
    tu_group_end(&g);
}

/* ------------------------------------------------------------------ q4_0 */

/* x rounded to float16 (nearest even; ±65504 largest, steps of 2^-24 below
 * 2^-14), from the format's definition. */
static double f16_round(double x)
{
    if (x == 0.0 || !isfinite(x)) return x;
    int e;
    frexp(fabs(x), &e); /* |x| in [2^(e-1), 2^e) */
    const double step = ldexp(1.0, (e - 1 < -14 ? -14 : e - 1) - 10);
    return rint(x / step) * step;
}

static void group_q4(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "q4_0");
    enum { D = 96, T = 64, BLK = 32 };
    static float x[T * D], back[T * D];
    tu_rng r;
    tu_rng_seed(&r, DEFAULT_SEED + 2);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < D; ++d) {
            double v = tu_rng_normal(&r) * ldexp(1.0, (int)tu_rng_int(&r, -20, 20));
            if (t == 1) v = 0.0;
            if (t == 2 && d == 5) v = INFINITY;   /* block 0 NaN, blocks 1, 2 not */
            if (t == 3 && d == 40) v = NAN;       /* block 1 NaN */
            if (t == 4) v = d % BLK == 3 ? 1e-3 : 0.0;
            if (t == 5) v = d % BLK == 0 ? 1e7 : tu_rng_normal(&r) * 1e6; /* d past 65504 */
            if (t == 6) v = d % BLK == 0 ? 8.0 : (double)(d % 16) - 7.5; /* d = -1: ties */
            if (t == 7) v = d % BLK == 0 ? -8.0 : (d % 2 ? 7.5 : -7.5); /* d = 1: 7.5 clamps */
            x[t * D + d] = (float)v;
        }
    if (paged_round_trip(&g, ATTN_KV_Q4_0, x, back, T, D)) {
        int64_t bad = 0;
        for (int64_t b0 = 0; b0 < T * D; b0 += BLK) {
            double m = 0.0;
            bool finite = true;
            for (int j = 0; j < BLK; ++j) {
                finite &= isfinite(x[b0 + j]);
                if (fabs((double)x[b0 + j]) > fabs(m)) m = x[b0 + j];
            }
            double dd = (double)(float)(m / -8.0); /* the division in float, as stored */
            if (fabs(dd) > 65504.0) dd = copysign(65504.0, dd);
            const double d16 = f16_round(dd);
            for (int j = 0; j < BLK && bad < 5; ++j) {
                const double xv = x[b0 + j], got = back[b0 + j];
                double code = d16 != 0.0 ? rint((double)(float)(xv / (float)d16)) : 0.0;
                code = code > 7 ? 7 : code < -8 ? -8 : code;
                const double want = finite ? code * d16 : NAN;
                const bool same = isnan(want) ? isnan(got) : got == want;
                const bool close = !finite || fabs(dd) == 65504.0 || code == 7 || code == -8 ||
                                   fabs(xv - got) <= 0.5 * fabs(d16) * (1.0 + 1e-6);
                if (!same || !close) {
                    tu_group_fail(&g, "q4_0 element %" PRId64 ": x = %a reads back %a, expected %a",
                                  b0 + j, xv, got, want);
                    bad++;
                }
            }
        }
        if (!bad) tu_group_pass(&g);
    }
    tu_group_end(&g);
}

/* ---------------------------------------------------------------- attend */

/* The storages the decode kernel reads: the quantized ones always, float
 * storage for decode shapes (attn_kvcache_attend with path AUTO). */
typedef struct {
    attn_kv_quant quant;
    attn_dtype dtype;
    const char *name;
} storage;
static const storage STORAGES[] = {
    {ATTN_KV_INT8, ATTN_F32, "int8"},  {ATTN_KV_FP8_E4M3, ATTN_F32, "fp8"}, {ATTN_KV_Q4_0, ATTN_F32, "q4_0"},
    {ATTN_KV_FLOAT, ATTN_F32, "f32"},  {ATTN_KV_FLOAT, ATTN_BF16, "bf16"}, {ATTN_KV_FLOAT, ATTN_F16, "f16"},
};
enum { NSTORAGES = sizeof STORAGES / sizeof STORAGES[0], NQUANT = 3 };

typedef struct {
    int64_t B, Hq, Hkv, D, Dv, cap, Nq, block_size;
    storage st;
    attn_causal causal;
    attn_window window;
    float softcap;
    bool alibi, sinks, shuffle, outliers;
} qcase;

static qcase random_case(tu_rng *r)
{
    qcase c;
    memset(&c, 0, sizeof c);
    c.st = STORAGES[tu_rng_int(r, 0, NSTORAGES - 1)];
    c.B = tu_rng_int(r, 1, 3);
    c.Hkv = tu_rng_int(r, 1, 3);
    c.Hq = c.Hkv * tu_rng_int(r, 1, 5);
    /* 64 and 128, and widths that end in one, two or three 16-feature slices (80, 24, 33) */
    static const int64_t dims[] = {1, 8, 16, 24, 33, 64, 80, 128};
    c.D = tu_rng_pick(r, dims, 8);
    c.Dv = tu_rng_chance(r, 0.7) ? c.D : tu_rng_pick(r, dims, 8);
    if (c.st.quant == ATTN_KV_Q4_0) { /* whole blocks of 32 */
        c.D = (c.D + 31) / 32 * 32;
        c.Dv = (c.Dv + 31) / 32 * 32;
    }
    c.cap = tu_rng_chance(r, 0.3) ? tu_rng_int(r, 1000, 4500) : tu_rng_int(r, 1, 300);
    c.Nq = tu_rng_int(r, 1, 8);
    static const int64_t blocks[] = {0, 0, 1, 3, 16, 64};
    c.block_size = tu_rng_pick(r, blocks, 6);
    c.shuffle = c.block_size > 0 && tu_rng_chance(r, 0.5);
    c.causal = tu_rng_chance(r, 0.6) ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
    if (tu_rng_chance(r, 0.2)) {
        c.window.enabled = true;
        c.window.left = tu_rng_chance(r, 0.3) ? -1 : tu_rng_int(r, 0, 400);
        c.window.right = tu_rng_chance(r, 0.3) ? -1 : tu_rng_int(r, 0, 10);
    }
    if (tu_rng_chance(r, 0.15)) c.softcap = (float)tu_rng_range(r, 1.0, 20.0);
    c.alibi = tu_rng_chance(r, 0.2);
    c.sinks = tu_rng_chance(r, 0.15);
    c.outliers = tu_rng_chance(r, 0.5);
    return c;
}

/* One case: fill, attend with 1, 2, 3 threads, compare with the oracle over
 * the read-back (dequantized) cache. */
static void run_case(tu_group *g, uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    const qcase c = random_case(&r);
    char rp[160];
    snprintf(rp, sizeof rp, "seed 0x%016" PRIx64 " %s B %" PRId64 " Hq %" PRId64 " Hkv %" PRId64
             " D %" PRId64 " Nq %" PRId64 " cap %" PRId64 " bs %" PRId64,
             seed, c.st.name, c.B, c.Hq, c.Hkv, c.D, c.Nq, c.cap, c.block_size);
    float ks[8], vs[8];
    for (int64_t h = 0; h < c.Hkv; ++h) {
        ks[h] = (float)tu_rng_range(&r, 0.01, 2.0);
        vs[h] = (float)tu_rng_range(&r, 0.01, 2.0);
    }
    attn_kvcache_config cfg = {.batch = c.B, .kv_heads = c.Hkv, .capacity = c.cap, .head_dim = c.D,
                               .value_dim = c.Dv, .block_size = c.block_size, .quant = c.st.quant, .dtype = c.st.dtype,
                               .k_scale = ks, .v_scale = vs};
    attn_kvcache *cache = NULL;
    attn_error err;
    if (!tu_check(g, attn_kvcache_create(&cfg, &cache, &err) == ATTN_OK, "create: %s (%s)",
                  err.message, rp))
        return;
    /* every entry filled to a random length in one append (counts) */
    int64_t counts[3];
    for (int64_t b = 0; b < c.B; ++b) counts[b] = tu_rng_int(&r, 0, c.cap);
    const int64_t nk = c.B * c.Hkv * c.cap;
    float *k = malloc(sizeof(float) * (size_t)(nk * c.D)), *v = malloc(sizeof(float) * (size_t)(nk * c.Dv));
    for (int64_t e = 0; e < nk * c.D; ++e) {
        double x = tu_rng_normal(&r);
        if (c.outliers && e % c.D == 3 % c.D) x *= 20.0; /* an outlier channel */
        k[e] = (float)x;
    }
    for (int64_t e = 0; e < nk * c.Dv; ++e) v[e] = (float)tu_rng_normal(&r);
    attn_tensor K = attn_tensor_4d(k, c.B, c.Hkv, c.cap, c.D), V = attn_tensor_4d(v, c.B, c.Hkv, c.cap, c.Dv);
    bool ok = tu_check(g, attn_kvcache_append(cache, &K, &V, counts, &err) == ATTN_OK, "append: %s (%s)",
                       err.message, rp);
    if (ok && c.shuffle) /* entry 0's blocks in reverse order of the pool: not one run */
        for (int64_t b = 0; b < c.B && ok; ++b) {
            int32_t tab[4096];
            int64_t nb = 0;
            attn_kvcache_block_table(cache, b, tab, 4096, &nb, &err);
            for (int64_t i = 0; i < nb / 2; ++i) {
                const int32_t t = tab[i];
                tab[i] = tab[nb - 1 - i];
                tab[nb - 1 - i] = t;
            }
            ok = tu_check(g, attn_kvcache_set_block_table(cache, b, tab, nb, &err) == ATTN_OK,
                          "set_block_table: %s (%s)", err.message, rp);
        }
    const int64_t nq = c.B * c.Hq * c.Nq;
    float *q = malloc(sizeof(float) * (size_t)(nq * c.D)), *slopes = malloc(sizeof(float) * (size_t)c.Hq),
          *sinks = malloc(sizeof(float) * (size_t)c.Hq);
    double *q64 = malloc(sizeof(double) * (size_t)(nq * c.D));
    for (int64_t e = 0; e < nq * c.D; ++e) q64[e] = q[e] = (float)tu_rng_normal(&r);
    for (int64_t h = 0; h < c.Hq; ++h) {
        slopes[h] = (float)tu_rng_range(&r, 0.0, 0.5);
        sinks[h] = (float)tu_rng_range(&r, -2.0, 2.0);
    }
    float *out[3], *lse[3];
    attn_tensor sl = attn_tensor_1d(slopes, c.Hq), sk = attn_tensor_1d(sinks, c.Hq);
    attn_tensor Q = attn_tensor_4d(q, c.B, c.Hq, c.Nq, c.D);
    for (int t = 0; t < 3; ++t) {
        out[t] = malloc(sizeof(float) * (size_t)(nq * c.Dv));
        lse[t] = malloc(sizeof(float) * (size_t)nq);
        if (!ok) continue;
        attn_sdpa_opts o = attn_sdpa_opts_default();
        o.causal = c.causal;
        o.window = c.window;
        o.softcap = c.softcap;
        o.alibi_slopes = c.alibi ? &sl : NULL;
        o.sinks = c.sinks ? &sk : NULL;
        o.num_threads = t + 1;
        attn_tensor O = attn_tensor_4d(out[t], c.B, c.Hq, c.Nq, c.Dv), L = attn_tensor_3d(lse[t], c.B, c.Hq, c.Nq);
        ok = tu_check(g, attn_kvcache_attend(cache, &Q, &O, &L, &o, &err) == ATTN_OK, "attend: %s (%s)",
                      err.message, rp);
    }
    for (int t = 1; t < 3 && ok; ++t)
        ok = tu_check(g, !memcmp(out[0], out[t], sizeof(float) * (size_t)(nq * c.Dv)) &&
                             !memcmp(lse[0], lse[t], sizeof(float) * (size_t)nq),
                      "%d threads give other bits than 1 (%s)", t + 1, rp);
    for (int64_t b = 0; b < c.B && ok; ++b) {
        const int64_t L = counts[b];
        float *kd = malloc(sizeof(float) * (size_t)(c.Hkv * L * c.D + 1));
        float *vd = malloc(sizeof(float) * (size_t)(c.Hkv * L * c.Dv + 1));
        attn_tensor KD = attn_tensor_4d(kd, 1, c.Hkv, L, c.D), VD = attn_tensor_4d(vd, 1, c.Hkv, L, c.Dv);
        ok = tu_check(g, attn_kvcache_read(cache, b, &KD, &VD, &err) == ATTN_OK, "read: %s", err.message);
        double *k64 = malloc(sizeof(double) * (size_t)(c.Hkv * L * c.D + 1));
        double *v64 = malloc(sizeof(double) * (size_t)(c.Hkv * L * c.Dv + 1));
        for (int64_t e = 0; e < c.Hkv * L * c.D; ++e) k64[e] = kd[e];
        for (int64_t e = 0; e < c.Hkv * L * c.Dv; ++e) v64[e] = vd[e];
        double sl64[64], sk64[64];
        for (int64_t h = 0; h < c.Hq; ++h) sl64[h] = slopes[h], sk64[h] = sinks[h];
        rv_problem p = {.B = 1, .Hq = c.Hq, .Hkv = c.Hkv, .Nq = c.Nq, .Nk = L, .D = c.D, .Dv = c.Dv,
                        .scale = (double)(1.0f / sqrtf((float)c.D)), .causal = c.causal,
                        .window = c.window, .softcap = c.softcap, .alibi = c.alibi ? sl64 : NULL,
                        .sinks = c.sinks ? sk64 : NULL};
        const int64_t no = c.Hq * c.Nq * c.Dv, nl = c.Hq * c.Nq;
        double *buf = calloc((size_t)(5 * no + 5 * nl), sizeof(double));
        double *ro = buf, *fo = ro + no, *mo = fo + no, *nat = mo + no, *go = nat + no;
        double *rl = go + no, *fl = rl + nl, *ml = fl + nl, *natl = ml + nl, *gl = natl + nl;
        const double *qb = q64 + b * c.Hq * c.Nq * c.D;
        rv_forward64(&p, qb, k64, v64, ro, rl, NULL, NULL);
        rv_forward32(&p, qb, k64, v64, fo, fl, NULL, NULL);
        rv_forward32fma(&p, qb, k64, v64, mo, ml, NULL, NULL);
        rv_natural(&p, qb, k64, v64, NULL, nat, natl, NULL, NULL, NULL, NULL, NULL);
        for (int64_t e = 0; e < no; ++e) go[e] = out[0][b * no + e];
        for (int64_t e = 0; e < nl; ++e) gl[e] = lse[0][b * nl + e];
        rv_cmp cmp;
        char msg[512];
        if (ok && !rv_criterion(go, ro, fo, mo, nat, NULL, NULL, no, &cmp)) {
            rv_cmp_describe(&cmp, "out", msg, sizeof msg);
            tu_group_fail(g, "entry %" PRId64 " (length %" PRId64 "): %s (%s)", b, L, msg, rp);
            ok = false;
        } else if (ok && !rv_criterion(gl, rl, fl, ml, natl, NULL, NULL, nl, &cmp)) {
            rv_cmp_describe(&cmp, "lse", msg, sizeof msg);
            tu_group_fail(g, "entry %" PRId64 " (length %" PRId64 "): %s (%s)", b, L, msg, rp);
            ok = false;
        }
        free(kd), free(vd), free(k64), free(v64), free(buf);
    }
    if (ok) tu_group_pass(g);
    for (int t = 0; t < 3; ++t) free(out[t]), free(lse[t]);
    free(k), free(v), free(q), free(q64), free(slopes), free(sinks);
    attn_kvcache_free(cache);
}

static void group_attend(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "attend");
    const int cases = opt->cases > 0 ? opt->cases : opt->quick ? 30 : 120;
    for (int i = 0; i < cases; ++i) run_case(&g, tu_mix(opt->seed ^ (uint64_t)i));
    tu_group_end(&g);
}

/* ------------------------------------------------------------------- nan */

/* out (1, 2, 1, 32) of a (1, 1, 300, 32) cache whose token 0 is NaN (nan)
 * or 0.5, the query seeing keys [first, 300). */
static bool attend_nan(storage st, bool nan, int64_t first, float *out)
{
    enum { L = 300, D = 32 };
    static float k[L * D], v[L * D], q[2 * D];
    tu_rng r;
    tu_rng_seed(&r, 77);
    for (int64_t e = 0; e < L * D; ++e) k[e] = (float)tu_rng_normal(&r), v[e] = (float)tu_rng_normal(&r);
    for (int64_t e = 0; e < 2 * D; ++e) q[e] = (float)tu_rng_normal(&r);
    k[3] = v[5] = nan ? NAN : 0.5f;
    attn_kvcache_config cfg = {.batch = 1, .kv_heads = 1, .capacity = L, .head_dim = D,
                               .quant = st.quant, .dtype = st.dtype};
    attn_kvcache *c = NULL;
    attn_tensor K = attn_tensor_4d(k, 1, 1, L, D), V = attn_tensor_4d(v, 1, 1, L, D);
    attn_tensor Q = attn_tensor_4d(q, 1, 2, 1, D), O = attn_tensor_4d(out, 1, 2, 1, D);
    attn_sdpa_opts o = attn_sdpa_opts_default();
    o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    o.window = (attn_window){.enabled = true, .left = L - 1 - first, .right = 0};
    bool ok = attn_kvcache_create(&cfg, &c, NULL) == ATTN_OK &&
              attn_kvcache_append(c, &K, &V, NULL, NULL) == ATTN_OK &&
              attn_kvcache_attend(c, &Q, &O, NULL, &o, NULL) == ATTN_OK;
    attn_kvcache_free(c);
    return ok;
}

static void group_nan(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "nan");
    for (int fmt = 0; fmt < NSTORAGES; ++fmt) {
        const storage st = STORAGES[fmt];
        float with[64], without[64], seen[64];
        if (!tu_check(&g, attend_nan(st, true, 1, with) && attend_nan(st, false, 1, without) &&
                              attend_nan(st, true, 0, seen),
                      "%s: attend failed", st.name))
            continue;
        double worst = 0.0;
        bool finite = true;
        for (int e = 0; e < 64; ++e) {
            finite &= isfinite(with[e]);
            worst = fmax(worst, fabs((double)with[e] - (double)without[e]));
        }
        tu_check(&g, finite && worst <= 1e-5, "%s: NaN at a hidden key: finite %d, |diff| %g",
                 st.name, finite, worst);
        tu_check(&g, isnan(seen[0]) && isnan(seen[32]), "%s: a seen NaN key gives %g, %g",
                 st.name, (double)seen[0], (double)seen[32]);
    }
    /* A NaN value written through attn_kvcache_view (no append saw it) at
     * the last key, which bottom-right causality hides from the first of
     * two queries: that query's output stays finite. */
    for (int fmt = NQUANT; fmt < NSTORAGES; ++fmt) {
        const storage st = STORAGES[fmt];
        enum { L = 40, D = 16 };
        float k[L * D], v[L * D], q[2 * D], out[2 * D];
        for (int e = 0; e < L * D; ++e) k[e] = v[e] = (float)((e * 29 % 13) - 6) * 0.1f;
        for (int e = 0; e < 2 * D; ++e) q[e] = (float)((e * 7 % 5) - 2) * 0.2f;
        attn_kvcache_config cfg = {.batch = 1, .kv_heads = 1, .capacity = L, .head_dim = D, .dtype = st.dtype};
        attn_kvcache *c = NULL;
        attn_tensor K = attn_tensor_4d(k, 1, 1, L, D), V = attn_tensor_4d(v, 1, 1, L, D), view;
        attn_tensor Q = attn_tensor_4d(q, 1, 1, 2, D), O = attn_tensor_4d(out, 1, 1, 2, D);
        attn_sdpa_opts o = attn_sdpa_opts_default();
        o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        bool ok = attn_kvcache_create(&cfg, &c, NULL) == ATTN_OK &&
                  attn_kvcache_append(c, &K, &V, NULL, NULL) == ATTN_OK &&
                  attn_kvcache_view(c, 0, NULL, &view, NULL) == ATTN_OK;
        const int64_t at = (L - 1) * view.stride[2] + 3;
        if (ok && st.dtype == ATTN_F32) ((float *)view.data)[at] = NAN;
        else if (ok) ((uint16_t *)view.data)[at] = st.dtype == ATTN_BF16 ? 0x7fc0 : 0x7e00;
        ok = ok && attn_kvcache_attend(c, &Q, &O, NULL, &o, NULL) == ATTN_OK;
        attn_kvcache_free(c);
        bool finite = true;
        for (int d = 0; d < D; ++d) finite &= isfinite(out[d]);
        tu_check(&g, ok && finite && isnan(out[D + 3]) && isfinite(out[D + 2]),
                 "%s: a NaN value written through the view, hidden from query 0: out %g, %g, %g",
                 st.name, (double)out[3], (double)out[D + 3], (double)out[D + 2]);
    }
    tu_group_end(&g);
}

/* ----------------------------------------------------------------- rules */

enum { RD = 32, RL = 6 };

/* attend of query q (1, 1, nq, RD) over a (1, 1, RL, RD) cache of k, v into
 * out (nq, RD) and lse (nq); with read (NULL: not wanted) the values the
 * cache reads back. */
static bool attend_small(storage st, int64_t block_size, const float *scales, const float *k,
                         const float *v, const float *q, int64_t nq, attn_sdpa_opts o, float *out,
                         float *lse, float *read)
{
    attn_kvcache_config cfg = {.batch = 1, .kv_heads = 1, .capacity = 8, .head_dim = RD,
                               .block_size = block_size, .quant = st.quant, .dtype = st.dtype,
                               .k_scale = scales, .v_scale = scales};
    attn_kvcache *c = NULL;
    attn_tensor K = attn_tensor_4d((float *)k, 1, 1, RL, RD), V = attn_tensor_4d((float *)v, 1, 1, RL, RD);
    attn_tensor Q = attn_tensor_4d((float *)q, 1, 1, nq, RD), O = attn_tensor_4d(out, 1, 1, nq, RD);
    attn_tensor LS = attn_tensor_3d(lse, 1, 1, nq);
    attn_tensor RK = attn_tensor_4d(read, 1, 1, RL, RD),
                RV = attn_tensor_4d(read ? read + RL * RD : NULL, 1, 1, RL, RD);
    bool ok = attn_kvcache_create(&cfg, &c, NULL) == ATTN_OK &&
              attn_kvcache_append(c, &K, &V, NULL, NULL) == ATTN_OK &&
              attn_kvcache_attend(c, &Q, &O, &LS, &o, NULL) == ATTN_OK &&
              (!read || attn_kvcache_read(c, 0, &RK, &RV, NULL) == ATTN_OK);
    attn_kvcache_free(c);
    return ok;
}

static void small_kv(float *k, float *v)
{
    for (int e = 0; e < RL * RD; ++e) k[e] = v[e] = (float)((e * 37 % 11) - 5) * 0.1f;
}

static void group_rules(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "rules");
    float k[RL * RD], v[RL * RD], q[8 * RD], o[8 * RD], lse[8], ro[RD], read[2 * RL * RD];
    for (int e = 0; e < 8 * RD; ++e) q[e] = (float)((e * 13 % 7) - 3) * 0.1f;
    for (int fmt = 0; fmt < NSTORAGES; ++fmt) {
        const storage st = STORAGES[fmt];
        /* A NaN or inf key or value row the query sees: out is NaN exactly
         * where attn_sdpa over the values read back is. Contiguous, blocks
         * of 4, and of 1 (the first decode chunk is the NaN key alone). */
        for (int which = 0; which < 12; ++which) {
            const int64_t block = which % 3 == 2 ? 4 : which % 3, in_v = which & 4;
            small_kv(k, v);
            (in_v ? v : k)[3] = which & 8 ? INFINITY : NAN;
            attn_sdpa_opts opts = attn_sdpa_opts_default();
            if (!tu_check(&g, attend_small(st, block, NULL, k, v, q, 1, opts, o, lse, read),
                          "%s: attend failed", st.name))
                continue;
            attn_tensor Q = attn_tensor_4d(q, 1, 1, 1, RD), RO = attn_tensor_4d(ro, 1, 1, 1, RD);
            attn_tensor RK = attn_tensor_4d(read, 1, 1, RL, RD), RV = attn_tensor_4d(read + RL * RD, 1, 1, RL, RD);
            opts.path = ATTN_PATH_REFERENCE;
            attn_sdpa(&Q, &RK, &RV, &RO, NULL, NULL, &opts, NULL);
            int same = 0;
            for (int d = 0; d < RD; ++d) same += !isnan(o[d]) == !isnan(ro[d]);
            tu_check(&g, same == RD, "%s, block_size %d: %s %s row: %d of %d outputs NaN as attn_sdpa's",
                     st.name, (int)block, which & 8 ? "inf" : "NaN", in_v ? "value" : "key", same, RD);
        }
        /* Key 1 seen, its probability 0 (logit 204 below), NaN in its value. */
        float qe[RD] = {1.0f};
        memset(k, 0, sizeof k);
        for (int e = 0; e < RL * RD; ++e) v[e] = 0.25f;
        for (int j = 0; j < RL; ++j) k[j * RD] = j == 1 ? -200.0f : 4.0f;
        v[1 * RD + 5] = NAN;
        attn_sdpa_opts one = attn_sdpa_opts_default();
        one.scale = 1.0f;
        if (tu_check(&g, attend_small(st, 0, NULL, k, v, qe, 1, one, o, lse, NULL), "attend failed"))
            tu_check(&g, isnan(o[5]) && (o[0] == 0.25f) == (st.quant == ATTN_KV_FP8_E4M3 || st.quant == ATTN_KV_FLOAT),
                     /* int8 and q4_0 read the whole row (block) back as NaN */
                     "%s: NaN value under p = 0: out %g, %g (want NaN, 0.25)",
                     st.name, (double)o[5], (double)o[0]);
        /* A score overflowing to +inf: out NaN, LSE +inf; a query of NaN: NaN. */
        float big[1] = {1e36f};
        small_kv(k, v);
        for (int e = 0; e < RL * RD; ++e) k[e] = e % RD ? 0.0f : 1.0f;
        k[1 * RD] = 3e37f;
        qe[0] = 100.0f;
        if (st.quant != ATTN_KV_Q4_0 && /* q4_0's float16 scale saturates: the key is not huge */
            tu_check(&g, attend_small(st, 0, big, k, v, qe, 1, one, o, lse, NULL), "attend failed"))
            tu_check(&g, isnan(o[0]) && lse[0] == INFINITY, "%s: a +inf logit: out %g, LSE %g (want NaN, inf)",
                     st.name, (double)o[0], (double)lse[0]);
        for (int d = 0; d < RD; ++d) qe[d] = NAN;
        if (tu_check(&g, attend_small(st, 0, NULL, k, v, qe, 1, one, o, lse, NULL), "attend failed"))
            tu_check(&g, isnan(o[0]) && isnan(lse[0]), "%s: a NaN query: out %g, LSE %g (want NaN)",
                     st.name, (double)o[0], (double)lse[0]);
        /* Window sides of INT64_MAX are unbounded (also with Nq > L + 1,
         * where the first queries' positions are negative). */
        small_kv(k, v);
        static const int64_t sides[3][2] = {{INT64_MAX, INT64_MAX}, {-1, INT64_MAX}, {INT64_MAX, -1}};
        for (int nq = 1; nq <= 8; nq += 7)
            for (int w = 0; w < 3; ++w) {
                float plain[8 * RD];
                attn_sdpa_opts wo = attn_sdpa_opts_default();
                bool ok = attend_small(st, 4, NULL, k, v, q, nq, wo, plain, lse, NULL);
                wo.window = (attn_window){.enabled = true, .left = sides[w][0], .right = sides[w][1]};
                ok = ok && attend_small(st, 4, NULL, k, v, q, nq, wo, o, lse, NULL);
                tu_check(&g, ok && !memcmp(o, plain, (size_t)nq * RD * sizeof *o),
                         "%s, Nq %d: window (%lld, %lld) differs from none", st.name, nq,
                         (long long)sides[w][0], (long long)sides[w][1]);
            }
    }
    /* fp8 with a large valid scale: the widening's unit 2^8 must not overflow it. */
    float scale[1] = {2e36f}, qe[RD] = {1e-36f};
    memset(k, 0, sizeof k), memset(v, 0, sizeof v);
    k[0] = v[0] = k[RD + 1] = v[RD + 1] = 2e36f;
    attn_sdpa_opts one = attn_sdpa_opts_default();
    one.scale = 1.0f;
    /* logits 2, 0, 0, ...: p_0 = e^2 / (e^2 + RL - 1), p_1 = 1 / (e^2 + RL - 1) */
    const double p0 = exp(2.0) / (exp(2.0) + RL - 1), p1 = 1.0 / (exp(2.0) + RL - 1);
    if (tu_check(&g, attend_small(STORAGES[1], 0, scale, k, v, qe, 1, one, o, lse, NULL), "attend failed"))
        tu_check(&g, fabs(o[0] / (p0 * 2e36) - 1) < 1e-5 && fabs(o[1] / (p1 * 2e36) - 1) < 1e-5,
                 "fp8 scale 2e36: out %g, %g (want %g, %g)", (double)o[0], (double)o[1], p0 * 2e36, p1 * 2e36);
    tu_group_end(&g);
}

/* ---------------------------------------------------------------- errors */

static void group_errors(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "errors");
    attn_kvcache *c = NULL;
    attn_error err;
    attn_kvcache_config cfg = {.batch = 1, .kv_heads = 2, .capacity = 8, .head_dim = 4,
                               .quant = ATTN_KV_INT8, .dtype = ATTN_BF16};
    tu_check(&g, attn_kvcache_create(&cfg, &c, &err) == ATTN_ERR_DTYPE && !c && strstr(err.message, "dtype"),
             "int8 with a bfloat16 dtype: %s", err.message);
    const float bad[2] = {1.0f, 0.0f};
    cfg.dtype = ATTN_F32;
    cfg.quant = ATTN_KV_FP8_E4M3;
    cfg.v_scale = bad;
    tu_check(&g, attn_kvcache_create(&cfg, &c, &err) == ATTN_ERR_ARG && !c && strstr(err.message, "v_scale[1]"),
             "an fp8 scale of 0: %s", err.message);
    cfg.v_scale = NULL;
    cfg.quant = ATTN_KV_Q4_0; /* head_dim 4: not whole blocks of 32 */
    tu_check(&g, attn_kvcache_create(&cfg, &c, &err) == ATTN_ERR_ARG && !c && strstr(err.message, "multiples of 32"),
             "q4_0 with head_dim 4: %s", err.message);
    cfg.quant = (attn_kv_quant)7;
    tu_check(&g, attn_kvcache_create(&cfg, &c, &err) == ATTN_ERR_ARG && !c && strstr(err.message, "quant"),
             "quant 7: %s", err.message);
    cfg.quant = ATTN_KV_INT8;
    if (tu_check(&g, attn_kvcache_create(&cfg, &c, &err) == ATTN_OK, "create: %s", err.message)) {
        attn_tensor k;
        tu_check(&g, attn_kvcache_view(c, 0, &k, NULL, &err) == ATTN_ERR_ARG && strstr(err.message, "quantized"),
                 "view of an int8 cache: %s", err.message);
        const attn_kvcache_config *got = attn_kvcache_get_config(c);
        tu_check(&g, got->quant == ATTN_KV_INT8 && !got->k_scale, "get_config quant");
    }
    attn_kvcache_free(c);
    tu_group_pass(&g);
    tu_group_end(&g);
}

int main(int argc, char **argv)
{
    tu_options opt;
    tu_suite s;
    if (!tu_begin(argc, argv, DEFAULT_SEED, &opt, &s)) return 2;
    if (tu_group_selected(&opt, "fp8")) group_fp8(&s);
    if (tu_group_selected(&opt, "int8")) group_int8(&s);
    if (tu_group_selected(&opt, "q4_0")) group_q4(&s);
    if (tu_group_selected(&opt, "attend")) group_attend(&s, &opt);
    if (tu_group_selected(&opt, "nan")) group_nan(&s);
    if (tu_group_selected(&opt, "rules")) group_rules(&s);
    if (tu_group_selected(&opt, "errors")) group_errors(&s);
    return tu_suite_finish(&s);
}
