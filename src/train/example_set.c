/* Fingerprints of held-out examples, so training can skip any example that
 * equals one of them: a sorted array searched by bisection. */
#include "train.h"

#include <stdlib.h>

/* FNV-1a over the ids and the target, then a splitmix64 finaliser. */
uint64_t example_fingerprint(const int32_t *tokens, int64_t ntokens, int32_t target)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int64_t i = 0; i <= ntokens; ++i) {
        const uint32_t x = (uint32_t)(i < ntokens ? tokens[i] : target);
        for (int b = 0; b < 4; ++b) {
            h ^= (x >> (8 * b)) & 0xffu;
            h *= 0x100000001b3ull;
        }
    }
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

static int compare_u64(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

attn_status example_set_build(example_set *s, const int32_t *tokens, const int32_t *targets,
                              int64_t count, int64_t ntokens, attn_error *err)
{
    s->count = 0;
    s->hash = malloc(sizeof(uint64_t) * (size_t)(count > 0 ? count : 1));
    RETURN_IF(!s->hash, err, ATTN_ERR_ALLOC, "held-out set: out of memory");
    for (int64_t i = 0; i < count; ++i)
        s->hash[i] = example_fingerprint(tokens + i * ntokens, ntokens, targets[i]);
    qsort(s->hash, (size_t)count, sizeof(uint64_t), compare_u64);
    s->count = count;
    return ATTN_OK;
}

bool example_set_contains(const example_set *s, uint64_t fingerprint)
{
    int64_t lo = 0, hi = s->count;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (s->hash[mid] < fingerprint) lo = mid + 1;
        else hi = mid;
    }
    return lo < s->count && s->hash[lo] == fingerprint;
}

void example_set_free(example_set *s)
{
    free(s->hash);
    s->hash = NULL;
    s->count = 0;
}
