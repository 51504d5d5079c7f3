/* The plain SDPA path: one query row at a time, scores for the whole row in
 * a buffer, a textbook softmax. Obviously correct and always compiled: every
 * other path is tested against it. Its long sums (over keys, over query rows)
 * run in blocks: a plain float sum over 8192 terms drifts beyond the accuracy
 * contract the other paths are held to. */
#include "problem.h"

#include <stdlib.h>

/* A float sum in blocks of SUM_BLOCK terms: each block summed in order, the
 * block sums added to the total, so the rounding error grows with
 * SUM_BLOCK + n/SUM_BLOCK rather than n. Up to SUM_BLOCK terms it is the
 * plain sum, bit for bit. */
enum { SUM_BLOCK = 128 };
typedef struct {
    float total, block;
    int64_t n;
} block_sum;

static void block_add(block_sum *s, float x)
{
    s->block += x;
    if (++s->n % SUM_BLOCK == 0) {
        s->total += s->block;
        s->block = 0.0f;
    }
}

static float block_value(const block_sum *s)
{
    return s->total + s->block;
}

#define AT4(s, a, b, c, d) ((a) * (s)[0] + (b) * (s)[1] + (c) * (s)[2] + (d) * (s)[3])

/* Floats of row buffer per thread: a score row and a gradient row. */
static int64_t row_floats(const sdpa_problem *p)
{
    return 2 * (p->Nk > 0 ? p->Nk : 1);
}

/* Row workspace: row_floats per thread, the caller's or allocated. */
static attn_status row_buffers(const sdpa_problem *p, int threads, float **owned, float **ws,
                               attn_error *err)
{
    int64_t bytes;
    *owned = *ws = NULL;
    RETURN_IF(!attn_mul_ok(row_floats(p), (int64_t)sizeof(float) * threads, &bytes) ||
                  (uint64_t)bytes > SIZE_MAX,
              err, ATTN_ERR_OVERFLOW, "workspace: %lld keys per row overflow the row buffers",
              (long long)p->Nk);
    const size_t need = (size_t)bytes;
    if (p->workspace) {
        RETURN_IF(p->workspace_size < need, err, ATTN_ERR_WORKSPACE,
                  "workspace: %zu bytes given, %zu needed", p->workspace_size, need);
        *ws = p->workspace;
        return ATTN_OK;
    }
    *owned = *ws = malloc(need);
    RETURN_IF(!*owned, err, ATTN_ERR_ALLOC, "workspace: cannot allocate %zu bytes", need);
    return ATTN_OK;
}

/* Raw score of query row (b,h,i) against key j: q·k in float. */
static float row_dot(const sdpa_problem *p, int64_t b, int64_t h, int64_t i, int64_t j)
{
    /* the fused forward's Q, K may be 16-bit */
    const int64_t qi = AT4(p->qs, b, h, i, 0), kj = AT4(p->ks, b, h / p->group, j, 0);
    block_sum dot = {0};
    for (int64_t d = 0; d < p->D; ++d)
        block_add(&dot, sdpa_q_at(p, qi + d * p->qs[3]) * attn_load_float(p->k, p->kt, kj + d * p->ks[3]));
    return block_value(&dot);
}

/* Logit of (b,h,i,j), -inf when the key is hidden (kernels.h's definition). */
static float row_logit(const sdpa_problem *p, int64_t b, int64_t h, int64_t i, int64_t j,
                       int64_t lo, int64_t hi)
{
    if (j < lo || j >= hi) return -INFINITY;
    const float bias = sdpa_key_bias(p, b, h, i, j);
    if (bias == -INFINITY) return -INFINITY;
    return sdpa_capped_logit(p, row_dot(p, b, h, i, j)) + bias;
}

bool sdpa_row_sees_nan(const sdpa_problem *p, int64_t b, int64_t h, int64_t i)
{
    int64_t lo, hi;
    sdpa_row_keys(p, i, &lo, &hi);
    for (int64_t j = lo; j < hi; ++j)
        if (isnan(row_logit(p, b, h, i, j, lo, hi))) return true;
    return false;
}

bool sdpa_row_sees_key(const sdpa_problem *p, int64_t b, int64_t h, int64_t i)
{
    int64_t lo, hi;
    sdpa_row_keys(p, i, &lo, &hi);
    for (int64_t j = lo; j < hi; ++j)
        if (row_logit(p, b, h, i, j, lo, hi) != -INFINITY) return true;
    return false;
}

