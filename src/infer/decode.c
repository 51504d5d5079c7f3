/*
 * The decode kernel: attention of a few new queries over a cache read in
 * place, in any storage (float32, bfloat16, float16, int8, fp8 e4m3, q4_0), the
 * rows dequantized in registers (decode_rows.h), never into a float copy.
 *
 * Work is split flash-decoding style into tasks (entry b, kv head h, split
 * s): the keys [s·SPLIT_KEYS, (s+1)·SPLIT_KEYS) of that head, for all the
 * R = (Hq/Hkv)·Nq query rows that read it (GQA: a key row is loaded once for
 * every query head of its group). A task walks its keys in chunks of at most
 * CHUNK_KEYS that lie in one paged block:
 *   s = Q·X_kᵀ (raw format values)    (R, n)   decode_rows scores
 *   s *= per-row key scale (int8)               (fp8: folded into the scale)
 *   online softmax (the SDPA kernels' softmax_online: scale, softcap, ALiBi,
 *     causal/window visibility; rowmax, rowsum, alpha)
 *   acc = alpha·acc + P'·X_v           (R, Dv)  P' = P·per-row value scale
 * and leaves (m, ll = log rowsum, o = acc·v_scale / rowsum) per row. The
 * splits of a (b, h) are then merged in split order in double with the sink
 * (kv_merge_part). Split boundaries depend on the key positions only, so the
 * result does not depend on the thread count.
 */
#include "../core/half.h"
#include "../kernels/kernels.h"
#include "cache.h"
#include "decode_rows.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

enum {
    SPLIT_KEYS = 2048, /* keys per task (1024: 5% slower, the per-task work and merge) */
    CHUNK_KEYS = 128,  /* keys per score tile */
    LDS = CHUNK_KEYS,  /* a multiple of every softmax npad */
};

/* A hint that the line holding x is read soon (none where the compiler
 * has no builtin). */
static inline void prefetch_line(const void *x)
{
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(x);
#else
    (void)x;
#endif
}

/* Visible keys [lo, hi) of query row i of an entry of length L. */
static void visible_range(const kv_attend_call *a, int64_t L, int64_t i, int64_t *lo,
                          int64_t *hi)
{
    const int64_t diag = i + L - a->Nq; /* the query's own position */
    const attn_window win = a->opts.window;
    int64_t l = 0, h = L;
    if (a->opts.causal == ATTN_CAUSAL_BOTTOM_RIGHT && diag + 1 < h) h = diag + 1;
    /* compared so that no side, up to INT64_MAX, overflows */
    if (win.enabled && win.left >= 0 && diag > win.left) l = diag - win.left;
    if (win.enabled && win.right >= 0 && win.right < h - 1 - diag) h = diag + win.right + 1;
    *lo = l;
    *hi = h > l ? h : l;
}

typedef struct {
    int64_t b, h, split;
} decode_task;

/* One worker's buffers. */
typedef struct {
    float *q, *s, *acc, *rowmax, *rowsum, *alpha;
    double *merged; /* (Dv) one row's merged output */
    int32_t *start, *end;
    int64_t *lo, *hi;
} decode_scratch;

typedef struct {
    const kv_attend_call *a;
    const kv_row_kernels *rows;
    const sdpa_kernels *sk;
    int64_t G, R, D;
    float *parts; /* per task: R × (Dv + 2): o, then m, ll */
    kv_format kfmt, vfmt; /* how the kernels read K and V */
    float k_unit, v_unit; /* the kernels' raw unit: value = unit·raw·scale */
    bool v_may_be_nan;
} decode_plan;

/* The task's rows of Q as float32 (R, D): row r = g·Nq + i is query i of
 * query head h·G + g. */
static void load_queries(const decode_plan *p, const decode_task *t, float *q)
{
    const attn_tensor *Q = p->a->q;
    for (int64_t g = 0; g < p->G; ++g)
        for (int64_t i = 0; i < p->a->Nq; ++i) {
            const int64_t at = t->b * Q->stride[0] + (t->h * p->G + g) * Q->stride[1] +
                               i * Q->stride[2];
            float *dst = q + (g * p->a->Nq + i) * p->D;
            if (Q->dtype == ATTN_F32 && Q->stride[3] == 1) /* the common case, as one copy */
                memcpy(dst, (const float *)Q->data + at, (size_t)p->D * sizeof *dst);
            else
                for (int64_t d = 0; d < p->D; ++d)
                    dst[d] = attn_load_float(Q->data, Q->dtype, at + d * Q->stride[3]);
        }
}

