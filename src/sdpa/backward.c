/*
 * Fused backward in the FlashAttention-2 manner: P is recomputed tile by
 * tile from the saved LSE and nothing of size Nq × Nk is ever stored.
 *
 * Forward (per row i):  S = scale·Q·Kᵀ + bias,  P = exp(S - lse),  O = P·V.
 * Backward, per key tile j (keys outer, so dK_j and dV_j live in scratch)
 * and query tile i of every query head sharing the kv head:
 *   S   = Q_i·K_jᵀ ; P = exp(scale·S + bias - lse_i)      (recompute)
 *   dV_j += Pᵀ·dO_i                      (forward: O = P·V)
 *   dP   = dO_i·V_jᵀ                     (forward: O = P·V)
 *   dS   = scale·P∘(dP - D_i), D_i = rowsum(dO_i∘O_i)   (forward: softmax)
 *   dK_j += dSᵀ·Q_i                      (forward: S = scale·Q·Kᵀ)
 *   dQ_i += dS·K_j                       (forward: S = scale·Q·Kᵀ)
 *
 * Determinism without atomics: a task is (b, kv head, chunk of key tiles)
 * and owns dK/dV of its keys outright (summing the group's query heads in a
 * fixed order). dQ_i collects contributions from every key tile, so each
 * chunk accumulates into its own dQ partial and the partials are added in
 * chunk order at the end. The chunking depends only on the shapes, never on
 * the thread count, so results are bit-identical for any number of threads.
 *
 * Memory: per thread a few tiles; shared: D and a copy of the LSE (B·Hq·Nq
 * each), the dQ partials (chunks · B·Hq·Nq·D), and O/LSE when the caller did
 * not pass them (then the fused forward recomputes them first). All linear
 * in the sequence length.
 */
#include "fused_util.h"

#ifdef _OPENMP
#include <omp.h>
#endif

enum {
    BWD_ROWS = 64, /* query rows per tile */
    BWD_KEYS = 96, /* keys per tile */
    /* Aim for this many (b, kv head, chunk) tasks so small batches still
     * spread over threads; a function of the shape alone. */
    BWD_TARGET_TASKS = 24,
};
/* dQ partial copies beyond the first may use at most this much memory. */
#define BWD_PARTIAL_BUDGET ((int64_t)64 << 20)

typedef struct {
    int64_t dp, dvp, bcp; /* padded widths: key features, value features, keys */
    int64_t rows;         /* B·Hq·Nq */
    int64_t kblocks;      /* key tiles */
    int64_t chunks;       /* key-tile chunks (dQ partials) */
    bool recompute;       /* O and LSE come from our own forward */
} bwd_dims;

static bwd_dims backward_dims(const sdpa_problem *p)
{
    bwd_dims d;
    d.dp = sdpa_round_up(p->D, SDPA_MAX_NPAD);
    d.dvp = sdpa_round_up(p->Dv, SDPA_MAX_NPAD);
    d.bcp = sdpa_round_up(BWD_KEYS, SDPA_MAX_NPAD);
    d.rows = p->B * p->Hq * p->Nq;
    d.kblocks = (p->Nk + BWD_KEYS - 1) / BWD_KEYS;
    d.recompute = !p->o || !p->lse;
    const int64_t base = p->B * p->Hkv > 0 ? p->B * p->Hkv : 1;
    int64_t c = base >= BWD_TARGET_TASKS ? 1 : (BWD_TARGET_TASKS + base - 1) / base;
    if (c > d.kblocks) c = d.kblocks;
    if (c < 1) c = 1;
    int64_t one;
    if (!p->dq || !attn_mul_ok(d.rows, d.dp * (int64_t)sizeof(float), &one)) {
        c = 1; /* no dQ: nothing to split for; overflow is reported by the sizing */
    } else {
        while (c > 1 && one > 0 && (c - 1) > BWD_PARTIAL_BUDGET / one) c--;
    }
    d.chunks = c;
    return d;
}

