/*
 * A key/value cache for decoding (attn/kvcache.h): creation, appends (which
 * quantize, quant.c), lengths, views and read-back. The paged block pool
 * is pool.c. The storage layout is described in cache.h; attention over
 * the cache is attend.c and decode.c.
 */
#include "../core/half.h"
#include "cache.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A (1, Hkv, n, width) view of float storage at data. */
static attn_tensor storage_view(const attn_kvcache *c, void *data, int64_t n, int64_t width)
{
    return attn_tensor_make(data, c->cfg.dtype, 4, (int64_t[]){1, c->cfg.kv_heads, n, width});
}

const attn_kvcache_config *attn_kvcache_get_config(const attn_kvcache *cache)
{
    return cache ? &cache->cfg : NULL;
}

int64_t attn_kvcache_length(const attn_kvcache *cache, int64_t b)
{
    if (!cache || b < 0 || b >= cache->cfg.batch) return -1;
    return cache->len[b];
}

void attn_kvcache_free(attn_kvcache *cache)
{
    if (!cache) return;
    free(cache->k);
    free(cache->v);
    free(cache->len);
    free(cache->table);
    free(cache->nblk);
    free(cache->refs);
    free(cache->k_rs);
    free(cache->v_rs);
    free(cache->k_hs);
    free(cache->v_hs);
    free(cache);
}

