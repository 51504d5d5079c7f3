/*
 * test_bias_grad — the gradient of a learned float mask (attn_sdpa_opts
 * .grad_mask): d loss / d mask = Σ dX over the mask's broadcast dimensions,
 * dX_ij = P_ij (dP_ij - D_i), on every path (reference, generic and each
 * SIMD ISA through ATTN_ARCH), for masks (1,1,Nq,Nk), (B,1,Nq,Nk), (Nq,Nk),
 * (B,Hq,Nq,Nk), (Nk) and (1,Hq,1,Nk), with causal alignments, GQA, softcap,
 * a second (bool) mask, hidden keys (-inf), the forward's statistics given
 * or recomputed, and dq/dk/dv wanted or not.
 *
 * Oracle: a float64 softmax backward written here from the formula. An
 * element passes when |got - want| <= 1e-5·mag + 1e-7, mag the same sum with
 * every term replaced by its absolute value (the condition of the sum; the
 * float32 path's error is a few ulp of it).
 *
 * Also: results bitwise identical on 1 and 2 threads on every path, bad
 * grad_mask arguments refused with a message naming grad_mask, and
 * `attn sdpa-backward --grad-attn-mask` writing the library's gradient.
 */
#include "attn.h"
#include "clirun.h"
#include "sdpa_judge.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_SEED 0xB1A5ull

static void *xcalloc(int64_t n, size_t size)
{
    void *p = calloc((size_t)(n > 0 ? n : 1), size);
    if (!p) {
        fprintf(stderr, "test_bias_grad: out of memory\n");
        exit(2);
    }
    return p;
}

typedef struct {
    int64_t B, Hq, Hkv, Nq, Nk, D;
    attn_causal causal;
    float softcap;
    int mask_ndim;
    int64_t mask_shape[4];
    bool bool_mask;  /* a second mask: bool (B,1,1,Nk) key padding */
    bool given;      /* pass the forward's out and softmax_stats */
    bool grads_qkv;  /* also ask for dq, dk, dv */
} bg_case;

/* The mask's size in dimension d of (B,Hq,Nq,Nk) (1 where it broadcasts). */
static int64_t mdim(const bg_case *c, int d)
{
    const int md = c->mask_ndim - 4 + d;
    return md < 0 ? 1 : c->mask_shape[md];
}

/* Linear index into the mask of element (b,h,i,j) of the full shape. */
static int64_t mask_at(const bg_case *c, int64_t b, int64_t h, int64_t i, int64_t j)
{
    const int64_t at[4] = {b, h, i, j};
    int64_t x = 0;
    for (int d = 0; d < 4; ++d) x = x * mdim(c, d) + (mdim(c, d) == 1 ? 0 : at[d]);
    return x;
}

static bool causal_ok(const bg_case *c, int64_t i, int64_t j)
{
    if (c->causal == ATTN_CAUSAL_TOP_LEFT) return j <= i;
    if (c->causal == ATTN_CAUSAL_BOTTOM_RIGHT) return j <= i + c->Nk - c->Nq;
    return true;
}

