/*
 * test_lowp — bfloat16 and float16 storage, on every path this
 * machine has (reference, generic and each SIMD ISA via ATTN_ARCH).
 *
 * The contract (README "bfloat16 and float16"): 16-bit inputs are widened
 * exactly and everything is computed in float32, so
 *   1. bitwise: a call on 16-bit Q/K/V (and dO) with float32 outputs gives
 *      exactly the bits of the float32 call on the same (rounded) values,
 *      and 16-bit outputs are exactly those float32 results rounded to
 *      nearest even — forward, backward, varlen and the KV cache;
 *   2. against the float64 oracle of the rounded inputs, every output x
 *      satisfies |x − ref| <= u·(|ref| + mag) + 64·eps32·(1 + S)·mag, u the
 *      format's unit roundoff (2^-8 bfloat16, 2^-11 float16, plus 2^-25
 *      absolute for float16 subnormals), S the largest |score| and mag the
 *      element's condition (ref64_sdpa_magnitudes): the output's rounding,
 *      the backward's use of the rounded O (in D_i = dO·O, bounded by
 *      u·mag), and the float32 computation;
 *   3. the conversions themselves: widening of all 65536 patterns of each
 *      format is exact and round-trips; narrowing rounds to nearest even
 *      against an independent float64 oracle over ~1M floats (~65k with
 *      --quick / ATTN_TEST_QUICK=1, as the sanitizer runs use), every
 *      rounding boundary of both formats and the specials (and against
 *      F16C's vcvtps2ph where the CPU has it);
 *   4. bad dtypes (16-bit lse, weights, masks, stats; a bool query; a bool
 *      KV cache) are refused with ATTN_ERR_DTYPE and change nothing;
 *   5. the files and the CLI: .npy <f2 and safetensors BF16/F16 round-trip
 *      exactly; `attn sdpa|sdpa-backward|decode --dtype` write what the
 *      library computes (<f2 for float16, exact float32 for bfloat16), and
 *      a bad --dtype is one line naming it, exit 2.
 */
#include "attn.h"
#include "clirun.h"
#include "ref64.h"
#include "sdpa_judge.h"
#include "testutil.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_F16C_CHECK 1
#endif

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* ----------------------------------------------------------- conversions */

/* One element through attn_tensor_convert. */
static float widen1(attn_dtype t, uint16_t h)
{
    float f;
    attn_tensor src = attn_tensor_make(&h, t, 1, (int64_t[]){1});
    attn_tensor dst = attn_tensor_make(&f, ATTN_F32, 1, (int64_t[]){1});
    attn_tensor_convert(&src, &dst, NULL);
    return f;
}

/* Float64 value of a 16-bit pattern, decoded from the format's definition
 * (not from the library). */
static double decode16(attn_dtype t, uint16_t h)
{
    const int ebits = t == ATTN_BF16 ? 8 : 5, mbits = 15 - ebits, bias = (1 << (ebits - 1)) - 1;
    const int e = h >> mbits & ((1 << ebits) - 1), m = h & ((1 << mbits) - 1);
    const double sign = h >> 15 ? -1.0 : 1.0;
    if (e == (1 << ebits) - 1) return m ? NAN : sign * INFINITY;
    if (e == 0) return sign * ldexp(m, 1 - bias - mbits);
    return sign * ldexp(m + (1 << mbits), e - bias - mbits);
}

/* Nearest 16-bit pattern to x by float64 arithmetic over the format's
 * values, ties to the even pattern; past the largest finite value by half
 * its spacing or more: inf. */
static uint16_t nearest16(attn_dtype t, float x)
{
    const uint16_t sign = signbit(x) ? 0x8000 : 0;
    const double a = fabs((double)x);
    const uint16_t inf = t == ATTN_BF16 ? 0x7f80 : 0x7c00;
    /* binary search on the non-negative finite patterns (ordered as integers) */
    uint16_t lo = 0, hi = (uint16_t)(inf - 1);
    if (a >= decode16(t, hi)) {
        const double spacing = decode16(t, hi) - decode16(t, (uint16_t)(hi - 1));
        return sign | (a >= decode16(t, hi) + spacing / 2 ? inf : hi);
    }
    while (hi - lo > 1) {
        const uint16_t mid = (uint16_t)((lo + hi) / 2);
        if (decode16(t, mid) <= a) lo = mid;
        else hi = mid;
    }
    const double dl = a - decode16(t, lo), dh = decode16(t, hi) - a;
    return sign | (dl < dh || (dl == dh && !(lo & 1)) ? lo : hi);
}

static uint16_t narrow1(attn_dtype t, float f)
{
    uint16_t h;
    attn_tensor src = attn_tensor_make(&f, ATTN_F32, 1, (int64_t[]){1});
    attn_tensor dst = attn_tensor_make(&h, t, 1, (int64_t[]){1});
    attn_tensor_convert(&src, &dst, NULL);
    return h;
}

#if HAVE_F16C_CHECK
/* CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports knows no "f16c") */
static bool cpu_has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

__attribute__((target("f16c"))) static uint16_t f16c_narrow(float f)
{
    return (uint16_t)_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT), 0);
}
#endif

static void check_narrow(tu_group *g, attn_dtype t, float f, int64_t *bad)
{
    const uint16_t got = narrow1(t, f);
    if (isnan(f)) {
        if (!isnan(decode16(t, got)) && (*bad)++ < 5)
            tu_group_fail(g, "%s: NaN 0x%08x narrowed to 0x%04x, not a NaN", attn_dtype_name(t),
                          f32_bits(f), got);
        return;
    }
    const uint16_t want = nearest16(t, f);
    if (got != want && (*bad)++ < 5)
        tu_group_fail(g, "%s: %.9g (0x%08x) narrowed to 0x%04x, nearest-even is 0x%04x",
                      attn_dtype_name(t), (double)f, f32_bits(f), got, want);
#if HAVE_F16C_CHECK
    if (t == ATTN_F16 && cpu_has_f16c() && f16c_narrow(f) != got && (*bad)++ < 5)
        tu_group_fail(g, "float16: %.9g narrowed to 0x%04x, F16C gives 0x%04x", (double)f, got,
                      f16c_narrow(f));
#endif
}

