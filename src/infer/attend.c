/*
 * Attention of new queries over the KV cache (attn_kvcache_attend): the
 * checks, and the path of float caches through attn_sdpa. Quantized caches,
 * and float caches in decoding shapes (decode_kernel_reads), are read by
 * decode.c's kernel instead.
 *
 * A contiguous entry b is attn_sdpa on the view (1, Hkv, length_b, D). A
 * paged entry is cut into runs of consecutive pool blocks; one run is a
 * single view (the contiguous bits); several are attended one by one (each
 * run an attn_sdpa call writing its output and softmax statistics (m, ll))
 * and merged, first run to last, in double:
 *   M = max_r m_r,  w_r = exp(m_r - M + ll_r),  out = Σ w_r out_r / Σ w_r,
 *   lse = M + log Σ w_r
 * (a sink starts the sums with m = sink, w = 1, out 0). For a run [j0, j1)
 * of an entry of length L, bottom-right causality is the window
 * (left -1, right L - j1) in the run's own coordinates; with a window or
 * ALiBi the run gets a float mask holding the ALiBi bias at global distances
 * and -inf where hidden, which is exactly the bias attn_sdpa would add.
 *
 * Threads. Contiguous entries of equal length are one attn_sdpa call over
 * the batch. Otherwise entries are scheduled as attn_sdpa_varlen schedules
 * sequences (attend_entries): big ones alone on all threads, the rest side
 * by side on one thread each; no result depends on the schedule.
 */
#include "../core/half.h"
#include "../core/schedule.h"
#include "cache.h"
#include "decode_rows.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum {
    MASK_KEYS = 2048,      /* keys per masked paged call (bounds the mask buffer) */
    DECODE_ROWS = 32,      /* float caches take the decode kernel up to these query rows per kv head */
    DECODE_MIN_KEYS = 512, /* ... and from an entry of these keys on */
};

/* A (1, Hkv, n, width) view of float storage at data. */
static attn_tensor storage_view(const attn_kvcache *c, void *data, int64_t n, int64_t width)
{
    return attn_tensor_make(data, c->cfg.dtype, 4, (int64_t[]){1, c->cfg.kv_heads, n, width});
}
/* ------------------------------------------------------------- attention */

/* Keys [j0, j0 + n) of entry b as (1, Hkv, n, D) / (1, Hkv, n, Dv); for a
 * paged cache the positions must lie in consecutive pool blocks. */
static void key_views(const attn_kvcache *c, int64_t b, int64_t j0, int64_t n, attn_tensor *k,
                      attn_tensor *v)
{
    const attn_kvcache_config *g = &c->cfg;
    const int64_t head_rows = kv_head_rows(c);
    const int64_t at = j0 < c->len[b] ? j0 : 0; /* an empty view still needs valid data */
    const bool some = n > 0 || c->len[b] > 0;
    *k = storage_view(c, some ? kv_row_data(c, false, kv_row(c, b, 0, at)) : c->k, n, g->head_dim);
    *v = storage_view(c, some ? kv_row_data(c, true, kv_row(c, b, 0, at)) : c->v, n, g->value_dim);
    k->stride[0] = v->stride[0] = 0;
    k->stride[1] = head_rows * g->head_dim;
    v->stride[1] = head_rows * g->value_dim;
}

/* Entry b of a (B, ...) view as (1, ...). */
static attn_tensor entry(const attn_tensor *t, int64_t b)
{
    attn_tensor e = *t;
    e.data = (char *)t->data + b * t->stride[0] * (int64_t)attn_dtype_size(t->dtype);
    e.shape[0] = 1;
    return e;
}

/* One worker's merge scratch (paged entries with several runs) and the
 * threads its calls use. */
typedef struct {
    float *part_o, *part_st, *mask;
    double *acc_o, *acc_m, *acc_s;
    int threads;
} attend_scratch;

