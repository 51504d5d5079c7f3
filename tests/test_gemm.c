/*
 * test_gemm — attn_sgemm, attn_sgemm_reference (src/core/gemm.h) and the
 * engines behind them:
 *   - every engine this build and CPU can run (our packed GEMM on each SDPA
 *     kernel table, its no-heap fallback, the CBLAS when linked, and
 *     attn_sgemm itself) against a float64 reference over random shapes:
 *     both transposes, odd sizes around the block edges, leading dimensions
 *     larger than the rows (the gaps hold NaN, so reading them poisons the
 *     result), ignored leading dimensions of single stored rows, alpha and
 *     beta, M / N / K of 0 and 1;
 *   - beta == 0 never reads C (C starts as NaN), alpha == 0 or K == 0 never
 *     reads A and B, nothing is written outside C's view;
 *   - results are bit-identical for 1, 2 and 3 threads, for the heap and
 *     no-heap paths, and across reruns;
 *   - attn_sgemm_grouped (C in column groups, a bias row) gives the plain
 *     call's bits, scattered, with the bias added afterwards; it writes
 *     nothing outside the groups;
 *   - ATTN_GEMM / ATTN_ARCH select the engine attn_sgemm_engine names;
 *     attn_sgemm_reference is the generic packed engine whatever they say.
 * The tolerance is the worst-case bound for a length-K dot product in
 * float32, (K + 4)·u·(|alpha|·Σ|a·b| + |beta·c|) with u = 2^-24, which any
 * summation order meets and a wrong or missing term breaks.
 *
 * Usage: test_gemm [--seed S] [--cases N] [--quick] [--case S] [--group G] [-v]
 */
#include "testutil.h"

#include "../src/core/gemm.h"
#include "../src/core/gemm_engines.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SEED 0x6E33ull

/* ---------------------------------------------------------------- engines */

typedef enum { ENG_SGEMM, ENG_REFERENCE, ENG_PACKED, ENG_PACKED_NO_HEAP, ENG_CBLAS } engine_kind;

typedef struct {
    const char *name;
    engine_kind kind;
    const sdpa_kernels *kern; /* packed engines */
} engine;

/* Every engine this build and CPU can run. */
static int available_engines(engine *out)
{
    int n = 0;
    out[n++] = (engine){"attn_sgemm", ENG_SGEMM, NULL};
    out[n++] = (engine){"attn_sgemm_reference", ENG_REFERENCE, NULL};
    const sdpa_kernels *tables[3];
    int nt = 0;
    tables[nt++] = &sdpa_kernels_generic;
#if defined(SDPA_HAVE_X86) && (defined(__GNUC__) || defined(__clang__))
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        tables[nt++] = &sdpa_kernels_avx2;
    if (__builtin_cpu_supports("avx512f")) tables[nt++] = &sdpa_kernels_avx512;
#endif
#if defined(SDPA_HAVE_NEON)
    if (sdpa_isa_best() == SDPA_ISA_NEON) tables[nt++] = &sdpa_kernels_neon;
#endif
    static char names[3][2][40];
    for (int t = 0; t < nt; ++t) {
        snprintf(names[t][0], sizeof names[t][0], "packed-%s", tables[t]->name);
        snprintf(names[t][1], sizeof names[t][1], "packed-%s-no-heap", tables[t]->name);
        out[n++] = (engine){names[t][0], ENG_PACKED, tables[t]};
        out[n++] = (engine){names[t][1], ENG_PACKED_NO_HEAP, tables[t]};
    }
    if (gemm_cblas_available()) out[n++] = (engine){"cblas", ENG_CBLAS, NULL};
    return n;
}

/* ------------------------------------------------------------------ cases */

typedef struct {
    bool ta, tb;
    int64_t M, N, K;
    int64_t lda, ldb, ldc; /* as passed (0 allowed for a single stored row) */
    float alpha, beta;
} gemm_case;

