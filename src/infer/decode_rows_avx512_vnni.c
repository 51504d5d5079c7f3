/*
 * int8 keys' scores with AVX512-VNNI (decode_rows.h, kv_i8_query): 16 keys
 * in the 16 lanes, so no lane-sum tree.
 *   per 64 features of 16 keys: 16 row loads, + 128 per byte (u8 for
 *     vpdpbusd), a 16 × 16 transpose of dwords (64 shuffles): vector i holds
 *     features 4i..4i+3 of every key;
 *   per vector: m × 3 vpdpbusd against the query limbs' dword i broadcast
 *     from memory (int32 sums, exact);
 *   per row: (hi·2^8 + mid − bias_hi)·2^8 + (lo − bias_lo) in float, times
 *     the row's unit and the key's row scale.
 * Shared by the rows and limbs, the transpose costs 8 shuffles per key
 * (D = 128), where the float kernel spends about 11 on its tree and 16 on
 * widening.
 */
#include "decode_rows.h"

#if defined(__x86_64__) || defined(__i386__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512vl,avx512bw,avx512vnni"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512vnni")
#endif

#include <immintrin.h>
#include <math.h>

#define INLINE static inline __attribute__((always_inline))

/* z[j] = dwords 0..15 of key j  ->  z[i] = dword i of keys 0..15 (lane j). */
INLINE void transpose16(__m512i z[16])
{
    __m512i t[16], u[16];
    for (int p = 0; p < 8; ++p) { /* block b: keys 2p, 2p+1 at dwords 4b, 4b+1 (lo) or 4b+2, 4b+3 (hi) */
        t[2 * p] = _mm512_unpacklo_epi32(z[2 * p], z[2 * p + 1]);
        t[2 * p + 1] = _mm512_unpackhi_epi32(z[2 * p], z[2 * p + 1]);
    }
    for (int s = 0; s < 4; ++s) { /* u[4s + c], block b: keys 4s..4s+3 at dword 4b + c */
        u[4 * s] = _mm512_unpacklo_epi64(t[4 * s], t[4 * s + 2]);
        u[4 * s + 1] = _mm512_unpackhi_epi64(t[4 * s], t[4 * s + 2]);
        u[4 * s + 2] = _mm512_unpacklo_epi64(t[4 * s + 1], t[4 * s + 3]);
        u[4 * s + 3] = _mm512_unpackhi_epi64(t[4 * s + 1], t[4 * s + 3]);
    }
    for (int c = 0; c < 4; ++c) { /* blocks b of u[c], u[4+c], u[8+c], u[12+c] -> z[4b + c] */
        const __m512i lo01 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x88);
        const __m512i hi01 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xdd);
        const __m512i lo23 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x88);
        const __m512i hi23 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xdd);
        z[c] = _mm512_shuffle_i32x4(lo01, lo23, 0x88);
        z[8 + c] = _mm512_shuffle_i32x4(lo01, lo23, 0xdd);
        z[4 + c] = _mm512_shuffle_i32x4(hi01, hi23, 0x88);
        z[12 + c] = _mm512_shuffle_i32x4(hi01, hi23, 0xdd);
    }
}

/* acc + the u8 × s8 products of x and the dword at w broadcast, as one
 * instruction with an embedded broadcast (the intrinsic over _mm512_set1
 * compiles to a separate vpbroadcastd per product, an extra vector µop). */
INLINE __m512i dpbusd_bcst(__m512i acc, __m512i x, const int32_t *w)
{
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(x), "m"(*w));
    return acc;
}

INLINE __mmask16 lanes16(int64_t left) { return left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1); }

/* Keys [t, t + 16) against m rows; full: all 16 below n (else keys past n
 * read row n - 1 again and are not stored). */
