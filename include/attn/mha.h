/*
 * attn/mha.h — multi-head attention with learned projections,
 * following torch.nn.MultiheadAttention.
 *
 * Part of libattn's public API; include <attn.h> for all of it. Conventions
 * (status codes, attn_error, strided views, backward overwrites inputs'
 * gradients) are described in attn/core.h.
 */
#ifndef ATTN_MHA_H
#define ATTN_MHA_H

#include "attn/sdpa.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --------------------------------------------------------------------- MHA */

/* torch.nn.MultiheadAttention(embed_dim, num_heads, bias, add_bias_kv,
 * add_zero_attn, kdim, vdim, batch_first=True). kdim/vdim 0 mean embed_dim. */
typedef struct {
    int64_t embed_dim;
    int64_t num_heads;
    int64_t kdim;
    int64_t vdim;
    bool bias;
    bool add_bias_kv;
    bool add_zero_attn;
    float dropout; /* torch's dropout: on the attention weights in training mode, [0, 1) */
} attn_mha_config;

typedef struct attn_mha attn_mha;

/* Allocates a module; parameters and gradients are zero until attn_mha_init
 * or attn_mha_param writes. */
attn_status attn_mha_create(const attn_mha_config *cfg, attn_mha **out, attn_error *err);
void attn_mha_free(attn_mha *m);
/* The module's configuration, with kdim/vdim resolved (never 0). */
const attn_mha_config *attn_mha_get_config(const attn_mha *m);

/* Initialise like torch (xavier_uniform_ in_proj, kaiming-uniform-style
 * out_proj.weight, zero biases, xavier_normal_ bias_k/bias_v), from a seeded
 * generator of attn's own (not torch's stream). */
void attn_mha_init(attn_mha *m, uint64_t seed);

/* Parameters under torch's state_dict names, in state_dict order:
 * in_proj_weight (3E,E) | q_proj_weight (E,E), k_proj_weight (E,kdim),
 * v_proj_weight (E,vdim); in_proj_bias (3E); bias_k (1,1,E); bias_v (1,1,E);
 * out_proj.weight (E,E); out_proj.bias (E). */
int attn_mha_num_params(const attn_mha *m);
/* i-th parameter: its name, a view of its value and of its gradient. */
attn_status attn_mha_param_at(attn_mha *m, int i, const char **name, attn_tensor *value,
                              attn_tensor *grad);
/* Look a parameter up by torch name. */
attn_status attn_mha_param(attn_mha *m, const char *name, attn_tensor *value,
                           attn_tensor *grad, attn_error *err);
/* All parameters (and gradients) as one contiguous float array, for optimizers. */
float *attn_mha_params_flat(attn_mha *m, size_t *count);
float *attn_mha_grads_flat(attn_mha *m, size_t *count);
void attn_mha_zero_grad(attn_mha *m);

/*
 * Masks follow torch.nn.MultiheadAttention (note: the opposite boolean
 * convention to SDPA):
 *   key_padding_mask (B,S) or (S) unbatched: ATTN_BOOL true = ignore that key;
 *                    ATTN_F32 added.
 *   attn_mask        (L,S) or (B·H,L,S): ATTN_BOOL true = NOT allowed;
 *                    ATTN_F32 added.
 *   causal           same as attn_mask = triu(ones(L,S), 1) (combined with any
 *                    attn_mask).
 * Keys appended by add_bias_kv / add_zero_attn are never masked.
 * weights, if non-NULL, receives (B,L,S') averaged over heads, or
 * (B,H,L,S') with per_head_weights; S' = S + add_bias_kv + add_zero_attn.
 * Unbatched inputs drop the leading B of every shape.
 */
