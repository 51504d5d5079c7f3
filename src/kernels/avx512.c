/* AVX-512F and VL (+ FMA, F16C) kernels: the SIMD body with 16-lane vectors and a 12 × 32
 * microtile (24 accumulators + 2 B vectors + 1 broadcast of 32 registers).
 * Only ever selected when CPUID (and the OS, via XCR0) report AVX-512F and VL. */
#include "kernels.h"

#if defined(__x86_64__) || defined(__i386__)

#include <math.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512vl,fma,f16c"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,fma,f16c")
#endif

#include <immintrin.h>

typedef __m512 vf;
#define VW 16
#define MR 12
#define NV 2
#define SIMD(name) avx512_##name
#define V_ZERO() _mm512_setzero_ps()
#define V_SET1(x) _mm512_set1_ps(x)
#define V_LOAD(p) _mm512_loadu_ps(p)
#define V_STORE(p, v) _mm512_storeu_ps((p), (v))
#define V_BCAST(p) _mm512_set1_ps(*(p))
#define V_ADD(a, b) _mm512_add_ps(a, b)
#define V_SUB(a, b) _mm512_sub_ps(a, b)
#define V_MUL(a, b) _mm512_mul_ps(a, b)
#define V_MAX(a, b) _mm512_max_ps(a, b)
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define V_FNMA(a, b, c) _mm512_fnmadd_ps(a, b, c)
/* 16 bfloat16 / half values widened (vcvtph2ps is AVX-512F on zmm). */
#define V_LOAD_BF16(p) \
    _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p))), 16))
#define V_LOAD_F16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
/* 16 floats narrowed, to nearest even (bfloat16 as in avx2.c). */
#define V_STORE_F16(p, v) \
    _mm256_storeu_si256((__m256i *)(p), _mm512_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
static inline void avx512_store_bf16(uint16_t *p, __m512 v)
{
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    const __m512i r = _mm512_mask_mov_epi32(rounded, nan, quiet);
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(r));
}
#define V_STORE_BF16(p, v) avx512_store_bf16((p), (v))
/* softmax_online_p16's store: 32 floats (a: columns 0-15, b: 16-31) to
 * bfloat16, to nearest even, by vcvtne2ps2bf16 (AVX512_BF16, outside this
 * file's target: written out, and only ever run where
 * sdpa_bf16dot_available()). */
static inline void avx512_store_p16(uint16_t *p, __m512 a, __m512 b)
{
    __m512i r;
    __asm__("vcvtne2ps2bf16 %2, %1, %0" : "=v"(r) : "v"(b), "v"(a));
    _mm512_storeu_si512(p, r);
}
#define SIMD_HAVE_P16 1
#define V_STORE_P16(p, a, b) avx512_store_p16((p), (a), (b))

/* e^x for x <= 0, -inf and NaN (the algorithm of avx2.c, see there) of
 * k <= 4 vectors in place, each step for all k before the next: the k
 * dependency chains (about 50 cycles each) then overlap even where the
 * out-of-order window would hold only one or two whole exps. */
#define EXP_STEP(stmt) \
    _Pragma("GCC unroll 4") for (int i = 0; i < k; ++i) stmt
static inline __attribute__((always_inline)) void v_exp_nonpos_k(vf *x, const int k)
{
    const vf magic = _mm512_set1_ps(12583039.0f); /* 1.5·2^23 + 127 */
    vf t[4], r[4], r2[4], lo[4], hi[4];
    __mmask16 keep[4]; /* lanes not below SDPA_EXP_MIN (NaN kept) */
    EXP_STEP(keep[i] = _mm512_cmp_ps_mask(x[i], _mm512_set1_ps(SDPA_EXP_MIN), _CMP_NLT_UQ));
    EXP_STEP(t[i] = _mm512_fmadd_ps(x[i], _mm512_set1_ps(SDPA_LOG2E), magic));
    EXP_STEP(r2[i] = _mm512_sub_ps(t[i], magic)); /* n */
    EXP_STEP(r[i] = _mm512_fnmadd_ps(r2[i], _mm512_set1_ps(SDPA_LN2_HI), x[i]));
    EXP_STEP(r[i] = _mm512_fnmadd_ps(r2[i], _mm512_set1_ps(SDPA_LN2_LO), r[i]));
    /* 2^n: n + 127 from the low bits of t into the exponent field */
    EXP_STEP(t[i] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(t[i]), 23)));
    /* Estrin-style evaluation of 1 + r + r²(c2 + c3 r + c4 r² + c5 r³ + c6 r⁴):
     * shorter dependency chains than Horner, so more exps are in flight. */
    EXP_STEP(r2[i] = _mm512_mul_ps(r[i], r[i]));
    const vf c2 = _mm512_set1_ps(SDPA_EXP_C2), c4 = _mm512_set1_ps(SDPA_EXP_C4);
    EXP_STEP(lo[i] = _mm512_fmadd_ps(_mm512_set1_ps(SDPA_EXP_C3), r[i], c2));
    EXP_STEP(hi[i] = _mm512_fmadd_ps(_mm512_set1_ps(SDPA_EXP_C5), r[i], c4));
    EXP_STEP(hi[i] = _mm512_fmadd_ps(_mm512_set1_ps(SDPA_EXP_C6), r2[i], hi[i]));
    EXP_STEP(lo[i] = _mm512_fmadd_ps(hi[i], r2[i], lo[i]));
    EXP_STEP(lo[i] = _mm512_add_ps(_mm512_fmadd_ps(lo[i], r2[i], r[i]), _mm512_set1_ps(1.0f)));
    EXP_STEP(x[i] = _mm512_maskz_mul_ps(keep[i], lo[i], t[i]));
}
#undef EXP_STEP

