/*
 * Fused forward: query tiles × key tiles with an online softmax.
 *
 * A task is (batch b, kv head hk, up to FWD_UNITS "units"), a unit being
 * FWD_ROWS query rows of one query head reading hk: consecutive row blocks
 * of a head and/or the heads of a GQA group. For each key tile of FWD_KEYS
 * keys the task packs Kᵀ and V once, then for each of its units:
 *   S  = Q·Kᵀ              (rows × keys; Q read in place, any strides)
 *   P  = exp(scale·S + bias - m_new), m and l updated   (online softmax)
 *   O  = alpha∘O + P·V     (alpha rescales rows whose max grew)
 * and finally out = O / l, lse = m + log l. Tiles that causality and the
 * masks hide entirely are skipped before anything is computed or packed;
 * partially visible tiles are cut per row (limit) and masked in registers.
 *
 * Memory: per thread one Kᵀ and one V tile, a score tile, a bias tile and
 * the output accumulators of its rows: O(threads × tile × D), nothing of
 * size Nq × Nk. Attention weights, when requested, are written by a second
 * sweep over the key tiles of the task from the final LSE
 * (w = exp(scale·s + bias - lse)), which costs one more Q·Kᵀ.
 *
 * Every output element is produced by one task in a fixed order, so results
 * do not depend on the thread count or scheduling.
 */
#include "fused_util.h"

#ifdef _OPENMP
#include <omp.h>
#endif

enum {
    FWD_ROWS = 96,  /* query rows per unit (multiple of every MR) */
    FWD_KEYS = 64,  /* keys per tile (multiple of SDPA_MAX_NPAD) */
    FWD_UNITS = 4,  /* row blocks (of any heads of the group) sharing a packed K/V tile */
    FWD_BAND = 24,  /* rows whose visible columns are bounded together (multiple of every MR) */
};

_Static_assert(FWD_ROWS % FWD_BAND == 0, "row bands must tile a row block");
_Static_assert(FWD_KEYS % SDPA_MAX_NPAD == 0, "key tiles are whole column panels");

typedef struct {
    int64_t units;    /* units per task */
    int64_t bcp, dvp; /* padded tile widths: keys, value features */
} fwd_dims;

static fwd_dims forward_dims(const sdpa_problem *p)
{
    fwd_dims d;
    d.units = FWD_UNITS;
    d.bcp = sdpa_round_up(FWD_KEYS, SDPA_MAX_NPAD);
    d.dvp = sdpa_round_up(p->Dv, SDPA_MAX_NPAD);
    return d;
}

/* Per-thread scratch, in the order forward_thread_bytes sizes it. */
typedef struct {
    float *kt, *v, *s, *bias, *o, *rowmax, *rowsum, *alpha;
    int32_t *limit;
    const float *vop; /* V operand of the current tile: w->v or V in place */
    int64_t ldv;
} fwd_scratch;

static sdpa_size forward_thread_bytes(const sdpa_problem *p, const fwd_dims *d)
{
    sdpa_size s = {0, true};
    const int64_t rows = d->units * FWD_ROWS;
    sdpa_size_add(&s, p->D * d->bcp, sizeof(float)); /* kt */
    sdpa_size_add(&s, FWD_KEYS * d->dvp, sizeof(float)); /* v */
    sdpa_size_add(&s, FWD_ROWS * d->bcp, sizeof(float)); /* s */
    sdpa_size_add(&s, FWD_ROWS * d->bcp, sizeof(float)); /* bias */
    sdpa_size_add(&s, rows * d->dvp, sizeof(float)); /* o */
    sdpa_size_add(&s, rows, sizeof(float)); /* rowmax */
    sdpa_size_add(&s, rows, sizeof(float)); /* rowsum */
    sdpa_size_add(&s, rows, sizeof(float)); /* alpha */
    sdpa_size_add(&s, FWD_ROWS, sizeof(int32_t)); /* limit */
    return s;
}

