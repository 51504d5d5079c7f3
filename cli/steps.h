/*
 * steps.h — the five steps of attention (Project, Score, Scale, Normalize,
 * Aggregate) on a small input, shared by `attn explain` and `attn heatmap`.
 *
 * Loads X and the projection weights named on the command line, projects
 * locally (a plain float32 matmul, so each intermediate can be shown), and
 * runs every head through the library: attn_sdpa gives the softmax weights
 * and head outputs, attn_mha_forward the final multi-head output whenever
 * the weights form an nn.MultiheadAttention module. The library's per-head
 * weights are compared with the ones shown, so what is displayed is what
 * the library computed.
 *
 * Weight layout: everything is stored in the seeds' "X @ W" orientation,
 * W_Q (d_model, H·d_k); a torch state_dict's in_proj_weight rows are
 * transposed into it.
 */
#ifndef ATTN_CLI_STEPS_H
#define ATTN_CLI_STEPS_H

#include "cli.h"

#include <stdbool.h>
#include <stdint.h>

/* The options that choose X and the weights (for a cli_option table). */
#define STEPS_INPUT_OPTIONS                                                                    \
    {"--x", "X", "input embeddings, one row per token: X.npy or inline \"1,2,3;3,3,2\""},      \
    {"--tokens", "WORDS", "token labels: \"the hunter saw a duck\" (or comma-separated)"},     \
    {"--weights", "W.safetensors", "W_Q, W_K, W_V [, W_O] (X @ W) or a torch MHA state_dict"}, \
    {"--wq", "M", "W_Q (d_model, H*d_k), inline or .npy"},                                     \
    {"--wk", "M", "W_K (d_model, H*d_k), inline or .npy"},                                     \
    {"--wv", "M", "W_V (d_model, H*d_v), inline or .npy"},                                     \
    {"--wo", "M", "W_O (H*d_v, d_out), optional output projection"},                           \
    {"--seed", "S", "random weights (attn_mha_init), and X ~ N(0,1) if no --x"},               \
    {"--d-model", "D", "width of the random X (default 4)"},                                   \
    {"--heads", "H", "number of heads (default 1)"},                                           \
    {"--causal", "[ALIGN]", "token i attends only to tokens j <= i (either alignment: L = S)"},  \
    {"--scale", "S", "multiply the scores by S instead of 1/sqrt(d_k)"}

/* Help paragraph describing the options above. */
#define STEPS_INPUT_DETAILS                                                                     \
    "Weights, in the seeds' X @ W layout (Q = X W_Q):\n"                                        \
    "  --weights FILE   W_Q, W_K, W_V and optionally W_O, like\n"                               \
    "                   examples/numpy_seed42.safetensors; or a torch\n"                        \
    "                   nn.MultiheadAttention state_dict (in_proj_weight,\n"                   \
    "                   in_proj_bias, out_proj.weight, out_proj.bias), used as\n"              \
    "                   torch does: Q = X in_proj_weight[:E]^T + in_proj_bias[:E],\n"          \
    "                   output = concat(heads) out_proj.weight^T + out_proj.bias.\n"           \
    "  --wq --wk --wv [--wo]   the matrices inline or as .npy files.\n"                         \
    "  --seed S         an nn.MultiheadAttention without biases initialised by\n"              \
    "                   attn_mha_init(S) (xavier-uniform in_proj); W_O only\n"                 \
    "                   with --heads > 1 (single-head attention has none).\n"                  \
    "With H heads, head h uses columns h*d_k .. (h+1)*d_k-1 of Q, K and V.\n"                   \
    "Inline matrices: rows separated by ';', values by ',' (\"1,2,3;3,3,2\"),\n"               \
    "or numpy's [[1,2,3],[3,3,2]]."

typedef struct {
    /* configuration */
    int64_t n;        /* tokens: rows of X */
    int64_t d_model;  /* columns of X */
    int64_t heads;
    int64_t d_k, d_v; /* per head */
    int64_t d_out;    /* columns of the final output */
    float scale;      /* multiplies Q_h K_hᵀ */
    bool default_scale;
    bool causal;
    bool torch_layout;   /* weights came from a torch state_dict */
    bool random_x;
    char source[600];    /* where the weights came from, for the header */

    /* inputs, C order */
    float *x;            /* (n, d_model) */
    float *wq, *wk, *wv; /* (d_model, H·d_k), (d_model, H·d_k), (d_model, H·d_v) */
    float *bq, *bk, *bv; /* (H·d_k) ... or NULL */
    float *wo, *bo;      /* (H·d_v, d_out) and (d_out), or NULL: no output projection */
    attn_mha *module;    /* the same weights as a module, or NULL */
    char **tokens;       /* n labels, or NULL */
    int ntokens;

    /* results of steps_compute */
    float *q, *k, *v;    /* (n, H·d_k), (n, H·d_k), (n, H·d_v) */
    float *scores;       /* (H, n, n): Q_h K_hᵀ */
    float *scaled;       /* (H, n, n): scale · scores, -inf where masked */
    float *weights;      /* (H, n, n): softmax, from attn_sdpa */
    float *concat;       /* (n, H·d_v): head outputs side by side, from attn_sdpa */
    float *y;            /* (n, d_out): the final output (= concat without W_O) */
    bool y_from_module;  /* y came from attn_mha_forward */
    double check_diff;   /* max |attn_mha_forward's per-head weights - weights|, or -1 */
} steps;

/* Reads X, the weights and the options into s (zeroed first). Prints one
 * line and returns CLI_USAGE on bad input. */
int steps_load(const cli_command *cmd, const cli_args *a, steps *s);
/* Runs the computation. Returns CLI_OK, or prints and returns an exit code. */
int steps_compute(const cli_command *cmd, steps *s);
void steps_free(steps *s);

#endif
