/*
 * test_kvprefix — shared prefixes in the paged KV cache (reference-counted
 * blocks, attn_kvcache_fork, copy-on-write, release and reuse), cascade
 * decode, and the batch mapping (cache_batch_idx, cache_leftpad).
 *
 * Groups:
 *   pool      a scripted history on a small float32 cache: fork, appends
 *             into shared partial and full blocks, resets, shortening,
 *             set_block_table; after every step the reference counts, the
 *             free count, which pool block each entry reads and every
 *             entry's keys and values (attn_kvcache_read, against the
 *             tokens this file appended) are as the rules say.
 *   formats   float32, bfloat16, float16, int8 and fp8 caches: a forked
 *             entry and its parent, each appended to afterwards, read back
 *             bit for bit what an unshared cache holding the same tokens
 *             reads (the copy takes the int8 row scales along).
 *   cascade   random batches (GQA, Nq 1..4, bottom-right causal or none,
 *             softcap, sinks, sometimes a window or ALiBi, every storage,
 *             block sizes 1..64): a prefix appended to one entry and forked
 *             to several, entries of their own beside them, then each
 *             entry's own tokens; attn_kvcache_attend's output and LSE
 *             against the float64 oracle over each entry's read-back keys
 *             (the accuracy criterion), the same bits for 1, 2 and 3
 *             threads, and within float32 roundings of the same batch in
 *             an unshared cache.
 *   batch     random cache_batch_idx (repeats allowed) and cache_leftpad on
 *             contiguous and paged caches, attend_batch against the oracle
 *             over keys [leftpad, length) of the named entry; then
 *             update_attend_batch appends to the named entries (the others
 *             unchanged) and attends with the lengths after.
 *   errors    misuse: fork on a contiguous cache, into a non-empty entry,
 *             onto itself, out of range; an append whose copy-on-write
 *             finds no free block (all or nothing); set_block_table taking
 *             another entry's block; batch indices and leftpad out of
 *             range; an entry named twice in an appending call.
 *
 * Usage: test_kvprefix [--seed S] [--cases N] [--group NAME] [--quick] [-v]
 */
#include "attn.h"
#include "ref64_variants.h"
#include "testutil.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SEED 0x5a4ef1c5ull

/* ------------------------------------------------------------------ pool */

enum { P_B = 4, P_H = 2, P_D = 3, P_BS = 4, P_CAP = 16, P_BLOCKS = 10 };

/* The value every token carries: key (entry tag, position, head, d). A
 * token is identified by a tag so a copied block can be told from the
 * original by its contents only where the contents differ. */
static float token_value(int tag, int64_t pos, int64_t h, int64_t d, bool value)
{
    return (float)(tag * 1000 + pos * 10 + h) + (float)d * 0.125f + (value ? 0.0625f : 0.0f);
}

/* Appends n tokens (tag, positions from..from+n) to entry b only. */
static bool append_tokens(attn_kvcache *c, int64_t b, int tag, int64_t n, attn_error *err)
{
    float k[P_B * P_H * P_CAP * P_D], v[P_B * P_H * P_CAP * P_D];
    const int64_t from = attn_kvcache_length(c, b);
    for (int64_t e = 0; e < P_B; ++e)
        for (int64_t h = 0; h < P_H; ++h)
            for (int64_t t = 0; t < n; ++t)
                for (int64_t d = 0; d < P_D; ++d) {
                    const int64_t at = ((e * P_H + h) * n + t) * P_D + d;
                    k[at] = token_value(tag, from + t, h, d, false);
                    v[at] = token_value(tag, from + t, h, d, true);
                }
    int64_t counts[P_B] = {0};
    counts[b] = n;
    attn_tensor K = attn_tensor_4d(k, P_B, P_H, n, P_D), V = attn_tensor_4d(v, P_B, P_H, n, P_D);
    return attn_kvcache_append(c, &K, &V, counts, err) == ATTN_OK;
}

/* Entry b reads tags[pos] at every position (its length = n). */
static bool entry_holds(const attn_kvcache *c, int64_t b, const int *tags, int64_t n)
{
    if (attn_kvcache_length(c, b) != n) return false;
    float k[P_H * P_CAP * P_D + 1], v[P_H * P_CAP * P_D + 1];
    attn_tensor K = attn_tensor_4d(k, 1, P_H, n, P_D), V = attn_tensor_4d(v, 1, P_H, n, P_D);
    if (attn_kvcache_read(c, b, &K, &V, NULL) != ATTN_OK) return false;
    for (int64_t h = 0; h < P_H; ++h)
        for (int64_t t = 0; t < n; ++t)
            for (int64_t d = 0; d < P_D; ++d) {
                const int64_t at = (h * n + t) * P_D + d;
                if (k[at] != token_value(tags[t], t, h, d, false) ||
                    v[at] != token_value(tags[t], t, h, d, true))
                    return false;
            }
    return true;
}

/* Entry b's block table equals want[0..n). */
static bool table_is(const attn_kvcache *c, int64_t b, const int32_t *want, int64_t n)
{
    int32_t tab[P_CAP];
    int64_t count = -1;
    if (attn_kvcache_block_table(c, b, tab, P_CAP, &count, NULL) != ATTN_OK || count != n)
        return false;
    return n == 0 || !memcmp(tab, want, (size_t)n * sizeof *tab);
}

/* Every block's reference count equals refs[] and the free count matches. */
static bool refs_are(const attn_kvcache *c, const int *refs)
{
    int64_t free_count = 0;
    for (int64_t p = 0; p < P_BLOCKS; ++p) {
        if (attn_kvcache_block_refs(c, p) != refs[p]) return false;
        free_count += refs[p] == 0;
    }
    return attn_kvcache_free_blocks(c) == free_count;
}

