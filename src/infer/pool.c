/*
 * The paged cache's block pool: reference-counted blocks, block tables,
 * forks and copy-on-write (attn/kvcache.h, "Shared prefixes").
 *
 * refs[p] is the number of block-table slots (over all entries) holding
 * pool block p; 0 = free. Allocation takes the lowest-numbered free block,
 * so the pool's state depends only on the calls made. Planning functions
 * (kv_pool_plan) count exactly what an operation will allocate, simulating
 * the releases and copies in the order the operation performs them, so
 * every operation can be all or nothing.
 */
#include "cache.h"

#include <stdlib.h>
#include <string.h>

int64_t kv_pool_free(const attn_kvcache *c)
{
    int64_t n = 0;
    for (int64_t p = 0; p < c->cfg.num_blocks; ++p) n += c->refs[p] == 0;
    return n;
}

/* Pool block p's rows of kv head h start at storage row: */
static int64_t block_row(const attn_kvcache *c, int64_t h, int64_t p)
{
    return h * kv_pool_rows(c) + p * c->cfg.block_size;
}

/* Writes pool block dst (every kv head) as a copy of src, or zeros (src < 0). */
static void fill_block(attn_kvcache *c, int64_t dst, int64_t src)
{
    const attn_kvcache_config *g = &c->cfg;
    const size_t kb = (size_t)(g->block_size * g->head_dim) * c->elem;
    const size_t vb = (size_t)(g->block_size * g->value_dim) * c->elem;
    const size_t sb = (size_t)g->block_size * sizeof(float);
    for (int64_t h = 0; h < g->kv_heads; ++h) {
        const int64_t to = block_row(c, h, dst), from = src < 0 ? 0 : block_row(c, h, src);
        void *k = kv_row_data(c, false, to), *v = kv_row_data(c, true, to);
        if (src < 0) {
            memset(k, 0, kb), memset(v, 0, vb);
        } else {
            memcpy(k, kv_row_data(c, false, from), kb);
            memcpy(v, kv_row_data(c, true, from), vb);
        }
        if (c->k_rs) {
            if (src < 0) {
                memset(c->k_rs + to, 0, sb), memset(c->v_rs + to, 0, sb);
            } else {
                memcpy(c->k_rs + to, c->k_rs + from, sb);
                memcpy(c->v_rs + to, c->v_rs + from, sb);
            }
        }
    }
}

/* Takes the lowest-numbered free block (the caller planned for it). */
static int32_t take_block(attn_kvcache *c)
{
    int64_t p = 0;
    while (c->refs[p] != 0) p++;
    c->refs[p] = 1;
    return (int32_t)p;
}

void kv_pool_grow(attn_kvcache *c, int64_t b, int64_t want)
{
    while (c->nblk[b] < want) {
        const int32_t p = take_block(c);
        fill_block(c, p, -1);
        c->table[b * c->max_blocks + c->nblk[b]++] = p;
    }
}

void kv_pool_shrink(attn_kvcache *c, int64_t b, int64_t keep)
{
    while (c->nblk[b] > keep) c->refs[c->table[b * c->max_blocks + --c->nblk[b]]]--;
}

/* Logical blocks [lo, hi) of entry b that a write of positions [from, to) touches. */
static void written_blocks(const attn_kvcache *c, int64_t b, int64_t from, int64_t to,
                           int64_t *lo, int64_t *hi)
{
    const int64_t bs = c->cfg.block_size;
    *lo = from / bs;
    *hi = to > from ? kv_ceil_div(to, bs) : *lo;
    if (*hi > c->nblk[b]) *hi = c->nblk[b];
}

void kv_pool_unshare(attn_kvcache *c, int64_t b, int64_t from, int64_t to)
{
    int64_t lo, hi;
    written_blocks(c, b, from, to, &lo, &hi);
    for (int64_t i = lo; i < hi; ++i) {
        int32_t *slot = &c->table[b * c->max_blocks + i];
        if (c->refs[*slot] < 2) continue;
        const int32_t p = take_block(c);
        fill_block(c, p, *slot);
        c->refs[*slot]--;
        *slot = p;
    }
}

