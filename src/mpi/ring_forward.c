/* attn_ring_sdpa: the ring forward. Each tick computes attn_sdpa of the
 * local queries with the key/value piece in hand (the products ring_calls
 * names, in row chunks) and merges each partial (out, lse) into the running
 * result with attn_lse_merge, while the piece travels on to the next rank
 * and the next one arrives. */
#include "ring.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Whether the ring merges exact softmax stats (attn_sdpa_opts.softmax_stats)
 * instead of rounded LSEs: needs a libattn whose forward writes them. */
#ifndef ATTN_RING_STATS
#define ATTN_RING_STATS 1
#endif

static attn_status check_out(const attn_tensor *t, const char *name, int ndim, const int64_t *want,
                             attn_error *err)
{
    if (!t) return ring_fail(err, ATTN_ERR_NULL, "%s: tensor is NULL", name);
    if (t->ndim != ndim || t->dtype != ATTN_F32)
        return ring_fail(err, ATTN_ERR_SHAPE, "%s: expected a %d-D float32 tensor", name, ndim);
    for (int d = 0; d < ndim; ++d)
        if (t->shape[d] != want[d])
            return ring_fail(err, ATTN_ERR_SHAPE, "%s: size %lld in dimension %d, expected %lld",
                             name, (long long)t->shape[d], d, (long long)want[d]);
    for (int d = 0; d < ndim; ++d)
        if (t->shape[d] > 1 && t->stride[d] == 0)
            return ring_fail(err, ATTN_ERR_STRIDE, "%s: zero stride in dimension %d of an output",
                             name, d);
    if (attn_tensor_numel(t) > 0 && !t->data)
        return ring_fail(err, ATTN_ERR_NULL, "%s: data is NULL", name);
    return ATTN_OK;
}

/* Local checks of the forward's outputs (the inputs are ring_begin's). */
static attn_status check_forward(const attn_tensor *q, const attn_tensor *v, attn_tensor *out,
                                 attn_tensor *lse, const attn_ring_opts *o, attn_error *err)
{
    if (!q || !v || q->ndim != 4 || v->ndim != 4) return ATTN_OK; /* ring_begin reports it */
    const int64_t ow[4] = {q->shape[0], q->shape[1], q->shape[2], v->shape[3]},
                  sw[4] = {q->shape[0], q->shape[1], q->shape[2], 2};
    attn_status s = check_out(out, "out", 4, ow, err);
    if (s == ATTN_OK && lse) s = check_out(lse, "lse", 3, ow, err);
    if (s == ATTN_OK && o && o->softmax_stats) {
        if (!ATTN_RING_STATS)
            return ring_fail(err, ATTN_ERR_UNSUPPORTED,
                             "softmax_stats: this libattn's attn_sdpa does not produce them yet");
        s = check_out(o->softmax_stats, "softmax_stats", 4, sw, err);
    }
    return s;
}

