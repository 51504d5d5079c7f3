/* Single-precision matrix multiply used by the MHA projections and the nn
 * layers. Internal: not part of the public API.
 *
 * Two engines behind one BLAS-like interface (gemm_engines.h): our packed
 * SIMD GEMM on the fused SDPA microkernels (gemm_packed.c), or a CBLAS
 * (OpenBLAS, BLIS) when the build links one (CMake option ATTN_CBLAS, OFF by
 * default: see cmake/blas.cmake for why). */
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
 * As in BLAS, beta == 0 means C is only written, never read (NaNs in C do
 * not leak), and alpha == 0 or K == 0 gives C = beta·C without reading A or
 * B. M or N may be 0 (nothing happens).
 *
 * threads: OpenMP threads for the packed engine (<= 1 runs serially); a
 * CBLAS runs its own threads (OPENBLAS_NUM_THREADS etc.) whatever this says.
 * Either way every element of C is reduced over K in a fixed order by one
 * thread, so the result is bit-identical for any value of threads.
 */
void attn_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                int64_t ldc, int threads);

/* The same product on the plain path (ATTN_PATH_REFERENCE): the portable C
 * kernel, whatever the CPU, ATTN_ARCH or a linked CBLAS, so reference results
 * are the same on every machine. */
void attn_sgemm_reference(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                          float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                          float beta, float *C, int64_t ldc, int threads);

/*
 * Either of the above (reference picks attn_sgemm_reference), with C's
 * columns in groups and an optional bias row:
 *   - column j of C lives in group j / c_cols, an (M, c_cols) row matrix at
 *     C + (j / c_cols)·c_stride with row stride ldc (the last group may be
 *     narrower); c_cols >= N is plain C. A projection writes attention heads
 *     head-major this way, with no copy.
 *   - bias (N values, bias_s apart) or NULL is added to every row of the
 *     result: C = (alpha·op(A)·op(B) + beta·C) + bias, the bits of adding it
 *     after the product, without another pass over C.
 * The packed engine gives the bits of the plain call; a CBLAS runs once per
 * group.
 */
void attn_sgemm_grouped(bool reference, bool trans_a, bool trans_b, int64_t M, int64_t N,
                        int64_t K, float alpha, const float *A, int64_t lda, const float *B,
                        int64_t ldb, float beta, float *C, int64_t ldc, int64_t c_cols,
                        int64_t c_stride, const float *bias, int64_t bias_s, int threads);

/*
 * The engine attn_sgemm uses: "cblas" when the build links a CBLAS and the
 * environment variable ATTN_GEMM is not "packed"; otherwise "packed-<isa>"
 * (the SDPA kernel table it runs on, e.g. "packed-avx2"). Like ATTN_ARCH,
 * ATTN_GEMM is read on every call.
 */
const char *attn_sgemm_engine(void);

#endif