/* A stored matrix: rows × cols with row stride ld, inside an allocation whose
 * gaps (and everything past the view) hold NaN. */
typedef struct {
    float *data;
    int64_t rows, cols, ld, count;
} stored;

static const uint32_t POISON_BITS = 0x7fc0a5a5u; /* quiet NaN with a marker */

static float poison(void)
{
    float f;
    memcpy(&f, &POISON_BITS, sizeof f);
    return f;
}

static bool stored_alloc(stored *s, int64_t rows, int64_t cols, int64_t ld)
{
    s->rows = rows, s->cols = cols, s->ld = ld;
    /* A single row only needs its own columns, whatever ld says. */
    s->count = rows == 0 ? 1 : (rows - 1) * ld + cols + 1;
    s->data = malloc((size_t)s->count * sizeof(float));
    if (!s->data) return false;
    for (int64_t i = 0; i < s->count; ++i) s->data[i] = poison();
    return true;
}

static void stored_fill(stored *s, tu_rng *r)
{
    for (int64_t i = 0; i < s->rows; ++i)
        for (int64_t j = 0; j < s->cols; ++j)
            s->data[i * s->ld + j] = (float)tu_rng_range(r, -1.0, 1.0);
}

static float at(const stored *s, int64_t i, int64_t j) { return s->data[i * s->ld + j]; }

/* Every element outside the view still holds the poison bit pattern. */
static bool gaps_intact(const stored *s)
{
    for (int64_t x = 0; x < s->count; ++x) {
        const int64_t i = s->ld > 0 ? x / s->ld : 0, j = s->ld > 0 ? x % s->ld : x;
        if (i < s->rows && j < s->cols && (s->ld > 0 || i == 0)) continue;
        uint32_t bits;
        memcpy(&bits, &s->data[x], sizeof bits);
        if (bits != POISON_BITS) return false;
    }
    return true;
}

/* Sizes that sit on the packed engine's block edges (KC 256, 12-row units,
 * 16/32-column panels, 144-row blocks) and around them. */
static int64_t pick_size(tu_rng *r, const int64_t *edges, int nedges, int64_t hi)
{
    if (tu_rng_chance(r, 0.5)) return tu_rng_pick(r, edges, nedges);
    return tu_rng_int(r, 1, hi);
}

static gemm_case random_case(uint64_t seed, bool quick)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    static const int64_t m_edges[] = {0, 1, 2, 5, 11, 12, 13, 23, 25, 143, 144, 145, 300};
    static const int64_t n_edges[] = {0, 1, 2, 7, 15, 16, 17, 31, 32, 33, 48, 95, 257};
    static const int64_t k_edges[] = {0, 1, 2, 3, 8, 9, 255, 256, 257, 511, 512, 513};
    gemm_case c;
    c.ta = tu_rng_chance(&r, 0.5);
    c.tb = tu_rng_chance(&r, 0.5);
    c.M = pick_size(&r, m_edges, 13, quick ? 80 : 200);
    c.N = pick_size(&r, n_edges, 13, quick ? 80 : 200);
    c.K = pick_size(&r, k_edges, 12, quick ? 300 : 600);
    /* Stored shapes: A (M,K) or (K,M), B (K,N) or (N,K). */
    const int64_t a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K;
    const int64_t b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
    const int64_t pads[] = {0, 0, 1, 3, 16};
    c.lda = a_cols + tu_rng_pick(&r, pads, 5);
    c.ldb = b_cols + tu_rng_pick(&r, pads, 5);
    c.ldc = c.N + tu_rng_pick(&r, pads, 5);
    /* A single stored row's leading dimension is ignored: pass 0 sometimes. */
    if (a_rows == 1 && tu_rng_chance(&r, 0.5)) c.lda = 0;
    if (b_rows == 1 && tu_rng_chance(&r, 0.5)) c.ldb = 0;
    if (c.M == 1 && tu_rng_chance(&r, 0.5)) c.ldc = 0;
    static const float alphas[] = {1.0f, 1.0f, -0.5f, 2.5f, 0.0f};
    static const float betas[] = {0.0f, 0.0f, 1.0f, -1.25f, 0.5f};
    c.alpha = alphas[tu_rng_int(&r, 0, 4)];
    c.beta = betas[tu_rng_int(&r, 0, 4)];
    return c;
}