/* d loss / d mask (want) and its magnitude (mag), each of the mask's size. */
static void oracle(const bg_case *c, const double *q, const double *k, const double *v,
                   const double *dout, const double *mask, const uint8_t *pad, double *want,
                   double *mag)
{
    const int64_t Nk = c->Nk, D = c->D, group = c->Hq / c->Hkv;
    const double scale = (double)(1.0f / sqrtf((float)D));
    double *s = xcalloc(Nk, sizeof *s), *dp = xcalloc(Nk, sizeof *dp);
    for (int64_t b = 0; b < c->B; ++b)
        for (int64_t h = 0; h < c->Hq; ++h)
            for (int64_t i = 0; i < c->Nq; ++i) {
                const double *qi = q + ((b * c->Hq + h) * c->Nq + i) * D;
                const double *di = dout + ((b * c->Hq + h) * c->Nq + i) * D;
                double m = -INFINITY;
                for (int64_t j = 0; j < Nk; ++j) {
                    const double *kj = k + ((b * c->Hkv + h / group) * Nk + j) * D;
                    double x = 0;
                    for (int64_t d = 0; d < D; ++d) x += qi[d] * kj[d];
                    x *= scale;
                    if (c->softcap > 0) x = c->softcap * tanh(x / c->softcap);
                    x += mask[mask_at(c, b, h, i, j)];
                    if (!causal_ok(c, i, j) || (pad && !pad[b * Nk + j])) x = -INFINITY;
                    s[j] = x;
                    m = x > m ? x : m;
                }
                if (m == -INFINITY) continue; /* a row that sees nothing: zero gradient */
                double sum = 0, dsum = 0, dabs = 0;
                for (int64_t j = 0; j < Nk; ++j) sum += s[j] = exp(s[j] - m);
                for (int64_t j = 0; j < Nk; ++j) {
                    const double *vj = v + ((b * c->Hkv + h / group) * Nk + j) * D;
                    s[j] /= sum;
                    dp[j] = 0;
                    for (int64_t d = 0; d < D; ++d) dp[j] += di[d] * vj[d];
                    dsum += s[j] * dp[j];
                    dabs += s[j] * fabs(dp[j]);
                }
                for (int64_t j = 0; j < Nk; ++j) {
                    const int64_t x = mask_at(c, b, h, i, j);
                    want[x] += s[j] * (dp[j] - dsum);
                    mag[x] += s[j] * (fabs(dp[j]) + dabs);
                }
            }
    free(s), free(dp);
}

typedef struct {
    float *q, *k, *v, *dout, *mask, *out, *stats, *dq, *dk, *dv;
    uint8_t *pad;
} bg_data;

/* One backward call on the current path: grad (the mask's size) out. */
static attn_status run(const bg_case *c, const bg_data *x, attn_path path, int threads,
                       float *grad, attn_error *err)
{
    const int64_t B = c->B, Hq = c->Hq, Hkv = c->Hkv, Nq = c->Nq, Nk = c->Nk, D = c->D;
    attn_tensor Q = attn_tensor_4d(x->q, B, Hq, Nq, D), K = attn_tensor_4d(x->k, B, Hkv, Nk, D);
    attn_tensor V = attn_tensor_4d(x->v, B, Hkv, Nk, D), dO = attn_tensor_4d(x->dout, B, Hq, Nq, D);
    attn_tensor O = attn_tensor_4d(x->out, B, Hq, Nq, D);
    attn_tensor St = attn_tensor_4d(x->stats, B, Hq, Nq, 2);
    attn_tensor dQ = attn_tensor_4d(x->dq, B, Hq, Nq, D), dK = attn_tensor_4d(x->dk, B, Hkv, Nk, D);
    attn_tensor dV = attn_tensor_4d(x->dv, B, Hkv, Nk, D);
    attn_tensor M = attn_tensor_make(x->mask, ATTN_F32, c->mask_ndim, c->mask_shape);
    attn_tensor G = attn_tensor_make(grad, ATTN_F32, c->mask_ndim, c->mask_shape);
    const int64_t pshape[4] = {B, 1, 1, Nk};
    attn_tensor P = attn_tensor_make(x->pad, ATTN_BOOL, 4, pshape);
    attn_sdpa_opts o = attn_sdpa_opts_default();
    o.causal = c->causal;
    o.softcap = c->softcap;
    o.path = path;
    o.num_threads = threads;
    o.mask[0] = &M;
    o.mask[1] = c->bool_mask ? &P : NULL;
    attn_status s = ATTN_OK;
    if (c->given) { /* the forward's out and statistics */
        o.softmax_stats = &St;
        s = attn_sdpa(&Q, &K, &V, &O, NULL, NULL, &o, err);
        if (s != ATTN_OK) return s;
    }
    o.grad_mask = &G;
    return attn_sdpa_backward(&Q, &K, &V, c->given ? &O : NULL, NULL, &dO,
                              c->grads_qkv ? &dQ : NULL, c->grads_qkv ? &dK : NULL,
                              c->grads_qkv ? &dV : NULL, &o, err);
}

static int64_t mask_numel(const bg_case *c)
{
    int64_t n = 1;
    for (int d = 0; d < c->mask_ndim; ++d) n *= c->mask_shape[d];
    return n;
}

