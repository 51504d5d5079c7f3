/*
 * attn.h — scaled dot-product attention and multi-head attention in C11.
 *
 * The one public header of libattn. Everything the CLI, the tests and users
 * need goes through it.
 *
 * Conventions
 *   - Every fallible call returns an attn_status and takes a last argument
 *     `attn_error *err` that may be NULL; on failure it receives a one-line
 *     message naming the offending argument. The library never prints, exits
 *     or aborts, and has no global mutable state: calls are thread-safe as
 *     long as they do not write the same buffers.
 *   - Tensors are strided views (attn_tensor): shape and element strides per
 *     dimension, so (B,N,H,D) buffers straight out of a projection are valid
 *     (B,H,N,D) views without a copy. Strides may be 0 (broadcast) for inputs.
 *   - float32 data and float32 accumulation. Boolean tensors are one byte per
 *     element, 0 or 1.
 *   - Each forward has a backward with a mirrored signature. Backward calls
 *     OVERWRITE input gradients (dQ, dK, dV, d query...). MHA parameter
 *     gradients ACCUMULATE into the module's gradient buffer (zero it with
 *     attn_mha_zero_grad), so several backward calls can form one batch.
 */
#ifndef ATTN_H
#define ATTN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTN_VERSION_MAJOR 0
#define ATTN_VERSION_MINOR 3
#define ATTN_VERSION_PATCH 0
#define ATTN_VERSION_STRING "0.3.0"

/* ------------------------------------------------------------------ status */

typedef enum {
    ATTN_OK = 0,
    ATTN_ERR_NULL,        /* a required pointer was NULL */
    ATTN_ERR_SHAPE,       /* shapes are inconsistent or unsupported */
    ATTN_ERR_STRIDE,      /* a stride is invalid (e.g. broadcast in an output) */
    ATTN_ERR_DTYPE,       /* wrong element type */
    ATTN_ERR_ARG,         /* an option has an invalid value */
    ATTN_ERR_OVERFLOW,    /* a size computation would overflow */
    ATTN_ERR_ALLOC,       /* out of memory */
    ATTN_ERR_WORKSPACE,   /* caller-provided workspace too small */
    ATTN_ERR_IO,          /* a file could not be opened, read or written */
    ATTN_ERR_FORMAT,      /* a file is malformed */
    ATTN_ERR_UNSUPPORTED, /* valid input this build does not support */
    ATTN_STATUS_COUNT
} attn_status;

/* Receives the message of a failed call. */
typedef struct {
    attn_status status;
    char message[256];
} attn_error;

/* Stable name of a status, e.g. "shape mismatch". Never NULL. */
const char *attn_status_string(attn_status status);

/* ----------------------------------------------------------------- tensors */

#define ATTN_MAX_DIMS 8

typedef enum {
    ATTN_F32 = 0, /* float */
    ATTN_BOOL,    /* uint8_t, 0 or 1 */
    ATTN_BF16,    /* bfloat16 (uint16_t bits: the top half of a float32) */
    ATTN_F16,     /* IEEE binary16 (uint16_t bits) */
} attn_dtype;

/* Bytes per element (0 for an unknown dtype) and a stable name:
 * "float32", "bool", "bfloat16", "float16" ("unknown" otherwise). */
size_t attn_dtype_size(attn_dtype dtype);
const char *attn_dtype_name(attn_dtype dtype);

/* A strided view. Strides are in elements, not bytes. */
typedef struct {
    void *data;
    attn_dtype dtype;
    int ndim;
    int64_t shape[ATTN_MAX_DIMS];
    int64_t stride[ATTN_MAX_DIMS];
} attn_tensor;

/* Contiguous (C-order) views. */
attn_tensor attn_tensor_1d(float *data, int64_t n0);
attn_tensor attn_tensor_2d(float *data, int64_t n0, int64_t n1);
attn_tensor attn_tensor_3d(float *data, int64_t n0, int64_t n1, int64_t n2);
attn_tensor attn_tensor_4d(float *data, int64_t n0, int64_t n1, int64_t n2, int64_t n3);
/* Contiguous view of any rank and dtype. */
attn_tensor attn_tensor_make(void *data, attn_dtype dtype, int ndim, const int64_t *shape);
/* Number of elements (product of the shape), 0 for an invalid shape. */
int64_t attn_tensor_numel(const attn_tensor *t);
/* Swap two dimensions of a view (no data moves). */
attn_tensor attn_tensor_transpose(attn_tensor t, int dim0, int dim1);
/* Copies src into dst (same shape, any strides, dst not overlapping src),
 * converting between ATTN_F32, ATTN_BF16 and ATTN_F16: widening is exact,
 * narrowing rounds to nearest even (overflow to ±inf, NaN stays NaN), as
 * torch's Tensor.to(dtype). */
attn_status attn_tensor_convert(const attn_tensor *src, attn_tensor *dst, attn_error *err);

/* ------------------------------------------------------------------- SDPA */

typedef enum {
    ATTN_CAUSAL_NONE = 0,
    ATTN_CAUSAL_TOP_LEFT,     /* query i sees keys j <= i (PyTorch is_causal) */
    ATTN_CAUSAL_BOTTOM_RIGHT, /* query i sees keys j <= i + Nk - Nq (FlashAttention) */
} attn_causal;

typedef enum {
    ATTN_PATH_AUTO = 0,  /* fastest available path (ATTN_ARCH=reference forces the oracle) */
    ATTN_PATH_REFERENCE, /* the plain, obviously-correct path */
    ATTN_PATH_FUSED,     /* tiled online-softmax kernels */
} attn_path;

#define ATTN_SDPA_MAX_MASKS 2
#define ATTN_MAX_THREADS 1024 /* largest num_threads a call accepts */

/* Sliding window (FlashAttention's window_size=(left, right)): query i sees
 * keys j with i + Nk - Nq - left <= j <= i + Nk - Nq + right; -1 leaves that
 * side unbounded. Off unless `enabled`. */
typedef struct {
    bool enabled;
    int64_t left, right;
} attn_window;