static void group_conversions(tu_suite *suite, uint64_t step)
{
    tu_group g;
    tu_group_begin(&g, suite, "conversions");
    const attn_dtype types[2] = {ATTN_BF16, ATTN_F16};
    for (int ti = 0; ti < 2; ++ti) {
        const attn_dtype t = types[ti];
        int64_t bad = 0;
        /* every pattern: exact widening, and back to the same pattern */
        for (uint32_t h = 0; h < 65536; ++h) {
            const double want = decode16(t, (uint16_t)h);
            const float w = widen1(t, (uint16_t)h);
            const bool nan = isnan(want);
            if ((nan ? !isnan(w) : (double)w != want || !!signbit(w) != (h >> 15 != 0)) && bad++ < 5)
                tu_group_fail(&g, "%s 0x%04x widened to %.9g, expected %.9g", attn_dtype_name(t),
                              h, (double)w, want);
            if (!nan && narrow1(t, w) != h && bad++ < 5)
                tu_group_fail(&g, "%s 0x%04x does not round-trip", attn_dtype_name(t), h);
        }
        /* every rounding boundary: the midpoints between neighbours, and the
         * floats just beside them */
        for (uint32_t h = 0; h < 0x7fff; ++h) {
            const double a = decode16(t, (uint16_t)h), b = decode16(t, (uint16_t)(h + 1));
            if (isnan(a) || isnan(b) || isinf(a)) continue;
            const float mid = (float)((a + b) / 2); /* exact in float32 */
            const float around[3] = {nextafterf(mid, 0.0f), mid, nextafterf(mid, INFINITY)};
            for (int k = 0; k < 3; ++k) {
                check_narrow(&g, t, around[k], &bad);
                check_narrow(&g, t, -around[k], &bad);
            }
        }
        /* ~1M floats spread over every exponent, and the specials */
        for (uint64_t u = 0; u < (1ull << 32); u += step) check_narrow(&g, t, bits_f32((uint32_t)u), &bad);
        const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, FLT_MAX, -FLT_MAX,
                                  FLT_MIN, FLT_TRUE_MIN, 65504.0f, 65519.99f, 65520.0f, 1e-8f};
        for (size_t k = 0; k < sizeof specials / sizeof specials[0]; ++k)
            check_narrow(&g, t, specials[k], &bad);
        check_narrow(&g, t, bits_f32(0x7f800001u), &bad); /* a signalling NaN */
        tu_check(&g, bad == 0, "%s: %lld conversion errors", attn_dtype_name(t), (long long)bad);
    }
    tu_group_end(&g);
}

/* Whole arrays through attn_tensor_convert (the kernels' vector conversions
 * on unit-stride rows), on every ISA: every pattern widened, and ~1.4M
 * floats (every rounding boundary, a spread over all exponents, specials)
 * narrowed, each element against the scalar oracle above. */
static void group_vector_conversions(tu_suite *suite, uint64_t step)
{
    tu_group g;
    tu_group_begin(&g, suite, "vector conversions");
    sj_path paths[SJ_MAX_PATHS];
    const int npaths = sj_paths(paths);
    const int64_t nsample = (int64_t)((1ull << 32) / step) + 1 + 4 * 32767 + 4;
    float *f = tu_xcalloc(nsample, sizeof(float)), *wide = tu_xcalloc(65536, sizeof(float));
    uint16_t *h = tu_xcalloc(nsample, sizeof(uint16_t)), *pat = tu_xcalloc(65536, sizeof(uint16_t));
    const attn_dtype types[2] = {ATTN_BF16, ATTN_F16};
    for (int ti = 0; ti < 2; ++ti) {
        const attn_dtype t = types[ti];
        int64_t n = 0;
        for (uint32_t x = 0; x < 0x7fff; ++x) {
            const double a = decode16(t, (uint16_t)x), b = decode16(t, (uint16_t)(x + 1));
            if (isnan(a) || isnan(b) || isinf(a)) continue;
            const float mid = (float)((a + b) / 2);
            f[n++] = nextafterf(mid, 0.0f), f[n++] = mid, f[n++] = nextafterf(mid, INFINITY);
            f[n++] = -mid;
        }
        for (uint64_t u = 0; u < (1ull << 32); u += step) f[n++] = bits_f32((uint32_t)u);
        f[n++] = INFINITY, f[n++] = -INFINITY, f[n++] = NAN, f[n++] = 65520.0f;
        for (uint32_t x = 0; x < 65536; ++x) pat[x] = (uint16_t)x;
        for (int pi = 1; pi < npaths; ++pi) { /* the fused paths: each ISA's kernels */
            sj_select(&paths[pi]);
            attn_tensor F = attn_tensor_make(f, ATTN_F32, 1, (int64_t[]){n});
            attn_tensor H = attn_tensor_make(h, t, 1, (int64_t[]){n});
            attn_tensor P = attn_tensor_make(pat, t, 1, (int64_t[]){65536});
            attn_tensor W = attn_tensor_make(wide, ATTN_F32, 1, (int64_t[]){65536});
            attn_error e;
            if (!tu_check(&g, attn_tensor_convert(&F, &H, &e) == ATTN_OK &&
                                  attn_tensor_convert(&P, &W, &e) == ATTN_OK,
                          "convert: %s", e.message))
                continue;
            int64_t bad = 0;
            for (int64_t i = 0; i < n; ++i) {
                const bool ok = isnan(f[i]) ? isnan(decode16(t, h[i])) : h[i] == nearest16(t, f[i]);
                if (!ok && bad++ < 3)
                    tu_group_fail(&g, "%s %s: %.9g narrowed to 0x%04x, nearest-even 0x%04x",
                                  paths[pi].name, attn_dtype_name(t), (double)f[i], h[i],
                                  nearest16(t, f[i]));
            }
            for (uint32_t x = 0; x < 65536; ++x) {
                const double want = decode16(t, (uint16_t)x);
                const bool ok = isnan(want) ? isnan(wide[x])
                                            : (double)wide[x] == want && !!signbit(wide[x]) == (x >> 15);
                if (!ok && bad++ < 3)
                    tu_group_fail(&g, "%s %s: 0x%04x widened to %.9g", paths[pi].name,
                                  attn_dtype_name(t), x, (double)wide[x]);
            }
            if (bad == 0) tu_group_pass(&g);
        }
        sj_select(&paths[0]);
    }
    free(f);
    free(wide);
    free(h);
    free(pat);
    tu_group_end(&g);
}

/* ----------------------------------------------------------------- cases */

typedef struct {
    const char *name;
    int64_t B, Hq, Hkv, Nq, Nk, D, Dv;
    attn_causal causal;
    bool mask;          /* a float mask (B,1,Nq,Nk) with some -inf */
    bool strided;       /* K as a (B,Nk,Hkv,D) buffer, V with element stride 2 */
    bool gapped;        /* Q, K, V all with element stride 2 */
    bool variants;      /* window + softcap + ALiBi + sinks (bitwise groups only) */
    bool backward;
} lp_case;

static const lp_case cases[] = {
    {"prefill causal GQA", 1, 4, 2, 37, 301, 40, 40, ATTN_CAUSAL_BOTTOM_RIGHT, false, false, false, false, true},
    {"decode split-KV stacked", 2, 8, 2, 1, 4500, 64, 64, ATTN_CAUSAL_NONE, false, false, false, false, false},
    {"decode 5 rows", 1, 4, 1, 5, 2300, 32, 24, ATTN_CAUSAL_BOTTOM_RIGHT, false, false, true, false, false},
    {"masked D != Dv", 2, 2, 2, 29, 83, 17, 9, ATTN_CAUSAL_TOP_LEFT, true, false, false, false, true},
    {"strided views", 1, 3, 3, 50, 130, 24, 16, ATTN_CAUSAL_NONE, false, true, false, false, true},
    {"variants", 1, 4, 2, 64, 200, 32, 32, ATTN_CAUSAL_BOTTOM_RIGHT, false, false, false, true, true},
};

