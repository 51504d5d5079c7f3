/*
 * test_sdpa — the table-driven SDPA harness.
 *
 * Every case draws inputs from a seed, computes the float64 oracle
 * (tests/support/ref64.c, written from the math) and runs the library's
 * float32 paths — ATTN_PATH_REFERENCE and ATTN_PATH_FUSED — forward and
 * backward, comparing out, lse, weights, dq, dk and dv element by element.
 * A fused path that answers ATTN_ERR_UNSUPPORTED is reported as skipped,
 * never as passed.
 *
 * Tolerances. Float32 rounding of element x is of order
 *     eps · kappa · mag(x),   kappa = 1 + max |score term|
 * where mag(x) is the same sum as x with every term taken in absolute value
 * (ref64_sdpa_magnitudes) and the score term is scale·Σ|q_d k_d| + |mask|
 * (it bounds the absolute error of a score, hence the relative error of a
 * probability). An element passes when |got - want| <= TOL_UNITS · eps ·
 * kappa · mag(x); for lse the magnitude is 1 + log(1+Nk)/kappa. Elements whose
 * magnitude is exactly 0 (fully masked rows, keys nobody sees, masked
 * weights) must therefore be exactly 0, and an lse of -inf exactly -inf.
 * "Error units" below are |got - want| / (eps · kappa · mag).
 *
 * Accuracy target: whenever the fused path runs, its error in
 * units must be <= 2 × the reference path's error on the same case (+ a
 * floor of FUSED_FLOOR_UNITS units), per case and averaged over the suite.
 *
 * Groups: argument validation, oracle finite differences (proves ref64's
 * backward), degenerate sizes, causal alignments, masks and broadcasts, fully
 * masked rows, strided views, backward options, random configurations
 * (several hundred), determinism (threads 1/2/3 and reruns, memcmp),
 * workspace, library directional derivatives, and the accuracy summary.
 * Every output view is compared element by element (a NaN anywhere fails),
 * its padding must be untouched, and the inputs must be left unchanged.
 *
 * Usage: test_sdpa [--seed S] [--cases N] [--case SEED] [--group NAME] [--quick] [-v]
 *   (environment: ATTN_TEST_SEED, ATTN_TEST_CASES, ATTN_TEST_CASE,
 *    ATTN_TEST_GROUP, ATTN_TEST_QUICK=1, ATTN_TEST_VERBOSE=1, and
 *    ATTN_TEST_PATHS=reference|fused to run one path only).
 * A failing case prints its seed; `--case SEED` replays a random
 * configuration, `--seed BASE --group NAME` replays a systematic group.
 */
#include "attn.h"
#include "ref64.h"
#include "testutil.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define EPS32 ((double)FLT_EPSILON)
#define DEFAULT_SEED 0x5eedA77Eull
#define DEFAULT_RANDOM_CASES 400
#define QUICK_RANDOM_CASES 60

/* ------------------------------------------------------------ quantities */

enum { Q_OUT, Q_LSE, Q_WEIGHTS, Q_DQ, Q_DK, Q_DV, NQ };
static const char *const quantity_name[NQ] = {"out", "lse", "weights", "dq", "dk", "dv"};

/* Allowed error in units of eps·kappa·mag per quantity (see the header
 * comment). The plain float32 path stays well below these; see
 * report_accuracy for the measured distribution. */
static const double TOL_UNITS[NQ] = {32, 32, 32, 16, 16, 32};
/* Absolute floor (in units) of the fused-vs-reference accuracy assertion. */
#define FUSED_FLOOR_UNITS 1.0

enum { PATH_REF, PATH_FUSED, NPATHS };
static const attn_path path_id[NPATHS] = {ATTN_PATH_REFERENCE, ATTN_PATH_FUSED};
static const char *const path_name[NPATHS] = {"reference", "fused"};
static const char *const FUSED_SKIP = "fused path not built";

/* ------------------------------------------------------------ case table */

typedef enum {
    MASK_NQ_NK,      /* (Nq,Nk) */
    MASK_1_NK,       /* (1,Nk) */
    MASK_NK,         /* (Nk) */
    MASK_B_1_NQ_NK,  /* (B,1,Nq,Nk) */
    MASK_B_HQ_NQ_NK, /* (B,Hq,Nq,Nk) */
    MASK_1_HQ_1_NK,  /* (1,Hq,1,Nk) */
    MASK_B_1_1_NK,   /* (B,1,1,Nk): key padding */
    MASK_HQ_NQ_NK,   /* (Hq,Nq,Nk) */
    MASK_NQ_1,       /* (Nq,1): whole rows on or off */
    MASK_EXPANDED,   /* (B,Hq,Nq,Nk) view with stride 0 over B and Hq */
    MASK_FORMS
} mask_form;
static const char *const mask_form_name[MASK_FORMS] = {
    "(Nq,Nk)", "(1,Nk)", "(Nk)", "(B,1,Nq,Nk)", "(B,Hq,Nq,Nk)",
    "(1,Hq,1,Nk)", "(B,1,1,Nk)", "(Hq,Nq,Nk)", "(Nq,1)", "(B,Hq,Nq,Nk)/stride0"};

/* Elements a mask blocks whatever the dice say. A mask "row" is a run of
 * its last dimension (usually the keys). */
typedef enum {
    FORCE_NONE,
    FORCE_FIRST_ROW, /* the first mask row blocks everything */
    FORCE_FIRST_KEY, /* element 0 of every mask row */
    FORCE_LAST_KEY,  /* the last element of every mask row */
} mask_force;

typedef struct {
    bool present;
    attn_dtype dtype;  /* ATTN_BOOL (true = attend) or ATTN_F32 (added) */
    mask_form form;
    double p_attend;   /* chance an element lets attention through */
    double p_empty;    /* chance a whole mask row blocks everything */
    bool strided;      /* random permuted/padded/flipped layout */
    mask_force force;
} mask_spec;

typedef enum { LAYOUT_CONTIGUOUS, LAYOUT_BNHD, LAYOUT_RANDOM, LAYOUT_MIXED } layout_mode;
static const char *const layout_name[] = {"contiguous", "bnhd", "random", "mixed"};

/* What attn_sdpa_backward receives for out and lse. */
typedef enum { BWD_OUT_LSE, BWD_NONE, BWD_OUT_ONLY, BWD_LSE_ONLY } bwd_inputs;
static const char *const bwd_name[] = {"out+lse", "recompute", "out-only", "lse-only"};

typedef struct {
    uint64_t seed; /* data, layouts */
    int64_t B, Hq, Hkv, Nq, Nk, D, Dv;
    float scale; /* 0: default 1/sqrt(D) */
    attn_causal causal;
    mask_spec mask[ATTN_SDPA_MAX_MASKS];
    layout_mode layout;
    double gain; /* stddev of q and k entries: large gains give large logits */
    bool want_lse, want_weights;
    bool backward;
    bwd_inputs bwd_in;
    bool want_dq, want_dk, want_dv;
    int threads;
} sdpa_case;

static const char *causal_name(attn_causal c)
{
    return c == ATTN_CAUSAL_TOP_LEFT ? "top-left" : c == ATTN_CAUSAL_BOTTOM_RIGHT ? "bottom-right" : "none";
}

static void describe_case(const sdpa_case *c, char *buf, size_t size)
{
    char masks[2][96];
    for (int m = 0; m < ATTN_SDPA_MAX_MASKS; ++m) {
        const mask_spec *s = &c->mask[m];
        if (!s->present)
            snprintf(masks[m], sizeof masks[m], "-");
        else
            snprintf(masks[m], sizeof masks[m], "%s %s attend=%.2g empty=%.2g%s",
                     s->dtype == ATTN_BOOL ? "bool" : "float", mask_form_name[s->form],
                     s->p_attend, s->p_empty, s->strided ? " strided" : "");
    }
    char scale[32];
    if (c->scale == 0.0f)
        snprintf(scale, sizeof scale, "default");
    else
        snprintf(scale, sizeof scale, "%.9g", (double)c->scale);
    snprintf(buf, size,
             "B=%" PRId64 " Hq=%" PRId64 " Hkv=%" PRId64 " Nq=%" PRId64 " Nk=%" PRId64
             " D=%" PRId64 " Dv=%" PRId64 " scale=%s causal=%s mask0=[%s] mask1=[%s] "
             "layout=%s gain=%g lse=%d weights=%d backward=%s dq/dk/dv=%d/%d/%d threads=%d",
             c->B, c->Hq, c->Hkv, c->Nq, c->Nk, c->D, c->Dv, scale, causal_name(c->causal),
             masks[0], masks[1], layout_name[c->layout], c->gain, c->want_lse, c->want_weights,
             c->backward ? bwd_name[c->bwd_in] : "no", c->want_dq, c->want_dk, c->want_dv,
             c->threads);
}

static mask_spec random_mask(tu_rng *r)
{
    static const double attend[] = {0.95, 0.8, 0.5, 0.2};
    mask_spec m;
    m.present = true;
    m.dtype = tu_rng_chance(r, 0.5) ? ATTN_BOOL : ATTN_F32;
    m.form = (mask_form)tu_rng_int(r, 0, MASK_FORMS - 1);
    m.p_attend = attend[tu_rng_int(r, 0, 3)];
    m.p_empty = tu_rng_chance(r, 0.3) ? 0.25 : 0.0;
    m.strided = tu_rng_chance(r, 0.4);
    m.force = FORCE_NONE;
    return m;
}

/* Shrinks the case until B·Hq·Nq·Nk·(D+Dv+2) <= budget, keeping its
 * character (GQA ratio first, odd sizes where possible). */
static void fit_budget(sdpa_case *c, double budget)
{
    for (;;) {
        double work = (double)c->B * c->Hq * c->Nq * c->Nk * (double)(c->D + c->Dv + 2);
        if (work <= budget) return;
        int64_t group = c->Hq / c->Hkv;
        if (c->B > 1) c->B--;
        else if (c->Hkv > 1) c->Hkv--;
        else if (group > 2) group--;
        else if (c->Nq >= c->Nk && c->Nq > 1) c->Nq = c->Nq / 2 + (c->Nq > 2);
        else if (c->Nk > 1) c->Nk = c->Nk / 2 + (c->Nk > 2);
        else if (c->D > 1) c->D = c->D / 2;
        else if (c->Dv > 1) c->Dv = c->Dv / 2;
        else return;
        c->Hq = c->Hkv * group;
    }
}

/* A random configuration: everything the case describes derives from seed,
 * so `--case seed` replays it exactly. */
