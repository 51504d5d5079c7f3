/* The two engines behind attn_sgemm (gemm.c picks one per call). Internal;
 * declared here so tests can run each engine directly.
 *
 * Both take attn_sgemm's arguments (see gemm.h) with M, N, K >= 1 and
 * alpha != 0: gemm.c handles the empty and alpha == 0 cases itself. */
#ifndef ATTN_CORE_GEMM_ENGINES_H
#define ATTN_CORE_GEMM_ENGINES_H

#include "../kernels/kernels.h"

#include <stdbool.h>
#include <stdint.h>

/*
 * Our own packed GEMM on the SDPA microkernel of `kern` (gemm_packed.c).
 * Each element of C is a fixed-order reduction over K that depends only on
 * the kernel table (not on the thread count or block sizes).
 *
 * C's columns come in groups of c_cols, group g at C + g·c_stride
 * (c_cols >= N: plain C), and bias (or NULL) is added to every row, as
 * attn_sgemm_grouped documents.
 *
 * use_heap: false skips the workspace allocation and runs serially on small
 * stack buffers (what happens when malloc fails); the result is
 * bit-identical to the heap path's.
 */
void gemm_packed(const sdpa_kernels *kern, bool trans_a, bool trans_b, int64_t M, int64_t N,
                 int64_t K, float alpha, const float *A, int64_t lda, const float *B,
                 int64_t ldb, float beta, float *C, int64_t ldc, int64_t c_cols, int64_t c_stride,
                 const float *bias, int64_t bias_s, int threads, bool use_heap);

/* True when this build links a CBLAS (CMake option ATTN_CBLAS). */
bool gemm_cblas_available(void);

/*
 * cblas_sgemm (gemm_cblas.c). Returns false, touching nothing, when the
 * build has no CBLAS or a size does not fit the CBLAS integer type; the
 * caller then uses gemm_packed. The CBLAS library runs its own threads:
 * attn's thread count does not reach it (see cmake/blas.cmake).
 */
bool gemm_cblas(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                int64_t ldc);

#endif
