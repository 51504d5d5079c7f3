/*
 * Fused backward in the FlashAttention-2 manner: P is recomputed tile by
 * tile from the saved LSE and nothing of size Nq × Nk is ever stored.
 *
 * Forward (per row i): X = logits of Q·Kᵀ (kernels.h), P = exp(X - m - ll),
 * O = P·V, where (m, ll) are the row's max and log-sum (lse = m + ll).
 * Backward, per key tile j (keys outer, so dK_j and dV_j live in scratch)
 * and query tile i of every query head sharing the kv head:
 *   S   = Q_i·K_jᵀ ; P = exp(X - m_i - ll_i)              (recompute)
 *   dV_j += Pᵀ·dO_i                      (forward: O = P·V)
 *   dP   = dO_i·V_jᵀ                     (forward: O = P·V)
 *   dS   = f·P∘(dP - D_i), D_i = rowsum(dO_i∘O_i)       (forward: softmax;
 *          f = dX/dS: scale, or scale·(1 - tanh²) under softcap)
 *   dK_j += dSᵀ·Q_i                      (forward: S = scale·Q·Kᵀ)
 *   dQ_i += dS·K_j                       (forward: S = scale·Q·Kᵀ)
 *
 * Determinism without atomic sums: a task is (b, kv head, chunk of key tiles)
 * and owns dK/dV of its keys outright (summing the group's query heads in a
 * fixed order). dQ_i collects contributions from every key tile, so each
 * chunk accumulates into its own dQ partial and the partials are added in
 * chunk order at the end. The chunking depends only on the shapes, never on
 * the thread count, so results are bit-identical for any number of threads.
 *
 * Sinks: a sink is a logit without a value, so dS_sink = -P_sink·D_i and
 * d sink_h = -Σ_(b,i) exp(sink_h - m_i - ll_i)·D_i.
 *
 * Memory: per thread a few tiles; shared: D and the row statistics (B·Hq·Nq
 * each), the dQ partials (per chunk B·Hq·D times the query rows its keys
 * reach: ≈ 1.1·B·Hq·Nq·D under a window), and O/LSE when the caller did
 * not pass them (then the fused forward recomputes them first). All linear
 * in the sequence length.
 */
#include "fused_util.h"
#include "profile.h"
#include "../kernels/bf16_engine.h"


enum {
    BWD_ROWS = 64, /* query rows per tile */
    BWD_KEYS = 96, /* keys per tile */
    BWD_BAND = 12, /* rows (and keys) whose visible columns (rows) a banded tile
                    * trims together (a multiple of every MR) */
    BWD_MAX_BANDS = (BWD_ROWS + BWD_BAND - 1) / BWD_BAND,
    BWD_MAX_KBLOCKS = (BWD_KEYS + BWD_BAND - 1) / BWD_BAND,
    /* Aim for this many (b, kv head, chunk) tasks so small batches still
     * spread over threads; a function of the shape alone. */
    BWD_TARGET_TASKS = 24,
    /* Rows a thread takes at a time in the passes over all rows (dynamic:
     * a thread the machine pauses does not hold the others up). */
    BWD_ROW_CHUNK = 256,
};
/* dQ partial copies beyond the first may use at most this much memory. */
#define BWD_PARTIAL_BUDGET ((int64_t)64 << 20)

typedef struct {
    int64_t dp, dvp, bcp; /* padded widths: key features, value features, keys */
    int64_t rows;         /* B·Hq·Nq */
    int64_t kblocks;      /* key tiles */
    int64_t chunks;       /* key-tile chunks (dQ partials) */
    /* Chunk c: key tiles [first[c], first[c+1]); its dQ partial holds only
     * the query rows [rlo[c], rlo[c] + span[c]) that can see those keys (of
     * every b and head), at part_at[c] floats into the partials. */
    int64_t first[BWD_TARGET_TASKS + 1], rlo[BWD_TARGET_TASKS], span[BWD_TARGET_TASKS];
    int64_t part_at[BWD_TARGET_TASKS + 1];
    bool recompute;       /* O and LSE come from our own forward */
} bwd_dims;

/* Key tiles' work: the query rows that can see tile kb. */
static int64_t tile_rows(const sdpa_problem *p, int64_t kb)
{
    const int64_t j0 = kb * BWD_KEYS, j1 = j0 + BWD_KEYS < p->Nk ? j0 + BWD_KEYS : p->Nk;
    int64_t first, last;
    sdpa_key_rows(p, j0, j1, &first, &last);
    return last - first;
}

/* Splits the key tiles into d->chunks contiguous ranges of similar work
 * (query rows that can see each tile); first[c] .. first[c+1]. */
static void chunk_bounds(const sdpa_problem *p, bwd_dims *d)
{
    int64_t total = 0;
    for (int64_t kb = 0; kb < d->kblocks; ++kb) total += tile_rows(p, kb);
    int64_t c = 1, acc = 0;
    d->first[0] = 0;
    for (int64_t kb = 0; kb < d->kblocks && c < d->chunks; ++kb) {
        acc += tile_rows(p, kb);
        /* Close chunk c-1 after this tile once it holds its share. */
        if (acc * d->chunks >= total * c && d->kblocks - (kb + 1) >= d->chunks - c)
            d->first[c++] = kb + 1;
    }
    while (c <= d->chunks) d->first[c++] = d->kblocks; /* trailing chunks may be empty */
}

/* Each chunk's query rows and the place of its dQ partial; false on overflow. */
static bool partial_layout(const sdpa_problem *p, bwd_dims *d)
{
    d->part_at[0] = 0;
    for (int64_t c = 0; c < d->chunks; ++c) {
        const int64_t j0 = d->first[c] * BWD_KEYS, j1 = d->first[c + 1] * BWD_KEYS;
        int64_t lo = 0, hi = 0, size;
        if (p->dq && j1 > j0) sdpa_key_rows(p, j0, j1 < p->Nk ? j1 : p->Nk, &lo, &hi);
        d->rlo[c] = lo, d->span[c] = hi - lo;
        if (!attn_mul_ok(p->B * p->Hq * d->span[c], d->dp, &size) ||
            !attn_add_ok(d->part_at[c], size, &d->part_at[c + 1]))
            return false;
    }
    return true;
}

/* Key-tile chunks before the dQ partials' budget trims them: enough
 * (b, kv head, chunk) tasks for BWD_TARGET_TASKS, at most one per tile. */
static int64_t most_chunks(const sdpa_problem *p, const bwd_dims *d)
{
    const int64_t base = p->B * p->Hkv > 0 ? p->B * p->Hkv : 1;
    int64_t c = base >= BWD_TARGET_TASKS ? 1 : (BWD_TARGET_TASKS + base - 1) / base;
    if (c > d->kblocks) c = d->kblocks;
    return c < 1 ? 1 : c;
}

static bwd_dims backward_dims(const sdpa_problem *p, bool *ok)
{
    bwd_dims d;
    d.dp = sdpa_round_up(p->D, SDPA_MAX_NPAD);
    d.dvp = sdpa_round_up(p->Dv, SDPA_MAX_NPAD);
    d.bcp = sdpa_round_up(BWD_KEYS, SDPA_MAX_NPAD);
    d.rows = p->B * p->Hq * p->Nq;
    d.kblocks = (p->Nk + BWD_KEYS - 1) / BWD_KEYS;
    d.recompute = !p->o || (!p->lse && !p->stats);
    int64_t c = most_chunks(p, &d), one;
    if (!p->dq || !attn_mul_ok(d.rows, d.dp * (int64_t)sizeof(float), &one)) {
        c = 1; /* no dQ: nothing to split for; overflow is reported by the sizing */
    } else {
        while (c > 1 && one > 0 && (c - 1) > BWD_PARTIAL_BUDGET / one) c--;
    }
    d.chunks = c;
    chunk_bounds(p, &d);
    *ok = partial_layout(p, &d);
    return d;
}

/* Blocks of BWD_ROWS query rows of one head. */
static int64_t row_tiles(const sdpa_problem *p)
{
    return (p->Nq + BWD_ROWS - 1) / BWD_ROWS;
}

/* ... of every (b, head): the unit in which the per-row quantities (D,
 * statistics, flags) are computed. */
static int64_t row_blocks(const sdpa_problem *p)
{
    return p->B * p->Hq * row_tiles(p);
}

typedef struct {
    float *kt, *kr, *vt, *dk, *dv, *qb, *dob, *s, *dps, *bias, *dfac, *z;
    int32_t *start, *end;
    float *own_di, *own_rm, *own_rll, *own_dm; /* a block's row quantities (row_block) */
    uint8_t *own_nf;
    uint8_t *dq_zeroed; /* per head of the group and block of BWD_ROWS rows: its dQ
                         * partial rows zeroed by this task yet (dq_row) */
    const sdpa_bf16_engine *eng; /* bfloat16 products (bwd_product), or NULL */
    uint32_t *pairs;             /* their operands (sdpa_pair_gemm_f32) */
    /* with eng, the key tile's B operands as pairs, packed once per tile:
     * Kᵀ (ceil(D/2) × bcp), Vᵀ (ceil(Dv/2) × bcp), K's key pairs (BWD_KEYS/2 × dp) */
    uint32_t *ktp, *vtp, *krp;
} bwd_scratch;

