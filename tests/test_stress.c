/*
 * test_stress — issue 8's stress suite: every path (reference, generic and
 * each SIMD ISA of this CPU, through ATTN_ARCH) against the float64 oracle
 * and a naive float32 implementation (tests/support/ref64_variants.c), by the
 * criterion FlashAttention's tests use:
 *
 *   for every output and gradient, per element
 *     |attn − ref64| <= 3·max|fp32 − ref64| + 1e-6·natural
 *   natural: out → max|V|; dv_j → Σ_i P_ij|dout_i|; dq_i → scale·|dout_i|_1·
 *   max|V|·max|K| (per row); dk_j → scale·max|V|·max|Q|·Σ_i P_ij|dout_i|_1;
 *   lse → 1 + |row max| + max_j scale·Σ|q k|; weights → row max P · (1 + the same)
 *   and no NaN/inf where ref64 is finite (infinities must match). fp32 is
 *   taken twice (plain and FMA-fused multiply-adds, e.g. torch's CPU GEMM), M
 *   being the larger error: one realisation alone is a noisy yardstick in
 *   large-logit corners (see ref64_variants.h).
 *
 * Backward in three modes: lse = out = NULL (recompute), the forward's out
 * and lse plus softmax_stats (exact; only when the library accepts the
 * option), and out + lse without stats. attn.h documents the last as exact
 * only to ulp(lse)/2 relative error in P (as FlashAttention); in that mode
 * every row gets the extra allowance that bound implies, so rows with huge
 * |lse| (masks of finfo.min) are judged by the documented bound rather than
 * by the criterion (see tests/support/sdpa_judge.c).
 *
 * Groups:
 *   paths                      ATTN_ARCH selects what attn_isa() says
 *   oracle                     the float64 oracle vs tests/support/ref64.c
 *                              (test_variants proves it by finite differences)
 *   defect1 .. defect5         issue 8's five defects, the exact reproductions
 *   masks                      float masks with -inf, -1e30, finfo.min, -1e6
 *                              and mixtures; bool masks leaving one key; fully
 *                              blocked rows; constant-mask rows
 *   hidden-nonfinite           NaN / ±inf keys hidden by masks or causality
 *   dims                       D in {1,2,3,7,16,17,63,64,65,127,128,129,256,512},
 *                              Dv != D
 *   gqa                        Hq/Hkv = 1..16
 *   alignment                  Nq != Nk, both causal alignments, Nq = 1
 *   magnitudes                 input sizes 1e-4 .. 1e3, scale up to 10, logit
 *                              gaps > 88, rows of exactly equal logits
 *   large-n                    N up to 8192 (forward compared on sampled rows)
 *   random                     random mixtures of all of the above
 *
 * Quick mode is the default (ATTN_TEST_QUICK=1, or under ctest / make test);
 * ATTN_STRESS_FULL=1 (make stress-full) explores many more seeds and sizes.
 * Every failure line carries its replay command:
 *   random cases:     ATTN_TEST_CASE=<seed> ./test_stress   (or --case SEED)
 *   systematic ones:  ./test_stress --seed <base> --group <group>
 *
 * Usage: test_stress [--seed S] [--cases N] [--case SEED] [--group NAME] [-v]
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

#define DEFAULT_SEED 0x57E55ull
#define FINFO_MIN (-3.4028234663852886e38) /* torch.finfo(torch.float32).min */

static bool g_full;
static uint64_t g_seed;

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *xcalloc(int64_t n, size_t size)
{
    void *p = calloc((size_t)(n > 0 ? n : 1), size);
    if (!p) {
        fprintf(stderr, "test_stress: out of memory\n");
        exit(2);
    }
    return p;
}

/* ------------------------------------------------------------ cases */

enum {
    MK_NONE,
    MK_BOOL,          /* (Nq,Nk) bool, ~60% attend */
    MK_BOOL_ONE,      /* (Nq,Nk) bool: exactly one key per row */
    MK_KEYPAD,        /* (B,1,1,Nk) bool key padding (valid length may be 0) */
    MK_FLOAT,         /* (B,1,Nq,Nk) float N(0,2), 10% -inf */
    MK_FLOAT_SPECIAL, /* (B,Hq,Nq,Nk) float rows: -inf/-1e30/finfo.min/-1e6 patterns */
    MK_ROWS_OFF,      /* (Nq,1) bool: every third row sees nothing */
    MK_KINDS
};
static const char *const mk_name[MK_KINDS] = {"none",  "bool",         "bool-one-key", "keypad",
                                              "float", "float-special", "rows-off"};

typedef struct {
    uint64_t seed;
    int64_t B, Hq, Hkv, Nq, Nk, D, Dv;
    float scale;
    attn_causal causal;
    double qmag, kmag, vmag, dmag;
    int mask0, mask1;
    double special_c; /* MK_FLOAT_SPECIAL: 0 = mixed patterns, else every row = this constant */
    bool equal_rows;  /* some query rows zero (all logits exactly equal) */
    double gap;       /* > 0: a third of the query rows multiplied by it */
    bool poison;      /* keys no row sees hold NaN / ±inf in K and V */
    bool sample;      /* compare sampled query rows only (forward only) */
    bool backward;
    bool bnhd;
} scase;

static const char *causal_name(attn_causal c)
{
    return c == ATTN_CAUSAL_TOP_LEFT ? "top-left" : c == ATTN_CAUSAL_BOTTOM_RIGHT ? "bottom-right" : "none";
}

static void describe(const scase *c, const char *replay, char *buf, size_t n)
{
    snprintf(buf, n,
             "B=%" PRId64 " Hq=%" PRId64 " Hkv=%" PRId64 " Nq=%" PRId64 " Nk=%" PRId64 " D=%" PRId64
             " Dv=%" PRId64 " scale=%.9g causal=%s |q|=%.3g |k|=%.3g |v|=%.3g |do|=%.3g mask0=%s "
             "mask1=%s c=%.9g equal=%d gap=%g poison=%d sample=%d bnhd=%d seed=0x%016" PRIx64
             " | replay: %s",
             c->B, c->Hq, c->Hkv, c->Nq, c->Nk, c->D, c->Dv, (double)c->scale, causal_name(c->causal),
             c->qmag, c->kmag, c->vmag, c->dmag, mk_name[c->mask0], mk_name[c->mask1], c->special_c,
             c->equal_rows, c->gap, c->poison, c->sample, c->bnhd, c->seed, replay);
}

static double log_uniform(tu_rng *r, double lo, double hi)
{
    return exp(tu_rng_range(r, log(lo), log(hi)));
}

static void fit_budget(scase *c, double budget)
{
    for (;;) {
        const double work = (double)c->B * c->Hq * c->Nq * c->Nk * (double)(c->D + c->Dv + 2);
        if (work <= budget) return;
        const int64_t group = c->Hq / c->Hkv;
        if (c->B > 1) c->B--;
        else if (c->Hkv > 1) c->Hkv--;
        else if (group > 1 && c->Nq * c->Nk < 4096) c->Hq = c->Hkv * (group - 1);
        else if (c->Nq >= c->Nk && c->Nq > 1) c->Nq = c->Nq / 2 + 1;
        else if (c->Nk > 1) c->Nk = c->Nk / 2 + 1;
        else if (c->D > 1) c->D /= 2;
        else if (c->Dv > 1) c->Dv /= 2;
        else return;
        if (c->Hq % c->Hkv) c->Hq = c->Hkv * (c->Hq / c->Hkv > 0 ? c->Hq / c->Hkv : 1);
    }
}

