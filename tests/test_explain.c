/*
 * attn explain, run as a user runs it: every matrix it prints is read back
 * and compared with values this test computes itself in float64 from the
 * same inputs (or, for the seeds' examples, with the numbers the seeds
 * print, copied from ../shared/seeds). Also --help and bad input.
 */
#include "clirun.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXN 8
#define MAXE 12

/* ------------------------------------------------------- float64 oracle */

/* Attention exactly as the seeds define it, in the X @ W layout. */
typedef struct {
    int n, E, H, dk, dv, dout;
    const double *x, *wq, *wk, *wv, *wo; /* wo NULL: no output projection */
    const double *bq, *bk, *bv, *bo;     /* NULL: no bias */
    double scale;                        /* 0: 1/sqrt(dk) */
    bool causal;
} oracle_in;

typedef struct {
    double q[MAXN * MAXE], k[MAXN * MAXE], v[MAXN * MAXE];
    double s[MAXE][MAXN * MAXN], z[MAXE][MAXN * MAXN], a[MAXE][MAXN * MAXN];
    double head[MAXE][MAXN * MAXE]; /* (n, dv) per head */
    double concat[MAXN * MAXE], y[MAXN * MAXE];
} oracle_out;

static void project(const double *x, const double *w, const double *b, int n, int e, int m,
                    double *out)
{
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < m; ++j) {
            double acc = b ? b[j] : 0;
            for (int t = 0; t < e; ++t) acc += x[i * e + t] * w[t * m + j];
            out[i * m + j] = acc;
        }
}

static void oracle(const oracle_in *in, oracle_out *o)
{
    const int n = in->n, H = in->H, dk = in->dk, dv = in->dv;
    project(in->x, in->wq, in->bq, n, in->E, H * dk, o->q);
    project(in->x, in->wk, in->bk, n, in->E, H * dk, o->k);
    project(in->x, in->wv, in->bv, n, in->E, H * dv, o->v);
    const double scale = in->scale != 0 ? in->scale : 1 / sqrt((double)dk);
    for (int h = 0; h < H; ++h) {
        for (int i = 0; i < n; ++i) {
            double mx = -INFINITY;
            for (int j = 0; j < n; ++j) {
                double acc = 0;
                for (int t = 0; t < dk; ++t) acc += o->q[i * H * dk + h * dk + t] * o->k[j * H * dk + h * dk + t];
                o->s[h][i * n + j] = acc;
                o->z[h][i * n + j] = in->causal && j > i ? -INFINITY : acc * scale;
                if (o->z[h][i * n + j] > mx) mx = o->z[h][i * n + j];
            }
            double sum = 0;
            for (int j = 0; j < n; ++j) sum += exp(o->z[h][i * n + j] - mx);
            for (int j = 0; j < n; ++j) o->a[h][i * n + j] = exp(o->z[h][i * n + j] - mx) / sum;
            for (int c = 0; c < dv; ++c) {
                double acc = 0;
                for (int j = 0; j < n; ++j) acc += o->a[h][i * n + j] * o->v[j * H * dv + h * dv + c];
                o->head[h][i * dv + c] = acc;
                o->concat[i * H * dv + h * dv + c] = acc;
            }
        }
    }
    if (in->wo)
        project(o->concat, in->wo, in->bo, n, H * dv, in->dout, o->y);
    else
        memcpy(o->y, o->concat, sizeof(double) * (size_t)(n * H * dv));
}

/* --------------------------------------------------------------- checks */

static void check_block(tu_group *g, const clirun_result *r, const char *label, const double *want,
                        int count, double atol, double rtol)
{
    double got[MAXN * MAXE * 3];
    if (!clirun_numbers_after(r->out, label, got, count)) {
        tu_group_fail(g, "'%s': block missing or short (status %d, stderr: %.200s)", label,
                      r->status, r->err);
        return;
    }
    tu_cmp c;
    if (tu_compare_f64(got, want, count, (tu_tol){.atol = atol, .rtol = rtol}, &c)) {
        tu_group_pass(g);
    } else {
        char line[512];
        tu_cmp_describe(&c, label, NULL, line, sizeof line);
        tu_group_fail(g, "%s", line);
    }
}

