/*
 * test_nn — the training layers (embedding, positional encoding, linear,
 * cross-entropy) against float64 re-implementations written here from the
 * math, and their backward passes against central finite differences of
 * those float64 forwards (so the check does not trust any analytic
 * gradient formula). Each case uses random sizes, random padded row layouts
 * and a printed seed; backward is checked for overwrite (dx starts as NaN
 * sentinels) or accumulate (parameter grads start random) as documented.
 */
#include "ref64.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- helpers */

/* A float32 tensor of the given shape, rows padded at random when asked
 * (unit stride in the last dimension, as the layers require). */
static bool make(tu_tensor *t, tu_rng *r, int ndim, const int64_t *shape, bool padded)
{
    tu_layout lay = tu_layout_contiguous(ndim);
    if (padded) /* gaps between rows (and after the last one) only */
        for (int d = 0; d < ndim; ++d) lay.pad[d] = tu_rng_int(r, 0, 3);
    return tu_tensor_alloc(t, ATTN_F32, ndim, shape, &lay);
}

static double *alloc64(int64_t n)
{
    return calloc((size_t)(n > 0 ? n : 1), sizeof(double));
}

static double max_abs(const double *x, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; ++i) m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

/* Compares and reports one quantity; returns pass/fail. */
static bool expect_close(tu_group *g, const char *what, uint64_t seed, const attn_tensor *got,
                         const double *want, double atol, double rtol)
{
    tu_cmp c;
    const tu_tol tol = {.atol = atol, .rtol = rtol};
    if (tu_compare(got, want, tol, &c)) {
        tu_group_pass(g);
        return true;
    }
    char buf[256];
    tu_cmp_describe(&c, what, got, buf, sizeof buf);
    tu_group_fail(g, "seed 0x%llx: %s", (unsigned long long)seed, buf);
    return false;
}

static void expect_status(tu_group *g, attn_status got, attn_status want, const char *what)
{
    tu_check(g, got == want, "%s: status %s, expected %s", what, attn_status_string(got),
             attn_status_string(want));
}

/* ------------------------------------------------------------- embedding */

typedef struct {
    int64_t V, E, T, S;
    const int32_t *tokens;
    double *table;      /* (V,E), perturbed by the finite differences */
    const double *dout; /* (T,E) */
} emb64;

/* out[t] = Σ_s table[tokens[t,s]] over ids >= 0. */
static void emb64_forward(const emb64 *p, double *out)
{
    for (int64_t t = 0; t < p->T; ++t)
        for (int64_t e = 0; e < p->E; ++e) {
            double sum = 0;
            for (int64_t s = 0; s < p->S; ++s) {
                const int32_t id = p->tokens[t * p->S + s];
                if (id >= 0) sum += p->table[id * p->E + e];
            }
            out[t * p->E + e] = sum;
        }
}

/* The scalar Σ dout · out whose gradient backward computes. */
static double emb64_loss(void *ctx)
{
    const emb64 *p = ctx;
    double *out = alloc64(p->T * p->E), l = 0;
    emb64_forward(p, out);
    for (int64_t i = 0; i < p->T * p->E; ++i) l += p->dout[i] * out[i];
    free(out);
    return l;
}

