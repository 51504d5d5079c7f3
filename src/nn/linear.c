/* Linear layer (torch nn.Linear): y = x·wᵀ + b, checked here and computed
 * by core/linear.h's layer (the MHA projections' too), whose result does not
 * depend on the thread count. */
#include "nn.h"
#include "../core/linear.h"

/* A matrix as one batch of rows. */
static linear_rows rows_of(const attn_tensor *t)
{
    return (linear_rows){.data = t->data, .batch = 0, .ld = nn_row_stride(t)};
}

/* b (out) or NULL. */
static attn_status check_bias(const attn_tensor *b, const char *name, int64_t n, bool is_output,
                              attn_error *err)
{
    if (!b) return ATTN_OK;
    RETURN_IF_ERROR(attn_check_tensor(b, name, 1, ATTN_F32, is_output, err));
    RETURN_IF(b->shape[0] != n, err, ATTN_ERR_SHAPE, "%s: has %lld elements, expected %lld", name,
              (long long)b->shape[0], (long long)n);
    return ATTN_OK;
}

/* x (T,in), w (out,in), b (out) or NULL, y (T,out). */
attn_status attn_linear_forward(const attn_tensor *x, const attn_tensor *w, const attn_tensor *b,
                                attn_tensor *y, int num_threads, attn_error *err)
{
    RETURN_IF_ERROR(nn_check_matrix(w, "w", -1, -1, false, err));
    const int64_t out_f = w->shape[0], in_f = w->shape[1];
    RETURN_IF_ERROR(nn_check_matrix(x, "x", -1, in_f, false, err));
    const int64_t T = x->shape[0];
    RETURN_IF_ERROR(nn_check_matrix(y, "y", T, out_f, true, err));
    RETURN_IF_ERROR(check_bias(b, "b", out_f, false, err));
    const linear_engine g = {attn_resolve_threads(num_threads), false};
    const linear_rows xr = rows_of(x), yr = rows_of(y);
    linear_forward(&xr, 1, T, in_f, w->data, nn_row_stride(w), b ? b->data : NULL,
                   b ? b->stride[0] : 1, &yr, out_f, g);
    attn_ok(err);
    return ATTN_OK;
}

/* dy (T,out); dx (T,in) overwritten; dw (out,in), db (out) accumulated. */
attn_status attn_linear_backward(const attn_tensor *x, const attn_tensor *w, const attn_tensor *dy,
                                 attn_tensor *dx, attn_tensor *dw, attn_tensor *db,
                                 int num_threads, attn_error *err)
{
    RETURN_IF_ERROR(nn_check_matrix(w, "w", -1, -1, false, err));
    const int64_t out_f = w->shape[0], in_f = w->shape[1];
    RETURN_IF_ERROR(nn_check_matrix(x, "x", -1, in_f, false, err));
    const int64_t T = x->shape[0];
    RETURN_IF_ERROR(nn_check_matrix(dy, "dy", T, out_f, false, err));
    if (dx) RETURN_IF_ERROR(nn_check_matrix(dx, "dx", T, in_f, true, err));
    RETURN_IF(!dw, err, ATTN_ERR_NULL, "dw: NULL");
    RETURN_IF_ERROR(nn_check_matrix(dw, "dw", out_f, in_f, true, err));
    RETURN_IF_ERROR(check_bias(db, "db", out_f, true, err));
    const linear_engine g = {attn_resolve_threads(num_threads), false};
    const linear_rows xr = rows_of(x), dyr = rows_of(dy);
    /* In the forward pass y = x·wᵀ + b, so dx = dy·w, dw += dyᵀ·x, db += Σ_t dy[t]. */
    if (dx) {
        const linear_rows dxr = rows_of(dx);
        linear_backward_input(&dyr, 1, T, out_f, w->data, nn_row_stride(w), &dxr, in_f, false, g);
    }
    linear_backward_params(&dyr, &xr, 1, T, out_f, in_f, dw->data, nn_row_stride(dw),
                           db ? db->data : NULL, db ? db->stride[0] : 1, g);
    attn_ok(err);
    return ATTN_OK;
}