/* Every printed block of a run against the oracle. */
static void check_all(tu_group *g, const clirun_result *r, const oracle_in *in, double tol)
{
    oracle_out o;
    oracle(in, &o);
    const int n = in->n, H = in->H;
    if (!tu_check(g, r->status == 0, "exit status %d, stderr: %.300s", r->status, r->err)) return;
    check_block(g, r, "Queries (Q)", o.q, n * H * in->dk, tol, tol);
    check_block(g, r, "Keys (K)", o.k, n * H * in->dk, tol, tol);
    check_block(g, r, "Values (V)", o.v, n * H * in->dv, tol, tol);
    for (int h = 0; h < H; ++h) {
        char sub[16] = "", label[64];
        if (H > 1) snprintf(sub, sizeof sub, "_%d", h + 1);
        snprintf(label, sizeof label, "Scores (S%s)", sub);
        check_block(g, r, label, o.s[h], n * n, tol, tol);
        snprintf(label, sizeof label, "Scaled scores (S%s", sub);
        check_block(g, r, label, o.z[h], n * n, tol, tol);
        snprintf(label, sizeof label, "Attention Weights Matrix (A%s)", sub);
        check_block(g, r, label, o.a[h], n * n, tol, 0);
        double ones[MAXN];
        for (int i = 0; i < n; ++i) ones[i] = 1;
        snprintf(label, sizeof label, "Row sums of A%s", sub);
        check_block(g, r, label, ones, n, 1e-6, 0);
        if (H > 1) {
            snprintf(label, sizeof label, "Head output (head%s)", sub);
            check_block(g, r, label, o.head[h], n * in->dv, tol, tol);
        }
    }
    if (H > 1) check_block(g, r, "Concatenated heads (Concat)", o.concat, n * H * in->dv, tol, tol);
    check_block(g, r, "Contextualized Output Embeddings (Y)", o.y, n * in->dout, tol, tol);
}

/* "a,b;c,d" with %.9g: the float32 values survive the round trip. */
static void inline_matrix(char *buf, size_t size, const double *m, int rows, int cols)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j)
            len += (size_t)snprintf(buf + len, size - len, "%.9g%s", m[i * cols + j],
                                    j + 1 < cols ? "," : (i + 1 < rows ? ";" : ""));
}

/* Random values rounded to float32, so the CLI and the oracle see the same. */
static void fill_random(tu_rng *r, double *m, int count, double scale)
{
    for (int i = 0; i < count; ++i) m[i] = (double)(float)(scale * tu_rng_normal(r));
}

static bool one_line_error(const clirun_result *r)
{
    return r->status == 2 && r->out_len == 0 && clirun_count_lines(r->err) == 1;
}

/* ----------------------------------------------------------------- tests */