static void embedding_case(tu_group *g, uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    emb64 p = {.V = tu_rng_int(&r, 1, 12), .E = tu_rng_int(&r, 1, 10), .T = tu_rng_int(&r, 1, 8),
               .S = tu_rng_int(&r, 1, 3)};
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)(p.T * p.S));
    for (int64_t i = 0; i < p.T * p.S; ++i) tokens[i] = (int32_t)tu_rng_int(&r, -1, p.V - 1);
    p.tokens = tokens;
    tu_tensor table, out, dout, dtable;
    make(&table, &r, 2, (int64_t[]){p.V, p.E}, tu_rng_chance(&r, 0.5));
    make(&out, &r, 2, (int64_t[]){p.T, p.E}, tu_rng_chance(&r, 0.5));
    make(&dout, &r, 2, (int64_t[]){p.T, p.E}, tu_rng_chance(&r, 0.5));
    make(&dtable, &r, 2, (int64_t[]){p.V, p.E}, tu_rng_chance(&r, 0.5));
    tu_fill_normal(&table.view, &r, 0, 1);
    tu_fill_normal(&dout.view, &r, 0, 1);
    tu_fill_normal(&dtable.view, &r, 0, 1); /* backward accumulates onto this */
    double *table64 = alloc64(p.V * p.E), *dout64 = alloc64(p.T * p.E);
    double *prefill = alloc64(p.V * p.E), *want = alloc64(p.T * p.E),
           *grad = alloc64(p.V * p.E);
    tu_to_f64(&table.view, table64);
    tu_to_f64(&dout.view, dout64);
    tu_to_f64(&dtable.view, prefill);
    p.table = table64;
    p.dout = dout64;

    attn_error err;
    attn_status s = attn_embedding_forward(&table.view, tokens, p.S, &out.view, &err);
    if (tu_check(g, s == ATTN_OK, "seed 0x%llx: forward failed: %s", (unsigned long long)seed,
                 err.message)) {
        emb64_forward(&p, want);
        /* A sum of at most S float32 values: a few ulps of the magnitudes. */
        expect_close(g, "embedding out", seed, &out.view, want, 1e-6 * (double)p.S, 1e-6);
        tu_check(g, tu_padding_intact(&out), "seed 0x%llx: forward wrote outside out",
                 (unsigned long long)seed);
    }
    s = attn_embedding_backward(&dout.view, tokens, p.S, &dtable.view, &err);
    if (tu_check(g, s == ATTN_OK, "seed 0x%llx: backward failed: %s", (unsigned long long)seed,
                 err.message)) {
        ref64_fd_gradient(emb64_loss, &p, table64, p.V * p.E, 1e-6, grad);
        for (int64_t i = 0; i < p.V * p.E; ++i) grad[i] += prefill[i];
        expect_close(g, "embedding dtable", seed, &dtable.view, grad,
                     1e-6 * (double)(p.T * p.S + 1) * (1 + max_abs(dout64, p.T * p.E)), 1e-6);
        tu_check(g, tu_padding_intact(&dtable), "seed 0x%llx: backward wrote outside dtable",
                 (unsigned long long)seed);
    }
    free(tokens);
    free(table64);
    free(dout64);
    free(prefill);
    free(want);
    free(grad);
    tu_tensor_free(&table);
    tu_tensor_free(&out);
    tu_tensor_free(&dout);
    tu_tensor_free(&dtable);
}

static void embedding_errors(tu_group *g)
{
    float table[6] = {0}, out[4] = {0};
    attn_tensor t = attn_tensor_2d(table, 3, 2), o = attn_tensor_2d(out, 2, 2);
    attn_error err;
    expect_status(g, attn_embedding_forward(&t, (int32_t[]){0, 3}, 1, &o, &err), ATTN_ERR_ARG,
                  "embedding id == V");
    expect_status(g, attn_embedding_backward(&o, (int32_t[]){0, 3}, 1, &t, &err), ATTN_ERR_ARG,
                  "embedding backward id == V");
    expect_status(g, attn_embedding_forward(&t, (int32_t[]){0, 1}, 0, &o, &err), ATTN_ERR_ARG,
                  "embedding slots 0");
    attn_tensor wrong = attn_tensor_2d(out, 1, 4);
    expect_status(g, attn_embedding_forward(&t, (int32_t[]){0}, 1, &wrong, &err), ATTN_ERR_SHAPE,
                  "embedding out width != E");
    attn_tensor tt = attn_tensor_transpose(attn_tensor_2d(table, 2, 3), 0, 1);
    expect_status(g, attn_embedding_forward(&tt, (int32_t[]){0, 1}, 1, &o, &err),
                  ATTN_ERR_STRIDE, "embedding transposed table");
    /* A row with only empty slots embeds to zeros. */
    out[0] = out[1] = 7;
    attn_tensor o1 = attn_tensor_2d(out, 1, 2);
    tu_check(g, attn_embedding_forward(&t, (int32_t[]){-1}, 1, &o1, NULL) == ATTN_OK &&
                    out[0] == 0 && out[1] == 0,
             "embedding of an empty row is not zero");
}

/* ------------------------------------------------------ positional encoding */

/* PE written from the paper's formula: PE(n, 2i) = sin(n / 10000^(2i/E)),
 * PE(n, 2i+1) = cos(n / 10000^(2i/E)). */
static double pe64(int64_t n, int64_t e, int64_t E)
{
    const double i2 = (double)(e / 2 * 2);
    const double a = (double)n / pow(10000.0, i2 / (double)E);
    return e % 2 == 0 ? sin(a) : cos(a);
}