static const int64_t k_dims[] = {1, 2, 3, 7, 16, 17, 63, 64, 65, 127, 128, 129, 256, 512};
#define NDIMS ((int)(sizeof k_dims / sizeof k_dims[0]))

static scase random_case(uint64_t seed)
{
    static const int64_t lens[] = {1, 2, 3, 5, 8, 17, 31, 64, 65, 100, 127, 129, 200, 257};
    static const int64_t ratios[] = {1, 1, 2, 3, 4, 8, 16};
    tu_rng r;
    tu_rng_seed(&r, seed);
    scase c;
    memset(&c, 0, sizeof c);
    c.seed = seed;
    c.B = tu_rng_int(&r, 1, 2);
    c.Hkv = tu_rng_int(&r, 1, 2);
    c.Hq = c.Hkv * tu_rng_pick(&r, ratios, 7);
    c.Nq = tu_rng_pick(&r, lens, 14);
    c.Nk = tu_rng_chance(&r, 0.3) ? c.Nq : tu_rng_pick(&r, lens, 14);
    c.D = tu_rng_pick(&r, k_dims, NDIMS);
    c.Dv = tu_rng_chance(&r, 0.5) ? c.D : tu_rng_pick(&r, k_dims, NDIMS);
    c.scale = tu_rng_chance(&r, 0.4) ? 0.0f : (float)log_uniform(&r, 0.01, 10.0);
    c.causal = (attn_causal)tu_rng_int(&r, 0, 2);
    c.qmag = tu_rng_chance(&r, 0.4) ? 1.0 : log_uniform(&r, 1e-4, 1e3);
    c.kmag = tu_rng_chance(&r, 0.4) ? 1.0 : log_uniform(&r, 1e-4, 1e3);
    c.vmag = tu_rng_chance(&r, 0.5) ? 1.0 : log_uniform(&r, 1e-4, 1e3);
    c.dmag = tu_rng_chance(&r, 0.5) ? 1.0 : log_uniform(&r, 1e-4, 1e3);
    const double u = tu_rng_uniform(&r);
    c.mask0 = u < 0.25 ? MK_NONE : (int)tu_rng_int(&r, 1, MK_KINDS - 1);
    if (c.mask0 != MK_NONE && tu_rng_chance(&r, 0.25)) {
        /* a second mask of another family (no two float-special masks) */
        static const int second[] = {MK_BOOL, MK_KEYPAD, MK_FLOAT, MK_ROWS_OFF};
        c.mask1 = second[tu_rng_int(&r, 0, 3)];
        if (c.mask0 == MK_FLOAT_SPECIAL && c.mask1 == MK_FLOAT) c.mask1 = MK_BOOL;
    }
    c.equal_rows = tu_rng_chance(&r, 0.2);
    c.gap = tu_rng_chance(&r, 0.2) ? log_uniform(&r, 10.0, 1e3) : 0.0;
    c.poison = tu_rng_chance(&r, 0.3);
    c.bnhd = tu_rng_chance(&r, 0.3);
    c.backward = true;
    fit_budget(&c, g_full ? 6e6 : 1.2e6);
    return c;
}

/* Fills one mask of a kind; returns whether a mask was made. */
static bool make_mask(tu_tensor *t, int kind, const scase *c, double special_c, tu_rng *r)
{
    int64_t shape[4];
    int ndim;
    attn_dtype dt = ATTN_BOOL;
    switch (kind) {
    case MK_NONE: return false;
    case MK_BOOL:
    case MK_BOOL_ONE: ndim = 2, shape[0] = c->Nq, shape[1] = c->Nk; break;
    case MK_KEYPAD: ndim = 4, shape[0] = c->B, shape[1] = 1, shape[2] = 1, shape[3] = c->Nk; break;
    case MK_FLOAT: ndim = 4, shape[0] = c->B, shape[1] = 1, shape[2] = c->Nq, shape[3] = c->Nk, dt = ATTN_F32; break;
    case MK_FLOAT_SPECIAL: ndim = 4, shape[0] = c->B, shape[1] = c->Hq, shape[2] = c->Nq, shape[3] = c->Nk, dt = ATTN_F32; break;
    default: ndim = 2, shape[0] = c->Nq, shape[1] = 1; break; /* MK_ROWS_OFF */
    }
    if (!tu_tensor_alloc(t, dt, ndim, shape, NULL)) {
        fprintf(stderr, "test_stress: out of memory\n");
        exit(2);
    }
    const attn_tensor *v = &t->view;
    const int64_t n = tu_numel(v), row = shape[ndim - 1];
    static const double specials[] = {-INFINITY, -1e30, FINFO_MIN, -1e6};
    for (int64_t s = 0; s < n; s += row) {
        const int64_t rowi = s / row;
        int pattern = 0;
        double cst = special_c;
        if (kind == MK_FLOAT_SPECIAL) {
            pattern = special_c != 0.0 ? 1 : (int)tu_rng_int(r, 0, 5);
            if (special_c == 0.0) cst = specials[tu_rng_int(r, 0, 3)];
        }
        const int64_t one = tu_rng_int(r, 0, row - 1);
        for (int64_t e = s; e < s + row; ++e) {
            const int64_t j = e - s;
            double val = 0.0;
            switch (kind) {
            case MK_BOOL: val = tu_rng_chance(r, 0.6); break;
            case MK_BOOL_ONE: val = j == one; break;
            case MK_KEYPAD: {
                const int64_t b = rowi;
                const int64_t valid = b == 0 ? (c->Nk + 1) / 2 : (rowi * 7919 + (int64_t)(c->seed % 97)) % (c->Nk + 1);
                val = j < valid;
                break;
            }
            case MK_FLOAT: val = tu_rng_chance(r, 0.1) ? -INFINITY : 2.0 * tu_rng_normal(r); break;
            case MK_FLOAT_SPECIAL:
                switch (pattern) {
                case 0: val = 1.5 * tu_rng_normal(r); break;                    /* plain */
                case 1: val = cst; break;                                        /* one constant */
                case 2: { /* mixture */
                    const double pick[] = {0.0, 1.5 * tu_rng_normal(r), -INFINITY, -1e30, FINFO_MIN, -1e6};
                    val = pick[tu_rng_int(r, 0, 5)];
                    break;
                }
                case 3: val = j == one ? 0.0 : FINFO_MIN; break;                 /* one key left */
                case 4: val = -INFINITY; break;                                  /* fully blocked */
                default: val = tu_rng_chance(r, 0.5) ? -1e30 : FINFO_MIN; break; /* two huge */
                }
                break;
            default: val = rowi % 3 != 1; break; /* MK_ROWS_OFF */
            }
            tu_set(v, e, val);
        }
    }
    return true;
}