attn_status attn_kvcache_create(const attn_kvcache_config *cfg, attn_kvcache **out,
                                attn_error *err)
{
    RETURN_IF(!out, err, ATTN_ERR_NULL, "out: pointer is NULL");
    *out = NULL;
    RETURN_IF(!cfg, err, ATTN_ERR_NULL, "cfg: pointer is NULL");
    attn_kvcache_config g = *cfg;
    if (g.value_dim == 0) g.value_dim = g.head_dim;
    RETURN_IF(g.batch < 1, err, ATTN_ERR_ARG, "batch: must be >= 1, got %lld", (long long)g.batch);
    RETURN_IF(g.kv_heads < 1, err, ATTN_ERR_ARG, "kv_heads: must be >= 1, got %lld",
              (long long)g.kv_heads);
    RETURN_IF(g.capacity < 1, err, ATTN_ERR_ARG, "capacity: must be >= 1, got %lld",
              (long long)g.capacity);
    RETURN_IF(g.head_dim < 1, err, ATTN_ERR_ARG, "head_dim: must be >= 1, got %lld",
              (long long)g.head_dim);
    RETURN_IF(g.value_dim < 1, err, ATTN_ERR_ARG, "value_dim: must be >= 1 (0 = head_dim), got %lld",
              (long long)g.value_dim);
    RETURN_IF(g.block_size < 0, err, ATTN_ERR_ARG,
              "block_size: must be >= 0 (0 = contiguous), got %lld", (long long)g.block_size);
    RETURN_IF(g.dtype != ATTN_F32 && g.dtype != ATTN_BF16 && g.dtype != ATTN_F16, err,
              ATTN_ERR_DTYPE, "dtype: the cache stores float32, bfloat16 or float16, not %s",
              attn_dtype_name(g.dtype));
    RETURN_IF(g.quant != ATTN_KV_FLOAT && g.quant != ATTN_KV_INT8 && g.quant != ATTN_KV_FP8_E4M3 &&
                  g.quant != ATTN_KV_Q4_0,
              err, ATTN_ERR_ARG, "quant: %d is not an attn_kv_quant", (int)g.quant);
    RETURN_IF(g.quant == ATTN_KV_Q4_0 && (g.head_dim % KV_Q4_BLOCK || g.value_dim % KV_Q4_BLOCK),
              err, ATTN_ERR_ARG, "head_dim, value_dim: q4_0 needs multiples of 32, got %lld, %lld",
              (long long)g.head_dim, (long long)g.value_dim);
    RETURN_IF(g.quant != ATTN_KV_FLOAT && g.dtype != ATTN_F32, err, ATTN_ERR_DTYPE,
              "dtype: a quantized cache takes ATTN_F32 (0) as dtype, not %s",
              attn_dtype_name(g.dtype));
    const bool fp8 = g.quant == ATTN_KV_FP8_E4M3;
    for (int which = 0; which < 2 && fp8; ++which) {
        const float *sc = which ? g.v_scale : g.k_scale;
        for (int64_t h = 0; sc && h < g.kv_heads; ++h)
            RETURN_IF(!(sc[h] > 0.0f) || !isfinite(sc[h]), err, ATTN_ERR_ARG,
                      "%s[%lld]: an fp8 scale must be finite and > 0, got %g",
                      which ? "v_scale" : "k_scale", (long long)h, (double)sc[h]);
    }
    const size_t elem = g.quant != ATTN_KV_FLOAT ? 1 : attn_dtype_size(g.dtype);
    int64_t max_blocks = 0;
    if (g.block_size > 0) {
        max_blocks = kv_ceil_div(g.capacity, g.block_size);
        /* an entry maps distinct pool blocks, at most INT32_MAX of them */
        RETURN_IF(max_blocks > INT32_MAX, err, ATTN_ERR_OVERFLOW,
                  "capacity: %lld tokens are more blocks of %lld than the int32 block table holds",
                  (long long)g.capacity, (long long)g.block_size);
        int64_t want;
        RETURN_IF(!attn_mul_ok(g.batch, max_blocks, &want), err, ATTN_ERR_OVERFLOW,
                  "num_blocks: batch x blocks per entry overflows");
        RETURN_IF(g.num_blocks < 0, err, ATTN_ERR_ARG, "num_blocks: must be >= 0, got %lld",
                  (long long)g.num_blocks);
        if (g.num_blocks == 0) g.num_blocks = want;
        RETURN_IF(g.num_blocks > INT32_MAX, err, ATTN_ERR_ARG,
                  "num_blocks: %lld exceeds the int32 block table", (long long)g.num_blocks);
    } else {
        RETURN_IF(g.num_blocks != 0, err, ATTN_ERR_ARG,
                  "num_blocks: only for a paged cache (block_size > 0)");
    }
    /* rows of storage per kv head across the batch, then elements */
    int64_t rows, nk, nv, per_head = g.capacity;
    const int64_t copies = g.block_size > 0 ? 1 : g.batch;
    RETURN_IF(g.block_size > 0 && !attn_mul_ok(g.num_blocks, g.block_size, &per_head), err,
              ATTN_ERR_OVERFLOW, "num_blocks: %lld blocks of %lld tokens overflow",
              (long long)g.num_blocks, (long long)g.block_size);
    RETURN_IF(!attn_mul_ok(per_head, g.kv_heads, &rows) || !attn_mul_ok(rows, copies, &rows) ||
                  !attn_mul_ok(rows, g.head_dim, &nk) || !attn_mul_ok(rows, g.value_dim, &nv) ||
                  (uint64_t)nk > SIZE_MAX / elem || (uint64_t)nv > SIZE_MAX / elem,
              err, ATTN_ERR_OVERFLOW, "capacity: storage size overflows");
    attn_kvcache *c = calloc(1, sizeof *c);
    RETURN_IF(!c, err, ATTN_ERR_ALLOC, "kvcache: cannot allocate");
    c->cfg = g;
    c->fmt = g.quant == ATTN_KV_INT8       ? KV_I8
             : g.quant == ATTN_KV_FP8_E4M3 ? KV_E4M3
             : g.quant == ATTN_KV_Q4_0     ? KV_Q4_0
             : g.dtype == ATTN_BF16        ? KV_BF16
             : g.dtype == ATTN_F16         ? KV_F16
                                           : KV_F32;
    c->max_blocks = max_blocks;
    c->elem = elem;
    c->k = calloc((size_t)rows, (size_t)kv_format_row_bytes(c->fmt, g.head_dim));
    c->v = calloc((size_t)rows, (size_t)kv_format_row_bytes(c->fmt, g.value_dim));
    c->len = calloc((size_t)g.batch, sizeof *c->len);
    bool ok = c->k && c->v && c->len;
    if (ok && c->fmt == KV_I8) {
        c->k_rs = calloc((size_t)rows, sizeof *c->k_rs);
        c->v_rs = calloc((size_t)rows, sizeof *c->v_rs);
        ok = c->k_rs && c->v_rs;
    }
    c->cfg.k_scale = c->cfg.v_scale = NULL;
    if (ok && fp8) {
        c->k_hs = malloc((size_t)g.kv_heads * sizeof *c->k_hs);
        c->v_hs = malloc((size_t)g.kv_heads * sizeof *c->v_hs);
        ok = c->k_hs && c->v_hs;
        for (int64_t h = 0; ok && h < g.kv_heads; ++h) {
            c->k_hs[h] = g.k_scale ? g.k_scale[h] : 1.0f;
            c->v_hs[h] = g.v_scale ? g.v_scale[h] : 1.0f;
        }
        c->cfg.k_scale = c->k_hs;
        c->cfg.v_scale = c->v_hs;
    }
    if (ok && max_blocks > 0) {
        c->table = calloc((size_t)(g.batch * max_blocks), sizeof *c->table);
        c->nblk = calloc((size_t)g.batch, sizeof *c->nblk);
        c->refs = calloc((size_t)g.num_blocks, sizeof *c->refs);
        ok = c->table && c->nblk && c->refs;
    }
    if (!ok) {
        attn_kvcache_free(c);
        return attn_fail(err, ATTN_ERR_ALLOC, "kvcache: cannot allocate %lld + %lld elements",
                         (long long)nk, (long long)nv);
    }
    *out = c;
    attn_ok(err);
    return ATTN_OK;
}

