/* The gradient of a learned float mask (grad_mask): the backward writes the
 * logits' gradient dX = P∘(dP - D) of every (b, h, i, j) once into a full
 * buffer, and it is summed here over the dimensions the mask broadcasts
 * along. Each output element is one sum in a fixed order (b, h, i, j
 * ascending), whatever thread computes it, so results do not depend on the
 * thread count. */
#include "problem.h"

#include <stdlib.h>
#include <string.h>

/* The mask's size in dimension d of (B,Hq,Nq,Nk): 1 where it broadcasts. */
static int64_t mask_dim(const attn_tensor *m, int d)
{
    const int md = m->ndim - 4 + d;
    return md < 0 ? 1 : m->shape[md];
}

static bool broadcasts(const attn_tensor *m, const sdpa_problem *p)
{
    const int64_t full[4] = {p->B, p->Hq, p->Nq, p->Nk};
    for (int d = 0; d < 4; ++d)
        if (mask_dim(m, d) != full[d]) return true;
    return false;
}

/* Sets every element of the (B,Hq,Nq,Nk) view (data, strides s) to 0. */
static void zero_full(const sdpa_problem *p, float *data, const int64_t s[4])
{
#pragma omp parallel for num_threads(p->threads) schedule(static)
    for (int64_t row = 0; row < p->B * p->Hq * p->Nq; ++row) {
        const int64_t i = row % p->Nq, h = (row / p->Nq) % p->Hq, b = row / (p->Nq * p->Hq);
        float *r = data + b * s[0] + h * s[1] + i * s[2];
        for (int64_t j = 0; j < p->Nk; ++j) r[j * s[3]] = 0.0f;
    }
}

attn_status sdpa_bias_grad_check(const attn_tensor *grad, const attn_tensor *mask,
                                 attn_error *err)
{
    if (!grad) return ATTN_OK;
    RETURN_IF(!mask || mask->dtype != ATTN_F32, err, ATTN_ERR_ARG,
              "grad_mask: needs a float32 mask[0] (the bias it differentiates)");
    RETURN_IF(grad->ndim != mask->ndim, err, ATTN_ERR_SHAPE,
              "grad_mask: %d dimensions, mask[0] has %d", grad->ndim, mask->ndim);
    RETURN_IF_ERROR(attn_check_tensor(grad, "grad_mask", grad->ndim, ATTN_F32, true, err));
    for (int d = 0; d < mask->ndim; ++d)
        RETURN_IF(grad->shape[d] != mask->shape[d], err, ATTN_ERR_SHAPE,
                  "grad_mask: size %lld in dimension %d, mask[0] has %lld",
                  (long long)grad->shape[d], d, (long long)mask->shape[d]);
    return ATTN_OK;
}

attn_status sdpa_bias_grad_begin(sdpa_problem *p, sdpa_bias_grad *g, const attn_tensor *grad,
                                 const attn_tensor *mask, attn_error *err)
{
    g->grad = NULL;
    g->owned = NULL;
    if (!grad) return ATTN_OK;
    g->grad = grad;
    if (!broadcasts(mask, p)) { /* dX goes straight into the caller's tensor */
        for (int d = 0; d < 4; ++d) /* a missing dimension has size 1: index 0 */
            p->dbs[d] = grad->ndim - 4 + d >= 0 ? grad->stride[grad->ndim - 4 + d] : 0;
        p->dbias = grad->data;
    } else {
        int64_t n;
        RETURN_IF(!attn_mul_ok(p->B * p->Hq, p->Nq, &n) || !attn_mul_ok(n, p->Nk, &n) ||
                      (uint64_t)n > SIZE_MAX / sizeof(float),
                  err, ATTN_ERR_OVERFLOW, "grad_mask: the (B,Hq,Nq,Nk) sum buffer overflows");
        g->owned = malloc(n > 0 ? (size_t)n * sizeof(float) : 1);
        RETURN_IF(!g->owned, err, ATTN_ERR_ALLOC,
                  "grad_mask: cannot allocate the %lld-float sum buffer", (long long)n);
        p->dbs[3] = 1, p->dbs[2] = p->Nk, p->dbs[1] = p->Nq * p->Nk, p->dbs[0] = p->Hq * p->dbs[1];
        p->dbias = g->owned;
    }
    zero_full(p, p->dbias, p->dbs);
    return ATTN_OK;
}

void sdpa_bias_grad_finish(const sdpa_problem *p, sdpa_bias_grad *g, attn_status status)
{
    if (!g->owned) return;
    if (status == ATTN_OK) {
        const attn_tensor *m = g->grad;
        int64_t size[4], stride[4] = {0, 0, 0, 0}, cells = 1;
        for (int d = 0; d < 4; ++d) {
            size[d] = mask_dim(m, d);
            if (m->ndim - 4 + d >= 0) stride[d] = m->stride[m->ndim - 4 + d];
            cells *= size[d];
        }
        /* The broadcast extents: 1 where the mask has the dimension. */
        const int64_t full[4] = {p->B, p->Hq, p->Nq, p->Nk};
        int64_t span[4];
        for (int d = 0; d < 4; ++d) span[d] = size[d] == full[d] ? 1 : full[d];
        float *out = g->grad->data;
#pragma omp parallel for num_threads(p->threads) schedule(static)
        for (int64_t x = 0; x < cells; ++x) {
            const int64_t c3 = x % size[3], c2 = (x / size[3]) % size[2];
            const int64_t c1 = (x / (size[3] * size[2])) % size[1];
            const int64_t c0 = x / (size[3] * size[2] * size[1]);
            double acc = 0.0; /* long sums of terms that cancel: kept in double */
            for (int64_t b = 0; b < span[0]; ++b)
                for (int64_t h = 0; h < span[1]; ++h)
                    for (int64_t i = 0; i < span[2]; ++i)
                        for (int64_t j = 0; j < span[3]; ++j)
                            acc += g->owned[(c0 + b) * p->dbs[0] + (c1 + h) * p->dbs[1] +
                                            (c2 + i) * p->dbs[2] + (c3 + j) * p->dbs[3]];
            out[c0 * stride[0] + c1 * stride[1] + c2 * stride[2] + c3 * stride[3]] = (float)acc;
        }
    }
    free(g->owned);
    g->owned = NULL;
}