static void seed_numpy(tu_suite *suite)
{
    tu_group g;
    tu_group_begin(&g, suite, "seed NumPy example");
    clirun_result r;
    clirunf(&r, "explain\x1f--weights\x1f%s/examples/numpy_seed42.safetensors\x1f--x\x1f"
                "1,2,3;3,3,2", ATTN_SOURCE_DIR);
    if (tu_check(&g, r.status == 0, "status %d: %s", r.status, r.err)) {
        /* printed by the seed's NumPy code (float64); attn computes in float32 */
        const double q[] = {8.28041231, 1.69573314, -1.22900853, 9.21765766, 0.41761643, 0.30170597};
        const double k[] = {-0.660378, -7.32847154, -2.97282342, 1.22899189, -9.15575605, -5.94344809};
        const double v[] = {-2.99272485, -0.94447952, -4.83682834, -4.49016658, -3.81248131, -2.17928541};
        const double a[] = {8.68363148e-05, 9.99913164e-01, 1.12005616e-04, 9.99887994e-01};
        const double y[] = {-4.49003654, -3.81223226, -2.17951618, -4.48999886, -3.81216008, -2.17958307};
        check_block(&g, &r, "Queries (Q)", q, 6, 1e-5, 1e-6);
        check_block(&g, &r, "Keys (K)", k, 6, 1e-5, 1e-6);
        check_block(&g, &r, "Values (V)", v, 6, 1e-5, 1e-6);
        check_block(&g, &r, "Attention Weights Matrix (A)", a, 4, 1e-9, 1e-4);
        check_block(&g, &r, "Contextualized Output Embeddings (Y)", y, 6, 1e-5, 1e-6);
    }
    clirun_free(&r);
    tu_group_end(&g);
}

static void seed_pytorch(tu_suite *suite)
{
    tu_group g;
    tu_group_begin(&g, suite, "seed PyTorch example");
    clirun_result r;
    clirunf(&r, "explain\x1f--weights\x1f%s/examples/pytorch_mha_seed42.safetensors\x1f--x\x1f"
                "1,2,3;3,3,2", ATTN_SOURCE_DIR);
    if (tu_check(&g, r.status == 0, "status %d: %s", r.status, r.err)) {
        const double a[] = {0.8597921, 0.14020787, 0.91717255, 0.08282746};
        const double y[] = {0.703761, 0.64951515, 0.80751586, 0.7178543, 0.6376342, 0.79714787};
        check_block(&g, &r, "Attention Weights Matrix (A)", a, 4, 2e-7, 1e-6);
        check_block(&g, &r, "Contextualized Output Embeddings (Y)", y, 6, 2e-7, 1e-6);
        tu_check(&g, strstr(r.out, "Output projection") != NULL, "no output projection step shown");
        tu_check(&g, strstr(r.out, "Check: Y is attn_mha_forward's output") != NULL,
                 "Y not from attn_mha_forward");
    }
    clirun_free(&r);
    tu_group_end(&g);
}

static void seed_two_tokens(tu_suite *suite)
{
    tu_group g;
    tu_group_begin(&g, suite, "seed two-token example");
    /* x1 = [1,1], x2 = [1,-1]; identity W_Q, W_K give q1 = k1 = [1,1], k2 = [1,-1];
     * W_V maps them to v1 = [1,0], v2 = [0,1] */
    clirun_result r;
    clirunf(&r, "explain\x1f--x\x1f" "1,1;1,-1\x1f--wq\x1f" "1,0;0,1\x1f--wk\x1f" "1,0;0,1\x1f--wv\x1f"
                "0.5,0.5;0.5,-0.5");
    const double x[] = {1, 1, 1, -1}, id[] = {1, 0, 0, 1}, wv[] = {0.5, 0.5, 0.5, -0.5};
    oracle_in in = {.n = 2, .E = 2, .H = 1, .dk = 2, .dv = 2, .dout = 2, .x = x, .wq = id,
                    .wk = id, .wv = wv};
    check_all(&g, &r, &in, 1e-6);
    /* and the seed's own numbers for token 1: scaled [1.414, 0], weights
     * [0.80, 0.20], output [0.80, 0.20] */
    double z[4], a[4];
    if (clirun_numbers_after(r.out, "Scaled scores (S", z, 4) &&
        clirun_numbers_after(r.out, "Attention Weights Matrix (A)", a, 4)) {
        tu_check(&g, fabs(z[0] - 1.414) < 1e-3 && z[1] == 0, "scaled scores %g %g", z[0], z[1]);
        tu_check(&g, fabs(a[0] - 0.80) < 0.005 && fabs(a[1] - 0.20) < 0.005, "weights %g %g", a[0], a[1]);
    } else {
        tu_group_fail(&g, "blocks missing");
    }
    clirun_free(&r);
    tu_group_end(&g);
}