/* ------------------------------------------------------------ mutation */

attn_status kv_append(attn_kvcache *cache, const attn_tensor *k, const attn_tensor *v,
                      const int64_t *counts, const int64_t *entry_of, attn_error *err)
{
    RETURN_IF(!cache, err, ATTN_ERR_NULL, "cache: pointer is NULL");
    const attn_kvcache_config *g = &cache->cfg;
    RETURN_IF_ERROR(attn_check_float_tensor(k, "key", 4, false, err));
    RETURN_IF_ERROR(attn_check_float_tensor(v, "value", 4, false, err));
    const int64_t n = k->shape[2], nb = entry_of ? k->shape[0] : g->batch;
    const int64_t kw[4] = {nb, g->kv_heads, n, g->head_dim};
    const int64_t vw[4] = {nb, g->kv_heads, n, g->value_dim};
    static const char *const dims[4] = {"batch", "heads", "sequence", "feature"};
    for (int d = 0; d < 4; ++d) {
        RETURN_IF(k->shape[d] != kw[d], err, ATTN_ERR_SHAPE, "key: %s size is %lld, the cache has %lld",
                  dims[d], (long long)k->shape[d], (long long)kw[d]);
        RETURN_IF(v->shape[d] != vw[d], err, ATTN_ERR_SHAPE,
                  "value: %s size is %lld, expected %lld", dims[d], (long long)v->shape[d],
                  (long long)vw[d]);
    }
    int64_t *next = malloc((size_t)g->batch * sizeof *next);
    float *x = malloc((size_t)(g->head_dim > g->value_dim ? g->head_dim : g->value_dim) *
                      sizeof *x); /* one row in float32, then stored in the cache's format */
    if (!next || !x) {
        free(next), free(x);
        return attn_fail(err, ATTN_ERR_ALLOC, "kvcache: cannot allocate");
    }
    for (int64_t e = 0; e < g->batch; ++e) next[e] = -1; /* not named yet */
    attn_status s = ATTN_OK;
    for (int64_t i = 0; i < nb && s == ATTN_OK; ++i) {
        const int64_t b = entry_of ? entry_of[i] : i, cnt = counts ? counts[i] : n;
        if (b < 0 || b >= g->batch)
            s = attn_fail(err, ATTN_ERR_ARG, "cache_batch_idx[%lld]: entry %lld is outside [0, %lld)",
                          (long long)i, (long long)b, (long long)g->batch);
        else if (next[b] >= 0)
            s = attn_fail(err, ATTN_ERR_ARG,
                          "cache_batch_idx[%lld]: entry %lld appears twice in an append",
                          (long long)i, (long long)b);
        else if (cnt < 0 || cnt > n)
            s = attn_fail(err, ATTN_ERR_ARG, "counts[%lld]: %lld is outside [0, %lld]",
                          (long long)i, (long long)cnt, (long long)n);
        else if (cnt > g->capacity - cache->len[b])
            s = attn_fail(err, ATTN_ERR_ARG,
                          "append: entry %lld holds %lld tokens; %lld more exceed the capacity %lld",
                          (long long)b, (long long)cache->len[b], (long long)cnt,
                          (long long)g->capacity);
        else
            next[b] = cache->len[b] + cnt;
    }
    for (int64_t e = 0; e < g->batch; ++e)
        if (next[e] < 0) next[e] = cache->len[e];
    if (s == ATTN_OK && kv_paged(cache)) {
        int64_t need, avail;
        s = kv_pool_plan(cache, cache->len, next, NULL, &need, &avail, err);
        if (s == ATTN_OK && need > avail)
            s = attn_fail(err, ATTN_ERR_ARG, "append: needs %lld new blocks, the pool has %lld free",
                          (long long)need, (long long)avail);
    }
    if (s == ATTN_OK) {
        if (kv_paged(cache))
            for (int64_t b = 0; b < g->batch; ++b) {
                kv_pool_unshare(cache, b, cache->len[b], next[b]);
                kv_pool_grow(cache, b, kv_ceil_div(next[b], g->block_size));
            }
        for (int64_t i = 0; i < nb; ++i) {
            const int64_t b = entry_of ? entry_of[i] : i;
            for (int64_t h = 0; h < g->kv_heads; ++h)
                for (int64_t t = cache->len[b]; t < next[b]; ++t) {
                    const int64_t src = t - cache->len[b];
                    const int64_t ks = i * k->stride[0] + h * k->stride[1] + src * k->stride[2];
                    const int64_t vs = i * v->stride[0] + h * v->stride[1] + src * v->stride[2];
                    const int64_t row = kv_row(cache, b, h, t);
                    for (int64_t d = 0; d < g->head_dim; ++d)
                        x[d] = attn_load_float(k->data, k->dtype, ks + d * k->stride[3]);
                    cache->k_nonfinite |= kv_store_row(cache, false, row, h, x, g->head_dim);
                    for (int64_t d = 0; d < g->value_dim; ++d)
                        x[d] = attn_load_float(v->data, v->dtype, vs + d * v->stride[3]);
                    cache->v_nonfinite |= kv_store_row(cache, true, row, h, x, g->value_dim);
                }
        }
        for (int64_t b = 0; b < g->batch; ++b) cache->len[b] = next[b];
        attn_ok(err);
    }
    free(next), free(x);
    return s;
}

