/*
 * test_fused — checks specific to the fused SDPA path:
 *   - the vectorised exp of every kernel table this CPU runs stays within
 *     its documented error bound (SDPA_EXP_MAX_ULP) over the whole range,
 *     and handles -inf / +inf / NaN / out-of-range inputs as documented;
 *   - so does the soft-capping tanh (SDPA_TANH_MAX_ULP), with ±0, ±inf, NaN;
 *   - ATTN_ARCH overrides (generic, avx2, avx512, reference, unknown) pick
 *     what they should and never an ISA the CPU lacks;
 *   - every ISA available here agrees with the reference path, forward and
 *     backward, over masks, causal alignments, GQA, D != Dv and strides;
 *   - results are bit-identical for 1, 2 and 3 threads and across reruns;
 *   - tile-skipping edge cases: tile-boundary sizes, rows and tiles hidden by
 *     causality or masks (hidden keys hold NaN, which must never leak), fully
 *     masked rows (out 0, lse -inf, gradients 0);
 *   - a caller-provided workspace of the reported size works, a smaller one
 *     is refused;
 *   - the kernels' building blocks: GEMM instances, gemm_max, rows_finite,
 *     and softmax_online's fast paths against its general path, bitwise;
 *   - keys whose logits are NaN make the rows that see them NaN (out, lse)
 *     wherever they sit among a row's tiles, on every table and bfloat16
 *     engine here;
 *   - so do NaN and ±inf values of keys a row sees whose probability is 0,
 *     on tiles whose rows see different keys.
 * The float64-oracle accuracy suite lives in test_sdpa.c.
 *
 * Usage: test_fused [--seed S] [--quick] [--group NAME] [-v]
 */
#include "attn.h"
#include "testutil.h"

#include "../src/kernels/kernels.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SEED 0xF05EDull

/* ------------------------------------------------------------ ISA tables */

typedef struct {
    const char *name;
    const sdpa_kernels *kern;
} isa_entry;

/* Kernel tables this CPU can run (generic always). */
static int available_isas(isa_entry *out)
{
    int n = 0;
    out[n++] = (isa_entry){"generic", &sdpa_kernels_generic};
#if defined(SDPA_HAVE_X86) && (defined(__GNUC__) || defined(__clang__))
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        out[n++] = (isa_entry){"avx2", &sdpa_kernels_avx2};
    if (__builtin_cpu_supports("avx512f")) out[n++] = (isa_entry){"avx512", &sdpa_kernels_avx512};
#endif
#if defined(SDPA_HAVE_NEON)
    if (sdpa_isa_best() == SDPA_ISA_NEON) out[n++] = (isa_entry){"neon", &sdpa_kernels_neon};
#endif
    return n;
}

static const char *best_isa_name(void)
{
    isa_entry e[3];
    int n = available_isas(e);
    return e[n - 1].name;
}

static void set_arch(const char *name)
{
    if (name)
        setenv("ATTN_ARCH", name, 1);
    else
        unsetenv("ATTN_ARCH");
}

/* ------------------------------------------------------------ vexp */

/* Error of y against exact in units of the last place of exact (float). */
static double ulp_error(float y, double exact)
{
    int e;
    frexp(exact, &e); /* exact = m·2^e, 0.5 <= m < 1 */
    const double ulp = ldexp(1.0, e - 24);
    return fabs((double)y - exact) / ulp;
}

static void test_vexp(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "vexp error bound");
    isa_entry isas[3];
    const int nisa = available_isas(isas);
    enum { CHUNK = 4096 };
    static float x[CHUNK], y[CHUNK];
    const int64_t samples = opt->quick ? (1 << 18) : (1 << 22);
    for (int k = 0; k < nisa; ++k) {
        const sdpa_kernels *kern = isas[k].kern;
        double worst = 0.0;
        float worst_x = 0.0f;
        int64_t done = 0;
        /* Evenly spaced over [MIN, MAX], then every float in the last ulps
         * around 0 and both ends. */
        const double lo = SDPA_EXP_MIN, hi = SDPA_EXP_MAX;
        while (done < samples) {
            int n = 0;
            for (; n < CHUNK && done < samples; ++n, ++done)
                x[n] = (float)(lo + (hi - lo) * (double)done / (double)(samples - 1));
            kern->vexp(x, y, n);
            for (int i = 0; i < n; ++i) {
                if (x[i] < SDPA_EXP_MIN || x[i] > SDPA_EXP_MAX) continue;
                const double err = ulp_error(y[i], exp((double)x[i]));
                if (err > worst || err != err) worst = err, worst_x = x[i];
            }
        }
        const float anchors[] = {0.0f, SDPA_EXP_MIN, SDPA_EXP_MAX, 1e-7f, -1e-7f, 0.5f, -0.5f};
        for (size_t a = 0; a < sizeof anchors / sizeof anchors[0]; ++a) {
            for (int i = 0; i < 256; ++i) {
                x[i] = anchors[a];
                for (int j = 0; j < i; ++j) x[i] = nextafterf(x[i], -INFINITY);
                x[256 + i] = anchors[a];
                for (int j = 0; j < i; ++j) x[256 + i] = nextafterf(x[256 + i], INFINITY);
            }
            kern->vexp(x, y, 512);
            for (int i = 0; i < 512; ++i) {
                if (x[i] < SDPA_EXP_MIN || x[i] > SDPA_EXP_MAX) continue;
                const double err = ulp_error(y[i], exp((double)x[i]));
                if (err > worst || err != err) worst = err, worst_x = x[i];
            }
        }
        tu_check(&g, worst <= SDPA_EXP_MAX_ULP, "%s: max error %.3f ulp at x=%.9g > bound %d",
                 isas[k].name, worst, (double)worst_x, SDPA_EXP_MAX_ULP);
        tu_group_note(&g, "%s: max error %.3f ulp over [%g, %g] (bound %d)", isas[k].name, worst,
                      (double)SDPA_EXP_MIN, (double)SDPA_EXP_MAX, SDPA_EXP_MAX_ULP);

        /* Outside the range and special values, in every lane position. */
        const float special[] = {-INFINITY, -1e30f, -200.0f, -87.0f, SDPA_EXP_MIN - 0.01f,
                                 INFINITY,  1e30f,  89.0f,   SDPA_EXP_MAX + 0.01f, NAN,
                                 0.0f,      -0.0f};
        const int nsp = (int)(sizeof special / sizeof special[0]);
        for (int i = 0; i < 64; ++i) x[i] = special[i % nsp];
        kern->vexp(x, y, 64);
        bool ok = true;
        for (int i = 0; i < 64; ++i) {
            const float v = x[i];
            if (v != v) ok &= y[i] != y[i];
            else if (v < SDPA_EXP_MIN) ok &= y[i] == 0.0f && exp((double)v) < 2.4e-38;
            else if (v > SDPA_EXP_MAX) ok &= y[i] == INFINITY && exp((double)v) > 2.4e38;
            else if (v == 0.0f) ok &= y[i] == 1.0f;
        }
        tu_check(&g, ok, "%s: special values (-inf->0, tiny->0, huge->inf, NaN->NaN, 0->1)",
                 isas[k].name);
        /* Odd lengths exercise the scalar tail. */
        for (int n = 1; n < 40; ++n) {
            for (int i = 0; i < n; ++i) x[i] = -0.37f * (float)i;
            kern->vexp(x, y, n);
            double e = 0.0;
            for (int i = 0; i < n; ++i) e = fmax(e, ulp_error(y[i], exp((double)x[i])));
            if (!tu_check(&g, e <= SDPA_EXP_MAX_ULP, "%s: length %d tail error %.3f ulp",
                          isas[k].name, n, e))
                break;
        }
    }
    tu_group_end(&g);
}

/* ------------------------------------------------------------ vtanh */

/* The soft-capping tanh of every kernel table against double tanh: the
 * polynomial below SDPA_TANH_SMALL, the exp quotient above (incl. the SIMD
 * bodies' refined reciprocal), lanes of both kinds in one vector, and the
 * special values. */
static void test_vtanh(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "vtanh error bound");
    isa_entry isas[3];
    const int nisa = available_isas(isas);
    enum { CHUNK = 4096 };
    static float x[CHUNK], y[CHUNK];
    const int64_t samples = opt->quick ? (1 << 18) : (1 << 22);
    for (int k = 0; k < nisa; ++k) {
        const sdpa_kernels *kern = isas[k].kern;
        double worst = 0.0;
        float worst_x = 0.0f;
        int64_t done = 0;
        /* Evenly spaced over [-12, 12] (saturated beyond), interleaved with
         * a geometric sweep down to 1e-30 so every vector mixes both
         * branches. */
        while (done < samples) {
            int n = 0;
            for (; n < CHUNK && done < samples; ++n, ++done)
                x[n] = n % 2 ? (float)(-12.0 + 24.0 * (double)done / (double)(samples - 1))
                             : (float)((done % 4 ? -1.0 : 1.0) *
                                       pow(10.0, -30.0 + 31.0 * (double)done / (double)samples));
            kern->vtanh(x, y, n);
            for (int i = 0; i < n; ++i) {
                const double err = ulp_error(y[i], tanh((double)x[i]));
                if (err > worst || err != err) worst = err, worst_x = x[i];
            }
        }
        /* Every float in the last ulps around the branch point. */
        for (int i = 0; i < 512; ++i) {
            x[i] = i % 2 ? SDPA_TANH_SMALL : -SDPA_TANH_SMALL;
            for (int j = 0; j < i / 2 - 128; ++j) x[i] = nextafterf(x[i], INFINITY);
            for (int j = 0; j < 128 - i / 2; ++j) x[i] = nextafterf(x[i], 0.0f);
        }
        kern->vtanh(x, y, 512);
        for (int i = 0; i < 512; ++i) {
            const double err = ulp_error(y[i], tanh((double)x[i]));
            if (err > worst || err != err) worst = err, worst_x = x[i];
        }
        tu_check(&g, worst <= SDPA_TANH_MAX_ULP, "%s: max error %.3f ulp at x=%.9g > bound %d",
                 isas[k].name, worst, (double)worst_x, SDPA_TANH_MAX_ULP);
        tu_group_note(&g, "%s: max error %.3f ulp (bound %d)", isas[k].name, worst,
                      SDPA_TANH_MAX_ULP);

        const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e30f, -1e30f, 100.0f};
        const int nsp = (int)(sizeof special / sizeof special[0]);
        for (int i = 0; i < 64; ++i) x[i] = special[i % nsp];
        kern->vtanh(x, y, 64);
        bool ok = true;
        for (int i = 0; i < 64; ++i) {
            const float v = x[i];
            if (v != v) ok &= y[i] != y[i];
            else if (v == 0.0f) ok &= y[i] == 0.0f && signbit(y[i]) == signbit(v);
            else ok &= y[i] == (v > 0.0f ? 1.0f : -1.0f);
        }
        tu_check(&g, ok, "%s: special values (±0 -> ±0, ±inf and huge -> ±1, NaN -> NaN)",
                 isas[k].name);
    }
    tu_group_end(&g);
}

/* ------------------------------------------------------------ ATTN_ARCH */