/* Random inline weights, several heads, with and without W_O / causal /
 * custom scale; every block against the oracle. */
static void random_inline(tu_suite *suite, tu_rng *rng)
{
    tu_group g;
    tu_group_begin(&g, suite, "random inline weights");
    static char cmd[16384], xs[2048], qs[2048], ks[2048], vs[2048], os[2048];
    struct {
        int n, E, H, dk, dv, dout;
        bool wo, causal;
        double scale;
    } cases[] = {
        {5, 6, 3, 2, 2, 6, true, false, 0},   /* square: the module path */
        {4, 6, 2, 3, 3, 6, true, true, 0},    /* causal, module path */
        {3, 4, 2, 3, 2, 0, false, false, 0.3}, /* d_k != d_v, no W_O, --scale */
        {6, 3, 1, 3, 3, 3, false, true, 0},   /* one head, causal */
        {4, 5, 1, 2, 4, 3, true, false, 0},   /* W_O not square: applied locally */
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; ++c) {
        double x[MAXN * MAXE], wq[MAXE * MAXE], wk[MAXE * MAXE], wv[MAXE * MAXE], wo[MAXE * MAXE];
        const int n = cases[c].n, E = cases[c].E, H = cases[c].H, dk = cases[c].dk, dv = cases[c].dv;
        const int dout = cases[c].wo ? cases[c].dout : H * dv;
        fill_random(rng, x, n * E, 1);
        fill_random(rng, wq, E * H * dk, 0.6);
        fill_random(rng, wk, E * H * dk, 0.6);
        fill_random(rng, wv, E * H * dv, 0.6);
        fill_random(rng, wo, H * dv * dout, 0.6);
        inline_matrix(xs, sizeof xs, x, n, E);
        inline_matrix(qs, sizeof qs, wq, E, H * dk);
        inline_matrix(ks, sizeof ks, wk, E, H * dk);
        inline_matrix(vs, sizeof vs, wv, E, H * dv);
        inline_matrix(os, sizeof os, wo, H * dv, dout);
        int len = snprintf(cmd, sizeof cmd, "explain\x1f--x\x1f%s\x1f--wq\x1f%s\x1f--wk\x1f%s\x1f--wv\x1f%s"
                                            "\x1f--heads\x1f%d",
                           xs, qs, ks, vs, H);
        if (cases[c].wo) len += snprintf(cmd + len, sizeof cmd - (size_t)len, "\x1f--wo\x1f%s", os);
        if (cases[c].causal) len += snprintf(cmd + len, sizeof cmd - (size_t)len, "\x1f--causal");
        if (cases[c].scale != 0)
            snprintf(cmd + len, sizeof cmd - (size_t)len, "\x1f--scale\x1f%.9g", cases[c].scale);
        clirun_result r;
        clirunf(&r, "%s", cmd);
        oracle_in in = {.n = n, .E = E, .H = H, .dk = dk, .dv = dv, .dout = dout, .x = x,
                        .wq = wq, .wk = wk, .wv = wv, .wo = cases[c].wo ? wo : NULL,
                        .scale = (double)(float)cases[c].scale, .causal = cases[c].causal};
        check_all(&g, &r, &in, 2e-5);
        const bool module = cases[c].wo && H * dk == E && H * dv == E && dout == E && cases[c].scale == 0;
        tu_check(&g, (strstr(r.out, "Check: Y is attn_mha_forward's output") != NULL) == module,
                 "case %zu: attn_mha_forward used %s", c, module ? "expected but not reported" : "unexpectedly");
        if (cases[c].causal) {
            double z[MAXN * MAXN];
            if (clirun_numbers_after(r.out, "Scaled scores (S", z, n * n))
                tu_check(&g, isinf(z[1]) && z[1] < 0 && isfinite(z[n]), "case %zu: no -inf above the diagonal", c);
        }
        clirun_free(&r);
    }
    tu_group_end(&g);
}