/*
 * Options for attn_sdpa / attn_sdpa_backward. Start from
 * attn_sdpa_opts_default() (or zero-initialise: all-zero is the default).
 *
 * The score of query i and key j of head h, in this order:
 *   x = scale·(q_i·k_j)                       (rounded to float once)
 *   x = softcap·tanh(x / softcap)              if softcap > 0 (x / softcap taken
 *                                              as x·fl(1/softcap) on every path)
 *   x = x - slope_h·|i + Nk - Nq - j|          if alibi_slopes
 *   x = x + mask values                        (bool false / -inf: key hidden)
 * and key j is hidden outright by causal, window and bool masks.
 * P = softmax over the visible keys (plus exp(sink_h) in the denominator),
 * then dropout; out = P·V.
 *
 * mask[i]  up to two masks, combined. Each broadcasts to (B,Hq,Nq,Nk) the
 *          PyTorch way (aligned from the right, size-1 dims broadcast), e.g.
 *          (Nq,Nk), (1,Nk), (B,1,Nq,Nk), (B,Hq,Nq,Nk), or (B,1,1,Nk) for
 *          key padding. ATTN_BOOL: true = may attend (PyTorch SDPA).
 *          ATTN_F32: added to the scaled scores (-inf allowed).
 * causal   combined with the masks.
 * scale    multiplies Q·Kᵀ; 0 means the default 1/sqrt(D). Must be finite and
 *          non-negative (torch also takes negative scales; the fused kernels
 *          rely on scale >= 0 when taking row maxima).
 * window   sliding window, see attn_window; composes with causal and masks.
 * alibi_slopes (Hq) or (B,Hq) float32: ALiBi bias -slope·|i + Nk - Nq - j|
 *          (FlashAttention's alibi_slopes); attn_alibi_slopes() gives the
 *          paper's geometric sequence.
 * softcap  > 0: logit soft-capping after scaling (Gemma 2); 0 = off.
 * sinks    (Hq) float32: one learned logit per head that joins every row's
 *          softmax denominator without a value (gpt-oss). The LSE output
 *          then includes it: lse = log(exp(sink_h) + Σ_j exp(x_ij)).
 * grad_sinks (Hq) float32, backward only: receives d loss / d sinks
 *          (OVERWRITTEN). NULL if not wanted.
 * dropout_p  in [0, 1): each probability is zeroed with this chance and the
 *          kept ones scaled by 1/(1 - p) (torch SDPA dropout_p). The keep
 *          decision for (b, h, i, j) is a pure function of (dropout_seed,
 *          dropout_offset, b, h, i, j) (Philox4x32-10), so the backward
 *          regenerates it and results do not depend on threads or ISA. The
 *          LSE and the weights output are those before dropout.
 * softmax_stats (B,Hq,Nq,2) float32, optional. The forward writes, per row,
 *          the max m of its logits (the sink included) and ll = log Σ exp(x - m),
 *          so lse = m + ll without rounding m + ll. The backward reads it
 *          instead of lse: P = exp(x - m - ll) is then exact even where a
 *          rounded lse is not (|lse| large next to ll, e.g. rows whose mask
 *          values are all finfo.min). With only lse, the backward uses
 *          P = exp(x - lse), whose relative error is up to ulp(lse)/2 (as
 *          FlashAttention). Rows that see nothing: (-inf, 0).
 */
/*
 * How a forward multiplies bfloat16 inputs.
 *   ATTN_PRECISION_EXACT (0, the default): 16-bit inputs are widened
 *     exactly and all arithmetic is float32, so the result is the float32
 *     call's on the same values, bit for bit, on every CPU.
 *   ATTN_PRECISION_BF16_DOT: when Q, K and V are all bfloat16 and the CPU
 *     has AVX512_BF16, the fused forward's Q·Kᵀ and P·V run as bfloat16 pair
 *     dot products (vdpbf16ps) with float32 accumulation, P rounded to
 *     bfloat16 first, as PyTorch's and FlashAttention's bfloat16 kernels
 *     do. The result stays within the bfloat16 bound of README "bfloat16
 *     and float16" but is no longer the float32 call's bits (nor those of a
 *     CPU without the instructions, which runs the exact path). Subnormal
 *     products count as zero. The backward, the weights output and
 *     decoding shapes are exact float32 either way; a backward then
 *     recomputes the forward's probabilities to rounding, not to the bit.
 */
typedef enum { ATTN_PRECISION_EXACT = 0, ATTN_PRECISION_BF16_DOT = 1 } attn_precision;

typedef struct {
    float scale;
    attn_causal causal;
    const attn_tensor *mask[ATTN_SDPA_MAX_MASKS];
    int num_threads;      /* 0: ATTN_NUM_THREADS, else all cores */
    attn_path path;
    void *workspace;      /* optional; see attn_sdpa_workspace_size */
    size_t workspace_size;
    /* Variants used by current models (all zero = off). */
    attn_window window;
    const attn_tensor *alibi_slopes;
    float softcap;
    const attn_tensor *sinks;
    attn_tensor *grad_sinks;
    float dropout_p;
    uint64_t dropout_seed, dropout_offset;
    attn_tensor *softmax_stats;
    attn_precision precision; /* 0 = ATTN_PRECISION_EXACT */
    uint32_t reserved32;      /* zero */
    /* Zero. Room for future options without changing the struct's size. */
    uint64_t reserved[3];
} attn_sdpa_opts;

/* The standard ALiBi slopes for `heads` heads (Press et al., as in BLOOM and
 * FlashAttention's tests): for n = the largest power of two <= heads,
 * slope_h = 2^(-8(h+1)/n) for h < n, and the remaining heads take every
 * other slope of the sequence for 2n. out receives `heads` floats. */
attn_status attn_alibi_slopes(int64_t heads, float *out, attn_error *err);

attn_sdpa_opts attn_sdpa_opts_default(void);

/*
 * Forward.  Shapes (each a strided view):
 *   q   (B, Hq,  Nq, D)
 *   k   (B, Hkv, Nk, D)
 *   v   (B, Hkv, Nk, Dv)          Hq % Hkv == 0; query head h reads kv head h/(Hq/Hkv)
 *   out (B, Hq,  Nq, Dv)
 *   lse (B, Hq,  Nq)      optional: log Σ_j exp(scale·q·k_j + mask), natural log
 *   weights (B, Hq, Nq, Nk) optional: the softmax probabilities
 * A query row that sees no key gets out = 0, lse = -inf, weights = 0.
 * q, k, v and out (and the backward's out, dout, dq, dk, dv) may each be
 * ATTN_F32, ATTN_BF16 or ATTN_F16; lse, weights and the options' tensors
 * are float32. 16-bit inputs are widened exactly and all arithmetic is
 * float32: the result is the float32 call's on the same values, 16-bit
 * outputs rounded to nearest even (README "bfloat16 and float16"). The
 * fused forward reads 16-bit Q, K and V and writes a 16-bit out in place;
 * other 16-bit tensors (the reference path's, the backward's) are staged
 * through float32 copies the call allocates.
 */
