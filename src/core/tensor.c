/* Tensor views: constructors and validation. */
#include "internal.h"

#include <stdlib.h>

attn_tensor attn_tensor_make(void *data, attn_dtype dtype, int ndim, const int64_t *shape)
{
    attn_tensor t = {.data = data, .dtype = dtype, .ndim = ndim};
    if (ndim < 0 || ndim > ATTN_MAX_DIMS) {
        t.ndim = -1; /* invalid: every check rejects it */
        return t;
    }
    int64_t stride = 1;
    for (int i = ndim - 1; i >= 0; --i) {
        t.shape[i] = shape[i];
        t.stride[i] = stride;
        /* an overflowing shape keeps its last stride; validation rejects it */
        if (__builtin_mul_overflow(stride, shape[i] > 0 ? shape[i] : 1, &stride)) break;
    }
    return t;
}

attn_tensor attn_tensor_1d(float *data, int64_t n0)
{
    return attn_tensor_make(data, ATTN_F32, 1, (int64_t[]){n0});
}
attn_tensor attn_tensor_2d(float *data, int64_t n0, int64_t n1)
{
    return attn_tensor_make(data, ATTN_F32, 2, (int64_t[]){n0, n1});
}
attn_tensor attn_tensor_3d(float *data, int64_t n0, int64_t n1, int64_t n2)
{
    return attn_tensor_make(data, ATTN_F32, 3, (int64_t[]){n0, n1, n2});
}
attn_tensor attn_tensor_4d(float *data, int64_t n0, int64_t n1, int64_t n2, int64_t n3)
{
    return attn_tensor_make(data, ATTN_F32, 4, (int64_t[]){n0, n1, n2, n3});
}

int64_t attn_tensor_numel(const attn_tensor *t)
{
    if (!t || t->ndim < 0 || t->ndim > ATTN_MAX_DIMS) return 0;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; ++i)
        if (!attn_mul_ok(n, t->shape[i], &n)) return 0;
    return n;
}

attn_tensor attn_tensor_transpose(attn_tensor t, int dim0, int dim1)
{
    if (dim0 < 0 || dim1 < 0 || dim0 >= t.ndim || dim1 >= t.ndim) return t;
    int64_t s = t.shape[dim0], st = t.stride[dim0];
    t.shape[dim0] = t.shape[dim1];
    t.stride[dim0] = t.stride[dim1];
    t.shape[dim1] = s;
    t.stride[dim1] = st;
    return t;
}

attn_status attn_check_tensor(const attn_tensor *t, const char *name, int ndim, attn_dtype dtype,
                              bool is_output, attn_error *err)
{
    RETURN_IF(!t, err, ATTN_ERR_NULL, "%s: tensor is NULL", name);
    RETURN_IF(t->ndim != ndim, err, ATTN_ERR_SHAPE, "%s: expected %d dimensions, got %d", name,
              ndim, t->ndim);
    RETURN_IF(t->dtype != dtype, err, ATTN_ERR_DTYPE, "%s: expected %s elements, got %s", name,
              attn_dtype_name(dtype), attn_dtype_name(t->dtype));
    int64_t n = 1, last = 0;
    for (int i = 0; i < ndim; ++i) {
        RETURN_IF(t->shape[i] < 0, err, ATTN_ERR_SHAPE, "%s: negative size %lld in dimension %d",
                  name, (long long)t->shape[i], i);
        RETURN_IF(!attn_mul_ok(n, t->shape[i], &n), err, ATTN_ERR_OVERFLOW,
                  "%s: element count overflows", name);
    }
    if (n == 0) return ATTN_OK; /* strides matter only if there are elements */
    /* Dims of extent > 1 ordered by |stride|: each must step past everything
     * the dims inside it span (for outputs, strictly: no two elements alias). */
    int order[ATTN_MAX_DIMS], k = 0;
    for (int i = 0; i < ndim; ++i)
        if (t->shape[i] > 1) order[k++] = i;
    for (int a = 1; a < k; ++a) /* insertion sort, k <= 8 */
        for (int b = a; b > 0 && llabs(t->stride[order[b]]) < llabs(t->stride[order[b - 1]]); --b) {
            int tmp = order[b];
            order[b] = order[b - 1];
            order[b - 1] = tmp;
        }
    for (int a = 0; a < k; ++a) {
        const int i = order[a];
        const int64_t s = llabs(t->stride[i]);
        int64_t reach;
        RETURN_IF(!attn_mul_ok(s, t->shape[i] - 1, &reach) || !attn_add_ok(last, reach, &last),
                  err, ATTN_ERR_OVERFLOW, "%s: stride %d overflows", name, i);
        if (is_output) {
            RETURN_IF(t->stride[i] <= 0, err, ATTN_ERR_STRIDE,
                      "%s: output stride in dimension %d must be positive", name, i);
            /* last - reach is the span of the dims inside this one */
            RETURN_IF(s <= last - reach, err, ATTN_ERR_STRIDE,
                      "%s: output dimensions %d and %d overlap in memory", name, i,
                      a > 0 ? order[a - 1] : i);
        }
    }
    RETURN_IF(n > 0 && !t->data, err, ATTN_ERR_NULL, "%s: data is NULL", name);
    return ATTN_OK;
}