/* The engine of a bfloat16 backward, NULL for float32 products: the
 * forward's rule (no bfloat16 products for direct scores), so that the
 * recomputed scores are the forward's. */
static const sdpa_bf16_engine *backward_engine(const sdpa_problem *p, const sdpa_kernels *kern)
{
    return p->bf16_products && !sdpa_scores_direct(p, kern) ? sdpa_engine_select(kern) : NULL;
}

/* Pair operands of the largest product: m <= 96 rows (query rows or keys),
 * n <= the widest padded row, k <= the widest contraction. */
static int64_t pair_words(const sdpa_problem *p, const bwd_dims *d)
{
    const int64_t m = BWD_ROWS > BWD_KEYS ? BWD_ROWS : BWD_KEYS;
    int64_t n = d->dp > d->dvp ? d->dp : d->dvp, k = p->D > p->Dv ? p->D : p->Dv;
    n = n > d->bcp ? n : d->bcp;
    k = k > d->bcp ? k : d->bcp;
    return sdpa_pair_scratch(m, k > BWD_ROWS ? k : BWD_ROWS, n);
}

/* C ⊕= A·B as gemm_fn fn (sdpa_gemm_fn's arguments, no row scale): on the
 * bfloat16 engine when there is one, except the zero-skipping product
 * (tiles whose hidden keys or empty rows meet non-finite operands stay
 * float32). ap, bp: A (rows ldap apart) and B (rows ldbp apart) already as
 * pairs (the same bits sdpa_pair_gemm_f32 would pack), or NULL. */
static void bwd_product(const bwd_scratch *w, sdpa_gemm_fn fn, int64_t m, int64_t n, int64_t k,
                        const float *a, int64_t a_rs, int64_t a_cs, const uint32_t *ap,
                        int64_t ldap, const float *b, int64_t ldb, const uint32_t *bp,
                        int64_t ldbp, float *c, int64_t ldc, sdpa_gemm_mode mode)
{
    if (w->eng && fn != sdpa_gemm_skip_zeros && ap && bp)
        w->eng->gemm(m, n, (k + 1) / 2, ap, ldap, bp, ldbp, c, ldc, NULL, mode);
    else if (w->eng && fn != sdpa_gemm_skip_zeros)
        sdpa_pair_gemm_f32(w->eng, w->pairs, m, n, k, a, a_rs, a_cs, b, ldb, bp, ldbp, c, ldc,
                           NULL, mode);
    else
        fn(m, n, k, a, a_rs, a_cs, b, ldb, c, ldc, NULL, mode);
}

static sdpa_size backward_thread_bytes(const sdpa_problem *p, const bwd_dims *d)
{
    sdpa_size s = {0, true};
    sdpa_size_add(&s, p->D, d->bcp, sizeof(float));     /* kt: Kᵀ */
    sdpa_size_add(&s, BWD_KEYS, d->dp, sizeof(float));  /* kr: K rows */
    sdpa_size_add(&s, p->Dv, d->bcp, sizeof(float));    /* vt: Vᵀ */
    sdpa_size_add(&s, BWD_KEYS, d->dp, sizeof(float));  /* dk */
    sdpa_size_add(&s, BWD_KEYS, d->dvp, sizeof(float)); /* dv */
    sdpa_size_add(&s, BWD_ROWS, d->dp, sizeof(float));  /* qb */
    sdpa_size_add(&s, BWD_ROWS, d->dvp, sizeof(float)); /* dob */
    sdpa_size_add(&s, BWD_ROWS, d->bcp, sizeof(float)); /* s: S, then P */
    sdpa_size_add(&s, BWD_ROWS, d->bcp, sizeof(float)); /* dps: dP, then dS */
    sdpa_size_add(&s, BWD_ROWS, d->bcp, sizeof(float)); /* bias */
    sdpa_size_add(&s, p->softcap > 0.0f ? BWD_ROWS : 0, d->bcp, sizeof(float)); /* dfac */
    sdpa_size_add(&s, p->dropout_p > 0.0f ? BWD_ROWS : 0, d->bcp, sizeof(float)); /* z */
    sdpa_size_add(&s, BWD_ROWS, 1, sizeof(int32_t));    /* start */
    sdpa_size_add(&s, BWD_ROWS, 1, sizeof(int32_t));    /* end */
    sdpa_size_add(&s, BWD_ROWS, 4, sizeof(float));      /* own_di, own_rm, own_rll, own_dm */
    sdpa_size_add(&s, BWD_ROWS, 1, 1);                  /* own_nf */
    sdpa_size_add(&s, p->group, row_tiles(p), 1);       /* dq_zeroed */
    sdpa_size_add(&s, p->bf16_products ? pair_words(p, d) : 0, 1, sizeof(uint32_t)); /* pairs */
    const bool bf = p->bf16_products;
    sdpa_size_add(&s, bf ? (p->D + 1) / 2 : 0, d->bcp, sizeof(uint32_t));  /* ktp */
    sdpa_size_add(&s, bf ? (p->Dv + 1) / 2 : 0, d->bcp, sizeof(uint32_t)); /* vtp */
    sdpa_size_add(&s, bf ? (BWD_KEYS + 1) / 2 : 0, d->dp, sizeof(uint32_t)); /* krp */
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
    w.dfac = p->softcap > 0.0f ? sdpa_take(&base, BWD_ROWS * d->bcp, sizeof(float)) : NULL;
    w.z = p->dropout_p > 0.0f ? sdpa_take(&base, BWD_ROWS * d->bcp, sizeof(float)) : NULL;
    w.start = sdpa_take(&base, BWD_ROWS, sizeof(int32_t));
    w.end = sdpa_take(&base, BWD_ROWS, sizeof(int32_t));
    w.own_di = sdpa_take(&base, 4 * BWD_ROWS, sizeof(float));
    w.own_rm = w.own_di + BWD_ROWS, w.own_rll = w.own_rm + BWD_ROWS, w.own_dm = w.own_rll + BWD_ROWS;
    w.own_nf = sdpa_take(&base, BWD_ROWS, 1);
    w.dq_zeroed = sdpa_take(&base, p->group * row_tiles(p), 1);
    w.pairs = sdpa_take(&base, p->bf16_products ? pair_words(p, d) : 0, sizeof(uint32_t));
    const bool bf = p->bf16_products;
    w.ktp = sdpa_take(&base, bf ? (p->D + 1) / 2 * d->bcp : 0, sizeof(uint32_t));
    w.vtp = sdpa_take(&base, bf ? (p->Dv + 1) / 2 * d->bcp : 0, sizeof(uint32_t));
    w.krp = sdpa_take(&base, bf ? (BWD_KEYS + 1) / 2 * d->dp : 0, sizeof(uint32_t));
    w.eng = NULL; /* set by the caller */
    return w;
}

/* Floats of dQ partials enough for this call and every call with at most
 * its query rows and keys, whatever their causal alignment or window: each
 * chunk's partial holds at most all rows (`one` copy of dQ), and the budget
 * keeps the copies beyond the first within BWD_PARTIAL_BUDGET, so
 * c·one' <= min(most_chunks·one, one + budget) for any one' <= one (fewer
 * rows may take more chunks, never more bytes than this). */
static int64_t partial_floats_bound(const sdpa_problem *p, const bwd_dims *d)
{
    int64_t one, all, budget = BWD_PARTIAL_BUDGET / (int64_t)sizeof(float);
    if (!p->dq || !attn_mul_ok(d->rows, d->dp, &one)) return p->dq ? INT64_MAX : 0;
    if (!attn_mul_ok(most_chunks(p, d), one, &all)) all = INT64_MAX;
    return all < one + budget ? all : one + budget;
}

/* A bfloat16 backward's Q and dO rows as pairs, packed once per call by
 * the row blocks (row_block) and read by every key tile: feature pairs
 * (the A operands of S = Q·Kᵀ and dP = dO·Vᵀ), ceil(D/2) and ceil(Dv/2) per
 * row, and row pairs (the B operands of dK += dSᵀ·Q and dV += Pᵀ·dO),
 * ceil(Nq/2) pair rows of dp and dvp per head. None with sinks (their
 * gradients take the row quantities up front, without the pairs). */
static int64_t row_pair_words(const sdpa_problem *p, const bwd_dims *d)
{
    if (!p->bf16_products || p->dsinks) return 0;
    const int64_t heads = p->B * p->Hq, pair_rows = (p->Nq + 1) / 2;
    return d->rows * ((p->D + 1) / 2 + (p->Dv + 1) / 2) + heads * pair_rows * (d->dp + d->dvp);
}