typedef struct {
    float *kt, *kr, *vt, *dk, *dv, *qb, *dob, *s, *dps, *bias;
    int32_t *limit;
} bwd_scratch;

static sdpa_size backward_thread_bytes(const sdpa_problem *p, const bwd_dims *d)
{
    sdpa_size s = {0, true};
    sdpa_size_add(&s, p->D * d->bcp, sizeof(float));    /* kt: Kᵀ */
    sdpa_size_add(&s, BWD_KEYS * d->dp, sizeof(float));  /* kr: K rows */
    sdpa_size_add(&s, p->Dv * d->bcp, sizeof(float));   /* vt: Vᵀ */
    sdpa_size_add(&s, BWD_KEYS * d->dp, sizeof(float));  /* dk */
    sdpa_size_add(&s, BWD_KEYS * d->dvp, sizeof(float)); /* dv */
    sdpa_size_add(&s, BWD_ROWS * d->dp, sizeof(float));  /* qb */
    sdpa_size_add(&s, BWD_ROWS * d->dvp, sizeof(float)); /* dob */
    sdpa_size_add(&s, BWD_ROWS * d->bcp, sizeof(float)); /* s: S, then P */
    sdpa_size_add(&s, BWD_ROWS * d->bcp, sizeof(float)); /* dps: dP, then dS */
    sdpa_size_add(&s, BWD_ROWS * d->bcp, sizeof(float)); /* bias */
    sdpa_size_add(&s, BWD_ROWS, sizeof(int32_t));        /* limit */
    return s;
}

static bwd_scratch carve_scratch(const sdpa_problem *p, const bwd_dims *d, char *base)
{
    bwd_scratch w;
    w.kt = sdpa_take(&base, p->D * d->bcp, sizeof(float));
    w.kr = sdpa_take(&base, BWD_KEYS * d->dp, sizeof(float));
    w.vt = sdpa_take(&base, p->Dv * d->bcp, sizeof(float));
    w.dk = sdpa_take(&base, BWD_KEYS * d->dp, sizeof(float));
    w.dv = sdpa_take(&base, BWD_KEYS * d->dvp, sizeof(float));
    w.qb = sdpa_take(&base, BWD_ROWS * d->dp, sizeof(float));
    w.dob = sdpa_take(&base, BWD_ROWS * d->dvp, sizeof(float));
    w.s = sdpa_take(&base, BWD_ROWS * d->bcp, sizeof(float));
    w.dps = sdpa_take(&base, BWD_ROWS * d->bcp, sizeof(float));
    w.bias = sdpa_take(&base, BWD_ROWS * d->bcp, sizeof(float));
    w.limit = sdpa_take(&base, BWD_ROWS, sizeof(int32_t));
    return w;
}

/* Shared (not per-thread) arrays, then per-thread scratch, then the
 * forward's workspace when O/LSE are recomputed. */
static sdpa_size backward_bytes(const sdpa_problem *p, const bwd_dims *d, size_t *per_thread,
                                size_t *forward)
{
    sdpa_size s = {0, true};
    sdpa_size_add(&s, d->rows, sizeof(float)); /* di */
    sdpa_size_add(&s, d->rows, sizeof(float)); /* lse copy */
    int64_t part = 0;
    if (p->dq && !attn_mul_ok(d->chunks * d->dp, d->rows, &part)) s.ok = false;
    sdpa_size_add(&s, part, sizeof(float)); /* dQ partials */
    int64_t orows = 0;
    if (d->recompute && !attn_mul_ok(d->rows, p->Dv, &orows)) s.ok = false;
    sdpa_size_add(&s, orows, sizeof(float)); /* recomputed O */
    const sdpa_size t = backward_thread_bytes(p, d);
    *per_thread = t.bytes;
    int64_t all = 0;
    if (!t.ok || !attn_mul_ok((int64_t)t.bytes, p->threads, &all)) s.ok = false;
    sdpa_size_add(&s, all, 1);
    *forward = 0;
    if (d->recompute) {
        if (!sdpa_fused_forward_workspace(p, forward)) s.ok = false;
        sdpa_size_add(&s, (int64_t)*forward, 1);
    }
    return s;
}

