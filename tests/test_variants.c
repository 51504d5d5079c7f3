/*
 * test_variants — the score variants (sliding window, ALiBi, logit
 * softcap, attention sinks, dropout) and their combinations with GQA,
 * causality and masks, forward (out, lse, weights, softmax_stats) and
 * backward (dq, dk, dv, grad_sinks), on every path: the reference path, the
 * generic kernels and every SIMD ISA this CPU has (ATTN_ARCH).
 *
 * Oracle: tests/support/ref64_variants.c, a float64 implementation written
 * from attn.h's formulas that materialises the dense bias (ALiBi + masks) and
 * the visibility (causal + window + masks); judged with the accuracy criterion
 * against its naive float32 twin (tests/support/sdpa_judge.c):
 *   |attn − ref64| <= 3·max|fp32 − ref64| + 1e-6·natural, no NaN/inf where
 *   ref64 is finite.
 * The oracle's own backward (incl. the softcap chain rule and grad_sinks) is
 * proven by float64 central finite differences (group oracle-fd).
 *
 * Dropout: torch's stream cannot be matched, but the keep mask is a pure
 * function of (seed, offset, b, h, i, j), so it is read back from the
 * library (all logits 0 and V = identity: out_ij = keep_ij / (n (1 − p))) and
 * handed to the oracle; then: keep rate within a binomial bound, masks
 * identical across thread counts 1/2/3, ISAs and calls and independent of
 * the inputs, seed/offset/head sensitivity, E[out] over many seeds ≈ the
 * no-dropout out, forward/backward consistency by finite differences at a
 * fixed seed, p = 0 bitwise identical to no dropout.
 *
 * MHA dropout (training mode): eval ignores it bitwise, training is
 * deterministic across reruns/threads/ISAs and seed-dependent, E[out] over
 * seeds ≈ eval out, backward = derivative of the forward at a fixed seed.
 *
 * Keys that no row sees (window, causality, masks) hold NaN / ±inf in a
 * third of the cases: they must never reach any result.
 *
 * Also: attn_alibi_slopes against the paper's formula (non-power-of-two H),
 * fully hidden rows (out 0, lse -inf, or lse = sink with sinks), bitwise
 * identical results across thread counts for every variant, and bad values
 * refused with ATTN_ERR_ARG / ATTN_ERR_SHAPE and a message naming the option.
 *
 * Replay: random cases print `ATTN_TEST_CASE=<seed> ./test_variants`;
 * systematic groups `./test_variants --seed <base> --group <group>`.
 * Quick mode by default (< 60 s); ATTN_STRESS_FULL=1 (as for test_stress) runs
 * the full mode (more random combinations and dropout seeds, ~1 min);
 * ATTN_TEST_QUICK=1 (CI's qemu and sanitizer runs) gives group decode one kv
 * head instead of two (the same GQA group of 4, key lengths and variants);
 * ATTN_TEST_CASES=N sets the number of random combinations.
 */
#include "attn.h"
#include "ref64.h"
#include "ref64_variants.h"
#include "sdpa_judge.h"
#include "testutil.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_SEED 0x7A41A27ull

static uint64_t g_seed;
static const tu_options *g_opt; /* the command line's options (group combined reads them) */
static bool g_quick = true;
static bool g_light; /* ATTN_TEST_QUICK=1: group decode with half the heads */

static double f32(double x) { return (double)(float)x; }

/* ------------------------------------------------------------ dropout mask */

/*
 * Reads back the keep mask the library draws for (B, Hq, Nq, Nk) under
 * (p, seed, offset): q = k = 0 (every logit 0, P = 1/Nk), Hkv = 1, Dv = Nk
 * and V = identity, so out[b,h,i,e] = keep(b,h,i,e)/(Nk(1-p)). keep gets 1/0;
 * returns false if a call fails or a value is neither 0 nor the kept value.
 */
static bool extract_keep(const sj_path *path, int64_t B, int64_t Hq, int64_t Nq, int64_t Nk,
                         float p, uint64_t seed, uint64_t offset, int threads, uint8_t *keep,
                         char *why, size_t whylen)
{
    const int64_t D = 3;
    float *q = tu_xcalloc(B * Hq * Nq * D, 4), *k = tu_xcalloc(B * Nk * D, 4), *v = tu_xcalloc(B * Nk * Nk, 4),
          *o = tu_xcalloc(B * Hq * Nq * Nk, 4);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < Nk; ++j) v[(b * Nk + j) * Nk + j] = 1.0f;
    attn_tensor Q = attn_tensor_4d(q, B, Hq, Nq, D), K = attn_tensor_4d(k, B, 1, Nk, D),
                V = attn_tensor_4d(v, B, 1, Nk, Nk), O = attn_tensor_4d(o, B, Hq, Nq, Nk);
    attn_sdpa_opts opts = attn_sdpa_opts_default();
    opts.path = path->path;
    opts.num_threads = threads;
    opts.dropout_p = p;
    opts.dropout_seed = seed;
    opts.dropout_offset = offset;
    sj_select(path);
    attn_error err = {0};
    attn_status st = attn_sdpa(&Q, &K, &V, &O, NULL, NULL, &opts, &err);
    unsetenv("ATTN_ARCH");
    bool ok = st == ATTN_OK;
    if (!ok) snprintf(why, whylen, "status %s: %.200s", attn_status_string(st), err.message);
    const double kept = 1.0 / ((double)Nk * (1.0 - (double)p));
    for (int64_t e = 0; ok && e < B * Hq * Nq * Nk; ++e) {
        keep[e] = o[e] != 0.0f;
        if (keep[e] && !(fabs((double)o[e] - kept) <= 1e-5 * kept)) {
            snprintf(why, whylen, "element %" PRId64 " = %.9g, neither 0 nor 1/(n(1-p)) = %.9g", e,
                     (double)o[e], kept);
            ok = false;
        }
    }
    free(q), free(k), free(v), free(o);
    return ok;
}

/* ------------------------------------------------------------ cases */

enum { AL_NONE, AL_GEOMETRIC, AL_RANDOM, AL_PER_BATCH };
enum { VM_NONE, VM_BOOL, VM_FLOAT, VM_KEYPAD };
static const char *const al_name[] = {"none", "geometric(Hq)", "random(Hq)", "random(B,Hq)"};
static const char *const vm_name[] = {"none", "bool(Nq,Nk)", "float(B,1,Nq,Nk)", "keypad(B,1,1,Nk)"};

typedef struct {
    uint64_t seed;
    int64_t B, Hq, Hkv, Nq, Nk, D, Dv;
    float scale;
    attn_causal causal;
    attn_window window;
    float softcap;
    int alibi;
    bool sinks;
    double sink_mean;
    float dropout_p;
    int mask;
    double qmag;
    bool backward;
    bool bnhd;
    bool poison; /* keys no row sees (window, causal, masks) hold NaN / ±inf in K and V */
} vcase;

static void describe(const vcase *c, const char *replay, char *buf, size_t n)
{
    char win[64] = "off";
    if (c->window.enabled)
        snprintf(win, sizeof win, "(%" PRId64 ",%" PRId64 ")", c->window.left, c->window.right);
    snprintf(buf, n,
             "B=%" PRId64 " Hq=%" PRId64 " Hkv=%" PRId64 " Nq=%" PRId64 " Nk=%" PRId64 " D=%" PRId64
             " Dv=%" PRId64 " scale=%.6g causal=%s window=%s softcap=%g alibi=%s sinks=%d(mean %g) "
             "dropout=%g mask=%s |q|=%g bnhd=%d poison=%d seed=0x%016" PRIx64 " | replay: %s",
             c->B, c->Hq, c->Hkv, c->Nq, c->Nk, c->D, c->Dv, (double)c->scale, sj_causal_name(c->causal),
             win, (double)c->softcap, al_name[c->alibi], c->sinks, c->sink_mean, (double)c->dropout_p,
             vm_name[c->mask], c->qmag, c->bnhd, c->poison, c->seed, replay);
}

static vcase base(uint64_t seed)
{
    vcase c;
    memset(&c, 0, sizeof c);
    c.seed = seed;
    c.B = 1, c.Hq = 2, c.Hkv = 1, c.Nq = 37, c.Nk = 53, c.D = 16, c.Dv = 12;
    c.qmag = 1.0;
    c.backward = true;
    return c;
}

static int64_t pick_window_side(tu_rng *r, int64_t n)
{
    const double u = tu_rng_uniform(r);
    if (u < 0.25) return -1;
    if (u < 0.4) return 0;
    return tu_rng_int(r, 1, n > 2 ? n : 2);
}

static vcase random_vcase(uint64_t seed)
{
    static const int64_t lens[] = {1, 2, 5, 16, 31, 64, 65, 97, 130};
    static const int64_t dims[] = {1, 3, 8, 16, 17, 32, 64, 65};
    static const int64_t ratios[] = {1, 2, 3, 4, 8};
    tu_rng r;
    tu_rng_seed(&r, seed);
    vcase c = base(seed);
    c.B = tu_rng_int(&r, 1, 2);
    c.Hkv = tu_rng_int(&r, 1, 2);
    c.Hq = c.Hkv * tu_rng_pick(&r, ratios, 5);
    c.Nq = tu_rng_pick(&r, lens, 9);
    c.Nk = tu_rng_chance(&r, 0.3) ? c.Nq : tu_rng_pick(&r, lens, 9);
    c.D = tu_rng_pick(&r, dims, 8);
    c.Dv = tu_rng_chance(&r, 0.5) ? c.D : tu_rng_pick(&r, dims, 8);
    c.scale = tu_rng_chance(&r, 0.5) ? 0.0f : (float)tu_rng_range(&r, 0.05, 2.0);
    c.causal = (attn_causal)tu_rng_int(&r, 0, 2);
    if (tu_rng_chance(&r, 0.6)) {
        c.window.enabled = true;
        c.window.left = pick_window_side(&r, c.Nk);
        c.window.right = pick_window_side(&r, c.Nk);
    }
    c.softcap = tu_rng_chance(&r, 0.5) ? (float)tu_rng_range(&r, 0.5, 30.0) : 0.0f;
    c.alibi = tu_rng_chance(&r, 0.5) ? (int)tu_rng_int(&r, 1, 3) : AL_NONE;
    c.sinks = tu_rng_chance(&r, 0.5);
    c.sink_mean = tu_rng_chance(&r, 0.3) ? 6.0 : 0.0;
    c.dropout_p = tu_rng_chance(&r, 0.35) ? (float)tu_rng_range(&r, 0.05, 0.7) : 0.0f;
    c.mask = (int)tu_rng_int(&r, 0, 3);
    c.qmag = tu_rng_chance(&r, 0.3) ? tu_rng_range(&r, 2.0, 6.0) : 1.0;
    c.bnhd = tu_rng_chance(&r, 0.3);
    c.poison = tu_rng_chance(&r, 0.3);
    /* budget */
    while ((double)c.B * c.Hq * c.Nq * c.Nk * (double)(c.D + c.Dv) > 4e5) {
        if (c.B > 1) c.B--;
        else if (c.Hq > c.Hkv) c.Hq -= c.Hkv;
        else if (c.Nq > 8) c.Nq /= 2;
        else if (c.Nk > 8) c.Nk /= 2;
        else break;
    }
    return c;
}

typedef struct {
    double *q, *k, *v, *dout, *alibi, *sinks;
    uint8_t *keep;
    tu_tensor mask;
    bool have_mask;
} vdata;

static void vdata_free(vdata *d)
{
    free(d->q), free(d->k), free(d->v), free(d->dout), free(d->alibi), free(d->sinks), free(d->keep);
    if (d->have_mask) tu_tensor_free(&d->mask);
}

/* The judge's case for c with d's data. */
static void fill_jcase(sj_case *jc, const vcase *c, const vdata *d)
{
    memset(jc, 0, sizeof *jc);
    jc->B = c->B, jc->Hq = c->Hq, jc->Hkv = c->Hkv, jc->Nq = c->Nq, jc->Nk = c->Nk, jc->D = c->D, jc->Dv = c->Dv;
    jc->scale = c->scale;
    jc->causal = c->causal;
    jc->window = c->window;
    jc->softcap = c->softcap;
    jc->alibi = d->alibi;
    jc->alibi_ndim = c->alibi == AL_PER_BATCH ? 2 : 1;
    jc->sinks = d->sinks;
    jc->dropout_p = c->dropout_p;
    jc->dropout_seed = c->seed;
    jc->dropout_offset = c->seed >> 7;
    jc->keep = d->keep;
    jc->mask[0] = d->have_mask ? &d->mask.view : NULL;
    jc->q = d->q, jc->k = d->k, jc->v = d->v, jc->dout = d->dout;
    jc->weights = true;
    jc->backward = c->backward;
    jc->modes_all = true;
    jc->bnhd = c->bnhd;
}

