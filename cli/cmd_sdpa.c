/* attn sdpa / attn sdpa-backward: scaled dot-product attention on .npy files,
 * torch.nn.functional.scaled_dot_product_attention semantics. */
#include "cli.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char sdpa_details[] =
    "Q (B,H,Nq,D), K (B,Hkv,Nk,D), V (B,Hkv,Nk,Dv); (H,N,D) and (N,D) drop the\n"
    "leading dimensions, and the outputs drop them too. Hq % Hkv == 0 (GQA).\n"
    "--attn-mask: bool (true = may attend) or float (added to the scores), any\n"
    "shape that broadcasts to (B,Hq,Nq,Nk).\n"
    "--causal, --causal top-left: query i sees keys j <= i (PyTorch is_causal).\n"
    "--causal bottom-right: query i sees keys j <= i + Nk - Nq (FlashAttention).\n"
    "A query that sees no key gets output 0 and LSE -inf (with --sinks: the sink).\n"
    "--window L,R: query i sees keys i+Nk-Nq-L .. i+Nk-Nq+R (-1 = unbounded side).\n"
    "--alibi-slopes: a (H) or (B,H) .npy of slopes, or 'geometric' for the ALiBi\n"
    "paper's; bias -slope*|i+Nk-Nq-j|. --softcap C: logits C*tanh(x/C).\n"
    "--sinks: a (H) .npy of per-head sink logits (denominator only; the LSE\n"
    "includes them). --dropout P --seed S: dropout on the weights (Philox).\n"
    "--dtype bf16|f16: inputs rounded to that format (nearest even) and stored\n"
    "in it, float32 arithmetic; O, dQ, dK, dV come out in it too: float16 as\n"
    ".npy <f2, bfloat16 (which .npy lacks) as the exact float32 values. LSE and\n"
    "weights are always float32. --precision bf16: the products on bfloat16\n"
    "operands with float32 accumulation (P rounded to bfloat16), on the CPU's\n"
    "matrix engine (AMX, AVX512_BF16; `attn --version` names it, ATTN_ENGINE\n"
    "forces one); within README's bfloat16 contract, not the float32 call's\n"
    "bits. Without an engine the call is the exact one.\n"
    "--rope neox|gptj: rotary embeddings on Q and K before the scores, key j\n"
    "at position P + j and query i at P + Nk - Nq + i (P = --rope-offset, 0 by\n"
    "default); the files hold Q and K before rotation, and the backward's dQ,\n"
    "dK are gradients with respect to them.\n"
    "ATTN_ARCH=reference forces the plain path; ATTN_NUM_THREADS sets threads.";

#define SDPA_INPUT_OPTIONS                                                                     \
    {"--query", "Q.npy", "queries (B,H,Nq,D), (H,Nq,D) or (Nq,D)"},                            \
    {"--key", "K.npy", "keys (B,Hkv,Nk,D)"},                                                   \
    {"--value", "V.npy", "values (B,Hkv,Nk,Dv)"},                                              \
    {"--attn-mask", "M.npy", "bool (true = attend) or float additive mask"},                   \
    {"--causal", "[ALIGN]", "top-left (the default) or bottom-right"},                         \
    {"--scale", "S", "score scale, > 0 (default 1/sqrt(D))"},                                       \
    {"--threads", "N", "worker threads (default: ATTN_NUM_THREADS or all cores)"},             \
    {"--window", "L,R", "sliding window, FlashAttention's window_size (-1 = unbounded)"},      \
    {"--alibi-slopes", "FILE|geometric", "ALiBi slopes (H) or (B,H)"},                        \
    {"--softcap", "C", "logit soft-capping C*tanh(x/C), C > 0"},                              \
    {"--sinks", "S.npy", "attention sink logits, one per head (H)"},                           \
    {"--dropout", "P", "dropout probability on the weights, [0, 1)"},                        \
    {"--seed", "S", "dropout seed (default 0)"},                                               \
    {"--dtype", "T", "storage of Q, K, V, dO and O, dQ, dK, dV: f32 (default), bf16, f16"},     \
    {"--precision", "P", "products: exact (default) or bf16 (bfloat16 operands, float32 sums)"}, \
    CLI_ROPE_OPTIONS,                                                                          \
    {"--rope-offset", "P", "position of key 0 with --rope (default 0)"},                       \
    {"--reference", NULL, "use the plain reference path"}