static sdpa_case random_case(uint64_t seed)
{
    static const int64_t lengths[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33,
                                      47, 63, 64, 65, 100, 127, 129};
    static const int64_t dims[] = {1, 2, 3, 4, 8, 16, 32, 64, 96, 128, 130};
    static const int64_t batches[] = {1, 1, 2, 3}, heads[] = {1, 1, 2, 3}, groups[] = {1, 2, 3, 4};
    static const double gains[] = {1.0, 1.0, 1.0, 0.1, 3.0};
    tu_rng r;
    tu_rng_seed(&r, seed);
    sdpa_case c;
    memset(&c, 0, sizeof c);
    c.seed = seed;
    c.B = tu_rng_pick(&r, batches, 4);
    c.Hkv = tu_rng_pick(&r, heads, 4);
    c.Hq = c.Hkv * tu_rng_pick(&r, groups, 4);
    c.Nq = tu_rng_pick(&r, lengths, 21);
    c.Nk = tu_rng_chance(&r, 0.25) ? c.Nq : tu_rng_pick(&r, lengths, 21);
    c.D = tu_rng_chance(&r, 0.4) ? tu_rng_pick(&r, dims, 11) : tu_rng_int(&r, 1, 130);
    c.Dv = tu_rng_chance(&r, 0.5) ? c.D
           : tu_rng_chance(&r, 0.5) ? tu_rng_pick(&r, dims, 11) : tu_rng_int(&r, 1, 130);
    if (tu_rng_chance(&r, 0.35))
        c.scale = (float)(tu_rng_range(&r, 0.05, 2.0) / sqrt((double)c.D));
    c.causal = (attn_causal)(tu_rng_chance(&r, 0.5) ? 0 : tu_rng_int(&r, 1, 2));
    int nmask = tu_rng_chance(&r, 0.4) ? 0 : tu_rng_chance(&r, 0.66) ? 1 : 2;
    for (int m = 0; m < nmask; ++m) c.mask[m] = random_mask(&r);
    double lay = tu_rng_uniform(&r);
    c.layout = lay < 0.2 ? LAYOUT_CONTIGUOUS : lay < 0.35 ? LAYOUT_BNHD : lay < 0.5 ? LAYOUT_RANDOM : LAYOUT_MIXED;
    c.gain = gains[tu_rng_int(&r, 0, 4)];
    c.want_lse = tu_rng_chance(&r, 0.7);
    c.want_weights = tu_rng_chance(&r, 0.5);
    c.backward = tu_rng_chance(&r, 0.85);
    c.bwd_in = (bwd_inputs)tu_rng_int(&r, 0, 3);
    c.want_dq = tu_rng_chance(&r, 0.85);
    c.want_dk = tu_rng_chance(&r, 0.85);
    c.want_dv = tu_rng_chance(&r, 0.85);
    c.threads = (int)tu_rng_int(&r, 1, 3);
    if (c.bwd_in == BWD_OUT_LSE || c.bwd_in == BWD_LSE_ONLY) c.want_lse = true;
    fit_budget(&c, 6e5);
    return c;
}

/* A small random configuration for systematic groups (which then override
 * the property they are about). */
static sdpa_case small_case(uint64_t seed)
{
    sdpa_case c = random_case(seed);
    tu_rng r;
    tu_rng_seed(&r, seed ^ 0x5A11ull);
    c.Nq = tu_rng_int(&r, 1, 24);
    c.Nk = tu_rng_int(&r, 1, 24);
    c.D = tu_rng_int(&r, 1, 40);
    c.Dv = tu_rng_chance(&r, 0.5) ? c.D : tu_rng_int(&r, 1, 40);
    c.want_lse = c.want_weights = c.backward = true;
    c.want_dq = c.want_dk = c.want_dv = true;
    fit_budget(&c, 1.5e5);
    return c;
}

/* ------------------------------------------------------------- case data */

/* Inputs in the library's layout, their float64 copies, and the oracle. */
typedef struct {
    const sdpa_case *c;
    tu_tensor q, k, v, dout, mask[ATTN_SDPA_MAX_MASKS];
    const attn_tensor *mask_view[ATTN_SDPA_MAX_MASKS];
    double *q64, *k64, *v64, *dout64, *bias64;
    ref64_sdpa rp;
    double *out64, *lse64, *w64, *dq64, *dk64, *dv64;
    double *mag[NQ]; /* per-element magnitudes (NULL for lse) */
    double kappa;
    int64_t empty_rows; /* query rows (b,h,i) that see no key */
    /* The reference path's forward outputs, for a fused backward whose
     * forward is unsupported. */
    tu_tensor ref_out, ref_lse;
    bool have_ref_out;
} case_data;

static void *xcalloc(int64_t n, size_t size)
{
    void *p = calloc((size_t)(n > 0 ? n : 1), size);
    if (!p) {
        fprintf(stderr, "test_sdpa: out of memory\n");
        exit(2);
    }
    return p;
}

static void xalloc(tu_tensor *t, attn_dtype dtype, int ndim, const int64_t *shape,
                   const tu_layout *layout)
{
    if (!tu_tensor_alloc(t, dtype, ndim, shape, layout)) {
        fprintf(stderr, "test_sdpa: out of memory\n");
        exit(2);
    }
}

/* A float32 tensor of the given (B,H,N[,X]) shape in the case's layout:
 * "bnhd" allocates (B,N,H[,X]) and views it through attn_tensor_transpose. */
static void alloc_view(tu_tensor *t, tu_rng *r, layout_mode mode, bool input, int ndim,
                       const int64_t *shape)
{
    if (mode == LAYOUT_MIXED) mode = (layout_mode)tu_rng_int(r, 0, 2);
    if (mode == LAYOUT_BNHD) {
        int64_t swapped[4];
        memcpy(swapped, shape, (size_t)ndim * sizeof *shape);
        swapped[1] = shape[2];
        swapped[2] = shape[1];
        xalloc(t, ATTN_F32, ndim, swapped, NULL);
        t->view = attn_tensor_transpose(t->view, 1, 2);
    } else if (mode == LAYOUT_RANDOM) {
        tu_layout l = tu_layout_random(r, ndim, input ? TU_LAYOUT_INPUT : TU_LAYOUT_OUTPUT);
        xalloc(t, ATTN_F32, ndim, shape, &l);
    } else {
        xalloc(t, ATTN_F32, ndim, shape, NULL);
    }
}

static void make_mask(case_data *cd, int m, tu_rng *r)
{
    const sdpa_case *c = cd->c;
    const mask_spec *s = &c->mask[m];
    int64_t shape[4];
    int ndim;
    tu_layout layout = tu_layout_contiguous(4);
    switch (s->form) {
    case MASK_NQ_NK: ndim = 2, shape[0] = c->Nq, shape[1] = c->Nk; break;
    case MASK_1_NK: ndim = 2, shape[0] = 1, shape[1] = c->Nk; break;
    case MASK_NK: ndim = 1, shape[0] = c->Nk; break;
    case MASK_B_1_NQ_NK: ndim = 4, shape[0] = c->B, shape[1] = 1, shape[2] = c->Nq, shape[3] = c->Nk; break;
    case MASK_B_HQ_NQ_NK: ndim = 4, shape[0] = c->B, shape[1] = c->Hq, shape[2] = c->Nq, shape[3] = c->Nk; break;
    case MASK_1_HQ_1_NK: ndim = 4, shape[0] = 1, shape[1] = c->Hq, shape[2] = 1, shape[3] = c->Nk; break;
    case MASK_B_1_1_NK: ndim = 4, shape[0] = c->B, shape[1] = 1, shape[2] = 1, shape[3] = c->Nk; break;
    case MASK_HQ_NQ_NK: ndim = 3, shape[0] = c->Hq, shape[1] = c->Nq, shape[2] = c->Nk; break;
    case MASK_NQ_1: ndim = 2, shape[0] = c->Nq, shape[1] = 1; break;
    default: /* MASK_EXPANDED */
        ndim = 4, shape[0] = c->B, shape[1] = c->Hq, shape[2] = c->Nq, shape[3] = c->Nk;
        layout.broadcast[0] = layout.broadcast[1] = true;
        break;
    }
    if (s->strided) {
        tu_layout rl = tu_layout_random(r, ndim, TU_LAYOUT_INPUT);
        if (s->form == MASK_EXPANDED) rl.broadcast[0] = rl.broadcast[1] = true;
        layout = rl;
    }
    xalloc(&cd->mask[m], s->dtype, ndim, shape, &layout);
    const attn_tensor *t = &cd->mask[m].view;
    const int64_t n = tu_numel(t), row = shape[ndim - 1] > 0 ? shape[ndim - 1] : 1;
    const double blocked = s->dtype == ATTN_BOOL ? 0.0 : -INFINITY;
    for (int64_t start = 0; start < n; start += row) {
        bool empty = tu_rng_chance(r, s->p_empty);
        for (int64_t i = start; i < start + row && i < n; ++i) {
            bool attend = !empty && tu_rng_chance(r, s->p_attend);
            double value;
            if (s->dtype == ATTN_BOOL)
                value = attend;
            else if (!attend)
                value = -INFINITY;
            else /* mostly moderate biases, sometimes a large finite penalty */
                value = tu_rng_chance(r, 0.1) ? -25.0 : 1.5 * tu_rng_normal(r);
            tu_set(t, i, value);
        }
    }
    /* Forced blocks last: with a zero-stride layout elements alias, and the
     * last write is what the view sees. */
    for (int64_t start = 0; start < n; start += row) {
        if (s->force == FORCE_FIRST_ROW && start == 0)
            for (int64_t i = 0; i < row && i < n; ++i) tu_set(t, i, blocked);
        if (s->force == FORCE_FIRST_KEY) tu_set(t, start, blocked);
        if (s->force == FORCE_LAST_KEY) tu_set(t, start + row - 1, blocked);
    }
    cd->mask_view[m] = t;
}

static double *gather(const attn_tensor *t)
{
    double *d = xcalloc(tu_numel(t), sizeof *d);
    tu_to_f64(t, d);
    return d;
}

/* Magnitudes are floored (when nonzero) so denormal results do not demand
 * relative accuracy; exact zeros stay exact. */
static void floor_magnitudes(double *mag, int64_t n)
{
    for (int64_t i = 0; i < n; ++i)
        if (mag[i] > 0 && mag[i] < 1e-30) mag[i] = 1e-30;
}

static void case_init(case_data *cd, const sdpa_case *c)
{
    memset(cd, 0, sizeof *cd);
    cd->c = c;
    tu_rng r;
    tu_rng_seed(&r, c->seed ^ 0xDA7Aull);
    const int64_t qs[4] = {c->B, c->Hq, c->Nq, c->D}, ks[4] = {c->B, c->Hkv, c->Nk, c->D},
                  vs[4] = {c->B, c->Hkv, c->Nk, c->Dv}, os[4] = {c->B, c->Hq, c->Nq, c->Dv};
    alloc_view(&cd->q, &r, c->layout, true, 4, qs);
    alloc_view(&cd->k, &r, c->layout, true, 4, ks);
    alloc_view(&cd->v, &r, c->layout, true, 4, vs);
    alloc_view(&cd->dout, &r, c->layout, true, 4, os);
    tu_fill_normal(&cd->q.view, &r, 0.0, c->gain);
    tu_fill_normal(&cd->k.view, &r, 0.0, c->gain);
    tu_fill_uniform(&cd->v.view, &r, -1.0, 1.0);
    tu_fill_uniform(&cd->dout.view, &r, -1.0, 1.0);
    for (int m = 0; m < ATTN_SDPA_MAX_MASKS; ++m)
        if (c->mask[m].present) make_mask(cd, m, &r);

    cd->q64 = gather(&cd->q.view);
    cd->k64 = gather(&cd->k.view);
    cd->v64 = gather(&cd->v.view);
    cd->dout64 = gather(&cd->dout.view);
    const int64_t nscores = c->B * c->Hq * c->Nq * c->Nk;
    if (c->mask[0].present || c->mask[1].present) {
        cd->bias64 = xcalloc(nscores, sizeof(double));
        for (int m = 0; m < ATTN_SDPA_MAX_MASKS; ++m)
            if (c->mask[m].present &&
                !ref64_add_mask(cd->bias64, c->B, c->Hq, c->Nq, c->Nk, cd->mask_view[m])) {
                fprintf(stderr, "test_sdpa: internal error: mask does not broadcast\n");
                exit(2);
            }
    }
    cd->rp = (ref64_sdpa){.B = c->B, .Hq = c->Hq, .Hkv = c->Hkv, .Nq = c->Nq, .Nk = c->Nk,
                          .D = c->D, .Dv = c->Dv, .causal = c->causal, .bias = cd->bias64};
    cd->rp.scale = c->scale != 0.0f ? (double)c->scale : c->D > 0 ? 1.0 / sqrt((double)c->D) : 1.0;

    const int64_t nout = c->B * c->Hq * c->Nq * c->Dv, nrow = c->B * c->Hq * c->Nq,
                  ndq = c->B * c->Hq * c->Nq * c->D, ndk = c->B * c->Hkv * c->Nk * c->D,
                  ndv = c->B * c->Hkv * c->Nk * c->Dv;
    cd->out64 = xcalloc(nout, sizeof(double));
    cd->lse64 = xcalloc(nrow, sizeof(double));
    cd->w64 = xcalloc(nscores, sizeof(double));
    cd->dq64 = xcalloc(ndq, sizeof(double));
    cd->dk64 = xcalloc(ndk, sizeof(double));
    cd->dv64 = xcalloc(ndv, sizeof(double));
    ref64_sdpa_forward(&cd->rp, cd->q64, cd->k64, cd->v64, cd->out64, cd->lse64, cd->w64);
    ref64_sdpa_backward(&cd->rp, cd->q64, cd->k64, cd->v64, cd->dout64, cd->dq64, cd->dk64,
                        cd->dv64);
    for (int64_t i = 0; i < nrow; ++i) cd->empty_rows += cd->lse64[i] == -INFINITY;

    cd->mag[Q_OUT] = xcalloc(nout, sizeof(double));
    cd->mag[Q_WEIGHTS] = xcalloc(nscores, sizeof(double));
    cd->mag[Q_DQ] = xcalloc(ndq, sizeof(double));
    cd->mag[Q_DK] = xcalloc(ndk, sizeof(double));
    cd->mag[Q_DV] = xcalloc(ndv, sizeof(double));
    ref64_sdpa_magnitudes(&cd->rp, cd->q64, cd->k64, cd->v64, cd->dout64, cd->w64,
                          cd->mag[Q_OUT], cd->mag[Q_DQ], cd->mag[Q_DK], cd->mag[Q_DV]);
    memcpy(cd->mag[Q_WEIGHTS], cd->w64, (size_t)nscores * sizeof(double));
    floor_magnitudes(cd->mag[Q_OUT], nout);
    floor_magnitudes(cd->mag[Q_WEIGHTS], nscores);
    floor_magnitudes(cd->mag[Q_DQ], ndq);
    floor_magnitudes(cd->mag[Q_DK], ndk);
    floor_magnitudes(cd->mag[Q_DV], ndv);
    cd->kappa = 1.0 + ref64_sdpa_score_magnitude(&cd->rp, cd->q64, cd->k64);
}