/* Softmax of one chunk [c0, c0 + n) of every row (logits as sdpa_logits). */
static void chunk_softmax(const decode_plan *p, const decode_task *t, decode_scratch *w,
                          int64_t c0, int64_t n, float key_scale)
{
    const kv_attend_call *a = p->a;
    const int64_t Nq = a->Nq, R = p->R, L = a->c->len[t->b];
    for (int64_t r = 0; r < R; ++r) {
        const int64_t lo = w->lo[r % Nq] - c0, hi = w->hi[r % Nq] - c0;
        w->start[r] = (int32_t)(lo < 0 ? 0 : lo > n ? n : lo);
        w->end[r] = (int32_t)(hi < 0 ? 0 : hi > n ? n : hi);
        if (w->end[r] < w->start[r]) w->end[r] = w->start[r];
    }
    const int64_t npad = (n + 31) / 32 * 32;
    sdpa_logits lg = {.scale = key_scale,
                      .softcap = a->opts.softcap,
                      .inv_softcap = a->opts.softcap > 0.0f ? 1.0f / a->opts.softcap : 0.0f,
                      .start = w->start,
                      .end = w->end};
    if (!a->slopes) {
        p->sk->softmax_online(R, 0, npad, &lg, w->s, LDS, w->rowmax, w->rowsum, w->alpha, NULL);
        return;
    }
    for (int64_t g = 0; g < p->G; ++g) { /* one slope per query head */
        const int64_t r0 = g * Nq;
        lg.start = w->start + r0;
        lg.end = w->end + r0;
        lg.alibi = kv_slope(a, t->b, t->h * p->G + g);
        lg.alibi_d0 = (int32_t)(L - Nq - c0);
        p->sk->softmax_online(Nq, 0, npad, &lg, w->s + r0 * LDS, LDS, w->rowmax + r0,
                              w->rowsum + r0, w->alpha + r0, NULL);
    }
}

/* Keys of the chunk that starts at c0 (before j1): at most CHUNK_KEYS, in
 * consecutive storage rows (paged: blocks with consecutive pool indices,
 * so that small blocks do not cut every chunk short). */
static int64_t chunk_keys(const attn_kvcache *c, int64_t b, int64_t c0, int64_t j1)
{
    const int64_t n = j1 - c0 < CHUNK_KEYS ? j1 - c0 : CHUNK_KEYS;
    if (!kv_paged(c)) return n;
    const int64_t bs = c->cfg.block_size, f = kv_first(c, b);
    const int32_t *tab = kv_table(c, b);
    int64_t blk = (c0 + f) / bs, end = (blk + 1) * bs - f; /* end of c0's block */
    while (end < c0 + n && tab[blk + 1] == tab[blk] + 1) blk++, end += bs;
    return end - c0 < n ? end - c0 : n;
}

static float logit_scale(const kv_attend_call *a, int64_t D)
{
    return a->opts.scale > 0.0f ? a->opts.scale : 1.0f / sqrtf((float)D);
}

/* Whether the fast e4m3 widening's unit 2^8 times f and every head's scale
 * stays finite (else the exact widening, unit 1: a scale near FLT_MAX/256
 * must not become inf). */
static bool unit_fits(const float *hs, int64_t heads, float f)
{
    for (int64_t h = 0; h < heads; ++h)
        if (!isfinite(f * (256.0f * hs[h]))) return false;
    return true;
}

/* Whether row r sees a NaN logit among keys [j0, j1), rescored into s (row
 * r's line of w->s, whose probabilities are then all 0 or no longer needed):
 * for the rare rows whose max is ±inf (the max skips NaN, and exp(inf - inf)
 * = NaN cannot tell a +inf logit from a NaN one). Logits as sdpa_logits, up
 * to rounding, which cannot make or unmake a NaN. */
