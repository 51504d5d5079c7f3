/* What the ring forward and backward do around their tick loop, once: the
 * checks of their tensor arguments, the key/value stream's buffers, the
 * attention's workspace and the agreement that every rank has its buffers,
 * the accounting of each row chunk, and the end of a call. See ring.h. */
#include "ring.h"

#include <stdlib.h>
#include <string.h>

attn_status ring_check_view(const attn_tensor *t, const char *name, int ndim, const int64_t *want,
                            bool output, attn_error *err)
{
    if (!t) return ring_fail(err, ATTN_ERR_NULL, "%s: tensor is NULL", name);
    if (t->ndim != ndim || t->dtype != ATTN_F32)
        return ring_fail(err, ATTN_ERR_SHAPE, "%s: expected a %d-D float32 tensor", name, ndim);
    for (int d = 0; d < ndim; ++d)
        if (t->shape[d] != want[d])
            return ring_fail(err, ATTN_ERR_SHAPE, "%s: size %lld in dimension %d, expected %lld",
                             name, (long long)t->shape[d], d, (long long)want[d]);
    for (int d = 0; output && d < ndim; ++d)
        if (t->shape[d] > 1 && t->stride[d] == 0)
            return ring_fail(err, ATTN_ERR_STRIDE, "%s: zero stride in dimension %d of an output",
                             name, d);
    if (attn_tensor_numel(t) > 0 && !t->data)
        return ring_fail(err, ATTN_ERR_NULL, "%s: data is NULL", name);
    return ATTN_OK;
}

int64_t ring_chunk_rows(const ring_ctx *c)
{
    return c->rows < c->nq ? c->rows : (c->nq > 0 ? c->nq : 1);
}

bool ring_kv_stream_alloc(const ring_ctx *c, ring_kv_stream *st, size_t *bytes)
{
    const int64_t floats = ring_kv_floats(c, c->max_piece);
    memset(st, 0, sizeof *st);
    for (int i = 0; i < RING_SLOTS; ++i) st->send[i] = MPI_REQUEST_NULL;
    st->recv = MPI_REQUEST_NULL;
    bool ok = true;
    for (int i = 0; i < RING_SLOTS; ++i) {
        st->slot[i] = calloc((size_t)(floats > 0 ? floats : 1), sizeof(float));
        ok = ok && st->slot[i];
        *bytes += sizeof(float) * (size_t)floats;
    }
    return ok;
}

void ring_kv_stream_free(ring_kv_stream *st)
{
    for (int i = 0; i < RING_SLOTS; ++i) {
        free(st->slot[i]);
        st->slot[i] = NULL;
    }
}

/* Bytes of the attention's workspace for the largest call of the loop: a
 * full row chunk of q against a full piece, with and without causality. */
static attn_status workspace_bytes(const ring_ctx *c, const attn_tensor *q, float *slot,
                                   bool backward, const attn_sdpa_opts *so, size_t *bytes,
                                   attn_error *err)
{
    const int64_t R = ring_chunk_rows(c);
    attn_tensor Qv = ring_slice(*q, 2, 0, R < c->nq ? R : c->nq), K, V;
    float *mp;
    ring_kv_views(c, slot, c->max_piece, &K, &V, &mp);
    attn_tensor M = c->mask ? ring_mask_view(c, mp, c->max_piece, 0, c->max_piece) : K;
    attn_sdpa_opts o = *so;
    o.mask[0] = c->mask ? &M : NULL;
    attn_status s = ATTN_OK;
    for (int z = 0; z < 2 && s == ATTN_OK; ++z) {
        size_t b = 0;
        o.causal = z ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
        s = attn_sdpa_workspace_size(&Qv, &K, &V, backward, &o, &b, err);
        if (b > *bytes) *bytes = b;
    }
    return s;
}

attn_status ring_buffers_ready(ring_ctx *c, const attn_tensor *q, const ring_kv_stream *st,
                               bool backward, bool ok, size_t bytes, attn_sdpa_opts *so,
                               attn_error *err)
{
    attn_status s = ATTN_OK;
    size_t ws_bytes = 0;
    void *ws = NULL;
    if (ok) {
        s = workspace_bytes(c, q, st->slot[0], backward, so, &ws_bytes, err);
        if (s == ATTN_OK && ws_bytes && !(ws = malloc(ws_bytes))) ok = false;
        bytes += ws_bytes;
    }
    if (s == ATTN_OK && !ok) s = ring_fail(err, ATTN_ERR_ALLOC, "out of memory for ring buffers");
    s = ring_agree(c->comm, s, err);
    c->tm.buffer_bytes += bytes;
    so->workspace = ws;
    so->workspace_size = ws_bytes;
    return s;
}

bool ring_chunk_done(ring_ctx *c, const ring_subcall *sc, double t0, double t1, attn_status cs,
                     const attn_error *ce)
{
    const double t2 = ring_now();
    c->tm.compute_s += t2 - t0;
    c->tm.merge_s += t2 - t1;
    c->tm.pairs += ring_subcall_pairs(c, sc);
    if (cs == ATTN_OK) return true;
    c->failed = cs;
    c->fail_err = *ce;
    return false;
}

attn_status ring_loop_agree(ring_ctx *c, attn_error *le)
{
    const attn_status s = ring_agree(c->comm, c->failed, &c->fail_err);
    if (s != ATTN_OK) *le = c->fail_err;
    return s;
}

attn_status ring_finish(ring_ctx *c, const attn_ring_opts *opts, double t_start, attn_status s,
                        const attn_error *le, attn_error *err)
{
    c->tm.total_s = ring_now() - t_start;
    if (opts && opts->timing) *opts->timing = c->tm;
    ring_end(c);
    if (err) {
        *err = *le;
        if (s == ATTN_OK) err->status = ATTN_OK, err->message[0] = '\0';
    }
    return s;
}