static void test_arch_override(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "ATTN_ARCH override");
    const char *best = best_isa_name();
    isa_entry isas[3];
    const int nisa = available_isas(isas);
    set_arch(NULL);
    tu_check(&g, !strcmp(attn_isa(), best), "unset: attn_isa() = %s, CPU best is %s", attn_isa(),
             best);
    set_arch("generic");
    tu_check(&g, !strcmp(attn_isa(), "generic"), "generic: attn_isa() = %s", attn_isa());
    set_arch("reference");
    tu_check(&g, !strcmp(attn_isa(), "reference"), "reference: attn_isa() = %s", attn_isa());
    set_arch("no-such-isa");
    tu_check(&g, !strcmp(attn_isa(), best), "unknown name: attn_isa() = %s, want %s", attn_isa(),
             best);
    /* A requested ISA is honoured when available, else capped at the best
     * (on AArch64, where neon is the best, an x86 name gives neon). */
    const char *want_avx2 = nisa >= 2 ? strcmp(best, "neon") == 0 ? "neon" : "avx2" : "generic";
    set_arch("avx2");
    tu_check(&g, !strcmp(attn_isa(), want_avx2), "avx2: attn_isa() = %s, want %s", attn_isa(),
             want_avx2);
    set_arch("avx512");
    tu_check(&g, !strcmp(attn_isa(), best), "avx512: attn_isa() = %s, want %s (never an ISA "
             "the CPU lacks)", attn_isa(), best);
    const char *want_neon = strcmp(best, "neon") == 0 ? "neon" : best;
    set_arch("neon");
    tu_check(&g, !strcmp(attn_isa(), want_neon), "neon: attn_isa() = %s, want %s", attn_isa(),
             want_neon);
    for (int k = 0; k < nisa; ++k) {
        set_arch(isas[k].name);
        tu_check(&g, sdpa_kernels_for(sdpa_isa_select()) == isas[k].kern,
                 "%s: dispatch table is not %s's", isas[k].name, isas[k].name);
    }
    set_arch(NULL);
    tu_group_end(&g);
}

/* ------------------------------------------------------------ cases */

enum {
    MASK_NONE,
    MASK_BOOL_RANDOM,  /* (Nq,Nk) bool, ~30% blocked */
    MASK_KEY_PADDING,  /* (B,1,1,Nk) bool: keys >= valid[b] blocked */
    MASK_FLOAT_BLOCKS, /* (B,Hq,Nq,Nk) float: values plus -inf key blocks of 64 */
    MASK_ROWS_OFF,     /* (Nq,1) bool: some rows see nothing */
    MASK_BOTH,         /* key padding + random float (Nq,Nk) */
    MASK_KINDS
};
static const char *const mask_name[MASK_KINDS] = {"none", "bool", "keypad", "float-blocks",
                                                  "rows-off", "both"};

typedef struct {
    int64_t B, Hq, Hkv, Nq, Nk, D, Dv;
    attn_causal causal;
    int mask;
    bool weights;
    bool strided;
    bool poison_hidden; /* keys no query may see hold NaN in K and V */
} fcase;

static void describe(const fcase *c, char *buf, size_t n)
{
    static const char *const causal_name[] = {"none", "top-left", "bottom-right"};
    snprintf(buf, n, "B=%" PRId64 " Hq=%" PRId64 " Hkv=%" PRId64 " Nq=%" PRId64 " Nk=%" PRId64
                     " D=%" PRId64 " Dv=%" PRId64 " causal=%s mask=%s weights=%d strided=%d",
             c->B, c->Hq, c->Hkv, c->Nq, c->Nk, c->D, c->Dv, causal_name[c->causal],
             mask_name[c->mask], c->weights, c->strided);
}

typedef struct {
    fcase c;
    tu_tensor q, k, v, m0, m1, out, lse, w, dout, dq, dk, dv;
    int nmask;
    int64_t *valid; /* key padding: valid keys per batch */
} fdata;

static bool alloc4(tu_tensor *t, attn_dtype dt, int64_t a, int64_t b, int64_t c, int64_t d,
                   bool strided, bool output, tu_rng *r)
{
    const int64_t shape[4] = {a, b, c, d};
    tu_layout l = strided ? tu_layout_random(r, 4, output ? TU_LAYOUT_OUTPUT : TU_LAYOUT_OUTPUT)
                          : tu_layout_contiguous(4);
    return tu_tensor_alloc(t, dt, 4, shape, &l);
}

static void fdata_free(fdata *f)
{
    tu_tensor *all[] = {&f->q, &f->k, &f->v, &f->m0, &f->m1, &f->out, &f->lse,
                        &f->w, &f->dout, &f->dq, &f->dk, &f->dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) tu_tensor_free(all[i]);
    free(f->valid);
    memset(f, 0, sizeof *f);
}

/* Whether no query may see key j of batch b: keys past the last row's
 * top-left causal bound, or blocked by a key padding mask. Such keys are
 * poisoned with NaN (poison_hidden) and must have zero gradients. */
static bool key_hidden(const fdata *f, int64_t b, int64_t j)
{
    if (f->c.causal == ATTN_CAUSAL_TOP_LEFT && j >= f->c.Nq) return true;
    return (f->c.mask == MASK_KEY_PADDING || f->c.mask == MASK_BOTH) && j >= f->valid[b];
}

static bool fdata_make(fdata *f, const fcase *c, uint64_t seed)
{
    memset(f, 0, sizeof *f);
    f->c = *c;
    tu_rng r;
    tu_rng_seed(&r, seed);
    bool ok = alloc4(&f->q, ATTN_F32, c->B, c->Hq, c->Nq, c->D, c->strided, false, &r) &&
              alloc4(&f->k, ATTN_F32, c->B, c->Hkv, c->Nk, c->D, c->strided, false, &r) &&
              alloc4(&f->v, ATTN_F32, c->B, c->Hkv, c->Nk, c->Dv, c->strided, false, &r) &&
              alloc4(&f->out, ATTN_F32, c->B, c->Hq, c->Nq, c->Dv, c->strided, true, &r) &&
              alloc4(&f->dout, ATTN_F32, c->B, c->Hq, c->Nq, c->Dv, c->strided, false, &r) &&
              alloc4(&f->dq, ATTN_F32, c->B, c->Hq, c->Nq, c->D, c->strided, true, &r) &&
              alloc4(&f->dk, ATTN_F32, c->B, c->Hkv, c->Nk, c->D, c->strided, true, &r) &&
              alloc4(&f->dv, ATTN_F32, c->B, c->Hkv, c->Nk, c->Dv, c->strided, true, &r);
    const int64_t lshape[3] = {c->B, c->Hq, c->Nq};
    ok = ok && tu_tensor_alloc(&f->lse, ATTN_F32, 3, lshape, NULL);
    if (ok && c->weights) ok = alloc4(&f->w, ATTN_F32, c->B, c->Hq, c->Nq, c->Nk, c->strided, true, &r);
    f->valid = calloc((size_t)(c->B > 0 ? c->B : 1), sizeof *f->valid);
    if (!ok || !f->valid) return false;
    tu_fill_normal(&f->q.view, &r, 0.0, 1.5);
    tu_fill_normal(&f->k.view, &r, 0.0, 1.5);
    tu_fill_normal(&f->v.view, &r, 0.0, 1.0);
    tu_fill_normal(&f->dout.view, &r, 0.0, 1.0);
    for (int64_t b = 0; b < c->B; ++b) f->valid[b] = tu_rng_int(&r, 0, c->Nk);
    if (c->B > 0) f->valid[0] = c->Nk > 70 ? 70 : c->Nk; /* a partial tile */

    const attn_tensor *kv = &f->k.view;
    switch (c->mask) {
    case MASK_NONE: break;
    case MASK_BOOL_RANDOM: {
        const int64_t shape[2] = {c->Nq, c->Nk};
        ok = tu_tensor_alloc(&f->m0, ATTN_BOOL, 2, shape, NULL);
        if (ok)
            for (int64_t i = 0; i < c->Nq * c->Nk; ++i) tu_set(&f->m0.view, i, tu_rng_chance(&r, 0.7));
        f->nmask = 1;
        break;
    }
    case MASK_KEY_PADDING:
    case MASK_BOTH: {
        const int64_t shape[4] = {c->B, 1, 1, c->Nk};
        ok = tu_tensor_alloc(&f->m0, ATTN_BOOL, 4, shape, NULL);
        if (ok)
            for (int64_t b = 0; b < c->B; ++b)
                for (int64_t j = 0; j < c->Nk; ++j) tu_set(&f->m0.view, b * c->Nk + j, j < f->valid[b]);
        f->nmask = 1;
        if (ok && c->mask == MASK_BOTH) {
            const int64_t s2[2] = {c->Nq, c->Nk};
            ok = tu_tensor_alloc(&f->m1, ATTN_F32, 2, s2, NULL);
            if (ok) tu_fill_uniform(&f->m1.view, &r, -2.0, 2.0);
            f->nmask = 2;
        }
        break;
    }
    case MASK_FLOAT_BLOCKS: {
        const int64_t shape[4] = {c->B, c->Hq, c->Nq, c->Nk};
        ok = tu_tensor_alloc(&f->m0, ATTN_F32, 4, shape, NULL);
        if (ok) {
            tu_fill_uniform(&f->m0.view, &r, -3.0, 1.0);
            /* Whole 64-key blocks hidden for whole heads, and scattered -inf. */
            for (int64_t i = 0; i < c->B * c->Hq * c->Nq * c->Nk; ++i) {
                const int64_t j = i % c->Nk, h = (i / (c->Nk * c->Nq)) % c->Hq;
                if ((j / 64 + h) % 3 == 1 || tu_rng_chance(&r, 0.1)) tu_set(&f->m0.view, i, -INFINITY);
            }
        }
        f->nmask = 1;
        break;
    }
    case MASK_ROWS_OFF: {
        const int64_t shape[2] = {c->Nq, 1};
        ok = tu_tensor_alloc(&f->m0, ATTN_BOOL, 2, shape, NULL);
        if (ok)
            for (int64_t i = 0; i < c->Nq; ++i) tu_set(&f->m0.view, i, i % 5 != 2);
        f->nmask = 1;
        break;
    }
    }
    if (ok && c->poison_hidden) {
        /* NaN in every hidden key's K and V row: touching one poisons results. */
        for (int64_t b = 0; b < c->B; ++b)
            for (int64_t h = 0; h < c->Hkv; ++h)
                for (int64_t j = 0; j < c->Nk; ++j) {
                    if (!key_hidden(f, b, j)) continue;
                    for (int64_t d = 0; d < c->D; ++d)
                        tu_set(kv, ((b * c->Hkv + h) * c->Nk + j) * c->D + d, NAN);
                    for (int64_t d = 0; d < c->Dv; ++d)
                        tu_set(&f->v.view, ((b * c->Hkv + h) * c->Nk + j) * c->Dv + d, NAN);
                }
    }
    return ok;
}

/* Results of one run, gathered contiguous. */
typedef struct {
    float *t[6]; /* out, lse, w, dq, dk, dv */
    int64_t n[6];
} snapshot;
static const char *const snap_name[6] = {"out", "lse", "weights", "dq", "dk", "dv"};

static void snap_free(snapshot *s)
{
    for (int i = 0; i < 6; ++i) free(s->t[i]);
    memset(s, 0, sizeof *s);
}

static attn_sdpa_opts make_opts(const fdata *f, attn_path path, int threads)
{
    attn_sdpa_opts o = attn_sdpa_opts_default();
    o.causal = f->c.causal;
    o.path = path;
    o.num_threads = threads;
    if (f->nmask > 0) o.mask[0] = &f->m0.view;
    if (f->nmask > 1) o.mask[1] = &f->m1.view;
    return o;
}