typedef struct {
    const attn_tensor *key_padding_mask;
    const attn_tensor *attn_mask;
    bool causal;
    attn_tensor *weights;
    bool per_head_weights;
    int num_threads;
    attn_path path;
    float scale; /* multiplies each head's q·kᵀ, >= 0; 0 = 1/sqrt(embed_dim / num_heads) (torch) */
    /* torch's module.train(): apply the config's dropout, keyed by
     * dropout_seed (the backward must get the same seed to regenerate it). */
    bool training;
    uint64_t dropout_seed;
    /* Optional scratch, at least attn_mha_workspace_size bytes (for the
     * forward or the backward, as the call is), any alignment, not shared
     * with a concurrent call. Without it every call allocates its own, which
     * a loop calling again and again pays for in page faults each time. */
    void *workspace;
    size_t workspace_size;
    uint64_t reserved[3]; /* zero; room for future options */
    /* How the projections and the attention multiply (attn/sdpa.h's
     * attn_precision). ATTN_PRECISION_BF16: the in-projections, the
     * out-projection and their gradients (dX = dY·W, dW = dYᵀ·X) run on
     * bfloat16 operands with float32 accumulation on the matrix engine
     * (attn_engine()); the biases are added, and their gradients summed, in
     * float32; the attention is SDPA's ATTN_PRECISION_BF16. Inputs,
     * parameters and activations are rounded to bfloat16 as they are
     * packed; the outputs, gradients and activations between the steps stay
     * float32. Error: README "bfloat16 products" (at most twice a plain
     * bfloat16 implementation's plus a small slack, against a float64
     * oracle on the same bfloat16 inputs and parameters). Deterministic and
     * independent of the thread count on one engine. The packed operands
     * share the attention's part of the workspace (attn_mha_workspace_size
     * counts them). Where there is no engine ("f32") or on
     * ATTN_PATH_REFERENCE, the call is the exact one. (After reserved:
     * the fields before it keep their places from before it existed.) */
    attn_precision precision; /* 0 = ATTN_PRECISION_EXACT */
    uint32_t reserved32;      /* zero */
} attn_mha_opts;

attn_mha_opts attn_mha_opts_default(void);

/* Bytes of workspace attn_mha_forward (backward = false) or
 * attn_mha_backward (true) needs for these inputs and options: the
 * projections, the attention's output and scratch, and for the backward
 * the gradients in between (mask conversions and non-contiguous inputs are
 * still copied to buffers the call allocates). The backward's figure also
 * serves the forward. Checks the inputs as the call would. */
attn_status attn_mha_workspace_size(const attn_mha *m, const attn_tensor *query,
                                    const attn_tensor *key, const attn_tensor *value,
                                    bool backward, const attn_mha_opts *opts, size_t *bytes,
                                    attn_error *err);

/*
 * Forward, batch_first:
 *   query (B,L,E) or (L,E)
 *   key   (B,S,kdim), value (B,S,vdim)  — both NULL for self-attention (key =
 *         value = query)
 *   out   (B,L,E)
 * A query row that sees no key gives a zero attention output (then out_proj
 * bias), where torch returns NaN.
 */
attn_status attn_mha_forward(const attn_mha *m, const attn_tensor *query,
                             const attn_tensor *key, const attn_tensor *value,
                             attn_tensor *out, const attn_mha_opts *opts, attn_error *err);

/*
 * Backward. Same inputs as the forward, plus dout (B,L,E). Parameter
 * gradients ACCUMULATE into the module's gradients; dquery/dkey/dvalue (each
 * may be NULL) are OVERWRITTEN. For self-attention (key == value == NULL)
 * dquery receives the gradient of the one shared input and dkey/dvalue must
 * be NULL. The forward activations (projections, attention and its per-row
 * LSE) are recomputed rather than stored; workspace is O(B·L·E + B·S'·E)
 * plus mask copies. opts->weights and per_head_weights are ignored.
 *
 * Masks combine as additive floats (bool blocked = -inf) and are summed: the
 * rule of torch >= 2.0. torch 1.13 differs only for a float key_padding_mask
 * next to an attn_mask (it treats the padding mask as boolean, or drops it).
 */
attn_status attn_mha_backward(attn_mha *m, const attn_tensor *query, const attn_tensor *key,
                              const attn_tensor *value, const attn_tensor *dout,
                              attn_tensor *dquery, attn_tensor *dkey, attn_tensor *dvalue,
                              const attn_mha_opts *opts, attn_error *err);

#ifdef __cplusplus
}
#endif
#endif /* ATTN_MHA_H */
