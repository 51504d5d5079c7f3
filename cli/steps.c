/* The five steps of attention on a small input: options → X and weights →
 * local projections → attn_sdpa per head → attn_mha_forward for the output. */
#include "steps.h"

#include "inline.h"


#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float *alloc_floats(int64_t n)
{
    return malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
}

/* Copies a 2-D view (any strides) into dst, C order. */
static void gather_2d(const attn_tensor *t, float *dst)
{
    const float *src = t->data;
    for (int64_t i = 0; i < t->shape[0]; ++i)
        for (int64_t j = 0; j < t->shape[1]; ++j)
            dst[i * t->shape[1] + j] = src[i * t->stride[0] + j * t->stride[1]];
}

/* dst (cols, rows) = rows of a view transposed: dst[j][i] = t[r0 + i][j]. */
static void gather_transposed(const attn_tensor *t, int64_t r0, int64_t rows, float *dst)
{
    const float *src = t->data;
    const int64_t cols = t->shape[1];
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j)
            dst[j * rows + i] = src[(r0 + i) * t->stride[0] + j * t->stride[1]];
}

static void gather_1d(const attn_tensor *t, int64_t from, int64_t n, float *dst)
{
    const float *src = t->data;
    for (int64_t i = 0; i < n; ++i) dst[i] = src[(from + i) * t->stride[t->ndim - 1]];
}

/* Writes the (rows, cols) matrix m transposed into a (cols, rows) view's
 * rows r0 .. r0+cols-1: view[r0 + j][i] = m[i][j]. */
static void scatter_transposed(const float *m, int64_t rows, int64_t cols, attn_tensor *t,
                               int64_t r0)
{
    float *dst = t->data;
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) dst[(r0 + j) * t->stride[0] + i * t->stride[1]] = m[i * cols + j];
}

/* out (n, m) = a (n, k) @ b (k, m) + bias (m, may be NULL); float32, summed
 * in index order like a plain loop in numpy's float32 matmul. */
static void matmul_bias(const float *a, const float *b, const float *bias, int64_t n, int64_t k,
                        int64_t m, float *out)
{
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < m; ++j) {
            float acc = 0.0f;
            for (int64_t t = 0; t < k; ++t) acc += a[i * k + t] * b[t * m + j];
            out[i * m + j] = bias ? acc + bias[j] : acc;
        }
}

static bool is_2d_f32(const attn_array *a)
{
    return a && a->t.dtype == ATTN_F32 && a->t.ndim == 2;
}

static int oom(const cli_command *cmd)
{
    fprintf(stderr, "attn %s: out of memory\n", cmd->name);
    return CLI_FAIL;
}

/* ------------------------------------------------------ weight sources */

/* W_Q, W_K, W_V [, W_O] in the seeds' X @ W layout. */
static int load_xw_file(const cli_command *cmd, const char *path, const attn_safetensors *st,
                        steps *s)
{
    static const char *const names[4] = {"W_Q", "W_K", "W_V", "W_O"};
    const attn_array *w[4];
    for (int i = 0; i < 4; ++i) {
        w[i] = attn_safetensors_find(st, names[i]);
        if (i < 3 && !w[i])
            return cli_usage_error(cmd, "%s: has W_Q but no %s", path, names[i]);
        if (w[i] && !is_2d_f32(w[i]))
            return cli_usage_error(cmd, "%s: %s must be a 2-D float matrix", path, names[i]);
    }
    for (size_t i = 0; i < st->count; ++i) {
        bool known = false;
        for (int k = 0; k < 4; ++k) known = known || !strcmp(st->arrays[i].name, names[k]);
        if (!known)
            return cli_usage_error(cmd, "%s: unexpected tensor '%s' (expected W_Q, W_K, W_V, W_O)",
                                   path, st->arrays[i].name);
    }
    const int64_t d_model = w[0]->t.shape[0], qk = w[0]->t.shape[1], vcols = w[2]->t.shape[1];
    if (w[1]->t.shape[0] != d_model || w[1]->t.shape[1] != qk)
        return cli_usage_error(cmd, "%s: W_K is (%lld, %lld) but W_Q is (%lld, %lld)", path,
                               (long long)w[1]->t.shape[0], (long long)w[1]->t.shape[1],
                               (long long)d_model, (long long)qk);
    if (w[2]->t.shape[0] != d_model)
        return cli_usage_error(cmd, "%s: W_V has %lld rows but W_Q has %lld (d_model)", path,
                               (long long)w[2]->t.shape[0], (long long)d_model);
    if (w[3] && w[3]->t.shape[0] != vcols)
        return cli_usage_error(cmd, "%s: W_O has %lld rows but W_V has %lld columns", path,
                               (long long)w[3]->t.shape[0], (long long)vcols);
    s->d_model = d_model;
    s->d_k = qk; /* divided by the head count later */
    s->d_v = vcols;
    s->d_out = w[3] ? w[3]->t.shape[1] : 0;
    float **dst[4] = {&s->wq, &s->wk, &s->wv, &s->wo};
    for (int i = 0; i < 4; ++i) {
        if (!w[i]) continue;
        *dst[i] = alloc_floats(attn_tensor_numel(&w[i]->t));
        if (!*dst[i]) return oom(cmd);
        gather_2d(&w[i]->t, *dst[i]);
    }
    return CLI_OK;
}