/* Inputs of a case, built from its seed. */
typedef struct {
    scase c;
    double *q, *k, *v, *dout;
    tu_tensor mask[2];
    const attn_tensor *mview[2];
    uint8_t *rows;
} sdata;

static void sdata_free(sdata *d)
{
    free(d->q), free(d->k), free(d->v), free(d->dout), free(d->rows);
    tu_tensor_free(&d->mask[0]);
    tu_tensor_free(&d->mask[1]);
}

static double f32(double x) { return (double)(float)x; }

static void sdata_make(sdata *d, const scase *c)
{
    memset(d, 0, sizeof *d);
    d->c = *c;
    tu_rng r;
    tu_rng_seed(&r, c->seed ^ 0xDA7A5EEDull);
    const int64_t nq = c->B * c->Hq * c->Nq * c->D, nk = c->B * c->Hkv * c->Nk * c->D,
                  nv = c->B * c->Hkv * c->Nk * c->Dv, no = c->B * c->Hq * c->Nq * c->Dv;
    d->q = xcalloc(nq, 8), d->k = xcalloc(nk, 8), d->v = xcalloc(nv, 8), d->dout = xcalloc(no, 8);
    for (int64_t e = 0; e < nq; ++e) d->q[e] = f32(c->qmag * tu_rng_normal(&r));
    for (int64_t e = 0; e < nk; ++e) d->k[e] = f32(c->kmag * tu_rng_normal(&r));
    for (int64_t e = 0; e < nv; ++e) d->v[e] = f32(c->vmag * tu_rng_normal(&r));
    for (int64_t e = 0; e < no; ++e) d->dout[e] = f32(c->dmag * tu_rng_normal(&r));
    const int64_t qrows = c->B * c->Hq * c->Nq;
    if (c->equal_rows) /* every fourth query row zero: all its logits exactly equal */
        for (int64_t row = 0; row < qrows; row += 4)
            for (int64_t e = 0; e < c->D; ++e) d->q[row * c->D + e] = 0.0;
    if (c->gap > 0) /* a third of the rows: logits spread far beyond 88 */
        for (int64_t row = 1; row < qrows; row += 3)
            for (int64_t e = 0; e < c->D; ++e) d->q[row * c->D + e] = f32(d->q[row * c->D + e] * c->gap);
    if (make_mask(&d->mask[0], c->mask0, c, c->special_c, &r)) d->mview[0] = &d->mask[0].view;
    if (make_mask(&d->mask[1], c->mask1, c, c->special_c, &r)) d->mview[1] = &d->mask[1].view;
    if (c->poison) {
        /* Keys hidden from every row of every query head sharing them hold
         * NaN, +inf or -inf in both K and V. */
        const int64_t nsc = c->B * c->Hq * c->Nq * c->Nk;
        double *bias = NULL;
        if (d->mview[0] || d->mview[1]) {
            bias = xcalloc(nsc, 8);
            for (int m = 0; m < 2; ++m)
                if (d->mview[m]) ref64_add_mask(bias, c->B, c->Hq, c->Nq, c->Nk, d->mview[m]);
        }
        rv_problem rp;
        memset(&rp, 0, sizeof rp);
        rp.B = c->B, rp.Hq = c->Hq, rp.Hkv = c->Hkv, rp.Nq = c->Nq, rp.Nk = c->Nk;
        rp.causal = c->causal, rp.bias = bias;
        const int64_t group = c->Hq / c->Hkv;
        static const double poison[] = {NAN, INFINITY, -INFINITY};
        for (int64_t b = 0; b < c->B; ++b)
            for (int64_t hk = 0; hk < c->Hkv; ++hk)
                for (int64_t j = 0; j < c->Nk; ++j) {
                    bool seen = false;
                    for (int64_t h = hk * group; h < (hk + 1) * group && !seen; ++h)
                        for (int64_t i = 0; i < c->Nq && !seen; ++i) seen = rv_visible(&rp, b, h, i, j);
                    if (seen) continue;
                    const double pv = poison[tu_rng_int(&r, 0, 2)];
                    const int64_t kr = (b * c->Hkv + hk) * c->Nk + j;
                    for (int64_t e = 0; e < c->D; ++e) d->k[kr * c->D + e] = pv;
                    for (int64_t e = 0; e < c->Dv; ++e) d->v[kr * c->Dv + e] = pv;
                }
        free(bias);
    }
    if (c->sample) {
        d->rows = xcalloc(c->Nq, 1);
        d->rows[0] = d->rows[c->Nq - 1] = 1;
        for (int s = 0; s < 40; ++s) d->rows[tu_rng_int(&r, 0, c->Nq - 1)] = 1;
    }
}

static int64_t g_cases_run;

/* Builds the data of c, runs it on every path, judges it. */
static void run_scase(tu_group *g, const scase *c, const char *replay)
{
    char desc[1024];
    describe(c, replay, desc, sizeof desc);
    sdata d;
    sdata_make(&d, c);
    sj_case jc;
    memset(&jc, 0, sizeof jc);
    jc.B = c->B, jc.Hq = c->Hq, jc.Hkv = c->Hkv, jc.Nq = c->Nq, jc.Nk = c->Nk, jc.D = c->D, jc.Dv = c->Dv;
    jc.scale = c->scale;
    jc.causal = c->causal;
    jc.mask[0] = d.mview[0], jc.mask[1] = d.mview[1];
    jc.q = d.q, jc.k = d.k, jc.v = d.v, jc.dout = d.dout;
    jc.rows = d.rows;
    jc.weights = !c->sample && c->B * c->Hq * c->Nq * c->Nk <= (1 << 20);
    jc.backward = c->backward && !c->sample;
    jc.modes_all = true;
    jc.bnhd = c->bnhd;
    g_cases_run++;
    if (g->suite && g->suite->verbose) tu_group_note(g, "%s", desc);
    sj_run(g, &jc, desc);
    sdata_free(&d);
}

static scase base_case(uint64_t seed)
{
    scase c;
    memset(&c, 0, sizeof c);
    c.seed = seed;
    c.B = c.Hq = c.Hkv = 1;
    c.qmag = c.kmag = c.vmag = c.dmag = 1.0;
    c.backward = true;
    return c;
}

static void systematic_replay(char *buf, size_t n, const char *group)
{
    snprintf(buf, n, "./test_stress --seed 0x%" PRIx64 " --group %s%s", g_seed, group,
             g_full ? " (ATTN_STRESS_FULL=1)" : "");
}

/* ------------------------------------------------------------ exact repros */

/* One small case from explicit values (contiguous). */
typedef struct {
    int64_t B, Hq, Hkv, Nq, Nk, D, Dv;
    float scale;
    attn_causal causal;
    const double *q, *k, *v, *dout;
    const attn_tensor *mask[2];
} explicit_case;

static sj_result run_explicit(tu_group *g, const explicit_case *e, const char *desc)
{
    sj_case jc;
    memset(&jc, 0, sizeof jc);
    jc.B = e->B, jc.Hq = e->Hq, jc.Hkv = e->Hkv, jc.Nq = e->Nq, jc.Nk = e->Nk, jc.D = e->D, jc.Dv = e->Dv;
    jc.scale = e->scale, jc.causal = e->causal;
    jc.mask[0] = e->mask[0], jc.mask[1] = e->mask[1];
    jc.q = e->q, jc.k = e->k, jc.v = e->v, jc.dout = e->dout;
    jc.weights = true, jc.backward = e->dout != NULL, jc.modes_all = true;
    return sj_run(g, &jc, desc);
}

