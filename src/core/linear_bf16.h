/* The linear layers of core/linear.h with bfloat16 operands on a bf16
 * engine (ATTN_PRECISION_BF16's projections): the products of
 * core/gemm_bf16.h with float32 accumulation, the bias added (and its
 * gradient summed, as linear.h does) in float32. Internal.
 *
 * Each takes its linear.h twin's arguments and an engine with scratch for
 * the packed operands; no engine, a reference call (g.reference), or
 * operands that fit neither the scratch nor an allocation run the float32
 * twin instead (exact, so within the bf16 contract too). A weight is
 * packed once per call. */
#ifndef ATTN_CORE_LINEAR_BF16_H
#define ATTN_CORE_LINEAR_BF16_H

#include "../kernels/bf16_engine.h"
#include "linear.h"

/* The engine (NULL: float32) and scratch for the pair operands: words
 * uint32 at scratch, at least linear_bf16_words of every layer run with
 * it (else each call allocates its own; scratch may be NULL). */
typedef struct {
    const sdpa_bf16_engine *eng;
    uint32_t *scratch;
    int64_t words;
} linear_bf16;

/* Scratch words that any of the three layers of x (rows,K) -> y (rows,N)
 * on eng needs (0 for no engine). */
int64_t linear_bf16_words(const sdpa_bf16_engine *eng, int64_t rows, int64_t K, int64_t N);

void linear_forward_bf16(linear_bf16 e, const linear_rows *x, int64_t B, int64_t M,
                         int64_t K, const float *W, int64_t ldw, const float *bias,
                         int64_t bias_s, const linear_rows *y, int64_t N, linear_engine g);
void linear_backward_input_bf16(linear_bf16 e, const linear_rows *dy, int64_t B,
                                int64_t M, int64_t N, const float *W, int64_t ldw,
                                const linear_rows *dx, int64_t K, bool accumulate,
                                linear_engine g);
void linear_backward_params_bf16(linear_bf16 e, const linear_rows *dy,
                                 const linear_rows *x, int64_t B, int64_t M, int64_t N, int64_t K,
                                 float *dW, int64_t lddw, float *dbias, int64_t dbias_s,
                                 linear_engine g);

#endif