static fwd_scratch carve_scratch(const sdpa_problem *p, const fwd_dims *d, char *base)
{
    fwd_scratch w;
    const int64_t rows = d->units * FWD_ROWS;
    w.kt = sdpa_take(&base, p->D * d->bcp, sizeof(float));
    w.v = sdpa_take(&base, FWD_KEYS * d->dvp, sizeof(float));
    w.s = sdpa_take(&base, FWD_ROWS * d->bcp, sizeof(float));
    w.bias = sdpa_take(&base, FWD_ROWS * d->bcp, sizeof(float));
    w.o = sdpa_take(&base, rows * d->dvp, sizeof(float));
    w.rowmax = sdpa_take(&base, rows, sizeof(float));
    w.rowsum = sdpa_take(&base, rows, sizeof(float));
    w.alpha = sdpa_take(&base, rows, sizeof(float));
    w.limit = sdpa_take(&base, FWD_ROWS, sizeof(int32_t));
    return w;
}

bool sdpa_fused_forward_workspace(const sdpa_problem *p, size_t *bytes)
{
    const fwd_dims d = forward_dims(p);
    sdpa_size per = forward_thread_bytes(p, &d);
    int64_t total;
    if (!per.ok || !attn_mul_ok((int64_t)per.bytes, p->threads, &total) ||
        !attn_add_ok(total, SDPA_WORKSPACE_SLACK, &total))
        return false;
    *bytes = (size_t)total;
    return true;
}

/* Keys of tile [j0, j0+nj) for kv head (b, hk): Kᵀ (D × bcp) and the V
 * operand (nj rows, packed only when V cannot be read in place). */
static void pack_kv(const sdpa_problem *p, const sdpa_kernels *kern, const fwd_dims *d,
                    int64_t b, int64_t hk, int64_t j0, int64_t nj, fwd_scratch *w, bool with_v)
{
    kern->pack_transposed(p->k + AT4(p->ks, b, hk, j0, 0), p->ks[2], p->ks[3], nj, p->D, w->kt,
                          d->bcp);
    if (with_v)
        w->vop = sdpa_rows_operand(p->v + AT4(p->vs, b, hk, j0, 0), p->vs[2], p->vs[3], nj,
                                   p->Dv, kern->npad, w->v, d->dvp, &w->ldv);
}

/* Second sweep: weights of rows [i0, i0+mi) of head (b,h) from their LSE. */
/* Weights of rows [i0, i0+mi) from the final row max m and sum l:
 * exp(scale·s + bias - m) / l. (exp(x - lse) would round lse = m + log l
 * first and lose |lse| ulps.) A NaN lse marks a NaN-poisoned row. */
static void write_weights(const sdpa_problem *p, const sdpa_kernels *kern, const fwd_dims *d,
                          int64_t b, int64_t h, int64_t i0, int64_t mi, const float *rowmax,
                          const float *rowsum, const float *lse, fwd_scratch *w)
{
    const int64_t hk = h / p->group;
    for (int64_t j0 = 0; j0 < p->Nk; j0 += FWD_KEYS) {
        const int64_t nj = p->Nk - j0 < FWD_KEYS ? p->Nk - j0 : FWD_KEYS;
        const sdpa_tile t = sdpa_plan_tile(p, kern, b, h, i0, mi, j0, nj, w->limit, w->bias, d->bcp);
        if (t.cols > 0) {
            pack_kv(p, kern, d, b, hk, j0, nj, w, false);
            kern->gemm(mi, sdpa_round_up(t.cols, kern->npad), p->D, p->q + AT4(p->qs, b, h, i0, 0),
                       p->qs[2], p->qs[3], w->kt, d->bcp, w->s, d->bcp, NULL, SDPA_GEMM_SET);
            kern->probs_from_lse(mi, nj, p->scale, w->s, d->bcp, w->limit,
                                 t.use_bias ? w->bias : NULL, t.ldbias, rowmax);
        }
        for (int64_t r = 0; r < mi; ++r) {
            float *dst = p->w + AT4(p->ws, b, h, i0 + r, j0);
            const float inv = rowsum[r] > 0.0f ? 1.0f / rowsum[r] : 0.0f;
            for (int64_t c = 0; c < nj; ++c)
                dst[c * p->ws[3]] = isnan(lse[r]) ? NAN : t.cols > 0 ? w->s[r * d->bcp + c] * inv : 0.0f;
        }
    }
}

