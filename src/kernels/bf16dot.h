/*
 * Kernels of the avx512bf16 engine (bf16_engine.h): bfloat16 pair dot
 * products (AVX512_BF16 vdpbf16ps) for Q·Kᵀ and P·V, float32 accumulation.
 *
 * Operands are "pair" matrices of uint32: each element holds two bfloat16
 * values of consecutive positions along the contracted dimension, the
 * even one in the low half. vdpbf16ps multiplies both pairs exactly (a
 * product of two bfloat16 values fits in float32) and adds them to the
 * float32 accumulator with round-to-nearest; it treats subnormal inputs
 * and results as zero.
 *
 * Only ever called when sdpa_bf16dot_available() (CPUID and the OS report
 * AVX512_BF16 with AVX-512F/BW/VL).
 */
#ifndef ATTN_SDPA_BF16DOT_H
#define ATTN_SDPA_BF16DOT_H

#include "kernels.h"

bool sdpa_bf16dot_available(void);

/*
 * C (m × n) ⊕= A (m × kp pairs) · B (kp pairs × n), sdpa_gemm_mode as in
 * kernels.h (row_scale for SDPA_GEMM_SCALE_ADD):
 *   A(r, l) = a[r*a_rs + l]       B(l, :) = b + l*ldb, n % 32 == 0
 * k = 0 pairs is allowed (C = 0, C, or scaled C).
 */
void sdpa_bf16dot_gemm(int64_t m, int64_t n, int64_t kp, const uint32_t *a, int64_t a_rs,
                       const uint32_t *b, int64_t ldb, float *c, int64_t ldc,
                       const float *row_scale, sdpa_gemm_mode mode);

/* sdpa_bf16dot_gemm with SDPA_GEMM_SET and the rows' lane maxima in vmax
 * (sdpa_pair_gemm_max_fn, bf16_engine.h). */
void sdpa_bf16dot_gemm_max(int64_t m, int64_t n, int64_t kp, const uint32_t *a, int64_t a_rs,
                           const uint32_t *b, int64_t ldb, float *c, int64_t ldc, float *vmax);

/* Kᵀ as pairs: dst[l*ld + j] = features (2l, 2l+1) of key j = row
 * src + j*rs (D contiguous bfloat16, D even), for l < D/2, j < n; columns
 * [n, ld) are zero. */
void sdpa_bf16dot_pack_kt(const uint16_t *src, int64_t rs, int64_t n, int64_t D, uint32_t *dst,
                          int64_t ld);

/* The same from float32 keys (rounded by vcvtne2ps2bf16), any D; ld a
 * multiple of 16. */
void sdpa_bf16dot_pack_kt_f32(const float *src, int64_t rs, int64_t n, int64_t D, uint32_t *dst,
                              int64_t ld);

/* V as pairs of keys: dst[l*ld + x] = (V(2l, x), V(2l+1, x)) for
 * l < ceil(n/2), x < Dv, with V(j, ·) = src + j*rs (contiguous) and
 * V(n, ·) = 0 when n is odd; columns [Dv, ld) are zero. Returns whether
 * every value was finite. */
bool sdpa_bf16dot_pack_v(const uint16_t *src, int64_t rs, int64_t n, int64_t Dv, uint32_t *dst,
                         int64_t ld);

/* dst[i] = src[i] rounded to bfloat16, to nearest even (vcvtne2ps2bf16:
 * subnormals become zero), for i < n. */
void sdpa_bf16dot_narrow(const float *src, int64_t n, uint16_t *dst);

/* sdpa_pairs_keys of float32 rows (unit stride), with its return value. */
bool sdpa_bf16dot_pairs_keys_f32(const float *src, int64_t rs, int64_t k, int64_t n,
                                 uint32_t *dst, int64_t ld);

/* dst[c*dld + r] = src[r*sld + c] for r < rows, c < cols (32-bit elements). */
void sdpa_bf16dot_transpose32(const uint32_t *src, int64_t sld, int64_t rows, int64_t cols,
                              uint32_t *dst, int64_t dld);

#endif
