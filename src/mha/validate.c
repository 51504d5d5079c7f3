/* Validation of an MHA forward/backward call: module, options, inputs (as
 * row matrices) and the conversion of torch-MHA masks to SDPA masks.
 *
 * Mask semantics (torch >= 2.0's, and torch 1.13's wherever 1.13 is
 * self-consistent): every mask becomes an additive float mask — bool true
 * (blocked) is -inf, a float mask is added as is — and the masks are summed.
 * causal is a bool attn_mask triu(ones(L,S), 1). Appended keys (bias_k, zero
 * attention) are never masked. torch 1.13 differs only for a float
 * key_padding_mask next to an attn_mask (or causal): with a bool attn_mask
 * it treats the float mask as bool (nonzero = blocked); with a float
 * attn_mask its masked_fill drops the key_padding_mask altogether. */
#include "validate.h"
#include "../kernels/kernels.h"

#include <math.h>
#include <string.h>

attn_status mha_check_rows_view(const attn_tensor *t, const char *name, const mha_call *c,
                                int64_t M, int64_t C, bool is_output, attn_error *err)
{
    const int nd = c->batched ? 3 : 2;
    RETURN_IF(!t, err, ATTN_ERR_NULL, "%s: tensor is NULL", name);
    RETURN_IF(t->ndim != nd, err, ATTN_ERR_SHAPE, "%s: expected %d dimensions (%s), got %d", name,
              nd, c->batched ? "batched like query" : "unbatched like query", t->ndim);
    /* An empty output has nothing to write, so any strides will do. */
    RETURN_IF_ERROR(attn_check_tensor(t, name, nd, ATTN_F32, is_output && attn_tensor_numel(t) > 0,
                                      err));
    const int64_t *sh = t->shape + (c->batched ? 1 : 0);
    RETURN_IF(c->batched && t->shape[0] != c->B, err, ATTN_ERR_SHAPE,
              "%s: batch size is %lld, expected %lld", name, (long long)t->shape[0],
              (long long)c->B);
    RETURN_IF(sh[0] != M, err, ATTN_ERR_SHAPE, "%s: sequence length is %lld, expected %lld",
              name, (long long)sh[0], (long long)M);
    RETURN_IF(sh[1] != C, err, ATTN_ERR_SHAPE, "%s: feature size is %lld, expected %lld", name,
              (long long)sh[1], (long long)C);
    return ATTN_OK;
}

/* --------------------------------------------------------------- masks */

static attn_status check_mask_dtype(const attn_tensor *t, const char *name, attn_error *err)
{
    RETURN_IF(t->dtype != ATTN_BOOL && t->dtype != ATTN_F32, err, ATTN_ERR_DTYPE,
              "%s: must be bool or float32", name);
    return ATTN_OK;
}

/* Element j of the SDPA mask row for key j of a torch-MHA mask row:
 * bool flips (torch true = blocked, SDPA true = attend), float is kept;
 * appended keys (j >= S) are allowed; causal blocks j > i for j < S. */
static void convert_row(void *dst, const attn_tensor *t, const void *src, int64_t stride, int64_t S,
                        int64_t Sp, int64_t causal_row)
{
    if (t->dtype == ATTN_BOOL) {
        const uint8_t *s = src;
        uint8_t *d = dst;
        for (int64_t j = 0; j < S; ++j) d[j] = !s[j * stride] && !(causal_row >= 0 && j > causal_row);
        for (int64_t j = S; j < Sp; ++j) d[j] = 1;
    } else {
        const float *s = src;
        float *d = dst;
        for (int64_t j = 0; j < S; ++j)
            d[j] = causal_row >= 0 && j > causal_row ? -INFINITY : s[j * stride];
        for (int64_t j = S; j < Sp; ++j) d[j] = 0.0f;
    }
}

static int64_t elem_size(attn_dtype dt)
{
    return dt == ATTN_BOOL ? 1 : (int64_t)sizeof(float);
}

