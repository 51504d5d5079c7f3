/* attn example NAME: the seed documents' worked examples, computed by the
 * library and printed the way the seeds print them. */
#include "cli.h"
#include "format.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef ATTN_EXAMPLES_DIR
#define ATTN_EXAMPLES_DIR "examples"
#endif
#ifndef ATTN_INSTALLED_EXAMPLES_DIR
#define ATTN_INSTALLED_EXAMPLES_DIR "../share/attn/examples"
#endif

/* The installed fixtures: ATTN_INSTALLED_EXAMPLES_DIR is relative to the
 * directory of the running executable, so an installed tree can move. */
static bool installed_dir(char *out, size_t n)
{
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) return false;
    exe[len] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return false;
    *slash = '\0';
    return snprintf(out, n, "%s/%s", exe, ATTN_INSTALLED_EXAMPLES_DIR) < (int)n;
}

/* Finds an example data file: $ATTN_EXAMPLES_DIR, the installed tree next
 * to the executable, then the source tree the binary was built from. */
static bool example_path(const char *file, char *out, size_t n)
{
    char installed[3072];
    const char *dirs[3] = {getenv("ATTN_EXAMPLES_DIR"),
                           installed_dir(installed, sizeof installed) ? installed : NULL,
                           ATTN_EXAMPLES_DIR};
    for (int i = 0; i < 3; ++i) {
        if (!dirs[i] || !*dirs[i]) continue;
        if (snprintf(out, n, "%s/%s", dirs[i], file) >= (int)n) continue;
        if (access(out, R_OK) == 0) return true;
    }
    fprintf(stderr, "attn example: cannot find %s (set ATTN_EXAMPLES_DIR to attn's examples/)\n",
            file);
    return false;
}

/* One-head SDPA of (Nq,D) queries over (Nk,D) keys / (Nk,Dv) values. */
static bool attend(const float *q, const float *k, const float *v, int64_t nq, int64_t nk,
                   int64_t d, int64_t dv, const attn_tensor *mask, float *out, float *weights)
{
    attn_tensor qt = attn_tensor_4d((float *)q, 1, 1, nq, d), kt = attn_tensor_4d((float *)k, 1, 1, nk, d),
                vt = attn_tensor_4d((float *)v, 1, 1, nk, dv), ot = attn_tensor_4d(out, 1, 1, nq, dv),
                wt = attn_tensor_4d(weights, 1, 1, nq, nk);
    attn_sdpa_opts opts = attn_sdpa_opts_default();
    opts.path = ATTN_PATH_REFERENCE; /* printed digits must not depend on the CPU */
    opts.mask[0] = mask;
    attn_error err = {0};
    if (attn_sdpa(&qt, &kt, &vt, &ot, NULL, &wt, &opts, &err) != ATTN_OK) {
        cli_report("example", &err);
        return false;
    }
    return true;
}

static int two_token(void)
{
    /* The seed's hand calculation: q1 = [1,1], k1 = [1,1], k2 = [1,-1],
     * v1 = [1,0], v2 = [0,1], d_k = 2. */
    const float q[2] = {1, 1}, k[4] = {1, 1, 1, -1}, v[4] = {1, 0, 0, 1};
    float scores[2] = {q[0] * k[0] + q[1] * k[1], q[0] * k[2] + q[1] * k[3]};
    float scaled[2] = {scores[0] / sqrtf(2.0f), scores[1] / sqrtf(2.0f)};
    float w[2], out[2];
    if (!attend(q, k, v, 1, 2, 2, 2, NULL, out, w)) return CLI_FAIL;
    printf("== two tokens by hand (d_k = 2) ==\n"
           "q1 = [1, 1]; k1 = [1, 1], k2 = [1, -1]; v1 = [1, 0], v2 = [0, 1]\n\n");
    fmt_labeled(stdout, "Scores q1·k", scores, 0, 2);
    fmt_labeled(stdout, "Scaled by 1/sqrt(2)", scaled, 0, 2);
    fmt_labeled(stdout, "Softmax weights", w, 0, 2);
    fmt_labeled(stdout, "Output", out, 0, 2);
    printf("Token 1 takes %.0f%% of token 1's value and %.0f%% of token 2's.\n\n", 100 * w[0],
           100 * w[1]);
    return CLI_OK;
}