bool sdpa_fused_backward_workspace(const sdpa_problem *p, size_t *bytes)
{
    const bwd_dims d = backward_dims(p);
    size_t per_thread, forward;
    const sdpa_size s = backward_bytes(p, &d, &per_thread, &forward);
    if (!s.ok || s.bytes > SIZE_MAX - SDPA_WORKSPACE_SLACK) return false;
    *bytes = s.bytes + SDPA_WORKSPACE_SLACK;
    return true;
}

/* Splits the key tiles into d->chunks contiguous ranges of similar work
 * (query rows that can see each tile); first[c] .. first[c+1]. */
static void chunk_bounds(const sdpa_problem *p, const bwd_dims *d, int64_t *first)
{
    int64_t total = 0;
    for (int64_t kb = 0; kb < d->kblocks; ++kb) total += p->Nq - sdpa_causal_first_row(p, kb * BWD_KEYS);
    int64_t c = 1, acc = 0;
    first[0] = 0;
    for (int64_t kb = 0; kb < d->kblocks && c < d->chunks; ++kb) {
        acc += p->Nq - sdpa_causal_first_row(p, kb * BWD_KEYS);
        /* Close chunk c-1 after this tile once it holds its share. */
        if (acc * d->chunks >= total * c && d->kblocks - (kb + 1) >= d->chunks - c) first[c++] = kb + 1;
    }
    while (c <= d->chunks) first[c++] = d->kblocks; /* trailing chunks may be empty */
}