static void case_free(case_data *cd)
{
    tu_tensor_free(&cd->q);
    tu_tensor_free(&cd->k);
    tu_tensor_free(&cd->v);
    tu_tensor_free(&cd->dout);
    for (int m = 0; m < ATTN_SDPA_MAX_MASKS; ++m) tu_tensor_free(&cd->mask[m]);
    tu_tensor_free(&cd->ref_out);
    tu_tensor_free(&cd->ref_lse);
    free(cd->q64), free(cd->k64), free(cd->v64), free(cd->dout64), free(cd->bias64);
    free(cd->out64), free(cd->lse64), free(cd->w64), free(cd->dq64), free(cd->dk64), free(cd->dv64);
    for (int i = 0; i < NQ; ++i) free(cd->mag[i]);
}

static attn_sdpa_opts case_opts(const case_data *cd, int path, int threads)
{
    attn_sdpa_opts o = attn_sdpa_opts_default();
    o.scale = cd->c->scale;
    o.causal = cd->c->causal;
    for (int m = 0; m < ATTN_SDPA_MAX_MASKS; ++m) o.mask[m] = cd->mask_view[m];
    o.num_threads = threads;
    o.path = path_id[path];
    return o;
}

/* FNV-1a over bytes. */
static uint64_t hash_bytes(const void *data, size_t n, uint64_t h)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* Hash of every byte of an allocation (detects writes into inputs). */
static uint64_t hash_alloc(const tu_tensor *t, uint64_t h)
{
    return t->base ? hash_bytes(t->base, (size_t)t->count * t->elem_size, h) : h;
}

static uint64_t hash_inputs(const case_data *cd)
{
    uint64_t h = 0xcbf29ce484222325ull;
    h = hash_alloc(&cd->q, h);
    h = hash_alloc(&cd->k, h);
    h = hash_alloc(&cd->v, h);
    h = hash_alloc(&cd->dout, h);
    for (int m = 0; m < ATTN_SDPA_MAX_MASKS; ++m) h = hash_alloc(&cd->mask[m], h);
    return h;
}

static uint64_t hash_view(const attn_tensor *t)
{
    int64_t n = tu_numel(t);
    void *buf = xcalloc(n, sizeof(float));
    tu_gather_bytes(t, buf);
    uint64_t h = hash_bytes(buf, (size_t)n * sizeof(float), 0xcbf29ce484222325ull);
    free(buf);
    return h;
}

/* ---------------------------------------------------------- case running */

/* Failure details of one case and path, printed only if it fails. */
typedef struct {
    int n;
    char line[16][640];
} report;

static void report_add(report *r, const char *fmt, ...) ATTN_TU_PRINTF(2, 3);
static void report_add(report *r, const char *fmt, ...)
{
    if (r->n >= 16) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->line[r->n++], sizeof r->line[0], fmt, ap);
    va_end(ap);
}

typedef struct {
    bool ran_fwd, ran_bwd, skipped_fwd, skipped_bwd;
    bool have[NQ];
    double units[NQ];
    uint64_t hash[NQ];
} path_result;

/* Suite-wide error statistics, for the accuracy assertion. */
typedef struct {
    int64_t cases[NQ];           /* cases where both paths produced the quantity */
    double sum_units[NPATHS][NQ];
    double max_units[NPATHS][NQ];
    int64_t ref_cases[NQ];       /* cases where the reference produced it */
    double ref_sum[NQ], ref_max[NQ];
    int64_t fused_ran, fused_identical;
    int64_t fused_unsupported; /* fused calls that answered ATTN_ERR_UNSUPPORTED */
} accuracy_stats;
static accuracy_stats g_acc;

static int g_verbose;
/* Paths to run (ATTN_TEST_PATHS=reference|fused; default both). */
static bool g_path_enabled[NPATHS] = {true, true};
/* Name of the group running, for crash reports. */
static const char *g_group_name = "";

/* Compares one output with the oracle and records its error in units. */
static void check_output(const case_data *cd, report *rep, path_result *pr, int qi,
                         const tu_tensor *got, const double *want)
{
    const double lse_mag = cd->kappa + log1p((double)cd->c->Nk);
    tu_tol tol = {.atol = TOL_UNITS[qi] * EPS32 * cd->kappa, .rtol = 0, .atol_scale = cd->mag[qi]};
    if (qi == Q_LSE) tol.atol = TOL_UNITS[qi] * EPS32 * lse_mag;
    tu_cmp cmp;
    tu_compare(&got->view, want, tol, &cmp);
    double units = qi == Q_LSE ? cmp.max_abs_err / (EPS32 * lse_mag)
                               : cmp.max_scaled_err / (EPS32 * cd->kappa);
    if (isinf(cmp.max_ratio)) units = INFINITY;
    if (!cmp.ok) {
        char buf[512];
        tu_cmp_describe(&cmp, quantity_name[qi], &got->view, buf, sizeof buf);
        report_add(rep, "%s (error %.3g units, limit %g)", buf, units, TOL_UNITS[qi]);
    }
    if (!tu_padding_intact(got))
        report_add(rep, "%s: the call wrote outside the view (padding changed)", quantity_name[qi]);
    pr->have[qi] = true;
    pr->units[qi] = units;
    pr->hash[qi] = hash_view(&got->view);
}

/* Runs one path forward (and backward) on a case and checks everything. */
static void run_path(case_data *cd, int path, path_result *pr, report *rep)
{
    const sdpa_case *c = cd->c;
    memset(pr, 0, sizeof *pr);
    tu_crash_context("group '%s', path %s, case seed 0x%016" PRIx64, g_group_name, path_name[path],
                     c->seed);
    tu_rng lr; /* the same output layouts for every path */
    tu_rng_seed(&lr, c->seed ^ 0x1A70ull);
    const int64_t os[4] = {c->B, c->Hq, c->Nq, c->Dv}, ls[3] = {c->B, c->Hq, c->Nq},
                  ws[4] = {c->B, c->Hq, c->Nq, c->Nk}, dqs[4] = {c->B, c->Hq, c->Nq, c->D},
                  dks[4] = {c->B, c->Hkv, c->Nk, c->D}, dvs[4] = {c->B, c->Hkv, c->Nk, c->Dv};
    tu_tensor out, lse, w, dq, dk, dv;
    memset(&lse, 0, sizeof lse), memset(&w, 0, sizeof w);
    memset(&dq, 0, sizeof dq), memset(&dk, 0, sizeof dk), memset(&dv, 0, sizeof dv);
    alloc_view(&out, &lr, c->layout, false, 4, os);
    if (c->want_lse) alloc_view(&lse, &lr, c->layout, false, 3, ls);
    if (c->want_weights) alloc_view(&w, &lr, c->layout, false, 4, ws);

    const uint64_t inputs_before = hash_inputs(cd);
    attn_sdpa_opts opts = case_opts(cd, path, c->threads);
    attn_error err;
    memset(&err, 0, sizeof err);
    attn_status st = attn_sdpa(&cd->q.view, &cd->k.view, &cd->v.view, &out.view,
                               c->want_lse ? &lse.view : NULL, c->want_weights ? &w.view : NULL,
                               &opts, &err);
    if (st == ATTN_ERR_UNSUPPORTED && path == PATH_FUSED) {
        pr->skipped_fwd = true;
        g_acc.fused_unsupported++;
    } else if (st != ATTN_OK) {
        report_add(rep, "attn_sdpa returned '%s': %s", attn_status_string(st), err.message);
    } else {
        pr->ran_fwd = true;
        check_output(cd, rep, pr, Q_OUT, &out, cd->out64);
        if (c->want_lse) check_output(cd, rep, pr, Q_LSE, &lse, cd->lse64);
        if (c->want_weights) check_output(cd, rep, pr, Q_WEIGHTS, &w, cd->w64);
    }

    if (c->backward) {
        const attn_tensor *out_in = NULL, *lse_in = NULL;
        const bool pass_out = c->bwd_in == BWD_OUT_LSE || c->bwd_in == BWD_OUT_ONLY;
        const bool pass_lse = c->want_lse && (c->bwd_in == BWD_OUT_LSE || c->bwd_in == BWD_LSE_ONLY);
        if (pr->ran_fwd) {
            out_in = pass_out ? &out.view : NULL;
            lse_in = pass_lse ? &lse.view : NULL;
        } else if (cd->have_ref_out) { /* fused forward unsupported: use the reference's */
            out_in = pass_out ? &cd->ref_out.view : NULL;
            lse_in = pass_lse && cd->ref_lse.base ? &cd->ref_lse.view : NULL;
        }
        if (c->want_dq) alloc_view(&dq, &lr, c->layout, false, 4, dqs);
        if (c->want_dk) alloc_view(&dk, &lr, c->layout, false, 4, dks);
        if (c->want_dv) alloc_view(&dv, &lr, c->layout, false, 4, dvs);
        st = attn_sdpa_backward(&cd->q.view, &cd->k.view, &cd->v.view, out_in, lse_in,
                                &cd->dout.view, c->want_dq ? &dq.view : NULL,
                                c->want_dk ? &dk.view : NULL, c->want_dv ? &dv.view : NULL,
                                &opts, &err);
        if (st == ATTN_ERR_UNSUPPORTED && path == PATH_FUSED) {
            pr->skipped_bwd = true;
            g_acc.fused_unsupported++;
        } else if (st != ATTN_OK) {
            report_add(rep, "attn_sdpa_backward returned '%s': %s", attn_status_string(st),
                       err.message);
        } else {
            pr->ran_bwd = true;
            if (c->want_dq) check_output(cd, rep, pr, Q_DQ, &dq, cd->dq64);
            if (c->want_dk) check_output(cd, rep, pr, Q_DK, &dk, cd->dk64);
            if (c->want_dv) check_output(cd, rep, pr, Q_DV, &dv, cd->dv64);
        }
    }
    if (hash_inputs(cd) != inputs_before)
        report_add(rep, "inputs (q, k, v, dout or masks) were modified by the call");

    if (path == PATH_REF && pr->ran_fwd && !cd->have_ref_out) {
        cd->ref_out = out, cd->ref_lse = lse, cd->have_ref_out = true;
    } else {
        tu_tensor_free(&out);
        tu_tensor_free(&lse);
    }
    tu_tensor_free(&w), tu_tensor_free(&dq), tu_tensor_free(&dk), tu_tensor_free(&dv);
}