/* Operands of one case, plus C's starting value and the float64 answer. */
typedef struct {
    gemm_case c;
    stored a, b, c0;
    double *want, *bound;
} problem;

static void problem_free(problem *p)
{
    free(p->a.data), free(p->b.data), free(p->c0.data), free(p->want), free(p->bound);
}

static bool problem_make(problem *p, const gemm_case *c, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    p->c = *c;
    tu_rng r;
    tu_rng_seed(&r, seed ^ 0xDA7Aull);
    const int64_t M = c->M, N = c->N, K = c->K;
    if (!stored_alloc(&p->a, c->ta ? K : M, c->ta ? M : K, c->lda) ||
        !stored_alloc(&p->b, c->tb ? N : K, c->tb ? K : N, c->ldb) ||
        !stored_alloc(&p->c0, M, N, c->ldc))
        return false;
    p->want = malloc(sizeof(double) * (size_t)(M * N + 1));
    p->bound = malloc(sizeof(double) * (size_t)(M * N + 1));
    if (!p->want || !p->bound) return false;
    stored_fill(&p->a, &r);
    stored_fill(&p->b, &r);
    if (c->beta != 0.0f) stored_fill(&p->c0, &r); /* beta == 0: C stays NaN */
    const double u = ldexp(1.0, -24);
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
            double sum = 0.0, mag = 0.0;
            for (int64_t k = 0; k < K; ++k) {
                const double x = c->ta ? at(&p->a, k, i) : at(&p->a, i, k);
                const double y = c->tb ? at(&p->b, j, k) : at(&p->b, k, j);
                sum += x * y;
                mag += fabs(x * y);
            }
            const double c0 = c->beta != 0.0f ? at(&p->c0, i, j) : 0.0;
            p->want[i * N + j] = c->alpha * sum + c->beta * c0;
            p->bound[i * N + j] =
                (double)(K + 4) * u * (fabs(c->alpha) * mag + fabs(c->beta * c0)) + 1e-30;
        }
    return true;
}

/* Runs one engine on a fresh copy of C (gaps poisoned); returns the copy. */
static stored run_engine(const engine *e, const problem *p, int threads, bool *ok)
{
    const gemm_case *c = &p->c;
    stored out = p->c0;
    out.data = malloc((size_t)out.count * sizeof(float));
    *ok = out.data != NULL;
    if (!out.data) return out;
    memcpy(out.data, p->c0.data, (size_t)out.count * sizeof(float));
    tu_crash_context("engine %s threads %d ta %d tb %d M %" PRId64 " N %" PRId64 " K %" PRId64,
                     e->name, threads, c->ta, c->tb, c->M, c->N, c->K);
    const bool trivial = c->M == 0 || c->N == 0 || c->K == 0 || c->alpha == 0.0f;
    engine_kind kind = e->kind;
    /* The engines take M, N, K >= 1 and alpha != 0 only. */
    if (trivial && kind != ENG_REFERENCE) kind = ENG_SGEMM;
    switch (kind) {
    case ENG_SGEMM:
        attn_sgemm(c->ta, c->tb, c->M, c->N, c->K, c->alpha, p->a.data, c->lda, p->b.data, c->ldb,
                   c->beta, out.data, c->ldc, threads);
        break;
    case ENG_REFERENCE:
        attn_sgemm_reference(c->ta, c->tb, c->M, c->N, c->K, c->alpha, p->a.data, c->lda,
                             p->b.data, c->ldb, c->beta, out.data, c->ldc, threads);
        break;
    case ENG_PACKED:
    case ENG_PACKED_NO_HEAP:
        gemm_packed(e->kern, c->ta, c->tb, c->M, c->N, c->K, c->alpha, p->a.data, c->lda,
                    p->b.data, c->ldb, c->beta, out.data, c->ldc, c->N, 0, NULL, 0, threads,
                    e->kind == ENG_PACKED);
        break;
    case ENG_CBLAS:
        *ok = gemm_cblas(c->ta, c->tb, c->M, c->N, c->K, c->alpha, p->a.data, c->lda, p->b.data,
                         c->ldb, c->beta, out.data, c->ldc);
        break;
    }
    return out;
}