static void group_pool(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "pool");
    attn_kvcache_config cfg = {.batch = P_B, .kv_heads = P_H, .capacity = P_CAP, .head_dim = P_D,
                               .block_size = P_BS, .num_blocks = P_BLOCKS};
    attn_kvcache *c = NULL;
    attn_error err;
    if (!tu_check(&g, attn_kvcache_create(&cfg, &c, &err) == ATTN_OK, "create: %s", err.message)) {
        tu_group_end(&g);
        return;
    }
    int t0[P_CAP], t1[P_CAP], t2[P_CAP]; /* which tag each position of entries 0..2 holds */
    for (int i = 0; i < P_CAP; ++i) t0[i] = 1, t1[i] = 1, t2[i] = 1;

    /* entry 0: 6 tokens in blocks 0, 1 (block 1 half full) */
    tu_check(&g, append_tokens(c, 0, 1, 6, &err), "append 6 to entry 0: %s", err.message);
    tu_check(&g, refs_are(c, (int[P_BLOCKS]){1, 1}) && table_is(c, 0, (int32_t[]){0, 1}, 2),
             "after the first append: blocks 0 and 1 held once");
    /* fork: entry 1 shares both blocks */
    tu_check(&g, attn_kvcache_fork(c, 0, 1, &err) == ATTN_OK, "fork 0 -> 1: %s", err.message);
    tu_check(&g, refs_are(c, (int[P_BLOCKS]){2, 2}) && table_is(c, 1, (int32_t[]){0, 1}, 2) &&
                     entry_holds(c, 1, t0, 6),
             "fork: entry 1 reads entry 0's 6 tokens through blocks 0, 1 (counts 2)");
    /* entry 1 appends into the shared half-full block 1: copied to block 2 first */
    t1[6] = 2;
    tu_check(&g, append_tokens(c, 1, 2, 1, &err), "append 1 to entry 1: %s", err.message);
    tu_check(&g, refs_are(c, (int[P_BLOCKS]){2, 1, 1}) && table_is(c, 1, (int32_t[]){0, 2}, 2) &&
                     table_is(c, 0, (int32_t[]){0, 1}, 2),
             "copy-on-write: entry 1's block 1 became block 2, block 0 still shared");
    tu_check(&g, entry_holds(c, 0, t0, 6) && entry_holds(c, 1, t1, 7),
             "copy-on-write: the parent unchanged, the child its 6 shared + 1 own tokens");
    /* entry 0 appends into block 1, now its own: in place, no copy */
    tu_check(&g, append_tokens(c, 0, 1, 2, &err), "append 2 to entry 0: %s", err.message);
    tu_check(&g, refs_are(c, (int[P_BLOCKS]){2, 1, 1}) && table_is(c, 0, (int32_t[]){0, 1}, 2) &&
                     entry_holds(c, 0, t0, 8) && entry_holds(c, 1, t1, 7),
             "an unshared block is written in place");
    /* fork entry 0 (8 tokens, two full blocks) to entry 2; entry 2 appends: new block 3 */
    tu_check(&g, attn_kvcache_fork(c, 0, 2, &err) == ATTN_OK, "fork 0 -> 2: %s", err.message);
    t2[8] = 3;
    tu_check(&g, append_tokens(c, 2, 3, 1, &err), "append 1 to entry 2: %s", err.message);
    tu_check(&g, refs_are(c, (int[P_BLOCKS]){3, 2, 1, 1}) &&
                     table_is(c, 2, (int32_t[]){0, 1, 3}, 3) && entry_holds(c, 2, t2, 9) &&
                     entry_holds(c, 0, t0, 8),
             "full shared blocks are not copied; the append takes block 3");
    /* reset entry 0: its references go, nothing is freed (all still held) */
    tu_check(&g, attn_kvcache_reset(c, 0, &err) == ATTN_OK, "reset 0: %s", err.message);
    tu_check(&g, refs_are(c, (int[P_BLOCKS]){2, 1, 1, 1}) && attn_kvcache_length(c, 0) == 0 &&
                     table_is(c, 0, NULL, 0) && entry_holds(c, 2, t2, 9),
             "reset: entry 0 empty, blocks 0 and 1 still held by entries 1 and 2");
    /* reset entry 1: block 2 (its own) is free again; block 0 held once */
    tu_check(&g, attn_kvcache_reset(c, 1, &err) == ATTN_OK, "reset 1: %s", err.message);
    tu_check(&g, refs_are(c, (int[P_BLOCKS]){1, 1, 0, 1}), "reset: block 2 back in the pool");
    /* entry 3 appends 5 tokens: reuses block 2 (lowest free) and takes block 4 */
    int t3[P_CAP];
    for (int i = 0; i < P_CAP; ++i) t3[i] = 4;
    tu_check(&g, append_tokens(c, 3, 4, 5, &err), "append 5 to entry 3: %s", err.message);
    tu_check(&g, refs_are(c, (int[P_BLOCKS]){1, 1, 1, 1, 1}) &&
                     table_is(c, 3, (int32_t[]){2, 4}, 2) && entry_holds(c, 3, t3, 5) &&
                     entry_holds(c, 2, t2, 9),
             "a block is reused once its count is 0 (lowest first)");
    /* fork 2 -> 0, then shorten entry 0 to 3 tokens (block 0 only) and entry 2 keeps its 9 */
    tu_check(&g, attn_kvcache_fork(c, 2, 0, &err) == ATTN_OK, "fork 2 -> 0: %s", err.message);
    const int64_t lengths[P_B] = {3, 0, 9, 5};
    tu_check(&g, attn_kvcache_set_lengths(c, lengths, &err) == ATTN_OK, "set_lengths: %s",
             err.message);
    tu_check(&g, refs_are(c, (int[P_BLOCKS]){2, 1, 1, 1, 1}) && table_is(c, 0, (int32_t[]){0}, 1) &&
                     entry_holds(c, 0, t2, 3) && entry_holds(c, 2, t2, 9),
             "shortening a fork releases the blocks past its length only");
    /* entry 0 appends into block 0 (shared, 3 of 4 filled): a private copy (block 5) */
    int t0b[P_CAP];
    for (int i = 0; i < P_CAP; ++i) t0b[i] = i < 3 ? 1 : 5;
    tu_check(&g, append_tokens(c, 0, 5, 3, &err), "append 3 to entry 0: %s", err.message);
    tu_check(&g, refs_are(c, (int[P_BLOCKS]){1, 1, 1, 1, 1, 1, 1}) &&
                     table_is(c, 0, (int32_t[]){5, 6}, 2) && entry_holds(c, 0, t0b, 6) &&
                     entry_holds(c, 2, t2, 9),
             "a shortened fork appending into its shared last block copies it");
    /* set_block_table: entry 1 may not take entry 2's block 3; entry 2 may remap its own */
    tu_check(&g, attn_kvcache_set_block_table(c, 1, (int32_t[]){3}, 1, &err) == ATTN_ERR_ARG &&
                     strstr(err.message, "belongs to entry 2"),
             "set_block_table with another entry's block: '%s'", err.message);
    tu_check(&g, attn_kvcache_set_block_table(c, 2, (int32_t[]){0, 1, 3, 7}, 4, &err) == ATTN_OK &&
                     refs_are(c, (int[P_BLOCKS]){1, 1, 1, 1, 1, 1, 1, 1}) &&
                     entry_holds(c, 2, t2, 9),
             "set_block_table keeping the entry's blocks and adding a free one: %s", err.message);
    /* reset everything: every block free */
    for (int64_t b = 0; b < P_B; ++b) attn_kvcache_reset(c, b, NULL);
    tu_check(&g, refs_are(c, (int[P_BLOCKS]){0}), "all entries reset: the pool is empty");
    attn_kvcache_free(c);
    tu_group_end(&g);
}