/* The module's weights in X @ W layout: W_Q = in_proj_weight[0:E]ᵀ, ... */
static int weights_from_module(const cli_command *cmd, steps *s, bool with_out_proj)
{
    attn_mha *m = s->module;
    const attn_mha_config *c = attn_mha_get_config(m);
    const int64_t E = c->embed_dim;
    attn_tensor in_w, in_b, out_w, out_b, grad;
    bool packed = attn_mha_param(m, "in_proj_weight", &in_w, &grad, NULL) == ATTN_OK;
    s->wq = alloc_floats(E * E);
    s->wk = alloc_floats(E * E);
    s->wv = alloc_floats(E * E);
    if (!s->wq || !s->wk || !s->wv) return oom(cmd);
    float *dst[3] = {s->wq, s->wk, s->wv};
    static const char *const separate[3] = {"q_proj_weight", "k_proj_weight", "v_proj_weight"};
    for (int i = 0; i < 3; ++i) {
        if (packed) {
            gather_transposed(&in_w, i * E, E, dst[i]);
        } else {
            attn_tensor w;
            attn_mha_param(m, separate[i], &w, &grad, NULL);
            gather_transposed(&w, 0, E, dst[i]);
        }
    }
    if (c->bias && attn_mha_param(m, "in_proj_bias", &in_b, &grad, NULL) == ATTN_OK) {
        s->bq = alloc_floats(E);
        s->bk = alloc_floats(E);
        s->bv = alloc_floats(E);
        if (!s->bq || !s->bk || !s->bv) return oom(cmd);
        gather_1d(&in_b, 0, E, s->bq);
        gather_1d(&in_b, E, E, s->bk);
        gather_1d(&in_b, 2 * E, E, s->bv);
    }
    if (with_out_proj) {
        attn_mha_param(m, "out_proj.weight", &out_w, &grad, NULL);
        s->wo = alloc_floats(E * E);
        if (!s->wo) return oom(cmd);
        gather_transposed(&out_w, 0, E, s->wo);
        s->d_out = E;
        if (c->bias && attn_mha_param(m, "out_proj.bias", &out_b, &grad, NULL) == ATTN_OK) {
            s->bo = alloc_floats(E);
            if (!s->bo) return oom(cmd);
            gather_1d(&out_b, 0, E, s->bo);
        }
    }
    s->d_model = E;
    s->d_k = E;
    s->d_v = E;
    return CLI_OK;
}

