/* Internals shared by the ring forward (ring_forward.c) and backward
 * (ring_backward.c): the collective setup and status agreement, the piece
 * schedule, which (query rows, keys) each piece needs, message buffers and
 * timed MPI wrappers (ring_common.c); the set-up and end of a call around
 * its tick loop (ring_setup.c). */
#ifndef ATTN_RING_H
#define ATTN_RING_H

#include "attn_mpi.h"

#include <stddef.h>

/* Message slots per stream: one being computed with (and forwarded), one
 * receiving the next piece, one whose send may still be draining. */
#define RING_SLOTS 3
#define RING_DEFAULT_BLOCK_KEYS 2048
#define RING_DEFAULT_BLOCK_QUERIES 4096

enum { RING_TAG_KV = 101, RING_TAG_ACC = 102, RING_TAG_FIN = 103 };

/*
 * Schedule. Each rank's key/value shard is cut into `pieces` pieces; tick t
 * (0 <= t < P·pieces) computes with piece j = t / P of the block that
 * started on rank src = rank - s (mod P), s = t % P. So a piece moves one
 * rank per tick (systolic): memory holds a few pieces, never a whole block.
 * In the zigzag layout a piece is two sub-pieces at the same relative
 * offset of the block's two chunks, so every rank's work is the same at
 * every tick.
 */
typedef struct {
    int64_t a0, alen; /* rows [a0, a0+alen) of the owner's shard (first chunk) */
    int64_t b0, blen; /* rows [b0, b0+blen) (second chunk; blen 0 if non-causal) */
} ring_piece;

/* One (query rows × piece keys) product: rows [r0, r1) of the local
 * queries, keys [k0, k1) of the piece buffer (A rows first, then B). diag:
 * a square on the causal diagonal (query i sees key j <= i). */
typedef struct {
    int64_t r0, r1, k0, k1;
    bool diag;
} ring_call;

/* A row chunk of a call, ready for attn_sdpa. */
typedef struct {
    int64_t r0, r1, k0, k1;
    attn_causal causal;
} ring_subcall;

typedef struct {
    MPI_Comm comm; /* our duplicate of the caller's communicator */
    int P, rank, left, right;
    bool causal;
    int64_t B, Hq, Hkv, D, Dv;
    int64_t nq;     /* local query rows */
    int64_t *nk;    /* key rows of each rank (P) */
    int64_t *chunk; /* causal: the 2P chunk lengths */
    int64_t pieces, rows, max_piece;
    bool mask;
    float scale;
    int threads;
    float *maskf;         /* this rank's key padding mask as additive floats (B, nk) */
    attn_ring_timing tm;
    attn_status failed;   /* first failure of a compute call on this rank */
    attn_error fail_err;
} ring_ctx;

/* Current time in seconds (MPI_Wtime). */
double ring_now(void);