/* --------------------------------------------------------------- formats */

static void group_formats(tu_suite *s, tu_rng *r)
{
    tu_group g;
    tu_group_begin(&g, s, "formats");
    static const struct {
        attn_dtype dtype;
        attn_kv_quant quant;
        const char *name;
    } fmts[] = {{ATTN_F32, ATTN_KV_FLOAT, "f32"},  {ATTN_BF16, ATTN_KV_FLOAT, "bf16"},
                {ATTN_F16, ATTN_KV_FLOAT, "f16"},  {ATTN_F32, ATTN_KV_INT8, "int8"},
                {ATTN_F32, ATTN_KV_FP8_E4M3, "fp8"}};
    enum { H = 2, D = 8, CAP = 40, PRE = 13, OWN = 9 };
    float k[2 * H * CAP * D], v[2 * H * CAP * D];
    for (int i = 0; i < 2 * H * CAP * D; ++i) {
        k[i] = (float)tu_rng_normal(r);
        v[i] = (float)tu_rng_normal(r);
    }
    for (size_t f = 0; f < sizeof fmts / sizeof *fmts; ++f) {
        attn_kvcache_config cfg = {.batch = 2, .kv_heads = H, .capacity = CAP, .head_dim = D,
                                   .block_size = 8, .dtype = fmts[f].dtype, .quant = fmts[f].quant};
        attn_kvcache *shared = NULL, *plain = NULL;
        attn_error err;
        bool ok = attn_kvcache_create(&cfg, &shared, &err) == ATTN_OK &&
                  attn_kvcache_create(&cfg, &plain, &err) == ATTN_OK;
        /* shared: PRE tokens in entry 0, forked to 1, then OWN more for each
         * (different tokens); plain: the same tokens appended per entry */
        attn_tensor pre = attn_tensor_4d(k, 2, H, PRE, D), prev = attn_tensor_4d(v, 2, H, PRE, D);
        pre.stride[0] = prev.stride[0] = 0; /* both entries the same prefix */
        pre.stride[1] = prev.stride[1] = CAP * D;
        attn_tensor own = attn_tensor_4d(k + PRE * D, 2, H, OWN, D);
        attn_tensor ownv = attn_tensor_4d(v + PRE * D, 2, H, OWN, D);
        own.stride[0] = ownv.stride[0] = H * CAP * D;
        own.stride[1] = ownv.stride[1] = CAP * D;
        const int64_t first[2] = {PRE, 0};
        ok = ok && attn_kvcache_append(shared, &pre, &prev, first, &err) == ATTN_OK &&
             attn_kvcache_fork(shared, 0, 1, &err) == ATTN_OK &&
             attn_kvcache_append(shared, &own, &ownv, NULL, &err) == ATTN_OK &&
             attn_kvcache_append(plain, &pre, &prev, NULL, &err) == ATTN_OK &&
             attn_kvcache_append(plain, &own, &ownv, NULL, &err) == ATTN_OK;
        for (int64_t b = 0; b < 2 && ok; ++b) {
            float a[2][2][H * (PRE + OWN) * D];
            for (int which = 0; which < 2; ++which) {
                attn_tensor K = attn_tensor_4d(a[which][0], 1, H, PRE + OWN, D);
                attn_tensor V = attn_tensor_4d(a[which][1], 1, H, PRE + OWN, D);
                ok = ok && attn_kvcache_read(which ? plain : shared, b, &K, &V, &err) == ATTN_OK;
            }
            ok = tu_check(&g, ok && !memcmp(a[0], a[1], sizeof a[0]),
                          "%s: entry %" PRId64 " of the forked cache reads other bits than the "
                          "unshared one (%s)",
                          fmts[f].name, b, err.message);
        }
        if (ok) tu_group_pass(&g);
        else tu_group_fail(&g, "%s: setup failed: %s", fmts[f].name, err.message);
        attn_kvcache_free(shared);
        attn_kvcache_free(plain);
    }
    tu_group_end(&g);
}

/* ----------------------------------------------------- oracle comparison */

/* The call's options as the oracle sees them. */
typedef struct {
    int64_t Hq, Hkv, Nq, D, Dv;
    attn_causal causal;
    attn_window window;
    float softcap;
    const float *slopes, *sinks; /* (Hq) or NULL */
} call_desc;

/* Output rows (Hq, Nq, Dv) and lse (Hq, Nq) of one batch entry against the
 * float64 oracle over keys [lp, L) of cache entry e, read back; false and
 * a FAIL line when the accuracy criterion fails. */