/* A torch state_dict with non-zero biases, written by this test. */
static void torch_state_dict(tu_suite *suite, tu_rng *rng, const char *dir)
{
    tu_group g;
    tu_group_begin(&g, suite, "torch state_dict with biases");
    enum { E = 4, H = 2, N = 3 };
    float in_w[3 * E * E], in_b[3 * E], out_w[E * E], out_b[E];
    double x[N * E];
    for (int i = 0; i < 3 * E * E; ++i) in_w[i] = (float)(0.5 * tu_rng_normal(rng));
    for (int i = 0; i < 3 * E; ++i) in_b[i] = (float)(0.5 * tu_rng_normal(rng));
    for (int i = 0; i < E * E; ++i) out_w[i] = (float)(0.5 * tu_rng_normal(rng));
    for (int i = 0; i < E; ++i) out_b[i] = (float)(0.5 * tu_rng_normal(rng));
    fill_random(rng, x, N * E, 1);
    char path[4096];
    snprintf(path, sizeof path, "%s/mha.safetensors", dir);
    const char *names[4] = {"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"};
    attn_tensor ts[4] = {attn_tensor_2d(in_w, 3 * E, E), attn_tensor_1d(in_b, 3 * E),
                         attn_tensor_2d(out_w, E, E), attn_tensor_1d(out_b, E)};
    attn_error err = {0};
    if (!tu_check(&g, attn_safetensors_write(path, names, ts, 4, &err) == ATTN_OK, "write: %s",
                  err.message)) {
        tu_group_end(&g);
        return;
    }
    /* torch: q = x in_proj_weight[0:E]^T + in_proj_bias[0:E]; y = concat out_proj.weight^T + b */
    double wq[E * E], wk[E * E], wv[E * E], wo[E * E], bq[E], bk[E], bv[E], bo[E];
    for (int i = 0; i < E; ++i)
        for (int j = 0; j < E; ++j) {
            wq[i * E + j] = in_w[j * E + i];
            wk[i * E + j] = in_w[(E + j) * E + i];
            wv[i * E + j] = in_w[(2 * E + j) * E + i];
            wo[i * E + j] = out_w[j * E + i];
        }
    for (int i = 0; i < E; ++i) {
        bq[i] = in_b[i];
        bk[i] = in_b[E + i];
        bv[i] = in_b[2 * E + i];
        bo[i] = out_b[i];
    }
    char xs[1024];
    inline_matrix(xs, sizeof xs, x, N, E);
    clirun_result r;
    clirunf(&r, "explain\x1f--weights\x1f%s\x1f--heads\x1f%d\x1f--x\x1f%s", path, H, xs);
    oracle_in in = {.n = N, .E = E, .H = H, .dk = E / H, .dv = E / H, .dout = E, .x = x, .wq = wq,
                    .wk = wk, .wv = wv, .wo = wo, .bq = bq, .bk = bk, .bv = bv, .bo = bo};
    check_all(&g, &r, &in, 2e-5);
    clirun_free(&r);
    tu_group_end(&g);
}

/* --seed: the printed X and weights are read back and everything else is
 * recomputed from them. */
