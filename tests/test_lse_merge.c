/*
 * test_lse_merge — attn_lse_merge: merging partial attentions over
 * disjoint key sets.
 *
 * Groups:
 *   split keys     attn_sdpa over keys [0,s) and [s,Nk), merged, equals the
 *                  float64 oracle over all keys (same tolerance as test_sdpa:
 *                  TOL_UNITS · eps · kappa · mag), with causal and key
 *                  padding masks making rows empty on one side or both, GQA,
 *                  D != Dv, random strided output views, and in place.
 *   associativity  three parts merged as (a+b)+c and a+(b+c): both match the
 *                  oracle and each other to a few ulps; a+b and b+a are
 *                  bit-identical.
 *   stats form     hand-built (m, ll) softmax stats (so the float64 oracle
 *                  knows them exactly; the forward's own softmax_stats are
 *                  merged in tests/mpi and test_stress): merged stats
 *                  match the float64 (m, ll) of the union, including rows
 *                  where m is so large that a rounded m + ll loses ll.
 *   special rows   -inf on one side copies the other bit for bit, on both
 *                  gives 0 / -inf; NaN propagates; +inf LSE.
 *   bad arguments  NULLs, shapes, mixed forms, broadcast outputs: clear errors.
 */
#include "attn.h"
#include "ref64.h"
#include "testutil.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EPS32 ((double)FLT_EPSILON)
#define TOL_UNITS 32.0

/* A view of positions [start, start+len) of dimension dim. */
static attn_tensor slice(attn_tensor t, int dim, int64_t start, int64_t len)
{
    size_t esz = t.dtype == ATTN_BOOL ? 1 : sizeof(float);
    t.data = (char *)t.data + (ptrdiff_t)(start * t.stride[dim]) * (ptrdiff_t)esz;
    t.shape[dim] = len;
    return t;
}

typedef struct {
    uint64_t seed;
    int64_t B, Hq, Hkv, Nq, Nk, D, Dv;
    int causal;    /* 0 none, 1 top-left, 2 bottom-right (as a (Nq,Nk) mask) */
    bool padding;  /* random key padding (B,1,1,Nk) */
    bool strided;  /* random output layouts */
    bool in_place; /* merge into out1 */
} merge_case;

static merge_case draw_case(uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    merge_case c;
    c.seed = seed;
    c.B = tu_rng_int(&r, 1, 2);
    c.Hkv = tu_rng_int(&r, 1, 2);
    c.Hq = c.Hkv * tu_rng_int(&r, 1, 3);
    c.Nq = tu_rng_int(&r, 1, 24);
    c.Nk = tu_rng_int(&r, 2, 40);
    c.D = tu_rng_int(&r, 1, 20);
    c.Dv = tu_rng_chance(&r, 0.5) ? c.D : tu_rng_int(&r, 1, 20);
    c.causal = (int)tu_rng_int(&r, 0, 2);
    c.padding = tu_rng_chance(&r, 0.5);
    c.strided = tu_rng_chance(&r, 0.5);
    c.in_place = tu_rng_chance(&r, 0.5);
    return c;
}

/* Inputs of a case, the oracle and the tolerances. */
typedef struct {
    merge_case c;
    tu_tensor q, k, v, mask;     /* mask (B,Hq... broadcast) as (B,1,Nq,Nk) bool */
    double *q64, *k64, *v64, *bias, *out64, *lse64, *w64, *mag;
    double kappa;
    attn_sdpa_opts opts;
} case_data;