/* Forward then backward (given out and lse unless recompute), gathered. */
static bool run(fdata *f, attn_path path, int threads, bool recompute, snapshot *s,
                attn_error *err)
{
    memset(s, 0, sizeof *s);
    attn_sdpa_opts o = make_opts(f, path, threads);
    if (attn_sdpa(&f->q.view, &f->k.view, &f->v.view, &f->out.view, &f->lse.view,
                  f->c.weights ? &f->w.view : NULL, &o, err) != ATTN_OK)
        return false;
    if (attn_sdpa_backward(&f->q.view, &f->k.view, &f->v.view, recompute ? NULL : &f->out.view,
                           recompute ? NULL : &f->lse.view, &f->dout.view, &f->dq.view,
                           &f->dk.view, &f->dv.view, &o, err) != ATTN_OK)
        return false;
    const attn_tensor *views[6] = {&f->out.view, &f->lse.view, f->c.weights ? &f->w.view : NULL,
                                   &f->dq.view,  &f->dk.view,  &f->dv.view};
    for (int i = 0; i < 6; ++i) {
        if (!views[i]) continue;
        s->n[i] = tu_numel(views[i]);
        s->t[i] = malloc(sizeof(float) * (size_t)(s->n[i] + 1));
        if (!s->t[i]) return false;
        tu_gather_bytes(views[i], s->t[i]);
    }
    return true;
}

/* First quantity that differs bitwise, or -1. */
static int snap_diff_bits(const snapshot *a, const snapshot *b)
{
    for (int i = 0; i < 6; ++i)
        if (a->n[i] != b->n[i] ||
            (a->n[i] && memcmp(a->t[i], b->t[i], sizeof(float) * (size_t)a->n[i])))
            return i;
    return -1;
}

/* Fused vs reference: |a - b| <= rtol·|b| + atol·max|b| per quantity;
 * infinities must match exactly, NaN never passes. Returns the failing
 * quantity or -1; *worst gets its worst element's error ratio. */
static int snap_diff_tol(const snapshot *got, const snapshot *ref, double *worst)
{
    const double rtol = 2e-4, atol = 2e-5;
    *worst = 0.0;
    for (int i = 0; i < 6; ++i) {
        double maxabs = 0.0;
        for (int64_t e = 0; e < ref->n[i]; ++e)
            if (isfinite(ref->t[i][e])) maxabs = fmax(maxabs, fabs(ref->t[i][e]));
        for (int64_t e = 0; e < ref->n[i]; ++e) {
            const double g = got->t[i][e], w = ref->t[i][e];
            if (isinf(w) || isinf(g)) {
                if (g != w) return *worst = INFINITY, i;
                continue;
            }
            if (g != g || w != w) return *worst = NAN, i;
            const double tol = rtol * fabs(w) + atol * (maxabs > 1e-30 ? maxabs : 1.0);
            const double ratio = fabs(g - w) / tol;
            if (ratio > *worst) *worst = ratio;
            if (ratio > 1.0) return i;
        }
    }
    return -1;
}

static fcase random_case(tu_rng *r)
{
    fcase c;
    memset(&c, 0, sizeof c);
    static const int64_t sizes[] = {1, 5, 17, 63, 64, 65, 95, 96, 97, 130, 191, 200};
    static const int64_t dims[] = {1, 3, 8, 16, 24, 33, 64, 80};
    c.B = tu_rng_int(r, 1, 2);
    c.Hkv = tu_rng_int(r, 1, 3);
    c.Hq = c.Hkv * tu_rng_int(r, 1, 3);
    c.Nq = tu_rng_pick(r, sizes, 12);
    c.Nk = tu_rng_pick(r, sizes, 12);
    c.D = tu_rng_pick(r, dims, 8);
    c.Dv = tu_rng_chance(r, 0.5) ? c.D : tu_rng_pick(r, dims, 8);
    c.causal = (attn_causal)tu_rng_int(r, 0, 2);
    c.mask = (int)tu_rng_int(r, 0, MASK_KINDS - 1);
    c.weights = tu_rng_chance(r, 0.4);
    c.strided = tu_rng_chance(r, 0.4);
    c.poison_hidden = tu_rng_chance(r, 0.5);
    return c;
}

/* ------------------------------------------------------------ groups */

/* Each ISA here (through ATTN_ARCH) against the reference path. */
static void test_isas_vs_reference(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "each ISA vs reference");
    isa_entry isas[3];
    const int nisa = available_isas(isas);
    const int cases = opt->quick ? 12 : 60;
    tu_rng r;
    tu_rng_seed(&r, opt->seed ^ 0x15A);
    for (int n = 0; n < cases; ++n) {
        const uint64_t seed = tu_rng_u64(&r);
        tu_rng cr;
        tu_rng_seed(&cr, seed);
        const fcase c = random_case(&cr);
        char desc[256];
        describe(&c, desc, sizeof desc);
        fdata f;
        if (!fdata_make(&f, &c, seed)) {
            tu_group_fail(&g, "seed 0x%016" PRIx64 ": allocation failed", seed);
            fdata_free(&f);
            continue;
        }
        attn_error err;
        snapshot ref;
        set_arch(NULL);
        if (!run(&f, ATTN_PATH_REFERENCE, 2, false, &ref, &err)) {
            tu_group_fail(&g, "seed 0x%016" PRIx64 " reference: %s", seed, err.message);
            snap_free(&ref);
            fdata_free(&f);
            continue;
        }
        for (int k = 0; k < nisa; ++k) {
            set_arch(isas[k].name);
            snapshot got;
            const bool recompute = n % 2 == 1;
            if (!run(&f, ATTN_PATH_AUTO, 2, recompute, &got, &err)) {
                tu_group_fail(&g, "seed 0x%016" PRIx64 " %s: %s (%s)", seed, isas[k].name,
                              err.message, desc);
            } else {
                double worst;
                const int bad = snap_diff_tol(&got, &ref, &worst);
                if (tu_check(&g, bad < 0, "seed 0x%016" PRIx64 " %s: %s differs from reference "
                             "(worst %.3g x tolerance) %s", seed, isas[k].name,
                             bad >= 0 ? snap_name[bad] : "", worst, desc) &&
                    opt->verbose)
                    tu_group_note(&g, "%s ok (worst %.3g) %s", isas[k].name, worst, desc);
            }
            snap_free(&got);
        }
        set_arch(NULL);
        snap_free(&ref);
        fdata_free(&f);
    }
    tu_group_end(&g);
}

/* Bit-identical results for 1, 2 and 3 threads and reruns, per ISA. */
static void test_determinism(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "bit-identical threads 1/2/3 and reruns");
    isa_entry isas[3];
    const int nisa = available_isas(isas);
    /* Shapes with many tasks, several key-tile chunks in the backward
     * (B·Hkv small) and GQA reductions. */
    const fcase fixed[] = {
        {1, 4, 1, 300, 333, 64, 64, ATTN_CAUSAL_NONE, MASK_NONE, true, false, false},
        {1, 2, 2, 257, 257, 32, 48, ATTN_CAUSAL_TOP_LEFT, MASK_NONE, false, false, false},
        {2, 6, 3, 130, 200, 40, 24, ATTN_CAUSAL_BOTTOM_RIGHT, MASK_FLOAT_BLOCKS, false, true, false},
        {1, 3, 1, 200, 700, 16, 16, ATTN_CAUSAL_NONE, MASK_BOTH, true, false, true},
    };
    const int nfixed = (int)(sizeof fixed / sizeof fixed[0]);
    /* Under emulation only the tables this architecture adds: the portable
     * table's schedule, and so its thread invariance, is the same everywhere
     * and the native runs check it. */
    const int first = tu_emulated() && nisa > 1 ? 1 : 0;
    if (first) tu_group_note(&g, "emulated: %s left out", isas[0].name);
    for (int k = first; k < nisa; ++k) {
        set_arch(isas[k].name);
        for (int n = 0; n < nfixed; ++n) {
            char desc[256];
            describe(&fixed[n], desc, sizeof desc);
            fdata f;
            snapshot base, other;
            attn_error err;
            if (!fdata_make(&f, &fixed[n], opt->seed + (uint64_t)n) ||
                !run(&f, ATTN_PATH_FUSED, 1, n % 2 == 1, &base, &err)) {
                tu_group_fail(&g, "%s case %d: setup failed %s", isas[k].name, n, desc);
                fdata_free(&f);
                continue;
            }
            const int threads[] = {2, 3, 2, 1};
            for (int t = 0; t < 4; ++t) {
                tu_tensor_poison(&f.out); /* stale outputs must not mask a bug */
                tu_tensor_poison(&f.dq);
                if (!run(&f, ATTN_PATH_FUSED, threads[t], n % 2 == 1, &other, &err)) {
                    tu_group_fail(&g, "%s case %d: %s", isas[k].name, n, err.message);
                    continue;
                }
                const int d = snap_diff_bits(&base, &other);
                tu_check(&g, d < 0, "%s case %d: %s with %d threads differs from 1 thread (%s)",
                         isas[k].name, n, d >= 0 ? snap_name[d] : "", threads[t], desc);
                snap_free(&other);
            }
            snap_free(&base);
            fdata_free(&f);
        }
    }
    set_arch(NULL);
    tu_group_end(&g);
}

/* Causality / masks hiding tiles and rows; tile-boundary sizes. */
static void test_tile_edges(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "tile skipping edge cases");
    (void)opt;
    const int64_t edge_sizes[] = {1, 63, 64, 65, 96, 97, 128, 191, 192, 193};
    fcase cases[64];
    int nc = 0;
    for (int i = 0; i < 10; ++i) {
        const int64_t n = edge_sizes[i];
        /* causal both ways with Nq < Nk, Nq > Nk, Nq == Nk */
        cases[nc++] = (fcase){1, 2, 1, n, 130, 32, 32, ATTN_CAUSAL_TOP_LEFT, MASK_NONE, i % 2, false, true};
        cases[nc++] = (fcase){1, 2, 2, n, 97, 16, 40, ATTN_CAUSAL_BOTTOM_RIGHT, MASK_NONE, i % 2, false, false};
        cases[nc++] = (fcase){2, 2, 1, 70, n, 24, 24, ATTN_CAUSAL_NONE, MASK_KEY_PADDING, true, false, true};
        cases[nc++] = (fcase){1, 3, 3, n, n, 8, 8, ATTN_CAUSAL_TOP_LEFT, MASK_FLOAT_BLOCKS, false, false, false};
        cases[nc++] = (fcase){1, 1, 1, n, 150, 20, 20, ATTN_CAUSAL_BOTTOM_RIGHT, MASK_ROWS_OFF, true, true, false};
    }
    /* Bottom-right with Nk < Nq: the first Nq - Nk rows see nothing. */
    cases[nc++] = (fcase){1, 2, 1, 300, 70, 64, 64, ATTN_CAUSAL_BOTTOM_RIGHT, MASK_NONE, true, false, false};
    /* Every key hidden for one batch (valid[b] may be 0), poisoned. */
    cases[nc++] = (fcase){3, 2, 2, 100, 260, 32, 32, ATTN_CAUSAL_TOP_LEFT, MASK_BOTH, true, false, true};

    for (int n = 0; n < nc; ++n) {
        char desc[256];
        describe(&cases[n], desc, sizeof desc);
        fdata f;
        snapshot ref, got;
        attn_error err;
        const uint64_t seed = opt->seed * 31 + (uint64_t)n;
        if (!fdata_make(&f, &cases[n], seed) || !run(&f, ATTN_PATH_REFERENCE, 2, false, &ref, &err)) {
            tu_group_fail(&g, "case %d: setup failed (%s)", n, desc);
            fdata_free(&f);
            continue;
        }
        if (!run(&f, ATTN_PATH_FUSED, 2, n % 3 == 0, &got, &err)) {
            tu_group_fail(&g, "case %d: fused failed: %s (%s)", n, err.message, desc);
        } else {
            double worst;
            const int bad = snap_diff_tol(&got, &ref, &worst);
            tu_check(&g, bad < 0, "case %d seed 0x%" PRIx64 ": %s differs (worst %.3g x tol) (%s)",
                     n, seed, bad >= 0 ? snap_name[bad] : "", worst, desc);
            /* Rows that see nothing: out exactly 0, lse -inf, dq 0; hidden
             * keys: dk = dv = 0 exactly; never NaN anywhere. */
            bool rows_ok = true, nan_free = true;
            for (int q = 0; q < 6; ++q)
                for (int64_t e = 0; e < got.n[q]; ++e) nan_free &= got.t[q][e] == got.t[q][e];
            for (int64_t row = 0; row < got.n[1]; ++row) {
                if (got.t[1][row] != -INFINITY) continue;
                for (int64_t d = 0; d < f.c.Dv; ++d) rows_ok &= got.t[0][row * f.c.Dv + d] == 0.0f;
                for (int64_t d = 0; d < f.c.D; ++d) rows_ok &= got.t[3][row * f.c.D + d] == 0.0f;
            }
            for (int64_t b = 0; b < f.c.B; ++b)
                for (int64_t h = 0; h < f.c.Hkv; ++h)
                    for (int64_t j = 0; j < f.c.Nk; ++j) {
                        if (!key_hidden(&f, b, j)) continue;
                        const int64_t row = (b * f.c.Hkv + h) * f.c.Nk + j;
                        for (int64_t d = 0; d < f.c.D; ++d) rows_ok &= got.t[4][row * f.c.D + d] == 0.0f;
                        for (int64_t d = 0; d < f.c.Dv; ++d) rows_ok &= got.t[5][row * f.c.Dv + d] == 0.0f;
                    }
            tu_check(&g, nan_free, "case %d: NaN in results (hidden keys leaked?) (%s)", n, desc);
            tu_check(&g, rows_ok, "case %d: hidden rows/keys not exactly 0 / -inf (%s)", n, desc);
        }
        snap_free(&ref);
        snap_free(&got);
        fdata_free(&f);
    }
    tu_group_end(&g);
}