static inline vf v_exp_nonpos(vf x)
{
    v_exp_nonpos_k(&x, 1);
    return x;
}

/* e^x for any x: v_exp_nonpos plus +inf above SDPA_EXP_MAX. */
static inline vf v_exp(vf x)
{
    const __mmask16 big = _mm512_cmp_ps_mask(x, _mm512_set1_ps(SDPA_EXP_MAX), _CMP_NLE_UQ);
    return _mm512_mask_add_ps(v_exp_nonpos(x), big, x, _mm512_set1_ps(INFINITY));
}

typedef __mmask16 vmask;
#define V_CMP_EQ(a, b) _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ)
#define V_BLEND(m, a, b) _mm512_mask_blend_ps(m, a, b)
#define V_CMP_GE(a, b) _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ)
#define v_any(m) ((m) != 0)
#define V_RCP(a) _mm512_rcp14_ps(a) /* relative error <= 2^-14 */
#define V_ABS(a) _mm512_abs_ps(a)

static inline vf v_copysign(vf mag, vf sign)
{
    const __m512i sbit = _mm512_set1_epi32((int)0x80000000u);
    return _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_andnot_si512(sbit, _mm512_castps_si512(mag)),
                        _mm512_and_si512(sbit, _mm512_castps_si512(sign))));
}

static inline vmask v_cols_outside(int64_t c0, int64_t lo, int64_t hi)
{
    const __m512i col = _mm512_add_epi32(_mm512_set1_epi32((int)c0),
                                         _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                                                           12, 13, 14, 15));
    return (vmask)(_mm512_cmplt_epi32_mask(col, _mm512_set1_epi32((int)lo)) |
                   _mm512_cmpge_epi32_mask(col, _mm512_set1_epi32((int)hi)));
}

/* 32-bit integer lanes for the dropout generator. */
typedef __m512i vi;
#define VI_SET1(x) _mm512_set1_epi32((int)(x))
#define VI_IOTA2() /* 64-bit lanes 0, 2, ..., 14 */ \
    _mm512_setr_epi32(0, 0, 2, 0, 4, 0, 6, 0, 8, 0, 10, 0, 12, 0, 14, 0)
#define VI_ADD(a, b) _mm512_add_epi32(a, b)
#define VI_XOR3(a, b, c) _mm512_ternarylogic_epi32(a, b, c, 0x96)
/* low words of the 64-bit lanes: products, high words; two vectors' low
 * words interleaved into 32-bit lanes */
#define VI_MULU(x, m) _mm512_mul_epu32(x, _mm512_set1_epi32((int)(m)))
#define VI_HI64(x) _mm512_srli_epi64(x, 32)
#define VI_ZIP(even, odd) _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32))

/* Words w_q of counter lanes L -> column order 4L + q (a 4 x 16 transpose). */
static inline void v_words_to_columns(vi w0, vi w1, vi w2, vi w3, vi cols[4])
{
    const vi t0 = _mm512_unpacklo_epi32(w0, w1), t1 = _mm512_unpackhi_epi32(w0, w1);
    const vi t2 = _mm512_unpacklo_epi32(w2, w3), t3 = _mm512_unpackhi_epi32(w2, w3);
    /* u_m's 128-bit chunk k holds the four words of counter lane 4k + m */
    const vi u0 = _mm512_unpacklo_epi64(t0, t2), u1 = _mm512_unpackhi_epi64(t0, t2);
    const vi u2 = _mm512_unpacklo_epi64(t1, t3), u3 = _mm512_unpackhi_epi64(t1, t3);
    const vi a = _mm512_shuffle_i32x4(u0, u1, 0x44), b = _mm512_shuffle_i32x4(u2, u3, 0x44);
    const vi c = _mm512_shuffle_i32x4(u0, u1, 0xEE), e = _mm512_shuffle_i32x4(u2, u3, 0xEE);
    cols[0] = _mm512_shuffle_i32x4(a, b, 0x88);
    cols[1] = _mm512_shuffle_i32x4(a, b, 0xDD);
    cols[2] = _mm512_shuffle_i32x4(c, e, 0x88);
    cols[3] = _mm512_shuffle_i32x4(c, e, 0xDD);
}

