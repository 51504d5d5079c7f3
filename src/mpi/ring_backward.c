/* attn_ring_sdpa_backward: the ring backward (as ring-flash-attention).
 * Queries, out, lse and dout stay home; key/value pieces travel as in the
 * forward, each followed by its dK/dV accumulator. At every tick a rank
 * adds its share of the piece's gradients (attn_sdpa_backward with the
 * GLOBAL out and lse over the piece's keys: exactly that piece's part of
 * the gradient) to the accumulator and passes it on; after P ticks it
 * returns to the piece's owner. dQ sums at home. */
#include "ring.h"

#include <stdlib.h>
#include <string.h>

static attn_status check_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                  const attn_tensor *out, const attn_tensor *lse,
                                  const attn_tensor *dout, const attn_tensor *dq,
                                  const attn_tensor *dk, const attn_tensor *dv,
                                  const attn_ring_opts *o, attn_error *err)
{
    if (!q || !k || !v || q->ndim != 4 || k->ndim != 4 || v->ndim != 4) return ATTN_OK;
    const int64_t B = q->shape[0], Hq = q->shape[1], Nq = q->shape[2], D = q->shape[3],
                  Hkv = k->shape[1], Nk = k->shape[2], Dv = v->shape[3];
    const int64_t ow[4] = {B, Hq, Nq, Dv}, sw[4] = {B, Hq, Nq, 2}, qw[4] = {B, Hq, Nq, D},
                  kw[4] = {B, Hkv, Nk, D}, vw[4] = {B, Hkv, Nk, Dv};
    const attn_tensor *stats = o ? o->softmax_stats : NULL;
    attn_status s;
    if ((s = ring_check_view(out, "out", 4, ow, false, err))) return s;
    if (!lse && !stats)
        return ring_fail(err, ATTN_ERR_NULL,
                         "lse: needed (or softmax_stats): each block's backward uses the global softmax");
    if (lse && (s = ring_check_view(lse, "lse", 3, ow, false, err))) return s;
    if (stats && (s = ring_check_view(stats, "softmax_stats", 4, sw, false, err))) return s;
    if ((s = ring_check_view(dout, "grad_out", 4, ow, false, err))) return s;
    if (dq && (s = ring_check_view(dq, "grad_query", 4, qw, true, err))) return s;
    if (dk && (s = ring_check_view(dk, "grad_key", 4, kw, true, err))) return s;
    if (dv && (s = ring_check_view(dv, "grad_value", 4, vw, true, err))) return s;
    return ATTN_OK;
}