/* A torch nn.MultiheadAttention state_dict, as `attn mha` reads it. */
static int load_torch_file(const cli_command *cmd, const char *path, const attn_safetensors *st,
                           steps *s)
{
    const attn_array *packed = attn_safetensors_find(st, "in_proj_weight"),
                     *qw = attn_safetensors_find(st, "q_proj_weight"),
                     *kw = attn_safetensors_find(st, "k_proj_weight"),
                     *vw = attn_safetensors_find(st, "v_proj_weight");
    attn_mha_config cfg = {.num_heads = s->heads};
    if (is_2d_f32(packed)) {
        cfg.embed_dim = packed->t.shape[1];
    } else if (is_2d_f32(qw) && is_2d_f32(kw) && is_2d_f32(vw)) {
        cfg.embed_dim = qw->t.shape[1];
        if (kw->t.shape[1] != cfg.embed_dim || vw->t.shape[1] != cfg.embed_dim)
            return cli_usage_error(cmd, "%s: kdim/vdim differ from embed_dim; explain runs "
                                        "self-attention (use attn mha)", path);
    } else {
        return cli_usage_error(cmd, "%s: needs W_Q, W_K, W_V, or a torch state_dict with "
                                    "in_proj_weight (or q/k/v_proj_weight)", path);
    }
    if (attn_safetensors_find(st, "bias_k") || attn_safetensors_find(st, "bias_v"))
        return cli_usage_error(cmd, "%s: add_bias_kv (bias_k, bias_v) is not shown by explain; "
                                    "use attn mha", path);
    cfg.bias = attn_safetensors_find(st, "in_proj_bias") != NULL;
    attn_error err = {0};
    if (attn_mha_create(&cfg, &s->module, &err) != ATTN_OK)
        return cli_usage_error(cmd, "%s with --heads %lld: %s", path, (long long)s->heads,
                               err.message);
    for (int i = 0; i < attn_mha_num_params(s->module); ++i) {
        const char *name;
        attn_tensor value, grad;
        attn_mha_param_at(s->module, i, &name, &value, &grad);
        const attn_array *a = attn_safetensors_find(st, name);
        if (!a) return cli_usage_error(cmd, "%s: missing tensor '%s'", path, name);
        bool same = a->t.dtype == ATTN_F32 && a->t.ndim == value.ndim;
        for (int d = 0; same && d < value.ndim; ++d) same = a->t.shape[d] == value.shape[d];
        if (!same)
            return cli_usage_error(cmd, "%s: tensor '%s' has the wrong shape for embed_dim %lld",
                                   path, name, (long long)cfg.embed_dim);
        /* element by element: the file's view may be strided */
        int64_t count = attn_tensor_numel(&value);
        const float *src = a->t.data;
        float *dst = value.data;
        if (value.ndim == 2)
            for (int64_t r = 0; r < value.shape[0]; ++r)
                for (int64_t c = 0; c < value.shape[1]; ++c)
                    dst[r * value.stride[0] + c * value.stride[1]] =
                        src[r * a->t.stride[0] + c * a->t.stride[1]];
        else
            for (int64_t e = 0; e < count; ++e)
                dst[e * value.stride[value.ndim - 1]] = src[e * a->t.stride[a->t.ndim - 1]];
    }
    for (size_t i = 0; i < st->count; ++i) {
        attn_tensor v, g;
        if (attn_mha_param(s->module, st->arrays[i].name, &v, &g, NULL) != ATTN_OK)
            return cli_usage_error(cmd, "%s: unexpected tensor '%s'", path, st->arrays[i].name);
    }
    s->torch_layout = true;
    return weights_from_module(cmd, s, true);
}

static int load_weights_file(const cli_command *cmd, const char *path, steps *s)
{
    attn_safetensors st = {0};
    int rc = cli_load_safetensors("--weights", path, &st);
    if (rc) return rc;
    rc = attn_safetensors_find(&st, "W_Q") ? load_xw_file(cmd, path, &st, s)
                                               : load_torch_file(cmd, path, &st, s);
    attn_safetensors_free(&st);
    if (rc == CLI_OK)
        snprintf(s->source, sizeof s->source, "%s from %s",
                 s->torch_layout ? "torch nn.MultiheadAttention state_dict" : "W_Q, W_K, W_V", path);
    return rc;
}

static int load_inline_weights(const cli_command *cmd, const cli_args *a, steps *s)
{
    static const char *const opts[4] = {"--wq", "--wk", "--wv", "--wo"};
    float **dst[4] = {&s->wq, &s->wk, &s->wv, &s->wo};
    int64_t rows[4] = {0}, cols[4] = {0};
    for (int i = 0; i < 4; ++i) {
        const char *v = cli_get(a, opts[i]);
        if (!v) {
            if (i < 3) return cli_usage_error(cmd, "give --wq, --wk and --wv together (missing %s)", opts[i]);
            continue;
        }
        if (!cli_matrix_arg(cmd, opts[i], v, dst[i], &rows[i], &cols[i])) return CLI_USAGE;
    }
    if (rows[1] != rows[0] || cols[1] != cols[0])
        return cli_usage_error(cmd, "--wk is %lldx%lld but --wq is %lldx%lld", (long long)rows[1],
                               (long long)cols[1], (long long)rows[0], (long long)cols[0]);
    if (rows[2] != rows[0])
        return cli_usage_error(cmd, "--wv has %lld rows but --wq has %lld (d_model)",
                               (long long)rows[2], (long long)rows[0]);
    if (s->wo && rows[3] != cols[2])
        return cli_usage_error(cmd, "--wo has %lld rows but --wv has %lld columns",
                               (long long)rows[3], (long long)cols[2]);
    s->d_model = rows[0];
    s->d_k = cols[0];
    s->d_v = cols[2];
    s->d_out = s->wo ? cols[3] : 0;
    snprintf(s->source, sizeof s->source, "W_Q, W_K, W_V%s given on the command line",
             s->wo ? ", W_O" : "");
    return CLI_OK;
}