static bool same_bits(const stored *x, const stored *y)
{
    return memcmp(x->data, y->data, (size_t)x->count * sizeof(float)) == 0;
}

/* Checks one engine on one problem: accuracy, gaps, threads 1/2/3 (not the
 * CBLAS, which ignores them; its reruns must still agree). */
static void check_engine(tu_group *g, const engine *e, const problem *p, uint64_t seed)
{
    const gemm_case *c = &p->c;
    char what[200];
    snprintf(what, sizeof what,
             "%s seed 0x%" PRIx64 " ta %d tb %d M %" PRId64 " N %" PRId64 " K %" PRId64
             " lda %" PRId64 " ldb %" PRId64 " ldc %" PRId64 " alpha %g beta %g",
             e->name, seed, c->ta, c->tb, c->M, c->N, c->K, c->lda, c->ldb, c->ldc,
             (double)c->alpha, (double)c->beta);
    bool ok;
    stored got = run_engine(e, p, 2, &ok);
    if (!ok) {
        tu_group_fail(g, "%s: engine declined or out of memory", what);
        free(got.data);
        return;
    }
    /* Accuracy (every view element, NaN fails). */
    int64_t bad = 0, worst = -1;
    double worst_ratio = 0.0;
    for (int64_t i = 0; i < c->M; ++i)
        for (int64_t j = 0; j < c->N; ++j) {
            const double v = at(&got, i, j), w = p->want[i * c->N + j];
            const double ratio = fabs(v - w) / p->bound[i * c->N + j];
            if (!(ratio <= 1.0)) ++bad;
            if (!(ratio <= worst_ratio)) worst_ratio = ratio, worst = i * c->N + j;
        }
    if (bad)
        tu_group_fail(g, "%s: %" PRId64 " elements off, worst (%" PRId64 ",%" PRId64
                      ") got %.9g want %.9g bound %.3g",
                      what, bad, worst / c->N, worst % c->N,
                      (double)got.data[(worst / c->N) * got.ld + worst % c->N],
                      p->want[worst], p->bound[worst]);
    else
        tu_group_pass(g);
    tu_check(g, gaps_intact(&got), "%s: wrote outside C's view", what);
    /* Determinism: other thread counts (and a rerun) give the same bits. */
    const int counts[] = {1, 3, 2};
    for (int t = 0; t < 3; ++t) {
        stored again = run_engine(e, p, counts[t], &ok);
        tu_check(g, ok && same_bits(&got, &again), "%s: threads %d differ from threads 2", what,
                 counts[t]);
        free(again.data);
    }
    if (g->suite->verbose) tu_group_note(g, "%s: worst err/bound %.3g", what, worst_ratio);
    free(got.data);
}

/* The no-heap fallback and the heap path agree bit for bit, per table. */
static void check_fallback_identical(tu_group *g, const engine *engines, int n, const problem *p,
                                     uint64_t seed)
{
    for (int i = 0; i + 1 < n; ++i) {
        if (engines[i].kind != ENG_PACKED || engines[i + 1].kind != ENG_PACKED_NO_HEAP) continue;
        bool ok1, ok2;
        stored x = run_engine(&engines[i], p, 2, &ok1), y = run_engine(&engines[i + 1], p, 1, &ok2);
        tu_check(g, ok1 && ok2 && same_bits(&x, &y),
                 "%s seed 0x%" PRIx64 ": no-heap path differs from the heap path",
                 engines[i].name, seed);
        free(x.data), free(y.data);
    }
}