/* Caller-provided workspace: the reported size works (same bits), less fails. */
static void test_workspace(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "caller workspace");
    const fcase c = {2, 4, 2, 150, 170, 40, 24, ATTN_CAUSAL_TOP_LEFT, MASK_BOOL_RANDOM, true, true, false};
    for (int backward = 0; backward < 2; ++backward) {
        fdata f;
        snapshot own, given;
        attn_error err;
        if (!fdata_make(&f, &c, opt->seed ^ 0xBEEF) || !run(&f, ATTN_PATH_FUSED, 2, true, &own, &err)) {
            tu_group_fail(&g, "setup failed");
            fdata_free(&f);
            continue;
        }
        attn_sdpa_opts o = make_opts(&f, ATTN_PATH_FUSED, 2);
        size_t bytes = 0;
        if (!tu_check(&g, attn_sdpa_workspace_size(&f.q.view, &f.k.view, &f.v.view, backward, &o,
                                                   &bytes, &err) == ATTN_OK && bytes > 0,
                      "workspace_size failed: %s", err.message)) {
            snap_free(&own);
            fdata_free(&f);
            continue;
        }
        char *mem = malloc(bytes + 1);
        o.workspace = mem + 1; /* deliberately misaligned */
        o.workspace_size = bytes;
        attn_status st;
        if (backward)
            st = attn_sdpa_backward(&f.q.view, &f.k.view, &f.v.view, NULL, NULL, &f.dout.view,
                                    &f.dq.view, &f.dk.view, &f.dv.view, &o, &err);
        else
            st = attn_sdpa(&f.q.view, &f.k.view, &f.v.view, &f.out.view, &f.lse.view, &f.w.view,
                           &o, &err);
        tu_check(&g, st == ATTN_OK, "%s with the reported %zu bytes: %s",
                 backward ? "backward" : "forward", bytes, err.message);
        const int idx = backward ? 3 : 0;
        given.n[0] = own.n[idx];
        given.t[0] = malloc(sizeof(float) * (size_t)(own.n[idx] + 1));
        tu_gather_bytes(backward ? &f.dq.view : &f.out.view, given.t[0]);
        tu_check(&g, !memcmp(given.t[0], own.t[idx], sizeof(float) * (size_t)own.n[idx]),
                 "%s: caller workspace changes results", backward ? "backward" : "forward");
        free(given.t[0]);
        o.workspace_size = bytes / 2;
        if (backward)
            st = attn_sdpa_backward(&f.q.view, &f.k.view, &f.v.view, NULL, NULL, &f.dout.view,
                                    &f.dq.view, &f.dk.view, &f.dv.view, &o, &err);
        else
            st = attn_sdpa(&f.q.view, &f.k.view, &f.v.view, &f.out.view, &f.lse.view, &f.w.view,
                           &o, &err);
        tu_check(&g, st == ATTN_ERR_WORKSPACE, "%s with half the workspace: status %d, want "
                 "ATTN_ERR_WORKSPACE", backward ? "backward" : "forward", (int)st);
        free(mem);
        snap_free(&own);
        fdata_free(&f);
    }
    /* The forward's figure for Nq rows serves every slice of fewer rows,
     * decoding shapes (split-KV partials, direct scores) among them: a
     * caller sizes once for its largest call. */
    enum { B = 1, HQ = 8, HKV = 2, NQ = 40, NK = 9000, D = 64 };
    float *q = calloc((size_t)B * HQ * NQ * D, sizeof(float));
    float *kv = calloc((size_t)B * HKV * NK * D, sizeof(float));
    float *o = calloc((size_t)B * HQ * NQ * D, sizeof(float));
    const int64_t counts[] = {NQ, 17, 16, 9, 4, 3, 1};
    size_t bytes = 0;
    attn_error err;
    attn_sdpa_opts opts = attn_sdpa_opts_default();
    opts.num_threads = 2;
    opts.path = ATTN_PATH_FUSED;
    opts.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_tensor Q = attn_tensor_4d(q, B, HQ, NQ, D), K = attn_tensor_4d(kv, B, HKV, NK, D);
    attn_tensor O = attn_tensor_4d(o, B, HQ, NQ, D);
    tu_check(&g, q && kv && o && attn_sdpa_workspace_size(&Q, &K, &K, false, &opts, &bytes,
                                                          &err) == ATTN_OK,
             "workspace_size (Nq=%d, Nk=%d): %s", NQ, NK, err.message);
    char *mem = malloc(bytes ? bytes : 1);
    opts.workspace = mem;
    opts.workspace_size = bytes;
    for (size_t i = 0; mem && i < sizeof counts / sizeof *counts; ++i) {
        attn_tensor Qs = Q, Os = O;
        Qs.shape[2] = Os.shape[2] = counts[i];
        tu_check(&g, attn_sdpa(&Qs, &K, &K, &Os, NULL, NULL, &opts, &err) == ATTN_OK,
                 "forward on %lld of %d rows in the workspace sized for %d: %s",
                 (long long)counts[i], NQ, NQ, err.message);
    }
    free(mem);
    free(q);
    free(kv);
    free(o);
    tu_group_end(&g);
}

/* AUTO under ATTN_ARCH=reference is the reference path, bit for bit; FUSED
 * still runs fused kernels. */
static void test_path_selection(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "path selection");
    const fcase c = {1, 2, 1, 90, 110, 24, 24, ATTN_CAUSAL_NONE, MASK_BOOL_RANDOM, true, false, false};
    fdata f;
    snapshot ref, fused, a, b;
    attn_error err;
    memset(&a, 0, sizeof a), memset(&b, 0, sizeof b);
    if (!fdata_make(&f, &c, opt->seed ^ 0x9A7) || !run(&f, ATTN_PATH_REFERENCE, 2, false, &ref, &err) ||
        !run(&f, ATTN_PATH_FUSED, 2, false, &fused, &err)) {
        tu_group_fail(&g, "setup failed");
    } else {
        set_arch("reference");
        if (run(&f, ATTN_PATH_AUTO, 2, false, &a, &err))
            tu_check(&g, snap_diff_bits(&a, &ref) < 0,
                     "ATTN_ARCH=reference: AUTO is not the reference path");
        if (run(&f, ATTN_PATH_FUSED, 2, false, &b, &err))
            tu_check(&g, snap_diff_bits(&b, &fused) < 0,
                     "ATTN_ARCH=reference: FUSED is not the (best) fused path");
        set_arch(NULL);
        tu_check(&g, snap_diff_bits(&ref, &fused) >= 0,
                 "reference and fused agree bit for bit: the test cannot tell them apart");
    }
    snap_free(&ref), snap_free(&fused), snap_free(&a), snap_free(&b);
    fdata_free(&f);
    tu_group_end(&g);
}

/* ------------------------------------------------------------ scores_rows */

/* A decoding step's scores straight from K's rows (kernels.h): every
 * dtype, row count 1…SDPA_SCORES_ROWS, key count (groups and the keys left
 * over) and feature size (D an odd multiple of 8 leaves AVX-512 half a
 * vector). Each score must
 *   - be within the documented bound of the float64 dot product of the
 *     rows' values, (ceil(D/VW) + log2 VW)·u·Σ|q·k| (here with the larger
 *     of both ISAs' terms, D/8 + 1 + 4);
 *   - depend on its two rows only: equal, bit for bit, to the score of the
 *     same Q row against the same key alone (m = 1, n = 1) — the property
 *     that lets forward, weights and backward share the logits;
 * columns [n, n_out) must be 0, and K's rows past n are never read (NaN). */
static void test_scores_rows(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "scores_rows accuracy and row independence");
    isa_entry isas[3];
    const int nisa = available_isas(isas);
    tu_rng rng;
    tu_rng_seed(&rng, opt->seed ^ 0x5C0Eull);
    enum { MAXN = 64, MAXD = 136, LDS = 64, LDQ = MAXD + 8 };
    static float kf[(MAXN + 8) * (MAXD + 8)], q[SDPA_SCORES_ROWS * LDQ];
    static float got[SDPA_SCORES_ROWS * LDS], one[LDS];
    static uint16_t kh[(MAXN + 8) * (MAXD + 8)];
    const int64_t dims[] = {8, 24, 64, 128, 136}, ns[] = {1, 3, 4, 5, 7, 8, 9, 31, 40, 64};
    const attn_dtype dts[] = {ATTN_F32, ATTN_BF16, ATTN_F16};
    for (int k = 0; k < nisa; ++k) {
        const sdpa_kernels *kern = isas[k].kern;
        if (!kern->scores_rows) continue;
        int64_t bad = 0, cases = 0;
        double worst = 0.0;
        for (size_t di = 0; di < sizeof dims / sizeof *dims; ++di)
            for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ++ni)
                for (size_t ti = 0; ti < 3; ++ti)
                    for (int m = 1; m <= SDPA_SCORES_ROWS; ++m) {
                        const int64_t D = dims[di], n = ns[ni], rs = D + (int64_t)(ni % 2) * 8;
                        const int64_t n_out = (n + 15) / 16 * 16, ldq = m % 2 ? D : LDQ;
                        const attn_dtype t = dts[ti];
                        /* K (rows past n: NaN, never to be read), and its values */
                        for (int64_t i = 0; i < (n + 8) * rs; ++i) {
                            const float v = i < n * rs ? (float)tu_rng_normal(&rng) : NAN;
                            if (t == ATTN_F32) {
                                kf[i] = v;
                            } else {
                                attn_store_float(kh, t, i, v);
                                kf[i] = attn_load_float(kh, t, i);
                            }
                        }
                        for (int64_t i = 0; i < m * ldq; ++i) q[i] = (float)tu_rng_normal(&rng);
                        const void *kp = t == ATTN_F32 ? (const void *)kf : (const void *)kh;
                        const size_t es = t == ATTN_F32 ? 4 : 2;
                        for (int64_t i = 0; i < SDPA_SCORES_ROWS * LDS; ++i) got[i] = -1.0f;
                        kern->scores_rows(t, kp, rs, n, n_out, D, q, ldq, m, got, LDS, NULL);
                        ++cases;
                        for (int r = 0; r < m; ++r)
                            for (int64_t c = 0; c < n_out; ++c) {
                                const float v = got[r * LDS + c];
                                bool ok;
                                if (c >= n) {
                                    ok = v == 0.0f;
                                } else {
                                    double exact = 0.0, mag = 0.0;
                                    for (int64_t l = 0; l < D; ++l) {
                                        const double x = (double)q[r * ldq + l] * kf[c * rs + l];
                                        exact += x;
                                        mag += fabs(x);
                                    }
                                    const double bound = (double)(D / 8 + 1 + 4) * 0x1p-24 * mag;
                                    const double err = fabs((double)v - exact);
                                    if (mag > 0.0 && err / mag > worst) worst = err / mag;
                                    kern->scores_rows(t, (const char *)kp + (size_t)(c * rs) * es,
                                                      rs, 1, 1, D, q + r * ldq, ldq, 1, one, LDS,
                                                      NULL);
                                    ok = err <= bound && memcmp(&one[0], &v, sizeof v) == 0;
                                }
                                if (!ok && bad++ < 5)
                                    tu_group_fail(&g, "%s %s D=%" PRId64 " n=%" PRId64 " m=%d: "
                                                  "row %d col %" PRId64 ": %.9g (alone %.9g)",
                                                  kern->name, attn_dtype_name(t), D, n, m, r, c,
                                                  v, c < n ? one[0] : 0.0f);
                            }
                    }
        tu_check(&g, bad == 0, "%s: %" PRId64 " of %" PRId64 " cases wrong (worst error %.2g of Σ|q·k|)",
                 kern->name, bad, cases, worst);
    }
    tu_group_end(&g);
}