/* attn_sdpa on keys [j0, j0 + n) of entry b with the caller's options (used
 * when those keys are all the entry has, i.e. one view). */
static attn_status attend_whole(const kv_attend_call *a, int64_t b, int threads, attn_error *err)
{
    attn_tensor k, v, q = entry(a->q, b), out = entry(a->out, b), lse, stats, slopes;
    key_views(a->c, b, 0, a->c->len[b], &k, &v);
    attn_sdpa_opts o = a->opts;
    o.num_threads = threads;
    if (a->lse) lse = entry(a->lse, b);
    if (a->stats) {
        stats = entry(a->stats, b);
        o.softmax_stats = &stats;
    }
    if (a->slopes && a->slopes->ndim == 2) {
        slopes = entry(a->slopes, b);
        o.alibi_slopes = &slopes;
    }
    return attn_sdpa(&q, &k, &v, &out, a->lse ? &lse : NULL, NULL, &o, err);
}

float kv_slope(const kv_attend_call *a, int64_t b, int64_t h)
{
    const attn_tensor *s = a->slopes;
    const float *d = s->data;
    return s->ndim == 2 ? d[b * s->stride[0] + h * s->stride[1]] : d[h * s->stride[0]];
}

/* One part: keys [j0, j0 + n) of entry b (consecutive pool blocks) into
 * part_o (1,Hq,Nq,Dv) and part_st (1,Hq,Nq,2), aligned as in the whole. */
static attn_status attend_part(const kv_attend_call *a, attend_scratch *w, int64_t b, int64_t j0,
                               int64_t n, attn_error *err)
{
    const int64_t L = a->c->len[b], Nq = a->Nq, Hq = a->Hq;
    attn_tensor k, v, q = entry(a->q, b);
    key_views(a->c, b, j0, n, &k, &v);
    attn_tensor out = attn_tensor_4d(w->part_o, 1, Hq, Nq, a->Dv);
    attn_tensor st = attn_tensor_4d(w->part_st, 1, Hq, Nq, 2);
    attn_sdpa_opts o = a->opts;
    o.num_threads = w->threads;
    o.softmax_stats = &st;
    o.sinks = NULL; /* the merge adds the sink once */
    o.causal = ATTN_CAUSAL_NONE;
    o.window.enabled = false;
    o.alibi_slopes = NULL;
    attn_tensor mask;
    if (a->slopes || a->opts.window.enabled) {
        /* the bias attn_sdpa would add at the global distance d = i + L - Nq - j */
        const int64_t mh = a->slopes ? Hq : 1;
        const attn_window win = a->opts.window;
        for (int64_t h = 0; h < mh; ++h) {
            const float slope = a->slopes ? kv_slope(a, b, h) : 0.0f;
            for (int64_t i = 0; i < Nq; ++i)
                for (int64_t c = 0; c < n; ++c) {
                    const int64_t d = i + L - Nq - (j0 + c);
                    bool seen = a->opts.causal == ATTN_CAUSAL_NONE || d >= 0;
                    if (win.enabled && win.left >= 0 && d > win.left) seen = false;
                    if (win.enabled && win.right >= 0 && -d > win.right) seen = false;
                    float x = a->slopes ? -slope * (float)(d < 0 ? -d : d) : 0.0f;
                    w->mask[(h * Nq + i) * n + c] = seen ? x : -INFINITY;
                }
        }
        mask = attn_tensor_3d(w->mask, mh, Nq, n);
        o.mask[0] = &mask;
    } else if (a->opts.causal == ATTN_CAUSAL_BOTTOM_RIGHT) {
        o.window.enabled = true;
        o.window.left = -1;
        o.window.right = L - (j0 + n);
    }
    return attn_sdpa(&q, &k, &v, &out, NULL, NULL, &o, err);
}

float kv_sink(const kv_attend_call *a, int64_t h)
{
    const attn_tensor *s = a->opts.sinks;
    return s ? ((const float *)s->data)[h * s->stride[0]] : -INFINITY;
}

