/* attn_sgemm: the empty and alpha == 0 cases, then the engine (a CBLAS when
 * the build has one and ATTN_GEMM does not ask for ours, else our packed
 * GEMM on the SDPA kernel table that ATTN_ARCH / CPUID select).
 * attn_sgemm_reference: the packed GEMM on the portable C table, always. */
#include "gemm.h"
#include "gemm_engines.h"

#include <stdlib.h>
#include <string.h>

/* ATTN_GEMM=packed forces our engine in a CBLAS build (to compare them, or
 * to make attn's thread count govern the projections too). */
static bool want_cblas(void)
{
    if (!gemm_cblas_available()) return false;
    const char *env = getenv("ATTN_GEMM");
    return !(env && strcmp(env, "packed") == 0);
}

const char *attn_sgemm_engine(void)
{
    if (want_cblas()) return "cblas";
    const char *isa = sdpa_kernels_for(sdpa_isa_select())->name;
    return strcmp(isa, "avx512") == 0 ? "packed-avx512"
           : strcmp(isa, "avx2") == 0 ? "packed-avx2"
                                      : "packed-generic";
}

/* C = beta·C (beta == 0: C = 0 without reading it). */
static void scale_c(int64_t M, int64_t N, float beta, float *C, int64_t ldc)
{
    if (beta == 1.0f) return;
    for (int64_t i = 0; i < M; ++i) {
        float *c = C + i * ldc;
        if (beta == 0.0f)
            for (int64_t j = 0; j < N; ++j) c[j] = 0.0f;
        else
            for (int64_t j = 0; j < N; ++j) c[j] *= beta;
    }
}

/* The cases every engine leaves to us: nothing to do (M or N is 0), or
 * C = beta·C without reading A and B (K == 0, alpha == 0). True when done. */
static bool trivial(int64_t M, int64_t N, int64_t K, float alpha, float beta, float *C,
                    int64_t ldc)
{
    if (M <= 0 || N <= 0) return true;
    if (K > 0 && alpha != 0.0f) return false;
    scale_c(M, N, beta, C, ldc);
    return true;
}

void attn_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                int64_t ldc, int threads)
{
    if (trivial(M, N, K, alpha, beta, C, ldc)) return;
    if (want_cblas() &&
        gemm_cblas(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
        return;
    gemm_packed(sdpa_kernels_for(sdpa_isa_select()), trans_a, trans_b, M, N, K, alpha, A, lda, B,
                ldb, beta, C, ldc, threads, true);
}

void attn_sgemm_reference(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                          float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                          float beta, float *C, int64_t ldc, int threads)
{
    if (trivial(M, N, K, alpha, beta, C, ldc)) return;
    gemm_packed(&sdpa_kernels_generic, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C,
                ldc, threads, true);
}
