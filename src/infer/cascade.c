/*
 * Cascade decode: entries of a paged cache whose block tables start with
 * the same pool blocks (attn_kvcache_fork) attend those shared keys once,
 * together, and their own keys separately; the two parts are merged
 * through their softmax statistics (FlashInfer's cascade attention).
 *
 * A group: the entries whose first block is the same pool block (and whose
 * view starts at position 0). Its prefix is the P = k·block_size leading
 * positions that every member maps to the same blocks and every query of
 * every member sees (bottom-right causal: P <= length_b - Nq + 1).
 *
 *   prefix   one attention per group over the leader's first P keys with
 *            every member's queries as rows of the kv head they read:
 *              q (1, Hkv, G·n·Nq, D), row (g·n + m)·Nq + i = query i of
 *              query head h·G + g of member m
 *            a (G·n·Nq × P) problem per kv head (GEMM-shaped) where the
 *            entries one by one are n·G·Nq matrix-vector passes over the
 *            same keys
 *   suffix   every entry's keys past its prefix ([P, length_b), or all of
 *            them outside a group), the caller's options: one view with
 *            first = P per entry
 *   merge    per row, in double: the sink, then the prefix part, then the
 *            suffix part (kv_merge_part), so the bits do not depend on the
 *            thread count (every part's do not).
 *
 * Window and ALiBi make the prefix's visibility and bias differ per entry:
 * those calls are not split (*done false), nor are calls where no two
 * entries share a block.
 */
#include "../core/half.h"
#include "cache.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t leader; /* the lowest-numbered member */
    int64_t n;      /* members */
    int64_t P;      /* shared keys attended once */
} cascade_group;

/* Positions of entry b every query row sees from 0 on. */
static int64_t seen_by_all(const kv_attend_call *a, int64_t b)
{
    const int64_t L = a->c->len[b];
    return a->opts.causal == ATTN_CAUSAL_BOTTOM_RIGHT ? L - a->Nq + 1 : L;
}

/* Leading blocks entries b and e map to the same pool blocks, within
 * `limit` blocks. */
static int64_t common_blocks(const attn_kvcache *c, int64_t b, int64_t e, int64_t limit)
{
    const int32_t *x = kv_table(c, b), *y = kv_table(c, e);
    int64_t k = 0;
    while (k < limit && x[k] == y[k]) k++;
    return k;
}

/* Finds the groups: group[b] = index into *out of entry b's group, -1 when
 * it has none; returns how many. */
static int64_t find_groups(const kv_attend_call *a, int64_t *group, cascade_group *out)
{
    const attn_kvcache *c = a->c;
    const int64_t B = c->cfg.batch, bs = c->cfg.block_size;
    int64_t ngroups = 0;
    for (int64_t b = 0; b < B; ++b) group[b] = -2; /* not yet looked at */
    for (int64_t b = 0; b < B; ++b) {
        if (group[b] != -2) continue;
        group[b] = -1;
        int64_t lim = seen_by_all(a, b) / bs;
        if (kv_first(c, b) != 0 || lim < 1) continue;
        cascade_group gr = {.leader = b, .n = 1, .P = lim};
        for (int64_t e = b + 1; e < B; ++e) {
            if (group[e] != -2 || kv_first(c, e) != 0) continue;
            const int64_t le = seen_by_all(a, e) / bs;
            if (le < 1 || kv_table(c, e)[0] != kv_table(c, b)[0]) continue;
            const int64_t k = common_blocks(c, b, e, le < gr.P ? le : gr.P);
            gr.P = k;
            gr.n++;
            group[e] = ngroups;
        }
        if (gr.n < 2) continue;
        gr.P *= bs;
        group[b] = ngroups;
        out[ngroups++] = gr;
    }
    return ngroups;
}

/* The prefix of group gr: its members' queries packed (1, Hkv, R, D) into
 * q, attended over the leader's first P keys into o (1, Hkv, R, Dv) and
 * st (1, Hkv, R, 2). */
static attn_status attend_prefix(const kv_attend_call *a, const cascade_group *gr,
                                 const int64_t *members, float *q, float *o, float *st,
                                 attn_error *err)
{
    const attn_kvcache *c = a->c;
    const int64_t Hkv = c->cfg.kv_heads, G = a->Hq / Hkv, Nq = a->Nq, D = c->cfg.head_dim;
    const int64_t n = gr->n, R = G * n * Nq;
    const attn_tensor *Q = a->q;
    for (int64_t h = 0; h < Hkv; ++h)
        for (int64_t g = 0; g < G; ++g)
            for (int64_t m = 0; m < n; ++m)
                for (int64_t i = 0; i < Nq; ++i) {
                    float *dst = q + (h * R + (g * n + m) * Nq + i) * D;
                    const int64_t at = members[m] * Q->stride[0] + (h * G + g) * Q->stride[1] +
                                       i * Q->stride[2];
                    for (int64_t d = 0; d < D; ++d)
                        dst[d] = attn_load_float(Q->data, Q->dtype, at + d * Q->stride[3]);
                }
    attn_kvcache view = *c;
    const int64_t entry = kv_entry(c, gr->leader);
    int64_t len = gr->P;
    view.cfg.batch = 1;
    view.len = &len;
    view.entry_of = &entry;
    view.first = NULL;
    attn_tensor qt = attn_tensor_4d(q, 1, Hkv, R, D);
    attn_tensor ot = attn_tensor_4d(o, 1, Hkv, R, a->Dv);
    attn_tensor stt = attn_tensor_4d(st, 1, Hkv, R, 2);
    attn_sdpa_opts opts = a->opts;
    opts.causal = ATTN_CAUSAL_NONE; /* every row sees every prefix key */
    opts.sinks = NULL;              /* the merge adds the sink once */
    opts.softmax_stats = &stt;
    kv_attend_call pa;
    RETURN_IF_ERROR(kv_attend_prepare(&view, &qt, &ot, NULL, &opts, &pa, err));
    return kv_attend_run(&pa, err);
}