/* Float tensors of a case: values rounded to the 16-bit format, as float32
 * (contiguous, or the case's strided layout) and as 16-bit data of the
 * same layout. */
typedef struct {
    attn_tensor f, h;   /* float32 and 16-bit views of the same values */
    float *fbuf;
    uint16_t *hbuf;
    double *ref;        /* contiguous float64 copy for the oracle */
} lp_tensor;

static void lp_make(lp_tensor *t, attn_dtype dt, const int64_t *shape, bool strided,
                    bool value_like, bool gapped, tu_rng *rng, double amp)
{
    const int64_t n = shape[0] * shape[1] * shape[2] * shape[3];
    const int64_t gap = (strided && value_like) || gapped ? 2 : 1;
    t->fbuf = tu_xcalloc(n * gap, sizeof(float));
    t->hbuf = tu_xcalloc(n * gap, sizeof(uint16_t));
    t->ref = tu_xcalloc(n, sizeof(double));
    t->f = attn_tensor_make(t->fbuf, ATTN_F32, 4, shape);
    if (strided && !value_like) { /* a (B, N, H, D) buffer seen as (B, H, N, D) */
        t->f.stride[3] = 1;
        t->f.stride[1] = shape[3];
        t->f.stride[2] = shape[1] * shape[3];
        t->f.stride[0] = shape[1] * shape[2] * shape[3];
    } else if (gap > 1) {
        for (int d = 0; d < 4; ++d) t->f.stride[d] *= gap;
    }
    t->h = t->f;
    t->h.data = t->hbuf;
    t->h.dtype = dt;
    /* random values in the 16-bit format first, then widened */
    int64_t idx[4] = {0};
    for (int64_t e = 0; e < n; ++e) {
        int64_t r = e, off = 0;
        for (int d = 3; d >= 0; --d) {
            idx[d] = r % shape[d];
            r /= shape[d];
            off += idx[d] * t->f.stride[d];
        }
        const float x = (float)(amp * tu_rng_normal(rng));
        uint16_t h;
        attn_tensor src = attn_tensor_make((void *)&x, ATTN_F32, 1, (int64_t[]){1});
        attn_tensor dst = attn_tensor_make(&h, dt, 1, (int64_t[]){1});
        attn_tensor_convert(&src, &dst, NULL);
        t->hbuf[off] = h;
        t->fbuf[off] = widen1(dt, h);
        t->ref[e] = t->fbuf[off];
    }
}

static void lp_free(lp_tensor *t)
{
    free(t->fbuf);
    free(t->hbuf);
    free(t->ref);
}

/* A contiguous 16-bit output buffer and view of shape. */
static attn_tensor out16(attn_dtype dt, const int64_t *shape, int ndim, uint16_t **buf)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= shape[d];
    *buf = tu_xcalloc(n, sizeof(uint16_t));
    return attn_tensor_make(*buf, dt, ndim, shape);
}

static attn_tensor out32(const int64_t *shape, int ndim, float **buf)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= shape[d];
    *buf = tu_xcalloc(n, sizeof(float));
    return attn_tensor_make(*buf, ATTN_F32, ndim, shape);
}

/* Compares n floats bitwise (NaN patterns aside); reports the first. */
static bool same_bits(tu_group *g, const char *what, const float *a, const float *b, int64_t n)
{
    for (int64_t i = 0; i < n; ++i)
        if (f32_bits(a[i]) != f32_bits(b[i]) && !(isnan(a[i]) && isnan(b[i]))) {
            tu_group_fail(g, "%s: element %lld is %.9g, the float32 call gives %.9g", what,
                          (long long)i, (double)a[i], (double)b[i]);
            return false;
        }
    return true;
}

/* 16-bit results h must be the float32 results f rounded to nearest even. */
static bool rounded_bits(tu_group *g, const char *what, attn_dtype dt, const uint16_t *h,
                         const float *f, int64_t n)
{
    for (int64_t i = 0; i < n; ++i)
        if (h[i] != nearest16(dt, f[i]) && !(isnan(f[i]) && isnan(widen1(dt, h[i])))) {
            tu_group_fail(g, "%s: element %lld is 0x%04x, float32 %.9g rounds to 0x%04x", what,
                          (long long)i, h[i], (double)f[i], nearest16(dt, f[i]));
            return false;
        }
    return true;
}

/* The contract's float64 bound for one output array. */
static bool within_bound(tu_group *g, const char *what, attn_dtype dt, const uint16_t *h,
                         const double *ref, const double *mag, double S, int64_t n)
{
    const double u = dt == ATTN_BF16 ? ldexp(1.0, -8) : ldexp(1.0, -11);
    const double tiny = dt == ATTN_F16 ? ldexp(1.0, -25) : 0.0;
    for (int64_t i = 0; i < n; ++i) {
        const double x = widen1(dt, h[i]);
        const double tol =
            u * (fabs(ref[i]) + mag[i]) + tiny + 64.0 * FLT_EPSILON * (1.0 + S) * mag[i];
        if (!(fabs(x - ref[i]) <= tol)) {
            tu_group_fail(g, "%s: element %lld is %.9g, float64 reference %.9g (bound %.3g)",
                          what, (long long)i, x, ref[i], tol);
            return false;
        }
    }
    return true;
}

/* Options of a case (the mask tensor and per-head vectors live in *storage). */
typedef struct {
    float *mask, *slopes, *sinks;
    attn_tensor mask_t, slopes_t, sinks_t;
} lp_opts_storage;

static attn_sdpa_opts case_opts(const lp_case *c, lp_opts_storage *st, tu_rng *rng)
{
    attn_sdpa_opts o = attn_sdpa_opts_default();
    o.causal = c->causal;
    memset(st, 0, sizeof *st);
    if (c->mask) {
        const int64_t shape[4] = {c->B, 1, c->Nq, c->Nk};
        st->mask_t = out32(shape, 4, &st->mask);
        for (int64_t e = 0; e < c->B * c->Nq * c->Nk; ++e)
            st->mask[e] = tu_rng_chance(rng, 0.2) ? -INFINITY : (float)tu_rng_range(rng, -1, 1);
        o.mask[0] = &st->mask_t;
    }
    if (c->variants) {
        o.window = (attn_window){.enabled = true, .left = 40, .right = 3};
        o.softcap = 5.0f;
        st->slopes_t = out32((int64_t[]){c->Hq}, 1, &st->slopes);
        st->sinks_t = out32((int64_t[]){c->Hq}, 1, &st->sinks);
        attn_alibi_slopes(c->Hq, st->slopes, NULL);
        for (int64_t h = 0; h < c->Hq; ++h) st->sinks[h] = (float)tu_rng_range(rng, -1, 2);
        o.alibi_slopes = &st->slopes_t;
        o.sinks = &st->sinks_t;
    }
    return o;
}