/* Builds the inputs; false (with why) if the dropout mask cannot be read. */
static bool vdata_make(vdata *d, const vcase *c, char *why, size_t whylen)
{
    memset(d, 0, sizeof *d);
    tu_rng r;
    tu_rng_seed(&r, c->seed ^ 0x11A7Aull);
    const int64_t nq = c->B * c->Hq * c->Nq * c->D, nk = c->B * c->Hkv * c->Nk * c->D,
                  nv = c->B * c->Hkv * c->Nk * c->Dv, no = c->B * c->Hq * c->Nq * c->Dv;
    d->q = sj_random_normal(nq, c->qmag, &r);
    d->k = sj_random_normal(nk, c->qmag, &r);
    d->v = sj_random_normal(nv, 1.0, &r);
    d->dout = sj_random_normal(no, 1.0, &r);
    if (c->alibi != AL_NONE) {
        const int64_t n = c->alibi == AL_PER_BATCH ? c->B * c->Hq : c->Hq;
        d->alibi = tu_xcalloc(n, 8);
        if (c->alibi == AL_GEOMETRIC) {
            rv_alibi_slopes64(c->Hq, d->alibi);
            for (int64_t h = 0; h < n; ++h) d->alibi[h] = f32(d->alibi[h]);
        } else {
            for (int64_t h = 0; h < n; ++h) d->alibi[h] = f32(tu_rng_range(&r, 0.0, 0.6));
        }
    }
    if (c->sinks) {
        d->sinks = tu_xcalloc(c->Hq, 8);
        for (int64_t h = 0; h < c->Hq; ++h) d->sinks[h] = f32(c->sink_mean + 1.5 * tu_rng_normal(&r));
    }
    if (c->mask != VM_NONE) {
        int64_t shape[4];
        int ndim;
        attn_dtype dt = ATTN_BOOL;
        if (c->mask == VM_BOOL) ndim = 2, shape[0] = c->Nq, shape[1] = c->Nk;
        else if (c->mask == VM_FLOAT) ndim = 4, shape[0] = c->B, shape[1] = 1, shape[2] = c->Nq, shape[3] = c->Nk, dt = ATTN_F32;
        else ndim = 4, shape[0] = c->B, shape[1] = 1, shape[2] = 1, shape[3] = c->Nk;
        tu_tensor_alloc(&d->mask, dt, ndim, shape, NULL);
        d->have_mask = true;
        const int64_t n = tu_numel(&d->mask.view);
        for (int64_t e = 0; e < n; ++e) {
            double val;
            if (c->mask == VM_BOOL) val = tu_rng_chance(&r, 0.75);
            else if (c->mask == VM_FLOAT) val = tu_rng_chance(&r, 0.12) ? -INFINITY : 1.5 * tu_rng_normal(&r);
            else val = (e % c->Nk) < (e / c->Nk == 0 ? (c->Nk + 1) / 2 : c->Nk - 1);
            tu_set(&d->mask.view, e, val);
        }
    }
    if (c->poison) { /* keys no row sees (window, causal, masks) hold NaN, +inf or -inf */
        sj_case jc;
        fill_jcase(&jc, c, d);
        sj_poison_hidden_keys(&jc, d->k, d->v, &r);
    }
    if (c->dropout_p > 0.0f) {
        d->keep = tu_xcalloc(c->B * c->Hq * c->Nq * c->Nk, 1);
        /* read back on the best fused path (the reference path draws the
         * same mask, checked in group dropout-mask, but is slow with Dv = Nk) */
        sj_path paths[SJ_MAX_PATHS];
        const int np = sj_paths(paths);
        if (!extract_keep(&paths[np - 1], c->B, c->Hq, c->Nq, c->Nk, c->dropout_p, c->seed, c->seed >> 7, 2,
                          d->keep, why, whylen))
            return false;
    }
    return true;
}

static int64_t g_cases_run;

static void run_vcase(tu_group *g, const vcase *c, const char *replay)
{
    char desc[1024], why[256] = "";
    describe(c, replay, desc, sizeof desc);
    vdata d;
    g_cases_run++;
    if (!vdata_make(&d, c, why, sizeof why)) {
        tu_group_fail(g, "dropout mask could not be read back: %s | %s", why, desc);
        vdata_free(&d);
        return;
    }
    sj_case jc;
    fill_jcase(&jc, c, &d);
    if (g->suite && g->suite->verbose) tu_group_note(g, "%s", desc);
    sj_run(g, &jc, desc);
    vdata_free(&d);
}

static void systematic_replay(char *buf, size_t n, const char *group)
{
    snprintf(buf, n, "%s./test_variants --seed 0x%" PRIx64 " --group %s", g_light ? "ATTN_TEST_QUICK=1 " : "",
             g_seed, group);
}

/* ------------------------------------------------------------ groups */

static void group_paths(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "paths");
    sj_check_paths(&g);
    tu_group_pass(&g);
    tu_group_end(&g);
}

/* The oracle's backward (softcap chain rule, ALiBi, window, sinks, dropout
 * mask, GQA) against float64 central differences of its forward. */
typedef struct {
    rv_problem *p;
    double *q, *k, *v, *dout, *sinks;
} fd_ctx;

static double fd_loss(void *ctx)
{
    fd_ctx *f = ctx;
    f->p->sinks = f->sinks;
    return rv_loss64(f->p, f->q, f->k, f->v, f->dout);
}

static void group_oracle_fd(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "oracle-fd");
    for (int n = 0; n < 6; ++n) {
        vcase c = base(tu_mix(g_seed ^ (0xFDull + (uint64_t)n)));
        c.B = 2, c.Hq = 4, c.Hkv = 2, c.Nq = 5, c.Nk = 7, c.D = 3, c.Dv = 2;
        c.causal = (attn_causal)(n % 3);
        c.window = (attn_window){n % 2 == 0, 2, n % 3 == 0 ? -1 : 1};
        c.softcap = n % 3 == 2 ? 0.0f : 1.5f;
        c.alibi = n % 4;
        c.sinks = n != 1;
        c.mask = n % 4;
        c.qmag = 1.5;
        vdata d;
        char why[128];
        vdata_make(&d, &c, why, sizeof why);
        uint8_t *keep = tu_xcalloc(c.B * c.Hq * c.Nq * c.Nk, 1);
        tu_rng r;
        tu_rng_seed(&r, c.seed);
        for (int64_t e = 0; e < c.B * c.Hq * c.Nq * c.Nk; ++e) keep[e] = tu_rng_chance(&r, 0.7);
        const int64_t nsc = c.B * c.Hq * c.Nq * c.Nk;
        double *bias = NULL, *alibi = NULL;
        if (d.have_mask) {
            bias = tu_xcalloc(nsc, 8);
            ref64_add_mask(bias, c.B, c.Hq, c.Nq, c.Nk, &d.mask.view);
        }
        if (d.alibi) {
            alibi = tu_xcalloc(c.B * c.Hq, 8);
            for (int64_t e = 0; e < c.B * c.Hq; ++e) alibi[e] = c.alibi == AL_PER_BATCH ? d.alibi[e] : d.alibi[e % c.Hq];
        }
        rv_problem p;
        memset(&p, 0, sizeof p);
        p.B = c.B, p.Hq = c.Hq, p.Hkv = c.Hkv, p.Nq = c.Nq, p.Nk = c.Nk, p.D = c.D, p.Dv = c.Dv;
        p.scale = 0.7, p.causal = c.causal, p.window = c.window, p.softcap = c.softcap;
        p.bias = bias, p.alibi = alibi, p.sinks = d.sinks;
        p.keep = n >= 3 ? keep : NULL, p.dropout_p = 0.3;
        const int64_t nq = c.B * c.Hq * c.Nq * c.D, nk = c.B * c.Hkv * c.Nk * c.D, nv = c.B * c.Hkv * c.Nk * c.Dv;
        double *an[4] = {tu_xcalloc(nq, 8), tu_xcalloc(nk, 8), tu_xcalloc(nv, 8), tu_xcalloc(c.Hq, 8)};
        double *fd[4] = {tu_xcalloc(nq, 8), tu_xcalloc(nk, 8), tu_xcalloc(nv, 8), tu_xcalloc(c.Hq, 8)};
        rv_backward64(&p, d.q, d.k, d.v, d.dout, an[0], an[1], an[2], an[3]);
        fd_ctx ctx = {&p, d.q, d.k, d.v, d.dout, d.sinks};
        ref64_fd_gradient(fd_loss, &ctx, d.q, nq, 1e-6, fd[0]);
        ref64_fd_gradient(fd_loss, &ctx, d.k, nk, 1e-6, fd[1]);
        ref64_fd_gradient(fd_loss, &ctx, d.v, nv, 1e-6, fd[2]);
        if (d.sinks) ref64_fd_gradient(fd_loss, &ctx, d.sinks, c.Hq, 1e-6, fd[3]);
        static const char *const nm[4] = {"dq", "dk", "dv", "grad_sinks"};
        const int64_t cnt[4] = {nq, nk, nv, d.sinks ? c.Hq : 0};
        char desc[1024];
        describe(&c, "./test_variants --group oracle-fd", desc, sizeof desc);
        for (int t = 0; t < 4; ++t) {
            double worst = 0, big = 1e-3;
            for (int64_t e = 0; e < cnt[t]; ++e) big = fmax(big, fabs(fd[t][e]));
            for (int64_t e = 0; e < cnt[t]; ++e) worst = fmax(worst, fabs(an[t][e] - fd[t][e]));
            tu_check(&g, worst <= 1e-6 * big, "oracle %s vs finite differences: max err %.3g (scale %.3g) dropout=%d %s",
                     nm[t], worst, big, p.keep != NULL, desc);
        }
        for (int t = 0; t < 4; ++t) free(an[t]), free(fd[t]);
        free(keep), free(bias), free(alibi);
        vdata_free(&d);
    }
    tu_group_end(&g);
}

static void group_alibi_slopes(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "alibi-slopes");
    /* H = 12 spelled out: 2^-1 .. 2^-8, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5. */
    const double want12[12] = {0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625,
                               0.70710678118654752, 0.35355339059327376, 0.17677669529663688,
                               0.088388347648318440};
    float got[300];
    attn_error err = {0};
    attn_status st = attn_alibi_slopes(12, got, &err);
    bool ok = st == ATTN_OK;
    for (int h = 0; ok && h < 12; ++h) ok = fabs((double)got[h] - want12[h]) <= 1e-7 * want12[h];
    tu_check(&g, ok, "attn_alibi_slopes(12) = [%.9g %.9g ... %.9g %.9g], want 2^-1..2^-8 then 2^-0.5, "
             "2^-1.5, 2^-2.5, 2^-3.5 (status %s)", (double)got[0], (double)got[1], (double)got[8],
             (double)got[11], attn_status_string(st));
    for (int64_t H = 1; H <= 257; H = H < 40 ? H + 1 : H * 2 + 1) {
        double want[600];
        rv_alibi_slopes64(H, want);
        for (int h = 0; h < 300; ++h) got[h] = NAN;
        st = attn_alibi_slopes(H, got, &err);
        double worst = 0;
        for (int64_t h = 0; h < H; ++h) worst = fmax(worst, fabs((double)got[h] - want[h]) / want[h]);
        tu_check(&g, st == ATTN_OK && worst <= 6e-8 && isnan(got[H]),
                 "attn_alibi_slopes(%" PRId64 "): status %s, worst relative error %.3g vs "
                 "2^(-8(h+1)/n) / every other of the 2n sequence%s",
                 H, attn_status_string(st), worst, isnan(got[H]) ? "" : " (wrote past `heads`)");
    }
    st = attn_alibi_slopes(0, got, &err);
    tu_check(&g, st == ATTN_ERR_ARG, "attn_alibi_slopes(0): status %s, want ATTN_ERR_ARG", attn_status_string(st));
    st = attn_alibi_slopes(-3, got, NULL);
    tu_check(&g, st == ATTN_ERR_ARG, "attn_alibi_slopes(-3): status %s, want ATTN_ERR_ARG", attn_status_string(st));
    st = attn_alibi_slopes(4, NULL, &err);
    tu_check(&g, st == ATTN_ERR_NULL || st == ATTN_ERR_ARG, "attn_alibi_slopes(4, NULL): status %s",
             attn_status_string(st));
    tu_group_end(&g);
}