static bool case_init(case_data *cd, const merge_case *c)
{
    memset(cd, 0, sizeof *cd);
    cd->c = *c;
    tu_rng r;
    tu_rng_seed(&r, c->seed ^ 0x3e46eull);
    const int64_t qs[4] = {c->B, c->Hq, c->Nq, c->D}, ks[4] = {c->B, c->Hkv, c->Nk, c->D},
                  vs[4] = {c->B, c->Hkv, c->Nk, c->Dv}, ms[4] = {c->B, 1, c->Nq, c->Nk};
    if (!tu_tensor_alloc(&cd->q, ATTN_F32, 4, qs, NULL) ||
        !tu_tensor_alloc(&cd->k, ATTN_F32, 4, ks, NULL) ||
        !tu_tensor_alloc(&cd->v, ATTN_F32, 4, vs, NULL) ||
        !tu_tensor_alloc(&cd->mask, ATTN_BOOL, 4, ms, NULL))
        return false;
    tu_fill_normal(&cd->q.view, &r, 0, 1.5);
    tu_fill_normal(&cd->k.view, &r, 0, 1.5);
    tu_fill_normal(&cd->v.view, &r, 0, 1);
    /* Causality and key padding as one bool mask, so each key part gets its
     * columns as a strided view. */
    bool *pad = calloc((size_t)(c->B * c->Nk), 1);
    for (int64_t i = 0; i < c->B * c->Nk; ++i) pad[i] = !c->padding || tu_rng_chance(&r, 0.7);
    if (c->padding && c->B == 2)
        for (int64_t j = 0; j < c->Nk; ++j) pad[c->Nk + j] = false; /* batch 1 sees nothing */
    for (int64_t b = 0; b < c->B; ++b)
        for (int64_t i = 0; i < c->Nq; ++i)
            for (int64_t j = 0; j < c->Nk; ++j) {
                bool vis = pad[b * c->Nk + j];
                if (c->causal == 1) vis = vis && j <= i;
                if (c->causal == 2) vis = vis && j <= i + c->Nk - c->Nq;
                tu_set(&cd->mask.view, (b * c->Nq + i) * c->Nk + j, vis);
            }
    free(pad);
    const int64_t nq = c->B * c->Hq * c->Nq * c->D, nk = c->B * c->Hkv * c->Nk * c->D,
                  nv = c->B * c->Hkv * c->Nk * c->Dv, no = c->B * c->Hq * c->Nq * c->Dv,
                  ns = c->B * c->Hq * c->Nq * c->Nk;
    cd->q64 = malloc(sizeof(double) * (size_t)nq);
    cd->k64 = malloc(sizeof(double) * (size_t)nk);
    cd->v64 = malloc(sizeof(double) * (size_t)nv);
    cd->bias = calloc((size_t)ns, sizeof(double));
    cd->out64 = malloc(sizeof(double) * (size_t)no);
    cd->lse64 = malloc(sizeof(double) * (size_t)(c->B * c->Hq * c->Nq));
    cd->w64 = malloc(sizeof(double) * (size_t)ns);
    cd->mag = malloc(sizeof(double) * (size_t)no);
    tu_to_f64(&cd->q.view, cd->q64);
    tu_to_f64(&cd->k.view, cd->k64);
    tu_to_f64(&cd->v.view, cd->v64);
    ref64_add_mask(cd->bias, c->B, c->Hq, c->Nq, c->Nk, &cd->mask.view);
    ref64_sdpa rp = {c->B, c->Hq, c->Hkv, c->Nq, c->Nk, c->D, c->Dv, 1.0 / sqrt((double)c->D),
                     ATTN_CAUSAL_NONE, cd->bias};
    ref64_sdpa_forward(&rp, cd->q64, cd->k64, cd->v64, cd->out64, cd->lse64, cd->w64);
    ref64_sdpa_magnitudes(&rp, cd->q64, cd->k64, cd->v64, NULL, cd->w64, cd->mag, NULL, NULL,
                          NULL);
    for (int64_t i = 0; i < no; ++i)
        if (cd->mag[i] > 0 && cd->mag[i] < 1e-30) cd->mag[i] = 1e-30;
    cd->kappa = 1.0 + ref64_sdpa_score_magnitude(&rp, cd->q64, cd->k64);
    cd->opts = attn_sdpa_opts_default();
    cd->opts.num_threads = 1;
    return true;
}

static void case_free(case_data *cd)
{
    tu_tensor_free(&cd->q);
    tu_tensor_free(&cd->k);
    tu_tensor_free(&cd->v);
    tu_tensor_free(&cd->mask);
    free(cd->q64);
    free(cd->k64);
    free(cd->v64);
    free(cd->bias);
    free(cd->out64);
    free(cd->lse64);
    free(cd->w64);
    free(cd->mag);
}

/* A partial result: attn_sdpa over keys [k0, k1). */
typedef struct {
    tu_tensor out, lse;
} part;

