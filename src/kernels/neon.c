/* Advanced SIMD (NEON) kernels for AArch64: the SIMD body with 4-lane vectors and a 6 × 16
 * microtile (24 accumulators + 4 B vectors + 1 broadcast of the 32 vector registers).
 * Advanced SIMD with fused multiply-add and float16 conversions is part of the ARMv8-A
 * baseline, so every AArch64 CPU runs this table (dispatch.c still asks the OS). */
#include "kernels.h"

#if defined(SDPA_HAVE_NEON)

#include <arm_neon.h>
#include <math.h>
#include <string.h>

typedef float32x4_t vf;
#define VW 4
#define MR 6
#define NV 4
#define SIMD(name) neon_##name
/* 32 registers: 2 rows × 8 vectors of accumulators for the wide microtile
 * (+ 8 B vectors + a broadcast), 4 exps in flight, 4 × 4 score accumulators. */
#define WIDE_ROWS 2
#define EXP_K 4
#define SCORES_KEYS 4
#define V_ZERO() vdupq_n_f32(0.0f)
#define V_SET1(x) vdupq_n_f32(x)
#define V_LOAD(p) vld1q_f32(p)
#define V_STORE(p, v) vst1q_f32((p), (v))
#define V_BCAST(p) vld1q_dup_f32(p)
#define V_ADD(a, b) vaddq_f32(a, b)
#define V_SUB(a, b) vsubq_f32(a, b)
#define V_MUL(a, b) vmulq_f32(a, b)
#define V_FMA(a, b, c) vfmaq_f32((c), (a), (b))
#define V_FNMA(a, b, c) vfmsq_f32((c), (a), (b))
/* max(a, b) = a > b ? a : b, as the x86 max_ps the body's trees are written
 * for (fmax/vmaxq would treat NaN and ties differently). */
#define V_MAX(a, b) neon_max((a), (b))
static inline vf neon_max(vf a, vf b)
{
    return vbslq_f32(vcgtq_f32(a, b), a, b);
}
/* 4 bfloat16 / half values widened exactly: bfloat16 is a float's top
 * half, FCVTL converts halves. */
#define V_LOAD_BF16(p) vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16))
#define V_LOAD_F16(p) vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)))
/* 4 floats narrowed, to nearest even: half by FCVTN (the FPCR's default
 * rounding; a NaN stays a quiet NaN with its top payload bits, as
 * attn_f32_to_f16), bfloat16 by adding 0x7fff + (the kept lowest bit) to
 * the bits (NaN: quieted, not rounded). */
#define V_STORE_F16(p, v) vst1_u16((p), vreinterpret_u16_f16(vcvt_f16_f32(v)))
static inline void neon_store_bf16(uint16_t *p, vf v)
{
    const uint32x4_t u = vreinterpretq_u32_f32(v);
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    const uint32x4_t rounded = vshrq_n_u32(vaddq_u32(u, vaddq_u32(lsb, vdupq_n_u32(0x7fff))), 16);
    const uint32x4_t quiet = vorrq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(0x40));
    const uint32x4_t nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffff)), vdupq_n_u32(0x7f800000));
    vst1_u16(p, vmovn_u32(vbslq_u32(nan, quiet, rounded)));
}
#define V_STORE_BF16(p, v) neon_store_bf16((p), (v))

/*
 * e^x for x <= 0 (and -inf, NaN): the algorithm of avx2.c (see there): n =
 * round(x·log2e) by the magic-number trick, Cody–Waite reduction, the
 * degree-6 polynomial by Estrin's scheme, times 2^n built in the exponent
 * field; lanes below SDPA_EXP_MIN (also -inf) become 0, NaN stays NaN.
 * k <= 4 vectors in place, each step for all k before the next, so the k
 * dependency chains overlap.
 */
#define EXP_STEP(stmt) \
    _Pragma("GCC unroll 4") for (int i = 0; i < k; ++i) stmt
