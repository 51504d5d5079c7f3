/* Plain blocked SGEMM. For each (row block, column block) of C, panels of
 * op(A) (mb x kb) and op(B) (kb x nb) are packed contiguously, whatever the
 * transposes, and a 4 x 8 register micro-tile walks them; partial sums live
 * in a stack tile across K blocks. Every element of C is reduced over k in
 * increasing order by one thread, so the result does not depend on the
 * thread count. Portable C the compiler vectorises; a packed SIMD body or
 * CBLAS can replace it behind the same interface. */
#include "gemm.h"

#include <string.h>

enum {
    GEMM_MB = 32,  /* rows of C per task */
    GEMM_NB = 128, /* columns of C per tile */
    GEMM_KB = 128, /* depth of the packed panels */
    GEMM_MR = 4,   /* micro-tile rows */
    GEMM_NR = 8,   /* micro-tile columns */
};

/* ap[i][k] = op(A)[i0+i][k0+k] (row stride KB). */
static void pack_a(bool trans_a, const float *A, int64_t lda, int64_t i0, int64_t mb, int64_t k0,
                   int64_t kb, float *restrict ap)
{
    for (int64_t i = 0; i < mb; ++i) {
        float *dst = ap + i * GEMM_KB;
        if (!trans_a)
            memcpy(dst, A + (i0 + i) * lda + k0, (size_t)kb * sizeof(float));
        else
            for (int64_t k = 0; k < kb; ++k) dst[k] = A[(k0 + k) * lda + i0 + i];
    }
}

/* bp[k][j] = op(B)[k0+k][j0+j] (row stride NB). */
static void pack_b(bool trans_b, const float *B, int64_t ldb, int64_t k0, int64_t kb, int64_t j0,
                   int64_t nb, float *restrict bp)
{
    if (!trans_b) {
        for (int64_t k = 0; k < kb; ++k)
            memcpy(bp + k * GEMM_NB, B + (k0 + k) * ldb + j0, (size_t)nb * sizeof(float));
    } else {
        for (int64_t j = 0; j < nb; ++j) {
            const float *src = B + (j0 + j) * ldb + k0;
            for (int64_t k = 0; k < kb; ++k) bp[k * GEMM_NB + j] = src[k];
        }
    }
}

/* acc (MR x NR, row stride NB) += ap (MR x kb) · bp (kb x NR). */
static void micro_full(int64_t kb, const float *restrict ap, const float *restrict bp,
                       float *restrict acc)
{
    float c[GEMM_MR][GEMM_NR];
    for (int r = 0; r < GEMM_MR; ++r)
        for (int j = 0; j < GEMM_NR; ++j) c[r][j] = acc[r * GEMM_NB + j];
    for (int64_t k = 0; k < kb; ++k) {
        const float *b = bp + k * GEMM_NB;
        for (int r = 0; r < GEMM_MR; ++r) {
            const float a = ap[r * GEMM_KB + k];
            for (int j = 0; j < GEMM_NR; ++j) c[r][j] += a * b[j];
        }
    }
    for (int r = 0; r < GEMM_MR; ++r)
        for (int j = 0; j < GEMM_NR; ++j) acc[r * GEMM_NB + j] = c[r][j];
}

/* The same for a partial (mr x nr) micro-tile; same order of operations. */
static void micro_edge(int64_t mr, int64_t nr, int64_t kb, const float *ap, const float *bp,
                       float *acc)
{
    for (int64_t r = 0; r < mr; ++r)
        for (int64_t j = 0; j < nr; ++j) {
            float c = acc[r * GEMM_NB + j];
            for (int64_t k = 0; k < kb; ++k) c += ap[r * GEMM_KB + k] * bp[k * GEMM_NB + j];
            acc[r * GEMM_NB + j] = c;
        }
}

/* One (mb x nb) tile of C at (i0, j0). */
static void gemm_tile(bool trans_a, bool trans_b, int64_t i0, int64_t mb, int64_t j0, int64_t nb,
                      int64_t K, float alpha, const float *A, int64_t lda, const float *B,
                      int64_t ldb, float beta, float *C, int64_t ldc)
{
    float acc[GEMM_MB * GEMM_NB];
    float ap[GEMM_MB * GEMM_KB];
    float bp[GEMM_KB * GEMM_NB];
    for (int64_t i = 0; i < mb; ++i)
        for (int64_t j = 0; j < nb; ++j) acc[i * GEMM_NB + j] = 0.0f;

    for (int64_t k0 = 0; k0 < K; k0 += GEMM_KB) {
        const int64_t kb = K - k0 < GEMM_KB ? K - k0 : GEMM_KB;
        pack_a(trans_a, A, lda, i0, mb, k0, kb, ap);
        pack_b(trans_b, B, ldb, k0, kb, j0, nb, bp);
        for (int64_t i = 0; i < mb; i += GEMM_MR) {
            const int64_t mr = mb - i < GEMM_MR ? mb - i : GEMM_MR;
            for (int64_t j = 0; j < nb; j += GEMM_NR) {
                const int64_t nr = nb - j < GEMM_NR ? nb - j : GEMM_NR;
                float *t = acc + i * GEMM_NB + j;
                if (mr == GEMM_MR && nr == GEMM_NR)
                    micro_full(kb, ap + i * GEMM_KB, bp + j, t);
                else
                    micro_edge(mr, nr, kb, ap + i * GEMM_KB, bp + j, t);
            }
        }
    }

    for (int64_t i = 0; i < mb; ++i) {
        float *c = C + (i0 + i) * ldc + j0;
        const float *a = acc + i * GEMM_NB;
        if (beta == 0.0f) /* BLAS: C is not read */
            for (int64_t j = 0; j < nb; ++j) c[j] = alpha * a[j];
        else
            for (int64_t j = 0; j < nb; ++j) c[j] = alpha * a[j] + beta * c[j];
    }
}

void attn_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                int64_t ldc, int threads)
{
    if (M <= 0 || N <= 0) return;
    const int64_t row_blocks = (M + GEMM_MB - 1) / GEMM_MB;
    const int64_t col_blocks = (N + GEMM_NB - 1) / GEMM_NB;
    const int64_t tiles = row_blocks * col_blocks;
    /* Small products are not worth waking threads for. */
    const double work = (double)M * (double)N * (double)(K > 0 ? K : 1);
    if (threads < 1 || work < 65536.0) threads = 1;
    if (threads > tiles) threads = (int)tiles;
    (void)threads; /* unused without OpenMP */

    /* Tiles are independent; which thread runs one does not change it. */
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t t = 0; t < tiles; ++t) {
        const int64_t rb = t / col_blocks, cb = t % col_blocks;
        const int64_t i0 = rb * GEMM_MB, j0 = cb * GEMM_NB;
        const int64_t mb = M - i0 < GEMM_MB ? M - i0 : GEMM_MB;
        const int64_t nb = N - j0 < GEMM_NB ? N - j0 : GEMM_NB;
        gemm_tile(trans_a, trans_b, i0, mb, j0, nb, K, alpha, A, lda, B, ldb, beta, C, ldc);
    }
}
