/* The synthetic tasks: seeded generators of (tokens, target) examples.
 *
 * Token ids: keys [0, K), values [K, K+V). Each position holds
 * ATTN_TASK_SLOTS ids, summed by the embedding; -1 is an empty slot.
 *
 *   recall       [k_1 v_1] [k_2 v_2] ... [k_P v_P] [k_q  -]    target v_q
 *   recall-prev  [k_1 v_1] ... [k_P v_P] [u  -] [k_q  -]        target (v_q, u)
 *
 * An entry's key and value share a position so that ONE attention step from
 * the query position, matching its key against every position's key, lands
 * on the position that also holds the answer. */
#include "../core/internal.h"
#include "../core/rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest vocabulary and class count the tasks accept. */
enum { TASK_MAX_IDS = 1 << 20 };

const char *attn_task_name(attn_task_kind kind)
{
    switch (kind) {
    case ATTN_TASK_RECALL: return "recall";
    case ATTN_TASK_RECALL_PREV: return "recall-prev";
    }
    return NULL;
}

bool attn_task_from_name(const char *name, attn_task_kind *kind)
{
    const attn_task_kind all[] = {ATTN_TASK_RECALL, ATTN_TASK_RECALL_PREV};
    for (size_t i = 0; name && i < sizeof all / sizeof all[0]; ++i)
        if (!strcmp(name, attn_task_name(all[i]))) {
            *kind = all[i];
            return true;
        }
    return false;
}

attn_status attn_task_check(const attn_task *task, attn_error *err)
{
    RETURN_IF(!task, err, ATTN_ERR_NULL, "task: NULL");
    RETURN_IF(!attn_task_name(task->kind), err, ATTN_ERR_ARG, "task: unknown kind %d",
              (int)task->kind);
    RETURN_IF(task->num_pairs < 1 || task->num_pairs > 4096, err, ATTN_ERR_ARG,
              "task: num_pairs must be in [1, 4096], got %ld", (long)task->num_pairs);
    RETURN_IF(task->num_keys < task->num_pairs || task->num_keys > TASK_MAX_IDS, err,
              ATTN_ERR_ARG, "task: num_keys must be in [num_pairs, %d], got %ld", TASK_MAX_IDS,
              (long)task->num_keys);
    RETURN_IF(task->num_values < 2 || task->num_values > TASK_MAX_IDS, err, ATTN_ERR_ARG,
              "task: num_values must be in [2, %d], got %ld", TASK_MAX_IDS,
              (long)task->num_values);
    RETURN_IF(attn_task_num_classes(task) > TASK_MAX_IDS, err, ATTN_ERR_ARG,
              "task: %lld classes is too many (max %d)", (long long)attn_task_num_classes(task),
              TASK_MAX_IDS);
    return ATTN_OK;
}

int64_t attn_task_seq_len(const attn_task *task)
{
    return task->num_pairs + (task->kind == ATTN_TASK_RECALL_PREV ? 2 : 1);
}

int64_t attn_task_vocab_size(const attn_task *task)
{
    return (int64_t)task->num_keys + task->num_values;
}

int64_t attn_task_num_classes(const attn_task *task)
{
    const int64_t v = task->num_values;
    return task->kind == ATTN_TASK_RECALL_PREV ? v * v : v;
}

/* Uniform integer in [0, n). */
static int32_t uniform_below(attn_rng *r, int32_t n)
{
    int32_t x = (int32_t)(attn_rng_uniform(r) * (double)n);
    return x < n ? x : n - 1;
}

/* Seed of example i of a stream: consecutive indices give unrelated
 * generators (attn_rng_seed runs the result through splitmix64). */
static uint64_t example_seed(uint64_t seed, int64_t i)
{
    return seed ^ ((uint64_t)i * 0xD1342543DE82EF95ull + 0x2545F4914F6CDD1Dull);
}

/* One example: tokens (seq_len, SLOTS), *target. keys is scratch (K). */
static void generate_one(const attn_task *task, attn_rng *r, int32_t *keys, int32_t *tokens,
                         int32_t *target)
{
    const int32_t K = task->num_keys, V = task->num_values, P = task->num_pairs;
    /* P distinct keys: the first P draws of a Fisher–Yates shuffle. */
    for (int32_t k = 0; k < K; ++k) keys[k] = k;
    for (int32_t p = 0; p < P; ++p) {
        const int32_t j = p + uniform_below(r, K - p);
        const int32_t t = keys[p];
        keys[p] = keys[j];
        keys[j] = t;
    }
    int32_t pos = 0, queried_value = 0;
    const int32_t queried = uniform_below(r, P);
    for (int32_t p = 0; p < P; ++p, ++pos) {
        const int32_t value = uniform_below(r, V);
        tokens[pos * ATTN_TASK_SLOTS + 0] = keys[p];
        tokens[pos * ATTN_TASK_SLOTS + 1] = K + value;
        if (p == queried) queried_value = value;
    }
    int32_t cls = queried_value;
    if (task->kind == ATTN_TASK_RECALL_PREV) {
        const int32_t lone = uniform_below(r, V);
        tokens[pos * ATTN_TASK_SLOTS + 0] = K + lone;
        tokens[pos * ATTN_TASK_SLOTS + 1] = -1;
        ++pos;
        cls = queried_value * V + lone;
    }
    tokens[pos * ATTN_TASK_SLOTS + 0] = keys[queried];
    tokens[pos * ATTN_TASK_SLOTS + 1] = -1;
    *target = cls;
}

attn_status attn_task_generate(const attn_task *task, uint64_t seed, int64_t first,
                               int64_t count, int32_t *tokens, int32_t *targets, attn_error *err)
{
    RETURN_IF_ERROR(attn_task_check(task, err));
    RETURN_IF(first < 0 || count < 0, err, ATTN_ERR_ARG, "first and count must be >= 0");
    RETURN_IF(count > 0 && (!tokens || !targets), err, ATTN_ERR_NULL, "tokens/targets: NULL");
    const int64_t per = attn_task_seq_len(task) * ATTN_TASK_SLOTS;
    int64_t total;
    RETURN_IF(!attn_mul_ok(per, count, &total) || !attn_add_ok(first, count, &total), err,
              ATTN_ERR_OVERFLOW, "count: too large");
    int32_t *keys = malloc(sizeof(int32_t) * (size_t)task->num_keys);
    RETURN_IF(!keys, err, ATTN_ERR_ALLOC, "task: out of memory");
    for (int64_t i = 0; i < count; ++i) {
        attn_rng r;
        attn_rng_seed(&r, example_seed(seed, first + i));
        generate_one(task, &r, keys, tokens + i * per, targets + i);
    }
    free(keys);
    attn_ok(err);
    return ATTN_OK;
}

void attn_task_token_label(const attn_task *task, int32_t id, char *buf, size_t size)
{
    if (!buf || size == 0) return;
    if (id < 0) snprintf(buf, size, "-");
    else if (id < task->num_keys) snprintf(buf, size, "k%ld", (long)id);
    else snprintf(buf, size, "v%ld", (long)(id - task->num_keys));
}

void attn_task_class_label(const attn_task *task, int32_t cls, char *buf, size_t size)
{
    if (!buf || size == 0) return;
    if (task->kind == ATTN_TASK_RECALL_PREV && task->num_values > 0)
        snprintf(buf, size, "v%ld,v%ld", (long)(cls / task->num_values),
                 (long)(cls % task->num_values));
    else
        snprintf(buf, size, "v%ld", (long)cls);
}
