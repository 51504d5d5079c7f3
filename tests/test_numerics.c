/*
 * test_numerics — promises of the SDPA layer that only show at their edges,
 * on every path (ATTN_ARCH = reference, generic, avx2, avx512, neon as this CPU
 * has them):
 *   - workspace: the forward's and backward's figures serve every call with
 *     at most their query rows and keys, as strided slices or contiguous
 *     copies, any causal alignment, with or without weights, 1 and 2
 *     threads (a sweep over heads, group sizes, rows and keys);
 *   - window: sides near INT64_MAX mean "unbounded", bit for bit as no
 *     window, forward and backward;
 *   - the output does not depend on whether the weights are requested;
 *   - a row whose softmax is exactly one key has exactly zero dS: its dQ and
 *     that key's dK are exactly 0;
 *   - outputs that overlap each other or the workspace are refused;
 *   - the reference path meets the accuracy contract at long rows (8192
 *     keys), forward O and backward dV;
 *   - MHA's bias gradients (sums over B·L rows) meet it too, on both paths.
 *
 * Usage: test_numerics [--seed S] [--quick] [--group NAME] [-v]
 */
#include "attn.h"
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SEED 0x9E3779B9ull

/* ------------------------------------------------------------ paths */

typedef struct {
    const char *name; /* ATTN_ARCH value */
    bool fused;
} arch_entry;

/* The paths this CPU runs: the reference, then every fused kernel table. */
static int available_archs(arch_entry *out)
{
    int n = 0;
    out[n++] = (arch_entry){"reference", false};
    out[n++] = (arch_entry){"generic", true};
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        out[n++] = (arch_entry){"avx2", true};
    if (__builtin_cpu_supports("avx512f")) out[n++] = (arch_entry){"avx512", true};
#elif defined(__aarch64__)
    out[n++] = (arch_entry){"neon", true}; /* every AArch64 CPU has it */
#endif
    return n;
}

static void set_arch(const char *name) { setenv("ATTN_ARCH", name, 1); }

static float *filled(int64_t n, tu_rng *r, double scale)
{
    float *x = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; x && i < n; ++i) x[i] = (float)(scale * tu_rng_normal(r));
    return x;
}

/* A view of rows [r0, r0 + m) of a (B,H,N,X) tensor: strided (the heads
 * keep the parent's stride). */
static attn_tensor rows_view(attn_tensor t, int64_t r0, int64_t m)
{
    t.data = (char *)t.data + (size_t)(r0 * t.stride[2]) * sizeof(float);
    t.shape[2] = m;
    return t;
}

/* The same rows as a contiguous copy in buf. */
static attn_tensor rows_copy(const attn_tensor *t, int64_t r0, int64_t m, float *buf)
{
    const int64_t B = t->shape[0], H = t->shape[1], X = t->shape[3];
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < m; ++i)
                for (int64_t x = 0; x < X; ++x)
                    buf[((b * H + h) * m + i) * X + x] =
                        ((const float *)t->data)[b * t->stride[0] + h * t->stride[1] +
                                                 (r0 + i) * t->stride[2] + x * t->stride[3]];
    return attn_tensor_4d(buf, B, H, m, X);
}

/* ------------------------------------------------------------ workspace */

typedef struct {
    int64_t Hq, Hkv, Nq, Nk;
} ws_shape;

/* One sized workspace, then calls on fewer rows and keys: every one must
 * run in it. Returns the number of refused calls (reported). */
