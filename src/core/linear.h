/* Linear layers (y = x·Wᵀ + b and its gradients) on batches of row
 * matrices: the one implementation behind the nn layers (attn_linear_*) and
 * the MHA projections. Internal. */
#ifndef ATTN_CORE_LINEAR_H
#define ATTN_CORE_LINEAR_H

#include <stdbool.h>
#include <stdint.h>

/* A batch of row matrices: row i of matrix b at data + b*batch + i*ld.
 * linear_forward's output may have its columns in groups of group_cols
 * (0: no groups), group g at data + g*group_stride (attention heads laid
 * out head-major). */
typedef struct {
    float *data;
    int64_t batch, ld;
    int64_t group_cols, group_stride;
} linear_rows;

/* How to multiply: threads, and the plain GEMM on the reference path (so a
 * whole reference computation is CPU-independent). */
typedef struct {
    int threads;
    bool reference;
} linear_engine;

/* y[b] = x[b] · Wᵀ + bias : x (B,M,K), W (N,K) row stride ldw, y (B,M,N)
 * (in column groups when y->group_cols > 0); bias (N) at stride bias_s, or
 * NULL. */
void linear_forward(const linear_rows *x, int64_t B, int64_t M, int64_t K, const float *W,
                    int64_t ldw, const float *bias, int64_t bias_s, const linear_rows *y,
                    int64_t N, linear_engine g);
/* dx[b] (=, or += when accumulate) dy[b] · W : dy (B,M,N), W (N,K), dx (B,M,K). */
void linear_backward_input(const linear_rows *dy, int64_t B, int64_t M, int64_t N,
                           const float *W, int64_t ldw, const linear_rows *dx, int64_t K,
                           bool accumulate, linear_engine g);
/* dW += Σ_b dy[b]ᵀ · x[b] (N,K) row stride lddw; dbias (N, stride dbias_s)
 * += Σ_b,i dy[b][i] in row order when dbias is not NULL. */
void linear_backward_params(const linear_rows *dy, const linear_rows *x, int64_t B, int64_t M,
                            int64_t N, int64_t K, float *dW, int64_t lddw, float *dbias,
                            int64_t dbias_s, linear_engine g);

/* The parts linear_bf16.h shares: whether the rows of every batch follow
 * each other at the same spacing (the batch is then one GEMM over B·M
 * rows), and dbias (N, stride dbias_s) += Σ_rows dy (rows,N; row stride
 * ld), in row order. */
bool linear_rows_flat(const linear_rows *r, int64_t B, int64_t M);
void linear_bias_grad_add(const float *dy, int64_t ld, int64_t rows, int64_t N, float *dbias,
                          int64_t dbias_s);

#endif
