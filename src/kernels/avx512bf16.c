/* The AVX512_BF16 kernels of bf16dot.h: a 12 × 32 microtile of vdpbf16ps
 * (24 accumulators, 2 B vectors, 1 broadcast pair), the shape of avx512.c's
 * float32 microtile with two features per instruction. */
#include "bf16dot.h"
#include "bf16_engine.h"

#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)

static bool bf16dot_probe(void)
{
#if defined(__GNUC__) || defined(__clang__)
    return sdpa_isa_best() >= SDPA_ISA_AVX512 && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512bf16");
#else
    return false;
#endif
}

bool sdpa_bf16dot_available(void)
{
    static atomic_int cached = -1; /* a hardware constant: asked once (packers ask per row) */
    int ok = atomic_load_explicit(&cached, memory_order_relaxed);
    if (ok < 0) {
        ok = bf16dot_probe();
        atomic_store_explicit(&cached, ok, memory_order_relaxed);
    }
    return ok;
}

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512vl,avx512bw,avx512bf16"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512bf16")
#endif

#include <immintrin.h>

enum { MR = 12, NV = 2, NR = 32 };

/* C's microtile (rows <= mr rows, 32 columns); with vmax (SET only) each
 * stored row's two vectors folded into its lane maxima vmax[r·16], in
 * column order, from -inf in the first column panel (first). */
static inline __attribute__((always_inline)) void
microtile(int64_t kp, const uint32_t *a, int64_t a_rs, const uint32_t *b, int64_t ldb, float *c,
          int64_t ldc, int64_t rows, const float *row_scale, sdpa_gemm_mode mode, const int mr,
          float *vmax, bool first)
{
    __m512 acc[MR][NV];
    const uint32_t *ar[MR];
    for (int r = 0; r < mr; ++r) {
        ar[r] = a + (r < rows ? r : rows - 1) * a_rs;
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
    }
    for (int64_t l = 0; l < kp; ++l) {
        __m512bh bv[NV];
        for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(b + l * ldb + v * 16);
        for (int r = 0; r < mr; ++r) {
            const __m512bh x = (__m512bh)_mm512_set1_epi32((int)ar[r][l]);
            for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], x, bv[v]);
        }
    }
    for (int r = 0; r < mr && r < rows; ++r) {
        float *cr = c + r * ldc;
        for (int v = 0; v < NV; ++v) {
            __m512 out = acc[r][v];
            if (mode == SDPA_GEMM_ADD)
                out = _mm512_add_ps(_mm512_loadu_ps(cr + v * 16), out);
            else if (mode == SDPA_GEMM_SCALE_ADD)
                out = _mm512_fmadd_ps(_mm512_loadu_ps(cr + v * 16), _mm512_set1_ps(row_scale[r]), out);
            _mm512_storeu_ps(cr + v * 16, out);
        }
        if (vmax) {
            float *vr = vmax + r * SDPA_MAX_VW;
            __m512 mx = first ? _mm512_set1_ps(-INFINITY) : _mm512_loadu_ps(vr);
            for (int v = 0; v < NV; ++v) mx = _mm512_max_ps(mx, acc[r][v]); /* softmax_full's order */
            _mm512_storeu_ps(vr, mx);
        }
    }
}

static inline __attribute__((always_inline)) void
gemm_mode(int64_t m, int64_t n, int64_t kp, const uint32_t *a, int64_t a_rs, const uint32_t *b,
          int64_t ldb, float *c, int64_t ldc, const float *row_scale, sdpa_gemm_mode mode,
          float *vmax)
{
    for (int64_t j = 0; j < n; j += NR)
        for (int64_t i = 0; i < m; i += MR) {
            const int64_t rows = m - i < MR ? m - i : MR;
            const float *rs = row_scale ? row_scale + i : NULL;
            const uint32_t *ai = a + i * a_rs, *bj = b + j;
            float *cij = c + i * ldc + j, *vm = vmax ? vmax + i * SDPA_MAX_VW : NULL;
            if (rows <= 4)
                microtile(kp, ai, a_rs, bj, ldb, cij, ldc, rows, rs, mode, 4, vm, j == 0);
            else
                microtile(kp, ai, a_rs, bj, ldb, cij, ldc, rows, rs, mode, MR, vm, j == 0);
        }
}