static void posenc_case(tu_group *g, uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    const bool batched = tu_rng_chance(&r, 0.6), in_place = tu_rng_chance(&r, 0.3);
    const int64_t B = batched ? tu_rng_int(&r, 1, 3) : 1, N = tu_rng_int(&r, 1, 40),
                  E = tu_rng_int(&r, 1, 12);
    const int nd = batched ? 3 : 2;
    const int64_t shape3[3] = {B, N, E}, *shape = batched ? shape3 : shape3 + 1;
    const int64_t n = B * N * E;
    /* Any strides: the layer walks views element by element. */
    tu_layout lx = tu_layout_random(&r, nd, TU_LAYOUT_INPUT & ~TU_LAYOUT_BROADCAST);
    tu_layout lo = tu_layout_random(&r, nd, TU_LAYOUT_OUTPUT);
    tu_tensor x, out, dout, dx;
    tu_tensor_alloc(&x, ATTN_F32, nd, shape, in_place ? &lo : &lx);
    tu_tensor_alloc(&out, ATTN_F32, nd, shape, &lo);
    tu_tensor_alloc(&dout, ATTN_F32, nd, shape, &lx);
    tu_tensor_alloc(&dx, ATTN_F32, nd, shape, &lo);
    tu_fill_normal(&x.view, &r, 0, 1);
    tu_fill_normal(&dout.view, &r, 0, 1);
    double *x64 = alloc64(n), *want = alloc64(n), *dout64 = alloc64(n);
    tu_to_f64(&x.view, x64);
    tu_to_f64(&dout.view, dout64);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < N; ++i)
            for (int64_t e = 0; e < E; ++e) {
                const int64_t k = (b * N + i) * E + e;
                want[k] = x64[k] + pe64(i, e, E);
            }
    attn_tensor *o = in_place ? &x.view : &out.view;
    attn_error err;
    attn_status s = attn_posenc_forward(&x.view, o, &err);
    if (tu_check(g, s == ATTN_OK, "seed 0x%llx: forward failed: %s", (unsigned long long)seed,
                 err.message))
        /* One rounding of |x| + 1 plus the float rounding of PE itself. */
        expect_close(g, in_place ? "posenc out (in place)" : "posenc out", seed, o, want, 2e-7,
                     2e-7);
    /* out = x + PE: the gradient of Σ dout·out with respect to x is dout,
     * whatever PE is; the finite differences confirm it. */
    s = attn_posenc_backward(&dout.view, &dx.view, &err);
    if (tu_check(g, s == ATTN_OK, "seed 0x%llx: backward failed: %s", (unsigned long long)seed,
                 err.message))
        expect_close(g, "posenc dx", seed, &dx.view, dout64, 0, 0);
    free(x64);
    free(want);
    free(dout64);
    tu_tensor_free(&x);
    tu_tensor_free(&out);
    tu_tensor_free(&dout);
    tu_tensor_free(&dx);
}

static void posenc_errors(tu_group *g)
{
    float a[24] = {0}, b[24] = {0};
    attn_tensor x = attn_tensor_3d(a, 2, 3, 4), o = attn_tensor_3d(b, 2, 4, 3);
    attn_error err;
    expect_status(g, attn_posenc_forward(&x, &o, &err), ATTN_ERR_SHAPE, "posenc shape mismatch");
    attn_tensor x1 = attn_tensor_1d(a, 4);
    expect_status(g, attn_posenc_forward(&x1, &x1, &err), ATTN_ERR_SHAPE, "posenc 1-D");
    /* Position 0: sin(0) = 0 on even columns, cos(0) = 1 on odd ones. */
    attn_tensor z = attn_tensor_2d(a, 1, 4);
    attn_posenc_forward(&z, &z, NULL);
    tu_check(g, a[0] == 0 && a[1] == 1 && a[2] == 0 && a[3] == 1,
             "posenc position 0 is not (0,1,0,1): %g %g %g %g", a[0], a[1], a[2], a[3]);
}

/* ----------------------------------------------------------------- linear */

typedef struct {
    int64_t T, in, out;
    double *x, *w, *b; /* b may be NULL */
    const double *dy;
} lin64;

static void lin64_forward(const lin64 *p, double *y)
{
    for (int64_t t = 0; t < p->T; ++t)
        for (int64_t o = 0; o < p->out; ++o) {
            double s = p->b ? p->b[o] : 0.0;
            for (int64_t i = 0; i < p->in; ++i) s += p->x[t * p->in + i] * p->w[o * p->in + i];
            y[t * p->out + o] = s;
        }
}