static bool row_sees_nan(const decode_plan *p, const decode_task *t, decode_scratch *w, int64_t r,
                         int64_t j0, int64_t j1, float key_scale, float *s)
{
    const kv_attend_call *a = p->a;
    const attn_kvcache *c = a->c;
    const int64_t Nq = a->Nq, i = r % Nq, diag = i + c->len[t->b] - Nq;
    const float slope = a->slopes ? kv_slope(a, t->b, t->h * p->G + r / Nq) : 0.0f;
    const float cap = a->opts.softcap;
    const int64_t lo = w->lo[i] > j0 ? w->lo[i] : j0, hi = w->hi[i] < j1 ? w->hi[i] : j1;
    for (int64_t c0 = lo, n; c0 < hi; c0 += n) {
        n = chunk_keys(c, t->b, c0, hi);
        const int64_t row0 = kv_row(c, t->b, t->h, c0);
        p->rows->scores(p->kfmt, kv_row_data(c, false, row0), n, (n + 31) / 32 * 32, p->D,
                        w->q + r * p->D, 1, s, LDS, c->fmt == KV_I8 ? c->k_rs + row0 : NULL, NULL, 0);
        for (int64_t j = 0; j < n; ++j) {
            float x = key_scale * s[j];
            if (cap > 0.0f) x = cap * tanhf(x / cap);
            if (slope != 0.0f) x += -slope * (float)llabs(diag - (c0 + j));
            if (x != x) return true;
        }
    }
    return false;
}

/* Keys [*j0, *j1) of task t's split. */
static void task_keys(const decode_plan *p, const decode_task *t, int64_t *j0, int64_t *j1)
{
    const int64_t L = p->a->c->len[t->b];
    *j0 = t->split * SPLIT_KEYS;
    *j1 = *j0 + SPLIT_KEYS < L ? *j0 + SPLIT_KEYS : L;
}

/* One task: its split's partial (m, ll, o) per row into p->parts. `after`
 * (NULL: none) is the task this worker runs next, whose first keys the last
 * chunk prefetches (each task would start on a cold stream otherwise). */
