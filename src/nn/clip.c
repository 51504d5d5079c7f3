/* Gradient-norm clipping over several gradient buffers at once
 * (torch.nn.utils.clip_grad_norm_ with the L2 norm). */
#include "nn.h"

#include <math.h>

attn_status attn_clip_grad_norm(float *const *grads, const size_t *counts, size_t nseg,
                                float max_norm, float *norm, attn_error *err)
{
    RETURN_IF(nseg > 0 && (!grads || !counts), err, ATTN_ERR_NULL, "grads/counts: NULL");
    for (size_t s = 0; s < nseg; ++s)
        RETURN_IF(counts[s] > 0 && !grads[s], err, ATTN_ERR_NULL, "grads[%zu]: NULL", s);
    /* Σ g² over all segments in order, in double: a fixed order makes the
     * norm independent of how anything else was parallelised. */
    double sum = 0.0;
    for (size_t s = 0; s < nseg; ++s)
        for (size_t i = 0; i < counts[s]; ++i) sum += (double)grads[s][i] * (double)grads[s][i];
    const float total = (float)sqrt(sum);
    if (norm) *norm = total;
    if (max_norm > 0.0f) {
        /* torch: coef = max_norm / (norm + 1e-6), applied when below 1. */
        const float coef = max_norm / (total + 1e-6f);
        if (coef < 1.0f)
            for (size_t s = 0; s < nseg; ++s)
                for (size_t i = 0; i < counts[s]; ++i) grads[s][i] *= coef;
    }
    attn_ok(err);
    return ATTN_OK;
}