/* O and S are the sums of exp(m_r - M + ll_r)·o_r and exp(m_r - M + ll_r)
 * over the parts so far, rescaled whenever M grows. A part the row saw
 * nothing of (m = -inf) adds nothing; a NaN makes the row NaN (S = NaN); a
 * +inf logit (m = +inf, ll NaN as the softmax stats give it, or a +inf
 * sink) makes out NaN and LSE +inf, as attn_sdpa.
 * Start from M = sink, S = (sink > -inf), O = 0. */
void kv_merge_part(double *M, double *S, double *O, double m, double ll, const float *o,
                       int64_t Dv)
{
    if (m == -INFINITY) return;
    if (isnan(m) || (isnan(ll) && m != INFINITY) || isnan(*S)) {
        *S = NAN;
        return;
    }
    if (m == INFINITY || *M == INFINITY) { /* a +inf logit (part or sink): out NaN, LSE +inf */
        *M = INFINITY;
        *S = 1.0;
        for (int64_t d = 0; d < Dv; ++d) O[d] = NAN;
        return;
    }
    if (m > *M) {
        const double f = exp(*M - m);
        *S *= f;
        for (int64_t d = 0; d < Dv; ++d) O[d] *= f;
        *M = m;
    }
    const double w = exp(m - *M + ll);
    *S += w;
    for (int64_t d = 0; d < Dv; ++d) O[d] += w * (double)o[d];
}

/* Entry b as parts merged in order (see the header comment). */
static attn_status attend_merged(const kv_attend_call *a, attend_scratch *w, int64_t b,
                                 attn_error *err)
{
    const attn_kvcache *c = a->c;
    const int64_t Hq = a->Hq, Nq = a->Nq, Dv = a->Dv, rows = Hq * Nq, L = c->len[b];
    for (int64_t r = 0; r < rows; ++r) {
        const float sink = kv_sink(a, r / Nq);
        w->acc_m[r] = sink;
        w->acc_s[r] = sink == -INFINITY ? 0.0 : 1.0;
    }
    memset(w->acc_o, 0, (size_t)(rows * Dv) * sizeof(double));
    const bool masked = a->slopes || a->opts.window.enabled;
    for (int64_t j0 = 0; j0 < L;) {
        /* a run of consecutive pool rows, at most MASK_KEYS keys when masked */
        int64_t end = kv_run_end(c, b, j0);
        if (masked && end - j0 > MASK_KEYS) end = j0 + MASK_KEYS;
        RETURN_IF_ERROR(attend_part(a, w, b, j0, end - j0, err));
        for (int64_t r = 0; r < rows; ++r)
            kv_merge_part(&w->acc_m[r], &w->acc_s[r], w->acc_o + r * Dv, w->part_st[2 * r],
                          w->part_st[2 * r + 1], w->part_o + r * Dv, Dv);
        j0 = end;
    }
    for (int64_t r = 0; r < rows; ++r)
        kv_store_merged(a, b, r / Nq, r % Nq, w->acc_m[r], w->acc_s[r], w->acc_o + r * Dv);
    return ATTN_OK;
}

void kv_store_merged(const kv_attend_call *a, int64_t b, int64_t h, int64_t i, double M,
                     double S, const double *O)
{
    const bool nan = S != S, empty = S == 0.0;
    const int64_t dst = b * a->out->stride[0] + h * a->out->stride[1] + i * a->out->stride[2];
    for (int64_t d = 0; d < a->Dv; ++d)
        attn_store_float(a->out->data, a->out->dtype, dst + d * a->out->stride[3],
                         nan ? NAN : empty ? 0.0f : (float)(O[d] / S));
    if (a->lse)
        ((float *)a->lse->data)[b * a->lse->stride[0] + h * a->lse->stride[1] +
                                i * a->lse->stride[2]] =
            nan ? NAN : empty ? -INFINITY : (float)(M + log(S));
    if (a->stats) {
        float *st = (float *)a->stats->data + b * a->stats->stride[0] + h * a->stats->stride[1] +
                    i * a->stats->stride[2];
        st[0] = nan ? NAN : empty ? -INFINITY : (float)M;
        st[a->stats->stride[3]] = nan ? NAN : empty ? 0.0f : (float)log(S);
    }
}

