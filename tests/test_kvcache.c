/*
 * test_kvcache — the KV cache (attn_kvcache_*).
 *
 * Groups:
 *   contiguous  random appends (per-entry counts, strided sources) then
 *               attend with Nq 1..16. With ATTN_PATH_FUSED (attn_sdpa's
 *               path): equal bit for bit to attn_sdpa on an independent
 *               contiguous copy of the keys; with AUTO (decode shapes take
 *               the decode kernel): the same bits for threads 1, 2 and 3;
 *               both within the accuracy criterion of the float64 oracle
 *               (tests/support/ref64_variants) with bottom-right causality,
 *               window, ALiBi (Hq) / (B, Hq), softcap and sinks.
 *   paged       the same appends into paged caches (block sizes 1..64,
 *               lockstep appends so entries' blocks interleave, and caller
 *               block tables that shuffle them), on both paths: an entry
 *               whose blocks are consecutive equals the contiguous cache
 *               read by the same path bit for bit; one that is merged from
 *               several runs stays within PAGED_BOUND·max|V| of it (and
 *               within the oracle criterion), with the same bits for
 *               threads 1, 2 and 3.
 *   decode      Nq 1..16 against Nk from 1 up to 16384 (65536 and 131072 with
 *               ATTN_TEST_FULL=1),
 *               H = 8, Hkv = 2, D = 128, against the float64 oracle on
 *               sampled query rows.
 *   lengths     set_lengths shrink/grow, blocks returned and reused lowest
 *               first, block_table readback.
 *   errors      bad configurations, cache overflow, counts out of range, an
 *               exhausted pool, lengths beyond capacity, block tables out of
 *               range / repeated / owned by another entry, refused options:
 *               each a clear error naming the argument, and the cache (its
 *               lengths, tables and what attend returns) unchanged.
 *
 * Usage: test_kvcache [--seed S] [--cases N] [--case SEED] [--group NAME] [--quick] [-v]
 */
#include "attn.h"
#include "ref64_variants.h"
#include "sdpa_judge.h"
#include "testutil.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SEED 0xcac4e10ull
#define MAX_B 4
/* |paged - contiguous| <= PAGED_BOUND · max|V| for merged entries: a few
 * float32 roundings of the output (each part and the merge round once). */
#define PAGED_BOUND (8.0 * (double)FLT_EPSILON)

typedef struct {
    int64_t B, Hq, Hkv, D, Dv, cap, Nq;
    attn_causal causal;
    attn_window window;
    float softcap;
    int alibi; /* 0, 1 (Hq), 2 (B, Hq) */
    bool sinks;
    int steps;                  /* append calls */
    int64_t block_size;         /* paged variant */
    bool lockstep, shuffle;     /* paged: interleave entries / caller block table */
} kcase;

static kcase random_case(uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    kcase c;
    memset(&c, 0, sizeof c);
    c.B = tu_rng_int(&r, 1, 3);
    c.Hkv = tu_rng_int(&r, 1, 2);
    c.Hq = c.Hkv * tu_rng_int(&r, 1, 4);
    static const int64_t dims[] = {1, 8, 16, 33, 64};
    c.D = tu_rng_pick(&r, dims, 5);
    c.Dv = tu_rng_chance(&r, 0.7) ? c.D : tu_rng_pick(&r, dims, 5);
    c.cap = tu_rng_chance(&r, 0.25) ? tu_rng_int(&r, 512, 1500) : tu_rng_int(&r, 1, 300); /* past 512: the decode kernel */
    c.Nq = tu_rng_int(&r, 1, 16);
    c.causal = tu_rng_chance(&r, 0.6) ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
    sj_random_variants(&r, 40, 10, &c.window, &c.softcap, &c.alibi, &c.sinks);
    c.steps = (int)tu_rng_int(&r, 1, 5);
    static const int64_t blocks[] = {1, 3, 8, 16, 64};
    c.block_size = tu_rng_pick(&r, blocks, 5);
    c.lockstep = tu_rng_chance(&r, 0.7);
    c.shuffle = tu_rng_chance(&r, 0.3);
    return c;
}

/* What the caches should hold: per entry (Hkv, cap, D) / (Hkv, cap, Dv). */
typedef struct {
    int64_t len[MAX_B];
    double *k, *v;
} shadow;

/* Appends the same random tokens to every cache and the shadow. */
static bool append_all(const kcase *c, tu_rng *r, attn_kvcache **caches, int ncache,
                       shadow *sh, tu_group *g, const char *rp)
{
    for (int step = 0; step < c->steps; ++step) {
        int64_t room = c->cap;
        for (int64_t b = 0; b < c->B; ++b)
            if (c->cap - sh->len[b] < room) room = c->cap - sh->len[b];
        const int64_t n = tu_rng_int(r, 0, step == c->steps - 1 ? c->cap : (c->cap + 2) / 3);
        int64_t counts[MAX_B];
        bool all = tu_rng_chance(r, 0.3) && n <= room;
        for (int64_t b = 0; b < c->B; ++b) {
            const int64_t left = c->cap - sh->len[b];
            counts[b] = all ? n : tu_rng_int(r, 0, n < left ? n : left);
        }
        const int64_t ks[4] = {c->B, c->Hkv, n, c->D}, vs[4] = {c->B, c->Hkv, n, c->Dv};
        tu_layout lk = tu_layout_random(r, 4, TU_LAYOUT_INPUT & ~TU_LAYOUT_BROADCAST);
        tu_layout lv = tu_layout_random(r, 4, TU_LAYOUT_INPUT & ~TU_LAYOUT_BROADCAST);
        tu_tensor K, V;
        if (!tu_tensor_alloc(&K, ATTN_F32, 4, ks, &lk) || !tu_tensor_alloc(&V, ATTN_F32, 4, vs, &lv))
            return false;
        tu_fill_uniform(&K.view, r, -1, 1);
        tu_fill_uniform(&V.view, r, -2, 2);
        attn_error err;
        for (int i = 0; i < ncache; ++i)
            if (!tu_check(g, attn_kvcache_append(caches[i], &K.view, &V.view, all ? NULL : counts,
                                                 &err) == ATTN_OK,
                          "append: %s (%s)", err.message, rp))
                return false;
        for (int64_t b = 0; b < c->B; ++b) {
            for (int64_t h = 0; h < c->Hkv; ++h)
                for (int64_t t = 0; t < counts[b]; ++t) {
                    const int64_t row = (b * c->Hkv + h) * c->cap + sh->len[b] + t;
                    for (int64_t d = 0; d < c->D; ++d)
                        sh->k[row * c->D + d] = tu_get(&K.view, ((b * c->Hkv + h) * n + t) * c->D + d);
                    for (int64_t d = 0; d < c->Dv; ++d)
                        sh->v[row * c->Dv + d] = tu_get(&V.view, ((b * c->Hkv + h) * n + t) * c->Dv + d);
                }
            sh->len[b] += counts[b];
        }
        tu_tensor_free(&K);
        tu_tensor_free(&V);
    }
    return true;
}