static bool judge_entry(tu_group *g, const attn_kvcache *c, int64_t e, int64_t lp,
                        const call_desc *d, const float *q, const float *out, const float *lse,
                        const char *rp)
{
    const int64_t L = attn_kvcache_length(c, e), Nk = L - lp;
    float *kd = malloc(sizeof(float) * (size_t)(d->Hkv * L * d->D + 1));
    float *vd = malloc(sizeof(float) * (size_t)(d->Hkv * L * d->Dv + 1));
    double *k64 = malloc(sizeof(double) * (size_t)(d->Hkv * Nk * d->D + 1));
    double *v64 = malloc(sizeof(double) * (size_t)(d->Hkv * Nk * d->Dv + 1));
    double *q64 = malloc(sizeof(double) * (size_t)(d->Hq * d->Nq * d->D));
    const int64_t no = d->Hq * d->Nq * d->Dv, nl = d->Hq * d->Nq;
    double *buf = calloc((size_t)(5 * no + 5 * nl), sizeof(double));
    attn_tensor KD = attn_tensor_4d(kd, 1, d->Hkv, L, d->D), VD = attn_tensor_4d(vd, 1, d->Hkv, L, d->Dv);
    attn_error err;
    bool ok = tu_check(g, attn_kvcache_read(c, e, &KD, &VD, &err) == ATTN_OK, "read: %s (%s)",
                       err.message, rp);
    for (int64_t h = 0; h < d->Hkv; ++h)
        for (int64_t j = 0; j < Nk; ++j) {
            for (int64_t x = 0; x < d->D; ++x)
                k64[(h * Nk + j) * d->D + x] = kd[(h * L + lp + j) * d->D + x];
            for (int64_t x = 0; x < d->Dv; ++x)
                v64[(h * Nk + j) * d->Dv + x] = vd[(h * L + lp + j) * d->Dv + x];
        }
    for (int64_t i = 0; i < d->Hq * d->Nq * d->D; ++i) q64[i] = q[i];
    double sl64[64], sk64[64];
    for (int64_t h = 0; h < d->Hq; ++h) {
        sl64[h] = d->slopes ? d->slopes[h] : 0.0;
        sk64[h] = d->sinks ? d->sinks[h] : 0.0;
    }
    rv_problem p = {.B = 1, .Hq = d->Hq, .Hkv = d->Hkv, .Nq = d->Nq, .Nk = Nk, .D = d->D,
                    .Dv = d->Dv, .scale = (double)(1.0f / sqrtf((float)d->D)), .causal = d->causal,
                    .window = d->window, .softcap = d->softcap,
                    .alibi = d->slopes ? sl64 : NULL, .sinks = d->sinks ? sk64 : NULL};
    double *ro = buf, *fo = ro + no, *mo = fo + no, *nat = mo + no, *go = nat + no;
    double *rl = go + no, *fl = rl + nl, *ml = fl + nl, *natl = ml + nl, *gl = natl + nl;
    rv_forward64(&p, q64, k64, v64, ro, rl, NULL, NULL);
    rv_forward32(&p, q64, k64, v64, fo, fl, NULL, NULL);
    rv_forward32fma(&p, q64, k64, v64, mo, ml, NULL, NULL);
    rv_natural(&p, q64, k64, v64, NULL, nat, natl, NULL, NULL, NULL, NULL, NULL);
    for (int64_t i = 0; i < no; ++i) go[i] = out[i];
    for (int64_t i = 0; i < nl; ++i) gl[i] = lse[i];
    rv_cmp cmp;
    char msg[512];
    if (ok && !rv_criterion(go, ro, fo, mo, nat, NULL, NULL, no, &cmp)) {
        rv_cmp_describe(&cmp, "out", msg, sizeof msg);
        ok = tu_check(g, false, "cache entry %" PRId64 " keys [%" PRId64 ", %" PRId64 "): %s (%s)",
                      e, lp, L, msg, rp);
    } else if (ok && !rv_criterion(gl, rl, fl, ml, natl, NULL, NULL, nl, &cmp)) {
        rv_cmp_describe(&cmp, "lse", msg, sizeof msg);
        ok = tu_check(g, false, "cache entry %" PRId64 " keys [%" PRId64 ", %" PRId64 "): %s (%s)",
                      e, lp, L, msg, rp);
    }
    free(kd), free(vd), free(k64), free(v64), free(q64), free(buf);
    return ok;
}

/* ------------------------------------------------------------- cascade */

static const struct {
    attn_dtype dtype;
    attn_kv_quant quant;
} storages[] = {{ATTN_F32, ATTN_KV_FLOAT},
                {ATTN_BF16, ATTN_KV_FLOAT},
                {ATTN_F16, ATTN_KV_FLOAT},
                {ATTN_F32, ATTN_KV_INT8},
                {ATTN_F32, ATTN_KV_FP8_E4M3}};

/* Random float32 (n) with an outlier channel in keys. */
static float *random_floats(tu_rng *r, int64_t n, int64_t D, bool outliers)
{
    float *x = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; ++i)
        x[i] = (float)(tu_rng_normal(r) * (outliers && i % D == 1 % D ? 8.0 : 1.0));
    return x;
}

