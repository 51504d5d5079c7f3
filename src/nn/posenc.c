/* Sinusoidal positional encoding (Vaswani et al. 2017, section 3.5):
 *   PE[n, 2i]   = sin(n / 10000^(2i/E))
 *   PE[n, 2i+1] = cos(n / 10000^(2i/E))
 * computed in double and rounded to float. No parameters. */
#include "nn.h"

#include <math.h>

static double angle(int64_t n, int64_t e, int64_t E)
{
    const int64_t pair = e - (e & 1); /* 2i for both columns of a pair */
    return (double)n * exp(-(double)pair * log(10000.0) / (double)E);
}

/* Views (N,E) or (B,N,E) as (B,N,E) shape and strides. */
static attn_status as_3d(const attn_tensor *t, const char *name, bool is_output, int64_t *shape,
                         int64_t *stride, attn_error *err)
{
    RETURN_IF(!t, err, ATTN_ERR_NULL, "%s: tensor is NULL", name);
    RETURN_IF(t->ndim != 2 && t->ndim != 3, err, ATTN_ERR_SHAPE,
              "%s: expected (N,E) or (B,N,E), got %d dimensions", name, t->ndim);
    RETURN_IF_ERROR(attn_check_tensor(t, name, t->ndim, ATTN_F32, is_output, err));
    const int off = 3 - t->ndim;
    shape[0] = 1;
    stride[0] = 0;
    for (int d = 0; d < t->ndim; ++d) {
        shape[d + off] = t->shape[d];
        stride[d + off] = t->stride[d];
    }
    return ATTN_OK;
}

/* x, out (B,N,E) or (N,E): out = x + PE. */
attn_status attn_posenc_forward(const attn_tensor *x, attn_tensor *out, attn_error *err)
{
    int64_t xs[3], xst[3], os[3], ost[3];
    RETURN_IF_ERROR(as_3d(x, "x", false, xs, xst, err));
    RETURN_IF_ERROR(as_3d(out, "out", true, os, ost, err));
    for (int d = 0; d < 3; ++d)
        RETURN_IF(xs[d] != os[d] || x->ndim != out->ndim, err, ATTN_ERR_SHAPE,
                  "out: shape differs from x");
    const float *xd = x->data;
    float *od = out->data;
    /* One sin/cos per (n, e), reused across the batch. */
    for (int64_t n = 0; n < xs[1]; ++n)
        for (int64_t e = 0; e < xs[2]; ++e) {
            const double a = angle(n, e, xs[2]);
            const float pe = (float)((e & 1) ? cos(a) : sin(a));
            for (int64_t b = 0; b < xs[0]; ++b)
                od[b * ost[0] + n * ost[1] + e * ost[2]] =
                    xd[b * xst[0] + n * xst[1] + e * xst[2]] + pe;
        }
    attn_ok(err);
    return ATTN_OK;
}

/* dout, dx (B,N,E) or (N,E): dx = dout. */
attn_status attn_posenc_backward(const attn_tensor *dout, attn_tensor *dx, attn_error *err)
{
    int64_t gs[3], gst[3], ds[3], dst[3];
    RETURN_IF_ERROR(as_3d(dout, "dout", false, gs, gst, err));
    RETURN_IF_ERROR(as_3d(dx, "dx", true, ds, dst, err));
    for (int d = 0; d < 3; ++d)
        RETURN_IF(gs[d] != ds[d] || dout->ndim != dx->ndim, err, ATTN_ERR_SHAPE,
                  "dx: shape differs from dout");
    /* In the forward pass out = x + PE with PE a constant, so dx = dout. */
    const float *g = dout->data;
    float *d = dx->data;
    for (int64_t b = 0; b < gs[0]; ++b)
        for (int64_t n = 0; n < gs[1]; ++n)
            for (int64_t e = 0; e < gs[2]; ++e)
                d[b * dst[0] + n * dst[1] + e * dst[2]] = g[b * gst[0] + n * gst[1] + e * gst[2]];
    attn_ok(err);
    return ATTN_OK;
}
