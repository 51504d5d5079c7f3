/* The GEMM of ATTN_PRECISION_BF16's linear layers (the MHA projections):
 * float32 matrices rounded to bfloat16 (to nearest even) as they are packed
 * into pairs (kernels/bf16_engine.h's layout), then multiplied on a bf16
 * engine with float32 accumulation, blocked and threaded. Internal.
 *
 * Operands are packed whole, once per call (a weight matrix is never
 * re-packed per tile); the packers split their rows over the threads.
 *
 * Determinism: element (i, j) of C is the engine's sum over k in blocks of
 * GEMM_BF16_KCP pairs, in increasing order (the first block sets, the others
 * add), each block in the engine's own fixed grouping. That depends on
 * neither the blocking of M and N nor the thread count, so every thread
 * count gives the same bits on one engine. */
#ifndef ATTN_CORE_GEMM_BF16_H
#define ATTN_CORE_GEMM_BF16_H

#include "../kernels/bf16_engine.h"

#include <stdbool.h>
#include <stdint.h>

/* n rounded up to the engine's column multiple: the row length of a B
 * operand (its padding columns hold zeros). */
int64_t gemm_bf16_cols(const sdpa_bf16_engine *eng, int64_t n);

/* A operand from rows: dst[r*kp + l] = (x(r, 2l), x(r, 2l+1)), x(r, c) =
 * src[r*ld + c], for r < rows, kp = ceil(k/2) (an odd k's last pair is
 * completed by a zero). */
void gemm_bf16_pack_rows(const float *src, int64_t ld, int64_t rows, int64_t k, uint32_t *dst,
                         int threads);

/* A operand from columns (op(A) = Xᵀ for X (k × rows), row stride ld):
 * dst[r*kp + l] = (X(2l, r), X(2l+1, r)), kp = ceil(k/2). tmp: kp·rows
 * words of scratch. */
void gemm_bf16_pack_cols(const float *src, int64_t ld, int64_t k, int64_t rows, uint32_t *dst,
                         uint32_t *tmp, int threads);

/* B operand from rows paired in place (X (k × n), row stride ld):
 * dst[l*ldd + c] = (X(2l, c), X(2l+1, c)) for l < ceil(k/2), c < n;
 * columns [n, ldd) zero. */
void gemm_bf16_pack_keys(const float *src, int64_t ld, int64_t k, int64_t n, uint32_t *dst,
                         int64_t ldd, int threads);

/* B operand from rows to be transposed (op(B) = Wᵀ for W (n × k), row
 * stride ld): dst[l*ldd + c] = (W(c, 2l), W(c, 2l+1)); columns [n, ldd)
 * zero. tmp: n·ceil(k/2) words of scratch. */
void gemm_bf16_pack_transposed(const float *src, int64_t ld, int64_t n, int64_t k,
                               uint32_t *dst, int64_t ldd, uint32_t *tmp, int threads);

/*
 * C (M × N) = A·B + bias, or C += A·B when accumulate (bias NULL then):
 *   A  M × kp pairs, rows lda apart (a packer's output)
 *   B  kp pairs × ldb, ldb = gemm_bf16_cols(eng, N) (columns past N zero)
 *   C  row stride ldc, its columns in groups of c_cols (c_cols >= N: one
 *      group), group g at C + g·c_stride (attn_sgemm_grouped's layout)
 *   bias  N values bias_s apart, or NULL; added in float32 to the product
 * kp = 0 gives C = bias (or 0), or leaves C as it is when accumulating.
 */
void gemm_bf16(const sdpa_bf16_engine *eng, int64_t M, int64_t N, int64_t kp, const uint32_t *A,
               int64_t lda, const uint32_t *B, int64_t ldb, bool accumulate, float *C,
               int64_t ldc, int64_t c_cols, int64_t c_stride, const float *bias, int64_t bias_s,
               int threads);

#endif