/* Lanes whose word is >= keep (unsigned). */
static inline vmask v_keep(vi w, vi keep)
{
    return _mm512_cmpge_epu32_mask(w, keep);
}

/* Horizontal max (is_max) or sum of each of the 16 vectors x[0..15], as
 * lane i of the result for x[i]. Each row by the same fixed tree: its 8-lane
 * halves combined (lower ∘ upper), then the 4-lane quarters, then lane
 * pairs, then the last two lanes, the lower always the first operand (max_ps
 * keeps its second on ties and NaN). The 16 trees are interleaved, a shuffle serving two rows at
 * a time, so no row waits on its own chain of shuffles. */
static inline __attribute__((always_inline)) vf avx512_reduce_rows(const vf *x, const bool is_max)
{
#define OP(a, b) (is_max ? _mm512_max_ps(a, b) : _mm512_add_ps(a, b))
    vf y[8], z[4], w[2];
    for (int i = 0; i < 8; ++i) /* rows 2i, 2i+1: [L0∘L2, L1∘L3 | L0∘L2, L1∘L3] */
        y[i] = OP(_mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                  _mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int i = 0; i < 4; ++i) /* 128-bit lane k: row 4i+k's quarter sum */
        z[i] = OP(_mm512_shuffle_f32x4(y[2 * i], y[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                  _mm512_shuffle_f32x4(y[2 * i], y[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int i = 0; i < 2; ++i) { /* lane k: rows 8i+k, 8i+4+k, two lanes each */
        const __m512d a = _mm512_castps_pd(z[2 * i]), b = _mm512_castps_pd(z[2 * i + 1]);
        w[i] = OP(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                  _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    /* lane 4k + j: row k + 4j */
    const vf r = OP(_mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                    _mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
#undef OP
    const __m512i rows = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(rows, r);
}

static inline vf v_hmax_rows(const vf *x) { return avx512_reduce_rows(x, true); }
static inline vf v_hsum_rows(const vf *x) { return avx512_reduce_rows(x, false); }

/* The 8-lane halves added, then avx2.c's tree: the same for each argument. */
static inline __m256 avx512_fold256(vf v)
{
    return _mm256_add_ps(_mm512_castps512_ps256(v),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

static inline __m128 v_hsum4(vf a, vf b, vf c, vf d)
{
    const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(avx512_fold256(a), avx512_fold256(b)),
                                       _mm256_hadd_ps(avx512_fold256(c), avx512_fold256(d)));
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

static inline vf v_bool_bias(const uint8_t *p)
{
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    const __mmask16 allowed = _mm512_test_epi32_mask(b, b);
    return _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), allowed, _mm512_setzero_ps());
}

static inline unsigned v_hidden_bits(vf v)
{
    return (unsigned)_mm512_cmp_ps_mask(v, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ);
}

static inline unsigned v_nonzero_visible_bits(vf v)
{
    const __mmask16 nz = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    return (unsigned)_mm512_mask_cmp_ps_mask(nz, v, _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ);
}

#include "simd_body.h"

#if defined(__clang__)
#pragma clang attribute pop
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif

const sdpa_kernels sdpa_kernels_avx512 = {
    .name = "avx512",
    .npad = NV * VW,
    .gemm = avx512_gemm,
    .gemm16 = avx512_gemm16,
    .gemm_max = avx512_gemm_max,
    .softmax_online = avx512_softmax_online,
    .softmax_online_p16 = avx512_softmax_online_p16,
    .softmax_rows = avx512_softmax_rows,
    .probs = avx512_probs,
    .dsoftmax = avx512_dsoftmax,
    .dropout = avx512_dropout,
    .mask_row = avx512_mask_row,
    .alibi_row = avx512_alibi_row,
    .pack_transposed = avx512_pack_transposed,
    .pack_transposed16 = avx512_pack_transposed16,
    .scores_rows = avx512_scores_rows,
    .widen = avx512_widen,
    .narrow = avx512_narrow,
    .rows_finite = avx512_rows_finite,
    .vexp = avx512_vexp,
    .vtanh = avx512_vtanh,
};

#endif