static void cascade_case(tu_group *g, uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    const int64_t B = tu_rng_int(&r, 2, 6), Hkv = tu_rng_int(&r, 1, 3);
    const int64_t Hq = Hkv * tu_rng_int(&r, 1, 4), Nq = tu_rng_int(&r, 1, 4);
    static const int64_t dims[] = {4, 16, 64, 128}, blocks[] = {1, 3, 16, 16, 64};
    const int64_t D = tu_rng_pick(&r, dims, 4), Dv = tu_rng_chance(&r, 0.7) ? D : tu_rng_pick(&r, dims, 4);
    const int64_t bs = tu_rng_pick(&r, blocks, 5);
    const int64_t pre = tu_rng_int(&r, 0, 1500), cap = pre + 400;
    const int s_i = (int)tu_rng_int(&r, 0, 4);
    call_desc d = {.Hq = Hq, .Hkv = Hkv, .Nq = Nq, .D = D, .Dv = Dv};
    d.causal = tu_rng_chance(&r, 0.6) ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
    if (tu_rng_chance(&r, 0.1)) {
        d.window.enabled = true;
        d.window.left = tu_rng_int(&r, 0, 600);
        d.window.right = -1;
    }
    if (tu_rng_chance(&r, 0.2)) d.softcap = (float)tu_rng_range(&r, 2.0, 20.0);
    float slopes[16], sinks[16];
    for (int64_t h = 0; h < Hq; ++h) {
        slopes[h] = (float)tu_rng_range(&r, 0.0, 0.3);
        sinks[h] = (float)tu_rng_range(&r, -2.0, 2.0);
    }
    if (tu_rng_chance(&r, 0.1)) d.slopes = slopes;
    if (tu_rng_chance(&r, 0.25)) d.sinks = sinks;
    char rp[200];
    snprintf(rp, sizeof rp,
             "seed 0x%016" PRIx64 " B %" PRId64 " Hq %" PRId64 " Hkv %" PRId64 " D %" PRId64
             " Nq %" PRId64 " bs %" PRId64 " prefix %" PRId64 " storage %d",
             seed, B, Hq, Hkv, D, Nq, bs, pre, s_i);
    tu_crash_context("cascade %s", rp);
    attn_kvcache_config cfg = {.batch = B, .kv_heads = Hkv, .capacity = cap, .head_dim = D,
                               .value_dim = Dv, .block_size = bs, .dtype = storages[s_i].dtype,
                               .quant = storages[s_i].quant};
    attn_kvcache *shared = NULL, *plain = NULL;
    attn_error err;
    bool ok = tu_check(g, attn_kvcache_create(&cfg, &shared, &err) == ATTN_OK &&
                              attn_kvcache_create(&cfg, &plain, &err) == ATTN_OK,
                       "create: %s (%s)", err.message, rp);
    /* the prefix to entry 0, forked to the entries marked; the others get
     * the same prefix appended as their own copy; then own tokens */
    float *pk = random_floats(&r, Hkv * pre * D, D, true), *pv = random_floats(&r, Hkv * pre * Dv, Dv, false);
    attn_tensor PK = attn_tensor_4d(pk, B, Hkv, pre, D), PV = attn_tensor_4d(pv, B, Hkv, pre, Dv);
    PK.stride[0] = PV.stride[0] = 0;
    int64_t *counts = calloc((size_t)B, sizeof *counts);
    bool forked[8] = {true};
    counts[0] = pre;
    for (int64_t b = 1; b < B; ++b) {
        forked[b] = tu_rng_chance(&r, 0.75);
        counts[b] = forked[b] ? 0 : pre;
    }
    ok = ok && tu_check(g, attn_kvcache_append(shared, &PK, &PV, counts, &err) == ATTN_OK &&
                               attn_kvcache_append(plain, &PK, &PV, NULL, &err) == ATTN_OK,
                        "prefix append: %s (%s)", err.message, rp);
    for (int64_t b = 1; b < B && ok; ++b)
        if (forked[b])
            ok = tu_check(g, attn_kvcache_fork(shared, 0, b, &err) == ATTN_OK, "fork: %s (%s)",
                          err.message, rp);
    const int64_t most = 300;
    float *ok_k = random_floats(&r, B * Hkv * most * D, D, true);
    float *ok_v = random_floats(&r, B * Hkv * most * Dv, Dv, false);
    attn_tensor OK = attn_tensor_4d(ok_k, B, Hkv, most, D), OV = attn_tensor_4d(ok_v, B, Hkv, most, Dv);
    for (int64_t b = 0; b < B; ++b) counts[b] = tu_rng_chance(&r, 0.1) ? 0 : tu_rng_int(&r, 0, most);
    if (pre + counts[0] < Nq) counts[0] = Nq; /* someone sees something */
    ok = ok && tu_check(g, attn_kvcache_append(shared, &OK, &OV, counts, &err) == ATTN_OK &&
                               attn_kvcache_append(plain, &OK, &OV, counts, &err) == ATTN_OK,
                        "own append: %s (%s)", err.message, rp);
    const int64_t nq = B * Hq * Nq;
    float *q = random_floats(&r, nq * D, D, false);
    float *out[4], *lse[4];
    attn_tensor Q = attn_tensor_4d(q, B, Hq, Nq, D);
    attn_tensor sl = attn_tensor_1d(slopes, Hq), sk = attn_tensor_1d(sinks, Hq);
    for (int t = 0; t < 4; ++t) { /* 1, 2, 3 threads on the forked cache; the plain one */
        out[t] = malloc(sizeof(float) * (size_t)(nq * Dv));
        lse[t] = malloc(sizeof(float) * (size_t)nq);
        attn_sdpa_opts o = attn_sdpa_opts_default();
        o.causal = d.causal;
        o.window = d.window;
        o.softcap = d.softcap;
        o.alibi_slopes = d.slopes ? &sl : NULL;
        o.sinks = d.sinks ? &sk : NULL;
        o.num_threads = t < 3 ? t + 1 : 2;
        attn_tensor O = attn_tensor_4d(out[t], B, Hq, Nq, Dv), Ls = attn_tensor_3d(lse[t], B, Hq, Nq);
        ok = ok && tu_check(g, attn_kvcache_attend(t < 3 ? shared : plain, &Q, &O, &Ls, &o, &err) == ATTN_OK,
                            "attend: %s (%s)", err.message, rp);
    }
    for (int t = 1; t < 3 && ok; ++t)
        ok = tu_check(g, !memcmp(out[0], out[t], sizeof(float) * (size_t)(nq * Dv)) &&
                             !memcmp(lse[0], lse[t], sizeof(float) * (size_t)nq),
                      "%d threads give other bits than 1 (%s)", t + 1, rp);
    for (int64_t b = 0; b < B && ok; ++b)
        ok = judge_entry(g, shared, b, 0, &d, q + b * Hq * Nq * D, out[0] + b * Hq * Nq * Dv,
                         lse[0] + b * Hq * Nq, rp);
    /* against the unshared cache: a few float32 roundings of the merged output */
    double vmax = 0.0, diff = 0.0;
    for (int64_t i = 0; i < B * Hkv * most * Dv; ++i) vmax = fmax(vmax, fabs(ok_v[i]));
    for (int64_t i = 0; i < Hkv * pre * Dv; ++i) vmax = fmax(vmax, fabs(pv[i]));
    for (int64_t i = 0; i < nq * Dv && ok; ++i) diff = fmax(diff, fabs((double)out[0][i] - out[3][i]));
    if (ok)
        ok = tu_check(g, diff <= 16.0 * FLT_EPSILON * vmax,
                      "|cascade - unshared| = %g > 16 eps max|V| = %g (%s)", diff,
                      16.0 * FLT_EPSILON * vmax, rp);
    if (ok) tu_group_pass(g);
    for (int t = 0; t < 4; ++t) free(out[t]), free(lse[t]);
    free(pk), free(pv), free(ok_k), free(ok_v), free(q), free(counts);
    attn_kvcache_free(shared);
    attn_kvcache_free(plain);
}

