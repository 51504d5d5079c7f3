/* attn mha / attn mha-backward: torch.nn.MultiheadAttention (batch_first) on
 * .npy inputs with parameters from a torch state_dict in .safetensors. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char mha_details[] =
    "X (B,L,E) or unbatched (L,E); without --key/--value it is self-attention.\n"
    "P holds torch's state_dict: in_proj_weight (3E,E) or q/k/v_proj_weight,\n"
    "in_proj_bias, out_proj.weight, out_proj.bias; bias_k/bias_v present means\n"
    "add_bias_kv; kdim and vdim are read from the weight shapes.\n"
    "Masks follow nn.MultiheadAttention: bool true = NOT allowed, float added.\n"
    "--key-padding-mask (B,S); --attn-mask (L,S) or (B*H,L,S); integer masks\n"
    "are refused, as torch refuses them. --causal is attn_mask =\n"
    "triu(ones(L,S), 1) (top-left; --causal bottom-right is the same and\n"
    "accepted when L = S). A query that sees no key gets a zero attention\n"
    "output (torch gives NaN).\n"
    "--precision bf16: the projections, the attention and their gradients\n"
    "multiply bfloat16 operands with float32 sums on the matrix engine\n"
    "(attn --version names it); exact (default) is float32 throughout.";

#define MHA_INPUT_OPTIONS                                                                      \
    {"--params", "P.safetensors", "the module's state_dict (required)"},                       \
    {"--num-heads", "H", "number of heads (required)"},                                        \
    {"--query", "X.npy", "query (B,L,E) or (L,E) (required)"},                                 \
    {"--key", "K.npy", "key (B,S,kdim); omit for self-attention"},                             \
    {"--value", "V.npy", "value (B,S,vdim); omit for self-attention"},                         \
    {"--key-padding-mask", "KPM.npy", "(B,S): bool true = ignore the key, or float added"},    \
    {"--attn-mask", "M.npy", "(L,S) or (B*H,L,S): bool true = blocked, or float added"},       \
    {"--causal", "[ALIGN]", "block keys after the query position (top-left; bottom-right: L = S)"}, \
    {"--add-zero-attn", NULL, "append a zero key and value (torch add_zero_attn)"},            \
    {"--threads", "N", "worker threads"},                                                      \
    {"--precision", "P", "products: exact (default) or bf16 (bfloat16 operands, float32 sums)"}, \
    {"--reference", NULL, "use the plain reference path"}

static const cli_option mha_options[] = {
    MHA_INPUT_OPTIONS,
    {"--out", "Y.npy", "output (B,L,E) (required)"},
    {"--attn-weights", "A.npy", "also write attention weights, averaged over heads (B,L,S')"},
    {"--per-head", NULL, "with --attn-weights: per head (B,H,L,S')"},
    {0},
};

static const cli_option backward_options[] = {
    MHA_INPUT_OPTIONS,
    {"--grad-out", "dY.npy", "gradient of the output (B,L,E) (required)"},
    {"--grads", "G.safetensors", "write parameter and input gradients (required)"},
    {"--out", "Y.npy", "also write the forward output"},
    {"--attn-weights", "A.npy", "also write the forward attention weights"},
    {"--per-head", NULL, "with --attn-weights: per head (B,H,L,S')"},
    {0},
};

/* Library argument names -> the options that supplied them. */
static const char *const option_names[][2] = {
    {"query", "--query"},
    {"key", "--key"},
    {"value", "--value"},
    {"key_padding_mask", "--key-padding-mask"},
    {"attn_mask", "--attn-mask"},
    {"dout", "--grad-out"},
    {"num_threads", "--threads"},
    {NULL, NULL},
};

typedef struct {
    attn_mha *m;
    attn_array x, k, v, kpm, mask, dout;
    attn_mha_opts opts;
    bool self;
} mha_inputs;

static void free_inputs(mha_inputs *in)
{
    attn_mha_free(in->m);
    attn_array_free(&in->x);
    attn_array_free(&in->k);
    attn_array_free(&in->v);
    attn_array_free(&in->kpm);
    attn_array_free(&in->mask);
    attn_array_free(&in->dout);
}

static const attn_array *find_2d(const attn_safetensors *st, const char *name)
{
    const attn_array *a = attn_safetensors_find(st, name);
    return a && a->t.ndim == 2 ? a : NULL;
}

/* Builds the module from a state_dict: config from the tensor shapes, then
 * every expected tensor copied in by name. */