static void group_window(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "window");
    char rp[128];
    systematic_replay(rp, sizeof rp, "window");
    const int64_t wins[][2] = {{0, 0}, {3, -1}, {-1, 2}, {5, 5}, {0, -1}, {-1, 0}, {100, 100}, {-1, -1}, {16, 0}};
    const int64_t shapes[][2] = {{37, 53}, {53, 37}, {1, 64}, {64, 64}};
    int n = 0;
    for (int wi = 0; wi < 9; ++wi)
        for (int si = 0; si < 4; ++si) {
            if (g_quick && (wi + si) % 2) continue;
            vcase c = base(tu_mix(g_seed ^ (0x3170ull + (uint64_t)n++)));
            c.window = (attn_window){true, wins[wi][0], wins[wi][1]};
            c.Nq = shapes[si][0], c.Nk = shapes[si][1];
            c.causal = (attn_causal)(n % 3);
            c.Hq = 4, c.Hkv = si % 2 ? 2 : 1;
            c.mask = n % 4;
            c.poison = n % 2 == 0;
            run_vcase(&g, &c, rp);
        }
    /* Rows enough for one kv head to make several forward tasks: they share
     * the packed key tiles, while each task sees other keys of them. */
    for (int li = 0; li < 2; ++li) {
        vcase c = base(tu_mix(g_seed ^ (0x3170ull + (uint64_t)n++)));
        c.window = li ? (attn_window){true, 200, 0} : (attn_window){true, 17, 3};
        c.Nq = 700, c.Nk = 700 + 40 * li;
        c.causal = li ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
        c.Hq = 4, c.Hkv = 2;
        c.poison = li == 0;
        run_vcase(&g, &c, rp);
    }
    tu_group_end(&g);
}

static void group_alibi(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "alibi");
    char rp[128];
    systematic_replay(rp, sizeof rp, "alibi");
    int n = 0;
    for (int kind = AL_GEOMETRIC; kind <= AL_PER_BATCH; ++kind)
        for (int causal = 0; causal < 3; ++causal) {
            vcase c = base(tu_mix(g_seed ^ (0xA1B1ull + (uint64_t)n++)));
            c.alibi = kind;
            c.B = 2, c.Hq = kind == AL_GEOMETRIC ? 12 : 6, c.Hkv = kind == AL_GEOMETRIC ? 3 : 2;
            c.Nq = causal == 1 ? 40 : 25, c.Nk = 40;
            c.causal = (attn_causal)causal;
            c.mask = causal == 2 ? VM_FLOAT : VM_NONE;
            run_vcase(&g, &c, rp);
        }
    tu_group_end(&g);
}

static void group_softcap(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "softcap");
    char rp[128];
    systematic_replay(rp, sizeof rp, "softcap");
    const float caps[] = {0.5f, 5.0f, 30.0f, 50.0f};
    int n = 0;
    for (int ci = 0; ci < 4; ++ci)
        for (int mag = 0; mag < 2; ++mag) {
            vcase c = base(tu_mix(g_seed ^ (0x5CA9ull + (uint64_t)n++)));
            c.softcap = caps[ci];
            c.qmag = mag ? 4.0 : 1.0; /* large logits saturate tanh */
            c.scale = mag ? 1.0f : 0.0f;
            c.causal = (attn_causal)(n % 3);
            c.mask = n % 4;
            run_vcase(&g, &c, rp);
        }
    tu_group_end(&g);
}

/* grad_sinks of the library against float64 finite differences of the
 * oracle's loss with respect to the sinks. */
static void sinks_fd_check(tu_group *g, const vcase *c, const char *desc)
{
    vdata d;
    char why[256] = "";
    if (!vdata_make(&d, c, why, sizeof why)) {
        tu_group_fail(g, "setup: %s | %s", why, desc);
        vdata_free(&d);
        return;
    }
    sj_case jc;
    fill_jcase(&jc, c, &d);
    rv_problem p;
    memset(&p, 0, sizeof p);
    p.B = c->B, p.Hq = c->Hq, p.Hkv = c->Hkv, p.Nq = c->Nq, p.Nk = c->Nk, p.D = c->D, p.Dv = c->Dv;
    p.scale = sj_scale(&jc), p.causal = c->causal, p.window = c->window, p.softcap = c->softcap;
    p.keep = d.keep, p.dropout_p = c->dropout_p;
    double *bias = NULL, *alibi = NULL;
    if (d.have_mask) {
        bias = tu_xcalloc(c->B * c->Hq * c->Nq * c->Nk, 8);
        ref64_add_mask(bias, c->B, c->Hq, c->Nq, c->Nk, &d.mask.view);
        p.bias = bias;
    }
    if (d.alibi) {
        alibi = tu_xcalloc(c->B * c->Hq, 8);
        for (int64_t e = 0; e < c->B * c->Hq; ++e) alibi[e] = c->alibi == AL_PER_BATCH ? d.alibi[e] : d.alibi[e % c->Hq];
        p.alibi = alibi;
    }
    double *fd = tu_xcalloc(c->Hq, 8);
    fd_ctx ctx = {&p, d.q, d.k, d.v, d.dout, d.sinks};
    ref64_fd_gradient(fd_loss, &ctx, d.sinks, c->Hq, 1e-5, fd);
    double nat = 0;
    for (int64_t h = 0; h < c->Hq; ++h) nat = fmax(nat, fabs(fd[h]));
    sj_path paths[SJ_MAX_PATHS];
    const int np = sj_paths(paths);
    tu_tensor in[6], gr[4];
    const int64_t qs[4] = {c->B, c->Hq, c->Nq, c->D}, ks[4] = {c->B, c->Hkv, c->Nk, c->D},
                  vs[4] = {c->B, c->Hkv, c->Nk, c->Dv}, os[4] = {c->B, c->Hq, c->Nq, c->Dv}, hs[1] = {c->Hq};
    sj_tensor_from(&in[0], 4, qs, d.q);
    sj_tensor_from(&in[1], 4, ks, d.k);
    sj_tensor_from(&in[2], 4, vs, d.v);
    sj_tensor_from(&in[3], 4, os, d.dout);
    sj_tensor_from(&in[4], 1, hs, d.sinks);
    int64_t as[2] = {c->alibi == AL_PER_BATCH ? c->B : c->Hq, c->Hq};
    if (d.alibi) {
        if (c->alibi == AL_PER_BATCH) sj_tensor_from(&in[5], 2, as, d.alibi);
        else sj_tensor_from(&in[5], 1, as, d.alibi);
    }
    for (int pi = 0; pi < np; ++pi) {
        tu_tensor_alloc(&gr[0], ATTN_F32, 1, hs, NULL);
        attn_sdpa_opts o = attn_sdpa_opts_default();
        o.path = paths[pi].path, o.num_threads = 2, o.scale = c->scale, o.causal = c->causal;
        o.window = c->window, o.softcap = c->softcap, o.sinks = &in[4].view, o.grad_sinks = &gr[0].view;
        o.alibi_slopes = d.alibi ? &in[5].view : NULL;
        o.mask[0] = d.have_mask ? &d.mask.view : NULL;
        o.dropout_p = c->dropout_p, o.dropout_seed = jc.dropout_seed, o.dropout_offset = jc.dropout_offset;
        sj_select(&paths[pi]);
        attn_error err = {0};
        attn_status st = attn_sdpa_backward(&in[0].view, &in[1].view, &in[2].view, NULL, NULL, &in[3].view,
                                            NULL, NULL, NULL, &o, &err);
        unsetenv("ATTN_ARCH");
        if (st != ATTN_OK) {
            tu_group_fail(g, "%s grad_sinks only (dq=dk=dv=NULL): status %s: %s | %s", paths[pi].name,
                          attn_status_string(st), err.message, desc);
        } else {
            double worst = 0;
            int64_t wh = 0;
            for (int64_t h = 0; h < c->Hq; ++h) {
                const double e = fabs(tu_get(&gr[0].view, h) - fd[h]);
                if (!(e <= worst)) worst = e, wh = h;
            }
            tu_check(g, worst <= 1e-4 * (nat + 1e-3),
                     "%s grad_sinks vs float64 finite differences: head %" PRId64 " got %.9g fd %.9g "
                     "(err %.3g, scale %.3g) | %s",
                     paths[pi].name, wh, tu_get(&gr[0].view, wh), fd[wh], worst, nat, desc);
        }
        tu_tensor_free(&gr[0]);
    }
    for (int t = 0; t < 6; ++t)
        if (t < 5 || d.alibi) tu_tensor_free(&in[t]);
    free(fd), free(bias), free(alibi);
    vdata_free(&d);
}

static void group_sinks(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "sinks");
    char rp[128];
    systematic_replay(rp, sizeof rp, "sinks");
    const double means[] = {-3.0, 0.0, 3.0, 12.0};
    int n = 0;
    for (int mi = 0; mi < 4; ++mi)
        for (int v = 0; v < 2; ++v) {
            vcase c = base(tu_mix(g_seed ^ (0x519Cull + (uint64_t)n++)));
            c.sinks = true, c.sink_mean = means[mi];
            c.Hq = 4, c.Hkv = v ? 2 : 1, c.B = 2;
            c.causal = (attn_causal)(n % 3);
            c.mask = v ? VM_KEYPAD : VM_BOOL;
            if (mi == 2) c.window = (attn_window){true, 4, 0};
            run_vcase(&g, &c, rp);
            char desc[1024];
            describe(&c, rp, desc, sizeof desc);
            sinks_fd_check(&g, &c, desc);
        }
    tu_group_end(&g);
}

/* Random combinations of everything. */
static void group_combined(tu_suite *s)
{
    const tu_options *opt = g_opt;
    tu_group g;
    tu_group_begin(&g, s, "combined");
    /* The combination the issue names, explicitly first. */
    char rp[128];
    systematic_replay(rp, sizeof rp, "combined");
    for (int v = 0; v < 4; ++v) {
        vcase c = base(tu_mix(g_seed ^ (0xC0Bull + (uint64_t)v)));
        c.B = 2, c.Hq = 8, c.Hkv = 2, c.Nq = v % 2 ? 48 : 70, c.Nk = 70, c.D = 32, c.Dv = 24;
        c.window = (attn_window){true, 12, v == 3 ? -1 : 2};
        c.softcap = 8.0f, c.alibi = v % 2 ? AL_PER_BATCH : AL_GEOMETRIC, c.sinks = true;
        c.causal = v < 2 ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_TOP_LEFT;
        c.mask = 1 + v % 3;
        c.qmag = 2.0;
        c.dropout_p = v >= 2 ? 0.25f : 0.0f;
        run_vcase(&g, &c, rp);
    }
    const int64_t cases = opt->cases >= 0 ? opt->cases : g_quick ? 70 : 400;
    tu_rng r;
    tu_rng_seed(&r, g_seed ^ 0xC0B1EDull);
    for (int64_t n = 0; n < cases; ++n) {
        const uint64_t seed = tu_rng_u64(&r);
        vcase c = random_vcase(seed);
        snprintf(rp, sizeof rp, "ATTN_TEST_CASE=0x%016" PRIx64 " ./test_variants", seed);
        run_vcase(&g, &c, rp);
    }
    tu_group_end(&g);
}

/* Decoding shapes with the variants (Mistral: window + GQA; gpt-oss: sinks +
 * window; Gemma 2: softcap), few rows against long key sequences. */
static void group_decode(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "decode");
    char rp[128];
    systematic_replay(rp, sizeof rp, "decode");
    const int64_t nks[] = {300, 2048, 2049, 5000};
    int n = 0;
    for (int ki = 0; ki < 4; ++ki)
        for (int style = 0; style < 4; ++style) {
            if (g_quick && (ki + style) % 2) continue;
            vcase c = base(tu_mix(g_seed ^ (0xDEC1ull + (uint64_t)n++)));
            c.Nk = nks[ki], c.Nq = 1 + style % 3, c.D = 64, c.Dv = 64;
            c.Hkv = g_light ? 1 : 2, c.Hq = 4 * c.Hkv;
            c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
            switch (style) {
            case 0: c.window = (attn_window){true, 1024, 0}; break;                 /* Mistral */
            case 1: c.window = (attn_window){true, 128, 0}, c.sinks = true; break;  /* gpt-oss */
            case 2: c.softcap = 50.0f, c.qmag = 3.0; break;                          /* Gemma 2 */
            default: /* dropout: the keep mask is read back with V = identity (Nk x Nk) */
                c.alibi = AL_GEOMETRIC, c.mask = VM_KEYPAD, c.dropout_p = 0.1f;
                if (c.Nk > 2100) c.Nk = 2100;
                break;
            }
            c.poison = style % 2 == 0;
            run_vcase(&g, &c, rp);
        }
    tu_group_end(&g);
}

