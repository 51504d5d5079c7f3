/* MHA forward, as torch.nn.functional.multi_head_attention_forward:
 *   q = query·Wqᵀ + bq,  k = key·Wkᵀ + bk,  v = value·Wvᵀ + bv
 *   k, v get a bias_k / bias_v row (add_bias_kv), then a zero row
 *   (add_zero_attn); heads are strided views of the (B,N,E) buffers
 *   a = SDPA(q, k, v) per head, heads concatenated
 *   out = a·Woᵀ + bo
 * torch scales q before Q·Kᵀ, SDPA scales the product: the same math,
 * different float rounding (well inside float32 tolerance). */
#include "mha.h"

#include <string.h>

attn_tensor mha_head_view(float *buf, const mha_call *c, int64_t N)
{
    attn_tensor t = attn_tensor_4d(buf, c->B, c->H, N, c->hd);
    t.stride[0] = (N > 0 ? N : 1) * c->E; /* positive even when empty */
    t.stride[1] = c->hd;
    t.stride[2] = c->E;
    t.stride[3] = 1;
    return t;
}

attn_tensor mha_head_major_view(float *buf, const mha_call *c, int64_t N)
{
    attn_tensor t = attn_tensor_4d(buf, c->B, c->H, N, c->hd);
    t.stride[0] = (N > 0 ? N : 1) * c->hd; /* positive even when empty */
    t.stride[1] = c->B * t.stride[0];
    return t;
}

/* A projection's output rows for an (H,B,N,hd) buffer: N rows per batch,
 * columns in heads of hd, one (B,N,hd) block per head. */
static mha_rows head_major_rows(float *buf, const mha_call *c, int64_t N)
{
    return (mha_rows){.data = buf, .batch = N * c->hd, .ld = c->hd, .group_cols = c->hd,
                      .group_stride = c->B * N * c->hd};
}

attn_sdpa_opts mha_sdpa_opts(const mha_call *c)
{
    attn_sdpa_opts o = attn_sdpa_opts_default();
    o.causal = c->causal;
    for (int i = 0; i < c->nmask; ++i) o.mask[i] = &c->mask[i];
    o.num_threads = c->threads;
    o.path = c->path;
    o.scale = c->scale; /* 0: 1/sqrt(head_dim), torch's */
    o.dropout_p = c->dropout_p;
    o.dropout_seed = c->dropout_seed;
    return o;
}

