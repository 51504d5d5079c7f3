/*
 * attn scaling: its table against an independent Monte Carlo run here
 * (this test's own generator, float64 softmax) within sampling error, and
 * against the theory (Var(q.k) = d_k unscaled, 1 scaled); CSV and table
 * agree; runs are reproducible; the SVG is well-formed; bad input fails.
 */
#include "clirun.h"
#include "testutil.h"
#include "xmlcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { COLS = 9, MAX_ROWS = 20 };
static const char header[] = "d_k,variance_unscaled,variance_scaled,max_weight_unscaled,"
                             "max_weight_scaled,entropy_unscaled,entropy_scaled,"
                             "jacobian_norm_unscaled,jacobian_norm_scaled";

/* Parses the CSV; returns the number of rows or -1. */
static int parse_csv(const char *text, double rows[][COLS])
{
    const char *line = strchr(text, '\n');
    if (!line || strncmp(text, header, strlen(header)) || text[strlen(header)] != '\n') return -1;
    int n = 0;
    for (++line; *line && n < MAX_ROWS; ++n) {
        const char *p = line;
        for (int c = 0; c < COLS; ++c) {
            char *end;
            rows[n][c] = strtod(p, &end);
            if (end == p) return -1;
            p = end;
            if (c + 1 < COLS && *p++ != ',') return -1;
        }
        if (*p != '\n') return -1;
        line = p + 1;
    }
    return n;
}

/* Per-query statistics of one sample, float64. */
typedef struct {
    double sq[2], maxw[2], entropy[2], jac[2];
} sample_stats;

static void one_sample(tu_rng *r, int dk, int nkeys, double *q, double *k, sample_stats *s)
{
    for (int t = 0; t < dk; ++t) q[t] = tu_rng_normal(r);
    for (int i = 0; i < nkeys * dk; ++i) k[i] = tu_rng_normal(r);
    double z[256];
    for (int j = 0; j < nkeys; ++j) {
        double acc = 0;
        for (int t = 0; t < dk; ++t) acc += q[t] * k[j * dk + t];
        z[j] = acc;
    }
    for (int m = 0; m < 2; ++m) {
        const double scale = m ? 1 / sqrt((double)dk) : 1;
        double p[256], mx = -INFINITY, sum = 0, sq = 0;
        for (int j = 0; j < nkeys; ++j) {
            sq += z[j] * scale * z[j] * scale;
            if (z[j] * scale > mx) mx = z[j] * scale;
        }
        for (int j = 0; j < nkeys; ++j) sum += p[j] = exp(z[j] * scale - mx);
        /* ||diag(p) - p p^T||_F^2 = sum_i p_i^2 (1-p_i)^2 + sum_{i != j} p_i^2 p_j^2, with
         * 1 - p_i = sum_{j != i} e_j / sum so almost one-hot rows do not cancel to 0 */
        double top = 0, h = 0, frob2 = 0;
        for (int i = 0; i < nkeys; ++i) {
            double pi = p[i] / sum, rest = 0;
            for (int j = 0; j < nkeys; ++j) {
                if (j == i) continue;
                rest += p[j];
                frob2 += pi * pi * (p[j] / sum) * (p[j] / sum);
            }
            rest /= sum;
            frob2 += pi * pi * rest * rest;
            if (pi > top) top = pi;
            if (pi > 0) h -= pi * log(pi);
        }
        s->sq[m] = sq / nkeys;
        s->maxw[m] = top;
        s->entropy[m] = h;
        s->jac[m] = sqrt(frob2);
    }
}

typedef struct {
    double mean[8], sd[8]; /* columns 1..8 of the CSV */
} mc_result;

static void monte_carlo(tu_rng *r, int dk, int nkeys, int samples, mc_result *out)
{
    double *q = malloc(sizeof(double) * (size_t)dk), *k = malloc(sizeof(double) * (size_t)(nkeys * dk));
    double sum[8] = {0}, sum2[8] = {0};
    for (int s = 0; s < samples; ++s) {
        sample_stats st;
        one_sample(r, dk, nkeys, q, k, &st);
        const double v[8] = {st.sq[0], st.sq[1], st.maxw[0], st.maxw[1],
                             st.entropy[0], st.entropy[1], st.jac[0], st.jac[1]};
        for (int c = 0; c < 8; ++c) {
            sum[c] += v[c];
            sum2[c] += v[c] * v[c];
        }
    }
    for (int c = 0; c < 8; ++c) {
        out->mean[c] = sum[c] / samples;
        out->sd[c] = sqrt(fmax(0, (sum2[c] - samples * out->mean[c] * out->mean[c]) / (samples - 1)));
    }
    free(q);
    free(k);
}