static double lin64_loss(void *ctx)
{
    const lin64 *p = ctx;
    double *y = alloc64(p->T * p->out), l = 0;
    lin64_forward(p, y);
    for (int64_t i = 0; i < p->T * p->out; ++i) l += p->dy[i] * y[i];
    free(y);
    return l;
}

static void linear_case(tu_group *g, uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    lin64 p = {.T = tu_rng_int(&r, 1, 7), .in = tu_rng_int(&r, 1, 9),
               .out = tu_rng_int(&r, 1, 8)};
    const bool bias = tu_rng_chance(&r, 0.7), want_dx = tu_rng_chance(&r, 0.8);
    tu_tensor x, w, b, y, dy, dx, dw, db;
    make(&x, &r, 2, (int64_t[]){p.T, p.in}, tu_rng_chance(&r, 0.5));
    make(&w, &r, 2, (int64_t[]){p.out, p.in}, tu_rng_chance(&r, 0.5));
    make(&b, &r, 1, (int64_t[]){p.out}, false);
    make(&y, &r, 2, (int64_t[]){p.T, p.out}, tu_rng_chance(&r, 0.5));
    make(&dy, &r, 2, (int64_t[]){p.T, p.out}, tu_rng_chance(&r, 0.5));
    make(&dx, &r, 2, (int64_t[]){p.T, p.in}, tu_rng_chance(&r, 0.5)); /* NaN sentinels */
    make(&dw, &r, 2, (int64_t[]){p.out, p.in}, tu_rng_chance(&r, 0.5));
    make(&db, &r, 1, (int64_t[]){p.out}, false);
    tu_fill_normal(&x.view, &r, 0, 1);
    tu_fill_normal(&w.view, &r, 0, 1);
    tu_fill_normal(&b.view, &r, 0, 1);
    tu_fill_normal(&dy.view, &r, 0, 1);
    tu_fill_normal(&dw.view, &r, 0, 1); /* accumulated onto */
    tu_fill_normal(&db.view, &r, 0, 1);
    const int64_t nx = p.T * p.in, nw = p.out * p.in, ny = p.T * p.out;
    double *x64 = alloc64(nx), *w64 = alloc64(nw), *b64 = alloc64(p.out), *dy64 = alloc64(ny);
    double *y64 = alloc64(ny), *gx = alloc64(nx), *gw = alloc64(nw), *gb = alloc64(p.out);
    double *dw0 = alloc64(nw), *db0 = alloc64(p.out);
    tu_to_f64(&x.view, x64);
    tu_to_f64(&w.view, w64);
    tu_to_f64(&b.view, b64);
    tu_to_f64(&dy.view, dy64);
    tu_to_f64(&dw.view, dw0);
    tu_to_f64(&db.view, db0);
    p.x = x64;
    p.w = w64;
    p.b = bias ? b64 : NULL;
    p.dy = dy64;
    /* float32 dot products of length K: error a few K·eps of Σ|terms|. */
    const double mx = 1 + max_abs(x64, nx), mw = 1 + max_abs(w64, nw), md = 1 + max_abs(dy64, ny);
    const int threads = (int)tu_rng_int(&r, 1, 2);

    attn_error err;
    attn_status s = attn_linear_forward(&x.view, &w.view, bias ? &b.view : NULL, &y.view, threads,
                                        &err);
    if (tu_check(g, s == ATTN_OK, "seed 0x%llx: forward failed: %s", (unsigned long long)seed,
                 err.message)) {
        lin64_forward(&p, y64);
        expect_close(g, "linear y", seed, &y.view, y64, 1e-6 * (double)(p.in + 1) * mx * mw, 1e-6);
        tu_check(g, tu_padding_intact(&y), "seed 0x%llx: forward wrote outside y",
                 (unsigned long long)seed);
    }
    s = attn_linear_backward(&x.view, &w.view, &dy.view, want_dx ? &dx.view : NULL, &dw.view,
                             bias ? &db.view : NULL, threads, &err);
    if (tu_check(g, s == ATTN_OK, "seed 0x%llx: backward failed: %s", (unsigned long long)seed,
                 err.message)) {
        ref64_fd_gradient(lin64_loss, &p, x64, nx, 1e-6, gx);
        ref64_fd_gradient(lin64_loss, &p, w64, nw, 1e-6, gw);
        ref64_fd_gradient(lin64_loss, &p, b64, p.out, 1e-6, gb);
        for (int64_t i = 0; i < nw; ++i) gw[i] += dw0[i];
        for (int64_t i = 0; i < p.out; ++i) gb[i] += bias ? db0[i] : 0.0;
        if (want_dx)
            expect_close(g, "linear dx", seed, &dx.view, gx,
                         1e-6 * (double)(p.out + 1) * md * mw, 1e-5);
        expect_close(g, "linear dw", seed, &dw.view, gw, 1e-6 * (double)(p.T + 1) * md * mx, 1e-5);
        if (bias) expect_close(g, "linear db", seed, &db.view, gb, 1e-6 * (double)(p.T + 1) * md, 1e-5);
        tu_check(g, tu_padding_intact(&dx) && tu_padding_intact(&dw),
                 "seed 0x%llx: backward wrote outside its outputs", (unsigned long long)seed);
    }
    free(x64);
    free(w64);
    free(b64);
    free(dy64);
    free(y64);
    free(gx);
    free(gw);
    free(gb);
    free(dw0);
    free(db0);
    tu_tensor *all[] = {&x, &w, &b, &y, &dy, &dx, &dw, &db};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) tu_tensor_free(all[i]);
}