static void check_case(tu_group *g, const bg_case *c, uint64_t seed, const char *desc)
{
    const int64_t B = c->B, Hq = c->Hq, Hkv = c->Hkv, Nq = c->Nq, Nk = c->Nk, D = c->D;
    const int64_t nq = B * Hq * Nq * D, nk = B * Hkv * Nk * D, nm = mask_numel(c);
    tu_rng r;
    tu_rng_seed(&r, seed);
    bg_data x = {xcalloc(nq, 4), xcalloc(nk, 4), xcalloc(nk, 4), xcalloc(nq, 4), xcalloc(nm, 4),
                 xcalloc(nq, 4), xcalloc(B * Hq * Nq * 2, 4), xcalloc(nq, 4), xcalloc(nk, 4),
                 xcalloc(nk, 4), xcalloc(B * Nk, 1)};
    double *q = xcalloc(nq, 8), *k = xcalloc(nk, 8), *v = xcalloc(nk, 8), *dout = xcalloc(nq, 8);
    double *mask = xcalloc(nm, 8), *want = xcalloc(nm, 8), *mag = xcalloc(nm, 8);
    struct { float *f; double *d; int64_t n; double sd; } fill[] = {
        {x.q, q, nq, 1.5}, {x.k, k, nk, 1.5}, {x.v, v, nk, 1.0}, {x.dout, dout, nq, 1.0},
        {x.mask, mask, nm, 1.0}};
    for (size_t f = 0; f < sizeof fill / sizeof fill[0]; ++f)
        for (int64_t e = 0; e < fill[f].n; ++e)
            fill[f].d[e] = fill[f].f[e] = (float)(fill[f].sd * tu_rng_normal(&r));
    for (int64_t e = 0; e < nm; ++e) /* some keys hidden by the float mask itself */
        if (tu_rng_chance(&r, 0.1)) x.mask[e] = (float)(mask[e] = -INFINITY);
    for (int64_t e = 0; e < B * Nk; ++e) x.pad[e] = !tu_rng_chance(&r, 0.2);
    oracle(c, q, k, v, dout, mask, c->bool_mask ? x.pad : NULL, want, mag);
    for (int64_t e = 0; e < nm; ++e) mag[e] = 1e-5 * mag[e] + 1e-7;

    float *grad = xcalloc(nm, 4), *grad1 = xcalloc(nm, 4);
    const tu_tol tol = {.atol = 1.0, .rtol = 0.0, .atol_scale = mag};
    sj_path paths[SJ_MAX_PATHS];
    const int npaths = sj_paths(paths);
    for (int pi = 0; pi < npaths; ++pi) {
        sj_select(&paths[pi]);
        attn_error err = {0};
        attn_status s = run(c, &x, paths[pi].path, 1, grad1, &err);
        if (!tu_check(g, s == ATTN_OK, "%s [%s] 1 thread: %s", desc, paths[pi].name, err.message))
            continue;
        s = run(c, &x, paths[pi].path, 2, grad, &err);
        if (!tu_check(g, s == ATTN_OK, "%s [%s] 2 threads: %s", desc, paths[pi].name, err.message))
            continue;
        tu_check(g, !memcmp(grad, grad1, (size_t)nm * 4), "%s [%s]: 1 and 2 threads differ", desc,
                 paths[pi].name);
        const attn_tensor G = attn_tensor_make(grad, ATTN_F32, c->mask_ndim, c->mask_shape);
        tu_cmp cmp;
        char line[400];
        if (!tu_compare(&G, want, tol, &cmp)) {
            tu_cmp_describe(&cmp, "grad_mask", &G, line, sizeof line);
            tu_group_fail(g, "%s [%s]: %s", desc, paths[pi].name, line);
        } else {
            tu_group_pass(g);
        }
    }
    unsetenv("ATTN_ARCH");
    free(x.q), free(x.k), free(x.v), free(x.dout), free(x.mask), free(x.out), free(x.stats);
    free(x.dq), free(x.dk), free(x.dv), free(x.pad);
    free(q), free(k), free(v), free(dout), free(mask), free(want), free(mag), free(grad), free(grad1);
}