attn_status mha_attend(const attn_mha *m, const mha_call *c, const mha_acts *act,
                       attn_tensor *stats, attn_tensor *weights, attn_error *err)
{
    const int64_t B = c->B, L = c->L, S = c->S, Sp = c->Sp, E = c->E;
    const float *P = m->params;
    const float *bq = m->b_in != SIZE_MAX ? P + m->b_in : NULL;
    const int64_t hd = c->hd, H = c->H;
    const mha_rows q = head_major_rows(act->q, c, L), k = head_major_rows(act->k, c, Sp),
                   v = head_major_rows(act->v, c, Sp);

    /* In-projections (the packed in_proj_weight's rows are q, k, v). Outputs
     * that are consecutive heads of one buffer, projected from one input with
     * consecutive weight rows, are one GEMM: the input is read once, and the
     * bits are those of separate GEMMs (each element's K order is the same).
     * That is q, k and v when query = key = value and no key is appended,
     * else k and v when key = value. */
    const linear_engine g = mha_gemm_of(c);
    const bool kv_one_input = c->key.data == c->value.data && c->key.ld == c->value.ld &&
                              c->key.batch == c->value.batch && c->kdim == c->vdim;
    const bool kv_one_gemm = kv_one_input && m->w_v == m->w_k + (size_t)(E * c->kdim) &&
                             act->v == act->k + B * Sp * E;
    if (c->self && kv_one_gemm && Sp == L && m->w_k == m->w_q + (size_t)(E * E) &&
        act->k == act->q + B * L * E) {
        linear_forward(&c->query, B, L, E, P + m->w_q, E, bq, 1, &q, 3 * E, g);
    } else {
        linear_forward(&c->query, B, L, E, P + m->w_q, E, bq, 1, &q, E, g);
        if (kv_one_gemm) {
            linear_forward(&c->key, B, S, c->kdim, P + m->w_k, c->kdim, bq ? bq + E : NULL, 1, &k,
                           2 * E, g);
        } else {
            linear_forward(&c->key, B, S, c->kdim, P + m->w_k, c->kdim, bq ? bq + E : NULL, 1, &k,
                           E, g);
            linear_forward(&c->value, B, S, c->vdim, P + m->w_v, c->vdim, bq ? bq + 2 * E : NULL,
                           1, &v, E, g);
        }
    }

    /* Appended keys: bias_k/bias_v first, then the zero row (zeros in every
     * head's slice of the row). */
    for (int64_t h = 0; h < H; ++h)
        for (int64_t b = 0; b < B; ++b) {
            const int64_t row = ((h * B + b) * Sp + S) * hd;
            int64_t j = 0;
            if (m->bias_k != SIZE_MAX) {
                memcpy(act->k + row, P + m->bias_k + h * hd, (size_t)hd * sizeof(float));
                memcpy(act->v + row, P + m->bias_v + h * hd, (size_t)hd * sizeof(float));
                ++j;
            }
            if (m->cfg.add_zero_attn) {
                memset(act->k + row + j * hd, 0, (size_t)hd * sizeof(float));
                memset(act->v + row + j * hd, 0, (size_t)hd * sizeof(float));
            }
        }

    attn_tensor qh = mha_head_major_view(act->q, c, L), kh = mha_head_major_view(act->k, c, Sp),
                vh = mha_head_major_view(act->v, c, Sp), ah = mha_head_view(act->a, c, L);
    attn_sdpa_opts o = mha_sdpa_opts(c);
    o.softmax_stats = stats;
    o.workspace = act->sdpa_ws;
    o.workspace_size = act->sdpa_ws_size;
    return attn_sdpa(&qh, &kh, &vh, &ah, NULL, weights, &o, err);
}

/* q (B,L,E), k, v (B,Sp,E), a (B,L,E) in this order (see mha_acts). Sizes
 * were overflow-checked. */
size_t mha_forward_act_bytes(const mha_call *c)
{
    const size_t nq = (size_t)(c->B * c->L * c->E), nk = (size_t)(c->B * c->Sp * c->E);
    return (2 * nq + 2 * nk) * sizeof(float);
}

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

static attn_status forward(const attn_mha *m, mha_call *c, attn_tensor *out,
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
    const size_t nq = (size_t)(c->B * c->L * c->E), nk = (size_t)(c->B * c->Sp * c->E);
    float *buf;
    void *sdpa_ws;
    size_t sdpa_ws_size;
    RETURN_IF_ERROR(mha_workspace(c, opts, false, mha_forward_act_bytes(c), &buf, &sdpa_ws,
                                  &sdpa_ws_size, err));
    /* (attn_sdpa_workspace_size knows nothing of a weights output, which
     * may change the attention's tiling: then it allocates its own.) */
    mha_acts act = {.q = buf, .k = buf + nq, .v = buf + nq + nk, .a = buf + nq + 2 * nk,
                    .sdpa_ws = w ? NULL : sdpa_ws, .sdpa_ws_size = w ? 0 : sdpa_ws_size};

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
        linear_forward(&a, c->B, c->L, c->E, P + m->w_out, c->E, bo, 1, &dst, c->E, mha_gemm_of(c));
    } else {
        const mha_rows tmp = mha_rows_dense(act.q, c->L, c->E); /* q is no longer needed */
        linear_forward(&a, c->B, c->L, c->E, P + m->w_out, c->E, bo, 1, &tmp, c->E, mha_gemm_of(c));
        mha_rows_scatter(act.q, out, c->batched, c->B, c->L, c->E);
    }
    return ATTN_OK;
}

attn_status attn_mha_forward(const attn_mha *m, const attn_tensor *query, const attn_tensor *key,
                             const attn_tensor *value, attn_tensor *out,
                             const attn_mha_opts *opts, attn_error *err)
{
    mha_call c;
    RETURN_IF_ERROR(mha_call_init(&c, m, query, key, value, opts, err));
    attn_status s = forward(m, &c, out, opts, err);
    mha_call_free(&c);
    if (s == ATTN_OK) attn_ok(err);
    return s;
}