static void free_opts(lp_opts_storage *st)
{
    free(st->mask);
    free(st->slopes);
    free(st->sinks);
}

/* The float64 oracle's bias for a case with a mask (ref64 has no variants). */
static double *case_bias(const lp_case *c, const attn_sdpa_opts *o)
{
    if (!c->mask) return NULL;
    double *bias = tu_xcalloc(c->B * c->Hq * c->Nq * c->Nk, sizeof(double));
    ref64_add_mask(bias, c->B, c->Hq, c->Nq, c->Nk, o->mask[0]);
    return bias;
}

static void run_case(tu_group *gb, tu_group *gr, const lp_case *c, attn_dtype dt,
                     const sj_path *paths, int npaths, uint64_t seed)
{
    tu_rng rng;
    tu_rng_seed(&rng, seed);
    const int64_t qs[4] = {c->B, c->Hq, c->Nq, c->D}, ks[4] = {c->B, c->Hkv, c->Nk, c->D};
    const int64_t vs[4] = {c->B, c->Hkv, c->Nk, c->Dv}, os[4] = {c->B, c->Hq, c->Nq, c->Dv};
    const int64_t ls[3] = {c->B, c->Hq, c->Nq};
    lp_tensor q, k, v, dout;
    lp_make(&q, dt, qs, false, false, c->gapped, &rng, 1.0);
    lp_make(&k, dt, ks, c->strided, false, c->gapped, &rng, 1.0);
    lp_make(&v, dt, vs, c->strided, true, c->gapped, &rng, 1.0);
    lp_make(&dout, dt, os, false, false, false, &rng, 1.0);
    lp_opts_storage st;
    attn_sdpa_opts o = case_opts(c, &st, &rng);
    const int64_t no = c->B * c->Hq * c->Nq * c->Dv, nl = c->B * c->Hq * c->Nq;
    const int64_t nqe = c->B * c->Hq * c->Nq * c->D, nke = c->B * c->Hkv * c->Nk * c->D;
    const int64_t nve = c->B * c->Hkv * c->Nk * c->Dv;

    /* float64 oracle of the rounded inputs (cases without variants) */
    double *ref_o = NULL, *mag_o = NULL, *ref_dq = NULL, *ref_dk = NULL, *ref_dv = NULL;
    double *mag_dq = NULL, *mag_dk = NULL, *mag_dv = NULL, S = 0.0;
    double *bias = case_bias(c, &o);
    const ref64_sdpa rp = {c->B, c->Hq, c->Hkv, c->Nq, c->Nk, c->D, c->Dv,
                           (double)(1.0f / sqrtf((float)c->D)), c->causal, bias};
    if (!c->variants) {
        double *w = tu_xcalloc(nl * c->Nk, sizeof(double));
        ref_o = tu_xcalloc(no, sizeof(double));
        mag_o = tu_xcalloc(no, sizeof(double));
        ref64_sdpa_forward(&rp, q.ref, k.ref, v.ref, ref_o, NULL, w);
        if (c->backward) {
            ref_dq = tu_xcalloc(nqe, sizeof(double));
            ref_dk = tu_xcalloc(nke, sizeof(double));
            ref_dv = tu_xcalloc(nve, sizeof(double));
            mag_dq = tu_xcalloc(nqe, sizeof(double));
            mag_dk = tu_xcalloc(nke, sizeof(double));
            mag_dv = tu_xcalloc(nve, sizeof(double));
            ref64_sdpa_backward(&rp, q.ref, k.ref, v.ref, dout.ref, ref_dq, ref_dk, ref_dv);
        }
        ref64_sdpa_magnitudes(&rp, q.ref, k.ref, v.ref, dout.ref, w, mag_o, mag_dq, mag_dk, mag_dv);
        S = ref64_sdpa_score_magnitude(&rp, q.ref, k.ref);
        free(w);
    }

    for (int pi = 0; pi < npaths; ++pi) {
        sj_select(&paths[pi]);
        o.path = paths[pi].path;
        char what[160];
        snprintf(what, sizeof what, "%s, %s, %s (seed %llu)", c->name, attn_dtype_name(dt),
                 paths[pi].name, (unsigned long long)seed);
        float *o32, *o16f, *l32, *l16;
        uint16_t *o16;
        attn_tensor O32 = out32(os, 4, &o32), O16F = out32(os, 4, &o16f);
        attn_tensor L32 = out32(ls, 3, &l32), L16 = out32(ls, 3, &l16);
        attn_tensor O16 = out16(dt, os, 4, &o16);
        attn_error e;
        bool ok = attn_sdpa(&q.f, &k.f, &v.f, &O32, &L32, NULL, &o, &e) == ATTN_OK;
        ok = ok && attn_sdpa(&q.h, &k.h, &v.h, &O16F, &L16, NULL, &o, &e) == ATTN_OK;
        ok = ok && attn_sdpa(&q.h, &k.h, &v.h, &O16, NULL, NULL, &o, &e) == ATTN_OK;
        if (!tu_check(gb, ok, "%s: forward failed: %s", what, e.message)) goto next;
        bool same = same_bits(gb, what, o16f, o32, no) && same_bits(gb, what, l16, l32, nl) &&
                    rounded_bits(gb, what, dt, o16, o32, no);
        if (same && c->gapped) { /* a 16-bit out with element stride 2 too */
            uint16_t *wide = tu_xcalloc(2 * no, sizeof(uint16_t));
            uint16_t *packed = tu_xcalloc(no, sizeof(uint16_t));
            attn_tensor OG = attn_tensor_make(wide, dt, 4, os);
            for (int d = 0; d < 4; ++d) OG.stride[d] *= 2;
            ok = attn_sdpa(&q.h, &k.h, &v.h, &OG, NULL, NULL, &o, &e) == ATTN_OK;
            for (int64_t x = 0; x < no; ++x) packed[x] = wide[2 * x];
            same = tu_check(gb, ok, "%s: forward into a strided out failed: %s", what, e.message) &&
                   rounded_bits(gb, what, dt, packed, o32, no);
            free(wide);
            free(packed);
        }
        if (same) tu_group_pass(gb);
        if (ref_o && within_bound(gr, what, dt, o16, ref_o, mag_o, S, no)) tu_group_pass(gr);

        if (c->backward) {
            /* The 16-bit backward reads the 16-bit forward output; its
             * float32 twin reads the same values widened. */
            float *g16f[3], *g32r[3], *o32r;
            uint16_t *g16[3];
            const int64_t *gs[3] = {qs, ks, vs};
            const int64_t gn[3] = {nqe, nke, nve};
            attn_tensor G16F[3], G16[3], G32R[3];
            for (int x = 0; x < 3; ++x) {
                G16F[x] = out32(gs[x], 4, &g16f[x]);
                G16[x] = out16(dt, gs[x], 4, &g16[x]);
                G32R[x] = out32(gs[x], 4, &g32r[x]);
            }
            attn_tensor O32R = out32(os, 4, &o32r);
            attn_tensor_convert(&O16, &O32R, NULL);
            ok = attn_sdpa_backward(&q.f, &k.f, &v.f, &O32R, &L32, &dout.f, &G32R[0],
                                          &G32R[1], &G32R[2], &o, &e) == ATTN_OK;
            ok = ok && attn_sdpa_backward(&q.h, &k.h, &v.h, &O16, &L32, &dout.h, &G16F[0],
                                          &G16F[1], &G16F[2], &o, &e) == ATTN_OK;
            ok = ok && attn_sdpa_backward(&q.h, &k.h, &v.h, &O16, &L32, &dout.h, &G16[0],
                                          &G16[1], &G16[2], &o, &e) == ATTN_OK;
            if (tu_check(gb, ok, "%s: backward failed: %s", what, e.message)) {
                bool all = true;
                for (int x = 0; x < 3; ++x)
                    all = all && same_bits(gb, what, g16f[x], g32r[x], gn[x]) &&
                          rounded_bits(gb, what, dt, g16[x], g32r[x], gn[x]);
                if (all) tu_group_pass(gb);
                if (ref_dq) {
                    const double *refs[3] = {ref_dq, ref_dk, ref_dv}, *mags[3] = {mag_dq, mag_dk, mag_dv};
                    /* dO·O rounding of the 16-bit out enters D_i = Σ dO·O: its
                     * condition is that of out (mag_o) times |dO|, covered by mag. */
                    bool in = true;
                    for (int x = 0; x < 3; ++x)
                        in = in && within_bound(gr, what, dt, g16[x], refs[x], mags[x], S, gn[x]);
                    if (in) tu_group_pass(gr);
                }
            }
            for (int x = 0; x < 3; ++x) {
                free(g16f[x]);
                free(g16[x]);
                free(g32r[x]);
            }
            free(o32r);
        }
    next:
        free(o32);
        free(o16f);
        free(l32);
        free(l16);
        free(o16);
    }
    sj_select(&paths[0]);
    free(bias);
    free(ref_o);
    free(mag_o);
    free(ref_dq);
    free(ref_dk);
    free(ref_dv);
    free(mag_dq);
    free(mag_dk);
    free(mag_dv);
    free_opts(&st);
    lp_free(&q);
    lp_free(&k);
    lp_free(&v);
    lp_free(&dout);
}

