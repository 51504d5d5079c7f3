/*
 * Portable C kernels: the readable definition of every primitive in
 * kernels.h, and the fallback on CPUs without AVX2. Compiled for the
 * baseline target; loops over contiguous columns are written so compilers
 * can vectorise them for whatever the baseline offers.
 */
#include "kernels.h"

#include "../core/philox.h"

#include <math.h>
#include <string.h>

/* The loops whose float compares select (exp's special cases, the visible
 * columns) vectorise only when those compares may run unconditionally:
 * GCC's default -ftrapping-math forbids that. No FP exception is ever
 * trapped here, so no result changes (clang's default is already so). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

/* e^x as documented in kernels.h. The polynomial runs in double (each
 * step a product and a sum, no fmaf: on CPUs without FMA that is a slow
 * library call, and this is the kernel for those CPUs) and is rounded to
 * float once; the steps around it give nearbyintf's and ldexpf's results
 * exactly, without the calls. No branches: the special cases are selected
 * at the end (the polynomial runs on 0 for them), so loops over it
 * vectorise. */
static inline float exp_generic(float x)
{
    const bool special = (x != x) | (x < SDPA_EXP_MIN) | (x > SDPA_EXP_MAX); /* NaN, 0, inf */
    const float xr = special ? 0.0f : x;
    /* nearbyintf: adding 1.5·2^23 rounds to an integer (|x·log2e| < 128)
     * when the sum is rounded to float: the assignment does that also where
     * float arithmetic runs in double (FLT_EVAL_METHOD 1, s390x in ISO C). */
    const float shifted = xr * SDPA_LOG2E + 12582912.0f;
    const float n = shifted - 12582912.0f;
    /* fmaf(-n, hi, x): n·hi is exact (8 + 15 significant bits). fmaf(-n, lo,
     * r1): in double n·lo is exact and so is r1 - n·lo (all its bits lie in
     * [2^-43, 2^-1), 42 < 53), so the one rounding is fmaf's. */
    const float r1 = xr - n * SDPA_LN2_HI;
    const float r = (float)((double)r1 - (double)n * (double)SDPA_LN2_LO);
    const double rd = r;
    double pd = SDPA_EXP_C6;
    pd = pd * rd + SDPA_EXP_C5;
    pd = pd * rd + SDPA_EXP_C4;
    pd = pd * rd + SDPA_EXP_C3;
    pd = pd * rd + SDPA_EXP_C2;
    pd = pd * rd + 1.0;
    pd = pd * rd + 1.0;
    const float p = (float)pd;
    /* ldexpf: n is in [-125, 127], so 2^n and p·2^n (p in [0.7, 1.42]) are
     * normal floats and the product is exact. */
    const uint32_t pow2n_bits = (uint32_t)((int32_t)n + 127) << 23;
    float pow2n;
    memcpy(&pow2n, &pow2n_bits, sizeof pow2n);
    const float e = p * pow2n, bound = x < SDPA_EXP_MIN ? 0.0f : INFINITY;
    const float other = x != x ? x : bound;
    return special ? other : e;
}

/*
 * Block of the portable GEMM: C[rows × GEMM_NR] ⊕= A[rows × k] · B[k × GEMM_NR]
 * with the rows × GEMM_NR sums in local accumulators (registers), rows a
 * compile-time constant. Every C element sees exactly the operations of the
 * textbook loop, in the same k order, so blocking changes no bits:
 *   acc = 0 (SET), c (ADD) or c·row_scale (SCALE_ADD); acc += a(r,l)·b(l,j)
 *   for l = 0 .. k-1 (one rounding for the product, one for the sum; the
 *   term is left out where a(r,l) == 0 under skip_zeros); c = acc.
 * The accumulators are GNU C vectors of 4 floats: element-wise IEEE
 * operations that any target compiles (SSE2 registers on x86-64), where
 * auto-vectorisation of the scalar loop picks the wrong loop to vectorise.
 */
typedef float gemm_v4 __attribute__((vector_size(16)));
enum { GEMM_MR = 6, GEMM_NV = 2, GEMM_NR = 4 * GEMM_NV }; /* 6 × 8 sums: 12 of 16 SSE registers */
_Static_assert(8 % GEMM_NR == 0, "gemm column counts (multiples of npad / 2 = 8) are whole blocks");

