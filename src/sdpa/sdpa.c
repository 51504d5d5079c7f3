/* Public SDPA entry points: validate once, resolve views into an
 * sdpa_problem, and dispatch to a path. */
#include "problem.h"
#include "rope_prefill.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

attn_sdpa_opts attn_sdpa_opts_default(void)
{
    attn_sdpa_opts o;
    memset(&o, 0, sizeof o);
    return o;
}

static void copy_strides(int64_t *dst, const attn_tensor *t)
{
    for (int i = 0; i < t->ndim; ++i) dst[i] = t->stride[i];
}

/* Checks that t is a (n0,n1,n2[,n3]) view; name appears in messages.
 * Float32 only, or (half_ok) bfloat16 and float16 too. */
static attn_status check_shape(const attn_tensor *t, const char *name, int ndim,
                               const int64_t *want, bool is_output, bool half_ok,
                               attn_error *err)
{
    static const char *const dim_names[4] = {"batch", "heads", "sequence", "feature"};
    RETURN_IF_ERROR(half_ok ? attn_check_float_tensor(t, name, ndim, is_output, err)
                            : attn_check_tensor(t, name, ndim, ATTN_F32, is_output, err));
    for (int i = 0; i < ndim; ++i)
        RETURN_IF(t->shape[i] != want[i], err, ATTN_ERR_SHAPE,
                  "%s: %s size is %lld, expected %lld", name, dim_names[i],
                  (long long)t->shape[i], (long long)want[i]);
    return ATTN_OK;
}

/* Resolves one mask to strides over (B,Hq,Nq,Nk), PyTorch broadcasting. */
static attn_status resolve_mask(sdpa_mask *out, const attn_tensor *m, const sdpa_problem *p,
                                int index, attn_error *err)
{
    char name[16];
    snprintf(name, sizeof name, "mask[%d]", index);
    RETURN_IF(m->ndim < 1 || m->ndim > 4, err, ATTN_ERR_SHAPE,
              "%s: expected 1 to 4 dimensions, got %d", name, m->ndim);
    RETURN_IF(m->dtype != ATTN_F32 && m->dtype != ATTN_BOOL, err, ATTN_ERR_DTYPE,
              "%s: must be bool or float32", name);
    RETURN_IF_ERROR(attn_check_tensor(m, name, m->ndim, m->dtype, false, err));
    const int64_t full[4] = {p->B, p->Hq, p->Nq, p->Nk};
    out->data = m->data;
    out->dtype = m->dtype;
    for (int d = 0; d < 4; ++d) {
        int md = m->ndim - 4 + d; /* aligned from the right */
        if (md < 0 || m->shape[md] == 1) {
            out->stride[d] = 0;
            continue;
        }
        RETURN_IF(m->shape[md] != full[d], err, ATTN_ERR_SHAPE,
                  "%s: size %lld in dimension %d does not broadcast to %lld", name,
                  (long long)m->shape[md], md, (long long)full[d]);
        out->stride[d] = m->stride[md];
    }
    RETURN_IF(attn_tensor_numel(m) > 0 && !m->data, err, ATTN_ERR_NULL, "%s: data is NULL", name);
    return ATTN_OK;
}

/* A (Hq) per-head float vector, or (B,Hq) when per_batch; strides out. */
static attn_status head_vector(const attn_tensor *t, const char *name, const sdpa_problem *p,
                               bool per_batch, bool is_output, int64_t *sb, int64_t *sh,
                               attn_error *err)
{
    RETURN_IF(t->ndim != 1 && !(per_batch && t->ndim == 2), err, ATTN_ERR_SHAPE,
              "%s: expected shape (%lld)%s, got %d dimensions", name, (long long)p->Hq,
              per_batch ? " or (batch, heads)" : "", t->ndim);
    RETURN_IF_ERROR(attn_check_tensor(t, name, t->ndim, ATTN_F32, is_output, err));
    const int64_t heads = t->shape[t->ndim - 1];
    RETURN_IF(heads != p->Hq, err, ATTN_ERR_SHAPE, "%s: %lld heads, the query has %lld", name,
              (long long)heads, (long long)p->Hq);
    RETURN_IF(t->ndim == 2 && t->shape[0] != p->B, err, ATTN_ERR_SHAPE,
              "%s: batch size is %lld, the query has %lld", name, (long long)t->shape[0],
              (long long)p->B);
    *sh = t->stride[t->ndim - 1];
    if (sb) *sb = t->ndim == 2 ? t->stride[0] : 0;
    return ATTN_OK;
}

