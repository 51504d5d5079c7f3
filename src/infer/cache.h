/*
 * The KV cache's storage, shared by the files of src/infer: kvcache.c
 * (creation, appends, lengths), pool.c (the paged block pool: reference
 * counts, block tables, forks, copy-on-write), batch.c (cache_batch_idx and
 * cache_leftpad as a view), cascade.c (shared prefixes attended once),
 * attend.c (validation and the
 * attn_sdpa path of float caches), decode.c + decode_rows*.c (the kernel
 * that reads quantized storage in place), quant.c (the formats) and
 * update.c (append and attend in one call, with rotary embeddings).
 *
 * Storage rows (one token of one kv head, D or Dv elements):
 *   contiguous  K (B, Hkv, capacity, D), V (B, Hkv, capacity, Dv)
 *   paged       K (Hkv, num_blocks·block_size, D), V (Hkv, ..., Dv): pool
 *               block p of kv head h holds tokens [p·bs, (p+1)·bs) of that
 *               head's rows, so blocks with consecutive pool indices form one
 *               contiguous (Hkv, n, D) view with strides (pool rows·D, D, 1).
 * An int8 cache keeps one float32 scale per row beside the rows (k_rs, v_rs,
 * indexed by row number); an fp8 cache one scale per kv head (k_hs, v_hs);
 * a q4_0 row holds its blocks' scales itself (kv_format_row_bytes).
 */
#ifndef ATTN_INFER_CACHE_H
#define ATTN_INFER_CACHE_H

#include "../core/internal.h"

#include <stdbool.h>
#include <stdint.h>

/* What one storage row holds, as the decode kernel reads it. KV_E4M3_FINITE
 * is e4m3 known to hold no NaN code, read as value·2^-8 (a float16 with the
 * same bits shifted: cheaper than the exact widening; the caller multiplies
 * the scale by 2^8). */
typedef enum { KV_F32, KV_BF16, KV_F16, KV_I8, KV_E4M3, KV_E4M3_FINITE, KV_Q4_0 } kv_format;

enum { KV_Q4_BLOCK = 32, KV_Q4_BLOCK_BYTES = 18 }; /* q4_0: values and bytes per block */

/* Bytes of one storage row of `width` elements in format f. */
static inline int64_t kv_format_row_bytes(kv_format f, int64_t width)
{
    if (f == KV_Q4_0) return width / KV_Q4_BLOCK * KV_Q4_BLOCK_BYTES;
    return width * (f == KV_F32 ? 4 : f == KV_BF16 || f == KV_F16 ? 2 : 1);
}

struct attn_kvcache {
    attn_kvcache_config cfg;
    kv_format fmt;
    void *k, *v;        /* storage rows */
    size_t elem;        /* bytes per element (q4_0: 1, rows are kv_format_row_bytes) */
    float *k_rs, *v_rs; /* int8: one scale per row */
    float *k_hs, *v_hs; /* fp8: (Hkv) per-head scales (cfg.k_scale/v_scale point here) */
    int64_t *len;       /* (B) current lengths */
    bool k_nonfinite, v_nonfinite; /* an append stored an inf or NaN key / value (sticky) */
    /* paged */
    int64_t max_blocks; /* per entry: ceil(capacity / block_size) */
    int32_t *table;     /* (B, max_blocks) pool index of each logical block */
    int64_t *nblk;      /* (B) blocks mapped */
    int32_t *refs;      /* (num_blocks) block tables pointing at the block; 0 = free */
    /* A view (cascade.c, batch.c) is a shallow copy of a cache whose entry b
     * reads storage entry entry_of[b] from position first[b] on: its own
     * batch, len (the visible keys) and these maps; attention only. NULL
     * maps = the identity and 0. */
    const int64_t *entry_of, *first;
};

static inline bool kv_paged(const attn_kvcache *c) { return c->cfg.block_size > 0; }

/* ceil(a / b) for a >= 0, b > 0, without the overflow of a + b - 1. */
static inline int64_t kv_ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

