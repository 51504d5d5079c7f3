/*
 * decode_rows.h's primitives with AVX2, FMA and F16C (AVX2-only CPUs: AMD
 * before Zen 4, Intel client cores): 8 features per vector, each cache row
 * loaded once per call and widened in registers as the AVX-512 table does
 * (decode_rows_avx512.c), against up to KV_ROWS query rows. Only 16 vector
 * registers, so smaller blocks:
 *   scores:     three keys at a time (two for e4m3 and q4_0), one
 *               accumulator per (key, row) (12), the lane sums by hadd /
 *               permute trees.
 *   accumulate: per 16 features, KV_ROWS × 2 accumulators, one key at a
 *               time.
 * Feature counts that are not a multiple of 8 take the portable table.
 */
#include "decode_rows.h"

#if defined(__x86_64__) || defined(__i386__)

#include <math.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#include <immintrin.h>

#define INLINE static inline __attribute__((always_inline))

/* Elements [d, d + 8) of a raw row, d a multiple of 8. */
INLINE __m256 load8(const kv_format f, const void *row, int64_t d)
{
    const uint8_t *b8 = (const uint8_t *)row;
    switch (f) {
    case KV_F32:
        return _mm256_loadu_ps((const float *)row + d);
    case KV_BF16: {
        const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + d));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    case KV_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + d)));
    case KV_I8:
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b8 + d))));
    case KV_Q4_0: { /* 8 codes of a block: low nibbles of bytes 0..15, high of the same bytes */
        const uint8_t *blk = b8 + d / KV_Q4_BLOCK * KV_Q4_BLOCK_BYTES;
        const int64_t i = d % KV_Q4_BLOCK;
        const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 2 + i % 16)));
        const __m256i code = i >= 16 ? _mm256_srli_epi32(b, 4) : _mm256_and_si256(b, _mm256_set1_epi32(15));
        const __m256 scale = _mm256_cvtph_ps(_mm_set1_epi16((short)(blk[0] | blk[1] << 8)));
        return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(code, _mm256_set1_epi32(8))), scale);
    }
    case KV_E4M3_FINITE: { /* s eeee mmm -> float16 bits s 0eeee mmm0000000: value·2^-8 */
        const __m128i b = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(b8 + d)));
        return _mm256_cvtph_ps(_mm_and_si128(_mm_slli_epi16(b, 7), _mm_set1_epi16((short)0xbfff)));
    }
    default: { /* e4m3: s eeee mmm -> float bits s 0000eeee mmm0..., times 2^(127-7) */
        const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(b8 + d)));
        const __m256i mag = _mm256_and_si256(b, _mm256_set1_epi32(0x7f));
        const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x80)), 24);
        const __m256i bits = _mm256_or_si256(_mm256_slli_epi32(mag, 20), sign);
        const __m256 x = _mm256_mul_ps(_mm256_castsi256_ps(bits), _mm256_set1_ps(0x1p120f));
        const __m256 nan = _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7f)));
        return _mm256_blendv_ps(x, _mm256_set1_ps(NAN), nan);
    }
    }
}

/* The lane sums of a[0..7] as one vector, lane i = Σ a[i]. */
INLINE __m256 sum8(const __m256 a[8])
{
    const __m256 h0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    const __m256 h1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    /* h0: sums of a0..a3 over the low 4 lanes, then over the high 4 */
    return _mm256_add_ps(_mm256_permute2f128_ps(h0, h1, 0x20), _mm256_permute2f128_ps(h0, h1, 0x31));
}