typedef struct {
    float slopes[MAX_B * 64], sinks[64];
    attn_tensor slopes_t, sinks_t;
} kvars;

static attn_sdpa_opts case_opts(const kcase *c, kvars *x, int threads)
{
    attn_sdpa_opts o = attn_sdpa_opts_default();
    o.causal = c->causal;
    o.window = c->window;
    o.softcap = c->softcap;
    x->slopes_t = c->alibi == 2 ? attn_tensor_2d(x->slopes, c->B, c->Hq)
                                : attn_tensor_1d(x->slopes, c->Hq);
    x->sinks_t = attn_tensor_1d(x->sinks, c->Hq);
    if (c->alibi) o.alibi_slopes = &x->slopes_t;
    if (c->sinks) o.sinks = &x->sinks_t;
    o.num_threads = threads;
    return o;
}

/* out (B,Hq,Nq,Dv), lse (B,Hq,Nq), stats (B,Hq,Nq,2) of one attend. */
typedef struct {
    float *out, *lse, *st;
    int64_t no, nl;
} kres;

static bool res_alloc(const kcase *c, kres *r)
{
    r->no = c->B * c->Hq * c->Nq * c->Dv;
    r->nl = c->B * c->Hq * c->Nq;
    r->out = malloc(sizeof(float) * (size_t)r->no);
    r->lse = malloc(sizeof(float) * (size_t)r->nl);
    r->st = malloc(sizeof(float) * (size_t)(2 * r->nl));
    return r->out && r->lse && r->st;
}

static void res_free(kres *r)
{
    free(r->out), free(r->lse), free(r->st);
}

static attn_status attend(const kcase *c, const attn_kvcache *cache, const attn_tensor *q,
                          kvars *x, int threads, attn_path path, kres *r, attn_error *err)
{
    attn_tensor out = attn_tensor_4d(r->out, c->B, c->Hq, c->Nq, c->Dv);
    attn_tensor lse = attn_tensor_3d(r->lse, c->B, c->Hq, c->Nq);
    attn_tensor st = attn_tensor_4d(r->st, c->B, c->Hq, c->Nq, 2);
    attn_sdpa_opts o = case_opts(c, x, threads);
    o.softmax_stats = &st;
    o.path = path;
    return attn_kvcache_attend(cache, q, &out, &lse, &o, err);
}

static bool res_equal(const kres *a, const kres *b)
{
    return !memcmp(a->out, b->out, sizeof(float) * (size_t)a->no) &&
           !memcmp(a->lse, b->lse, sizeof(float) * (size_t)a->nl) &&
           !memcmp(a->st, b->st, sizeof(float) * (size_t)(2 * a->nl));
}

/* Entry b's slice of the results equal bit for bit? */
static bool entry_equal(const kcase *c, const kres *a, const kres *b, int64_t e)
{
    const int64_t no = c->Hq * c->Nq * c->Dv, nl = c->Hq * c->Nq;
    return !memcmp(a->out + e * no, b->out + e * no, sizeof(float) * (size_t)no) &&
           !memcmp(a->lse + e * nl, b->lse + e * nl, sizeof(float) * (size_t)nl) &&
           !memcmp(a->st + 2 * e * nl, b->st + 2 * e * nl, sizeof(float) * (size_t)(2 * nl));
}

/* attn_sdpa (ATTN_PATH_FUSED) per entry on an independent contiguous copy of its keys. */
static attn_status direct(const kcase *c, const shadow *sh, const attn_tensor *q, kvars *x,
                          kres *r, attn_error *err)
{
    for (int64_t b = 0; b < c->B; ++b) {
        const int64_t L = sh->len[b];
        float *k = malloc(sizeof(float) * (size_t)(c->Hkv * L * c->D + 1));
        float *v = malloc(sizeof(float) * (size_t)(c->Hkv * L * c->Dv + 1));
        for (int64_t h = 0; h < c->Hkv; ++h)
            for (int64_t t = 0; t < L; ++t) {
                const int64_t row = (b * c->Hkv + h) * c->cap + t;
                for (int64_t d = 0; d < c->D; ++d)
                    k[(h * L + t) * c->D + d] = (float)sh->k[row * c->D + d];
                for (int64_t d = 0; d < c->Dv; ++d)
                    v[(h * L + t) * c->Dv + d] = (float)sh->v[row * c->Dv + d];
            }
        attn_tensor K = attn_tensor_4d(k, 1, c->Hkv, L, c->D), V = attn_tensor_4d(v, 1, c->Hkv, L, c->Dv);
        attn_tensor qb = *q;
        qb.data = (float *)q->data + b * q->stride[0];
        qb.shape[0] = 1;
        const int64_t no = c->Hq * c->Nq * c->Dv, nl = c->Hq * c->Nq;
        attn_tensor out = attn_tensor_4d(r->out + b * no, 1, c->Hq, c->Nq, c->Dv);
        attn_tensor lse = attn_tensor_3d(r->lse + b * nl, 1, c->Hq, c->Nq);
        attn_tensor st = attn_tensor_4d(r->st + 2 * b * nl, 1, c->Hq, c->Nq, 2);
        attn_sdpa_opts o = case_opts(c, x, 2);
        o.path = ATTN_PATH_FUSED; /* the path the cache's bits are compared on */
        attn_tensor sl = x->slopes_t;
        if (c->alibi == 2) {
            sl.data = x->slopes + b * c->Hq;
            sl.shape[0] = 1;
            o.alibi_slopes = &sl;
        }
        o.softmax_stats = &st;
        attn_status s = attn_sdpa(&qb, &K, &V, &out, &lse, NULL, &o, err);
        free(k);
        free(v);
        if (s != ATTN_OK) return s;
    }
    return ATTN_OK;
}