static bool run_part(case_data *cd, tu_rng *r, int64_t k0, int64_t k1, part *p,
                     attn_error *err)
{
    const merge_case *c = &cd->c;
    const int64_t os[4] = {c->B, c->Hq, c->Nq, c->Dv}, ls[3] = {c->B, c->Hq, c->Nq};
    tu_layout lo = c->strided ? tu_layout_random(r, 4, TU_LAYOUT_OUTPUT) : tu_layout_contiguous(4);
    tu_layout ll = c->strided ? tu_layout_random(r, 3, TU_LAYOUT_OUTPUT) : tu_layout_contiguous(3);
    if (!tu_tensor_alloc(&p->out, ATTN_F32, 4, os, &lo) ||
        !tu_tensor_alloc(&p->lse, ATTN_F32, 3, ls, &ll))
        return false;
    attn_tensor K = slice(cd->k.view, 2, k0, k1 - k0), V = slice(cd->v.view, 2, k0, k1 - k0),
                M = slice(cd->mask.view, 3, k0, k1 - k0);
    attn_sdpa_opts o = cd->opts;
    o.mask[0] = &M;
    return attn_sdpa(&cd->q.view, &K, &V, &p->out.view, &p->lse.view, NULL, &o, err) == ATTN_OK;
}

static void part_free(part *p)
{
    tu_tensor_free(&p->out);
    tu_tensor_free(&p->lse);
}

/* Compares a merged (out, lse) with the oracle over all keys. */
static bool check_union(tu_group *g, const case_data *cd, const attn_tensor *out,
                        const attn_tensor *lse, const char *what)
{
    const merge_case *c = &cd->c;
    tu_tol tol = {.atol = TOL_UNITS * EPS32 * cd->kappa, .rtol = 0, .atol_scale = cd->mag};
    tu_cmp cmp;
    char buf[512];
    if (!tu_compare(out, cd->out64, tol, &cmp)) {
        tu_cmp_describe(&cmp, "out", out, buf, sizeof buf);
        tu_group_fail(g, "seed %llu %s: %s", (unsigned long long)c->seed, what, buf);
        return false;
    }
    tu_tol ltol = {.atol = TOL_UNITS * EPS32 * (cd->kappa + log1p((double)c->Nk)), .rtol = 0,
                   .atol_scale = NULL};
    if (!tu_compare(lse, cd->lse64, ltol, &cmp)) {
        tu_cmp_describe(&cmp, "lse", lse, buf, sizeof buf);
        tu_group_fail(g, "seed %llu %s: %s", (unsigned long long)c->seed, what, buf);
        return false;
    }
    tu_group_pass(g);
    return true;
}

static void group_split(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "split keys");
    const int64_t cases = opt->cases > 0 ? opt->cases : opt->quick ? 40 : 200;
    for (int64_t n = 0; n < cases; ++n) {
        const uint64_t seed = opt->replay ? opt->replay_seed : tu_mix(opt->seed ^ (uint64_t)n);
        merge_case c = draw_case(seed);
        tu_crash_context("split keys, seed %llu", (unsigned long long)seed);
        case_data cd;
        tu_rng r;
        tu_rng_seed(&r, seed ^ 0x5111ull);
        part a, b, m;
        memset(&a, 0, sizeof a), memset(&b, 0, sizeof b), memset(&m, 0, sizeof m);
        attn_error err = {0};
        const int64_t split = tu_rng_int(&r, 1, c.Nk - 1);
        if (!case_init(&cd, &c) || !run_part(&cd, &r, 0, split, &a, &err) ||
            !run_part(&cd, &r, split, c.Nk, &b, &err)) {
            tu_group_fail(&g, "seed %llu: setup failed: %s", (unsigned long long)seed, err.message);
        } else {
            attn_tensor *out = &a.out.view, *lse = &a.lse.view;
            if (!c.in_place) {
                const int64_t os[4] = {c.B, c.Hq, c.Nq, c.Dv}, ls[3] = {c.B, c.Hq, c.Nq};
                tu_layout lo = c.strided ? tu_layout_random(&r, 4, TU_LAYOUT_OUTPUT)
                                         : tu_layout_contiguous(4);
                tu_tensor_alloc(&m.out, ATTN_F32, 4, os, &lo);
                tu_tensor_alloc(&m.lse, ATTN_F32, 3, ls, NULL);
                out = &m.out.view;
                lse = &m.lse.view;
            }
            attn_status st = attn_lse_merge(&a.out.view, &a.lse.view, &b.out.view, &b.lse.view,
                                            out, lse, &err);
            if (!tu_check(&g, st == ATTN_OK, "seed %llu: merge failed: %s",
                          (unsigned long long)seed, err.message))
                goto next;
            char what[160];
            snprintf(what, sizeof what,
                     "B=%lld Hq=%lld Hkv=%lld Nq=%lld Nk=%lld split=%lld D=%lld Dv=%lld causal=%d "
                     "padding=%d strided=%d in_place=%d",
                     (long long)c.B, (long long)c.Hq, (long long)c.Hkv, (long long)c.Nq,
                     (long long)c.Nk, (long long)split, (long long)c.D, (long long)c.Dv,
                     c.causal, c.padding, c.strided, c.in_place);
            check_union(&g, &cd, out, lse, what);
            if (!c.in_place)
                tu_check(&g, tu_padding_intact(&m.out) && tu_padding_intact(&m.lse),
                         "seed %llu: merge wrote outside its output view",
                         (unsigned long long)seed);
        }
    next:
        part_free(&a);
        part_free(&b);
        part_free(&m);
        case_free(&cd);
        if (opt->replay) break;
    }
    tu_group_end(&g);
}

