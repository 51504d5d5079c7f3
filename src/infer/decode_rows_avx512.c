/*
 * decode_rows.h's primitives with AVX-512 (F, BW, VL): 16 features per
 * vector, each cache row loaded once per call and widened in registers
 * (bfloat16 by a shift, float16 by vcvtph2ps, int8 by sign extension, e4m3
 * by moving its exponent and mantissa into a float's and rescaling by
 * 2^120, exact for normals and subnormals alike), then multiplied against up
 * to KV_ROWS query rows.
 *   scores:     two keys at a time, one accumulator per (key, row), lanes
 *               added by _mm512_reduce_add_ps.
 *   accumulate: per 16-feature slice, KV_ROWS accumulators in registers for
 *               even keys and KV_ROWS for odd ones (two dependency chains).
 */
#include "decode_rows.h"

#if defined(__x86_64__) || defined(__i386__)

#include <math.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512vl,avx512bw,f16c,fma"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,f16c,fma")
#endif

#include <immintrin.h>

#define INLINE static inline __attribute__((always_inline))

INLINE int64_t esize(kv_format f) { return f == KV_F32 ? 4 : f == KV_BF16 || f == KV_F16 ? 2 : 1; }

/* Elements [d, d + 16) of a raw row (those of mask k only; the others 0). */
INLINE __m512 load16(const kv_format f, const void *row, int64_t d, __mmask16 k)
{
    switch (f) {
    case KV_F32:
        return _mm512_maskz_loadu_ps(k, (const float *)row + d);
    case KV_BF16: {
        const __m256i h = _mm256_maskz_loadu_epi16(k, (const uint16_t *)row + d);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    case KV_F16:
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, (const uint16_t *)row + d));
    case KV_I8:
        return _mm512_cvtepi32_ps(
            _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(k, (const int8_t *)row + d)));
    default: { /* e4m3: s eeee mmm -> float bits s 0000eeee mmm0..., times 2^(127-7) */
        const __m512i b = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, (const uint8_t *)row + d));
        const __m512i mag = _mm512_and_si512(b, _mm512_set1_epi32(0x7f));
        const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x80)), 24);
        const __m512i bits = _mm512_or_si512(_mm512_slli_epi32(mag, 20), sign);
        const __m512 x = _mm512_mul_ps(_mm512_castsi512_ps(bits), _mm512_set1_ps(0x1p120f));
        const __mmask16 nan = _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7f));
        return _mm512_mask_mov_ps(x, nan, _mm512_set1_ps(NAN));
    }
    }
}

INLINE __mmask16 lanes(int64_t left) { return left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1); }

INLINE void scores_body(const kv_format f, const char *rows, int64_t n, int64_t n_out, int64_t D,
                        const float *q, const int m, float *s, int64_t lds)
{
    const int64_t rb = D * esize(f);
    int64_t t = 0;
    for (; t + 2 <= n; t += 2) {
        const char *x0 = rows + t * rb, *x1 = x0 + rb;
        __m512 a0[KV_ROWS], a1[KV_ROWS];
        for (int r = 0; r < m; ++r) a0[r] = a1[r] = _mm512_setzero_ps();
        for (int64_t d = 0; d < D; d += 16) {
            const __mmask16 k = lanes(D - d);
            const __m512 k0 = load16(f, x0, d, k), k1 = load16(f, x1, d, k);
            for (int r = 0; r < m; ++r) {
                const __m512 qv = _mm512_maskz_loadu_ps(k, q + r * D + d);
                a0[r] = _mm512_fmadd_ps(qv, k0, a0[r]);
                a1[r] = _mm512_fmadd_ps(qv, k1, a1[r]);
            }
        }
        for (int r = 0; r < m; ++r) {
            s[r * lds + t] = _mm512_reduce_add_ps(a0[r]);
            s[r * lds + t + 1] = _mm512_reduce_add_ps(a1[r]);
        }
    }
    for (; t < n; ++t) {
        const char *x0 = rows + t * rb;
        __m512 a0[KV_ROWS];
        for (int r = 0; r < m; ++r) a0[r] = _mm512_setzero_ps();
        for (int64_t d = 0; d < D; d += 16) {
            const __mmask16 k = lanes(D - d);
            const __m512 k0 = load16(f, x0, d, k);
            for (int r = 0; r < m; ++r)
                a0[r] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, q + r * D + d), k0, a0[r]);
        }
        for (int r = 0; r < m; ++r) s[r * lds + t] = _mm512_reduce_add_ps(a0[r]);
    }
    for (int r = 0; r < m; ++r)
        for (int64_t c = n; c < n_out; ++c) s[r * lds + c] = 0.0f;
}