static inline __attribute__((always_inline)) void v_exp_nonpos_k(vf *x, const int k)
{
    const vf magic = vdupq_n_f32(12583039.0f); /* 1.5·2^23 + 127 */
    vf t[4], n[4], r[4], r2[4], lo[4], hi[4], p[4];
    EXP_STEP(t[i] = vfmaq_f32(magic, x[i], vdupq_n_f32(SDPA_LOG2E)));
    EXP_STEP(n[i] = vsubq_f32(t[i], magic));
    EXP_STEP(r[i] = vfmsq_f32(x[i], n[i], vdupq_n_f32(SDPA_LN2_HI)));
    EXP_STEP(r[i] = vfmsq_f32(r[i], n[i], vdupq_n_f32(SDPA_LN2_LO)));
    EXP_STEP(r2[i] = vmulq_f32(r[i], r[i]));
    const vf c2 = vdupq_n_f32(SDPA_EXP_C2), c4 = vdupq_n_f32(SDPA_EXP_C4);
    EXP_STEP(lo[i] = vfmaq_f32(c2, vdupq_n_f32(SDPA_EXP_C3), r[i]));
    EXP_STEP(hi[i] = vfmaq_f32(c4, vdupq_n_f32(SDPA_EXP_C5), r[i]));
    EXP_STEP(hi[i] = vfmaq_f32(hi[i], vdupq_n_f32(SDPA_EXP_C6), r2[i]));
    EXP_STEP(lo[i] = vfmaq_f32(lo[i], hi[i], r2[i]));
    EXP_STEP(p[i] = vaddq_f32(vfmaq_f32(r[i], lo[i], r2[i]), vdupq_n_f32(1.0f)));
    EXP_STEP(x[i] = vreinterpretq_f32_u32(vbicq_u32(
                 vreinterpretq_u32_f32(vmulq_f32(
                     p[i], vreinterpretq_f32_s32(vshlq_n_s32(vreinterpretq_s32_f32(t[i]), 23)))),
                 vcltq_f32(x[i], vdupq_n_f32(SDPA_EXP_MIN)))));
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
    return vbslq_f32(vcgtq_f32(x, vdupq_n_f32(SDPA_EXP_MAX)), vdupq_n_f32(INFINITY),
                     v_exp_nonpos(x));
}

typedef uint32x4_t vmask;
#define V_CMP_EQ(a, b) vceqq_f32(a, b)
#define V_BLEND(m, a, b) vbslq_f32((m), (b), (a))
#define V_CMP_GE(a, b) vcgeq_f32(a, b)
#define v_any(m) (vmaxvq_u32(m) != 0)
/* FRECPE's estimate (relative error < 2^-8) and one FRECPS Newton step:
 * relative error below 2^-16, the order of x86's rcp before the body's own
 * refinement. */
#define V_RCP(a) neon_rcp(a)
static inline vf neon_rcp(vf a)
{
    const vf r0 = vrecpeq_f32(a);
    return vmulq_f32(r0, vrecpsq_f32(a, r0));
}
#define V_ABS(a) vabsq_f32(a)

static inline vf v_copysign(vf mag, vf sign)
{
    return vbslq_f32(vdupq_n_u32(0x80000000u), sign, mag);
}

static inline vmask v_cols_outside(int64_t c0, int64_t lo, int64_t hi)
{
    static const int32_t iota[4] = {0, 1, 2, 3};
    const int32x4_t col = vaddq_s32(vdupq_n_s32((int32_t)c0), vld1q_s32(iota));
    return vorrq_u32(vcltq_s32(col, vdupq_n_s32((int32_t)lo)),
                     vcgeq_s32(col, vdupq_n_s32((int32_t)hi)));
}

/* 32-bit integer lanes for the dropout generator; the 64-bit lanes of the
 * body's scheme are reinterpretations. */