/* Window, ALiBi, softcap, sinks and dropout: checked, then into p. */
static attn_status resolve_variants(sdpa_problem *p, const attn_sdpa_opts *opts,
                                    attn_error *err)
{
    if (opts->window.enabled) {
        RETURN_IF(opts->window.left < -1, err, ATTN_ERR_ARG,
                  "window: left must be >= 0, or -1 for unbounded; got %lld",
                  (long long)opts->window.left);
        RETURN_IF(opts->window.right < -1, err, ATTN_ERR_ARG,
                  "window: right must be >= 0, or -1 for unbounded; got %lld",
                  (long long)opts->window.right);
        p->window = true;
        p->window_left = opts->window.left;
        p->window_right = opts->window.right;
    }
    if (opts->alibi_slopes) {
        RETURN_IF_ERROR(head_vector(opts->alibi_slopes, "alibi_slopes", p, true, false,
                                    &p->alibi_s[0], &p->alibi_s[1], err));
        p->alibi = opts->alibi_slopes->data;
    }
    RETURN_IF(!(opts->softcap >= 0.0f) || isinf(opts->softcap), err, ATTN_ERR_ARG,
              "softcap: must be finite and > 0 (0 = off), got %g", (double)opts->softcap);
    p->softcap = opts->softcap;
    if (opts->sinks) {
        RETURN_IF_ERROR(head_vector(opts->sinks, "sinks", p, false, false, NULL, &p->sinks_s, err));
        p->sinks = opts->sinks->data;
    }
    RETURN_IF(!(opts->dropout_p >= 0.0f && opts->dropout_p < 1.0f), err, ATTN_ERR_ARG,
              "dropout_p: must be in [0, 1), got %g", (double)opts->dropout_p);
    p->dropout_p = opts->dropout_p;
    if (p->dropout_p > 0.0f) {
        /* Philox counters hold i, j and b·Hq + h in 32 bits. */
        RETURN_IF(p->Nq > UINT32_MAX || p->Nk > UINT32_MAX || p->B * p->Hq > UINT32_MAX, err,
                  ATTN_ERR_UNSUPPORTED, "dropout_p: sequences or batch·heads beyond 2^32");
        const double thr = ldexp((double)p->dropout_p, 32);
        p->dropout_keep = thr >= 4294967295.0 ? UINT32_MAX : (uint32_t)thr;
        p->dropout_scale = 1.0f / (1.0f - p->dropout_p);
        p->dropout_seed = opts->dropout_seed;
        p->dropout_offset = opts->dropout_offset;
    }
    return ATTN_OK;
}