static const cli_option sdpa_options[] = {
    SDPA_INPUT_OPTIONS,
    {"--out", "O.npy", "output (B,H,Nq,Dv) (required)"},
    {"--lse", "LSE.npy", "also write the log-sum-exp per query (B,H,Nq)"},
    {"--attn-weights", "A.npy", "also write the attention weights (B,H,Nq,Nk)"},
    {"--bf16-dot", NULL, "the former name of --precision bf16"},
    {0},
};

static const cli_option backward_options[] = {
    SDPA_INPUT_OPTIONS,
    {"--grad-out", "dO.npy", "gradient of the output (B,H,Nq,Dv) (required)"},
    {"--grad-query", "dQ.npy", "write dL/dQ"},
    {"--grad-key", "dK.npy", "write dL/dK (summed over the query heads of a group)"},
    {"--grad-value", "dV.npy", "write dL/dV"},
    {"--out", "O.npy", "also write the forward output"},
    {"--lse", "LSE.npy", "also write the forward log-sum-exp"},
    {"--attn-weights", "A.npy", "also write the forward attention weights"},
    {"--grad-sinks", "dS.npy", "write dL/dsinks (H) (needs --sinks)"},
    {"--grad-attn-mask", "dM.npy", "write dL/dmask, the mask's shape (needs a float --attn-mask)"},
    {0},
};

/* Library argument names -> the options that supplied them. */
static const char *const option_names[][2] = {
    {"query", "--query"},       {"key", "--key"},           {"value", "--value"},
    {"mask[0]", "--attn-mask"}, {"grad_out", "--grad-out"}, {"scale", "--scale"},
    {"num_threads", "--threads"}, {"window", "--window"},   {"alibi_slopes", "--alibi-slopes"},
    {"softcap", "--softcap"},   {"sinks", "--sinks"},       {"dropout_p", "--dropout"},
    {"grad_sinks", "--grad-sinks"}, {"grad_mask", "--grad-attn-mask"}, {"rope", "--rope"},
    {"rope_offset", "--rope-offset"}, {NULL, NULL},
};

/* Inputs of one call, loaded and viewed as 4-D. */
typedef struct {
    attn_array q, k, v, mask, dout, slopes, sinks;
    float *geometric; /* --alibi-slopes geometric */
    attn_tensor q4, k4, v4, dout4, slopes_t;
    attn_rope rope;    /* --rope: opts.rope points here */
    int rank; /* of the query file: outputs mirror it */
    attn_dtype dtype;  /* --dtype */
    void *rounded[4];  /* q4, k4, v4, dout4 in --dtype, when not float32 */
    attn_sdpa_opts opts;
} sdpa_inputs;

static void free_inputs(sdpa_inputs *in)
{
    attn_array_free(&in->q);
    attn_array_free(&in->k);
    attn_array_free(&in->v);
    attn_array_free(&in->mask);
    attn_array_free(&in->dout);
    attn_array_free(&in->slopes);
    attn_array_free(&in->sinks);
    free(in->geometric);
    for (int i = 0; i < 4; ++i) free(in->rounded[i]);
}

/* The variant options; the ALiBi and sink files are checked by the library
 * against the query's shape (after --query is loaded). */