static void group_cascade(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "cascade");
    const int cases = opt->cases > 0 ? opt->cases : opt->quick ? 25 : 80;
    for (int i = 0; i < cases; ++i) cascade_case(&g, tu_mix(opt->seed ^ (uint64_t)i));
    tu_group_end(&g);
}

/* --------------------------------------------------------------- batch */

static void batch_case(tu_group *g, uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    const int64_t Bc = tu_rng_int(&r, 1, 5), Bq = tu_rng_int(&r, 1, 6), Hkv = tu_rng_int(&r, 1, 2);
    const int64_t Hq = Hkv * tu_rng_int(&r, 1, 3), Nq = tu_rng_int(&r, 1, 3), D = 16, Dv = 8;
    static const int64_t blocks[] = {0, 0, 1, 8, 32};
    const int64_t bs = tu_rng_pick(&r, blocks, 5), cap = 700;
    const int s_i = (int)tu_rng_int(&r, 0, 4);
    call_desc d = {.Hq = Hq, .Hkv = Hkv, .Nq = Nq, .D = D, .Dv = Dv};
    d.causal = tu_rng_chance(&r, 0.6) ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
    if (tu_rng_chance(&r, 0.2)) {
        d.window.enabled = true;
        d.window.left = tu_rng_int(&r, 0, 300);
        d.window.right = tu_rng_chance(&r, 0.5) ? -1 : tu_rng_int(&r, 0, 5);
    }
    float slopes[8];
    for (int64_t h = 0; h < Hq; ++h) slopes[h] = (float)tu_rng_range(&r, 0.0, 0.3);
    if (tu_rng_chance(&r, 0.2)) d.slopes = slopes;
    char rp[200];
    snprintf(rp, sizeof rp,
             "seed 0x%016" PRIx64 " Bc %" PRId64 " Bq %" PRId64 " Hq %" PRId64 " Hkv %" PRId64
             " Nq %" PRId64 " bs %" PRId64 " storage %d",
             seed, Bc, Bq, Hq, Hkv, Nq, bs, s_i);
    tu_crash_context("batch %s", rp);
    attn_kvcache_config cfg = {.batch = Bc, .kv_heads = Hkv, .capacity = cap, .head_dim = D,
                               .value_dim = Dv, .block_size = bs, .dtype = storages[s_i].dtype,
                               .quant = storages[s_i].quant};
    attn_kvcache *c = NULL;
    attn_error err;
    bool ok = tu_check(g, attn_kvcache_create(&cfg, &c, &err) == ATTN_OK, "create: %s (%s)",
                       err.message, rp);
    const int64_t n0 = 500;
    float *k = random_floats(&r, Bc * Hkv * n0 * D, D, true), *v = random_floats(&r, Bc * Hkv * n0 * Dv, Dv, false);
    int64_t counts[8], idx[8], pad[8];
    for (int64_t b = 0; b < Bc; ++b) counts[b] = tu_rng_int(&r, Nq, n0);
    attn_tensor K = attn_tensor_4d(k, Bc, Hkv, n0, D), V = attn_tensor_4d(v, Bc, Hkv, n0, Dv);
    ok = ok && tu_check(g, attn_kvcache_append(c, &K, &V, counts, &err) == ATTN_OK, "append: %s (%s)",
                        err.message, rp);
    if (ok && bs > 0 && Bc > 1 && tu_rng_chance(&r, 0.5)) { /* entry 1 a fork of entry 0 */
        attn_kvcache_reset(c, 1, NULL);
        ok = tu_check(g, attn_kvcache_fork(c, 0, 1, &err) == ATTN_OK, "fork: %s (%s)", err.message, rp);
    }
    for (int64_t b = 0; b < Bq; ++b) {
        idx[b] = tu_rng_int(&r, 0, Bc - 1);
        const int64_t L = attn_kvcache_length(c, idx[b]);
        pad[b] = tu_rng_chance(&r, 0.3) ? 0 : tu_rng_int(&r, 0, L);
    }
    const bool use_idx = Bq != Bc || tu_rng_chance(&r, 0.7);
    attn_kvcache_batch sel = {.cache_batch_idx = use_idx ? idx : NULL, .cache_leftpad = pad};
    if (!use_idx)
        for (int64_t b = 0; b < Bq; ++b) {
            idx[b] = b;
            pad[b] = tu_rng_int(&r, 0, attn_kvcache_length(c, b));
        }
    const int64_t nq = Bq * Hq * Nq, nmax = (Bq > Bc ? Bq : Bc) * Hq * Nq; /* the update's too */
    float *q = random_floats(&r, nmax * D, D, false);
    float *out[2], *lse[2];
    attn_tensor Q = attn_tensor_4d(q, Bq, Hq, Nq, D), sl = attn_tensor_1d(slopes, Hq);
    for (int t = 0; t < 2; ++t) {
        out[t] = malloc(sizeof(float) * (size_t)(nmax * Dv));
        lse[t] = malloc(sizeof(float) * (size_t)nmax);
        attn_sdpa_opts o = attn_sdpa_opts_default();
        o.causal = d.causal;
        o.window = d.window;
        o.alibi_slopes = d.slopes ? &sl : NULL;
        o.num_threads = t + 1;
        attn_tensor O = attn_tensor_4d(out[t], Bq, Hq, Nq, Dv), Ls = attn_tensor_3d(lse[t], Bq, Hq, Nq);
        ok = ok && tu_check(g, attn_kvcache_attend_batch(c, &Q, &O, &Ls, &o, &sel, &err) == ATTN_OK,
                            "attend_batch: %s (%s)", err.message, rp);
    }
    ok = ok && tu_check(g, !memcmp(out[0], out[1], sizeof(float) * (size_t)(nq * Dv)),
                        "2 threads give other bits than 1 (%s)", rp);
    for (int64_t b = 0; b < Bq && ok; ++b)
        ok = judge_entry(g, c, idx[b], pad[b], &d, q + b * Hq * Nq * D, out[0] + b * Hq * Nq * Dv,
                         lse[0] + b * Hq * Nq, rp);
    /* update_attend_batch: 2 new tokens to distinct entries (a permutation's prefix) */
    int64_t perm[8], before[8], n_new = 2;
    for (int64_t b = 0; b < Bc; ++b) perm[b] = b;
    for (int64_t b = Bc - 1; b > 0; --b) {
        const int64_t j = tu_rng_int(&r, 0, b), t = perm[b];
        perm[b] = perm[j];
        perm[j] = t;
    }
    const int64_t Bu = tu_rng_int(&r, 1, Bc);
    for (int64_t b = 0; b < Bc; ++b) before[b] = attn_kvcache_length(c, b);
    for (int64_t b = 0; b < Bu; ++b) pad[b] = tu_rng_int(&r, 0, before[perm[b]] + n_new);
    float *kn = random_floats(&r, Bu * Hkv * n_new * D, D, false), *vn = random_floats(&r, Bu * Hkv * n_new * Dv, Dv, false);
    attn_tensor KN = attn_tensor_4d(kn, Bu, Hkv, n_new, D), VN = attn_tensor_4d(vn, Bu, Hkv, n_new, Dv);
    attn_tensor QU = attn_tensor_4d(q, Bu, Hq, Nq, D);
    attn_tensor O = attn_tensor_4d(out[0], Bu, Hq, Nq, Dv), Ls = attn_tensor_3d(lse[0], Bu, Hq, Nq);
    attn_kvcache_batch up = {.cache_batch_idx = perm, .cache_leftpad = pad};
    attn_sdpa_opts o = attn_sdpa_opts_default();
    o.causal = d.causal;
    o.window = d.window;
    o.alibi_slopes = d.slopes ? &sl : NULL;
    ok = ok && tu_check(g, attn_kvcache_update_attend_batch(c, &QU, &KN, &VN, NULL, NULL, &up, &O, &Ls, &o,
                                                            &err) == ATTN_OK,
                        "update_attend_batch: %s (%s)", err.message, rp);
    for (int64_t b = 0; b < Bc && ok; ++b) {
        bool named = false;
        for (int64_t i = 0; i < Bu; ++i) named |= perm[i] == b;
        ok = tu_check(g, attn_kvcache_length(c, b) == before[b] + (named ? n_new : 0),
                      "update_attend_batch: entry %" PRId64 " length %" PRId64 ", want %" PRId64 " (%s)",
                      b, attn_kvcache_length(c, b), before[b] + (named ? n_new : 0), rp);
    }
    for (int64_t b = 0; b < Bu && ok; ++b)
        ok = judge_entry(g, c, perm[b], pad[b], &d, q + b * Hq * Nq * D, out[0] + b * Hq * Nq * Dv,
                         lse[0] + b * Hq * Nq, rp);
    if (ok) tu_group_pass(g);
    for (int t = 0; t < 2; ++t) free(out[t]), free(lse[t]);
    free(k), free(v), free(q), free(kn), free(vn);
    attn_kvcache_free(c);
}