/* Keep mask: rate, purity, determinism across threads / ISAs / calls. */
static void group_dropout_mask(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "dropout-mask");
    sj_path paths[SJ_MAX_PATHS];
    const int np = sj_paths(paths);
    const int64_t B = 2, H = 3, Nq = 70, Nk = 100, n = B * H * Nq * Nk;
    const float ps[] = {0.1f, 0.5f, 0.9f};
    uint8_t *base_keep = tu_xcalloc(n, 1), *other = tu_xcalloc(n, 1);
    char why[256];
    for (int pi_ = 0; pi_ < 3; ++pi_) {
        const float p = ps[pi_];
        const uint64_t seed = g_seed + 17 * (uint64_t)pi_, offset = 5;
        const sj_path *bp = &paths[np - 1];
        if (!extract_keep(bp, B, H, Nq, Nk, p, seed, offset, 1, base_keep, why, sizeof why)) {
            tu_group_fail(&g, "p=%g: cannot read the keep mask on %s: %s | replay: ./test_variants --group dropout-mask",
                          (double)p, bp->name, why);
            continue;
        }
        int64_t kept = 0;
        for (int64_t e = 0; e < n; ++e) kept += base_keep[e];
        const double mean = (1.0 - p) * (double)n, sd = sqrt((double)n * p * (1.0 - p));
        tu_check(&g, fabs((double)kept - mean) <= 5.0 * sd,
                 "p=%g: kept %" PRId64 " of %" PRId64 ", expected %.0f ± 5·%.1f (binomial) | replay: "
                 "./test_variants --seed 0x%" PRIx64 " --group dropout-mask", (double)p, kept, n, mean, sd, g_seed);
        /* per-row and per-column rates do not drift (a bad counter layout
         * repeats the same bits along i or j) */
        int64_t worst_row = 0;
        for (int64_t r = 0; r < B * H * Nq; ++r) {
            int64_t kr = 0;
            for (int64_t j = 0; j < Nk; ++j) kr += base_keep[r * Nk + j];
            const double z = fabs((double)kr - (1.0 - p) * Nk) / sqrt(Nk * p * (1.0 - p));
            if (z > 6.0) worst_row++;
        }
        tu_check(&g, worst_row == 0, "p=%g: %" PRId64 " rows with keep counts beyond 6 sigma", (double)p, worst_row);
        /* heads, batches and rows draw different bits */
        int64_t same_h = 0, same_b = 0, same_i = 0;
        for (int64_t i = 0; i < Nq; ++i)
            for (int64_t j = 0; j < Nk; ++j) {
                same_h += base_keep[(0 * H * Nq + i) * Nk + j] == base_keep[((0 * H + 1) * Nq + i) * Nk + j];
                same_b += base_keep[(i)*Nk + j] == base_keep[((1 * H) * Nq + i) * Nk + j];
                if (i + 1 < Nq) same_i += base_keep[i * Nk + j] == base_keep[(i + 1) * Nk + j];
            }
        const double agree = (double)(p * p + (1 - p) * (1 - p)), m = (double)(Nq * Nk);
        const double bound = 6.0 * sqrt(m * agree * (1 - agree)) + 1;
        tu_check(&g, fabs(same_h - agree * m) <= bound && fabs(same_b - agree * m) <= bound &&
                     fabs(same_i - agree * (m - Nk)) <= bound,
                 "p=%g: masks of different heads / batches / rows agree on %" PRId64 " / %" PRId64 " / %" PRId64
                 " of %.0f entries, independent draws agree on ~%.0f", (double)p, same_h, same_b, same_i, m, agree * m);
        /* every path, every thread count, twice: identical */
        for (int k = 0; k < np; ++k)
            for (int t = 1; t <= 3; ++t)
                for (int rep = 0; rep < (t == 2 ? 2 : 1); ++rep) {
                    if (paths[k].path == ATTN_PATH_REFERENCE && t == 2) continue; /* slow with Dv = Nk */
                    if (!extract_keep(&paths[k], B, H, Nq, Nk, p, seed, offset, t, other, why, sizeof why)) {
                        tu_group_fail(&g, "p=%g %s threads=%d: %s", (double)p, paths[k].name, t, why);
                        continue;
                    }
                    tu_check(&g, !memcmp(other, base_keep, (size_t)n),
                             "p=%g: keep mask on %s with %d threads (call %d) differs from %s with 1 thread",
                             (double)p, paths[k].name, t, rep + 1, bp->name);
                }
        /* a pure function of (seed, offset, b, h, i, j): other Nq/Nk give
         * the same bits on the overlap */
        {
            const int64_t Nq2 = 33, Nk2 = 200;
            uint8_t *k2 = tu_xcalloc(B * H * Nq2 * Nk2, 1);
            if (extract_keep(&paths[np - 1], B, H, Nq2, Nk2, p, seed, offset, 2, k2, why, sizeof why)) {
                int64_t diff = 0;
                for (int64_t bh = 0; bh < B * H; ++bh)
                    for (int64_t i = 0; i < Nq2; ++i)
                        for (int64_t j = 0; j < Nk; ++j)
                            diff += k2[(bh * Nq2 + i) * Nk2 + j] != base_keep[(bh * Nq + i) * Nk + j];
                tu_check(&g, diff == 0,
                         "p=%g: keep(b,h,i,j) depends on the shape: %" PRId64 " entries differ between "
                         "(Nq,Nk)=(%" PRId64 ",%" PRId64 ") and (%" PRId64 ",%" PRId64 ") (attn.h: a pure "
                         "function of seed, offset, b, h, i, j)",
                         (double)p, diff, Nq, Nk, Nq2, Nk2);
            } else {
                tu_group_fail(&g, "p=%g second shape: %s", (double)p, why);
            }
            free(k2);
        }
        /* another seed, another offset: other bits */
        for (int which = 0; which < 2; ++which) {
            if (!extract_keep(bp, B, H, Nq, Nk, p, which ? seed : seed + 1, which ? offset + 1 : offset, 2,
                              other, why, sizeof why)) {
                tu_group_fail(&g, "p=%g: %s", (double)p, why);
                continue;
            }
            int64_t same = 0;
            for (int64_t e = 0; e < n; ++e) same += other[e] == base_keep[e];
            const double agree_all = agree * (double)n;
            tu_check(&g, fabs(same - agree_all) <= 6.0 * sqrt(n * agree * (1 - agree)) + 1,
                     "p=%g: changing the %s leaves %" PRId64 " of %" PRId64 " keep bits equal (independent: ~%.0f)",
                     (double)p, which ? "offset" : "seed", same, n, agree_all);
        }
    }
    /* Independent of the inputs: a case's own data, read back on each path
     * through the judge (group combined) uses the mask extracted here; and
     * the forward with random q/k still drops exactly the extracted entries. */
    free(base_keep), free(other);
    tu_group_end(&g);
}

/* E[out] over many seeds ≈ the no-dropout out. */
static void group_dropout_expectation(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "dropout-expectation");
    const int64_t B = 1, H = 2, Nq = 12, Nk = 24, D = 8, Dv = 6;
    const int S = g_quick ? 300 : 2000;
    const float p = 0.3f;
    tu_rng r;
    tu_rng_seed(&r, g_seed ^ 0xE0ull);
    double q[B * H * Nq * D], k[B * H * Nk * D], v[B * H * Nk * Dv];
    for (size_t e = 0; e < sizeof q / 8; ++e) q[e] = f32(tu_rng_normal(&r));
    for (size_t e = 0; e < sizeof k / 8; ++e) k[e] = f32(tu_rng_normal(&r));
    for (size_t e = 0; e < sizeof v / 8; ++e) v[e] = f32(tu_rng_normal(&r));
    rv_problem rp;
    memset(&rp, 0, sizeof rp);
    rp.B = B, rp.Hq = H, rp.Hkv = H, rp.Nq = Nq, rp.Nk = Nk, rp.D = D, rp.Dv = Dv;
    rp.scale = (double)(1.0f / sqrtf((float)D));
    double ref[B * H * Nq * Dv], w[B * H * Nq * Nk];
    rv_forward64(&rp, q, k, v, ref, NULL, w, NULL);
    /* Var(out_ie) = Σ_j P_ij² v_je² · p/(1-p) */
    double sd[B * H * Nq * Dv];
    for (int64_t bh = 0; bh < B * H; ++bh)
        for (int64_t i = 0; i < Nq; ++i)
            for (int64_t e = 0; e < Dv; ++e) {
                double var = 0;
                for (int64_t j = 0; j < Nk; ++j) {
                    const double P = w[(bh * Nq + i) * Nk + j], vv = v[(bh * Nk + j) * Dv + e];
                    var += P * P * vv * vv;
                }
                sd[(bh * Nq + i) * Dv + e] = sqrt(var * p / (1 - p) / S);
            }
    sj_path paths[SJ_MAX_PATHS];
    const int np = sj_paths(paths);
    for (int pi = 0; pi < np; ++pi) {
        float qf[B * H * Nq * D], kf[B * H * Nk * D], vf[B * H * Nk * Dv], o[B * H * Nq * Dv];
        double sum[B * H * Nq * Dv];
        memset(sum, 0, sizeof sum);
        for (size_t e = 0; e < sizeof q / 8; ++e) qf[e] = (float)q[e];
        for (size_t e = 0; e < sizeof k / 8; ++e) kf[e] = (float)k[e];
        for (size_t e = 0; e < sizeof v / 8; ++e) vf[e] = (float)v[e];
        attn_tensor Q = attn_tensor_4d(qf, B, H, Nq, D), K = attn_tensor_4d(kf, B, H, Nk, D),
                    V = attn_tensor_4d(vf, B, H, Nk, Dv), O = attn_tensor_4d(o, B, H, Nq, Dv);
        attn_sdpa_opts opts = attn_sdpa_opts_default();
        opts.path = paths[pi].path, opts.num_threads = 1, opts.dropout_p = p;
        sj_select(&paths[pi]);
        attn_status st = ATTN_OK;
        attn_error err = {0};
        for (int sd_i = 0; sd_i < S && st == ATTN_OK; ++sd_i) {
            opts.dropout_seed = g_seed * 1000003u + (uint64_t)sd_i;
            st = attn_sdpa(&Q, &K, &V, &O, NULL, NULL, &opts, &err);
            for (size_t e = 0; e < sizeof sum / 8; ++e) sum[e] += o[e];
        }
        unsetenv("ATTN_ARCH");
        if (st != ATTN_OK) {
            tu_group_fail(&g, "%s: status %s: %s", paths[pi].name, attn_status_string(st), err.message);
            continue;
        }
        double worst = 0, chi = 0;
        const int64_t n = B * H * Nq * Dv;
        for (int64_t e = 0; e < n; ++e) {
            const double z = (sum[e] / S - ref[e]) / sd[e];
            worst = fmax(worst, fabs(z));
            chi += z * z;
        }
        chi /= (double)n;
        tu_check(&g, worst <= 5.5 && chi >= 0.3 && chi <= 2.0,
                 "%s: mean of out over %d dropout seeds vs the no-dropout out: worst |z| %.2f (<= 5.5), "
                 "mean z^2 %.3f (in [0.3, 2]) | replay: ./test_variants --seed 0x%" PRIx64 " --group dropout-expectation",
                 paths[pi].name, S, worst, chi, g_seed);
    }
    tu_group_end(&g);
}

/* Forward/backward consistency by finite differences at a fixed seed, on the
 * library alone (directional derivatives of Σ out·dout). */