static int workspace_case(tu_group *g, const char *arch, int threads, const ws_shape *c, bool backward,
                          tu_rng *rng)
{
    enum { B = 1, D = 16 };
    const int64_t Hq = c->Hq, Hkv = c->Hkv, Nq = c->Nq, Nk = c->Nk;
    float *q = filled(B * Hq * Nq * D, rng, 0.5), *k = filled(B * Hkv * Nk * D, rng, 0.5),
          *v = filled(B * Hkv * Nk * D, rng, 1.0), *dout = filled(B * Hq * Nq * D, rng, 1.0);
    float *o = calloc((size_t)(B * Hq * Nq * D), 4), *lse = calloc((size_t)(B * Hq * Nq), 4);
    float *w = calloc((size_t)(B * Hq * Nq * Nk), 4), *dq = calloc((size_t)(B * Hq * Nq * D), 4);
    float *dk = calloc((size_t)(B * Hkv * Nk * D), 4), *dv = calloc((size_t)(B * Hkv * Nk * D), 4);
    float *qc = calloc((size_t)(B * Hq * Nq * D), 4), *doc = calloc((size_t)(B * Hq * Nq * D), 4);
    attn_tensor Q = attn_tensor_4d(q, B, Hq, Nq, D), K = attn_tensor_4d(k, B, Hkv, Nk, D),
                V = attn_tensor_4d(v, B, Hkv, Nk, D), dO = attn_tensor_4d(dout, B, Hq, Nq, D);
    attn_sdpa_opts opts = attn_sdpa_opts_default();
    opts.num_threads = threads;
    opts.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    size_t bytes = 0;
    attn_error err = {0};
    int refused = 0;
    if (!tu_check(g, attn_sdpa_workspace_size(&Q, &K, &V, backward, &opts, &bytes, &err) == ATTN_OK,
                  "%s: workspace_size: %s", arch, err.message))
        goto done;
    char *mem = malloc(bytes + 64);
    opts.workspace = mem + 64;
    opts.workspace_size = bytes;
    const int64_t row_counts[] = {Nq, 17, 16, 4, 1};
    const int64_t key_counts[] = {Nk, 4};
    const attn_causal causals[] = {ATTN_CAUSAL_NONE, ATTN_CAUSAL_TOP_LEFT,
                                   ATTN_CAUSAL_BOTTOM_RIGHT};
    for (size_t ri = 0; ri < sizeof row_counts / sizeof *row_counts; ++ri) {
        const int64_t m = row_counts[ri], r0 = Nq - m > 2 ? 2 : Nq - m;
        if (m < 1 || m > Nq || (ri > 0 && m == row_counts[ri - 1])) continue;
        for (size_t ki = 0; ki < sizeof key_counts / sizeof *key_counts; ++ki) {
            const int64_t nk = key_counts[ki];
            if (nk < 1 || (ki > 0 && nk == key_counts[ki - 1])) continue;
            const attn_tensor Ks = rows_view(K, 0, nk), Vs = rows_view(V, 0, nk);
            for (int strided = 0; strided < 2; ++strided)
                for (size_t ci = 0; ci < 3; ++ci) {
                    const attn_tensor Qs = strided ? rows_view(Q, r0, m) : rows_copy(&Q, r0, m, qc);
                    const attn_tensor dOs =
                        strided ? rows_view(dO, r0, m) : rows_copy(&dO, r0, m, doc);
                    attn_tensor O = attn_tensor_4d(o, B, Hq, m, D), L = attn_tensor_3d(lse, B, Hq, m);
                    attn_tensor W = attn_tensor_4d(w, B, Hq, m, nk);
                    attn_tensor dQ = attn_tensor_4d(dq, B, Hq, m, D), dK = attn_tensor_4d(dk, B, Hkv, nk, D),
                                dV = attn_tensor_4d(dv, B, Hkv, nk, D);
                    opts.causal = causals[ci];
                    for (int weights = 0; weights < (backward ? 1 : 2); ++weights) {
                        attn_status st =
                            backward ? attn_sdpa_backward(&Qs, &Ks, &Vs, ci == 0 ? NULL : &O,
                                                          ci == 0 ? NULL : &L, &dOs, &dQ, &dK, &dV,
                                                          &opts, &err)
                                     : attn_sdpa(&Qs, &Ks, &Vs, &O, &L, weights ? &W : NULL, &opts,
                                                 &err);
                        if (st == ATTN_OK) {
                            tu_group_pass(g);
                            continue;
                        }
                        if (refused++ < 3)
                            tu_group_fail(g,
                                          "%s, %d thread(s): %s sized for Hq=%lld Hkv=%lld Nq=%lld "
                                          "Nk=%lld; rows %lld of them (%s), %lld keys, causal %d%s: %s",
                                          arch, threads, backward ? "backward" : "forward",
                                          (long long)Hq, (long long)Hkv, (long long)Nq,
                                          (long long)Nk, (long long)m,
                                          strided ? "strided view" : "contiguous copy",
                                          (long long)nk, (int)causals[ci],
                                          weights ? ", weights" : "", err.message);
                        else
                            g->failed++;
                    }
                }
        }
    }
    free(mem);
done:
    free(q), free(k), free(v), free(dout), free(o), free(lse), free(w), free(dq), free(dk),
        free(dv), free(qc), free(doc);
    return refused;
}

static void group_workspace(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "workspace serves fewer rows and keys, any strides");
    tu_rng rng;
    tu_rng_seed(&rng, opt->seed);
    arch_entry archs[4];
    const int na = available_archs(archs);
    static const int64_t heads[][2] = {{2, 1}, {4, 4}, {8, 1}, {16, 2}};
    static const int64_t rows[] = {16, 100};
    static const int64_t keys[] = {8, 300, 4500}; /* 4500: split-KV decoding */
    if (opt->quick)
        printf("quick mode: the workspace sweep runs a third of its 2-thread, backward and "
               "4500-key shapes, the last with at most 4 heads (each kind still on every kernel "
               "table)\n");
    /* The reference path takes row buffers of Nk. Under emulation only the
     * tables this architecture adds: the portable one's tiles are the same
     * everywhere, and the native runs sweep it. */
    const int first = tu_emulated() && na > 2 ? 2 : 1;
    if (first == 2) printf("emulated: the workspace sweep leaves out the portable table\n");
    for (int a = first; a < na; ++a) {
        set_arch(archs[a].name);
        for (int threads = 1; threads <= 2; ++threads)
            for (size_t h = 0; h < sizeof heads / sizeof *heads; ++h)
                for (size_t r = 0; r < sizeof rows / sizeof *rows; ++r)
                    for (size_t k = 0; k < sizeof keys / sizeof *keys; ++k)
                        for (int backward = 0; backward < 2; ++backward) {
                            /* the backward's sizes do not change past a few key tiles */
                            if (backward && keys[k] > 300) continue;
                            if (opt->quick && (threads == 2 || backward || keys[k] > 300) &&
                                (h + r + k) % 3)
                                continue;
                            /* 16 heads × 100 rows × 4500 keys alone took most of
                             * the quick run under qemu */
                            if (opt->quick && keys[k] > 300 && heads[h][0] > 4) continue;
                            const ws_shape c = {heads[h][0], heads[h][1], rows[r], keys[k]};
                            workspace_case(&g, archs[a].name, threads, &c, backward, &rng);
                        }
    }
    unsetenv("ATTN_ARCH");
    tu_group_end(&g);
}

/* ------------------------------------------------------------ window */

/* Window sides beyond any sequence, INT64_MAX among them, give the bits of
 * no window (or of the one-sided window), forward and backward. */