/* Shared (not per-thread) arrays, then per-thread scratch, then the
 * forward's workspace when O/LSE are recomputed. With `bound`, the dQ
 * partials of any call with fewer rows and keys (partial_floats_bound). */
static sdpa_size backward_bytes(const sdpa_problem *p, const bwd_dims *d, bool bound,
                                size_t *per_thread, size_t *forward)
{
    sdpa_size s = {0, true};
    sdpa_size_add(&s, d->rows, 1, sizeof(float)); /* di */
    sdpa_size_add(&s, d->rows, 1, sizeof(float)); /* max |dO| */
    sdpa_size_add(&s, d->rows, 2, sizeof(float)); /* row statistics (m, ll) */
    sdpa_size_add(&s, d->rows, 1, 1);             /* non-finite Q / dO rows */
    sdpa_size_add(&s, d->rows, 1, sizeof(atomic_uchar)); /* rows' non-finite dP (note_dp_class) */
    sdpa_size_add(&s, row_blocks(p), 1, sizeof(atomic_uchar)); /* their blocks' states */
    sdpa_size_add(&s, p->threads, 1, sizeof(sdpa_cursor));     /* the task cursors */
    sdpa_size_add(&s, bound ? partial_floats_bound(p, d) : p->dq ? d->part_at[d->chunks] : 0, 1,
                  sizeof(float)); /* dQ partials */
    sdpa_size_add(&s, d->recompute ? d->rows : 0, p->Dv, sizeof(float));      /* recomputed O */
    sdpa_size_add(&s, d->recompute ? d->rows : 0, 2, sizeof(float));          /* ... and stats */
    sdpa_size_add(&s, row_pair_words(p, d), 1, sizeof(uint32_t)); /* Q and dO as pairs */
    const sdpa_size t = backward_thread_bytes(p, d);
    *per_thread = t.bytes;
    if (!t.ok) s.ok = false;
    sdpa_size_add(&s, (int64_t)t.bytes, p->threads, 1);
    *forward = 0;
    if (d->recompute) {
        if (!sdpa_fused_forward_workspace(p, forward)) s.ok = false;
        sdpa_size_add(&s, (int64_t)*forward, 1, 1);
    }
    return s;
}

bool sdpa_fused_backward_workspace(const sdpa_problem *p, size_t *bytes)
{
    bool ok;
    const bwd_dims d = backward_dims(p, &ok);
    size_t per_thread, forward;
    const sdpa_size s = backward_bytes(p, &d, true, &per_thread, &forward);
    if (!ok || !s.ok || s.bytes > SIZE_MAX - SDPA_WORKSPACE_SLACK) return false;
    *bytes = s.bytes + SDPA_WORKSPACE_SLACK;
    return true;
}

/* Per query row, which of its Q and dO rows hold a non-finite value (found
 * once, not again for every key tile the row meets), and whether its D is
 * NaN or inf (then so is every dS of the keys it sees: dsoftmax_band). */
enum { BWD_Q_NONFINITE = 1, BWD_DO_NONFINITE = 2, BWD_D_NONFINITE = 4, BWD_NO_SOFTMAX = 8 };

/* A GEMM whose A operand holds the zeros of hidden keys or of rows that see
 * no key (an empty softmax, in any tile): when its B operand (Q or dO of
 * rows [0, rows): `which` in their flags) is not all finite, the zeros must
 * not multiply it; add_zero_terms then adds those of visible keys. */
static sdpa_gemm_fn guarded(const sdpa_kernels *kern, const uint8_t *flags, int64_t rows,
                            uint8_t which)
{
    uint8_t any = 0;
    for (int64_t r = 0; r < rows; ++r) any |= flags[r];
    return any & which ? sdpa_gemm_skip_zeros : kern->gemm;
}

/* Whether a row (its flags) has a softmax: not one that saw no key, whose
 * output is the constant 0 and which adds nothing to any gradient. */
static bool has_softmax(uint8_t nf)
{
    return !(nf & BWD_NO_SOFTMAX);
}

/*
 * After a zero-skipping product C += A·B, the terms it left out that torch
 * keeps: a zero of a visible key of a row with a softmax (P underflowed or
 * dropped, dS = 0, e.g. P = 0 under a logit of -inf) times a non-finite B
 * row value is NaN (0·inf, 0·NaN), as in the reference's sums over visible
 * keys. A's entry (i, l) of m × k is query row r, key c of the tile: r =
 * i0 + i, c = l0 + l for dQ += dS·K; r = l0 + l, c = i0 + i (by_key) for
 * dK += dSᵀ·Q and dV += Pᵀ·dO. B: k rows of n values, ldb apart; vis: the
 * tile's rows' bounds and bias (-inf: masked); nf: their flags.
 */
static void add_zero_terms(const sdpa_logits *vis, const uint8_t *nf, bool by_key, int64_t m,
                           int64_t n, int64_t k, const float *a, int64_t a_rs, int64_t a_cs,
                           int64_t i0, int64_t l0, const float *b, int64_t ldb, float *c,
                           int64_t ldc)
{
    for (int64_t l = 0; l < k; ++l) {
        const float *bl = b + l * ldb;
        if (sdpa_rows_finite(bl, 0, 1, 1, n)) continue;
        for (int64_t i = 0; i < m; ++i) {
            const int64_t r = by_key ? l0 + l : i0 + i, col = by_key ? i0 + i : l0 + l;
            if (a[i * a_rs + l * a_cs] != 0.0f || !has_softmax(nf[r]) || col < vis->start[r] ||
                col >= vis->end[r] || (vis->bias && vis->bias[r * vis->ldbias + col] == -INFINITY))
                continue;
            for (int64_t x = 0; x < n; ++x)
                if (!isfinite(bl[x])) c[i * ldc + x] += 0.0f * bl[x];
        }
    }
}

/*
 * How a tile's products are cut. Row band e (rows [r0b[e], r1b[e]): a run of
 * BWD_BAND-row bands whose columns round to the same panels) sees columns
 * [c0[e], c1[e]): S, P, dP and dS are formed there (up to c1 rounded to
 * npad) and dQ sums over those keys only. Key block e (keys [k0[e], k1[e]),
 * consecutive BWD_BAND-key blocks seen by the same rows) is seen by rows
 * [r0[e], r1[e]) only: dV and dK sum over those rows. Everything skipped is
 * an exact zero (or a term the zero-skipping GEMM leaves out), so the sums
 * are those of the whole tile, bit for bit. A tile whose rows all see the
 * same columns [c0, cols) is one band and one key block.
 */
typedef struct {
    int64_t n;
    int64_t r0b[BWD_MAX_BANDS], r1b[BWD_MAX_BANDS], c0[BWD_MAX_BANDS], c1[BWD_MAX_BANDS];
    int64_t nk;
    int64_t k0[BWD_MAX_KBLOCKS], k1[BWD_MAX_KBLOCKS], r0[BWD_MAX_KBLOCKS], r1[BWD_MAX_KBLOCKS];
} bwd_bands;

static bwd_bands backward_bands(const bwd_scratch *w, int64_t mi, int64_t c0, int64_t cols,
                                int64_t npad)
{
    bwd_bands bd = {.n = 1, .r0b = {0}, .r1b = {mi}, .c0 = {c0}, .c1 = {cols}, .nk = 1,
                    .k0 = {c0}, .k1 = {cols}, .r0 = {0}, .r1 = {mi}};
    bwd_bands cut = {.n = 0, .nk = 0};
    bool uniform = true;
    for (int64_t r0 = 0; r0 < mi; r0 += BWD_BAND) {
        const int64_t rb = mi - r0 < BWD_BAND ? mi - r0 : BWD_BAND;
        int64_t b0, b1;
        sdpa_band_cols(w->start + r0, w->end + r0, rb, npad, &b0, &b1);
        uniform &= b0 == c0 && b1 == cols;
        const int64_t e = cut.n - 1;
        if (e >= 0 && cut.c0[e] == b0 &&
            sdpa_round_up(cut.c1[e], npad) == sdpa_round_up(b1, npad)) { /* joins the run */
            cut.r1b[e] = r0 + rb;
            cut.c1[e] = b1 > cut.c1[e] ? b1 : cut.c1[e];
            continue;
        }
        cut.r0b[cut.n] = r0, cut.r1b[cut.n] = r0 + rb, cut.c0[cut.n] = b0, cut.c1[cut.n] = b1;
        ++cut.n;
    }
    if (uniform) return bd;
    for (int64_t k0 = c0; k0 < cols; k0 += BWD_BAND) {
        const int64_t k1 = cols - k0 < BWD_BAND ? cols : k0 + BWD_BAND;
        int64_t first = mi, last = 0;
        for (int64_t r = 0; r < mi; ++r)
            if (w->start[r] < k1 && w->end[r] > k0 && w->end[r] > w->start[r]) {
                first = r < first ? r : first;
                last = r + 1;
            }
        if (last <= first) continue;
        const int64_t e = cut.nk - 1;
        if (e >= 0 && cut.k1[e] == k0 && cut.r0[e] == first && cut.r1[e] == last) {
            cut.k1[e] = k1; /* the same rows: one block */
            continue;
        }
        cut.k0[cut.nk] = k0, cut.k1[cut.nk] = k1, cut.r0[cut.nk] = first, cut.r1[cut.nk] = last;
        ++cut.nk;
    }
    return cut;
}