static void group_sdpa(tu_suite *suite, const tu_options *opt)
{
    sj_path paths[SJ_MAX_PATHS];
    const int npaths = sj_paths(paths);
    tu_group gb, gr;
    tu_group_begin(&gb, suite, "bitwise vs float32");
    tu_group_begin(&gr, suite, "float64 bound");
    const attn_dtype types[2] = {ATTN_BF16, ATTN_F16};
    /* The quick mode (qemu, the sanitizers) halves the calls: each case runs
     * each path in one format, alternating, so every path still meets both
     * formats forward and backward, and every case both formats. */
    if (opt->quick)
        printf("quick mode: each case runs bfloat16 on every other path and float16 on the rest, "
               "not both on every path\n");
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ++ci)
        for (int ti = 0; ti < 2; ++ti) {
            sj_path chosen[SJ_MAX_PATHS];
            int nchosen = 0;
            for (int pi = 0; pi < npaths; ++pi)
                if (!opt->quick || (size_t)pi % 2 == (ci + (size_t)ti) % 2) chosen[nchosen++] = paths[pi];
            run_case(&gb, &gr, &cases[ci], types[ti], chosen, nchosen,
                     tu_mix(opt->seed ^ (ci * 2 + (uint64_t)ti)));
        }
    sj_select(&paths[0]);
    tu_group_end(&gb);
    tu_group_end(&gr);
}

/* ------------------------------------------------------ bf16 dot products */

/* ATTN_PRECISION_BF16_DOT (attn.h): bfloat16 Q, K, V through the pair dot
 * products where the CPU has AVX512_BF16, else through the exact path.
 * Either way out is within the bfloat16 bound of the float64 reference of
 * the rounded inputs; with the instructions its bits differ from the exact
 * call's (so the mode did run), without them they are the same. In the
 * masked case the keys no row sees (top-left causal, j >= Nq) hold NaN in
 * V: their zero probabilities must not meet them (the tile falls back to
 * the float32 product that skips zeros). */
static void group_bf16_dot(tu_suite *suite, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, suite, "bf16 dot products");
    unsetenv("ATTN_ARCH");
    bool hw = false;
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
    hw = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512bf16");
#endif
    static const lp_case dcases[] = {
        {"prefill causal GQA", 1, 4, 2, 37, 301, 40, 40, ATTN_CAUSAL_BOTTOM_RIGHT, false, false, false, false, false},
        {"masked, NaN in hidden V", 2, 2, 2, 29, 83, 16, 9, ATTN_CAUSAL_TOP_LEFT, true, false, false, false, false},
        {"long rows", 1, 2, 2, 200, 700, 64, 64, ATTN_CAUSAL_NONE, false, false, false, false, false},
        {"several units", 1, 8, 8, 130, 97, 128, 48, ATTN_CAUSAL_NONE, false, false, false, false, false},
    };
    for (size_t ci = 0; ci < sizeof dcases / sizeof dcases[0]; ++ci) {
        const lp_case *c = &dcases[ci];
        tu_rng rng;
        tu_rng_seed(&rng, tu_mix(opt->seed ^ (0xD07ull + ci)));
        const int64_t qs[4] = {c->B, c->Hq, c->Nq, c->D}, ks[4] = {c->B, c->Hkv, c->Nk, c->D};
        const int64_t vs[4] = {c->B, c->Hkv, c->Nk, c->Dv}, os[4] = {c->B, c->Hq, c->Nq, c->Dv};
        const int64_t no = c->B * c->Hq * c->Nq * c->Dv, nl = c->B * c->Hq * c->Nq;
        lp_tensor q, k, v;
        lp_make(&q, ATTN_BF16, qs, false, false, false, &rng, 1.0);
        lp_make(&k, ATTN_BF16, ks, false, false, false, &rng, 1.0);
        lp_make(&v, ATTN_BF16, vs, false, true, false, &rng, 1.0);
        lp_opts_storage st;
        attn_sdpa_opts o = case_opts(c, &st, &rng);
        double *bias = case_bias(c, &o);
        const ref64_sdpa rp = {c->B, c->Hq, c->Hkv, c->Nq, c->Nk, c->D, c->Dv,
                               (double)(1.0f / sqrtf((float)c->D)), c->causal, bias};
        double *w = tu_xcalloc(nl * c->Nk, sizeof(double)), *ref_o = tu_xcalloc(no, sizeof(double));
        double *mag_o = tu_xcalloc(no, sizeof(double));
        ref64_sdpa_forward(&rp, q.ref, k.ref, v.ref, ref_o, NULL, w);
        ref64_sdpa_magnitudes(&rp, q.ref, k.ref, v.ref, NULL, w, mag_o, NULL, NULL, NULL);
        const double S = ref64_sdpa_score_magnitude(&rp, q.ref, k.ref);
        if (c->mask) /* keys j >= Nq: hidden from every row by the top-left diagonal */
            for (int64_t e = 0; e < c->B * c->Hkv * c->Nk * c->Dv; ++e)
                if (e / c->Dv % c->Nk >= c->Nq) v.hbuf[e] = 0x7fc0;
        uint16_t *exact, *dot;
        attn_tensor OE = out16(ATTN_BF16, os, 4, &exact), OD = out16(ATTN_BF16, os, 4, &dot);
        attn_error e;
        bool ok = attn_sdpa(&q.h, &k.h, &v.h, &OE, NULL, NULL, &o, &e) == ATTN_OK;
        o.precision = ATTN_PRECISION_BF16_DOT;
        ok = ok && attn_sdpa(&q.h, &k.h, &v.h, &OD, NULL, NULL, &o, &e) == ATTN_OK;
        char what[120];
        snprintf(what, sizeof what, "%s (bf16 dot, AVX512_BF16 %s)", c->name, hw ? "present" : "absent");
        if (tu_check(&g, ok, "%s: forward failed: %s", what, e.message)) {
            if (within_bound(&g, what, ATTN_BF16, dot, ref_o, mag_o, S, no)) tu_group_pass(&g);
            const bool same = memcmp(exact, dot, (size_t)no * sizeof(uint16_t)) == 0;
            tu_check(&g, hw ? !same : same, "%s: the output's bits %s the exact call's", what,
                     same ? "equal" : "differ from");
        }
        free(exact), free(dot), free(w), free(ref_o), free(mag_o), free(bias);
        free_opts(&st);
        lp_free(&q), lp_free(&k), lp_free(&v);
    }
    tu_group_end(&g);
}

