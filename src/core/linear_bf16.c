/* The bf16 linear layers (linear_bf16.h): each packs its operands into
 * pairs (the weight once per call, the other operand once per GEMM), then
 * multiplies on the engine. A batch whose rows are evenly spaced is one GEMM
 * over B·M rows, as in linear.c; otherwise one GEMM per batch. */
#include "linear_bf16.h"
#include "gemm_bf16.h"

#include <stdlib.h>

/* n uint32 words of scratch, or NULL (also when the size overflows). */
static uint32_t *words(int64_t n)
{
    if (n < 0 || (uint64_t)n > SIZE_MAX / sizeof(uint32_t) / 2) return NULL;
    return malloc((size_t)(n > 0 ? n : 1) * sizeof(uint32_t));
}

void linear_forward_bf16(const sdpa_bf16_engine *eng, const linear_rows *x, int64_t B, int64_t M,
                         int64_t K, const float *W, int64_t ldw, const float *bias,
                         int64_t bias_s, const linear_rows *y, int64_t N, linear_engine g)
{
    const bool one = linear_rows_flat(x, B, M) && linear_rows_flat(y, B, M);
    const int64_t calls = one ? 1 : B, rows = one ? B * M : M;
    const int64_t gc = y->group_cols > 0 && y->group_cols < N ? y->group_cols : N;
    /* y = x·Wᵀ: A = x's rows paired along K, B = Wᵀ (kp × N); a is W's
     * scratch first. */
    const int64_t kp = (K + 1) / 2, ldb = eng ? gemm_bf16_cols(eng, N) : 0;
    uint32_t *b = NULL, *a = NULL;
    if (eng && !g.reference) {
        b = words(kp * ldb);
        a = words(rows * kp > N * kp ? rows * kp : N * kp);
    }
    if (!a || !b) {
        free(a), free(b);
        linear_forward(x, B, M, K, W, ldw, bias, bias_s, y, N, g);
        return;
    }
    gemm_bf16_pack_transposed(W, ldw, N, K, b, ldb, a, g.threads);
    for (int64_t c = 0; c < calls; ++c) {
        gemm_bf16_pack_rows(x->data + c * x->batch, x->ld, rows, K, a, g.threads);
        gemm_bf16(eng, rows, N, kp, a, kp, b, ldb, false, y->data + c * y->batch, y->ld, gc,
                  y->group_stride, bias, bias_s, g.threads);
    }
    free(a), free(b);
}

void linear_backward_input_bf16(const sdpa_bf16_engine *eng, const linear_rows *dy, int64_t B,
                                int64_t M, int64_t N, const float *W, int64_t ldw,
                                const linear_rows *dx, int64_t K, bool accumulate,
                                linear_engine g)
{
    const bool one = linear_rows_flat(dy, B, M) && linear_rows_flat(dx, B, M);
    const int64_t calls = one ? 1 : B, rows = one ? B * M : M;
    /* dx = dy·W: A = dy's rows paired along N, B = W's rows paired (np × K). */
    const int64_t np = (N + 1) / 2, ldb = eng ? gemm_bf16_cols(eng, K) : 0;
    uint32_t *b = NULL, *a = NULL;
    if (eng && !g.reference) b = words(np * ldb), a = words(rows * np);
    if (!a || !b) {
        free(a), free(b);
        linear_backward_input(dy, B, M, N, W, ldw, dx, K, accumulate, g);
        return;
    }
    gemm_bf16_pack_keys(W, ldw, N, K, b, ldb, g.threads);
    for (int64_t c = 0; c < calls; ++c) {
        gemm_bf16_pack_rows(dy->data + c * dy->batch, dy->ld, rows, N, a, g.threads);
        gemm_bf16(eng, rows, K, np, a, np, b, ldb, accumulate, dx->data + c * dx->batch, dx->ld,
                  K, 0, NULL, 0, g.threads);
    }
    free(a), free(b);
}

void linear_backward_params_bf16(const sdpa_bf16_engine *eng, const linear_rows *dy,
                                 const linear_rows *x, int64_t B, int64_t M, int64_t N, int64_t K,
                                 float *dW, int64_t lddw, float *dbias, int64_t dbias_s,
                                 linear_engine g)
{
    const bool one = linear_rows_flat(dy, B, M) && linear_rows_flat(x, B, M);
    const int64_t calls = one ? 1 : B, rows = one ? B * M : M;
    /* dW += dyᵀ·x: A = dyᵀ (N × rp, pairs of rows), B = x's rows paired
     * (rp × K). */
    const int64_t rp = (rows + 1) / 2, ldb = eng ? gemm_bf16_cols(eng, K) : 0;
    uint32_t *b = NULL, *a = NULL, *tmp = NULL;
    if (eng && !g.reference) b = words(rp * ldb), a = words(N * rp), tmp = words(N * rp);
    if (!a || !b || !tmp) {
        free(a), free(b), free(tmp);
        linear_backward_params(dy, x, B, M, N, K, dW, lddw, dbias, dbias_s, g);
        return;
    }
    for (int64_t c = 0; c < calls; ++c) {
        const float *dyc = dy->data + c * dy->batch;
        gemm_bf16_pack_cols(dyc, dy->ld, rows, N, a, tmp, g.threads);
        gemm_bf16_pack_keys(x->data + c * x->batch, x->ld, rows, K, b, ldb, g.threads);
        gemm_bf16(eng, N, K, rp, a, rp, b, ldb, true, dW, lddw, K, 0, NULL, 0, g.threads);
        /* Forward y = ... + b, so db += Σ_rows dy, in float32 as linear.c. */
        if (dbias) linear_bias_grad_add(dyc, dy->ld, rows, N, dbias, dbias_s);
    }
    free(a), free(b), free(tmp);
}
