/* attn explain: attention on a small input, printed step by step (Project,
 * Score, Scale, Normalize, Aggregate; for several heads also the
 * concatenation and W_O), with NumPy-style matrices. */
#include "cli.h"
#include "format.h"
#include "steps.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cli_option explain_options[] = {
    STEPS_INPUT_OPTIONS,
    {"--precision", "P", "at most P decimals (numpy's print precision, default 8)"},
    {"--suppress", NULL, "fixed-point notation only, tiny values as 0 (numpy's suppress)"},
    {"--no-weights", NULL, "do not print the weight matrices themselves"},
    {0},
};

/* Prints "Name, shape (r, c):" and the matrix; with token labels as a
 * table (rows: tokens; columns: tokens too when both are the sequence). */
static void show(const steps *s, const char *name, const float *m, int64_t rows, int64_t cols,
                 int64_t ld, bool row_tokens, bool col_tokens)
{
    printf("%s, shape (%lld, %lld):\n", name, (long long)rows, (long long)cols);
    const char *const *tokens = (const char *const *)s->tokens;
    if (tokens && (row_tokens || col_tokens))
        fmt_table(stdout, m, rows, cols, ld, row_tokens ? tokens : NULL,
                  col_tokens ? tokens : NULL, 2);
    else
        fmt_matrix(stdout, m, rows, cols, ld, 0);
    printf("\n");
}

static void show_vector(const char *name, const float *v, int64_t n)
{
    printf("%s, shape (%lld,):\n", name, (long long)n);
    fmt_matrix(stdout, v, 0, n, n, 0);
    printf("\n");
}

/* Copies head h's columns of an (n, H·d) matrix into out (n, d). */
static void head_columns(const float *m, int64_t n, int64_t H, int64_t d, int64_t h, float *out)
{
    for (int64_t i = 0; i < n; ++i) memcpy(out + i * d, m + i * H * d + h * d, sizeof(float) * (size_t)d);
}

static void print_header(const steps *s)
{
    const bool multi = s->heads > 1;
    printf("attn explain: %s attention over %lld token%s, d_model = %lld, ",
           multi ? "multi-head" : "single-head", (long long)s->n, s->n == 1 ? "" : "s",
           (long long)s->d_model);
    if (multi) printf("%lld heads, ", (long long)s->heads);
    if (s->d_k == s->d_v)
        printf("d_k = d_v = %lld%s\n", (long long)s->d_k, multi ? " per head" : "");
    else
        printf("d_k = %lld, d_v = %lld%s\n", (long long)s->d_k, (long long)s->d_v,
               multi ? " per head" : "");
    printf("weights: %s\n", s->source);
    if (s->causal) printf("causal: token i attends only to tokens j <= i\n");
    printf("\n");
}

static void step_project(const steps *s, bool show_weights)
{
    const int64_t n = s->n, E = s->d_model, qk = s->heads * s->d_k, vc = s->heads * s->d_v;
    const bool bias = s->bq != NULL;
    printf("Step 1. Project: Q = X W_Q%s, K = X W_K%s, V = X W_V%s\n", bias ? " + b_Q" : "",
           bias ? " + b_K" : "", bias ? " + b_V" : "");
    printf("        (%lld, %lld) @ (%lld, %lld) -> (%lld, %lld)", (long long)n, (long long)E,
           (long long)E, (long long)qk, (long long)n, (long long)qk);
    if (s->heads > 1)
        printf("; head h uses columns h*%lld .. h*%lld+%lld", (long long)s->d_k, (long long)s->d_k,
               (long long)s->d_k - 1);
    printf("\n");
    if (s->torch_layout)
        printf("        (torch layout: W_Q = in_proj_weight[0:%lld]^T, W_K = "
               "in_proj_weight[%lld:%lld]^T, W_V = in_proj_weight[%lld:%lld]^T)\n",
               (long long)E, (long long)E, 2 * (long long)E, 2 * (long long)E, 3 * (long long)E);
    printf("\n");
    show(s, s->random_x ? "Input embeddings (X), random N(0,1) rounded to 2 decimals"
                        : "Input embeddings (X)",
         s->x, n, E, E, true, false);
    if (show_weights) {
        show(s, "W_Q", s->wq, E, qk, qk, false, false);
        show(s, "W_K", s->wk, E, qk, qk, false, false);
        show(s, "W_V", s->wv, E, vc, vc, false, false);
        if (bias) {
            show_vector("b_Q", s->bq, qk);
            show_vector("b_K", s->bk, qk);
            show_vector("b_V", s->bv, vc);
        }
    }
    show(s, "Queries (Q)", s->q, n, qk, qk, true, false);
    show(s, "Keys (K)", s->k, n, qk, qk, true, false);
    show(s, "Values (V)", s->v, n, vc, vc, true, false);
}