attn_status attn_sdpa(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                      attn_tensor *out, attn_tensor *lse, attn_tensor *weights,
                      const attn_sdpa_opts *opts, attn_error *err);

/*
 * Backward. Mirrors attn_sdpa: from dout (B,Hq,Nq,Dv) produce dq, dk, dv
 * (overwritten; dk/dv summed over the query heads sharing a kv head).
 * out and lse (or opts->softmax_stats, preferred) are what attn_sdpa
 * returned; without them (out NULL, or neither lse nor stats) they are
 * recomputed. Given, they may come from attention over MORE keys than k/v
 * hold (ring attention, split-KV): the result is then the part of the
 * gradients that flows through these keys (dq to be summed over the key
 * blocks), since P = exp(x - m - ll) and D = rowsum(dO∘O) use the caller's
 * statistics on every path. dq, dk or dv may be NULL if not wanted.
 */
attn_status attn_sdpa_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                               const attn_tensor *out, const attn_tensor *lse,
                               const attn_tensor *dout,
                               attn_tensor *dq, attn_tensor *dk, attn_tensor *dv,
                               const attn_sdpa_opts *opts, attn_error *err);

/* Bytes of workspace attn_sdpa / attn_sdpa_backward need for these inputs
 * (without a workspace they allocate it themselves). A forward's figure also
 * serves every call on the same keys and options with fewer query rows
 * (slices of q), so one workspace sized for the largest call serves them all. */
attn_status attn_sdpa_workspace_size(const attn_tensor *q, const attn_tensor *k,
                                     const attn_tensor *v, bool backward,
                                     const attn_sdpa_opts *opts, size_t *bytes,
                                     attn_error *err);

/* ------------------------------------------------------------- LSE merge */

/*
 * Exact merge of two partial attentions of the same queries over DISJOINT
 * key sets (split-KV, ring attention, prefix sharing): the result is what
 * one attn_sdpa call over the union of the keys gives, up to rounding.
 *   out1, out2, out (B, H, N, Dv)
 *   lse1, lse2, lse (B, H, N)      LSE form, or
 *                   (B, H, N, 2)   softmax-stats form (m, ll), lse = m + ll
 *                                  (attn_sdpa_opts.softmax_stats).
 * The three statistics tensors have the same form (told apart by ndim).
 * LSE form, per row:
 *   lse = log(e^lse1 + e^lse2) = max(lse1, lse2) + log1p(e^-|lse1 - lse2|)
 *   out = e^(lse1 - lse)·out1 + e^(lse2 - lse)·out2
 * Stats form: m = max(m1, m2), ll = log(e^(m1-m+ll1) + e^(m2-m+ll2)),
 *   out = e^(m1-m+ll1-ll)·out1 + e^(m2-m+ll2-ll)·out2; m + ll is never
 *   rounded, so the merged stats stay exact where a rounded lse is not.
 * The weights and sums are computed in double and rounded once.
 * A side whose row saw no key (lse -inf, stats (-inf, 0)) has weight 0 and
 * the other side is copied bit for bit; both empty gives out 0, lse -inf
 * (stats (-inf, 0)). A NaN statistic makes the row's out and lse NaN.
 * Merging is commutative and associative up to rounding.
 * out may be the same view as out1 or out2, lse the same as lse1 or lse2
 * (in place); other overlaps are not allowed. lse may be NULL.
 */
attn_status attn_lse_merge(const attn_tensor *out1, const attn_tensor *lse1,
                           const attn_tensor *out2, const attn_tensor *lse2, attn_tensor *out,
                           attn_tensor *lse, attn_error *err);

/* ------------------------------------------------------------------ varlen */

/*
 * Packed variable-length batches (FlashAttention's *_varlen_func): nseq
 * sequences stored back to back. Sequence s owns query tokens
 * [cu_seqlens_q[s], cu_seqlens_q[s+1]) and key tokens
 * [cu_seqlens_k[s], cu_seqlens_k[s+1]); each offset array has nseq + 1
 * entries, starts at 0, never decreases and ends at the packed length.
 */
typedef enum {
    ATTN_OFFSETS_I64 = 0, /* const int64_t * */
    ATTN_OFFSETS_I32,     /* const int32_t * */
} attn_offsets_type;

typedef struct {
    int64_t nseq;             /* >= 0 */
    attn_offsets_type type;   /* element type of both offset arrays */
    const void *cu_seqlens_q; /* (nseq + 1) */
    const void *cu_seqlens_k; /* (nseq + 1) */
} attn_varlen_seqs;

/*
 * Forward over packed sequences. Shapes (strided views):
 *   q   (total_q, Hq,  D)
 *   k   (total_k, Hkv, D)
 *   v   (total_k, Hkv, Dv)       Hq % Hkv == 0 (GQA as attn_sdpa)
 *   out (total_q, Hq,  Dv)
 *   lse (total_q, Hq)            optional (FlashAttention's (Hq, total_q) is
 *                                its transposed view)
 *   opts->softmax_stats (total_q, Hq, 2) optional
 * Each sequence is its own attn_sdpa problem (Nq, Nk = its lengths): causal,
 * window and ALiBi are aligned per sequence (bottom-right: query i of a
 * sequence sees its keys j <= i + Nk - Nq), and nothing attends across a
 * sequence boundary. opts->alibi_slopes may be (Hq) or (nseq, Hq); sinks
 * (Hq); dropout keys sequence s with dropout_offset + s (and batch index 0).
 * Not supported: opts->mask (per-sequence masks) and opts->workspace
 * (ATTN_ERR_UNSUPPORTED). Results are bit-identical to one attn_sdpa call
 * per sequence on the same views, for any num_threads. Bad offsets or shapes
 * give an error naming the argument before anything is written.
 */
attn_status attn_sdpa_varlen(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                             const attn_varlen_seqs *seqs, attn_tensor *out, attn_tensor *lse,
                             const attn_sdpa_opts *opts, attn_error *err);

/*
 * Backward, mirroring attn_sdpa_varlen: from dout (total_q, Hq, Dv) produce
 * dq (total_q, Hq, D), dk (total_k, Hkv, D), dv (total_k, Hkv, Dv), each
 * OVERWRITTEN and each may be NULL. out and lse (or opts->softmax_stats)
 * are the forward's; NULL recomputes them. opts->grad_sinks (Hq) receives
 * the sum over sequences (in sequence order) of each sequence's gradient.
 */