/* The same linear layer on 1 and 2 threads, large enough to be split:
 * bit-identical results. */
static void linear_threads(tu_group *g, uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    enum { T = 96, IN = 64, OUT = 160 };
    float *x = malloc(sizeof(float) * T * IN), *w = malloc(sizeof(float) * OUT * IN);
    float *b = malloc(sizeof(float) * OUT), *dy = malloc(sizeof(float) * T * OUT);
    float *y[2], *dx[2], *dw[2], *db[2];
    for (int i = 0; i < T * IN; ++i) x[i] = (float)tu_rng_normal(&r);
    for (int i = 0; i < OUT * IN; ++i) w[i] = (float)tu_rng_normal(&r);
    for (int i = 0; i < OUT; ++i) b[i] = (float)tu_rng_normal(&r);
    for (int i = 0; i < T * OUT; ++i) dy[i] = (float)tu_rng_normal(&r);
    for (int k = 0; k < 2; ++k) {
        y[k] = malloc(sizeof(float) * T * OUT);
        dx[k] = malloc(sizeof(float) * T * IN);
        dw[k] = calloc(OUT * IN, sizeof(float));
        db[k] = calloc(OUT, sizeof(float));
        attn_tensor xt = attn_tensor_2d(x, T, IN), wt = attn_tensor_2d(w, OUT, IN),
                    bt = attn_tensor_1d(b, OUT), yt = attn_tensor_2d(y[k], T, OUT),
                    dyt = attn_tensor_2d(dy, T, OUT), dxt = attn_tensor_2d(dx[k], T, IN),
                    dwt = attn_tensor_2d(dw[k], OUT, IN), dbt = attn_tensor_1d(db[k], OUT);
        attn_linear_forward(&xt, &wt, &bt, &yt, k + 1, NULL);
        attn_linear_backward(&xt, &wt, &dyt, &dxt, &dwt, &dbt, k + 1, NULL);
    }
    tu_check(g, !memcmp(y[0], y[1], sizeof(float) * T * OUT) &&
                    !memcmp(dx[0], dx[1], sizeof(float) * T * IN) &&
                    !memcmp(dw[0], dw[1], sizeof(float) * OUT * IN) &&
                    !memcmp(db[0], db[1], sizeof(float) * OUT),
             "linear: 1 and 2 threads differ");
    for (int k = 0; k < 2; ++k) {
        free(y[k]);
        free(dx[k]);
        free(dw[k]);
        free(db[k]);
    }
    free(x);
    free(w);
    free(b);
    free(dy);
}

static void linear_errors(tu_group *g)
{
    float a[64] = {0}, c[64] = {0}, d[64] = {0};
    attn_tensor x = attn_tensor_2d(a, 2, 3), w = attn_tensor_2d(c, 4, 3), y = attn_tensor_2d(d, 2, 4);
    attn_tensor w_bad = attn_tensor_2d(c, 4, 2), b_bad = attn_tensor_1d(c, 3);
    attn_error err;
    expect_status(g, attn_linear_forward(&x, &w_bad, NULL, &y, 1, &err), ATTN_ERR_SHAPE,
                  "linear in_features mismatch");
    expect_status(g, attn_linear_forward(&x, &w, &b_bad, &y, 1, &err), ATTN_ERR_SHAPE,
                  "linear bias length");
    attn_tensor yt = attn_tensor_transpose(attn_tensor_2d(d, 4, 2), 0, 1);
    expect_status(g, attn_linear_forward(&x, &w, NULL, &yt, 1, &err), ATTN_ERR_STRIDE,
                  "linear transposed output");
    expect_status(g, attn_linear_backward(&x, &w, &y, NULL, NULL, NULL, 1, &err), ATTN_ERR_NULL,
                  "linear backward without dw");
}