/* How to replay a failing case. */
typedef struct {
    bool random;   /* reproducible from its seed alone */
    uint64_t base; /* base seed of the run */
} replay_info;

static void print_failure(tu_group *g, const sdpa_case *c, const char *path, const report *rep,
                          replay_info rp)
{
    char desc[768];
    describe_case(c, desc, sizeof desc);
    tu_group_fail(g, "path=%s case seed=0x%016" PRIx64 ": %s", path, c->seed, rep->line[0]);
    for (int i = 1; i < rep->n; ++i) tu_group_note(g, "%s", rep->line[i]);
    tu_group_note(g, "config: %s", desc);
    if (rp.random)
        tu_group_note(g, "replay: test_sdpa --case 0x%016" PRIx64, c->seed);
    else
        tu_group_note(g, "replay: test_sdpa --seed 0x%" PRIx64 " --group '%s'", rp.base, g->name);
}

/* Runs a case on both paths, checks the fused accuracy target, and counts
 * one item per path in g. Returns the case's empty-row count (or -1 when
 * the reference path failed). */
static int64_t run_case(tu_group *g, const sdpa_case *c, replay_info rp)
{
    case_data cd;
    case_init(&cd, c);
    path_result res[NPATHS];
    report rep[NPATHS];
    memset(rep, 0, sizeof rep);
    memset(res, 0, sizeof res);
    for (int p = 0; p < NPATHS; ++p)
        if (g_path_enabled[p]) run_path(&cd, p, &res[p], &rep[p]);

    /* Reference error statistics (always) and the fused accuracy target. */
    for (int qi = 0; qi < NQ; ++qi) {
        if (res[PATH_REF].have[qi] && isfinite(res[PATH_REF].units[qi])) {
            g_acc.ref_cases[qi]++;
            g_acc.ref_sum[qi] += res[PATH_REF].units[qi];
            if (res[PATH_REF].units[qi] > g_acc.ref_max[qi]) g_acc.ref_max[qi] = res[PATH_REF].units[qi];
        }
        if (!res[PATH_REF].have[qi] || !res[PATH_FUSED].have[qi]) continue;
        const double ref = res[PATH_REF].units[qi], fused = res[PATH_FUSED].units[qi];
        if (!isfinite(ref) || !isfinite(fused)) continue; /* already failed above */
        g_acc.cases[qi]++;
        for (int p = 0; p < NPATHS; ++p) {
            g_acc.sum_units[p][qi] += res[p].units[qi];
            if (res[p].units[qi] > g_acc.max_units[p][qi]) g_acc.max_units[p][qi] = res[p].units[qi];
        }
        if (fused > 2.0 * ref + FUSED_FLOOR_UNITS)
            report_add(&rep[PATH_FUSED],
                       "accuracy: %s error %.3g units > 2 x reference error %.3g + %g "
                       "(accuracy target)",
                       quantity_name[qi], fused, ref, FUSED_FLOOR_UNITS);
    }
    if (res[PATH_FUSED].ran_fwd || res[PATH_FUSED].ran_bwd) {
        bool identical = true;
        g_acc.fused_ran++;
        for (int qi = 0; qi < NQ; ++qi)
            if (res[PATH_FUSED].have[qi] && res[PATH_REF].have[qi])
                identical &= res[PATH_FUSED].hash[qi] == res[PATH_REF].hash[qi];
        g_acc.fused_identical += identical;
    }

    for (int p = 0; p < NPATHS; ++p) {
        if (!g_path_enabled[p]) continue;
        const bool skipped = res[p].skipped_fwd && (!c->backward || res[p].skipped_bwd);
        if (rep[p].n) {
            print_failure(g, c, path_name[p], &rep[p], rp);
        } else if (skipped) {
            tu_group_skip(g, FUSED_SKIP);
        } else {
            tu_group_pass(g);
            if (p == PATH_FUSED && (res[p].skipped_fwd || res[p].skipped_bwd))
                tu_group_note(g, "note: fused %s unsupported in case 0x%016" PRIx64,
                              res[p].skipped_fwd ? "forward" : "backward", c->seed);
        }
    }
    if (g_verbose) {
        char desc[768];
        describe_case(c, desc, sizeof desc);
        printf("  case 0x%016" PRIx64 " kappa %.3g empty rows %" PRId64 " ref units:", c->seed,
               cd.kappa, cd.empty_rows);
        for (int qi = 0; qi < NQ; ++qi)
            if (res[PATH_REF].have[qi]) printf(" %s %.3g", quantity_name[qi], res[PATH_REF].units[qi]);
        printf("\n    %s\n", desc);
    }
    int64_t empty = rep[PATH_REF].n ? -1 : cd.empty_rows;
    case_free(&cd);
    return empty;
}

/* ---------------------------------------------------------------- groups */

typedef struct {
    tu_suite *suite;
    const tu_options *opt;
    int64_t random_cases;
} harness;

static uint64_t case_seed(const harness *h, const char *group, int64_t index)
{
    uint64_t s = h->opt->seed;
    for (const char *p = group; *p; ++p) s = tu_mix(s ^ (uint8_t)*p);
    return tu_mix(s ^ (uint64_t)index);
}

static replay_info systematic(const harness *h) { return (replay_info){false, h->opt->seed}; }

static void group_random(harness *h)
{
    tu_group g;
    tu_group_begin(&g, h->suite, "random configurations");
    for (int64_t i = 0; i < h->random_cases; ++i) {
        sdpa_case c = random_case(case_seed(h, "random", i));
        run_case(&g, &c, (replay_info){true, h->opt->seed});
    }
    tu_group_end(&g);
}

static void group_replay(harness *h)
{
    tu_group g;
    tu_group_begin(&g, h->suite, "replay");
    sdpa_case c = random_case(h->opt->replay_seed);
    char desc[768];
    describe_case(&c, desc, sizeof desc);
    printf("replaying case 0x%016" PRIx64 ": %s\n", c.seed, desc);
    run_case(&g, &c, (replay_info){true, h->opt->seed});
    tu_group_end(&g);
}

/* Every mask kind and broadcast, alone, with causal, and two at once. */
static void group_masks(harness *h)
{
    tu_group g;
    tu_group_begin(&g, h->suite, "masks and broadcasts");
    int64_t idx = 0;
    const int step = h->opt->quick ? 3 : 1;
    for (int dt = 0; dt < 2; ++dt)
        for (int form = 0; form < MASK_FORMS; ++form)
            for (int causal = 0; causal < 3; ++causal, ++idx) {
                if (idx % step) continue;
                sdpa_case c = small_case(case_seed(h, g.name, idx));
                c.causal = (attn_causal)causal;
                c.mask[0] = (mask_spec){true, dt ? ATTN_F32 : ATTN_BOOL, (mask_form)form, 0.7,
                                        0.15, idx % 2 == 1, FORCE_NONE};
                c.mask[1].present = false;
                run_case(&g, &c, systematic(h));
            }
    /* Two masks: every form in slot 0 against another form in slot 1, every
     * dtype pair, with and without causality. */
    for (int form = 0; form < MASK_FORMS; ++form)
        for (int dts = 0; dts < 4; ++dts)
            for (int causal = 0; causal < 3; causal += 1 + (dts % 2), ++idx) {
                if (idx % step) continue;
                sdpa_case c = small_case(case_seed(h, g.name, idx));
                c.causal = (attn_causal)causal;
                c.mask[0] = (mask_spec){true, (dts & 1) ? ATTN_F32 : ATTN_BOOL, (mask_form)form,
                                        0.8, 0.1, idx % 3 == 0, FORCE_NONE};
                c.mask[1] = (mask_spec){true, (dts & 2) ? ATTN_F32 : ATTN_BOOL,
                                        (mask_form)((form + 3 + dts) % MASK_FORMS), 0.8, 0.1,
                                        idx % 2 == 0, FORCE_NONE};
                run_case(&g, &c, systematic(h));
            }
    tu_group_end(&g);
}

/* Both alignments over square, wide and tall score matrices. */
static void group_causal(harness *h)
{
    static const int64_t shapes[][2] = {{1, 1}, {1, 7}, {7, 1}, {5, 9}, {9, 5}, {16, 16},
                                        {17, 3}, {3, 17}, {33, 64}, {64, 33}, {2, 40}, {40, 2}};
    tu_group g;
    tu_group_begin(&g, h->suite, "causal alignments");
    int64_t idx = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
        for (int causal = 1; causal <= 2; ++causal)
            for (int with_mask = 0; with_mask < 2; ++with_mask, ++idx) {
                sdpa_case c = small_case(case_seed(h, g.name, idx));
                c.Nq = shapes[s][0];
                c.Nk = shapes[s][1];
                c.causal = (attn_causal)causal;
                c.mask[0].present = c.mask[1].present = false;
                if (with_mask)
                    c.mask[0] = (mask_spec){true, ATTN_BOOL, MASK_B_1_1_NK, 0.8, 0.0, false, FORCE_NONE};
                fit_budget(&c, 4e5);
                run_case(&g, &c, systematic(h));
            }
    tu_group_end(&g);
}

/* Rows that see nothing: out 0, lse -inf, weights 0, zero gradients, no NaN.
 * Each case must really contain such rows. */
static void group_empty_rows(harness *h)
{
    tu_group g;
    tu_group_begin(&g, h->suite, "fully masked rows");
    const int kinds = 9, reps = h->opt->quick ? 2 : 4;
    for (int kind = 0; kind < kinds; ++kind)
        for (int rep = 0; rep < reps; ++rep) {
            sdpa_case c = small_case(case_seed(h, g.name, kind * 100 + rep));
            c.mask[0].present = c.mask[1].present = false;
            c.causal = ATTN_CAUSAL_NONE;
            switch (kind) {
            case 0:
                c.mask[0] = (mask_spec){true, ATTN_BOOL, MASK_NQ_NK, 0.6, 0.5, rep & 1, FORCE_FIRST_ROW};
                break;
            case 1:
                c.mask[0] = (mask_spec){true, ATTN_F32, MASK_B_HQ_NQ_NK, 0.6, 0.5, rep & 1, FORCE_FIRST_ROW};
                break;
            case 2: /* bottom-right with more queries than keys */
                c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
                c.Nk = 1 + rep * 3;
                c.Nq = c.Nk + 2 + rep;
                break;
            case 3: /* key padding that hides a whole batch */
                c.mask[0] = (mask_spec){true, ATTN_BOOL, MASK_B_1_1_NK, 0.5, 0.3, false, FORCE_FIRST_ROW};
                break;
            case 4:
                c.mask[0] = (mask_spec){true, ATTN_F32, MASK_NQ_1, 0.5, 0.0, rep & 1, FORCE_FIRST_ROW};
                break;
            case 5: c.mask[0] = (mask_spec){true, ATTN_BOOL, MASK_NQ_NK, 0.0, 0.0, false, FORCE_NONE}; break;
            case 6: /* top-left: row 0 sees only key 0, which the mask blocks */
                c.causal = ATTN_CAUSAL_TOP_LEFT;
                c.mask[0] = (mask_spec){true, ATTN_F32, MASK_NK, 1.0, 0.0, rep & 1, FORCE_FIRST_KEY};
                break;
            case 7: /* two masks that each leave a key open but block everything together */
                c.Nk = 2;
                c.mask[0] = (mask_spec){true, ATTN_BOOL, MASK_NQ_NK, 0.5, 0.0, false, FORCE_FIRST_KEY};
                c.mask[1] = (mask_spec){true, ATTN_F32, MASK_NK, 1.0, 0.0, true, FORCE_LAST_KEY};
                break;
            default: /* large logits next to empty rows */
                c.gain = 4.0;
                c.mask[0] = (mask_spec){true, ATTN_BOOL, MASK_B_1_NQ_NK, 0.9, 0.5, false, FORCE_FIRST_ROW};
                break;
            }
            int64_t empty = run_case(&g, &c, systematic(h));
            if (empty == 0)
                tu_group_fail(&g, "construction: case seed=0x%016" PRIx64 " (kind %d) has no "
                                  "fully masked row", c.seed, kind);
        }
    tu_group_end(&g);
}