INLINE void scores16(const int8_t *rows, int64_t t, int64_t n, int64_t D, const kv_i8_query *q,
                     const int m, const bool full, float *s, int64_t lds, const float *row_scale,
                     const void *next, int64_t next_bytes, int64_t per)
{
    const int64_t stride = kv_i8_query_stride(D) / 4; /* q->stride, a constant in the unrolled instances */
    const int32_t *limbs = (const int32_t *)(const void *)q->limbs; /* dword i: features 4i..4i+3 */
    __m512i acc[KV_ROWS][KV_I8_LIMBS];
    for (int r = 0; r < KV_ROWS; ++r)
        for (int l = 0; l < KV_I8_LIMBS; ++l) acc[r][l] = _mm512_setzero_si512();
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    for (int64_t d = 0; d < D; d += 64) {
        const __mmask64 k = D - d >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (D - d)) - 1;
        kv_prefetch_share(next, next_bytes, (t / 16) * ((D + 63) / 64) + d / 64, per);
        __m512i z[16];
#pragma GCC unroll 16
        for (int j = 0; j < 16; ++j) {
            const int64_t row = full || t + j < n ? t + j : n - 1;
            z[j] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(k, rows + row * D + d), flip);
        }
        transpose16(z);
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i)
#pragma GCC unroll 4
            for (int r = 0; r < m; ++r)
#pragma GCC unroll 3
                for (int l = 0; l < KV_I8_LIMBS; ++l)
                    acc[r][l] = dpbusd_bcst(acc[r][l], z[i], limbs + (r * KV_I8_LIMBS + l) * stride + d / 4 + i);
    }
    const __mmask16 keep = full ? 0xffff : lanes16(n - t);
    const __m512 rs = row_scale ? _mm512_maskz_loadu_ps(keep, row_scale + t) : _mm512_set1_ps(1.0f);
    for (int r = 0; r < m; ++r) {
        const __m512i hi = _mm512_sub_epi32(_mm512_add_epi32(_mm512_slli_epi32(acc[r][0], 8), acc[r][1]),
                                            _mm512_set1_epi32(q->bias_hi[r]));
        const __m512i lo = _mm512_sub_epi32(acc[r][2], _mm512_set1_epi32(q->bias_lo[r]));
        __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), _mm512_set1_ps(256.0f), _mm512_cvtepi32_ps(lo));
        v = _mm512_mul_ps(_mm512_mul_ps(v, _mm512_set1_ps(q->unit[r])), rs);
        _mm512_mask_storeu_ps(s + r * lds + t, keep, v);
    }
}

INLINE void scores_body(const int8_t *rows, int64_t n, int64_t n_out, int64_t D,
                        const kv_i8_query *q, const int m, float *s, int64_t lds,
                        const float *row_scale, const void *next, int64_t next_bytes)
{
    /* prefetches spread over the 64-feature steps (bursts of a whole 16-key
     * step's share measured slower) */
    const int64_t per = kv_prefetch_per(next_bytes, (n + 15) / 16 * ((D + 63) / 64));
    for (int64_t t = 0; t < n; t += 16) {
        if (t + 16 <= n) scores16(rows, t, n, D, q, m, true, s, lds, row_scale, next, next_bytes, per);
        else scores16(rows, t, n, D, q, m, false, s, lds, row_scale, next, next_bytes, per);
    }
    for (int r = 0; r < m; ++r)
        for (int64_t c = n; c < n_out; ++c) s[r * lds + c] = 0.0f;
}

static void scores_vnni(const void *rows, int64_t n, int64_t n_out, int64_t D, const kv_i8_query *q,
                        float *s, int64_t lds, const float *row_scale, const void *next,
                        int64_t next_bytes)
{
    const int8_t *x = rows;
    switch (q->m) { /* one instance per row count; 128 features unrolled */
    case 1: scores_body(x, n, n_out, D, q, 1, s, lds, row_scale, next, next_bytes); break;
    case 2: scores_body(x, n, n_out, D, q, 2, s, lds, row_scale, next, next_bytes); break;
    case 3: scores_body(x, n, n_out, D, q, 3, s, lds, row_scale, next, next_bytes); break;
    default:
        if (D == 128) scores_body(x, n, n_out, 128, q, 4, s, lds, row_scale, next, next_bytes);
        else scores_body(x, n, n_out, D, q, 4, s, lds, row_scale, next, next_bytes);
        break;
    }
}