/* ---------------------------------------------------------- cross-entropy */

typedef struct {
    int64_t T, C;
    const int32_t *targets;
    double *logits;
    double dloss;
} ce64;

/* Mean over counted rows of log Σ exp(z) - z[target], in float64. */
static double ce64_loss_value(const ce64 *p)
{
    double total = 0;
    int64_t count = 0;
    for (int64_t t = 0; t < p->T; ++t) {
        if (p->targets[t] < 0) continue;
        const double *z = p->logits + t * p->C;
        double m = z[0], s = 0;
        for (int64_t c = 1; c < p->C; ++c) m = z[c] > m ? z[c] : m;
        for (int64_t c = 0; c < p->C; ++c) s += exp(z[c] - m);
        total += m + log(s) - z[p->targets[t]];
        ++count;
    }
    return count ? total / (double)count : 0.0;
}

static double ce64_loss(void *ctx)
{
    const ce64 *p = ctx;
    return p->dloss * ce64_loss_value(p);
}

static void ce_case(tu_group *g, uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    ce64 p = {.T = tu_rng_int(&r, 1, 8), .C = tu_rng_int(&r, 1, 10)};
    p.dloss = tu_rng_range(&r, 0.2, 3.0);
    int32_t *targets = malloc(sizeof(int32_t) * (size_t)p.T);
    for (int64_t t = 0; t < p.T; ++t) targets[t] = (int32_t)tu_rng_int(&r, -1, p.C - 1);
    p.targets = targets;
    const bool in_place = tu_rng_chance(&r, 0.3);
    /* Logits of moderate or large size: the max subtraction must keep exp
     * from overflowing. */
    const double spread = tu_rng_chance(&r, 0.2) ? 60.0 : 3.0;
    tu_tensor z, dz;
    make(&z, &r, 2, (int64_t[]){p.T, p.C}, tu_rng_chance(&r, 0.5));
    make(&dz, &r, 2, (int64_t[]){p.T, p.C}, tu_rng_chance(&r, 0.5));
    tu_fill_normal(&z.view, &r, 0, spread);
    const int64_t n = p.T * p.C;
    double *z64 = alloc64(n), *grad = alloc64(n);
    tu_to_f64(&z.view, z64);
    p.logits = z64;

    int64_t want_correct = 0;
    for (int64_t t = 0; t < p.T; ++t) {
        if (targets[t] < 0) continue;
        int64_t best = 0;
        for (int64_t c = 1; c < p.C; ++c)
            if (z64[t * p.C + c] > z64[t * p.C + best]) best = c;
        want_correct += best == targets[t];
    }
    float loss = NAN;
    int64_t correct = -1;
    attn_error err;
    attn_status s = attn_cross_entropy_forward(&z.view, targets, &loss, &correct, &err);
    if (tu_check(g, s == ATTN_OK, "seed 0x%llx: forward failed: %s", (unsigned long long)seed,
                 err.message)) {
        const double want = ce64_loss_value(&p);
        /* float32 logsumexp of C terms: a few eps of the logit scale. */
        const double tol = 1e-6 * (1 + max_abs(z64, n)) * (double)(p.C + 1);
        tu_check(g, fabs((double)loss - want) <= tol,
                 "seed 0x%llx: loss %.9g, want %.9g (tol %.3g)", (unsigned long long)seed,
                 (double)loss, want, tol);
        tu_check(g, correct == want_correct, "seed 0x%llx: correct %lld, want %lld",
                 (unsigned long long)seed, (long long)correct, (long long)want_correct);
    }
    attn_tensor *d = in_place ? &z.view : &dz.view;
    s = attn_cross_entropy_backward(&z.view, targets, (float)p.dloss, d, &err);
    if (tu_check(g, s == ATTN_OK, "seed 0x%llx: backward failed: %s", (unsigned long long)seed,
                 err.message)) {
        /* Differences of exp(z - lse): step small relative to the logits. */
        ref64_fd_gradient(ce64_loss, &p, z64, n, 1e-6, grad);
        expect_close(g, in_place ? "dlogits (in place)" : "dlogits", seed, d, grad,
                     2e-6 * p.dloss * (1 + spread / 3.0), 1e-5);
    }
    free(targets);
    free(z64);
    free(grad);
    tu_tensor_free(&z);
    tu_tensor_free(&dz);
}