attn_status attn_sdpa_varlen_backward(const attn_tensor *q, const attn_tensor *k,
                                      const attn_tensor *v, const attn_varlen_seqs *seqs,
                                      const attn_tensor *out, const attn_tensor *lse,
                                      const attn_tensor *dout, attn_tensor *dq, attn_tensor *dk,
                                      attn_tensor *dv, const attn_sdpa_opts *opts,
                                      attn_error *err);

/* ---------------------------------------------------------------- KV cache */

/*
 * A key/value cache for decoding: per batch entry b, up to `capacity` tokens
 * of keys (Hkv, ·, D) and values (Hkv, ·, Dv) and a current length
 * (FlashAttention's cache_seqlens), all zero at creation.
 *
 * Layouts:
 *   contiguous (block_size 0): K storage (B, Hkv, capacity, D), V
 *     (B, Hkv, capacity, Dv); entry b's keys are a strided view of it.
 *   paged (block_size > 0): a pool of num_blocks blocks of block_size tokens
 *     that the cache owns, stored per kv head as (Hkv, num_blocks·block_size,
 *     D) (and Dv for V), and a block table per entry mapping its logical
 *     blocks to pool blocks (vLLM / FlashAttention's paged KV). Appends take
 *     the lowest-numbered free blocks, so allocation is deterministic;
 *     attn_kvcache_set_block_table lets the caller choose instead. Blocks
 *     are never shared between entries.
 */
typedef struct {
    int64_t batch;      /* B >= 1 */
    int64_t kv_heads;   /* Hkv >= 1 */
    int64_t capacity;   /* tokens per entry, >= 1 */
    int64_t head_dim;   /* D >= 1 */
    int64_t value_dim;  /* Dv; 0 = head_dim */
    int64_t block_size; /* 0: contiguous; > 0: paged, tokens per block */
    int64_t num_blocks; /* paged pool size; 0 = B·ceil(capacity / block_size) */
    attn_dtype dtype;   /* storage: ATTN_F32 (0, the default), ATTN_BF16 or ATTN_F16 */
} attn_kvcache_config;

typedef struct attn_kvcache attn_kvcache;

attn_status attn_kvcache_create(const attn_kvcache_config *cfg, attn_kvcache **out,
                                attn_error *err);
void attn_kvcache_free(attn_kvcache *cache);
/* The configuration with value_dim and num_blocks resolved. */
const attn_kvcache_config *attn_kvcache_get_config(const attn_kvcache *cache);
/* Current length of entry b; -1 when b is out of range. */
int64_t attn_kvcache_length(const attn_kvcache *cache, int64_t b);

/*
 * Appends new tokens: k (B, Hkv, n, D), v (B, Hkv, n, Dv) strided views of
 * any float dtype (converted to the cache's: narrowing rounds to nearest even);
 * entry b takes the first counts[b] of the n tokens (counts (B), each in
 * [0, n]; NULL = n for every entry) at positions [length_b, length_b +
 * counts[b]). All or nothing: an entry that would exceed capacity, or a
 * paged pool without enough free blocks, gives an error and changes nothing.
 */
attn_status attn_kvcache_append(attn_kvcache *cache, const attn_tensor *k, const attn_tensor *v,
                                const int64_t *counts, attn_error *err);

/*
 * Sets every entry's length (lengths (B), each in [0, capacity]): shorter
 * forgets the tail (paged: blocks past the new length return to the pool),
 * longer exposes what the storage holds there (zeros never written; paged:
 * new blocks come zeroed). All or nothing.
 */
attn_status attn_kvcache_set_lengths(attn_kvcache *cache, const int64_t *lengths,
                                     attn_error *err);

/*
 * Paged only. Reads entry b's block table: *count = its blocks
 * (ceil(length_b / block_size) or what set_block_table gave), and the first
 * min(*count, max) pool indices into table (may be NULL when max is 0).
 */
attn_status attn_kvcache_block_table(const attn_kvcache *cache, int64_t b, int32_t *table,
                                     int64_t max, int64_t *count, attn_error *err);
/*
 * Paged only. Maps entry b's logical blocks to the caller's pool blocks
 * table[0..n) (data moves nowhere: the blocks' contents become the entry's
 * keys). n must cover the entry's length and be at most
 * ceil(capacity / block_size); every index in [0, num_blocks), none
 * repeated or owned by another entry. The entry's previous blocks not in
 * the table return to the pool. All or nothing.
 */
attn_status attn_kvcache_set_block_table(attn_kvcache *cache, int64_t b, const int32_t *table,
                                         int64_t n, attn_error *err);

/*
 * Contiguous only: views of entry b's current keys (1, Hkv, length_b, D) and
 * values (1, Hkv, length_b, Dv) into the storage (either may be NULL).
 */
attn_status attn_kvcache_view(const attn_kvcache *cache, int64_t b, attn_tensor *k,
                              attn_tensor *v, attn_error *err);

/*
 * Attention of new queries against each entry's current keys, read in place:
 *   q   (B, Hq, Nq, D)      Hq % Hkv == 0 (GQA as attn_sdpa)
 *   out (B, Hq, Nq, Dv)
 *   lse (B, Hq, Nq)         optional; opts->softmax_stats (B, Hq, Nq, 2) too
 * Entry b is attn_sdpa with Nk = length_b. opts: scale, causal NONE or
 * BOTTOM_RIGHT (query i sees keys j <= i + length_b - Nq: the new tokens'
 * alignment; TOP_LEFT is refused), window, alibi_slopes (Hq) or (B, Hq),
 * softcap, sinks, num_threads, path. Masks, dropout, grad_sinks and a
 * workspace are refused.
 * Contiguous caches give exactly attn_sdpa's bits on the entry's view. A
 * paged entry whose blocks are consecutive in the pool is one view too
 * (the same bits); otherwise each run of consecutive blocks is attended
 * separately and the partial results are merged with their softmax
 * statistics (m, ll) in double precision, first block to last: the same
 * for every thread count, and within a few float32 roundings of the
 * contiguous result (tests/test_kvcache.c asserts |paged - contiguous| <=
 * 8·FLT_EPSILON·max|V|; 1.5 measured).
 */
attn_status attn_kvcache_attend(const attn_kvcache *cache, const attn_tensor *q,
                                attn_tensor *out, attn_tensor *lse, const attn_sdpa_opts *opts,
                                attn_error *err);

