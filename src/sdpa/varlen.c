/*
 * Packed variable-length batches (FlashAttention's varlen): sequence s of
 * the packed (total, H, X) buffers is viewed as a (1, H, len_s, X) tensor
 * with strides (0, stride[1], stride[0], stride[2]) and handed to the public
 * attn_sdpa / attn_sdpa_backward with the caller's options. Causal, window
 * and ALiBi are thus aligned per sequence, and no sequence sees another's
 * keys.
 *
 * Threads. A short sequence gives attn_sdpa too few tasks to keep every
 * thread busy, so sequences run side by side, each call on one thread,
 * handed out largest first (dynamic schedule). A sequence costing more
 * than a fair share of what is left (cost · threads > remaining cost) runs
 * alone on all threads first. attn_sdpa's results do not depend on its
 * thread count and every sequence writes its own rows, so the schedule
 * never changes a bit: the result equals one call per sequence.
 */
#include "../core/internal.h"
#include "rope.h"

#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* What every per-sequence call shares. */
typedef struct {
    bool backward;
    int64_t nseq, Hq;
    const int64_t *oq, *ok; /* offsets, (nseq + 1) each */
    const attn_tensor *q, *k, *v, *out, *lse, *dout, *dq, *dk, *dv, *stats;
    attn_sdpa_opts opts_copy; /* the caller's options (or the defaults) */
    const attn_sdpa_opts *opts; /* = &opts_copy */
    bool alibi_per_seq;
    float *dsinks; /* (nseq, Hq) per-sequence sink gradients, or NULL */
} varlen_call;

/* Rows [off, off + len) of a packed (total, H, X) view as (1, H, len, X). */
static attn_tensor seq_view4(const attn_tensor *t, int64_t off, int64_t len)
{
    attn_tensor v = *t;
    v.ndim = 4;
    v.data = t->data ? (char *)t->data + off * t->stride[0] * (int64_t)attn_dtype_size(t->dtype)
                     : NULL;
    v.shape[0] = 1;
    v.shape[1] = t->shape[1];
    v.shape[2] = len;
    v.shape[3] = t->shape[2];
    v.stride[0] = 0;
    v.stride[1] = t->stride[1];
    v.stride[2] = t->stride[0];
    v.stride[3] = t->stride[2];
    return v;
}

/* Rows [off, off + len) of a packed (total, H) view as (1, H, len). */
static attn_tensor seq_view3(const attn_tensor *t, int64_t off, int64_t len)
{
    attn_tensor v = *t;
    v.ndim = 3;
    v.data = t->data ? (float *)t->data + off * t->stride[0] : NULL;
    v.shape[0] = 1;
    v.shape[1] = t->shape[1];
    v.shape[2] = len;
    v.stride[0] = 0;
    v.stride[1] = t->stride[1];
    v.stride[2] = t->stride[0];
    return v;
}

/* One sequence's attn_sdpa or attn_sdpa_backward call. */
static attn_status run_seq(const varlen_call *c, int64_t s, int threads, attn_error *err)
{
    const int64_t q0 = c->oq[s], nq = c->oq[s + 1] - q0;
    const int64_t k0 = c->ok[s], nk = c->ok[s + 1] - k0;
    if (nq == 0 && !c->backward) return ATTN_OK; /* nothing to write */
    attn_sdpa_opts o = *c->opts;
    o.num_threads = threads;
    o.dropout_offset = c->opts->dropout_offset + (uint64_t)s;
    attn_tensor slopes, stats, dsinks;
    if (c->alibi_per_seq) { /* row s of (nseq, Hq) as (1, Hq) */
        slopes = *c->opts->alibi_slopes;
        slopes.data = (float *)slopes.data + s * slopes.stride[0];
        slopes.shape[0] = 1;
        o.alibi_slopes = &slopes;
    }
    if (c->stats) {
        stats = seq_view4(c->stats, q0, nq);
        o.softmax_stats = &stats;
    }
    if (c->dsinks) {
        dsinks = attn_tensor_1d(c->dsinks + s * c->Hq, c->Hq);
        o.grad_sinks = &dsinks;
    }
    const attn_tensor q = seq_view4(c->q, q0, nq);
    const attn_tensor k = seq_view4(c->k, k0, nk), v = seq_view4(c->v, k0, nk);
    attn_tensor out, lse;
    if (c->out) out = seq_view4(c->out, q0, nq);
    if (c->lse) lse = seq_view3(c->lse, q0, nq);
    if (!c->backward)
        return attn_sdpa(&q, &k, &v, &out, c->lse ? &lse : NULL, NULL, &o, err);
    attn_tensor dout = seq_view4(c->dout, q0, nq), dq, dk, dv;
    if (c->dq) dq = seq_view4(c->dq, q0, nq);
    if (c->dk) dk = seq_view4(c->dk, k0, nk);
    if (c->dv) dv = seq_view4(c->dv, k0, nk);
    return attn_sdpa_backward(&q, &k, &v, c->out ? &out : NULL, c->lse ? &lse : NULL, &dout,
                              c->dq ? &dq : NULL, c->dk ? &dk : NULL, c->dv ? &dv : NULL, &o,
                              err);
}