static void group_window(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "window sides near INT64_MAX");
    enum { B = 1, H = 2, NQ = 7, NK = 11, D = 8 };
    tu_rng rng;
    tu_rng_seed(&rng, opt->seed ^ 0x77);
    float *q = filled(B * H * NQ * D, &rng, 1.0), *k = filled(B * H * NK * D, &rng, 1.0),
          *v = filled(B * H * NK * D, &rng, 1.0), *dout = filled(B * H * NQ * D, &rng, 1.0);
    attn_tensor Q = attn_tensor_4d(q, B, H, NQ, D), K = attn_tensor_4d(k, B, H, NK, D),
                V = attn_tensor_4d(v, B, H, NK, D), dO = attn_tensor_4d(dout, B, H, NQ, D);
    enum { NOUT = B * H * NQ * D + B * H * NQ + 2 * B * H * NK * D + B * H * NQ * D };
    static float want[NOUT], got[NOUT];
    arch_entry archs[4];
    const int na = available_archs(archs);
    const int64_t big[] = {INT64_MAX, INT64_MAX - 1, INT64_MAX / 2 + 1, (int64_t)1 << 40,
                           (int64_t)INT32_MAX + 7, NQ + NK};
    /* {left, right} of the reference window (-1 for an unbounded side) and
     * whether the big value replaces left, right or both. */
    static const int64_t sides[][2] = {{-1, -1}, {-1, 0}, {2, -1}};
    for (int a = 0; a < na; ++a) {
        set_arch(archs[a].name);
        for (int causal = 0; causal < 3; ++causal)
            for (size_t sd = 0; sd < sizeof sides / sizeof *sides; ++sd)
                for (size_t bi = 0; bi < sizeof big / sizeof *big; ++bi) {
                    float *outs[2] = {want, got};
                    attn_status st[2];
                    for (int run = 0; run < 2; ++run) {
                        float *x = outs[run];
                        attn_tensor O = attn_tensor_4d(x, B, H, NQ, D),
                                    L = attn_tensor_3d(x + B * H * NQ * D, B, H, NQ);
                        float *g0 = x + B * H * NQ * D + B * H * NQ;
                        attn_tensor dK = attn_tensor_4d(g0, B, H, NK, D),
                                    dV = attn_tensor_4d(g0 + B * H * NK * D, B, H, NK, D),
                                    dQ = attn_tensor_4d(g0 + 2 * B * H * NK * D, B, H, NQ, D);
                        attn_sdpa_opts o = attn_sdpa_opts_default();
                        o.causal = (attn_causal)causal;
                        o.num_threads = 1;
                        o.window.enabled = true;
                        o.window.left = sides[sd][0];
                        o.window.right = sides[sd][1];
                        if (run) { /* the unbounded sides become huge */
                            if (o.window.left < 0) o.window.left = big[bi];
                            if (o.window.right < 0) o.window.right = big[bi];
                        }
                        st[run] = attn_sdpa(&Q, &K, &V, &O, &L, NULL, &o, NULL);
                        if (st[run] == ATTN_OK)
                            st[run] = attn_sdpa_backward(&Q, &K, &V, &O, &L, &dO, &dQ, &dK, &dV, &o,
                                                         NULL);
                    }
                    tu_check(&g, st[0] == ATTN_OK && st[1] == ATTN_OK && !memcmp(want, got, sizeof want),
                             "%s, causal %d: window (%lld, %lld) with %lld for the unbounded side(s) "
                             "differs from it",
                             archs[a].name, causal, (long long)sides[sd][0], (long long)sides[sd][1],
                             (long long)big[bi]);
                }
    }
    unsetenv("ATTN_ARCH");
    free(q), free(k), free(v), free(dout);
    tu_group_end(&g);
}

/* ------------------------------------------------------------ weights */

typedef struct {
    int64_t Hq, Hkv, Nq, Nk, D;
    attn_dtype dtype; /* of q, k, v and out */
    attn_precision precision;
} weights_shape;

/* (B,H,N,X) float32 values stored as dtype (16-bit: rounded). */
static void *stored(const float *x, int64_t n, attn_dtype dtype)
{
    if (dtype == ATTN_F32) return (void *)x;
    uint16_t *y = malloc(sizeof(uint16_t) * (size_t)n);
    attn_tensor src = attn_tensor_1d((float *)x, n), dst = attn_tensor_1d((float *)y, n);
    dst.dtype = dtype;
    dst.stride[0] = 1;
    if (y && attn_tensor_convert(&src, &dst, NULL) != ATTN_OK) {
        free(y);
        return NULL;
    }
    return y;
}

/* The output (and LSE) bits of a forward do not depend on whether the
 * weights are requested; the weights match the reference path's. */
