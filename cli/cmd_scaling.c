/* attn scaling: the seeds' argument for dividing by sqrt(d_k), measured.
 * For d_k = 1, 2, 4, ... sample q and N keys with N(0,1) entries, softmax
 * the scores through attn_sdpa unscaled (scale 1) and scaled (the default
 * 1/sqrt(d_k)), and report what happens to softmax. */
#include "cli.h"
#include "inline.h"

#include "svg.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { UNSCALED = 0, SCALED = 1 };

/* Means over the samples of one d_k, for each mode. */
typedef struct {
    int64_t d_k;
    double variance[2];  /* of the scores fed to softmax (pooled over samples and keys) */
    double max_weight[2];
    double entropy[2];   /* nats */
    double jacobian[2];  /* ||diag(p) - p p^T||_F */
} scaling_row;

static const cli_option scaling_options[] = {
    {"--seq", "N", "keys per query (default 16)"},
    {"--samples", "M", "queries per d_k (default 1000)"},
    {"--seed", "S", "random seed (default 42)"},
    {"--max-dk", "D", "largest d_k; d_k runs over the powers of 2 up to D (default 4096)"},
    {"--csv", NULL, "print the table as CSV with a header row"},
    {"--svg", "FILE.svg", "also draw the four quantities against d_k"},
    {"--scores", "Z", "instead: softmax of these score rows (inline \"2,0;20,0\" or .npy)"},
    {0},
};

/* Entropy and Frobenius norm of the softmax Jacobian J = diag(p) - p pᵀ for
 * one row of weights. 1 - p_i is summed from the other weights, so rows
 * that are almost one-hot keep their (tiny) norm instead of cancelling. */
static void row_stats(const float *p, int64_t n, double *entropy, double *jacobian)
{
    double h = 0, frob2 = 0;
    for (int64_t i = 0; i < n; ++i) {
        double pi = p[i], rest = 0, off = 0;
        if (pi > 0) h -= pi * log(pi);
        for (int64_t j = 0; j < n; ++j) {
            if (j == i) continue;
            rest += p[j];
            off += (double)p[j] * p[j];
        }
        /* diagonal (p_i (1 - p_i))², off-diagonal Σ_j≠i (p_i p_j)² */
        frob2 += pi * rest * pi * rest + pi * pi * off;
    }
    *entropy = h;
    *jacobian = sqrt(frob2);
}