static void group_associativity(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "associativity");
    const int64_t cases = opt->quick ? 20 : 80;
    for (int64_t n = 0; n < cases; ++n) {
        const uint64_t seed = tu_mix(opt->seed ^ 0xA55Cull ^ (uint64_t)n);
        merge_case c = draw_case(seed);
        if (c.Nk < 3) c.Nk = 3;
        c.strided = false;
        tu_crash_context("associativity, seed %llu", (unsigned long long)seed);
        case_data cd;
        tu_rng r;
        tu_rng_seed(&r, seed);
        part p[3], ab, bc, l, rr, ba;
        memset(p, 0, sizeof p);
        memset(&ab, 0, sizeof ab), memset(&bc, 0, sizeof bc), memset(&l, 0, sizeof l);
        memset(&rr, 0, sizeof rr), memset(&ba, 0, sizeof ba);
        attn_error err = {0};
        const int64_t s1 = tu_rng_int(&r, 1, c.Nk - 2), s2 = tu_rng_int(&r, s1 + 1, c.Nk - 1);
        bool ok = case_init(&cd, &c) && run_part(&cd, &r, 0, s1, &p[0], &err) &&
                  run_part(&cd, &r, s1, s2, &p[1], &err) &&
                  run_part(&cd, &r, s2, c.Nk, &p[2], &err);
        const int64_t os[4] = {c.B, c.Hq, c.Nq, c.Dv}, ls[3] = {c.B, c.Hq, c.Nq};
        part *outs[5] = {&ab, &bc, &l, &rr, &ba};
        for (int i = 0; ok && i < 5; ++i)
            ok = tu_tensor_alloc(&outs[i]->out, ATTN_F32, 4, os, NULL) &&
                 tu_tensor_alloc(&outs[i]->lse, ATTN_F32, 3, ls, NULL);
#define MERGE(x, y, z)                                                                      \
    attn_lse_merge(&(x).out.view, &(x).lse.view, &(y).out.view, &(y).lse.view, &(z).out.view, \
                   &(z).lse.view, &err)
        ok = ok && MERGE(p[0], p[1], ab) == ATTN_OK && MERGE(ab, p[2], l) == ATTN_OK &&
             MERGE(p[1], p[2], bc) == ATTN_OK && MERGE(p[0], bc, rr) == ATTN_OK &&
             MERGE(p[1], p[0], ba) == ATTN_OK;
#undef MERGE
        if (!tu_check(&g, ok, "seed %llu: setup or merge failed: %s", (unsigned long long)seed,
                      err.message)) {
        } else {
            check_union(&g, &cd, &l.out.view, &l.lse.view, "(a+b)+c");
            check_union(&g, &cd, &rr.out.view, &rr.lse.view, "a+(b+c)");
            /* The two groupings differ only by rounding: a few ulps of the
             * row's output scale. */
            const int64_t no = tu_numel(&l.out.view);
            double *x = malloc(sizeof(double) * (size_t)no), *y = malloc(sizeof(double) * (size_t)no);
            tu_to_f64(&l.out.view, x);
            tu_to_f64(&rr.out.view, y);
            tu_tol tol = {.atol = 8 * EPS32, .rtol = 0, .atol_scale = cd.mag};
            tu_cmp cmp;
            char buf[512];
            if (!tu_compare_f64(x, y, no, tol, &cmp)) {
                tu_cmp_describe(&cmp, "(a+b)+c vs a+(b+c)", &l.out.view, buf, sizeof buf);
                tu_group_fail(&g, "seed %llu: %s", (unsigned long long)seed, buf);
            } else {
                tu_group_pass(&g);
            }
            free(x);
            free(y);
            const size_t ob = (size_t)no * sizeof(float), lb = (size_t)tu_numel(&ab.lse.view) * sizeof(float);
            tu_check(&g, !memcmp(ab.out.view.data, ba.out.view.data, ob) &&
                             !memcmp(ab.lse.view.data, ba.lse.view.data, lb),
                     "seed %llu: a+b and b+a differ", (unsigned long long)seed);
        }
        for (int i = 0; i < 3; ++i) part_free(&p[i]);
        for (int i = 0; i < 5; ++i) part_free(outs[i]);
        case_free(&cd);
    }
    tu_group_end(&g);
}