attn_status kv_pool_plan(const attn_kvcache *c, const int64_t *from, const int64_t *to,
                         const int64_t *keep, int64_t *need, int64_t *avail, attn_error *err)
{
    const attn_kvcache_config *g = &c->cfg;
    int32_t *refs = malloc((size_t)g->num_blocks * sizeof *refs);
    RETURN_IF(!refs, err, ATTN_ERR_ALLOC, "kvcache: cannot allocate");
    memcpy(refs, c->refs, (size_t)g->num_blocks * sizeof *refs);
    *need = 0;
    for (int64_t b = 0; keep && b < g->batch; ++b)
        for (int64_t i = keep[b]; i < c->nblk[b]; ++i) refs[c->table[b * c->max_blocks + i]]--;
    int64_t free_now = 0;
    for (int64_t p = 0; p < g->num_blocks; ++p) free_now += refs[p] == 0;
    for (int64_t b = 0; b < g->batch; ++b) {
        const int64_t have = keep && keep[b] < c->nblk[b] ? keep[b] : c->nblk[b];
        if (from) { /* copies of shared blocks the write touches, in kv_pool_unshare's order */
            int64_t lo, hi;
            written_blocks(c, b, from[b], to[b], &lo, &hi);
            for (int64_t i = lo; i < hi && i < have; ++i) {
                int32_t *r = &refs[c->table[b * c->max_blocks + i]];
                if (*r >= 2) (*r)--, (*need)++;
            }
        }
        const int64_t want = kv_ceil_div(to[b], g->block_size);
        if (want > have) *need += want - have;
    }
    free(refs);
    *avail = free_now;
    return ATTN_OK;
}

/* ------------------------------------------------------------ public API */

#define CHECK_PAGED(cache, err)                                                                   \
    do {                                                                                          \
        RETURN_IF(!(cache), err, ATTN_ERR_NULL, "cache: pointer is NULL");                        \
        RETURN_IF(!kv_paged(cache), err, ATTN_ERR_ARG, "cache: not paged (block_size is 0)");     \
    } while (0)

#define CHECK_ENTRY(cache, name, b, err)                                                          \
    RETURN_IF((b) < 0 || (b) >= (cache)->cfg.batch, err, ATTN_ERR_ARG,                            \
              "%s: entry %lld is outside [0, %lld)", name, (long long)(b),                         \
              (long long)(cache)->cfg.batch)

int64_t attn_kvcache_block_refs(const attn_kvcache *cache, int64_t block)
{
    if (!cache || !kv_paged(cache) || block < 0 || block >= cache->cfg.num_blocks) return -1;
    return cache->refs[block];
}

int64_t attn_kvcache_free_blocks(const attn_kvcache *cache)
{
    return cache && kv_paged(cache) ? kv_pool_free(cache) : -1;
}

attn_status attn_kvcache_fork(attn_kvcache *cache, int64_t parent, int64_t child,
                              attn_error *err)
{
    CHECK_PAGED(cache, err);
    CHECK_ENTRY(cache, "parent", parent, err);
    CHECK_ENTRY(cache, "child", child, err);
    RETURN_IF(parent == child, err, ATTN_ERR_ARG, "child: entry %lld cannot fork itself",
              (long long)child);
    RETURN_IF(cache->len[child] != 0 || cache->nblk[child] != 0, err, ATTN_ERR_ARG,
              "child: entry %lld holds %lld tokens in %lld blocks; fork needs an empty entry "
              "(attn_kvcache_reset)",
              (long long)child, (long long)cache->len[child], (long long)cache->nblk[child]);
    const int32_t *from = cache->table + parent * cache->max_blocks;
    int32_t *to = cache->table + child * cache->max_blocks;
    for (int64_t i = 0; i < cache->nblk[parent]; ++i) {
        to[i] = from[i];
        cache->refs[from[i]]++;
    }
    cache->nblk[child] = cache->nblk[parent];
    cache->len[child] = cache->len[parent];
    attn_ok(err);
    return ATTN_OK;
}