/* One task: key tiles [kb0, kb1) of kv head (b, hk); dQ into part. */
static void backward_task(const sdpa_problem *p, const sdpa_kernels *kern, const bwd_dims *d,
                          int64_t b, int64_t hk, int64_t kb0, int64_t kb1, const float *lse,
                          const float *di, float *part, bwd_scratch *w)
{
    const int64_t dn = sdpa_round_up(p->D, kern->npad), dvn = sdpa_round_up(p->Dv, kern->npad);
    const bool want_ds = p->dk || p->dq;
    for (int64_t kb = kb0; kb < kb1; ++kb) {
        const int64_t j0 = kb * BWD_KEYS, nj = p->Nk - j0 < BWD_KEYS ? p->Nk - j0 : BWD_KEYS;
        memset(w->dk, 0, (size_t)(nj * d->dp) * sizeof(float));
        memset(w->dv, 0, (size_t)(nj * d->dvp) * sizeof(float));
        bool packed = false;
        const float *kr = NULL; /* K_j as rows (B operand of dQ += dS·K_j) */
        int64_t ldk = 0;
        const int64_t ifirst = sdpa_causal_first_row(p, j0);
        for (int64_t h = hk * p->group; h < (hk + 1) * p->group; ++h) {
            for (int64_t i0 = ifirst - ifirst % BWD_ROWS; i0 < p->Nq; i0 += BWD_ROWS) {
                const int64_t mi = p->Nq - i0 < BWD_ROWS ? p->Nq - i0 : BWD_ROWS;
                const sdpa_tile t = sdpa_plan_tile(p, kern, b, h, i0, mi, j0, nj, w->limit,
                                                   w->bias, d->bcp);
                if (t.cols == 0) continue; /* hidden: nothing to differentiate */
                if (!packed) {
                    const float *k = p->k + AT4(p->ks, b, hk, j0, 0);
                    kern->pack_transposed(k, p->ks[2], p->ks[3], nj, p->D, w->kt, d->bcp);
                    kr = sdpa_rows_operand(k, p->ks[2], p->ks[3], nj, p->D, kern->npad, w->kr,
                                           d->dp, &ldk);
                    kern->pack_transposed(p->v + AT4(p->vs, b, hk, j0, 0), p->vs[2], p->vs[3], nj,
                                          p->Dv, w->vt, d->bcp);
                    packed = true;
                }
                /* Q_i and dO_i serve as A and as B operands: rows, unit stride. */
                int64_t ldq, lddo;
                const float *qb = sdpa_rows_operand(p->q + AT4(p->qs, b, h, i0, 0), p->qs[2],
                                                    p->qs[3], mi, p->D, kern->npad, w->qb, d->dp,
                                                    &ldq);
                const float *dob = sdpa_rows_operand(p->dout + AT4(p->dos, b, h, i0, 0),
                                                     p->dos[2], p->dos[3], mi, p->Dv, kern->npad,
                                                     w->dob, d->dvp, &lddo);
                const int64_t row0 = (b * p->Hq + h) * p->Nq + i0;
                const int64_t cn = sdpa_round_up(t.cols, kern->npad);
                const float *bias = t.use_bias ? w->bias : NULL;

                /* In the forward pass P = exp(scale·Q·Kᵀ + bias - lse); recompute it. */
                kern->gemm(mi, cn, p->D, qb, ldq, 1, w->kt, d->bcp, w->s, d->bcp, NULL,
                           SDPA_GEMM_SET);
                kern->probs_from_lse(mi, t.cols, p->scale, w->s, d->bcp, w->limit, bias,
                                     t.ldbias, lse + row0);
                /* Forward O = P·V, so dV_j += Pᵀ·dO_i. */
                if (p->dv)
                    kern->gemm(t.cols, dvn, mi, w->s, 1, d->bcp, dob, lddo, w->dv, d->dvp,
                               NULL, SDPA_GEMM_ADD);
                if (!want_ds) continue;
                /* ... and dP = dO_i·V_jᵀ; through the softmax dS = scale·P∘(dP - D). */
                kern->gemm(mi, cn, p->Dv, dob, lddo, 1, w->vt, d->bcp, w->dps, d->bcp, NULL,
                           SDPA_GEMM_SET);
                kern->dsoftmax(mi, t.cols, p->scale, w->s, d->bcp, w->dps, d->bcp, di + row0);
                /* Forward S = Q·Kᵀ (scale is inside dS): dK_j += dSᵀ·Q_i, dQ_i += dS·K_j. */
                if (p->dk)
                    kern->gemm(t.cols, dn, mi, w->dps, 1, d->bcp, qb, ldq, w->dk, d->dp, NULL,
                               SDPA_GEMM_ADD);
                if (p->dq)
                    kern->gemm(mi, dn, t.cols, w->dps, d->bcp, 1, kr, ldk,
                               part + row0 * d->dp, d->dp, NULL, SDPA_GEMM_ADD);
            }
        }
        for (int64_t r = 0; r < nj; ++r) {
            if (p->dk) {
                float *dst = p->dk + AT4(p->dks, b, hk, j0 + r, 0);
                for (int64_t c = 0; c < p->D; ++c) dst[c * p->dks[3]] = w->dk[r * d->dp + c];
            }
            if (p->dv) {
                float *dst = p->dv + AT4(p->dvs, b, hk, j0 + r, 0);
                for (int64_t c = 0; c < p->Dv; ++c) dst[c * p->dvs[3]] = w->dv[r * d->dvp + c];
            }
        }
    }
}

