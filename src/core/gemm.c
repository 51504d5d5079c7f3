/* Plain blocked SGEMM: a panel of op(B) is packed (contiguous, kb x nb) and
 * reused by a block of rows of C whose partial sums stay in a small stack
 * tile, so the inner loop is a contiguous axpy the compiler vectorises.
 * Correct and reasonably cache-friendly, not tuned: a faster body can
 * replace this one behind the same interface. */
#include "gemm.h"

#include <string.h>

enum {
    GEMM_MB = 16,  /* rows of C per task (and per accumulator tile) */
    GEMM_NB = 128, /* columns of C per tile */
    GEMM_KB = 128, /* depth of a packed panel of op(B) */
};

/* panel[k][j] = op(B)[k0+k][j0+j] for k < kb, j < nb. */
static void pack_b(bool trans_b, const float *B, int64_t ldb, int64_t k0, int64_t kb, int64_t j0,
                   int64_t nb, float *panel)
{
    for (int64_t k = 0; k < kb; ++k) {
        float *dst = panel + k * GEMM_NB;
        if (!trans_b) {
            memcpy(dst, B + (k0 + k) * ldb + j0, (size_t)nb * sizeof(float));
        } else {
            for (int64_t j = 0; j < nb; ++j) dst[j] = B[(j0 + j) * ldb + k0 + k];
        }
    }
}

/* One (up to MB x NB) tile of C: rows [i0, i0+mb), columns [j0, j0+nb). */
static void gemm_tile(bool trans_a, bool trans_b, int64_t i0, int64_t mb, int64_t j0, int64_t nb,
                      int64_t K, float alpha, const float *A, int64_t lda, const float *B,
                      int64_t ldb, float beta, float *C, int64_t ldc)
{
    float acc[GEMM_MB][GEMM_NB];
    float panel[GEMM_KB * GEMM_NB];
    for (int64_t i = 0; i < mb; ++i)
        for (int64_t j = 0; j < nb; ++j) acc[i][j] = 0.0f;

    for (int64_t k0 = 0; k0 < K; k0 += GEMM_KB) {
        const int64_t kb = K - k0 < GEMM_KB ? K - k0 : GEMM_KB;
        pack_b(trans_b, B, ldb, k0, kb, j0, nb, panel);
        for (int64_t i = 0; i < mb; ++i) {
            float *restrict row = acc[i];
            for (int64_t k = 0; k < kb; ++k) {
                /* Each acc element sums over k in increasing order. */
                const float a = trans_a ? A[(k0 + k) * lda + i0 + i] : A[(i0 + i) * lda + k0 + k];
                const float *restrict bk = panel + k * GEMM_NB;
                for (int64_t j = 0; j < nb; ++j) row[j] += a * bk[j];
            }
        }
    }

    for (int64_t i = 0; i < mb; ++i) {
        float *c = C + (i0 + i) * ldc + j0;
        if (beta == 0.0f) {
            for (int64_t j = 0; j < nb; ++j) c[j] = alpha * acc[i][j];
        } else {
            for (int64_t j = 0; j < nb; ++j) c[j] = alpha * acc[i][j] + beta * c[j];
        }
    }
}

void attn_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                int64_t ldc, int threads)
{
    if (M <= 0 || N <= 0) return;
    const int64_t row_blocks = (M + GEMM_MB - 1) / GEMM_MB;
    /* Small products are not worth waking threads for. */
    const double work = (double)M * (double)N * (double)(K > 0 ? K : 1);
    if (threads < 1 || work < 32768.0) threads = 1;
    if (threads > row_blocks) threads = (int)row_blocks;
    (void)threads; /* unused without OpenMP */

#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t rb = 0; rb < row_blocks; ++rb) {
        const int64_t i0 = rb * GEMM_MB;
        const int64_t mb = M - i0 < GEMM_MB ? M - i0 : GEMM_MB;
        for (int64_t j0 = 0; j0 < N; j0 += GEMM_NB) {
            const int64_t nb = N - j0 < GEMM_NB ? N - j0 : GEMM_NB;
            gemm_tile(trans_a, trans_b, i0, mb, j0, nb, K, alpha, A, lda, B, ldb, beta, C, ldc);
        }
    }
}