/* Runs one d_k. Returns false (after printing) if the library fails. */
static bool measure(int64_t dk, int64_t nkeys, int64_t samples, uint64_t seed, scaling_row *row)
{
    memset(row, 0, sizeof *row);
    row->d_k = dk;
    int64_t chunk = (int64_t)(4 << 20) / (nkeys * dk);
    if (chunk > 256) chunk = 256;
    if (chunk < 1) chunk = 1;
    float *q = malloc(sizeof(float) * (size_t)(chunk * dk));
    float *k = malloc(sizeof(float) * (size_t)(chunk * nkeys * dk));
    float *v = calloc((size_t)(chunk * nkeys), sizeof(float)); /* values do not matter */
    float *out = malloc(sizeof(float) * (size_t)chunk);
    float *w = malloc(sizeof(float) * (size_t)(chunk * nkeys));
    double *scores = malloc(sizeof(double) * (size_t)(chunk * nkeys));
    bool ok = q && k && v && out && w && scores;
    if (!ok) fprintf(stderr, "attn scaling: out of memory\n");

    /* a stream per d_k: a row does not depend on --max-dk */
    attn_rng r;
    attn_rng_seed(&r, seed ^ ((uint64_t)dk * 0x9E3779B97F4A7C15ull));
    double sum[2] = {0}, sum2[2] = {0};
    const double inv_sqrt = 1.0 / sqrt((double)dk);
    for (int64_t done = 0; ok && done < samples; done += chunk) {
        const int64_t c = samples - done < chunk ? samples - done : chunk;
        for (int64_t i = 0; i < c * dk; ++i) q[i] = (float)attn_rng_normal(&r);
        for (int64_t i = 0; i < c * nkeys * dk; ++i) k[i] = (float)attn_rng_normal(&r);
        /* the exact scores of the float32 inputs, for the variance */
        for (int64_t s = 0; s < c; ++s)
            for (int64_t j = 0; j < nkeys; ++j) {
                double acc = 0;
                for (int64_t t = 0; t < dk; ++t)
                    acc += (double)q[s * dk + t] * k[(s * nkeys + j) * dk + t];
                scores[s * nkeys + j] = acc;
                for (int m = 0; m < 2; ++m) {
                    double z = m == SCALED ? acc * inv_sqrt : acc;
                    sum[m] += z;
                    sum2[m] += z * z;
                }
            }
        /* softmax through the library: c heads of one query each */
        attn_tensor qt = attn_tensor_4d(q, 1, c, 1, dk), kt = attn_tensor_4d(k, 1, c, nkeys, dk),
                    vt = attn_tensor_4d(v, 1, c, nkeys, 1), ot = attn_tensor_4d(out, 1, c, 1, 1),
                    wt = attn_tensor_4d(w, 1, c, 1, nkeys);
        for (int m = 0; ok && m < 2; ++m) {
            attn_sdpa_opts opts = attn_sdpa_opts_default();
            opts.path = ATTN_PATH_REFERENCE; /* the same table on every CPU */
            opts.scale = m == SCALED ? 0.0f /* the default 1/sqrt(d_k) */ : 1.0f;
            attn_error err = {0};
            if (attn_sdpa(&qt, &kt, &vt, &ot, NULL, &wt, &opts, &err) != ATTN_OK) {
                cli_report("scaling", &err);
                ok = false;
                break;
            }
            for (int64_t s = 0; s < c; ++s) {
                const float *p = w + s * nkeys;
                float top = 0;
                for (int64_t j = 0; j < nkeys; ++j)
                    if (p[j] > top) top = p[j];
                double h, jac;
                row_stats(p, nkeys, &h, &jac);
                row->max_weight[m] += top;
                row->entropy[m] += h;
                row->jacobian[m] += jac;
            }
        }
    }
    const double count = (double)samples * (double)nkeys;
    for (int m = 0; m < 2; ++m) {
        double mean = sum[m] / count;
        row->variance[m] = (sum2[m] - count * mean * mean) / (count - 1);
        row->max_weight[m] /= (double)samples;
        row->entropy[m] /= (double)samples;
        row->jacobian[m] /= (double)samples;
    }
    free(q);
    free(k);
    free(v);
    free(out);
    free(w);
    free(scores);
    return ok;
}

static void print_table(const scaling_row *rows, int n, int64_t nkeys, int64_t samples,
                        uint64_t seed)
{
    printf("q, k with independent N(0,1) entries; %lld keys per query, %lld queries per d_k, "
           "seed %llu.\n",
           (long long)nkeys, (long long)samples, (unsigned long long)seed);
    printf("Softmax by attn_sdpa with scale 1 (unscaled) and 1/sqrt(d_k) (scaled).\n\n");
    printf("%6s  %21s  %21s  %21s  %21s\n", "", "score variance", "largest weight",
           "entropy (nats)", "softmax grad |J|_F");
    printf("%6s ", "d_k");
    for (int c = 0; c < 4; ++c) printf(" %10s %10s", "unscaled", "scaled");
    printf("\n");
    for (int i = 0; i < n; ++i) {
        const scaling_row *r = &rows[i];
        printf("%6lld  %10.4g %10.4g  %10.4f %10.4f  %10.4f %10.4f  %10.4g %10.4g\n",
               (long long)r->d_k, r->variance[0], r->variance[1], r->max_weight[0],
               r->max_weight[1], r->entropy[0], r->entropy[1], r->jacobian[0], r->jacobian[1]);
    }
    const double N = (double)nkeys;
    printf("\nUniform weights over %lld keys (all scores equal): largest weight %.4f, entropy "
           "%.4f (= ln %lld), |J|_F %.4f.\n",
           (long long)nkeys, 1 / N, log(N), (long long)nkeys, sqrt(N - 1) / N);
    printf("|J|_F is the Frobenius norm of d softmax(z) / dz = diag(p) - p p^T; it is also the\n"
           "root-mean-square size of dL/dz for an upstream gradient dL/dp with N(0,1) entries.\n");
}