void sdpa_bf16dot_gemm(int64_t m, int64_t n, int64_t kp, const uint32_t *a, int64_t a_rs,
                       const uint32_t *b, int64_t ldb, float *c, int64_t ldc,
                       const float *row_scale, sdpa_gemm_mode mode)
{
    /* one instance per mode, as the float32 GEMM (simd_body.h) */
    if (mode == SDPA_GEMM_SET)
        gemm_mode(m, n, kp, a, a_rs, b, ldb, c, ldc, NULL, SDPA_GEMM_SET, NULL);
    else if (mode == SDPA_GEMM_ADD)
        gemm_mode(m, n, kp, a, a_rs, b, ldb, c, ldc, NULL, SDPA_GEMM_ADD, NULL);
    else
        gemm_mode(m, n, kp, a, a_rs, b, ldb, c, ldc, row_scale, SDPA_GEMM_SCALE_ADD, NULL);
}

void sdpa_bf16dot_gemm_max(int64_t m, int64_t n, int64_t kp, const uint32_t *a, int64_t a_rs,
                           const uint32_t *b, int64_t ldb, float *c, int64_t ldc, float *vmax)
{
    gemm_mode(m, n, kp, a, a_rs, b, ldb, c, ldc, NULL, SDPA_GEMM_SET, vmax);
}

/* 16 × 16 transpose of 32-bit elements in registers: o[i] lane j = r[j] lane i. */
static inline void transpose16(const __m512i r[16], __m512i o[16])
{
    __m512i t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* u[4g + q] holds, in 128-bit chunk c, element q of rows 4g..4g+3 at
     * columns 4c..4c+3: gather the chunks of the four groups */
    for (int q = 0; q < 4; ++q) {
        const __m512i a = _mm512_shuffle_i32x4(u[q], u[4 + q], 0x88);   /* chunks 0,2 | 0,2 */
        const __m512i b = _mm512_shuffle_i32x4(u[q], u[4 + q], 0xDD);   /* chunks 1,3 | 1,3 */
        const __m512i c = _mm512_shuffle_i32x4(u[8 + q], u[12 + q], 0x88);
        const __m512i d = _mm512_shuffle_i32x4(u[8 + q], u[12 + q], 0xDD);
        o[q] = _mm512_shuffle_i32x4(a, c, 0x88);      /* column chunk 0 */
        o[4 + q] = _mm512_shuffle_i32x4(b, d, 0x88);  /* chunk 1 */
        o[8 + q] = _mm512_shuffle_i32x4(a, c, 0xDD);  /* chunk 2 */
        o[12 + q] = _mm512_shuffle_i32x4(b, d, 0xDD); /* chunk 3 */
    }
}

static inline uint32_t load_pair(const uint16_t *p)
{
    uint32_t x;
    memcpy(&x, p, sizeof x);
    return x;
}

void sdpa_bf16dot_pack_kt(const uint16_t *src, int64_t rs, int64_t n, int64_t D, uint32_t *dst,
                          int64_t ld)
{
    const int64_t pairs = D / 2;
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        int64_t l = 0;
        for (; l + 16 <= pairs; l += 16) {
            __m512i r[16], o[16];
            for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(src + (j + i) * rs + 2 * l);
            transpose16(r, o);
            for (int i = 0; i < 16; ++i) _mm512_storeu_si512(dst + (l + i) * ld + j, o[i]);
        }
        for (; l < pairs; ++l)
            for (int i = 0; i < 16; ++i) dst[l * ld + j + i] = load_pair(src + (j + i) * rs + 2 * l);
    }
    for (; j < n; ++j)
        for (int64_t l = 0; l < pairs; ++l) dst[l * ld + j] = load_pair(src + j * rs + 2 * l);
    for (int64_t l = 0; l < pairs; ++l)
        for (int64_t c = n; c < ld; ++c) dst[l * ld + c] = 0;
}

