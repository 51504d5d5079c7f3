/* The call's buffers: allocations it owns, inputs and outputs as row
 * matrices the GEMM reads and writes, head views of the activations, the
 * SDPA options, and the activations' and the attention's places in the
 * caller's workspace. */
#include "buffers.h"

#include <stdlib.h>
#include <string.h>

void *mha_call_alloc(mha_call *c, size_t bytes, const char *what, attn_error *err)
{
    if (c->nowned >= (int)(sizeof c->owned / sizeof c->owned[0])) {
        attn_fail(err, ATTN_ERR_ALLOC, "%s: too many buffers", what);
        return NULL;
    }
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        attn_fail(err, ATTN_ERR_ALLOC, "%s: cannot allocate %zu bytes", what, bytes);
        return NULL;
    }
    c->owned[c->nowned++] = p;
    return p;
}

void mha_call_free(mha_call *c)
{
    for (int i = 0; i < c->nowned; ++i) free(c->owned[i]);
    c->nowned = 0;
}

bool mha_rows_direct(const attn_tensor *t, bool batched, int64_t C, mha_rows *out)
{
    const int o = batched ? 1 : 0;
    const int64_t B = batched ? t->shape[0] : 1, M = t->shape[o];
    const int64_t sb = batched ? t->stride[0] : 0, sm = t->stride[o], sc = t->stride[o + 1];
    if (C > 1 && sc != 1) return false;
    if (M > 1 && sm < C) return false; /* overlapping, broadcast or reversed rows */
    if (B > 1 && sb < 0) return false;
    const int64_t ld = M > 1 ? sm : C;
    *out = (mha_rows){.data = t->data, .batch = B > 1 ? sb : M * ld, .ld = ld};
    return true;
}

attn_status mha_rows_input(mha_call *c, const attn_tensor *t, int64_t M, int64_t C,
                           const char *name, mha_rows *out, attn_error *err)
{
    if (mha_rows_direct(t, c->batched, C, out)) return ATTN_OK;
    /* Sizes were overflow-checked with the call. */
    const int64_t B = c->B;
    float *p = mha_call_alloc(c, (size_t)(B * M * C) * sizeof(float), name, err);
    if (!p) return ATTN_ERR_ALLOC; /* mha_call_alloc fails only so */
    const int o = c->batched ? 1 : 0;
    const int64_t sb = c->batched ? t->stride[0] : 0, sm = t->stride[o], sc = t->stride[o + 1];
    const float *src = t->data;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < M; ++i)
            for (int64_t x = 0; x < C; ++x)
                p[(b * M + i) * C + x] = src[b * sb + i * sm + x * sc];
    *out = mha_rows_dense(p, M, C);
    return ATTN_OK;
}

void mha_rows_scatter(const float *src, const attn_tensor *dst, bool batched, int64_t B,
                      int64_t M, int64_t C)
{
    const int o = batched ? 1 : 0;
    const int64_t sb = batched ? dst->stride[0] : 0, sm = dst->stride[o], sc = dst->stride[o + 1];
    float *d = dst->data;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < M; ++i)
            for (int64_t x = 0; x < C; ++x) d[b * sb + i * sm + x * sc] = src[(b * M + i) * C + x];
}

void mha_rows_zero(const attn_tensor *dst, bool batched, int64_t B, int64_t M, int64_t C)
{
    const int o = batched ? 1 : 0;
    const int64_t sb = batched ? dst->stride[0] : 0, sm = dst->stride[o], sc = dst->stride[o + 1];
    float *d = dst->data;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < M; ++i)
            for (int64_t x = 0; x < C; ++x) d[b * sb + i * sm + x * sc] = 0.0f;
}

/* ---------------------------------------------------------- head views */

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
    o.precision = c->precision;
    return o;
}

/* ----------------------------------------------------------- workspace */

/* q (B,L,E), k, v (B,Sp,E), a (B,L,E) in this order (see mha_acts). Sizes
 * were overflow-checked. */
size_t mha_forward_act_bytes(const mha_call *c)
{
    const size_t nq = (size_t)(c->B * c->L * c->E), nk = (size_t)(c->B * c->Sp * c->E);
    return (2 * nq + 2 * nk) * sizeof(float);
}

/* q (B,L,E), k, v (B,Sp,E), a (B,L,E) in this order (see mha_acts); da, dq
 * (B,L,E); dk, dv (B,Sp,E); the softmax statistics (B,H,L,2). Sizes were
 * overflow-checked. */
size_t mha_backward_act_bytes(const mha_call *c)
{
    const size_t nq = (size_t)(c->B * c->L * c->E), nk = (size_t)(c->B * c->Sp * c->E);
    return (4 * nq + 4 * nk + (size_t)(2 * c->B * c->H * c->L)) * sizeof(float);
}

/* Bytes of the attention's workspace for this call's head views (shapes and
 * strides only, so the views may point anywhere): the forward's, or for a
 * backward the larger of its recomputing forward's and its own (they run one
 * after the other in the same bytes). */