static inline gemm_v4 v4_load(const float *p)
{
    gemm_v4 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void v4_store(float *p, gemm_v4 v) { memcpy(p, &v, sizeof v); }

static inline __attribute__((always_inline)) void
gemm_block(int rows, int64_t k, const float *a, int64_t a_rs, int64_t a_cs, const float *b,
           int64_t ldb, float *c, int64_t ldc, const float *row_scale, sdpa_gemm_mode mode,
           bool skip_zeros)
{
    gemm_v4 acc[GEMM_MR][GEMM_NV];
    for (int r = 0; r < rows; ++r)
        for (int v = 0; v < GEMM_NV; ++v) {
            const float s = mode == SDPA_GEMM_SCALE_ADD ? row_scale[r] : 1.0f;
            acc[r][v] = mode == SDPA_GEMM_SET   ? (gemm_v4){0.0f, 0.0f, 0.0f, 0.0f}
                        : mode == SDPA_GEMM_ADD ? v4_load(c + r * ldc + 4 * v)
                                                : v4_load(c + r * ldc + 4 * v) * (gemm_v4){s, s, s, s};
        }
    for (int64_t l = 0; l < k; ++l) {
        gemm_v4 bl[GEMM_NV];
        for (int v = 0; v < GEMM_NV; ++v) bl[v] = v4_load(b + l * ldb + 4 * v);
        for (int r = 0; r < rows; ++r) {
            const float arl = a[r * a_rs + l * a_cs];
            if (skip_zeros && arl == 0.0f) continue;
            const gemm_v4 x = {arl, arl, arl, arl};
            for (int v = 0; v < GEMM_NV; ++v) acc[r][v] += x * bl[v];
        }
    }
    for (int r = 0; r < rows; ++r)
        for (int v = 0; v < GEMM_NV; ++v) v4_store(c + r * ldc + 4 * v, acc[r][v]);
}

/* The portable GEMM; skip_zeros leaves out zero elements of A (inlined
 * with a constant, so the plain kernel pays nothing for it). Column blocks
 * outer: a k × GEMM_NR panel of B stays in L1 across the rows. */
static inline __attribute__((always_inline)) void
gemm_body(int64_t m, int64_t n, int64_t k, const float *a, int64_t a_rs, int64_t a_cs,
          const float *b, int64_t ldb, float *c, int64_t ldc, const float *row_scale,
          sdpa_gemm_mode mode, bool skip_zeros)
{
    for (int64_t j = 0; j < n; j += GEMM_NR) {
        int64_t i = 0;
        for (; i + GEMM_MR <= m; i += GEMM_MR)
            gemm_block(GEMM_MR, k, a + i * a_rs, a_rs, a_cs, b + j, ldb, c + i * ldc + j, ldc,
                       row_scale ? row_scale + i : NULL, mode, skip_zeros);
        for (; i + 2 <= m; i += 2)
            gemm_block(2, k, a + i * a_rs, a_rs, a_cs, b + j, ldb, c + i * ldc + j, ldc,
                       row_scale ? row_scale + i : NULL, mode, skip_zeros);
        for (; i < m; ++i)
            gemm_block(1, k, a + i * a_rs, a_rs, a_cs, b + j, ldb, c + i * ldc + j, ldc,
                       row_scale ? row_scale + i : NULL, mode, skip_zeros);
    }
}

static void gemm_generic(int64_t m, int64_t n, int64_t k, const float *a, int64_t a_rs,
                         int64_t a_cs, const float *b, int64_t ldb, float *c, int64_t ldc,
                         const float *row_scale, sdpa_gemm_mode mode)
{
    gemm_body(m, n, k, a, a_rs, a_cs, b, ldb, c, ldc, row_scale, mode, false);
}

void sdpa_gemm_skip_zeros(int64_t m, int64_t n, int64_t k, const float *a, int64_t a_rs,
                          int64_t a_cs, const float *b, int64_t ldb, float *c, int64_t ldc,
                          const float *row_scale, sdpa_gemm_mode mode)
{
    gemm_body(m, n, k, a, a_rs, a_cs, b, ldb, c, ldc, row_scale, mode, true);
}

/* tanh as documented in kernels.h; the odd polynomial in double, like
 * exp_generic's (no fmaf calls), rounded once. */
static float tanh_generic(float y)
{
    const float a = fabsf(y);
    float t;
    if (a < SDPA_TANH_SMALL) {
        const double ad = a, z = ad * ad;
        double q = SDPA_TANH_P4;
        q = q * z + SDPA_TANH_P3;
        q = q * z + SDPA_TANH_P2;
        q = q * z + SDPA_TANH_P1;
        q = q * z + SDPA_TANH_P0;
        t = (float)(ad * z * q + ad);
    } else {
        const float e = exp_generic(-2.0f * a);
        t = (1.0f - e) / (1.0f + e);
    }
    return copysignf(t, y);
}

/* Logit of column c of row r from its raw score s (see sdpa_logits), br
 * the row's bias; -inf when hidden. *t receives the softcap's tanh. */
static float logit_generic(const sdpa_logits *lg, const float *br, int64_t r, int64_t c, float s,
                           float *t)
{
    if (c < lg->start[r] || c >= lg->end[r] || (br && br[c] == -INFINITY)) return -INFINITY;
    float x = s * lg->scale;
    if (lg->softcap > 0.0f) {
        *t = tanh_generic(x * lg->inv_softcap);
        x = lg->softcap * *t;
    }
    if (br) x += br[c];
    if (lg->alibi != 0.0f) x += -lg->alibi * fabsf((float)(lg->alibi_d0 + r) - (float)c);
    return x;
}

/* Lanes of the partial row sums: as the SIMD bodies, a sum of many small
 * probabilities is accumulated in several independent partial sums. */
#define SUM_LANES 8

static float lane_sum(const float *part)
{
    float s = 0.0f;
    for (int i = 0; i < SUM_LANES; ++i) s += part[i];
    return s;
}

/* Logits that are just fl(scale·s) on the visible columns: no softcap, bias
 * or ALiBi. Their loops are a scale over a column range, and vectorise. */
static bool plain_logits(const sdpa_logits *lg, const float *br)
{
    return !br && !(lg->softcap > 0.0f) && lg->alibi == 0.0f;
}

/* Row r's visible columns [*st, *en) within [c0, n), by start and end. */
static void visible_cols(const sdpa_logits *lg, int64_t r, int64_t c0, int64_t n, int64_t *st,
                         int64_t *en)
{
    *st = lg->start[r] < c0 ? c0 : lg->start[r] > n ? n : lg->start[r];
    *en = lg->end[r] < *st ? *st : lg->end[r] > n ? n : lg->end[r];
}

/* Logits of row r's columns [c0, n) in place (logit_generic); returns their
 * maximum. Plain logits are -inf outside the visible range, and their
 * maximum is taken in SUM_LANES lanes (the same value in any order), so
 * both loops vectorise. */
static float row_logits(const sdpa_logits *lg, const float *br, int64_t r, int64_t c0, int64_t n,
                        float *sr)
{
    float mx = -INFINITY, t;
    if (!plain_logits(lg, br)) {
        for (int64_t c = c0; c < n; ++c) {
            sr[c] = logit_generic(lg, br, r, c, sr[c], &t);
            mx = sr[c] > mx ? sr[c] : mx;
        }
        return mx;
    }
    int64_t st, en;
    visible_cols(lg, r, c0, n, &st, &en);
    const float scale = lg->scale;
    for (int64_t c = c0; c < st; ++c) sr[c] = -INFINITY;
    for (int64_t c = st; c < en; ++c) sr[c] *= scale;
    for (int64_t c = en; c < n; ++c) sr[c] = -INFINITY;
    float lane[SUM_LANES];
    for (int i = 0; i < SUM_LANES; ++i) lane[i] = -INFINITY;
    int64_t c = c0;
    for (; c + SUM_LANES <= n; c += SUM_LANES)
        for (int i = 0; i < SUM_LANES; ++i) lane[i] = sr[c + i] > lane[i] ? sr[c + i] : lane[i];
    for (; c < n; ++c) mx = sr[c] > mx ? sr[c] : mx;
    for (int i = 0; i < SUM_LANES; ++i) mx = lane[i] > mx ? lane[i] : mx;
    return mx;
}

static void softmax_online_generic(int64_t m, int64_t c0, int64_t n, const sdpa_logits *lg,
                                   float *s, int64_t lds, float *rowmax, float *rowsum,
                                   float *alpha, const float *vmax)
{
    (void)vmax; /* this table has no gemm_max */
    for (int64_t r = 0; r < m; ++r) {
        float *sr = s + r * lds;
        const float *br = lg->bias ? lg->bias + r * lg->ldbias : NULL;
        const float mx = row_logits(lg, br, r, c0, n, sr);
        const float old = rowmax[r], mnew = mx > old ? mx : old;
        if (mnew == -INFINITY) { /* nothing visible yet: p = 0, keep state */
            sdpa_nan_logits_poison(sr, c0, n, 1.0f, &rowsum[r]); /* sr: the logits */
            for (int64_t c = c0; c < n; ++c) sr[c] = 0.0f;
            alpha[r] = 1.0f;
            continue;
        }
        /* x <= mnew exactly, so x - mnew is never positive (0 at the max). */
        for (int64_t c = c0; c < n; ++c) sr[c] = exp_generic(sr[c] - mnew);
        /* column c into lane c % SUM_LANES (c0 is a multiple of npad) */
        float part[SUM_LANES] = {0};
        int64_t c = c0;
        for (; c + SUM_LANES <= n; c += SUM_LANES)
            for (int i = 0; i < SUM_LANES; ++i) part[i] += sr[c + i];
        for (; c < n; ++c) part[c % SUM_LANES] += sr[c];
        alpha[r] = exp_generic(old - mnew); /* old = -inf gives 0 */
        rowsum[r] = rowsum[r] * alpha[r] + lane_sum(part);
        rowmax[r] = mnew;
    }
}

static void probs_generic(int64_t m, int64_t c0, int64_t n, const sdpa_logits *lg, float *s,
                          int64_t lds, const float *rowmax, const float *rowll, float *dfac)
{
    for (int64_t r = 0; r < m; ++r) {
        float *sr = s + r * lds;
        const float *br = lg->bias ? lg->bias + r * lg->ldbias : NULL;
        const float mx = rowmax[r], ll = rowll[r];
        if (plain_logits(lg, br)) {
            int64_t st, en;
            visible_cols(lg, r, c0, n, &st, &en);
            if (mx == -INFINITY) st = en = c0;
            const float scale = lg->scale;
            for (int64_t c = c0; c < st; ++c) sr[c] = 0.0f;
            for (int64_t c = st; c < en; ++c) {
                const float x = sr[c] * scale;
                const float e = exp_generic(x - mx - ll); /* unconditional: no branch */
                sr[c] = x == -INFINITY ? 0.0f : e;
            }
            for (int64_t c = en; c < n; ++c) sr[c] = 0.0f;
            continue;
        }
        for (int64_t c = c0; c < n; ++c) {
            float t = 0.0f;
            const float x = logit_generic(lg, br, r, c, sr[c], &t);
            sr[c] = mx == -INFINITY || x == -INFINITY ? 0.0f : exp_generic(x - mx - ll);
            if (dfac && lg->softcap > 0.0f) dfac[r * lds + c] = lg->scale * (1.0f - t * t);
        }
    }
}

static void dsoftmax_generic(int64_t m, int64_t c0, int64_t n, float scale, const float *p,
                             int64_t ldp, float *dp, int64_t lddp, const float *di,
                             const float *dfac, bool guard)
{
    (void)guard; /* the scalar select costs nothing here */
    for (int64_t r = 0; r < m; ++r)
        for (int64_t c = c0; c < n; ++c) {
            float *d = dp + r * lddp + c;
            const float pc = p[r * ldp + c], f = dfac ? dfac[r * ldp + c] : scale;
            /* P = 1: the softmax is this key alone, constant: dS is 0 exactly */
            *d = pc == 0.0f || pc == 1.0f ? 0.0f : pc * (*d - di[r]) * f;
        }
}

static void dropout_generic(const sdpa_dropout_args *d, int64_t m, int64_t i0, int64_t j0,
                            int64_t c0, int64_t n, float *s, int64_t lds, float *z)
{
    for (int64_t r = 0; r < m; ++r) {
        float *sr = s + r * lds, *zr = z ? z + r * lds : NULL;
        for (int64_t c = c0; c < n; c += 4) {
            const uint32_t ctr[4] = {(uint32_t)((j0 + c) / 4), (uint32_t)(i0 + r), d->bh, d->ctr3};
            uint32_t w[4];
            attn_philox4x32(ctr, d->key, w);
            for (int q = 0; q < 4 && c + q < n; ++q) {
                const float f = w[q] >= d->keep ? d->scale : 0.0f;
                sr[c + q] *= f;
                if (zr) zr[c + q] = f;
            }
        }
    }
}

static void alibi_row_generic(float *bias, float slope, int32_t dist0, int64_t n)
{
    for (int64_t c = 0; c < n; ++c) bias[c] = -slope * fabsf((float)dist0 - (float)c);
}

static int64_t mask_row_generic(float *bias, const void *src, int64_t cs, attn_dtype dtype,
                                int64_t n, bool accumulate, bool *irregular)
{
    int64_t last = 0, hidden = 0;
    bool nonzero = false;
    sdpa_mask_cols(bias, src, cs, dtype, 0, n, accumulate, &last, &hidden, &nonzero);
    *irregular = nonzero || hidden > n - last;
    return last;
}

static void pack_transposed_generic(const float *src, int64_t rs, int64_t cs, int64_t n,
                                    int64_t D, float *dst, int64_t ld)
{
    for (int64_t d = 0; d < D; ++d) {
        float *out = dst + d * ld;
        const float *in = src + d * cs;
        for (int64_t c = 0; c < n; ++c) out[c] = in[c * rs];
        for (int64_t c = n; c < ld; ++c) out[c] = 0.0f;
    }
}

static void pack_transposed16_generic(attn_dtype t, const uint16_t *src, int64_t rs, int64_t cs,
                                     int64_t n, int64_t D, float *dst, int64_t ld)
{
    for (int64_t d = 0; d < D; ++d) {
        for (int64_t c = 0; c < n; ++c) dst[d * ld + c] = attn_load_float(src, t, c * rs + d * cs);
        for (int64_t c = n; c < ld; ++c) dst[d * ld + c] = 0.0f;
    }
}

static void widen_generic(attn_dtype t, const uint16_t *src, int64_t rs, int64_t cs,
                          int64_t rows, int64_t cols, float *dst, int64_t ld)
{
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) dst[r * ld + c] = attn_load_float(src, t, r * rs + c * cs);
        for (int64_t c = cols; c < ld; ++c) dst[r * ld + c] = 0.0f;
    }
}

static void narrow_generic(attn_dtype t, const float *src, int64_t n, uint16_t *dst)
{
    for (int64_t i = 0; i < n; ++i) attn_store_float(dst, t, i, src[i]);
}

static bool rows_finite_generic(const float *src, int64_t ld, int64_t rows, int64_t w)
{
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < w; ++c)
            if (!isfinite(src[r * ld + c])) return false;
    return true;
}

static void vexp_generic(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; ++i) y[i] = exp_generic(x[i]);
}

static void vtanh_generic(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; ++i) y[i] = tanh_generic(x[i]);
}

const sdpa_kernels sdpa_kernels_generic = {
    .name = "generic",
    .npad = 16,
    .gemm = gemm_generic,
    .softmax_online = softmax_online_generic,
    .probs = probs_generic,
    .dsoftmax = dsoftmax_generic,
    .dropout = dropout_generic,
    .mask_row = mask_row_generic,
    .alibi_row = alibi_row_generic,
    .pack_transposed = pack_transposed_generic,
    .pack_transposed16 = pack_transposed16_generic,
    .widen = widen_generic,
    .narrow = narrow_generic,
    .rows_finite = rows_finite_generic,
    .vexp = vexp_generic,
    .vtanh = vtanh_generic,
};