static void group_batch(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "batch");
    const int cases = opt->cases > 0 ? opt->cases : opt->quick ? 25 : 80;
    for (int i = 0; i < cases; ++i) batch_case(&g, tu_mix(opt->seed ^ 0xba7c4ull ^ (uint64_t)i));
    tu_group_end(&g);
}

/* ---------------------------------------------------------------- errors */

static void expect(tu_group *g, attn_status got, attn_status want, const attn_error *err,
                   const char *needle, const char *what)
{
    tu_check(g, got == want && strstr(err->message, needle),
             "%s: status %d (want %d), message '%s' (want '%s')", what, (int)got, (int)want,
             err->message, needle);
}

static void group_errors(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "errors");
    attn_error err;
    attn_kvcache *flat = NULL, *c = NULL;
    attn_kvcache_config cfg = {.batch = 3, .kv_heads = 1, .capacity = 12, .head_dim = 2};
    attn_kvcache_create(&cfg, &flat, &err);
    cfg.block_size = 4;
    cfg.num_blocks = 3;
    attn_kvcache_create(&cfg, &c, &err);
    if (!tu_check(&g, flat && c, "create: %s", err.message)) {
        tu_group_end(&g);
        return;
    }
    expect(&g, attn_kvcache_fork(flat, 0, 1, &err), ATTN_ERR_ARG, &err, "not paged", "fork contiguous");
    expect(&g, attn_kvcache_fork(NULL, 0, 1, &err), ATTN_ERR_NULL, &err, "cache", "fork NULL");
    tu_check(&g, attn_kvcache_block_refs(flat, 0) == -1 && attn_kvcache_free_blocks(flat) == -1 &&
                     attn_kvcache_block_refs(c, 3) == -1 && attn_kvcache_block_refs(c, -1) == -1,
             "block_refs / free_blocks: -1 for a contiguous cache or a block outside the pool");
    float x[3 * 6 * 2];
    for (int i = 0; i < 3 * 6 * 2; ++i) x[i] = (float)i;
    attn_tensor K6 = attn_tensor_4d(x, 3, 1, 6, 2);
    const int64_t six[3] = {6, 0, 0};
    tu_check(&g, attn_kvcache_append(c, &K6, &K6, six, &err) == ATTN_OK, "append: %s", err.message);
    expect(&g, attn_kvcache_fork(c, 0, 0, &err), ATTN_ERR_ARG, &err, "itself", "fork onto itself");
    expect(&g, attn_kvcache_fork(c, 0, 3, &err), ATTN_ERR_ARG, &err, "child", "fork child out of range");
    expect(&g, attn_kvcache_fork(c, -1, 1, &err), ATTN_ERR_ARG, &err, "parent", "fork parent out of range");
    tu_check(&g, attn_kvcache_fork(c, 0, 1, &err) == ATTN_OK, "fork: %s", err.message);
    expect(&g, attn_kvcache_fork(c, 0, 1, &err), ATTN_ERR_ARG, &err, "empty", "fork into a non-empty entry");
    /* pool: blocks 0, 1 shared by entries 0 and 1, block 2 free. Entry 0
     * appending 3 tokens copies block 1 (takes block 2) and needs one more:
     * refused, nothing changes */
    const int64_t three[3] = {3, 0, 0}, one_each[3] = {1, 1, 0};
    attn_tensor K3 = attn_tensor_4d(x, 3, 1, 3, 2), K1 = attn_tensor_4d(x, 3, 1, 1, 2);
    expect(&g, attn_kvcache_append(c, &K3, &K3, three, &err), ATTN_ERR_ARG, &err, "needs 2 new blocks",
           "append needing a copy and a block, one free");
    tu_check(&g, attn_kvcache_length(c, 0) == 6 && attn_kvcache_block_refs(c, 1) == 2 &&
                     attn_kvcache_free_blocks(c) == 1,
             "the refused append changed the cache");
    /* both entries append one token: entry 0 copies block 1 (block 2), then
     * entry 1 holds block 1 alone and writes in place: one block suffices */
    tu_check(&g, attn_kvcache_append(c, &K1, &K1, one_each, &err) == ATTN_OK &&
                     attn_kvcache_free_blocks(c) == 0 && attn_kvcache_block_refs(c, 1) == 1 &&
                     attn_kvcache_block_refs(c, 2) == 1,
             "append to both sharers of a block: one copy (%s)", err.message);
    attn_kvcache_reset(c, 1, NULL);
    expect(&g, attn_kvcache_set_block_table(c, 1, (int32_t[]){0}, 1, &err), ATTN_ERR_ARG, &err,
           "belongs to entry 0", "set_block_table with another entry's block");
    /* batch mapping */
    float q[4 * 2], o[4 * 2], l[4];
    attn_tensor Q = attn_tensor_4d(q, 2, 1, 1, 2), O = attn_tensor_4d(o, 2, 1, 1, 2), L = attn_tensor_3d(l, 2, 1, 1);
    memset(q, 0, sizeof q);
    const int64_t bad_idx[2] = {0, 3}, good_idx[2] = {0, 0}, big_pad[2] = {0, 12}, neg_pad[2] = {-1, 0};
    attn_kvcache_batch sel = {.cache_batch_idx = bad_idx};
    expect(&g, attn_kvcache_attend_batch(c, &Q, &O, &L, NULL, &sel, &err), ATTN_ERR_ARG, &err,
           "cache_batch_idx[1]", "batch index out of range");
    sel = (attn_kvcache_batch){.cache_batch_idx = good_idx, .cache_leftpad = big_pad};
    expect(&g, attn_kvcache_attend_batch(c, &Q, &O, &L, NULL, &sel, &err), ATTN_ERR_ARG, &err,
           "cache_leftpad[1]", "leftpad past the length");
    sel.cache_leftpad = neg_pad;
    expect(&g, attn_kvcache_attend_batch(c, &Q, &O, &L, NULL, &sel, &err), ATTN_ERR_ARG, &err,
           "cache_leftpad[0]", "negative leftpad");
    sel.cache_leftpad = NULL;
    tu_check(&g, attn_kvcache_attend_batch(c, &Q, &O, &L, NULL, &sel, &err) == ATTN_OK,
             "an entry read twice: %s", err.message);
    attn_tensor KN = attn_tensor_4d(x, 2, 1, 1, 2);
    const int64_t before = attn_kvcache_length(c, 0);
    expect(&g, attn_kvcache_update_attend_batch(c, &Q, &KN, &KN, NULL, NULL, &sel, &O, &L, NULL, &err),
           ATTN_ERR_ARG, &err, "appears twice", "append naming an entry twice");
    tu_check(&g, attn_kvcache_length(c, 0) == before, "the refused update changed the length");
    attn_tensor K3b = attn_tensor_4d(x, 3, 1, 1, 2);
    expect(&g, attn_kvcache_update_attend_batch(c, &Q, &K3b, &K3b, NULL, NULL, NULL, &O, &L, NULL, &err),
           ATTN_ERR_SHAPE, &err, "query", "q batch differs from the cache's without cache_batch_idx");
    attn_kvcache_free(flat);
    attn_kvcache_free(c);
    tu_group_end(&g);
}

int main(int argc, char **argv)
{
    tu_options opt;
    tu_suite s;
    if (!tu_begin(argc, argv, DEFAULT_SEED, &opt, &s)) return 2;
    tu_rng r;
    tu_rng_seed(&r, opt.seed);
    if (tu_group_selected(&opt, "pool")) group_pool(&s);
    if (tu_group_selected(&opt, "formats")) group_formats(&s, &r);
    if (tu_group_selected(&opt, "cascade")) group_cascade(&s, &opt);
    if (tu_group_selected(&opt, "batch")) group_batch(&s, &opt);
    if (tu_group_selected(&opt, "errors")) group_errors(&s);
    return tu_suite_finish(&s);
}