static void group_weights(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "out does not depend on the weights output");
    tu_rng rng;
    tu_rng_seed(&rng, opt->seed ^ 0x3E);
    static const weights_shape shapes[] = {
        {1, 1, 1, 4097, 64, ATTN_F32, ATTN_PRECISION_EXACT},  /* split-KV decoding */
        {8, 2, 3, 5000, 32, ATTN_F32, ATTN_PRECISION_EXACT},  /* stacked GQA rows, split */
        {8, 2, 3, 700, 32, ATTN_F32, ATTN_PRECISION_EXACT},   /* stacked, one chunk */
        {4, 1, 16, 300, 24, ATTN_F32, ATTN_PRECISION_EXACT},  /* stacked, not direct */
        {2, 2, 40, 300, 64, ATTN_F32, ATTN_PRECISION_EXACT},  /* not a decoding shape */
        {4, 1, 2, 4500, 32, ATTN_BF16, ATTN_PRECISION_EXACT}, /* 16-bit Q read in place */
        {2, 1, 100, 200, 64, ATTN_BF16, ATTN_PRECISION_BF16_DOT},
        {16, 1, 16, 2100, 64, ATTN_BF16, ATTN_PRECISION_BF16_DOT},
    };
    arch_entry archs[4];
    const int na = available_archs(archs);
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; ++c) {
        const weights_shape *w = &shapes[c];
        const int64_t nq = w->Hq * w->Nq * w->D, nk = w->Hkv * w->Nk * w->D, nw = w->Hq * w->Nq * w->Nk;
        float *q = filled(nq, &rng, 1.0), *k = filled(nk, &rng, 1.0), *v = filled(nk, &rng, 1.0);
        void *q16 = stored(q, nq, w->dtype), *k16 = stored(k, nk, w->dtype), *v16 = stored(v, nk, w->dtype);
        const size_t osz = (size_t)nq * (w->dtype == ATTN_F32 ? 4 : 2);
        char *o[2] = {malloc(osz), malloc(osz)};
        float *l[2] = {malloc(sizeof(float) * (size_t)(w->Hq * w->Nq)),
                       malloc(sizeof(float) * (size_t)(w->Hq * w->Nq))};
        float *wt = malloc(sizeof(float) * (size_t)nw), *wref = malloc(sizeof(float) * (size_t)nw);
        attn_tensor Q = attn_tensor_4d(q16, 1, w->Hq, w->Nq, w->D), K = attn_tensor_4d(k16, 1, w->Hkv, w->Nk, w->D),
                    V = attn_tensor_4d(v16, 1, w->Hkv, w->Nk, w->D);
        Q.dtype = K.dtype = V.dtype = w->dtype;
        attn_tensor W = attn_tensor_4d(wt, 1, w->Hq, w->Nq, w->Nk), Wr = attn_tensor_4d(wref, 1, w->Hq, w->Nq, w->Nk);
        attn_error e = {0};
        set_arch("reference");
        attn_sdpa_opts ro = attn_sdpa_opts_default();
        ro.num_threads = 2;
        attn_tensor O0 = attn_tensor_4d((float *)o[0], 1, w->Hq, w->Nq, w->D);
        O0.dtype = w->dtype;
        const bool ref_ok = attn_sdpa(&Q, &K, &V, &O0, NULL, &Wr, &ro, &e) == ATTN_OK;
        tu_check(&g, ref_ok, "case %zu: reference: %s", c, e.message);
        for (int a = 1; a < na && ref_ok; ++a) {
            set_arch(archs[a].name);
            for (int threads = 1; threads <= 2; ++threads) {
                attn_sdpa_opts so = attn_sdpa_opts_default();
                so.num_threads = threads;
                so.precision = w->precision;
                attn_status st[2];
                for (int with = 0; with < 2; ++with) {
                    attn_tensor O = attn_tensor_4d((float *)o[with], 1, w->Hq, w->Nq, w->D),
                                L = attn_tensor_3d(l[with], 1, w->Hq, w->Nq);
                    O.dtype = w->dtype;
                    st[with] = attn_sdpa(&Q, &K, &V, &O, &L, with ? &W : NULL, &so, &e);
                }
                if (!tu_check(&g, st[0] == ATTN_OK && st[1] == ATTN_OK, "case %zu %s: %s", c,
                              archs[a].name, e.message))
                    continue;
                tu_check(&g, !memcmp(o[0], o[1], osz) &&
                                 !memcmp(l[0], l[1], sizeof(float) * (size_t)(w->Hq * w->Nq)),
                         "case %zu (Hq=%lld Hkv=%lld Nq=%lld Nk=%lld), %s, %d thread(s): out or lse "
                         "differ with the weights requested",
                         c, (long long)w->Hq, (long long)w->Hkv, (long long)w->Nq, (long long)w->Nk,
                         archs[a].name, threads);
                double worst = 0;
                for (int64_t x = 0; x < nw; ++x) {
                    const double d = fabs((double)wt[x] - wref[x]) / (1e-30 + fabs((double)wref[x]) + 1e-3 / (double)w->Nk);
                    worst = d > worst || isnan(d) ? d : worst;
                }
                tu_check(&g, worst <= 1e-4, "case %zu, %s: weights differ from the reference's by %g (relative)",
                         c, archs[a].name, worst);
            }
        }
        unsetenv("ATTN_ARCH");
        if (q16 != q) free(q16);
        if (k16 != k) free(k16);
        if (v16 != v) free(v16);
        free(q), free(k), free(v), free(o[0]), free(o[1]), free(l[0]), free(l[1]), free(wt), free(wref);
    }
    tu_group_end(&g);
}

/* ------------------------------------------------------------ exact zeros */

static bool all_zero(const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; ++i)
        if (x[i] != 0.0f) return false;
    return true;
}

/* A row that sees one key has softmax exactly 1, constant: its dQ and that
 * key's dK are exactly 0 on every path (dP and D = rowsum(dO∘O) are one sum
 * rounded two ways; the difference must not leak). */
