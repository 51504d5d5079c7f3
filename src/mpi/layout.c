/* Which positions of the global sequence each rank holds (contiguous or
 * zigzag), and copies of a full tensor to and from a rank's slice. */
#include "ring.h"

#include <stdio.h>
#include <string.h>

/* Length of part i when n is cut into `parts` nearly equal parts (the first
 * n % parts get one more). */
static int64_t part_len(int64_t n, int64_t parts, int64_t i)
{
    return n / parts + (i < n % parts ? 1 : 0);
}

static int64_t part_start(int64_t n, int64_t parts, int64_t i)
{
    return i * (n / parts) + (i < n % parts ? i : n % parts);
}

attn_status attn_ring_layout(int64_t n, int ranks, int rank, bool causal, attn_ring_span *span,
                             attn_error *err)
{
    if (!span) return ring_fail(err, ATTN_ERR_NULL, "span: pointer is NULL");
    if (n < 0) return ring_fail(err, ATTN_ERR_SHAPE, "sequence length %lld is negative", (long long)n);
    if (ranks < 1 || rank < 0 || rank >= ranks)
        return ring_fail(err, ATTN_ERR_ARG, "rank %d of %d ranks is not valid", rank, ranks);
    memset(span, 0, sizeof *span);
    if (!causal) {
        span->count = 1;
        span->start[0] = part_start(n, ranks, rank);
        span->length[0] = part_len(n, ranks, rank);
    } else {
        const int64_t chunks = 2 * (int64_t)ranks, other = chunks - 1 - rank;
        span->count = 2;
        span->start[0] = part_start(n, chunks, rank);
        span->length[0] = part_len(n, chunks, rank);
        span->start[1] = part_start(n, chunks, other);
        span->length[1] = part_len(n, chunks, other);
    }
    if (err) err->status = ATTN_OK, err->message[0] = '\0';
    return ATTN_OK;
}

/* Copies positions [s0, s0+len) of src's dimension dim to [d0, d0+len) of
 * dst's; every other dimension is copied whole. */
static void copy_along(const attn_tensor *src, int64_t s0, attn_tensor *dst, int64_t d0,
                       int64_t len, int dim)
{
    const size_t esz = src->dtype == ATTN_BOOL ? 1 : sizeof(float);
    int64_t shape[ATTN_MAX_DIMS], idx[ATTN_MAX_DIMS] = {0}, total = 1;
    for (int d = 0; d < src->ndim; ++d) {
        shape[d] = d == dim ? len : src->shape[d];
        total *= shape[d];
    }
    for (int64_t e = 0; e < total; ++e) {
        int64_t so = 0, dof = 0;
        for (int d = 0; d < src->ndim; ++d) {
            const int64_t i = idx[d] + (d == dim ? s0 : 0), o = idx[d] + (d == dim ? d0 : 0);
            so += i * src->stride[d];
            dof += o * dst->stride[d];
        }
        memcpy((char *)dst->data + dof * (int64_t)esz, (const char *)src->data + so * (int64_t)esz,
               esz);
        for (int d = src->ndim - 1; d >= 0; --d) {
            if (++idx[d] < shape[d]) break;
            idx[d] = 0;
        }
    }
}

/* Checks full and local agree except along dim, where local has the rank's
 * length; fills the span. */
static attn_status check_pair(const attn_tensor *full, const attn_tensor *local, int dim,
                              int ranks, int rank, bool causal, attn_ring_span *span,
                              attn_error *err)
{
    if (!full || !local) return ring_fail(err, ATTN_ERR_NULL, "tensor is NULL");
    if (full->ndim != local->ndim || full->ndim < 1 || full->ndim > ATTN_MAX_DIMS)
        return ring_fail(err, ATTN_ERR_SHAPE, "full has %d dimensions, local %d", full->ndim,
                    local->ndim);
    if (full->dtype != local->dtype)
        return ring_fail(err, ATTN_ERR_DTYPE, "full and local have different element types");
    if (dim < 0 || dim >= full->ndim)
        return ring_fail(err, ATTN_ERR_ARG, "dimension %d is out of range", dim);
    attn_status s = attn_ring_layout(full->shape[dim], ranks, rank, causal, span, err);
    if (s != ATTN_OK) return s;
    const int64_t want = span->length[0] + span->length[1];
    for (int d = 0; d < full->ndim; ++d) {
        const int64_t w = d == dim ? want : full->shape[d];
        if (local->shape[d] != w)
            return ring_fail(err, ATTN_ERR_SHAPE, "local: size %lld in dimension %d, expected %lld",
                        (long long)local->shape[d], d, (long long)w);
    }
    if ((attn_tensor_numel(full) > 0 && !full->data) || (attn_tensor_numel(local) > 0 && !local->data))
        return ring_fail(err, ATTN_ERR_NULL, "tensor data is NULL");
    return ATTN_OK;
}

attn_status attn_ring_shard(const attn_tensor *full, int dim, int ranks, int rank, bool causal,
                            attn_tensor *local, attn_error *err)
{
    attn_ring_span sp;
    attn_status s = check_pair(full, local, dim, ranks, rank, causal, &sp, err);
    if (s != ATTN_OK) return s;
    int64_t at = 0;
    for (int i = 0; i < sp.count; ++i) {
        copy_along(full, sp.start[i], local, at, sp.length[i], dim);
        at += sp.length[i];
    }
    return ATTN_OK;
}

attn_status attn_ring_unshard(const attn_tensor *local, int dim, int ranks, int rank, bool causal,
                              attn_tensor *full, attn_error *err)
{
    attn_ring_span sp;
    attn_status s = check_pair(full, local, dim, ranks, rank, causal, &sp, err);
    if (s != ATTN_OK) return s;
    int64_t at = 0;
    for (int i = 0; i < sp.count; ++i) {
        copy_along(local, at, full, sp.start[i], sp.length[i], dim);
        at += sp.length[i];
    }
    return ATTN_OK;
}
