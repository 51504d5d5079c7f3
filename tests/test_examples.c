/* The seed documents' worked examples, run through the CLI (`attn example`)
 * and checked against the numbers the seeds print. The expected values below
 * are copied from ../shared/seeds (the NumPy and PyTorch outputs printed
 * there), not produced by attn. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *run_example(const char *name)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "ATTN_EXAMPLES_DIR=%s/examples %s example %s", ATTN_SOURCE_DIR,
             ATTN_CLI, name);
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - 1 - len, p)) > 0) len += n;
    int status = pclose(p);
    if (!buf || status != 0) {
        free(buf);
        return NULL;
    }
    buf[len] = '\0';
    return buf;
}

/* Parses the first n numbers printed after the line starting with label. */
static bool numbers_after(const char *text, const char *label, double *out, int n)
{
    const char *s = strstr(text, label);
    if (!s) return false;
    s = strchr(s, '\n');
    for (int i = 0; i < n; ++i) {
        while (s && *s && !(*s == '-' || (*s >= '0' && *s <= '9'))) {
            if (*s == '=' ) return false;
            ++s;
        }
        if (!s || !*s) return false;
        char *end;
        out[i] = strtod(s, &end);
        s = end;
    }
    return true;
}

static void expect(tu_group *g, const char *text, const char *label, const double *want, int n,
                   double atol, double rtol)
{
    double got[16];
    if (!numbers_after(text, label, got, n)) {
        tu_group_fail(g, "'%s' not found in the output", label);
        return;
    }
    tu_cmp c;
    if (tu_compare_f64(got, want, n, (tu_tol){.atol = atol, .rtol = rtol}, &c)) {
        tu_group_pass(g);
    } else {
        char line[512];
        tu_cmp_describe(&c, label, NULL, line, sizeof line);
        tu_group_fail(g, "%s", line);
    }
}

int main(int argc, char **argv)
{
    tu_options opt;
    if (!tu_parse_options(argc, argv, 1, &opt)) return 2;
    tu_suite suite = {0};
    tu_group g;

    tu_group_begin(&g, &suite, "two-token");
    char *out = run_example("two-token");
    if (tu_check(&g, out != NULL, "attn example two-token failed")) {
        /* The seed: scaled scores ≈ [1.414, 0], weights ≈ [0.80, 0.20], output ≈ [0.80, 0.20]. */
        expect(&g, out, "Scaled by", (double[]){1.414, 0}, 2, 1e-3, 0);
        expect(&g, out, "Softmax weights", (double[]){0.80, 0.20}, 2, 5e-3, 0);
        expect(&g, out, "Output", (double[]){0.80, 0.20}, 2, 5e-3, 0);
    }
    free(out);
    tu_group_end(&g);

    tu_group_begin(&g, &suite, "colour-database");
    out = run_example("colour-database");
    if (tu_check(&g, out != NULL, "attn example colour-database failed"))
        expect(&g, out, "Result", (double[]){229.5, 76.5, 25.5}, 3, 1e-3, 0);
    free(out);
    tu_group_end(&g);

    /* float32 carries about 7 significant digits of the seeds' float64 prints. */
    tu_group_begin(&g, &suite, "numpy single head");
    out = run_example("numpy");
    if (tu_check(&g, out != NULL, "attn example numpy failed")) {
        expect(&g, out, "Queries (Q)",
               (double[]){8.28041231, 1.69573314, -1.22900853, 9.21765766, 0.41761643, 0.30170597},
               6, 1e-5, 1e-6);
        expect(&g, out, "Keys (K)",
               (double[]){-0.660378, -7.32847154, -2.97282342, 1.22899189, -9.15575605, -5.94344809},
               6, 1e-5, 1e-6);
        expect(&g, out, "Values (V)",
               (double[]){-2.99272485, -0.94447952, -4.83682834, -4.49016658, -3.81248131, -2.17928541},
               6, 1e-5, 1e-6);
        expect(&g, out, "Attention Weights Matrix (A)",
               (double[]){8.68363148e-05, 9.99913164e-01, 1.12005616e-04, 9.99887994e-01}, 4, 1e-8,
               1e-4);
        expect(&g, out, "Contextualized Output Embeddings (Y)",
               (double[]){-4.49003654, -3.81223226, -2.17951618, -4.48999886, -3.81216008, -2.17958307},
               6, 1e-5, 1e-6);
    }
    free(out);
    tu_group_end(&g);

    tu_group_begin(&g, &suite, "pytorch multi-head");
    out = run_example("pytorch");
    if (tu_check(&g, out != NULL, "attn example pytorch failed")) {
        expect(&g, out, "Attention Weights Matrix (A)",
               (double[]){0.8597921, 0.14020787, 0.91717255, 0.08282746}, 4, 1e-6, 1e-6);
        expect(&g, out, "Contextualized Output Embeddings (Y)",
               (double[]){0.703761, 0.64951515, 0.80751586, 0.7178543, 0.6376342, 0.79714787}, 6,
               1e-6, 1e-6);
    }
    free(out);
    tu_group_end(&g);

    tu_group_begin(&g, &suite, "all");
    out = run_example("all");
    tu_check(&g, out && strstr(out, "two tokens") && strstr(out, "colour database") &&
                     strstr(out, "NumPy") && strstr(out, "PyTorch"),
             "attn example all does not run every example");
    free(out);
    tu_group_end(&g);
    return tu_suite_finish(&suite);
}