/* --------------------------------------------------- varlen and KV cache */

static void group_varlen_cache(tu_suite *suite, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, suite, "varlen and KV cache");
    tu_rng rng;
    tu_rng_seed(&rng, tu_mix(opt->seed ^ 0x77));
    const attn_dtype dt = ATTN_BF16;
    const int64_t H = 4, Hkv = 2, D = 32, T = 90;
    /* varlen: packed (T, H, D) bfloat16 against the float32 call on the same values */
    lp_tensor q, k, v;
    lp_make(&q, dt, (int64_t[]){1, T, H, D}, false, false, false, &rng, 1.0);
    lp_make(&k, dt, (int64_t[]){1, T, Hkv, D}, false, false, false, &rng, 1.0);
    lp_make(&v, dt, (int64_t[]){1, T, Hkv, D}, false, false, false, &rng, 1.0);
    attn_tensor q3[2], k3[2], v3[2];
    for (int x = 0; x < 2; ++x) {
        const attn_tensor *qq = x ? &q.h : &q.f, *kk = x ? &k.h : &k.f, *vv = x ? &v.h : &v.f;
        q3[x] = attn_tensor_make(qq->data, qq->dtype, 3, (int64_t[]){T, H, D});
        k3[x] = attn_tensor_make(kk->data, kk->dtype, 3, (int64_t[]){T, Hkv, D});
        v3[x] = attn_tensor_make(vv->data, vv->dtype, 3, (int64_t[]){T, Hkv, D});
    }
    const int64_t cu[4] = {0, 17, 60, 90};
    attn_varlen_seqs seqs = {.nseq = 3, .type = ATTN_OFFSETS_I64, .cu_seqlens_q = cu,
                             .cu_seqlens_k = cu};
    attn_sdpa_opts o = attn_sdpa_opts_default();
    o.causal = ATTN_CAUSAL_TOP_LEFT;
    float *o32, *o16f;
    attn_tensor O32 = out32((int64_t[]){T, H, D}, 3, &o32), O16F = out32((int64_t[]){T, H, D}, 3, &o16f);
    attn_error e;
    bool ok = attn_sdpa_varlen(&q3[0], &k3[0], &v3[0], &seqs, &O32, NULL, &o, &e) == ATTN_OK &&
              attn_sdpa_varlen(&q3[1], &k3[1], &v3[1], &seqs, &O16F, NULL, &o, &e) == ATTN_OK;
    if (tu_check(&g, ok, "varlen failed: %s", e.message) &&
        same_bits(&g, "varlen bfloat16", o16f, o32, T * H * D))
        tu_group_pass(&g);
    free(o32);
    free(o16f);
    lp_free(&q);
    lp_free(&k);
    lp_free(&v);

    /* KV cache in bfloat16 and float16, contiguous and paged: appending
     * float32 values rounds them; attending by attn_sdpa's path equals
     * attn_sdpa on the 16-bit view, and paged equals contiguous (the decode
     * kernel that AUTO picks for these shapes: tests/test_kvquant.c) */
    const attn_dtype types[2] = {ATTN_BF16, ATTN_F16};
    for (int ti = 0; ti < 2; ++ti) {
        const int64_t B = 2, L = 700, Nq = 3;
        lp_tensor kk, vv, qq;
        lp_make(&kk, types[ti], (int64_t[]){B, Hkv, L, D}, false, false, false, &rng, 1.0);
        lp_make(&vv, types[ti], (int64_t[]){B, Hkv, L, D}, false, false, false, &rng, 1.0);
        lp_make(&qq, types[ti], (int64_t[]){B, H, Nq, D}, false, false, false, &rng, 1.0);
        float *res[3];
        for (int mode = 0; mode < 3; ++mode) { /* 0 contiguous, 1 paged, 2 attn_sdpa */
            attn_tensor out = out32((int64_t[]){B, H, Nq, D}, 4, &res[mode]);
            attn_sdpa_opts ao = attn_sdpa_opts_default();
            ao.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
            ao.path = ATTN_PATH_FUSED;
            if (mode == 2) {
                ok = attn_sdpa(&qq.h, &kk.h, &vv.h, &out, NULL, NULL, &ao, &e) == ATTN_OK;
            } else {
                attn_kvcache_config cfg = {.batch = B, .kv_heads = Hkv, .capacity = 1024,
                                           .head_dim = D, .block_size = mode == 1 ? 64 : 0,
                                           .dtype = types[ti]};
                attn_kvcache *cache = NULL;
                ok = attn_kvcache_create(&cfg, &cache, &e) == ATTN_OK &&
                     attn_kvcache_append(cache, &kk.f, &vv.f, NULL, &e) == ATTN_OK &&
                     attn_kvcache_attend(cache, &qq.h, &out, NULL, &ao, &e) == ATTN_OK;
                attn_kvcache_free(cache);
            }
            tu_check(&g, ok, "KV cache %s mode %d failed: %s", attn_dtype_name(types[ti]), mode,
                     e.message);
        }
        char what[64];
        snprintf(what, sizeof what, "KV cache %s contiguous", attn_dtype_name(types[ti]));
        if (same_bits(&g, what, res[0], res[2], B * H * Nq * D)) tu_group_pass(&g);
        snprintf(what, sizeof what, "KV cache %s paged", attn_dtype_name(types[ti]));
        if (same_bits(&g, what, res[1], res[0], B * H * Nq * D)) tu_group_pass(&g);
        for (int mode = 0; mode < 3; ++mode) free(res[mode]);
        lp_free(&kk);
        lp_free(&vv);
        lp_free(&qq);
    }
    tu_group_end(&g);
}