void sdpa_bf16dot_pack_kt_f32(const float *src, int64_t rs, int64_t n, int64_t D, uint32_t *dst,
                              int64_t ld)
{
    const int64_t pairs = (D + 1) / 2;
    for (int64_t j = 0; j < ld; j += 16)
        for (int64_t l = 0; l < pairs; l += 16) {
            /* 16 keys' features 2l .. 2l+31 as 16 pairs each (a zero past D
             * completes an odd last pair; keys from n on are zero), then
             * transposed: pair row l + i, keys j .. j+15 */
            const int64_t left = D - 2 * l;
            const __mmask16 lo = (__mmask16)(left >= 16 ? 0xFFFF : (1u << left) - 1);
            const __mmask16 hi = (__mmask16)(left >= 32 ? 0xFFFF : left > 16 ? (1u << (left - 16)) - 1 : 0);
            __m512i r[16], o[16];
            for (int i = 0; i < 16; ++i) {
                const float *row = src + (j + i) * rs + 2 * l;
                r[i] = j + i < n ? (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, row + 16),
                                                                 _mm512_maskz_loadu_ps(lo, row))
                                 : _mm512_setzero_si512();
            }
            transpose16(r, o);
            for (int i = 0; i < 16 && l + i < pairs; ++i) _mm512_storeu_si512(dst + (l + i) * ld + j, o[i]);
        }
}

bool sdpa_bf16dot_pack_v(const uint16_t *src, int64_t rs, int64_t n, int64_t Dv, uint32_t *dst,
                         int64_t ld)
{
    const __m512i expo = _mm512_set1_epi16(0x7f80);
    __mmask32 bad = 0;
    bool bad_tail = false;
    /* unpacklo/hi_epi16 interleave within 128-bit chunks: lo holds columns
     * 8c..8c+3 of chunk c, hi 8c+4..8c+7; two permutes restore the order */
    const __m512i first = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    const __m512i second = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29,
                                             30, 31);
    for (int64_t l = 0; 2 * l < n; ++l) {
        const uint16_t *r0 = src + 2 * l * rs, *r1 = 2 * l + 1 < n ? r0 + rs : NULL;
        uint32_t *d = dst + l * ld;
        int64_t x = 0;
        for (; x + 32 <= Dv; x += 32) {
            const __m512i a = _mm512_loadu_si512(r0 + x);
            const __m512i b = r1 ? _mm512_loadu_si512(r1 + x) : _mm512_setzero_si512();
            bad |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(a, expo), expo) |
                   _mm512_cmpeq_epi16_mask(_mm512_and_si512(b, expo), expo);
            const __m512i lo = _mm512_unpacklo_epi16(a, b), hi = _mm512_unpackhi_epi16(a, b);
            _mm512_storeu_si512(d + x, _mm512_permutex2var_epi32(lo, first, hi));
            _mm512_storeu_si512(d + x + 16, _mm512_permutex2var_epi32(lo, second, hi));
        }
        for (; x < Dv; ++x) {
            const uint16_t a = r0[x], b = r1 ? r1[x] : 0;
            bad_tail |= (a & 0x7f80) == 0x7f80 || (b & 0x7f80) == 0x7f80;
            d[x] = (uint32_t)a | (uint32_t)b << 16;
        }
        for (; x < ld; ++x) d[x] = 0;
    }
    return !bad && !bad_tail;
}

/* 16 floats to bfloat16 (vcvtneps2bf16), each in the low half of a 32-bit lane. */
static inline __m512i bf16_lanes(__m512 v)
{
    return _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(v));
}

bool sdpa_bf16dot_pairs_keys_f32(const float *src, int64_t rs, int64_t k, int64_t n,
                                 uint32_t *dst, int64_t ld)
{
    const __m512i expo = _mm512_set1_epi16(0x7f80);
    __mmask32 bad = 0;
    for (int64_t l = 0; 2 * l < k; ++l) {
        const float *r0 = src + 2 * l * rs, *r1 = 2 * l + 1 < k ? r0 + rs : NULL;
        uint32_t *d = dst + l * ld;
        for (int64_t x = 0; x < n; x += 16) {
            const __mmask16 m = (__mmask16)(n - x >= 16 ? 0xFFFF : (1u << (n - x)) - 1);
            const __m512i lo = bf16_lanes(_mm512_maskz_loadu_ps(m, r0 + x));
            const __m512i hi = r1 ? _mm512_slli_epi32(bf16_lanes(_mm512_maskz_loadu_ps(m, r1 + x)), 16)
                                  : _mm512_setzero_si512();
            const __m512i pr = _mm512_or_si512(lo, hi);
            bad |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(pr, expo), expo);
            _mm512_mask_storeu_epi32(d + x, m, pr);
        }
        for (int64_t x = n; x < ld; ++x) d[x] = 0;
    }
    return !bad;
}

