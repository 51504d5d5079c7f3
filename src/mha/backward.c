/* MHA backward. Recomputes the forward activations (projections and the
 * attention output, with the LSE SDPA's backward needs), then walks the
 * forward steps in reverse. Parameter gradients accumulate into the
 * module's grad buffer; input gradients are overwritten. */
#include "passes.h"

/* Gradient output for an input (B,M,C): the caller's view when the GEMM
 * can write it, else a scratch buffer scattered afterwards. */
typedef struct {
    attn_tensor *view;
    mha_rows rows;
    bool scatter;
} grad_out;

static attn_status bind_grad(mha_call *c, attn_tensor *t, const char *name, int64_t M, int64_t C,
                             grad_out *g, attn_error *err)
{
    g->view = t;
    g->scatter = false;
    if (!t) return ATTN_OK;
    RETURN_IF_ERROR(mha_check_rows_view(t, name, c, M, C, true, err));
    if (mha_rows_direct(t, c->batched, C, &g->rows)) return ATTN_OK;
    float *p = mha_call_alloc(c, (size_t)(c->B * M * C) * sizeof(float), name, err);
    if (!p) return ATTN_ERR_ALLOC; /* mha_call_alloc fails only so */
    g->rows = mha_rows_dense(p, M, C);
    g->scatter = true;
    return ATTN_OK;
}

static void finish_grad(const mha_call *c, const grad_out *g, int64_t M, int64_t C)
{
    if (g->view && g->scatter) mha_rows_scatter(g->rows.data, g->view, c->batched, c->B, M, C);
}

/* No gradient output may share memory with an input, another output or
 * the workspace (all checked views). */
static attn_status check_disjoint(const attn_tensor *const outs[3], const attn_tensor *const ins[4],
                                  const attn_mha_opts *opts, attn_error *err)
{
    static const char *const out_names[3] = {"dquery", "dkey", "dvalue"};
    static const char *const in_names[4] = {"query", "key", "value", "dout"};
    return attn_check_call_memory(outs, out_names, 3, ins, in_names, 4,
                                  opts ? opts->workspace : NULL, opts ? opts->workspace_size : 0,
                                  err);
}