static void group_exact_zeros(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "one visible key: exactly zero dQ and dK");
    enum { H = 2, NQ = 1, NK = 300, D = 64 };
    tu_rng rng;
    tu_rng_seed(&rng, opt->seed ^ 0x5);
    float *q = filled(H * NQ * D, &rng, 1), *k = filled(H * NK * D, &rng, 1),
          *v = filled(H * NK * D, &rng, 1), *dout = filled(H * NQ * D, &rng, 1);
    float *o = malloc(sizeof(float) * H * NQ * D), *l = malloc(sizeof(float) * H * NQ);
    float *dq = malloc(sizeof(float) * H * NQ * D), *dk = malloc(sizeof(float) * H * NK * D),
          *dv = malloc(sizeof(float) * H * NK * D);
    attn_tensor Q = attn_tensor_4d(q, 1, H, NQ, D), K = attn_tensor_4d(k, 1, H, NK, D),
                V = attn_tensor_4d(v, 1, H, NK, D), dO = attn_tensor_4d(dout, 1, H, NQ, D),
                O = attn_tensor_4d(o, 1, H, NQ, D), L = attn_tensor_3d(l, 1, H, NQ),
                dQ = attn_tensor_4d(dq, 1, H, NQ, D), dK = attn_tensor_4d(dk, 1, H, NK, D),
                dV = attn_tensor_4d(dv, 1, H, NK, D);
    arch_entry archs[4];
    const int na = available_archs(archs);
    for (int a = 0; a < na; ++a) {
        set_arch(archs[a].name);
        for (int given = 0; given < 3; ++given) { /* out+lse, recomputed, dropout */
            attn_sdpa_opts so = attn_sdpa_opts_default();
            so.causal = ATTN_CAUSAL_TOP_LEFT;
            if (given == 2) so.dropout_p = 0.25f, so.dropout_seed = 7;
            attn_error e = {0};
            const bool ok = attn_sdpa(&Q, &K, &V, &O, &L, NULL, &so, &e) == ATTN_OK &&
                            attn_sdpa_backward(&Q, &K, &V, given == 1 ? NULL : &O,
                                               given == 1 ? NULL : &L, &dO, &dQ, &dK, &dV, &so,
                                               &e) == ATTN_OK;
            if (!tu_check(&g, ok, "%s: %s", archs[a].name, e.message)) continue;
            tu_check(&g, all_zero(dq, H * NQ * D) && all_zero(dk, H * NK * D),
                     "%s (%s): dQ or dK not exactly 0 for a row that sees one key", archs[a].name,
                     given == 0 ? "out and lse given" : given == 1 ? "recomputed" : "dropout");
        }
    }
    unsetenv("ATTN_ARCH");
    /* The MHA case: E = 128, H = 2, L = 1, S = 300, causal */
    {
        enum { E = 128, MH = 2, ML = 1, S = 300 };
        attn_mha_config cfg = {E, MH, 0, 0, true, false, false, 0.0f};
        attn_mha *m = NULL;
        float *x = filled(ML * E, &rng, 1), *kv = filled(S * E, &rng, 1), *dy = filled(ML * E, &rng, 1);
        float *y = malloc(sizeof(float) * ML * E), *dx = malloc(sizeof(float) * ML * E),
              *dkv = malloc(sizeof(float) * S * E), *dvv = malloc(sizeof(float) * S * E);
        attn_tensor X = attn_tensor_2d(x, ML, E), KV = attn_tensor_2d(kv, S, E), dY = attn_tensor_2d(dy, ML, E),
                    Y = attn_tensor_2d(y, ML, E), dX = attn_tensor_2d(dx, ML, E),
                    dKV = attn_tensor_2d(dkv, S, E), dVV = attn_tensor_2d(dvv, S, E);
        attn_error e = {0};
        for (int a = 0; a < na; ++a) {
            set_arch(archs[a].name);
            if (!tu_check(&g, attn_mha_create(&cfg, &m, &e) == ATTN_OK, "mha: %s", e.message)) break;
            attn_mha_init(m, 3);
            attn_mha_opts mo = attn_mha_opts_default();
            mo.causal = true;
            const bool ok = attn_mha_forward(m, &X, &KV, &KV, &Y, &mo, &e) == ATTN_OK &&
                            attn_mha_backward(m, &X, &KV, &KV, &dY, &dX, &dKV, &dVV, &mo, &e) == ATTN_OK;
            if (tu_check(&g, ok, "mha %s: %s", archs[a].name, e.message))
                tu_check(&g, all_zero(dx, ML * E) && all_zero(dkv, S * E),
                         "mha %s: query or key gradients not exactly 0 (the query sees one key)",
                         archs[a].name);
            attn_mha_free(m);
            m = NULL;
        }
        unsetenv("ATTN_ARCH");
        free(x), free(kv), free(dy), free(y), free(dx), free(dkv), free(dvv);
    }
    free(q), free(k), free(v), free(dout), free(o), free(l), free(dq), free(dk), free(dv);
    tu_group_end(&g);
}

/* ------------------------------------------------------------ overlaps */

/* status ATTN_ERR_ARG naming both parties, or ATTN_OK for a legal call. */
static void expect_overlap(tu_group *g, const char *what, attn_status st, const attn_error *e,
                           const char *a, const char *b)
{
    tu_check(g, st == ATTN_ERR_ARG && strstr(e->message, a) && strstr(e->message, b) &&
                    strstr(e->message, "shares memory"),
             "%s: got %s '%s', want ATTN_ERR_ARG naming %s and %s", what, attn_status_string(st),
             e->message, a, b);
}

/* Outputs overlapping each other or the workspace are refused before
 * anything is written, in every API that takes outputs. */