/* ------------------------------------------------------------ GEMM instances */

/* The kernels' GEMM picks its microtile by the number of rows (1, 2, 4 or
 * MR rows of accumulators, one column panel or, for a few rows, two) and
 * the columns (a last half panel when n is an odd multiple of npad / 2):
 * rows 0..m-1 of an m-row product must be bitwise those of the same rows in
 * a product of more rows, its n columns those of a product over all N
 * columns, and rows m.. and columns n.. untouched, for every mode and
 * width, A read by rows or by columns, and B in float32 or (gemm16)
 * bfloat16. */
static void test_gemm_instances(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "GEMM instances agree bitwise");
    isa_entry isas[3];
    const int nisa = available_isas(isas);
    enum { M = 13, K = 70, N = 192 };
    static float a[M * K], b[K * N], c0[M * N], wide[M * N], full[M * N], part[M * N], scale[M];
    static uint16_t b16[K * N];
    tu_rng rng;
    tu_rng_seed(&rng, opt->seed);
    for (int i = 0; i < M * K; ++i) a[i] = (float)(tu_rng_uniform(&rng) * 2.0 - 1.0);
    for (int i = 0; i < K * N; ++i) {
        b[i] = (float)(tu_rng_uniform(&rng) * 2.0 - 1.0);
        uint32_t bits;
        memcpy(&bits, &b[i], sizeof bits);
        b16[i] = (uint16_t)(bits >> 16); /* a bfloat16, truncated: any value will do */
    }
    for (int i = 0; i < M * N; ++i) c0[i] = (float)(tu_rng_uniform(&rng) * 2.0 - 1.0);
    for (int i = 0; i < M; ++i) scale[i] = (float)tu_rng_uniform(&rng);
    const sdpa_gemm_mode modes[3] = {SDPA_GEMM_SET, SDPA_GEMM_ADD, SDPA_GEMM_SCALE_ADD};
    for (int x = 0; x < nisa; ++x) {
        const sdpa_kernels *kern = isas[x].kern;
        bool ok = true;
        for (int bt = 0; bt < (kern->gemm16 ? 2 : 1) && ok; ++bt)
            for (int by_cols = 0; by_cols < 2 && ok; ++by_cols)
                for (int md = 0; md < 3 && ok; ++md) {
                    /* A as M × K rows, or read down the columns of a K × M array */
                    const int64_t a_rs = by_cols ? 1 : K, a_cs = by_cols ? M : 1;
                    /* C = A·B over rows [0, m) and columns [0, n) of c, from c0 */
#define PRODUCT(c, m, n)                                                                         \
    do {                                                                                       \
        memcpy(c, c0, sizeof c0);                                                              \
        if (bt)                                                                                \
            kern->gemm16(ATTN_BF16, m, n, K, a, a_rs, a_cs, b16, N, c, N, scale, modes[md]);  \
        else                                                                                   \
            kern->gemm(m, n, K, a, a_rs, a_cs, b, N, c, N, scale, modes[md]);                  \
    } while (0)
                    PRODUCT(wide, M, N);
                    for (int64_t n = kern->npad / 2; n <= N && ok; n += kern->npad / 2)
                        for (int64_t m = 1; m <= 6 && ok; ++m) {
                            PRODUCT(full, M, n);
                            PRODUCT(part, m, n);
                            ok = memcmp(full, part, sizeof(float) * (size_t)(m * N)) == 0 &&
                                 memcmp(part + m * N, c0 + m * N,
                                        sizeof(float) * (size_t)((M - m) * N)) == 0;
                            for (int64_t r = 0; r < M && ok; ++r)
                                ok = memcmp(full + r * N, wide + r * N, sizeof(float) * (size_t)n) == 0 &&
                                     memcmp(full + r * N + n, c0 + r * N + n,
                                            sizeof(float) * (size_t)(N - n)) == 0;
                            tu_check(&g, ok,
                                     "%s: a %lld-row, %lld-column product (mode %d, A by %s, B "
                                     "%s) differs from the first rows of the %d-row product's or "
                                     "from the first columns of the %d-column one's, or wrote "
                                     "past its rows or columns",
                                     isas[x].name, (long long)m, (long long)n, md,
                                     by_cols ? "columns" : "rows", bt ? "bf16" : "f32", M, N);
                        }
#undef PRODUCT
                }
    }
    tu_group_end(&g);
}

/* gemm_max: C bitwise gemm's (SDPA_GEMM_SET) and each row's lane maxima
 * folded from -inf in column order with maxps semantics (a > b ? a : b, so
 * which NaN or signed zero survives depends on the order); rows past m
 * untouched. A holds a NaN, infinities and zeros. */
static void test_gemm_max(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "gemm_max: the score GEMM's row maxima");
    isa_entry isas[3];
    const int nisa = available_isas(isas);
    enum { M = 14, K = 40, N = 128 };
    static float a[M * K], b[K * N], c[M * N], ref[M * N], vmax[M * SDPA_MAX_VW],
        want[M * SDPA_MAX_VW];
    tu_rng rng;
    tu_rng_seed(&rng, opt->seed);
    for (int i = 0; i < M * K; ++i) a[i] = (float)(tu_rng_uniform(&rng) * 2.0 - 1.0);
    for (int i = 0; i < K * N; ++i) b[i] = (float)(tu_rng_uniform(&rng) * 2.0 - 1.0);
    a[1 * K + 3] = NAN;       /* row 1: all NaN */
    a[2 * K + 5] = INFINITY;  /* row 2: ±inf, NaN where inf·0 */
    for (int l = 0; l < K; ++l) a[3 * K + l] = 0.0f; /* row 3: signed zeros */
    for (int x = 0; x < nisa; ++x) {
        const sdpa_kernels *kern = isas[x].kern;
        if (!kern->gemm_max) continue;
        /* lanes: npad is two vectors on x86, four (a 6 × 16 microtile) on neon */
        const int64_t vw = kern->npad / (strcmp(kern->name, "neon") == 0 ? 4 : 2);
        bool ok = true;
        const int64_t half = kern->npad / 2;
        for (int64_t n = half; n <= N && ok; n += half) /* a last half panel when n / half is odd */
            for (int64_t m = 1; m <= M && ok; ++m)
                {
                    for (int i = 0; i < M * SDPA_MAX_VW; ++i)
                        vmax[i] = (float)(tu_rng_uniform(&rng) - 0.5);
                    memcpy(want, vmax, sizeof want);
                    for (int64_t r = 0; r < m; ++r)
                        for (int64_t l = 0; l < vw; ++l) want[r * SDPA_MAX_VW + l] = -INFINITY;
                    memset(c, 0, sizeof c);
                    kern->gemm(m, n, K, a, K, 1, b, N, ref, N, NULL, SDPA_GEMM_SET);
                    kern->gemm_max(m, n, K, a, K, 1, b, N, c, N, vmax);
                    for (int64_t r = 0; r < m; ++r)
                        for (int64_t j = 0; j < n; ++j) {
                            float *w = &want[r * SDPA_MAX_VW + j % vw];
                            const float y = ref[r * N + j];
                            *w = *w > y ? *w : y;
                        }
                    bool same_c = true;
                    for (int64_t r = 0; r < m; ++r)
                        same_c &= memcmp(c + r * N, ref + r * N, sizeof(float) * (size_t)n) == 0;
                    ok = same_c && memcmp(vmax, want, sizeof vmax) == 0;
                    tu_check(&g, ok,
                             "%s: m = %lld, n = %lld: %s", isas[x].name, (long long)m,
                             (long long)n,
                             same_c ? "the maxima differ from the sequential fold of C"
                                    : "C differs from gemm's");
                }
    }
    tu_group_end(&g);
}

/* Bitwise equal, or both NaN: which of several NaNs a sum keeps is the
 * first operand's, and a compiler may swap the operands of an addition. */
static bool same_value(float a, float b)
{
    return memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b));
}

/* softmax_online's fast paths (rows that see every column of the tile, or
 * a prefix of it) give bitwise what its general path gives the same rows:
 * a row's results depend on that row alone, so the rows are run once by
 * themselves and once beside an extra row that starts past c0, which
 * sends the call down the general path. Scores hold NaN and infinities;
 * some rows have seen nothing yet (max -inf), some see no column here. */