static void print_csv(const scaling_row *rows, int n)
{
    printf("d_k,variance_unscaled,variance_scaled,max_weight_unscaled,max_weight_scaled,"
           "entropy_unscaled,entropy_scaled,jacobian_norm_unscaled,jacobian_norm_scaled\n");
    for (int i = 0; i < n; ++i) {
        const scaling_row *r = &rows[i];
        printf("%lld,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g\n", (long long)r->d_k,
               r->variance[0], r->variance[1], r->max_weight[0], r->max_weight[1], r->entropy[0],
               r->entropy[1], r->jacobian[0], r->jacobian[1]);
    }
}

/* Four panels: each quantity against d_k (log 2 axis), unscaled and scaled. */
static int draw(const char *path, const scaling_row *rows, int n, int64_t nkeys,
                 int64_t samples, uint64_t seed)
{
    const double W = 1000, H = 780, top = 64, gap = 16;
    svg *doc = svg_new(W, H);
    if (!doc) {
        fprintf(stderr, "attn scaling: out of memory\n");
        return CLI_FAIL;
    }
    svg_text_style title = {.size = 18, .anchor = SVG_MIDDLE, .bold = true};
    svg_text(doc, W / 2, 28, &title, "Why attention divides the scores by \u221Ad\u2096");
    svg_text_style sub = {.size = 12.5, .anchor = SVG_MIDDLE, .fill = "#555"};
    svg_textf(doc, W / 2, 48, &sub,
              "q, k with independent N(0,1) entries, %lld keys per query, %lld queries per d_k, "
              "seed %llu; softmax by attn_sdpa",
              (long long)nkeys, (long long)samples, (unsigned long long)seed);

    double *x = malloc(sizeof(double) * (size_t)n), *y = malloc(sizeof(double) * (size_t)n * 10);
    if (!x || !y) {
        free(x);
        free(y);
        svg_free(doc);
        fprintf(stderr, "attn scaling: out of memory\n");
        return CLI_FAIL;
    }
    for (int i = 0; i < n; ++i) x[i] = (double)rows[i].d_k;
    const double N = (double)nkeys;
    double *col[10];
    for (int c = 0; c < 10; ++c) col[c] = y + (size_t)c * (size_t)n;
    for (int i = 0; i < n; ++i) {
        col[0][i] = rows[i].variance[0];
        col[1][i] = rows[i].variance[1];
        col[2][i] = rows[i].max_weight[0];
        col[3][i] = rows[i].max_weight[1];
        col[4][i] = rows[i].entropy[0];
        col[5][i] = rows[i].entropy[1];
        col[6][i] = rows[i].jacobian[0];
        col[7][i] = rows[i].jacobian[1];
        col[8][i] = x[i];  /* theory: Var(q.k) = d_k */
        col[9][i] = 1 / N; /* placeholder, replaced per panel */
    }
    static const char *const titles[4] = {"Score variance", "Mean largest softmax weight",
                                          "Mean softmax entropy", "Mean softmax gradient norm"};
    static const char *const ylabels[4] = {"variance of the scores", "largest weight",
                                           "entropy (nats)",
                                           "\u2016diag(p) \u2212 p p\u1D40\u2016_F"};
    const double reference[4] = {0, 1 / N, log(N), sqrt(N - 1) / N};
    char ref_name[64];
    const double pw = (W - 3 * gap) / 2, ph = (H - top - 2 * gap) / 2;
    for (int p = 0; p < 4; ++p) {
        double *ref = col[9];
        if (p > 0)
            for (int i = 0; i < n; ++i) ref[i] = reference[p];
        if (p == 0)
            snprintf(ref_name, sizeof ref_name, "Var(q\u00B7k) = d\u2096 (theory)");
        else
            snprintf(ref_name, sizeof ref_name, "uniform over %lld keys", (long long)nkeys);
        svg_series series[3] = {
            {.name = "unscaled q\u00B7k", .x = x, .y = col[2 * p], .n = n, .colour = "#d95f02",
             .markers = true},
            {.name = "scaled q\u00B7k / \u221Ad\u2096", .x = x, .y = col[2 * p + 1], .n = n,
             .colour = "#1b6fb5", .markers = true},
            {.name = ref_name, .x = x, .y = p == 0 ? col[8] : ref, .n = n, .colour = "#888",
             .dashed = true},
        };
        svg_line_plot plot = {
            .title = titles[p],
            .x_label = "d\u2096 (log scale)",
            .y_label = ylabels[p],
            .log_x = true,
            .log_base_x = 2,
            .log_y = p == 0,
            .log_base_y = 10,
            .series = series,
            .nseries = 3,
        };
        if (p == 1 || p == 3) { /* weights and Jacobian norms live in [0, 1] / [0, ~0.5] */
            plot.fix_y = true;
            plot.y_min = 0;
            plot.y_max = p == 1 ? 1.05 : 0.5;
        }
        if (p == 2) {
            plot.fix_y = true;
            plot.y_min = 0;
            plot.y_max = log(N) * 1.08;
        }
        /* drawn now, so the next panel may reuse the reference column */
        svg_plot_lines(doc, gap + (p % 2) * (pw + gap), top + (p / 2) * (ph + gap), pw, ph, &plot);
    }
    free(x);
    free(y);
    int rc = svg_save_file(doc, &cmd_scaling, "--svg", path);
    svg_free(doc);
    return rc;
}