attn_status attn_check_float_tensor(const attn_tensor *t, const char *name, int ndim,
                                    bool is_output, attn_error *err)
{
    RETURN_IF(!t, err, ATTN_ERR_NULL, "%s: tensor is NULL", name);
    RETURN_IF(t->dtype != ATTN_F32 && t->dtype != ATTN_BF16 && t->dtype != ATTN_F16, err,
              ATTN_ERR_DTYPE, "%s: expected float32, bfloat16 or float16 elements, got %s", name,
              attn_dtype_name(t->dtype));
    return attn_check_tensor(t, name, ndim, t->dtype, is_output, err);
}

/* Bytes [*lo, *hi) a view can touch; false when it has no elements. */
static bool byte_extent(const attn_tensor *t, uintptr_t *lo, uintptr_t *hi)
{
    int64_t min = 0, max = 0;
    for (int i = 0; i < t->ndim; ++i) {
        if (t->shape[i] == 0) return false;
        const int64_t reach = t->stride[i] * (t->shape[i] - 1); /* checked by attn_check_tensor */
        if (reach < 0) min += reach;
        else max += reach;
    }
    const int64_t elem = (int64_t)attn_dtype_size(t->dtype);
    *lo = (uintptr_t)t->data + (uintptr_t)(min * elem);
    *hi = (uintptr_t)t->data + (uintptr_t)((max + 1) * elem);
    return true;
}

attn_status attn_check_disjoint(const attn_tensor *out, const char *out_name,
                                const attn_tensor *in, const char *in_name, attn_error *err)
{
    uintptr_t a0, a1, b0, b1;
    if (!out || !in || !byte_extent(out, &a0, &a1) || !byte_extent(in, &b0, &b1)) return ATTN_OK;
    RETURN_IF(a0 < b1 && b0 < a1, err, ATTN_ERR_ARG,
              "%s: shares memory with %s (outputs must not overlap inputs)", out_name, in_name);
    return ATTN_OK;
}

/* Whether a view's bytes meet [w0, w0 + size). */
static bool meets(const attn_tensor *t, const void *w0, size_t size)
{
    uintptr_t a0, a1;
    if (!t || !w0 || !size || !byte_extent(t, &a0, &a1)) return false;
    return a0 < (uintptr_t)w0 + size && (uintptr_t)w0 < a1;
}

attn_status attn_check_call_memory(const attn_tensor *const *outs, const char *const *out_names,
                                   int nout, const attn_tensor *const *ins,
                                   const char *const *in_names, int nin, const void *workspace,
                                   size_t workspace_size, attn_error *err)
{
    for (int o = 0; o < nout; ++o) {
        for (int i = 0; i < nin; ++i)
            RETURN_IF_ERROR(attn_check_disjoint(outs[o], out_names[o], ins[i], in_names[i], err));
        uintptr_t a0, a1, b0, b1;
        for (int x = o + 1; outs[o] && byte_extent(outs[o], &a0, &a1) && x < nout; ++x)
            RETURN_IF(outs[x] && byte_extent(outs[x], &b0, &b1) && a0 < b1 && b0 < a1, err,
                      ATTN_ERR_ARG, "%s: shares memory with %s (outputs must not overlap each other)",
                      out_names[o], out_names[x]);
        RETURN_IF(meets(outs[o], workspace, workspace_size), err, ATTN_ERR_ARG,
                  "%s: shares memory with opts.workspace (the call's scratch)", out_names[o]);
    }
    for (int i = 0; i < nin; ++i)
        RETURN_IF(meets(ins[i], workspace, workspace_size), err, ATTN_ERR_ARG,
                  "%s: shares memory with opts.workspace (the call's scratch)", in_names[i]);
    return ATTN_OK;
}