/* Library forward + backward on one path with explicit float inputs;
 * returns the status of the first failing call. */
typedef struct {
    float out[64], lse[16], dq[64], dk[64], dv[64];
} small_result;

static attn_status small_call(const sj_path *p, const explicit_case *e, int mode, small_result *r,
                              attn_error *err)
{
    /* mode 0: recompute; 1: out+lse+stats; 2: out+lse */
    float q[64], k[64], v[64], d[64], st[32];
    for (int64_t i = 0; i < e->B * e->Hq * e->Nq * e->D; ++i) q[i] = (float)e->q[i];
    for (int64_t i = 0; i < e->B * e->Hkv * e->Nk * e->D; ++i) k[i] = (float)e->k[i];
    for (int64_t i = 0; i < e->B * e->Hkv * e->Nk * e->Dv; ++i) v[i] = (float)e->v[i];
    for (int64_t i = 0; i < e->B * e->Hq * e->Nq * e->Dv; ++i) d[i] = e->dout ? (float)e->dout[i] : 1.0f;
    attn_tensor Q = attn_tensor_4d(q, e->B, e->Hq, e->Nq, e->D), K = attn_tensor_4d(k, e->B, e->Hkv, e->Nk, e->D),
                V = attn_tensor_4d(v, e->B, e->Hkv, e->Nk, e->Dv), O = attn_tensor_4d(r->out, e->B, e->Hq, e->Nq, e->Dv),
                L = attn_tensor_3d(r->lse, e->B, e->Hq, e->Nq), dO = attn_tensor_4d(d, e->B, e->Hq, e->Nq, e->Dv),
                dQ = attn_tensor_4d(r->dq, e->B, e->Hq, e->Nq, e->D), dK = attn_tensor_4d(r->dk, e->B, e->Hkv, e->Nk, e->D),
                dV = attn_tensor_4d(r->dv, e->B, e->Hkv, e->Nk, e->Dv), S = attn_tensor_4d(st, e->B, e->Hq, e->Nq, 2);
    attn_sdpa_opts o = attn_sdpa_opts_default();
    o.scale = e->scale, o.causal = e->causal, o.path = p->path, o.num_threads = 1;
    o.mask[0] = e->mask[0], o.mask[1] = e->mask[1];
    sj_select(p);
    if (mode == 1) o.softmax_stats = &S;
    attn_status s = attn_sdpa(&Q, &K, &V, &O, &L, NULL, &o, err);
    if (s == ATTN_OK)
        s = attn_sdpa_backward(&Q, &K, &V, mode ? &O : NULL, mode ? &L : NULL, &dO, &dQ, &dK, &dV, &o, err);
    unsetenv("ATTN_ARCH");
    return s;
}

static const char *const mode_label[3] = {"recompute", "out+lse+stats", "out+lse"};

/* Defect 1: one key, D = 1, scale 0.3, logits 30 .. 3e7: dV must equal dO
 * exactly (P = 1), dQ = dK = 0; plus the random Q/K of size 30 cases. */
static void group_defect1(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "defect1 backward P vs rounded max/LSE");
    sj_path paths[SJ_MAX_PATHS];
    const int np = sj_paths(paths);
    const double logits[] = {30, 3e3, 3e5, 3.3e6, 3e7};
    for (int li = 0; li < 5; ++li) {
        const double q[1] = {1.0}, k[1] = {f32(logits[li] / 0.3)}, v[1] = {1.0}, dout[1] = {1.0};
        const explicit_case e = {1, 1, 1, 1, 1, 1, 1, 0.3f, ATTN_CAUSAL_NONE, q, k, v, dout, {0, 0}};
        for (int pi = 0; pi < np; ++pi)
            for (int mode = 0; mode < 3; ++mode) {
                small_result r;
                attn_error err = {0};
                attn_status st = small_call(&paths[pi], &e, mode, &r, &err);
                if (st != ATTN_OK) {
                    tu_group_fail(&g, "%s %s logit %g: status %s: %s", paths[pi].name, mode_label[mode],
                                  logits[li], attn_status_string(st), err.message);
                    continue;
                }
                /* dV == dO exactly: with one key P = exp(x - x) = 1. In the
                 * out+lse mode lse = x + log 1 = x exactly as well. */
                tu_check(&g, r.dv[0] == 1.0f && r.dq[0] == 0.0f && r.dk[0] == 0.0f && r.out[0] == 1.0f,
                         "%s %s: one key, scale 0.3, logit %g: dv %.9g (want 1 exactly), dq %.9g dk "
                         "%.9g (want 0), out %.9g | replay: ./test_stress --group defect1",
                         paths[pi].name, mode_label[mode], logits[li], (double)r.dv[0],
                         (double)r.dq[0], (double)r.dk[0], (double)r.out[0]);
            }
    }
    /* Random Q/K with entries of size 30, D = 128; and scale 10. */
    for (int variant = 0; variant < 2; ++variant) {
        scase c = base_case(g_seed ^ (0xD1ull + (uint64_t)variant));
        c.Hq = 2, c.Hkv = 1, c.Nq = 48, c.Nk = 80;
        if (variant == 0) c.D = c.Dv = 128, c.qmag = c.kmag = 30.0;
        else c.D = 16, c.Dv = 16, c.scale = 10.0f;
        char rp[128];
        systematic_replay(rp, sizeof rp, "defect1");
        run_scase(&g, &c, rp);
    }
    tu_group_end(&g);
}

/* Defect 2: one key with finite logits >= 2.4e9 (up to 1e38): out == v. */
static void group_defect2(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "defect2 forward for huge finite logits");
    sj_path paths[SJ_MAX_PATHS];
    const int np = sj_paths(paths);
    const double logits[] = {2.4e9, 3e9, 1e12, 1e20, 1e30, 1e38};
    for (int li = 0; li < 6; ++li) {
        /* q·k·0.3 = logit without overflowing the float inputs. */
        const double qv = logits[li] > 1e30 ? 1e19 : 1.0;
        const double q[1] = {qv}, k[1] = {f32(logits[li] / (0.3 * qv))}, v[1] = {1.5}, dout[1] = {0.75};
        const explicit_case e = {1, 1, 1, 1, 1, 1, 1, 0.3f, ATTN_CAUSAL_NONE, q, k, v, dout, {0, 0}};
        for (int pi = 0; pi < np; ++pi) {
            small_result r;
            attn_error err = {0};
            attn_status st = small_call(&paths[pi], &e, 0, &r, &err);
            if (st != ATTN_OK) {
                tu_group_fail(&g, "%s logit %g: status %s: %s", paths[pi].name, logits[li],
                              attn_status_string(st), err.message);
                continue;
            }
            const double want_lse = (double)(0.3f * (float)(q[0] * k[0]));
            tu_check(&g, r.out[0] == 1.5f && isfinite(r.lse[0]) &&
                         fabs((double)r.lse[0] - want_lse) <= 1e-6 * fabs(want_lse),
                     "%s: one key, scale 0.3, logit %g: out %.9g (want v = 1.5), lse %.9g (want "
                     "%.9g) | replay: ./test_stress --group defect2",
                     paths[pi].name, logits[li], (double)r.out[0], (double)r.lse[0], want_lse);
            tu_check(&g, r.dv[0] == 0.75f && r.dq[0] == 0.0f && r.dk[0] == 0.0f,
                     "%s: one key, logit %g: dv %.9g (want dO = 0.75), dq %.9g, dk %.9g (want 0) "
                     "| replay: ./test_stress --group defect2",
                     paths[pi].name, logits[li], (double)r.dv[0], (double)r.dq[0], (double)r.dk[0]);
        }
        char desc[256];
        snprintf(desc, sizeof desc, "one key, scale 0.3, logit %g | replay: ./test_stress --group defect2", logits[li]);
        run_explicit(&g, &e, desc);
    }
    tu_group_end(&g);
}