/* Non-contiguous strides everywhere: (B,N,H,D) buffers seen as (B,H,N,D)
 * through attn_tensor_transpose, and random permuted/padded/flipped/
 * broadcast layouts. */
static void group_strides(harness *h)
{
    tu_group g;
    tu_group_begin(&g, h->suite, "strided views");
    const int reps = h->opt->quick ? 6 : 20;
    for (int mode = LAYOUT_BNHD; mode <= LAYOUT_RANDOM; ++mode)
        for (int rep = 0; rep < reps; ++rep) {
            sdpa_case c = random_case(case_seed(h, g.name, mode * 1000 + rep));
            c.layout = (layout_mode)mode;
            c.want_lse = c.want_weights = c.backward = true;
            c.want_dq = c.want_dk = c.want_dv = true;
            for (int m = 0; m < ATTN_SDPA_MAX_MASKS; ++m) c.mask[m].strided = c.mask[m].present;
            fit_budget(&c, 3e5);
            run_case(&g, &c, systematic(h));
        }
    tu_group_end(&g);
}

/* dq/dk/dv each optional, out/lse passed or recomputed. */
static void group_backward_options(harness *h)
{
    tu_group g;
    tu_group_begin(&g, h->suite, "backward options");
    int64_t idx = 0;
    for (int which = 0; which < 8; ++which)
        for (int in = 0; in < 4; ++in, ++idx) {
            sdpa_case c = small_case(case_seed(h, g.name, idx));
            c.want_dq = which & 1, c.want_dk = (which >> 1) & 1, c.want_dv = (which >> 2) & 1;
            c.bwd_in = (bwd_inputs)in;
            c.want_lse = true;
            c.want_weights = false;
            if (c.Hq == c.Hkv && idx % 2) c.Hq = c.Hkv * 2; /* plenty of GQA sums */
            fit_budget(&c, 1.5e5);
            run_case(&g, &c, systematic(h));
        }
    tu_group_end(&g);
}

/* Zero-length dimensions and sizes of one. */
static void group_degenerate(harness *h)
{
    static const int64_t sizes[][7] = {
        /* B, Hq, Hkv, Nq, Nk, D, Dv */
        {1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 5, 1, 1}, {1, 1, 1, 5, 1, 1, 1},
        {1, 3, 1, 1, 1, 1, 2}, {2, 4, 4, 1, 1, 7, 1}, {1, 1, 1, 3, 0, 4, 4},
        {1, 2, 1, 0, 3, 4, 4}, {0, 2, 1, 3, 3, 4, 4}, {1, 1, 1, 3, 3, 4, 0},
    };
    tu_group g;
    tu_group_begin(&g, h->suite, "degenerate sizes");
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s)
        for (int causal = 0; causal < 3; ++causal) {
            sdpa_case c = small_case(case_seed(h, g.name, (int64_t)(s * 3 + (size_t)causal)));
            c.B = sizes[s][0], c.Hq = sizes[s][1], c.Hkv = sizes[s][2], c.Nq = sizes[s][3];
            c.Nk = sizes[s][4], c.D = sizes[s][5], c.Dv = sizes[s][6];
            c.causal = (attn_causal)causal;
            c.mask[1].present = false;
            c.mask[0] = (mask_spec){causal == 2, ATTN_BOOL, MASK_NQ_NK, 0.7, 0.0, false, FORCE_NONE};
            run_case(&g, &c, systematic(h));
        }
    tu_group_end(&g);
}

/* ------------------------------------------------ finite differences */

typedef struct {
    const ref64_sdpa *p;
    double *q, *k, *v;
    const double *dout;
} fd_ctx;

static double fd_loss(void *ctx)
{
    fd_ctx *f = ctx;
    return ref64_sdpa_loss(f->p, f->q, f->k, f->v, f->dout);
}

static double max_abs(const double *x, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; ++i) m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

/* Proves the oracle's backward: central differences of Σ out·dout in
 * float64 against ref64_sdpa_backward, on small cases with every feature. */
static void group_oracle_fd(harness *h)
{
    tu_group g;
    tu_group_begin(&g, h->suite, "oracle finite differences");
    const int n = h->opt->quick ? 10 : 30;
    for (int i = 0; i < n; ++i) {
        sdpa_case c = random_case(case_seed(h, g.name, i));
        tu_rng r;
        tu_rng_seed(&r, c.seed);
        c.B = tu_rng_int(&r, 1, 2);
        c.Hkv = tu_rng_int(&r, 1, 2);
        c.Hq = c.Hkv * tu_rng_int(&r, 1, 3);
        c.Nq = tu_rng_int(&r, 1, 6), c.Nk = tu_rng_int(&r, 1, 6);
        c.D = tu_rng_int(&r, 1, 5), c.Dv = tu_rng_int(&r, 1, 5);
        if (i % 5 == 4) c.gain = 2.5;
        case_data cd;
        case_init(&cd, &c);
        const double *an[3] = {cd.dq64, cd.dk64, cd.dv64};
        double *x[3] = {cd.q64, cd.k64, cd.v64};
        const int64_t sz[3] = {c.B * c.Hq * c.Nq * c.D, c.B * c.Hkv * c.Nk * c.D,
                               c.B * c.Hkv * c.Nk * c.Dv};
        static const char *const names[3] = {"dq", "dk", "dv"};
        fd_ctx ctx = {&cd.rp, cd.q64, cd.k64, cd.v64, cd.dout64};
        bool ok = true;
        for (int t = 0; t < 3; ++t) {
            double *fd = xcalloc(sz[t], sizeof(double));
            ref64_fd_gradient(fd_loss, &ctx, x[t], sz[t], 1e-5, fd);
            tu_tol tol = {.atol = 1e-8 * (1.0 + max_abs(an[t], sz[t])), .rtol = 1e-7};
            tu_cmp cmp;
            if (g_verbose) {
                tu_compare_f64(an[t], fd, sz[t], tol, &cmp);
                printf("  case 0x%016" PRIx64 " %s: max |analytic - fd| %.3g, ratio to tolerance %.3g\n",
                       c.seed, names[t], cmp.max_abs_err, cmp.max_ratio);
            }
            if (!tu_compare_f64(an[t], fd, sz[t], tol, &cmp)) {
                char buf[512];
                tu_cmp_describe(&cmp, names[t], NULL, buf, sizeof buf);
                tu_group_fail(&g, "oracle backward vs finite differences, case seed=0x%016" PRIx64
                                  ": %s (got = analytic, want = finite difference)", c.seed, buf);
                ok = false;
            }
            free(fd);
        }
        if (ok) tu_group_pass(&g);
        case_free(&cd);
    }
    tu_group_end(&g);
}

/* Σ out·dout in float64 from a float32 forward of the library. */
static bool library_loss(case_data *cd, int path, double *loss, attn_status *st)
{
    const sdpa_case *c = cd->c;
    const int64_t os[4] = {c->B, c->Hq, c->Nq, c->Dv};
    tu_tensor out;
    xalloc(&out, ATTN_F32, 4, os, NULL);
    attn_sdpa_opts opts = case_opts(cd, path, c->threads);
    *st = attn_sdpa(&cd->q.view, &cd->k.view, &cd->v.view, &out.view, NULL, NULL, &opts, NULL);
    double acc = 0.0;
    for (int64_t i = 0; i < tu_numel(&out.view); ++i) acc += tu_get(&out.view, i) * cd->dout64[i];
    tu_tensor_free(&out);
    *loss = acc;
    return *st == ATTN_OK;
}

/*
 * The library's own gradients against float32 finite differences of the
 * library's forward, along a random direction of (q, k, v): independent of
 * the oracle. Coarse (float32 forward), so the tolerance is loose; the
 * element-wise check against the oracle is the precise one.
 */
static void group_library_fd(harness *h)
{
    tu_group g;
    tu_group_begin(&g, h->suite, "library directional derivatives");
    const int n = h->opt->quick ? 6 : 16;
    for (int path = 0; path < NPATHS; ++path)
        for (int i = 0; i < n && g_path_enabled[path]; ++i) {
            sdpa_case c = small_case(case_seed(h, g.name, i));
            tu_crash_context("group '%s', path %s, case seed 0x%016" PRIx64, g.name,
                             path_name[path], c.seed);
            c.layout = i % 2 ? LAYOUT_BNHD : LAYOUT_CONTIGUOUS; /* no aliasing broadcast views */
            c.gain = 1.0;
            c.want_dq = c.want_dk = c.want_dv = true;
            case_data cd;
            case_init(&cd, &c);
            attn_tensor *in[3] = {&cd.q.view, &cd.k.view, &cd.v.view};
            const int64_t qs[4] = {c.B, c.Hq, c.Nq, c.D}, ks[4] = {c.B, c.Hkv, c.Nk, c.D},
                          vs[4] = {c.B, c.Hkv, c.Nk, c.Dv};
            tu_tensor grad[3];
            xalloc(&grad[0], ATTN_F32, 4, qs, NULL);
            xalloc(&grad[1], ATTN_F32, 4, ks, NULL);
            xalloc(&grad[2], ATTN_F32, 4, vs, NULL);
            attn_sdpa_opts opts = case_opts(&cd, path, c.threads);
            attn_error err;
            attn_status st = attn_sdpa_backward(in[0], in[1], in[2], NULL, NULL, &cd.dout.view,
                                                &grad[0].view, &grad[1].view, &grad[2].view,
                                                &opts, &err);
            if (st == ATTN_ERR_UNSUPPORTED && path == PATH_FUSED) {
                tu_group_skip(&g, FUSED_SKIP);
            } else if (st != ATTN_OK) {
                tu_group_fail(&g, "path=%s case seed=0x%016" PRIx64 ": backward returned %s: %s",
                              path_name[path], c.seed, attn_status_string(st), err.message);
            } else {
                /* Perturb x -> x± = float32(x ± h·u) and predict the change of
                 * the loss from the step actually taken, x⁺ - x⁻. */
                tu_rng r;
                tu_rng_seed(&r, c.seed ^ 0xFDull);
                const double step = 1e-2;
                double *orig[3] = {cd.q64, cd.k64, cd.v64}, *dir[3];
                double predicted = 0.0, magnitude = 0.0, lp = 0, lm = 0;
                attn_status sp = ATTN_OK, sm = ATTN_OK;
                for (int t = 0; t < 3; ++t) {
                    int64_t m = tu_numel(in[t]);
                    dir[t] = xcalloc(m, sizeof(double));
                    for (int64_t e = 0; e < m; ++e) {
                        dir[t][e] = tu_rng_range(&r, -1, 1) * step;
                        double taken = (double)(float)(orig[t][e] + dir[t][e]) -
                                       (double)(float)(orig[t][e] - dir[t][e]);
                        double gr = tu_get(&grad[t].view, e);
                        predicted += gr * taken;
                        magnitude += fabs(gr * taken);
                    }
                }
                for (int side = 0; side < 2; ++side) {
                    for (int t = 0; t < 3; ++t)
                        for (int64_t e = 0; e < tu_numel(in[t]); ++e)
                            tu_set(in[t], e, orig[t][e] + (side ? -dir[t][e] : dir[t][e]));
                    library_loss(&cd, path, side ? &lm : &lp, side ? &sm : &sp);
                }
                for (int t = 0; t < 3; ++t)
                    for (int64_t e = 0; e < tu_numel(in[t]); ++e) tu_set(in[t], e, orig[t][e]);
                const double fd = lp - lm;
                const double tol = 5e-4 * magnitude + 2e-6 * (fabs(lp) + fabs(lm) + 1.0);
                if (g_verbose)
                    printf("  path %s case 0x%016" PRIx64 ": fd %.9g predicted %.9g ratio to "
                           "tolerance %.3g\n",
                           path_name[path], c.seed, fd, predicted, fabs(fd - predicted) / tol);
                if (sp != ATTN_OK || sm != ATTN_OK)
                    tu_group_fail(&g, "path=%s case seed=0x%016" PRIx64 ": forward failed",
                                  path_name[path], c.seed);
                else
                    tu_check(&g, fabs(fd - predicted) <= tol,
                             "path=%s case seed=0x%016" PRIx64 ": L(x+d)-L(x-d) = %.9g but "
                             "grad·(2d) = %.9g (|diff| %.3g > tol %.3g)",
                             path_name[path], c.seed, fd, predicted, fabs(fd - predicted), tol);
                for (int t = 0; t < 3; ++t) free(dir[t]);
            }
            for (int t = 0; t < 3; ++t) tu_tensor_free(&grad[t]);
            case_free(&cd);
        }
    tu_group_end(&g);
}

