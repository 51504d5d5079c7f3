/* MHA forward up to the attention output, as
 * torch.nn.functional.multi_head_attention_forward:
 *   q = query·Wqᵀ + bq,  k = key·Wkᵀ + bk,  v = value·Wvᵀ + bv
 *   k, v get a bias_k / bias_v row (add_bias_kv), then a zero row
 *   (add_zero_attn); heads are strided views of the (B,N,E) buffers
 *   a = SDPA(q, k, v) per head, heads concatenated
 * (forward.c then projects out = a·Woᵀ + bo; backward.c recomputes this.)
 * torch scales q before Q·Kᵀ, SDPA scales the product: the same math,
 * different float rounding (well inside float32 tolerance). */
#include "attend.h"

#include <string.h>

/* A projection's output rows for an (H,B,N,hd) buffer: N rows per batch,
 * columns in heads of hd, one (B,N,hd) block per head. */
static mha_rows head_major_rows(float *buf, const mha_call *c, int64_t N)
{
    return (mha_rows){.data = buf, .batch = N * c->hd, .ld = c->hd, .group_cols = c->hd,
                      .group_stride = c->B * N * c->hd};
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
        linear_forward_bf16(act->proj, &c->query, B, L, E, P + m->w_q, E, bq, 1, &q, 3 * E, g);
    } else {
        linear_forward_bf16(act->proj, &c->query, B, L, E, P + m->w_q, E, bq, 1, &q, E, g);
        if (kv_one_gemm) {
            linear_forward_bf16(act->proj, &c->key, B, S, c->kdim, P + m->w_k, c->kdim,
                                bq ? bq + E : NULL, 1, &k, 2 * E, g);
        } else {
            linear_forward_bf16(act->proj, &c->key, B, S, c->kdim, P + m->w_k, c->kdim,
                                bq ? bq + E : NULL, 1, &k, E, g);
            linear_forward_bf16(act->proj, &c->value, B, S, c->vdim, P + m->w_v, c->vdim,
                                bq ? bq + 2 * E : NULL, 1, &v, E, g);
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