void sdpa_bf16dot_transpose32(const uint32_t *src, int64_t sld, int64_t rows, int64_t cols,
                              uint32_t *dst, int64_t dld)
{
    int64_t r = 0;
    for (; r + 16 <= rows; r += 16) {
        int64_t c = 0;
        for (; c + 16 <= cols; c += 16) {
            __m512i in[16], out[16];
            for (int i = 0; i < 16; ++i) in[i] = _mm512_loadu_si512(src + (r + i) * sld + c);
            transpose16(in, out);
            for (int i = 0; i < 16; ++i) _mm512_storeu_si512(dst + (c + i) * dld + r, out[i]);
        }
        for (; c < cols; ++c)
            for (int i = 0; i < 16; ++i) dst[c * dld + r + i] = src[(r + i) * sld + c];
    }
    for (; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) dst[c * dld + r] = src[r * sld + c];
}

void sdpa_bf16dot_narrow(const float *src, int64_t n, uint16_t *dst)
{
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        _mm512_storeu_si512(dst + i, (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16),
                                                                  _mm512_loadu_ps(src + i)));
    if (i < n) {
        const int64_t left = n - i;
        const __mmask16 lo = (__mmask16)((1u << (left < 16 ? left : 16)) - 1);
        const __mmask16 hi = (__mmask16)(left > 16 ? (1u << (left - 16)) - 1 : 0);
        const __m512bh h = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, src + i + 16),
                                               _mm512_maskz_loadu_ps(lo, src + i));
        _mm512_mask_storeu_epi16(dst + i, (__mmask32)((1ull << left) - 1), (__m512i)h);
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif

#if defined(__x86_64__)
const sdpa_bf16_engine sdpa_engine_avx512bf16 = {
    .name = "avx512bf16",
    .npad = NR,
    .gemm = sdpa_bf16dot_gemm,
    .gemm_max = sdpa_bf16dot_gemm_max,
};
#endif

#else /* not x86: the mode falls back to the exact path */

bool sdpa_bf16dot_available(void) { return false; }
void sdpa_bf16dot_gemm(int64_t m, int64_t n, int64_t kp, const uint32_t *a, int64_t a_rs,
                       const uint32_t *b, int64_t ldb, float *c, int64_t ldc,
                       const float *row_scale, sdpa_gemm_mode mode)
{
    (void)m, (void)n, (void)kp, (void)a, (void)a_rs, (void)b, (void)ldb, (void)c, (void)ldc,
        (void)row_scale, (void)mode;
}
void sdpa_bf16dot_gemm_max(int64_t m, int64_t n, int64_t kp, const uint32_t *a, int64_t a_rs,
                           const uint32_t *b, int64_t ldb, float *c, int64_t ldc, float *vmax)
{
    (void)m, (void)n, (void)kp, (void)a, (void)a_rs, (void)b, (void)ldb, (void)c, (void)ldc,
        (void)vmax;
}
void sdpa_bf16dot_pack_kt(const uint16_t *src, int64_t rs, int64_t n, int64_t D, uint32_t *dst,
                          int64_t ld)
{
    (void)src, (void)rs, (void)n, (void)D, (void)dst, (void)ld;
}
void sdpa_bf16dot_pack_kt_f32(const float *src, int64_t rs, int64_t n, int64_t D, uint32_t *dst,
                              int64_t ld)
{
    (void)src, (void)rs, (void)n, (void)D, (void)dst, (void)ld;
}
bool sdpa_bf16dot_pack_v(const uint16_t *src, int64_t rs, int64_t n, int64_t Dv, uint32_t *dst,
                         int64_t ld)
{
    (void)src, (void)rs, (void)n, (void)Dv, (void)dst, (void)ld;
    return false;
}
void sdpa_bf16dot_narrow(const float *src, int64_t n, uint16_t *dst)
{
    (void)src, (void)n, (void)dst;
}
bool sdpa_bf16dot_pairs_keys_f32(const float *src, int64_t rs, int64_t k, int64_t n,
                                 uint32_t *dst, int64_t ld)
{
    (void)src, (void)rs, (void)k, (void)n, (void)dst, (void)ld;
    return false;
}
void sdpa_bf16dot_transpose32(const uint32_t *src, int64_t sld, int64_t rows, int64_t cols,
                              uint32_t *dst, int64_t dld)
{
    (void)src, (void)sld, (void)rows, (void)cols, (void)dst, (void)dld;
}
#endif