attn_status attn_ring_sdpa_backward(MPI_Comm comm, const attn_tensor *q, const attn_tensor *k,
                                    const attn_tensor *v, const attn_tensor *out,
                                    const attn_tensor *lse, const attn_tensor *dout,
                                    attn_tensor *dq, attn_tensor *dk, attn_tensor *dv,
                                    const attn_ring_opts *opts, attn_error *err)
{
    const double t_start = ring_now();
    attn_error le = {0};
    attn_status s = check_backward(q, k, v, out, lse, dout, dq, dk, dv, opts, &le);
    if (err) *err = le;
    ring_ctx c;
    if ((s = ring_begin(&c, comm, q, k, v, opts, s, err)) != ATTN_OK) return s;

    const bool want_kv = dk || dv;
    attn_tensor *stats = opts ? opts->softmax_stats : NULL;
    const int64_t R = ring_chunk_rows(&c);
    const int64_t g_floats = ring_grad_floats(&c, c.max_piece);
    ring_kv_stream st;
    size_t bytes = 0;
    bool ok = ring_kv_stream_alloc(&c, &st, &bytes);
    float *acc[RING_SLOTS] = {0}, *fin[2] = {0};
    MPI_Request acc_send[RING_SLOTS], acc_recv = MPI_REQUEST_NULL, fin_req[2];
    int64_t fin_piece[2] = {-1, -1};
    for (int i = 0; i < RING_SLOTS; ++i) acc_send[i] = MPI_REQUEST_NULL;
    fin_req[0] = fin_req[1] = MPI_REQUEST_NULL;
    for (int i = 0; want_kv && i < RING_SLOTS; ++i) {
        acc[i] = calloc((size_t)(g_floats > 0 ? g_floats : 1), sizeof(float));
        ok = ok && acc[i];
        bytes += sizeof(float) * (size_t)g_floats;
    }
    for (int i = 0; want_kv && c.P > 1 && i < 2; ++i) {
        fin[i] = malloc(sizeof(float) * (size_t)(g_floats > 0 ? g_floats : 1));
        ok = ok && fin[i];
        bytes += sizeof(float) * (size_t)g_floats;
    }
    float *dqt = dq ? malloc(sizeof(float) * (size_t)(c.B * c.Hq * R * c.D + 1)) : NULL;
    float *gkt = malloc(sizeof(float) * (size_t)(g_floats > 0 ? g_floats : 1));
    bytes += sizeof(float) * (size_t)((dq ? c.B * c.Hq * R * c.D : 0) + g_floats);
    ok = ok && (!dq || dqt) && gkt;

    /* The fused path honours the given out and lse (P = exp(s - lse) over
     * these keys only); the reference path recomputes the softmax over the
     * given keys, which is not this block's share. */
    attn_sdpa_opts so = attn_sdpa_opts_default();
    so.scale = c.scale;
    so.num_threads = c.threads;
    so.path = ATTN_PATH_FUSED;
    s = ring_buffers_ready(&c, q, &st, true, ok, bytes, &so, &le);

    if (s == ATTN_OK) {
        if (dq) ring_fill(dq, 0.0f);
        const int P = c.P;
        const int64_t ticks = (int64_t)P * c.pieces;
        for (int64_t t = 0; t < ticks; ++t) {
            ring_piece pc;
            int src;
            const int ts = (int)(t % P);
            const int64_t j = t / P;
            float *buf = ring_kv_tick(&c, &st, k, v, t, &pc, &src);
            const int64_t len = pc.alen + pc.blen;
            const int a = (int)(t % RING_SLOTS);
            bool acc_ready = !want_kv;
            if (want_kv && ts == 0) {
                /* A piece starts its trip here with a zero accumulator. */
                ring_wait(&c, &acc_send[a]);
                memset(acc[a], 0, sizeof(float) * (size_t)ring_grad_floats(&c, len));
                acc_ready = true;
            }
            attn_tensor K, V, dKa, dVa;
            float *mp;
            ring_kv_views(&c, buf, len, &K, &V, &mp);
            if (want_kv) ring_grad_views(&c, acc[a], len, &dKa, &dVa);
            ring_call calls[4];
            const int n = c.failed == ATTN_OK ? ring_calls(&c, src, pc, calls) : 0;
            for (int ci = 0; ci < n && c.failed == ATTN_OK; ++ci) {
                ring_subcall sc;
                for (int64_t i = 0; ring_subcall_at(&c, &calls[ci], i, &sc); ++i) {
                    MPI_Request *const open[2 * RING_SLOTS + 4] = {
                        &st.send[0],  &st.send[1],  &st.send[2], &st.recv,    &acc_send[0],
                        &acc_send[1], &acc_send[2], &acc_recv,   &fin_req[0], &fin_req[1]};
                    ring_progress(&c, open, 2 * RING_SLOTS + 4);
                    const double t0 = ring_now();
                    const int64_t m = sc.r1 - sc.r0, nk = sc.k1 - sc.k0;
                    attn_tensor Qs = ring_slice(*q, 2, sc.r0, m), Ks = ring_slice(K, 2, sc.k0, nk),
                                Vs = ring_slice(V, 2, sc.k0, nk),
                                Os = ring_slice(*out, 2, sc.r0, m),
                                dOs = ring_slice(*dout, 2, sc.r0, m), Ls, Ss;
                    if (lse) Ls = ring_slice(*lse, 2, sc.r0, m);
                    if (stats) Ss = ring_slice(*stats, 2, sc.r0, m);
                    attn_tensor M = c.mask ? ring_mask_view(&c, mp, len, sc.k0, sc.k1) : Ks;
                    attn_tensor dQt = attn_tensor_4d(dqt, c.B, c.Hq, m, c.D);
                    attn_tensor dKt, dVt;
                    ring_grad_views(&c, gkt, nk, &dKt, &dVt);
                    attn_sdpa_opts o = so;
                    o.causal = sc.causal;
                    o.mask[0] = c.mask ? &M : NULL;
                    if (stats) o.softmax_stats = &Ss;
                    attn_error ce = {0};
                    attn_status cs = attn_sdpa_backward(&Qs, &Ks, &Vs, &Os, lse ? &Ls : NULL, &dOs,
                                                        dq ? &dQt : NULL, want_kv ? &dKt : NULL,
                                                        want_kv ? &dVt : NULL, &o, &ce);
                    const double t1 = ring_now();
                    if (cs == ATTN_OK && dq) {
                        attn_tensor dQa = ring_slice(*dq, 2, sc.r0, m);
                        ring_add(&dQa, &dQt);
                    }
                    if (!ring_chunk_done(&c, &sc, t0, t1, cs, &ce)) break;
                    if (!want_kv) continue;
                    if (!acc_ready) {
                        ring_wait(&c, &acc_recv); /* the accumulator so far, from the left */
                        acc_ready = true;
                    }
                    const double t3 = ring_now();
                    attn_tensor ka = ring_slice(dKa, 2, sc.k0, nk), va = ring_slice(dVa, 2, sc.k0, nk);
                    ring_add(&ka, &dKt);
                    ring_add(&va, &dVt);
                    const double t4 = ring_now();
                    c.tm.compute_s += t4 - t3;
                    c.tm.merge_s += t4 - t3;
                }
            }
            c.tm.blocks++;
            if (!want_kv) continue;
            if (!acc_ready) ring_wait(&c, &acc_recv); /* nothing to add: pass it on */
            if (P == 1) {
                ring_unpack_grad(&c, pc, acc[a], dk, dv);
            } else {
                /* On to the next rank; after the last hop (ts = P-1) the right
                 * neighbour is the piece's owner. */
                ring_isend(&c, acc[a], ring_grad_floats(&c, len),
                           ts < P - 1 ? RING_TAG_ACC : RING_TAG_FIN, &acc_send[a]);
            }
            const int64_t next = t + 1;
            if (P > 1 && next < ticks && next % P != 0) {
                const int na = (int)(next % RING_SLOTS), nsrc = (c.rank - (int)(next % P) + P) % P;
                const ring_piece np = ring_piece_of(&c, nsrc, next / P);
                ring_wait(&c, &acc_send[na]);
                ring_irecv(&c, acc[na], ring_grad_floats(&c, np.alen + np.blen), RING_TAG_ACC,
                           &acc_recv);
            }
            if (P > 1 && ts == 0) {
                /* Our piece j comes home after its trip: receive it into a
                 * free slot (emptying the one piece j-2 used). */
                const int f = (int)(j % 2);
                if (fin_piece[f] >= 0) {
                    ring_wait(&c, &fin_req[f]);
                    ring_unpack_grad(&c, ring_piece_of(&c, c.rank, fin_piece[f]), fin[f], dk, dv);
                }
                ring_irecv(&c, fin[f], ring_grad_floats(&c, len), RING_TAG_FIN, &fin_req[f]);
                fin_piece[f] = j;
            }
        }
        ring_kv_drain(&c, &st);
        for (int i = 0; i < RING_SLOTS; ++i) ring_wait(&c, &acc_send[i]);
        ring_wait(&c, &acc_recv);
        for (int f = 0; f < 2; ++f)
            if (fin_piece[f] >= 0) {
                ring_wait(&c, &fin_req[f]);
                ring_unpack_grad(&c, ring_piece_of(&c, c.rank, fin_piece[f]), fin[f], dk, dv);
            }
        s = ring_loop_agree(&c, &le);
    }
    ring_kv_stream_free(&st);
    for (int i = 0; i < RING_SLOTS; ++i) free(acc[i]);
    free(fin[0]);
    free(fin[1]);
    free(dqt);
    free(gkt);
    free(so.workspace);
    return ring_finish(&c, opts, t_start, s, &le, err);
}
