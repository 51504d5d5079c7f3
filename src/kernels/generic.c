/*
 * Portable C kernels: the readable definition of every primitive in
 * kernels.h, and the fallback on CPUs without AVX2. Compiled for the
 * baseline target; loops over contiguous columns are written so compilers
 * can vectorise them for whatever the baseline offers.
 */
#include "kernels.h"

#include <math.h>
#include <string.h>

/* e^x as documented in kernels.h, with fused multiply-adds as the SIMD
 * bodies use (libm's fmaf where the CPU has no FMA: slower, same result). */
static float exp_generic(float x)
{
    if (x != x) return x;
    if (x < SDPA_EXP_MIN) return 0.0f; /* also -inf */
    if (x > SDPA_EXP_MAX) return INFINITY;
    float n = nearbyintf(x * SDPA_LOG2E);
    float r = fmaf(-n, SDPA_LN2_LO, fmaf(-n, SDPA_LN2_HI, x));
    float p = SDPA_EXP_C6;
    p = fmaf(p, r, SDPA_EXP_C5);
    p = fmaf(p, r, SDPA_EXP_C4);
    p = fmaf(p, r, SDPA_EXP_C3);
    p = fmaf(p, r, SDPA_EXP_C2);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    return ldexpf(p, (int)n);
}

static void gemm_generic(int64_t m, int64_t n, int64_t k, const float *a, int64_t a_rs,
                         int64_t a_cs, const float *b, int64_t ldb, float *c, int64_t ldc,
                         const float *row_scale, sdpa_gemm_mode mode)
{
    for (int64_t r = 0; r < m; ++r) {
        float *restrict cr = c + r * ldc;
        if (mode == SDPA_GEMM_SET) {
            memset(cr, 0, (size_t)n * sizeof *cr);
        } else if (mode == SDPA_GEMM_SCALE_ADD) {
            const float s = row_scale[r];
            for (int64_t j = 0; j < n; ++j) cr[j] *= s;
        }
        for (int64_t l = 0; l < k; ++l) {
            const float arl = a[r * a_rs + l * a_cs];
            const float *restrict bl = b + l * ldb;
            for (int64_t j = 0; j < n; ++j) cr[j] += arl * bl[j];
        }
    }
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

static void softmax_online_generic(int64_t m, int64_t n, float scale, float *s, int64_t lds,
                                   const int32_t *limit, const float *bias, int64_t ldbias,
                                   float *rowmax, float *rowsum, float *alpha)
{
    for (int64_t r = 0; r < m; ++r) {
        float *sr = s + r * lds;
        const float *br = bias ? bias + r * ldbias : NULL;
        const int64_t lim = limit[r];
        /* x = scale·s + bias in one rounding; without a bias s stays raw and
         * max(scale·s) = scale·max(s) (scale >= 0, rounding is monotone). */
        float mx = -INFINITY;
        for (int64_t c = 0; c < lim; ++c) {
            float x = br ? fmaf(sr[c], scale, br[c]) : sr[c];
            if (br) sr[c] = x;
            mx = x > mx ? x : mx;
        }
        if (!br) mx *= scale;
        const float old = rowmax[r], mnew = mx > old ? mx : old;
        if (mnew == -INFINITY) { /* nothing visible yet: p = 0, keep state */
            for (int64_t c = 0; c < n; ++c) sr[c] = 0.0f;
            alpha[r] = 1.0f;
            continue;
        }
        float part[SUM_LANES] = {0};
        for (int64_t c = 0; c < lim; ++c) {
            sr[c] = exp_generic(br ? sr[c] - mnew : fmaf(sr[c], scale, -mnew));
            part[c % SUM_LANES] += sr[c];
        }
        for (int64_t c = lim; c < n; ++c) sr[c] = 0.0f;
        alpha[r] = exp_generic(old - mnew); /* old = -inf gives 0 */
        rowsum[r] = rowsum[r] * alpha[r] + lane_sum(part);
        rowmax[r] = mnew;
    }
}

static void probs_from_lse_generic(int64_t m, int64_t n, float scale, float *s, int64_t lds,
                                   const int32_t *limit, const float *bias, int64_t ldbias,
                                   const float *lse)
{
    for (int64_t r = 0; r < m; ++r) {
        float *sr = s + r * lds;
        const float *br = bias ? bias + r * ldbias : NULL;
        const int64_t lim = lse[r] == -INFINITY ? 0 : limit[r];
        for (int64_t c = 0; c < lim; ++c)
            sr[c] = exp_generic(br ? fmaf(sr[c], scale, br[c]) - lse[r] : fmaf(sr[c], scale, -lse[r]));
        for (int64_t c = lim; c < n; ++c) sr[c] = 0.0f;
    }
}

static void dsoftmax_generic(int64_t m, int64_t n, float scale, const float *p, int64_t ldp,
                             float *dp, int64_t lddp, const float *di)
{
    for (int64_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < n; ++c) {
            float *d = dp + r * lddp + c;
            *d = scale * (p[r * ldp + c] * (*d - di[r]));
        }
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

static void vexp_generic(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; ++i) y[i] = exp_generic(x[i]);
}

const sdpa_kernels sdpa_kernels_generic = {
    .name = "generic",
    .npad = 16,
    .gemm = gemm_generic,
    .softmax_online = softmax_online_generic,
    .probs_from_lse = probs_from_lse_generic,
    .dsoftmax = dsoftmax_generic,
    .mask_row = mask_row_generic,
    .pack_transposed = pack_transposed_generic,
    .vexp = vexp_generic,
};