static void group_overlaps(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "overlapping outputs refused");
    enum { B = 1, H = 2, N = 6, D = 4, BIG = 4096, WS = 1 << 18 };
    tu_rng rng;
    tu_rng_seed(&rng, opt->seed ^ 0x0E);
    float *q = filled(B * H * N * D, &rng, 1), *k = filled(B * H * N * D, &rng, 1),
          *v = filled(B * H * N * D, &rng, 1), *dout = filled(B * H * N * D, &rng, 1);
    float *buf = calloc(BIG, sizeof(float)), *buf2 = calloc(WS, sizeof(float));
    attn_tensor Q = attn_tensor_4d(q, B, H, N, D), K = attn_tensor_4d(k, B, H, N, D),
                V = attn_tensor_4d(v, B, H, N, D), dO = attn_tensor_4d(dout, B, H, N, D);
    attn_tensor O = attn_tensor_4d(buf, B, H, N, D);
    attn_tensor L_in_O = attn_tensor_3d(buf + 5, B, H, N);         /* lse inside out */
    attn_tensor L = attn_tensor_3d(buf + 1024, B, H, N);
    attn_tensor W_over_O = attn_tensor_4d(buf + 8, B, H, N, N);    /* weights over out */
    attn_tensor S_over_L = attn_tensor_4d(buf + 1024 + 4, B, H, N, 2); /* stats over lse */
    attn_error e;
    attn_sdpa_opts o = attn_sdpa_opts_default();
    for (int path = 0; path < 2; ++path) {
        o.path = path ? ATTN_PATH_FUSED : ATTN_PATH_REFERENCE;
        o.workspace = NULL, o.workspace_size = 0;
        expect_overlap(&g, "sdpa: lse inside out", attn_sdpa(&Q, &K, &V, &O, &L_in_O, NULL, &o, &e), &e,
                       "lse", "out");
        expect_overlap(&g, "sdpa: weights over out",
                       attn_sdpa(&Q, &K, &V, &O, &L, &W_over_O, &o, &e), &e, "out", "weights");
        o.softmax_stats = &S_over_L;
        expect_overlap(&g, "sdpa: stats over lse", attn_sdpa(&Q, &K, &V, &O, &L, NULL, &o, &e), &e,
                       "lse", "softmax_stats");
        o.softmax_stats = NULL;
        o.workspace = buf2, o.workspace_size = WS * sizeof(float);
        attn_tensor O_in_ws = attn_tensor_4d(buf2 + 100, B, H, N, D);
        expect_overlap(&g, "sdpa: out inside the workspace",
                       attn_sdpa(&Q, &K, &V, &O_in_ws, &L, NULL, &o, &e), &e, "out", "workspace");
        tu_check(&g, attn_sdpa(&Q, &K, &V, &O, &L, NULL, &o, &e) == ATTN_OK,
                 "sdpa with apart outputs and a workspace: %s", e.message);
        /* backward: dq == dk, dv inside the workspace */
        attn_tensor dQ = attn_tensor_4d(buf + 2048, B, H, N, D), dV = attn_tensor_4d(buf + 3072, B, H, N, D);
        expect_overlap(&g, "sdpa_backward: grad_query == grad_key",
                       attn_sdpa_backward(&Q, &K, &V, &O, &L, &dO, &dQ, &dQ, &dV, &o, &e), &e,
                       "grad_query", "grad_key");
        attn_tensor dV_ws = attn_tensor_4d(buf2 + 8, B, H, N, D), dK = attn_tensor_4d(buf + 3500, B, H, N, D);
        expect_overlap(&g, "sdpa_backward: grad_value inside the workspace",
                       attn_sdpa_backward(&Q, &K, &V, &O, &L, &dO, &dQ, &dK, &dV_ws, &o, &e), &e,
                       "grad_value", "workspace");
        o.workspace = NULL, o.workspace_size = 0;
        tu_check(&g, attn_sdpa_backward(&Q, &K, &V, &O, &L, &dO, &dQ, &dK, &dV, &o, &e) == ATTN_OK,
                 "sdpa_backward with apart outputs: %s", e.message);
    }
    /* varlen: packed (T, H, D); lse of the second sequence inside out of the first */
    {
        const int64_t cu[3] = {0, 2, N};
        const attn_varlen_seqs seqs = {2, ATTN_OFFSETS_I64, cu, cu};
        attn_tensor q3 = attn_tensor_3d(q, N, H, D), k3 = attn_tensor_3d(k, N, H, D),
                    v3 = attn_tensor_3d(v, N, H, D), d3 = attn_tensor_3d(dout, N, H, D);
        attn_tensor o3 = attn_tensor_3d(buf, N, H, D), l2 = attn_tensor_2d(buf + 20, N, H);
        o = attn_sdpa_opts_default();
        expect_overlap(&g, "varlen: lse inside out",
                       attn_sdpa_varlen(&q3, &k3, &v3, &seqs, &o3, &l2, &o, &e), &e, "out", "lse");
        attn_tensor g3 = attn_tensor_3d(buf + 2048, N, H, D), gv = attn_tensor_3d(buf + 3072, N, H, D);
        expect_overlap(&g, "varlen_backward: grad_query == grad_key",
                       attn_sdpa_varlen_backward(&q3, &k3, &v3, &seqs, NULL, NULL, &d3, &g3, &g3,
                                                 &gv, &o, &e),
                       &e, "grad_query", "grad_key");
    }
    /* KV cache attend: lse inside out */
    {
        attn_kvcache_config cfg = {.batch = B, .kv_heads = H, .capacity = 16, .head_dim = D};
        attn_kvcache *cache = NULL;
        if (tu_check(&g, attn_kvcache_create(&cfg, &cache, &e) == ATTN_OK &&
                             attn_kvcache_append(cache, &K, &V, NULL, &e) == ATTN_OK,
                     "kvcache setup: %s", e.message)) {
            o = attn_sdpa_opts_default();
            expect_overlap(&g, "kvcache_attend: lse inside out",
                           attn_kvcache_attend(cache, &Q, &O, &L_in_O, &o, &e), &e, "out", "lse");
            tu_check(&g, attn_kvcache_attend(cache, &Q, &O, &L, &o, &e) == ATTN_OK,
                     "kvcache_attend with apart outputs: %s", e.message);
        }
        attn_kvcache_free(cache);
    }
    /* MHA: weights over out, out inside the workspace, dquery == dkey */
    {
        enum { E = 8, HEADS = 2, LQ = 3, S = 5 };
        attn_mha_config cfg = {E, HEADS, 0, 0, true, false, false, 0.0f};
        attn_mha *m = NULL;
        float *x = filled(LQ * E, &rng, 1), *kv = filled(S * E, &rng, 1), *dy = filled(LQ * E, &rng, 1);
        attn_tensor X = attn_tensor_2d(x, LQ, E), KV = attn_tensor_2d(kv, S, E),
                    dY = attn_tensor_2d(dy, LQ, E), Y = attn_tensor_2d(buf, LQ, E);
        if (tu_check(&g, attn_mha_create(&cfg, &m, &e) == ATTN_OK,
                     "mha setup: %s", e.message)) {
            attn_mha_init(m, 1);
            attn_mha_opts mo = attn_mha_opts_default();
            attn_tensor Wt = attn_tensor_2d(buf + 4, LQ, S);
            mo.weights = &Wt;
            expect_overlap(&g, "mha_forward: weights over out",
                           attn_mha_forward(m, &X, &KV, &KV, &Y, &mo, &e), &e, "out", "weights");
            mo.weights = NULL;
            mo.workspace = buf2, mo.workspace_size = WS * sizeof(float);
            attn_tensor Y_ws = attn_tensor_2d(buf2 + 64, LQ, E);
            expect_overlap(&g, "mha_forward: out inside the workspace",
                           attn_mha_forward(m, &X, &KV, &KV, &Y_ws, &mo, &e), &e, "out", "workspace");
            mo.workspace = NULL, mo.workspace_size = 0;
            attn_tensor dX = attn_tensor_2d(buf + 1024, LQ, E), dKV = attn_tensor_2d(buf + 1024, S, E),
                        dV2 = attn_tensor_2d(buf + 2048, S, E);
            expect_overlap(&g, "mha_backward: dquery over dkey",
                           attn_mha_backward(m, &X, &KV, &KV, &dY, &dX, &dKV, &dV2, &mo, &e), &e,
                           "dquery", "dkey");
        }
        attn_mha_free(m);
        free(x), free(kv), free(dy);
    }
    free(q), free(k), free(v), free(dout), free(buf), free(buf2);
    tu_group_end(&g);
}