/* ------------------------------------------------------------ determinism */

/* All outputs of one forward + backward run, gathered as raw bytes. */
typedef struct {
    attn_status st;
    size_t size;
    unsigned char *bytes;
} run_bytes;

static run_bytes run_for_bytes(case_data *cd, int path, int threads)
{
    const sdpa_case *c = cd->c;
    const int64_t shapes[6][4] = {{c->B, c->Hq, c->Nq, c->Dv}, {c->B, c->Hq, c->Nq, 1},
                                  {c->B, c->Hq, c->Nq, c->Nk}, {c->B, c->Hq, c->Nq, c->D},
                                  {c->B, c->Hkv, c->Nk, c->D}, {c->B, c->Hkv, c->Nk, c->Dv}};
    tu_tensor t[6];
    tu_rng lr;
    tu_rng_seed(&lr, c->seed ^ 0x1A70ull);
    for (int i = 0; i < 6; ++i) alloc_view(&t[i], &lr, c->layout, false, i == 1 ? 3 : 4, shapes[i]);
    attn_sdpa_opts opts = case_opts(cd, path, threads);
    run_bytes rb = {0};
    rb.st = attn_sdpa(&cd->q.view, &cd->k.view, &cd->v.view, &t[0].view, &t[1].view, &t[2].view,
                      &opts, NULL);
    if (rb.st == ATTN_OK)
        rb.st = attn_sdpa_backward(&cd->q.view, &cd->k.view, &cd->v.view, &t[0].view, &t[1].view,
                                   &cd->dout.view, &t[3].view, &t[4].view, &t[5].view, &opts,
                                   NULL);
    if (rb.st == ATTN_OK) {
        for (int i = 0; i < 6; ++i) rb.size += (size_t)tu_numel(&t[i].view) * sizeof(float);
        rb.bytes = xcalloc((int64_t)rb.size, 1);
        size_t at = 0;
        for (int i = 0; i < 6; ++i) {
            tu_gather_bytes(&t[i].view, rb.bytes + at);
            at += (size_t)tu_numel(&t[i].view) * sizeof(float);
        }
    }
    for (int i = 0; i < 6; ++i) tu_tensor_free(&t[i]);
    return rb;
}

/* Bit-identical results run to run and for 1, 2 and 3 threads. */
static void group_determinism(harness *h)
{
    static const int threads[] = {1, 2, 3, 2, 1};
    tu_group g;
    tu_group_begin(&g, h->suite, "determinism (threads 1/2/3, reruns)");
    const int n = h->opt->quick ? 4 : 12;
    for (int i = 0; i < n; ++i) {
        sdpa_case c = random_case(case_seed(h, g.name, i));
        /* big enough that every thread gets several rows and kv heads */
        c.B = 2, c.Hkv = 2, c.Hq = 2 * (1 + i % 3);
        c.Nq = 37 + 10 * (i % 4), c.Nk = 70 - 9 * (i % 3);
        c.D = 16 + 17 * (i % 3), c.Dv = c.D + (i % 2);
        fit_budget(&c, 3e6);
        case_data cd;
        case_init(&cd, &c);
        for (int path = 0; path < NPATHS; ++path) {
            if (!g_path_enabled[path]) continue;
            tu_crash_context("group '%s', path %s, case seed 0x%016" PRIx64, g.name,
                             path_name[path], c.seed);
            run_bytes first = run_for_bytes(&cd, path, threads[0]);
            if (first.st == ATTN_ERR_UNSUPPORTED && path == PATH_FUSED) {
                tu_group_skip(&g, FUSED_SKIP);
                continue;
            }
            bool ok = first.st == ATTN_OK;
            if (!ok)
                tu_group_fail(&g, "path=%s case seed=0x%016" PRIx64 ": call failed (%s)",
                              path_name[path], c.seed, attn_status_string(first.st));
            for (size_t t = 1; ok && t < sizeof threads / sizeof threads[0]; ++t) {
                run_bytes again = run_for_bytes(&cd, path, threads[t]);
                if (again.st != ATTN_OK || again.size != first.size ||
                    memcmp(again.bytes, first.bytes, first.size) != 0) {
                    tu_group_fail(&g, "path=%s case seed=0x%016" PRIx64 ": results with %d "
                                      "threads (run %zu) differ from %d threads (run 0)",
                                  path_name[path], c.seed, threads[t], t, threads[0]);
                    ok = false;
                }
                free(again.bytes);
            }
            if (ok) tu_group_pass(&g);
            free(first.bytes);
        }
        case_free(&cd);
    }
    tu_group_end(&g);
}

/* -------------------------------------------------------------- workspace */

/* attn_sdpa_workspace_size, then a caller-provided workspace of exactly
 * that size (results identical to allocating internally, nothing written
 * past its end), and a too-small one (ATTN_ERR_WORKSPACE naming it). */
static void group_workspace(harness *h)
{
    tu_group g;
    tu_group_begin(&g, h->suite, "workspace");
    for (int i = 0; i < 4; ++i) {
        sdpa_case c = small_case(case_seed(h, g.name, i));
        c.threads = 2;
        case_data cd;
        case_init(&cd, &c);
        for (int path = 0; path < NPATHS; ++path)
            for (int backward = 0; backward < 2 && g_path_enabled[path]; ++backward) {
                tu_crash_context("group '%s', path %s, %s, case seed 0x%016" PRIx64, g.name,
                                 path_name[path], backward ? "backward" : "forward", c.seed);
                attn_sdpa_opts opts = case_opts(&cd, path, 2);
                attn_error err;
                size_t bytes = 0;
                attn_status st = attn_sdpa_workspace_size(&cd.q.view, &cd.k.view, &cd.v.view,
                                                          backward, &opts, &bytes, &err);
                if (st == ATTN_ERR_UNSUPPORTED && path == PATH_FUSED) {
                    tu_group_skip(&g, FUSED_SKIP);
                    continue;
                }
                if (!tu_check(&g, st == ATTN_OK, "path=%s workspace_size returned %s: %s",
                              path_name[path], attn_status_string(st), err.message))
                    continue;
                const int64_t os[4] = {c.B, c.Hq, c.Nq, c.Dv}, qs[4] = {c.B, c.Hq, c.Nq, c.D};
                tu_tensor a, b;
                const int64_t *shape = backward ? qs : os;
                xalloc(&a, ATTN_F32, 4, shape, NULL);
                xalloc(&b, ATTN_F32, 4, shape, NULL);
                const size_t guard = 64;
                unsigned char *ws = xcalloc((int64_t)(bytes + guard), 1);
                memset(ws, 0xEE, bytes + guard);
                attn_status s1, s2;
                if (!backward) {
                    s1 = attn_sdpa(&cd.q.view, &cd.k.view, &cd.v.view, &a.view, NULL, NULL, &opts, &err);
                    opts.workspace = ws, opts.workspace_size = bytes;
                    s2 = attn_sdpa(&cd.q.view, &cd.k.view, &cd.v.view, &b.view, NULL, NULL, &opts, &err);
                } else {
                    s1 = attn_sdpa_backward(&cd.q.view, &cd.k.view, &cd.v.view, NULL, NULL,
                                            &cd.dout.view, &a.view, NULL, NULL, &opts, &err);
                    opts.workspace = ws, opts.workspace_size = bytes;
                    s2 = attn_sdpa_backward(&cd.q.view, &cd.k.view, &cd.v.view, NULL, NULL,
                                            &cd.dout.view, &b.view, NULL, NULL, &opts, &err);
                }
                if (s2 == ATTN_ERR_UNSUPPORTED && path == PATH_FUSED) {
                    tu_group_skip(&g, FUSED_SKIP);
                } else {
                    bool guard_ok = true;
                    for (size_t e = bytes; e < bytes + guard; ++e) guard_ok &= ws[e] == 0xEE;
                    int64_t n = tu_numel(&a.view);
                    bool same = s1 == ATTN_OK && s2 == ATTN_OK &&
                                memcmp(a.base, b.base, (size_t)n * sizeof(float)) == 0;
                    tu_check(&g, same && guard_ok,
                             "path=%s %s with a %zu-byte caller workspace: status %s/%s, results "
                             "%s, %s",
                             path_name[path], backward ? "backward" : "forward", bytes,
                             attn_status_string(s1), attn_status_string(s2),
                             same ? "identical" : "differ from internal allocation",
                             guard_ok ? "guard intact" : "wrote past the workspace");
                    if (bytes >= 16) { /* too small: must be refused, naming it */
                        opts.workspace_size = bytes / 2;
                        memset(&err, 0, sizeof err);
                        st = backward ? attn_sdpa_backward(&cd.q.view, &cd.k.view, &cd.v.view,
                                                           NULL, NULL, &cd.dout.view, &b.view,
                                                           NULL, NULL, &opts, &err)
                                      : attn_sdpa(&cd.q.view, &cd.k.view, &cd.v.view, &b.view,
                                                  NULL, NULL, &opts, &err);
                        tu_check(&g, st == ATTN_ERR_WORKSPACE && strstr(err.message, "workspace"),
                                 "path=%s %s with half the workspace: expected '%s' naming "
                                 "'workspace', got '%s': %s",
                                 path_name[path], backward ? "backward" : "forward",
                                 attn_status_string(ATTN_ERR_WORKSPACE), attn_status_string(st),
                                 err.message);
                    }
                }
                free(ws);
                tu_tensor_free(&a);
                tu_tensor_free(&b);
            }
        case_free(&cd);
    }
    tu_group_end(&g);
}

/* ------------------------------------------------------ argument checks */

/* Valid small inputs the validation checks start from and break one at a time. */
typedef struct {
    float buf[8][4096];
    uint8_t mbuf[4096];
    attn_tensor q, k, v, out, lse, w, dout, dq, dk, dv, mask, mask2;
    attn_sdpa_opts opts;
} arg_fixture;

enum { AB = 2, AHQ = 4, AHKV = 2, ANQ = 5, ANK = 7, AD = 8, ADV = 6 };