/* Unit u of kv head hk: query head *h, rows [*i0, *i0 + *mi). Units run
 * block-major, so a GQA group's heads of one row block are neighbours. */
static void unit_rows(const sdpa_problem *p, int64_t hk, int64_t u, int64_t *h, int64_t *i0,
                      int64_t *mi)
{
    *h = hk * p->group + u % p->group;
    *i0 = u / p->group * FWD_ROWS;
    *mi = p->Nq - *i0 < FWD_ROWS ? p->Nq - *i0 : FWD_ROWS;
}

/* One task: units [u0, u0+nu) of kv head (b, hk). */
static void forward_task(const sdpa_problem *p, const sdpa_kernels *kern, const fwd_dims *d,
                         int64_t b, int64_t hk, int64_t u0, int64_t nu, fwd_scratch *w)
{
    const int64_t dvn = sdpa_round_up(p->Dv, kern->npad);
    for (int64_t x = 0; x < nu * FWD_ROWS; ++x) {
        w->rowmax[x] = -INFINITY;
        w->rowsum[x] = 0.0f;
    }
    memset(w->o, 0, (size_t)(nu * FWD_ROWS * d->dvp) * sizeof(float));

    /* Keys past the causal end of the units' last rows are never visible. */
    int64_t kend = 0;
    for (int64_t e = 0; e < nu; ++e) {
        int64_t h, i0, mi;
        unit_rows(p, hk, u0 + e, &h, &i0, &mi);
        const int64_t end = sdpa_causal_end(p, i0 + mi - 1);
        kend = end > kend ? end : kend;
    }
    for (int64_t j0 = 0; j0 < kend; j0 += FWD_KEYS) {
        const int64_t nj = kend - j0 < FWD_KEYS ? kend - j0 : FWD_KEYS;
        bool packed = false;
        for (int64_t e = 0; e < nu; ++e) {
            int64_t h, i0, mi;
            unit_rows(p, hk, u0 + e, &h, &i0, &mi);
            const sdpa_tile t = sdpa_plan_tile(p, kern, b, h, i0, mi, j0, nj, w->limit, w->bias,
                                               d->bcp);
            if (t.cols == 0) continue; /* hidden: not even packed */
            if (!packed) {
                pack_kv(p, kern, d, b, hk, j0, nj, w, true);
                packed = true;
            }
            float *rowmax = w->rowmax + e * FWD_ROWS, *rowsum = w->rowsum + e * FWD_ROWS;
            float *alpha = w->alpha + e * FWD_ROWS, *o = w->o + e * FWD_ROWS * d->dvp;
            /* S = Q·Kᵀ over the visible columns only, band by band: on
             * diagonal (causal) or ragged tiles each band of rows stops at
             * the last column its own rows may see. */
            int64_t band_cols[FWD_ROWS / FWD_BAND];
            for (int64_t r0 = 0; r0 < mi; r0 += FWD_BAND) {
                const int64_t rb = mi - r0 < FWD_BAND ? mi - r0 : FWD_BAND;
                int64_t cols = 0;
                for (int64_t r = r0; r < r0 + rb; ++r) cols = w->limit[r] > cols ? w->limit[r] : cols;
                band_cols[r0 / FWD_BAND] = cols;
                if (cols > 0)
                    kern->gemm(rb, sdpa_round_up(cols, kern->npad), p->D,
                               p->q + AT4(p->qs, b, h, i0 + r0, 0), p->qs[2], p->qs[3], w->kt,
                               d->bcp, w->s + r0 * d->bcp, d->bcp, NULL, SDPA_GEMM_SET);
            }
            kern->softmax_online(mi, t.cols, p->scale, w->s, d->bcp, w->limit,
                                 t.use_bias ? w->bias : NULL, t.ldbias, rowmax, rowsum, alpha);
            /* O = alpha∘O + P·V (k = 0 still applies alpha) */
            for (int64_t r0 = 0; r0 < mi; r0 += FWD_BAND) {
                const int64_t rb = mi - r0 < FWD_BAND ? mi - r0 : FWD_BAND;
                kern->gemm(rb, dvn, band_cols[r0 / FWD_BAND], w->s + r0 * d->bcp, d->bcp, 1,
                           w->vop, w->ldv, o + r0 * d->dvp, d->dvp, alpha + r0,
                           SDPA_GEMM_SCALE_ADD);
            }
        }
    }

    for (int64_t e = 0; e < nu; ++e) {
        int64_t h, i0, mi;
        unit_rows(p, hk, u0 + e, &h, &i0, &mi);
        float *lse_rows = w->alpha + e * FWD_ROWS; /* alpha is free now: reuse for the LSE */
        for (int64_t r = 0; r < mi; ++r) {
            const float l = w->rowsum[e * FWD_ROWS + r];
            const float *o = w->o + (e * FWD_ROWS + r) * d->dvp;
            float *dst = p->o + AT4(p->os, b, h, i0 + r, 0);
            /* A row that saw no key: out 0, lse -inf (l is 0 exactly then),
             * unless its scores were all NaN: then NaN, as everywhere else. */
            const bool empty = l == 0.0f;
            const float fill = empty && sdpa_row_sees_nan(p, b, h, i0 + r) ? NAN : 0.0f;
            for (int64_t c = 0; c < p->Dv; ++c) dst[c * p->os[3]] = empty ? fill : o[c] / l;
            lse_rows[r] = empty ? (fill == 0.0f ? -INFINITY : NAN)
                                : w->rowmax[e * FWD_ROWS + r] + logf(l);
            if (p->lse) p->lse[b * p->ls[0] + h * p->ls[1] + (i0 + r) * p->ls[2]] = lse_rows[r];
        }
        if (p->w)
            write_weights(p, kern, d, b, h, i0, mi, w->rowmax + e * FWD_ROWS,
                          w->rowsum + e * FWD_ROWS, lse_rows, w);
    }
}