/* Steps 2-5 for one head; out is the head's (n, d_v) output. */
static int steps_of_head(const steps *s, int64_t h)
{
    const int64_t n = s->n, dk = s->d_k, dv = s->d_v;
    const bool multi = s->heads > 1;
    char sub[24] = "", name[160];
    if (multi) snprintf(sub, sizeof sub, "_%lld", (long long)h + 1);
    const float *S = s->scores + h * n * n, *Z = s->scaled + h * n * n, *A = s->weights + h * n * n;

    if (multi) {
        printf("=== Head %lld of %lld: Q%s = Q[:, %lld:%lld], K%s = K[:, %lld:%lld], "
               "V%s = V[:, %lld:%lld] ===\n\n",
               (long long)h + 1, (long long)s->heads, sub, (long long)(h * dk),
               (long long)((h + 1) * dk), sub, (long long)(h * dk), (long long)((h + 1) * dk), sub,
               (long long)(h * dv), (long long)((h + 1) * dv));
        float *tmp = malloc(sizeof(float) * (size_t)(n * (dk > dv ? dk : dv)));
        if (!tmp) return CLI_FAIL;
        head_columns(s->q, n, s->heads, dk, h, tmp);
        snprintf(name, sizeof name, "Q%s", sub);
        show(s, name, tmp, n, dk, dk, true, false);
        head_columns(s->k, n, s->heads, dk, h, tmp);
        snprintf(name, sizeof name, "K%s", sub);
        show(s, name, tmp, n, dk, dk, true, false);
        head_columns(s->v, n, s->heads, dv, h, tmp);
        snprintf(name, sizeof name, "V%s", sub);
        show(s, name, tmp, n, dv, dv, true, false);
        free(tmp);
    }

    printf("Step 2. Score: S%s = Q%s K%s^T, entry (i, j) = q_i . k_j   (%lld, %lld) @ (%lld, %lld) "
           "-> (%lld, %lld)\n\n",
           sub, sub, sub, (long long)n, (long long)dk, (long long)dk, (long long)n, (long long)n,
           (long long)n);
    snprintf(name, sizeof name, "Scores (S%s)", sub);
    show(s, name, S, n, n, n, true, true);

    if (s->default_scale)
        printf("Step 3. Scale: S%s / sqrt(d_k) = S%s * %.9g   (sqrt(%lld) = %.9g)\n", sub, sub,
               (double)s->scale, (long long)dk, sqrt((double)dk));
    else
        printf("Step 3. Scale: S%s * %.9g   (--scale; the default would be 1/sqrt(%lld) = %.9g)\n",
               sub, (double)s->scale, (long long)dk, 1.0 / sqrt((double)dk));
    if (s->causal) printf("        causal mask: -inf where key j comes after query i\n");
    printf("\n");
    snprintf(name, sizeof name, "Scaled scores (S%s / sqrt(%lld))", sub, (long long)dk);
    if (!s->default_scale) snprintf(name, sizeof name, "Scaled scores (S%s * %.6g)", sub, (double)s->scale);
    show(s, name, Z, n, n, n, true, true);

    printf("Step 4. Normalize: A%s = softmax of each row: exp(z - max) / sum exp(z - max)\n\n", sub);
    snprintf(name, sizeof name, "Attention Weights Matrix (A%s)", sub);
    show(s, name, A, n, n, n, true, true);
    float *sums = malloc(sizeof(float) * (size_t)n);
    if (!sums) return CLI_FAIL;
    for (int64_t i = 0; i < n; ++i) {
        double acc = 0;
        for (int64_t j = 0; j < n; ++j) acc += A[i * n + j];
        sums[i] = (float)acc;
    }
    snprintf(name, sizeof name, "Row sums of A%s", sub);
    show_vector(name, sums, n);
    free(sums);

    printf("Step 5. Aggregate: %s%s = A%s V%s, each row a weighted average of the rows of V%s   "
           "(%lld, %lld) @ (%lld, %lld) -> (%lld, %lld)\n\n",
           multi ? "head" : (s->wo ? "H" : "Y"), sub, sub, sub, sub, (long long)n, (long long)n,
           (long long)n, (long long)dv, (long long)n, (long long)dv);
    if (multi) {
        float *tmp = malloc(sizeof(float) * (size_t)(n * dv));
        if (!tmp) return CLI_FAIL;
        head_columns(s->concat, n, s->heads, dv, h, tmp);
        snprintf(name, sizeof name, "Head output (head%s)", sub);
        show(s, name, tmp, n, dv, dv, true, false);
        free(tmp);
    } else if (s->wo) {
        show(s, "Attention output (H = A V)", s->concat, n, dv, dv, true, false);
    } else {
        show(s, "Contextualized Output Embeddings (Y)", s->y, n, dv, dv, true, false);
    }
    return CLI_OK;
}