/* --------------------------------------------------------------------- MHA */

/* torch.nn.MultiheadAttention(embed_dim, num_heads, bias, add_bias_kv,
 * add_zero_attn, kdim, vdim, batch_first=True). kdim/vdim 0 mean embed_dim. */
typedef struct {
    int64_t embed_dim;
    int64_t num_heads;
    int64_t kdim;
    int64_t vdim;
    bool bias;
    bool add_bias_kv;
    bool add_zero_attn;
    float dropout; /* torch's dropout: on the attention weights in training mode, [0, 1) */
} attn_mha_config;

typedef struct attn_mha attn_mha;

/* Allocates a module; parameters and gradients are zero until attn_mha_init
 * or attn_mha_param writes. */
attn_status attn_mha_create(const attn_mha_config *cfg, attn_mha **out, attn_error *err);
void attn_mha_free(attn_mha *m);
/* The module's configuration, with kdim/vdim resolved (never 0). */
const attn_mha_config *attn_mha_get_config(const attn_mha *m);

/* Initialise like torch (xavier_uniform_ in_proj, kaiming-uniform-style
 * out_proj.weight, zero biases, xavier_normal_ bias_k/bias_v), from a seeded
 * generator of attn's own (not torch's stream). */
void attn_mha_init(attn_mha *m, uint64_t seed);

/* Parameters under torch's state_dict names, in state_dict order:
 * in_proj_weight (3E,E) | q_proj_weight (E,E), k_proj_weight (E,kdim),
 * v_proj_weight (E,vdim); in_proj_bias (3E); bias_k (1,1,E); bias_v (1,1,E);
 * out_proj.weight (E,E); out_proj.bias (E). */
int attn_mha_num_params(const attn_mha *m);
/* i-th parameter: its name, a view of its value and of its gradient. */
attn_status attn_mha_param_at(attn_mha *m, int i, const char **name, attn_tensor *value,
                              attn_tensor *grad);
/* Look a parameter up by torch name. */
attn_status attn_mha_param(attn_mha *m, const char *name, attn_tensor *value,
                           attn_tensor *grad, attn_error *err);
/* All parameters (and gradients) as one contiguous float array, for optimizers. */
float *attn_mha_params_flat(attn_mha *m, size_t *count);
float *attn_mha_grads_flat(attn_mha *m, size_t *count);
void attn_mha_zero_grad(attn_mha *m);

/*
 * Masks follow torch.nn.MultiheadAttention (note: the opposite boolean
 * convention to SDPA):
 *   key_padding_mask (B,S) or (S) unbatched: ATTN_BOOL true = ignore that key;
 *                    ATTN_F32 added.
 *   attn_mask        (L,S) or (B·H,L,S): ATTN_BOOL true = NOT allowed;
 *                    ATTN_F32 added.
 *   causal           same as attn_mask = triu(ones(L,S), 1) (combined with any
 *                    attn_mask).
 * Keys appended by add_bias_kv / add_zero_attn are never masked.
 * weights, if non-NULL, receives (B,L,S') averaged over heads, or
 * (B,H,L,S') with per_head_weights; S' = S + add_bias_kv + add_zero_attn.
 * Unbatched inputs drop the leading B of every shape.
 */
typedef struct {
    const attn_tensor *key_padding_mask;
    const attn_tensor *attn_mask;
    bool causal;
    attn_tensor *weights;
    bool per_head_weights;
    int num_threads;
    attn_path path;
    float scale; /* multiplies each head's q·kᵀ, >= 0; 0 = 1/sqrt(embed_dim / num_heads) (torch) */
    /* torch's module.train(): apply the config's dropout, keyed by
     * dropout_seed (the backward must get the same seed to regenerate it). */
    bool training;
    uint64_t dropout_seed;
    /* Optional scratch, at least attn_mha_workspace_size bytes (for the
     * forward or the backward, as the call is), any alignment, not shared
     * with a concurrent call. Without it every call allocates its own, which
     * a loop calling again and again pays for in page faults each time. */
    void *workspace;
    size_t workspace_size;
    uint64_t reserved[4]; /* zero; room for future options */
} attn_mha_opts;

attn_mha_opts attn_mha_opts_default(void);

/* Bytes of workspace attn_mha_forward (backward = false) or
 * attn_mha_backward (true) needs for these inputs and options: the
 * projections, the attention's output and scratch, and for the backward
 * the gradients in between (mask conversions and non-contiguous inputs are
 * still copied to buffers the call allocates). The backward's figure also
 * serves the forward. Checks the inputs as the call would. */
attn_status attn_mha_workspace_size(const attn_mha *m, const attn_tensor *query,
                                    const attn_tensor *key, const attn_tensor *value,
                                    bool backward, const attn_mha_opts *opts, size_t *bytes,
                                    attn_error *err);

/*
 * Forward, batch_first:
 *   query (B,L,E) or (L,E)
 *   key   (B,S,kdim), value (B,S,vdim)  — both NULL for self-attention (key =
 *         value = query)
 *   out   (B,L,E)
 * A query row that sees no key gives a zero attention output (then out_proj
 * bias), where torch returns NaN.
 */
attn_status attn_mha_forward(const attn_mha *m, const attn_tensor *query,
                             const attn_tensor *key, const attn_tensor *value,
                             attn_tensor *out, const attn_mha_opts *opts, attn_error *err);

/*
 * Backward. Same inputs as the forward, plus dout (B,L,E). Parameter
 * gradients ACCUMULATE into the module's gradients; dquery/dkey/dvalue (each
 * may be NULL) are OVERWRITTEN. For self-attention (key == value == NULL)
 * dquery receives the gradient of the one shared input and dkey/dvalue must
 * be NULL. The forward activations (projections, attention and its per-row
 * LSE) are recomputed rather than stored; workspace is O(B·L·E + B·S'·E)
 * plus mask copies. opts->weights and per_head_weights are ignored.
 *
 * Masks combine as additive floats (bool blocked = -inf) and are summed: the
 * rule of torch >= 2.0. torch 1.13 differs only for a float key_padding_mask
 * next to an attn_mask (it treats the padding mask as boolean, or drops it).
 */
attn_status attn_mha_backward(attn_mha *m, const attn_tensor *query, const attn_tensor *key,
                              const attn_tensor *value, const attn_tensor *dout,
                              attn_tensor *dquery, attn_tensor *dkey, attn_tensor *dvalue,
                              const attn_mha_opts *opts, attn_error *err);