static int colour_database(void)
{
    /* The seed's soft lookup: weights 0.6 Red, 0.3 Yellow, 0.1 Blue, 0 Green.
     * Attention produces exactly these weights when every score is 0 and an
     * additive mask holds log(weight) (log 0 = -inf blocks Green). */
    const char *keys[4] = {"Red", "Yellow", "Blue", "Green"};
    const float v[12] = {255, 0, 0, 255, 255, 0, 0, 0, 255, 0, 128, 0};
    const float q[1] = {0}, k[4] = {0, 0, 0, 0};
    float logw[4] = {logf(0.6f), logf(0.3f), logf(0.1f), -INFINITY};
    attn_tensor mask = attn_tensor_2d(logw, 1, 4);
    float w[4], out[3];
    if (!attend(q, k, v, 1, 4, 1, 3, &mask, out, w)) return CLI_FAIL;
    printf("== the colour database: a soft lookup ==\n");
    for (int j = 0; j < 4; ++j)
        printf("  %-7s value [%3.0f %3.0f %3.0f]  weight %.1f\n", keys[j], v[3 * j], v[3 * j + 1],
               v[3 * j + 2], w[j]);
    printf("\n");
    /* float32 softmax reproduces 0.6/0.3/0.1 to an ulp; print as the seed does */
    fmt_set_precision(4);
    fmt_labeled(stdout, "Result (a warm orange-red)", out, 0, 3);
    fmt_set_precision(8);
    return CLI_OK;
}

/* Loads named float tensors from one of the example fixtures; path (4096
 * bytes) receives where it was found. */
static bool load_fixture(const char *file, attn_safetensors *st, char *path)
{
    if (!example_path(file, path, 4096)) return false;
    attn_error err = {0};
    if (attn_safetensors_read(path, st, &err) != ATTN_OK) {
        fprintf(stderr, "attn: %s\n", err.message);
        return false;
    }
    return true;
}

static const float seed_x[6] = {1, 2, 3, 3, 3, 2}; /* the seeds' X: two words, d_model 3 */

static int numpy_single_head(void)
{
    attn_safetensors st = {0};
    char path[4096];
    if (!load_fixture("numpy_seed42.safetensors", &st, path)) return CLI_USAGE;
    const char *names[3] = {"W_Q", "W_K", "W_V"};
    float proj[3][6];
    for (int m = 0; m < 3; ++m) {
        const attn_array *w = attn_safetensors_find(&st, names[m]);
        if (!w || w->t.ndim != 2 || w->t.shape[0] != 3 || w->t.shape[1] != 3) {
            fprintf(stderr, "attn example: %s: %s must be a 3x3 matrix\n", path, names[m]);
            attn_safetensors_free(&st);
            return CLI_USAGE;
        }
        const float *W = w->t.data;
        for (int i = 0; i < 2; ++i) /* Q = X @ W_Q: (2,3) @ (3,3) */
            for (int j = 0; j < 3; ++j) {
                float acc = 0;
                for (int t = 0; t < 3; ++t) acc += seed_x[3 * i + t] * W[3 * t + j];
                proj[m][3 * i + j] = acc;
            }
    }
    attn_safetensors_free(&st);
    float a[4], y[6];
    if (!attend(proj[0], proj[1], proj[2], 2, 2, 3, 3, NULL, y, a)) return CLI_FAIL;
    printf("== NumPy single-head attention (np.random.seed(42) weights) ==\n");
    fmt_labeled(stdout, "Queries (Q)", proj[0], 2, 3);
    fmt_labeled(stdout, "Keys (K)", proj[1], 2, 3);
    fmt_labeled(stdout, "Values (V)", proj[2], 2, 3);
    fmt_labeled(stdout, "Attention Weights Matrix (A)", a, 2, 2);
    fmt_labeled(stdout, "Contextualized Output Embeddings (Y)", y, 2, 3);
    return CLI_OK;
}

