/* AdamW (Loshchilov & Hutter): Adam with weight decay applied to the
 * parameters directly, not added to the gradient. The arithmetic follows
 * torch.optim.AdamW's single-tensor path step by step. */
#include "nn.h"

#include <math.h>

attn_adamw_opts attn_adamw_opts_default(void)
{
    return (attn_adamw_opts){.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f};
}

/* param, grad, m, v: n floats each; t is the 1-based step number. */
attn_status attn_adamw_step(float *param, const float *grad, float *m, float *v, size_t n,
                            int64_t t, float lr, const attn_adamw_opts *opts, attn_error *err)
{
    const attn_adamw_opts o = opts ? *opts : attn_adamw_opts_default();
    RETURN_IF(n > 0 && (!param || !grad || !m || !v), err, ATTN_ERR_NULL,
              "param/grad/m/v: NULL");
    RETURN_IF(t < 1, err, ATTN_ERR_ARG, "t: steps count from 1, got %lld", (long long)t);
    RETURN_IF(!(o.beta1 >= 0.0f && o.beta1 < 1.0f) || !(o.beta2 >= 0.0f && o.beta2 < 1.0f), err,
              ATTN_ERR_ARG, "beta1, beta2 must be in [0, 1)");
    RETURN_IF(!(o.eps >= 0.0f) || !(o.weight_decay >= 0.0f) || !(lr >= 0.0f), err, ATTN_ERR_ARG,
              "lr, eps and weight_decay must be >= 0");

    /* Bias corrections in double (torch computes them in Python floats). */
    const double bc1 = 1.0 - pow((double)o.beta1, (double)t);
    const double bc2 = 1.0 - pow((double)o.beta2, (double)t);
    const float step_size = (float)((double)lr / bc1);
    const float bc2_sqrt = (float)sqrt(bc2);
    const float decay = (float)(1.0 - (double)lr * (double)o.weight_decay);
    const float b1 = o.beta1, b2 = o.beta2;
    for (size_t i = 0; i < n; ++i) {
        const float g = grad[i];
        param[i] *= decay;                          /* decoupled weight decay */
        m[i] = b1 * m[i] + (1.0f - b1) * g;         /* first moment */
        v[i] = b2 * v[i] + (1.0f - b2) * g * g;     /* second moment */
        const float denom = sqrtf(v[i]) / bc2_sqrt + o.eps;
        param[i] -= step_size * (m[i] / denom);
    }
    attn_ok(err);
    return ATTN_OK;
}
