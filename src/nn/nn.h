/* Private helpers shared by the training layers (src/nn): checks for the
 * row-major matrices the layers read and write. */
#ifndef ATTN_NN_PRIVATE_H
#define ATTN_NN_PRIVATE_H

#include "../core/internal.h"

/* Checks that t is a float32 (rows, cols) view whose last dimension has unit
 * stride (rows may be strided, e.g. one position out of a (B,N,E) buffer).
 * rows or cols < 0 accept any size in that dimension. */
attn_status nn_check_matrix(const attn_tensor *t, const char *name, int64_t rows, int64_t cols,
                            bool is_output, attn_error *err);

/* Row stride of a checked matrix, usable as a GEMM leading dimension. */
int64_t nn_row_stride(const attn_tensor *t);

/* Element i of a float32 vector view. */
static inline float *nn_vec_at(const attn_tensor *t, int64_t i)
{
    return (float *)t->data + i * t->stride[0];
}

#endif
