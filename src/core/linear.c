/* Linear layers (y = x·Wᵀ + b and its gradients) on batches of row
 * matrices, through attn_sgemm. A batch whose rows are evenly spaced is one
 * GEMM over B·M rows; otherwise one GEMM per batch. */
#include "linear.h"
#include "gemm.h"

/* attn_sgemm, or its plain twin on the reference path. */
static void gemm(linear_engine g, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                 int64_t ldc)
{
    (g.reference ? attn_sgemm_reference : attn_sgemm)(ta, tb, M, N, K, alpha, A, lda, B, ldb,
                                                      beta, C, ldc, g.threads);
}

bool linear_rows_flat(const linear_rows *r, int64_t B, int64_t M)
{
    return B <= 1 || r->batch == M * r->ld;
}

void linear_forward(const linear_rows *x, int64_t B, int64_t M, int64_t K, const float *W,
                    int64_t ldw, const float *bias, int64_t bias_s, const linear_rows *y,
                    int64_t N, linear_engine g)
{
    const bool one = linear_rows_flat(x, B, M) && linear_rows_flat(y, B, M);
    const int64_t calls = one ? 1 : B, rows = one ? B * M : M;
    const int64_t gc = y->group_cols > 0 && y->group_cols < N ? y->group_cols : N;
    for (int64_t b = 0; b < calls; ++b) {
        const float *xb = x->data + b * x->batch;
        float *yb = y->data + b * y->batch;
        /* y (rows,N) = x (rows,K) · Wᵀ + the bias row. */
        attn_sgemm_grouped(g.reference, false, true, rows, N, K, 1.0f, xb, x->ld, W, ldw, 0.0f, yb,
                           y->ld, gc, y->group_stride, bias, bias_s, g.threads);
    }
}

void linear_backward_input(const linear_rows *dy, int64_t B, int64_t M, int64_t N,
                               const float *W, int64_t ldw, const linear_rows *dx, int64_t K,
                               bool accumulate, linear_engine g)
{
    const bool one = linear_rows_flat(dy, B, M) && linear_rows_flat(dx, B, M);
    const int64_t calls = one ? 1 : B, rows = one ? B * M : M;
    for (int64_t b = 0; b < calls; ++b)
        /* Forward y = x·Wᵀ, so dx = dy·W: (rows,N)·(N,K). */
        gemm(g, false, false, rows, K, N, 1.0f, dy->data + b * dy->batch, dy->ld, W, ldw,
                   accumulate ? 1.0f : 0.0f, dx->data + b * dx->batch, dx->ld);
}

/* Each column summed in double over the rows in order (no dependence on
 * the thread count) and rounded once: a float sum over L·B rows drifts
 * beyond the accuracy contract. Columns in blocks, so dy is read row by
 * row. */
void linear_bias_grad_add(const float *dy, int64_t ld, int64_t rows, int64_t N, float *dbias,
                          int64_t dbias_s)
{
    enum { COLS = 64 };
    for (int64_t n0 = 0; n0 < N; n0 += COLS) {
        const int64_t n = N - n0 < COLS ? N - n0 : COLS;
        double sum[COLS] = {0};
        for (int64_t i = 0; i < rows; ++i)
            for (int64_t c = 0; c < n; ++c) sum[c] += dy[i * ld + n0 + c];
        for (int64_t c = 0; c < n; ++c) dbias[(n0 + c) * dbias_s] += (float)sum[c];
    }
}

void linear_backward_params(const linear_rows *dy, const linear_rows *x, int64_t B, int64_t M,
                            int64_t N, int64_t K, float *dW, int64_t lddw, float *dbias,
                            int64_t dbias_s, linear_engine g)
{
    const bool one = linear_rows_flat(dy, B, M) && linear_rows_flat(x, B, M);
    const int64_t calls = one ? 1 : B, rows = one ? B * M : M;
    for (int64_t b = 0; b < calls; ++b) {
        const float *dyb = dy->data + b * dy->batch;
        /* Forward y = x·Wᵀ, so dW += dyᵀ·x: (N,rows)·(rows,K), accumulated. */
        gemm(g, true, false, N, K, rows, 1.0f, dyb, dy->ld, x->data + b * x->batch, x->ld,
                   1.0f, dW, lddw);
        /* Forward y = ... + b, so db += Σ_rows dy. */
        if (dbias) linear_bias_grad_add(dyb, dy->ld, rows, N, dbias, dbias_s);
    }
}