attn_status attn_kvcache_append(attn_kvcache *cache, const attn_tensor *k, const attn_tensor *v,
                                const int64_t *counts, attn_error *err)
{
    return kv_append(cache, k, v, counts, NULL, err);
}

attn_status attn_kvcache_set_lengths(attn_kvcache *cache, const int64_t *lengths,
                                     attn_error *err)
{
    RETURN_IF(!cache, err, ATTN_ERR_NULL, "cache: pointer is NULL");
    RETURN_IF(!lengths, err, ATTN_ERR_NULL, "lengths: pointer is NULL");
    const attn_kvcache_config *g = &cache->cfg;
    for (int64_t b = 0; b < g->batch; ++b)
        RETURN_IF(lengths[b] < 0 || lengths[b] > g->capacity, err, ATTN_ERR_ARG,
                  "lengths[%lld]: %lld is outside [0, capacity %lld]", (long long)b,
                  (long long)lengths[b], (long long)g->capacity);
    if (kv_paged(cache)) {
        /* blocks released by shortening entries are available to growing ones */
        int64_t *keep = malloc((size_t)g->batch * sizeof *keep);
        RETURN_IF(!keep, err, ATTN_ERR_ALLOC, "kvcache: cannot allocate");
        for (int64_t b = 0; b < g->batch; ++b) keep[b] = kv_ceil_div(lengths[b], g->block_size);
        int64_t need, avail;
        attn_status s = kv_pool_plan(cache, NULL, lengths, keep, &need, &avail, err);
        if (s == ATTN_OK && need > avail)
            s = attn_fail(err, ATTN_ERR_ARG, "lengths: need %lld new blocks, the pool has %lld free",
                          (long long)need, (long long)avail);
        if (s != ATTN_OK) {
            free(keep);
            return s;
        }
        for (int64_t b = 0; b < g->batch; ++b) kv_pool_shrink(cache, b, keep[b]);
        for (int64_t b = 0; b < g->batch; ++b) kv_pool_grow(cache, b, keep[b]);
        free(keep);
    }
    for (int64_t b = 0; b < g->batch; ++b) cache->len[b] = lengths[b];
    attn_ok(err);
    return ATTN_OK;
}

