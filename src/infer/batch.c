/*
 * Which cache entries a call's batch reads (attn_kvcache_batch:
 * cache_batch_idx, cache_leftpad), and the attend entry point.
 *
 * The call runs on a view of the cache (cache.h): batch entry b reads
 * storage entry cache_batch_idx[b] from position leftpad[b] on, its length
 * length - leftpad. Hiding the first leftpad keys this way keeps every
 * other rule: the query's position relative to each key (bottom-right
 * causality, window, ALiBi distance) is the same in the view's positions as
 * in the cache's, since both shift by leftpad.
 */
#include "cache.h"

#include <stdlib.h>

attn_status kv_batch_view(const attn_kvcache *cache, const attn_tensor *q,
                          const attn_kvcache_batch *batch, const int64_t *added,
                          attn_kvcache *view, int64_t **ints, attn_error *err)
{
    *ints = NULL;
    RETURN_IF(!cache, err, ATTN_ERR_NULL, "cache: pointer is NULL");
    *view = *cache;
    if (!batch || (!batch->cache_batch_idx && !batch->cache_leftpad)) return ATTN_OK;
    const int64_t *idx = batch->cache_batch_idx, *pad = batch->cache_leftpad;
    int64_t Bq = cache->cfg.batch;
    if (idx) {
        RETURN_IF_ERROR(attn_check_float_tensor(q, "query", 4, false, err));
        Bq = q->shape[0];
        RETURN_IF(Bq < 1, err, ATTN_ERR_SHAPE, "query: batch size is 0");
    }
    int64_t *a = malloc((size_t)(3 * Bq) * sizeof *a);
    RETURN_IF(!a, err, ATTN_ERR_ALLOC, "kvcache: cannot allocate");
    int64_t *len = a, *entry = a + Bq, *first = a + 2 * Bq;
    for (int64_t b = 0; b < Bq; ++b) {
        const int64_t e = idx ? idx[b] : b;
        if (e < 0 || e >= cache->cfg.batch) {
            free(a);
            return attn_fail(err, ATTN_ERR_ARG, "cache_batch_idx[%lld]: entry %lld is outside [0, %lld)",
                             (long long)b, (long long)e, (long long)cache->cfg.batch);
        }
        const int64_t L = cache->len[e] + (added ? added[b] : 0), lp = pad ? pad[b] : 0;
        if (lp < 0 || lp > L) {
            free(a);
            return attn_fail(err, ATTN_ERR_ARG,
                             "cache_leftpad[%lld]: %lld is outside [0, %lld] (the entry's length)",
                             (long long)b, (long long)lp, (long long)L);
        }
        entry[b] = e;
        first[b] = lp;
        len[b] = cache->len[e] - lp; /* may be < 0 before the append; set again after it */
    }
    view->cfg.batch = Bq;
    view->len = len;
    view->entry_of = entry;
    view->first = first;
    *ints = a;
    return ATTN_OK;
}

attn_status attn_kvcache_attend_batch(const attn_kvcache *cache, const attn_tensor *q,
                                      attn_tensor *out, attn_tensor *lse,
                                      const attn_sdpa_opts *opts, const attn_kvcache_batch *batch,
                                      attn_error *err)
{
    attn_kvcache view;
    int64_t *ints;
    RETURN_IF_ERROR(kv_batch_view(cache, q, batch, NULL, &view, &ints, err));
    kv_attend_call a;
    attn_status s = kv_attend_prepare(&view, q, out, lse, opts, &a, err);
    bool done = false;
    if (s == ATTN_OK) s = kv_cascade(&a, &done, err);
    if (s == ATTN_OK && !done) s = kv_attend_run(&a, err);
    if (s == ATTN_OK) attn_ok(err);
    free(ints);
    return s;
}