bool sdpa_row_has_keys(const sdpa_problem *p, int64_t b, int64_t h, int64_t i)
{
    int64_t lo, hi;
    sdpa_row_keys(p, i, &lo, &hi);
    for (int64_t j = lo; j < hi; ++j)
        if (sdpa_key_visible(p, b, h, i, j)) return true;
    return false;
}

/* Whether row (b,h,i), whose logits are all -inf (`any`: one is not), has
 * a softmax all the same: a finite sink makes it (0, ..., 0; 1), as torch's
 * softmax over the sink's column, and the keys the row sees then multiply
 * their P = 0 (0·NaN: NaN). Without one it is 0/0: a row that sees no key. */
static bool row_has_softmax(const sdpa_problem *p, int64_t b, int64_t h, int64_t i, bool any)
{
    return any || (isfinite(sdpa_sink(p, h)) && sdpa_row_has_keys(p, b, h, i));
}

/* Softmax probabilities of row (b,h,i) into prob[0..Nk) (a sink takes its
 * share of the denominator). Returns false when no key is visible (prob all
 * 0). *lse receives log(exp(sink) + Σ exp(logit)). */
static bool row_probs(const sdpa_problem *p, int64_t b, int64_t h, int64_t i, float *prob,
                      float *lse, float stats[2])
{
    int64_t lo, hi;
    sdpa_row_keys(p, i, &lo, &hi);
    const float sink = sdpa_sink(p, h);
    float m = sink;
    bool any = false;
    for (int64_t j = 0; j < p->Nk; ++j) {
        const float x = row_logit(p, b, h, i, j, lo, hi);
        prob[j] = x;
        any |= x != -INFINITY;
        if (x > m || isnan(x)) m = isnan(m) ? m : x; /* a NaN score poisons the row, as in torch */
    }
    if (!any) {
        for (int64_t j = 0; j < p->Nk; ++j) prob[j] = 0.0f;
        *lse = stats[0] = sink;
        stats[1] = 0.0f;
        return false;
    }
    /* A hidden key (logit -inf) gets 0 whatever m and the sum are, NaN
     * among them: it never influences anything. */
    block_sum bs = {sink == -INFINITY ? 0.0f : expf(sink - m), 0.0f, 0};
    for (int64_t j = 0; j < p->Nk; ++j) {
        if (prob[j] == -INFINITY) continue;
        prob[j] = expf(prob[j] - m);
        block_add(&bs, prob[j]);
    }
    const float sum = block_value(&bs);
    for (int64_t j = 0; j < p->Nk; ++j) prob[j] = prob[j] == -INFINITY ? 0.0f : prob[j] / sum;
    stats[0] = m;
    stats[1] = logf(sum);
    *lse = m == INFINITY ? INFINITY : m + stats[1];
    return true;
}

/* Probabilities of row (b,h,i) from the caller's statistics: exp(x - m - ll)
 * from softmax_stats, else exp(x - lse). *lse receives the row's LSE. Returns
 * false when the row has no visible key among these. */
static bool given_probs(const sdpa_problem *p, int64_t b, int64_t h, int64_t i, float *prob,
                        float *lse)
{
    int64_t lo, hi;
    sdpa_row_keys(p, i, &lo, &hi);
    float m, ll = 0.0f;
    if (p->stats) {
        m = p->stats[AT4(p->ss, b, h, i, 0)];
        ll = p->stats[AT4(p->ss, b, h, i, 1)];
    } else {
        m = p->lse[b * p->ls[0] + h * p->ls[1] + i * p->ls[2]];
        if (m == INFINITY) ll = NAN; /* an infinite logit: NaN, as torch */
    }
    *lse = m == INFINITY ? INFINITY : m + ll;
    bool any = false;
    for (int64_t j = 0; j < p->Nk; ++j) {
        const float x = row_logit(p, b, h, i, j, lo, hi);
        prob[j] = x == -INFINITY || m == -INFINITY ? 0.0f : expf(x - m - ll);
        any |= x != -INFINITY;
    }
    return any && m != -INFINITY;
}

/* Sets x[j] = -1 for the keys row (b,h,i) does not see (outside its range,
 * a -inf mask value; every key when it sees none): probabilities are >= 0
 * or NaN, so -1 marks the keys to skip. Visibility, not p != 0: NaN in v_j
 * reaches the rows that see j, also where p underflowed to 0 (0·NaN). */
