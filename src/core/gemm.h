/* Single-precision matrix multiply used by the MHA projections (and anything
 * else that needs one). Internal: not part of the public API.
 *
 * The interface is BLAS-like so the body can later become a packed SIMD
 * kernel or a CBLAS call without touching callers. */
#ifndef ATTN_CORE_GEMM_H
#define ATTN_CORE_GEMM_H

#include <stdbool.h>
#include <stdint.h>

/*
 * C = alpha · op(A) · op(B) + beta · C, all row-major float32.
 *
 *   op(A) (M,K): A is (M,K) with row stride lda, or (K,M) when trans_a
 *   op(B) (K,N): B is (K,N) with row stride ldb, or (N,K) when trans_b
 *   C     (M,N) with row stride ldc
 *
 * Leading dimensions must be at least the row length of the stored matrix
 * (CBLAS's rule), except that they are ignored for a single stored row.
 * beta == 0 means C is only written, never read (NaNs in C do not leak), as
 * in BLAS. M, N or K may be 0 (K == 0 gives C = beta·C).
 *
 * threads: OpenMP threads over rows of C (<= 1 runs serially). Every element
 * of C is reduced over K by one thread in a fixed order, so the result is
 * bit-identical for any thread count.
 */
void attn_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                int64_t ldc, int threads);

#endif