/* ----------------------------------------------------------------- files */

/* An owned array read from a file; free with attn_array_free. Data is
 * float32 (other float and integer types are converted) or bool. */
typedef struct {
    char *name; /* tensor name (safetensors), NULL for .npy */
    attn_tensor t;
    char file_dtype[12]; /* the element type in the file: "<f4", "<i8", "BF16", ... */
    int64_t inexact;     /* integers float32 could not hold exactly (rounded), 0 if none */
} attn_array;

void attn_array_free(attn_array *a);

/* .npy versions 1.0/2.0/3.0; <f4, |b1, and <f8, <f2, signed and unsigned
 * integers of 1 to 8 bytes converted to float32 (integers above 2^24 may
 * round: see attn_array.inexact). Fortran order is read (converted to C
 * order). From a pipe, memory grows only as data arrives. */
attn_status attn_npy_read(const char *path, attn_array *out, attn_error *err);
/* Writes float32 (<f4), float16 (<f2) or bool (|b1), through a temporary
 * file and rename (bfloat16 has no .npy type: ATTN_ERR_DTYPE). */
attn_status attn_npy_write(const char *path, const attn_tensor *t, attn_error *err);

/* .safetensors: F32, F64, F16, BF16 and I8..I64, U8..U64 read (as float32),
 * BOOL read; F32, BF16, F16 and BOOL written. Tensors are returned in data
 * order. (A 16-bit file read as float32 converts back with
 * attn_tensor_convert exactly.) */
typedef struct {
    attn_array *arrays;
    size_t count;
} attn_safetensors;

attn_status attn_safetensors_read(const char *path, attn_safetensors *out, attn_error *err);
void attn_safetensors_free(attn_safetensors *st);
/* NULL if absent. */
const attn_array *attn_safetensors_find(const attn_safetensors *st, const char *name);
/* Writes the named tensors (any strides) atomically (temporary file + rename). */
attn_status attn_safetensors_write(const char *path, const char *const *names,
                                   const attn_tensor *tensors, size_t count, attn_error *err);

/* ----------------------------------------------------------- output sets */

/*
 * Several output files written all or nothing. attn_outputs_add checks a
 * destination at once, before anything is computed: symlinks are followed
 * (the target is replaced, the link kept); a directory, FIFO, device, socket
 * or read-only file is refused; "-" means standard output; two paths naming
 * the same file (by device and inode, or directory and name) are refused.
 * Each output is written to a temporary file in its target's directory.
 * attn_outputs_commit moves them all into place, keeping each replaced
 * file's mode (and, for root, owner): if any move fails the others are
 * undone, so every destination ends up with its new content or with exactly
 * what it held before. attn_outputs_free without a commit removes every
 * temporary file. Temporary files are named DIR/.attn-PID-N.tmp (and
 * .attn-PID-N.old for a replaced file while a commit runs).
 * A set is used by one thread at a time.
 */
#define ATTN_MAX_OUTPUTS 32

typedef struct attn_outputs attn_outputs;

attn_status attn_outputs_create(attn_outputs **out, attn_error *err);
/* Adds a destination; *index (may be NULL) receives its number, 0, 1, ... */
attn_status attn_outputs_add(attn_outputs *o, const char *path, int *index, attn_error *err);
/* One encoded file per output (.npy, .safetensors, a model checkpoint as
 * attn_model_save writes it), or raw bytes appended by any number of calls. */
attn_status attn_outputs_write_npy(attn_outputs *o, int index, const attn_tensor *t,
                                   attn_error *err);
attn_status attn_outputs_write_safetensors(attn_outputs *o, int index, const char *const *names,
                                           const attn_tensor *tensors, size_t count,
                                           attn_error *err);
struct attn_model;
attn_status attn_outputs_write_model(attn_outputs *o, int index, struct attn_model *m,
                                     attn_error *err);
attn_status attn_outputs_write_bytes(attn_outputs *o, int index, const void *data, size_t size,
                                     attn_error *err);
attn_status attn_outputs_commit(attn_outputs *o, attn_error *err);
/* Removes what was not committed, then frees. NULL is fine. */
void attn_outputs_free(attn_outputs *o);
/* Only unlinks the temporary files (async-signal-safe): for a SIGINT/SIGTERM
 * handler, which then ends the process without calling attn_outputs_free. */
void attn_outputs_remove_temporaries(const attn_outputs *o);

/* -------------------------------------------------------- training: layers */

/*
 * What training needs around MHA: a few layers, optimizers, two synthetic
 * tasks, a small model and a training loop. Conventions as above: each layer
 * is a forward/backward pair with mirrored signatures; backward OVERWRITES
 * input gradients and ACCUMULATES parameter gradients. Token ids and targets
 * are int32; a negative id is an empty slot (embedding) or an ignored row
 * (cross-entropy). Matrices given to these layers need unit stride in their
 * last dimension (rows may be strided). Everything is deterministic: the
 * same inputs give bit-identical results for any num_threads (0 = default).
 */

/* Token embedding, summed over slots (torch nn.Embedding when slots == 1):
 *   table (V,E), tokens (T,slots) contiguous int32, out (T,E)
 *   out[t] = Σ_s table[tokens[t,s]] over the slots with an id >= 0
 *            (0 if a row has none). An id >= V is an error. */
attn_status attn_embedding_forward(const attn_tensor *table, const int32_t *tokens,
                                   int64_t slots, attn_tensor *out, attn_error *err);
/* dtable (V,E) ACCUMULATES Σ over (t,s) with tokens[t,s] = v of dout[t]. */
attn_status attn_embedding_backward(const attn_tensor *dout, const int32_t *tokens,
                                    int64_t slots, attn_tensor *dtable, attn_error *err);

/* Sinusoidal positional encoding (Vaswani et al. 2017), no parameters:
 *   x, out (N,E) or (B,N,E); out = x + PE, PE[n,2i] = sin(n / 10000^(2i/E)),
 *   PE[n,2i+1] = cos(n / 10000^(2i/E)). out may be x (in place). */
attn_status attn_posenc_forward(const attn_tensor *x, attn_tensor *out, attn_error *err);
/* dx = dout (OVERWRITTEN; dx may be dout). */
attn_status attn_posenc_backward(const attn_tensor *dout, attn_tensor *dx, attn_error *err);

/* Linear (torch nn.Linear): x (T,in), w (out,in), b (out) or NULL, y (T,out)
 *   y = x·wᵀ + b. */