/* ------------------------------------------------------------ bad dtypes */

static void group_bad(tu_suite *suite)
{
    tu_group g;
    tu_group_begin(&g, suite, "bad dtypes");
    uint16_t q[2 * 4] = {0}, k[3 * 4] = {0}, v[3 * 4] = {0}, o[2 * 4], l16[2];
    float of[2 * 4], lf[2];
    uint8_t qb[8] = {0};
    const int64_t qs[4] = {1, 1, 2, 4}, ks[4] = {1, 1, 3, 4}, ls[3] = {1, 1, 2};
    attn_tensor Q = attn_tensor_make(q, ATTN_BF16, 4, qs), K = attn_tensor_make(k, ATTN_BF16, 4, ks);
    attn_tensor V = attn_tensor_make(v, ATTN_BF16, 4, ks), O = attn_tensor_make(o, ATTN_BF16, 4, qs);
    attn_tensor OF = attn_tensor_make(of, ATTN_F32, 4, qs);
    attn_tensor L16 = attn_tensor_make(l16, ATTN_BF16, 3, ls), LF = attn_tensor_make(lf, ATTN_F32, 3, ls);
    attn_tensor QB = attn_tensor_make(qb, ATTN_BOOL, 4, qs);
    attn_tensor M16 = attn_tensor_make(q, ATTN_F16, 2, (int64_t[]){2, 3});
    attn_tensor W16 = attn_tensor_make(k, ATTN_F16, 4, (int64_t[]){1, 1, 2, 3});
    attn_error e;
    memset(o, 0xab, sizeof o);
    memset(of, 0xab, sizeof of);
    const uint16_t o_before = o[0];
    tu_check(&g, attn_sdpa(&Q, &K, &V, &O, &L16, NULL, NULL, &e) == ATTN_ERR_DTYPE &&
                     strstr(e.message, "lse") && o[0] == o_before,
             "a bfloat16 lse: %s", e.message);
    tu_check(&g, attn_sdpa(&Q, &K, &V, &OF, &LF, &W16, NULL, &e) == ATTN_ERR_DTYPE &&
                     strstr(e.message, "weights"),
             "float16 weights: %s", e.message);
    attn_sdpa_opts mo = attn_sdpa_opts_default();
    mo.mask[0] = &M16;
    tu_check(&g, attn_sdpa(&Q, &K, &V, &OF, NULL, NULL, &mo, &e) == ATTN_ERR_DTYPE &&
                     strstr(e.message, "mask"),
             "a float16 mask: %s", e.message);
    tu_check(&g, attn_sdpa(&QB, &K, &V, &OF, NULL, NULL, NULL, &e) == ATTN_ERR_DTYPE &&
                     strstr(e.message, "query"),
             "a bool query: %s", e.message);
    attn_kvcache_config cfg = {.batch = 1, .kv_heads = 1, .capacity = 4, .head_dim = 4,
                               .dtype = ATTN_BOOL};
    attn_kvcache *cache = NULL;
    tu_check(&g, attn_kvcache_create(&cfg, &cache, &e) == ATTN_ERR_DTYPE && !cache,
             "a bool KV cache: %s", e.message);
    attn_tensor cs = attn_tensor_make(k, ATTN_BF16, 2, (int64_t[]){3, 4});
    attn_tensor cd = attn_tensor_make(qb, ATTN_BOOL, 2, (int64_t[]){2, 4});
    tu_check(&g, attn_tensor_convert(&cs, &cd, &e) == ATTN_ERR_DTYPE, "convert to bool: %s",
             e.message);
    attn_tensor cd2 = attn_tensor_make(of, ATTN_F32, 2, (int64_t[]){2, 4});
    tu_check(&g, attn_tensor_convert(&cs, &cd2, &e) == ATTN_ERR_SHAPE, "convert shapes: %s",
             e.message);
    tu_check(&g, strcmp(attn_dtype_name(ATTN_BF16), "bfloat16") == 0 &&
                     attn_dtype_size(ATTN_F16) == 2 && attn_dtype_size(ATTN_F32) == 4,
             "dtype names and sizes");
    tu_group_end(&g);
}

/* ------------------------------------------------------------ files, CLI */

static bool read_npy(const char *path, attn_array *a)
{
    return attn_npy_read(path, a, NULL) == ATTN_OK;
}