static void run_case(tu_group *g, const engine *engines, int n, uint64_t seed, const gemm_case *c)
{
    problem p;
    if (!problem_make(&p, c, seed)) {
        tu_group_fail(g, "seed 0x%" PRIx64 ": out of memory", seed);
        problem_free(&p);
        return;
    }
    for (int e = 0; e < n; ++e) check_engine(g, &engines[e], &p, seed);
    check_fallback_identical(g, engines, n, &p, seed);
    problem_free(&p);
}

/* ----------------------------------------------------------------- groups */

static void group_random(tu_suite *s, const tu_options *opt, const engine *engines, int n)
{
    tu_group g;
    tu_group_begin(&g, s, "random");
    if (opt->replay) {
        const gemm_case c = random_case(opt->replay_seed, opt->quick);
        run_case(&g, engines, n, opt->replay_seed, &c);
    } else {
        const int64_t cases = opt->cases > 0 ? opt->cases : opt->quick ? 40 : 160;
        for (int64_t i = 0; i < cases; ++i) {
            const uint64_t seed = tu_mix(opt->seed ^ (uint64_t)i);
            const gemm_case c = random_case(seed, opt->quick);
            run_case(&g, engines, n, seed, &c);
        }
    }
    tu_group_end(&g);
}

/* Fixed shapes: the MHA projection shape's little sibling, several B blocks
 * (K·N past the packed engine's 4 MiB B block), many row blocks for three
 * threads, and the degenerate sizes with every transpose. */
static void group_shapes(tu_suite *s, const tu_options *opt, const engine *engines, int n)
{
    tu_group g;
    tu_group_begin(&g, s, "shapes");
    const gemm_case fixed[] = {
        {false, true, 384, 192, 256, 256, 256, 192, 1.0f, 0.0f},  /* y = x·Wᵀ */
        {false, false, 384, 256, 192, 192, 256, 256, 1.0f, 1.0f}, /* dx += dy·W */
        {true, false, 192, 256, 384, 192, 256, 256, 1.0f, 1.0f},  /* dW += dyᵀ·x */
        {false, false, 20, 600, 2100, 2100, 600, 600, 1.0f, 0.0f},
        {true, true, 20, 600, 2100, 20, 2100, 601, -1.0f, 0.5f},
        {false, true, 1000, 40, 64, 64, 64, 40, 1.0f, 0.0f},
    };
    const int nfixed = (int)(sizeof fixed / sizeof fixed[0]);
    for (int i = 0; i < nfixed; ++i) {
        if (opt->quick && i == 4) continue; /* one multi-block case is enough */
        run_case(&g, engines, n, 0x5A0000u + (uint64_t)i, &fixed[i]);
    }
    const int64_t small[] = {0, 1, 2};
    for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb)
            for (int mi = 0; mi < 3; ++mi)
                for (int ni = 0; ni < 3; ++ni)
                    for (int ki = 0; ki < 3; ++ki) {
                        const int64_t M = small[mi], N = small[ni], K = small[ki];
                        const gemm_case c = {ta, tb, M, N, K, ta ? M : K, tb ? K : N, N,
                                             -2.0f, ki == 1 ? 0.0f : 0.75f};
                        const uint64_t seed =
                            0x5B0000u + (uint64_t)(ta * 54 + tb * 27 + mi * 9 + ni * 3 + ki);
                        run_case(&g, engines, n, seed, &c);
                    }
    tu_group_end(&g);
}

/* alpha == 0 and K == 0 leave A and B unread (they are all NaN here);
 * beta == 0 leaves C unread (NaN) and M or N == 0 touches nothing. */