/* Every entry against the float64 oracle (rows: NULL = all). */
static bool check_oracle(tu_group *g, const kcase *c, const shadow *sh, const double *q64,
                         const kvars *x, const kres *r, const uint8_t *rows, const char *what,
                         const char *rp)
{
    bool ok = true;
    for (int64_t b = 0; b < c->B && ok; ++b) {
        const int64_t L = sh->len[b], Nq = c->Nq;
        double *k = malloc(sizeof(double) * (size_t)(c->Hkv * L * c->D + 1));
        double *v = malloc(sizeof(double) * (size_t)(c->Hkv * L * c->Dv + 1));
        for (int64_t h = 0; h < c->Hkv; ++h)
            for (int64_t t = 0; t < L; ++t) {
                const int64_t row = (b * c->Hkv + h) * c->cap + t;
                memcpy(k + (h * L + t) * c->D, sh->k + row * c->D, sizeof(double) * (size_t)c->D);
                memcpy(v + (h * L + t) * c->Dv, sh->v + row * c->Dv, sizeof(double) * (size_t)c->Dv);
            }
        double slopes[64], sinks[64];
        for (int64_t h = 0; h < c->Hq; ++h) {
            slopes[h] = x->slopes[(c->alibi == 2 ? b * c->Hq : 0) + h];
            sinks[h] = x->sinks[h];
        }
        rv_problem p = {.B = 1, .Hq = c->Hq, .Hkv = c->Hkv, .Nq = Nq, .Nk = L, .D = c->D,
                        .Dv = c->Dv, .scale = (double)(1.0f / sqrtf((float)c->D)),
                        .causal = c->causal, .window = c->window, .softcap = c->softcap,
                        .alibi = c->alibi ? slopes : NULL, .sinks = c->sinks ? sinks : NULL,
                        .rows = rows};
        const int64_t no = c->Hq * Nq * c->Dv, nl = c->Hq * Nq;
        double *buf = calloc((size_t)(3 * no + 4 * nl), sizeof(double));
        double *ro = buf, *fo = ro + no, *nat = fo + no, *rl = nat + no, *fl = rl + nl,
               *nlat = fl + nl, *got = nlat + nl;
        double *goto_ = malloc(sizeof(double) * (size_t)no);
        double *mo = malloc(sizeof(double) * (size_t)(no + nl)), *ml = mo + no;
        uint8_t *skip_o = calloc((size_t)no, 1), *skip_l = calloc((size_t)nl, 1);
        for (int64_t h = 0; h < c->Hq; ++h)
            for (int64_t i = 0; i < Nq; ++i) {
                const bool off = rows && !rows[i];
                skip_l[h * Nq + i] = off;
                for (int64_t d = 0; d < c->Dv; ++d) skip_o[(h * Nq + i) * c->Dv + d] = off;
            }
        const double *qb = q64 + b * c->Hq * Nq * c->D;
        rv_forward64(&p, qb, k, v, ro, rl, NULL, NULL);
        rv_forward32(&p, qb, k, v, fo, fl, NULL, NULL);
        rv_forward32fma(&p, qb, k, v, mo, ml, NULL, NULL);
        rv_natural(&p, qb, k, v, NULL, nat, nlat, NULL, NULL, NULL, NULL, NULL);
        for (int64_t e = 0; e < no; ++e) goto_[e] = r->out[b * no + e];
        for (int64_t e = 0; e < nl; ++e) got[e] = r->lse[b * nl + e];
        rv_cmp cmp;
        char buf2[512];
        if (!rv_criterion(goto_, ro, fo, mo, nat, NULL, skip_o, no, &cmp)) {
            rv_cmp_describe(&cmp, "out", buf2, sizeof buf2);
            tu_group_fail(g, "%s entry %" PRId64 " (length %" PRId64 "): %s (%s)", what, b, L, buf2, rp);
            ok = false;
        } else if (!rv_criterion(got, rl, fl, ml, nlat, NULL, skip_l, nl, &cmp)) {
            rv_cmp_describe(&cmp, "lse", buf2, sizeof buf2);
            tu_group_fail(g, "%s entry %" PRId64 " (length %" PRId64 "): %s (%s)", what, b, L, buf2, rp);
            ok = false;
        }
        free(buf), free(goto_), free(mo), free(skip_o), free(skip_l), free(k), free(v);
    }
    return ok;
}

/* The paged cache's entries that are merged from several runs. */
static bool entry_merged(const attn_kvcache *cache, int64_t b)
{
    int32_t table[1024];
    int64_t n = 0;
    attn_kvcache_block_table(cache, b, table, 1024, &n, NULL);
    const int64_t bs = attn_kvcache_get_config(cache)->block_size, L = attn_kvcache_length(cache, b);
    for (int64_t i = 1; i < n && i * bs < L; ++i)
        if (table[i] != table[i - 1] + 1) return true;
    return false;
}

/* Refills a paged cache from the shadow, entry by entry: lengths 0, then
 * (shuffle) caller block tables dealt from a random permutation of the
 * pool, or pool allocation (consecutive blocks per entry); then appends. */