INLINE void accumulate_body(const kv_format f, const char *rows, int64_t n, int64_t Dv,
                            const float *p, int64_t ldp, const int m, float *acc, int64_t ldacc)
{
    const int64_t rb = Dv * esize(f);
    for (int64_t d = 0; d < Dv; d += 16) {
        const __mmask16 k = lanes(Dv - d);
        __m512 a0[KV_ROWS], a1[KV_ROWS];
        for (int r = 0; r < m; ++r) {
            a0[r] = _mm512_maskz_loadu_ps(k, acc + r * ldacc + d);
            a1[r] = _mm512_setzero_ps();
        }
        int64_t t = 0;
        for (; t + 2 <= n; t += 2) {
            const __m512 x0 = load16(f, rows + t * rb, d, k), x1 = load16(f, rows + (t + 1) * rb, d, k);
            for (int r = 0; r < m; ++r) {
                a0[r] = _mm512_fmadd_ps(_mm512_set1_ps(p[r * ldp + t]), x0, a0[r]);
                a1[r] = _mm512_fmadd_ps(_mm512_set1_ps(p[r * ldp + t + 1]), x1, a1[r]);
            }
        }
        if (t < n) {
            const __m512 x0 = load16(f, rows + t * rb, d, k);
            for (int r = 0; r < m; ++r)
                a0[r] = _mm512_fmadd_ps(_mm512_set1_ps(p[r * ldp + t]), x0, a0[r]);
        }
        for (int r = 0; r < m; ++r)
            _mm512_mask_storeu_ps(acc + r * ldacc + d, k, _mm512_add_ps(a0[r], a1[r]));
    }
}

/* One instance per (format, rows): the switch picks it once per call. */
#define BY_ROWS(body, f, ...)                                                                      \
    switch (m) {                                                                                   \
    case 1: body(f, __VA_ARGS__, 1, s_or_acc, ld); break;                                          \
    case 2: body(f, __VA_ARGS__, 2, s_or_acc, ld); break;                                          \
    case 3: body(f, __VA_ARGS__, 3, s_or_acc, ld); break;                                          \
    default: body(f, __VA_ARGS__, 4, s_or_acc, ld); break;                                         \
    }
#define BY_FORMAT(body, ...)                                                                       \
    switch (f) {                                                                                   \
    case KV_F32: BY_ROWS(body, KV_F32, __VA_ARGS__) break;                                         \
    case KV_BF16: BY_ROWS(body, KV_BF16, __VA_ARGS__) break;                                       \
    case KV_F16: BY_ROWS(body, KV_F16, __VA_ARGS__) break;                                         \
    case KV_I8: BY_ROWS(body, KV_I8, __VA_ARGS__) break;                                           \
    default: BY_ROWS(body, KV_E4M3, __VA_ARGS__) break;                                            \
    }

static void scores_avx512(kv_format f, const void *rows, int64_t n, int64_t n_out, int64_t D,
                          const float *q, int m, float *s, int64_t lds)
{
    float *s_or_acc = s;
    const int64_t ld = lds;
    BY_FORMAT(scores_body, rows, n, n_out, D, q)
}

static void accumulate_avx512(kv_format f, const void *rows, int64_t n, int64_t Dv,
                              const float *p, int64_t ldp, int m, float *acc, int64_t ldacc,
                              bool skip_zero)
{
    if (skip_zero) { /* rare (a cache holding NaN): the portable loop */
        kv_rows_generic.accumulate(f, rows, n, Dv, p, ldp, m, acc, ldacc, true);
        return;
    }
    float *s_or_acc = acc;
    const int64_t ld = ldacc;
    BY_FORMAT(accumulate_body, rows, n, Dv, p, ldp)
}

const kv_row_kernels kv_rows_avx512 = {"avx512", scores_avx512, accumulate_avx512};

#if defined(__clang__)
#pragma clang attribute pop
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif

#endif
