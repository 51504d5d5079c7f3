/* Validation of the row-major matrices the training layers use. */
#include "nn.h"

attn_status nn_check_matrix(const attn_tensor *t, const char *name, int64_t rows, int64_t cols,
                            bool is_output, attn_error *err)
{
    RETURN_IF_ERROR(attn_check_tensor(t, name, 2, ATTN_F32, is_output, err));
    RETURN_IF(rows >= 0 && t->shape[0] != rows, err, ATTN_ERR_SHAPE,
              "%s: has %lld rows, expected %lld", name, (long long)t->shape[0], (long long)rows);
    RETURN_IF(cols >= 0 && t->shape[1] != cols, err, ATTN_ERR_SHAPE,
              "%s: has %lld columns, expected %lld", name, (long long)t->shape[1],
              (long long)cols);
    RETURN_IF(t->shape[1] > 1 && t->stride[1] != 1, err, ATTN_ERR_STRIDE,
              "%s: the last dimension needs unit stride", name);
    /* A GEMM walks rows forward and needs them not to overlap. */
    RETURN_IF(t->shape[0] > 1 && t->stride[0] < t->shape[1], err, ATTN_ERR_STRIDE,
              "%s: row stride %lld is smaller than the row length %lld", name,
              (long long)t->stride[0], (long long)t->shape[1]);
    return ATTN_OK;
}

int64_t nn_row_stride(const attn_tensor *t)
{
    /* One row: any value >= the row length is a valid leading dimension. */
    return t->shape[0] > 1 ? t->stride[0] : (t->shape[1] > 0 ? t->shape[1] : 1);
}
