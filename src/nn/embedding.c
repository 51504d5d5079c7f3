/* Token embedding summed over slots: out[t] = Σ_s table[tokens[t,s]].
 * With one slot it is torch's nn.Embedding; with two, a key and a value can
 * share a position (the recall task's layout). */
#include "nn.h"

#include <string.h>

/* Every id must be < V (negative ids are empty slots). */
static attn_status check_ids(const int32_t *tokens, int64_t count, int64_t vocab,
                             attn_error *err)
{
    for (int64_t i = 0; i < count; ++i)
        RETURN_IF(tokens[i] >= vocab, err, ATTN_ERR_ARG,
                  "tokens: id %ld at index %lld is outside the vocabulary of %lld",
                  (long)tokens[i], (long long)i, (long long)vocab);
    return ATTN_OK;
}

/* table (V,E), tokens (T,slots), out (T,E). */
attn_status attn_embedding_forward(const attn_tensor *table, const int32_t *tokens,
                                   int64_t slots, attn_tensor *out, attn_error *err)
{
    RETURN_IF_ERROR(nn_check_matrix(table, "table", -1, -1, false, err));
    RETURN_IF_ERROR(nn_check_matrix(out, "out", -1, table->shape[1], true, err));
    const int64_t T = out->shape[0], E = out->shape[1], V = table->shape[0];
    RETURN_IF(slots < 1, err, ATTN_ERR_ARG, "slots: must be >= 1, got %lld", (long long)slots);
    int64_t count;
    RETURN_IF(!attn_mul_ok(T, slots, &count), err, ATTN_ERR_OVERFLOW, "tokens: size overflows");
    RETURN_IF(count > 0 && !tokens, err, ATTN_ERR_NULL, "tokens: NULL");
    RETURN_IF_ERROR(check_ids(tokens, count, V, err));

    const float *tab = table->data;
    const int64_t ldt = nn_row_stride(table), ldo = nn_row_stride(out);
    for (int64_t t = 0; t < T; ++t) {
        float *restrict row = (float *)out->data + t * ldo;
        memset(row, 0, (size_t)E * sizeof(float));
        for (int64_t s = 0; s < slots; ++s) {
            const int32_t id = tokens[t * slots + s];
            if (id < 0) continue;
            const float *restrict src = tab + (int64_t)id * ldt;
            for (int64_t e = 0; e < E; ++e) row[e] += src[e];
        }
    }
    attn_ok(err);
    return ATTN_OK;
}

/* dout (T,E), tokens (T,slots), dtable (V,E) accumulated. */
attn_status attn_embedding_backward(const attn_tensor *dout, const int32_t *tokens,
                                    int64_t slots, attn_tensor *dtable, attn_error *err)
{
    RETURN_IF_ERROR(nn_check_matrix(dtable, "dtable", -1, -1, true, err));
    RETURN_IF_ERROR(nn_check_matrix(dout, "dout", -1, dtable->shape[1], false, err));
    const int64_t T = dout->shape[0], E = dout->shape[1], V = dtable->shape[0];
    RETURN_IF(slots < 1, err, ATTN_ERR_ARG, "slots: must be >= 1, got %lld", (long long)slots);
    int64_t count;
    RETURN_IF(!attn_mul_ok(T, slots, &count), err, ATTN_ERR_OVERFLOW, "tokens: size overflows");
    RETURN_IF(count > 0 && !tokens, err, ATTN_ERR_NULL, "tokens: NULL");
    RETURN_IF_ERROR(check_ids(tokens, count, V, err));

    const int64_t ldd = nn_row_stride(dout), ldt = nn_row_stride(dtable);
    /* In the forward pass every slot's row was added into out[t], so now
     * dout[t] is added into each of those rows. One serial pass in (t, s)
     * order: a row used by several tokens always sums in the same order. */
    for (int64_t t = 0; t < T; ++t) {
        const float *restrict src = (const float *)dout->data + t * ldd;
        for (int64_t s = 0; s < slots; ++s) {
            const int32_t id = tokens[t * slots + s];
            if (id < 0) continue;
            float *restrict dst = (float *)dtable->data + (int64_t)id * ldt;
            for (int64_t e = 0; e < E; ++e) dst[e] += src[e];
        }
    }
    attn_ok(err);
    return ATTN_OK;
}