/* Defect 3: four keys whose mask values are one constant c: dV = 0.25 each,
 * dQ correct. Equal logits, distinct keys (so dQ != 0). */
static void group_defect3(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "defect3 constant huge-negative mask rows");
    sj_path paths[SJ_MAX_PATHS];
    const int np = sj_paths(paths);
    const double cs[] = {-1e6, -1e30, FINFO_MIN};
    for (int ci = 0; ci < 3; ++ci) {
        tu_tensor m;
        const int64_t shape[2] = {1, 4};
        tu_tensor_alloc(&m, ATTN_F32, 2, shape, NULL);
        tu_fill_value(&m.view, cs[ci]);
        const double q[2] = {1.0, 0.0}, k[8] = {0.5, -1.5, 0.5, -0.5, 0.5, 0.5, 0.5, 1.5};
        const double v[4] = {1, 2, 3, 4}, dout[1] = {1.0};
        const explicit_case e = {1, 1, 1, 1, 4, 2, 1, 0.0f, ATTN_CAUSAL_NONE, q, k, v, dout, {&m.view, 0}};
        for (int pi = 0; pi < np; ++pi)
            for (int mode = 0; mode < 3; ++mode) {
                small_result r;
                attn_error err = {0};
                attn_status st = small_call(&paths[pi], &e, mode, &r, &err);
                if (st != ATTN_OK) {
                    tu_group_fail(&g, "%s %s c=%g: status %s: %s", paths[pi].name, mode_label[mode],
                                  cs[ci], attn_status_string(st), err.message);
                    continue;
                }
                /* lse-only (mode 2): attn.h documents P = exp(x - lse) as
                 * exact only to ulp(lse)/2 relative, so that is the bound
                 * there (at c = -1e30 or finfo.min lse = c absorbs log 4 and
                 * the bound makes no claim beyond finiteness). */
                const double lse = cs[ci] + 0.5 / sqrt(2.0) + log(4.0);
                const double allow = 1e-6 * 0.25 + (mode == 2 ? 0.25 * rv_lse_rel_bound(lse) : 0.0);
                double worst = 0;
                for (int j = 0; j < 4; ++j) worst = fmax(worst, fabs((double)r.dv[j] - 0.25));
                tu_check(&g, worst <= allow && isfinite(worst),
                         "%s %s: mask [%g]*4: dv = [%.9g, %.9g, %.9g, %.9g], want [0.25]*4 | "
                         "replay: ./test_stress --group defect3",
                         paths[pi].name, mode_label[mode], cs[ci], (double)r.dv[0], (double)r.dv[1],
                         (double)r.dv[2], (double)r.dv[3]);
            }
        char desc[256];
        snprintf(desc, sizeof desc, "mask [%g]*4, equal logits | replay: ./test_stress --group defect3", cs[ci]);
        run_explicit(&g, &e, desc);
        tu_tensor_free(&m);
    }
    tu_group_end(&g);
}

/* Defect 4: a NaN key hidden by a bool mask [T,F,T]; +inf in q, k or a
 * float mask gives lse = +inf. */
static void group_defect4(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "defect4 hidden NaN key, +inf lse");
    sj_path paths[SJ_MAX_PATHS];
    const int np = sj_paths(paths);
    const double hidden_vals[] = {NAN, INFINITY, -INFINITY};
    for (int hv = 0; hv < 3; ++hv)
        for (int kind = 0; kind < 2; ++kind) {
            tu_tensor m;
            const int64_t shape[2] = {1, 3};
            tu_tensor_alloc(&m, kind == 0 ? ATTN_BOOL : ATTN_F32, 2, shape, NULL);
            tu_set(&m.view, 0, kind == 0 ? 1 : 0.0);
            tu_set(&m.view, 1, kind == 0 ? 0 : -INFINITY);
            tu_set(&m.view, 2, kind == 0 ? 1 : 0.0);
            const double X = hidden_vals[hv];
            const double q[8] = {0.3, -0.7, 1.1, 0.2, -0.4, 0.9, 0.05, -1.3};
            const double k[12] = {0.5, 0.1, -0.2, 0.7, X, X, X, X, -0.6, 0.4, 0.8, -0.1};
            const double v[6] = {1.0, -2.0, X, X, 0.5, 3.0};
            const double dout[4] = {0.7, -0.2, 1.3, 0.4};
            const explicit_case e = {1, 1, 1, 2, 3, 4, 2, 0.0f, ATTN_CAUSAL_NONE, q, k, v, dout, {&m.view, 0}};
            char desc[256];
            snprintf(desc, sizeof desc, "key 1 = %g hidden by %s mask [T,F,T] | replay: ./test_stress --group defect4",
                     X, kind == 0 ? "bool" : "float -inf");
            run_explicit(&g, &e, desc);
            tu_tensor_free(&m);
        }
    /* +inf in q, in k, in a float mask: torch.logsumexp gives +inf. */
    for (int where = 0; where < 3; ++where) {
        tu_tensor m;
        const int64_t shape[2] = {1, 3};
        tu_tensor_alloc(&m, ATTN_F32, 2, shape, NULL);
        tu_fill_value(&m.view, 0.0);
        if (where == 2) tu_set(&m.view, 1, INFINITY);
        const double q[1] = {where == 0 ? INFINITY : 1.0};
        const double k[3] = {0.5, where == 1 ? INFINITY : 2.0, 0.25};
        const double v[3] = {1, 2, 3};
        for (int pi = 0; pi < np; ++pi) {
            float o[1], l[1];
            float qf = (float)q[0], kf[3] = {(float)k[0], (float)k[1], (float)k[2]},
                  vf[3] = {1, 2, 3};
            attn_tensor Q = attn_tensor_4d(&qf, 1, 1, 1, 1), K = attn_tensor_4d(kf, 1, 1, 3, 1),
                        V = attn_tensor_4d(vf, 1, 1, 3, 1), O = attn_tensor_4d(o, 1, 1, 1, 1),
                        L = attn_tensor_3d(l, 1, 1, 1);
            attn_sdpa_opts opts = attn_sdpa_opts_default();
            opts.path = paths[pi].path, opts.num_threads = 1;
            if (where == 2) opts.mask[0] = &m.view;
            sj_select(&paths[pi]);
            attn_error err = {0};
            attn_status st = attn_sdpa(&Q, &K, &V, &O, &L, NULL, &opts, &err);
            unsetenv("ATTN_ARCH");
            static const char *const wn[3] = {"q", "k", "float mask"};
            tu_check(&g, st == ATTN_OK && l[0] == INFINITY,
                     "%s: +inf in %s: status %s, lse %.9g (want +inf as torch.logsumexp) | replay: "
                     "./test_stress --group defect4",
                     paths[pi].name, wn[where], attn_status_string(st), (double)l[0]);
        }
        (void)v;
        tu_tensor_free(&m);
    }
    tu_group_end(&g);
}

