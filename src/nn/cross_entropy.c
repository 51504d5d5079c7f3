/* Softmax cross-entropy with mean reduction (torch F.cross_entropy with
 * ignore_index for negative targets). The softmax is recomputed in the
 * backward: it costs one pass over the logits and saves a (T,C) buffer. */
#include "nn.h"

#include <math.h>

/* log Σ_c exp(row[c]), with the max subtracted so nothing overflows. */
static float row_logsumexp(const float *row, int64_t C)
{
    float m = -INFINITY;
    for (int64_t c = 0; c < C; ++c) m = row[c] > m ? row[c] : m;
    if (m == -INFINITY) return -INFINITY;
    float sum = 0.0f;
    for (int64_t c = 0; c < C; ++c) sum += expf(row[c] - m);
    return m + logf(sum);
}

/* Rows that count towards the mean; fails on a target >= C. */
static attn_status count_rows(const int32_t *targets, int64_t T, int64_t C, int64_t *count,
                              attn_error *err)
{
    RETURN_IF(T > 0 && !targets, err, ATTN_ERR_NULL, "targets: NULL");
    *count = 0;
    for (int64_t t = 0; t < T; ++t) {
        RETURN_IF(targets[t] >= C, err, ATTN_ERR_ARG,
                  "targets: %ld at row %lld is not a class below %lld", (long)targets[t],
                  (long long)t, (long long)C);
        *count += targets[t] >= 0;
    }
    return ATTN_OK;
}

/* logits (T,C), targets (T). */
attn_status attn_cross_entropy_forward(const attn_tensor *logits, const int32_t *targets,
                                       float *loss, int64_t *correct, attn_error *err)
{
    RETURN_IF_ERROR(nn_check_matrix(logits, "logits", -1, -1, false, err));
    RETURN_IF(!loss, err, ATTN_ERR_NULL, "loss: NULL");
    const int64_t T = logits->shape[0], C = logits->shape[1], ld = nn_row_stride(logits);
    RETURN_IF(C < 1, err, ATTN_ERR_SHAPE, "logits: needs at least one class");
    int64_t count = 0;
    RETURN_IF_ERROR(count_rows(targets, T, C, &count, err));

    double total = 0.0; /* rows summed in order */
    int64_t hits = 0;
    for (int64_t t = 0; t < T; ++t) {
        if (targets[t] < 0) continue;
        const float *row = (const float *)logits->data + t * ld;
        total += (double)(row_logsumexp(row, C) - row[targets[t]]);
        int64_t best = 0;
        for (int64_t c = 1; c < C; ++c)
            if (row[c] > row[best]) best = c;
        hits += best == targets[t];
    }
    *loss = count > 0 ? (float)(total / (double)count) : 0.0f;
    if (correct) *correct = hits;
    attn_ok(err);
    return ATTN_OK;
}

/* dlogits (T,C) overwritten; may be logits itself. */
attn_status attn_cross_entropy_backward(const attn_tensor *logits, const int32_t *targets,
                                        float dloss, attn_tensor *dlogits, attn_error *err)
{
    RETURN_IF_ERROR(nn_check_matrix(logits, "logits", -1, -1, false, err));
    const int64_t T = logits->shape[0], C = logits->shape[1];
    RETURN_IF_ERROR(nn_check_matrix(dlogits, "dlogits", T, C, true, err));
    RETURN_IF(C < 1, err, ATTN_ERR_SHAPE, "logits: needs at least one class");
    int64_t count = 0;
    RETURN_IF_ERROR(count_rows(targets, T, C, &count, err));
    const int64_t ld = nn_row_stride(logits), ldd = nn_row_stride(dlogits);
    /* In the forward pass loss = (1/count) Σ_t (lse_t - logits[t,target]),
     * so d logits[t,c] = dloss/count · (softmax_c - [c == target]). */
    const float g = count > 0 ? dloss / (float)count : 0.0f;
    for (int64_t t = 0; t < T; ++t) {
        const float *row = (const float *)logits->data + t * ld;
        float *drow = (float *)dlogits->data + t * ldd;
        if (targets[t] < 0) {
            for (int64_t c = 0; c < C; ++c) drow[c] = 0.0f;
            continue;
        }
        const float lse = row_logsumexp(row, C);
        for (int64_t c = 0; c < C; ++c) /* reads row[c] before writing drow[c] */
            drow[c] = g * (expf(row[c] - lse) - (c == targets[t] ? 1.0f : 0.0f));
    }
    attn_ok(err);
    return ATTN_OK;
}
