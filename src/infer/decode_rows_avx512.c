/*
 * decode_rows.h's primitives with AVX-512 (F, BW, VL): 16 features per
 * vector, each cache row loaded once per call and widened in registers
 * (bfloat16 by a shift, float16 by vcvtph2ps, int8 by sign extension, e4m3
 * by moving its exponent and mantissa into a float's and rescaling by
 * 2^120, exact for normals and subnormals alike; q4_0 by masking or shifting
 * its nibbles, minus 8, times the block's float16 scale), then multiplied
 * against up to KV_ROWS query rows.
 *   scores:     two keys at a time, one accumulator per (key, row), lanes
 *               added by _mm512_reduce_add_ps.
 *   accumulate: per 64 features (a cache line of int8 / fp8), KV_ROWS × 4
 *               accumulators in registers, one key at a time: a probability
 *               broadcast once serves four slices.
 * Both issue a share of the software prefetches of the next call's rows in
 * every iteration (kv_prefetch_share).
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
    case KV_Q4_0: { /* d is a multiple of 16: the low or high nibbles of a block's bytes */
        const uint8_t *blk = (const uint8_t *)row + d / KV_Q4_BLOCK * KV_Q4_BLOCK_BYTES;
        const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(blk + 2)));
        const __m512i code = d % KV_Q4_BLOCK ? _mm512_srli_epi32(b, 4) : _mm512_and_si512(b, _mm512_set1_epi32(15));
        const __m512 scale = _mm512_cvtph_ps(_mm256_set1_epi16((short)(blk[0] | blk[1] << 8)));
        (void)k; /* q4_0 rows are whole blocks */
        return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(code, _mm512_set1_epi32(8))), scale);
    }
    case KV_E4M3_FINITE: { /* s eeee mmm -> float16 bits s 0eeee mmm0000000: value·2^-8 */
        const __m256i b = _mm256_cvtepi8_epi16(_mm_maskz_loadu_epi8(k, (const uint8_t *)row + d));
        return _mm512_cvtph_ps(_mm256_and_si256(_mm256_slli_epi16(b, 7), _mm256_set1_epi16((short)0xbfff)));
    }
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

/* Elements [d, d + 32) of a raw row as two vectors, lo (d..d+15) and hi
 * (d+16..d+31), those past `left` 0. e4m3 without NaN codes widens 32 at
 * a time (one sign extension, shift and mask for both halves: 6 operations
 * instead of 8); the other formats as two load16. */
INLINE void load32(const kv_format f, const void *row, int64_t d, int64_t left, __m512 *lo, __m512 *hi)
{
    const __mmask16 k0 = lanes(left), k1 = left > 16 ? lanes(left - 16) : 0;
    if (f == KV_E4M3_FINITE) {
        const __mmask32 k = (__mmask32)k0 | (__mmask32)k1 << 16;
        const __m512i b = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(k, (const uint8_t *)row + d));
        const __m512i h = _mm512_and_si512(_mm512_slli_epi16(b, 7), _mm512_set1_epi16((short)0xbfff));
        *lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
        *hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
        return;
    }
    *lo = load16(f, row, d, k0);
    *hi = k1 ? load16(f, row, d + 16, k1) : _mm512_setzero_ps();
}

/* Adds each 128-bit quarter of v0..v3 pairwise: block i of the result
 * holds 4 partial sums of v_i. */
INLINE __m512 fold4(__m512 v0, __m512 v1, __m512 v2, __m512 v3)
{
    const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(v0, v1, 0x44), _mm512_shuffle_f32x4(v0, v1, 0xee));
    const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(v2, v3, 0x44), _mm512_shuffle_f32x4(v2, v3, 0xee));
    return _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, 0x88), _mm512_shuffle_f32x4(s01, s23, 0xdd));
}

/* The lane sums of acc[r][j] (row r, key j; 16 vectors) as one vector,
 * lane 4r + j: a transposing tree of 33 operations instead of 16 full
 * reductions. */
INLINE __m512 sum16(__m512 acc[KV_ROWS][4])
{
    __m512 u[4];
    for (int j = 0; j < 4; ++j) u[j] = fold4(acc[0][j], acc[1][j], acc[2][j], acc[3][j]);
    /* block r of u[j]: 4 partials of row r, key j */
    const __m512 w0 = _mm512_add_ps(_mm512_unpacklo_ps(u[0], u[1]), _mm512_unpackhi_ps(u[0], u[1]));
    const __m512 w1 = _mm512_add_ps(_mm512_unpacklo_ps(u[2], u[3]), _mm512_unpackhi_ps(u[2], u[3]));
    return _mm512_add_ps(_mm512_shuffle_ps(w0, w1, 0x44), _mm512_shuffle_ps(w0, w1, 0xee));
}

/* Four keys at a time against m rows: 4·m accumulators, then sum16. Keys
 * past n read row n - 1 again and are not stored. */
