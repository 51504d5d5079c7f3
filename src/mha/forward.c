/* MHA forward pass: the attention output (attend.c), the weights averaged
 * over heads when asked for, then the out-projection out = a·Woᵀ + bo. */
#include "passes.h"

/* Checks the weights output: (B,L,Sp) averaged or (B,H,L,Sp) per head,
 * without B when unbatched. */
static attn_status check_weights(const attn_tensor *w, bool per_head, const mha_call *c,
                                 attn_error *err)
{
    int64_t want[4];
    int n = 0;
    if (c->batched) want[n++] = c->B;
    if (per_head) want[n++] = c->H;
    want[n++] = c->L;
    want[n++] = c->Sp;
    RETURN_IF_ERROR(attn_check_tensor(w, "weights", n, ATTN_F32, attn_tensor_numel(w) > 0, err));
    for (int i = 0; i < n; ++i)
        RETURN_IF(w->shape[i] != want[i], err, ATTN_ERR_SHAPE,
                  "weights: size %lld in dimension %d, expected %lld (shape %s(%sL, S'), "
                  "S' = %lld counting appended keys)",
                  (long long)w->shape[i], i, (long long)want[i], per_head ? "per head " : "",
                  c->batched ? (per_head ? "B, H, " : "B, ") : (per_head ? "H, " : ""),
                  (long long)c->Sp);
    return ATTN_OK;
}

/* Per-head weights view of the caller's tensor as (B,H,L,Sp). */
static attn_tensor weights_4d(const attn_tensor *w, bool batched)
{
    if (batched) return *w;
    attn_tensor t = *w;
    t.ndim = 4;
    for (int i = 3; i > 0; --i) {
        t.shape[i] = w->shape[i - 1];
        t.stride[i] = w->stride[i - 1];
    }
    t.shape[0] = 1;
    t.stride[0] = 0;
    return t;
}

attn_status mha_forward_pass(const attn_mha *m, mha_call *c, attn_tensor *out,
                             const attn_mha_opts *opts, attn_error *err)
{
    RETURN_IF_ERROR(mha_check_rows_view(out, "out", c, c->L, c->E, true, err));
    attn_tensor *w = opts ? opts->weights : NULL;
    const bool per_head = opts && opts->per_head_weights;
    if (w) RETURN_IF_ERROR(check_weights(w, per_head, c, err));
    const attn_tensor *outs[2] = {out, w};
    static const char *const out_names[2] = {"out", "weights"};
    RETURN_IF_ERROR(attn_check_call_memory(outs, out_names, 2, NULL, NULL, 0,
                                           opts ? opts->workspace : NULL,
                                           opts ? opts->workspace_size : 0, err));
    if (c->B == 0 || c->L == 0) return ATTN_OK; /* out and weights are empty */

    /* The activations and the attention's scratch, from the caller's
     * workspace or allocated; plus (B,H,L,Sp) only when averaged weights are
     * requested. */
    mha_acts act;
    RETURN_IF_ERROR(mha_acts_init(c, opts, false, &act, err));

    attn_tensor heads_w, *sdpa_w = NULL;
    float *avg = NULL;
    if (w && per_head) {
        heads_w = weights_4d(w, c->batched);
        sdpa_w = &heads_w;
    } else if (w) {
        const size_t nw = (size_t)(c->B * c->H * c->L * c->Sp);
        avg = mha_call_alloc(c, nw * sizeof(float), "weights workspace", err);
        if (!avg) return ATTN_ERR_ALLOC; /* mha_call_alloc fails only so */
        heads_w = attn_tensor_4d(avg, c->B, c->H, c->L, c->Sp);
        sdpa_w = &heads_w;
    }

    RETURN_IF_ERROR(mha_attend(m, c, &act, NULL, sdpa_w, err));

    if (avg) { /* torch: weights.sum(dim=1) / num_heads */
        const int64_t ls = c->L * c->Sp;
        const int o = c->batched ? 1 : 0;
        float *wd = w->data;
        for (int64_t b = 0; b < c->B; ++b)
            for (int64_t i = 0; i < c->L; ++i)
                for (int64_t j = 0; j < c->Sp; ++j) {
                    float s = 0.0f;
                    for (int64_t h = 0; h < c->H; ++h)
                        s += avg[(b * c->H + h) * ls + i * c->Sp + j];
                    wd[(c->batched ? b * w->stride[0] : 0) + i * w->stride[o] +
                       j * w->stride[o + 1]] = s / (float)c->H;
                }
    }

    /* out = a·Woᵀ + bo, straight into out when its layout allows. */
    const float *P = m->params;
    const float *bo = m->b_out != SIZE_MAX ? P + m->b_out : NULL;
    const mha_rows a = mha_rows_dense(act.a, c->L, c->E);
    mha_rows dst;
    if (mha_rows_direct(out, c->batched, c->E, &dst)) {
        linear_forward_bf16(act.proj, &a, c->B, c->L, c->E, P + m->w_out, c->E, bo, 1, &dst, c->E,
                            mha_gemm_of(c));
    } else {
        const mha_rows tmp = mha_rows_dense(act.q, c->L, c->E); /* q is no longer needed */
        linear_forward_bf16(act.proj, &a, c->B, c->L, c->E, P + m->w_out, c->E, bo, 1, &tmp, c->E,
                            mha_gemm_of(c));
        mha_rows_scatter(act.q, out, c->batched, c->B, c->L, c->E);
    }
    return ATTN_OK;
}