/* Stats (m, ll) of a list of logits in float64: m = max, ll = log Σ e^(x-m). */
static void stats64(const double *x, int n, double *m, double *ll)
{
    *m = -INFINITY;
    for (int i = 0; i < n; ++i)
        if (x[i] > *m) *m = x[i];
    if (*m == -INFINITY) {
        *ll = 0;
        return;
    }
    double s = 0;
    for (int i = 0; i < n; ++i) s += exp(x[i] - *m);
    *ll = log(s);
}

static void group_stats(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "stats form");
    tu_rng r;
    tu_rng_seed(&r, opt->seed ^ 0x57a75ull);
    enum { ROWS = 64, KEYS = 12, DV = 5 };
    /* Each row: KEYS logits around an offset (up to 1e6, where ulp(lse) is
     * 0.0625 and a rounded lse is useless for ll), values; part 1 takes keys
     * [0, split), part 2 the rest. Row 0: part 2 empty; row 1: both empty. */
    static float m1[ROWS * 2], m2[ROWS * 2], mo[ROWS * 2], o1[ROWS * DV], o2[ROWS * DV],
        oo[ROWS * DV];
    static double want_m[ROWS], want_ll[ROWS], want_o[ROWS * DV];
    for (int row = 0; row < ROWS; ++row) {
        double x[KEYS], val[KEYS][DV];
        const double offset = row % 4 == 0 ? 1e6 : row % 4 == 1 ? -3e5 : tu_rng_range(&r, -20, 20);
        for (int j = 0; j < KEYS; ++j) {
            /* logits exactly representable in float, so the oracle sees the
             * same inputs the float stats describe */
            x[j] = (double)(float)(offset + tu_rng_range(&r, -4, 4));
            for (int d = 0; d < DV; ++d) val[j][d] = tu_rng_normal(&r);
        }
        int split = (int)tu_rng_int(&r, 1, KEYS - 1);
        if (row == 0) split = KEYS;
        if (row == 1)
            for (int j = 0; j < KEYS; ++j) x[j] = -INFINITY;
        double a_m, a_ll, b_m, b_ll;
        stats64(x, split, &a_m, &a_ll);
        stats64(x + split, KEYS - split, &b_m, &b_ll);
        stats64(x, KEYS, &want_m[row], &want_ll[row]);
        m1[2 * row] = (float)a_m, m1[2 * row + 1] = (float)a_ll;
        m2[2 * row] = (float)b_m, m2[2 * row + 1] = (float)b_ll;
        /* outputs of each part from the float stats the parts report */
        for (int d = 0; d < DV; ++d) {
            double sa = 0, sb = 0, su = 0;
            for (int j = 0; j < KEYS; ++j) {
                if (x[j] == -INFINITY) continue;
                if (j < split) sa += exp(x[j] - a_m - a_ll) * val[j][d];
                else sb += exp(x[j] - b_m - b_ll) * val[j][d];
                su += exp(x[j] - want_m[row] - want_ll[row]) * val[j][d];
            }
            o1[row * DV + d] = (float)sa;
            o2[row * DV + d] = (float)sb;
            want_o[row * DV + d] = su;
        }
    }
    attn_tensor O1 = attn_tensor_4d(o1, 1, 1, ROWS, DV), O2 = attn_tensor_4d(o2, 1, 1, ROWS, DV),
                OO = attn_tensor_4d(oo, 1, 1, ROWS, DV), S1 = attn_tensor_4d(m1, 1, 1, ROWS, 2),
                S2 = attn_tensor_4d(m2, 1, 1, ROWS, 2), SO = attn_tensor_4d(mo, 1, 1, ROWS, 2);
    attn_error err = {0};
    attn_status st = attn_lse_merge(&O1, &S1, &O2, &S2, &OO, &SO, &err);
    if (tu_check(&g, st == ATTN_OK, "stats merge failed: %s", err.message)) {
        int bad = 0;
        for (int row = 0; row < ROWS && bad < 5; ++row) {
            /* m is a max: exact. ll to a few float ulps of its size (never of
             * m's), out to a few ulps of the values' scale. */
            const double ll_tol = 4 * EPS32 * (1 + fabs(want_ll[row]));
            bool ok = mo[2 * row] == (float)want_m[row] &&
                      fabs(mo[2 * row + 1] - want_ll[row]) <= ll_tol;
            for (int d = 0; d < DV; ++d)
                ok = ok && fabs(oo[row * DV + d] - want_o[row * DV + d]) <= 16 * EPS32 * 4;
            if (!ok) {
                bad++;
                tu_group_fail(&g, "row %d: got (m %.9g, ll %.9g) want (%.9g, %.9g), out[0] %.9g want %.9g",
                              row, mo[2 * row], mo[2 * row + 1], want_m[row], want_ll[row],
                              oo[row * DV], want_o[row * DV]);
            }
        }
        if (!bad) tu_group_pass(&g);
        tu_check(&g, !memcmp(oo, o1, DV * sizeof(float)) && mo[0] == m1[0] && mo[1] == m1[1],
                 "row 0 (part 2 empty) must equal part 1 bit for bit");
        tu_check(&g, mo[2] == -INFINITY && mo[3] == 0.0f && oo[DV] == 0.0f,
                 "row 1 (both empty) must give (-inf, 0) and out 0, got (%g, %g), %g", mo[2],
                 mo[3], oo[DV]);
        /* The LSE form of the same inputs at m = 1e6 cannot be as exact: the
         * merged lse is a float near 1e6 (ulp 0.0625), while m + ll from the
         * stats keeps ll's digits. Check the stats really carry more. */
        double worst_lse = 0, worst_stats = 0;
        for (int row = 4; row < ROWS; row += 4) {
            const double truth = want_m[row] + want_ll[row];
            worst_lse = fmax(worst_lse, fabs((double)(float)truth - truth));
            worst_stats = fmax(worst_stats, fabs((double)mo[2 * row] + mo[2 * row + 1] - truth));
        }
        tu_check(&g, worst_stats < 1e-5 && worst_stats < worst_lse,
                 "stats should beat a rounded lse at m = 1e6: %.3g vs %.3g", worst_stats,
                 worst_lse);
    }
    /* In place, with a strided (m, ll) view: stats as columns of a wider
     * array. */
    static float wide[ROWS * 5], wide2[ROWS * 5];
    for (int row = 0; row < ROWS; ++row) {
        wide[row * 5 + 1] = m1[2 * row], wide[row * 5 + 3] = m1[2 * row + 1];
        wide2[row * 5 + 1] = m2[2 * row], wide2[row * 5 + 3] = m2[2 * row + 1];
    }
    attn_tensor W1 = {wide + 1, ATTN_F32, 4, {1, 1, ROWS, 2}, {ROWS * 5, ROWS * 5, 5, 2}};
    attn_tensor W2 = W1;
    W2.data = wide2 + 1;
    float o1c[ROWS * DV];
    memcpy(o1c, o1, sizeof o1c);
    attn_tensor O1c = attn_tensor_4d(o1c, 1, 1, ROWS, DV);
    st = attn_lse_merge(&O1c, &W1, &O2, &W2, &O1c, &W1, &err);
    bool same = st == ATTN_OK && !memcmp(o1c, oo, sizeof o1c);
    for (int row = 0; same && row < ROWS; ++row)
        same = wide[row * 5 + 1] == mo[2 * row] && wide[row * 5 + 3] == mo[2 * row + 1];
    tu_check(&g, same, "in-place strided stats merge must equal the out-of-place one (%s)",
             err.message);
    tu_group_end(&g);
}