static int random_weights(const cli_command *cmd, uint64_t seed, steps *s)
{
    attn_mha_config cfg = {.embed_dim = s->d_model, .num_heads = s->heads};
    attn_error err = {0};
    if (attn_mha_create(&cfg, &s->module, &err) != ATTN_OK)
        return cli_usage_error(cmd, "random weights for d_model %lld and %lld heads: %s",
                               (long long)s->d_model, (long long)s->heads, err.message);
    attn_mha_init(s->module, seed);
    bool multi = s->heads > 1;
    int rc = weights_from_module(cmd, s, multi);
    if (!multi) { /* single-head attention: softmax(QKᵀ/√d)V, no W_O */
        attn_mha_free(s->module);
        s->module = NULL;
    }
    snprintf(s->source, sizeof s->source, "random: attn_mha_init(seed %llu), no biases%s",
             (unsigned long long)seed, multi ? "" : ", no W_O (one head)");
    return rc;
}

/* Numpy-layout weights that are square with a W_O form a module without
 * biases, so attn_mha_forward can compute the final output. */
static int module_from_xw(const cli_command *cmd, steps *s)
{
    const int64_t E = s->d_model;
    if (!s->wo || s->heads * s->d_k != E || s->heads * s->d_v != E || s->d_out != E) return CLI_OK;
    attn_mha_config cfg = {.embed_dim = E, .num_heads = s->heads};
    attn_error err = {0};
    if (attn_mha_create(&cfg, &s->module, &err) != ATTN_OK) return CLI_OK; /* shown without it */
    attn_tensor in_w, out_w, grad;
    if (attn_mha_param(s->module, "in_proj_weight", &in_w, &grad, &err) != ATTN_OK ||
        attn_mha_param(s->module, "out_proj.weight", &out_w, &grad, &err) != ATTN_OK) {
        fprintf(stderr, "attn %s: %s\n", cmd->name, err.message);
        return CLI_FAIL;
    }
    scatter_transposed(s->wq, E, E, &in_w, 0);
    scatter_transposed(s->wk, E, E, &in_w, E);
    scatter_transposed(s->wv, E, E, &in_w, 2 * E);
    scatter_transposed(s->wo, E, E, &out_w, 0);
    return CLI_OK;
}

/* ---------------------------------------------------------------- load */