static void group_files_cli(tu_suite *suite)
{
    tu_group g;
    tu_group_begin(&g, suite, "files and CLI");
    char dir[] = "/tmp/attn-test-lowp-XXXXXX";
    if (!mkdtemp(dir)) {
        tu_group_fail(&g, "mkdtemp failed");
        tu_group_end(&g);
        return;
    }
    char qp[64], kp[64], vp[64], op[64], sp[64], kcp[64];
    snprintf(qp, sizeof qp, "%s/q.npy", dir);
    snprintf(kp, sizeof kp, "%s/k.npy", dir);
    snprintf(vp, sizeof vp, "%s/v.npy", dir);
    snprintf(op, sizeof op, "%s/o.npy", dir);
    snprintf(sp, sizeof sp, "%s/t.safetensors", dir);
    snprintf(kcp, sizeof kcp, "%s/dk.npy", dir);
    tu_rng rng;
    tu_rng_seed(&rng, 0x5eed);
    const int64_t qs[4] = {1, 2, 9, 8}, ks[4] = {1, 2, 20, 8};
    lp_tensor q, k, v;
    lp_make(&q, ATTN_F16, qs, false, false, false, &rng, 1.0);
    lp_make(&k, ATTN_F16, ks, false, false, false, &rng, 1.0);
    lp_make(&v, ATTN_F16, ks, false, false, false, &rng, 1.0);
    attn_error e;
    /* .npy <f2 round trip, and the CLI on float16 files */
    bool ok = attn_npy_write(qp, &q.h, &e) == ATTN_OK && attn_npy_write(kp, &k.h, &e) == ATTN_OK &&
              attn_npy_write(vp, &v.h, &e) == ATTN_OK;
    attn_array back = {0};
    ok = ok && read_npy(qp, &back) && !strcmp(back.file_dtype, "<f2");
    if (tu_check(&g, ok, "npy <f2 write/read: %s", e.message))
        if (same_bits(&g, ".npy <f2 round trip", back.t.data, q.fbuf, 2 * 9 * 8)) tu_group_pass(&g);
    attn_array_free(&back);
    attn_tensor b16 = q.h;
    b16.dtype = ATTN_BF16;
    tu_check(&g, attn_npy_write(op, &b16, &e) == ATTN_ERR_DTYPE && strstr(e.message, "bfloat16"),
             "a bfloat16 .npy is refused: %s", e.message);
    /* safetensors BF16 and F16 */
    uint16_t kb[2 * 20 * 8];
    attn_tensor kbt = attn_tensor_make(kb, ATTN_BF16, 4, ks);
    attn_tensor_convert(&k.f, &kbt, NULL);
    const char *names[2] = {"kb", "kh"};
    const attn_tensor ts[2] = {kbt, k.h};
    attn_safetensors st = {0};
    ok = attn_safetensors_write(sp, names, ts, 2, &e) == ATTN_OK &&
         attn_safetensors_read(sp, &st, &e) == ATTN_OK && st.count == 2;
    if (tu_check(&g, ok, "safetensors BF16/F16: %s", e.message)) {
        const attn_array *ab = attn_safetensors_find(&st, "kb"), *ah = attn_safetensors_find(&st, "kh");
        float kbw[2 * 20 * 8];
        attn_tensor kbf = attn_tensor_make(kbw, ATTN_F32, 4, ks);
        attn_tensor_convert(&kbt, &kbf, NULL);
        if (tu_check(&g, ab && ah && !strcmp(ab->file_dtype, "BF16") && !strcmp(ah->file_dtype, "F16"),
                     "safetensors dtypes") &&
            same_bits(&g, "safetensors BF16", ab->t.data, kbw, 320) &&
            same_bits(&g, "safetensors F16", ah->t.data, k.fbuf, 320))
            tu_group_pass(&g);
    }
    attn_safetensors_free(&st);
    /* attn sdpa --dtype f16 / bf16 against the library */
    const attn_dtype types[2] = {ATTN_F16, ATTN_BF16};
    for (int ti = 0; ti < 2; ++ti) {
        const attn_dtype t = types[ti];
        clirun_result r;
        const char *args[] = {"sdpa", "--query", qp, "--key", kp, "--value", vp, "--out", op,
                              "--causal", "bottom-right", "--dtype", t == ATTN_F16 ? "f16" : "bf16",
                              NULL};
        uint16_t want16[2 * 9 * 8];
        float want[2 * 9 * 8];
        attn_tensor W16 = attn_tensor_make(want16, t, 4, qs), W = attn_tensor_make(want, ATTN_F32, 4, qs);
        attn_sdpa_opts o = attn_sdpa_opts_default();
        o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        /* the files' float16 values rounded as the CLI does */
        uint16_t q2[2 * 9 * 8], k2[320], v2[320];
        attn_tensor Q2 = attn_tensor_make(q2, t, 4, qs), K2 = attn_tensor_make(k2, t, 4, ks),
                    V2 = attn_tensor_make(v2, t, 4, ks);
        attn_tensor_convert(&q.f, &Q2, NULL);
        attn_tensor_convert(&k.f, &K2, NULL);
        attn_tensor_convert(&v.f, &V2, NULL);
        ok = attn_sdpa(&Q2, &K2, &V2, &W16, NULL, NULL, &o, &e) == ATTN_OK;
        attn_tensor_convert(&W16, &W, NULL);
        attn_array got = {0};
        ok = ok && clirun(ATTN_CLI, args, &r) && r.status == 0 && read_npy(op, &got);
        if (tu_check(&g, ok, "attn sdpa --dtype %s: status %d %s", attn_dtype_name(t), r.status, r.err) &&
            tu_check(&g, !strcmp(got.file_dtype, t == ATTN_F16 ? "<f2" : "<f4"), "output dtype %s",
                     got.file_dtype) &&
            same_bits(&g, "attn sdpa --dtype", got.t.data, want, 2 * 9 * 8))
            tu_group_pass(&g);
        attn_array_free(&got);
        clirun_free(&r);
    }
    {
        clirun_result r;
        const char *args[] = {"sdpa-backward", "--query", qp, "--key", kp, "--value", vp,
                              "--grad-out", qp, "--grad-key", kcp, "--dtype", "f16", NULL};
        attn_array got = {0};
        ok = clirun(ATTN_CLI, args, &r) && r.status == 0 && read_npy(kcp, &got);
        tu_check(&g, ok && !strcmp(got.file_dtype, "<f2"), "attn sdpa-backward --dtype f16: %s",
                 r.err);
        attn_array_free(&got);
        clirun_free(&r);
        const char *dargs[] = {"decode", "--query", qp, "--key-cache", kp, "--value-cache", vp,
                               "--out", op, "--dtype", "f16", NULL};
        ok = clirun(ATTN_CLI, dargs, &r) && r.status == 0 && read_npy(op, &got);
        tu_check(&g, ok && !strcmp(got.file_dtype, "<f2"), "attn decode --dtype f16: %s", r.err);
        attn_array_free(&got);
        clirun_free(&r);
        const char *bargs[] = {"sdpa", "--query", qp, "--key", kp, "--value", vp, "--out", op,
                               "--dtype", "fp8", NULL};
        ok = clirun(ATTN_CLI, bargs, &r) && r.status == 2 && strstr(r.err, "--dtype") &&
             clirun_count_lines(r.err) == 1;
        tu_check(&g, ok, "a bad --dtype: status %d, %s", r.status, r.err);
        clirun_free(&r);
    }
    lp_free(&q);
    lp_free(&k);
    lp_free(&v);
    const char *files[] = {qp, kp, vp, op, sp, kcp};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; ++i) unlink(files[i]);
    rmdir(dir);
    tu_group_end(&g);
}

int main(int argc, char **argv)
{
    tu_options opt;
    tu_suite suite;
    if (!tu_begin(argc, argv, 0x1f16b16ull, &opt, &suite)) return 2;
    /* floats sampled every `step` bit patterns (~1M; ~65k in quick mode) */
    const uint64_t step = opt.quick ? 65521 : 4093;
    if (tu_group_selected(&opt, "conversions")) group_conversions(&suite, step);
    if (tu_group_selected(&opt, "vector")) group_vector_conversions(&suite, step);
    if (tu_group_selected(&opt, "bitwise") || tu_group_selected(&opt, "float64"))
        group_sdpa(&suite, &opt);
    if (tu_group_selected(&opt, "dot")) group_bf16_dot(&suite, &opt);
    if (tu_group_selected(&opt, "varlen")) group_varlen_cache(&suite, &opt);
    if (tu_group_selected(&opt, "bad")) group_bad(&suite);
    if (tu_group_selected(&opt, "files")) group_files_cli(&suite);
    return tu_suite_finish(&suite);
}