static int load_variants(const cli_command *cmd, const cli_args *a, sdpa_inputs *in)
{
    if (!cli_get_window(a, &in->opts.window) || !cli_get_float(a, "--softcap", &in->opts.softcap) ||
        !cli_get_float(a, "--dropout", &in->opts.dropout_p) ||
        !cli_get_u64(a, "--seed", &in->opts.dropout_seed))
        return CLI_USAGE;
    if (cli_get(a, "--softcap") && !(in->opts.softcap > 0.0f))
        return cli_usage_error(cmd, "--softcap: must be > 0, got '%s'", cli_get(a, "--softcap"));
    if (!(in->opts.dropout_p >= 0.0f && in->opts.dropout_p < 1.0f))
        return cli_usage_error(cmd, "--dropout: must be in [0, 1), got '%s'", cli_get(a, "--dropout"));
    long offset = 0;
    if (!cli_get_rope(a, &in->rope) || !cli_get_int(a, "--rope-offset", 0, LONG_MAX, &offset))
        return CLI_USAGE;
    if (in->rope.style != ATTN_ROPE_NONE) {
        in->opts.rope = &in->rope;
        in->opts.rope_offset = offset;
    } else if (cli_get(a, "--rope-offset")) {
        return cli_usage_error(cmd, "--rope-offset: only with --rope neox|gptj");
    }
    const char *slopes = cli_get(a, "--alibi-slopes");
    if (slopes && !strcmp(slopes, "geometric")) {
        const int64_t H = in->q4.shape[1];
        in->geometric = malloc((size_t)(H > 0 ? H : 1) * sizeof(float));
        if (!in->geometric) {
            fprintf(stderr, "attn %s: --alibi-slopes: out of memory\n", cmd->name);
            return CLI_FAIL;
        }
        attn_alibi_slopes(H > 0 ? H : 1, in->geometric, NULL);
        in->slopes_t = attn_tensor_1d(in->geometric, H);
        in->opts.alibi_slopes = &in->slopes_t;
    } else if (slopes) {
        int rc = cli_load_npy(slopes, &in->slopes);
        if (rc) return rc;
        in->opts.alibi_slopes = &in->slopes.t;
    }
    const char *sinks = cli_get(a, "--sinks");
    if (sinks) {
        int rc = cli_load_npy(sinks, &in->sinks);
        if (rc) return rc;
        in->opts.sinks = &in->sinks.t;
    }
    return CLI_OK;
}


/* Output tensor of the query's rank with the given 4-D shape's trailing dims. */
static attn_tensor mirror(float *data, attn_dtype dt, int rank, int64_t b, int64_t h, int64_t n,
                          int64_t d)
{
    const int64_t full[4] = {b, h, n, d};
    int64_t shape[4];
    int nd = rank - (d < 0); /* d < 0: a 3-D (B,H,N) quantity */
    int first = (d < 0 ? 3 : 4) - nd;
    for (int i = 0; i < nd; ++i) shape[i] = full[first + i];
    return attn_tensor_make(data, dt, nd, shape);
}

/* A 4-D result of dtype dt in a float buffer, as written (cli_result_dtype). */
static attn_tensor result(float *data, attn_dtype dt, int rank, int64_t b, int64_t h, int64_t n,
                          int64_t d)
{
    return mirror(data, cli_result_dtype(data, b * h * n * d, dt), rank, b, h, n, d);
}

/* Adds the outputs named by options[i] (those given) to o. */
static int add_outputs(cli_outputs *o, const cli_args *a, const char *const *options, int n,
                       int *index)
{
    int rc = CLI_OK;
    for (int i = 0; i < n && rc == CLI_OK; ++i)
        rc = cli_outputs_add(o, options[i], cli_get(a, options[i]), &index[i]);
    return rc;
}

/* Writes every output that was asked for, then commits them together. */
static int save_outputs(cli_outputs *o, const int *index, const attn_tensor *ts, int n)
{
    int rc = CLI_OK;
    for (int i = 0; i < n && rc == CLI_OK; ++i) rc = cli_outputs_npy(o, index[i], &ts[i]);
    return rc ? rc : cli_outputs_commit(o);
}

/* --precision exact|bf16 into opts->precision. */
static int parse_precision(const cli_command *cmd, const cli_args *a, attn_sdpa_opts *opts)
{
    const char *text = cli_get(a, "--precision");
    if (!text || !strcmp(text, "exact")) return CLI_OK;
    if (strcmp(text, "bf16") != 0)
        return cli_usage_error(cmd, "--precision: expected exact or bf16, got '%s'", text);
    opts->precision = ATTN_PRECISION_BF16;
    return CLI_OK;
}