static bool same_file_text(const clirun_result *a, const clirun_result *b)
{
    return a->status == 0 && b->status == 0 && !strcmp(a->out, b->out);
}

typedef struct {
    int polylines, texts;
    bool titles[4];
} svg_facts;

static void on_element(void *user, const char *name, const xml_attr *a, int n, int depth)
{
    (void)a, (void)n, (void)depth;
    svg_facts *f = user;
    if (!strcmp(name, "polyline")) f->polylines++;
}

static void on_text(void *user, const char *element, const char *text)
{
    svg_facts *f = user;
    static const char *const titles[4] = {"Score variance", "Mean largest softmax weight",
                                          "Mean softmax entropy", "Mean softmax gradient norm"};
    if (strcmp(element, "text")) return;
    f->texts++;
    for (int i = 0; i < 4; ++i)
        if (!strcmp(text, titles[i])) f->titles[i] = true;
}

int main(int argc, char **argv)
{
    tu_options opt;
    if (!tu_parse_options(argc, argv, 0x5ca1e, &opt)) return 2;
    tu_suite suite = {.verbose = opt.verbose};
    tu_rng rng;
    tu_rng_seed(&rng, opt.seed);
    printf("seed %llu\n", (unsigned long long)opt.seed);
    const int nkeys = 16, samples = opt.quick ? 400 : 1000, test_samples = opt.quick ? 800 : 2000;
    tu_group g;

    /* ----------------------------------------------------- the numbers */
    tu_group_begin(&g, &suite, "CSV against Monte Carlo and theory");
    clirun_result csv;
    clirunf(&csv, "scaling\x1f--csv\x1f--seq\x1f%d\x1f--samples\x1f%d\x1f--max-dk\x1f" "1024\x1f--seed\x1f" "5",
            nkeys, samples);
    double rows[MAX_ROWS][COLS];
    int n = csv.status == 0 ? parse_csv(csv.out, rows) : -1;
    if (tu_check(&g, n == 11, "status %d, %d CSV rows (want d_k = 1 .. 1024): %.300s %s", csv.status, n,
                 csv.out, csv.err)) {
        for (int i = 0; i < n; ++i) {
            const double dk = rows[i][0];
            tu_check(&g, dk == (double)(1 << i), "row %d has d_k %g", i, dk);
            const double N = nkeys;
            for (int m = 0; m < 2; ++m) {
                tu_check(&g, rows[i][3 + m] >= 1 / N - 1e-9 && rows[i][3 + m] <= 1,
                         "d_k %g: largest weight %g outside [1/N, 1]", dk, rows[i][3 + m]);
                tu_check(&g, rows[i][5 + m] >= 0 && rows[i][5 + m] <= log(N) + 1e-9,
                         "d_k %g: entropy %g outside [0, ln N]", dk, rows[i][5 + m]);
                tu_check(&g, rows[i][7 + m] >= 0 && rows[i][7 + m] <= 1, "d_k %g: |J| %g", dk, rows[i][7 + m]);
            }
        }
        /* d_k = 1: scale 1/sqrt(1) = 1, both columns the same */
        bool same = true;
        for (int c = 1; c < COLS; c += 2) same = same && rows[0][c] == rows[0][c + 1];
        tu_check(&g, same, "d_k = 1: scaled and unscaled differ");
        /* theory and an independent simulation, for a few d_k */
        const int check_dk[] = {1, 8, 64, 512};
        for (size_t t = 0; t < sizeof check_dk / sizeof *check_dk; ++t) {
            const int dk = check_dk[t];
            int row = 0;
            while (row < n && rows[row][0] != dk) ++row;
            mc_result mc;
            monte_carlo(&rng, dk, nkeys, test_samples, &mc);
            static const char *const names[8] = {"variance unscaled", "variance scaled", "max weight unscaled",
                                                 "max weight scaled", "entropy unscaled", "entropy scaled",
                                                 "|J| unscaled", "|J| scaled"};
            for (int c = 0; c < 8; ++c) {
                const double se = sqrt(mc.sd[c] * mc.sd[c] / samples + mc.sd[c] * mc.sd[c] / test_samples);
                const double got = rows[row][1 + c], want = mc.mean[c];
                tu_check(&g, fabs(got - want) <= 5 * se + 1e-9,
                         "d_k %d %s: attn %.6g, simulation %.6g +- %.3g", dk, names[c], got, want, se);
            }
            /* E[(q.k)^2] = d_k exactly; scaled, 1 */
            const double se_u = mc.sd[0] / sqrt(samples), se_s = mc.sd[1] / sqrt(samples);
            tu_check(&g, fabs(rows[row][1] - dk) <= 5 * se_u, "d_k %d: variance %g, theory %d +- %.3g", dk,
                     rows[row][1], dk, se_u);
            tu_check(&g, fabs(rows[row][2] - 1) <= 5 * se_s, "d_k %d: scaled variance %g, theory 1 +- %.3g",
                     dk, rows[row][2], se_s);
        }
        /* the seeds' claim, plainly: unscaled softmax saturates, scaled does not */
        tu_check(&g, rows[10][3] > 0.9 && rows[10][4] < 0.4, "d_k 1024: largest weight %g / %g", rows[10][3],
                 rows[10][4]);
        tu_check(&g, rows[10][7] < 0.5 * rows[10][8], "d_k 1024: gradient norm %g vs %g", rows[10][7], rows[10][8]);
    }
    tu_group_end(&g);

    /* ------------------------------------- --scores: exact, no sampling */
    tu_group_begin(&g, &suite, "--scores against float64 softmax");
    {
        enum { R = 7, K = 5 };
        double z[R][K] = {{1.414, 0, 0, 0, 0}, {0, 0, 0, 0, 0}, {30, 0, 0, 0, 0}, {200, 0, 1, 2, 3},
                          {-3, 2.5, 2.5, 0.25, -1}};
        for (int i = 5; i < R; ++i)
            for (int j = 0; j < K; ++j) z[i][j] = (double)(float)(3 * tu_rng_normal(&rng));
        char arg[2048];
        size_t len = 0;
        for (int i = 0; i < R; ++i)
            for (int j = 0; j < K; ++j)
                len += (size_t)snprintf(arg + len, sizeof arg - len, "%.9g%s", z[i][j],
                                        j + 1 < K ? "," : i + 1 < R ? ";" : "");
        clirun_result r;
        clirunf(&r, "scaling\x1f--scores\x1f%s\x1f--csv", arg);
        const char *line = strchr(r.out, '\n');
        tu_check(&g, r.status == 0 && !strncmp(r.out, "row,max_weight,entropy,jacobian_norm\n", 37),
                 "status %d: %s%s", r.status, r.out, r.err);
        for (int i = 0; i < R && line; ++i) {
            double got[4];
            char *end;
            const char *p = line + 1;
            for (int c = 0; c < 4; ++c) {
                got[c] = strtod(p, &end);
                p = *end == ',' ? end + 1 : end;
            }
            line = strchr(line + 1, '\n');
            /* float64 softmax, entropy and ||diag(p) - p p^T||_F, straight from the definitions */
            double mx = -INFINITY, sum = 0, e[K], top = 0, h = 0, frob2 = 0;
            for (int j = 0; j < K; ++j) mx = fmax(mx, z[i][j]);
            for (int j = 0; j < K; ++j) sum += e[j] = exp(z[i][j] - mx);
            for (int a = 0; a < K; ++a) {
                double pa = e[a] / sum;
                top = fmax(top, pa);
                if (pa > 0) h -= pa * log(pa);
                for (int b = 0; b < K; ++b) {
                    /* J_ab = p_a (delta_ab - p_b); 1 - p_a as (sum - e_a) / sum: no cancelling */
                    double jab = a == b ? pa * ((sum - e[a]) / sum) : -pa * (e[b] / sum);
                    frob2 += jab * jab;
                }
            }
            const double want[4] = {i + 1, top, h, sqrt(frob2)};
            tu_cmp c;
            bool ok = tu_compare_f64(got, want, 4, (tu_tol){.atol = 1e-12, .rtol = 2e-5}, &c);
            tu_check(&g, ok, "row %d: got %g %g %g %g, want %g %g %g %g", i + 1, got[0], got[1], got[2], got[3],
                     want[0], want[1], want[2], want[3]);
        }
        clirun_free(&r);
        clirunf(&r, "scaling\x1f--scores\x1f" "2,0;20,0");
        tu_check(&g, r.status == 0 && strstr(r.out, "largest weight") && strstr(r.out, "[0.880797 0.119203]"),
                 "table: %s", r.out);
        clirun_free(&r);
        clirunf(&r, "scaling\x1f--scores\x1f" "1,2\x1f--seed\x1f" "3");
        tu_check(&g, r.status == 2 && clirun_count_lines(r.err) == 1 && !r.out_len, "--scores with --seed");
        clirun_free(&r);
    }
    tu_group_end(&g);

    /* ---------------------------------------------- table, determinism */
    tu_group_begin(&g, &suite, "table, reproducibility, rows independent of --max-dk");
    clirun_result table, first, again, other, shorter;
    clirunf(&table, "scaling\x1f--seq\x1f%d\x1f--samples\x1f%d\x1f--max-dk\x1f" "1024\x1f--seed\x1f" "5", nkeys, samples);
    const char *small = "scaling\x1f--csv\x1f--samples\x1f" "100\x1f--max-dk\x1f%d\x1f--seed\x1f%d";
    clirunf(&first, small, 256, 5);
    clirunf(&again, small, 256, 5);
    clirunf(&other, small, 256, 6);
    clirunf(&shorter, small, 64, 5);
    tu_check(&g, same_file_text(&first, &again), "the same seed gave different output");
    tu_check(&g, other.status == 0 && strcmp(other.out, first.out), "another seed gave the same output");
    tu_check(&g, shorter.status == 0 && !strncmp(shorter.out, first.out, shorter.out_len),
             "--max-dk 64 rows differ from the first rows of --max-dk 256");
    tu_check(&g, clirun_count_lines(shorter.out) == 8, "--max-dk 64: %d lines", clirun_count_lines(shorter.out));
    if (n == 11 && tu_check(&g, table.status == 0, "table: status %d", table.status)) {
        /* the row of d_k = 16 in the table: 8 numbers after "16" at 4 digits */
        const char *line = strstr(table.out, "\n    16 ");
        double got[9];
        bool found = line && clirun_numbers_after(line - 1, "\n", got, 9);
        if (tu_check(&g, found, "no d_k = 16 row in the table")) {
            bool ok = got[0] == 16;
            for (int c = 1; c < COLS; ++c) ok = ok && fabs(got[c] - rows[4][c]) <= 6e-4 * fabs(rows[4][c]) + 1e-4;
            tu_check(&g, ok, "table row 16 disagrees with the CSV");
        }
        tu_check(&g, strstr(table.out, "ln 16") != NULL, "uniform reference line missing");
    }
    clirun_free(&table);
    clirun_free(&first);
    clirun_free(&again);
    clirun_free(&other);
    clirun_free(&shorter);
    clirun_free(&csv);
    tu_group_end(&g);

    /* --------------------------------------------------------- the SVG */
    tu_group_begin(&g, &suite, "SVG plot");
    const char *dir = tu_scratch_dir("scaling");
    char svg_path[1024], bad_path[1024];
    snprintf(svg_path, sizeof svg_path, "%s/scaling.svg", dir);
    snprintf(bad_path, sizeof bad_path, "%s/missing/scaling.svg", dir);
    clirun_result r;
    clirunf(&r, "scaling\x1f--samples\x1f" "50\x1f--max-dk\x1f" "256\x1f--svg\x1f%s", svg_path);
    tu_check(&g, r.status == 0, "status %d: %s", r.status, r.err);
    clirun_free(&r);
    FILE *fp = fopen(svg_path, "rb");
    if (tu_check(&g, fp != NULL, "no SVG written")) {
        static char text[1 << 20];
        size_t len = fread(text, 1, sizeof text - 1, fp);
        fclose(fp);
        svg_facts f = {0};
        char err[512];
        tu_check(&g, xml_parse(text, len, on_element, on_text, &f, err, sizeof err), "SVG not well-formed: %s", err);
        for (int i = 0; i < 4; ++i) tu_check(&g, f.titles[i], "panel title %d missing", i);
        tu_check(&g, f.polylines >= 12, "%d polylines, want 3 per panel", f.polylines);
    }

    /* --------------------------------------------------- help, failures */
    clirunf(&r, "scaling\x1f--help");
    tu_check(&g, r.status == 0 && strstr(r.out, "usage: attn scaling") && strstr(r.out, "Frobenius"), "--help");
    clirun_free(&r);
    const char *bad[] = {"scaling\x1f--seq\x1f" "1", "scaling\x1f--samples\x1fmany", "scaling\x1f--max-dk\x1f" "0",
                         "scaling\x1f--seed\x1f-3", "scaling\x1f--svg", "scaling\x1f" "extra"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; ++i) {
        clirunf(&r, "%s", bad[i]);
        tu_check(&g, r.status == 2 && r.out_len == 0 && clirun_count_lines(r.err) == 1, "bad input %zu: status %d: %s",
                 i, r.status, r.err);
        clirun_free(&r);
    }
    clirunf(&r, "scaling\x1f--samples\x1f" "10\x1f--max-dk\x1f" "4\x1f--svg\x1f%s", bad_path);
    struct stat st;
    tu_check(&g, r.status == 2 && r.out_len == 0 && clirun_count_lines(r.err) == 1 && stat(bad_path, &st) != 0,
             "unwritable --svg: status %d, stdout %zu bytes: %s", r.status, r.out_len, r.err);
    clirun_free(&r);
    tu_group_end(&g);
    return tu_suite_finish(&suite);
}