int steps_load(const cli_command *cmd, const cli_args *a, steps *s)
{
    memset(s, 0, sizeof *s);
    s->check_diff = -1;
    long heads = 1, d_model = 4;
    if (!cli_get_int(a, "--heads", 1, 4096, &heads) ||
        !cli_get_int(a, "--d-model", 1, 1 << 16, &d_model))
        return CLI_USAGE;
    s->heads = heads;
    attn_causal causal; /* self-attention, L = S: both alignments are one mask */
    if (!cli_get_causal(a, ATTN_CAUSAL_TOP_LEFT, &causal)) return CLI_USAGE;
    s->causal = causal != ATTN_CAUSAL_NONE;
    const char *seed_text = cli_get(a, "--seed");
    uint64_t seed = 0;
    if (!cli_get_u64(a, "--seed", &seed)) return CLI_USAGE;
    const char *tokens = cli_get(a, "--tokens");
    if (tokens) {
        s->ntokens = inline_split_words(tokens, &s->tokens);
        if (s->ntokens < 0) return cli_usage_error(cmd, "--tokens: no tokens in '%s'", tokens);
    }

    /* X first: random weights take its width */
    const char *x_arg = cli_get(a, "--x");
    if (x_arg) {
        int64_t rows, cols;
        if (!cli_matrix_arg(cmd, "--x", x_arg, &s->x, &rows, &cols)) return CLI_USAGE;
        s->n = rows;
        s->d_model = cols;
        if (cli_get(a, "--d-model"))
            return cli_usage_error(cmd, "--d-model is the width of a random X; --x has %lld columns",
                                   (long long)cols);
    } else if (cli_get(a, "--d-model")) {
        s->d_model = d_model;
    }

    const char *wfile = cli_get(a, "--weights");
    const bool inline_w = cli_get(a, "--wq") || cli_get(a, "--wk") || cli_get(a, "--wv");
    if (cli_get(a, "--wo") && !inline_w)
        return cli_usage_error(cmd, "--wo goes with --wq, --wk and --wv");
    if (wfile && inline_w) return cli_usage_error(cmd, "give --weights or --wq/--wk/--wv, not both");
    const int64_t x_width = s->d_model;
    int rc;
    if (wfile) {
        rc = load_weights_file(cmd, wfile, s);
    } else if (inline_w) {
        rc = load_inline_weights(cmd, a, s);
    } else if (seed_text) {
        if (!s->d_model) s->d_model = d_model;
        rc = random_weights(cmd, seed, s);
    } else {
        return cli_usage_error(cmd, "no weights: give --weights FILE, --wq/--wk/--wv, or --seed S");
    }
    if (rc) return rc;
    if (x_width && x_width != s->d_model)
        return cli_usage_error(cmd, "X has %lld columns but the weights expect d_model = %lld",
                               (long long)x_width, (long long)s->d_model);

    /* heads split the projection columns */
    if (!s->torch_layout && !s->module) {
        if (s->d_k % s->heads || s->d_v % s->heads)
            return cli_usage_error(cmd, "--heads %ld does not divide the %lld columns of W_Q/W_K "
                                        "and %lld of W_V", heads, (long long)s->d_k, (long long)s->d_v);
    }
    s->d_k /= s->heads;
    s->d_v /= s->heads;
    if (!s->module && s->wo) {
        rc = module_from_xw(cmd, s);
        if (rc) return rc;
    }
    if (!s->wo) s->d_out = s->heads * s->d_v;

    if (!x_arg) {
        if (!seed_text || !tokens)
            return cli_usage_error(cmd, "no input: give --x, or --tokens with --seed for random "
                                        "embeddings");
        s->n = s->ntokens;
        s->random_x = true;
        s->x = alloc_floats(s->n * s->d_model);
        if (!s->x) return oom(cmd);
        attn_rng r;
        attn_rng_seed(&r, seed * 0x9E3779B97F4A7C15ull + 0x243F6A8885A308D3ull);
        for (int64_t i = 0; i < s->n * s->d_model; ++i) /* 2 decimals: easy to read and retype */
            s->x[i] = (float)(round(attn_rng_normal(&r) * 100.0) / 100.0);
    }
    if (tokens && s->ntokens != s->n)
        return cli_usage_error(cmd, "--tokens has %d words but X has %lld rows", s->ntokens,
                               (long long)s->n);

    s->scale = 1.0f / sqrtf((float)s->d_k);
    s->default_scale = true;
    if (!cli_get_scale(a, &s->scale)) return CLI_USAGE;
    s->default_scale = !cli_get(a, "--scale");
    return CLI_OK;
}

/* ------------------------------------------------------------- compute */