typedef struct {
    int64_t cost, s;
} seq_cost;

static int by_cost_desc(const void *a, const void *b)
{
    const seq_cost *x = a, *y = b;
    if (x->cost != y->cost) return x->cost > y->cost ? -1 : 1;
    return x->s < y->s ? -1 : x->s > y->s;
}

/* Runs every sequence (see the header comment for the schedule). On
 * failure reports the error of the lowest-numbered failing sequence. */
static attn_status run_all(const varlen_call *c, int threads, attn_error *err)
{
    const int64_t n = c->nseq;
    if (n == 0) return ATTN_OK;
    seq_cost *order = malloc((size_t)n * sizeof *order);
    RETURN_IF(!order, err, ATTN_ERR_ALLOC, "varlen: cannot allocate the schedule");
    int64_t remaining = 0;
    for (int64_t s = 0; s < n; ++s) {
        const int64_t nq = c->oq[s + 1] - c->oq[s], nk = c->ok[s + 1] - c->ok[s];
        /* pairs, plus the per-row and per-key work; saturating */
        double w = (double)nq * (double)nk + (double)nq + (double)nk;
        order[s].cost = w > 1e18 ? (int64_t)1e18 : (int64_t)w;
        order[s].s = s;
        remaining = remaining > INT64_MAX - order[s].cost ? INT64_MAX : remaining + order[s].cost;
    }
    qsort(order, (size_t)n, sizeof *order, by_cost_desc);

    attn_status status = ATTN_OK;
    int64_t first = 0;
    /* Sequences worth more than a fair share: one at a time, all threads. */
    while (first < n && threads > 1 &&
           (double)order[first].cost * threads > (double)remaining) {
        status = run_seq(c, order[first].s, threads, err);
        if (status != ATTN_OK) break;
        remaining -= order[first].cost;
        first++;
    }
    if (status == ATTN_OK && first < n) {
        int64_t failed_s = INT64_MAX;
        attn_error failed_err = {ATTN_OK, ""};
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
        for (int64_t i = first; i < n; ++i) {
            attn_error e = {ATTN_OK, ""};
            const attn_status st = run_seq(c, order[i].s, 1, &e);
            if (st != ATTN_OK) {
#pragma omp critical(attn_varlen_error)
                if (order[i].s < failed_s) {
                    failed_s = order[i].s;
                    failed_err = e;
                    failed_err.status = st;
                }
            }
        }
        if (failed_s != INT64_MAX) {
            status = failed_err.status;
            if (err) *err = failed_err;
        }
    }
    free(order);
    return status;
}

/* Copies one offset array into int64 and checks it: starts at 0, never
 * decreases, ends at `total`. */