static double lib_loss(const sj_path *path, const vcase *c, const vdata *d, const double *q,
                       const double *k, const double *v, const double *sinks, attn_status *st)
{
    tu_tensor t[6];
    const int64_t qs[4] = {c->B, c->Hq, c->Nq, c->D}, ks[4] = {c->B, c->Hkv, c->Nk, c->D},
                  vs[4] = {c->B, c->Hkv, c->Nk, c->Dv}, os[4] = {c->B, c->Hq, c->Nq, c->Dv}, hs[1] = {c->Hq};
    sj_tensor_from(&t[0], 4, qs, q);
    sj_tensor_from(&t[1], 4, ks, k);
    sj_tensor_from(&t[2], 4, vs, v);
    tu_tensor_alloc(&t[3], ATTN_F32, 4, os, NULL);
    if (sinks) sj_tensor_from(&t[4], 1, hs, sinks);
    if (d->alibi) sj_tensor_from(&t[5], 1, hs, d->alibi);
    attn_sdpa_opts o = attn_sdpa_opts_default();
    o.path = path->path, o.num_threads = 2, o.scale = c->scale, o.causal = c->causal;
    o.window = c->window, o.softcap = c->softcap, o.sinks = sinks ? &t[4].view : NULL;
    o.alibi_slopes = d->alibi ? &t[5].view : NULL;
    o.mask[0] = d->have_mask ? &d->mask.view : NULL;
    o.dropout_p = c->dropout_p, o.dropout_seed = c->seed, o.dropout_offset = c->seed >> 7;
    sj_select(path);
    *st = attn_sdpa(&t[0].view, &t[1].view, &t[2].view, &t[3].view, NULL, NULL, &o, NULL);
    unsetenv("ATTN_ARCH");
    double loss = 0;
    const int64_t n = c->B * c->Hq * c->Nq * c->Dv;
    for (int64_t e = 0; e < n; ++e) loss += tu_get(&t[3].view, e) * d->dout[e];
    for (int i = 0; i < 4; ++i) tu_tensor_free(&t[i]);
    if (sinks) tu_tensor_free(&t[4]);
    if (d->alibi) tu_tensor_free(&t[5]);
    return loss;
}

static void group_dropout_fd(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "dropout-fd");
    sj_path paths[SJ_MAX_PATHS];
    const int np = sj_paths(paths);
    for (int v = 0; v < 2; ++v) {
        vcase c = base(tu_mix(g_seed ^ (0xDF0ull + (uint64_t)v)));
        c.Hq = 4, c.Hkv = 2, c.Nq = 20, c.Nk = 33, c.D = 8, c.Dv = 8;
        c.dropout_p = 0.3f;
        c.causal = v ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
        if (v) c.softcap = 3.0f, c.sinks = true, c.alibi = AL_RANDOM, c.window = (attn_window){true, 6, 1};
        char desc[1024];
        describe(&c, "./test_variants --group dropout-fd", desc, sizeof desc);
        vdata d;
        char why[256] = "";
        if (!vdata_make(&d, &c, why, sizeof why)) {
            tu_group_fail(&g, "%s | %s", why, desc);
            vdata_free(&d);
            continue;
        }
        const int64_t nq = c.B * c.Hq * c.Nq * c.D, nk = c.B * c.Hkv * c.Nk * c.D, nv = c.B * c.Hkv * c.Nk * c.Dv;
        for (int pi = 0; pi < np; ++pi) {
            /* analytic gradients from the library */
            tu_tensor t[9];
            const int64_t qs[4] = {c.B, c.Hq, c.Nq, c.D}, ks[4] = {c.B, c.Hkv, c.Nk, c.D},
                          vs[4] = {c.B, c.Hkv, c.Nk, c.Dv}, os[4] = {c.B, c.Hq, c.Nq, c.Dv}, hs[1] = {c.Hq};
            sj_tensor_from(&t[0], 4, qs, d.q);
            sj_tensor_from(&t[1], 4, ks, d.k);
            sj_tensor_from(&t[2], 4, vs, d.v);
            sj_tensor_from(&t[3], 4, os, d.dout);
            tu_tensor_alloc(&t[4], ATTN_F32, 4, qs, NULL);
            tu_tensor_alloc(&t[5], ATTN_F32, 4, ks, NULL);
            tu_tensor_alloc(&t[6], ATTN_F32, 4, vs, NULL);
            tu_tensor_alloc(&t[7], ATTN_F32, 1, hs, NULL);
            if (d.sinks) sj_tensor_from(&t[8], 1, hs, d.sinks);
            tu_tensor al;
            if (d.alibi) sj_tensor_from(&al, 1, hs, d.alibi);
            attn_sdpa_opts o = attn_sdpa_opts_default();
            o.path = paths[pi].path, o.num_threads = 2, o.scale = c.scale, o.causal = c.causal;
            o.window = c.window, o.softcap = c.softcap;
            o.sinks = d.sinks ? &t[8].view : NULL, o.grad_sinks = d.sinks ? &t[7].view : NULL;
            o.alibi_slopes = d.alibi ? &al.view : NULL;
            o.dropout_p = c.dropout_p, o.dropout_seed = c.seed, o.dropout_offset = c.seed >> 7;
            sj_select(&paths[pi]);
            attn_error err = {0};
            attn_status st = attn_sdpa_backward(&t[0].view, &t[1].view, &t[2].view, NULL, NULL, &t[3].view,
                                                &t[4].view, &t[5].view, &t[6].view, &o, &err);
            unsetenv("ATTN_ARCH");
            if (st != ATTN_OK) {
                tu_group_fail(&g, "%s backward: status %s: %s | %s", paths[pi].name, attn_status_string(st),
                              err.message, desc);
            } else {
                tu_rng r;
                tu_rng_seed(&r, c.seed ^ 0xF00D);
                const int64_t cnt[4] = {nq, nk, nv, d.sinks ? c.Hq : 0};
                double *base_in[4] = {d.q, d.k, d.v, d.sinks};
                static const char *const nm[4] = {"dq", "dk", "dv", "grad_sinks"};
                for (int which = 0; which < 4; ++which) {
                    if (!cnt[which]) continue;
                    double *u = tu_xcalloc(cnt[which], 8), *xp = tu_xcalloc(cnt[which], 8), *xm = tu_xcalloc(cnt[which], 8);
                    double dir = 0, mag = 0;
                    const double h = 1e-2;
                    for (int64_t e = 0; e < cnt[which]; ++e) {
                        u[e] = tu_rng_range(&r, -1, 1);
                        const double gv = tu_get(&t[4 + which].view, e);
                        dir += gv * u[e];
                        mag += fabs(gv * u[e]);
                        xp[e] = f32(base_in[which][e] + h * u[e]);
                        xm[e] = f32(base_in[which][e] - h * u[e]);
                    }
                    /* recompute the exact step taken after rounding to float */
                    double step = 0, un = 0;
                    for (int64_t e = 0; e < cnt[which]; ++e) step += (xp[e] - xm[e]) * u[e], un += u[e] * u[e];
                    const double hh = step / (2 * un);
                    const double *ins[4] = {d.q, d.k, d.v, d.sinks};
                    attn_status s1, s2;
                    const double *arg_p[4], *arg_m[4];
                    for (int a = 0; a < 4; ++a) arg_p[a] = arg_m[a] = ins[a];
                    arg_p[which] = xp, arg_m[which] = xm;
                    const double lp = lib_loss(&paths[pi], &c, &d, arg_p[0], arg_p[1], arg_p[2], arg_p[3], &s1);
                    const double lm = lib_loss(&paths[pi], &c, &d, arg_m[0], arg_m[1], arg_m[2], arg_m[3], &s2);
                    const double fdv = (lp - lm) / (2 * hh);
                    tu_check(&g, s1 == ATTN_OK && s2 == ATTN_OK && fabs(fdv - dir) <= 3e-3 * mag + 1e-4,
                             "%s: directional derivative of Σ out·dout along random u in %s: finite "
                             "differences %.7g vs <%s, u> %.7g (scale %.3g) at fixed dropout seed | %s",
                             paths[pi].name, nm[which], fdv, nm[which], dir, mag, desc);
                    free(u), free(xp), free(xm);
                }
            }
            for (int i = 0; i < 8; ++i) tu_tensor_free(&t[i]);
            if (d.sinks) tu_tensor_free(&t[8]);
            if (d.alibi) tu_tensor_free(&al);
        }
        vdata_free(&d);
    }
    tu_group_end(&g);
}

/* Results of one full call sequence, as bytes. */
typedef struct {
    float *buf[8];
    int64_t n[8];
} snap;
static const char *const snap_name[8] = {"out", "lse", "weights", "softmax_stats", "dq", "dk", "dv", "grad_sinks"};

static void snap_free(snap *s)
{
    for (int i = 0; i < 8; ++i) free(s->buf[i]);
    memset(s, 0, sizeof *s);
}

static attn_status run_snap(const sj_path *path, const vcase *c, const vdata *d, int threads, float dropout_p,
                            bool dropout_field_zero, snap *out, attn_error *err)
{
    memset(out, 0, sizeof *out);
    tu_tensor t[14];
    memset(t, 0, sizeof t);
    const int64_t qs[4] = {c->B, c->Hq, c->Nq, c->D}, ks[4] = {c->B, c->Hkv, c->Nk, c->D},
                  vs[4] = {c->B, c->Hkv, c->Nk, c->Dv}, os[4] = {c->B, c->Hq, c->Nq, c->Dv}, hs[1] = {c->Hq},
                  ls[3] = {c->B, c->Hq, c->Nq}, ws[4] = {c->B, c->Hq, c->Nq, c->Nk}, ss[4] = {c->B, c->Hq, c->Nq, 2};
    sj_tensor_from(&t[0], 4, qs, d->q);
    sj_tensor_from(&t[1], 4, ks, d->k);
    sj_tensor_from(&t[2], 4, vs, d->v);
    sj_tensor_from(&t[3], 4, os, d->dout);
    tu_tensor_alloc(&t[4], ATTN_F32, 4, os, NULL);
    tu_tensor_alloc(&t[5], ATTN_F32, 3, ls, NULL);
    tu_tensor_alloc(&t[6], ATTN_F32, 4, ws, NULL);
    tu_tensor_alloc(&t[7], ATTN_F32, 4, ss, NULL);
    tu_tensor_alloc(&t[8], ATTN_F32, 4, qs, NULL);
    tu_tensor_alloc(&t[9], ATTN_F32, 4, ks, NULL);
    tu_tensor_alloc(&t[10], ATTN_F32, 4, vs, NULL);
    tu_tensor_alloc(&t[11], ATTN_F32, 1, hs, NULL);
    if (d->sinks) sj_tensor_from(&t[12], 1, hs, d->sinks);
    int64_t as[2] = {c->alibi == AL_PER_BATCH ? c->B : c->Hq, c->Hq};
    if (d->alibi) {
        if (c->alibi == AL_PER_BATCH) sj_tensor_from(&t[13], 2, as, d->alibi);
        else sj_tensor_from(&t[13], 1, as, d->alibi);
    }
    attn_sdpa_opts o = attn_sdpa_opts_default();
    o.path = path->path, o.num_threads = threads, o.scale = c->scale, o.causal = c->causal;
    o.window = c->window, o.softcap = c->softcap, o.sinks = d->sinks ? &t[12].view : NULL;
    o.alibi_slopes = d->alibi ? &t[13].view : NULL;
    o.mask[0] = d->have_mask ? &d->mask.view : NULL;
    o.dropout_p = dropout_field_zero ? 0.0f : dropout_p;
    o.dropout_seed = c->seed, o.dropout_offset = c->seed >> 7;
    o.softmax_stats = &t[7].view;
    sj_select(path);
    attn_status st = attn_sdpa(&t[0].view, &t[1].view, &t[2].view, &t[4].view, &t[5].view, &t[6].view, &o, err);
    if (st == ATTN_OK) {
        o.grad_sinks = d->sinks ? &t[11].view : NULL;
        st = attn_sdpa_backward(&t[0].view, &t[1].view, &t[2].view, &t[4].view, &t[5].view, &t[3].view,
                                &t[8].view, &t[9].view, &t[10].view, &o, err);
    }
    unsetenv("ATTN_ARCH");
    if (st == ATTN_OK)
        for (int i = 0; i < 8; ++i) {
            if (i == 7 && !d->sinks) continue;
            const attn_tensor *vw = &t[4 + i].view;
            out->n[i] = tu_numel(vw);
            out->buf[i] = tu_xcalloc(out->n[i], 4);
            tu_gather_bytes(vw, out->buf[i]);
        }
    for (int i = 0; i < 14; ++i)
        if (t[i].base) tu_tensor_free(&t[i]);
    return st;
}

static int snap_diff(const snap *a, const snap *b)
{
    for (int i = 0; i < 8; ++i)
        if (a->n[i] != b->n[i] || (a->n[i] && memcmp(a->buf[i], b->buf[i], (size_t)a->n[i] * 4))) return i;
    return -1;
}

/* Under emulation the thread-invariance check runs only the tables this
 * architecture adds: the portable paths' schedules, and so their thread
 * invariance, are the same everywhere and the native runs check them. */
static bool portable_left_out(const sj_path *p, int np)
{
    return tu_emulated() && np > 2 && (!p->arch || !strcmp(p->arch, "generic"));
}