/* Rows of one kv head in the pool (create checked the product). */
static inline int64_t kv_pool_rows(const attn_kvcache *c)
{
    return c->cfg.num_blocks * c->cfg.block_size;
}

/* Rows from one kv head to the next in the storage. */
static inline int64_t kv_head_rows(const attn_kvcache *c)
{
    return kv_paged(c) ? kv_pool_rows(c) : c->cfg.capacity;
}

/* The storage entry entry b reads, and its position 0 in that entry. */
static inline int64_t kv_entry(const attn_kvcache *c, int64_t b)
{
    return c->entry_of ? c->entry_of[b] : b;
}
static inline int64_t kv_first(const attn_kvcache *c, int64_t b)
{
    return c->first ? c->first[b] : 0;
}

/* Entry b's block table (paged). */
static inline const int32_t *kv_table(const attn_kvcache *c, int64_t b)
{
    return c->table + kv_entry(c, b) * c->max_blocks;
}

/* Storage row of entry b, kv head h, position pos. */
static inline int64_t kv_row(const attn_kvcache *c, int64_t b, int64_t h, int64_t pos)
{
    const attn_kvcache_config *g = &c->cfg;
    pos += kv_first(c, b);
    if (!kv_paged(c)) return (kv_entry(c, b) * g->kv_heads + h) * g->capacity + pos;
    const int64_t blk = kv_table(c, b)[pos / g->block_size];
    return h * kv_pool_rows(c) + blk * g->block_size + pos % g->block_size;
}

/* Positions from pos to the end of its paged block (INT64_MAX contiguous). */
static inline int64_t kv_block_left(const attn_kvcache *c, int64_t b, int64_t pos)
{
    if (!kv_paged(c)) return INT64_MAX;
    const int64_t bs = c->cfg.block_size;
    return bs - (pos + kv_first(c, b)) % bs;
}

/* End of the run of consecutive storage rows that holds position j0 of
 * entry b: positions [j0, end) are one strided view (at most len[b]). */
static inline int64_t kv_run_end(const attn_kvcache *c, int64_t b, int64_t j0)
{
    const int64_t L = c->len[b];
    if (!kv_paged(c) || j0 >= L) return L;
    const int64_t bs = c->cfg.block_size, f = kv_first(c, b);
    const int32_t *tab = kv_table(c, b);
    int64_t blk = (j0 + f) / bs;
    while ((blk + 1) * bs - f < L && tab[blk + 1] == tab[blk] + 1) blk++;
    const int64_t end = (blk + 1) * bs - f;
    return end < L ? end : L;
}

/* Start of storage row `row` of K (v false) or V. */
static inline void *kv_row_data(const attn_kvcache *c, bool v, int64_t row)
{
    return (char *)(v ? c->v : c->k) +
           row * kv_format_row_bytes(c->fmt, v ? c->cfg.value_dim : c->cfg.head_dim);
}

static inline bool kv_quantized(const attn_kvcache *c) { return c->fmt >= KV_I8; }

/* ---- pool.c: the paged block pool ---- */

/* Free blocks (reference count 0). */
int64_t kv_pool_free(const attn_kvcache *c);
/* Maps fresh zeroed blocks to entry b until it has `want` (planned). */
void kv_pool_grow(attn_kvcache *c, int64_t b, int64_t want);
/* Releases entry b's references past its first `keep` blocks. */
void kv_pool_shrink(attn_kvcache *c, int64_t b, int64_t keep);
/* Before writing positions [from, to) of entry b: each mapped block there
 * that another table also holds is replaced by a private copy (planned). */
void kv_pool_unshare(attn_kvcache *c, int64_t b, int64_t from, int64_t to);
/* Blocks an operation takes (*need) and the blocks free for it (*avail):
 * every entry first keeps only keep[b] blocks (NULL: all), then (from not
 * NULL) copies the shared blocks a write of [from[b], to[b]) touches, then
 * grows to cover to[b] positions. */