static int load_module(const cli_command *cmd, const char *path, long heads, bool zero_attn,
                       attn_mha **out)
{
    attn_safetensors st = {0};
    attn_error err = {0};
    int rc = cli_load_safetensors("--params", path, &st);
    if (rc) return rc;
    rc = CLI_USAGE;
    attn_mha_config cfg = {.num_heads = heads, .add_zero_attn = zero_attn};
    const attn_array *packed = find_2d(&st, "in_proj_weight"), *qw = find_2d(&st, "q_proj_weight"),
                     *kw = find_2d(&st, "k_proj_weight"), *vw = find_2d(&st, "v_proj_weight");
    if (packed) {
        cfg.embed_dim = packed->t.shape[1];
    } else if (qw && kw && vw) {
        cfg.embed_dim = qw->t.shape[1];
        cfg.kdim = kw->t.shape[1];
        cfg.vdim = vw->t.shape[1];
    } else {
        fprintf(stderr, "attn: %s: needs in_proj_weight, or q_proj_weight, k_proj_weight and "
                        "v_proj_weight\n", path);
        goto done;
    }
    cfg.bias = attn_safetensors_find(&st, "in_proj_bias") != NULL;
    cfg.add_bias_kv = attn_safetensors_find(&st, "bias_k") != NULL;
    if (attn_mha_create(&cfg, out, &err) != ATTN_OK) {
        fprintf(stderr, "attn %s: --num-heads %ld with %s: %s\n", cmd->name, heads, path,
                err.message);
        rc = cli_exit_code(err.status);
        goto done;
    }
    int n = attn_mha_num_params(*out);
    for (int i = 0; i < n; ++i) {
        const char *name;
        attn_tensor value, grad;
        attn_mha_param_at(*out, i, &name, &value, &grad);
        const attn_array *a = attn_safetensors_find(&st, name);
        if (!a) {
            fprintf(stderr, "attn: %s: missing tensor '%s'\n", path, name);
            goto done;
        }
        bool same = a->t.dtype == ATTN_F32 && a->t.ndim == value.ndim;
        for (int d = 0; same && d < value.ndim; ++d) same = a->t.shape[d] == value.shape[d];
        if (!same) {
            fprintf(stderr, "attn: %s: tensor '%s' has the wrong shape or dtype for embed_dim %lld\n",
                    path, name, (long long)cfg.embed_dim);
            goto done;
        }
        memcpy(value.data, a->t.data, sizeof(float) * (size_t)attn_tensor_numel(&value));
    }
    for (size_t i = 0; i < st.count; ++i) {
        attn_tensor v, g;
        if (attn_mha_param(*out, st.arrays[i].name, &v, &g, NULL) != ATTN_OK) {
            fprintf(stderr, "attn: %s: unexpected tensor '%s'\n", path, st.arrays[i].name);
            goto done;
        }
    }
    rc = CLI_OK;
done:
    attn_safetensors_free(&st);
    return rc;
}

static int load_inputs(const cli_command *cmd, const cli_args *a, mha_inputs *in)
{
    const char *pp, *xp;
    if (!(pp = cli_require(a, "--params")) || !cli_require(a, "--num-heads") ||
        !(xp = cli_require(a, "--query")))
        return CLI_USAGE;
    long heads = 0;
    attn_causal causal;
    in->opts = attn_mha_opts_default();
    if (!cli_get_int(a, "--num-heads", 1, 1 << 20, &heads) ||
        !cli_get_threads(a, &in->opts.num_threads) ||
        !cli_get_precision(a, &in->opts.precision) ||
        !cli_get_causal(a, ATTN_CAUSAL_TOP_LEFT, &causal))
        return CLI_USAGE;
    const char *kp = cli_get(a, "--key"), *vp = cli_get(a, "--value");
    if (!kp != !vp) return cli_usage_error(cmd, "give both --key and --value, or neither");
    in->self = !kp;
    in->opts.causal = causal != ATTN_CAUSAL_NONE;
    if (cli_flag(a, "--reference")) in->opts.path = ATTN_PATH_REFERENCE;
    int rc = load_module(cmd, pp, heads, cli_flag(a, "--add-zero-attn"), &in->m);
    if (rc) return rc;
    if ((rc = cli_load_npy(xp, &in->x))) return rc;
    if (kp && ((rc = cli_load_npy(kp, &in->k)) || (rc = cli_load_npy(vp, &in->v)))) return rc;
    /* shapes are read below (output sizes), so ranks are checked first */
    const struct { const char *opt; const attn_array *arr; } ranked[3] = {
        {"--query", &in->x}, {"--key", &in->k}, {"--value", &in->v}};
    for (int i = 0; i < 3; ++i)
        if ((i == 0 || kp) && ranked[i].arr->t.ndim != 2 && ranked[i].arr->t.ndim != 3)
            return cli_usage_error(cmd, "%s: expected (B,L,E) or (L,E), got %d dimensions",
                                   ranked[i].opt, ranked[i].arr->t.ndim);
    const attn_tensor *kt = kp ? &in->k.t : &in->x.t;
    const int64_t L = in->x.t.shape[in->x.t.ndim - 2], S = kt->shape[kt->ndim - 2];
    if (causal == ATTN_CAUSAL_BOTTOM_RIGHT && L != S)
        return cli_usage_error(cmd, "--causal bottom-right: needs as many queries as keys (L = "
                                    "%lld, S = %lld); nn.MultiheadAttention's causal is top-left",
                               (long long)L, (long long)S);
    const char *kpm = cli_get(a, "--key-padding-mask"), *mp = cli_get(a, "--attn-mask");
    if (kpm) {
        if ((rc = cli_load_mask(kpm, &in->kpm))) return rc;
        in->opts.key_padding_mask = &in->kpm.t;
    }
    if (mp) {
        if ((rc = cli_load_mask(mp, &in->mask))) return rc;
        in->opts.attn_mask = &in->mask.t;
    }
    return CLI_OK;
}