typedef uint32x4_t vi;
#define VI_SET1(x) vdupq_n_u32((uint32_t)(x))
#define VI_IOTA2() neon_iota2() /* 64-bit lanes 0, 2 */
static inline vi neon_iota2(void)
{
    static const uint32_t lanes[4] = {0, 0, 2, 0};
    return vld1q_u32(lanes);
}
#define VI_ADD(a, b) vaddq_u32(a, b)
#define VI_XOR3(a, b, c) veorq_u32(a, veorq_u32(b, c))
/* the low words of the 64-bit lanes times m: the whole 64-bit products;
 * their high words; two vectors' low words interleaved into 32-bit lanes */
#define VI_MULU(x, m) vreinterpretq_u32_u64(vmull_n_u32(vmovn_u64(vreinterpretq_u64_u32(x)), (m)))
#define VI_HI64(x) vreinterpretq_u32_u64(vshrq_n_u64(vreinterpretq_u64_u32(x), 32))
#define VI_ZIP(even, odd) vtrn1q_u32(even, odd)

/* 4 × 4 transpose of 32-bit lanes: o[i] lane j = x[j] lane i. */
#define NEON_TRANSPOSE4(T, S, x0, x1, x2, x3, o)                                              \
    do {                                                                                      \
        const T t0_ = vtrn1q_##S(x0, x1), t1_ = vtrn2q_##S(x0, x1);                           \
        const T t2_ = vtrn1q_##S(x2, x3), t3_ = vtrn2q_##S(x2, x3);                           \
        (o)[0] = vreinterpretq_##S##_u64(                                                     \
            vtrn1q_u64(vreinterpretq_u64_##S(t0_), vreinterpretq_u64_##S(t2_)));              \
        (o)[1] = vreinterpretq_##S##_u64(                                                     \
            vtrn1q_u64(vreinterpretq_u64_##S(t1_), vreinterpretq_u64_##S(t3_)));              \
        (o)[2] = vreinterpretq_##S##_u64(                                                     \
            vtrn2q_u64(vreinterpretq_u64_##S(t0_), vreinterpretq_u64_##S(t2_)));              \
        (o)[3] = vreinterpretq_##S##_u64(                                                     \
            vtrn2q_u64(vreinterpretq_u64_##S(t1_), vreinterpretq_u64_##S(t3_)));              \
    } while (0)

/* Words w_q of counter lanes L -> column order 4L + q: with 4 lanes, column
 * vector L holds counter L's four words (a 4 × 4 transpose). */
static inline void v_words_to_columns(vi w0, vi w1, vi w2, vi w3, vi cols[4])
{
    NEON_TRANSPOSE4(uint32x4_t, u32, w0, w1, w2, w3, cols);
}

/* Lanes whose word is >= keep (unsigned). */
static inline vmask v_keep(vi w, vi keep)
{
    return vcgeq_u32(w, keep);
}

/* Horizontal max (is_max) or sum of each of the 4 vectors x[0..3], as lane
 * i of the result for x[i], each by the same fixed tree: (L0 ∘ L2) ∘ (L1 ∘
 * L3), the lower always the first operand. The four trees run side by side
 * on the transposed rows. */
static inline __attribute__((always_inline)) vf neon_reduce_rows(const vf *x, const bool is_max)
{
    vf c[4];
    NEON_TRANSPOSE4(float32x4_t, f32, x[0], x[1], x[2], x[3], c);
#define OP(a, b) (is_max ? neon_max(a, b) : vaddq_f32(a, b))
    return OP(OP(c[0], c[2]), OP(c[1], c[3]));
#undef OP
}

static inline vf v_hmax_rows(const vf *x) { return neon_reduce_rows(x, true); }
static inline vf v_hsum_rows(const vf *x) { return neon_reduce_rows(x, false); }

/* The four horizontal sums of v_hsum_rows, for the decoding scores. */
typedef float32x4_t v4f;
#define V4_STORE(p, v) vst1q_f32((p), (v))
static inline v4f v_hsum4(vf a, vf b, vf c, vf d)
{
    const vf x[4] = {a, b, c, d};
    return v_hsum_rows(x);
}

static inline vf v_bool_bias(const uint8_t *p)
{
    uint32_t bytes;
    memcpy(&bytes, p, sizeof bytes);
    const uint32x4_t b = vmovl_u16(vget_low_u16(vmovl_u8(vcreate_u8(bytes))));
    const uint32x4_t blocked = vceqq_u32(b, vdupq_n_u32(0));
    return vreinterpretq_f32_u32(vandq_u32(blocked, vreinterpretq_u32_f32(vdupq_n_f32(-INFINITY))));
}

/* Bit i set for each set lane i of a mask. */
static inline unsigned neon_mask_bits(vmask m)
{
    static const uint32_t bit[4] = {1, 2, 4, 8};
    return vaddvq_u32(vandq_u32(m, vld1q_u32(bit)));
}

static inline unsigned v_hidden_bits(vf v)
{
    return neon_mask_bits(vceqq_f32(v, vdupq_n_f32(-INFINITY)));
}

static inline unsigned v_nonzero_visible_bits(vf v)
{
    /* not equal, NaN included: the complement of the ordered equality */
    const vmask zero = vceqq_f32(v, vdupq_n_f32(0.0f));
    const vmask hidden = vceqq_f32(v, vdupq_n_f32(-INFINITY));
    return neon_mask_bits(vmvnq_u32(vorrq_u32(zero, hidden)));
}

/* The body's 8 × 8 block transposes (packing Kᵀ): an 8-float row is two
 * vectors, the block four 4 × 4 transposes. */
#define SIMD_HAVE_BLOCK8 1
typedef struct {
    vf lo, hi;
} v8f;

/* Eight consecutive values of a float32 or 16-bit row, widened exactly. */
static inline __attribute__((always_inline)) v8f neon_load8(attn_dtype t, const void *p, int64_t at)
{
    if (t == ATTN_F32) {
        const float *f = (const float *)p + at;
        return (v8f){vld1q_f32(f), vld1q_f32(f + 4)};
    }
    const uint16_t *h = (const uint16_t *)p + at;
    if (t == ATTN_BF16) return (v8f){V_LOAD_BF16(h), V_LOAD_BF16(h + 4)};
    return (v8f){V_LOAD_F16(h), V_LOAD_F16(h + 4)};
}

/* dst[i*ld + j] = r[j][i] for i, j < 8. */
static inline void neon_transpose8_rows(const v8f r[8], float *dst, int64_t ld)
{
    for (int jb = 0; jb < 8; jb += 4) /* source rows jb.. -> destination columns jb.. */
        for (int half = 0; half < 2; ++half) { /* source columns 4·half.. -> rows */
            vf o[4];
            const vf *x0 = half ? &r[jb].hi : &r[jb].lo, *x1 = half ? &r[jb + 1].hi : &r[jb + 1].lo;
            const vf *x2 = half ? &r[jb + 2].hi : &r[jb + 2].lo,
                     *x3 = half ? &r[jb + 3].hi : &r[jb + 3].lo;
            NEON_TRANSPOSE4(float32x4_t, f32, *x0, *x1, *x2, *x3, o);
            for (int i = 0; i < 4; ++i) vst1q_f32(dst + (4 * half + i) * ld + jb, o[i]);
        }
}

#include "simd_body.h"

const sdpa_kernels sdpa_kernels_neon = {
    .name = "neon",
    .npad = NV * VW,
    .gemm = neon_gemm,
    .gemm16 = neon_gemm16,
    .gemm_max = neon_gemm_max,
    .softmax_online = neon_softmax_online,
    .softmax_rows = neon_softmax_rows,
    .probs = neon_probs,
    .dsoftmax = neon_dsoftmax,
    .dropout = neon_dropout,
    .mask_row = neon_mask_row,
    .alibi_row = neon_alibi_row,
    .pack_transposed = neon_pack_transposed,
    .pack_transposed16 = neon_pack_transposed16,
    .scores_rows = neon_scores_rows,
    .widen = neon_widen,
    .narrow = neon_narrow,
    .rows_finite = neon_rows_finite,
    .vexp = neon_vexp,
    .vtanh = neon_vtanh,
};

#endif