INLINE void scores_body(const kv_format f, const char *rows, int64_t n, int64_t n_out, int64_t D,
                        const float *q, const int m, float *s, int64_t lds,
                        const float *row_scale, const void *next, int64_t next_bytes)
{
    const int64_t rb = kv_format_row_bytes(f, D), per = kv_prefetch_per(next_bytes, (n + 3) / 4);
    for (int64_t t = 0; t < n; t += 4) {
        kv_prefetch_share(next, next_bytes, t / 4, per);
        const char *x[4];
        for (int j = 0; j < 4; ++j) x[j] = rows + (t + j < n ? t + j : n - 1) * rb;
        __m512 acc[KV_ROWS][4];
        for (int r = 0; r < KV_ROWS; ++r)
            for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_ps();
        for (int64_t d = 0; d < D; d += 32) { /* each accumulator still sums d in order */
            const __mmask16 k0 = lanes(D - d), k1 = D - d > 16 ? lanes(D - d - 16) : 0;
            __m512 lo[4], hi[4];
            for (int j = 0; j < 4; ++j) load32(f, x[j], d, D - d, &lo[j], &hi[j]);
            for (int r = 0; r < m; ++r) {
                const __m512 q0 = _mm512_maskz_loadu_ps(k0, q + r * D + d);
                for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_fmadd_ps(q0, lo[j], acc[r][j]);
                if (!k1) continue;
                const __m512 q1 = _mm512_maskz_loadu_ps(k1, q + r * D + d + 16);
                for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_fmadd_ps(q1, hi[j], acc[r][j]);
            }
        }
        __m512 sums = sum16(acc);
        const __mmask16 keep = lanes(n - t);
        if (row_scale) { /* lane 4r + j times the scale of key t + j */
            const __m512 sc = _mm512_broadcast_f32x4(_mm_maskz_loadu_ps((__mmask8)(keep & 0xf), row_scale + t));
            sums = _mm512_mul_ps(sums, sc);
        }
        /* row r's four sums are lanes 4r..4r+3 */
        _mm_mask_storeu_ps(s + t, (__mmask8)(keep & 0xf), _mm512_castps512_ps128(sums));
        if (m > 1) _mm_mask_storeu_ps(s + lds + t, (__mmask8)(keep & 0xf), _mm512_extractf32x4_ps(sums, 1));
        if (m > 2) _mm_mask_storeu_ps(s + 2 * lds + t, (__mmask8)(keep & 0xf), _mm512_extractf32x4_ps(sums, 2));
        if (m > 3) _mm_mask_storeu_ps(s + 3 * lds + t, (__mmask8)(keep & 0xf), _mm512_extractf32x4_ps(sums, 3));
    }
    for (int r = 0; r < m; ++r)
        for (int64_t c = n; c < n_out; ++c) s[r * lds + c] = 0.0f;
}

/* One pass of accumulate_body over features [d, d + 16·ns): ns a constant
 * in each instance, so that the accumulators stay in registers. */
INLINE void accumulate_slices(const kv_format f, const char *rows, int64_t n, int64_t rb,
                              int64_t Dv, int64_t d, const int ns, const float *p, int64_t ldp,
                              const int m, const float *alpha, float *acc, int64_t ldacc,
                              const void *next, int64_t next_bytes, int64_t per)
{
    __m512 a[KV_ROWS][4];
    for (int r = 0; r < m; ++r)
        for (int j = 0; j < ns; ++j)
            a[r][j] = _mm512_mul_ps(_mm512_set1_ps(alpha[r]),
                                    _mm512_maskz_loadu_ps(lanes(Dv - d - 16 * j), acc + r * ldacc + d + 16 * j));
    for (int64_t t = 0; t < n; ++t) {
        if (d == 0) kv_prefetch_share(next, next_bytes, t, per);
        __m512 x[4];
        if (ns == 1) /* a tail slice: its 16 features only, not load32's pair */
            x[0] = load16(f, rows + t * rb, d, lanes(Dv - d));
        else
            for (int j = 0; j < ns; j += 2) load32(f, rows + t * rb, d + 16 * j, Dv - d - 16 * j, &x[j], &x[j + 1]);
        for (int r = 0; r < m; ++r) {
            const __m512 pr = _mm512_set1_ps(p[r * ldp + t]);
            for (int j = 0; j < ns; ++j) a[r][j] = _mm512_fmadd_ps(pr, x[j], a[r][j]);
        }
    }
    for (int r = 0; r < m; ++r)
        for (int j = 0; j < ns; ++j)
            _mm512_mask_storeu_ps(acc + r * ldacc + d + 16 * j, lanes(Dv - d - 16 * j), a[r][j]);
}

INLINE void accumulate_body(const kv_format f, const char *rows, int64_t n, int64_t Dv,
                            const float *p, int64_t ldp, const int m, const float *alpha,
                            float *acc, int64_t ldacc, const void *next, int64_t next_bytes)
{
    const int64_t rb = kv_format_row_bytes(f, Dv), per = kv_prefetch_per(next_bytes, n);
    int64_t d = 0;
    for (; d + 64 <= Dv; d += 64) /* four slices of 16 per pass */
        accumulate_slices(f, rows, n, rb, Dv, d, 4, p, ldp, m, alpha, acc, ldacc, next, next_bytes, per);
    for (; d < Dv; d += 16) /* the last 1..63 features, a slice per pass */
        accumulate_slices(f, rows, n, rb, Dv, d, 1, p, ldp, m, alpha, acc, ldacc, next, next_bytes, per);
}