/* Every variant: bitwise identical for 1, 2, 3 threads and a rerun. */
static void group_threads(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "threads-bitwise");
    sj_path paths[SJ_MAX_PATHS];
    const int np = sj_paths(paths);
    if (tu_emulated() && np > 2) tu_group_note(&g, "emulated: reference and generic left out");
    for (int variant = 0; variant < 8; ++variant) {
        vcase c = base(tu_mix(g_seed ^ (0x7A3ull + (uint64_t)variant)));
        c.B = 1, c.Hq = 4, c.Hkv = 2, c.Nq = 150, c.Nk = 230, c.D = 40, c.Dv = 24;
        c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        if (variant >= 6) /* decoding: split keys, stacked GQA heads */
            c.Nq = variant == 6 ? 1 : 3, c.Nk = variant == 6 ? 5000 : 2100, c.Hq = 8, c.Hkv = 1, c.D = c.Dv = 64;
        switch (variant) {
        case 0: c.window = (attn_window){true, 50, 3}; break;
        case 1: c.alibi = AL_GEOMETRIC; break;
        case 2: c.softcap = 5.0f, c.qmag = 3.0; break;
        case 3: c.sinks = true; break;
        case 4: c.dropout_p = 0.2f; break;
        case 6: c.window = (attn_window){true, 3000, 0}, c.sinks = true; break;
        case 7: c.softcap = 20.0f, c.alibi = AL_GEOMETRIC, c.dropout_p = 0.1f; break;
        default:
            c.window = (attn_window){true, 64, -1}, c.alibi = AL_RANDOM, c.softcap = 9.0f, c.sinks = true;
            c.dropout_p = 0.1f, c.mask = VM_FLOAT;
            break;
        }
        static const char *const vn[8] = {"window", "alibi", "softcap", "sinks", "dropout", "all",
                                          "decode window+sinks", "decode softcap+alibi+dropout"};
        vdata d;
        char why[256];
        vdata_make(&d, &c, why, sizeof why);
        for (int pi = 0; pi < np; ++pi) {
            if (portable_left_out(&paths[pi], np)) continue;
            snap a, b;
            attn_error err = {0};
            attn_status st = run_snap(&paths[pi], &c, &d, 1, c.dropout_p, false, &a, &err);
            if (st != ATTN_OK) {
                tu_group_fail(&g, "%s %s: status %s: %s | replay: ./test_variants --seed 0x%" PRIx64 " --group threads",
                              paths[pi].name, vn[variant], attn_status_string(st), err.message, g_seed);
                continue;
            }
            const int threads[] = {2, 3, 2};
            for (int t = 0; t < 3; ++t) {
                st = run_snap(&paths[pi], &c, &d, threads[t], c.dropout_p, false, &b, &err);
                const int diff = st == ATTN_OK ? snap_diff(&a, &b) : 99;
                tu_check(&g, diff < 0,
                         "%s %s: %s with %d threads differs bitwise from 1 thread (status %s) | replay: "
                         "./test_variants --seed 0x%" PRIx64 " --group threads",
                         paths[pi].name, vn[variant], diff >= 0 && diff < 8 ? snap_name[diff] : "call", threads[t],
                         attn_status_string(st), g_seed);
                snap_free(&b);
            }
            snap_free(&a);
        }
        vdata_free(&d);
    }
    tu_group_end(&g);
}

/* p = 0 with a seed: bitwise identical to no dropout. */
static void group_dropout_p0(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "dropout-p0");
    sj_path paths[SJ_MAX_PATHS];
    const int np = sj_paths(paths);
    vcase c = base(tu_mix(g_seed ^ 0x90ull));
    c.Hq = 4, c.Hkv = 2, c.Nq = 70, c.Nk = 90, c.sinks = true, c.softcap = 4.0f, c.causal = ATTN_CAUSAL_TOP_LEFT;
    vdata d;
    char why[256];
    vdata_make(&d, &c, why, sizeof why);
    for (int pi = 0; pi < np; ++pi) {
        snap a, b;
        attn_error err = {0};
        /* dropout_p = 0 with a nonzero seed/offset vs the option untouched */
        c.seed = 0x1234567;
        attn_status s1 = run_snap(&paths[pi], &c, &d, 2, 0.0f, false, &a, &err);
        c.seed = 0;
        attn_status s2 = run_snap(&paths[pi], &c, &d, 2, 0.0f, true, &b, &err);
        const int diff = s1 == ATTN_OK && s2 == ATTN_OK ? snap_diff(&a, &b) : 99;
        tu_check(&g, diff < 0, "%s: p = 0 with a seed differs from no dropout in %s (status %s/%s)",
                 paths[pi].name, diff >= 0 && diff < 8 ? snap_name[diff] : "call", attn_status_string(s1),
                 attn_status_string(s2));
        snap_free(&a), snap_free(&b);
    }
    vdata_free(&d);
    tu_group_end(&g);
}

/* Rows that see no key: out 0, lse -inf (or lse = sink), weights 0, stats
 * (-inf, 0) or (sink, 0), dq 0; the rest still right (judge). */
static void group_hidden_rows(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "hidden-rows");
    sj_path paths[SJ_MAX_PATHS];
    const int np = sj_paths(paths);
    for (int with_sinks = 0; with_sinks < 2; ++with_sinks)
        for (int how = 0; how < 3; ++how) {
            vcase c = base(tu_mix(g_seed ^ (0x41DDull + (uint64_t)(with_sinks * 3 + how))));
            c.Hq = 2, c.Hkv = 1, c.Nq = 12, c.Nk = 8, c.D = 8, c.Dv = 8;
            c.sinks = with_sinks;
            /* how 0: window (0,0) + bottom-right (rows i < Nq - Nk see nothing);
             * how 1: window (2,-1) with rows whose band lies left of key 0;
             * how 2: a bool mask hiding every third row, plus softcap + ALiBi */
            if (how == 0) c.window = (attn_window){true, 0, 0}, c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
            if (how == 1) c.window = (attn_window){true, -1, -1}, c.window.right = 0, c.window.left = 1, c.Nk = 6;
            if (how == 2) c.softcap = 3.0f, c.alibi = AL_GEOMETRIC;
            vdata d;
            char why[256];
            vdata_make(&d, &c, why, sizeof why);
            if (how == 2) {
                const int64_t shape[2] = {c.Nq, 1};
                tu_tensor_alloc(&d.mask, ATTN_BOOL, 2, shape, NULL);
                d.have_mask = true;
                for (int64_t i = 0; i < c.Nq; ++i) tu_set(&d.mask.view, i, i % 3 != 1);
            }
            sj_case jc;
            fill_jcase(&jc, &c, &d);
            rv_problem rp;
            memset(&rp, 0, sizeof rp);
            rp.B = c.B, rp.Hq = c.Hq, rp.Hkv = c.Hkv, rp.Nq = c.Nq, rp.Nk = c.Nk;
            rp.causal = c.causal, rp.window = c.window;
            double *bias = NULL;
            if (d.have_mask) {
                bias = tu_xcalloc(c.B * c.Hq * c.Nq * c.Nk, 8);
                ref64_add_mask(bias, c.B, c.Hq, c.Nq, c.Nk, &d.mask.view);
                rp.bias = bias;
            }
            char desc[1024];
            describe(&c, "./test_variants --group hidden-rows", desc, sizeof desc);
            const int64_t empty = rv_empty_rows(&rp);
            tu_check(&g, empty > 0, "test setup: no hidden row | %s", desc);
            for (int pi = 0; pi < np; ++pi) {
                snap a;
                attn_error err = {0};
                attn_status st = run_snap(&paths[pi], &c, &d, 2, 0.0f, true, &a, &err);
                if (st != ATTN_OK) {
                    tu_group_fail(&g, "%s: status %s: %s | %s", paths[pi].name, attn_status_string(st), err.message, desc);
                    continue;
                }
                bool ok = true;
                char what[400] = "";
                for (int64_t h = 0; h < c.Hq; ++h)
                    for (int64_t i = 0; i < c.Nq; ++i) {
                        bool any = false;
                        for (int64_t j = 0; j < c.Nk; ++j) any |= rv_visible(&rp, 0, h, i, j);
                        if (any) continue;
                        const int64_t row = h * c.Nq + i;
                        const float want_lse = with_sinks ? (float)d.sinks[h] : -INFINITY;
                        bool r_ok = a.buf[1][row] == want_lse && a.buf[3][2 * row] == want_lse &&
                                    a.buf[3][2 * row + 1] == 0.0f;
                        for (int64_t e = 0; e < c.Dv; ++e) r_ok &= a.buf[0][row * c.Dv + e] == 0.0f;
                        for (int64_t j = 0; j < c.Nk; ++j) r_ok &= a.buf[2][row * c.Nk + j] == 0.0f;
                        for (int64_t e = 0; e < c.D; ++e) r_ok &= a.buf[4][row * c.D + e] == 0.0f;
                        if (!r_ok && ok)
                            snprintf(what, sizeof what, "head %" PRId64 " row %" PRId64 ": lse %.9g stats (%.9g, %.9g) out[0] %.9g dq[0] %.9g (want lse %.9g)",
                                     h, i, (double)a.buf[1][row], (double)a.buf[3][2 * row], (double)a.buf[3][2 * row + 1],
                                     (double)a.buf[0][row * c.Dv], (double)a.buf[4][row * c.D], (double)want_lse);
                        ok &= r_ok;
                    }
                tu_check(&g, ok, "%s: hidden row policy (out 0, lse %s, weights 0, stats (lse, 0), dq 0): %s | %s",
                         paths[pi].name, with_sinks ? "= sink" : "-inf", what, desc);
                snap_free(&a);
            }
            sj_run(&g, &jc, desc);
            free(bias);
            vdata_free(&d);
        }
    tu_group_end(&g);
}