static bool reload(const kcase *c, attn_kvcache *cache, const shadow *sh, tu_rng *r, bool shuffle)
{
    const attn_kvcache_config *g = attn_kvcache_get_config(cache);
    int64_t zero[MAX_B] = {0};
    if (attn_kvcache_set_lengths(cache, zero, NULL) != ATTN_OK) return false;
    /* a random permutation of the pool, dealt out to the entries */
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)g->num_blocks);
    for (int64_t i = 0; i < g->num_blocks; ++i) perm[i] = (int32_t)i;
    for (int64_t i = g->num_blocks - 1; i > 0; --i) {
        const int64_t j = tu_rng_int(r, 0, i);
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int64_t used = 0;
    bool ok = true;
    for (int64_t b = 0; b < c->B && ok && shuffle; ++b) {
        const int64_t n = (sh->len[b] + g->block_size - 1) / g->block_size;
        ok = attn_kvcache_set_block_table(cache, b, perm + used, n, NULL) == ATTN_OK;
        used += n;
    }
    free(perm);
    for (int64_t b = 0; b < c->B && ok; ++b) {
        /* re-append entry b's tokens only */
        const int64_t L = sh->len[b];
        float *k = calloc((size_t)(c->B * c->Hkv * (L + 1) * c->D), sizeof(float));
        float *v = calloc((size_t)(c->B * c->Hkv * (L + 1) * c->Dv), sizeof(float));
        for (int64_t h = 0; h < c->Hkv; ++h)
            for (int64_t t = 0; t < L; ++t) {
                const int64_t row = (b * c->Hkv + h) * c->cap + t;
                for (int64_t d = 0; d < c->D; ++d)
                    k[((b * c->Hkv + h) * L + t) * c->D + d] = (float)sh->k[row * c->D + d];
                for (int64_t d = 0; d < c->Dv; ++d)
                    v[((b * c->Hkv + h) * L + t) * c->Dv + d] = (float)sh->v[row * c->Dv + d];
            }
        attn_tensor K = attn_tensor_4d(k, c->B, c->Hkv, L, c->D), V = attn_tensor_4d(v, c->B, c->Hkv, L, c->Dv);
        int64_t counts[MAX_B] = {0};
        counts[b] = L;
        ok = attn_kvcache_append(cache, &K, &V, counts, NULL) == ATTN_OK;
        free(k);
        free(v);
    }
    return ok;
}

/* Paged entries judged by the bound, and the largest |paged - contiguous|
 * seen, in units of eps·max|V|. */
static int64_t g_merged;
static double g_worst_units;

static void run_case(tu_group *gc, tu_group *gp, uint64_t seed)
{
    const kcase c = random_case(seed);
    char rp[96];
    snprintf(rp, sizeof rp, "ATTN_TEST_CASE=0x%016" PRIx64 " ./test_kvcache", seed);
    tu_crash_context("%s", rp);
    tu_rng r;
    tu_rng_seed(&r, seed ^ 0xfeed);
    attn_kvcache_config cc = {.batch = c.B, .kv_heads = c.Hkv, .capacity = c.cap,
                              .head_dim = c.D, .value_dim = c.Dv};
    attn_kvcache_config pc = cc;
    pc.block_size = c.block_size;
    attn_kvcache *caches[2] = {NULL, NULL};
    attn_error err;
    if (attn_kvcache_create(&cc, &caches[0], &err) != ATTN_OK ||
        attn_kvcache_create(&pc, &caches[1], &err) != ATTN_OK) {
        tu_group_fail(gc, "create: %s (%s)", err.message, rp);
        attn_kvcache_free(caches[0]);
        return;
    }
    shadow sh;
    memset(&sh, 0, sizeof sh);
    sh.k = calloc((size_t)(c.B * c.Hkv * c.cap * c.D), sizeof(double));
    sh.v = calloc((size_t)(c.B * c.Hkv * c.cap * c.Dv), sizeof(double));
    kvars x;
    for (int64_t i = 0; i < MAX_B * 64; ++i) x.slopes[i] = (float)tu_rng_range(&r, 0.01, 0.3);
    for (int64_t i = 0; i < 64; ++i) x.sinks[i] = (float)tu_rng_range(&r, -2, 2);
    kres a, f, d, p, p1, p3;
    tu_tensor Q;
    const int64_t qs[4] = {c.B, c.Hq, c.Nq, c.D};
    tu_layout lq = tu_layout_random(&r, 4, TU_LAYOUT_OUTPUT);
    bool ok = tu_tensor_alloc(&Q, ATTN_F32, 4, qs, &lq) && res_alloc(&c, &a) && res_alloc(&c, &f) &&
              res_alloc(&c, &d) && res_alloc(&c, &p) && res_alloc(&c, &p1) && res_alloc(&c, &p3);
    if (!ok) {
        tu_group_fail(gc, "allocation failed (%s)", rp);
        return;
    }
    tu_fill_uniform(&Q.view, &r, -1.5, 1.5);
    double *q64 = malloc(sizeof(double) * (size_t)(c.B * c.Hq * c.Nq * c.D));
    tu_to_f64(&Q.view, q64);
    /* lockstep: both caches get every append; else the paged one is filled
     * entry by entry afterwards (consecutive blocks per entry) */
    ok = append_all(&c, &r, caches, c.lockstep ? 2 : 1, &sh, gc, rp);
    if (ok && !c.lockstep) {
        ok = reload(&c, caches[1], &sh, &r, c.shuffle);
    }
    if (!ok) {
        tu_group_fail(gc, "filling the caches failed: %s (%s)", err.message, rp);
        goto done;
    }
    /* contiguous, ATTN_PATH_FUSED: attn_sdpa's bits (its own views and a
     * copy); AUTO (the decode kernel for decode shapes): the oracle and the
     * same bits for threads 1, 2 and 3 */
    static const attn_path paths[2] = {ATTN_PATH_AUTO, ATTN_PATH_FUSED};
    kres *contig[2] = {&a, &f};
    for (int pi = 0; pi < 2; ++pi)
        if (attend(&c, caches[0], &Q.view, &x, 2, paths[pi], contig[pi], &err) != ATTN_OK) {
            tu_group_fail(gc, "attend: %s (%s)", err.message, rp);
            goto done;
        }
    if (direct(&c, &sh, &Q.view, &x, &d, &err) != ATTN_OK) {
        tu_group_fail(gc, "attn_sdpa on a copy: %s (%s)", err.message, rp);
        goto done;
    }
    bool same = true;
    for (int64_t b = 0; b < c.B; ++b) same &= entry_equal(&c, &f, &d, b);
    if (tu_check(gc, same, "contiguous attend (fused) != attn_sdpa on a contiguous copy (%s)", rp) &&
        check_oracle(gc, &c, &sh, q64, &x, &f, NULL, "contiguous (fused)", rp)) {
        if (attend(&c, caches[0], &Q.view, &x, 1, ATTN_PATH_AUTO, &p1, &err) != ATTN_OK ||
            attend(&c, caches[0], &Q.view, &x, 3, ATTN_PATH_AUTO, &p3, &err) != ATTN_OK) {
            tu_group_fail(gc, "attend: %s (%s)", err.message, rp);
            goto done;
        }
        if (tu_check(gc, res_equal(&a, &p1) && res_equal(&a, &p3), "contiguous: threads 1/2/3 differ (%s)", rp) &&
            check_oracle(gc, &c, &sh, q64, &x, &a, NULL, "contiguous", rp))
            tu_group_pass(gc);
    }

    /* paged, both paths: against the contiguous cache read the same way */
    bool paged_ok = true;
    for (int pi = 0; pi < 2 && paged_ok; ++pi) {
        const kres *ref = contig[pi];
        if (attend(&c, caches[1], &Q.view, &x, 2, paths[pi], &p, &err) != ATTN_OK ||
            attend(&c, caches[1], &Q.view, &x, 1, paths[pi], &p1, &err) != ATTN_OK ||
            attend(&c, caches[1], &Q.view, &x, 3, paths[pi], &p3, &err) != ATTN_OK) {
            tu_group_fail(gp, "paged attend: %s (%s)", err.message, rp);
            goto done;
        }
        paged_ok &= tu_check(gp, res_equal(&p, &p1) && res_equal(&p, &p3),
                             "paged (path %d): threads 1/2/3 differ (%s)", (int)paths[pi], rp);
        for (int64_t b = 0; b < c.B; ++b) {
            if (!entry_merged(caches[1], b)) {
                paged_ok &= tu_check(gp, entry_equal(&c, &p, ref, b),
                                     "paged entry %" PRId64 " (one run, path %d) != contiguous (%s)", b,
                                     (int)paths[pi], rp);
                continue;
            }
            double vmax = 0.0, worst = 0.0;
            for (int64_t e = 0; e < c.Hkv * sh.len[b] * c.Dv; ++e) {
                const int64_t h = e / (sh.len[b] * c.Dv), rest = e % (sh.len[b] * c.Dv);
                const double val = fabs(sh.v[(b * c.Hkv + h) * c.cap * c.Dv + rest]);
                if (val > vmax) vmax = val;
            }
            const int64_t no = c.Hq * c.Nq * c.Dv;
            for (int64_t e = 0; e < no; ++e) {
                const double diff = fabs((double)p.out[b * no + e] - (double)ref->out[b * no + e]);
                if (!(diff <= worst)) worst = diff;
            }
            g_merged++;
            if (vmax > 0 && worst / (FLT_EPSILON * vmax) > g_worst_units)
                g_worst_units = worst / (FLT_EPSILON * vmax);
            paged_ok &= tu_check(gp, worst <= PAGED_BOUND * vmax,
                                 "paged entry %" PRId64 " (merged, path %d): |paged - contiguous| = %g > %g (%s)",
                                 b, (int)paths[pi], worst, PAGED_BOUND * vmax, rp);
        }
        paged_ok = paged_ok && check_oracle(gp, &c, &sh, q64, &x, &p, NULL, "paged", rp);
    }
    if (paged_ok) tu_group_pass(gp);
done:
    free(q64);
    tu_tensor_free(&Q);
    res_free(&a), res_free(&f), res_free(&d), res_free(&p), res_free(&p1), res_free(&p3);
    free(sh.k), free(sh.v);
    attn_kvcache_free(caches[0]);
    attn_kvcache_free(caches[1]);
}

