/* The bf16 linear layers (linear_bf16.h): each packs its operands into
 * pairs (the weight once per call, the other operand once per GEMM) in
 * the caller's scratch or an allocation, then multiplies on the engine. A
 * batch whose rows are evenly spaced is one GEMM over B·M rows, as in
 * linear.c; otherwise one GEMM per batch. */
#include "linear_bf16.h"
#include "gemm_bf16.h"

#include <stdlib.h>

/* Words of each layer's operands (the layouts below). */
static int64_t forward_words(const sdpa_bf16_engine *eng, int64_t rows, int64_t K, int64_t N)
{
    const int64_t kp = (K + 1) / 2; /* Wᵀ, then x's rows or W's rows (its scratch) */
    return kp * gemm_bf16_cols(eng, N) + (rows > N ? rows : N) * kp;
}

static int64_t input_words(const sdpa_bf16_engine *eng, int64_t rows, int64_t N, int64_t K)
{
    const int64_t np = (N + 1) / 2; /* W's rows paired, dy's rows */
    return np * gemm_bf16_cols(eng, K) + rows * np;
}

static int64_t params_words(const sdpa_bf16_engine *eng, int64_t rows, int64_t N, int64_t K)
{
    const int64_t rp = (rows + 1) / 2; /* x's rows paired, dyᵀ and its scratch */
    return rp * gemm_bf16_cols(eng, K) + 2 * N * rp;
}

int64_t linear_bf16_words(const sdpa_bf16_engine *eng, int64_t rows, int64_t K, int64_t N)
{
    if (!eng) return 0;
    const int64_t f = forward_words(eng, rows, K, N), i = input_words(eng, rows, N, K);
    const int64_t p = params_words(eng, rows, N, K);
    return f > i ? (f > p ? f : p) : (i > p ? i : p);
}

/* n words from e's scratch, or allocated (*owned, for the caller to free);
 * NULL without an engine, on a reference call or when neither has room. */
static uint32_t *take(linear_bf16 e, linear_engine g, int64_t n, uint32_t **owned)
{
    *owned = NULL;
    if (!e.eng || g.reference) return NULL;
    if (e.scratch && n <= e.words) return e.scratch;
    if ((uint64_t)n > SIZE_MAX / sizeof(uint32_t) / 2) return NULL;
    return *owned = malloc((size_t)(n > 0 ? n : 1) * sizeof(uint32_t));
}

void linear_forward_bf16(linear_bf16 e, const linear_rows *x, int64_t B, int64_t M, int64_t K,
                         const float *W, int64_t ldw, const float *bias, int64_t bias_s,
                         const linear_rows *y, int64_t N, linear_engine g)
{
    const bool one = linear_rows_flat(x, B, M) && linear_rows_flat(y, B, M);
    const int64_t calls = one ? 1 : B, rows = one ? B * M : M;
    uint32_t *owned, *b = take(e, g, e.eng ? forward_words(e.eng, rows, K, N) : 0, &owned);
    if (!b) {
        linear_forward(x, B, M, K, W, ldw, bias, bias_s, y, N, g);
        return;
    }
    /* y = x·Wᵀ: B = Wᵀ (kp × ldb), A = x's rows paired along K (kp each),
     * whose room serves W's rows first. */
    const int64_t gc = y->group_cols > 0 && y->group_cols < N ? y->group_cols : N;
    const int64_t kp = (K + 1) / 2, ldb = gemm_bf16_cols(e.eng, N);
    uint32_t *a = b + kp * ldb;
    gemm_bf16_pack_transposed(W, ldw, N, K, b, ldb, a, g.threads);
    for (int64_t c = 0; c < calls; ++c) {
        gemm_bf16_pack_rows(x->data + c * x->batch, x->ld, rows, K, a, g.threads);
        gemm_bf16(e.eng, rows, N, kp, a, kp, b, ldb, false, y->data + c * y->batch, y->ld, gc,
                  y->group_stride, bias, bias_s, g.threads);
    }
    free(owned);
}

void linear_backward_input_bf16(linear_bf16 e, const linear_rows *dy, int64_t B, int64_t M,
                                int64_t N, const float *W, int64_t ldw, const linear_rows *dx,
                                int64_t K, bool accumulate, linear_engine g)
{
    const bool one = linear_rows_flat(dy, B, M) && linear_rows_flat(dx, B, M);
    const int64_t calls = one ? 1 : B, rows = one ? B * M : M;
    uint32_t *owned, *b = take(e, g, e.eng ? input_words(e.eng, rows, N, K) : 0, &owned);
    if (!b) {
        linear_backward_input(dy, B, M, N, W, ldw, dx, K, accumulate, g);
        return;
    }
    /* dx = dy·W: B = W's rows paired (np × ldb), A = dy's rows paired along N. */
    const int64_t np = (N + 1) / 2, ldb = gemm_bf16_cols(e.eng, K);
    uint32_t *a = b + np * ldb;
    gemm_bf16_pack_keys(W, ldw, N, K, b, ldb, g.threads);
    for (int64_t c = 0; c < calls; ++c) {
        gemm_bf16_pack_rows(dy->data + c * dy->batch, dy->ld, rows, N, a, g.threads);
        gemm_bf16(e.eng, rows, K, np, a, np, b, ldb, accumulate, dx->data + c * dx->batch,
                  dx->ld, K, 0, NULL, 0, g.threads);
    }
    free(owned);
}

void linear_backward_params_bf16(linear_bf16 e, const linear_rows *dy, const linear_rows *x,
                                 int64_t B, int64_t M, int64_t N, int64_t K, float *dW,
                                 int64_t lddw, float *dbias, int64_t dbias_s, linear_engine g)
{
    const bool one = linear_rows_flat(dy, B, M) && linear_rows_flat(x, B, M);
    const int64_t calls = one ? 1 : B, rows = one ? B * M : M;
    uint32_t *owned, *b = take(e, g, e.eng ? params_words(e.eng, rows, N, K) : 0, &owned);
    if (!b) {
        linear_backward_params(dy, x, B, M, N, K, dW, lddw, dbias, dbias_s, g);
        return;
    }
    /* dW += dyᵀ·x: B = x's rows paired (rp × ldb), A = dyᵀ (N × rp, pairs
     * of rows) and its scratch. */
    const int64_t rp = (rows + 1) / 2, ldb = gemm_bf16_cols(e.eng, K);
    uint32_t *a = b + rp * ldb, *tmp = a + N * rp;
    for (int64_t c = 0; c < calls; ++c) {
        const float *dyc = dy->data + c * dy->batch;
        gemm_bf16_pack_cols(dyc, dy->ld, rows, N, a, tmp, g.threads);
        gemm_bf16_pack_keys(x->data + c * x->batch, x->ld, rows, K, b, ldb, g.threads);
        gemm_bf16(e.eng, N, K, rp, a, rp, b, ldb, true, dW, lddw, K, 0, NULL, 0, g.threads);
        /* Forward y = ... + b, so db += Σ_rows dy, in float32 as linear.c. */
        if (dbias) linear_bias_grad_add(dyc, dy->ld, rows, N, dbias, dbias_s);
    }
    free(owned);
}