static void group_blas_rules(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "blas-rules");
    float a[6], b[6], c[4];
    for (int i = 0; i < 6; ++i) a[i] = b[i] = poison();
    for (int i = 0; i < 4; ++i) c[i] = (float)(i + 1);
    attn_sgemm(false, false, 2, 2, 3, 0.0f, a, 3, b, 2, 0.5f, c, 2, 2);
    tu_check(&g, c[0] == 0.5f && c[1] == 1.0f && c[2] == 1.5f && c[3] == 2.0f,
             "alpha 0: C must be beta·C without reading A, B (got %g %g %g %g)", (double)c[0],
             (double)c[1], (double)c[2], (double)c[3]);
    for (int i = 0; i < 4; ++i) c[i] = poison();
    attn_sgemm(true, true, 2, 2, 0, 1.0f, a, 2, b, 0, 0.0f, c, 2, 1);
    tu_check(&g, c[0] == 0.0f && c[1] == 0.0f && c[2] == 0.0f && c[3] == 0.0f,
             "K 0, beta 0: C must be zeroed without being read");
    attn_sgemm(false, false, 0, 2, 3, 1.0f, a, 3, b, 2, 0.0f, c, 2, 1);
    attn_sgemm(false, false, 2, 0, 3, 1.0f, a, 3, b, 2, 0.0f, c, 2, 1);
    bool untouched = true;
    for (int i = 0; i < 4; ++i) untouched &= c[i] == 0.0f;
    tu_check(&g, untouched, "M or N 0 must not touch C");
    /* beta == 0: C's NaNs do not leak. */
    for (int i = 0; i < 6; ++i) a[i] = 1.0f, b[i] = 2.0f;
    for (int i = 0; i < 4; ++i) c[i] = poison();
    attn_sgemm(false, false, 2, 2, 3, 1.0f, a, 3, b, 2, 0.0f, c, 2, 1);
    tu_check(&g, c[0] == 6.0f && c[1] == 6.0f && c[2] == 6.0f && c[3] == 6.0f,
             "beta 0: C = A·B without reading C (got %g %g %g %g)", (double)c[0], (double)c[1],
             (double)c[2], (double)c[3]);
    tu_group_end(&g);
}

/* attn_sgemm_grouped, reference or not, any thread count: C in groups of
 * gc columns (the last one narrower, gaps between groups and rows hold NaN
 * and must stay NaN) plus a strided bias row, bit for bit the plain call
 * followed by a scatter and the bias added. Under ATTN_GEMM=packed, since a
 * CBLAS runs per group and may round differently. */
