/*
 * attn/kvcache.h — the KV cache (contiguous or paged) and attention
 * of new queries over it (decode).
 *
 * Part of libattn's public API; include <attn.h> for all of it. Conventions
 * (status codes, attn_error, strided views, backward overwrites inputs'
 * gradients) are described in attn/core.h.
 */
#ifndef ATTN_KVCACHE_H
#define ATTN_KVCACHE_H

#include "attn/sdpa.h"

#ifdef __cplusplus
extern "C" {
#endif

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
 *     attn_kvcache_set_block_table lets the caller choose instead.
 *
 * Shared prefixes (paged): a block carries a reference count, the number of
 * block tables pointing at it. attn_kvcache_fork gives an empty entry the
 * parent's table (every block's count + 1): the child holds the parent's
 * keys without a copy. An append that would write into a block another
 * table also points at copies that block first (copy-on-write) and writes
 * the copy; full shared blocks are only read. Shortening, resetting or
 * remapping an entry releases its references; a block returns to the pool
 * when its count reaches 0. attn_kvcache_attend attends the keys entries
 * share once for all of them (cascade, see there).
 */
/*
 * Quantized storage (attn_kvcache_config.quant), written by append and read
 * by attend in place, dequantized inside the decode kernel:
 *   ATTN_KV_INT8      one int8 per element and one float32 scale per
 *                     (token, kv head) row, symmetric: s = max|x| / 127,
 *                     q = round_half_even(x / s) (0 when s = 0); the value
 *                     is s·q. A row holding inf or NaN reads back as NaN.
 *   ATTN_KV_FP8_E4M3  one fp8 e4m3 byte per element (the OCP "e4m3fn"
 *                     format: bias 7, no infinities, ±448 largest, NaN
 *                     0x7f/0xff) of x / scale_h with a per-kv-head scale
 *                     (k_scale, v_scale; 1 by default), saturating at ±448
 *                     and rounding to nearest even (vLLM's fp8 KV cache); the
 *                     value is scale_h·e4m3. NaN stays NaN.
 *   ATTN_KV_Q4_0      ggml's q4_0 layout: each row in blocks of 32 values,
 *                     a block 18 bytes: its float16 scale d, then 16 bytes
 *                     whose low nibbles are values 0..15 and high nibbles
 *                     16..31, code c in 0..15 meaning (c - 8)·d. Symmetric:
 *                     m = the block's value of largest magnitude, d =
 *                     float16(m / -8) (clamped to ±65504), c - 8 =
 *                     round_half_even(x / d) clamped to [-8, 7] (all 8 when
 *                     d = 0). D and Dv must be multiples of 32. A block
 *                     holding inf or NaN reads back as NaN.
 * Bytes per token and kv head: int8 D + 4 (keys) and Dv + 4 (values);
 * fp8 D and Dv; q4_0 18·D/32 and 18·Dv/32.
 */
typedef enum {
    ATTN_KV_FLOAT = 0,    /* floats of attn_kvcache_config.dtype */
    ATTN_KV_INT8 = 1,
    ATTN_KV_FP8_E4M3 = 2,
    ATTN_KV_Q4_0 = 3,
} attn_kv_quant;

