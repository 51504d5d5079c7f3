/* AVX2 + FMA (+ F16C) kernels: the SIMD body with 8-lane vectors and a 6 × 16
 * microtile (12 accumulators + 2 B vectors + 1 broadcast of 16 registers). */
#include "kernels.h"

#if defined(__x86_64__) || defined(__i386__)

#include <math.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#include <immintrin.h>

typedef __m256 vf;
#define VW 8
#define MR 6
#define NV 2
#define SIMD(name) avx2_##name
#define V_ZERO() _mm256_setzero_ps()
#define V_SET1(x) _mm256_set1_ps(x)
#define V_LOAD(p) _mm256_loadu_ps(p)
#define V_STORE(p, v) _mm256_storeu_ps((p), (v))
#define V_BCAST(p) _mm256_broadcast_ss(p)
#define V_ADD(a, b) _mm256_add_ps(a, b)
#define V_SUB(a, b) _mm256_sub_ps(a, b)
#define V_MUL(a, b) _mm256_mul_ps(a, b)
#define V_MAX(a, b) _mm256_max_ps(a, b)
#define V_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define V_FNMA(a, b, c) _mm256_fnmadd_ps(a, b, c)
/* 8 bfloat16 / half values widened: bfloat16 is a float's top half, F16C converts halves. */
#define V_LOAD_BF16(p) \
    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p))), 16))
#define V_LOAD_F16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
/* 8 floats narrowed, to nearest even: half by F16C; bfloat16 by adding
 * 0x7fff + (the kept lowest bit) to the bits (NaN: quieted, not rounded). */
#define V_STORE_F16(p, v) \
    _mm_storeu_si128((__m128i *)(p), _mm256_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
static inline void avx2_store_bf16(uint16_t *p, __m256 v)
{
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128((__m128i *)p, _mm256_castsi256_si128(packed));
}
#define V_STORE_BF16(p, v) avx2_store_bf16((p), (v))

/*
 * e^x for x <= 0 (and -inf, NaN): n = round(x·log2e) by the magic-number
 * trick (t = x·log2e + 1.5·2^23 + 127 leaves n + 127 in the low mantissa
 * bits of t, moved into the exponent field of 2^n by one shift), Cody–Waite
 * reduction, degree-6 polynomial, times 2^n. Lanes
 * below SDPA_EXP_MIN (also -inf) become 0; NaN stays NaN (it flows through
 * the polynomial and the multiply). v_exp_nonpos_k does k <= 4 vectors in
 * place, each step for all k before the next: the k dependency chains
 * (about 50 cycles each) then overlap even where the out-of-order window
 * would hold only one or two whole exps.
 */
#define EXP_STEP(stmt) \
    _Pragma("GCC unroll 4") for (int i = 0; i < k; ++i) stmt
static inline __attribute__((always_inline)) void v_exp_nonpos_k(vf *x, const int k)
{
    const vf magic = _mm256_set1_ps(12583039.0f); /* 1.5·2^23 + 127 */
    vf t[4], n[4], r[4], r2[4], lo[4], hi[4], p[4];
    EXP_STEP(t[i] = _mm256_fmadd_ps(x[i], _mm256_set1_ps(SDPA_LOG2E), magic));
    EXP_STEP(n[i] = _mm256_sub_ps(t[i], magic));
    EXP_STEP(r[i] = _mm256_fnmadd_ps(n[i], _mm256_set1_ps(SDPA_LN2_HI), x[i]));
    EXP_STEP(r[i] = _mm256_fnmadd_ps(n[i], _mm256_set1_ps(SDPA_LN2_LO), r[i]));
    /* Estrin-style evaluation of 1 + r + r²(c2 + c3 r + c4 r² + c5 r³ + c6 r⁴):
     * shorter dependency chains than Horner, so more exps are in flight. */
    EXP_STEP(r2[i] = _mm256_mul_ps(r[i], r[i]));
    const vf c2 = _mm256_set1_ps(SDPA_EXP_C2), c4 = _mm256_set1_ps(SDPA_EXP_C4);
    EXP_STEP(lo[i] = _mm256_fmadd_ps(_mm256_set1_ps(SDPA_EXP_C3), r[i], c2));
    EXP_STEP(hi[i] = _mm256_fmadd_ps(_mm256_set1_ps(SDPA_EXP_C5), r[i], c4));
    EXP_STEP(hi[i] = _mm256_fmadd_ps(_mm256_set1_ps(SDPA_EXP_C6), r2[i], hi[i]));
    EXP_STEP(lo[i] = _mm256_fmadd_ps(hi[i], r2[i], lo[i]));
    EXP_STEP(p[i] = _mm256_add_ps(_mm256_fmadd_ps(lo[i], r2[i], r[i]), _mm256_set1_ps(1.0f)));
    EXP_STEP(x[i] = _mm256_andnot_ps(_mm256_cmp_ps(x[i], _mm256_set1_ps(SDPA_EXP_MIN), _CMP_LT_OQ),
                                     _mm256_mul_ps(p[i], _mm256_castsi256_ps(_mm256_slli_epi32(
                                                             _mm256_castps_si256(t[i]), 23)))));
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
    return _mm256_blendv_ps(v_exp_nonpos(x), _mm256_add_ps(x, _mm256_set1_ps(INFINITY)),
                            _mm256_cmp_ps(x, _mm256_set1_ps(SDPA_EXP_MAX), _CMP_NLE_UQ));
}

typedef __m256 vmask;
#define V_CMP_EQ(a, b) _mm256_cmp_ps(a, b, _CMP_EQ_OQ)
#define V_BLEND(m, a, b) _mm256_blendv_ps(a, b, m)
#define V_CMP_GE(a, b) _mm256_cmp_ps(a, b, _CMP_GE_OQ)
#define v_any(m) (_mm256_movemask_ps(m) != 0)
#define V_RCP(a) _mm256_rcp_ps(a) /* relative error <= 1.5·2^-12 */
#define V_ABS(a) _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a)

static inline vf v_copysign(vf mag, vf sign)
{
    const vf sbit = _mm256_set1_ps(-0.0f);
    return _mm256_or_ps(_mm256_andnot_ps(sbit, mag), _mm256_and_ps(sbit, sign));
}

static inline vmask v_cols_outside(int64_t c0, int64_t lo, int64_t hi)
{
    const __m256i col = _mm256_add_epi32(_mm256_set1_epi32((int)c0),
                                         _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i below = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)lo), col);
    const __m256i inside_hi = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)hi), col);
    return _mm256_castsi256_ps(_mm256_or_si256(below, _mm256_xor_si256(inside_hi,
                                                                        _mm256_set1_epi32(-1))));
}