attn_status attn_linear_forward(const attn_tensor *x, const attn_tensor *w, const attn_tensor *b,
                                attn_tensor *y, int num_threads, attn_error *err);
/* dx (T,in) OVERWRITTEN (may be NULL); dw (out,in) and db (out) ACCUMULATE
 * (db may be NULL). */
attn_status attn_linear_backward(const attn_tensor *x, const attn_tensor *w, const attn_tensor *dy,
                                 attn_tensor *dx, attn_tensor *dw, attn_tensor *db,
                                 int num_threads, attn_error *err);

/* Softmax cross-entropy (torch F.cross_entropy, mean reduction):
 *   logits (T,C), targets (T) int32 in [0,C) or negative = ignored.
 *   loss = mean over counted rows of logsumexp(logits[t]) - logits[t,target];
 *   0 when no row counts. correct (optional) = rows whose argmax (first
 *   maximum) is the target. */
attn_status attn_cross_entropy_forward(const attn_tensor *logits, const int32_t *targets,
                                       float *loss, int64_t *correct, attn_error *err);
/* dlogits (T,C) OVERWRITTEN = dloss · (softmax(logits) - onehot(target)) / count,
 * zero on ignored rows. dlogits may be logits. */
attn_status attn_cross_entropy_backward(const attn_tensor *logits, const int32_t *targets,
                                        float dloss, attn_tensor *dlogits, attn_error *err);

/* ------------------------------------------------------------- optimizers */

/* torch.optim.SGD (dampening 0, no Nesterov): g = grad + weight_decay·p;
 * buf = momentum·buf + g (buf starts at 0, so the first step gives buf = g);
 * p -= lr·buf. momentum_buf (n) may be NULL when momentum == 0. */
typedef struct {
    float momentum;
    float weight_decay;
} attn_sgd_opts;

attn_status attn_sgd_step(float *param, const float *grad, float *momentum_buf, size_t n,
                          float lr, const attn_sgd_opts *opts, attn_error *err);

/* torch.optim.AdamW (decoupled weight decay): p *= 1 - lr·weight_decay;
 * m = β1·m + (1-β1)·g; v = β2·v + (1-β2)·g²;
 * p -= (lr / (1-β1^t)) · m / (sqrt(v) / sqrt(1-β2^t) + eps).
 * m and v (n each) start at 0; step t counts from 1. */
typedef struct {
    float beta1, beta2, eps, weight_decay;
} attn_adamw_opts;

/* torch's defaults: 0.9, 0.999, 1e-8, 0.01. */
attn_adamw_opts attn_adamw_opts_default(void);
attn_status attn_adamw_step(float *param, const float *grad, float *m, float *v, size_t n,
                            int64_t t, float lr, const attn_adamw_opts *opts, attn_error *err);

/* torch.nn.utils.clip_grad_norm_: the L2 norm of all segments together
 * (grads[i] has counts[i] floats) is returned in *norm (accumulated in
 * double, in a fixed order); if it exceeds max_norm every gradient is
 * multiplied by max_norm / (norm + 1e-6). max_norm <= 0 only measures. */
attn_status attn_clip_grad_norm(float *const *grads, const size_t *counts, size_t nseg,
                                float max_norm, float *norm, attn_error *err);

/* Learning rate at step (0-based) of total: linear warmup from peak/warmup to
 * peak over the first `warmup` steps, then cosine decay to min_lr at the
 * last step. */
float attn_lr_warmup_cosine(int64_t step, int64_t warmup, int64_t total, float peak_lr,
                            float min_lr);

/* ------------------------------------------------------------------ tasks */

/*
 * Synthetic tasks where attention is the right tool. Every position holds
 * ATTN_TASK_SLOTS token ids (summed by the embedding, -1 = empty). Keys are
 * ids [0, num_keys), values [num_keys, num_keys + num_values).
 *
 * ATTN_TASK_RECALL (associative recall): num_pairs entries, each a distinct
 *   key and a value in ONE position, then a query position holding a key
 *   that occurs among the entries. Target: the value stored under it
 *   (class = value index). seq_len = num_pairs + 1.
 * ATTN_TASK_RECALL_PREV: the same entries, then a lone value u, then the
 *   query key. Target: the pair (value under the query key, u), class =
 *   value·num_values + u. One head must match keys, another copy the
 *   previous position. seq_len = num_pairs + 2.
 */
#define ATTN_TASK_SLOTS 2

typedef enum {
    ATTN_TASK_RECALL = 0,
    ATTN_TASK_RECALL_PREV,
} attn_task_kind;

typedef struct {
    attn_task_kind kind;
    int32_t num_keys;   /* >= num_pairs */
    int32_t num_values; /* >= 2 */
    int32_t num_pairs;  /* >= 1 */
} attn_task;

attn_status attn_task_check(const attn_task *task, attn_error *err);
int64_t attn_task_seq_len(const attn_task *task);
int64_t attn_task_vocab_size(const attn_task *task);
int64_t attn_task_num_classes(const attn_task *task);
/* "recall" / "recall-prev"; NULL for an unknown kind. */
const char *attn_task_name(attn_task_kind kind);
/* Kind by name; false if unknown. */
bool attn_task_from_name(const char *name, attn_task_kind *kind);

/* Examples [first, first+count) of the stream `seed`: example i is a pure
 * function of (task, seed, i). tokens (count, seq_len, ATTN_TASK_SLOTS),
 * targets (count). */
attn_status attn_task_generate(const attn_task *task, uint64_t seed, int64_t first,
                               int64_t count, int32_t *tokens, int32_t *targets, attn_error *err);
/* A short label for a token id ("k3", "v12") or a class ("v5", "v5,v2"). */
void attn_task_token_label(const attn_task *task, int32_t id, char *buf, size_t size);
void attn_task_class_label(const attn_task *task, int32_t cls, char *buf, size_t size);

/* ------------------------------------------------------------------ model */

/*
 * The small model the tasks train:
 *   tokens (B,N,SLOTS) → x = embedding (B,N,E) (+ sinusoidal positions)
 *   → MHA(query = x[:, N-1:N], key = value = x) (B,1,E): the query
 *     position's row of self-attention, the only row the head reads
 *   → linear head (B,C) → cross-entropy.
 * Parameters, in order and under torch state_dict names of
 * `embedding = nn.Embedding(V,E); mha = nn.MultiheadAttention(E,H,
 * batch_first=True); head = nn.Linear(E,C)`: embedding.weight (V,E),
 * mha.<MHA parameters>, head.weight (C,E), head.bias (C).
 */