/* The lane sums of a[0..3] as one vector, lane i = Σ a[i]. */
INLINE __m128 sum4(const __m256 a[4])
{
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* `keys` (2 or 3) keys at a time against m rows: accumulator 2r + j is
 * (row r, key j < 2), 8 + r is (row r, key 2). Three keys make twelve
 * independent FMA chains, so that the loop is not bound by the FMA latency
 * (the formats whose widening needs more registers take two). A key past n
 * reads row n - 1 again and is not stored. */
INLINE void scores_body(const kv_format f, const int keys, const char *rows, int64_t n,
                        int64_t n_out, int64_t D, const float *q, const int m, float *s,
                        int64_t lds, const float *row_scale, const void *next, int64_t next_bytes)
{
    const int64_t rb = kv_format_row_bytes(f, D),
                  per = kv_prefetch_per(next_bytes, (n + keys - 1) / keys);
    const int64_t lines_per_step = (per / 64 + D / 8 - 1) / (D / 8);
    for (int64_t t = 0; t < n; t += keys) {
        kv_lines pf = kv_lines_share(next, next_bytes, t / keys, per);
        if (keys == 2) kv_lines_prefetch(&pf, per / 64); /* a few lines; the loop has no registers to spare */
        const char *x[3];
        for (int j = 0; j < keys; ++j) x[j] = rows + (t + j < n ? t + j : n - 1) * rb;
        __m256 acc[3 * KV_ROWS];
        for (int i = 0; i < 3 * KV_ROWS; ++i) acc[i] = _mm256_setzero_ps();
        for (int64_t d = 0; d < D; d += 8) {
            __m256 k[3];
            for (int j = 0; j < keys; ++j) k[j] = load8(f, x[j], d);
            if (keys == 3) kv_lines_prefetch(&pf, lines_per_step);
            for (int r = 0; r < m; ++r) {
                const __m256 qv = _mm256_loadu_ps(q + r * D + d);
                acc[2 * r] = _mm256_fmadd_ps(qv, k[0], acc[2 * r]);
                acc[2 * r + 1] = _mm256_fmadd_ps(qv, k[1], acc[2 * r + 1]);
                if (keys == 3) acc[8 + r] = _mm256_fmadd_ps(qv, k[2], acc[8 + r]);
            }
        }
        __m256 pair = sum8(acc); /* lanes 2r, 2r + 1: row r's keys t, t + 1 */
        __m128 third = keys == 3 ? sum4(acc + 8) : _mm_setzero_ps(); /* lane r: row r's key t + 2 */
        if (t + keys <= n) { /* whole: row r's pair is two lanes of one half */
            if (row_scale) {
                const __m128i rs = _mm_loadl_epi64((const __m128i *)(row_scale + t)); /* keys t, t + 1 */
                pair = _mm256_mul_ps(pair, _mm256_castsi256_ps(_mm256_broadcastq_epi64(rs)));
                if (keys == 3) third = _mm_mul_ps(third, _mm_set1_ps(row_scale[t + 2]));
            }
            const __m128 lo = _mm256_castps256_ps128(pair), hi = _mm256_extractf128_ps(pair, 1);
            _mm_storel_pi((__m64 *)(s + t), lo);
            if (m > 1) _mm_storeh_pi((__m64 *)(s + lds + t), lo);
            if (m > 2) _mm_storel_pi((__m64 *)(s + 2 * lds + t), hi);
            if (m > 3) _mm_storeh_pi((__m64 *)(s + 3 * lds + t), hi);
            if (keys == 3) {
                float v[4];
                _mm_storeu_ps(v, third);
                for (int r = 0; r < m; ++r) s[r * lds + t + 2] = v[r];
            }
        } else { /* the last keys: one or two (of three) */
            float v[2 * KV_ROWS];
            _mm256_storeu_ps(v, pair);
            for (int r = 0; r < m; ++r)
                for (int j = 0; j < n - t; ++j)
                    s[r * lds + t + j] = !row_scale ? v[2 * r + j] : v[2 * r + j] * row_scale[t + j];
        }
    }
    for (int r = 0; r < m; ++r)
        for (int64_t c = n; c < n_out; ++c) s[r * lds + c] = 0.0f;
}

/* One pass of accumulate_body over features [d, d + 8·ns): ns a constant in
 * each instance, so that the accumulators stay in registers. */
INLINE void accumulate_slices(const kv_format f, const char *rows, int64_t n, int64_t rb,
                              int64_t d, const int ns, const float *p, int64_t ldp, const int m,
                              const float *alpha, float *acc, int64_t ldacc, const void *next,
                              int64_t next_bytes, int64_t per)
{
    __m256 a[KV_ROWS][2];
    for (int r = 0; r < m; ++r)
        for (int j = 0; j < ns; ++j)
            a[r][j] = _mm256_mul_ps(_mm256_set1_ps(alpha[r]), _mm256_loadu_ps(acc + r * ldacc + d + 8 * j));
    for (int64_t t = 0; t < n; ++t) {
        kv_prefetch_share(next, next_bytes, d / 16 * n + t, per);
        __m256 x[2];
        for (int j = 0; j < ns; ++j) x[j] = load8(f, rows + t * rb, d + 8 * j);
        for (int r = 0; r < m; ++r) {
            const __m256 pr = _mm256_broadcast_ss(p + r * ldp + t);
            for (int j = 0; j < ns; ++j) a[r][j] = _mm256_fmadd_ps(pr, x[j], a[r][j]);
        }
    }
    for (int r = 0; r < m; ++r)
        for (int j = 0; j < ns; ++j) _mm256_storeu_ps(acc + r * ldacc + d + 8 * j, a[r][j]);
}

INLINE void accumulate_body(const kv_format f, const char *rows, int64_t n, int64_t Dv,
                            const float *p, int64_t ldp, const int m, const float *alpha,
                            float *acc, int64_t ldacc, const void *next, int64_t next_bytes)
{
    /* the prefetches spread over every pass: a line or so per key, not a burst */
    const int64_t rb = kv_format_row_bytes(f, Dv), per = kv_prefetch_per(next_bytes, n * ((Dv + 15) / 16));
    for (int64_t d = 0; d < Dv; d += 16) /* slices of 8: two per pass, one in an odd last */
        if (Dv - d >= 16)
            accumulate_slices(f, rows, n, rb, d, 2, p, ldp, m, alpha, acc, ldacc, next, next_bytes, per);
        else
            accumulate_slices(f, rows, n, rb, d, 1, p, ldp, m, alpha, acc, ldacc, next, next_bytes, per);
}

/* One instance per (format, rows); 128 features get a fully known loop. */
#define ROWS_CASES(call, f, w)                                                                     \
    switch (m) {                                                                                   \
    case 1: call(f, w, 1); break;                                                                  \
    case 2: call(f, w, 2); break;                                                                  \
    case 3: call(f, w, 3); break;                                                                  \
    default: call(f, w, 4); break;                                                                 \
    }
#define WIDTH_CASES(call, f)                                                                       \
    if (width == 128) ROWS_CASES(call, f, 128)                                                     \
    else ROWS_CASES(call, f, width)
/* One function per format, each holding its (rows, width) instances: the
 * compilers take far longer over one function holding them all (minutes
 * under the sanitizers). */
#define FORMATS(X)                                                                                 \
    X(f32, KV_F32) X(bf16, KV_BF16) X(f16, KV_F16) X(i8, KV_I8) X(e4m3, KV_E4M3)                    \
    X(q4_0, KV_Q4_0) X(e4m3_finite, KV_E4M3_FINITE)
#define SCORES(fmt, w, rows_)                                                                      \
    scores_body(fmt, SCORE_KEYS(fmt), rows, n, n_out, w, q, rows_, s, lds, row_scale, next, next_bytes)
/* e4m3's NaN test and q4_0's block scale need the registers of a third key */
#define SCORE_KEYS(fmt) ((fmt) == KV_E4M3 || (fmt) == KV_Q4_0 ? 2 : 3)
#define ACCUMULATE(fmt, w, rows_)                                                                  \
    accumulate_body(fmt, rows, n, w, p, ldp, rows_, alpha, acc, ldacc, next, next_bytes)
#define PER_FORMAT(name, F)                                                                        \
    static __attribute__((noinline)) void scores_##name(                                           \
        const char *rows, int64_t n, int64_t n_out, int64_t width, const float *q, int m,          \
        float *s, int64_t lds, const float *row_scale, const void *next, int64_t next_bytes)       \
    {                                                                                              \
        WIDTH_CASES(SCORES, F)                                                                     \
    }                                                                                              \
    static __attribute__((noinline)) void accumulate_##name(                                       \
        const char *rows, int64_t n, int64_t width, const float *p, int64_t ldp, int m,            \
        const float *alpha, float *acc, int64_t ldacc, const void *next, int64_t next_bytes)       \
    {                                                                                              \
        WIDTH_CASES(ACCUMULATE, F)                                                                 \
    }