static void run_task(const decode_plan *p, const decode_task *t, const decode_task *after,
                     float *part, decode_scratch *w)
{
    const kv_attend_call *a = p->a;
    const attn_kvcache *c = a->c;
    const int64_t R = p->R, D = p->D, Dv = a->Dv, L = c->len[t->b];
    const float scale = logit_scale(a, D);
    const float key_scale = c->fmt == KV_E4M3 ? scale * (p->k_unit * c->k_hs[t->h]) : scale;
    load_queries(p, t, w->q);
    for (int64_t i = 0; i < a->Nq; ++i) visible_range(a, L, i, &w->lo[i], &w->hi[i]);
    for (int64_t r = 0; r < R; ++r) {
        w->rowmax[r] = -INFINITY;
        w->rowsum[r] = 0.0f;
    }
    memset(w->acc, 0, (size_t)(R * Dv) * sizeof *w->acc);
    int64_t j0, j1, a0 = 0, a1 = 0;
    task_keys(p, t, &j0, &j1);
    if (after) task_keys(p, after, &a0, &a1);
    int64_t n = chunk_keys(c, t->b, j0, j1);
    for (int64_t c0 = j0; c0 < j1; c0 += n, n = chunk_keys(c, t->b, c0, j1)) {
        const int64_t row0 = kv_row(c, t->b, t->h, c0);
        const void *krows = kv_row_data(c, false, row0), *vrows = kv_row_data(c, true, row0);
        const size_t krow_bytes = (size_t)kv_format_row_bytes(c->fmt, D);
        const size_t vrow_bytes = (size_t)kv_format_row_bytes(c->fmt, Dv);
        /* the scores prefetch this chunk's values, the accumulation the
         * next chunk's keys (a chunk ahead measured no faster) */
        const bool last = c0 + n >= j1;
        const decode_task *nt = last ? after : t; /* whose chunk follows, where */
        const int64_t n0 = last ? a0 : c0 + n;
        const int64_t next_n = !nt ? 0 : last ? chunk_keys(c, nt->b, a0, a1) : chunk_keys(c, t->b, n0, j1);
        const int64_t row1 = next_n ? kv_row(c, nt->b, nt->h, n0) : 0;
        const void *next_k = next_n ? kv_row_data(c, false, row1) : NULL;
        const int64_t npad = (n + 31) / 32 * 32;
        if (c->fmt == KV_I8 && next_n) { /* the next chunk's row scales: a miss each otherwise */
            for (int64_t o = 0; o < next_n; o += 16)
                prefetch_line(c->k_rs + row1 + o), prefetch_line(c->v_rs + row1 + o);
        }
        const float *k_rs = c->fmt == KV_I8 ? c->k_rs + row0 : NULL;
        for (int64_t r = 0; r < R; r += KV_ROWS)
            p->rows->scores(p->kfmt, krows, n, npad, D, w->q + r * D,
                            (int)(R - r < KV_ROWS ? R - r : KV_ROWS), w->s + r * LDS, LDS, k_rs,
                            r == 0 ? vrows : NULL, n * (int64_t)vrow_bytes);
        chunk_softmax(p, t, w, c0, n, key_scale);
        for (int64_t r = 0; r < R; ++r) /* keys seen, max -inf: were their logits NaN? */
            if (w->rowmax[r] == -INFINITY && w->start[r] < w->end[r]) {
                if (row_sees_nan(p, t, w, r, c0, c0 + n, key_scale, w->s + r * LDS))
                    w->rowsum[r] = NAN; /* stays NaN through the next chunks */
                memset(w->s + r * LDS, 0, (size_t)npad * sizeof *w->s); /* p = 0 again */
            }
        int64_t lo = n, hi = 0; /* keys any row sees */
        for (int64_t r = 0; r < R; ++r)
            if (w->start[r] < w->end[r]) {
                if (w->start[r] < lo) lo = w->start[r];
                if (w->end[r] > hi) hi = w->end[r];
            }
        bool ragged = false; /* some row sees less than [lo, hi) */
        for (int64_t r = 0; r < R; ++r) ragged |= w->start[r] != lo || w->end[r] != hi;
        if (lo >= hi) { /* no key of the chunk seen: only the rescale (alpha) */
            for (int64_t r = 0; r < R; ++r)
                if (w->alpha[r] != 1.0f)
                    for (int64_t d = 0; d < Dv; ++d) w->acc[r * Dv + d] *= w->alpha[r];
            continue;
        }
        for (int64_t r = 0; r < R && c->fmt == KV_I8; ++r) /* P' = P·s_v on the keys r sees */
            p->rows->scale(w->s + r * LDS, 1, LDS, w->start[r], w->end[r], c->v_rs + row0);
        if (p->v_may_be_nan && ragged) { /* NaN in v_j reaches only the rows that see j: each row over its keys */
            for (int64_t r = 0; r < R; ++r)
                if (w->start[r] < w->end[r])
                    p->rows->accumulate(p->vfmt, (const char *)vrows + (size_t)w->start[r] * vrow_bytes,
                                        w->end[r] - w->start[r], Dv, w->s + r * LDS + w->start[r], LDS,
                                        1, w->alpha + r, w->acc + r * Dv, Dv, NULL, 0);
                else if (w->alpha[r] != 1.0f)
                    for (int64_t d = 0; d < Dv; ++d) w->acc[r * Dv + d] *= w->alpha[r];
            continue;
        }
        for (int64_t r = 0; r < R; r += KV_ROWS)
            p->rows->accumulate(p->vfmt, (const char *)vrows + (size_t)lo * vrow_bytes, hi - lo, Dv,
                                w->s + r * LDS + lo, LDS, (int)(R - r < KV_ROWS ? R - r : KV_ROWS),
                                w->alpha + r, w->acc + r * Dv, Dv, r == 0 ? next_k : NULL,
                                next_n * (int64_t)krow_bytes);
    }
    const float v_scale = c->fmt == KV_E4M3 ? p->v_unit * c->v_hs[t->h] : 1.0f;
    for (int64_t r = 0; r < R; ++r) {
        float *o = part + r * (Dv + 2);
        const float sum = w->rowsum[r];
        /* the max passes over NaN logits: a max of +inf may hide one */
        const bool nan = w->rowmax[r] == INFINITY
                             ? row_sees_nan(p, t, w, r, j0, j1, key_scale, w->s + r * LDS)
                             : w->rowmax[r] != w->rowmax[r] || sum != sum;
        const bool inf = !nan && w->rowmax[r] == INFINITY; /* out NaN, LSE +inf */
        const float *acc = w->acc + r * Dv;
        const float f = v_scale / sum; /* one division per row, not per element */
        for (int64_t d = 0; d < Dv; ++d) o[d] = nan || inf ? NAN : sum > 0.0f ? acc[d] * f : 0.0f;
        o[Dv] = nan ? NAN : sum > 0.0f || inf ? w->rowmax[r] : -INFINITY;
        o[Dv + 1] = nan || inf ? NAN : sum > 0.0f ? logf(sum) : 0.0f;
    }
}