static void group_shapes(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "shapes");
    const int64_t B = 2, Hq = 4, Nq = 70, Nk = 200, D = 16;
    const struct { int ndim; int64_t shape[4]; const char *name; } masks[] = {
        {4, {1, 1, Nq, Nk}, "(1,1,Nq,Nk)"}, {4, {B, 1, Nq, Nk}, "(B,1,Nq,Nk)"},
        {2, {Nq, Nk}, "(Nq,Nk)"},          {4, {B, Hq, Nq, Nk}, "(B,Hq,Nq,Nk)"},
        {1, {Nk}, "(Nk)"},                 {4, {1, Hq, 1, Nk}, "(1,Hq,1,Nk)"}};
    static const char *const causal_names[] = {"none", "top-left", "bottom-right"};
    int index = 0;
    for (size_t m = 0; m < sizeof masks / sizeof masks[0]; ++m)
        for (int causal = 0; causal < 3; ++causal) {
            bg_case c = {B, Hq, 2, Nq, Nk, D, (attn_causal)causal, 0.0f, masks[m].ndim,
                         {0}, false, false, true};
            memcpy(c.mask_shape, masks[m].shape, sizeof c.mask_shape);
            /* the variants rotate over the shapes */
            c.softcap = index % 3 == 1 ? 5.0f : 0.0f;
            c.bool_mask = index % 2 == 1;
            c.given = index % 4 >= 2;
            c.grads_qkv = index % 5 != 3;
            if (index % 7 == 6) c.Hkv = Hq; /* no GQA */
            char desc[200];
            snprintf(desc, sizeof desc,
                     "mask %s causal %s softcap %g bool-mask %d given %d dqkv %d Hkv %lld "
                     "(--seed %llu)",
                     masks[m].name, causal_names[causal], (double)c.softcap, c.bool_mask, c.given,
                     c.grads_qkv, (long long)c.Hkv, (unsigned long long)opt->seed);
            check_case(&g, &c, tu_mix(opt->seed ^ (uint64_t)index), desc);
            ++index;
        }
    tu_group_end(&g);
}

static void group_errors(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "errors");
    float q[2 * 4] = {0}, m[4] = {0}, gm[4], o[8];
    uint8_t bm[4] = {1, 1, 1, 1};
    attn_tensor Q = attn_tensor_4d(q, 1, 1, 2, 4), O = attn_tensor_4d(o, 1, 1, 2, 4);
    const int64_t ms[2] = {2, 2}, bad[2] = {2, 1};
    attn_tensor M = attn_tensor_make(m, ATTN_F32, 2, ms), G = attn_tensor_make(gm, ATTN_F32, 2, ms);
    attn_tensor BM = attn_tensor_make(bm, ATTN_BOOL, 2, ms);
    attn_tensor Gbad = attn_tensor_make(gm, ATTN_F32, 2, bad);
    struct { const attn_tensor *mask, *grad; bool forward; attn_status want; const char *what; } cases[] = {
        {NULL, &G, false, ATTN_ERR_ARG, "no mask"},
        {&BM, &G, false, ATTN_ERR_ARG, "a bool mask"},
        {&M, &Gbad, false, ATTN_ERR_SHAPE, "a shape other than the mask's"},
        {&M, &G, true, ATTN_ERR_ARG, "the forward"},
        {&M, &M, false, ATTN_ERR_ARG, "the mask itself (overlap)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        attn_sdpa_opts opts = attn_sdpa_opts_default();
        opts.mask[0] = cases[i].mask;
        opts.grad_mask = (attn_tensor *)cases[i].grad;
        attn_error err = {0};
        attn_status st = cases[i].forward
                             ? attn_sdpa(&Q, &Q, &Q, &O, NULL, NULL, &opts, &err)
                             : attn_sdpa_backward(&Q, &Q, &Q, NULL, NULL, &Q, NULL, NULL, NULL,
                                                  &opts, &err);
        tu_check(&g, st == cases[i].want && strstr(err.message, "grad_mask"),
                 "grad_mask with %s: status %s, message '%s'", cases[i].what,
                 attn_status_string(st), err.message);
    }
    tu_group_end(&g);
}