/* ------------------------------------------------------------ reference accuracy */

/* Σ_e x[e·sx]·y[e·sy] in float32 as vectorised kernels and BLAS sum it: 16
 * float partial sums, then their float sum (torch's float32 order, the
 * README's "fp32"). */
static float lanes_dot(const float *x, int64_t sx, const float *y, int64_t sy, int64_t n)
{
    float lane[16] = {0}, sum = 0.0f;
    for (int64_t e = 0; e < n; ++e) lane[e % 16] += x[e * sx] * y[e * sy];
    for (int l = 0; l < 16; ++l) sum += lane[l];
    return sum;
}

/* The criterion's ratio max |got − ref| / (3·max |fp32 − ref| + 1e-6·nat). */
static double contract_ratio(const float *got, const double *ref, const float *fp32,
                             const double *nat, int64_t n)
{
    double M = 0.0, worst = 0.0;
    for (int64_t e = 0; e < n; ++e) M = fmax(M, fabs((double)fp32[e] - ref[e]));
    for (int64_t e = 0; e < n; ++e) {
        const double r = fabs((double)got[e] - ref[e]) / (3.0 * M + 1e-6 * nat[e]);
        worst = r > worst || isnan(r) ? r : worst;
    }
    return worst;
}

/*
 * The reference path is the oracle: it must meet the accuracy contract it
 * holds the others to. Long rows (8192 keys) with logits of a few units:
 * plain float32 sums over the keys (the softmax's denominator, P·V) put O at
 * 2.6x and dV at 3.5x the limit. Judged against float64 with M taken from a
 * float32 realisation in torch's order (lanes_dot), forward O and backward
 * dV.
 */
static void group_reference_accuracy(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "reference path meets the accuracy contract at long rows");
    enum { NQ = 64, NK = 8192, D = 128 };
    tu_rng rng;
    tu_rng_seed(&rng, opt->seed ^ 0xACC);
    float *q = filled(NQ * D, &rng, 2.0), *k = filled(NK * D, &rng, 2.0), *v = filled(NK * D, &rng, 1.0),
          *dout = filled(NQ * D, &rng, 1.0);
    float *o = malloc(sizeof(float) * NQ * D), *dv = malloc(sizeof(float) * NK * D),
          *o32 = malloc(sizeof(float) * NQ * D), *dv32 = malloc(sizeof(float) * NK * D),
          *p32 = malloc(sizeof(float) * NQ * NK);
    double *o64 = malloc(sizeof(double) * NQ * D), *dv64 = calloc(NK * D, sizeof(double)),
           *natdv = calloc(NK * D, sizeof(double)), *nato = malloc(sizeof(double) * NQ * D),
           *p64 = malloc(sizeof(double) * NK);
    const float scale = 1.0f / sqrtf((float)D);
    double maxv = 0.0;
    for (int64_t e = 0; e < NK * D; ++e) maxv = fmax(maxv, fabs((double)v[e]));
    for (int64_t e = 0; e < NQ * D; ++e) nato[e] = maxv;
    for (int64_t i = 0; i < NQ; ++i) {
        /* float32 in torch's order: logits, softmax with the max subtracted, P·V */
        float *p = p32 + i * NK, m = -INFINITY, sum32;
        for (int64_t j = 0; j < NK; ++j) {
            p[j] = scale * lanes_dot(q + i * D, 1, k + j * D, 1, D);
            m = fmaxf(m, p[j]);
        }
        float one = 1.0f;
        for (int64_t j = 0; j < NK; ++j) p[j] = expf(p[j] - m);
        sum32 = lanes_dot(p, 1, &one, 0, NK);
        for (int64_t j = 0; j < NK; ++j) p[j] /= sum32;
        for (int64_t d = 0; d < D; ++d) o32[i * D + d] = lanes_dot(p, 1, v + d, D, NK);
        /* float64 */
        double m64 = -INFINITY, sum64 = 0.0;
        for (int64_t j = 0; j < NK; ++j) {
            double dot = 0.0;
            for (int64_t d = 0; d < D; ++d) dot += (double)q[i * D + d] * k[j * D + d];
            p64[j] = (double)scale * dot;
            m64 = fmax(m64, p64[j]);
        }
        for (int64_t j = 0; j < NK; ++j) sum64 += p64[j] = exp(p64[j] - m64);
        for (int64_t d = 0; d < D; ++d) o64[i * D + d] = 0.0;
        for (int64_t j = 0; j < NK; ++j) {
            const double P = p64[j] / sum64;
            for (int64_t d = 0; d < D; ++d) {
                o64[i * D + d] += P * v[j * D + d];
                dv64[j * D + d] += P * dout[i * D + d];
                natdv[j * D + d] += P * fabs((double)dout[i * D + d]);
            }
        }
    }
    for (int64_t j = 0; j < NK; ++j)
        for (int64_t d = 0; d < D; ++d) dv32[j * D + d] = lanes_dot(p32 + j, NK, dout + d, D, NQ);

    attn_tensor Q = attn_tensor_4d(q, 1, 1, NQ, D), K = attn_tensor_4d(k, 1, 1, NK, D),
                V = attn_tensor_4d(v, 1, 1, NK, D), O = attn_tensor_4d(o, 1, 1, NQ, D),
                dO = attn_tensor_4d(dout, 1, 1, NQ, D), dV = attn_tensor_4d(dv, 1, 1, NK, D);
    attn_sdpa_opts ro = attn_sdpa_opts_default();
    ro.path = ATTN_PATH_REFERENCE;
    ro.num_threads = 2;
    attn_error e = {0};
    if (tu_check(&g, attn_sdpa(&Q, &K, &V, &O, NULL, NULL, &ro, &e) == ATTN_OK, "forward: %s",
                 e.message)) {
        const double r = contract_ratio(o, o64, o32, nato, NQ * D);
        tu_check(&g, r <= 1.0, "reference O: %.3g x the contract's limit (Nq %d, Nk %d, D %d)", r,
                 NQ, NK, D);
        if (s->verbose) tu_group_note(&g, "reference O: %.3g x the contract's limit", r);
    }
    if (tu_check(&g, attn_sdpa_backward(&Q, &K, &V, NULL, NULL, &dO, NULL, NULL, &dV, &ro, &e) == ATTN_OK,
                 "backward: %s", e.message)) {
        const double r = contract_ratio(dv, dv64, dv32, natdv, NK * D);
        tu_check(&g, r <= 1.0, "reference dV: %.3g x the contract's limit (Nq %d, Nk %d, D %d)", r,
                 NQ, NK, D);
        if (s->verbose) tu_group_note(&g, "reference dV: %.3g x the contract's limit", r);
    }
    free(q), free(k), free(v), free(dout), free(o), free(dv), free(o32), free(dv32), free(p32);
    free(o64), free(dv64), free(natdv), free(nato), free(p64);
    tu_group_end(&g);
}