static void test_softmax_paths(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "softmax_online: fast paths bitwise the general path");
    isa_entry isas[3];
    const int nisa = available_isas(isas);
    enum { M = 40, LD = 176 };
    static float s0[(M + 1) * LD], fast[(M + 1) * LD], slow[(M + 1) * LD];
    float st[2][3][M + 1]; /* [fast, slow][rowmax, rowsum, alpha][row] */
    int32_t start[M + 1], end[M + 1];
    tu_rng rng;
    tu_rng_seed(&rng, opt->seed);
    for (int x = 0; x < nisa; ++x) {
        const sdpa_kernels *kern = isas[x].kern;
        int64_t wrong = 0, checks = 0;
        for (int64_t c0 = 0; c0 <= 32; c0 += 32)
            for (int64_t w = kern->npad; w <= SDPA_KEY_TILE; w += kern->npad)
                for (int trial = 0; trial < 24; ++trial) {
                    const int64_t m = tu_rng_int(&rng, 1, M), n = c0 + w;
                    const int kind = trial % 3; /* every column, nearly every, a prefix */
                    for (int i = 0; i < (M + 1) * LD; ++i) {
                        const double u = tu_rng_uniform(&rng);
                        s0[i] = u < 0.01 ? NAN : u < 0.02 ? INFINITY : u < 0.03 ? -INFINITY
                                                                   : (float)(u * 40.0 - 20.0);
                    }
                    for (int64_t r = 0; r < m; ++r) {
                        start[r] = (int32_t)tu_rng_int(&rng, 0, c0);
                        end[r] = (int32_t)(kind == 0   ? n + tu_rng_int(&rng, 0, 3)
                                           : kind == 1 ? n + tu_rng_int(&rng, -1, 1)
                                                       : tu_rng_int(&rng, 0, n + 3));
                        st[0][0][r] = tu_rng_int(&rng, 0, 3) == 0 ? -INFINITY
                                                                   : (float)tu_rng_uniform(&rng);
                        st[0][1][r] = st[0][0][r] == -INFINITY ? 0.0f : 1.0f;
                    }
                    start[m] = (int32_t)c0 + 1; /* the extra row */
                    end[m] = (int32_t)n;
                    st[0][0][m] = 0.0f;
                    st[0][1][m] = 1.0f;
                    memcpy(st[1], st[0], sizeof st[0]);
                    memcpy(fast, s0, sizeof s0);
                    memcpy(slow, s0, sizeof s0);
                    const sdpa_logits lg = {.scale = 0.125f, .start = start, .end = end};
                    kern->softmax_online(m, c0, n, &lg, fast, LD, st[0][0], st[0][1], st[0][2],
                                         NULL);
                    kern->softmax_online(m + 1, c0, n, &lg, slow, LD, st[1][0], st[1][1],
                                         st[1][2], NULL);
                    bool same = true;
                    for (int64_t r = 0; r < m; ++r) {
                        for (int64_t c = c0; c < n; ++c)
                            same &= same_value(fast[r * LD + c], slow[r * LD + c]);
                        for (int q = 0; q < 3; ++q) same &= same_value(st[0][q][r], st[1][q][r]);
                    }
                    same &= slow[m * LD + c0] == 0.0f; /* the extra row does not see c0 */
                    wrong += !same;
                    ++checks;
                }
        tu_check(&g, wrong == 0, "%s: %lld of %lld tiles differ", isas[x].name,
                 (long long)wrong, (long long)checks);
    }
    tu_group_end(&g);
}

/* rows_finite: false exactly when one value of the rows (not of the gaps
 * between them) is inf, -inf or NaN, wherever it sits: in a vector body,
 * in a scalar tail, in the last row. */
static void test_rows_finite(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "rows_finite: the scan for non-finite values");
    isa_entry isas[3];
    const int nisa = available_isas(isas);
    enum { ROWS = 5, LD = 90 };
    static float buf[ROWS * LD];
    const float bad[3] = {INFINITY, -INFINITY, NAN};
    tu_rng rng;
    tu_rng_seed(&rng, opt->seed);
    for (int x = 0; x < nisa; ++x) {
        const sdpa_kernels *kern = isas[x].kern;
        int64_t wrong = 0, checks = 0;
        for (int64_t w = 1; w <= 80; w += 13)
            for (int64_t rows = 1; rows <= ROWS; rows += 2) {
                for (int i = 0; i < ROWS * LD; ++i)
                    buf[i] = (float)((tu_rng_uniform(&rng) - 0.5) * 1e30);
                for (int64_t r = 0; r < ROWS; ++r) /* the gaps are not scanned */
                    for (int64_t c = w; c < LD; ++c) buf[r * LD + c] = NAN;
                wrong += !kern->rows_finite(buf, LD, rows, w);
                ++checks;
                for (int64_t at = 0; at < rows * LD; ++at) {
                    if (at % LD >= w) continue;
                    const float keep = buf[at];
                    buf[at] = bad[at % 3];
                    wrong += kern->rows_finite(buf, LD, rows, w);
                    buf[at] = keep;
                    ++checks;
                }
            }
        tu_check(&g, wrong == 0, "%s: %lld of %lld scans wrong", isas[x].name, (long long)wrong,
                 (long long)checks);
    }
    tu_group_end(&g);
}

/* ------------------------------------------------------------ variants */

/* A fused configuration: a kernel table (ATTN_ARCH), or a bfloat16 engine
 * (ATTN_ENGINE, ATTN_PRECISION_BF16) of the AVX-512 one. */
typedef struct {
    const char *arch, *engine;
} fused_variant;

/* The tables this CPU runs and the engines of the AVX-512 one here. */
static int fused_variants(fused_variant out[8])
{
    static const char *const engines[] = {"avx512bf16", "amx-model"};
    isa_entry isas[3];
    const int nisa = available_isas(isas);
    int n = 0;
    for (int x = 0; x < nisa; ++x) {
        out[n++] = (fused_variant){isas[x].name, NULL};
        if (!sdpa_kernels_is_avx512(isas[x].kern)) continue;
        set_arch(isas[x].name);
        for (int e = 0; e < 2; ++e) {
            setenv("ATTN_ENGINE", engines[e], 1);
            if (strcmp(attn_engine(), engines[e]) == 0)
                out[n++] = (fused_variant){isas[x].name, engines[e]};
        }
        unsetenv("ATTN_ENGINE");
    }
    set_arch(NULL);
    return n;
}

/* Selects v for the calls that follow (NULL: the defaults again); returns
 * the precision those calls take. */
static attn_precision fused_variant_use(const fused_variant *v)
{
    set_arch(v ? v->arch : NULL);
    if (v && v->engine)
        setenv("ATTN_ENGINE", v->engine, 1);
    else
        unsetenv("ATTN_ENGINE");
    return v && v->engine ? ATTN_PRECISION_BF16 : ATTN_PRECISION_EXACT;
}

static const char *fused_variant_name(const fused_variant *v)
{
    return v->engine ? v->engine : v->arch;
}

/* ------------------------------------------------------------ NaN keys */

/* A key whose logits are NaN makes the rows that see it NaN (out and lse),
 * as on the reference path and in PyTorch, wherever the key sits among the
 * tiles a row crosses: in the first tile the row sees (where its running
 * max is still -inf, and a max that passes over NaN stays -inf), at the end
 * of that tile, or in a middle tile reached through a window; and the
 * gradients of a backward that recomputes the forward's statistics follow
 * the reference's (a row of NaN logits alone must not read as a row that
 * saw nothing). Rows that do not see the key stay finite and match the
 * reference. Every kernel table, the bfloat16 engines of the AVX-512 one
 * (forward), prefill and decoding shapes. */
typedef struct {
    int64_t Nq, Nk, nan_lo, nan_hi; /* keys [nan_lo, nan_hi) hold NaN in K */
    attn_causal causal;
    int64_t left, right; /* window; left < 0: none */
} nan_case;

enum { NAN_H = 2, NAN_D = 16 };

/* The case's tensors, and the results of one path gathered contiguous:
 * out, lse, dq, dk, dv (in this order in t[], n[] elements each). */
typedef struct {
    tu_tensor q, k, v, dout, out, lse, dq, dk, dv;
} nan_data;
typedef struct {
    float *t[5];
    int64_t n[5];
} nan_results;
static const char *const nan_name[5] = {"out", "lse", "dq", "dk", "dv"};

static void nan_case_describe(const nan_case *c, char *buf, size_t n)
{
    snprintf(buf, n, "Nq=%" PRId64 " Nk=%" PRId64 " NaN keys [%" PRId64 ", %" PRId64
                     ") causal=%d window=(%" PRId64 ", %" PRId64 ")",
             c->Nq, c->Nk, c->nan_lo, c->nan_hi, (int)c->causal, c->left, c->right);
}

static void nan_data_free(nan_data *d)
{
    tu_tensor *all[] = {&d->q, &d->k, &d->v, &d->dout, &d->out, &d->lse, &d->dq, &d->dk, &d->dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) tu_tensor_free(all[i]);
}

static bool nan_data_make(nan_data *d, const nan_case *c, uint64_t seed)
{
    memset(d, 0, sizeof *d);
    const int64_t qs[4] = {1, NAN_H, c->Nq, NAN_D}, ks[4] = {1, NAN_H, c->Nk, NAN_D};
    const int64_t ls[3] = {1, NAN_H, c->Nq};
    if (!tu_tensor_alloc(&d->q, ATTN_F32, 4, qs, NULL) || !tu_tensor_alloc(&d->k, ATTN_F32, 4, ks, NULL) ||
        !tu_tensor_alloc(&d->v, ATTN_F32, 4, ks, NULL) || !tu_tensor_alloc(&d->dout, ATTN_F32, 4, qs, NULL) ||
        !tu_tensor_alloc(&d->out, ATTN_F32, 4, qs, NULL) || !tu_tensor_alloc(&d->lse, ATTN_F32, 3, ls, NULL) ||
        !tu_tensor_alloc(&d->dq, ATTN_F32, 4, qs, NULL) || !tu_tensor_alloc(&d->dk, ATTN_F32, 4, ks, NULL) ||
        !tu_tensor_alloc(&d->dv, ATTN_F32, 4, ks, NULL))
        return false;
    tu_rng r;
    tu_rng_seed(&r, seed);
    tu_fill_normal(&d->q.view, &r, 0.0, 1.0);
    tu_fill_normal(&d->k.view, &r, 0.0, 1.0);
    tu_fill_normal(&d->v.view, &r, 0.0, 1.0);
    tu_fill_normal(&d->dout.view, &r, 0.0, 1.0);
    for (int64_t h = 0; h < NAN_H; ++h)
        for (int64_t j = c->nan_lo; j < c->nan_hi; ++j)
            for (int64_t x = 0; x < NAN_D; ++x)
                tu_set(&d->k.view, (h * c->Nk + j) * NAN_D + x, NAN);
    return true;
}

/* Forward, then (with_grads) a backward that recomputes the statistics
 * (no out or lse given), gathered into res (its buffers allocated here). */
static bool nan_case_run(const nan_case *c, nan_data *d, attn_path path, attn_precision prec,
                         bool with_grads, nan_results *res, attn_error *err)
{
    memset(res, 0, sizeof *res);
    attn_sdpa_opts o = attn_sdpa_opts_default();
    o.path = path;
    o.causal = c->causal;
    o.precision = prec;
    o.num_threads = 2;
    if (c->left >= 0) o.window = (attn_window){true, c->left, c->right};
    tu_tensor_poison(&d->out);
    tu_tensor_poison(&d->dq);
    if (attn_sdpa(&d->q.view, &d->k.view, &d->v.view, &d->out.view, &d->lse.view, NULL, &o, err) !=
        ATTN_OK)
        return false;
    if (with_grads && attn_sdpa_backward(&d->q.view, &d->k.view, &d->v.view, NULL, NULL,
                                         &d->dout.view, &d->dq.view, &d->dk.view, &d->dv.view,
                                         &o, err) != ATTN_OK)
        return false;
    const attn_tensor *views[5] = {&d->out.view, &d->lse.view, &d->dq.view, &d->dk.view, &d->dv.view};
    for (int i = 0; i < (with_grads ? 5 : 2); ++i) {
        res->n[i] = tu_numel(views[i]);
        res->t[i] = malloc(sizeof(float) * (size_t)res->n[i]);
        if (!res->t[i]) return false;
        tu_gather_bytes(views[i], res->t[i]);
    }
    return true;
}

static void nan_results_free(nan_results *r)
{
    for (int i = 0; i < 5; ++i) free(r->t[i]);
    memset(r, 0, sizeof *r);
}

/* The first quantity with an element whose NaN-ness differs from the
 * reference's, or whose finite value differs by more than
 * tol·(1 + |ref|) (*at: the element); -1 if none. */