static void group_grouped(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "grouped");
    const char *saved = getenv("ATTN_GEMM");
    char *keep = saved ? strdup(saved) : NULL;
    setenv("ATTN_GEMM", "packed", 1);
    tu_rng r;
    tu_rng_seed(&r, 0x6A0Bull);
    static const int64_t shapes[][4] = {/* M, N, K, group columns */
                                        {1, 1, 1, 1},     {7, 30, 5, 8},     {50, 96, 300, 16},
                                        {37, 100, 513, 24}, {130, 192, 64, 64}, {13, 40, 17, 100}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; ++si)
        for (int variant = 0; variant < 4; ++variant) {
            const int64_t M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
            const int64_t gc = shapes[si][3], ldc = gc + 3, groups = (N + gc - 1) / gc;
            const int64_t gstride = M * ldc + 5, csize = groups * gstride;
            const bool reference = variant & 1, tb = variant & 2, with_bias = variant != 1;
            const float beta = variant == 3 ? 0.5f : 0.0f;
            float *A = malloc(sizeof(float) * (size_t)(M * K)),
                  *B = malloc(sizeof(float) * (size_t)(N * K)),
                  *bias = malloc(sizeof(float) * (size_t)(2 * N)),
                  *plain = malloc(sizeof(float) * (size_t)(M * N)),
                  *C0 = malloc(sizeof(float) * (size_t)csize),
                  *C = malloc(sizeof(float) * (size_t)csize);
            if (!A || !B || !bias || !plain || !C0 || !C) {
                tu_group_fail(&g, "out of memory");
            } else {
                for (int64_t i = 0; i < M * K; ++i) A[i] = (float)tu_rng_range(&r, -1.0, 1.0);
                for (int64_t i = 0; i < N * K; ++i) B[i] = (float)tu_rng_range(&r, -1.0, 1.0);
                for (int64_t i = 0; i < 2 * N; ++i) bias[i] = (float)tu_rng_range(&r, -1.0, 1.0);
                for (int64_t i = 0; i < csize; ++i) C0[i] = poison();
                for (int64_t i = 0; i < M; ++i)
                    for (int64_t j = 0; j < N; ++j) {
                        const float c0 = (float)tu_rng_range(&r, -1.0, 1.0);
                        plain[i * N + j] = c0;
                        C0[(j / gc) * gstride + i * ldc + j % gc] = c0;
                    }
                (reference ? attn_sgemm_reference : attn_sgemm)(false, tb, M, N, K, 1.5f, A, K, B,
                                                                tb ? K : N, beta, plain, N, 1);
                if (with_bias)
                    for (int64_t i = 0; i < M; ++i)
                        for (int64_t j = 0; j < N; ++j) plain[i * N + j] += bias[2 * j];
                for (int threads = 1; threads <= 3; ++threads) {
                    memcpy(C, C0, sizeof(float) * (size_t)csize);
                    attn_sgemm_grouped(reference, false, tb, M, N, K, 1.5f, A, K, B, tb ? K : N,
                                       beta, C, ldc, gc, gstride, with_bias ? bias : NULL, 2,
                                       threads);
                    bool same = true, gaps = true;
                    for (int64_t i = 0; i < csize; ++i) {
                        const int64_t grp = i / gstride, i_row = i % gstride / ldc,
                                      col = i % gstride % ldc, j = grp * gc + col;
                        const bool inside = i % gstride < M * ldc && col < gc && j < N;
                        if (inside)
                            same &= memcmp(&C[i], &plain[i_row * N + j], sizeof(float)) == 0;
                        else
                            gaps &= isnan(C[i]);
                    }
                    tu_check(&g, same && gaps,
                             "M %" PRId64 " N %" PRId64 " K %" PRId64 " groups of %" PRId64
                             " reference %d tb %d bias %d beta %g threads %d: %s",
                             M, N, K, gc, reference, tb, with_bias, (double)beta, threads,
                             !same ? "differs from the plain call" : "wrote outside the groups");
                }
            }
            free(A), free(B), free(bias), free(plain), free(C0), free(C);
        }
    if (keep) {
        setenv("ATTN_GEMM", keep, 1);
        free(keep);
    } else {
        unsetenv("ATTN_GEMM");
    }
    tu_group_end(&g);
}

/* ATTN_GEMM and ATTN_ARCH choose the engine that attn_sgemm_engine names, and
 * attn_sgemm then really runs it (same bits as calling it directly). */