static void group_special(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "special rows");
    enum { R = 7, DV = 3 };
    /* rows: (-inf,-inf), (-inf,b), (a,-inf), (NaN,b), (a,NaN), (+inf,b), (a,a) */
    float l1[R] = {-INFINITY, -INFINITY, 2.5f, NAN, 1.0f, INFINITY, 3.0f};
    float l2[R] = {-INFINITY, -1.5f, -INFINITY, 1.0f, NAN, 0.5f, 3.0f};
    float o1[R * DV], o2[R * DV], o[R * DV], l[R];
    for (int i = 0; i < R * DV; ++i) o1[i] = 0.25f * (float)(i + 1), o2[i] = -0.5f * (float)i;
    /* junk where a side is empty: it must not leak (0·NaN) into the result */
    o2[2 * DV] = NAN;
    o1[1 * DV + 1] = INFINITY;
    attn_tensor O1 = attn_tensor_4d(o1, 1, 1, R, DV), O2 = attn_tensor_4d(o2, 1, 1, R, DV),
                O = attn_tensor_4d(o, 1, 1, R, DV), L1 = attn_tensor_3d(l1, 1, 1, R),
                L2 = attn_tensor_3d(l2, 1, 1, R), L = attn_tensor_3d(l, 1, 1, R);
    attn_error err = {0};
    if (tu_check(&g, attn_lse_merge(&O1, &L1, &O2, &L2, &O, &L, &err) == ATTN_OK,
                 "merge failed: %s", err.message)) {
        tu_check(&g, l[0] == -INFINITY && o[0] == 0 && o[1] == 0 && o[2] == 0,
                 "both -inf: out 0, lse -inf");
        tu_check(&g, l[1] == -1.5f && !memcmp(o + DV, o2 + DV, DV * sizeof(float)),
                 "side 1 -inf: side 2 copied bit for bit");
        tu_check(&g, l[2] == 2.5f && !memcmp(o + 2 * DV, o1 + 2 * DV, DV * sizeof(float)),
                 "side 2 -inf: side 1 copied bit for bit");
        tu_check(&g, isnan(l[3]) && isnan(o[3 * DV]) && isnan(o[3 * DV + 2]) && isnan(l[4]) &&
                         isnan(o[4 * DV + 1]),
                 "a NaN lse makes the row NaN");
        tu_check(&g, l[5] == INFINITY && o[5 * DV] == o1[5 * DV],
                 "+inf lse dominates: lse +inf, out = out1");
        tu_check(&g, fabsf(l[6] - (3.0f + (float)log(2.0))) <= 4 * FLT_EPSILON * 4 &&
                         fabsf(o[6 * DV + 1] - 0.5f * (o1[6 * DV + 1] + o2[6 * DV + 1])) <= 1e-6f,
                 "equal lse: mean of the outputs, lse + log 2");
    }
    tu_group_end(&g);
}