/* A (B, Hq, Nq[, last]) output of the call: float32, or (half_ok, the
 * output itself) bfloat16 / float16 too. */
static attn_status check_output(const attn_tensor *t, const char *name, int ndim,
                                const int64_t *want, bool half_ok, attn_error *err)
{
    RETURN_IF_ERROR(half_ok ? attn_check_float_tensor(t, name, ndim, true, err)
                            : attn_check_tensor(t, name, ndim, ATTN_F32, true, err));
    static const char *const dims[4] = {"batch", "heads", "sequence", "feature"};
    for (int d = 0; d < ndim; ++d)
        RETURN_IF(t->shape[d] != want[d], err, ATTN_ERR_SHAPE, "%s: %s size is %lld, expected %lld",
                  name, dims[d], (long long)t->shape[d], (long long)want[d]);
    return ATTN_OK;
}

/* True when entry b's keys are consecutive storage rows (one view). */
static bool one_run(const attn_kvcache *c, int64_t b)
{
    return kv_run_end(c, b, 0) >= c->len[b];
}

/* One entry on `threads` threads with worker scratch w. */
static attn_status attend_entry(const kv_attend_call *a, attend_scratch *w, int64_t b, int threads,
                                attn_error *err)
{
    w->threads = threads;
    return one_run(a->c, b) ? attend_whole(a, b, threads, err) : attend_merged(a, w, b, err);
}

typedef struct {
    const kv_attend_call *a;
    attend_scratch *ws; /* one per thread */
} entries_ctx;

static attn_status attend_item(void *ctx, int64_t b, int threads, int slot, attn_error *err)
{
    const entries_ctx *x = ctx;
    return attend_entry(x->a, &x->ws[slot], b, threads, err);
}

/* Every entry, scheduled as attn_sdpa_varlen schedules its sequences
 * (core/schedule.h); the cost of an entry is its keys times its queries. */
static attn_status attend_entries(const kv_attend_call *a, attend_scratch *ws, int threads,
                                  attn_error *err)
{
    const int64_t B = a->c->cfg.batch;
    double *cost = malloc((size_t)B * sizeof *cost);
    RETURN_IF(!cost, err, ATTN_ERR_ALLOC, "kvcache: cannot allocate the schedule");
    for (int64_t b = 0; b < B; ++b) cost[b] = (double)(a->c->len[b] + 1) * (double)a->Nq;
    entries_ctx x = {a, ws};
    const attn_status s = attn_schedule_items(cost, B, threads, attend_item, &x, "kvcache", err);
    free(cost);
    return s;
}