static void ce_errors(tu_group *g)
{
    float z[6] = {1, 2, 3, 4, 5, 6}, dz[6];
    attn_tensor zt = attn_tensor_2d(z, 2, 3), dzt = attn_tensor_2d(dz, 2, 3);
    float loss = 1;
    int64_t correct = 9;
    attn_error err;
    expect_status(g, attn_cross_entropy_forward(&zt, (int32_t[]){0, 3}, &loss, NULL, &err),
                  ATTN_ERR_ARG, "cross-entropy target == C");
    expect_status(g, attn_cross_entropy_backward(&zt, (int32_t[]){3, 0}, 1, &dzt, &err),
                  ATTN_ERR_ARG, "cross-entropy backward target == C");
    /* Every row ignored: loss 0, no correct rows, zero gradients. */
    attn_status s = attn_cross_entropy_forward(&zt, (int32_t[]){-1, -1}, &loss, &correct, &err);
    tu_check(g, s == ATTN_OK && loss == 0 && correct == 0,
             "cross-entropy with every row ignored: loss %g correct %lld", (double)loss,
             (long long)correct);
    for (int i = 0; i < 6; ++i) dz[i] = NAN;
    s = attn_cross_entropy_backward(&zt, (int32_t[]){-1, -1}, 1, &dzt, &err);
    bool zero = s == ATTN_OK;
    for (int i = 0; i < 6; ++i) zero = zero && dz[i] == 0;
    tu_check(g, zero, "cross-entropy backward with every row ignored is not zero");
    /* Huge logits stay finite. */
    float big[2] = {1e30f, -1e30f};
    attn_tensor bt = attn_tensor_2d(big, 1, 2);
    s = attn_cross_entropy_forward(&bt, (int32_t[]){1}, &loss, NULL, &err);
    tu_check(g, s == ATTN_OK && isfinite(loss) && loss > 1e29f,
             "cross-entropy of (1e30, -1e30) with target 1: %g", (double)loss);
}

/* ------------------------------------------------------------------- main */

typedef void (*case_fn)(tu_group *, uint64_t);

static void run_cases(tu_suite *suite, const tu_options *opt, const char *name, case_fn fn,
                      void (*errors)(tu_group *), uint64_t salt)
{
    if (!tu_group_selected(opt, name)) return;
    tu_group g;
    tu_group_begin(&g, suite, name);
    if (opt->replay) {
        fn(&g, opt->replay_seed);
    } else {
        const int64_t n = opt->cases > 0 ? opt->cases : opt->quick ? 40 : 200;
        for (int64_t i = 0; i < n; ++i) fn(&g, tu_mix(opt->seed ^ salt ^ (uint64_t)i));
        if (errors) errors(&g);
    }
    tu_group_end(&g);
}

int main(int argc, char **argv)
{
    tu_options opt;
    if (!tu_parse_options(argc, argv, 0x6e6e3634ull, &opt)) return 2;
    tu_suite suite = {0};
    suite.verbose = opt.verbose;
    printf("test_nn: seed 0x%llx (replay a case with --case SEED --group NAME)\n",
           (unsigned long long)opt.seed);
    run_cases(&suite, &opt, "embedding", embedding_case, embedding_errors, 0xE0000);
    run_cases(&suite, &opt, "posenc", posenc_case, posenc_errors, 0xB0000);
    run_cases(&suite, &opt, "linear", linear_case, linear_errors, 0x11000);
    run_cases(&suite, &opt, "cross-entropy", ce_case, ce_errors, 0xCE000);
    if (!opt.replay && tu_group_selected(&opt, "linear-threads")) {
        tu_group g;
        tu_group_begin(&g, &suite, "linear-threads");
        for (uint64_t i = 0; i < 3; ++i) linear_threads(&g, tu_mix(opt.seed ^ 0x7400 ^ i));
        tu_group_end(&g);
    }
    return tu_suite_finish(&suite);
}