/* key_padding_mask (B,S) [unbatched (S)] -> SDPA mask (B,1,1,Sp). */
static attn_status convert_key_padding(mha_call *c, const attn_tensor *t, attn_error *err)
{
    const char *name = "key_padding_mask";
    RETURN_IF_ERROR(check_mask_dtype(t, name, err));
    const int nd = c->batched ? 2 : 1;
    RETURN_IF(t->ndim != nd, err, ATTN_ERR_SHAPE, "%s: expected %s, got %d dimensions", name,
              c->batched ? "(batch, source length)" : "(source length) for unbatched input",
              t->ndim);
    RETURN_IF_ERROR(attn_check_tensor(t, name, nd, t->dtype, false, err));
    RETURN_IF(c->batched && t->shape[0] != c->B, err, ATTN_ERR_SHAPE,
              "%s: batch size is %lld, expected %lld", name, (long long)t->shape[0],
              (long long)c->B);
    RETURN_IF(t->shape[nd - 1] != c->S, err, ATTN_ERR_SHAPE,
              "%s: source length is %lld, expected %lld (key length)", name,
              (long long)t->shape[nd - 1], (long long)c->S);
    const int64_t sb = c->batched ? t->stride[0] : 0, ss = t->stride[nd - 1];

    attn_tensor *v = &c->mask[c->nmask++];
    memset(v, 0, sizeof *v);
    v->dtype = t->dtype;
    v->ndim = 4;
    v->shape[0] = c->B;
    v->shape[1] = v->shape[2] = 1;
    v->shape[3] = c->Sp;
    if (t->dtype == ATTN_F32 && c->Sp == c->S) { /* usable as is */
        v->data = t->data;
        v->stride[0] = sb;
        v->stride[3] = ss;
        return ATTN_OK;
    }
    const int64_t es = elem_size(t->dtype);
    char *d = mha_call_alloc(c, (size_t)(c->B * c->Sp * es), name, err);
    if (!d) return ATTN_ERR_ALLOC; /* mha_call_alloc fails only so */
    for (int64_t b = 0; b < c->B; ++b)
        convert_row(d + b * c->Sp * es, t, (const char *)t->data + b * sb * es, ss, c->S, c->Sp,
                    -1);
    v->data = d;
    v->stride[0] = c->Sp;
    v->stride[3] = 1;
    return ATTN_OK;
}

/* attn_mask (L,S) or (B·H,L,S) [unbatched (H,L,S)] and/or causal -> SDPA
 * mask (L,Sp) or (B,H,L,Sp), or SDPA's own top-left causal. */
static attn_status convert_attn_mask(mha_call *c, const attn_tensor *t, bool causal,
                                     attn_error *err)
{
    const char *name = "attn_mask";
    const bool appended = c->Sp != c->S;
    if (causal && !appended) c->causal = ATTN_CAUSAL_TOP_LEFT; /* j <= i, as triu(.., 1) */
    const bool merge_causal = causal && appended;
    if (!t && !merge_causal) return ATTN_OK;

    attn_tensor *v = &c->mask[c->nmask++];
    memset(v, 0, sizeof *v);
    const int64_t L = c->L, S = c->S, Sp = c->Sp;
    if (!t) { /* causal alone, with appended keys: bool (L,Sp) */
        uint8_t *d = mha_call_alloc(c, (size_t)(L * Sp), "causal mask", err);
        if (!d) return ATTN_ERR_ALLOC; /* mha_call_alloc fails only so */
        for (int64_t i = 0; i < L; ++i)
            for (int64_t j = 0; j < Sp; ++j) d[i * Sp + j] = j >= S || j <= i;
        *v = attn_tensor_make(d, ATTN_BOOL, 2, (int64_t[]){L, Sp});
        return ATTN_OK;
    }

    RETURN_IF_ERROR(check_mask_dtype(t, name, err));
    RETURN_IF(t->ndim != 2 && t->ndim != 3, err, ATTN_ERR_SHAPE,
              "%s: expected (L,S) or (%s,L,S), got %d dimensions", name,
              c->batched ? "B*num_heads" : "num_heads", t->ndim);
    RETURN_IF_ERROR(attn_check_tensor(t, name, t->ndim, t->dtype, false, err));
    const bool per_head = t->ndim == 3;
    const int64_t BH = c->B * c->H; /* overflow-checked with the call */
    const int o = per_head ? 1 : 0;
    RETURN_IF(per_head && t->shape[0] != BH, err, ATTN_ERR_SHAPE,
              "%s: first dimension is %lld, expected %s = %lld", name, (long long)t->shape[0],
              c->batched ? "batch*num_heads" : "num_heads", (long long)BH);
    RETURN_IF(t->shape[o] != L || t->shape[o + 1] != S, err, ATTN_ERR_SHAPE,
              "%s: last two dimensions are (%lld, %lld), expected (L, S) = (%lld, %lld)", name,
              (long long)t->shape[o], (long long)t->shape[o + 1], (long long)L, (long long)S);

    const int64_t s0 = per_head ? t->stride[0] : 0, si = t->stride[o], sj = t->stride[o + 1];
    if (t->dtype == ATTN_F32 && !appended) { /* usable as is */
        v->data = t->data;
        v->dtype = ATTN_F32;
        if (per_head) {
            v->ndim = 4;
            v->shape[0] = c->B;
            v->shape[1] = c->H;
            v->stride[0] = c->B > 1 ? c->H * s0 : 0; /* row b·H + h */
            v->stride[1] = s0;
        } else {
            v->ndim = 2;
        }
        v->shape[v->ndim - 2] = L;
        v->shape[v->ndim - 1] = S;
        v->stride[v->ndim - 2] = si;
        v->stride[v->ndim - 1] = sj;
        return ATTN_OK;
    }
    const int64_t n = per_head ? BH : 1;
    const int64_t es = elem_size(t->dtype);
    char *d = mha_call_alloc(c, (size_t)(n * L * Sp * es), name, err);
    if (!d) return ATTN_ERR_ALLOC; /* mha_call_alloc fails only so */
    for (int64_t r = 0; r < n; ++r)
        for (int64_t i = 0; i < L; ++i)
            convert_row(d + (r * L + i) * Sp * es, t, (const char *)t->data + (r * s0 + i * si) * es,
                        sj, S, Sp, merge_causal ? i : -1);
    if (per_head)
        *v = attn_tensor_make(d, t->dtype, 4, (int64_t[]){c->B, c->H, L, Sp});
    else
        *v = attn_tensor_make(d, t->dtype, 2, (int64_t[]){L, Sp});
    return ATTN_OK;
}