/* Records status and message in err; returns status. */
attn_status ring_fail(attn_error *err, attn_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Collective: every rank passes its local status (and message in err); all
 * return the first failing rank's status, the others' message naming it. */
attn_status ring_agree(MPI_Comm comm, attn_status local, attn_error *err);

/* Collective setup: local checks of q, k, v and the options (plus the
 * caller's own local status), agreement, then the global geometry. On
 * success c->comm is a duplicate to free with ring_end. */
attn_status ring_begin(ring_ctx *c, MPI_Comm comm, const attn_tensor *q, const attn_tensor *k,
                       const attn_tensor *v, const attn_ring_opts *opts, attn_status local,
                       attn_error *err);
void ring_end(ring_ctx *c);

/* Rows of the query shard of chunk 1 (causal) — where chunk 2 starts. */
int64_t ring_first_chunk(const ring_ctx *c);

ring_piece ring_piece_of(const ring_ctx *c, int src, int64_t j);
/* The products tick (src, piece) needs on this rank; returns how many (<= 4). */
int ring_calls(const ring_ctx *c, int src, ring_piece pc, ring_call *out);
/* Row chunk number `i` of a call (chunks of c->rows rows); false past the end. */
bool ring_subcall_at(const ring_ctx *c, const ring_call *call, int64_t i, ring_subcall *sc);
/* (query, key) pairs a row chunk scores, over all batches and query heads. */
int64_t ring_subcall_pairs(const ring_ctx *c, const ring_subcall *sc);

/* Floats of a key/value piece message (K, V, then the additive mask) and of
 * a gradient piece message (dK, dV), for a piece of len keys. */
int64_t ring_kv_floats(const ring_ctx *c, int64_t len);
int64_t ring_grad_floats(const ring_ctx *c, int64_t len);
/* Views of a piece buffer: K (B,Hkv,len,D), V (B,Hkv,len,Dv); *mask (B,len)
 * floats or NULL. */
void ring_kv_views(const ring_ctx *c, float *buf, int64_t len, attn_tensor *K, attn_tensor *V,
                   float **mask);
void ring_grad_views(const ring_ctx *c, float *buf, int64_t len, attn_tensor *dK, attn_tensor *dV);
/* Copies the local piece into a message buffer. */
void ring_pack_kv(ring_ctx *c, const attn_tensor *k, const attn_tensor *v, ring_piece pc, float *buf);
/* Writes a finished gradient piece into the local dk/dv shards (either NULL). */
void ring_unpack_grad(ring_ctx *c, ring_piece pc, float *buf, attn_tensor *dk, attn_tensor *dv);

/* The key padding mask of keys [k0, k1) of a piece as a (B,1,1,k1-k0) view. */
attn_tensor ring_mask_view(const ring_ctx *c, float *mask, int64_t len, int64_t k0, int64_t k1);

/* Views: dimension dim restricted to [start, start+len). */
attn_tensor ring_slice(attn_tensor t, int dim, int64_t start, int64_t len);
/* 4-D views: fill with a value, dst += src. */
void ring_fill(attn_tensor *t, float value);
void ring_add(attn_tensor *dst, const attn_tensor *src);

/* Timed MPI point-to-point; failures land in c->failed. */
void ring_isend(ring_ctx *c, const float *buf, int64_t count, int tag, MPI_Request *req);
void ring_irecv(ring_ctx *c, float *buf, int64_t count, int tag, MPI_Request *req);
void ring_wait(ring_ctx *c, MPI_Request *req);
/* Lets MPI move the messages in flight (between compute calls). */
void ring_progress(ring_ctx *c, MPI_Request *const *reqs, int n);

/* The key/value stream both directions share: slot buffers, the forwarding
 * send of each slot, and the receive of the next piece. */
typedef struct {
    float *slot[RING_SLOTS];
    MPI_Request send[RING_SLOTS];
    MPI_Request recv;
} ring_kv_stream;

/* Piece of tick t, in hand: packed from the local shard (s = 0) or
 * received; forwards it and posts the receive of tick t+1. Returns the
 * buffer and its piece geometry. */
float *ring_kv_tick(ring_ctx *c, ring_kv_stream *st, const attn_tensor *k, const attn_tensor *v,
                    int64_t t, ring_piece *pc, int *src);
/* Waits for every send of the stream. */
void ring_kv_drain(ring_ctx *c, ring_kv_stream *st);

/* ------------------------------------------- a call around its tick loop */

/* Local check of a tensor argument: an ndim-D float32 of shape want, data
 * present, and for an output no zero stride over a dimension of size > 1. */
attn_status ring_check_view(const attn_tensor *t, const char *name, int ndim, const int64_t *want,
                            bool output, attn_error *err);
/* Query rows of one attn_sdpa call: c->rows, at most the local rows (1 when
 * there are none). */
int64_t ring_chunk_rows(const ring_ctx *c);
/* Requests set to MPI_REQUEST_NULL and each slot allocated for the largest
 * piece, its bytes added to *bytes; false when out of memory (free with
 * ring_kv_stream_free all the same). */
bool ring_kv_stream_alloc(const ring_ctx *c, ring_kv_stream *st, size_t *bytes);
void ring_kv_stream_free(ring_kv_stream *st);
/* Collective, before the loop: allocates the attention's workspace for the
 * largest call (forward or backward, with so's scale, threads and path)
 * into so->workspace (free it after the loop), fails when ok is false (an
 * allocation of the caller failed), agrees with every rank and counts
 * bytes (plus the workspace) into the timing. */
attn_status ring_buffers_ready(ring_ctx *c, const attn_tensor *q, const ring_kv_stream *st,
                               bool backward, bool ok, size_t bytes, attn_sdpa_opts *so,
                               attn_error *err);
/* After a row chunk's attention call (started at t0, its merge or sum at
 * t1): its time and pairs into the timing; a failure (cs, ce) recorded in
 * c->failed. Returns whether the call succeeded. */
bool ring_chunk_done(ring_ctx *c, const ring_subcall *sc, double t0, double t1, attn_status cs,
                     const attn_error *ce);
/* Collective, after the loop: every rank's first failure; the failing
 * rank's message into *le. */
attn_status ring_loop_agree(ring_ctx *c, attn_error *le);
/* The end of a call: the timing (total since t_start) to opts->timing, the
 * context freed, *err = *le (cleared when s is ATTN_OK). Returns s. */
attn_status ring_finish(ring_ctx *c, const attn_ring_opts *opts, double t_start, attn_status s,
                        const attn_error *le, attn_error *err);

#endif