static void group_random(tu_suite *s, const tu_options *opt)
{
    tu_group gc, gp;
    tu_group_begin(&gc, s, "contiguous");
    tu_group_begin(&gp, s, "paged");
    const int64_t n = opt->cases > 0 ? opt->cases : opt->quick ? 60 : 250;
    for (int64_t i = 0; i < n; ++i) run_case(&gc, &gp, tu_mix(opt->seed ^ (uint64_t)i));
    /* the bound must have been exercised */
    tu_check(&gp, g_merged > n / 4, "only %lld merged paged entries", (long long)g_merged);
    printf("  paged: %lld merged entries, worst |paged - contiguous| = %.2f eps·max|V| (bound %.0f)\n",
           (long long)g_merged, g_worst_units, PAGED_BOUND / FLT_EPSILON);
    tu_group_end(&gc);
    tu_group_end(&gp);
}

/* ---------------------------------------------------------------- decode */

static void group_decode(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "decode");
    const char *full = getenv("ATTN_TEST_FULL");
    const bool big = full && *full && strcmp(full, "0") && !opt->quick;
    const int64_t nks[] = {1, 2, 15, 64, 65, 257, 1000, 4096, 16384, 65536, 131072};
    const int nnk = big ? 11 : 9; /* up to 16384; ATTN_TEST_FULL=1: 65536, 131072 */
    tu_rng r;
    tu_rng_seed(&r, opt->seed ^ 0xdec0de);
    for (int t = 0; t < nnk; ++t) {
        kcase c;
        memset(&c, 0, sizeof c);
        c.B = 1;
        c.Hq = 8;
        c.Hkv = 2;
        c.D = c.Dv = 128;
        const int64_t Nk = nks[t];
        c.cap = Nk;
        c.Nq = Nk >= 16384 ? tu_rng_int(&r, 1, 2) : Nk >= 4096 ? tu_rng_int(&r, 1, 4) : tu_rng_int(&r, 1, 16);
        c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        for (int paged = 0; paged < 2; ++paged) {
            char rp[128];
            snprintf(rp, sizeof rp, "decode Nk %" PRId64 " Nq %" PRId64 " %s, --seed 0x%" PRIx64
                     " --group decode", Nk, c.Nq, paged ? "paged" : "contiguous", opt->seed);
            attn_kvcache_config cfg = {.batch = 1, .kv_heads = 2, .capacity = Nk, .head_dim = 128,
                                       .block_size = paged ? 256 : 0};
            attn_kvcache *cache;
            attn_error err;
            if (!tu_check(&g, attn_kvcache_create(&cfg, &cache, &err) == ATTN_OK, "create: %s (%s)",
                          err.message, rp))
                continue;
            shadow sh;
            memset(&sh, 0, sizeof sh);
            sh.k = malloc(sizeof(double) * (size_t)(2 * Nk * 128));
            sh.v = malloc(sizeof(double) * (size_t)(2 * Nk * 128));
            float *kf = malloc(sizeof(float) * (size_t)(2 * Nk * 128));
            float *vf = malloc(sizeof(float) * (size_t)(2 * Nk * 128));
            for (int64_t e = 0; e < 2 * Nk * 128; ++e) {
                kf[e] = (float)tu_rng_range(&r, -1, 1);
                vf[e] = (float)tu_rng_range(&r, -1, 1);
                sh.k[e] = kf[e];
                sh.v[e] = vf[e];
            }
            sh.len[0] = Nk;
            /* paged: two appends so the second half may start mid-block */
            const int64_t first = paged ? Nk / 3 : Nk;
            if (paged) { /* blocks in reverse pool order: every block its own run */
                int32_t *rev = malloc(sizeof(int32_t) * (size_t)((Nk + 255) / 256));
                for (int64_t i = 0; i < (Nk + 255) / 256; ++i) rev[i] = (int32_t)((Nk + 255) / 256 - 1 - i);
                attn_kvcache_set_block_table(cache, 0, rev, (Nk + 255) / 256, NULL);
                free(rev);
            }
            attn_tensor K1 = attn_tensor_4d(kf, 1, 2, first, 128), V1 = attn_tensor_4d(vf, 1, 2, first, 128);
            K1.stride[1] = V1.stride[1] = Nk * 128;
            attn_tensor K2 = K1, V2 = V1;
            K2.data = kf + first * 128;
            V2.data = vf + first * 128;
            K2.shape[2] = V2.shape[2] = Nk - first;
            bool ok = attn_kvcache_append(cache, &K1, &V1, NULL, &err) == ATTN_OK &&
                      attn_kvcache_append(cache, &K2, &V2, NULL, &err) == ATTN_OK;
            float *q = malloc(sizeof(float) * (size_t)(8 * c.Nq * 128));
            double *q64 = malloc(sizeof(double) * (size_t)(8 * c.Nq * 128));
            for (int64_t e = 0; e < 8 * c.Nq * 128; ++e) q64[e] = q[e] = (float)tu_rng_range(&r, -2, 2);
            kres res;
            kvars x;
            res_alloc(&c, &res);
            attn_tensor Q = attn_tensor_4d(q, 1, 8, c.Nq, 128);
            uint8_t rows[16];
            for (int64_t i = 0; i < c.Nq; ++i) rows[i] = Nk < 16384 || tu_rng_chance(&r, 0.5) || i == c.Nq - 1;
            ok = ok && attend(&c, cache, &Q, &x, 0, ATTN_PATH_AUTO, &res, &err) == ATTN_OK;
            if (tu_check(&g, ok, "%s: %s", rp, err.message) &&
                check_oracle(&g, &c, &sh, q64, &x, &res, rows, "decode", rp))
                tu_group_pass(&g);
            res_free(&res);
            free(q), free(q64), free(kf), free(vf), free(sh.k), free(sh.v);
            attn_kvcache_free(cache);
        }
    }
    tu_group_end(&g);
}