/* Zeros of rows [0, rows) of buf over columns [c0, cn) outside [b0, bn). */
static void zero_outside(float *buf, int64_t ld, int64_t rows, int64_t c0, int64_t cn, int64_t b0,
                         int64_t bn)
{
    const int64_t lo = b0 > c0 ? b0 : c0, hi = bn > lo ? bn : lo;
    if (lo == c0 && hi == cn) return;
    for (int64_t r = 0; r < rows; ++r) {
        memset(buf + r * ld + c0, 0, (size_t)(lo - c0) * sizeof(float));
        memset(buf + r * ld + hi, 0, (size_t)(cn - hi) * sizeof(float));
    }
}

/* Σ_c a[c·as]·b[c·bs] for c < n in a fixed order whatever the strides:
 * eight lane sums (lane c mod 8, in c order), then a fixed tree. (A single
 * running sum waits on each addition in turn; eight vectorise.) */
static float dot_fixed(const float *a, int64_t as, const float *b, int64_t bs, int64_t n)
{
    float lane[8] = {0};
    int64_t c = 0;
    if (as == 1 && bs == 1)
        for (; c + 8 <= n; c += 8)
            for (int l = 0; l < 8; ++l) lane[l] += a[c + l] * b[c + l];
    for (; c < n; ++c) lane[c % 8] += a[c * as] * b[c * bs];
    return ((lane[0] + lane[4]) + (lane[2] + lane[6])) +
           ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

/* max |a[c·as]| over c < n, the values finite (eight lanes: a select per
 * lane vectorises where a running maximum would not). */
static float max_abs(const float *a, int64_t as, int64_t n)
{
    float lane[8] = {0};
    int64_t c = 0;
    if (as == 1)
        for (; c + 8 <= n; c += 8)
            for (int l = 0; l < 8; ++l) {
                const float x = fabsf(a[c + l]);
                lane[l] = x > lane[l] ? x : lane[l];
            }
    for (; c < n; ++c) {
        const float x = fabsf(a[c * as]);
        lane[c % 8] = x > lane[c % 8] ? x : lane[c % 8];
    }
    float top = 0.0f;
    for (int l = 0; l < 8; ++l) top = lane[l] > top ? lane[l] : top;
    return top;
}

/*
 * Per query row: D_i = rowsum(dO_i∘O_i), the statistics (m, ll) of its
 * softmax (the exact ones when known, else (lse, 0), whose P carries lse's
 * rounding) and which of its Q and dO rows hold a non-finite value. They are
 * computed a block of BWD_ROWS rows at a time by the first task that needs
 * the block, while its O and dO rows are about to be read anyway (a pass of
 * its own over all rows would wait on memory with every thread); a task
 * that finds the block being computed computes its own copy (the same bits).
 */
typedef struct {
    float *di, *rm, *rll; /* per row (b, h, i) */
    uint8_t *nonfinite;
    atomic_uchar *state;  /* per block (row_blocks): sdpa_item_claim */
    const float *o, *st;  /* O and the saved (m, ll), or NULL: the LSE */
    int64_t os[4], ss[4];
    /* a bfloat16 backward's Q and dO as pairs (row_pair_words), or NULL:
     * feature pairs per row (b, h, i), row pairs per (b, h, i/2) */
    uint32_t *qa, *da, *qr, *dr;
    float *dm;                /* per row: max |dO_i| (inf when not finite) */
    atomic_uchar *dp_class;   /* per row: the classes of its non-finite P·dP
                               * (note_dp_class; any task may add to it) */
} bwd_rows;

/* Row i of head (b, h) into di[x], rm[x], rll[x], nf[x]. */
static void row_quantities(const sdpa_problem *p, const bwd_rows *rs, int64_t b, int64_t h,
                           int64_t i, float *di, float *rm, float *rll, float *dm, uint8_t *nf)
{
    const float *orow = rs->o + AT4(rs->os, b, h, i, 0);
    const float *drow = p->dout + AT4(p->dos, b, h, i, 0);
    *di = dot_fixed(drow, p->dos[3], orow, rs->os[3], p->Dv);
    const float *qrow = p->q + AT4(p->qs, b, h, i, 0);
    *nf = (sdpa_rows_finite(qrow, 0, p->qs[3], 1, p->D) ? 0 : BWD_Q_NONFINITE) |
          (sdpa_rows_finite(drow, 0, p->dos[3], 1, p->Dv) ? 0 : BWD_DO_NONFINITE);
    *dm = *nf & BWD_DO_NONFINITE ? INFINITY : max_abs(drow, p->dos[3], p->Dv);
    if (!isfinite(*di)) *nf |= BWD_D_NONFINITE;
    if (rs->st) {
        *rm = rs->st[AT4(rs->ss, b, h, i, 0)];
        *rll = rs->st[AT4(rs->ss, b, h, i, 1)];
    } else {
        const float lse = p->lse[b * p->ls[0] + h * p->ls[1] + i * p->ls[2]];
        *rm = lse;
        *rll = lse == INFINITY ? NAN : 0.0f; /* an infinite logit: NaN, as torch */
    }
    /* A row that saw no key: max -inf, or a sink of +inf or NaN in its
     * statistics that a row which sees a key (NaN then) also has. */
    const float sink = sdpa_sink(p, h);
    if (*rm == -INFINITY ||
        (!isfinite(sink) && sink != -INFINITY && !sdpa_row_sees_key(p, b, h, i)))
        *nf |= BWD_NO_SOFTMAX;
}

/* The quantities of row block `it` (a multiple of BWD_ROWS) of head (b, h),
 * row it + x at index x: the shared ones, or this task's copy. */
typedef struct {
    const float *di, *rm, *rll, *dm;
    const uint8_t *nf;
    /* the block's Q and dO as pairs (bwd_rows), or NULL: the tiles pack them */
    const uint32_t *qa, *da, *qr, *dr;
} row_view;

/* Rows [it, it + n) of head (b, h) as pairs (bwd_rows), it even; Q and dO
 * have unit feature strides (as the tiles' row operands, whose pairs these
 * are bit for bit). */
static void row_pairs(const sdpa_problem *p, const bwd_dims *d, const bwd_rows *rs, int64_t b,
                      int64_t h, int64_t it, int64_t n, row_view *v)
{
    const int64_t row = (b * p->Hq + h) * p->Nq + it, prow = (b * p->Hq + h) * ((p->Nq + 1) / 2) + it / 2;
    const int64_t qkp = (p->D + 1) / 2, dkp = (p->Dv + 1) / 2;
    const float *q = p->q + AT4(p->qs, b, h, it, 0), *dout = p->dout + AT4(p->dos, b, h, it, 0);
    v->qa = rs->qa + row * qkp, v->da = rs->da + row * dkp;
    v->qr = rs->qr + prow * d->dp, v->dr = rs->dr + prow * d->dvp;
    sdpa_pairs_rows_f32(q, p->qs[2], n, p->D, (uint32_t *)v->qa, qkp);
    sdpa_pairs_rows_f32(dout, p->dos[2], n, p->Dv, (uint32_t *)v->da, dkp);
    sdpa_pairs_keys_f32(q, p->qs[2], n, p->D, (uint32_t *)v->qr, d->dp);
    sdpa_pairs_keys_f32(dout, p->dos[2], n, p->Dv, (uint32_t *)v->dr, d->dvp);
}

static row_view row_block(const sdpa_problem *p, const bwd_dims *d, const bwd_rows *rs,
                          int64_t b, int64_t h, int64_t it, bwd_scratch *w)
{
    const int64_t row = (b * p->Hq + h) * p->Nq + it;
    const int64_t n = p->Nq - it < BWD_ROWS ? p->Nq - it : BWD_ROWS;
    const int64_t blk = (b * p->Hq + h) * row_tiles(p) + it / BWD_ROWS;
    row_view shared = {rs->di + row, rs->rm + row, rs->rll + row, rs->dm + row,
                       rs->nonfinite + row, NULL, NULL, NULL, NULL};
    if (rs->qa) { /* where the block's pairs are (once it is READY) */
        const int64_t prow = (b * p->Hq + h) * ((p->Nq + 1) / 2) + it / 2;
        shared.qa = rs->qa + row * ((p->D + 1) / 2), shared.da = rs->da + row * ((p->Dv + 1) / 2);
        shared.qr = rs->qr + prow * d->dp, shared.dr = rs->dr + prow * d->dvp;
    }
    const sdpa_claim claim = sdpa_item_claim(&rs->state[blk]);
    if (claim == SDPA_CLAIM_READY) return shared;
    const bool mine = claim == SDPA_CLAIM_MINE;
    float *di = mine ? rs->di + row : w->own_di, *rm = mine ? rs->rm + row : w->own_rm;
    float *rll = mine ? rs->rll + row : w->own_rll, *dm = mine ? rs->dm + row : w->own_dm;
    uint8_t *nf = mine ? rs->nonfinite + row : w->own_nf;
    for (int64_t x = 0; x < n; ++x)
        row_quantities(p, rs, b, h, it + x, &di[x], &rm[x], &rll[x], &dm[x], &nf[x]);
    if (!mine) return (row_view){di, rm, rll, dm, nf, NULL, NULL, NULL, NULL};
    if (rs->qa) row_pairs(p, d, rs, b, h, it, n, &shared);
    sdpa_item_done(&rs->state[blk]);
    return shared;
}

/* Row i of head h in the task's dQ partial (which holds rows [rlo, rlo +
 * span) of each head). The rows of i's block of BWD_ROWS are zeroed on the
 * task's first visit: just before the products add into them, while they
 * are in cache, rather than all at once up front (dq_leftovers zeroes the
 * blocks no tile visited). */
static float *dq_row(const sdpa_problem *p, const bwd_dims *d, int64_t chunk, float *part,
                     int64_t b, int64_t h, int64_t i, bwd_scratch *w)
{
    const int64_t rlo = d->rlo[chunk], span = d->span[chunk], it = i - i % BWD_ROWS;
    float *head = part + (b * p->Hq + h) * span * d->dp;
    uint8_t *zeroed = &w->dq_zeroed[(h % p->group) * row_tiles(p) + it / BWD_ROWS];
    if (!*zeroed) {
        const int64_t lo = it > rlo ? it : rlo;
        const int64_t hi = it + BWD_ROWS < rlo + span ? it + BWD_ROWS : rlo + span;
        if (hi > lo)
            memset(head + (lo - rlo) * d->dp, 0, (size_t)((hi - lo) * d->dp) * sizeof(float));
        *zeroed = 1;
    }
    return head + (i - rlo) * d->dp;
}

/* Zeros of the task's dQ partial rows that no tile reached (the sum over
 * chunks reads every row of every partial). */
static void dq_leftovers(const sdpa_problem *p, const bwd_dims *d, int64_t chunk, float *part,
                         int64_t b, int64_t hk, bwd_scratch *w)
{
    const int64_t rlo = d->rlo[chunk], rhi = rlo + d->span[chunk];
    for (int64_t h = hk * p->group; h < (hk + 1) * p->group; ++h)
        for (int64_t it = rlo - rlo % BWD_ROWS; it < rhi; it += BWD_ROWS)
            dq_row(p, d, chunk, part, b, h, it > rlo ? it : rlo, w);
}

/* Forward X = ... + mask, so d mask = dX = P∘(dP - D) (dS before the factor
 * f): rows [i0, i0 + rb) of head (b, h) over keys j0 + [c0, c1), from the
 * tile's P (s) and dP (dp), into the full buffer of bias_grad.c (which sums
 * it over the mask's broadcast dimensions). */
static void store_logit_grads(const sdpa_problem *p, int64_t b, int64_t h, int64_t i0,
                              int64_t rb, int64_t j0, int64_t c0, int64_t c1, const float *s,
                              const float *dp, int64_t ld, const float *di, const uint8_t *nf)
{
    for (int64_t r = 0; r < rb; ++r) {
        float *dst = p->dbias + AT4(p->dbs, b, h, i0 + r, j0);
        const bool nonfinite = nf[r] & BWD_D_NONFINITE; /* as dsoftmax_band */
        for (int64_t c = c0; c < c1; ++c) {
            const float pc = s[r * ld + c];
            const bool zero = !nonfinite ? pc == 0.0f
                                         : !has_softmax(nf[r]) ||
                                               !sdpa_key_visible(p, b, h, i0 + r, j0 + c);
            dst[c * p->dbs[3]] = zero ? 0.0f : pc * (dp[r * ld + c] - di[r]);
        }
    }
}

/* Softmax backward of a band's rows i + [0, rb) over columns [b0, bn) of
 * the key tile at j0 (nj keys): kern->dsoftmax, whose exact zeros where
 * P = 1 and P = 0 hold for a finite D only; a row whose D is NaN or inf
 * gets dS = f·P(dP - D) on every key it sees, those included (0·NaN, as
 * torch), and 0 elsewhere (everywhere in a row without a softmax). A
 * flag per row: the common band is one call. */
static void dsoftmax_band(const sdpa_problem *p, const sdpa_kernels *kern, int64_t b, int64_t h,
                          int64_t i, int64_t j0, int64_t nj, int64_t rb, int64_t b0, int64_t bn,
                          const float *s, float *dp, int64_t ld, const float *di,
                          const uint8_t *nf, const float *dfac, bool ragged)
{
    for (int64_t r = 0; r < rb;) {
        int64_t e = r;
        while (e < rb && !(nf[e] & BWD_D_NONFINITE) && has_softmax(nf[e])) ++e;
        if (e > r)
            kern->dsoftmax(e - r, b0, bn, p->scale, s + r * ld, ld, dp + r * ld, ld, di + r,
                           dfac ? dfac + r * ld : NULL, ragged);
        if (e == rb) break;
        const float *pe = s + e * ld, *fe = dfac ? dfac + e * ld : NULL;
        float *de = dp + e * ld;
        const bool soft = has_softmax(nf[e]);
        for (int64_t c = b0; c < bn; ++c)
            de[c] = soft && c < nj && sdpa_key_visible(p, b, h, i + e, j0 + c)
                        ? pe[c] * (de[c] - di[e]) * (fe ? fe[c] : p->scale)
                        : 0.0f;
        r = e + 1;
    }
}

/* max |v| over the key tile's values (Vᵀ: Dv rows of nj, ld apart), all
 * finite. */
static float value_bound(const float *vt, int64_t ld, int64_t dv, int64_t nj)
{
    float top = 0.0f;
    for (int64_t x = 0; x < dv; ++x) {
        const float m = max_abs(vt + x * ld, 1, nj);
        top = m > top ? m : top;
    }
    return top;
}

/* The bound below which no dP_ij = (dO_i·v_j)·z_ij can overflow, in any
 * summation order, with or without fused multiply-adds or bfloat16
 * rounding: max|dO_i| · max|v_j| < 2^126 / (Dv · max z) keeps every partial
 * sum under 2^127(1 + 2^-7). */
static float dp_risk(const sdpa_problem *p)
{
    const float zmax = p->dropout_p > 0.0f ? 1.0f / (1.0f - p->dropout_p) : 1.0f;
    return 0x1p126f / ((float)p->Dv * zmax);
}

/* The classes of a non-finite P_ij·dP_ij, whose sum torch's D_i is. */
enum { DP_NAN = 1, DP_POS = 2, DP_NEG = 4 };

/*
 * torch's D_i = Σ_j P_ij dP_ij over the keys j row i sees is NaN or ±inf
 * when one of its dP_ij is, whatever O says: dO_i·v_j may overflow while
 * dO_i·O_i does not, or O may come from elsewhere. For the rows of a band
 * whose bound (dp_risk: max|dO_i| in dm, max|v| of the tile in vmax) lets
 * dP leave float's range, the classes of their non-finite P_ij·dP_ij (P_ij
 * = 0 included: 0·inf) go to dp_class; torch_row_d reads them after the
 * tasks. s: P, dp: dP∘Z of rows i + [0, rb), columns [b0, b1) of the key
 * tile at j0 (nj keys).
 */
static void note_dp_class(const sdpa_problem *p, const bwd_rows *rs, int64_t b, int64_t h,
                          int64_t i, int64_t j0, int64_t nj, int64_t rb, int64_t b0, int64_t b1,
                          const float *s, const float *dp, int64_t ld, const float *dm,
                          const uint8_t *nf, float vmax, float risk)
{
    for (int64_t r = 0; r < rb; ++r) {
        if (dm[r] * vmax < risk || !has_softmax(nf[r])) continue;
        uint8_t cls = 0;
        for (int64_t c = b0; c < b1 && c < nj; ++c) {
            const float x = dp[r * ld + c];
            if (isfinite(x) || !sdpa_key_visible(p, b, h, i + r, j0 + c)) continue;
            const float t = s[r * ld + c] * x;
            cls |= isnan(t) ? DP_NAN : t > 0.0f ? DP_POS : DP_NEG;
        }
        if (cls)
            atomic_fetch_or_explicit(&rs->dp_class[(b * p->Hq + h) * p->Nq + i + r], cls,
                                     memory_order_relaxed);
    }
}

/* Rows whose dP is not finite on a key they see take torch's D_i = Σ_j
 * P_ij dP_ij, of which only the class counts (NaN, +inf, -inf); with the
 * caller's O and statistics, dO·O adds what keys beyond these bring (as
 * the reference). Returns whether a row's D changed: then the tasks run
 * again, with these rows' dS = P(dP - D) (dsoftmax_band). */
static bool torch_row_d(const bwd_dims *d, const bwd_rows *rs)
{
    bool changed = false;
    for (int64_t row = 0; row < d->rows; ++row) {
        const uint8_t cls = atomic_load_explicit(&rs->dp_class[row], memory_order_relaxed);
        if (!cls || !has_softmax(rs->nonfinite[row])) continue;
        const float part = cls & DP_NAN || (cls & DP_POS && cls & DP_NEG) ? NAN
                           : cls & DP_POS                                 ? INFINITY
                                                                          : -INFINITY;
        const float old = rs->di[row], now = d->recompute || isfinite(old) ? part : old + part;
        if (isnan(now) ? isnan(old) : now == old) continue;
        rs->di[row] = now;
        rs->nonfinite[row] |= BWD_D_NONFINITE;
        changed = true;
    }
    return changed;
}

/* The row pairs (ld apart) of the block's rows x0 + [r0, r1) (query rows
 * i0 + [r0, r1)) as a B operand, or NULL: a pair must not reach past them
 * into a row the product does not sum over (it may hold anything), so they
 * start at an even row and end with a whole pair or the last row, whose
 * pair was completed by a zero. */
static const uint32_t *row_pairs_at(const sdpa_problem *p, const uint32_t *pairs, int64_t ld,
                                    int64_t i0, int64_t x0, int64_t r0, int64_t r1)
{
    if (!pairs || (x0 + r0) % 2 || ((r1 - r0) % 2 && i0 + r1 != p->Nq)) return NULL;
    return pairs + (x0 + r0) / 2 * ld;
}

/* One task: the key tiles of chunk `chunk` of kv head (b, hk); dQ into the
 * chunk's partial (its rows of this group's heads, which the task owns). */
static void backward_task(const sdpa_problem *p, const sdpa_kernels *kern, const bwd_dims *d,
                          int64_t b, int64_t hk, int64_t chunk, const bwd_rows *rs, float *part,
                          bwd_scratch *w)
{
    part += d->part_at[chunk];
    memset(w->dq_zeroed, 0, (size_t)(p->group * row_tiles(p)));
    const int64_t npad = kern->npad;
    const int64_t dn = sdpa_round_up(p->D, npad), dvn = sdpa_round_up(p->Dv, npad);
    /* dP also for a sink's gradient alone: its D may have to be torch's (torch_row_d) */
    const bool want_ds = p->dk || p->dq || p->dbias || p->dsinks;
    const bool direct = sdpa_scores_direct(p, kern);
    const int64_t qkp = (p->D + 1) / 2, dkp = (p->Dv + 1) / 2; /* feature pairs */
    const float risk = dp_risk(p);
    for (int64_t kb = d->first[chunk]; kb < d->first[chunk + 1]; ++kb) {
        const int64_t j0 = kb * BWD_KEYS, nj = p->Nk - j0 < BWD_KEYS ? p->Nk - j0 : BWD_KEYS;
        memset(w->dk, 0, (size_t)(nj * d->dp) * sizeof(float));
        memset(w->dv, 0, (size_t)(nj * d->dvp) * sizeof(float));
        bool packed = false;
        const float *kr = NULL; /* K_j as rows (B operand of dQ += dS·K_j) */
        int64_t ldk = 0;
        int k_finite = -1;
        float vmax = 0.0f; /* max |v| of the tile (inf: not all finite) */
        int64_t ifirst, ilast;
        sdpa_key_rows(p, j0, j0 + nj, &ifirst, &ilast);
        for (int64_t h = hk * p->group; h < (hk + 1) * p->group; ++h) {
            for (int64_t it = ifirst - ifirst % BWD_ROWS; it < ilast; it += BWD_ROWS) {
                /* the tile's rows that can see these keys (a window's band
                 * edges cut tiles) */
                const int64_t i0 = it > ifirst ? it : ifirst;
                const int64_t iend = it + BWD_ROWS < ilast ? it + BWD_ROWS : ilast;
                const int64_t mi = iend - i0;
                const sdpa_tile t = sdpa_plan_tile(p, kern, b, h, i0, mi, j0, nj, w->start,
                                                   w->end, w->bias, d->bcp);
                if (t.cols == 0) continue; /* hidden: nothing to differentiate */
                if (!packed) {
                    const float *k = (const float *)p->k + AT4(p->ks, b, hk, j0, 0); /* float32: staged */
                    kern->pack_transposed(k, p->ks[2], p->ks[3], nj, p->D, w->kt, d->bcp);
                    kr = sdpa_rows_operand(k, p->ks[2], p->ks[3], nj, p->D, npad, w->kr, d->dp,
                                           &ldk);
                    kern->pack_transposed((const float *)p->v + AT4(p->vs, b, hk, j0, 0), p->vs[2], p->vs[3], nj,
                                          p->Dv, w->vt, d->bcp);
                    if (w->eng) { /* the B operands of S, dP and dQ as pairs */
                        sdpa_pairs_keys_f32(w->kt, d->bcp, p->D, d->bcp, w->ktp, d->bcp);
                        sdpa_pairs_keys_f32(w->vt, d->bcp, p->Dv, d->bcp, w->vtp, d->bcp);
                        sdpa_pairs_keys_f32(kr, ldk, nj, dn, w->krp, d->dp);
                    }
                    packed = true;
                    vmax = kern->rows_finite(w->vt, d->bcp, p->Dv, nj)
                               ? value_bound(w->vt, d->bcp, p->Dv, nj)
                               : INFINITY; /* a NaN or inf value: note_dp_class checks */
                }
                /* Q_i and dO_i serve as A and as B operands: rows, unit stride. */
                int64_t ldq, lddo;
                const float *qb = sdpa_rows_operand(p->q + AT4(p->qs, b, h, i0, 0), p->qs[2],
                                                    p->qs[3], mi, p->D, npad, w->qb, d->dp, &ldq);
                const float *dob = sdpa_rows_operand(p->dout + AT4(p->dos, b, h, i0, 0),
                                                     p->dos[2], p->dos[3], mi, p->Dv, npad,
                                                     w->dob, d->dvp, &lddo);
                const row_view rv = row_block(p, d, rs, b, h, it, w);
                const int64_t x0 = i0 - it; /* row i0 in the block's quantities */
                float *dq_rows = p->dq ? dq_row(p, d, chunk, part, b, h, i0, w) : NULL;
                const int64_t c0 = t.c0 - t.c0 % npad, cn = sdpa_round_up(t.cols, npad);
                const bwd_bands bd = backward_bands(w, mi, c0, t.cols, npad);
                const sdpa_gemm_fn gemm_dv =
                    p->dv ? guarded(kern, rv.nf + x0, mi, BWD_DO_NONFINITE) : NULL;
                /* the tile's rows' visibility, for add_zero_terms */
                const sdpa_logits vis = sdpa_tile_logits(p, &t, 0, w->start, w->end, w->bias);

                /* In the forward pass P = exp(X - m - ll); recompute it, band
                 * by band over the columns each band's rows may see (zeros
                 * elsewhere in [c0, cn), for the products over whole columns). */
                for (int64_t e = 0; e < bd.n; ++e) {
                    const int64_t r0 = bd.r0b[e], rb = bd.r1b[e] - r0;
                    const int64_t b0 = bd.c0[e], bn = sdpa_round_up(bd.c1[e], npad);
                    float *sb = w->s + r0 * d->bcp, *db = w->dps + r0 * d->bcp;
                    const sdpa_logits lg = sdpa_tile_logits(p, &t, r0, w->start, w->end, w->bias);
                    if (bn > b0 && direct) /* the forward's logits (sdpa_scores_direct) */
                        sdpa_direct_scores(kern, ATTN_F32, kr + b0 * ldk, ldk,
                                           (bd.c1[e] < nj ? bd.c1[e] : nj) - b0, bn - b0, p->D,
                                           qb + r0 * ldq, ldq, 1, rb, sb + b0, d->bcp, NULL, NULL);
                    else if (bn > b0)
                        bwd_product(w, kern->gemm, rb, bn - b0, p->D, qb + r0 * ldq, ldq, 1,
                                    rv.qa ? rv.qa + (x0 + r0) * qkp : NULL, qkp, w->kt + b0,
                                    d->bcp, w->ktp + b0, d->bcp, sb + b0, d->bcp, SDPA_GEMM_SET);
                    kern->probs(rb, b0, bn, &lg, sb, d->bcp, rv.rm + x0 + r0, rv.rll + x0 + r0,
                                w->dfac ? w->dfac + r0 * d->bcp : NULL);
                    zero_outside(sb, d->bcp, rb, c0, cn, b0, bn);
                    /* With dropout the forward used P∘Z (Z: 0 or 1/(1-p));
                     * regenerate Z and form P∘Z in dps, free until dP. */
                    if (w->z) {
                        for (int64_t r = 0; r < rb; ++r)
                            memcpy(db + r * d->bcp + b0, sb + r * d->bcp + b0,
                                   (size_t)(bn - b0) * sizeof(float));
                        sdpa_dropout_tile(p, kern, b, h, i0 + r0, rb, j0, b0, bn, db, d->bcp,
                                          w->z + r0 * d->bcp);
                        zero_outside(db, d->bcp, rb, c0, cn, b0, bn);
                    }
                }
                const float *pz = w->z ? w->dps : w->s;
                /* Forward O = (P∘Z)·V, so dV_j += (P∘Z)ᵀ·dO_i. */
                if (p->dv)
                    for (int64_t e = 0; e < bd.nk; ++e) {
                        const int64_t kn = bd.k1[e] - bd.k0[e], rn = bd.r1[e] - bd.r0[e];
                        const float *ae = pz + bd.r0[e] * d->bcp + bd.k0[e];
                        bwd_product(w, gemm_dv, kn, dvn, rn, ae, 1, d->bcp, NULL, 0,
                                    dob + bd.r0[e] * lddo, lddo,
                                    row_pairs_at(p, rv.dr, d->dvp, i0, x0, bd.r0[e], bd.r1[e]),
                                    d->dvp, w->dv + bd.k0[e] * d->dvp, d->dvp, SDPA_GEMM_ADD);
                        if (gemm_dv == sdpa_gemm_skip_zeros)
                            add_zero_terms(&vis, rv.nf + x0, true, kn, p->Dv, rn, ae, 1, d->bcp,
                                           bd.k0[e], bd.r0[e], dob + bd.r0[e] * lddo, lddo,
                                           w->dv + bd.k0[e] * d->dvp, d->dvp);
                    }
                if (!want_ds) continue;
                const sdpa_gemm_fn gemm_dk =
                    p->dk ? guarded(kern, rv.nf + x0, mi, BWD_Q_NONFINITE) : NULL;
                if (p->dq && k_finite < 0) k_finite = kern->rows_finite(kr, ldk, nj, p->D);
                const sdpa_gemm_fn gemm_dq = !k_finite ? sdpa_gemm_skip_zeros : kern->gemm;
                for (int64_t e = 0; e < bd.n; ++e) {
                    const int64_t r0 = bd.r0b[e], rb = bd.r1b[e] - r0;
                    const int64_t b0 = bd.c0[e], b1 = bd.c1[e], bn = sdpa_round_up(b1, npad);
                    float *db = w->dps + r0 * d->bcp;
                    /* ... and dP = (dO_i·V_jᵀ)∘Z; through the softmax dS = f·P∘(dP - D). */
                    if (bn > b0)
                        bwd_product(w, kern->gemm, rb, bn - b0, p->Dv, dob + r0 * lddo, lddo, 1,
                                    rv.da ? rv.da + (x0 + r0) * dkp : NULL, dkp, w->vt + b0,
                                    d->bcp, w->vtp + b0, d->bcp, db + b0, d->bcp, SDPA_GEMM_SET);
                    if (w->z)
                        for (int64_t r = 0; r < rb; ++r)
                            for (int64_t c = b0; c < bn; ++c)
                                db[r * d->bcp + c] *= w->z[(r0 + r) * d->bcp + c];
                    note_dp_class(p, rs, b, h, i0 + r0, j0, nj, rb, b0, b1, w->s + r0 * d->bcp, db,
                                  d->bcp, rv.dm + x0 + r0, rv.nf + x0 + r0, vmax, risk);
                    if (p->dbias)
                        store_logit_grads(p, b, h, i0 + r0, rb, j0, b0, b1, w->s + r0 * d->bcp,
                                          db, d->bcp, rv.di + x0 + r0, rv.nf + x0 + r0);
                    /* Only ragged tiles hold hidden keys between visible ones. */
                    dsoftmax_band(p, kern, b, h, i0 + r0, j0, nj, rb, b0, bn, w->s + r0 * d->bcp,
                                  db, d->bcp, rv.di + x0 + r0, rv.nf + x0 + r0,
                                  w->dfac ? w->dfac + r0 * d->bcp : NULL, t.ragged);
                    zero_outside(db, d->bcp, rb, c0, cn, b0, bn);
                    /* Forward S = Q·Kᵀ (f is inside dS): dQ_i += dS·K_j over the
                     * band's keys (its other dS are 0). */
                    if (p->dq && b1 > b0)
                        bwd_product(w, gemm_dq, rb, dn, b1 - b0, db + b0, d->bcp, 1, NULL, 0,
                                    kr + b0 * ldk, ldk,
                                    /* an odd count packs its own last pair: the
                                     * tile's next key may hold anything */
                                    (b1 - b0) % 2 ? NULL : w->krp + b0 / 2 * d->dp, d->dp,
                                    dq_rows + r0 * d->dp, d->dp, SDPA_GEMM_ADD);
                    if (p->dq && b1 > b0 && gemm_dq == sdpa_gemm_skip_zeros)
                        add_zero_terms(&vis, rv.nf + x0, false, rb, p->D, b1 - b0, db + b0,
                                       d->bcp, 1, r0, b0, kr + b0 * ldk, ldk,
                                       dq_rows + r0 * d->dp, d->dp);
                }
                /* ... and dK_j += dSᵀ·Q_i. */
                if (p->dk)
                    for (int64_t e = 0; e < bd.nk; ++e) {
                        const int64_t kn = bd.k1[e] - bd.k0[e], rn = bd.r1[e] - bd.r0[e];
                        const float *ae = w->dps + bd.r0[e] * d->bcp + bd.k0[e];
                        bwd_product(w, gemm_dk, kn, dn, rn, ae, 1, d->bcp, NULL, 0,
                                    qb + bd.r0[e] * ldq, ldq,
                                    row_pairs_at(p, rv.qr, d->dp, i0, x0, bd.r0[e], bd.r1[e]),
                                    d->dp, w->dk + bd.k0[e] * d->dp, d->dp, SDPA_GEMM_ADD);
                        if (gemm_dk == sdpa_gemm_skip_zeros)
                            add_zero_terms(&vis, rv.nf + x0, true, kn, p->D, rn, ae, 1, d->bcp,
                                           bd.k0[e], bd.r0[e], qb + bd.r0[e] * ldq, ldq,
                                           w->dk + bd.k0[e] * d->dp, d->dp);
                    }
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
    if (p->dq) dq_leftovers(p, d, chunk, part, b, hk, w);
}

/* d sink_h = -Σ_(b,i) exp(sink_h - m - ll)·D_i, summed in a fixed order. */
static void sink_gradients(const sdpa_problem *p, const float *rm, const float *rll,
                           const float *di)
{
    for (int64_t h = 0; h < p->Hq; ++h) {
        const float sink = sdpa_sink(p, h);
        double acc = 0.0;
        for (int64_t b = 0; b < p->B; ++b)
            for (int64_t i = 0; i < p->Nq; ++i) {
                const int64_t row = (b * p->Hq + h) * p->Nq + i;
                if (rm[row] == -INFINITY) continue; /* nothing, not even the sink */
                /* A row that sees no key has the constant output 0: nothing
                 * flows to its sink, whose statistics alone cannot tell
                 * that when the sink is ±inf or NaN. */
                if (!isfinite(sink) && !sdpa_row_sees_key(p, b, h, i)) continue;
                /* Nor does a row whose keys the masks all hide: its D is the
                 * sum over no key, 0 (dO·O reads NaN·0 with a NaN in dO). */
                if (!isfinite(di[row]) && !sdpa_row_has_keys(p, b, h, i)) continue;
                acc -= (double)expf(sink - rm[row] - rll[row]) * di[row];
            }
        p->dsinks[h * p->dsinks_s] = (float)acc;
    }
}

/* Thread `me` of `team`'s share of the backward's tasks: called by each
 * thread of a parallel region, or as a team of one on the calling thread
 * (which may itself be in another region: nothing here asks OpenMP). */
static void backward_team(const sdpa_problem *p, const sdpa_kernels *kern, const bwd_dims *d,
                          const sdpa_bf16_engine *eng, char *scratch, size_t per_thread,
                          bwd_rows *rs, float *part, sdpa_cursor *next, int me, int team)
{
    SDPA_PROF_START(t_setup);
    char *mine = scratch + (size_t)me * per_thread;
    memset(mine, 0, per_thread);
    bwd_scratch w = carve_scratch(p, d, mine);
    w.eng = eng;
    SDPA_PROF_STOP(SDPA_PROF_BACKWARD, SDPA_PROF_WHOLE, SDPA_PROF_SETUP, t_setup);
    /* A kv head's key chunks one after another on one thread, which
     * then finds the head's rows in its L2 (sdpa_next_task). */
    for (int64_t t; (t = sdpa_next_task(next, me, team, p->B * p->Hkv, d->chunks)) >= 0;) {
        const int64_t c = t % d->chunks, bh = t / d->chunks;
        SDPA_PROF_START(t_task);
        backward_task(p, kern, d, bh / p->Hkv, bh % p->Hkv, c, rs, part, &w);
        SDPA_PROF_STOP(SDPA_PROF_BACKWARD, SDPA_PROF_WHOLE, SDPA_PROF_TASKS, t_task);
    }
}

/* dQ of one row = Σ partials of the chunks whose keys the row can see, in
 * chunk order (the others hold exact zeros). */
static void sum_dq_row(const sdpa_problem *p, const bwd_dims *d, float *part, int64_t row)
{
    const int64_t i = row % p->Nq, bh = row / p->Nq;
    float *dst = p->dq + AT4(p->dqs, bh / p->Hq, bh % p->Hq, i, 0), *restrict acc = NULL;
    for (int64_t c = 0; c < d->chunks; ++c) {
        if (i < d->rlo[c] || i >= d->rlo[c] + d->span[c]) continue;
        float *restrict pc = part + d->part_at[c] + (bh * d->span[c] + i - d->rlo[c]) * d->dp;
        if (!acc) {
            acc = pc; /* the first: accumulate into it, contiguous and vectorised */
            continue;
        }
        for (int64_t x = 0; x < p->D; ++x) acc[x] += pc[x];
    }
    for (int64_t x = 0; x < p->D; ++x) dst[x * p->dqs[3]] = acc ? acc[x] : 0.0f;
}

attn_status sdpa_fused_backward(const sdpa_problem *p, const sdpa_kernels *kern, attn_error *err)
{
    SDPA_PROF_START(t_call);
    bool ok;
    const bwd_dims d = backward_dims(p, &ok);
    size_t per_thread, fwd_bytes;
    const sdpa_size need = backward_bytes(p, &d, false, &per_thread, &fwd_bytes);
    RETURN_IF(!ok || !need.ok, err, ATTN_ERR_OVERFLOW, "workspace size overflows");
    void *owned;
    char *cursor;
    RETURN_IF_ERROR(sdpa_workspace(p, need.bytes, &owned, &cursor, err));
    float *di = sdpa_take(&cursor, d.rows, sizeof(float));
    float *dm = sdpa_take(&cursor, d.rows, sizeof(float));
    float *stats = sdpa_take(&cursor, 2 * d.rows, sizeof(float));
    float *rm = stats, *rll = stats + d.rows;
    uint8_t *nonfinite = sdpa_take(&cursor, d.rows, 1);
    atomic_uchar *dp_class = sdpa_take(&cursor, d.rows, sizeof(atomic_uchar));
    atomic_uchar *row_state = sdpa_take(&cursor, row_blocks(p), sizeof(atomic_uchar));
    sdpa_cursor *next = sdpa_take(&cursor, p->threads, sizeof(sdpa_cursor));
    float *part = sdpa_take(&cursor, p->dq ? d.part_at[d.chunks] : 0, sizeof(float));
    float *o_ws = sdpa_take(&cursor, d.recompute ? d.rows * p->Dv : 0, sizeof(float));
    float *st_ws = sdpa_take(&cursor, d.recompute ? 2 * d.rows : 0, sizeof(float));
    uint32_t *pairs = sdpa_take(&cursor, row_pair_words(p, &d), sizeof(uint32_t));
    char *scratch = sdpa_take(&cursor, (int64_t)per_thread * p->threads, 1);
    const int threads = p->threads;
    const sdpa_bf16_engine *eng = backward_engine(p, kern);

    /* O and the row statistics: the caller's, or from the fused forward into
     * our workspace. */
    const float *o = p->o, *st = p->stats;
    int64_t os[4] = {p->os[0], p->os[1], p->os[2], p->os[3]};
    int64_t ss[4] = {p->ss[0], p->ss[1], p->ss[2], p->ss[3]};
    if (d.recompute) {
        sdpa_problem f = *p;
        f.o = o_ws;
        f.os[3] = 1, f.os[2] = p->Dv, f.os[1] = p->Nq * p->Dv, f.os[0] = p->Hq * p->Nq * p->Dv;
        f.stats = st_ws;
        f.ss[3] = 1, f.ss[2] = 2, f.ss[1] = 2 * p->Nq, f.ss[0] = 2 * p->Hq * p->Nq;
        f.lse = NULL;
        f.w = NULL;
        f.dout = NULL;
        f.dsinks = NULL;
        f.workspace = sdpa_take(&cursor, (int64_t)fwd_bytes, 1);
        f.workspace_size = fwd_bytes;
        attn_status s = sdpa_fused_forward(&f, kern, err);
        if (s != ATTN_OK) {
            free(owned);
            return s;
        }
        o = o_ws, st = st_ws;
        memcpy(os, f.os, sizeof os);
        memcpy(ss, f.ss, sizeof ss);
    }

    /* The per-row quantities: computed by the tasks as they need them, or
     * all up front when the sinks' gradients need every row's. */
    bwd_rows rs = {di, rm, rll, nonfinite, row_state, o, st, {0}, {0}, NULL, NULL, NULL, NULL,
                   dm, dp_class};
    for (int64_t x = 0; x < d.rows; ++x) atomic_init(&dp_class[x], 0);
    if (eng && row_pair_words(p, &d) > 0 && p->qs[3] == 1 && p->dos[3] == 1) {
        rs.qa = pairs, rs.da = rs.qa + d.rows * ((p->D + 1) / 2);
        rs.qr = rs.da + d.rows * ((p->Dv + 1) / 2);
        rs.dr = rs.qr + p->B * p->Hq * ((p->Nq + 1) / 2) * d.dp;
    }
    memcpy(rs.os, os, sizeof os);
    memcpy(rs.ss, ss, sizeof ss);
    for (int64_t x = 0; x < row_blocks(p); ++x)
        atomic_init(&row_state[x], p->dsinks ? SDPA_ITEM_READY : SDPA_ITEM_FREE);
    if (p->dsinks) {
#pragma omp parallel for num_threads(threads) schedule(dynamic, BWD_ROW_CHUNK)
        for (int64_t row = 0; row < d.rows; ++row)
            row_quantities(p, &rs, row / (p->Nq * p->Hq), (row / p->Nq) % p->Hq, row % p->Nq,
                           &di[row], &rm[row], &rll[row], &dm[row], &nonfinite[row]);
        sink_gradients(p, rm, rll, di);
    }

    /* One thread, or one task: on this thread, without entering a parallel
     * region (whose set-up costs more than a tiny call). */
    const bool alone = threads == 1 || p->B * p->Hkv * d.chunks == 1;
    SDPA_PROF_START(t_loop);
    /* Twice when a row's D must be torch's Σ P·dP (torch_row_d): rare
     * inputs (an overflowing dO·v, an O from elsewhere) pay for it. */
    for (int run = 0; run < 2; ++run) {
        for (int x = 0; x < threads; ++x) atomic_init(&next[x].next, 0);
        if (alone) {
            backward_team(p, kern, &d, eng, scratch, per_thread, &rs, part, next, 0, 1);
        } else {
#pragma omp parallel num_threads(threads)
            {
                int me, team;
                sdpa_team(&me, &team);
                backward_team(p, kern, &d, eng, scratch, per_thread, &rs, part, next, me, team);
            }
        }
        if (run > 0 || !torch_row_d(&d, &rs)) break;
        if (p->dsinks) sink_gradients(p, rm, rll, di);
    }
    SDPA_PROF_STOP(SDPA_PROF_BACKWARD, SDPA_PROF_WHOLE, SDPA_PROF_LOOP, t_loop);

    if (p->dq && (threads == 1 || d.rows <= BWD_ROW_CHUNK)) {
        for (int64_t row = 0; row < d.rows; ++row) sum_dq_row(p, &d, part, row);
    } else if (p->dq) {
#pragma omp parallel for num_threads(threads) schedule(dynamic, BWD_ROW_CHUNK)
        for (int64_t row = 0; row < d.rows; ++row) sum_dq_row(p, &d, part, row);
    }
    free(owned);
    SDPA_PROF_STOP(SDPA_PROF_BACKWARD, SDPA_PROF_WHOLE, SDPA_PROF_CALL, t_call);
    SDPA_PROF_CALL(SDPA_PROF_BACKWARD);
    return ATTN_OK;
}
