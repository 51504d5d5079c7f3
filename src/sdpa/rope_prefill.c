/*
 * Rotary embeddings as an attn_sdpa option. Key row j sits at position
 * rope_offset + j and query row i at rope_offset + Nk - Nq + i (the
 * alignment of the window and ALiBi). The forward attends the rotated
 * R_q·q and R_k·k; since the paths see only those, the backward runs on
 * them too and returns dL/d(R q), which the chain rule turns into
 * dL/dq = Rᵀ·dL/d(R q) (and the same for k): the rotation by minus the
 * angles. V and dV never rotate.
 *
 * The copies are float32 (16-bit Q and K widened exactly and rotated in
 * float, as a float32 call would), so the paths see float32 Q and K, and
 * one table of cos and sin per call (the positions both Q and K use,
 * max(Nq, Nk) rows) replaces a cos and a sin per element. Both cost
 * O((Hq·Nq + Hkv·Nk)·D) next to the O(Nq·Nk·D) attention.
 */
#include "rope_prefill.h"

#include "../core/half.h"
#include "fused_util.h"
#include "rope.h"

#include <string.h>

/* The number of rotated pairs. */
static int64_t half_of(const attn_rope *rope, int64_t D)
{
    return (rope->rotary_dim ? rope->rotary_dim : D) / 2;
}

attn_status sdpa_rope_check(const sdpa_problem *p, const attn_sdpa_opts *opts, attn_error *err)
{
    return opts->rope ? attn_rope_check_call(opts->rope, p->D, opts->rope_offset, p->Nq, p->Nk, err)
                      : ATTN_OK;
}

/* The copies' and tables' bytes, each rounded up to SDPA_ALIGN. */
static sdpa_size copy_bytes(const sdpa_problem *p, const attn_sdpa_opts *opts)
{
    int64_t qpos, kpos, pos0, npos;
    attn_rope_positions(opts->rope_offset, p->Nq, p->Nk, &qpos, &kpos, &pos0, &npos);
    const int64_t half = half_of(opts->rope, p->D);
    int64_t qrows = 0, krows = 0;
    sdpa_size s = {0, attn_mul_ok(p->B * p->Hq, p->Nq, &qrows) &&
                          attn_mul_ok(p->B * p->Hkv, p->Nk, &krows)};
    sdpa_size_add(&s, qrows, p->D, sizeof(float));
    sdpa_size_add(&s, krows, p->D, sizeof(float));
    sdpa_size_add(&s, npos, half, sizeof(float));
    sdpa_size_add(&s, npos, half, sizeof(float));
    sdpa_size_add(&s, half, 1, sizeof(double));
    return s;
}

bool sdpa_rope_workspace(const sdpa_problem *p, const attn_sdpa_opts *opts, size_t *bytes)
{
    *bytes = 0;
    if (!opts || !opts->rope) return true;
    const sdpa_size s = copy_bytes(p, opts);
    if (!s.ok || s.bytes > SIZE_MAX - SDPA_WORKSPACE_SLACK) return false;
    *bytes = s.bytes + SDPA_WORKSPACE_SLACK;
    return true;
}

/* Rows [n0, n1) of every (b, h) of x (B,H,N,D; any float dtype and
 * strides) into the contiguous float32 dst, row n rotated by table row
 * n + shift: a stream through each head's rows. */
static void rotate_rows_into(const sdpa_rope *r, const attn_tensor *x, int64_t n0, int64_t n1,
                             int64_t shift, float *dst)
{
    const int64_t H = x->shape[1], N = x->shape[2], D = x->shape[3];
    const int64_t *st = x->stride;
    for (int64_t bh = 0; bh < x->shape[0] * H; ++bh)
        for (int64_t n = n0; n < n1; ++n) {
            const int64_t at = bh / H * st[0] + bh % H * st[1] + n * st[2];
            float *d = dst + (bh * N + n) * D;
            if (x->dtype == ATTN_F32 && st[3] == 1)
                memcpy(d, (const float *)x->data + at, (size_t)D * sizeof *d);
            else
                for (int64_t e = 0; e < D; ++e) d[e] = attn_load_float(x->data, x->dtype, at + e * st[3]);
            const int64_t t = (n + shift) * r->half;
            attn_rope_turn(r->rope->style, r->half, r->cos + t, r->sin + t, false, d, 1);
        }
}

/* One parallel region without a barrier: each thread takes a block of
 * positions, fills their rows of the table (kept for the backward), then
 * rotates the rows of Q and K at those positions. */