static int nan_results_differ(const nan_results *got, const nan_results *ref, double tol,
                              int64_t *at)
{
    for (int i = 0; i < 5; ++i)
        for (int64_t e = 0; e < got->n[i]; ++e) {
            const float g = got->t[i][e], w = ref->t[i][e];
            if (isnan(g) != isnan(w) || (!isnan(w) && fabs(g - w) > tol * (1.0 + fabs(w)))) {
                *at = e;
                return i;
            }
        }
    return -1;
}

/* got (a fused run of case n, `what`) against the reference's ref. */
static void check_like_reference(tu_group *g, const nan_results *got, const nan_results *ref,
                                 double tol, int n, const char *what, const char *desc)
{
    int64_t at = 0;
    const int bad = nan_results_differ(got, ref, tol, &at);
    tu_check(g, bad < 0, "case %d %s: %s[%" PRId64 "] = %g, reference %g (%s)", n, what,
             bad >= 0 ? nan_name[bad] : "", at, bad >= 0 ? got->t[bad][at] : 0.0,
             bad >= 0 ? ref->t[bad][at] : 0.0, desc);
}

static void test_nan_keys(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "NaN keys in a row's first tile");
    fused_variant vars[8];
    const int nvar = fused_variants(vars);
    const nan_case cases[] = {
        {600, 600, 0, 64, ATTN_CAUSAL_NONE, -1, 0},            /* the first tile's first keys */
        {600, 600, 64, 128, ATTN_CAUSAL_NONE, -1, 0},          /* the end of the first tile */
        {600, 600, 0, 64, ATTN_CAUSAL_TOP_LEFT, -1, 0},        /* every row, diagonal tiles */
        {600, 600, 256, 384, ATTN_CAUSAL_NONE, 100, 0},        /* a middle tile, some rows */
        {600, 600, 300, 310, ATTN_CAUSAL_BOTTOM_RIGHT, 50, 0}, /* a few keys, a few rows */
        {600, 600, 512, 600, ATTN_CAUSAL_TOP_LEFT, 30, 0},     /* the last rows' first tile */
        {1, 600, 0, 64, ATTN_CAUSAL_NONE, -1, 0},              /* decoding, one row */
        {3, 600, 0, 64, ATTN_CAUSAL_BOTTOM_RIGHT, -1, 0},      /* decoding, a few rows */
        {1, 600, 500, 600, ATTN_CAUSAL_NONE, 80, 0},           /* decoding through a window */
    };
    const int ncases = (int)(sizeof cases / sizeof cases[0]);
    for (int n = 0; n < ncases; ++n) {
        const nan_case *c = &cases[n];
        char desc[160];
        nan_case_describe(c, desc, sizeof desc);
        nan_data d;
        nan_results ref;
        attn_error err;
        set_arch(NULL);
        if (!nan_data_make(&d, c, opt->seed + 977 * (uint64_t)n) ||
            !nan_case_run(c, &d, ATTN_PATH_REFERENCE, ATTN_PRECISION_EXACT, true, &ref, &err)) {
            tu_group_fail(&g, "case %d: setup or reference failed (%s)", n, desc);
            nan_results_free(&ref);
            nan_data_free(&d);
            continue;
        }
        int64_t nan_rows = 0;
        for (int64_t x = 0; x < ref.n[1]; ++x) nan_rows += isnan(ref.t[1][x]);
        tu_check(&g, nan_rows > 0, "case %d: the reference has no NaN row (%s)", n, desc);
        for (int x = 0; x < nvar; ++x) {
            const attn_precision prec = fused_variant_use(&vars[x]);
            const bool bf16 = prec == ATTN_PRECISION_BF16;
            nan_results got;
            if (!nan_case_run(c, &d, ATTN_PATH_FUSED, prec, !bf16, &got, &err))
                tu_group_fail(&g, "case %d %s: %s (%s)", n, fused_variant_name(&vars[x]),
                              err.message, desc);
            else
                check_like_reference(&g, &got, &ref, bf16 ? 5e-2 : 1e-3, n,
                                     fused_variant_name(&vars[x]), desc);
            nan_results_free(&got);
        }
        fused_variant_use(NULL);
        nan_results_free(&ref);
        nan_data_free(&d);
    }
    tu_group_end(&g);
}

/* ------------------------------------------------- values under zero weights */

/* A key a row sees takes part in P·V even when its probability is 0 (its
 * logit far below the row's max: exp underflows to 0 in float32): 0·NaN
 * and 0·±inf are NaN, so the row's out is NaN in those features, as on the
 * reference path and in PyTorch (visibility decides, not P != 0); keys a
 * row does not see never influence it (the same keys are hidden from other
 * rows by causality, the window or the mask, and rows that see none of
 * them stay finite). The fused path multiplies tiles whose rows see
 * different keys (ragged) and whose V is not finite by a product that
 * skips zero probabilities: these cases put the keys in such tiles, prefill
 * and decoding shapes, on every table and bfloat16 engine here. The
 * expectations: NaN where the row sees one of the keys and another key
 * (float32 softmax gives the key exactly 0), finite where it sees none,
 * and the reference path's values. */
typedef struct {
    int64_t Nq, Nk, lo, hi; /* keys [lo, hi): logits ~250 below the others, `bad` in V's ZW_F0, ZW_F1 */
    attn_causal causal;
    int64_t left, right; /* window; left < 0: none */
    bool mask;           /* a random (Nq, Nk) bool mask too */
    float bad;
} zw_case;

enum { ZW_H = 2, ZW_D = 16, ZW_F0 = 3, ZW_F1 = 11 };

static void zw_describe(const zw_case *c, char *buf, size_t n)
{
    snprintf(buf, n, "Nq=%" PRId64 " Nk=%" PRId64 " low keys [%" PRId64 ", %" PRId64
                     ") causal=%d window=(%" PRId64 ", %" PRId64 ") mask=%d value %g",
             c->Nq, c->Nk, c->lo, c->hi, (int)c->causal, c->left, c->right, (int)c->mask,
             (double)c->bad);
}

/* Whether row i sees key j: the case's own rules (mask: its (Nq, Nk) view). */
static bool zw_sees(const zw_case *c, const attn_tensor *mask, int64_t i, int64_t j)
{
    const int64_t a = i + c->Nk - c->Nq; /* the row's bottom-right diagonal */
    if (c->causal == ATTN_CAUSAL_TOP_LEFT && j > i) return false;
    if (c->causal == ATTN_CAUSAL_BOTTOM_RIGHT && j > a) return false;
    if (c->left >= 0 && (j < a - c->left || j > a + c->right)) return false;
    return !c->mask || tu_get(mask, i * c->Nk + j) != 0.0;
}

/* q, k, v (1, ZW_H, N, ZW_D) and the mask; out and lse. */
typedef struct {
    tu_tensor q, k, v, mask, out, lse;
} zw_data;

static void zw_data_free(zw_data *d)
{
    tu_tensor *all[] = {&d->q, &d->k, &d->v, &d->mask, &d->out, &d->lse};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) tu_tensor_free(all[i]);
}

static bool zw_data_make(zw_data *d, const zw_case *c, uint64_t seed)
{
    memset(d, 0, sizeof *d);
    const int64_t qs[4] = {1, ZW_H, c->Nq, ZW_D}, ks[4] = {1, ZW_H, c->Nk, ZW_D};
    const int64_t ls[3] = {1, ZW_H, c->Nq}, ms[2] = {c->Nq, c->Nk};
    if (!tu_tensor_alloc(&d->q, ATTN_F32, 4, qs, NULL) || !tu_tensor_alloc(&d->k, ATTN_F32, 4, ks, NULL) ||
        !tu_tensor_alloc(&d->v, ATTN_F32, 4, ks, NULL) || !tu_tensor_alloc(&d->out, ATTN_F32, 4, qs, NULL) ||
        !tu_tensor_alloc(&d->lse, ATTN_F32, 3, ls, NULL) ||
        (c->mask && !tu_tensor_alloc(&d->mask, ATTN_BOOL, 2, ms, NULL)))
        return false;
    tu_rng r;
    tu_rng_seed(&r, seed);
    tu_fill_normal(&d->q.view, &r, 0.0, 1.0);
    tu_fill_normal(&d->k.view, &r, 0.0, 1.0);
    tu_fill_normal(&d->v.view, &r, 0.0, 1.0);
    if (c->mask)
        for (int64_t e = 0; e < c->Nq * c->Nk; ++e) tu_set(&d->mask.view, e, tu_rng_chance(&r, 0.7));
    for (int64_t h = 0; h < ZW_H; ++h) {
        for (int64_t i = 0; i < c->Nq; ++i) tu_set(&d->q.view, (h * c->Nq + i) * ZW_D, 1.0);
        for (int64_t j = c->lo; j < c->hi; ++j) { /* logit -1000·scale = -250 from feature 0 */
            tu_set(&d->k.view, (h * c->Nk + j) * ZW_D, -1000.0);
            tu_set(&d->v.view, (h * c->Nk + j) * ZW_D + ZW_F0, c->bad);
            tu_set(&d->v.view, (h * c->Nk + j) * ZW_D + ZW_F1, c->bad);
        }
    }
    return true;
}

/* The forward's out and lse, gathered into res (allocated here). */
static bool zw_run(const zw_case *c, zw_data *d, attn_path path, attn_precision prec,
                   nan_results *res, attn_error *err)
{
    memset(res, 0, sizeof *res);
    attn_sdpa_opts o = attn_sdpa_opts_default();
    o.path = path;
    o.causal = c->causal;
    o.precision = prec;
    o.num_threads = 2;
    if (c->left >= 0) o.window = (attn_window){true, c->left, c->right};
    if (c->mask) o.mask[0] = &d->mask.view;
    tu_tensor_poison(&d->out);
    if (attn_sdpa(&d->q.view, &d->k.view, &d->v.view, &d->out.view, &d->lse.view, NULL, &o, err) !=
        ATTN_OK)
        return false;
    const attn_tensor *views[2] = {&d->out.view, &d->lse.view};
    for (int i = 0; i < 2; ++i) {
        res->n[i] = tu_numel(views[i]);
        res->t[i] = malloc(sizeof(float) * (size_t)res->n[i]);
        if (!res->t[i]) return false;
        tu_gather_bytes(views[i], res->t[i]);
    }
    return true;
}

/* The first element of out (gathered) whose class the case's rules fix
 * and that has another (*at), -1 if none; *nan: NaN elements expected. */
static int64_t zw_unexpected(const zw_case *c, const zw_data *d, const float *out, int64_t *nan)
{
    *nan = 0;
    for (int64_t h = 0; h < ZW_H; ++h)
        for (int64_t i = 0; i < c->Nq; ++i) {
            bool low = false, other = false;
            for (int64_t j = 0; j < c->Nk; ++j) {
                const bool sees = zw_sees(c, &d->mask.view, i, j), is_low = j >= c->lo && j < c->hi;
                low |= sees && is_low;
                other |= sees && !is_low;
            }
            for (int64_t x = 0; x < ZW_D; ++x) {
                const int64_t e = (h * c->Nq + i) * ZW_D + x;
                const bool bad_feature = x == ZW_F0 || x == ZW_F1;
                if (low && other && bad_feature) {
                    ++*nan;
                    if (!isnan(out[e])) return e;
                } else if (!low && !isfinite(out[e])) {
                    return e;
                }
            }
        }
    return -1;
}