FORMATS(PER_FORMAT)
#undef SCORES
#undef ACCUMULATE

static void scores_avx2(kv_format f, const void *rows, int64_t n, int64_t n_out, int64_t D,
                        const float *q, int m, float *s, int64_t lds, const float *row_scale,
                        const void *next, int64_t next_bytes)
{
    if (D % 8) {
        kv_rows_generic.scores(f, rows, n, n_out, D, q, m, s, lds, row_scale, next, next_bytes);
        return;
    }
    switch (f) {
#define CASE(name, F)                                                                              \
    case F: scores_##name(rows, n, n_out, D, q, m, s, lds, row_scale, next, next_bytes); break;
        FORMATS(CASE)
#undef CASE
    }
}

static void accumulate_avx2(kv_format f, const void *rows, int64_t n, int64_t Dv, const float *p,
                            int64_t ldp, int m, const float *alpha, float *acc, int64_t ldacc,
                            const void *next, int64_t next_bytes)
{
    if (Dv % 8) { /* odd widths: the portable loop */
        kv_rows_generic.accumulate(f, rows, n, Dv, p, ldp, m, alpha, acc, ldacc, next, next_bytes);
        return;
    }
    switch (f) {
#define CASE(name, F)                                                                              \
    case F: accumulate_##name(rows, n, Dv, p, ldp, m, alpha, acc, ldacc, next, next_bytes); break;
        FORMATS(CASE)
#undef CASE
    }
}

static void scale_avx2(float *s, int64_t m, int64_t lds, int64_t lo, int64_t hi, const float *scale)
{
    for (int64_t r = 0; r < m; ++r) {
        float *x = s + r * lds;
        int64_t t = lo;
        for (; t + 8 <= hi; t += 8)
            _mm256_storeu_ps(x + t, _mm256_mul_ps(_mm256_loadu_ps(x + t), _mm256_loadu_ps(scale + t)));
        for (; t < hi; ++t) x[t] *= scale[t];
    }
}

const kv_row_kernels kv_rows_avx2 = {"avx2", scores_avx2, accumulate_avx2, scale_avx2, true};

#if defined(__clang__)
#pragma clang attribute pop
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif

#endif