/* Bad option values: ATTN_ERR_ARG / ATTN_ERR_SHAPE naming the option. */
static void group_bad_values(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "bad-values");
    enum { B = 2, H = 3, N = 5, D = 4 };
    static float q[B * H * N * D], k[B * H * N * D], v[B * H * N * D], o[B * H * N * D], l[B * H * N],
        dq[B * H * N * D], dk[B * H * N * D], dv[B * H * N * D], vec[64];
    for (int i = 0; i < B * H * N * D; ++i) q[i] = k[i] = v[i] = 0.1f * (float)(i % 7);
    attn_tensor Q = attn_tensor_4d(q, B, H, N, D), K = attn_tensor_4d(k, B, H, N, D), V = attn_tensor_4d(v, B, H, N, D),
                O = attn_tensor_4d(o, B, H, N, D), L = attn_tensor_3d(l, B, H, N), dQ = attn_tensor_4d(dq, B, H, N, D),
                dK = attn_tensor_4d(dk, B, H, N, D), dV = attn_tensor_4d(dv, B, H, N, D);
    attn_tensor h1 = attn_tensor_1d(vec, H), hbad = attn_tensor_1d(vec, H + 1), bh = attn_tensor_2d(vec, B, H),
                bhbad = attn_tensor_2d(vec, B + 1, H), h3 = attn_tensor_3d(vec, 1, B, H), hb2 = attn_tensor_2d(vec, 1, H);
    attn_tensor hbool = h1;
    hbool.dtype = ATTN_BOOL;
    (void)bh;
    typedef struct {
        const char *what, *name;
        int field; /* 0 window, 1 softcap, 2 dropout, 3 alibi, 4 sinks, 5 grad_sinks */
        int64_t wl, wr;
        float f;
        const attn_tensor *t;
    } bad;
    const bad cases[] = {
        {"window left -2", "window", 0, -2, 0, 0, NULL},
        {"window right -5", "window", 0, 3, -5, 0, NULL},
        {"window (-7, -7)", "window", 0, -7, -7, 0, NULL},
        {"softcap -1", "softcap", 1, 0, 0, -1.0f, NULL},
        {"softcap NaN", "softcap", 1, 0, 0, NAN, NULL},
        {"softcap +inf", "softcap", 1, 0, 0, INFINITY, NULL},
        {"softcap -0.5", "softcap", 1, 0, 0, -0.5f, NULL},
        {"dropout_p -0.1", "dropout", 2, 0, 0, -0.1f, NULL},
        {"dropout_p 1", "dropout", 2, 0, 0, 1.0f, NULL},
        {"dropout_p 1.5", "dropout", 2, 0, 0, 1.5f, NULL},
        {"dropout_p NaN", "dropout", 2, 0, 0, NAN, NULL},
        {"alibi_slopes (H+1)", "alibi", 3, 0, 0, 0, &hbad},
        {"alibi_slopes (B+1,H)", "alibi", 3, 0, 0, 0, &bhbad},
        {"alibi_slopes (1,B,H)", "alibi", 3, 0, 0, 0, &h3},
        {"alibi_slopes bool", "alibi", 3, 0, 0, 0, &hbool},
        {"sinks (H+1)", "sinks", 4, 0, 0, 0, &hbad},
        {"sinks (B,H)", "sinks", 4, 0, 0, 0, &bh},
        {"sinks (1,H)", "sinks", 4, 0, 0, 0, &hb2},
        {"grad_sinks (H+1)", "grad_sinks", 5, 0, 0, 0, &hbad},
    };
    sj_path paths[SJ_MAX_PATHS];
    const int np = sj_paths(paths);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ++ci)
        for (int pi = 0; pi < np; ++pi)
            for (int backward = 0; backward < 2; ++backward) {
                const bad *b = &cases[ci];
                if (b->field == 5 && !backward) continue;
                attn_sdpa_opts opts = attn_sdpa_opts_default();
                opts.path = paths[pi].path;
                switch (b->field) {
                case 0: opts.window = (attn_window){true, b->wl, b->wr}; break;
                case 1: opts.softcap = b->f; break;
                case 2: opts.dropout_p = b->f; break;
                case 3: opts.alibi_slopes = b->t; break;
                case 4: opts.sinks = b->t; break;
                default: opts.sinks = &h1, opts.grad_sinks = (attn_tensor *)b->t; break;
                }
                sj_select(&paths[pi]);
                attn_error err;
                memset(&err, 0, sizeof err);
                attn_status st = backward ? attn_sdpa_backward(&Q, &K, &V, NULL, NULL, &O, &dQ, &dK, &dV, &opts, &err)
                                          : attn_sdpa(&Q, &K, &V, &O, &L, NULL, &opts, &err);
                attn_status st_null = backward ? attn_sdpa_backward(&Q, &K, &V, NULL, NULL, &O, &dQ, &dK, &dV, &opts, NULL)
                                               : attn_sdpa(&Q, &K, &V, &O, &L, NULL, &opts, NULL);
                unsetenv("ATTN_ARCH");
                const bool status_ok = st == ATTN_ERR_ARG || st == ATTN_ERR_SHAPE || st == ATTN_ERR_DTYPE;
                tu_check(&g, status_ok && strstr(err.message, b->name) != NULL && st_null == st,
                         "%s %s %s: status %s (want ARG/SHAPE%s), message \"%s\" (must name \"%s\"), "
                         "status with err=NULL %s",
                         paths[pi].name, backward ? "backward" : "forward", b->what, attn_status_string(st),
                         b->field == 3 ? "/DTYPE" : "", err.message, b->name, attn_status_string(st_null));
            }
    /* valid edge values are accepted: window (-1,-1), (0,0); softcap tiny; p just below 1 */
    const struct { const char *what; attn_window w; float cap, p; } good[] = {
        {"window (-1,-1)", {true, -1, -1}, 0, 0}, {"window (0,0)", {true, 0, 0}, 0, 0},
        {"window disabled with negatives", {false, -5, -9}, 0, 0}, {"softcap 1e-3", {false, 0, 0}, 1e-3f, 0},
        {"dropout_p 0.999", {false, 0, 0}, 0, 0.999f},
    };
    for (size_t gi = 0; gi < sizeof good / sizeof good[0]; ++gi) {
        attn_sdpa_opts opts = attn_sdpa_opts_default();
        opts.window = good[gi].w, opts.softcap = good[gi].cap, opts.dropout_p = good[gi].p;
        opts.sinks = &h1;
        attn_error err = {0};
        attn_status st = attn_sdpa(&Q, &K, &V, &O, &L, NULL, &opts, &err);
        tu_check(&g, st == ATTN_OK, "%s (with sinks (H)): status %s: %s", good[gi].what, attn_status_string(st), err.message);
        opts.alibi_slopes = &bh;
        st = attn_sdpa(&Q, &K, &V, &O, &L, NULL, &opts, &err);
        tu_check(&g, st == ATTN_OK, "%s (with alibi (B,H)): status %s: %s", good[gi].what, attn_status_string(st), err.message);
    }
    tu_group_end(&g);
}

/* MHA dropout (torch's module.train() with dropout): eval mode ignores it
 * bitwise; training is deterministic (reruns, thread counts 1/2/3, every
 * path gives one mask — compared on out), depends on the seed; E[out] over
 * seeds ≈ the eval out; and the backward is the derivative of the forward at
 * a fixed seed (directional finite differences, query and in_proj_weight). */
static double mha_loss(attn_mha *m, const tu_tensor *x, const double *dout, const attn_mha_opts *o,
                       tu_tensor *out, attn_status *st)
{
    *st = attn_mha_forward(m, &x->view, NULL, NULL, &out->view, o, NULL);
    double l = 0;
    const int64_t n = tu_numel(&out->view);
    for (int64_t e = 0; e < n; ++e) l += tu_get(&out->view, e) * dout[e];
    return l;
}

static void group_mha_dropout(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "mha-dropout");
    sj_path paths[SJ_MAX_PATHS];
    const int np = sj_paths(paths);
    const int64_t B = 2, L = 9, E = 16, H = 2;
    attn_mha_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.embed_dim = E, cfg.num_heads = H, cfg.bias = true, cfg.dropout = 0.3f;
    attn_mha_config cfg0 = cfg;
    cfg0.dropout = 0.0f;
    attn_mha *m = NULL, *m0 = NULL;
    if (!tu_check(&g, attn_mha_create(&cfg, &m, NULL) == ATTN_OK && attn_mha_create(&cfg0, &m0, NULL) == ATTN_OK,
                  "attn_mha_create with dropout 0.3")) {
        attn_mha_free(m), attn_mha_free(m0);
        tu_group_end(&g);
        return;
    }
    /* bad dropout values in the config are refused, naming the option */
    const float badp[] = {-0.1f, 1.0f, 1.5f, NAN};
    for (int i = 0; i < 4; ++i) {
        attn_mha_config bc = cfg;
        bc.dropout = badp[i];
        attn_mha *bm = NULL;
        attn_error err = {0};
        attn_status st = attn_mha_create(&bc, &bm, &err);
        tu_check(&g, st == ATTN_ERR_ARG && strstr(err.message, "dropout") != NULL,
                 "attn_mha_create with dropout %g: status %s, message \"%s\" (want ATTN_ERR_ARG naming dropout)",
                 (double)badp[i], attn_status_string(st), err.message);
        attn_mha_free(bm);
    }
    attn_mha_init(m, g_seed);
    size_t npar, npar0;
    float *P = attn_mha_params_flat(m, &npar), *P0 = attn_mha_params_flat(m0, &npar0);
    memcpy(P0, P, npar * sizeof *P);
    tu_rng r;
    tu_rng_seed(&r, g_seed ^ 0x3D0ull);
    const int64_t xs[3] = {B, L, E};
    tu_tensor x, o1, o2, dx;
    tu_tensor_alloc(&x, ATTN_F32, 3, xs, NULL), tu_tensor_alloc(&o1, ATTN_F32, 3, xs, NULL);
    tu_tensor_alloc(&o2, ATTN_F32, 3, xs, NULL), tu_tensor_alloc(&dx, ATTN_F32, 3, xs, NULL);
    tu_fill_normal(&x.view, &r, 0, 1);
    double *dout = tu_xcalloc(B * L * E, 8);
    for (int64_t e = 0; e < B * L * E; ++e) dout[e] = f32(tu_rng_normal(&r));
    tu_tensor tdo;
    sj_tensor_from(&tdo, 3, xs, dout);
    const int64_t n = B * L * E;
    float *a = tu_xcalloc(n, 4), *b = tu_xcalloc(n, 4);
    for (int pi = 0; pi < np; ++pi) {
        sj_select(&paths[pi]);
        attn_mha_opts o = attn_mha_opts_default();
        o.path = paths[pi].path, o.num_threads = 2, o.causal = pi % 2 == 1;
        /* eval mode: dropout ignored, bitwise */
        attn_status s1 = attn_mha_forward(m, &x.view, NULL, NULL, &o1.view, &o, NULL);
        attn_status s2 = attn_mha_forward(m0, &x.view, NULL, NULL, &o2.view, &o, NULL);
        tu_gather_bytes(&o1.view, a), tu_gather_bytes(&o2.view, b);
        tu_check(&g, s1 == ATTN_OK && s2 == ATTN_OK && !memcmp(a, b, (size_t)n * 4),
                 "%s: eval mode (training = false) with dropout 0.3 differs from dropout 0 (status %s/%s)",
                 paths[pi].name, attn_status_string(s1), attn_status_string(s2));
        /* training: deterministic over reruns and thread counts, seed-dependent */
        o.training = true, o.dropout_seed = g_seed ^ 0xABCull;
        o.num_threads = 1;
        s1 = attn_mha_forward(m, &x.view, NULL, NULL, &o1.view, &o, NULL);
        tu_gather_bytes(&o1.view, a);
        tu_check(&g, s1 == ATTN_OK && memcmp(a, b, (size_t)n * 4) != 0,
                 "%s: training mode with dropout 0.3: status %s, output %s the eval output", paths[pi].name,
                 attn_status_string(s1), s1 == ATTN_OK ? "equals" : "vs");
        for (int t = 1; t <= 3; ++t) {
            o.num_threads = t;
            s2 = attn_mha_forward(m, &x.view, NULL, NULL, &o2.view, &o, NULL);
            tu_gather_bytes(&o2.view, b);
            tu_check(&g, s2 == ATTN_OK && !memcmp(a, b, (size_t)n * 4),
                     "%s: training forward with %d threads differs bitwise from 1 thread (same seed)", paths[pi].name, t);
        }
        o.dropout_seed ^= 1;
        s2 = attn_mha_forward(m, &x.view, NULL, NULL, &o2.view, &o, NULL);
        tu_gather_bytes(&o2.view, b);
        tu_check(&g, s2 == ATTN_OK && memcmp(a, b, (size_t)n * 4) != 0, "%s: another dropout seed, same output",
                 paths[pi].name);
        o.dropout_seed ^= 1;
        o.num_threads = 2;
        /* backward = derivative of the forward at a fixed seed */
        attn_mha_zero_grad(m);
        attn_error err = {0};
        attn_status sb = attn_mha_backward(m, &x.view, NULL, NULL, &tdo.view, &dx.view, NULL, NULL, &o, &err);
        if (!tu_check(&g, sb == ATTN_OK, "%s: training backward: status %s: %s", paths[pi].name,
                      attn_status_string(sb), err.message)) {
            unsetenv("ATTN_ARCH");
            continue;
        }
        float *G = attn_mha_grads_flat(m, NULL);
        double dir = 0, mag = 0;
        tu_rng ur;
        tu_rng_seed(&ur, g_seed ^ 0x77ull);
        double *u = tu_xcalloc(n, 8), *x0 = tu_xcalloc(n, 8);
        tu_to_f64(&x.view, x0);
        for (int64_t e = 0; e < n; ++e) {
            u[e] = tu_rng_range(&ur, -1, 1);
            dir += tu_get(&dx.view, e) * u[e], mag += fabs(tu_get(&dx.view, e) * u[e]);
        }
        const double h = 1e-2;
        double step = 0, uu = 0;
        for (int64_t e = 0; e < n; ++e) tu_set(&x.view, e, x0[e] + h * u[e]), step += (tu_get(&x.view, e) - x0[e]) * u[e];
        attn_status sa, sc;
        const double lp = mha_loss(m, &x, dout, &o, &o1, &sa);
        for (int64_t e = 0; e < n; ++e) tu_set(&x.view, e, x0[e] - h * u[e]), step -= (tu_get(&x.view, e) - x0[e]) * u[e];
        const double lm = mha_loss(m, &x, dout, &o, &o1, &sc);
        for (int64_t e = 0; e < n; ++e) tu_set(&x.view, e, x0[e]), uu += u[e] * u[e];
        const double fd = (lp - lm) / (step / uu);
        tu_check(&g, sa == ATTN_OK && sc == ATTN_OK && fabs(fd - dir) <= 3e-3 * mag + 1e-4,
                 "%s: training MHA, directional derivative along u in the input: finite differences %.7g vs "
                 "<dquery, u> %.7g (scale %.3g) at a fixed dropout seed | replay: ./test_variants --seed 0x%" PRIx64
                 " --group mha-dropout", paths[pi].name, fd, dir, mag, g_seed);
        /* and along one parameter direction (in_proj_weight, the first parameter) */
        const char *pname;
        attn_tensor pv, pg;
        attn_mha_param_at(m, 0, &pname, &pv, &pg);
        const int64_t pn = tu_numel(&pv);
        double *w0 = tu_xcalloc(pn, 8), *wu = tu_xcalloc(pn, 8);
        tu_to_f64(&pv, w0);
        double pdir = 0, pmag = 0, pstep = 0, puu = 0;
        for (int64_t e = 0; e < pn; ++e) {
            wu[e] = tu_rng_range(&ur, -1, 1);
            pdir += tu_get(&pg, e) * wu[e], pmag += fabs(tu_get(&pg, e) * wu[e]);
        }
        for (int64_t e = 0; e < pn; ++e) tu_set(&pv, e, w0[e] + h * wu[e]), pstep += (tu_get(&pv, e) - w0[e]) * wu[e];
        const double plp = mha_loss(m, &x, dout, &o, &o1, &sa);
        for (int64_t e = 0; e < pn; ++e) tu_set(&pv, e, w0[e] - h * wu[e]), pstep -= (tu_get(&pv, e) - w0[e]) * wu[e];
        const double plm = mha_loss(m, &x, dout, &o, &o1, &sc);
        for (int64_t e = 0; e < pn; ++e) tu_set(&pv, e, w0[e]), puu += wu[e] * wu[e];
        const double pfd = (plp - plm) / (pstep / puu);
        tu_check(&g, sa == ATTN_OK && sc == ATTN_OK && fabs(pfd - pdir) <= 3e-3 * pmag + 1e-4,
                 "%s: training MHA, directional derivative along %s: finite differences %.7g vs gradient %.7g "
                 "(scale %.3g) at a fixed dropout seed", paths[pi].name, pname, pfd, pdir, pmag);
        (void)G;
        free(u), free(x0), free(w0), free(wu);
        /* E[out] over seeds ≈ eval out (sample-variance z scores) */
        const int S = g_quick ? 200 : 1000;
        double *sum = tu_xcalloc(n, 8), *sq = tu_xcalloc(n, 8), *ev = tu_xcalloc(n, 8);
        o.training = false;
        attn_mha_forward(m, &x.view, NULL, NULL, &o2.view, &o, NULL);
        tu_to_f64(&o2.view, ev);
        o.training = true;
        attn_status se = ATTN_OK;
        for (int k = 0; k < S && se == ATTN_OK; ++k) {
            o.dropout_seed = g_seed * 7919u + (uint64_t)k;
            se = attn_mha_forward(m, &x.view, NULL, NULL, &o1.view, &o, NULL);
            for (int64_t e = 0; e < n; ++e) {
                const double y = tu_get(&o1.view, e);
                sum[e] += y, sq[e] += y * y;
            }
        }
        double worst = 0, chi = 0;
        int64_t cnt = 0;
        for (int64_t e = 0; e < n; ++e) {
            const double mean = sum[e] / S, var = fmax(sq[e] / S - mean * mean, 0.0);
            const double sd = sqrt(var / S) + 1e-7 * (1 + fabs(ev[e]));
            const double z = (mean - ev[e]) / sd;
            worst = fmax(worst, fabs(z)), chi += z * z, cnt++;
        }
        chi /= (double)cnt;
        tu_check(&g, se == ATTN_OK && worst <= 6.0 && chi >= 0.3 && chi <= 2.5,
                 "%s: MHA mean output over %d dropout seeds vs eval output: worst |z| %.2f (<= 6), mean z^2 %.3f "
                 "(in [0.3, 2.5]) | replay: ./test_variants --seed 0x%" PRIx64 " --group mha-dropout",
                 paths[pi].name, S, worst, chi, g_seed);
        free(sum), free(sq), free(ev);
        unsetenv("ATTN_ARCH");
    }
    /* one mask on every path: the training outputs agree to float rounding */
    {
        attn_mha_opts o = attn_mha_opts_default();
        o.training = true, o.dropout_seed = 99, o.num_threads = 2;
        double *ref = tu_xcalloc(n, 8), big = 0;
        for (int pi = 0; pi < np; ++pi) {
            sj_select(&paths[pi]);
            o.path = paths[pi].path;
            attn_status st = attn_mha_forward(m, &x.view, NULL, NULL, &o1.view, &o, NULL);
            unsetenv("ATTN_ARCH");
            if (pi == 0) {
                tu_to_f64(&o1.view, ref);
                for (int64_t e = 0; e < n; ++e) big = fmax(big, fabs(ref[e]));
                continue;
            }
            double worst = 0;
            for (int64_t e = 0; e < n; ++e) worst = fmax(worst, fabs(tu_get(&o1.view, e) - ref[e]));
            tu_check(&g, st == ATTN_OK && worst <= 1e-4 * big,
                     "%s vs %s: training outputs (seed 99) differ by %.3g of %.3g: different dropout masks per ISA?",
                     paths[pi].name, paths[0].name, worst, big);
        }
        free(ref);
    }
    free(a), free(b), free(dout);
    tu_tensor_free(&x), tu_tensor_free(&o1), tu_tensor_free(&o2), tu_tensor_free(&dx), tu_tensor_free(&tdo);
    attn_mha_free(m), attn_mha_free(m0);
    tu_group_end(&g);
}