attn_status attn_kvcache_reset(attn_kvcache *cache, int64_t b, attn_error *err)
{
    RETURN_IF(!cache, err, ATTN_ERR_NULL, "cache: pointer is NULL");
    CHECK_ENTRY(cache, "b", b, err);
    if (kv_paged(cache)) kv_pool_shrink(cache, b, 0);
    cache->len[b] = 0;
    attn_ok(err);
    return ATTN_OK;
}

attn_status attn_kvcache_block_table(const attn_kvcache *cache, int64_t b, int32_t *table,
                                     int64_t max, int64_t *count, attn_error *err)
{
    RETURN_IF(!cache, err, ATTN_ERR_NULL, "cache: pointer is NULL");
    RETURN_IF(!count, err, ATTN_ERR_NULL, "count: pointer is NULL");
    RETURN_IF(!kv_paged(cache), err, ATTN_ERR_ARG, "cache: not paged (block_size is 0)");
    CHECK_ENTRY(cache, "b", b, err);
    RETURN_IF(max < 0 || (max > 0 && !table), err, ATTN_ERR_ARG,
              "table: %lld entries wanted from a %s buffer", (long long)max,
              table ? "given" : "NULL");
    *count = cache->nblk[b];
    for (int64_t i = 0; i < cache->nblk[b] && i < max; ++i)
        table[i] = cache->table[b * cache->max_blocks + i];
    attn_ok(err);
    return ATTN_OK;
}

/* An entry other than b whose table holds block p (-1: none). */
static int64_t other_holder(const attn_kvcache *c, int64_t b, int32_t p)
{
    for (int64_t e = 0; e < c->cfg.batch; ++e)
        for (int64_t i = 0; e != b && i < c->nblk[e]; ++i)
            if (c->table[e * c->max_blocks + i] == p) return e;
    return -1;
}

attn_status attn_kvcache_set_block_table(attn_kvcache *cache, int64_t b, const int32_t *table,
                                         int64_t n, attn_error *err)
{
    CHECK_PAGED(cache, err);
    const attn_kvcache_config *g = &cache->cfg;
    CHECK_ENTRY(cache, "b", b, err);
    const int64_t need = kv_ceil_div(cache->len[b], g->block_size);
    RETURN_IF(n < need || n > cache->max_blocks, err, ATTN_ERR_ARG,
              "table: %lld blocks, entry %lld needs %lld to %lld", (long long)n, (long long)b,
              (long long)need, (long long)cache->max_blocks);
    RETURN_IF(n > 0 && !table, err, ATTN_ERR_NULL, "table: pointer is NULL");
    uint8_t *seen = calloc((size_t)g->num_blocks, 2); /* [p]: in table; [num_blocks + p]: b's */
    RETURN_IF(!seen, err, ATTN_ERR_ALLOC, "kvcache: cannot allocate");
    for (int64_t i = 0; i < cache->nblk[b]; ++i)
        seen[g->num_blocks + cache->table[b * cache->max_blocks + i]] = 1;
    attn_status s = ATTN_OK;
    for (int64_t i = 0; i < n && s == ATTN_OK; ++i) {
        const int64_t p = table[i];
        if (p < 0 || p >= g->num_blocks)
            s = attn_fail(err, ATTN_ERR_ARG, "table[%lld]: block %lld is outside the pool [0, %lld)",
                          (long long)i, (long long)p, (long long)g->num_blocks);
        else if (seen[p])
            s = attn_fail(err, ATTN_ERR_ARG, "table[%lld]: block %lld appears twice", (long long)i,
                          (long long)p);
        else if (cache->refs[p] > 0 && !seen[g->num_blocks + p])
            s = attn_fail(err, ATTN_ERR_ARG, "table[%lld]: block %lld belongs to entry %lld",
                          (long long)i, (long long)p, (long long)other_holder(cache, b, (int32_t)p));
        else
            seen[p] = 1;
    }
    free(seen);
    if (s != ATTN_OK) return s;
    for (int64_t i = 0; i < n; ++i) cache->refs[table[i]]++; /* before the release: overlaps stay */
    kv_pool_shrink(cache, b, 0);
    for (int64_t i = 0; i < n; ++i) cache->table[b * cache->max_blocks + i] = table[i];
    cache->nblk[b] = n;
    attn_ok(err);
    return ATTN_OK;
}
