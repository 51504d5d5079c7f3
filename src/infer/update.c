/*
 * attn_kvcache_update_attend: append (rotating the new keys), then attend
 * (rotating the queries), flash_attn_with_kvcache's single call. The
 * rotations work on float32 copies, so the caller's tensors stay as given.
 */
#include "../core/half.h"
#include "../sdpa/rope.h"
#include "cache.h"

#include <stdlib.h>
#include <string.h>

/* A contiguous float32 copy of x (B, H, N, D), rotated when rope is given:
 * token n of entry b at position pos[b] + n. NULL when out of memory. */
static float *rotated_copy(const attn_tensor *x, const attn_rope *rope, const int64_t *pos,
                           attn_tensor *copy)
{
    const int64_t B = x->shape[0], H = x->shape[1], N = x->shape[2], D = x->shape[3];
    float *data = malloc((size_t)(B * H * N * D > 0 ? B * H * N * D : 1) * sizeof *data);
    if (!data) return NULL;
    *copy = attn_tensor_4d(data, B, H, N, D);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t n = 0; n < N; ++n) {
                float *row = data + ((b * H + h) * N + n) * D;
                const int64_t at = b * x->stride[0] + h * x->stride[1] + n * x->stride[2];
                for (int64_t d = 0; d < D; ++d)
                    row[d] = attn_load_float(x->data, x->dtype, at + d * x->stride[3]);
                if (rope) attn_rope_row(rope, pos[b] + n, row, D);
            }
    return data;
}

attn_status attn_kvcache_update_attend_batch(attn_kvcache *cache, const attn_tensor *q,
                                             const attn_tensor *k_new, const attn_tensor *v_new,
                                             const int64_t *counts, const attn_rope *rope,
                                             const attn_kvcache_batch *batch, attn_tensor *out,
                                             attn_tensor *lse, const attn_sdpa_opts *opts,
                                             attn_error *err)
{
    RETURN_IF(!k_new != !v_new, err, ATTN_ERR_NULL, "%s: NULL while %s is given",
              k_new ? "v_new" : "k_new", k_new ? "k_new" : "v_new");
    RETURN_IF(!cache, err, ATTN_ERR_NULL, "cache: pointer is NULL");
    const attn_kvcache_config *g = &cache->cfg;
    if (k_new) {
        RETURN_IF_ERROR(attn_check_float_tensor(k_new, "key", 4, false, err));
        RETURN_IF(k_new->shape[3] != g->head_dim, err, ATTN_ERR_SHAPE,
                  "key: feature size is %lld, the cache holds %lld", (long long)k_new->shape[3],
                  (long long)g->head_dim);
    }
    /* the batch's view, leftpad checked against the lengths after the append */
    const int64_t Bq = batch && batch->cache_batch_idx && q ? q->shape[0] : g->batch;
    int64_t *pos = malloc((size_t)(2 * (Bq > 0 ? Bq : 1)) * sizeof *pos), *added = pos + Bq;
    RETURN_IF(!pos, err, ATTN_ERR_ALLOC, "kvcache: cannot allocate");
    const int64_t n = k_new ? k_new->shape[2] : 0;
    for (int64_t b = 0; b < Bq; ++b) added[b] = counts ? counts[b] : n;
    attn_kvcache view;
    int64_t *ints = NULL;
    kv_attend_call call;
    attn_status s = kv_batch_view(cache, q, batch, added, &view, &ints, err);
    if (s == ATTN_OK) s = kv_attend_prepare(&view, q, out, lse, opts, &call, err);
    if (s == ATTN_OK && k_new && k_new->shape[0] != view.cfg.batch)
        s = attn_fail(err, ATTN_ERR_SHAPE, "key: batch size is %lld, the call's is %lld",
                      (long long)k_new->shape[0], (long long)view.cfg.batch);
    for (int64_t b = 0; s == ATTN_OK && b < Bq; ++b) pos[b] = cache->len[kv_entry(&view, b)];
    free(ints);
    if (s == ATTN_OK && rope) { /* the furthest position either rotation reaches */
        int64_t max_pos = 0;
        const int64_t most = n > call.Nq ? n : call.Nq;
        for (int64_t b = 0; b < Bq; ++b)
            if (pos[b] + most - 1 > max_pos) max_pos = pos[b] + most - 1;
        s = attn_rope_check(rope, g->head_dim, max_pos, err);
    }
    attn_tensor kr, qr;
    float *kbuf = NULL, *qbuf = NULL;
    if (s == ATTN_OK && k_new) {
        kbuf = rotated_copy(k_new, rope, pos, &kr);
        if (!kbuf) s = attn_fail(err, ATTN_ERR_ALLOC, "kvcache: cannot allocate the rotated keys");
    }
    if (s == ATTN_OK && rope) {
        qbuf = rotated_copy(q, rope, pos, &qr);
        if (!qbuf) s = attn_fail(err, ATTN_ERR_ALLOC, "kvcache: cannot allocate the rotated queries");
    }
    if (s == ATTN_OK && k_new)
        s = kv_append(cache, &kr, v_new, counts, batch ? batch->cache_batch_idx : NULL, err);
    if (s == ATTN_OK) s = attn_kvcache_attend_batch(cache, rope ? &qr : q, out, lse, opts, batch, err);
    free(pos), free(kbuf), free(qbuf);
    return s;
}

attn_status attn_kvcache_update_attend(attn_kvcache *cache, const attn_tensor *q,
                                       const attn_tensor *k_new, const attn_tensor *v_new,
                                       const int64_t *counts, const attn_rope *rope,
                                       attn_tensor *out, attn_tensor *lse,
                                       const attn_sdpa_opts *opts, attn_error *err)
{
    return attn_kvcache_update_attend_batch(cache, q, k_new, v_new, counts, rope, NULL, out, lse,
                                            opts, err);
}