static void group_selection(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "selection");
    const char *saved_gemm = getenv("ATTN_GEMM"), *saved_arch = getenv("ATTN_ARCH");
    char *keep_gemm = saved_gemm ? strdup(saved_gemm) : NULL;
    char *keep_arch = saved_arch ? strdup(saved_arch) : NULL;

    unsetenv("ATTN_ARCH");
    unsetenv("ATTN_GEMM");
    const char *def = attn_sgemm_engine();
    if (gemm_cblas_available())
        tu_check(&g, strcmp(def, "cblas") == 0, "CBLAS build: default engine %s, want cblas", def);
    else
        tu_check(&g, strncmp(def, "packed-", 7) == 0, "default engine %s, want packed-*", def);

    setenv("ATTN_GEMM", "packed", 1);
    const char *best = sdpa_kernels_for(sdpa_isa_best())->name;
    char want[40];
    snprintf(want, sizeof want, "packed-%s", best);
    tu_check(&g, strcmp(attn_sgemm_engine(), want) == 0, "ATTN_GEMM=packed: engine %s, want %s",
             attn_sgemm_engine(), want);
    setenv("ATTN_ARCH", "generic", 1);
    tu_check(&g, strcmp(attn_sgemm_engine(), "packed-generic") == 0,
             "ATTN_GEMM=packed ATTN_ARCH=generic: engine %s", attn_sgemm_engine());

    /* attn_sgemm under ATTN_GEMM=packed, ATTN_ARCH=generic is the generic
     * packed engine, bit for bit (the SIMD tables round differently). */
    const gemm_case c = {false, true, 50, 40, 300, 300, 300, 40, 1.0f, 0.0f};
    problem p;
    if (problem_make(&p, &c, 0x5E1ull)) {
        const engine via = {"attn_sgemm", ENG_SGEMM, NULL};
        const engine direct = {"packed-generic", ENG_PACKED, &sdpa_kernels_generic};
        bool ok1, ok2;
        stored x = run_engine(&via, &p, 2, &ok1), y = run_engine(&direct, &p, 2, &ok2);
        tu_check(&g, ok1 && ok2 && same_bits(&x, &y),
                 "attn_sgemm under ATTN_GEMM=packed ATTN_ARCH=generic differs from the generic "
                 "packed engine");
        free(x.data), free(y.data);
    } else {
        tu_group_fail(&g, "out of memory");
    }
    problem_free(&p);

    /* attn_sgemm_reference is the generic packed engine whatever ATTN_ARCH,
     * ATTN_GEMM or a linked CBLAS say. */
    unsetenv("ATTN_GEMM");
    setenv("ATTN_ARCH", best, 1);
    const gemm_case c2 = {true, false, 40, 70, 520, 40, 70, 70, -1.5f, 0.5f};
    if (problem_make(&p, &c2, 0x5E2ull)) {
        const engine ref = {"attn_sgemm_reference", ENG_REFERENCE, NULL};
        const engine direct = {"packed-generic", ENG_PACKED, &sdpa_kernels_generic};
        bool ok1, ok2;
        stored x = run_engine(&ref, &p, 3, &ok1), y = run_engine(&direct, &p, 1, &ok2);
        tu_check(&g, ok1 && ok2 && same_bits(&x, &y),
                 "attn_sgemm_reference differs from the generic packed engine");
        free(x.data), free(y.data);
    } else {
        tu_group_fail(&g, "out of memory");
    }
    problem_free(&p);

    if (keep_gemm) setenv("ATTN_GEMM", keep_gemm, 1);
    else unsetenv("ATTN_GEMM");
    if (keep_arch) setenv("ATTN_ARCH", keep_arch, 1);
    else unsetenv("ATTN_ARCH");
    free(keep_gemm), free(keep_arch);
    tu_group_end(&g);
}

int main(int argc, char **argv)
{
    tu_options opt;
    if (!tu_parse_options(argc, argv, DEFAULT_SEED, &opt)) return 2;
    tu_install_crash_handler();
    tu_suite suite = {0};
    suite.verbose = opt.verbose;
    engine engines[12];
    const int n = available_engines(engines);
    printf("test_gemm: seed 0x%llx (replay a case with --case SEED); engines:",
           (unsigned long long)opt.seed);
    for (int i = 0; i < n; ++i) printf(" %s", engines[i].name);
    printf("; attn_sgemm runs %s\n", attn_sgemm_engine());
    if (tu_group_selected(&opt, "random")) group_random(&suite, &opt, engines, n);
    if (!opt.replay && tu_group_selected(&opt, "shapes")) group_shapes(&suite, &opt, engines, n);
    if (!opt.replay && tu_group_selected(&opt, "blas-rules")) group_blas_rules(&suite);
    if (!opt.replay && tu_group_selected(&opt, "grouped")) group_grouped(&suite);
    if (!opt.replay && tu_group_selected(&opt, "selection")) group_selection(&suite);
    return tu_suite_finish(&suite);
}