attn_status attn_kvcache_view(const attn_kvcache *cache, int64_t b, attn_tensor *k,
                              attn_tensor *v, attn_error *err)
{
    RETURN_IF(!cache, err, ATTN_ERR_NULL, "cache: pointer is NULL");
    RETURN_IF(kv_paged(cache), err, ATTN_ERR_ARG, "cache: paged caches have no single view");
    RETURN_IF(kv_quantized(cache), err, ATTN_ERR_ARG,
              "cache: a quantized cache has no float view (attn_kvcache_read dequantizes)");
    const attn_kvcache_config *g = &cache->cfg;
    RETURN_IF(b < 0 || b >= g->batch, err, ATTN_ERR_ARG, "b: entry %lld is outside [0, %lld)",
              (long long)b, (long long)g->batch);
    for (int which = 0; which < 2; ++which) {
        attn_tensor *t = which ? v : k;
        if (!t) continue;
        const int64_t w = which ? g->value_dim : g->head_dim;
        *t = storage_view(cache, kv_row_data(cache, which, kv_row(cache, b, 0, 0)),
                          cache->len[b], w);
        t->stride[0] = 0;
        t->stride[1] = g->capacity * w;
    }
    attn_ok(err);
    return ATTN_OK;
}

attn_status attn_kvcache_read(const attn_kvcache *cache, int64_t b, attn_tensor *k,
                              attn_tensor *v, attn_error *err)
{
    RETURN_IF(!cache, err, ATTN_ERR_NULL, "cache: pointer is NULL");
    const attn_kvcache_config *g = &cache->cfg;
    RETURN_IF(b < 0 || b >= g->batch, err, ATTN_ERR_ARG, "b: entry %lld is outside [0, %lld)",
              (long long)b, (long long)g->batch);
    const int64_t L = cache->len[b];
    for (int which = 0; which < 2; ++which) {
        const attn_tensor *t = which ? v : k;
        if (!t) continue;
        const char *name = which ? "value" : "key";
        const int64_t want[4] = {1, g->kv_heads, L, which ? g->value_dim : g->head_dim};
        RETURN_IF_ERROR(attn_check_float_tensor(t, name, 4, true, err));
        for (int d = 0; d < 4; ++d)
            RETURN_IF(t->shape[d] != want[d], err, ATTN_ERR_SHAPE,
                      "%s: dimension %d is %lld, entry %lld needs %lld", name, d,
                      (long long)t->shape[d], (long long)b, (long long)want[d]);
    }
    const int64_t w = g->head_dim > g->value_dim ? g->head_dim : g->value_dim;
    float *x = malloc((size_t)w * sizeof *x);
    RETURN_IF(!x, err, ATTN_ERR_ALLOC, "kvcache: cannot allocate");
    for (int which = 0; which < 2; ++which) {
        attn_tensor *t = which ? v : k;
        if (!t) continue;
        const int64_t n = t->shape[3];
        for (int64_t h = 0; h < g->kv_heads; ++h)
            for (int64_t j = 0; j < L; ++j) {
                kv_load_row(cache, which, kv_row(cache, b, h, j), h, x, n);
                const int64_t at = h * t->stride[1] + j * t->stride[2];
                for (int64_t d = 0; d < n; ++d)
                    attn_store_float(t->data, t->dtype, at + d * t->stride[3], x[d]);
            }
    }
    free(x);
    attn_ok(err);
    return ATTN_OK;
}