/* 32-bit integer lanes for the dropout generator. */
typedef __m256i vi;
#define VI_SET1(x) _mm256_set1_epi32((int)(x))
#define VI_IOTA2() _mm256_setr_epi32(0, 0, 2, 0, 4, 0, 6, 0) /* 64-bit lanes 0, 2, 4, 6 */
#define VI_ADD(a, b) _mm256_add_epi32(a, b)
/* a is the operand a Philox round waits for (a product): b ^ c first, off
 * its dependency chain */
#define VI_XOR3(a, b, c) _mm256_xor_si256(a, _mm256_xor_si256(b, c))
/* low words of the 64-bit lanes: products, high words; two vectors' low
 * words interleaved into 32-bit lanes */
#define VI_MULU(x, m) _mm256_mul_epu32(x, _mm256_set1_epi32((int)(m)))
#define VI_HI64(x) _mm256_srli_epi64(x, 32)
#define VI_ZIP(even, odd) _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA)

/* Words w_q of counter lanes L -> column order 4L + q (a 4 x 8 transpose). */
static inline void v_words_to_columns(vi w0, vi w1, vi w2, vi w3, vi cols[4])
{
    const vi t0 = _mm256_unpacklo_epi32(w0, w1), t1 = _mm256_unpackhi_epi32(w0, w1);
    const vi t2 = _mm256_unpacklo_epi32(w2, w3), t3 = _mm256_unpackhi_epi32(w2, w3);
    const vi u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
    const vi u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
    cols[0] = _mm256_permute2x128_si256(u0, u1, 0x20);
    cols[1] = _mm256_permute2x128_si256(u2, u3, 0x20);
    cols[2] = _mm256_permute2x128_si256(u0, u1, 0x31);
    cols[3] = _mm256_permute2x128_si256(u2, u3, 0x31);
}

