/* SGD with momentum, torch.optim.SGD's update (dampening 0, no Nesterov). */
#include "nn.h"

/* param, grad, momentum_buf: n floats each (momentum_buf unused when
 * momentum == 0). */
attn_status attn_sgd_step(float *param, const float *grad, float *momentum_buf, size_t n,
                          float lr, const attn_sgd_opts *opts, attn_error *err)
{
    const attn_sgd_opts defaults = {0};
    const attn_sgd_opts *o = opts ? opts : &defaults;
    RETURN_IF(n > 0 && (!param || !grad), err, ATTN_ERR_NULL, "param/grad: NULL");
    RETURN_IF(n > 0 && o->momentum != 0.0f && !momentum_buf, err, ATTN_ERR_NULL,
              "momentum_buf: NULL with momentum %g", (double)o->momentum);
    RETURN_IF(!(o->momentum >= 0.0f) || !(o->weight_decay >= 0.0f) || !(lr >= 0.0f), err,
              ATTN_ERR_ARG, "lr, momentum and weight_decay must be >= 0");
    for (size_t i = 0; i < n; ++i) {
        /* torch: d_p = grad + weight_decay·p (L2 added to the gradient). */
        float d = grad[i];
        if (o->weight_decay != 0.0f) d += o->weight_decay * param[i];
        if (o->momentum != 0.0f) {
            /* buf = momentum·buf + d; torch's first step sets buf = d, which
             * is what a zero buffer gives. */
            momentum_buf[i] = o->momentum * momentum_buf[i] + d;
            d = momentum_buf[i];
        }
        param[i] -= lr * d;
    }
    attn_ok(err);
    return ATTN_OK;
}