attn_status kv_attend_prepare(const attn_kvcache *cache, const attn_tensor *q, attn_tensor *out,
                              attn_tensor *lse, const attn_sdpa_opts *opts, kv_attend_call *call,
                              attn_error *err)
{
    RETURN_IF(!cache, err, ATTN_ERR_NULL, "cache: pointer is NULL");
    const attn_kvcache_config *g = &cache->cfg;
    kv_attend_call a;
    memset(&a, 0, sizeof a);
    a.c = cache;
    a.opts = opts ? *opts : attn_sdpa_opts_default();
    for (int i = 0; i < ATTN_SDPA_MAX_MASKS; ++i)
        RETURN_IF(a.opts.mask[i], err, ATTN_ERR_UNSUPPORTED,
                  "mask[%d]: masks are not supported by the KV cache", i);
    RETURN_IF(a.opts.causal == ATTN_CAUSAL_TOP_LEFT, err, ATTN_ERR_ARG,
              "causal: the KV cache aligns new tokens bottom-right (ATTN_CAUSAL_BOTTOM_RIGHT)");
    RETURN_IF(a.opts.dropout_p != 0.0f, err, ATTN_ERR_UNSUPPORTED,
              "dropout_p: not supported by the KV cache (inference only)");
    RETURN_IF(a.opts.grad_sinks, err, ATTN_ERR_ARG, "grad_sinks: an output of the backward only");
    RETURN_IF(a.opts.rope, err, ATTN_ERR_ARG,
              "rope: the cache holds rotated keys; rotate through attn_kvcache_update_attend's "
              "rope (opts.rope must be NULL)");
    RETURN_IF(a.opts.workspace, err, ATTN_ERR_UNSUPPORTED,
              "workspace: the KV cache allocates per call; pass NULL");
    /* q, heads, features and every option by attn_sdpa's rules, on an
     * empty stand-in of the keys */
    RETURN_IF_ERROR(attn_check_float_tensor(q, "query", 4, false, err));
    RETURN_IF(q->shape[0] != g->batch, err, ATTN_ERR_SHAPE,
              "query: batch size is %lld, the cache has %lld", (long long)q->shape[0],
              (long long)g->batch);
    attn_tensor k0, v0;
    key_views(cache, 0, 0, 0, &k0, &v0);
    k0.shape[0] = v0.shape[0] = g->batch;
    attn_sdpa_opts probe = a.opts;
    probe.softmax_stats = NULL;
    size_t bytes;
    RETURN_IF_ERROR(attn_sdpa_workspace_size(q, &k0, &v0, false, &probe, &bytes, err));
    a.q = q;
    a.Hq = q->shape[1];
    a.Nq = q->shape[2];
    a.Dv = g->value_dim;
    RETURN_IF(!out, err, ATTN_ERR_NULL, "out: tensor is NULL");
    const int64_t want[4] = {g->batch, a.Hq, a.Nq, a.Dv}, swant[4] = {g->batch, a.Hq, a.Nq, 2};
    RETURN_IF_ERROR(check_output(out, "out", 4, want, true, err));
    if (lse) RETURN_IF_ERROR(check_output(lse, "lse", 3, want, false, err));
    if (a.opts.softmax_stats)
        RETURN_IF_ERROR(check_output(a.opts.softmax_stats, "softmax_stats", 4, swant, false, err));
    /* whole tensors: an entry's call sees only its own rows */
    const attn_tensor *outs[3] = {out, lse, a.opts.softmax_stats};
    static const char *const out_names[3] = {"out", "lse", "softmax_stats"};
    const attn_tensor *ins[3] = {q, a.opts.alibi_slopes, a.opts.sinks};
    static const char *const in_names[3] = {"query", "alibi_slopes", "sinks"};
    RETURN_IF_ERROR(attn_check_call_memory(outs, out_names, 3, ins, in_names, 3, a.opts.workspace,
                                           a.opts.workspace_size, err));
    a.out = out;
    a.lse = lse;
    a.stats = a.opts.softmax_stats;
    a.slopes = a.opts.alibi_slopes;
    *call = a;
    return ATTN_OK;
}

/* Whether the decode kernel (decode.c) reads the call: always for quantized
 * storage; for float storage when the call is decode-shaped (at most
 * DECODE_ROWS query rows per kv head, an entry of DECODE_MIN_KEYS keys or
 * more), its path is AUTO and the kernel has a SIMD table for this CPU
 * (AVX-512: steps 1.1-1.6x faster; AVX2: 1.05-1.25x). Shorter caches paid
 * more for the kernel's per-call setup than they gained (docs/PERFORMANCE.md,
 * "Decode"). Its bits differ from attn_sdpa's by float32 roundings;
 * ATTN_PATH_FUSED and _REFERENCE keep attn_sdpa's path and its exact bits. */