/* The forward pass's results and where they go. */
typedef struct {
    float *y, *w;
    attn_tensor yt, wt;
    const char *paths[2]; /* --out, --attn-weights */
    int index[2];         /* in the command's output set */
} mha_outputs;

/* Adds --out and --attn-weights (those given) to the output set. */
static int add_outputs(cli_outputs *set, const cli_args *a, mha_outputs *o)
{
    int rc = cli_outputs_add(set, "--out", cli_get(a, "--out"), &o->index[0]);
    return rc ? rc : cli_outputs_add(set, "--attn-weights", cli_get(a, "--attn-weights"),
                                     &o->index[1]);
}

static int write_outputs(cli_outputs *set, const mha_outputs *o)
{
    int rc = cli_outputs_npy(set, o->index[0], &o->yt);
    return rc ? rc : cli_outputs_npy(set, o->index[1], &o->wt);
}

/* Runs the forward pass into freshly allocated outputs (weights only when
 * --attn-weights is given). */
static int run_mha_forward(const cli_command *cmd, const cli_args *a, mha_inputs *in,
                           mha_outputs *o)
{
    o->paths[0] = cli_get(a, "--out");
    o->paths[1] = cli_get(a, "--attn-weights");
    if (cli_flag(a, "--per-head") && !o->paths[1])
        return cli_usage_error(cmd, "--per-head needs --attn-weights");
    const attn_tensor *x = &in->x.t;
    const attn_mha_config *c = attn_mha_get_config(in->m);
    const bool batched = x->ndim == 3;
    const attn_tensor *kt = in->self ? x : &in->k.t;
    const int64_t B = batched ? x->shape[0] : 1, L = x->shape[x->ndim - 2], H = c->num_heads;
    const int64_t S = kt->shape[kt->ndim - 2] + c->add_bias_kv + c->add_zero_attn;
    if (!(o->y = cli_alloc_floats(cmd->name, 1, attn_tensor_numel(x)))) return CLI_FAIL;
    o->yt = attn_tensor_make(o->y, ATTN_F32, x->ndim, x->shape);
    if (o->paths[1]) {
        in->opts.per_head_weights = cli_flag(a, "--per-head");
        int64_t shape[4], nd = 0;
        if (batched) shape[nd++] = B;
        if (in->opts.per_head_weights) shape[nd++] = H;
        shape[nd++] = L;
        shape[nd++] = S;
        o->w = cli_alloc_floats(cmd->name, 4, B, in->opts.per_head_weights ? H : (int64_t)1, L, S);
        if (!o->w) return CLI_FAIL;
        o->wt = attn_tensor_make(o->w, ATTN_F32, (int)nd, shape);
        in->opts.weights = &o->wt;
    }
    attn_error err = {0};
    if (attn_mha_forward(in->m, x, in->self ? NULL : &in->k.t, in->self ? NULL : &in->v.t,
                         &o->yt, &in->opts, &err) != ATTN_OK)
        return cli_report_as(a, &err, option_names);
    in->opts.weights = NULL;
    return CLI_OK;
}

static int run_forward(int argc, char **argv)
{
    const cli_command *cmd = &cmd_mha;
    cli_args a;
    bool help;
    int rc = cli_parse(cmd, argc, argv, &a, &help);
    if (rc || help) return rc;
    if (!cli_require(&a, "--out")) return CLI_USAGE;

    mha_inputs in = {0};
    mha_outputs o = {0};
    cli_outputs outs;
    if ((rc = cli_outputs_begin(&outs, cmd))) return rc;
    if (!(rc = add_outputs(&outs, &a, &o)) && !(rc = load_inputs(cmd, &a, &in)) &&
        !(rc = run_mha_forward(cmd, &a, &in, &o)) && !(rc = write_outputs(&outs, &o)))
        rc = cli_outputs_commit(&outs);
    cli_outputs_end(&outs);
    free(o.y);
    free(o.w);
    free_inputs(&in);
    return rc;
}