/* Defect 5: with err = NULL, a too-small workspace gives ATTN_ERR_WORKSPACE. */
static void group_defect5(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "defect5 status without attn_error");
    sj_path paths[SJ_MAX_PATHS];
    const int np = sj_paths(paths);
    enum { B = 1, H = 2, N = 70, D = 24 };
    static float q[B * H * N * D], k[B * H * N * D], v[B * H * N * D], o[B * H * N * D],
        l[B * H * N], d[B * H * N * D], dq[B * H * N * D], dk[B * H * N * D], dv[B * H * N * D];
    tu_rng r;
    tu_rng_seed(&r, g_seed ^ 0xD5);
    for (int i = 0; i < B * H * N * D; ++i)
        q[i] = (float)tu_rng_normal(&r), k[i] = (float)tu_rng_normal(&r),
        v[i] = (float)tu_rng_normal(&r), d[i] = (float)tu_rng_normal(&r);
    attn_tensor Q = attn_tensor_4d(q, B, H, N, D), K = attn_tensor_4d(k, B, H, N, D),
                V = attn_tensor_4d(v, B, H, N, D), O = attn_tensor_4d(o, B, H, N, D),
                L = attn_tensor_3d(l, B, H, N), dO = attn_tensor_4d(d, B, H, N, D),
                dQ = attn_tensor_4d(dq, B, H, N, D), dK = attn_tensor_4d(dk, B, H, N, D),
                dV = attn_tensor_4d(dv, B, H, N, D);
    for (int pi = 0; pi < np; ++pi)
        for (int backward = 0; backward < 2; ++backward) {
            sj_select(&paths[pi]);
            attn_sdpa_opts opts = attn_sdpa_opts_default();
            opts.path = paths[pi].path, opts.num_threads = 2, opts.causal = ATTN_CAUSAL_TOP_LEFT;
            size_t bytes = 0;
            attn_status st = attn_sdpa_workspace_size(&Q, &K, &V, backward, &opts, &bytes, NULL);
            if (!tu_check(&g, st == ATTN_OK && bytes > 0, "%s: workspace_size status %s bytes %zu",
                          paths[pi].name, attn_status_string(st), bytes)) {
                unsetenv("ATTN_ARCH");
                continue;
            }
            char *mem = malloc(bytes);
            const size_t sizes[2] = {bytes / 2, 1};
            for (int si = 0; si < 2; ++si) {
                opts.workspace = mem;
                opts.workspace_size = sizes[si];
                st = backward ? attn_sdpa_backward(&Q, &K, &V, NULL, NULL, &dO, &dQ, &dK, &dV, &opts, NULL)
                              : attn_sdpa(&Q, &K, &V, &O, &L, NULL, &opts, NULL);
                tu_check(&g, st == ATTN_ERR_WORKSPACE,
                         "%s %s, workspace %zu of %zu bytes, err = NULL: status %s (want %s) | "
                         "replay: ./test_stress --group defect5",
                         paths[pi].name, backward ? "backward" : "forward", sizes[si], bytes,
                         attn_status_string(st), attn_status_string(ATTN_ERR_WORKSPACE));
                attn_error err = {0};
                st = backward ? attn_sdpa_backward(&Q, &K, &V, NULL, NULL, &dO, &dQ, &dK, &dV, &opts, &err)
                              : attn_sdpa(&Q, &K, &V, &O, &L, NULL, &opts, &err);
                tu_check(&g, st == ATTN_ERR_WORKSPACE,
                         "%s %s, workspace %zu of %zu bytes, with attn_error: status %s",
                         paths[pi].name, backward ? "backward" : "forward", sizes[si], bytes,
                         attn_status_string(st));
            }
            /* and the reported size works, err = NULL */
            opts.workspace_size = bytes;
            st = backward ? attn_sdpa_backward(&Q, &K, &V, NULL, NULL, &dO, &dQ, &dK, &dV, &opts, NULL)
                          : attn_sdpa(&Q, &K, &V, &O, &L, NULL, &opts, NULL);
            tu_check(&g, st == ATTN_OK, "%s %s with the reported %zu bytes: status %s",
                     paths[pi].name, backward ? "backward" : "forward", bytes, attn_status_string(st));
            free(mem);
            unsetenv("ATTN_ARCH");
        }
    tu_group_end(&g);
}

/* ------------------------------------------------------------ systematic */

static void group_paths(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "paths");
    sj_check_paths(&g);
    sj_path p[SJ_MAX_PATHS];
    const int n = sj_paths(p);
    for (int i = 0; i < n; ++i) tu_group_note(&g, "path %d: %s", i, p[i].name);
    tu_group_pass(&g);
    tu_group_end(&g);
}

/* The float64 oracle of ref64_variants against ref64.c (no variants) and
 * against float64 finite differences. */