static attn_status read_offsets(const attn_varlen_seqs *seqs, const void *src, const char *name,
                                int64_t total, const char *tensor, int64_t *dst, attn_error *err)
{
    RETURN_IF(!src, err, ATTN_ERR_NULL, "%s: pointer is NULL", name);
    for (int64_t s = 0; s <= seqs->nseq; ++s)
        dst[s] = seqs->type == ATTN_OFFSETS_I32 ? (int64_t)((const int32_t *)src)[s]
                                                : ((const int64_t *)src)[s];
    RETURN_IF(dst[0] != 0, err, ATTN_ERR_ARG, "%s: must start at 0, got %lld", name,
              (long long)dst[0]);
    for (int64_t s = 0; s < seqs->nseq; ++s)
        RETURN_IF(dst[s + 1] < dst[s], err, ATTN_ERR_ARG,
                  "%s: decreases at entry %lld (%lld after %lld)", name, (long long)(s + 1),
                  (long long)dst[s + 1], (long long)dst[s]);
    RETURN_IF(dst[seqs->nseq] != total, err, ATTN_ERR_SHAPE,
              "%s: ends at %lld, but %s has %lld tokens", name, (long long)dst[seqs->nseq],
              tensor, (long long)total);
    return ATTN_OK;
}

/* A packed (total, heads, last) tensor, or (total, heads) when last < 0;
 * (total, heads, last) tensors of Q, K, V, O and their gradients may be
 * bfloat16 or float16 (half_ok), as in attn_sdpa. */
static attn_status check_packed(const attn_tensor *t, const char *name, int64_t total,
                                int64_t heads, int64_t last, bool is_output, bool half_ok,
                                attn_error *err)
{
    const int ndim = last < 0 ? 2 : 3;
    RETURN_IF_ERROR(half_ok ? attn_check_float_tensor(t, name, ndim, is_output, err)
                            : attn_check_tensor(t, name, ndim, ATTN_F32, is_output, err));
    RETURN_IF(t->shape[0] != total, err, ATTN_ERR_SHAPE, "%s: %lld tokens, expected %lld", name,
              (long long)t->shape[0], (long long)total);
    RETURN_IF(t->shape[1] != heads, err, ATTN_ERR_SHAPE, "%s: %lld heads, expected %lld", name,
              (long long)t->shape[1], (long long)heads);
    RETURN_IF(last >= 0 && t->shape[2] != last, err, ATTN_ERR_SHAPE,
              "%s: feature size is %lld, expected %lld", name, (long long)t->shape[2],
              (long long)last);
    return ATTN_OK;
}

/* Everything both directions validate before anything runs. Fills c except
 * the direction-specific tensors, with offsets in *offsets (to free). */
static attn_status prepare(varlen_call *c, const attn_tensor *q, const attn_tensor *k,
                           const attn_tensor *v, const attn_varlen_seqs *seqs,
                           const attn_sdpa_opts *opts, int64_t **offsets, int *threads,
                           attn_error *err)
{
    *offsets = NULL;
    RETURN_IF(!seqs, err, ATTN_ERR_NULL, "seqs: pointer is NULL");
    RETURN_IF(seqs->nseq < 0, err, ATTN_ERR_ARG, "seqs: nseq must be >= 0, got %lld",
              (long long)seqs->nseq);
    RETURN_IF(seqs->type != ATTN_OFFSETS_I64 && seqs->type != ATTN_OFFSETS_I32, err,
              ATTN_ERR_ARG, "seqs: unknown offset type %d", (int)seqs->type);
    RETURN_IF_ERROR(attn_check_float_tensor(q, "query", 3, false, err));
    RETURN_IF_ERROR(attn_check_float_tensor(k, "key", 3, false, err));
    RETURN_IF_ERROR(attn_check_float_tensor(v, "value", 3, false, err));
    RETURN_IF(v->shape[0] != k->shape[0], err, ATTN_ERR_SHAPE,
              "value: %lld tokens, key has %lld", (long long)v->shape[0],
              (long long)k->shape[0]);
    attn_sdpa_opts defaults = attn_sdpa_opts_default();
    if (!opts) opts = &defaults;
    for (int i = 0; i < ATTN_SDPA_MAX_MASKS; ++i)
        RETURN_IF(opts->mask[i], err, ATTN_ERR_UNSUPPORTED,
                  "mask[%d]: masks are not supported by varlen calls", i);
    RETURN_IF(opts->workspace, err, ATTN_ERR_UNSUPPORTED,
              "workspace: varlen calls allocate per sequence; pass NULL");
    const int64_t nseq = seqs->nseq;
    /* Heads, features and every option, checked by attn_sdpa's own rules on
     * (nseq, H, 0, X) stand-ins (so ALiBi (nseq, Hq) is judged too). */
    attn_tensor q0 = seq_view4(q, 0, 0), k0 = seq_view4(k, 0, 0), v0 = seq_view4(v, 0, 0);
    q0.shape[0] = k0.shape[0] = v0.shape[0] = nseq;
    size_t bytes;
    attn_sdpa_opts probe = *opts;
    probe.softmax_stats = NULL;
    probe.grad_sinks = NULL;
    RETURN_IF_ERROR(attn_sdpa_workspace_size(&q0, &k0, &v0, false, &probe, &bytes, err));

    int64_t *off = malloc((size_t)(2 * (nseq + 1)) * sizeof *off);
    RETURN_IF(!off, err, ATTN_ERR_ALLOC, "seqs: cannot allocate %lld offsets",
              (long long)(2 * (nseq + 1)));
    attn_status s = read_offsets(seqs, seqs->cu_seqlens_q, "cu_seqlens_q", q->shape[0], "query",
                                 off, err);
    if (s == ATTN_OK)
        s = read_offsets(seqs, seqs->cu_seqlens_k, "cu_seqlens_k", k->shape[0], "key",
                         off + nseq + 1, err);
    /* RoPE: each sequence's positions (its tables' reach), before any runs */
    for (int64_t i = 0; opts->rope && s == ATTN_OK && i < nseq; ++i)
        s = attn_rope_check_call(opts->rope, q->shape[2], opts->rope_offset, off[i + 1] - off[i],
                                 off[nseq + 2 + i] - off[nseq + 1 + i], err);
    if (s != ATTN_OK) {
        free(off);
        return s;
    }
    *offsets = off;
    memset(c, 0, sizeof *c);
    c->nseq = nseq;
    c->Hq = q->shape[1];
    c->oq = off;
    c->ok = off + nseq + 1;
    c->q = q;
    c->k = k;
    c->v = v;
    c->opts_copy = *opts;
    c->opts = &c->opts_copy;
    c->alibi_per_seq = opts->alibi_slopes && opts->alibi_slopes->ndim == 2;
    *threads = attn_resolve_threads(opts->num_threads);
    return ATTN_OK;
}