attn_status attn_ring_sdpa(MPI_Comm comm, const attn_tensor *q, const attn_tensor *k,
                           const attn_tensor *v, attn_tensor *out, attn_tensor *lse,
                           const attn_ring_opts *opts, attn_error *err)
{
    const double t_start = ring_now();
    attn_error le = {0};
    attn_status s = check_forward(q, v, out, lse, opts, &le);
    if (err) *err = le;
    ring_ctx c;
    if ((s = ring_begin(&c, comm, q, k, v, opts, s, err)) != ATTN_OK) return s;

    const bool stats = ATTN_RING_STATS;
    const int W = stats ? 2 : 1; /* floats of row statistics */
    const int64_t R = c.rows < c.nq ? c.rows : (c.nq > 0 ? c.nq : 1);
    const int64_t slot_floats = ring_kv_floats(&c, c.max_piece);
    ring_kv_stream st;
    memset(&st, 0, sizeof st);
    for (int i = 0; i < RING_SLOTS; ++i) st.send[i] = MPI_REQUEST_NULL;
    st.recv = MPI_REQUEST_NULL;
    size_t bytes = 0;
    bool ok = true;
    for (int i = 0; i < RING_SLOTS; ++i) {
        st.slot[i] = calloc((size_t)(slot_floats > 0 ? slot_floats : 1), sizeof(float));
        ok = ok && st.slot[i];
        bytes += sizeof(float) * (size_t)slot_floats;
    }
    float *otmp = malloc(sizeof(float) * (size_t)(c.B * c.Hq * R * c.Dv + 1));
    float *ltmp = malloc(sizeof(float) * (size_t)(c.B * c.Hq * R * W + 1));
    bytes += sizeof(float) * (size_t)(c.B * c.Hq * R * (c.Dv + W));
    /* The running statistics: the caller's tensor when it has the right form. */
    attn_tensor *user_stats = stats ? (opts ? opts->softmax_stats : NULL) : lse;
    float *lacc_owned = NULL;
    attn_tensor lacc;
    if (user_stats) {
        lacc = *user_stats;
    } else {
        lacc_owned = malloc(sizeof(float) * (size_t)(c.B * c.Hq * c.nq * W + 1));
        bytes += sizeof(float) * (size_t)(c.B * c.Hq * c.nq * W);
        lacc = stats ? attn_tensor_4d(lacc_owned, c.B, c.Hq, c.nq, 2)
                     : attn_tensor_3d(lacc_owned, c.B, c.Hq, c.nq);
        ok = ok && lacc_owned;
    }
    ok = ok && otmp && ltmp;

    /* One workspace, sized for the largest call, so no call allocates. */
    attn_sdpa_opts so = attn_sdpa_opts_default();
    so.scale = c.scale;
    so.num_threads = c.threads;
    size_t ws_bytes = 0;
    void *ws = NULL;
    if (ok) {
        attn_tensor Qv = ring_slice(*q, 2, 0, R < c.nq ? R : c.nq), K, V;
        float *mp;
        ring_kv_views(&c, st.slot[0], c.max_piece, &K, &V, &mp);
        attn_tensor M = c.mask ? ring_mask_view(&c, mp, c.max_piece, 0, c.max_piece) : K;
        so.mask[0] = c.mask ? &M : NULL;
        for (int z = 0; z < 2 && s == ATTN_OK; ++z) {
            size_t b = 0;
            so.causal = z ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
            s = attn_sdpa_workspace_size(&Qv, &K, &V, false, &so, &b, &le);
            if (b > ws_bytes) ws_bytes = b;
        }
        so.mask[0] = NULL;
        if (s == ATTN_OK && ws_bytes && !(ws = malloc(ws_bytes))) ok = false;
        bytes += ws_bytes;
    }
    if (s == ATTN_OK && !ok) s = ring_fail(&le, ATTN_ERR_ALLOC, "out of memory for ring buffers");
    s = ring_agree(c.comm, s, &le);
    c.tm.buffer_bytes += bytes;
    so.workspace = ws;
    so.workspace_size = ws_bytes;

    if (s == ATTN_OK) {
        /* Every row starts empty (out 0, lse -inf); each partial merges in. */
        ring_fill(out, 0.0f);
        if (stats) {
            attn_tensor m = ring_slice(lacc, 3, 0, 1), l = ring_slice(lacc, 3, 1, 1);
            ring_fill(&m, -INFINITY);
            ring_fill(&l, 0.0f);
        } else {
            attn_tensor l4 = lacc;
            l4.ndim = 4, l4.shape[3] = 1, l4.stride[3] = 1;
            ring_fill(&l4, -INFINITY);
        }
        const int64_t ticks = (int64_t)c.P * c.pieces;
        for (int64_t t = 0; t < ticks; ++t) {
            ring_piece pc;
            int src;
            float *buf = ring_kv_tick(&c, &st, k, v, t, &pc, &src);
            if (c.failed != ATTN_OK) continue; /* keep the ring moving; report at the end */
            const int64_t len = pc.alen + pc.blen;
            attn_tensor K, V;
            float *mp;
            ring_kv_views(&c, buf, len, &K, &V, &mp);
            ring_call calls[4];
            const int n = ring_calls(&c, src, pc, calls);
            for (int ci = 0; ci < n && c.failed == ATTN_OK; ++ci) {
                ring_subcall sc;
                for (int64_t i = 0; ring_subcall_at(&c, &calls[ci], i, &sc); ++i) {
                    MPI_Request *const open[RING_SLOTS + 1] = {&st.send[0], &st.send[1], &st.send[2], &st.recv};
                    ring_progress(&c, open, RING_SLOTS + 1);
                    const double t0 = ring_now();
                    const int64_t m = sc.r1 - sc.r0, nk = sc.k1 - sc.k0;
                    attn_tensor Qs = ring_slice(*q, 2, sc.r0, m), Ks = ring_slice(K, 2, sc.k0, nk),
                                Vs = ring_slice(V, 2, sc.k0, nk);
                    attn_tensor M = c.mask ? ring_mask_view(&c, mp, len, sc.k0, sc.k1) : Ks;
                    attn_tensor Ot = attn_tensor_4d(otmp, c.B, c.Hq, m, c.Dv);
                    attn_tensor Lt = stats ? attn_tensor_4d(ltmp, c.B, c.Hq, m, 2)
                                           : attn_tensor_3d(ltmp, c.B, c.Hq, m);
                    attn_sdpa_opts o = so;
                    o.causal = sc.causal;
                    o.mask[0] = c.mask ? &M : NULL;
                    if (stats) o.softmax_stats = &Lt;
                    attn_error ce = {0};
                    attn_status cs = attn_sdpa(&Qs, &Ks, &Vs, &Ot, stats ? NULL : &Lt, NULL, &o, &ce);
                    const double t1 = ring_now();
                    attn_tensor Oa = ring_slice(*out, 2, sc.r0, m), La = ring_slice(lacc, 2, sc.r0, m);
                    if (cs == ATTN_OK) cs = attn_lse_merge(&Oa, &La, &Ot, &Lt, &Oa, &La, &ce);
                    const double t2 = ring_now();
                    c.tm.compute_s += t2 - t0;
                    c.tm.merge_s += t2 - t1;
                    c.tm.pairs += ring_subcall_pairs(&c, &sc);
                    if (cs != ATTN_OK) {
                        c.failed = cs;
                        c.fail_err = ce;
                        break;
                    }
                }
            }
            c.tm.blocks++;
        }
        ring_kv_drain(&c, &st);
        if (c.failed == ATTN_OK && stats && lse) {
            /* lse = m + ll, rounded once, for callers that want the LSE. */
            for (int64_t b = 0; b < c.B; ++b)
                for (int64_t h = 0; h < c.Hq; ++h)
                    for (int64_t i = 0; i < c.nq; ++i) {
                        const float *p = (const float *)lacc.data + b * lacc.stride[0] +
                                         h * lacc.stride[1] + i * lacc.stride[2];
                        ((float *)lse->data)[b * lse->stride[0] + h * lse->stride[1] +
                                             i * lse->stride[2]] =
                            (float)((double)p[0] + (double)p[lacc.stride[3]]);
                    }
        }
        s = ring_agree(c.comm, c.failed, &c.fail_err);
        if (s != ATTN_OK) le = c.fail_err;
    }
    for (int i = 0; i < RING_SLOTS; ++i) free(st.slot[i]);
    free(otmp);
    free(ltmp);
    free(lacc_owned);
    free(ws);
    c.tm.total_s = ring_now() - t_start;
    if (opts && opts->timing) *opts->timing = c.tm;
    ring_end(&c);
    if (err) {
        *err = le;
        if (s == ATTN_OK) err->status = ATTN_OK, err->message[0] = '\0';
    }
    return s;
}