/* Option tensors as strided views (slopes with stride 2, (B,Hq) slopes as a
 * transposed (Hq,B) buffer, sinks with stride 3, grad_sinks with stride 2)
 * give bitwise the results of contiguous ones. */
static void group_strided_options(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "strided-options");
    sj_path paths[SJ_MAX_PATHS];
    const int np = sj_paths(paths);
    const int64_t B = 2, H = 4, Nq = 21, Nk = 33, D = 8;
    tu_rng r;
    tu_rng_seed(&r, g_seed ^ 0x57D1ull);
    float q[B * H * Nq * D], k[B * H * Nk * D], v[B * H * Nk * D], d[B * H * Nq * D];
    for (size_t e = 0; e < sizeof q / 4; ++e) q[e] = (float)tu_rng_normal(&r), d[e] = (float)tu_rng_normal(&r);
    for (size_t e = 0; e < sizeof k / 4; ++e) k[e] = (float)tu_rng_normal(&r), v[e] = (float)tu_rng_normal(&r);
    float slopes[B * H], sinks[H], slopes_s[2 * B * H], slopes_t[B * H], sinks_s[3 * H];
    for (int64_t e = 0; e < B * H; ++e) slopes[e] = (float)tu_rng_range(&r, 0, 0.5);
    for (int64_t h = 0; h < H; ++h) sinks[h] = (float)tu_rng_normal(&r);
    for (int64_t e = 0; e < 2 * B * H; ++e) slopes_s[e] = NAN;
    for (int64_t e = 0; e < 3 * H; ++e) sinks_s[e] = NAN;
    for (int64_t e = 0; e < H; ++e) slopes_s[2 * e] = slopes[e], sinks_s[3 * e] = sinks[e];
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h) slopes_t[h * B + b] = slopes[b * H + h];
    attn_tensor Q = attn_tensor_4d(q, B, H, Nq, D), K = attn_tensor_4d(k, B, H, Nk, D), V = attn_tensor_4d(v, B, H, Nk, D),
                dO = attn_tensor_4d(d, B, H, Nq, D);
    for (int per_batch = 0; per_batch < 2; ++per_batch)
        for (int pi = 0; pi < np; ++pi) {
            float o[2][B * H * Nq * D], l[2][B * H * Nq], dq[2][B * H * Nq * D], dk[2][B * H * Nk * D],
                dv[2][B * H * Nk * D], gs[2][2 * H];
            attn_status st[2];
            for (int strided = 0; strided < 2; ++strided) {
                attn_tensor al = per_batch ? attn_tensor_2d(slopes, B, H) : attn_tensor_1d(slopes, H);
                attn_tensor sk = attn_tensor_1d(sinks, H), gsk = attn_tensor_1d(gs[strided], H);
                for (int e = 0; e < 2 * H; ++e) gs[strided][e] = -7.0f;
                if (strided) {
                    if (per_batch) {
                        al = attn_tensor_2d(slopes_t, H, B);
                        al = attn_tensor_transpose(al, 0, 1);
                    } else {
                        al = attn_tensor_1d(slopes_s, H);
                        al.stride[0] = 2;
                    }
                    sk = attn_tensor_1d(sinks_s, H);
                    sk.stride[0] = 3;
                    gsk.stride[0] = 2;
                }
                attn_tensor O = attn_tensor_4d(o[strided], B, H, Nq, D), L = attn_tensor_3d(l[strided], B, H, Nq),
                            dQ = attn_tensor_4d(dq[strided], B, H, Nq, D), dK = attn_tensor_4d(dk[strided], B, H, Nk, D),
                            dV = attn_tensor_4d(dv[strided], B, H, Nk, D);
                attn_sdpa_opts opts = attn_sdpa_opts_default();
                opts.path = paths[pi].path, opts.num_threads = 2, opts.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
                opts.alibi_slopes = &al, opts.sinks = &sk, opts.window = (attn_window){true, 9, 2}, opts.softcap = 6.0f;
                sj_select(&paths[pi]);
                attn_error err = {0};
                st[strided] = attn_sdpa(&Q, &K, &V, &O, &L, NULL, &opts, &err);
                if (st[strided] == ATTN_OK) {
                    opts.grad_sinks = &gsk;
                    st[strided] = attn_sdpa_backward(&Q, &K, &V, &O, &L, &dO, &dQ, &dK, &dV, &opts, &err);
                }
                unsetenv("ATTN_ARCH");
                if (st[strided] != ATTN_OK)
                    tu_group_fail(&g, "%s %s slopes %s: status %s: %s", paths[pi].name, per_batch ? "(B,Hq)" : "(Hq)",
                                  strided ? "strided" : "contiguous", attn_status_string(st[strided]), err.message);
            }
            if (st[0] != ATTN_OK || st[1] != ATTN_OK) continue;
            bool same = !memcmp(o[0], o[1], sizeof o[0]) && !memcmp(l[0], l[1], sizeof l[0]) &&
                        !memcmp(dq[0], dq[1], sizeof dq[0]) && !memcmp(dk[0], dk[1], sizeof dk[0]) &&
                        !memcmp(dv[0], dv[1], sizeof dv[0]);
            bool gs_ok = true;
            for (int64_t h = 0; h < H; ++h) gs_ok &= gs[0][h] == gs[1][2 * h] && gs[1][2 * h + 1] == -7.0f;
            tu_check(&g, same && gs_ok,
                     "%s %s: strided alibi_slopes / sinks / grad_sinks views change the results (%s%s) | replay: "
                     "./test_variants --seed 0x%" PRIx64 " --group strided-options",
                     paths[pi].name, per_batch ? "(B,Hq) slopes" : "(Hq) slopes", same ? "" : "outputs differ",
                     gs_ok ? "" : " grad_sinks wrong or written between its elements", g_seed);
        }
    tu_group_end(&g);
}

/* The random case seed names, as --case replays it. */
static void replay_case(tu_group *g, uint64_t seed, const char *replay)
{
    vcase c = random_vcase(seed);
    run_vcase(g, &c, replay);
}

int main(int argc, char **argv)
{
    tu_options opt;
    tu_suite s;
    if (!tu_begin(argc, argv, DEFAULT_SEED, &opt, &s)) return 2;
    g_opt = &opt;
    g_seed = opt.seed;
    g_quick = !tu_env_flag("ATTN_STRESS_FULL") || opt.quick;
    g_light = opt.quick;
    const double t0 = tu_now_seconds();
    sj_print_header("test_variants", g_quick ? "quick" : "full", g_seed);
    if (opt.replay) return tu_replay(&s, &opt, "test_variants", replay_case);
    static const tu_group_entry groups[] = {
        {"paths", group_paths},
        {"oracle-fd", group_oracle_fd},
        {"alibi-slopes", group_alibi_slopes},
        {"bad-values", group_bad_values},
        {"window", group_window},
        {"alibi", group_alibi},
        {"softcap", group_softcap},
        {"sinks", group_sinks},
        {"hidden-rows", group_hidden_rows},
        {"decode", group_decode},
        {"dropout-mask", group_dropout_mask},
        {"dropout-expectation", group_dropout_expectation},
        {"dropout-fd", group_dropout_fd},
        {"dropout-p0", group_dropout_p0},
        {"threads", group_threads},
        {"strided-options", group_strided_options},
        {"mha-dropout", group_mha_dropout},
        {"combined", group_combined},
    };
    tu_run_groups(&s, &opt, groups, (int)(sizeof groups / sizeof groups[0]));
    printf("test_variants: %" PRId64 " generated cases, run time %.1f s\n", g_cases_run, tu_now_seconds() - t0);
    return tu_suite_finish(&s);
}