attn_status sdpa_problem_init(sdpa_problem *p, const attn_tensor *q, const attn_tensor *k,
                              const attn_tensor *v, const attn_sdpa_opts *opts, attn_error *err)
{
    memset(p, 0, sizeof *p);
    RETURN_IF(!q, err, ATTN_ERR_NULL, "query: tensor is NULL");
    RETURN_IF(!k, err, ATTN_ERR_NULL, "key: tensor is NULL");
    RETURN_IF(!v, err, ATTN_ERR_NULL, "value: tensor is NULL");
    RETURN_IF_ERROR(attn_check_float_tensor(q, "query", 4, false, err));
    RETURN_IF_ERROR(attn_check_float_tensor(k, "key", 4, false, err));
    RETURN_IF_ERROR(attn_check_float_tensor(v, "value", 4, false, err));
    p->B = q->shape[0];
    p->Hq = q->shape[1];
    p->Nq = q->shape[2];
    p->D = q->shape[3];
    p->Hkv = k->shape[1];
    p->Nk = k->shape[2];
    p->Dv = v->shape[3];
    RETURN_IF(k->shape[0] != p->B, err, ATTN_ERR_SHAPE, "key: batch size is %lld, query has %lld",
              (long long)k->shape[0], (long long)p->B);
    RETURN_IF(k->shape[3] != p->D, err, ATTN_ERR_SHAPE,
              "key: feature size is %lld, query has %lld", (long long)k->shape[3],
              (long long)p->D);
    /* no heads at all is an empty call, as a zero batch or length */
    const bool headless = p->Hq == 0 && p->Hkv == 0;
    RETURN_IF(!headless && (p->Hkv < 1 || p->Hq % p->Hkv != 0), err, ATTN_ERR_SHAPE,
              "key: %lld heads do not divide the query's %lld heads", (long long)p->Hkv,
              (long long)p->Hq);
    const int64_t vwant[4] = {p->B, p->Hkv, p->Nk, p->Dv};
    RETURN_IF_ERROR(check_shape(v, "value", 4, vwant, false, true, err));
    /* Tiles and row bounds index keys in 32 bits; workspace rows hold D. */
    RETURN_IF(p->Nq > INT32_MAX || p->Nk > INT32_MAX, err, ATTN_ERR_UNSUPPORTED,
              "query/key: sequences of %lld and %lld exceed 2^31 - 1", (long long)p->Nq,
              (long long)p->Nk);
    RETURN_IF(p->D > INT32_MAX || p->Dv > INT32_MAX, err, ATTN_ERR_UNSUPPORTED,
              "query/value: feature sizes of %lld and %lld exceed 2^31 - 1", (long long)p->D,
              (long long)p->Dv);
    p->group = headless ? 1 : p->Hq / p->Hkv;
    p->q = q->data;
    p->qt = q->dtype; /* q16 and o16 stay NULL unless the fused forward reads Q in place */
    p->ot = ATTN_F32;
    p->k = k->data;
    p->v = v->data;
    p->kt = k->dtype;
    p->vt = v->dtype;
    copy_strides(p->qs, q);
    copy_strides(p->ks, k);
    copy_strides(p->vs, v);

    attn_sdpa_opts defaults = attn_sdpa_opts_default();
    if (!opts) opts = &defaults;
    RETURN_IF(!(opts->scale >= 0.0f) || isinf(opts->scale), err, ATTN_ERR_ARG,
              "scale: must be finite and non-negative (0 = 1/sqrt(D))");
    p->scale = opts->scale != 0.0f ? opts->scale : (p->D > 0 ? 1.0f / sqrtf((float)p->D) : 1.0f);
    RETURN_IF(opts->causal < ATTN_CAUSAL_NONE || opts->causal > ATTN_CAUSAL_BOTTOM_RIGHT, err,
              ATTN_ERR_ARG, "causal: unknown value %d", (int)opts->causal);
    p->causal = opts->causal;
    RETURN_IF(opts->path < ATTN_PATH_AUTO || opts->path > ATTN_PATH_FUSED, err, ATTN_ERR_ARG,
              "path: unknown value %d", (int)opts->path);
    p->path = opts->path;
    RETURN_IF(opts->precision != ATTN_PRECISION_EXACT && opts->precision != ATTN_PRECISION_BF16,
              err, ATTN_ERR_ARG, "precision: unknown value %d", (int)opts->precision);
    p->bf16_products = opts->precision == ATTN_PRECISION_BF16;
    RETURN_IF(opts->reserved32, err, ATTN_ERR_ARG, "reserved32: must be zero");
    RETURN_IF(opts->num_threads < 0 || opts->num_threads > ATTN_MAX_THREADS, err, ATTN_ERR_ARG,
              "num_threads: must be from 0 (default) to %d, got %d", ATTN_MAX_THREADS,
              opts->num_threads);
    p->threads = attn_resolve_threads(opts->num_threads);
    p->workspace = opts->workspace;
    p->workspace_size = opts->workspace_size;
    RETURN_IF_ERROR(resolve_variants(p, opts, err));
    for (int i = 0; i < ATTN_SDPA_MAX_MASKS; ++i) {
        if (!opts->mask[i]) continue;
        RETURN_IF_ERROR(resolve_mask(&p->mask[p->nmask], opts->mask[i], p, i, err));
        p->nmask++;
    }
    return sdpa_rope_check(p, opts, err);
}

/* The fused kernels a call runs, or NULL for the reference path:
 * ATTN_PATH_REFERENCE, or AUTO under ATTN_ARCH=reference. FUSED always gets
 * kernels (the best the CPU supports when ATTN_ARCH=reference). */
static const sdpa_kernels *choose_kernels(const sdpa_problem *p)
{
    if (p->path == ATTN_PATH_REFERENCE) return NULL;
    const sdpa_isa isa = sdpa_isa_select();
    if (p->path == ATTN_PATH_AUTO && isa == SDPA_ISA_REFERENCE) return NULL;
    return sdpa_kernels_for(isa);
}