/* Splits of entry b that hold keys some query row sees: [*s0, *s1). */
static void split_range(const kv_attend_call *a, int64_t b, int64_t *s0, int64_t *s1)
{
    const int64_t L = a->c->len[b];
    int64_t lo = L, hi = 0;
    for (int64_t i = 0; i < a->Nq; ++i) {
        int64_t l, h;
        visible_range(a, L, i, &l, &h);
        if (l < h) {
            if (l < lo) lo = l;
            if (h > hi) hi = h;
        }
    }
    *s0 = lo < hi ? lo / SPLIT_KEYS : 0;
    *s1 = lo < hi ? (hi + SPLIT_KEYS - 1) / SPLIT_KEYS : 0;
}

/* n floats on a 64-byte boundary: the kernels' 32- and 64-byte loads of q
 * and of the scores never straddle a cache line (malloc's 16 bytes made
 * half of them do, for a fifth more time in the scores). */
static float *alloc_floats(int64_t n)
{
    void *mem = NULL;
    return posix_memalign(&mem, 64, (size_t)(n > 0 ? n : 1) * sizeof(float)) ? NULL : mem;
}

static void free_scratch(decode_scratch *w, int n)
{
    for (int i = 0; w && i < n; ++i)
        free(w[i].q), free(w[i].s), free(w[i].acc), free(w[i].rowmax), free(w[i].rowsum),
            free(w[i].alpha), free(w[i].merged), free(w[i].start), free(w[i].end), free(w[i].lo), free(w[i].hi);
    free(w);
}