/* --------------------------------------------------------------- lengths */

static void group_lengths(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "lengths");
    attn_kvcache_config cfg = {.batch = 2, .kv_heads = 1, .capacity = 10, .head_dim = 2,
                               .block_size = 4, .num_blocks = 5};
    attn_kvcache *c;
    attn_error err;
    tu_check(&g, attn_kvcache_create(&cfg, &c, &err) == ATTN_OK, "create: %s", err.message);
    const attn_kvcache_config *got = attn_kvcache_get_config(c);
    tu_check(&g, got->value_dim == 2 && got->num_blocks == 5, "resolved config");
    float k[2 * 6 * 2];
    for (int i = 0; i < 24; ++i) k[i] = (float)i;
    attn_tensor K = attn_tensor_4d(k, 2, 1, 6, 2);
    int64_t counts[2] = {6, 3};
    tu_check(&g, attn_kvcache_append(c, &K, &K, counts, &err) == ATTN_OK, "append: %s", err.message);
    int32_t t[4];
    int64_t n;
    attn_kvcache_block_table(c, 0, t, 4, &n, &err);
    tu_check(&g, n == 2 && t[0] == 0 && t[1] == 1, "entry 0 took blocks 0, 1 (got %lld: %d %d)",
             (long long)n, t[0], t[1]);
    attn_kvcache_block_table(c, 1, t, 4, &n, &err);
    tu_check(&g, n == 1 && t[0] == 2, "entry 1 took block 2 (got %lld: %d)", (long long)n, t[0]);
    int64_t lens[2] = {2, 3};
    tu_check(&g, attn_kvcache_set_lengths(c, lens, &err) == ATTN_OK, "shrink: %s", err.message);
    attn_kvcache_block_table(c, 0, t, 4, &n, &err);
    tu_check(&g, n == 1 && attn_kvcache_length(c, 0) == 2, "shrink freed block 1");
    int64_t more[2] = {0, 4};
    tu_check(&g, attn_kvcache_append(c, &K, &K, more, &err) == ATTN_OK, "append: %s", err.message);
    attn_kvcache_block_table(c, 1, t, 4, &n, &err);
    tu_check(&g, n == 2 && t[0] == 2 && t[1] == 1, "entry 1 reused block 1 (got %d %d)", t[0], t[1]);
    tu_check(&g, attn_kvcache_length(c, 1) == 7 && attn_kvcache_length(c, 2) == -1,
             "lengths readback");
    /* grow exposes zeroed blocks */
    int64_t grow[2] = {9, 7};
    tu_check(&g, attn_kvcache_set_lengths(c, grow, &err) == ATTN_OK, "grow: %s", err.message);
    attn_kvcache_free(c);

    /* contiguous view */
    attn_kvcache_config cc = {.batch = 2, .kv_heads = 2, .capacity = 5, .head_dim = 3, .value_dim = 1};
    tu_check(&g, attn_kvcache_create(&cc, &c, &err) == ATTN_OK, "create: %s", err.message);
    float kk[2 * 2 * 2 * 3], vv[2 * 2 * 2];
    for (int i = 0; i < 24; ++i) kk[i] = (float)i;
    for (int i = 0; i < 8; ++i) vv[i] = (float)(100 + i);
    attn_tensor K2 = attn_tensor_4d(kk, 2, 2, 2, 3), V2 = attn_tensor_4d(vv, 2, 2, 2, 1);
    tu_check(&g, attn_kvcache_append(c, &K2, &V2, NULL, &err) == ATTN_OK, "append: %s", err.message);
    attn_tensor kv, vv_t;
    tu_check(&g, attn_kvcache_view(c, 1, &kv, &vv_t, &err) == ATTN_OK, "view: %s", err.message);
    /* entry 1, head 1, token 1, feature 2 = kk[((1*2+1)*2+1)*3+2] */
    tu_check(&g, kv.shape[2] == 2 && tu_get(&kv, (1 * 2 + 1) * 3 + 2) == kk[((1 * 2 + 1) * 2 + 1) * 3 + 2] &&
                     tu_get(&vv_t, 1 * 2 + 1) == vv[(1 * 2 + 1) * 2 + 1],
             "view reads what was appended");
    attn_kvcache_free(c);
    tu_group_end(&g);
}