/* Optional (B,Hq,Nq[,X]) output or input; half_ok as check_shape. */
static attn_status bind(const attn_tensor *t, const char *name, int ndim, int64_t last,
                        bool is_output, bool half_ok, const sdpa_problem *p, int64_t *strides,
                        attn_error *err)
{
    const int64_t want[4] = {p->B, p->Hq, p->Nq, last};
    RETURN_IF_ERROR(check_shape(t, name, ndim, want, is_output, half_ok, err));
    copy_strides(strides, t);
    return ATTN_OK;
}

/* K and V as float32 copies, for the paths that read only float32. */
static attn_status stage_kv(sdpa_staging *st, const attn_tensor *k, const attn_tensor *v,
                            sdpa_problem *p, attn_error *err)
{
    const float *kf = p->k, *vf = p->v;
    RETURN_IF_ERROR(sdpa_stage_in(st, k, "key", &kf, p->ks, err));
    RETURN_IF_ERROR(sdpa_stage_in(st, v, "value", &vf, p->vs, err));
    p->k = kf;
    p->v = vf;
    p->kt = p->vt = ATTN_F32;
    return ATTN_OK;
}

static const char *const forward_output_names[4] = {"out", "lse", "weights", "softmax_stats"};
static const char *const backward_output_names[5] = {"grad_query", "grad_key", "grad_value",
                                                     "grad_sinks", "grad_mask"};

/* No output may share memory with an input (q, k, v, the masks and
 * per-head vectors; the backward's out, lse, stats and grad_out), with
 * another output, nor any of them with the caller's workspace. */