static void seeded_random(tu_suite *suite)
{
    tu_group g;
    tu_group_begin(&g, suite, "seeded random weights");
    for (int heads = 1; heads <= 2; ++heads) {
        clirun_result r;
        clirunf(&r, "explain\x1f--tokens\x1fthe hunter saw a duck\x1f--seed\x1f%d\x1f--d-model\x1f"
                    "4\x1f--heads\x1f%d", 7 + heads, heads);
        double x[5 * 4], wq[16], wk[16], wv[16], wo[16];
        bool ok = clirun_numbers_after(r.out, "Input embeddings (X)", x, 20) &&
                  clirun_numbers_after(r.out, "W_Q, shape", wq, 16) &&
                  clirun_numbers_after(r.out, "W_K, shape", wk, 16) &&
                  clirun_numbers_after(r.out, "W_V, shape", wv, 16) &&
                  (heads == 1 || clirun_numbers_after(r.out, "W_O, shape", wo, 16));
        if (!tu_check(&g, ok, "heads %d: X or weights not printed (status %d: %s)", heads, r.status, r.err)) {
            clirun_free(&r);
            continue;
        }
        tu_check(&g, heads > 1 || strstr(r.out, "W_O, shape") == NULL, "one head has no W_O");
        oracle_in in = {.n = 5, .E = 4, .H = heads, .dk = 4 / heads, .dv = 4 / heads, .dout = 4,
                        .x = x, .wq = wq, .wk = wk, .wv = wv, .wo = heads > 1 ? wo : NULL};
        check_all(&g, &r, &in, 2e-5);
        /* token labels on the rows and the weight matrix columns */
        const char *a = strstr(r.out, "Attention Weights Matrix (A");
        tu_check(&g, a && strstr(a, "the") && strstr(a, "duck"), "tokens not shown");
        /* the same command twice gives the same output */
        clirun_result again;
        clirunf(&again, "explain\x1f--tokens\x1fthe hunter saw a duck\x1f--seed\x1f%d\x1f--d-model\x1f"
                        "4\x1f--heads\x1f%d", 7 + heads, heads);
        tu_check(&g, again.status == 0 && !strcmp(again.out, r.out), "not reproducible");
        clirun_free(&again);
        clirun_free(&r);
    }
    tu_group_end(&g);
}

static void npy_input_and_precision(tu_suite *suite, tu_rng *rng, const char *dir)
{
    tu_group g;
    tu_group_begin(&g, suite, "X from .npy, --precision");
    enum { N = 4, E = 3 };
    float xf[N * E];
    double x[N * E], w[E * E];
    for (int i = 0; i < N * E; ++i) x[i] = xf[i] = (float)tu_rng_normal(rng);
    fill_random(rng, w, E * E, 0.7);
    char path[4096], ws[1024];
    snprintf(path, sizeof path, "%s/x.npy", dir);
    attn_tensor xt = attn_tensor_2d(xf, N, E);
    attn_error err = {0};
    tu_check(&g, attn_npy_write(path, &xt, &err) == ATTN_OK, "write: %s", err.message);
    inline_matrix(ws, sizeof ws, w, E, E);
    clirun_result r;
    clirunf(&r, "explain\x1f--x\x1f%s\x1f--wq\x1f%s\x1f--wk\x1f%s\x1f--wv\x1f%s", path, ws, ws, ws);
    oracle_in in = {.n = N, .E = E, .H = 1, .dk = E, .dv = E, .dout = E, .x = x, .wq = w, .wk = w, .wv = w};
    check_all(&g, &r, &in, 2e-5);
    clirun_free(&r);

    clirunf(&r, "explain\x1f--x\x1f%s\x1f--wq\x1f%s\x1f--wk\x1f%s\x1f--wv\x1f%s\x1f--precision\x1f" "3",
            path, ws, ws, ws);
    oracle_out o;
    oracle(&in, &o);
    check_block(&g, &r, "Queries (Q)", o.q, N * E, 5.001e-4, 0);
    /* no number in the Q block has more than 3 decimals */
    const char *q = strstr(r.out, "Queries (Q)");
    const char *end = q ? strstr(q, "\n\n") : NULL;
    bool short_digits = q && end;
    for (const char *p = q ? strchr(q, '.') : NULL; p && p < end; p = strchr(p + 1, '.')) {
        int digits = 0;
        while (p[1 + digits] >= '0' && p[1 + digits] <= '9') ++digits;
        if (digits > 3) short_digits = false;
    }
    tu_check(&g, short_digits, "--precision 3 printed more than 3 decimals");
    clirun_free(&r);
    tu_group_end(&g);
}