/* ---------------------------------------------------------------- call */

static attn_status call_init(mha_call *c, const attn_mha *m, const attn_tensor *query,
                             const attn_tensor *key, const attn_tensor *value,
                             const attn_mha_opts *opts, attn_error *err)
{
    RETURN_IF(!m, err, ATTN_ERR_NULL, "module: pointer is NULL");
    attn_mha_opts defaults = attn_mha_opts_default();
    if (!opts) opts = &defaults;
    RETURN_IF(opts->num_threads < 0, err, ATTN_ERR_ARG, "num_threads: must be >= 0, got %d",
              opts->num_threads);
    RETURN_IF(opts->path < ATTN_PATH_AUTO || opts->path > ATTN_PATH_FUSED, err, ATTN_ERR_ARG,
              "path: unknown value %d", (int)opts->path);
    c->threads = attn_resolve_threads(opts->num_threads);
    c->path = opts->path;
    c->reference = opts->path == ATTN_PATH_REFERENCE ||
                   (opts->path == ATTN_PATH_AUTO && sdpa_isa_select() == SDPA_ISA_REFERENCE);
    RETURN_IF(!(opts->scale >= 0.0f) || isinf(opts->scale), err, ATTN_ERR_ARG,
              "scale: must be finite and >= 0 (0 = 1/sqrt(head_dim)), got %g", (double)opts->scale);
    c->scale = opts->scale;
    RETURN_IF(opts->precision != ATTN_PRECISION_EXACT && opts->precision != ATTN_PRECISION_BF16,
              err, ATTN_ERR_ARG, "precision: unknown value %d", (int)opts->precision);
    c->precision = opts->precision;
    RETURN_IF(opts->reserved32, err, ATTN_ERR_ARG, "reserved32: must be zero");
    for (int i = 0; i < 3; ++i)
        RETURN_IF(opts->reserved[i], err, ATTN_ERR_ARG, "reserved[%d]: must be zero", i);
    c->bf16 = opts->precision == ATTN_PRECISION_BF16 && !c->reference
                  ? sdpa_engine_select(sdpa_kernels_for(sdpa_isa_select()))
                  : NULL;
    c->dropout_p = opts->training ? m->cfg.dropout : 0.0f;
    c->dropout_seed = opts->dropout_seed;

    c->E = m->cfg.embed_dim;
    c->H = m->cfg.num_heads;
    c->hd = c->E / c->H;
    c->kdim = m->cfg.kdim;
    c->vdim = m->cfg.vdim;

    RETURN_IF(!query, err, ATTN_ERR_NULL, "query: tensor is NULL");
    RETURN_IF(query->ndim != 2 && query->ndim != 3, err, ATTN_ERR_SHAPE,
              "query: expected (B,L,E) or unbatched (L,E), got %d dimensions", query->ndim);
    c->batched = query->ndim == 3;
    RETURN_IF_ERROR(attn_check_tensor(query, "query", query->ndim, ATTN_F32, false, err));
    c->B = c->batched ? query->shape[0] : 1;
    c->L = query->shape[query->ndim - 2];
    RETURN_IF(query->shape[query->ndim - 1] != c->E, err, ATTN_ERR_SHAPE,
              "query: feature size is %lld, expected embed_dim %lld",
              (long long)query->shape[query->ndim - 1], (long long)c->E);

    RETURN_IF(!key && value, err, ATTN_ERR_NULL,
              "key: is NULL but value is not (pass both, or neither for self-attention)");
    RETURN_IF(key && !value, err, ATTN_ERR_NULL,
              "value: is NULL but key is not (pass both, or neither for self-attention)");
    c->self = !key;
    if (c->self) {
        RETURN_IF(c->kdim != c->E || c->vdim != c->E, err, ATTN_ERR_SHAPE,
                  "key: self-attention (key = value = NULL) needs kdim == vdim == embed_dim, "
                  "module has kdim %lld, vdim %lld",
                  (long long)c->kdim, (long long)c->vdim);
        c->S = c->L;
    } else {
        RETURN_IF(key->ndim != query->ndim, err, ATTN_ERR_SHAPE,
                  "key: expected %d dimensions like query, got %d", query->ndim, key->ndim);
        c->S = key->shape[key->ndim - 2];
    }

    const int64_t Sp = c->S + (m->cfg.add_bias_kv ? 1 : 0) + (m->cfg.add_zero_attn ? 1 : 0);
    c->Sp = Sp;
    /* Every buffer size the call may need: B·L·E, B·Sp·E, B·S·kdim|vdim,
     * B·H·L·Sp (weights, per-head masks), all times sizeof(float). */
    int64_t t1, t2;
    int64_t fdim = c->E > c->kdim ? c->E : c->kdim;
    fdim = fdim > c->vdim ? fdim : c->vdim;
    const int64_t seq = c->L > Sp ? c->L : Sp;
    bool ok = attn_mul_ok(c->B, seq, &t1) && attn_mul_ok(t1, fdim, &t2) &&
              attn_mul_ok(t2, 8 * (int64_t)sizeof(float), &t2) && attn_mul_ok(c->B, c->H, &t1) &&
              attn_mul_ok(t1, c->L, &t1) && attn_mul_ok(t1, Sp, &t1) &&
              attn_mul_ok(t1, (int64_t)sizeof(float), &t1) && (uint64_t)t2 <= SIZE_MAX &&
              (uint64_t)t1 <= SIZE_MAX;
    RETURN_IF(!ok, err, ATTN_ERR_OVERFLOW,
              "query: sizes overflow (batch %lld, target length %lld, source length %lld)",
              (long long)c->B, (long long)c->L, (long long)c->S);

    RETURN_IF_ERROR(mha_rows_input(c, query, c->L, c->E, "query", &c->query, err));
    if (c->self) {
        c->key = c->value = c->query;
    } else {
        RETURN_IF_ERROR(mha_check_rows_view(key, "key", c, c->S, c->kdim, false, err));
        RETURN_IF_ERROR(mha_check_rows_view(value, "value", c, c->S, c->vdim, false, err));
        RETURN_IF_ERROR(mha_rows_input(c, key, c->S, c->kdim, "key", &c->key, err));
        RETURN_IF_ERROR(mha_rows_input(c, value, c->S, c->vdim, "value", &c->value, err));
    }

    c->causal = ATTN_CAUSAL_NONE;
    if (opts->key_padding_mask)
        RETURN_IF_ERROR(convert_key_padding(c, opts->key_padding_mask, err));
    RETURN_IF_ERROR(convert_attn_mask(c, opts->attn_mask, opts->causal, err));
    return ATTN_OK;
}

attn_status mha_call_init(mha_call *c, const attn_mha *m, const attn_tensor *query,
                          const attn_tensor *key, const attn_tensor *value,
                          const attn_mha_opts *opts, attn_error *err)
{
    memset(c, 0, sizeof *c);
    attn_status s = call_init(c, m, query, key, value, opts, err);
    if (s != ATTN_OK) mha_call_free(c);
    return s;
}