static void group_bad(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "bad arguments");
    float a[2 * 3 * 4 * 5], b[2 * 3 * 4 * 5], c[2 * 3 * 4 * 5], la[24 * 2], lb[24 * 2], lc[24 * 2];
    memset(a, 0, sizeof a), memset(b, 0, sizeof b), memset(la, 0, sizeof la), memset(lb, 0, sizeof lb);
    attn_tensor O = attn_tensor_4d(a, 2, 3, 4, 5), O2 = attn_tensor_4d(b, 2, 3, 4, 5),
                OO = attn_tensor_4d(c, 2, 3, 4, 5), L = attn_tensor_3d(la, 2, 3, 4),
                L2 = attn_tensor_3d(lb, 2, 3, 4), LO = attn_tensor_3d(lc, 2, 3, 4);
    attn_error err;
    struct {
        const char *what;
        attn_status want;
        const char *msg; /* must appear in the message */
    } exp[16];
    int n = 0;
    attn_status got[16];
#define CASE(W, S, M, CALL)                                                                 \
    do {                                                                                    \
        memset(&err, 0, sizeof err);                                                        \
        got[n] = (CALL);                                                                    \
        exp[n].what = (W), exp[n].want = (S), exp[n].msg = (M);                             \
        tu_check(&g, got[n] == exp[n].want && strstr(err.message, exp[n].msg) != NULL,      \
                 "%s: got %s '%s', want %s mentioning '%s'", exp[n].what,                    \
                 attn_status_string(got[n]), err.message, attn_status_string(exp[n].want),   \
                 exp[n].msg);                                                               \
        n++;                                                                                \
    } while (0)
    CASE("NULL out2", ATTN_ERR_NULL, "out2", attn_lse_merge(&O, &L, NULL, &L2, &OO, &LO, &err));
    CASE("NULL out", ATTN_ERR_NULL, "out", attn_lse_merge(&O, &L, &O2, &L2, NULL, &LO, &err));
    attn_tensor Obad = attn_tensor_4d(b, 2, 3, 3, 5);
    CASE("rows differ", ATTN_ERR_SHAPE, "out2", attn_lse_merge(&O, &L, &Obad, &L2, &OO, &LO, &err));
    attn_tensor Lbad = attn_tensor_3d(lb, 2, 2, 4);
    CASE("lse heads differ", ATTN_ERR_SHAPE, "lse2", attn_lse_merge(&O, &L, &O2, &Lbad, &OO, &LO, &err));
    attn_tensor S = attn_tensor_4d(lb, 2, 3, 4, 2);
    CASE("mixed LSE and stats", ATTN_ERR_SHAPE, "both LSE or both softmax stats",
         attn_lse_merge(&O, &L, &O2, &S, &OO, &LO, &err));
    attn_tensor S3 = attn_tensor_4d(la, 2, 3, 4, 1);
    CASE("stats last dim 1", ATTN_ERR_SHAPE, "size 2", attn_lse_merge(&O, &S3, &O2, &S3, &OO, NULL, &err));
    attn_tensor L2d = attn_tensor_2d(la, 6, 4);
    CASE("lse 2-D", ATTN_ERR_SHAPE, "lse1", attn_lse_merge(&O, &L2d, &O2, &L2, &OO, &LO, &err));
    attn_tensor Ob = OO;
    Ob.stride[2] = 0;
    CASE("broadcast output", ATTN_ERR_STRIDE, "out", attn_lse_merge(&O, &L, &O2, &L2, &Ob, &LO, &err));
    attn_tensor Lo = attn_tensor_3d(lc, 2, 3, 5);
    CASE("lse out rows", ATTN_ERR_SHAPE, "lse", attn_lse_merge(&O, &L, &O2, &L2, &OO, &Lo, &err));
    attn_tensor Ov = attn_tensor_4d(c, 2, 3, 4, 4);
    CASE("out features", ATTN_ERR_SHAPE, "out", attn_lse_merge(&O, &L, &O2, &L2, &Ov, &LO, &err));
    /* Memory: an output may be the same view as an input of its kind (in
     * place), nothing else. */
    attn_tensor Oshift = attn_tensor_4d(a + 1, 2, 3, 4, 5); /* never read: refused first */
    CASE("out overlaps out1", ATTN_ERR_ARG, "out1", attn_lse_merge(&O, &L, &O2, &L2, &Oshift, &LO, &err));
    attn_tensor Ohalf = attn_tensor_4d(c, 2, 3, 4, 5);
    Ohalf.data = b + 60; /* the second half of out2 and beyond */
    CASE("out overlaps out2", ATTN_ERR_ARG, "out2", attn_lse_merge(&O, &L, &O2, &L2, &Ohalf, NULL, &err));
    attn_tensor Lin = attn_tensor_3d(a, 2, 3, 4);
    CASE("lse overlaps out1", ATTN_ERR_ARG, "out1", attn_lse_merge(&O, &L, &O2, &L2, &OO, &Lin, &err));
    attn_tensor Lo1 = attn_tensor_3d(c, 2, 3, 4);
    CASE("out and lse overlap", ATTN_ERR_ARG, "lse", attn_lse_merge(&O, &L, &O2, &L2, &OO, &Lo1, &err));
#undef CASE
    tu_check(&g, attn_lse_merge(&O, &L, &O2, &L2, &O, &L, &err) == ATTN_OK,
             "out = out1 and lse = lse1 (in place) must be allowed: %s", err.message);
    /* lse may be NULL: out alone. */
    tu_check(&g, attn_lse_merge(&O, &L, &O2, &L2, &OO, NULL, &err) == ATTN_OK,
             "lse NULL must be allowed: %s", err.message);
    tu_group_end(&g);
}

int main(int argc, char **argv)
{
    tu_options opt;
    if (!tu_parse_options(argc, argv, 0x3e46eu, &opt)) return 2;
    tu_install_crash_handler();
    tu_suite suite = {0};
    suite.verbose = opt.verbose;
    if (tu_group_selected(&opt, "split keys")) group_split(&suite, &opt);
    if (!opt.replay) {
        if (tu_group_selected(&opt, "associativity")) group_associativity(&suite, &opt);
        if (tu_group_selected(&opt, "stats form")) group_stats(&suite, &opt);
        if (tu_group_selected(&opt, "special rows")) group_special(&suite);
        if (tu_group_selected(&opt, "bad arguments")) group_bad(&suite);
    }
    return tu_suite_finish(&suite);
}