static void test_zero_weight_values(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "NaN values of visible keys with zero weights");
    fused_variant vars[8];
    const int nvar = fused_variants(vars);
    const zw_case cases[] = {
        {300, 300, 40, 44, ATTN_CAUSAL_TOP_LEFT, -1, 0, false, NAN},       /* diagonal tiles */
        {300, 300, 150, 152, ATTN_CAUSAL_TOP_LEFT, -1, 0, false, INFINITY},
        {300, 300, 100, 104, ATTN_CAUSAL_NONE, 32, 0, false, NAN},         /* a window */
        {300, 300, 200, 203, ATTN_CAUSAL_TOP_LEFT, 50, 0, false, -INFINITY},
        {100, 300, 220, 224, ATTN_CAUSAL_BOTTOM_RIGHT, -1, 0, false, NAN}, /* bottom-right */
        {100, 300, 210, 212, ATTN_CAUSAL_BOTTOM_RIGHT, -1, 0, false, -INFINITY},
        {200, 200, 60, 70, ATTN_CAUSAL_NONE, -1, 0, true, NAN},            /* a bool mask */
        {200, 200, 130, 140, ATTN_CAUSAL_TOP_LEFT, -1, 0, true, INFINITY},
        {1, 300, 250, 253, ATTN_CAUSAL_NONE, 100, 0, false, NAN},          /* decoding */
        {3, 300, 280, 282, ATTN_CAUSAL_BOTTOM_RIGHT, 40, 0, false, INFINITY},
        {1, 300, 10, 14, ATTN_CAUSAL_NONE, -1, 0, true, -INFINITY},
    };
    const int ncases = (int)(sizeof cases / sizeof cases[0]);
    for (int n = 0; n < ncases; ++n) {
        const zw_case *c = &cases[n];
        char desc[200];
        zw_describe(c, desc, sizeof desc);
        zw_data d;
        nan_results ref;
        attn_error err;
        if (!zw_data_make(&d, c, opt->seed + 1031 * (uint64_t)n) ||
            !zw_run(c, &d, ATTN_PATH_REFERENCE, ATTN_PRECISION_EXACT, &ref, &err)) {
            tu_group_fail(&g, "case %d: setup or reference failed (%s)", n, desc);
            nan_results_free(&ref);
            zw_data_free(&d);
            continue;
        }
        int64_t nan = 0, at = zw_unexpected(c, &d, ref.t[0], &nan);
        tu_check(&g, at < 0 && nan > 0, "case %d: reference out[%" PRId64 "] = %g, %" PRId64
                 " NaN expected (%s)", n, at, at >= 0 ? ref.t[0][at] : 0.0, nan, desc);
        for (int x = 0; x < nvar; ++x) {
            const attn_precision prec = fused_variant_use(&vars[x]);
            nan_results got;
            if (!zw_run(c, &d, ATTN_PATH_FUSED, prec, &got, &err)) {
                tu_group_fail(&g, "case %d %s: %s (%s)", n, fused_variant_name(&vars[x]),
                              err.message, desc);
            } else {
                at = zw_unexpected(c, &d, got.t[0], &nan);
                tu_check(&g, at < 0, "case %d %s: out[%" PRId64 "] = %g (%s)", n,
                         fused_variant_name(&vars[x]), at, at >= 0 ? got.t[0][at] : 0.0, desc);
                check_like_reference(&g, &got, &ref, prec == ATTN_PRECISION_BF16 ? 5e-2 : 1e-3,
                                     n, fused_variant_name(&vars[x]), desc);
            }
            nan_results_free(&got);
        }
        fused_variant_use(NULL);
        nan_results_free(&ref);
        zw_data_free(&d);
    }
    tu_group_end(&g);
}

/* ------------------------------------------------------------ window bands */

/* Windows bounded on both sides over enough rows to share key tiles (more
 * than 576 per kv head) take their rows a band at a time over each band's
 * keys (forward.c, unit_bands) instead of tile by tile: against the
 * reference (out, lse; NaN where it is NaN), bit for bit over 1, 2 and 3
 * threads, on every kernel table and bfloat16 engine; with ALiBi, softcap
 * and sinks; and with a NaN value in V, which sends the units that read it
 * to the tile loop (a band's zero probabilities of keys some of its rows
 * do not see must not meet it). */
enum { WB_H = 2, WB_D = 64 };

typedef struct {
    int64_t Nq, Nk, left, right;
    attn_causal causal;
    bool variants;   /* ALiBi, softcap and sinks */
    int64_t nan_key; /* a NaN in V's row of this key; -1: none */
} wb_case;

static bool wb_run(const wb_case *c, float *q, float *k, float *v, attn_path path,
                   attn_precision prec, int threads, float *out, float *lse, attn_error *err)
{
    static float slopes[WB_H] = {0.5f, 0.125f}, sinks[WB_H] = {0.5f, -1.0f};
    const attn_tensor tq = attn_tensor_4d(q, 1, WB_H, c->Nq, WB_D);
    const attn_tensor tk = attn_tensor_4d(k, 1, WB_H, c->Nk, WB_D);
    const attn_tensor tv = attn_tensor_4d(v, 1, WB_H, c->Nk, WB_D);
    const attn_tensor ts = attn_tensor_1d(slopes, WB_H), tsk = attn_tensor_1d(sinks, WB_H);
    attn_tensor to = attn_tensor_4d(out, 1, WB_H, c->Nq, WB_D);
    attn_tensor tl = attn_tensor_3d(lse, 1, WB_H, c->Nq);
    attn_sdpa_opts o = attn_sdpa_opts_default();
    o.path = path;
    o.precision = prec;
    o.num_threads = threads;
    o.causal = c->causal;
    o.window = (attn_window){true, c->left, c->right};
    if (c->variants) {
        o.alibi_slopes = &ts;
        o.softcap = 5.0f;
        o.sinks = &tsk;
    }
    return attn_sdpa(&tq, &tk, &tv, &to, &tl, NULL, &o, err) == ATTN_OK;
}

static void test_window_bands(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "window bands");
    fused_variant vars[8];
    const int nvar = fused_variants(vars);
    const wb_case cases[] = {
        {700, 700, 100, 0, ATTN_CAUSAL_NONE, false, -1},
        {650, 900, 37, 20, ATTN_CAUSAL_BOTTOM_RIGHT, true, -1},
        {800, 800, 300, 300, ATTN_CAUSAL_TOP_LEFT, false, -1},
        {700, 700, 50, 5, ATTN_CAUSAL_NONE, false, 300},
    };
    for (int n = 0; n < (int)(sizeof cases / sizeof cases[0]); ++n) {
        const wb_case *c = &cases[n];
        const size_t nq = (size_t)(WB_H * c->Nq * WB_D), nk = (size_t)(WB_H * c->Nk * WB_D);
        const size_t nl = (size_t)(WB_H * c->Nq);
        float *q = malloc(nq * sizeof(float)), *k = malloc(nk * sizeof(float));
        float *v = malloc(nk * sizeof(float)), *ref = malloc(nq * sizeof(float));
        float *lref = malloc(nl * sizeof(float)), *out[3], *lse[3];
        bool ok = q && k && v && ref && lref;
        for (int t = 0; t < 3; ++t) {
            out[t] = malloc(nq * sizeof(float));
            lse[t] = malloc(nl * sizeof(float));
            ok &= out[t] && lse[t];
        }
        tu_rng r;
        tu_rng_seed(&r, opt->seed + 31 * (uint64_t)n);
        for (size_t x = 0; ok && x < nq; ++x) q[x] = (float)(2.0 * tu_rng_uniform(&r) - 1.0);
        for (size_t x = 0; ok && x < nk; ++x) k[x] = (float)(2.0 * tu_rng_uniform(&r) - 1.0);
        for (size_t x = 0; ok && x < nk; ++x) v[x] = (float)(tu_rng_uniform(&r) - 0.5);
        if (ok && c->nan_key >= 0) v[c->nan_key * WB_D + 3] = NAN;
        attn_error err;
        set_arch(NULL);
        unsetenv("ATTN_ENGINE");
        if (!ok || !wb_run(c, q, k, v, ATTN_PATH_REFERENCE, ATTN_PRECISION_EXACT, 2, ref, lref,
                           &err)) {
            tu_group_fail(&g, "case %d: setup or reference failed", n);
        } else {
            for (int x = 0; x < nvar; ++x) {
                const attn_precision prec = fused_variant_use(&vars[x]);
                const double tol = prec == ATTN_PRECISION_BF16 ? 3e-2 : 1e-4;
                bool ran = true;
                for (int t = 0; t < 3 && ran; ++t)
                    ran = wb_run(c, q, k, v, ATTN_PATH_FUSED, prec, t + 1, out[t], lse[t], &err);
                if (!tu_check(&g, ran, "case %d %s: %s", n, fused_variant_name(&vars[x]),
                              err.message))
                    continue;
                int64_t bad = -1;
                for (size_t e = 0; e < nq && bad < 0; ++e)
                    if (isnan(out[0][e]) != isnan(ref[e]) ||
                        (!isnan(ref[e]) && fabs(out[0][e] - ref[e]) > tol))
                        bad = (int64_t)e;
                for (size_t e = 0; e < nl && bad < 0; ++e)
                    if (isnan(lse[0][e]) != isnan(lref[e]) ||
                        (!isnan(lref[e]) && fabs(lse[0][e] - lref[e]) > tol))
                        bad = (int64_t)(nq + e);
                tu_check(&g, bad < 0, "case %d %s: element %" PRId64 " differs from the reference",
                         n, fused_variant_name(&vars[x]), bad);
                for (int t = 1; t < 3; ++t)
                    tu_check(&g, !memcmp(out[0], out[t], nq * sizeof(float)) &&
                                     !memcmp(lse[0], lse[t], nl * sizeof(float)),
                             "case %d %s: %d threads differ from 1", n,
                             fused_variant_name(&vars[x]), t + 1);
            }
            fused_variant_use(NULL);
        }
        free(q), free(k), free(v), free(ref), free(lref);
        for (int t = 0; t < 3; ++t) free(out[t]), free(lse[t]);
    }
    tu_group_end(&g);
}

int main(int argc, char **argv)
{
    tu_options opt;
    if (!tu_parse_options(argc, argv, DEFAULT_SEED, &opt)) return 2;
    tu_suite s = {0};
    s.verbose = opt.verbose;
    printf("test_fused: seed 0x%" PRIx64 ", CPU best ISA %s\n", opt.seed, best_isa_name());
    if (tu_group_selected(&opt, "vexp")) test_vexp(&s, &opt);
    if (tu_group_selected(&opt, "vtanh")) test_vtanh(&s, &opt);
    if (tu_group_selected(&opt, "scores_rows")) test_scores_rows(&s, &opt);
    if (tu_group_selected(&opt, "ATTN_ARCH")) test_arch_override(&s);
    if (tu_group_selected(&opt, "path")) test_path_selection(&s, &opt);
    if (tu_group_selected(&opt, "ISA")) test_isas_vs_reference(&s, &opt);
    if (tu_group_selected(&opt, "bit-identical")) test_determinism(&s, &opt);
    if (tu_group_selected(&opt, "tile")) test_tile_edges(&s, &opt);
    if (tu_group_selected(&opt, "workspace")) test_workspace(&s, &opt);
    if (tu_group_selected(&opt, "GEMM")) test_gemm_instances(&s, &opt);
    if (tu_group_selected(&opt, "gemm_max")) test_gemm_max(&s, &opt);
    if (tu_group_selected(&opt, "rows_finite")) test_rows_finite(&s, &opt);
    if (tu_group_selected(&opt, "softmax_online")) test_softmax_paths(&s, &opt);
    if (tu_group_selected(&opt, "NaN")) test_nan_keys(&s, &opt);
    if (tu_group_selected(&opt, "zero weights")) test_zero_weight_values(&s, &opt);
    if (tu_group_selected(&opt, "window bands")) test_window_bands(&s, &opt);
    return tu_suite_finish(&s);
}