/* Lanes whose word is >= keep (unsigned). */
static inline vmask v_keep(vi w, vi keep)
{
    return _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_max_epu32(w, keep), w));
}

/* Horizontal max (is_max) or sum of each of the 8 vectors x[0..7], as lane
 * i of the result for x[i]. Each row by the same fixed tree: its 4-lane halves combined
 * (lower ∘ upper), then lane pairs, then the last two lanes, the lower
 * always the first operand (max_ps keeps its second on ties and NaN). The
 * 8 trees are interleaved, a shuffle serving two rows at a time. */
static inline __attribute__((always_inline)) vf avx2_reduce_rows(const vf *x, const bool is_max)
{
#define OP(a, b) (is_max ? _mm256_max_ps(a, b) : _mm256_add_ps(a, b))
    vf y[4], z[2];
    for (int i = 0; i < 4; ++i) /* rows 2i | 2i+1, four lanes each */
        y[i] = OP(_mm256_permute2f128_ps(x[2 * i], x[2 * i + 1], 0x20),
                  _mm256_permute2f128_ps(x[2 * i], x[2 * i + 1], 0x31));
    for (int i = 0; i < 2; ++i) { /* 128-bit lane k: rows 4i+k, 4i+2+k, two lanes each */
        const __m256d a = _mm256_castps_pd(y[2 * i]), b = _mm256_castps_pd(y[2 * i + 1]);
        z[i] = OP(_mm256_castpd_ps(_mm256_unpacklo_pd(a, b)),
                  _mm256_castpd_ps(_mm256_unpackhi_pd(a, b)));
    }
    /* lane 4k + j: row 2j + k */
    const vf r = OP(_mm256_shuffle_ps(z[0], z[1], _MM_SHUFFLE(2, 0, 2, 0)),
                    _mm256_shuffle_ps(z[0], z[1], _MM_SHUFFLE(3, 1, 3, 1)));
#undef OP
    return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static inline vf v_hmax_rows(const vf *x) { return avx2_reduce_rows(x, true); }
static inline vf v_hsum_rows(const vf *x) { return avx2_reduce_rows(x, false); }

/* Lane k of the result: ((v0 + v1) + (v2 + v3)) + ((v4 + v5) + (v6 + v7))
 * of the k-th argument, the same tree for each. */
static inline __m128 v_hsum4(vf a, vf b, vf c, vf d)
{
    const vf abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

static inline vf v_bool_bias(const uint8_t *p)
{
    long long bytes;
    __builtin_memcpy(&bytes, p, sizeof bytes);
    const __m256i b = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(bytes));
    const __m256i blocked = _mm256_cmpeq_epi32(b, _mm256_setzero_si256());
    return _mm256_and_ps(_mm256_castsi256_ps(blocked), _mm256_set1_ps(-INFINITY));
}

static inline unsigned v_hidden_bits(vf v)
{
    return (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(v, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ));
}

static inline unsigned v_nonzero_visible_bits(vf v)
{
    const vf nz = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_NEQ_UQ);
    const vf vis = _mm256_cmp_ps(v, _mm256_set1_ps(-INFINITY), _CMP_NEQ_UQ);
    return (unsigned)_mm256_movemask_ps(_mm256_and_ps(nz, vis));
}

#include "simd_body.h"

#if defined(__clang__)
#pragma clang attribute pop
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif

const sdpa_kernels sdpa_kernels_avx2 = {
    .name = "avx2",
    .npad = NV * VW,
    .gemm = avx2_gemm,
    .gemm16 = avx2_gemm16,
    .gemm_max = avx2_gemm_max,
    .softmax_online = avx2_softmax_online,
    .softmax_rows = avx2_softmax_rows,
    .probs = avx2_probs,
    .dsoftmax = avx2_dsoftmax,
    .dropout = avx2_dropout,
    .mask_row = avx2_mask_row,
    .alibi_row = avx2_alibi_row,
    .pack_transposed = avx2_pack_transposed,
    .pack_transposed16 = avx2_pack_transposed16,
    .scores_rows = avx2_scores_rows,
    .widen = avx2_widen,
    .narrow = avx2_narrow,
    .rows_finite = avx2_rows_finite,
    .vexp = avx2_vexp,
    .vtanh = avx2_vtanh,
};

#endif