static void arg_fixture_init(arg_fixture *f)
{
    for (int i = 0; i < 8; ++i)
        for (int j = 0; j < 4096; ++j) f->buf[i][j] = (float)((i * 31 + j * 7) % 13) / 13.0f;
    memset(f->mbuf, 1, sizeof f->mbuf);
    f->q = attn_tensor_4d(f->buf[0], AB, AHQ, ANQ, AD);
    f->k = attn_tensor_4d(f->buf[1], AB, AHKV, ANK, AD);
    f->v = attn_tensor_4d(f->buf[2], AB, AHKV, ANK, ADV);
    f->out = attn_tensor_4d(f->buf[3], AB, AHQ, ANQ, ADV);
    f->lse = attn_tensor_3d(f->buf[4], AB, AHQ, ANQ);
    f->w = attn_tensor_4d(f->buf[5], AB, AHQ, ANQ, ANK);
    f->dout = attn_tensor_4d(f->buf[6], AB, AHQ, ANQ, ADV);
    f->dq = attn_tensor_4d(f->buf[7], AB, AHQ, ANQ, AD);
    f->dk = attn_tensor_4d(f->buf[4] + 1024, AB, AHKV, ANK, AD);
    f->dv = attn_tensor_4d(f->buf[4] + 2048, AB, AHKV, ANK, ADV);
    f->mask = attn_tensor_make(f->mbuf, ATTN_BOOL, 2, (int64_t[]){ANQ, ANK});
    f->mask2 = attn_tensor_make(f->mbuf, ATTN_BOOL, 2, (int64_t[]){ANK, ANQ}); /* transposed: invalid */
    f->opts = attn_sdpa_opts_default();
    f->opts.num_threads = 1;
}

static attn_status arg_forward(arg_fixture *f, attn_error *err)
{
    return attn_sdpa(&f->q, &f->k, &f->v, &f->out, &f->lse, &f->w, &f->opts, err);
}
static attn_status arg_backward(arg_fixture *f, attn_error *err)
{
    return attn_sdpa_backward(&f->q, &f->k, &f->v, &f->out, &f->lse, &f->dout, &f->dq, &f->dk,
                              &f->dv, &f->opts, err);
}

/* Expects `st` with a message containing one of the `names` (NULL-terminated). */
static void expect_error(tu_group *g, const char *what, attn_status st, const attn_error *err,
                         attn_status want, const char *const *names)
{
    bool named = false;
    for (int i = 0; names[i]; ++i) named |= strstr(err->message, names[i]) != NULL;
    tu_check(g, st == want && err->status == st && named,
             "%s: expected '%s' with a message naming '%s'; got '%s' (err.status '%s'): \"%s\"",
             what, attn_status_string(want), names[0], attn_status_string(st),
             attn_status_string(err->status), err->message);
}

#define NAMES(...) ((const char *const[]){__VA_ARGS__, NULL})

static void group_arguments(harness *h)
{
    tu_group g;
    tu_group_begin(&g, h->suite, "argument validation");
    arg_fixture *f = xcalloc(1, sizeof *f);
    attn_error err;
    attn_status st;

    /* The untouched fixture is valid, with and without err / opts. */
    arg_fixture_init(f);
    st = arg_forward(f, &err);
    tu_check(&g, st == ATTN_OK && err.status == ATTN_OK, "valid forward fixture: got %s: %s",
             attn_status_string(st), err.message);
    st = arg_backward(f, &err);
    tu_check(&g, st == ATTN_OK, "valid backward fixture: got %s: %s", attn_status_string(st),
             err.message);
    st = attn_sdpa(&f->q, &f->k, &f->v, &f->out, NULL, NULL, NULL, NULL);
    tu_check(&g, st == ATTN_OK, "opts = NULL and err = NULL: got %s", attn_status_string(st));
    st = attn_sdpa(NULL, &f->k, &f->v, &f->out, NULL, NULL, NULL, NULL);
    tu_check(&g, st == ATTN_ERR_NULL, "query NULL with err = NULL: got %s", attn_status_string(st));

/* Breaks the fixture with `stmt`, runs `call`, expects `want` naming one of
 * the names; the fixture is rebuilt for each check. */
#define EXPECT(call, what, want, names, stmt)                                                  \
    do {                                                                                       \
        arg_fixture_init(f);                                                                   \
        memset(&err, 0, sizeof err);                                                           \
        stmt;                                                                                  \
        st = call;                                                                             \
        expect_error(&g, what, st, &err, want, names);                                         \
    } while (0)
#define FWD arg_forward(f, &err)
#define BWD arg_backward(f, &err)

    /* NULL tensors and data */
    EXPECT(attn_sdpa(NULL, &f->k, &f->v, &f->out, NULL, NULL, &f->opts, &err), "forward: query NULL",
           ATTN_ERR_NULL, NAMES("query"), (void)0);
    EXPECT(attn_sdpa(&f->q, NULL, &f->v, &f->out, NULL, NULL, &f->opts, &err), "forward: key NULL",
           ATTN_ERR_NULL, NAMES("key"), (void)0);
    EXPECT(attn_sdpa(&f->q, &f->k, NULL, &f->out, NULL, NULL, &f->opts, &err), "forward: value NULL",
           ATTN_ERR_NULL, NAMES("value"), (void)0);
    EXPECT(attn_sdpa(&f->q, &f->k, &f->v, NULL, NULL, NULL, &f->opts, &err), "forward: out NULL",
           ATTN_ERR_NULL, NAMES("out"), (void)0);
    EXPECT(FWD, "forward: query data NULL", ATTN_ERR_NULL, NAMES("query"), f->q.data = NULL);
    EXPECT(FWD, "forward: value data NULL", ATTN_ERR_NULL, NAMES("value"), f->v.data = NULL);
    EXPECT(FWD, "forward: lse data NULL", ATTN_ERR_NULL, NAMES("lse"), f->lse.data = NULL);
    arg_fixture_init(f);
    memset(&err, 0, sizeof err);
    st = attn_sdpa_backward(&f->q, NULL, &f->v, NULL, NULL, &f->dout, &f->dq, NULL, NULL, &f->opts, &err);
    expect_error(&g, "backward: key NULL", st, &err, ATTN_ERR_NULL, NAMES("key"));
    arg_fixture_init(f);
    memset(&err, 0, sizeof err);
    st = attn_sdpa_backward(&f->q, &f->k, &f->v, NULL, NULL, NULL, &f->dq, NULL, NULL, &f->opts, &err);
    expect_error(&g, "backward: grad_out NULL", st, &err, ATTN_ERR_NULL,
                 NAMES("grad_out", "dout", "d_out", "grad out"));

    /* ranks and dtypes */
    EXPECT(FWD, "forward: query with 3 dims", ATTN_ERR_SHAPE, NAMES("query"), f->q.ndim = 3);
    EXPECT(FWD, "forward: key with 5 dims", ATTN_ERR_SHAPE, NAMES("key"),
           (f->k.ndim = 5, f->k.shape[4] = 1, f->k.stride[4] = 1));
    EXPECT(FWD, "forward: lse with 4 dims", ATTN_ERR_SHAPE, NAMES("lse"),
           (f->lse.ndim = 4, f->lse.shape[3] = 1, f->lse.stride[3] = 1));
    EXPECT(FWD, "forward: bool query", ATTN_ERR_DTYPE, NAMES("query"), f->q.dtype = ATTN_BOOL);
    EXPECT(FWD, "forward: bool out", ATTN_ERR_DTYPE, NAMES("out"), f->out.dtype = ATTN_BOOL);

    /* mismatched sizes */
    EXPECT(FWD, "forward: key batch 3 vs query batch 2", ATTN_ERR_SHAPE, NAMES("key"),
           f->k = attn_tensor_4d(f->buf[1], 3, AHKV, ANK, AD));
    EXPECT(FWD, "forward: key feature 9 vs query 8", ATTN_ERR_SHAPE, NAMES("key"),
           f->k = attn_tensor_4d(f->buf[1], AB, AHKV, ANK, AD + 1));
    EXPECT(FWD, "forward: 3 kv heads for 4 query heads", ATTN_ERR_SHAPE, NAMES("key", "head"),
           (f->k = attn_tensor_4d(f->buf[1], AB, 3, ANK, AD),
            f->v = attn_tensor_4d(f->buf[2], AB, 3, ANK, ADV)));
    EXPECT(FWD, "forward: 8 kv heads for 4 query heads", ATTN_ERR_SHAPE, NAMES("key", "head"),
           (f->k = attn_tensor_4d(f->buf[1], AB, 8, ANK, AD),
            f->v = attn_tensor_4d(f->buf[2], AB, 8, ANK, ADV)));
    EXPECT(FWD, "forward: value length 6 vs key 7", ATTN_ERR_SHAPE, NAMES("value"),
           f->v = attn_tensor_4d(f->buf[2], AB, AHKV, ANK - 1, ADV));
    EXPECT(FWD, "forward: value heads 1 vs key 2", ATTN_ERR_SHAPE, NAMES("value"),
           f->v = attn_tensor_4d(f->buf[2], AB, 1, ANK, ADV));
    EXPECT(FWD, "forward: value batch 1 vs 2", ATTN_ERR_SHAPE, NAMES("value"),
           f->v = attn_tensor_4d(f->buf[2], 1, AHKV, ANK, ADV));
    EXPECT(FWD, "forward: out feature 5 vs Dv 6", ATTN_ERR_SHAPE, NAMES("out"),
           f->out = attn_tensor_4d(f->buf[3], AB, AHQ, ANQ, ADV - 1));
    EXPECT(FWD, "forward: out length 4 vs Nq 5", ATTN_ERR_SHAPE, NAMES("out"),
           f->out = attn_tensor_4d(f->buf[3], AB, AHQ, ANQ - 1, ADV));
    EXPECT(FWD, "forward: lse (B,Hq,Nq+1)", ATTN_ERR_SHAPE, NAMES("lse"),
           f->lse = attn_tensor_3d(f->buf[4], AB, AHQ, ANQ + 1));
    EXPECT(FWD, "forward: weights (B,Hq,Nq,Nk-1)", ATTN_ERR_SHAPE, NAMES("weights"),
           f->w = attn_tensor_4d(f->buf[5], AB, AHQ, ANQ, ANK - 1));
    /* (built by hand: the contiguous constructors have no error channel) */
    EXPECT(FWD, "forward: element count overflows", ATTN_ERR_OVERFLOW, NAMES("query"),
           (f->q.shape[0] = (int64_t)1 << 40, f->q.shape[1] = (int64_t)1 << 40));
    EXPECT(FWD, "forward: stride reach overflows", ATTN_ERR_OVERFLOW, NAMES("key"),
           f->k.stride[0] = INT64_MAX);
    EXPECT(FWD, "forward: negative size", ATTN_ERR_SHAPE, NAMES("query"), f->q.shape[2] = -1);

    /* masks: bad broadcast shapes, ranks, dtypes, in either slot */
    EXPECT(FWD, "forward: mask (Nq+1,Nk)", ATTN_ERR_SHAPE, NAMES("mask"),
           (f->mask = attn_tensor_make(f->mbuf, ATTN_BOOL, 2, (int64_t[]){ANQ + 1, ANK}),
            f->opts.mask[0] = &f->mask));
    EXPECT(FWD, "forward: mask (Nk+1)", ATTN_ERR_SHAPE, NAMES("mask"),
           (f->mask = attn_tensor_make(f->mbuf, ATTN_BOOL, 1, (int64_t[]){ANK + 1}),
            f->opts.mask[0] = &f->mask));
    EXPECT(FWD, "forward: mask (3,1,Nq,Nk) with B=2", ATTN_ERR_SHAPE, NAMES("mask"),
           (f->mask = attn_tensor_make(f->mbuf, ATTN_BOOL, 4, (int64_t[]){3, 1, ANQ, ANK}),
            f->opts.mask[0] = &f->mask));
    EXPECT(FWD, "forward: mask (B,Hkv,Nq,Nk) with Hkv != Hq", ATTN_ERR_SHAPE, NAMES("mask"),
           (f->mask = attn_tensor_make(f->mbuf, ATTN_F32, 4, (int64_t[]){AB, AHKV, ANQ, ANK}),
            f->mask.data = f->buf[5], f->opts.mask[0] = &f->mask));
    EXPECT(FWD, "forward: mask with 5 dims", ATTN_ERR_SHAPE, NAMES("mask"),
           (f->mask = attn_tensor_make(f->mbuf, ATTN_BOOL, 5, (int64_t[]){1, AB, AHQ, ANQ, ANK}),
            f->opts.mask[0] = &f->mask));
    EXPECT(FWD, "forward: bad mask in slot 1", ATTN_ERR_SHAPE, NAMES("mask[1]", "mask 1", "mask1"),
           (f->opts.mask[0] = &f->mask, f->opts.mask[1] = &f->mask2));
    EXPECT(FWD, "forward: mask of unknown dtype", ATTN_ERR_DTYPE, NAMES("mask"),
           (f->mask.dtype = (attn_dtype)7, f->opts.mask[0] = &f->mask));
    EXPECT(BWD, "backward: mask (Nq,Nk+1)", ATTN_ERR_SHAPE, NAMES("mask"),
           (f->mask = attn_tensor_make(f->mbuf, ATTN_BOOL, 2, (int64_t[]){ANQ, ANK + 1}),
            f->opts.mask[0] = &f->mask));

    /* options */
    EXPECT(FWD, "forward: scale -1", ATTN_ERR_ARG, NAMES("scale"), f->opts.scale = -1.0f);
    EXPECT(FWD, "forward: scale NaN", ATTN_ERR_ARG, NAMES("scale"), f->opts.scale = NAN);
    EXPECT(FWD, "forward: scale inf", ATTN_ERR_ARG, NAMES("scale"), f->opts.scale = INFINITY);
    EXPECT(BWD, "backward: scale -0.5", ATTN_ERR_ARG, NAMES("scale"), f->opts.scale = -0.5f);
    EXPECT(FWD, "forward: causal 7", ATTN_ERR_ARG, NAMES("causal"), f->opts.causal = (attn_causal)7);
    EXPECT(FWD, "forward: path 9", ATTN_ERR_ARG, NAMES("path"), f->opts.path = (attn_path)9);
    EXPECT(FWD, "forward: num_threads -1", ATTN_ERR_ARG, NAMES("thread"), f->opts.num_threads = -1);

    /* outputs may not broadcast */
    EXPECT(FWD, "forward: out with stride 0", ATTN_ERR_STRIDE, NAMES("out"), f->out.stride[2] = 0);
    EXPECT(FWD, "forward: lse with stride 0", ATTN_ERR_STRIDE, NAMES("lse"), f->lse.stride[1] = 0);
    EXPECT(FWD, "forward: weights with stride 0", ATTN_ERR_STRIDE, NAMES("weights"),
           f->w.stride[3] = 0);
    EXPECT(BWD, "backward: dq with stride 0", ATTN_ERR_STRIDE, NAMES("grad_query", "dq"),
           f->dq.stride[0] = 0);
    EXPECT(BWD, "backward: dk with stride 0", ATTN_ERR_STRIDE, NAMES("grad_key", "dk"),
           f->dk.stride[2] = 0);
    EXPECT(BWD, "backward: dv with stride 0", ATTN_ERR_STRIDE, NAMES("grad_value", "dv"),
           f->dv.stride[3] = 0);

    /* backward shapes */
    EXPECT(BWD, "backward: dout (B,Hq,Nq,Dv+1)", ATTN_ERR_SHAPE, NAMES("grad_out", "dout"),
           f->dout = attn_tensor_4d(f->buf[6], AB, AHQ, ANQ, ADV + 1));
    EXPECT(BWD, "backward: dq (B,Hq,Nq,D-1)", ATTN_ERR_SHAPE, NAMES("grad_query", "dq"),
           f->dq = attn_tensor_4d(f->buf[7], AB, AHQ, ANQ, AD - 1));
    EXPECT(BWD, "backward: dk with Hq heads", ATTN_ERR_SHAPE, NAMES("grad_key", "dk"),
           f->dk = attn_tensor_4d(f->buf[4] + 1024, AB, AHQ, ANK, AD));
    EXPECT(BWD, "backward: dv (B,Hkv,Nk,D)", ATTN_ERR_SHAPE, NAMES("grad_value", "dv"),
           f->dv = attn_tensor_4d(f->buf[4] + 2048, AB, AHKV, ANK, AD));
    EXPECT(BWD, "backward: out (B,Hq,Nq+1,Dv)", ATTN_ERR_SHAPE, NAMES("out"),
           f->out = attn_tensor_4d(f->buf[3], AB, AHQ, ANQ + 1, ADV));
    EXPECT(BWD, "backward: lse (B,Hq)", ATTN_ERR_SHAPE, NAMES("lse"),
           f->lse = attn_tensor_2d(f->buf[4], AB, AHQ));
    EXPECT(BWD, "backward: 3 kv heads for 4 query heads", ATTN_ERR_SHAPE, NAMES("key", "head"),
           (f->k = attn_tensor_4d(f->buf[1], AB, 3, ANK, AD),
            f->v = attn_tensor_4d(f->buf[2], AB, 3, ANK, ADV)));

    /* workspace */
    {
        size_t bytes = 0;
        arg_fixture_init(f);
        st = attn_sdpa_workspace_size(&f->q, &f->k, &f->v, false, &f->opts, NULL, &err);
        expect_error(&g, "workspace_size: bytes NULL", st, &err, ATTN_ERR_NULL, NAMES("bytes"));
        st = attn_sdpa_workspace_size(&f->q, NULL, &f->v, false, &f->opts, &bytes, &err);
        expect_error(&g, "workspace_size: key NULL", st, &err, ATTN_ERR_NULL, NAMES("key"));
        st = attn_sdpa_workspace_size(&f->q, &f->k, &f->v, true, &f->opts, &bytes, &err);
        if (tu_check(&g, st == ATTN_OK, "workspace_size: got %s", attn_status_string(st)) &&
            bytes > 0) {
            unsigned char small[8];
            EXPECT(FWD, "forward: 8-byte workspace", ATTN_ERR_WORKSPACE, NAMES("workspace"),
                   (f->opts.workspace = small, f->opts.workspace_size = sizeof small));
            EXPECT(BWD, "backward: 8-byte workspace", ATTN_ERR_WORKSPACE, NAMES("workspace"),
                   (f->opts.workspace = small, f->opts.workspace_size = sizeof small));
        }
    }
#undef EXPECT
#undef FWD
#undef BWD

    /* attn_tensor_4d with sizes whose product overflows int64 must not be
     * undefined behaviour (the strides are garbage, but validation then
     * rejects the view). Run in a child: a sanitizer build aborts on UB, and
     * that must fail this check rather than end the whole program. */
    {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            attn_tensor t = attn_tensor_4d(f->buf[0], (int64_t)1 << 40, (int64_t)1 << 40, 4, 4);
            _exit(t.ndim == 4 ? 0 : 3);
        }
        int status = 0;
        bool ok = pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
                  WEXITSTATUS(status) == 0;
        tu_check(&g, ok,
                 "attn_tensor_4d(data, 2^40, 2^40, 4, 4) %s (signed overflow in the stride "
                 "computation of attn_tensor_make is undefined behaviour; see the sanitizer "
                 "message above)",
                 pid <= 0 ? "could not be tested (fork failed)"
                 : WIFSIGNALED(status) ? "killed the process by a signal"
                                       : "exited with an error");
    }
    free(f);
    tu_group_end(&g);
}

