/* The plain SDPA path: one query row at a time, scores for the whole row in
 * a buffer, a textbook softmax. Obviously correct and always compiled: every
 * other path is tested against it. */
#include "problem.h"

#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define AT4(s, a, b, c, d) ((a) * (s)[0] + (b) * (s)[1] + (c) * (s)[2] + (d) * (s)[3])

/* Floats of row buffer per thread: a score row and a gradient row. */
static int64_t row_floats(const sdpa_problem *p)
{
    return 2 * (p->Nk > 0 ? p->Nk : 1);
}

/* Row workspace: row_floats per thread, the caller's or allocated. */
static float *row_buffers(const sdpa_problem *p, int threads, float **owned, attn_error *err)
{
    int64_t bytes;
    *owned = NULL;
    if (!attn_mul_ok(row_floats(p), (int64_t)sizeof(float) * threads, &bytes) ||
        (uint64_t)bytes > SIZE_MAX) {
        attn_fail(err, ATTN_ERR_OVERFLOW, "workspace: %lld keys per row overflow the row buffers",
                  (long long)p->Nk);
        return NULL;
    }
    const size_t need = (size_t)bytes;
    if (p->workspace) {
        if (p->workspace_size < need) {
            attn_fail(err, ATTN_ERR_WORKSPACE, "workspace: %zu bytes given, %zu needed",
                      p->workspace_size, need);
            return NULL;
        }
        return p->workspace;
    }
    *owned = malloc(need);
    if (!*owned) attn_fail(err, ATTN_ERR_ALLOC, "workspace: cannot allocate %zu bytes", need);
    return *owned;
}

/* Score of query row (b,h,i) against key j before masking: scale·q·k. */
static float row_score(const sdpa_problem *p, int64_t b, int64_t h, int64_t i, int64_t j)
{
    const float *qi = p->q + AT4(p->qs, b, h, i, 0);
    const float *kj = p->k + AT4(p->ks, b, h / p->group, j, 0);
    float dot = 0.0f;
    for (int64_t d = 0; d < p->D; ++d) dot += qi[d * p->qs[3]] * kj[d * p->ks[3]];
    return p->scale * dot;
}

bool sdpa_row_sees_nan(const sdpa_problem *p, int64_t b, int64_t h, int64_t i)
{
    const int64_t end = sdpa_causal_end(p, i);
    for (int64_t j = 0; j < end; ++j) {
        float bias = sdpa_mask_bias(p, b, h, i, j);
        if (bias != -INFINITY && isnan(row_score(p, b, h, i, j) + bias)) return true;
    }
    return false;
}

/* Softmax probabilities of row (b,h,i) into prob[0..Nk). Returns false when
 * no key is visible (prob all 0). *lse receives log Σ exp(score). */
static bool row_probs(const sdpa_problem *p, int64_t b, int64_t h, int64_t i, float *prob,
                      float *lse)
{
    const int64_t end = sdpa_causal_end(p, i);
    float m = -INFINITY;
    for (int64_t j = 0; j < p->Nk; ++j) {
        float s = -INFINITY;
        if (j < end) {
            float bias = sdpa_mask_bias(p, b, h, i, j);
            if (bias != -INFINITY) s = row_score(p, b, h, i, j) + bias;
        }
        prob[j] = s;
        if (s > m || isnan(s)) m = isnan(m) ? m : s; /* a NaN score poisons the row, as in torch */
    }
    if (m == -INFINITY) {
        for (int64_t j = 0; j < p->Nk; ++j) prob[j] = 0.0f;
        *lse = -INFINITY;
        return false;
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < p->Nk; ++j) {
        prob[j] = expf(prob[j] - m);
        sum += prob[j];
    }
    for (int64_t j = 0; j < p->Nk; ++j) prob[j] /= sum;
    *lse = m + logf(sum);
    return true;
}