/* ---------------------------------------------------------------- errors */

/* A cache's observable state: lengths, tables and what attend returns. */
typedef struct {
    int64_t len[2], n[2];
    int32_t table[2][8];
    float out[2 * 2 * 3 * 2];
} snapshot;

static void snap(const attn_kvcache *c, snapshot *s)
{
    memset(s, 0, sizeof *s);
    for (int b = 0; b < 2; ++b) {
        s->len[b] = attn_kvcache_length(c, b);
        if (attn_kvcache_get_config(c)->block_size > 0)
            attn_kvcache_block_table(c, b, s->table[b], 8, &s->n[b], NULL);
    }
    float q[2 * 2 * 3 * 2];
    for (int i = 0; i < 24; ++i) q[i] = (float)(i % 5) * 0.3f;
    attn_tensor Q = attn_tensor_4d(q, 2, 2, 3, 2), O = attn_tensor_4d(s->out, 2, 2, 3, 2);
    attn_kvcache_attend(c, &Q, &O, NULL, NULL, NULL);
}

static void expect(tu_group *g, attn_status got, attn_status want, const attn_error *err,
                   const char *needle, const attn_kvcache *c, const snapshot *before,
                   const char *what)
{
    snapshot after;
    snap(c, &after);
    const bool same = !memcmp(before, &after, sizeof after);
    tu_check(g, got == want && strstr(err->message, needle) && same,
             "%s: status %d (want %d), message '%s' (want '%s'), cache %s", what, (int)got,
             (int)want, err->message, needle, same ? "unchanged" : "CHANGED");
}