static void mark_hidden(const sdpa_problem *p, int64_t b, int64_t h, int64_t i, bool sees_any,
                        float *x)
{
    for (int64_t j = 0; j < p->Nk; ++j)
        if (!sees_any || !sdpa_key_visible(p, b, h, i, j)) x[j] = -1.0f;
}

/* The dropout factor of (b,h,i,j): 1 without dropout. */
static float keep(const sdpa_problem *p, int64_t b, int64_t h, int64_t i, int64_t j)
{
    return p->dropout_p > 0.0f ? sdpa_dropout_factor(p, b, h, i, j) : 1.0f;
}

attn_status sdpa_reference_forward(const sdpa_problem *p, attn_error *err)
{
    const int64_t rows = p->B * p->Hq * p->Nq;
    const int threads = p->threads;
    const float *vf = p->v; /* float32: staged (sdpa.c) */
    float *owned, *ws;
    RETURN_IF_ERROR(row_buffers(p, threads, &owned, &ws, err));

#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        float *prob = attn_thread_scratch(ws, (size_t)row_floats(p) * sizeof(float), false);
        const int64_t i = r % p->Nq, h = (r / p->Nq) % p->Hq, b = r / (p->Nq * p->Hq);
        const int64_t hk = h / p->group;
        float lse, stats[2];
        const bool sees = row_has_softmax(p, b, h, i, row_probs(p, b, h, i, prob, &lse, stats));
        /* out_i = Σ_j P_ij z_ij v_j over the keys j the row sees, z the
         * dropout factor (0 for a row that sees nothing) */
        float *oi = p->o + AT4(p->os, b, h, i, 0), *pz = prob + row_floats(p) / 2;
        for (int64_t j = 0; j < p->Nk; ++j) pz[j] = prob[j] * keep(p, b, h, i, j);
        mark_hidden(p, b, h, i, sees, pz);
        for (int64_t d = 0; d < p->Dv; ++d) {
            block_sum acc = {0};
            for (int64_t j = 0; j < p->Nk; ++j)
                if (!(pz[j] < 0.0f)) block_add(&acc, pz[j] * vf[AT4(p->vs, b, hk, j, d)]);
            oi[d * p->os[3]] = block_value(&acc);
        }
        if (p->lse) p->lse[b * p->ls[0] + h * p->ls[1] + i * p->ls[2]] = lse;
        if (p->stats) {
            p->stats[AT4(p->ss, b, h, i, 0)] = stats[0];
            p->stats[AT4(p->ss, b, h, i, 1)] = stats[1];
        }
        if (p->w)
            for (int64_t j = 0; j < p->Nk; ++j) p->w[AT4(p->ws, b, h, i, j)] = prob[j];
    }
    free(owned);
    return ATTN_OK;
}

/* Floats of one backward task's open blocks: dK and dV of its keys (blocks
 * of query rows), then dQ of the current row (blocks of keys). */
static bool block_floats(const sdpa_problem *p, int threads, int64_t *per_task, size_t *bytes)
{
    int64_t kv, all, total;
    if (!attn_mul_ok(p->Nk, p->D + p->Dv, &kv) || !attn_add_ok(kv, p->D, per_task) ||
        !attn_mul_ok(*per_task, threads, &all) || !attn_mul_ok(all, (int64_t)sizeof(float), &total) ||
        (uint64_t)total > SIZE_MAX)
        return false;
    *bytes = (size_t)total;
    return true;
}

/* total[e·ts] += block[e], block[e] = 0, e < n (a block_sum's flush, for
 * vectors). */
static void flush_block(float *total, int64_t ts, float *block, int64_t n)
{
    for (int64_t e = 0; e < n; ++e) {
        total[e * ts] += block[e];
        block[e] = 0.0f;
    }
}

/* Flushes the open dK and dV blocks of every key of (b, kv head hk). */
static void flush_key_blocks(const sdpa_problem *p, int64_t b, int64_t hk, float *dk_block,
                             float *dv_block)
{
    for (int64_t j = 0; j < p->Nk; ++j) {
        if (p->dk) flush_block(p->dk + AT4(p->dks, b, hk, j, 0), p->dks[3], dk_block + j * p->D, p->D);
        if (p->dv) flush_block(p->dv + AT4(p->dvs, b, hk, j, 0), p->dvs[3], dv_block + j * p->Dv, p->Dv);
    }
}