static void step_combine(const steps *s, bool show_weights)
{
    const int64_t n = s->n, c = s->heads * s->d_v;
    const bool multi = s->heads > 1;
    if (multi) {
        printf("=== Combine the heads ===\n\n");
        printf("Step 6. Concatenate: Concat = [head_1 %shead_%lld]   -> (%lld, %lld)\n\n",
               s->heads > 2 ? "... " : "", (long long)s->heads, (long long)n, (long long)c);
        show(s, "Concatenated heads (Concat)", s->concat, n, c, c, true, false);
    }
    if (!s->wo) {
        if (multi) {
            printf("No W_O given: the output is the concatenation.\n\n");
            show(s, "Contextualized Output Embeddings (Y)", s->y, n, s->d_out, s->d_out, true, false);
        }
        return;
    }
    const char *in = multi ? "Concat" : "H";
    printf("Step %d. Output projection: Y = %s W_O%s   (%lld, %lld) @ (%lld, %lld) -> (%lld, %lld)\n",
           multi ? 7 : 6, in, s->bo ? " + b_O" : "", (long long)n, (long long)c, (long long)c,
           (long long)s->d_out, (long long)n, (long long)s->d_out);
    if (s->torch_layout)
        printf("        (torch layout: W_O = out_proj.weight^T%s)\n", s->bo ? ", b_O = out_proj.bias" : "");
    printf("\n");
    if (show_weights) {
        show(s, "W_O", s->wo, c, s->d_out, s->d_out, false, false);
        if (s->bo) show_vector("b_O", s->bo, s->d_out);
    }
    show(s, "Contextualized Output Embeddings (Y)", s->y, n, s->d_out, s->d_out, true, false);
}

static int run(int argc, char **argv)
{
    const cli_command *cmd = &cmd_explain;
    cli_args a;
    bool help;
    int rc = cli_parse(cmd, argc, argv, &a, &help);
    if (rc || help) return rc;
    long precision = 8;
    if (!cli_get_int(&a, "--precision", 0, 8, &precision)) return CLI_USAGE;
    steps s;
    rc = steps_load(cmd, &a, &s);
    if (!rc) rc = steps_compute(cmd, &s);
    if (rc) {
        steps_free(&s);
        return rc;
    }
    fmt_set_precision((int)precision);
    fmt_set_suppress(cli_flag(&a, "--suppress"));
    const bool show_weights = !cli_flag(&a, "--no-weights");
    print_header(&s);
    step_project(&s, show_weights);
    for (int64_t h = 0; h < s.heads && rc == CLI_OK; ++h) rc = steps_of_head(&s, h);
    if (rc == CLI_OK) {
        step_combine(&s, show_weights);
        if (s.y_from_module)
            printf("Check: Y is attn_mha_forward's output; its per-head weights match the A above "
                   "(max |difference| %.2g).\n",
                   s.check_diff);
    } else {
        fprintf(stderr, "attn explain: out of memory\n");
    }
    steps_free(&s);
    return rc;
}

const cli_command cmd_explain = {
    .name = "explain",
    .summary = "attention on a small input, step by step (Project, Score, Scale, Normalize, "
               "Aggregate)",
    .usage = "(--x X | --tokens WORDS --seed S) (--weights W.safetensors | --wq M --wk M --wv M "
             "| --seed S) [options]",
    .details = "Prints every step with shapes and NumPy-style matrices: the projections Q, K, V,\n"
               "the scores Q K^T, the scaled scores, the softmax weights with their row sums,\n"
               "and the output. With --heads H each head is shown, then the concatenation and\n"
               "the output projection W_O. The softmax weights and head outputs come from\n"
               "attn_sdpa; with W_O the output comes from attn_mha_forward, whose per-head\n"
               "weights are checked against the ones printed.\n\n" STEPS_INPUT_DETAILS
               "\n\nexamples:\n"
               "  attn explain --weights examples/numpy_seed42.safetensors --x \"1,2,3;3,3,2\"\n"
               "  attn explain --weights examples/pytorch_mha_seed42.safetensors --x \"1,2,3;3,3,2\"\n"
               "  attn explain --x \"1,1;1,-1\" --wq \"1,0;0,1\" --wk \"1,0;0,1\" --wv \"1,0;0,1\"\n"
               "  attn explain --tokens \"the hunter saw a duck\" --seed 7 --d-model 4 --heads 2",
    .options = explain_options,
    .run = run,
};