int steps_compute(const cli_command *cmd, steps *s)
{
    const int64_t n = s->n, H = s->heads, dk = s->d_k, dv = s->d_v, E = s->d_model;
    s->q = alloc_floats(n * H * dk);
    s->k = alloc_floats(n * H * dk);
    s->v = alloc_floats(n * H * dv);
    s->scores = alloc_floats(H * n * n);
    s->scaled = alloc_floats(H * n * n);
    s->weights = alloc_floats(H * n * n);
    s->concat = alloc_floats(n * H * dv);
    s->y = alloc_floats(n * s->d_out);
    if (!s->q || !s->k || !s->v || !s->scores || !s->scaled || !s->weights || !s->concat || !s->y)
        return oom(cmd);

    /* 1. Project */
    matmul_bias(s->x, s->wq, s->bq, n, E, H * dk, s->q);
    matmul_bias(s->x, s->wk, s->bk, n, E, H * dk, s->k);
    matmul_bias(s->x, s->wv, s->bv, n, E, H * dv, s->v);

    /* 2. Score and 3. Scale, for display */
    double max_scaled = 0;
    for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j) {
                float acc = 0.0f;
                for (int64_t t = 0; t < dk; ++t)
                    acc += s->q[i * H * dk + h * dk + t] * s->k[j * H * dk + h * dk + t];
                const int64_t at = (h * n + i) * n + j;
                s->scores[at] = acc;
                s->scaled[at] = s->causal && j > i ? -INFINITY : acc * s->scale;
                if (isfinite(s->scaled[at]) && fabs(s->scaled[at]) > max_scaled)
                    max_scaled = fabs(s->scaled[at]);
            }

    /* Finite inputs whose projections or scores are not: float32 overflowed
     * (values near 3e38). Named as such, before any comparison meets it. */
    const struct { const char *what; const float *x; int64_t count; } stages[] = {
        {"the projections Q, K, V", s->q, n * H * dk}, {"", s->k, n * H * dk},
        {"", s->v, n * H * dv}, {"the scores Q Kᵀ · scale", s->scaled, H * n * n}};
    for (size_t i = 0; i < sizeof stages / sizeof stages[0]; ++i)
        for (int64_t at = 0; at < stages[i].count; ++at) {
            const float x = stages[i].x[at];
            if (isnan(x) || (isinf(x) && x > 0) || (isinf(x) && i < 3)) {
                fprintf(stderr, "attn %s: float32 overflow: %s reach %g (largest float32: "
                                "3.4e38); scale the inputs or weights down\n",
                        cmd->name, stages[i].what[0] ? stages[i].what : stages[0].what, (double)x);
                return CLI_USAGE;
            }
        }

    /* 4. Normalize and 5. Aggregate, by the library: the (n, H·d) buffers
     * are (1, H, n, d) views with strides (·, d, H·d, 1) */
    attn_tensor q4 = {.data = s->q, .dtype = ATTN_F32, .ndim = 4, .shape = {1, H, n, dk},
                      .stride = {n * H * dk, dk, H * dk, 1}};
    attn_tensor k4 = q4, v4 = q4, o4;
    k4.data = s->k;
    v4.data = s->v;
    v4.shape[3] = dv;
    v4.stride[0] = n * H * dv;
    v4.stride[1] = dv;
    v4.stride[2] = H * dv;
    o4 = v4;
    o4.data = s->concat;
    attn_tensor w4 = attn_tensor_4d(s->weights, 1, H, n, n);
    attn_sdpa_opts opts = attn_sdpa_opts_default();
    opts.path = ATTN_PATH_REFERENCE; /* shown digits must not depend on the CPU */
    opts.scale = s->scale;
    opts.causal = s->causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
    attn_error err = {0};
    if (attn_sdpa(&q4, &k4, &v4, &o4, NULL, &w4, &opts, &err) != ATTN_OK)
        return cli_report(cmd->name, &err);

    /* the output projection: the library's multi-head forward when the
     * weights are a module (and the scale is the module's) */
    if (s->module && s->default_scale) {
        float *libw = alloc_floats(H * n * n);
        if (!libw) return oom(cmd);
        attn_tensor x2 = attn_tensor_2d(s->x, n, E), y2 = attn_tensor_2d(s->y, n, s->d_out),
                    wt = attn_tensor_3d(libw, H, n, n);
        attn_mha_opts mo = attn_mha_opts_default();
        mo.path = ATTN_PATH_REFERENCE;
        mo.causal = s->causal;
        mo.weights = &wt;
        mo.per_head_weights = true;
        if (attn_mha_forward(s->module, &x2, NULL, NULL, &y2, &mo, &err) != ATTN_OK) {
            free(libw);
            return cli_report(cmd->name, &err);
        }
        double diff = 0;
        for (int64_t i = 0; i < H * n * n; ++i) {
            double d = fabs((double)libw[i] - s->weights[i]);
            if (!(d <= diff)) diff = d; /* a NaN counts as the worst */
        }
        free(libw);
        s->check_diff = diff;
        s->y_from_module = true;
        /* float32 projections summed in another order move the scores by
         * a few ulps of their size; anything larger is a real disagreement */
        if (!(diff <= 1e-4 + 1e-6 * max_scaled)) {
            fprintf(stderr, "attn %s: attn_mha_forward's weights differ from attn_sdpa's on the "
                            "projections shown by %.3g\n", cmd->name, diff);
            return CLI_FAIL;
        }
    } else if (s->wo) {
        matmul_bias(s->concat, s->wo, s->bo, n, H * dv, s->d_out, s->y);
    } else {
        memcpy(s->y, s->concat, sizeof(float) * (size_t)(n * H * dv));
    }
    return CLI_OK;
}

void steps_free(steps *s)
{
    float *owned[] = {s->x, s->wq, s->wk, s->wv, s->bq, s->bk, s->bv, s->wo, s->bo,
                      s->q, s->k, s->v, s->scores, s->scaled, s->weights, s->concat, s->y};
    for (size_t i = 0; i < sizeof owned / sizeof *owned; ++i) free(owned[i]);
    attn_mha_free(s->module);
    inline_free_words(s->tokens, s->ntokens);
    memset(s, 0, sizeof *s);
}