attn_status kv_decode(const kv_attend_call *a, int threads, attn_error *err)
{
    const attn_kvcache *c = a->c;
    const attn_kvcache_config *g = &c->cfg;
    decode_plan p = {.a = a, .rows = kv_row_kernels_select(), .sk = sdpa_kernels_for(sdpa_isa_select())};
    p.G = a->Hq / g->kv_heads;
    p.R = p.G * a->Nq;
    p.D = g->head_dim;
    /* int8 keeps NaN in the row scale, applied to the keys each row sees;
     * float storage may have been written through attn_kvcache_view */
    p.v_may_be_nan = c->fmt != KV_I8 && (c->v_nonfinite || !kv_quantized(c));
    /* fp8 without NaN codes, scales that 2^8 keeps finite: the cheaper widening through float16 */
    const bool fp8 = c->fmt == KV_E4M3;
    const bool k_fast = fp8 && !c->k_nonfinite &&
                        unit_fits(c->k_hs, g->kv_heads, logit_scale(a, g->head_dim));
    const bool v_fast = fp8 && !c->v_nonfinite && unit_fits(c->v_hs, g->kv_heads, 1.0f);
    p.kfmt = k_fast ? KV_E4M3_FINITE : c->fmt;
    p.vfmt = v_fast ? KV_E4M3_FINITE : c->fmt;
    p.k_unit = p.kfmt == KV_E4M3_FINITE ? 256.0f : 1.0f;
    p.v_unit = p.vfmt == KV_E4M3_FINITE ? 256.0f : 1.0f;
    /* tasks: (b, h, split) for the splits anyone sees */
    int64_t ntask = 0;
    for (int64_t b = 0; b < g->batch; ++b) {
        int64_t s0, s1;
        split_range(a, b, &s0, &s1);
        ntask += (s1 - s0) * g->kv_heads;
    }
    decode_task *tasks = malloc((size_t)(ntask > 0 ? ntask : 1) * sizeof *tasks);
    int64_t *first = malloc((size_t)(g->batch * g->kv_heads + 1) * sizeof *first);
    const int64_t part_floats = p.R * (a->Dv + 2);
    p.parts = malloc((size_t)(ntask > 0 ? ntask : 1) * (size_t)part_floats * sizeof(float));
    decode_scratch *ws = calloc((size_t)threads, sizeof *ws);
    bool ok = tasks && first && p.parts && ws;
    for (int i = 0; ok && i < threads; ++i) {
        decode_scratch *w = &ws[i];
        w->q = alloc_floats(p.R * p.D);
        w->s = alloc_floats(p.R * LDS);
        w->acc = alloc_floats(p.R * a->Dv);
        w->rowmax = malloc((size_t)p.R * sizeof(float));
        w->rowsum = malloc((size_t)p.R * sizeof(float));
        w->alpha = malloc((size_t)p.R * sizeof(float));
        w->merged = malloc((size_t)a->Dv * sizeof(double));
        w->start = malloc((size_t)p.R * sizeof(int32_t));
        w->end = malloc((size_t)p.R * sizeof(int32_t));
        w->lo = malloc((size_t)a->Nq * sizeof(int64_t));
        w->hi = malloc((size_t)a->Nq * sizeof(int64_t));
        ok = w->q && w->s && w->acc && w->rowmax && w->rowsum && w->alpha && w->merged && w->start && w->end &&
             w->lo && w->hi;
    }
    if (!ok) {
        free(tasks), free(first), free(p.parts), free_scratch(ws, threads);
        return attn_fail(err, ATTN_ERR_ALLOC, "kvcache: cannot allocate the decode scratch");
    }
    int64_t n = 0;
    for (int64_t b = 0; b < g->batch; ++b) {
        int64_t s0, s1;
        split_range(a, b, &s0, &s1);
        for (int64_t h = 0; h < g->kv_heads; ++h) {
            first[b * g->kv_heads + h] = n;
            for (int64_t s = s0; s < s1; ++s) tasks[n++] = (decode_task){b, h, s};
        }
    }
    first[g->batch * g->kv_heads] = n;
    /* runs of consecutive tasks (a kv head's splits, in storage order) per
     * claim, at least 4 claims per thread to balance a loaded machine: a
     * worker knows its next task and streams on into it */
    int64_t run = ntask / (4 * (int64_t)threads);
    run = run < 1 ? 1 : run > 64 ? 64 : run;
#pragma omp parallel for schedule(dynamic, run) num_threads(threads)
    for (int64_t i = 0; i < ntask; ++i) {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        const decode_task *after = (i + 1) % run && i + 1 < ntask ? &tasks[i + 1] : NULL;
        run_task(&p, &tasks[i], after, p.parts + i * part_floats, &ws[tid]);
    }
    /* merge each (b, h)'s splits in order */
    const int64_t heads = g->batch * g->kv_heads;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t bh = 0; bh < heads; ++bh) {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        double *acc = ws[tid].merged;
        const int64_t b = bh / g->kv_heads, h = bh % g->kv_heads;
        for (int64_t r = 0; r < p.R; ++r) {
            const int64_t hq = h * p.G + r / a->Nq, i = r % a->Nq;
            const float sink = kv_sink(a, hq);
            double M = sink, S = sink == -INFINITY ? 0.0 : 1.0;
            memset(acc, 0, (size_t)a->Dv * sizeof *acc);
            for (int64_t k = first[bh]; k < first[bh + 1]; ++k) {
                const float *o = p.parts + k * part_floats + r * (a->Dv + 2);
                kv_merge_part(&M, &S, acc, o[a->Dv], o[a->Dv + 1], o, a->Dv);
            }
            kv_store_merged(a, b, hq, i, M, S, acc);
        }
    }
    free(tasks), free(first), free(p.parts), free_scratch(ws, threads);
    attn_ok(err);
    return ATTN_OK;
}