/* attn sdpa-backward --grad-attn-mask writes what the library computes. */
static void group_cli(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "cli");
    char dir[] = "/tmp/attn-test-bias-grad-XXXXXX";
    if (!tu_check(&g, mkdtemp(dir) != NULL, "mkdtemp failed")) {
        tu_group_end(&g);
        return;
    }
    enum { B = 2, H = 2, N = 5, NK = 9, D = 4 };
    static float q[B * H * N * D], k[B * H * NK * D], v[B * H * NK * D], dO[B * H * N * D],
        m[B * N * NK], want[B * N * NK];
    tu_rng r;
    tu_rng_seed(&r, 7);
    float *all[] = {q, k, v, dO, m};
    const int64_t count[] = {B * H * N * D, B * H * NK * D, B * H * NK * D, B * H * N * D, B * N * NK};
    for (int a = 0; a < 5; ++a)
        for (int64_t e = 0; e < count[a]; ++e) all[a][e] = (float)tu_rng_normal(&r);
    attn_tensor Q = attn_tensor_4d(q, B, H, N, D), K = attn_tensor_4d(k, B, H, NK, D),
                V = attn_tensor_4d(v, B, H, NK, D), G = attn_tensor_4d(dO, B, H, N, D),
                M = attn_tensor_4d(m, B, 1, N, NK), W = attn_tensor_4d(want, B, 1, N, NK);
    attn_sdpa_opts o = attn_sdpa_opts_default();
    o.mask[0] = &M;
    o.grad_mask = &W;
    attn_error err = {0};
    tu_check(&g, attn_sdpa_backward(&Q, &K, &V, NULL, NULL, &G, NULL, NULL, NULL, &o, &err) == ATTN_OK,
             "library call: %s", err.message);
    const char *names[] = {"q", "k", "v", "g", "m"};
    const attn_tensor *ts[] = {&Q, &K, &V, &G, &M};
    char path[5][96], out[96];
    for (int a = 0; a < 5; ++a) {
        snprintf(path[a], sizeof path[a], "%s/%s.npy", dir, names[a]);
        tu_check(&g, attn_npy_write(path[a], ts[a], &err) == ATTN_OK, "write %s", path[a]);
    }
    snprintf(out, sizeof out, "%s/dm.npy", dir);
    clirun_result res;
    clirunf(&res, "sdpa-backward\x1f--query\x1f%s\x1f--key\x1f%s\x1f--value\x1f%s\x1f--grad-out\x1f%s"
            "\x1f--attn-mask\x1f%s\x1f--grad-attn-mask\x1f%s", path[0], path[1], path[2], path[3],
            path[4], out);
    attn_array got = {0};
    if (tu_check(&g, res.status == 0, "attn sdpa-backward --grad-attn-mask: status %d: %s",
                 res.status, res.err) &&
        tu_check(&g, attn_npy_read(out, &got, &err) == ATTN_OK, "read %s: %s", out, err.message))
        tu_check(&g, got.t.ndim == 4 && got.t.shape[1] == 1 && got.t.shape[3] == NK &&
                         !memcmp(got.t.data, want, sizeof want),
                 "--grad-attn-mask: the file differs from the library's gradient");
    attn_array_free(&got);
    clirun_free(&res);
    clirunf(&res, "sdpa-backward\x1f--query\x1f%s\x1f--key\x1f%s\x1f--value\x1f%s\x1f--grad-out\x1f%s"
            "\x1f--grad-attn-mask\x1f%s", path[0], path[1], path[2], path[3], out);
    tu_check(&g, res.status != 0 && strstr(res.err, "--grad-attn-mask"),
             "--grad-attn-mask without --attn-mask: status %d, '%s'", res.status, res.err);
    clirun_free(&res);
    for (int a = 0; a < 5; ++a) remove(path[a]);
    remove(out);
    rmdir(dir);
    tu_group_end(&g);
}

int main(int argc, char **argv)
{
    tu_options opt;
    tu_suite suite;
    if (!tu_begin(argc, argv, DEFAULT_SEED, &opt, &suite)) return 2;
    if (tu_group_selected(&opt, "shapes")) group_shapes(&suite, &opt);
    if (tu_group_selected(&opt, "errors")) group_errors(&suite);
    if (tu_group_selected(&opt, "cli")) group_cli(&suite);
    return tu_suite_finish(&suite);
}