static void rotate_inputs(const sdpa_rope *r, const attn_tensor *q, const attn_tensor *k,
                          const double *freq, float *qr, float *kr, int threads)
{
    const int64_t D = q->shape[3], Nq = q->shape[2], Nk = k->shape[2];
#pragma omp parallel num_threads(threads)
    {
        int me, team;
        sdpa_team(&me, &team);
        const int64_t t0 = r->npos * me / team, t1 = r->npos * (me + 1) / team;
        for (int64_t t = t0; t < t1; ++t)
            attn_rope_angles(r->rope, D, freq, r->pos0 + t, r->cos + t * r->half,
                             r->sin + t * r->half);
        /* table row t is position pos0 + t: query row pos0 + t - qpos */
        const int64_t qs = r->pos0 - r->qpos, ks = r->pos0 - r->kpos;
        const int64_t q0 = t0 + qs > 0 ? t0 + qs : 0, q1 = t1 + qs < Nq ? t1 + qs : Nq;
        const int64_t k0 = t0 + ks > 0 ? t0 + ks : 0, k1 = t1 + ks < Nk ? t1 + ks : Nk;
        if (q1 > q0) rotate_rows_into(r, q, q0, q1, -qs, qr);
        if (k1 > k0) rotate_rows_into(r, k, k0, k1, -ks, kr);
    }
}

attn_status sdpa_rope_begin(sdpa_rope *r, sdpa_problem *p, const attn_sdpa_opts *opts,
                            const attn_tensor **q, const attn_tensor **k, attn_error *err)
{
    memset(r, 0, sizeof *r);
    r->rope = opts->rope;
    r->half = half_of(opts->rope, p->D);
    attn_rope_positions(opts->rope_offset, p->Nq, p->Nk, &r->qpos, &r->kpos, &r->pos0, &r->npos);
    const sdpa_size need = copy_bytes(p, opts);
    RETURN_IF(!need.ok, err, ATTN_ERR_OVERFLOW, "workspace size overflows");
    char *ws;
    if (p->workspace) { /* the front of the caller's; the paths get the rest */
        const size_t skew = (SDPA_ALIGN - (uintptr_t)p->workspace % SDPA_ALIGN) % SDPA_ALIGN;
        RETURN_IF(p->workspace_size < skew || p->workspace_size - skew < need.bytes, err,
                  ATTN_ERR_WORKSPACE, "workspace: %zu bytes given, the rotated query and key "
                  "alone need %zu", p->workspace_size, need.bytes + skew);
        ws = (char *)p->workspace + skew;
        p->workspace = ws + need.bytes;
        p->workspace_size -= skew + need.bytes;
    } else {
        void *mem = NULL;
        RETURN_IF(posix_memalign(&mem, SDPA_ALIGN, need.bytes ? need.bytes : SDPA_ALIGN) != 0,
                  err, ATTN_ERR_ALLOC, "rope: cannot allocate %zu bytes for the rotated query "
                  "and key", need.bytes);
        r->owned = mem;
        ws = mem;
    }
    const int64_t qshape[4] = {p->B, p->Hq, p->Nq, p->D}, kshape[4] = {p->B, p->Hkv, p->Nk, p->D};
    float *qr = sdpa_take(&ws, p->B * p->Hq * p->Nq, (size_t)p->D * sizeof(float));
    float *kr = sdpa_take(&ws, p->B * p->Hkv * p->Nk, (size_t)p->D * sizeof(float));
    r->cos = sdpa_take(&ws, r->npos, (size_t)r->half * sizeof(float));
    r->sin = sdpa_take(&ws, r->npos, (size_t)r->half * sizeof(float));
    double *freq = sdpa_take(&ws, r->half, sizeof(double));
    attn_rope_frequencies(r->rope, p->D, freq);
    rotate_inputs(r, *q, *k, freq, qr, kr, p->threads);
    r->q = attn_tensor_make(qr, ATTN_F32, 4, qshape);
    r->k = attn_tensor_make(kr, ATTN_F32, 4, kshape);
    *q = &r->q;
    *k = &r->k;
    p->q = qr;
    p->q16 = NULL;
    p->k = kr;
    p->qt = p->kt = ATTN_F32;
    memcpy(p->qs, r->q.stride, sizeof p->qs);
    memcpy(p->ks, r->k.stride, sizeof p->ks);
    return ATTN_OK;
}

/* The (B,H,N,D) float32 view g (strides gs) rotated back in place. */
static void rotate_back(const sdpa_rope *r, float *g, const int64_t *gs, int64_t H, int64_t N,
                        int64_t first, int threads)
{
    const int64_t rows = r->q.shape[0] * H * N;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t row = 0; row < rows; ++row) {
        const int64_t b = row / (H * N), h = row / N % H, n = row % N;
        const int64_t t = (first + n - r->pos0) * r->half;
        attn_rope_turn(r->rope->style, r->half, r->cos + t, r->sin + t, true,
                       g + b * gs[0] + h * gs[1] + n * gs[2], gs[3]);
    }
}

void sdpa_rope_grads(const sdpa_rope *r, const sdpa_problem *p)
{
    if (p->dq) rotate_back(r, p->dq, p->dqs, p->Hq, p->Nq, r->qpos, p->threads);
    if (p->dk) rotate_back(r, p->dk, p->dks, p->Hkv, p->Nk, r->kpos, p->threads);
}

void sdpa_rope_end(sdpa_rope *r)
{
    free(r->owned);
    r->owned = NULL;
}
