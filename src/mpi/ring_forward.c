/* attn_ring_sdpa: the ring forward. Each tick computes attn_sdpa of the
 * local queries with the key/value piece in hand (the products ring_calls
 * names, in row chunks) and merges each partial (out, lse) into the running
 * result with attn_lse_merge, while the piece travels on to the next rank
 * and the next one arrives. */
#include "ring.h"

#include <math.h>
#include <stdlib.h>

/* Whether the ring merges exact softmax stats (attn_sdpa_opts.softmax_stats)
 * instead of rounded LSEs: needs a libattn whose forward writes them. */
#ifndef ATTN_RING_STATS
#define ATTN_RING_STATS 1
#endif

/* Local checks of the forward's outputs (the inputs are ring_begin's). */
static attn_status check_forward(const attn_tensor *q, const attn_tensor *v, attn_tensor *out,
                                 attn_tensor *lse, const attn_ring_opts *o, attn_error *err)
{
    if (!q || !v || q->ndim != 4 || v->ndim != 4) return ATTN_OK; /* ring_begin reports it */
    const int64_t ow[4] = {q->shape[0], q->shape[1], q->shape[2], v->shape[3]},
                  sw[4] = {q->shape[0], q->shape[1], q->shape[2], 2};
    attn_status s = ring_check_view(out, "out", 4, ow, true, err);
    if (s == ATTN_OK && lse) s = ring_check_view(lse, "lse", 3, ow, true, err);
    if (s == ATTN_OK && o && o->softmax_stats) {
        if (!ATTN_RING_STATS)
            return ring_fail(err, ATTN_ERR_UNSUPPORTED,
                             "softmax_stats: this libattn's attn_sdpa does not produce them yet");
        s = ring_check_view(o->softmax_stats, "softmax_stats", 4, sw, true, err);
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
    const int64_t R = ring_chunk_rows(&c);
    ring_kv_stream st;
    size_t bytes = 0;
    bool ok = ring_kv_stream_alloc(&c, &st, &bytes);
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
    s = ring_buffers_ready(&c, q, &st, false, ok, bytes, &so, &le);

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
                    if (!ring_chunk_done(&c, &sc, t0, t1, cs, &ce)) break;
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
        s = ring_loop_agree(&c, &le);
    }
    ring_kv_stream_free(&st);
    free(otmp);
    free(ltmp);
    free(lacc_owned);
    free(so.workspace);
    return ring_finish(&c, opts, t_start, s, &le, err);
}