attn_status sdpa_fused_backward(const sdpa_problem *p, const sdpa_kernels *kern, attn_error *err)
{
    const bwd_dims d = backward_dims(p);
    size_t per_thread, fwd_bytes;
    const sdpa_size need = backward_bytes(p, &d, &per_thread, &fwd_bytes);
    RETURN_IF(!need.ok, err, ATTN_ERR_OVERFLOW, "workspace size overflows");
    void *owned;
    char *cursor = sdpa_workspace(p, need.bytes, &owned, err);
    if (!cursor) return err ? err->status : ATTN_ERR_ALLOC;
    float *di = sdpa_take(&cursor, d.rows, sizeof(float));
    float *lse = sdpa_take(&cursor, d.rows, sizeof(float));
    float *part = sdpa_take(&cursor, p->dq ? d.chunks * d.dp * d.rows : 0, sizeof(float));
    float *o_ws = sdpa_take(&cursor, d.recompute ? d.rows * p->Dv : 0, sizeof(float));
    char *scratch = sdpa_take(&cursor, (int64_t)per_thread * p->threads, 1);
    const int threads = p->threads;

    /* O and LSE: the caller's, or from the fused forward into our workspace. */
    const float *o = p->o;
    int64_t os[4] = {p->os[0], p->os[1], p->os[2], p->os[3]};
    if (d.recompute) {
        sdpa_problem f = *p;
        f.o = o_ws;
        f.os[3] = 1, f.os[2] = p->Dv, f.os[1] = p->Nq * p->Dv, f.os[0] = p->Hq * p->Nq * p->Dv;
        f.lse = lse;
        f.ls[2] = 1, f.ls[1] = p->Nq, f.ls[0] = p->Hq * p->Nq;
        f.w = NULL;
        f.dout = NULL;
        f.workspace = sdpa_take(&cursor, (int64_t)fwd_bytes, 1);
        f.workspace_size = fwd_bytes;
        attn_status s = sdpa_fused_forward(&f, kern, err);
        if (s != ATTN_OK) {
            free(owned);
            return s;
        }
        o = o_ws;
        memcpy(os, f.os, sizeof os);
    }

    /* D_i = rowsum(dO_i ∘ O_i), and the LSE in row order. */
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t row = 0; row < d.rows; ++row) {
        const int64_t i = row % p->Nq, h = (row / p->Nq) % p->Hq, b = row / (p->Nq * p->Hq);
        const float *orow = o + AT4(os, b, h, i, 0), *drow = p->dout + AT4(p->dos, b, h, i, 0);
        float acc = 0.0f;
        for (int64_t c = 0; c < p->Dv; ++c) acc += drow[c * p->dos[3]] * orow[c * os[3]];
        di[row] = acc;
        if (!d.recompute) lse[row] = p->lse[b * p->ls[0] + h * p->ls[1] + i * p->ls[2]];
        if (p->dq)
            for (int64_t c = 0; c < d.chunks; ++c)
                memset(part + (c * d.rows + row) * d.dp, 0, (size_t)d.dp * sizeof(float));
    }

    int64_t first[BWD_TARGET_TASKS + 1];
    chunk_bounds(p, &d, first);
    const int64_t tasks = p->B * p->Hkv * d.chunks;
#pragma omp parallel num_threads(threads)
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        char *mine = scratch + (size_t)tid * per_thread;
        memset(mine, 0, per_thread);
        bwd_scratch w = carve_scratch(p, &d, mine);
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < tasks; ++t) {
            const int64_t c = t % d.chunks, bh = t / d.chunks;
            backward_task(p, kern, &d, bh / p->Hkv, bh % p->Hkv, first[c], first[c + 1], lse, di,
                          part + c * d.rows * d.dp, &w);
        }
    }

    /* dQ = Σ_chunks partials, in chunk order. */
    if (p->dq) {
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int64_t row = 0; row < d.rows; ++row) {
            const int64_t i = row % p->Nq, h = (row / p->Nq) % p->Hq, b = row / (p->Nq * p->Hq);
            float *dst = p->dq + AT4(p->dqs, b, h, i, 0);
            for (int64_t x = 0; x < p->D; ++x) {
                float acc = part[row * d.dp + x];
                for (int64_t c = 1; c < d.chunks; ++c) acc += part[(c * d.rows + row) * d.dp + x];
                dst[x * p->dqs[3]] = acc;
            }
        }
    }
    free(owned);
    return ATTN_OK;
}