/* One instance per (format, rows, feature count): the switches pick it once
 * per call; 128 features get fully unrolled loops. (A 64-feature instance
 * was slower than the general one: GCC stored its 16 accumulators to the
 * stack after every key of the accumulation.) */
#define BY_ROWS(body, f, w, ...)                                                                   \
    switch (m) {                                                                                   \
    case 1: body(f, rows, n, w, __VA_ARGS__, 1, out, ld); break;                                   \
    case 2: body(f, rows, n, w, __VA_ARGS__, 2, out, ld); break;                                   \
    case 3: body(f, rows, n, w, __VA_ARGS__, 3, out, ld); break;                                   \
    default: body(f, rows, n, w, __VA_ARGS__, 4, out, ld); break;                                  \
    }
#define BY_WIDTH(body, f, ...)                                                                     \
    if (width == 128) BY_ROWS(body, f, 128, __VA_ARGS__)                                           \
    else BY_ROWS(body, f, width, __VA_ARGS__)
/* accumulate_body with the prefetch before the row count, to share the macros */
INLINE void accumulate_body_call(const kv_format f, const char *rows, int64_t n, int64_t Dv,
                                 const float *p, int64_t ldp, const float *alpha, const void *next,
                                 int64_t next_bytes, const int m, float *acc, int64_t ldacc)
{
    accumulate_body(f, rows, n, Dv, p, ldp, m, alpha, acc, ldacc, next, next_bytes);
}

/* scores_body with n_out moved after the width, to share the macros */
INLINE void scores_call(const kv_format f, const char *rows, int64_t n, int64_t D, int64_t n_out,
                        const float *q, const float *row_scale, const void *next,
                        int64_t next_bytes, const int m, float *s, int64_t lds)
{
    scores_body(f, rows, n, n_out, D, q, m, s, lds, row_scale, next, next_bytes);
}

/* One function per format, each holding its (rows, width) instances: the
 * compilers take far longer over one function holding them all (minutes
 * under the sanitizers). */
#define FORMATS(X)                                                                                 \
    X(f32, KV_F32) X(bf16, KV_BF16) X(f16, KV_F16) X(i8, KV_I8) X(e4m3, KV_E4M3)                    \
    X(q4_0, KV_Q4_0) X(e4m3_finite, KV_E4M3_FINITE)
#define PER_FORMAT(name, F)                                                                        \
    static __attribute__((noinline)) void scores_##name(                                           \
        const char *rows, int64_t n, int64_t n_out, int64_t width, const float *q, int m,          \
        float *out, int64_t ld, const float *row_scale, const void *next, int64_t next_bytes)      \
    {                                                                                              \
        BY_WIDTH(scores_call, F, n_out, q, row_scale, next, next_bytes)                            \
    }                                                                                              \
    static __attribute__((noinline)) void accumulate_##name(                                       \
        const char *rows, int64_t n, int64_t width, const float *p, int64_t ldp, int m,            \
        const float *alpha, float *out, int64_t ld, const void *next, int64_t next_bytes)          \
    {                                                                                              \
        BY_WIDTH(accumulate_body_call, F, p, ldp, alpha, next, next_bytes)                         \
    }
FORMATS(PER_FORMAT)

static void scores_avx512(kv_format f, const void *rows, int64_t n, int64_t n_out, int64_t D,
                          const float *q, int m, float *out, int64_t ld, const float *row_scale,
                          const void *next, int64_t next_bytes)
{
    switch (f) {
#define CASE(name, F)                                                                              \
    case F: scores_##name(rows, n, n_out, D, q, m, out, ld, row_scale, next, next_bytes); break;
        FORMATS(CASE)
#undef CASE
    }
}

static void accumulate_avx512(kv_format f, const void *rows, int64_t n, int64_t Dv,
                              const float *p, int64_t ldp, int m, const float *alpha, float *out,
                              int64_t ld, const void *next, int64_t next_bytes)
{
    switch (f) {
#define CASE(name, F)                                                                              \
    case F: accumulate_##name(rows, n, Dv, p, ldp, m, alpha, out, ld, next, next_bytes); break;
        FORMATS(CASE)
#undef CASE
    }
}

static void scale_avx512(float *s, int64_t m, int64_t lds, int64_t lo, int64_t hi,
                         const float *scale)
{
    for (int64_t r = 0; r < m; ++r)
        for (int64_t t = lo; t < hi; t += 16) {
            const __mmask16 k = lanes(hi - t);
            const __m512 x = _mm512_maskz_loadu_ps(k, s + r * lds + t);
            const __m512 y = _mm512_mul_ps(x, _mm512_maskz_loadu_ps(k, scale + t));
            _mm512_mask_storeu_ps(s + r * lds + t, k, y);
        }
}

const kv_row_kernels kv_rows_avx512 = {"avx512", scores_avx512, accumulate_avx512, scale_avx512, true};

#if defined(__clang__)
#pragma clang attribute pop
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif

#endif