/* --scores: the same quantities for rows of scores given by the user, the
 * softmax again by attn_sdpa (q = [1], k_j = [z_j], scale 1). */
static int given_scores(const cli_command *cmd, const cli_args *a, const char *value)
{
    float *z = NULL;
    int64_t rows, n;
    if (!cli_matrix_arg(cmd, "--scores", value, &z, &rows, &n)) return CLI_USAGE;
    float *w = malloc(sizeof(float) * (size_t)(rows * n)), *ones = malloc(sizeof(float) * (size_t)rows);
    float *v = calloc((size_t)(rows * n), sizeof(float)), *out = malloc(sizeof(float) * (size_t)rows);
    int rc = CLI_OK;
    if (!w || !ones || !v || !out) {
        fprintf(stderr, "attn scaling: out of memory\n");
        rc = CLI_FAIL;
        goto done;
    }
    for (int64_t i = 0; i < rows; ++i) ones[i] = 1.0f;
    attn_tensor qt = attn_tensor_4d(ones, 1, rows, 1, 1), kt = attn_tensor_4d(z, 1, rows, n, 1),
                vt = attn_tensor_4d(v, 1, rows, n, 1), ot = attn_tensor_4d(out, 1, rows, 1, 1),
                wt = attn_tensor_4d(w, 1, rows, 1, n);
    attn_sdpa_opts opts = attn_sdpa_opts_default();
    opts.path = ATTN_PATH_REFERENCE;
    opts.scale = 1.0f;
    attn_error err = {0};
    if (attn_sdpa(&qt, &kt, &vt, &ot, NULL, &wt, &opts, &err) != ATTN_OK) {
        rc = cli_report("scaling", &err);
        goto done;
    }
    const bool csv = cli_flag(a, "--csv");
    if (csv)
        printf("row,max_weight,entropy,jacobian_norm\n");
    else
        printf("%4s  %14s  %14s  %14s  %s\n", "row", "largest weight", "entropy (nats)",
               "|J|_F", "softmax weights");
    for (int64_t i = 0; i < rows; ++i) {
        const float *p = w + i * n;
        float top = 0;
        for (int64_t j = 0; j < n; ++j)
            if (p[j] > top) top = p[j];
        double h, jac;
        row_stats(p, n, &h, &jac);
        if (csv) {
            printf("%lld,%.9g,%.9g,%.9g\n", (long long)i + 1, top, h, jac);
            continue;
        }
        printf("%4lld  %14.6g  %14.6g  %14.6g  [", (long long)i + 1, top, h, jac);
        for (int64_t j = 0; j < n; ++j) printf("%s%.6g", j ? " " : "", p[j]);
        printf("]\n");
    }
done:
    free(z);
    free(w);
    free(ones);
    free(v);
    free(out);
    return rc;
}

