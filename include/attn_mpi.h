/*
 * attn_mpi.h — ring attention over MPI (libattn_mpi, built when CMake finds
 * MPI). Sequence parallelism for sequences larger than one machine: every
 * rank holds a slice of the sequence; key/value blocks travel around the
 * ring while each rank computes with the block in hand (attn_sdpa on each
 * block), and the partial results merge exactly through attn_lse_merge (in
 * the softmax-stats form: no rounded LSE enters the merge).
 * Uses libattn only through attn.h; libattn never depends on this.
 *
 * Layouts (attn_ring_layout). The global sequence of length N is split:
 *   non-causal  contiguous slices, rank r holds N/P (+1 for r < N % P)
 *               positions in order;
 *   causal      zigzag: 2P chunks of N/(2P) (+1 for the first N % 2P),
 *               rank r holds chunk r then chunk 2P-1-r, so every rank does
 *               the same causal work. Queries and keys share the layout.
 * attn_ring_shard / attn_ring_unshard move a full tensor to and from a
 * rank's slice.
 *
 * Blocks move in pieces of block_keys keys, one rank per tick, through
 * nonblocking MPI_Isend/MPI_Irecv posted one piece ahead (three message
 * buffers per stream), so memory holds a few pieces rather than whole
 * blocks, and MPI is polled between the attn_sdpa calls so transfers
 * progress while the rank computes.
 *
 * Calls are collective over comm: every rank calls with its own shard and
 * gets the same status. A rank whose arguments are bad makes every rank
 * return an error (the others' message names the failing rank) instead of
 * hanging. Results are identical from run to run for a fixed number of
 * ranks, threads and block sizes (a fixed merge and accumulation order).
 */
#ifndef ATTN_MPI_H
#define ATTN_MPI_H

#include "attn.h"

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The global positions a rank holds, in local order: span[0] then span[1]
 * (count 1 for contiguous slices, 2 for zigzag). */
typedef struct {
    int count;
    int64_t start[2];
    int64_t length[2];
} attn_ring_span;

/* Positions rank `rank` of `ranks` holds of a sequence of length n. */
attn_status attn_ring_layout(int64_t n, int ranks, int rank, bool causal, attn_ring_span *span,
                             attn_error *err);

/* Copies rank's positions of `full` along dimension `dim` into `local`
 * (same shape but dim = the rank's length; any strides). */
attn_status attn_ring_shard(const attn_tensor *full, int dim, int ranks, int rank, bool causal,
                            attn_tensor *local, attn_error *err);
/* The inverse: writes `local` into rank's positions of `full`. */
attn_status attn_ring_unshard(const attn_tensor *local, int dim, int ranks, int rank, bool causal,
                              attn_tensor *full, attn_error *err);

/* What one call spent, on this rank. */
typedef struct {
    double compute_s; /* attn_sdpa / backward calls, merges and gradient sums */
    double merge_s;   /* the part of compute_s spent merging partial outputs
                         (forward) or adding partial gradients (backward) */
    double comm_s;    /* inside MPI calls: posting, testing and waiting on transfers */
    double pack_s;    /* copying blocks into and out of message buffers */
    double total_s;   /* the whole call, agreement included */
    int64_t bytes_sent;
    int64_t blocks;   /* key/value pieces this rank computed with */
    int64_t pairs;    /* (query, key) pairs it scored, per batch and query head
                         summed: the work causality leaves it */
    size_t buffer_bytes; /* memory the call allocated (messages, temporaries, workspace) */
} attn_ring_timing;

typedef struct {
    bool causal; /* causal over the global sequence (zigzag layout); else full */
    float scale; /* 0 = 1/sqrt(D) */
    /* Local (B, Nk_local) key padding mask, optional. ATTN_BOOL: true = may
     * attend (SDPA's convention); ATTN_F32: added to the scores. */
    const attn_tensor *key_padding_mask;
    int num_threads;        /* per rank; 0 = the library default */
    int64_t block_keys;     /* keys per transferred piece of a block; 0 = 2048 */
    int64_t block_queries;  /* query rows per attn_sdpa call; 0 = 4096 */
    /* (B, Hq, Nq_local, 2) softmax stats (attn_sdpa_opts.softmax_stats):
     * forward output, backward input used instead of lse. Optional. */
    attn_tensor *softmax_stats;
    attn_ring_timing *timing; /* optional output */
    uint64_t reserved[4];     /* zero */
} attn_ring_opts;

attn_ring_opts attn_ring_opts_default(void);

/*
 * Forward. Local shards, each a strided view:
 *   q   (B, Hq,  Nq_local, D)     k (B, Hkv, Nk_local, D)   v (B, Hkv, Nk_local, Dv)
 *   out (B, Hq,  Nq_local, Dv)    lse (B, Hq, Nq_local), optional
 * Causal: queries and keys in the zigzag layout of one global N (the sum of
 * the local lengths). Non-causal: any split; each rank's queries attend to
 * every rank's keys. GQA as attn_sdpa (Hq % Hkv == 0).
 */
attn_status attn_ring_sdpa(MPI_Comm comm, const attn_tensor *q, const attn_tensor *k,
                           const attn_tensor *v, attn_tensor *out, attn_tensor *lse,
                           const attn_ring_opts *opts, attn_error *err);

/*
 * Backward. out and lse (or opts->softmax_stats) are the ring forward's
 * results for the same inputs (required: each block's backward needs the
 * global softmax). dout (B,Hq,Nq_local,Dv); dq, dk, dv local shards,
 * OVERWRITTEN (any may be NULL). The dK/dV accumulators of a block travel
 * around the ring with it and return to its owner.
 */
attn_status attn_ring_sdpa_backward(MPI_Comm comm, const attn_tensor *q, const attn_tensor *k,
                                    const attn_tensor *v, const attn_tensor *out,
                                    const attn_tensor *lse, const attn_tensor *dout,
                                    attn_tensor *dq, attn_tensor *dk, attn_tensor *dv,
                                    const attn_ring_opts *opts, attn_error *err);

#ifdef __cplusplus
}
#endif
#endif /* ATTN_MPI_H */