static attn_status check_outputs_disjoint(const attn_tensor *const *outs,
                                          const char *const *names, int nout,
                                          const attn_tensor *q, const attn_tensor *k,
                                          const attn_tensor *v, const attn_tensor *out,
                                          const attn_tensor *lse, const attn_tensor *dout,
                                          const attn_sdpa_opts *opts, attn_error *err)
{
    const bool backward = dout != NULL;
    const attn_tensor *ins[13] = {q, k, v, out, lse, dout, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    static const char *const in_names[13] = {"query", "key", "value", "out", "lse", "grad_out",
                                             "mask[0]", "mask[1]", "alibi_slopes", "sinks",
                                             "softmax_stats", "rope cos", "rope sin"};
    if (opts) {
        ins[6] = opts->mask[0], ins[7] = opts->mask[1];
        ins[8] = opts->alibi_slopes, ins[9] = opts->sinks;
        ins[10] = backward ? opts->softmax_stats : NULL;
        if (opts->rope) ins[11] = opts->rope->cos, ins[12] = opts->rope->sin;
    }
    return attn_check_call_memory(outs, names, nout, ins, in_names, 13,
                                  opts ? opts->workspace : NULL, opts ? opts->workspace_size : 0,
                                  err);
}

attn_status attn_sdpa(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                      attn_tensor *out, attn_tensor *lse, attn_tensor *weights,
                      const attn_sdpa_opts *opts, attn_error *err)
{
    sdpa_problem p;
    RETURN_IF_ERROR(sdpa_problem_init(&p, q, k, v, opts, err));
    RETURN_IF(!out, err, ATTN_ERR_NULL, "out: tensor is NULL");
    RETURN_IF_ERROR(bind(out, "out", 4, p.Dv, true, true, &p, p.os, err));
    p.o = out->data;
    if (lse) {
        RETURN_IF_ERROR(bind(lse, "lse", 3, 0, true, false, &p, p.ls, err));
        p.lse = lse->data;
    }
    if (weights) {
        RETURN_IF_ERROR(bind(weights, "weights", 4, p.Nk, true, false, &p, p.ws, err));
        p.w = weights->data;
    }
    if (opts && opts->softmax_stats) {
        RETURN_IF_ERROR(bind(opts->softmax_stats, "softmax_stats", 4, 2, true, false, &p, p.ss, err));
        p.stats = opts->softmax_stats->data;
    }
    RETURN_IF(opts && opts->grad_sinks, err, ATTN_ERR_ARG,
              "grad_sinks: an output of the backward only");
    RETURN_IF(opts && opts->grad_mask, err, ATTN_ERR_ARG,
              "grad_mask: an output of the backward only");
    const attn_tensor *outs[4] = {out, lse, weights, opts ? opts->softmax_stats : NULL};
    RETURN_IF_ERROR(check_outputs_disjoint(outs, forward_output_names, 4, q, k, v, NULL, NULL,
                                           NULL, opts, err));
    const sdpa_kernels *kern = choose_kernels(&p);
    /* RoPE: from here on q and k are float32 rotated copies. */
    sdpa_rope rope = {0};
    if (opts && opts->rope) RETURN_IF_ERROR(sdpa_rope_begin(&rope, &p, opts, &q, &k, err));
    /* 16-bit storage: the fused forward reads Q, K and V and writes O in
     * place (no copies to allocate, fault in and convert serially); the
     * reference path's go through float32 copies. */
    sdpa_staging st = {0};
    attn_status s = ATTN_OK;
    if (kern) {
        if (p.qt != ATTN_F32) {
            p.q16 = q->data;
            p.q = NULL;
        }
        if (out->dtype != ATTN_F32) {
            p.o16 = out->data;
            p.ot = out->dtype;
            p.o = NULL;
        }
    } else {
        s = sdpa_stage_in(&st, q, "query", &p.q, p.qs, err);
        if (s == ATTN_OK) s = stage_kv(&st, k, v, &p, err);
        if (s == ATTN_OK) s = sdpa_stage_out(&st, out, "out", &p.o, p.os, err);
    }
    if (s == ATTN_OK) s = kern ? sdpa_fused_forward(&p, kern, err) : sdpa_reference_forward(&p, err);
    sdpa_staging_finish(&st, s);
    sdpa_rope_end(&rope);
    if (s == ATTN_OK) attn_ok(err);
    return s;
}

attn_status attn_sdpa_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                               const attn_tensor *out, const attn_tensor *lse,
                               const attn_tensor *dout,
                               attn_tensor *dq, attn_tensor *dk, attn_tensor *dv,
                               const attn_sdpa_opts *opts, attn_error *err)
{
    sdpa_problem p;
    RETURN_IF_ERROR(sdpa_problem_init(&p, q, k, v, opts, err));
    RETURN_IF(!dout, err, ATTN_ERR_NULL, "grad_out: tensor is NULL");
    RETURN_IF_ERROR(bind(dout, "grad_out", 4, p.Dv, false, true, &p, p.dos, err));
    p.dout = dout->data;
    if (out) {
        RETURN_IF_ERROR(bind(out, "out", 4, p.Dv, false, true, &p, p.os, err));
        p.o = out->data;
    }
    if (lse) {
        RETURN_IF_ERROR(bind(lse, "lse", 3, 0, false, false, &p, p.ls, err));
        p.lse = lse->data;
    }
    if (opts && opts->softmax_stats) {
        RETURN_IF_ERROR(bind(opts->softmax_stats, "softmax_stats", 4, 2, false, false, &p, p.ss, err));
        p.stats = opts->softmax_stats->data;
    }
    if (opts && opts->grad_sinks) {
        RETURN_IF(!p.sinks, err, ATTN_ERR_ARG, "grad_sinks: given without sinks");
        RETURN_IF_ERROR(head_vector(opts->grad_sinks, "grad_sinks", &p, false, true, NULL,
                                    &p.dsinks_s, err));
        p.dsinks = opts->grad_sinks->data;
    }
    if (dq) {
        RETURN_IF_ERROR(bind(dq, "grad_query", 4, p.D, true, true, &p, p.dqs, err));
        p.dq = dq->data;
    }
    const int64_t kwant[4] = {p.B, p.Hkv, p.Nk, p.D}, vwant[4] = {p.B, p.Hkv, p.Nk, p.Dv};
    if (dk) {
        RETURN_IF_ERROR(check_shape(dk, "grad_key", 4, kwant, true, true, err));
        copy_strides(p.dks, dk);
        p.dk = dk->data;
    }
    if (dv) {
        RETURN_IF_ERROR(check_shape(dv, "grad_value", 4, vwant, true, true, err));
        copy_strides(p.dvs, dv);
        p.dv = dv->data;
    }
    const attn_tensor *grad_mask = opts ? opts->grad_mask : NULL;
    RETURN_IF_ERROR(sdpa_bias_grad_check(grad_mask, opts ? opts->mask[0] : NULL, err));
    const attn_tensor *outs[5] = {dq, dk, dv, opts ? opts->grad_sinks : NULL, grad_mask};
    RETURN_IF_ERROR(check_outputs_disjoint(outs, backward_output_names, 5, q, k, v, out, lse,
                                           dout, opts, err));
    const sdpa_kernels *kern = choose_kernels(&p);
    /* RoPE: the paths differentiate with respect to the rotated copies. */
    sdpa_rope rope = {0};
    if (opts && opts->rope) RETURN_IF_ERROR(sdpa_rope_begin(&rope, &p, opts, &q, &k, err));
    sdpa_bias_grad bg;
    attn_status s = sdpa_bias_grad_begin(&p, &bg, grad_mask, opts ? opts->mask[0] : NULL, err);
    if (s != ATTN_OK) {
        sdpa_rope_end(&rope);
        return s;
    }
    /* 16-bit storage: every tensor through float32 copies. */
    sdpa_staging st = {0};
    s = sdpa_stage_in(&st, q, "query", &p.q, p.qs, err);
    if (s == ATTN_OK) s = stage_kv(&st, k, v, &p, err);
    if (s == ATTN_OK) s = sdpa_stage_in(&st, out, "out", (const float **)&p.o, p.os, err);
    if (s == ATTN_OK) s = sdpa_stage_in(&st, dout, "grad_out", &p.dout, p.dos, err);
    if (s == ATTN_OK) s = sdpa_stage_out(&st, dq, "grad_query", &p.dq, p.dqs, err);
    if (s == ATTN_OK) s = sdpa_stage_out(&st, dk, "grad_key", &p.dk, p.dks, err);
    if (s == ATTN_OK) s = sdpa_stage_out(&st, dv, "grad_value", &p.dv, p.dvs, err);
    if (s == ATTN_OK)
        s = kern ? sdpa_fused_backward(&p, kern, err) : sdpa_reference_backward(&p, err);
    if (s == ATTN_OK && opts && opts->rope) sdpa_rope_grads(&rope, &p); /* dq = Rᵀ·d(Rq) */
    sdpa_staging_finish(&st, s);
    sdpa_rope_end(&rope);
    sdpa_bias_grad_finish(&p, &bg, s);
    if (s == ATTN_OK) attn_ok(err);
    return s;
}