typedef struct {
    attn_task task;
    int64_t embed_dim;
    int64_t num_heads;
    bool positional_encoding; /* add sinusoidal positions to the embeddings */
    bool unscaled;            /* scores q·k without 1/sqrt(d_k) (ablation) */
} attn_model_config;

typedef struct attn_model attn_model;

attn_status attn_model_create(const attn_model_config *cfg, attn_model **out, attn_error *err);
void attn_model_free(attn_model *m);
const attn_model_config *attn_model_get_config(const attn_model *m);
/* The attention layer (owned by the model). */
attn_mha *attn_model_mha(attn_model *m);
/* Embedding N(0,1) like torch, MHA as attn_mha_init, head like nn.Linear;
 * all from `seed` (attn's generator). */
void attn_model_init(attn_model *m, uint64_t seed);

int attn_model_num_params(const attn_model *m);
attn_status attn_model_param_at(attn_model *m, int i, const char **name, attn_tensor *value,
                                attn_tensor *grad);
void attn_model_zero_grad(attn_model *m);

/* Forward on tokens (batch, seq_len, SLOTS). logits (batch, C) optional;
 * with targets (batch) also the mean loss and the number of correct argmax
 * predictions (each optional). Keeps the activations for attn_model_backward
 * (so a model is not shared between concurrent calls). */
attn_status attn_model_forward(attn_model *m, const int32_t *tokens, const int32_t *targets,
                               int64_t batch, attn_tensor *logits, float *loss, int64_t *correct,
                               int num_threads, attn_error *err);
/* Gradient of the mean loss of the last forward (same tokens and targets)
 * ACCUMULATED into the parameter gradients. */
attn_status attn_model_backward(attn_model *m, const int32_t *tokens, const int32_t *targets,
                                int64_t batch, int num_threads, attn_error *err);
/* Per-head attention of one example's query (last) position over its N
 * positions: weights (H, N). */
attn_status attn_model_attention(attn_model *m, const int32_t *tokens, attn_tensor *weights,
                                 int num_threads, attn_error *err);

/* Checkpoint: the parameters under their names plus config.* scalars
 * (config.task, config.num_keys, config.num_values, config.num_pairs,
 * config.num_heads, config.positional_encoding, config.unscaled). */
attn_status attn_model_save(attn_model *m, const char *path, attn_error *err);
attn_status attn_model_load(const char *path, attn_model **out, attn_error *err);

/* --------------------------------------------------------------- training */

typedef enum {
    ATTN_OPTIM_ADAMW = 0,
    ATTN_OPTIM_SGD,
} attn_optimizer;

typedef struct {
    attn_model_config model;
    attn_optimizer optimizer;
    int64_t steps;
    int64_t batch_size;
    int64_t warmup_steps;
    float lr, min_lr;        /* peak and final learning rate */
    float momentum;          /* SGD */
    attn_adamw_opts adamw;   /* AdamW (its weight_decay also used by SGD) */
    float clip_norm;         /* <= 0: no clipping */
    uint64_t seed;           /* initialisation and training examples */
    uint64_t heldout_seed;   /* the held-out stream (must differ from seed) */
    int64_t heldout_size;
    int64_t eval_every;      /* held-out evaluation period in steps (0 = only at the end) */
    int num_threads;
} attn_train_config;

/* The settings `attn train --task NAME` starts from (the CLI then runs on one
 * thread unless --threads is given). */
attn_train_config attn_train_config_default(attn_task_kind kind);

typedef struct {
    int64_t step;             /* steps done, 1..total */
    int64_t total_steps;
    float loss;               /* mean training loss of this step's batch */
    float accuracy;           /* training accuracy of this step's batch */
    float lr;                 /* learning rate used by this step */
    float grad_norm;          /* before clipping */
    float heldout_accuracy;   /* NaN unless evaluated after this step */
    float heldout_loss;       /* NaN unless evaluated after this step */
} attn_train_progress;

/* Called after every step; return false to stop early. */
typedef bool (*attn_train_callback)(const attn_train_progress *p, void *user);

typedef struct {
    int64_t steps;
    float final_loss;          /* training loss of the last step */
    float heldout_accuracy;
    float heldout_loss;
    int64_t skipped_examples;  /* training examples dropped for equalling a held-out one */
} attn_train_result;

/* Accuracy and mean loss of a model on examples [0, count) of a stream. */
attn_status attn_model_evaluate(attn_model *m, uint64_t seed, int64_t count, float *accuracy,
                                float *loss, int num_threads, attn_error *err);

/* Trains a new model (returned in *model, free with attn_model_free). Held-out
 * examples are never trained on: a training example equal to one of them is
 * skipped. The loss curve depends only on cfg, never on num_threads. */
attn_status attn_train(const attn_train_config *cfg, attn_train_callback callback, void *user,
                       attn_model **model, attn_train_result *result, attn_error *err);

/* -------------------------------------------------------- random numbers */

/* attn's seeded generator: xoshiro256** (Blackman & Vigna) seeded through
 * splitmix64. The same seed gives the same numbers on every platform and
 * build (it is not torch's stream). The library initialises parameters with
 * it; programs on attn.h (the CLI among them) can share it. */
typedef struct {
    uint64_t s[4];
} attn_rng;

void attn_rng_seed(attn_rng *r, uint64_t seed);
/* Next 64 random bits. */
uint64_t attn_rng_u64(attn_rng *r);
/* Uniform double in [0, 1) with 53 random bits. */
double attn_rng_uniform(attn_rng *r);
/* Standard normal N(0, 1) (Box–Muller; one draw per call). */
double attn_rng_normal(attn_rng *r);

/* ----------------------------------------------------------- runtime info */

/* The instruction set the fused kernels use: "avx512", "avx2", "generic", or
 * "reference" when ATTN_ARCH=reference. */
const char *attn_isa(void);
/* Threads a call with num_threads = 0 uses. Under a finite RLIMIT_AS (or,
 * for non-root, RLIMIT_NPROC) a call first creates the OpenMP threads it
 * will use, keeping half the free address space for its own allocations,
 * and uses fewer if they do not fit: OpenMP would otherwise end the
 * process. Results do not depend on the count. (Each calling thread keeps
 * a note of the team it created, the one piece of per-thread state.) */
int attn_default_threads(void);

#ifdef __cplusplus
}
#endif
#endif /* ATTN_H */