attn_status kv_pool_plan(const attn_kvcache *c, const int64_t *from, const int64_t *to,
                         const int64_t *keep, int64_t *need, int64_t *avail, attn_error *err);

/* ---- kvcache.c ---- */

/* attn_kvcache_append where batch entry i of k, v (and counts) goes to
 * cache entry entry_of[i] (NULL: i; k's batch any >= 1, no entry twice). */
attn_status kv_append(attn_kvcache *cache, const attn_tensor *k, const attn_tensor *v,
                      const int64_t *counts, const int64_t *entry_of, attn_error *err);

/* ---- batch.c ---- */

/* The view of cache that q's batch reads under batch (attn/kvcache.h;
 * NULL or empty: the cache itself, *ints NULL). added[i] (may be NULL):
 * tokens about to be appended to batch entry i, for checking leftpad
 * against the length after. *ints (free it after) holds the view's arrays. */
attn_status kv_batch_view(const attn_kvcache *cache, const attn_tensor *q,
                          const attn_kvcache_batch *batch, const int64_t *added,
                          attn_kvcache *view, int64_t **ints, attn_error *err);

/* ---- quant.c: the formats ---- */

/* Stores one row of n floats x at storage row `row` of K or V in the
 * cache's format (rounding as attn/kvcache.h states); returns whether x
 * holds an inf or NaN. */
bool kv_store_row(attn_kvcache *c, bool v, int64_t row, int64_t head, const float *x, int64_t n);
/* The values attention reads from storage row `row` (dequantized). */
void kv_load_row(const attn_kvcache *c, bool v, int64_t row, int64_t head, float *x, int64_t n);
/* fp8 e4m3 (e4m3fn): encode x (saturating at ±448, nearest even, NaN kept)
 * and decode. */
uint8_t kv_e4m3_encode(float x);
float kv_e4m3_decode(uint8_t b);
/* Value j (scale applied) of a q4_0 row. */
float kv_q4_at(const uint8_t *row, int64_t j);

/* ---- decode.c: attention read in place, every storage ---- */

/* Everything one attend call shares (attend.c validates it); c may be a view. */
typedef struct {
    const attn_kvcache *c;
    const attn_tensor *q, *out, *lse, *stats, *slopes;
    attn_sdpa_opts opts; /* the caller's, sanitised */
    int64_t Hq, Nq, Dv;
} kv_attend_call;

attn_status kv_decode(const kv_attend_call *a, int threads, attn_error *err);
/* attn_kvcache_attend's checks, filling *call (attend.c). */
attn_status kv_attend_prepare(const attn_kvcache *cache, const attn_tensor *q, attn_tensor *out,
                              attn_tensor *lse, const attn_sdpa_opts *opts, kv_attend_call *call,
                              attn_error *err);

/* The call's attention, every entry, by the path its storage takes (no
 * cascade): decode.c's kernel for quantized caches, attn_sdpa otherwise. */
attn_status kv_attend_run(const kv_attend_call *a, attn_error *err);

/* ---- cascade.c: entries sharing leading blocks ---- */

/* Attends the call with the prefix shared by entries attended once for all
 * of them (see cascade.c); *done false (and nothing written) when no
 * entries share a prefix the call can split off. */
attn_status kv_cascade(const kv_attend_call *a, bool *done, attn_error *err);

/* Folds one row's partial attention (output o over its keys, softmax
 * statistics m and ll) into the running (M, S, O) in double (attend.c). */
void kv_merge_part(double *M, double *S, double *O, double m, double ll, const float *o,
                   int64_t Dv);
/* Writes row (b, h, i) of the call's outputs from a merged (M, S, O). */
void kv_store_merged(const kv_attend_call *a, int64_t b, int64_t h, int64_t i, double M,
                     double S, const double *O);
/* The sink logit of query head h, -inf without sinks. */
float kv_sink(const kv_attend_call *a, int64_t h);
/* The ALiBi slope of query head h of entry b. */
float kv_slope(const kv_attend_call *a, int64_t b, int64_t h);

#endif /* ATTN_INFER_CACHE_H */