static bool decode_kernel_reads(const kv_attend_call *a)
{
    const attn_kvcache *c = a->c;
    if (kv_quantized(c)) return true;
    int64_t longest = 0;
    for (int64_t b = 0; b < c->cfg.batch; ++b) longest = c->len[b] > longest ? c->len[b] : longest;
    const int64_t rows = a->Hq / c->cfg.kv_heads * a->Nq;
    return a->opts.path == ATTN_PATH_AUTO && rows <= DECODE_ROWS && longest >= DECODE_MIN_KEYS &&
           kv_row_kernels_select()->reads_float;
}

attn_status kv_attend_run(const kv_attend_call *call, attn_error *err)
{
    const kv_attend_call a = *call;
    const attn_kvcache *cache = a.c;
    const attn_tensor *q = a.q;
    attn_tensor *out = (attn_tensor *)a.out, *lse = (attn_tensor *)a.lse;
    const attn_kvcache_config *g = &cache->cfg;
    if (decode_kernel_reads(&a)) return kv_decode(&a, attn_resolve_threads(a.opts.num_threads), err);

    /* Contiguous with equal lengths: one call over the whole batch. */
    bool equal = !kv_paged(cache) && !cache->entry_of && !cache->first;
    for (int64_t b = 1; b < g->batch && equal; ++b) equal = cache->len[b] == cache->len[0];
    if (equal) {
        attn_tensor k, v;
        key_views(cache, 0, 0, cache->len[0], &k, &v);
        k.shape[0] = v.shape[0] = g->batch;
        k.stride[0] = g->kv_heads * g->capacity * g->head_dim;
        v.stride[0] = g->kv_heads * g->capacity * g->value_dim;
        return attn_sdpa(q, &k, &v, out, lse, NULL, &a.opts, err);
    }
    bool need_merge = false;
    for (int64_t b = 0; b < g->batch; ++b) need_merge |= !one_run(cache, b);
    const int threads = attn_resolve_threads(a.opts.num_threads);
    attend_scratch *ws = calloc((size_t)threads, sizeof *ws);
    RETURN_IF(!ws, err, ATTN_ERR_ALLOC, "kvcache: cannot allocate merge scratch");
    attn_status s = ATTN_OK;
    for (int t = 0; t < threads && need_merge && s == ATTN_OK; ++t) {
        const int64_t rows = a.Hq * a.Nq;
        const bool masked = a.slopes || a.opts.window.enabled;
        attend_scratch *w = &ws[t];
        w->part_o = malloc((size_t)(rows * a.Dv) * sizeof(float));
        w->part_st = malloc((size_t)(rows * 2) * sizeof(float));
        w->acc_o = malloc((size_t)(rows * a.Dv) * sizeof(double));
        w->acc_m = malloc((size_t)rows * sizeof(double));
        w->acc_s = malloc((size_t)rows * sizeof(double));
        w->mask = masked ? malloc((size_t)(rows * MASK_KEYS) * sizeof(float)) : NULL;
        if (!w->part_o || !w->part_st || !w->acc_o || !w->acc_m || !w->acc_s || (masked && !w->mask))
            s = attn_fail(err, ATTN_ERR_ALLOC, "kvcache: cannot allocate merge scratch");
    }
    if (s == ATTN_OK) s = attend_entries(&a, ws, threads, err);
    for (int t = 0; t < threads; ++t) {
        attend_scratch *w = &ws[t];
        free(w->part_o), free(w->part_st), free(w->acc_o), free(w->acc_m), free(w->acc_s),
            free(w->mask);
    }
    free(ws);
    if (s == ATTN_OK) attn_ok(err);
    return s;
}

attn_status attn_kvcache_attend(const attn_kvcache *cache, const attn_tensor *q,
                                attn_tensor *out, attn_tensor *lse, const attn_sdpa_opts *opts,
                                attn_error *err)
{
    return attn_kvcache_attend_batch(cache, q, out, lse, opts, NULL, err);
}