static int load_inputs(const cli_command *cmd, const cli_args *a, sdpa_inputs *in)
{
    const char *qp, *kp, *vp;
    if (!(qp = cli_require(a, "--query")) || !(kp = cli_require(a, "--key")) ||
        !(vp = cli_require(a, "--value")))
        return CLI_USAGE;
    in->opts = attn_sdpa_opts_default();
    if (!cli_get_causal(a, ATTN_CAUSAL_TOP_LEFT, &in->opts.causal) ||
        !cli_get_scale(a, &in->opts.scale) || !cli_get_threads(a, &in->opts.num_threads))
        return CLI_USAGE;
    if (cli_flag(a, "--reference")) in->opts.path = ATTN_PATH_REFERENCE;
    int prc = parse_precision(cmd, a, &in->opts);
    if (prc) return prc;

    int rc;
    if ((rc = cli_load_npy(qp, &in->q)) || (rc = cli_load_npy(kp, &in->k)) ||
        (rc = cli_load_npy(vp, &in->v)))
        return rc;
    in->rank = in->q.t.ndim;
    if (in->rank < 2 || in->rank > 4)
        return cli_usage_error(cmd, "--query: expected 2 to 4 dimensions, got %d", in->rank);
    if (!cli_as_4d(cmd, "--query", &in->q, in->rank, &in->q4) ||
        !cli_as_4d(cmd, "--key", &in->k, in->rank, &in->k4) ||
        !cli_as_4d(cmd, "--value", &in->v, in->rank, &in->v4))
        return CLI_USAGE;
    if (!cli_get_dtype(a, &in->dtype)) return CLI_USAGE;
    if (!cli_round_input(cmd->name, &in->q4, in->dtype, &in->rounded[0]) ||
        !cli_round_input(cmd->name, &in->k4, in->dtype, &in->rounded[1]) ||
        !cli_round_input(cmd->name, &in->v4, in->dtype, &in->rounded[2]))
        return CLI_FAIL;
    const char *mp = cli_get(a, "--attn-mask");
    if (mp) {
        if ((rc = cli_load_mask(mp, &in->mask))) return rc;
        in->opts.mask[0] = &in->mask.t;
    }
    return load_variants(cmd, a, in);
}

static int run_forward(int argc, char **argv)
{
    const cli_command *cmd = &cmd_sdpa;
    cli_args a;
    bool help;
    int rc = cli_parse(cmd, argc, argv, &a, &help);
    if (rc || help) return rc;
    if (!cli_require(&a, "--out")) return CLI_USAGE;

    sdpa_inputs in = {0};
    float *o = NULL, *lse = NULL, *w = NULL;
    static const char *const outputs[3] = {"--out", "--lse", "--attn-weights"};
    int index[3];
    cli_outputs outs;
    if ((rc = cli_outputs_begin(&outs, cmd))) return rc;
    if ((rc = add_outputs(&outs, &a, outputs, 3, index))) goto done;
    rc = load_inputs(cmd, &a, &in);
    if (rc) goto done;
    if (cli_flag(&a, "--bf16-dot")) in.opts.precision = ATTN_PRECISION_BF16;
    const int64_t B = in.q4.shape[0], H = in.q4.shape[1], Nq = in.q4.shape[2],
                  Nk = in.k4.shape[2], Dv = in.v4.shape[3];
    const char *w_path = cli_get(&a, "--attn-weights");
    o = cli_alloc_floats("sdpa", 4, B, H, Nq, Dv);
    lse = cli_alloc_floats("sdpa", 3, B, H, Nq);
    w = w_path ? cli_alloc_floats("sdpa", 4, B, H, Nq, Nk) : NULL;
    if (!o || !lse || (w_path && !w)) {
        rc = CLI_FAIL;
        goto done;
    }
    /* a 16-bit O fits the float buffer */
    attn_tensor o4 = attn_tensor_make(o, in.dtype, 4, (int64_t[]){B, H, Nq, Dv});
    attn_tensor l3 = attn_tensor_3d(lse, B, H, Nq), w4 = attn_tensor_4d(w, B, H, Nq, Nk);
    attn_error err = {0};
    if (attn_sdpa(&in.q4, &in.k4, &in.v4, &o4, &l3, w ? &w4 : NULL, &in.opts, &err) != ATTN_OK) {
        rc = cli_report_as(&a, &err, option_names);
        goto done;
    }
    attn_tensor ts[3] = {result(o, in.dtype, in.rank, B, H, Nq, Dv),
                         mirror(lse, ATTN_F32, in.rank, B, H, Nq, -1),
                         mirror(w, ATTN_F32, in.rank, B, H, Nq, Nk)};
    rc = save_outputs(&outs, index, ts, 3);
done:
    cli_outputs_end(&outs);
    free(o);
    free(lse);
    free(w);
    free_inputs(&in);
    return rc;
}