attn_status attn_sdpa_workspace_size(const attn_tensor *q, const attn_tensor *k,
                                     const attn_tensor *v, bool backward,
                                     const attn_sdpa_opts *opts, size_t *bytes, attn_error *err)
{
    sdpa_problem p;
    RETURN_IF(!bytes, err, ATTN_ERR_NULL, "bytes: pointer is NULL");
    RETURN_IF_ERROR(sdpa_problem_init(&p, q, k, v, opts, err));
    size_t rope = 0; /* RoPE's copies first; the paths then see float32 Q and K */
    RETURN_IF(!sdpa_rope_workspace(&p, opts, &rope), err, ATTN_ERR_OVERFLOW,
              "workspace size overflows");
    if (rope) p.qt = p.kt = ATTN_F32;
    /* Enough for whichever path runs: the reference's row buffers or the
     * fused path's tiles (sized as if O and LSE had to be recomputed, so one
     * answer fits every backward call on these inputs). */
    int64_t n;
    RETURN_IF(!attn_mul_ok(p.Nk > 0 ? p.Nk : 1, 2 * (int64_t)sizeof(float) * p.threads, &n), err,
              ATTN_ERR_OVERFLOW, "workspace size overflows");
    size_t need = (size_t)n, fused = 0;
    if (choose_kernels(&p)) {
        bool ok;
        if (backward) {
            p.dq = p.dk = p.dv = (float *)p.q; /* every gradient wanted: the largest case */
            p.o = NULL;
            p.lse = NULL;
            ok = sdpa_fused_backward_workspace(&p, &fused);
        } else {
            ok = sdpa_fused_forward_workspace(&p, &fused);
        }
        RETURN_IF(!ok, err, ATTN_ERR_OVERFLOW, "workspace size overflows");
    }
    need = need > fused ? need : fused;
    RETURN_IF(need > SIZE_MAX - rope, err, ATTN_ERR_OVERFLOW, "workspace size overflows");
    *bytes = need + rope;
    attn_ok(err);
    return ATTN_OK;
}