static void group_oracle(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "oracle");
    for (int n = 0; n < 12; ++n) {
        scase c = random_case(tu_mix(g_seed ^ (0x0AC1Eull + (uint64_t)n)));
        c.poison = false;
        fit_budget(&c, 2e5);
        sdata d;
        sdata_make(&d, &c);
        const int64_t nsc = c.B * c.Hq * c.Nq * c.Nk, no = c.B * c.Hq * c.Nq * c.Dv,
                      nq = c.B * c.Hq * c.Nq * c.D, nk = c.B * c.Hkv * c.Nk * c.D,
                      nv = c.B * c.Hkv * c.Nk * c.Dv;
        double *bias = NULL;
        if (d.mview[0] || d.mview[1]) {
            bias = xcalloc(nsc, 8);
            for (int m = 0; m < 2; ++m)
                if (d.mview[m]) ref64_add_mask(bias, c.B, c.Hq, c.Nq, c.Nk, d.mview[m]);
        }
        const double scale = c.scale != 0 ? (double)c.scale : (double)(1.0f / sqrtf((float)c.D));
        ref64_sdpa a = {c.B, c.Hq, c.Hkv, c.Nq, c.Nk, c.D, c.Dv, scale, c.causal, bias};
        rv_problem b;
        memset(&b, 0, sizeof b);
        b.B = c.B, b.Hq = c.Hq, b.Hkv = c.Hkv, b.Nq = c.Nq, b.Nk = c.Nk, b.D = c.D, b.Dv = c.Dv;
        b.scale = scale, b.causal = c.causal, b.bias = bias;
        double *o1 = xcalloc(no, 8), *o2 = xcalloc(no, 8), *g1[3], *g2[3];
        const int64_t gn[3] = {nq, nk, nv};
        for (int i = 0; i < 3; ++i) g1[i] = xcalloc(gn[i], 8), g2[i] = xcalloc(gn[i], 8);
        ref64_sdpa_forward(&a, d.q, d.k, d.v, o1, NULL, NULL);
        rv_forward64(&b, d.q, d.k, d.v, o2, NULL, NULL, NULL);
        ref64_sdpa_backward(&a, d.q, d.k, d.v, d.dout, g1[0], g1[1], g1[2]);
        rv_backward64(&b, d.q, d.k, d.v, d.dout, g2[0], g2[1], g2[2], NULL);
        double worst = 0, scale_ref = 1e-300;
        for (int64_t e = 0; e < no; ++e) worst = fmax(worst, fabs(o1[e] - o2[e])), scale_ref = fmax(scale_ref, fabs(o1[e]));
        bool ok = worst <= 1e-12 * scale_ref;
        for (int i = 0; i < 3; ++i) {
            double w = 0, sc = 1e-300;
            for (int64_t e = 0; e < gn[i]; ++e) w = fmax(w, fabs(g1[i][e] - g2[i][e])), sc = fmax(sc, fabs(g1[i][e]));
            ok &= w <= 1e-10 * sc || !(sc < INFINITY);
        }
        char desc[1024];
        describe(&c, "./test_stress --group oracle", desc, sizeof desc);
        tu_check(&g, ok, "ref64_variants disagrees with ref64 (out err %.3g of %.3g) %s", worst, scale_ref, desc);
        free(o1), free(o2), free(bias);
        for (int i = 0; i < 3; ++i) free(g1[i]), free(g2[i]);
        sdata_free(&d);
    }
    tu_group_end(&g);
}

static void group_masks(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "masks");
    char rp[128];
    systematic_replay(rp, sizeof rp, "masks");
    const double consts[] = {0.0, -INFINITY, -1e30, FINFO_MIN, -1e6};
    int n = 0;
    for (int ci = 0; ci < 5; ++ci)
        for (int causal = 0; causal < 3; ++causal) {
            scase c = base_case(tu_mix(g_seed ^ (0x3A5Cull + (uint64_t)n++)));
            c.B = 2, c.Hkv = 1, c.Hq = 2, c.Nq = 37, c.Nk = 70, c.D = 16, c.Dv = 24;
            c.causal = (attn_causal)causal;
            c.mask0 = MK_FLOAT_SPECIAL, c.special_c = consts[ci];
            if (ci == 0 && causal == 1) c.mask1 = MK_KEYPAD;
            run_scase(&g, &c, rp);
        }
    const int kinds[] = {MK_BOOL, MK_BOOL_ONE, MK_KEYPAD, MK_FLOAT, MK_ROWS_OFF};
    for (int ki = 0; ki < 5; ++ki)
        for (int second = 0; second < 2; ++second) {
            scase c = base_case(tu_mix(g_seed ^ (0x3A5Cull + (uint64_t)n++)));
            c.B = 2, c.Hkv = 2, c.Hq = 4, c.Nq = 33, c.Nk = 129, c.D = 32, c.Dv = 17;
            c.causal = (attn_causal)(ki % 3);
            c.mask0 = kinds[ki];
            if (second) c.mask1 = kinds[ki] == MK_FLOAT ? MK_BOOL_ONE : MK_FLOAT;
            c.qmag = c.kmag = 2.0;
            run_scase(&g, &c, rp);
        }
    tu_group_end(&g);
}

static void group_hidden_nonfinite(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "hidden-nonfinite");
    char rp[128];
    systematic_replay(rp, sizeof rp, "hidden-nonfinite");
    const int kinds[] = {MK_KEYPAD, MK_FLOAT_SPECIAL, MK_NONE, MK_BOOL};
    int n = 0;
    for (int ki = 0; ki < 4; ++ki)
        for (int causal = 0; causal < 3; ++causal) {
            scase c = base_case(tu_mix(g_seed ^ (0x4A4Eull + (uint64_t)n++)));
            c.B = 2, c.Hkv = 1, c.Hq = 2, c.Nq = 40, c.Nk = 100, c.D = 20, c.Dv = 20;
            if (causal == 1) c.Nq = 70; /* top-left hides keys >= Nq */
            c.causal = (attn_causal)causal;
            c.mask0 = kinds[ki];
            if (kinds[ki] == MK_FLOAT_SPECIAL) c.special_c = 0.0;
            if (kinds[ki] == MK_BOOL) c.mask1 = MK_KEYPAD;
            c.poison = true;
            run_scase(&g, &c, rp);
        }
    tu_group_end(&g);
}

static void group_dims(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "dims");
    char rp[128];
    systematic_replay(rp, sizeof rp, "dims");
    for (int di = 0; di < NDIMS; ++di)
        for (int vi = 0; vi < 2; ++vi) {
            scase c = base_case(tu_mix(g_seed ^ (0xD135ull + (uint64_t)(di * 2 + vi))));
            c.D = k_dims[di];
            c.Dv = vi == 0 ? c.D : k_dims[(di + 5) % NDIMS];
            c.Hq = 2, c.Hkv = 1, c.Nq = g_full ? 97 : 33, c.Nk = g_full ? 161 : 65;
            c.causal = (attn_causal)(di % 3);
            c.mask0 = di % 2 ? MK_BOOL : MK_NONE;
            c.qmag = c.kmag = 1.5;
            run_scase(&g, &c, rp);
        }
    tu_group_end(&g);
}

static void group_gqa(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "gqa");
    char rp[128];
    systematic_replay(rp, sizeof rp, "gqa");
    for (int ratio = 1; ratio <= 16; ++ratio) {
        if (!g_full && ratio > 4 && ratio != 7 && ratio != 8 && ratio != 16) continue;
        scase c = base_case(tu_mix(g_seed ^ (0x6A0ull + (uint64_t)ratio)));
        c.Hkv = ratio % 2 ? 1 : 2;
        c.Hq = c.Hkv * ratio;
        c.Nq = 19, c.Nk = 45, c.D = 16, c.Dv = 8;
        c.causal = (attn_causal)(ratio % 3);
        c.mask0 = ratio % 4 == 0 ? MK_FLOAT : MK_NONE;
        run_scase(&g, &c, rp);
    }
    tu_group_end(&g);
}

static void group_alignment(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "alignment");
    char rp[128];
    systematic_replay(rp, sizeof rp, "alignment");
    const int64_t pairs[][2] = {{1, 1}, {1, 77}, {1, 300}, {5, 77}, {77, 5}, {64, 65},
                                {65, 64}, {130, 40}, {40, 130}, {200, 200}};
    int n = 0;
    for (int pi = 0; pi < 10; ++pi)
        for (int causal = 0; causal < 3; ++causal) {
            scase c = base_case(tu_mix(g_seed ^ (0xA11Eull + (uint64_t)n++)));
            c.Nq = pairs[pi][0], c.Nk = pairs[pi][1];
            c.Hq = 2, c.Hkv = 1, c.D = 24, c.Dv = 40;
            c.causal = (attn_causal)causal;
            c.mask0 = pi % 3 == 0 ? MK_KEYPAD : MK_NONE;
            run_scase(&g, &c, rp);
        }
    tu_group_end(&g);
}