/* The limbs of m query rows, 16 features at a time:
 *   v = rint(q·2^(22-e)) (q·2^(22-e) + 1.5·2^23 - 1.5·2^23: |q·2^(22-e)| <= 2^22)
 *   u = v + 2^23 + 128, u1 = (u >> 8) + 128: offsets that make the shifts
 *   floor divisions, so d2 = (u & 255) - 128, d1 = (u1 & 255) - 128,
 *   d0 = (u1 >> 8) - 128 with v = d0·2^16 + d1·2^8 + d2. */
static bool prepare_vnni(const float *q, int m, int64_t D, int8_t *limbs, kv_i8_query *out)
{
    if (D > KV_I8_MAX_D) return false;
    const int64_t stride = kv_i8_query_stride(D);
    *out = (kv_i8_query){.limbs = limbs, .stride = stride, .m = m};
    for (int r = 0; r < m; ++r) {
        const float *x = q + r * D;
        __m512i top = _mm512_setzero_si512(); /* max |q| as bits: integer order for finite values */
        for (int64_t d = 0; d < D; d += 16) {
            const __m512i b = _mm512_castps_si512(_mm512_maskz_loadu_ps(lanes16(D - d), x + d));
            top = _mm512_max_epu32(top, _mm512_and_si512(b, _mm512_set1_epi32(0x7fffffff)));
        }
        const uint32_t bits = _mm512_reduce_max_epu32(top);
        if (bits >= 0x7f800000u) return false; /* inf or NaN: the float path's semantics */
        float mx;
        __builtin_memcpy(&mx, &bits, sizeof mx);
        int e = 0;
        if (mx != 0.0f) frexpf(mx, &e); /* mx < 2^e */
        if (mx != 0.0f && e < -100) return false; /* 2^(e-22) would lose bits as a subnormal */
        const __m512 up = _mm512_set1_ps(ldexpf(1.0f, 22 - e)), round = _mm512_set1_ps(0x1.8p23f);
        const __m512i off = _mm512_set1_epi32((1 << 23) + 128), b128 = _mm512_set1_epi32(128);
        const __m512i low = _mm512_set1_epi32(255);
        __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0;
        int8_t *l0 = limbs + r * KV_I8_LIMBS * stride, *l1 = l0 + stride, *l2 = l1 + stride;
        for (int64_t d = 0; d < stride; d += 16) { /* past D: q = 0, limbs 0 */
            const __m512 y = _mm512_maskz_loadu_ps(d < D ? lanes16(D - d) : 0, x + d);
            const __m512i v = _mm512_cvttps_epi32(_mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(y, up), round), round));
            const __m512i u = _mm512_add_epi32(v, off), u1 = _mm512_add_epi32(_mm512_srli_epi32(u, 8), b128);
            const __m512i d2 = _mm512_sub_epi32(_mm512_and_si512(u, low), b128);
            const __m512i d1 = _mm512_sub_epi32(_mm512_and_si512(u1, low), b128);
            const __m512i d0 = _mm512_sub_epi32(_mm512_srli_epi32(u1, 8), b128);
            _mm_storeu_si128((__m128i *)(void *)(l0 + d), _mm512_cvtepi32_epi8(d0));
            _mm_storeu_si128((__m128i *)(void *)(l1 + d), _mm512_cvtepi32_epi8(d1));
            _mm_storeu_si128((__m128i *)(void *)(l2 + d), _mm512_cvtepi32_epi8(d2));
            s0 = _mm512_add_epi32(s0, d0), s1 = _mm512_add_epi32(s1, d1), s2 = _mm512_add_epi32(s2, d2);
        }
        out->unit[r] = ldexpf(1.0f, e - 22);
        /* |.| < 2^31 for D <= 512 */
        out->bias_hi[r] = 128 * (_mm512_reduce_add_epi32(s0) * 256 + _mm512_reduce_add_epi32(s1));
        out->bias_lo[r] = 128 * _mm512_reduce_add_epi32(s2);
    }
    return true;
}

const kv_i8_kernels kv_i8_vnni = {prepare_vnni, scores_vnni};

#if defined(__clang__)
#pragma clang attribute pop
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif

#endif