/* Every entry's keys past its prefix (prefix[b] positions) into o
 * (B, Hq, Nq, Dv) and st (B, Hq, Nq, 2). */
static attn_status attend_suffix(const kv_attend_call *a, const int64_t *prefix, int64_t *len,
                                 int64_t *first, float *o, float *st, attn_error *err)
{
    const attn_kvcache *c = a->c;
    const int64_t B = c->cfg.batch;
    attn_kvcache view = *c;
    for (int64_t b = 0; b < B; ++b) {
        len[b] = c->len[b] - prefix[b];
        first[b] = kv_first(c, b) + prefix[b];
    }
    view.len = len;
    view.first = first;
    attn_tensor ot = attn_tensor_4d(o, B, a->Hq, a->Nq, a->Dv);
    attn_tensor stt = attn_tensor_4d(st, B, a->Hq, a->Nq, 2);
    attn_sdpa_opts opts = a->opts;
    opts.sinks = NULL;
    opts.softmax_stats = &stt;
    kv_attend_call sa;
    RETURN_IF_ERROR(kv_attend_prepare(&view, a->q, &ot, NULL, &opts, &sa, err));
    return kv_attend_run(&sa, err);
}

attn_status kv_cascade(const kv_attend_call *a, bool *done, attn_error *err)
{
    *done = false;
    const attn_kvcache *c = a->c;
    if (!kv_paged(c) || a->slopes || a->opts.window.enabled || c->cfg.batch < 2) return ATTN_OK;
    const int64_t B = c->cfg.batch, Hq = a->Hq, Nq = a->Nq, Dv = a->Dv;
    const int64_t Hkv = c->cfg.kv_heads, G = Hq / Hkv, D = c->cfg.head_dim;
    int64_t *ints = malloc((size_t)(6 * B) * sizeof *ints);
    cascade_group *groups = malloc((size_t)B * sizeof *groups);
    if (!ints || !groups) {
        free(ints), free(groups);
        return attn_fail(err, ATTN_ERR_ALLOC, "kvcache: cannot allocate the cascade plan");
    }
    int64_t *group = ints, *prefix = ints + B, *member = ints + 2 * B, *members = ints + 3 * B;
    int64_t *len = ints + 4 * B, *first = ints + 5 * B;
    const int64_t ngroups = find_groups(a, group, groups);
    if (ngroups == 0) {
        free(ints), free(groups);
        return ATTN_OK;
    }
    *done = true;
    int64_t most = 0; /* rows of the largest group */
    for (int64_t k = 0; k < ngroups; ++k) most = groups[k].n > most ? groups[k].n : most;
    const int64_t rows = G * most * Nq, out_rows = B * Hq * Nq;
    float *pq = malloc((size_t)(Hkv * rows * D) * sizeof *pq);
    float *po = malloc((size_t)(ngroups * Hkv * rows * Dv) * sizeof *po);
    float *pst = malloc((size_t)(ngroups * Hkv * rows * 2) * sizeof *pst);
    float *so = malloc((size_t)(out_rows * Dv) * sizeof *so);
    float *sst = malloc((size_t)(out_rows * 2) * sizeof *sst);
    double *acc = malloc((size_t)Dv * sizeof *acc);
    attn_status s = ATTN_OK;
    if (!pq || !po || !pst || !so || !sst || !acc)
        s = attn_fail(err, ATTN_ERR_ALLOC, "kvcache: cannot allocate the cascade buffers");
    for (int64_t k = 0; k < ngroups && s == ATTN_OK; ++k) {
        int64_t n = 0;
        for (int64_t b = 0; b < B; ++b)
            if (group[b] == k) {
                member[b] = n;
                members[n++] = b;
            }
        s = attend_prefix(a, &groups[k], members, pq, po + k * Hkv * rows * Dv,
                          pst + k * Hkv * rows * 2, err);
    }
    for (int64_t b = 0; b < B; ++b) prefix[b] = group[b] >= 0 ? groups[group[b]].P : 0;
    if (s == ATTN_OK) s = attend_suffix(a, prefix, len, first, so, sst, err);
    for (int64_t b = 0; b < B && s == ATTN_OK; ++b)
        for (int64_t hq = 0; hq < Hq; ++hq)
            for (int64_t i = 0; i < Nq; ++i) {
                const float sink = kv_sink(a, hq);
                double M = sink, S = sink == -INFINITY ? 0.0 : 1.0;
                memset(acc, 0, (size_t)Dv * sizeof *acc);
                if (group[b] >= 0) {
                    const int64_t k = group[b], n = groups[k].n, h = hq / G, g = hq % G;
                    const int64_t r = h * G * n * Nq + (g * n + member[b]) * Nq + i;
                    const float *st = pst + k * Hkv * rows * 2 + r * 2;
                    kv_merge_part(&M, &S, acc, st[0], st[1], po + (k * Hkv * rows + r) * Dv, Dv);
                }
                const int64_t r = (b * Hq + hq) * Nq + i;
                kv_merge_part(&M, &S, acc, sst[2 * r], sst[2 * r + 1], so + r * Dv, Dv);
                kv_store_merged(a, b, hq, i, M, S, acc);
            }
    free(pq), free(po), free(pst), free(so), free(sst), free(acc);
    free(ints), free(groups);
    return s;
}