/* Σ_i x[i·stride], i < n, in float32 summed pairwise (torch's cascade sum,
 * the README's "fp32" for a sum over rows). */
static float pairwise_sum(const float *x, int64_t stride, int64_t n)
{
    if (n <= 16) {
        float sum = 0.0f;
        for (int64_t i = 0; i < n; ++i) sum += x[i * stride];
        return sum;
    }
    return pairwise_sum(x, stride, n / 2) + pairwise_sum(x + n / 2 * stride, stride, n - n / 2);
}

/*
 * MHA's bias gradients sum the rows of B·L (or B·S) row matrices: the output
 * projection's bias gradient is Σ_rows dout exactly. A float32 sequential sum
 * drifted to several times the contract's limit (at input magnitudes 1e-3 the
 * in-projection's bias gradients, whose key third cancels to 0, showed it).
 * dout here rises to ±2048 partial sums and cancels back: the sum of its 4096
 * rows is judged against float64 with M from a pairwise float32 sum.
 */
static void group_mha_bias_sum(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "MHA bias gradients meet the accuracy contract over many rows");
    enum { B = 2, L = 2048, S = 4, E = 16, H = 2, ROWS = B * L };
    tu_rng rng;
    tu_rng_seed(&rng, opt->seed ^ 0xB1A5);
    float *x = filled(ROWS * E, &rng, 1.0), *kv = filled(B * S * E, &rng, 1.0),
          *dout = malloc(sizeof(float) * ROWS * E), *out = malloc(sizeof(float) * ROWS * E);
    for (int64_t r = 0; r < ROWS; ++r)
        for (int64_t e = 0; e < E; ++e)
            dout[r * E + e] = (float)((r < ROWS / 2 ? 1.0 : -1.0) + 0.1 * tu_rng_normal(&rng));
    double ref[E], M = 0.0;
    for (int64_t e = 0; e < E; ++e) {
        ref[e] = 0.0;
        for (int64_t r = 0; r < ROWS; ++r) ref[e] += dout[r * E + e];
        M = fmax(M, fabs((double)pairwise_sum(dout + e, E, ROWS) - ref[e]));
    }
    attn_mha_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.embed_dim = E, cfg.num_heads = H, cfg.bias = true;
    attn_tensor Q = attn_tensor_3d(x, B, L, E), K = attn_tensor_3d(kv, B, S, E),
                O = attn_tensor_3d(out, B, L, E), dO = attn_tensor_3d(dout, B, L, E);
    static const attn_path paths[] = {ATTN_PATH_REFERENCE, ATTN_PATH_FUSED};
    for (int pi = 0; pi < 2; ++pi) {
        attn_mha *m = NULL;
        attn_error e = {0};
        if (!tu_check(&g, attn_mha_create(&cfg, &m, &e) == ATTN_OK, "create: %s", e.message)) break;
        attn_mha_init(m, 7);
        attn_mha_opts mo = attn_mha_opts_default();
        mo.path = paths[pi];
        mo.num_threads = 2;
        attn_tensor bias, dbias;
        if (tu_check(&g, attn_mha_forward(m, &Q, &K, &K, &O, &mo, &e) == ATTN_OK &&
                             attn_mha_backward(m, &Q, &K, &K, &dO, NULL, NULL, NULL, &mo, &e) == ATTN_OK &&
                             attn_mha_param(m, "out_proj.bias", &bias, &dbias, &e) == ATTN_OK,
                     "%s path: %s", pi ? "fused" : "reference", e.message)) {
            const float *db = dbias.data;
            double worst = 0.0, nat = 0.0;
            for (int64_t c = 0; c < E; ++c) nat = fmax(nat, fabs(ref[c]));
            for (int64_t c = 0; c < E; ++c)
                worst = fmax(worst, fabs((double)db[c] - ref[c]) / (3.0 * M + 1e-6 * nat));
            tu_check(&g, worst <= 1.0, "%s path: out_proj.bias gradient %.3g x the contract's limit",
                     pi ? "fused" : "reference", worst);
            if (s->verbose)
                tu_group_note(&g, "%s path: out_proj.bias gradient %.3g x the limit",
                              pi ? "fused" : "reference", worst);
        }
        attn_mha_free(m);
    }
    free(x), free(kv), free(dout), free(out);
    tu_group_end(&g);
}

int main(int argc, char **argv)
{
    tu_options opt;
    tu_suite s;
    if (!tu_begin(argc, argv, DEFAULT_SEED, &opt, &s)) return 2;
    if (tu_group_selected(&opt, "workspace")) group_workspace(&s, &opt);
    if (tu_group_selected(&opt, "window")) group_window(&s, &opt);
    if (tu_group_selected(&opt, "weights")) group_weights(&s, &opt);
    if (tu_group_selected(&opt, "zeros")) group_exact_zeros(&s, &opt);
    if (tu_group_selected(&opt, "overlaps")) group_overlaps(&s, &opt);
    if (tu_group_selected(&opt, "reference_accuracy")) group_reference_accuracy(&s, &opt);
    if (tu_group_selected(&opt, "mha_bias_sum")) group_mha_bias_sum(&s, &opt);
    return tu_suite_finish(&s);
}