/* ------------------------------------------------------------- accuracy */

/* Fused error <= 2 x reference error over the suite. Also prints
 * the reference path's error distribution (in units, see the top). */
static void report_accuracy(harness *h)
{
    tu_group g;
    tu_group_begin(&g, h->suite, "accuracy: fused <= 2x reference");
    for (int qi = 0; qi < NQ; ++qi) {
        if (g_acc.ref_cases[qi])
            printf("  %-7s reference error: mean %6.3g, max %6.3g units over %" PRId64
                   " cases (limit %g)\n",
                   quantity_name[qi], g_acc.ref_sum[qi] / (double)g_acc.ref_cases[qi],
                   g_acc.ref_max[qi], g_acc.ref_cases[qi], TOL_UNITS[qi]);
        if (!g_acc.cases[qi]) {
            tu_group_skip(&g, g_acc.fused_unsupported ? FUSED_SKIP
                              : !g_path_enabled[PATH_FUSED] ? "fused path disabled by ATTN_TEST_PATHS"
                                                             : "no case ran both paths");
            continue;
        }
        const double n = (double)g_acc.cases[qi];
        const double ref = g_acc.sum_units[PATH_REF][qi] / n, fused = g_acc.sum_units[PATH_FUSED][qi] / n;
        printf("  %-7s fused error:     mean %6.3g, max %6.3g units over %" PRId64 " cases\n",
               quantity_name[qi], fused, g_acc.max_units[PATH_FUSED][qi], g_acc.cases[qi]);
        tu_check(&g, fused <= 2.0 * ref + 0.1,
                 "%s: mean fused error %.3g units > 2 x mean reference error %.3g", quantity_name[qi],
                 fused, ref);
    }
    if (g_acc.fused_ran && g_acc.fused_identical == g_acc.fused_ran)
        printf("  note: ATTN_PATH_FUSED gave results bit-identical to the reference path in all "
               "%" PRId64 " cases it ran: it appears to fall back to the reference path\n",
               g_acc.fused_ran);
    else if (g_acc.fused_ran)
        printf("  fused path ran in %" PRId64 " cases (%" PRId64 " bit-identical to reference)\n",
               g_acc.fused_ran, g_acc.fused_identical);
    (void)h;
    tu_group_end(&g);
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    tu_prefer_passive_openmp(argv);
    tu_options opt;
    if (!tu_parse_options(argc, argv, DEFAULT_SEED, &opt)) return 2;
    g_verbose = opt.verbose;
    const char *paths = getenv("ATTN_TEST_PATHS");
    if (paths && *paths) {
        g_path_enabled[PATH_REF] = strstr(paths, "reference") != NULL;
        g_path_enabled[PATH_FUSED] = strstr(paths, "fused") != NULL;
    }
    tu_install_crash_handler();
    tu_suite suite = {0};
    harness h = {&suite, &opt, opt.cases >= 0 ? opt.cases
                                              : opt.quick ? QUICK_RANDOM_CASES : DEFAULT_RANDOM_CASES};
    printf("test_sdpa: seed 0x%" PRIx64 ", %" PRId64 " random cases%s; fused errors must be <= 2x "
           "reference (+%g units)\n",
           opt.seed, h.random_cases, opt.quick ? " (quick)" : "", FUSED_FLOOR_UNITS);
    if (!g_path_enabled[PATH_REF] || !g_path_enabled[PATH_FUSED])
        printf("ATTN_TEST_PATHS=%s: running only the %s path\n", paths,
               g_path_enabled[PATH_REF] ? "reference" : g_path_enabled[PATH_FUSED] ? "fused" : "no");
    if (opt.replay) {
        group_replay(&h);
        return tu_suite_finish(&suite);
    }
    static void (*const groups[])(harness *) = {
        group_arguments, group_oracle_fd, group_degenerate, group_causal, group_masks,
        group_empty_rows, group_strides, group_backward_options, group_random,
        group_determinism, group_workspace, group_library_fd,
    };
    static const char *const names[] = {
        "argument validation", "oracle finite differences", "degenerate sizes",
        "causal alignments", "masks and broadcasts", "fully masked rows", "strided views",
        "backward options", "random configurations", "determinism", "workspace",
        "library directional derivatives",
    };
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; ++i)
        if (tu_group_selected(&opt, names[i])) {
            g_group_name = names[i];
            tu_crash_context("group '%s'", names[i]);
            groups[i](&h);
        }
    int64_t compared = g_acc.fused_ran;
    for (int qi = 0; qi < NQ; ++qi) compared += g_acc.ref_cases[qi];
    if (compared) report_accuracy(&h);
    return tu_suite_finish(&suite);
}
