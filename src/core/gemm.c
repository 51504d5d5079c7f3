/* attn_sgemm_grouped (attn_sgemm and attn_sgemm_reference are its plain-C
 * cases): the empty and alpha == 0 cases, then the engine (a CBLAS when the
 * build has one, ATTN_GEMM does not ask for ours and the call is not a
 * reference one, else our packed GEMM on the SDPA kernel table that
 * ATTN_ARCH / CPUID select, or on the portable C table for reference). */
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
           : strcmp(isa, "neon") == 0 ? "packed-neon"
                                      : "packed-generic";
}

/* C = beta·C (beta == 0: C = 0 without reading it), C in groups of c_cols
 * columns c_stride apart. */
static void scale_c(int64_t M, int64_t N, float beta, float *C, int64_t ldc, int64_t c_cols,
                    int64_t c_stride)
{
    if (beta == 1.0f) return;
    for (int64_t j0 = 0; j0 < N; j0 += c_cols) {
        const int64_t n = N - j0 < c_cols ? N - j0 : c_cols;
        for (int64_t i = 0; i < M; ++i) {
            float *c = C + (j0 / c_cols) * c_stride + i * ldc;
            if (beta == 0.0f)
                for (int64_t j = 0; j < n; ++j) c[j] = 0.0f;
            else
                for (int64_t j = 0; j < n; ++j) c[j] *= beta;
        }
    }
}

/* C += bias in every row, C in groups as above (the engines that cannot
 * add it while storing: a CBLAS, and the K == 0 / alpha == 0 case). */
static void add_bias(int64_t M, int64_t N, float *C, int64_t ldc, int64_t c_cols,
                     int64_t c_stride, const float *bias, int64_t bias_s)
{
    for (int64_t j0 = 0; j0 < N; j0 += c_cols) {
        const int64_t n = N - j0 < c_cols ? N - j0 : c_cols;
        for (int64_t i = 0; i < M; ++i) {
            float *c = C + (j0 / c_cols) * c_stride + i * ldc;
            for (int64_t j = 0; j < n; ++j) c[j] += bias[(j0 + j) * bias_s];
        }
    }
}

/* A CBLAS once per column group (op(B)'s columns j0.. start at row j0 of a
 * transposed B, column j0 of a plain one). False when it declines. */
static bool grouped_cblas(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                          float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                          float beta, float *C, int64_t ldc, int64_t c_cols, int64_t c_stride)
{
    for (int64_t j0 = 0; j0 < N; j0 += c_cols) {
        const int64_t n = N - j0 < c_cols ? N - j0 : c_cols;
        if (!gemm_cblas(trans_a, trans_b, M, n, K, alpha, A, lda, B + (trans_b ? j0 * ldb : j0),
                        ldb, beta, C + (j0 / c_cols) * c_stride, ldc))
            return false; /* only ever on the first group: the sizes that fit do not change */
    }
    return true;
}

void attn_sgemm_grouped(bool reference, bool trans_a, bool trans_b, int64_t M, int64_t N,
                        int64_t K, float alpha, const float *A, int64_t lda, const float *B,
                        int64_t ldb, float beta, float *C, int64_t ldc, int64_t c_cols,
                        int64_t c_stride, const float *bias, int64_t bias_s, int threads)
{
    if (M <= 0 || N <= 0) return;
    if (c_cols > N) c_cols = N;
    /* C = beta·C without reading A and B (K == 0, alpha == 0). */
    if (K <= 0 || alpha == 0.0f) {
        scale_c(M, N, beta, C, ldc, c_cols, c_stride);
        if (bias) add_bias(M, N, C, ldc, c_cols, c_stride, bias, bias_s);
        return;
    }
    if (!reference && want_cblas() &&
        grouped_cblas(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, c_cols,
                      c_stride)) {
        if (bias) add_bias(M, N, C, ldc, c_cols, c_stride, bias, bias_s);
        return;
    }
    gemm_packed(reference ? &sdpa_kernels_generic : sdpa_kernels_for(sdpa_isa_select()), trans_a,
                trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, c_cols, c_stride, bias,
                bias_s, threads, true);
}

void attn_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                int64_t ldc, int threads)
{
    attn_sgemm_grouped(false, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, N,
                       0, NULL, 0, threads);
}

void attn_sgemm_reference(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                          float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                          float beta, float *C, int64_t ldc, int threads)
{
    attn_sgemm_grouped(true, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, N, 0,
                       NULL, 0, threads);
}
