/* Linear layer (torch nn.Linear): y = x·wᵀ + b, through attn_sgemm (whose
 * result does not depend on the thread count). */
#include "nn.h"
#include "../core/gemm.h"

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
    const int threads = attn_resolve_threads(num_threads);

    float *yd = y->data;
    const int64_t ldy = nn_row_stride(y);
    /* y (T,out) = x (T,in) · wᵀ (in,out). */
    attn_sgemm(false, true, T, out_f, in_f, 1.0f, x->data, nn_row_stride(x), w->data,
               nn_row_stride(w), 0.0f, yd, ldy, threads);
    if (b)
        for (int64_t t = 0; t < T; ++t)
            for (int64_t o = 0; o < out_f; ++o) yd[t * ldy + o] += *nn_vec_at(b, o);
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
    const int threads = attn_resolve_threads(num_threads);
    const float *dyd = dy->data;
    const int64_t lddy = nn_row_stride(dy);

    /* In the forward pass y = x·wᵀ, so dx = dy·w: (T,out)·(out,in). */
    if (dx)
        attn_sgemm(false, false, T, in_f, out_f, 1.0f, dyd, lddy, w->data, nn_row_stride(w),
                   0.0f, dx->data, nn_row_stride(dx), threads);
    /* ... and dw += dyᵀ·x: (out,T)·(T,in). */
    attn_sgemm(true, false, out_f, in_f, T, 1.0f, dyd, lddy, x->data, nn_row_stride(x), 1.0f,
               dw->data, nn_row_stride(dw), threads);
    /* y = ... + b broadcast over rows, so db += Σ_t dy[t] (rows in order). */
    if (db)
        for (int64_t t = 0; t < T; ++t)
            for (int64_t o = 0; o < out_f; ++o) *nn_vec_at(db, o) += dyd[t * lddy + o];
    attn_ok(err);
    return ATTN_OK;
}