attn_status mha_backward_pass(attn_mha *m, mha_call *c, const attn_tensor *const ins[4],
                              attn_tensor *dquery, attn_tensor *dkey, attn_tensor *dvalue,
                              const attn_mha_opts *opts, attn_error *err)
{
    const attn_tensor *dout = ins[3];
    const int64_t B = c->B, L = c->L, S = c->S, Sp = c->Sp, E = c->E, H = c->H;
    RETURN_IF_ERROR(mha_check_rows_view(dout, "dout", c, L, E, false, err));
    if (c->self) {
        RETURN_IF(dkey, err, ATTN_ERR_ARG,
                  "dkey: must be NULL for self-attention (dquery receives the gradient of the "
                  "shared input)");
        RETURN_IF(dvalue, err, ATTN_ERR_ARG,
                  "dvalue: must be NULL for self-attention (dquery receives the gradient of the "
                  "shared input)");
    }
    grad_out gq, gk, gv;
    RETURN_IF_ERROR(bind_grad(c, dquery, "dquery", L, E, &gq, err));
    RETURN_IF_ERROR(bind_grad(c, dkey, "dkey", S, c->kdim, &gk, err));
    RETURN_IF_ERROR(bind_grad(c, dvalue, "dvalue", S, c->vdim, &gv, err));
    const attn_tensor *outs[3] = {dquery, dkey, dvalue};
    RETURN_IF_ERROR(check_disjoint(outs, ins, opts, err));
    mha_rows dy;
    RETURN_IF_ERROR(mha_rows_input(c, dout, L, E, "dout", &dy, err));
    if (B == 0 || L == 0) { /* no output: no gradient reaches anything */
        if (dkey) mha_rows_zero(dkey, c->batched, B, S, c->kdim);
        if (dvalue) mha_rows_zero(dvalue, c->batched, B, S, c->vdim);
        return ATTN_OK;
    }

    /* The activations, then the gradients and statistics (see
     * mha_backward_act_bytes), then the attention's scratch. */
    mha_acts act;
    RETURN_IF_ERROR(mha_acts_init(c, opts, true, &act, err));
    const size_t nq = (size_t)(B * L * E), nk = (size_t)(B * Sp * E);
    float *da = act.a + nq, *dq = da + nq, *dk = dq + nq, *dv = dk + nk;
    float *stats = dv + nk;

    /* Recompute the forward up to the attention output. */
    attn_tensor stats_view = attn_tensor_4d(stats, B, H, L, 2);
    RETURN_IF_ERROR(mha_attend(m, c, &act, &stats_view, NULL, err));

    const float *P = m->params;
    float *G = m->grads;
    const bool has_bias = m->b_in != SIZE_MAX;
    float *gb_in = has_bias ? G + m->b_in : NULL;
    const linear_engine th = mha_gemm_of(c);

    /* In the forward pass out = a·Woᵀ + bo, so dWo += doutᵀ·a, dbo += Σ dout
     * and da = dout·Wo. */
    const mha_rows a = mha_rows_dense(act.a, L, E), dar = mha_rows_dense(da, L, E);
    linear_backward_params_bf16(act.proj, &dy, &a, B, L, E, E, G + m->w_out, E,
                                m->b_out != SIZE_MAX ? G + m->b_out : NULL, 1, th);
    linear_backward_input_bf16(act.proj, &dy, B, L, E, P + m->w_out, E, &dar, E, false, th);

    /* In the forward pass a = SDPA(q, k, v) per head; SDPA's backward gives
     * dq, dk, dv for every key row, appended ones included. */
    attn_tensor qh = mha_head_major_view(act.q, c, L), kh = mha_head_major_view(act.k, c, Sp),
                vh = mha_head_major_view(act.v, c, Sp), ah = mha_head_view(act.a, c, L),
                dah = mha_head_view(da, c, L), dqh = mha_head_view(dq, c, L),
                dkh = mha_head_view(dk, c, Sp), dvh = mha_head_view(dv, c, Sp);
    attn_sdpa_opts o = mha_sdpa_opts(c);
    o.softmax_stats = &stats_view;
    o.workspace = act.sdpa_ws; /* the recomputing forward's bytes, free again */
    o.workspace_size = act.sdpa_ws_size;
    RETURN_IF_ERROR(attn_sdpa_backward(&qh, &kh, &vh, &ah, NULL, &dah, &dqh, &dkh, &dvh, &o, err));

    /* In the forward pass row S of k (v) was bias_k (bias_v) in every batch,
     * so their gradients sum that row over the batch. The zero row that
     * add_zero_attn appends has no parameters. */
    if (m->bias_k != SIZE_MAX) {
        float *gk_bias = G + m->bias_k, *gv_bias = G + m->bias_v;
        for (int64_t b = 0; b < B; ++b)
            for (int64_t e = 0; e < E; ++e) {
                gk_bias[e] += dk[(b * Sp + S) * E + e];
                gv_bias[e] += dv[(b * Sp + S) * E + e];
            }
    }

    /* In the forward pass q = query·Wqᵀ + bq (k, v likewise over their first
     * S rows), so dW += dᵀ·input, db += Σ d, dinput = d·W. */
    const mha_rows dqr = mha_rows_dense(dq, L, E), dkr = mha_rows_dense(dk, Sp, E),
                   dvr = mha_rows_dense(dv, Sp, E);
    linear_backward_params_bf16(act.proj, &dqr, &c->query, B, L, E, E, G + m->w_q, E, gb_in, 1, th);
    linear_backward_params_bf16(act.proj, &dkr, &c->key, B, S, E, c->kdim, G + m->w_k, c->kdim,
                                has_bias ? gb_in + E : NULL, 1, th);
    linear_backward_params_bf16(act.proj, &dvr, &c->value, B, S, E, c->vdim, G + m->w_v, c->vdim,
                                has_bias ? gb_in + 2 * E : NULL, 1, th);

    if (gq.view)
        linear_backward_input_bf16(act.proj, &dqr, B, L, E, P + m->w_q, E, &gq.rows, E, false, th);
    if (c->self) {
        /* key = value = query: the three paths sum into one gradient. */
        if (gq.view) {
            linear_backward_input_bf16(act.proj, &dkr, B, S, E, P + m->w_k, E, &gq.rows, E, true,
                                       th);
            linear_backward_input_bf16(act.proj, &dvr, B, S, E, P + m->w_v, E, &gq.rows, E, true,
                                       th);
        }
    } else {
        if (gk.view)
            linear_backward_input_bf16(act.proj, &dkr, B, S, E, P + m->w_k, c->kdim, &gk.rows,
                                       c->kdim, false, th);
        if (gv.view)
            linear_backward_input_bf16(act.proj, &dvr, B, S, E, P + m->w_v, c->vdim, &gv.rows,
                                       c->vdim, false, th);
    }
    finish_grad(c, &gq, L, E);
    finish_grad(c, &gk, S, c->kdim);
    finish_grad(c, &gv, S, c->vdim);
    return ATTN_OK;
}