/*
 * Backward, one (batch, kv head) per task so dK and dV are owned by one
 * thread and summed in a fixed order (query heads of the group, then rows).
 * The softmax comes from the caller's statistics (softmax_stats, or lse with
 * out) when given, else it is recomputed from the inputs.
 */
attn_status sdpa_reference_backward(const sdpa_problem *p, attn_error *err)
{
    const int64_t tasks = p->B * p->Hkv;
    const int threads = p->threads;
    const float *vf = p->v; /* float32: staged (sdpa.c) */
    float *owned, *ws;
    int64_t per_task;
    size_t block_bytes;
    RETURN_IF(!block_floats(p, threads, &per_task, &block_bytes), err, ATTN_ERR_OVERFLOW,
              "workspace: %lld keys overflow the gradient blocks", (long long)p->Nk);
    RETURN_IF_ERROR(row_buffers(p, threads, &owned, &ws, err));
    float *blocks = malloc(block_bytes ? block_bytes : 1);
    if (!blocks) {
        free(owned);
        return attn_fail(err, ATTN_ERR_ALLOC, "backward: cannot allocate %zu bytes of sums", block_bytes);
    }
    /* Per-row sink gradients, summed per head in a fixed order at the end
     * (tasks are (batch, kv head), and a head's sum runs over batches). */
    double *dsink_rows = NULL;
    if (p->dsinks) {
        dsink_rows = calloc((size_t)(p->B * p->Hq * p->Nq) + 1, sizeof *dsink_rows);
        if (!dsink_rows) {
            free(blocks);
            free(owned);
            return attn_fail(err, ATTN_ERR_ALLOC, "grad_sinks: cannot allocate row sums");
        }
    }

#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t t = 0; t < tasks; ++t) {
        float *prob = attn_thread_scratch(ws, (size_t)row_floats(p) * sizeof(float), false);
        float *dprob = prob + row_floats(p) / 2;
        const int64_t b = t / p->Hkv, hk = t % p->Hkv;
        float *dk_block = attn_thread_scratch(blocks, (size_t)per_task * sizeof(float), true);
        float *dv_block = dk_block + p->Nk * p->D, *dq_block = dv_block + p->Nk * p->Dv;
        int64_t rows = 0; /* rows in the open dK/dV blocks */
        for (int64_t j = 0; j < p->Nk; ++j) {
            if (p->dk)
                for (int64_t d = 0; d < p->D; ++d) p->dk[AT4(p->dks, b, hk, j, d)] = 0.0f;
            if (p->dv)
                for (int64_t d = 0; d < p->Dv; ++d) p->dv[AT4(p->dvs, b, hk, j, d)] = 0.0f;
        }
        for (int64_t h = hk * p->group; h < (hk + 1) * p->group; ++h) {
            for (int64_t i = 0; i < p->Nq; ++i) {
                const float *qi = p->q + AT4(p->qs, b, h, i, 0);
                const float *doi = p->dout + AT4(p->dos, b, h, i, 0);
                float *dqi = p->dq ? p->dq + AT4(p->dqs, b, h, i, 0) : NULL;
                float lse, stats[2];
                /* In the forward pass P = softmax(X); recompute it, from the
                 * caller's statistics when given (they may cover more keys
                 * than these: the gradient is then the part of these keys). */
                const bool given = p->stats || (p->lse && p->o);
                const bool any = given ? given_probs(p, b, h, i, prob, &lse)
                                       : row_probs(p, b, h, i, prob, &lse, stats);
                const bool visible = row_has_softmax(p, b, h, i, any);
                if (dqi)
                    for (int64_t d = 0; d < p->D; ++d) dqi[d * p->dqs[3]] = 0.0f;
                if (!visible) continue; /* the row's output was constant 0 */
                mark_hidden(p, b, h, i, true, prob); /* prob[j] = -1: j hidden */
                if (rows > 0 && rows % SUM_BLOCK == 0) flush_key_blocks(p, b, hk, dk_block, dv_block);
                ++rows;
                /* Forward: O_i = Σ_j P_ij z_ij V_j, so dV_j += P_ij z_ij dO_i and
                 * dP_ij = z_ij dO_i · V_j. */
                block_sum di_sum = {0};
                bool dp_nonfinite = false; /* of a key the row sees */
                for (int64_t j = 0; j < p->Nk; ++j) {
                    if (prob[j] < 0.0f) {
                        dprob[j] = 0.0f;
                        continue;
                    }
                    const float z = keep(p, b, h, i, j);
                    float dpj = 0.0f;
                    for (int64_t d = 0; d < p->Dv; ++d) {
                        float dod = doi[d * p->dos[3]];
                        dpj += dod * vf[AT4(p->vs, b, hk, j, d)];
                        dv_block[j * p->Dv + d] += prob[j] * z * dod;
                    }
                    dprob[j] = dpj * z;
                    dp_nonfinite |= !isfinite(dprob[j]);
                    block_add(&di_sum, prob[j] * dprob[j]);
                }
                const float part = block_value(&di_sum);
                float di = part;
                /* D_i = Σ_l P_il dP_il over all keys: over the given keys
                 * alone it is a part; the caller's O gives the whole, dO·O. */
                if (given) {
                    const float *oi = p->o + AT4(p->os, b, h, i, 0);
                    di = 0.0f;
                    for (int64_t d = 0; d < p->Dv; ++d) di += doi[d * p->dos[3]] * oi[d * p->os[3]];
                }
                /* torch's D_i = Σ_l P_il dP_il holds P_il·dP_il of every key
                 * the row sees: a NaN or inf dP (NaN or inf in v_l or dO_i,
                 * or dO_i·v_l overflowing) makes it NaN or ±inf, P_il = 0
                 * included (0·inf), whatever O says; dO·O adds what the
                 * other keys of given statistics bring (its class only). */
                if (dp_nonfinite) di = given && !isfinite(di) ? di + part : part;
                /* Forward: the sink is a logit with no value: its dP is 0, so
                 * d sink += P_sink (0 - D_i). (Heads of one kv group run in one
                 * task, so this sum has a fixed order too.) */
                if (dsink_rows)
                    dsink_rows[(b * p->Hq + h) * p->Nq + i] = -(double)expf(sdpa_sink(p, h) - lse) * di;
                /* Forward: P = softmax(X), so dX_ij = P_ij (dP_ij - Σ_l P_il dP_il).
                 * Forward: X_ij = cap(scale·q_i·k_j) + bias, so dS_ij = f dX_ij
                 * (f = scale, times 1 - tanh² under softcap), dQ_i += dS_ij k_j
                 * and dK_j += dS_ij q_i. */
                for (int64_t j = 0; j < p->Nk; ++j) {
                    if (dqi && j % SUM_BLOCK == 0 && j > 0) flush_block(dqi, p->dqs[3], dq_block, p->D);
                    /* P = 1 (the other keys' P 0): dS = dP - D = 0, exactly
                     * (dP - D would be one sum rounded two ways), unless D is
                     * NaN or inf: then dS = P (dP - D) is too, as in torch */
                    if (prob[j] < 0.0f || (prob[j] == 1.0f && isfinite(di))) continue;
                    float f = p->scale;
                    if (p->softcap > 0.0f) {
                        const float tc = sdpa_softcap_tanh(p, row_dot(p, b, h, i, j));
                        f *= 1.0f - tc * tc;
                    }
                    float ds = f * prob[j] * (dprob[j] - di);
                    /* Forward: X = ... + mask, so d mask_ij = dX_ij (summed
                     * over its broadcast dimensions by bias_grad.c). */
                    if (p->dbias) p->dbias[AT4(p->dbs, b, h, i, j)] = prob[j] * (dprob[j] - di);
                    const float *kj = (const float *)p->k + AT4(p->ks, b, hk, j, 0);
                    for (int64_t d = 0; d < p->D; ++d) {
                        dq_block[d] += ds * kj[d * p->ks[3]];
                        dk_block[j * p->D + d] += ds * qi[d * p->qs[3]];
                    }
                }
                if (dqi) flush_block(dqi, p->dqs[3], dq_block, p->D);
                else
                    for (int64_t d = 0; d < p->D; ++d) dq_block[d] = 0.0f;
            }
        }
        flush_key_blocks(p, b, hk, dk_block, dv_block);
    }
    if (dsink_rows) {
        for (int64_t h = 0; h < p->Hq; ++h) {
            double acc = 0.0; /* a long sum that cancels: kept in double */
            for (int64_t b = 0; b < p->B; ++b)
                for (int64_t i = 0; i < p->Nq; ++i) acc += dsink_rows[(b * p->Hq + h) * p->Nq + i];
            p->dsinks[h * p->dsinks_s] = (float)acc;
        }
        free(dsink_rows);
    }
    free(blocks);
    free(owned);
    return ATTN_OK;
}
