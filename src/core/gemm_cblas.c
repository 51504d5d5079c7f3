/* attn_sgemm through a CBLAS (OpenBLAS, BLIS, ...), compiled in when CMake
 * finds one and ATTN_CBLAS allows it (cmake/blas.cmake defines
 * ATTN_HAVE_CBLAS). Without it, gemm_cblas declines every call. */
#include "gemm_engines.h"

#ifdef ATTN_HAVE_CBLAS

#include <cblas.h>
#include <limits.h>

bool gemm_cblas_available(void) { return true; }

/* CBLAS wants ld >= the stored row length even for a single stored row,
 * where attn_sgemm ignores it. */
static int64_t cblas_ld(int64_t ld, int64_t rows, int64_t cols)
{
    return rows == 1 ? (cols > 1 ? cols : 1) : ld;
}

static bool fits(int64_t v) { return v >= 0 && v <= INT_MAX; }

bool gemm_cblas(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                int64_t ldc)
{
    /* Stored shapes: A (M,K) or (K,M), B (K,N) or (N,K), C (M,N). */
    lda = trans_a ? cblas_ld(lda, K, M) : cblas_ld(lda, M, K);
    ldb = trans_b ? cblas_ld(ldb, N, K) : cblas_ld(ldb, K, N);
    ldc = cblas_ld(ldc, M, N);
    if (!fits(M) || !fits(N) || !fits(K) || !fits(lda) || !fits(ldb) || !fits(ldc)) return false;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, alpha, A, (int)lda,
                B, (int)ldb, beta, C, (int)ldc);
    return true;
}

#else

bool gemm_cblas_available(void) { return false; }

bool gemm_cblas(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                int64_t ldc)
{
    (void)trans_a, (void)trans_b, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda;
    (void)B, (void)ldb, (void)beta, (void)C, (void)ldc;
    return false;
}

#endif