attn_status sdpa_reference_forward(const sdpa_problem *p, attn_error *err)
{
    const int64_t rows = p->B * p->Hq * p->Nq;
    const int threads = p->threads;
    float *owned, *ws = row_buffers(p, threads, &owned, err);
    if (!ws) return err ? err->status : ATTN_ERR_ALLOC;

#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        float *prob = ws + (size_t)tid * (size_t)row_floats(p);
        const int64_t i = r % p->Nq, h = (r / p->Nq) % p->Hq, b = r / (p->Nq * p->Hq);
        const int64_t hk = h / p->group;
        float lse;
        row_probs(p, b, h, i, prob, &lse);
        /* out_i = Σ_j P_ij v_j (all zero for a row that sees nothing) */
        float *oi = p->o + AT4(p->os, b, h, i, 0);
        for (int64_t d = 0; d < p->Dv; ++d) {
            float acc = 0.0f;
            for (int64_t j = 0; j < p->Nk; ++j)
                if (prob[j] != 0.0f) acc += prob[j] * p->v[AT4(p->vs, b, hk, j, d)];
            oi[d * p->os[3]] = acc;
        }
        if (p->lse) p->lse[b * p->ls[0] + h * p->ls[1] + i * p->ls[2]] = lse;
        if (p->w)
            for (int64_t j = 0; j < p->Nk; ++j) p->w[AT4(p->ws, b, h, i, j)] = prob[j];
    }
    free(owned);
    return ATTN_OK;
}

/*
 * Backward, one (batch, kv head) per task so dK and dV are owned by one
 * thread and summed in a fixed order (query heads of the group, then rows).
 */
attn_status sdpa_reference_backward(const sdpa_problem *p, attn_error *err)
{
    const int64_t tasks = p->B * p->Hkv;
    const int threads = p->threads;
    float *owned, *ws = row_buffers(p, threads, &owned, err);
    if (!ws) return err ? err->status : ATTN_ERR_ALLOC;

#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t t = 0; t < tasks; ++t) {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        float *prob = ws + (size_t)tid * (size_t)row_floats(p);
        float *dprob = prob + row_floats(p) / 2;
        const int64_t b = t / p->Hkv, hk = t % p->Hkv;
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
                float lse;
                /* In the forward pass P = softmax(S); recompute it. */
                bool visible = row_probs(p, b, h, i, prob, &lse);
                if (dqi)
                    for (int64_t d = 0; d < p->D; ++d) dqi[d * p->dqs[3]] = 0.0f;
                if (!visible) continue; /* the row's output was constant 0 */
                /* Forward: O_i = Σ_j P_ij V_j, so dV_j += P_ij dO_i and
                 * dP_ij = dO_i · V_j. */
                float di = 0.0f;
                for (int64_t j = 0; j < p->Nk; ++j) {
                    if (prob[j] == 0.0f) {
                        dprob[j] = 0.0f;
                        continue;
                    }
                    float dpj = 0.0f;
                    for (int64_t d = 0; d < p->Dv; ++d) {
                        float dod = doi[d * p->dos[3]];
                        dpj += dod * p->v[AT4(p->vs, b, hk, j, d)];
                        if (p->dv) p->dv[AT4(p->dvs, b, hk, j, d)] += prob[j] * dod;
                    }
                    dprob[j] = dpj;
                    di += prob[j] * dpj;
                }
                /* Forward: P = softmax(S), so dS_ij = P_ij (dP_ij - Σ_l P_il dP_il).
                 * Forward: S_ij = scale·q_i·k_j + mask, so dQ_i += scale dS_ij k_j
                 * and dK_j += scale dS_ij q_i. */
                for (int64_t j = 0; j < p->Nk; ++j) {
                    if (prob[j] == 0.0f) continue;
                    float ds = p->scale * prob[j] * (dprob[j] - di);
                    const float *kj = p->k + AT4(p->ks, b, hk, j, 0);
                    if (dqi)
                        for (int64_t d = 0; d < p->D; ++d) dqi[d * p->dqs[3]] += ds * kj[d * p->ks[3]];
                    if (p->dk)
                        for (int64_t d = 0; d < p->D; ++d)
                            p->dk[AT4(p->dks, b, hk, j, d)] += ds * qi[d * p->qs[3]];
                }
            }
        }
    }
    free(owned);
    return ATTN_OK;
}
