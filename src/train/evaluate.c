/* Accuracy and mean loss of a model over a stream of examples, in batches. */
#include "train.h"

#include <stdlib.h>

enum { EVAL_BATCH = 250 };

attn_status attn_model_evaluate(attn_model *m, uint64_t seed, int64_t count, float *accuracy,
                                float *loss, int num_threads, attn_error *err)
{
    RETURN_IF(!m, err, ATTN_ERR_NULL, "model: NULL");
    RETURN_IF(count < 1, err, ATTN_ERR_ARG, "count: must be >= 1, got %lld", (long long)count);
    const attn_task *task = &m->cfg.task;
    const int64_t per = attn_task_seq_len(task) * ATTN_TASK_SLOTS;
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)(per * EVAL_BATCH));
    int32_t *targets = malloc(sizeof(int32_t) * EVAL_BATCH);
    attn_status s = tokens && targets ? ATTN_OK
                                      : attn_fail(err, ATTN_ERR_ALLOC, "evaluate: out of memory");
    double loss_sum = 0.0; /* batch means weighted by batch size, in order */
    int64_t hits = 0;
    for (int64_t first = 0; s == ATTN_OK && first < count; first += EVAL_BATCH) {
        const int64_t n = count - first < EVAL_BATCH ? count - first : EVAL_BATCH;
        float l = 0.0f;
        int64_t c = 0;
        s = attn_task_generate(task, seed, first, n, tokens, targets, err);
        if (s == ATTN_OK)
            s = attn_model_forward(m, tokens, targets, n, NULL, &l, &c, num_threads, err);
        loss_sum += (double)l * (double)n;
        hits += c;
    }
    free(tokens);
    free(targets);
    /* An evaluation leaves nothing for backward to use. */
    m->forward_batch = 0;
    if (s != ATTN_OK) return s;
    if (accuracy) *accuracy = (float)((double)hits / (double)count);
    if (loss) *loss = (float)(loss_sum / (double)count);
    attn_ok(err);
    return ATTN_OK;
}
