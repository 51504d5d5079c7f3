/*
 * bfloat16 and float16 tensors of an SDPA call, seen through float32
 * copies: an input is widened into a contiguous float32 copy before the
 * path runs, an output is computed into a float32 buffer and rounded into
 * the caller's tensor (to nearest even) only after the path succeeded, so a
 * failed call leaves every output untouched. The fused forward needs none
 * of this (it widens Q's rows and K and V's tiles itself and rounds O into
 * place as each row finishes, after the last point where it can fail);
 * the backward's tensors and the reference path's are staged. The
 * copies cost O(B·H·N·D) memory and one pass each, next to the O(N²)
 * attention they feed.
 */
#include "problem.h"

#include <stdlib.h>

/* A contiguous float32 buffer shaped like t into *buf, its strides into
 * strides. (A call stages at most its 8 tensors: SDPA_MAX_STAGED.) */
static attn_status contiguous_float(sdpa_staging *s, const attn_tensor *t, const char *name,
                                    float **buf, int64_t *strides, attn_error *err)
{
    const int64_t n = attn_tensor_numel(t);
    *buf = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    RETURN_IF(!*buf, err, ATTN_ERR_ALLOC, "%s: cannot allocate a float32 copy of %lld elements",
              name, (long long)n);
    s->owned[s->nowned++] = *buf;
    int64_t stride = 1;
    for (int d = t->ndim - 1; d >= 0; --d) {
        strides[d] = stride;
        stride *= t->shape[d];
    }
    return ATTN_OK;
}

static attn_tensor float_view(float *data, const attn_tensor *like, const int64_t *strides)
{
    attn_tensor v = *like;
    v.data = data;
    v.dtype = ATTN_F32;
    for (int d = 0; d < like->ndim; ++d) v.stride[d] = strides[d];
    return v;
}

attn_status sdpa_stage_in(sdpa_staging *s, const attn_tensor *t, const char *name,
                          const float **data, int64_t *strides, attn_error *err)
{
    if (!t || t->dtype == ATTN_F32) return ATTN_OK;
    float *buf;
    RETURN_IF_ERROR(contiguous_float(s, t, name, &buf, strides, err));
    attn_tensor copy = float_view(buf, t, strides);
    attn_tensor_convert_unchecked(t, &copy);
    *data = buf;
    return ATTN_OK;
}

attn_status sdpa_stage_out(sdpa_staging *s, attn_tensor *t, const char *name, float **data,
                           int64_t *strides, attn_error *err)
{
    if (!t || t->dtype == ATTN_F32) return ATTN_OK;
    float *buf;
    RETURN_IF_ERROR(contiguous_float(s, t, name, &buf, strides, err));
    s->out[s->nout].buf = buf;
    s->out[s->nout].dst = t;
    for (int d = 0; d < t->ndim; ++d) s->out[s->nout].strides[d] = strides[d];
    s->nout++;
    *data = buf;
    return ATTN_OK;
}

void sdpa_staging_finish(sdpa_staging *s, attn_status status)
{
    for (int i = 0; status == ATTN_OK && i < s->nout; ++i) {
        const attn_tensor src = float_view(s->out[i].buf, s->out[i].dst, s->out[i].strides);
        attn_tensor_convert_unchecked(&src, s->out[i].dst);
    }
    for (int i = 0; i < s->nowned; ++i) free(s->owned[i]);
    s->nowned = s->nout = 0;
}