static int pytorch_mha(void)
{
    char path[4096];
    attn_safetensors st = {0};
    if (!load_fixture("pytorch_mha_seed42.safetensors", &st, path)) return CLI_USAGE;
    attn_mha_config cfg = {.embed_dim = 3, .num_heads = 1, .bias = true};
    attn_mha *m = NULL;
    attn_error err = {0};
    int rc = CLI_FAIL;
    if (attn_mha_create(&cfg, &m, &err) != ATTN_OK) goto done;
    for (int i = 0; i < attn_mha_num_params(m); ++i) {
        const char *name;
        attn_tensor value, grad;
        attn_mha_param_at(m, i, &name, &value, &grad);
        const attn_array *a = attn_safetensors_find(&st, name);
        if (!a || attn_tensor_numel(&a->t) != attn_tensor_numel(&value)) {
            fprintf(stderr, "attn example: %s: missing or misshapen '%s'\n", path, name);
            rc = CLI_USAGE;
            goto done;
        }
        memcpy(value.data, a->t.data, sizeof(float) * (size_t)attn_tensor_numel(&value));
    }
    float y[6], a[4];
    attn_tensor x = attn_tensor_3d((float *)seed_x, 1, 2, 3), yt = attn_tensor_3d(y, 1, 2, 3),
                at = attn_tensor_3d(a, 1, 2, 2);
    attn_mha_opts opts = attn_mha_opts_default();
    opts.path = ATTN_PATH_REFERENCE;
    opts.weights = &at;
    if (attn_mha_forward(m, &x, NULL, NULL, &yt, &opts, &err) != ATTN_OK) goto done;
    printf("== PyTorch nn.MultiheadAttention(3, 1), torch.manual_seed(42) state_dict ==\n");
    fmt_labeled(stdout, "Attention Weights Matrix (A)", a, 2, 2);
    fmt_labeled(stdout, "Contextualized Output Embeddings (Y)", y, 2, 3);
    rc = CLI_OK;
done:
    if (rc == CLI_FAIL && err.status != ATTN_OK) rc = cli_report("example", &err);
    attn_mha_free(m);
    attn_safetensors_free(&st);
    return rc;
}

static const struct {
    const char *name;
    const char *what;
    int (*run)(void);
} examples[] = {
    {"two-token", "the hand-worked two-token example (weights 0.80, 0.20)", two_token},
    {"colour-database", "the colour database soft lookup ([229.5 76.5 25.5])", colour_database},
    {"numpy", "the NumPy single-head example with np.random.seed(42) weights", numpy_single_head},
    {"pytorch", "the PyTorch nn.MultiheadAttention example, torch.manual_seed(42)", pytorch_mha},
};
#define NEXAMPLES (sizeof examples / sizeof examples[0])

static const cli_option example_options[] = {{0}};

static int run(int argc, char **argv)
{
    cli_args a;
    bool help;
    int rc = cli_parse(&cmd_example, argc, argv, &a, &help);
    if (rc || help) return rc;
    if (a.npositional != 1)
        return cli_usage_error(&cmd_example, "expected one example name (see attn example --help)");
    const char *name = a.positional[0];
    bool all = !strcmp(name, "all");
    for (size_t i = 0; i < NEXAMPLES; ++i) {
        if (!all && strcmp(name, examples[i].name)) continue;
        rc = examples[i].run();
        if (rc || !all) return rc;
    }
    if (all) return CLI_OK;
    return cli_usage_error(&cmd_example, "unknown example '%s' (see attn example --help)", name);
}

const cli_command cmd_example = {
    .name = "example",
    .summary = "run the seed documents' worked examples",
    .usage = "NAME | all",
    .details = "examples:\n"
               "  two-token         the hand-worked two-token example (weights 0.80, 0.20)\n"
               "  colour-database   the colour database soft lookup ([229.5 76.5 25.5])\n"
               "  numpy             the NumPy single-head example, np.random.seed(42) weights\n"
               "  pytorch           nn.MultiheadAttention(3, 1) with torch.manual_seed(42)\n"
               "  all               every one of them, in this order",
    .options = example_options,
    .positional = "NAME",
    .run = run,
};