static void group_magnitudes(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "magnitudes");
    char rp[128];
    systematic_replay(rp, sizeof rp, "magnitudes");
    const double mags[] = {1e-4, 1e-2, 1.0, 30.0, 1e3};
    const float scales[] = {0.0f, 0.01f, 1.0f, 10.0f};
    int n = 0;
    for (int mi = 0; mi < 5; ++mi)
        for (int si = 0; si < 4; ++si) {
            if (!g_full && (mi + si) % 2) continue;
            scase c = base_case(tu_mix(g_seed ^ (0x3A6ull + (uint64_t)n++)));
            c.Hq = 2, c.Hkv = 1, c.Nq = 30, c.Nk = 70, c.D = 32, c.Dv = 16;
            c.qmag = c.kmag = mags[mi];
            c.vmag = mags[(mi + 2) % 5], c.dmag = mags[(mi + 3) % 5];
            c.scale = scales[si];
            c.causal = (attn_causal)(n % 3);
            run_scase(&g, &c, rp);
        }
    /* logit gaps > 88 and rows of exactly equal logits */
    for (int v = 0; v < 6; ++v) {
        scase c = base_case(tu_mix(g_seed ^ (0x6A9ull + (uint64_t)v)));
        c.Hq = 2, c.Hkv = 2, c.Nq = 50, c.Nk = 90, c.D = 16, c.Dv = 16;
        c.qmag = c.kmag = 2.0;
        c.gap = v < 3 ? 100.0 * (v + 1) : 0.0;
        c.equal_rows = v >= 2;
        c.mask0 = v == 5 ? MK_FLOAT : MK_NONE;
        c.causal = (attn_causal)(v % 3);
        run_scase(&g, &c, rp);
    }
    tu_group_end(&g);
}

static void group_large_n(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "large-n");
    char rp[128];
    systematic_replay(rp, sizeof rp, "large-n");
    typedef struct { int64_t Nq, Nk, D, Dv; attn_causal causal; int mask; bool sample; bool full_only; } big;
    const big cases[] = {
        {2048, 8192, 16, 16, ATTN_CAUSAL_NONE, MK_NONE, true, false},
        {8192, 8192, 16, 16, ATTN_CAUSAL_NONE, MK_NONE, true, true},
        {8192, 8192, 64, 64, ATTN_CAUSAL_BOTTOM_RIGHT, MK_KEYPAD, true, true},
        {4096, 4096, 128, 128, ATTN_CAUSAL_TOP_LEFT, MK_NONE, true, true},
        {1, 8192, 64, 64, ATTN_CAUSAL_NONE, MK_KEYPAD, false, false},
        {64, 8192, 32, 16, ATTN_CAUSAL_BOTTOM_RIGHT, MK_NONE, false, false},
        {8192, 64, 32, 32, ATTN_CAUSAL_TOP_LEFT, MK_NONE, false, false},
        {2048, 2048, 64, 64, ATTN_CAUSAL_TOP_LEFT, MK_FLOAT, false, true},
        {8192, 8192, 16, 16, ATTN_CAUSAL_TOP_LEFT, MK_NONE, false, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        if (cases[i].full_only && !g_full) continue;
        scase c = base_case(tu_mix(g_seed ^ (0xB16ull + (uint64_t)i)));
        c.Nq = cases[i].Nq, c.Nk = cases[i].Nk, c.D = cases[i].D, c.Dv = cases[i].Dv;
        c.causal = cases[i].causal, c.mask0 = cases[i].mask, c.sample = cases[i].sample;
        c.qmag = c.kmag = 1.2;
        run_scase(&g, &c, rp);
    }
    tu_group_end(&g);
}

static void group_random(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "random");
    const int64_t cases = opt->cases >= 0 ? opt->cases : g_full ? 1500 : 120;
    tu_rng r;
    tu_rng_seed(&r, g_seed ^ 0x4A4D0Dull);
    for (int64_t n = 0; n < cases; ++n) {
        const uint64_t seed = tu_rng_u64(&r);
        scase c = random_case(seed);
        char rp[128];
        snprintf(rp, sizeof rp, "%sATTN_TEST_CASE=0x%016" PRIx64 " ./test_stress",
                 g_full ? "ATTN_STRESS_FULL=1 " : "", seed);
        run_scase(&g, &c, rp);
    }
    tu_group_end(&g);
}

int main(int argc, char **argv)
{
    tu_prefer_passive_openmp(argv);
    tu_install_crash_handler();
    tu_options opt;
    if (!tu_parse_options(argc, argv, DEFAULT_SEED, &opt)) return 2;
    const char *full = getenv("ATTN_STRESS_FULL");
    g_full = full && *full && strcmp(full, "0") != 0 && !opt.quick;
    g_seed = opt.seed;
    const double t0 = now_seconds();
    tu_suite s = {0};
    s.verbose = opt.verbose;
    sj_path paths[SJ_MAX_PATHS];
    const int np = sj_paths(paths);
    printf("test_stress: %s mode, seed 0x%" PRIx64 ", paths:", g_full ? "full" : "quick", g_seed);
    for (int i = 0; i < np; ++i) printf(" %s", paths[i].name);
    printf("\n");
    fflush(stdout);
    if (opt.replay) {
        tu_group g;
        tu_group_begin(&g, &s, "replay");
        scase c = random_case(opt.replay_seed);
        char rp[128];
        snprintf(rp, sizeof rp, "ATTN_TEST_CASE=0x%016" PRIx64 " ./test_stress", opt.replay_seed);
        s.verbose = 1;
        run_scase(&g, &c, rp);
        tu_group_end(&g);
        return tu_suite_finish(&s);
    }
    if (tu_group_selected(&opt, "paths")) group_paths(&s);
    if (tu_group_selected(&opt, "oracle")) group_oracle(&s);
    if (tu_group_selected(&opt, "defect1")) group_defect1(&s);
    if (tu_group_selected(&opt, "defect2")) group_defect2(&s);
    if (tu_group_selected(&opt, "defect3")) group_defect3(&s);
    if (tu_group_selected(&opt, "defect4")) group_defect4(&s);
    if (tu_group_selected(&opt, "defect5")) group_defect5(&s);
    if (tu_group_selected(&opt, "masks")) group_masks(&s);
    if (tu_group_selected(&opt, "hidden-nonfinite")) group_hidden_nonfinite(&s);
    if (tu_group_selected(&opt, "dims")) group_dims(&s);
    if (tu_group_selected(&opt, "gqa")) group_gqa(&s);
    if (tu_group_selected(&opt, "alignment")) group_alignment(&s);
    if (tu_group_selected(&opt, "magnitudes")) group_magnitudes(&s);
    if (tu_group_selected(&opt, "large-n")) group_large_n(&s);
    if (tu_group_selected(&opt, "random")) group_random(&s, &opt);
    printf("test_stress: %" PRId64 " generated cases, %s mode, run time %.1f s\n", g_cases_run,
           g_full ? "full" : "quick", now_seconds() - t0);
    return tu_suite_finish(&s);
}