typedef struct {
    int64_t batch;      /* B >= 1 */
    int64_t kv_heads;   /* Hkv >= 1 */
    int64_t capacity;   /* tokens per entry, >= 1 */
    int64_t head_dim;   /* D >= 1 */
    int64_t value_dim;  /* Dv; 0 = head_dim */
    int64_t block_size; /* 0: contiguous; > 0: paged, tokens per block */
    int64_t num_blocks; /* paged pool size; 0 = B·ceil(capacity / block_size) */
    attn_dtype dtype;   /* storage: ATTN_F32 (0, the default), ATTN_BF16 or ATTN_F16 */
    attn_kv_quant quant; /* ATTN_KV_FLOAT (0): dtype; else quantized (dtype must be ATTN_F32) */
    /* ATTN_KV_FP8_E4M3: (Hkv) per-kv-head scales of keys and values, each
     * finite and > 0; NULL = 1. Copied at creation (get_config points at
     * the copies). Ignored by the other storages. */
    const float *k_scale, *v_scale;
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
 * forgets the tail (paged: the entry's references to blocks past the new
 * length are released), longer exposes what the storage holds there (zeros
 * never written; paged: new blocks come zeroed; a shared block's tail
 * shows what its other holders wrote). All or nothing.
 */
attn_status attn_kvcache_set_lengths(attn_kvcache *cache, const int64_t *lengths,
                                     attn_error *err);

/*
 * Paged only. Entry `child` takes entry `parent`'s keys by sharing its
 * blocks: the child's block table becomes a copy of the parent's (each
 * block's reference count + 1) and its length the parent's. Appends to
 * either afterwards never change what the other reads (copy-on-write).
 * The child must be empty (length 0, no blocks: attn_kvcache_reset) and
 * differ from the parent. To share only the first n tokens, fork and
 * shorten the child (attn_kvcache_set_lengths).
 */
attn_status attn_kvcache_fork(attn_kvcache *cache, int64_t parent, int64_t child,
                              attn_error *err);
/*
 * Empties entry b (length 0); paged: releases its references to its blocks.
 * The other entries are untouched.
 */
attn_status attn_kvcache_reset(attn_kvcache *cache, int64_t b, attn_error *err);
/*
 * Paged only: the number of block tables pointing at pool block `block`
 * (0 = free); -1 for a contiguous cache or a block outside the pool.
 */
int64_t attn_kvcache_block_refs(const attn_kvcache *cache, int64_t block);
/* Paged only: free pool blocks (count 0); -1 for a contiguous cache. */
int64_t attn_kvcache_free_blocks(const attn_kvcache *cache);

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
 * repeated, each free or already in entry b's table (blocks reach other
 * entries only through attn_kvcache_fork). The entry's references to its
 * previous blocks are released. All or nothing.
 */
attn_status attn_kvcache_set_block_table(attn_kvcache *cache, int64_t b, const int32_t *table,
                                         int64_t n, attn_error *err);

/*
 * Contiguous float storage only: views of entry b's current keys (1, Hkv, length_b, D) and
 * values (1, Hkv, length_b, Dv) into the storage (either may be NULL).
 */
attn_status attn_kvcache_view(const attn_kvcache *cache, int64_t b, attn_tensor *k,
                              attn_tensor *v, attn_error *err);

/*
 * Copies entry b's current keys into k (1, Hkv, length_b, D) and values into
 * v (1, Hkv, length_b, Dv) (either may be NULL), any float dtype: the values
 * attention reads, dequantized (scale·q) for a quantized cache and converted
 * as attn_tensor_convert. Works on every layout and storage.
 */
attn_status attn_kvcache_read(const attn_kvcache *cache, int64_t b, attn_tensor *k,
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
 * Decoding shapes (at most 32 query rows per kv head: Hq/Hkv·Nq <= 32; an
 * entry of 512 keys or more) with
 * opts->path AUTO are read by the decode kernel where its AVX-512 table
 * runs, float caches too: within float32 roundings of attn_sdpa, the same
 * bits for every thread count. Otherwise (and always with
 * ATTN_PATH_FUSED or ATTN_PATH_REFERENCE) contiguous float caches give
 * exactly attn_sdpa's bits on the entry's view. A paged float entry whose
 * blocks are consecutive in the pool is one view too (the same bits);
 * quantized caches (int8, fp8, q4_0) are always read by the decode kernel,
 * in chunks that follow the blocks, so their bits depend on the block size
 * within the bound below; otherwise each run of consecutive blocks is attended
 * separately and the partial results are merged with their softmax
 * statistics (m, ll) in double precision, first block to last: the same
 * for every thread count, and within a few float32 roundings of the
 * contiguous result (tests/test_kvcache.c asserts |paged - contiguous| <=
 * 8·FLT_EPSILON·max|V|; 1.5 measured).
 *
 * Cascade. Entries whose block tables start with the same pool blocks
 * (forked) are grouped: the leading keys every member shares and every
 * query sees are attended once per group with all members' queries
 * (a (members·Hq/Hkv·Nq × shared keys) problem per kv head, the keys read
 * once instead of once per entry), each entry's remaining keys separately,
 * and the two merged with their softmax statistics in double as above.
 * This is automatic because the sharing is the cache's own state (the
 * caller would only restate the block tables) and every caller of a
 * forked cache gains from it. Not split: calls with a window or ALiBi
 * (visibility and bias then differ per entry over the shared keys), and
 * caches where no two entries share a first block. The result is within
 * the same few float32 roundings of the unshared one (tests/test_kvprefix.c
 * compares it with float64 attention over the same keys), the same for
 * every thread count.
 */