static void group_errors(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "errors");
    attn_error err;
    attn_kvcache *c = NULL;
    struct {
        attn_kvcache_config cfg;
        const char *needle;
    } badcfg[] = {
        {{.batch = 0, .kv_heads = 1, .capacity = 4, .head_dim = 2}, "batch"},
        {{.batch = 1, .kv_heads = 0, .capacity = 4, .head_dim = 2}, "kv_heads"},
        {{.batch = 1, .kv_heads = 1, .capacity = 0, .head_dim = 2}, "capacity"},
        {{.batch = 1, .kv_heads = 1, .capacity = 4, .head_dim = 0}, "head_dim"},
        {{.batch = 1, .kv_heads = 1, .capacity = 4, .head_dim = 2, .block_size = -1}, "block_size"},
        {{.batch = 1, .kv_heads = 1, .capacity = 4, .head_dim = 2, .num_blocks = 3}, "num_blocks"},
        {{.batch = 1, .kv_heads = 1, .capacity = INT64_MAX / 2, .head_dim = 1024}, "overflows"},
    };
    for (size_t i = 0; i < sizeof badcfg / sizeof badcfg[0]; ++i) {
        attn_status st = attn_kvcache_create(&badcfg[i].cfg, &c, &err);
        tu_check(&g, st != ATTN_OK && !c && strstr(err.message, badcfg[i].needle),
                 "create with bad %s: status %d, message '%s'", badcfg[i].needle, (int)st, err.message);
    }
    /* paged sizes whose products overflow int64: refused, not wrapped */
    const attn_kvcache_config huge[2] = {
        {.batch = 1, .kv_heads = 1, .capacity = 8, .head_dim = 4, .block_size = INT64_C(1) << 62,
         .num_blocks = 4},
        {.batch = 1, .kv_heads = 1, .capacity = INT64_MAX, .head_dim = 4, .block_size = 16,
         .num_blocks = 2},
    };
    for (int i = 0; i < 2; ++i) {
        attn_status st = attn_kvcache_create(&huge[i], &c, &err);
        tu_check(&g, st == ATTN_ERR_OVERFLOW && !c, "%s overflowing: status %d, message '%s'",
                 i ? "ceil(capacity / block_size)" : "num_blocks x block_size", (int)st,
                 st ? err.message : "");
        if (st == ATTN_OK) attn_kvcache_free(c), c = NULL;
    }
    for (int paged = 0; paged < 2; ++paged) {
        attn_kvcache_config cfg = {.batch = 2, .kv_heads = 1, .capacity = 6, .head_dim = 2,
                                   .block_size = paged ? 2 : 0, .num_blocks = paged ? 5 : 0};
        attn_kvcache_create(&cfg, &c, &err);
        float k[2 * 1 * 7 * 2];
        for (int i = 0; i < 28; ++i) k[i] = (float)(i % 7) * 0.25f - 0.5f;
        attn_tensor K4 = attn_tensor_4d(k, 2, 1, 4, 2), K7 = attn_tensor_4d(k, 2, 1, 7, 2);
        int64_t c1[2] = {4, 1};
        attn_kvcache_append(c, &K4, &K4, c1, &err);
        snapshot before;
        snap(c, &before);
        int64_t over[2] = {3, 0};
        expect(&g, attn_kvcache_append(c, &K4, &K4, over, &err), ATTN_ERR_ARG, &err,
               "exceed the capacity", c, &before, "overflow");
        expect(&g, attn_kvcache_append(c, &K7, &K7, NULL, &err), ATTN_ERR_ARG, &err,
               "exceed the capacity", c, &before, "overflow (all entries)");
        int64_t neg[2] = {1, -1};
        expect(&g, attn_kvcache_append(c, &K4, &K4, neg, &err), ATTN_ERR_ARG, &err, "counts[1]",
               c, &before, "negative count");
        int64_t big[2] = {0, 5};
        expect(&g, attn_kvcache_append(c, &K4, &K4, big, &err), ATTN_ERR_ARG, &err, "counts[1]",
               c, &before, "count beyond n");
        attn_tensor K3 = attn_tensor_4d(k, 2, 1, 4, 3);
        expect(&g, attn_kvcache_append(c, &K3, &K4, NULL, &err), ATTN_ERR_SHAPE, &err,
               "key: feature size", c, &before, "key feature size");
        int64_t lens[2] = {2, 7};
        expect(&g, attn_kvcache_set_lengths(c, lens, &err), ATTN_ERR_ARG, &err, "lengths[1]", c,
               &before, "length beyond capacity");
        float q[2 * 2 * 1 * 2] = {0}, o[8];
        attn_tensor Q = attn_tensor_4d(q, 2, 2, 1, 2), O = attn_tensor_4d(o, 2, 2, 1, 2);
        attn_sdpa_opts opt = attn_sdpa_opts_default();
        opt.causal = ATTN_CAUSAL_TOP_LEFT;
        expect(&g, attn_kvcache_attend(c, &Q, &O, NULL, &opt, &err), ATTN_ERR_ARG, &err, "causal",
               c, &before, "top-left causal");
        opt = attn_sdpa_opts_default();
        opt.dropout_p = 0.5f;
        expect(&g, attn_kvcache_attend(c, &Q, &O, NULL, &opt, &err), ATTN_ERR_UNSUPPORTED, &err,
               "dropout_p", c, &before, "dropout");
        opt = attn_sdpa_opts_default();
        const attn_rope rope = {0};
        opt.rope = &rope;
        expect(&g, attn_kvcache_attend(c, &Q, &O, NULL, &opt, &err), ATTN_ERR_ARG, &err, "rope", c,
               &before, "rope on cached keys");
        attn_tensor Q1 = attn_tensor_4d(q, 1, 2, 1, 2);
        expect(&g, attn_kvcache_attend(c, &Q1, &O, NULL, NULL, &err), ATTN_ERR_SHAPE, &err,
               "query: batch size", c, &before, "query batch");
        attn_tensor Q3 = attn_tensor_4d(q, 2, 3, 1, 2);
        expect(&g, attn_kvcache_attend(c, &Q3, &O, NULL, NULL, &err), ATTN_ERR_SHAPE, &err,
               "heads", c, &before, "query heads");
        if (paged) {
            /* 5 blocks: entry 0 holds 2, entry 1 holds 1; 2 free */
            int64_t need3[2] = {0, 4}; /* entry 1: 5 tokens -> 3 blocks: 2 new, fits */
            int64_t need4[2] = {2, 4}; /* + entry 0: 6 tokens -> 3 blocks: 1 more: 3 > 2 free */
            (void)need3;
            expect(&g, attn_kvcache_append(c, &K4, &K4, need4, &err), ATTN_ERR_ARG, &err,
                   "the pool has 2 free", c, &before, "pool exhausted");
            const int32_t out_of_range[2] = {0, 5}, dup[2] = {3, 3}, owned[1] = {0};
            expect(&g, attn_kvcache_set_block_table(c, 0, out_of_range, 2, &err), ATTN_ERR_ARG,
                   &err, "table[1]: block 5 is outside the pool", c, &before, "table out of range");
            const int32_t negative[2] = {-1, 3};
            expect(&g, attn_kvcache_set_block_table(c, 0, negative, 2, &err), ATTN_ERR_ARG, &err,
                   "table[0]", c, &before, "negative block");
            expect(&g, attn_kvcache_set_block_table(c, 0, dup, 2, &err), ATTN_ERR_ARG, &err,
                   "appears twice", c, &before, "repeated block");
            expect(&g, attn_kvcache_set_block_table(c, 1, owned, 1, &err), ATTN_ERR_ARG, &err,
                   "belongs to entry 0", c, &before, "another entry's block");
            const int32_t short_table[1] = {3};
            expect(&g, attn_kvcache_set_block_table(c, 0, short_table, 1, &err), ATTN_ERR_ARG,
                   &err, "needs 2 to 3", c, &before, "table too short for the length");
            expect(&g, attn_kvcache_set_block_table(c, 2, short_table, 1, &err), ATTN_ERR_ARG,
                   &err, "b: entry 2", c, &before, "entry out of range");
            int64_t grow[2] = {6, 6};
            expect(&g, attn_kvcache_set_lengths(c, grow, &err), ATTN_ERR_ARG, &err,
                   "the pool has", c, &before, "lengths beyond the pool");
            attn_tensor kv;
            expect(&g, attn_kvcache_view(c, 0, &kv, NULL, &err), ATTN_ERR_ARG, &err, "paged", c,
                   &before, "view of a paged cache");
        } else {
            int32_t t[1];
            int64_t n;
            expect(&g, attn_kvcache_block_table(c, 0, t, 1, &n, &err), ATTN_ERR_ARG, &err,
                   "not paged", c, &before, "block table of a contiguous cache");
        }
        attn_kvcache_free(c);
    }
    tu_group_end(&g);
}

int main(int argc, char **argv)
{
    tu_options opt;
    tu_suite s;
    if (!tu_begin(argc, argv, DEFAULT_SEED, &opt, &s)) return 2;
    if (opt.replay) {
        tu_group gc, gp;
        tu_group_begin(&gc, &s, "contiguous");
        tu_group_begin(&gp, &s, "paged");
        run_case(&gc, &gp, opt.replay_seed);
        tu_group_end(&gc);
        tu_group_end(&gp);
        return tu_suite_finish(&s);
    }
    if (tu_group_selected(&opt, "errors")) group_errors(&s);
    if (tu_group_selected(&opt, "lengths")) group_lengths(&s);
    if (tu_group_selected(&opt, "contiguous") || tu_group_selected(&opt, "paged"))
        group_random(&s, &opt);
    if (tu_group_selected(&opt, "decode")) group_decode(&s, &opt);
    return tu_suite_finish(&s);
}