static attn_status sdpa_bytes(const mha_call *c, bool backward, size_t *bytes, attn_error *err)
{
    static float probe; /* the views' data: never read */
    attn_tensor qh = mha_head_major_view(&probe, c, c->L),
                kh = mha_head_major_view(&probe, c, c->Sp), vh = kh;
    attn_sdpa_opts o = mha_sdpa_opts(c);
    RETURN_IF_ERROR(attn_sdpa_workspace_size(&qh, &kh, &vh, false, &o, bytes, err));
    size_t bwd = 0;
    if (backward) RETURN_IF_ERROR(attn_sdpa_workspace_size(&qh, &kh, &vh, true, &o, &bwd, err));
    if (bwd > *bytes) *bytes = bwd;
    return ATTN_OK;
}

/* Bytes of the bf16 projections' pair operands (0 without an engine): the
 * largest of the in-projections (q, k and v in one GEMM at most), the
 * out-projection and their gradients. */
static size_t pair_bytes(const mha_call *c)
{
    const int64_t q = linear_bf16_words(c->bf16, c->B * c->L, c->E, 3 * c->E);
    const int64_t k = linear_bf16_words(c->bf16, c->B * c->S, c->kdim, 2 * c->E);
    const int64_t v = linear_bf16_words(c->bf16, c->B * c->S, c->vdim, c->E);
    const int64_t m = q > k ? (q > v ? q : v) : (k > v ? k : v);
    return (size_t)m * sizeof(uint32_t);
}

/* Up to 63 bytes to align the caller's pointer, the activations in whole
 * cache lines, then the attention's part (which the bf16 projections'
 * pairs share). */
static size_t workspace_total(size_t act_bytes, size_t sdpa)
{
    return 63 + (act_bytes + 63) / 64 * 64 + sdpa;
}

attn_status mha_workspace(mha_call *c, const attn_mha_opts *opts, bool backward,
                          size_t act_bytes, float **act, void **sdpa_ws, size_t *sdpa_ws_size,
                          attn_error *err)
{
    *sdpa_ws = NULL;
    *sdpa_ws_size = 0;
    if (!opts || !opts->workspace) {
        *act = mha_call_alloc(c, act_bytes, "workspace", err);
        return *act ? ATTN_OK : ATTN_ERR_ALLOC;
    }
    size_t sdpa;
    RETURN_IF_ERROR(sdpa_bytes(c, backward, &sdpa, err));
    if (pair_bytes(c) > sdpa) sdpa = pair_bytes(c);
    const size_t skew = (64 - (uintptr_t)opts->workspace % 64) % 64;
    const size_t act_span = (act_bytes + 63) / 64 * 64;
    RETURN_IF(opts->workspace_size < skew + act_span + sdpa, err, ATTN_ERR_WORKSPACE,
              "workspace: %zu bytes given, %zu needed (attn_mha_workspace_size)",
              opts->workspace_size, workspace_total(act_bytes, sdpa));
    *act = (float *)((char *)opts->workspace + skew);
    *sdpa_ws = (char *)*act + act_span;
    *sdpa_ws_size = opts->workspace_size - skew - act_span;
    return ATTN_OK;
}

attn_status mha_acts_init(mha_call *c, const attn_mha_opts *opts, bool backward, mha_acts *act,
                          attn_error *err)
{
    const size_t nq = (size_t)(c->B * c->L * c->E), nk = (size_t)(c->B * c->Sp * c->E);
    const size_t bytes = backward ? mha_backward_act_bytes(c) : mha_forward_act_bytes(c);
    float *buf;
    RETURN_IF_ERROR(
        mha_workspace(c, opts, backward, bytes, &buf, &act->sdpa_ws, &act->sdpa_ws_size, err));
    act->q = buf, act->k = buf + nq, act->v = buf + nq + nk, act->a = buf + nq + 2 * nk;
    act->proj = (linear_bf16){c->bf16, NULL, 0};
    if (c->bf16 && !c->reference) {
        const size_t pairs = act->sdpa_ws ? act->sdpa_ws_size : pair_bytes(c);
        act->proj.scratch =
            act->sdpa_ws ? act->sdpa_ws : mha_call_alloc(c, pairs, "workspace", err);
        if (!act->proj.scratch) return ATTN_ERR_ALLOC;
        act->proj.words = (int64_t)(pairs / sizeof(uint32_t));
    }
    return ATTN_OK;
}

attn_status mha_workspace_bytes(const mha_call *c, bool backward, size_t *bytes,
                                attn_error *err)
{
    size_t sdpa = 0;
    RETURN_IF_ERROR(sdpa_bytes(c, backward, &sdpa, err));
    if (pair_bytes(c) > sdpa) sdpa = pair_bytes(c);
    const size_t act = backward ? mha_backward_act_bytes(c) : mha_forward_act_bytes(c);
    *bytes = workspace_total(act, sdpa);
    return ATTN_OK;
}