attn_status attn_kvcache_attend(const attn_kvcache *cache, const attn_tensor *q,
                                attn_tensor *out, attn_tensor *lse, const attn_sdpa_opts *opts,
                                attn_error *err);

/*
 * flash_attn_with_kvcache in one call: appends k_new (B, Hkv, n, D) and
 * v_new (B, Hkv, n, Dv) as attn_kvcache_append (counts as there; both NULL:
 * nothing appended), then attends q (B, Hq, Nq, D) as attn_kvcache_attend.
 * With rope (may be NULL), the new keys are rotated before they are stored,
 * token t of entry b at position length_b + t, and the queries before they
 * attend, query i at position length_b + i (length_b: the entry's length
 * before this call, FlashAttention's cache_seqlens); the caller's tensors
 * are not modified. Every argument is checked before the cache changes;
 * the append is not undone if attending fails for want of memory.
 */
attn_status attn_kvcache_update_attend(attn_kvcache *cache, const attn_tensor *q,
                                       const attn_tensor *k_new, const attn_tensor *v_new,
                                       const int64_t *counts, const attn_rope *rope,
                                       attn_tensor *out, attn_tensor *lse,
                                       const attn_sdpa_opts *opts, attn_error *err);

/*
 * Which cache entries a call's batch reads: flash_attn_with_kvcache's
 * cache_batch_idx and cache_leftpad. Either pointer may be NULL.
 *   cache_batch_idx  (Bq) batch entry b of q, out, lse (and k_new, v_new,
 *                    counts) uses cache entry cache_batch_idx[b], each in
 *                    [0, B); Bq = q's batch size, any >= 1. Entries may
 *                    repeat when nothing is appended. NULL: entry b, Bq = B.
 *   cache_leftpad    (Bq) keys at positions before cache_leftpad[b] are not
 *                    attended (each in [0, length]; length after the
 *                    append). Causal alignment, windows, ALiBi distances
 *                    and rotary positions stay those of the cache
 *                    positions: leftpad only hides keys. NULL: 0.
 */
typedef struct {
    const int64_t *cache_batch_idx;
    const int64_t *cache_leftpad;
} attn_kvcache_batch;

/* attn_kvcache_attend with batch (NULL: as attn_kvcache_attend). */
attn_status attn_kvcache_attend_batch(const attn_kvcache *cache, const attn_tensor *q,
                                      attn_tensor *out, attn_tensor *lse,
                                      const attn_sdpa_opts *opts, const attn_kvcache_batch *batch,
                                      attn_error *err);
/* attn_kvcache_update_attend with batch (NULL: as attn_kvcache_update_attend);
 * appending refuses a cache_batch_idx that names an entry twice. */
attn_status attn_kvcache_update_attend_batch(attn_kvcache *cache, const attn_tensor *q,
                                             const attn_tensor *k_new, const attn_tensor *v_new,
                                             const int64_t *counts, const attn_rope *rope,
                                             const attn_kvcache_batch *batch, attn_tensor *out,
                                             attn_tensor *lse, const attn_sdpa_opts *opts,
                                             attn_error *err);

#ifdef __cplusplus
}
#endif
#endif /* ATTN_KVCACHE_H */