attn_status attn_sdpa_varlen(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                             const attn_varlen_seqs *seqs, attn_tensor *out, attn_tensor *lse,
                             const attn_sdpa_opts *opts, attn_error *err)
{
    varlen_call c;
    int64_t *off;
    int threads;
    RETURN_IF_ERROR(prepare(&c, q, k, v, seqs, opts, &off, &threads, err));
    const int64_t Tq = q->shape[0], Hq = q->shape[1], Dv = v->shape[2];
    attn_status s = ATTN_OK;
    if (!out) s = attn_fail(err, ATTN_ERR_NULL, "out: tensor is NULL");
    if (s == ATTN_OK) s = check_packed(out, "out", Tq, Hq, Dv, true, true, err);
    if (s == ATTN_OK && lse) s = check_packed(lse, "lse", Tq, Hq, -1, true, false, err);
    if (s == ATTN_OK && c.opts->softmax_stats)
        s = check_packed(c.opts->softmax_stats, "softmax_stats", Tq, Hq, 2, true, false, err);
    if (s == ATTN_OK && c.opts->grad_sinks)
        s = attn_fail(err, ATTN_ERR_ARG, "grad_sinks: an output of the backward only");
    if (s == ATTN_OK) { /* whole tensors: each sequence's call sees only its slices */
        const attn_tensor *outs[3] = {out, lse, c.opts->softmax_stats};
        static const char *const out_names[3] = {"out", "lse", "softmax_stats"};
        const attn_tensor *ins[5] = {q, k, v, c.opts->alibi_slopes, c.opts->sinks};
        static const char *const in_names[5] = {"query", "key", "value", "alibi_slopes", "sinks"};
        s = attn_check_call_memory(outs, out_names, 3, ins, in_names, 5, NULL, 0, err);
    }
    if (s == ATTN_OK) {
        c.out = out;
        c.lse = lse;
        c.stats = c.opts->softmax_stats;
        s = run_all(&c, threads, err);
    }
    free(off);
    if (s == ATTN_OK) attn_ok(err);
    return s;
}