static int run_backward(int argc, char **argv)
{
    const cli_command *cmd = &cmd_mha_backward;
    cli_args a;
    bool help;
    int rc = cli_parse(cmd, argc, argv, &a, &help);
    if (rc || help) return rc;
    const char *do_path, *g_path;
    if (!(do_path = cli_require(&a, "--grad-out")) || !(g_path = cli_require(&a, "--grads")))
        return CLI_USAGE;

    mha_inputs in = {0};
    mha_outputs o = {0};
    float *dx = NULL, *dk = NULL, *dv = NULL;
    const char **names = NULL;
    attn_tensor *ts = NULL;
    int g_index;
    cli_outputs outs;
    if ((rc = cli_outputs_begin(&outs, cmd))) return rc;
    /* --grads is checked against --out and --attn-weights like any output */
    if ((rc = cli_outputs_add(&outs, "--grads", g_path, &g_index)) ||
        (rc = add_outputs(&outs, &a, &o)))
        goto done;
    rc = load_inputs(cmd, &a, &in);
    if (rc) goto done;
    if ((rc = cli_load_npy(do_path, &in.dout))) goto done;
    /* The backward recomputes the forward itself: run it here only for
     * outputs the user asked for. */
    if ((cli_get(&a, "--out") || cli_get(&a, "--attn-weights")) &&
        (rc = run_mha_forward(cmd, &a, &in, &o)))
        goto done;
    const attn_tensor *x = &in.x.t;
    const int np = attn_mha_num_params(in.m);
    dx = cli_alloc_floats(cmd->name, 1, attn_tensor_numel(x));
    dk = in.self ? NULL : cli_alloc_floats(cmd->name, 1, attn_tensor_numel(&in.k.t));
    dv = in.self ? NULL : cli_alloc_floats(cmd->name, 1, attn_tensor_numel(&in.v.t));
    names = malloc(sizeof *names * (size_t)(np + 3));
    ts = malloc(sizeof *ts * (size_t)(np + 3));
    if (!names || !ts) fprintf(stderr, "attn %s: out of memory\n", cmd->name);
    if (!dx || (!in.self && (!dk || !dv)) || !names || !ts) {
        rc = CLI_FAIL;
        goto done;
    }
    attn_tensor dxt = attn_tensor_make(dx, ATTN_F32, x->ndim, x->shape), dkt = {0}, dvt = {0};
    if (!in.self) {
        dkt = attn_tensor_make(dk, ATTN_F32, in.k.t.ndim, in.k.t.shape);
        dvt = attn_tensor_make(dv, ATTN_F32, in.v.t.ndim, in.v.t.shape);
    }
    attn_error err = {0};
    if (attn_mha_backward(in.m, x, in.self ? NULL : &in.k.t, in.self ? NULL : &in.v.t,
                          &in.dout.t, &dxt, in.self ? NULL : &dkt, in.self ? NULL : &dvt,
                          &in.opts, &err) != ATTN_OK) {
        rc = cli_report_as(&a, &err, option_names);
        goto done;
    }
    int n = 0;
    for (int i = 0; i < np; ++i, ++n) {
        attn_tensor value;
        attn_mha_param_at(in.m, i, &names[n], &value, &ts[n]);
    }
    names[n] = "query";
    ts[n++] = dxt;
    if (!in.self) {
        names[n] = "key";
        ts[n++] = dkt;
        names[n] = "value";
        ts[n++] = dvt;
    }
    if (!(rc = cli_outputs_safetensors(&outs, g_index, names, ts, (size_t)n)) &&
        !(rc = write_outputs(&outs, &o)))
        rc = cli_outputs_commit(&outs);
done:
    cli_outputs_end(&outs);
    free(dx);
    free(dk);
    free(dv);
    free(names);
    free(ts);
    free(o.y);
    free(o.w);
    free_inputs(&in);
    return rc;
}

const cli_command cmd_mha = {
    .name = "mha",
    .summary = "multi-head attention exactly as torch.nn.MultiheadAttention (batch_first)",
    .usage = "--params P.safetensors --num-heads H --query X.npy --out Y.npy [options]",
    .details = mha_details,
    .options = mha_options,
    .run = run_forward,
};

const cli_command cmd_mha_backward = {
    .name = "mha-backward",
    .summary = "gradients of multi-head attention for every parameter and input",
    .usage = "--params P.safetensors --num-heads H --query X.npy --grad-out dY.npy "
             "--grads G.safetensors [options]",
    .details = mha_details,
    .options = backward_options,
    .run = run_backward,
};