static int run(int argc, char **argv)
{
    const cli_command *cmd = &cmd_scaling;
    cli_args a;
    bool help;
    int rc = cli_parse(cmd, argc, argv, &a, &help);
    if (rc || help) return rc;
    const char *scores = cli_get(&a, "--scores");
    if (scores) {
        static const char *const experiment[] = {"--seq", "--samples", "--seed", "--max-dk", "--svg"};
        for (size_t i = 0; i < sizeof experiment / sizeof *experiment; ++i)
            if (cli_get(&a, experiment[i]))
                return cli_usage_error(cmd, "%s is for the experiment, not --scores", experiment[i]);
        return given_scores(cmd, &a, scores);
    }
    long nkeys = 16, samples = 1000, max_dk = 4096;
    if (!cli_get_int(&a, "--seq", 2, 4096, &nkeys) ||
        !cli_get_int(&a, "--samples", 2, 10000000, &samples) ||
        !cli_get_int(&a, "--max-dk", 1, 65536, &max_dk))
        return CLI_USAGE;
    uint64_t seed = 42;
    if (!cli_get_u64(&a, "--seed", &seed)) return CLI_USAGE;
    const char *svg_path = cli_get(&a, "--svg");
    if (svg_path && !*svg_path) return cli_usage_error(cmd, "--svg: empty file name");

    scaling_row rows[20];
    int n = 0;
    for (int64_t dk = 1; dk <= max_dk; dk *= 2)
        if (!measure(dk, nkeys, samples, seed, &rows[n++])) return CLI_FAIL;
    /* the picture first: a failure then prints nothing */
    rc = svg_path ? draw(svg_path, rows, n, nkeys, samples, seed) : CLI_OK;
    if (rc) return rc;
    if (cli_flag(&a, "--csv"))
        print_csv(rows, n);
    else
        print_table(rows, n, nkeys, samples, seed);
    return CLI_OK;
}

const cli_command cmd_scaling = {
    .name = "scaling",
    .summary = "why scores are divided by sqrt(d_k): softmax saturation measured",
    .usage = "[--seq N] [--samples M] [--seed S] [--max-dk D] [--csv] [--svg FILE.svg] | --scores Z",
    .details =
        "For d_k = 1, 2, 4, ..., D: M queries q and, for each, N keys k_1..k_N, every\n"
        "entry independent N(0,1) (attn's own seeded generator). The scores q.k_j go\n"
        "through softmax in attn_sdpa twice: unscaled (scale 1) and scaled (the default\n"
        "1/sqrt(d_k)). Per d_k and mode the table reports\n"
        "  score variance   of the scores fed to softmax, pooled over all M*N of them:\n"
        "                   about d_k unscaled and about 1 scaled (Var(q.k) = d_k);\n"
        "  largest weight   mean over queries of max_j p_j (1/N uniform, 1 saturated);\n"
        "  entropy          mean of -sum_j p_j ln p_j in nats (ln N uniform, 0 saturated);\n"
        "  softmax grad     mean of ||J||_F, the Frobenius norm of the softmax Jacobian\n"
        "                   J = dp/dz = diag(p) - p p^T at the scores z it was fed. It is\n"
        "                   the factor by which softmax passes gradients back: for an\n"
        "                   upstream gradient g = dL/dp with N(0,1) entries, E||J g||^2 =\n"
        "                   ||J||_F^2. It is sqrt(N-1)/N for uniform weights and goes to 0\n"
        "                   as softmax saturates, which is what stalls learning.\n"
        "Each d_k has its own random stream derived from the seed, so a row does not\n"
        "depend on --max-dk; the same seed gives the same table on every machine.\n"
        "--scores Z skips the experiment and reports the same quantities for each row\n"
        "of Z as the scores of one query (softmax by attn_sdpa with scale 1), e.g.\n"
        "  attn scaling --scores \"1.414,0;14.14,0\"",
    .options = scaling_options,
    .run = run,
};