attn_status attn_sdpa_varlen_backward(const attn_tensor *q, const attn_tensor *k,
                                      const attn_tensor *v, const attn_varlen_seqs *seqs,
                                      const attn_tensor *out, const attn_tensor *lse,
                                      const attn_tensor *dout, attn_tensor *dq, attn_tensor *dk,
                                      attn_tensor *dv, const attn_sdpa_opts *opts,
                                      attn_error *err)
{
    varlen_call c;
    int64_t *off;
    int threads;
    RETURN_IF_ERROR(prepare(&c, q, k, v, seqs, opts, &off, &threads, err));
    const int64_t Tq = q->shape[0], Tk = k->shape[0], Hq = q->shape[1], Hkv = k->shape[1];
    const int64_t D = q->shape[2], Dv = v->shape[2];
    const attn_tensor *gs = c.opts->grad_sinks;
    attn_status s = ATTN_OK;
    if (!dout) s = attn_fail(err, ATTN_ERR_NULL, "grad_out: tensor is NULL");
    if (s == ATTN_OK) s = check_packed(dout, "grad_out", Tq, Hq, Dv, false, true, err);
    if (s == ATTN_OK && out) s = check_packed(out, "out", Tq, Hq, Dv, false, true, err);
    if (s == ATTN_OK && lse) s = check_packed(lse, "lse", Tq, Hq, -1, false, false, err);
    if (s == ATTN_OK && c.opts->softmax_stats)
        s = check_packed(c.opts->softmax_stats, "softmax_stats", Tq, Hq, 2, false, false, err);
    if (s == ATTN_OK && dq) s = check_packed(dq, "grad_query", Tq, Hq, D, true, true, err);
    if (s == ATTN_OK && dk) s = check_packed(dk, "grad_key", Tk, Hkv, D, true, true, err);
    if (s == ATTN_OK && dv) s = check_packed(dv, "grad_value", Tk, Hkv, Dv, true, true, err);
    if (s == ATTN_OK && gs) {
        if (!c.opts->sinks) s = attn_fail(err, ATTN_ERR_ARG, "grad_sinks: given without sinks");
        if (s == ATTN_OK) s = attn_check_tensor(gs, "grad_sinks", 1, ATTN_F32, true, err);
        if (s == ATTN_OK && gs->shape[0] != Hq)
            s = attn_fail(err, ATTN_ERR_SHAPE, "grad_sinks: %lld heads, the query has %lld",
                          (long long)gs->shape[0], (long long)Hq);
    }
    if (s == ATTN_OK) { /* whole tensors: each sequence's call sees only its slices */
        const attn_tensor *outs[4] = {dq, dk, dv, gs};
        static const char *const out_names[4] = {"grad_query", "grad_key", "grad_value",
                                                 "grad_sinks"};
        const attn_tensor *ins[9] = {q, k, v, out, lse, dout, c.opts->softmax_stats,
                                     c.opts->alibi_slopes, c.opts->sinks};
        static const char *const in_names[9] = {"query", "key", "value", "out", "lse", "grad_out",
                                                "softmax_stats", "alibi_slopes", "sinks"};
        s = attn_check_call_memory(outs, out_names, 4, ins, in_names, 9, NULL, 0, err);
    }
    float *parts = NULL;
    if (s == ATTN_OK && gs) {
        parts = calloc((size_t)(c.nseq > 0 ? c.nseq : 1) * (size_t)Hq, sizeof *parts);
        if (!parts) s = attn_fail(err, ATTN_ERR_ALLOC, "grad_sinks: cannot allocate partials");
    }
    if (s == ATTN_OK) {
        c.backward = true;
        c.out = out;
        c.lse = lse;
        c.dout = dout;
        c.dq = dq;
        c.dk = dk;
        c.dv = dv;
        c.stats = c.opts->softmax_stats;
        c.dsinks = parts;
        s = run_all(&c, threads, err);
    }
    if (s == ATTN_OK && gs) { /* sum over sequences, in sequence order */
        for (int64_t h = 0; h < Hq; ++h) {
            float acc = 0.0f;
            for (int64_t q_s = 0; q_s < c.nseq; ++q_s) acc += parts[q_s * Hq + h];
            ((float *)gs->data)[h * gs->stride[0]] = acc;
        }
    }
    free(parts);
    free(off);
    if (s == ATTN_OK) attn_ok(err);
    return s;
}