attn_status sdpa_fused_forward(const sdpa_problem *p, const sdpa_kernels *kern, attn_error *err)
{
    const fwd_dims d = forward_dims(p);
    size_t need;
    RETURN_IF(!sdpa_fused_forward_workspace(p, &need), err, ATTN_ERR_OVERFLOW,
              "workspace size overflows");
    need -= SDPA_WORKSPACE_SLACK;
    void *owned;
    char *ws = sdpa_workspace(p, need, &owned, err);
    if (!ws) return err ? err->status : ATTN_ERR_ALLOC;
    const size_t per_thread = forward_thread_bytes(p, &d).bytes;

    const int64_t units = (p->Nq + FWD_ROWS - 1) / FWD_ROWS * p->group; /* per kv head */
    const int64_t per_kv = (units + d.units - 1) / d.units;
    const int64_t tasks = p->B * p->Hkv * per_kv;
    const int threads = p->threads;

#pragma omp parallel num_threads(threads)
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        char *mine = ws + (size_t)tid * per_thread;
        memset(mine, 0, per_thread); /* padding must hold zeros, never garbage */
        fwd_scratch w = carve_scratch(p, &d, mine);
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < tasks; ++t) {
            /* Causal rows late in the sequence cost most: hand them out first. */
            int64_t k = t % per_kv;
            if (p->causal != ATTN_CAUSAL_NONE) k = per_kv - 1 - k;
            const int64_t bh = t / per_kv, u0 = k * d.units;
            const int64_t nu = units - u0 < d.units ? units - u0 : d.units;
            forward_task(p, kern, &d, bh / p->Hkv, bh % p->Hkv, u0, nu, &w);
        }
    }
    free(owned);
    return ATTN_OK;
}