static int run_backward(int argc, char **argv)
{
    const cli_command *cmd = &cmd_sdpa_backward;
    cli_args a;
    bool help;
    int rc = cli_parse(cmd, argc, argv, &a, &help);
    if (rc || help) return rc;
    const char *do_path = cli_require(&a, "--grad-out");
    if (!do_path) return CLI_USAGE;
    static const char *const outputs[8] = {"--grad-query", "--grad-key",     "--grad-value",
                                           "--out",        "--lse",          "--attn-weights",
                                           "--grad-sinks", "--grad-attn-mask"};
    if (!cli_get(&a, outputs[0]) && !cli_get(&a, outputs[1]) && !cli_get(&a, outputs[2]) &&
        !cli_get(&a, outputs[6]) && !cli_get(&a, outputs[7]))
        return cli_usage_error(cmd, "nothing to write: give --grad-query, --grad-key, --grad-value, --grad-sinks or --grad-attn-mask");
    if (cli_get(&a, outputs[6]) && !cli_get(&a, "--sinks"))
        return cli_usage_error(cmd, "--grad-sinks: needs --sinks");
    if (cli_get(&a, outputs[7]) && !cli_get(&a, "--attn-mask"))
        return cli_usage_error(cmd, "--grad-attn-mask: needs --attn-mask");

    sdpa_inputs in = {0};
    float *owned[9] = {0};
    int index[8];
    cli_outputs outs;
    if ((rc = cli_outputs_begin(&outs, cmd))) return rc;
    if ((rc = add_outputs(&outs, &a, outputs, 8, index))) goto done;
    rc = load_inputs(cmd, &a, &in);
    if (rc) goto done;
    if ((rc = cli_load_npy(do_path, &in.dout))) goto done;
    if (!cli_as_4d(cmd, "--grad-out", &in.dout, in.rank, &in.dout4)) {
        rc = CLI_USAGE;
        goto done;
    }
    if (!cli_round_input(cmd->name, &in.dout4, in.dtype, &in.rounded[3])) {
        rc = CLI_FAIL;
        goto done;
    }
    const int64_t B = in.q4.shape[0], H = in.q4.shape[1], Nq = in.q4.shape[2],
                  Hkv = in.k4.shape[1], Nk = in.k4.shape[2], D = in.q4.shape[3],
                  Dv = in.v4.shape[3];
    const char *w_path = cli_get(&a, "--attn-weights");
    float *dq = cli_alloc_floats(cmd->name, 4, B, H, Nq, D),
          *dk = cli_alloc_floats(cmd->name, 4, B, Hkv, Nk, D),
          *dv = cli_alloc_floats(cmd->name, 4, B, Hkv, Nk, Dv),
          *o = cli_alloc_floats(cmd->name, 4, B, H, Nq, Dv),
          *lse = cli_alloc_floats(cmd->name, 3, B, H, Nq),
          *w = w_path ? cli_alloc_floats(cmd->name, 4, B, H, Nq, Nk) : NULL,
          *stats = cli_alloc_floats(cmd->name, 4, B, H, Nq, 2),
          *dsinks = cli_alloc_floats(cmd->name, 1, H);
    float *bufs[8] = {dq, dk, dv, o, lse, w, stats, dsinks};
    memcpy(owned, bufs, sizeof bufs);
    if (!dq || !dk || !dv || !o || !lse || (w_path && !w) || !stats || !dsinks) {
        rc = CLI_FAIL;
        goto done;
    }
    /* O and the gradients in --dtype (16-bit ones fit the float buffers) */
    const attn_dtype dt = in.dtype;
    attn_tensor dq4 = attn_tensor_make(dq, dt, 4, (int64_t[]){B, H, Nq, D}),
                dk4 = attn_tensor_make(dk, dt, 4, (int64_t[]){B, Hkv, Nk, D}),
                dv4 = attn_tensor_make(dv, dt, 4, (int64_t[]){B, Hkv, Nk, Dv}),
                o4 = attn_tensor_make(o, dt, 4, (int64_t[]){B, H, Nq, Dv}),
                l3 = attn_tensor_3d(lse, B, H, Nq), w4 = attn_tensor_4d(w, B, H, Nq, Nk);
    /* The backward reads the forward's exact row statistics, not the LSE. */
    attn_tensor st4 = attn_tensor_4d(stats, B, H, Nq, 2), ds1 = attn_tensor_1d(dsinks, H);
    in.opts.softmax_stats = &st4;
    attn_error err = {0};
    if (attn_sdpa(&in.q4, &in.k4, &in.v4, &o4, &l3, w ? &w4 : NULL, &in.opts, &err) != ATTN_OK) {
        rc = cli_report_as(&a, &err, option_names);
        goto done;
    }
    if (cli_get(&a, "--grad-sinks")) in.opts.grad_sinks = &ds1;
    /* d mask: the shape of the mask file (the library sums over what broadcasts) */
    attn_tensor dm = {0};
    if (cli_get(&a, "--grad-attn-mask")) {
        const attn_tensor *m = &in.mask.t;
        int64_t n = attn_tensor_numel(m);
        owned[8] = cli_alloc_floats(cmd->name, 1, n > 0 ? n : 1);
        if (!owned[8]) {
            rc = CLI_FAIL;
            goto done;
        }
        dm = attn_tensor_make(owned[8], ATTN_F32, m->ndim, m->shape);
        in.opts.grad_mask = &dm;
    }
    if (attn_sdpa_backward(&in.q4, &in.k4, &in.v4, &o4, &l3, &in.dout4, &dq4, &dk4, &dv4,
                           &in.opts, &err) != ATTN_OK) {
        rc = cli_report_as(&a, &err, option_names);
        goto done;
    }
    attn_tensor ts[8] = {result(dq, dt, in.rank, B, H, Nq, D),
                         result(dk, dt, in.rank, B, Hkv, Nk, D),
                         result(dv, dt, in.rank, B, Hkv, Nk, Dv),
                         result(o, dt, in.rank, B, H, Nq, Dv),
                         mirror(lse, ATTN_F32, in.rank, B, H, Nq, -1),
                         mirror(w, ATTN_F32, in.rank, B, H, Nq, Nk), ds1, dm};
    rc = save_outputs(&outs, index, ts, 8);
done:
    cli_outputs_end(&outs);
    for (int i = 0; i < 9; ++i) free(owned[i]);
    free_inputs(&in);
    return rc;
}

const cli_command cmd_sdpa = {
    .name = "sdpa",
    .summary = "scaled dot-product attention: softmax(Q Kᵀ · scale + mask) V",
    .usage = "--query Q.npy --key K.npy --value V.npy --out O.npy [options]",
    .details = sdpa_details,
    .options = sdpa_options,
    .run = run_forward,
};

const cli_command cmd_sdpa_backward = {
    .name = "sdpa-backward",
    .summary = "gradients of scaled dot-product attention with respect to Q, K and V",
    .usage = "--query Q.npy --key K.npy --value V.npy --grad-out dO.npy --grad-query dQ.npy ...",
    .details = sdpa_details,
    .options = backward_options,
    .run = run_backward,
};