static void help_and_errors(tu_suite *suite, const char *dir)
{
    tu_group g;
    tu_group_begin(&g, suite, "help and bad input");
    clirun_result r;
    clirunf(&r, "explain\x1f--help");
    tu_check(&g, r.status == 0 && strstr(r.out, "usage: attn explain") && r.err_len == 0,
             "--help: status %d", r.status);
    clirun_free(&r);

    char seed[1024], npy[1024];
    snprintf(seed, sizeof seed, "%s/examples/numpy_seed42.safetensors", ATTN_SOURCE_DIR);
    snprintf(npy, sizeof npy, "%s/missing.npy", dir);
    struct {
        const char *why;
        char args[4096];
    } bad[] = {
        {"ragged inline matrix", "explain\x1f--x\x1f" "1,2;3\x1f--seed\x1f" "1"},
        {"not a number", "explain\x1f--x\x1f" "1,a\x1f--seed\x1f" "1"},
        {"empty value", "explain\x1f--x\x1f" "1,,2\x1f--seed\x1f" "1"},
        {"missing weights file", "explain\x1f--x\x1f" "1,2\x1f--weights\x1f/nonexistent/w.safetensors"},
        {"missing X file", ""},
        {"X width != d_model", ""},
        {"heads do not divide", ""},
        {"token count", ""},
        {"no weights", "explain\x1f--x\x1f" "1,2;3,4"},
        {"no input", "explain\x1f--seed\x1f" "3"},
        {"W_K shape", "explain\x1f--x\x1f" "1,2\x1f--wq\x1f" "1,0;0,1\x1f--wk\x1f" "1,0,0;0,1,0\x1f--wv\x1f" "1,0;0,1"},
        {"unknown option", "explain\x1f--frobnicate"},
        {"bad --heads", "explain\x1f--x\x1f" "1,2\x1f--seed\x1f" "1\x1f--heads\x1f" "0"},
    };
    snprintf(bad[4].args, sizeof bad[4].args, "explain\x1f--x\x1f%s\x1f--seed\x1f" "1", npy);
    snprintf(bad[5].args, sizeof bad[5].args, "explain\x1f--weights\x1f%s\x1f--x\x1f" "1,2;3,4", seed);
    snprintf(bad[6].args, sizeof bad[6].args, "explain\x1f--weights\x1f%s\x1f--x\x1f" "1,2,3\x1f--heads\x1f" "2", seed);
    snprintf(bad[7].args, sizeof bad[7].args, "explain\x1f--weights\x1f%s\x1f--x\x1f" "1,2,3;3,3,2\x1f--tokens\x1f" "a b c", seed);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; ++i) {
        clirunf(&r, "%s", bad[i].args);
        tu_check(&g, one_line_error(&r), "%s: status %d, %d stderr lines, %zu stdout bytes: %s",
                 bad[i].why, r.status, clirun_count_lines(r.err), r.out_len, r.err);
        clirun_free(&r);
    }
    tu_group_end(&g);
}

int main(int argc, char **argv)
{
    tu_options opt;
    if (!tu_parse_options(argc, argv, 0x5eed5, &opt)) return 2;
    tu_suite suite = {.verbose = opt.verbose};
    tu_rng rng;
    tu_rng_seed(&rng, opt.seed);
    const char *dir = tu_scratch_dir("explain");
    printf("seed %llu\n", (unsigned long long)opt.seed);
    seed_numpy(&suite);
    seed_pytorch(&suite);
    seed_two_tokens(&suite);
    random_inline(&suite, &rng);
    torch_state_dict(&suite, &rng, dir);
    seeded_random(&suite);
    npy_input_and_precision(&suite, &rng, dir);
    help_and_errors(&suite, dir);
    return tu_suite_finish(&suite);
}
