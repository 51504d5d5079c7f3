/*
 * mha_ref64.h — an independent float64 oracle for multi-head attention,
 * forward and backward, written from torch.nn.MultiheadAttention's
 * documented math (torch/nn/functional.py multi_head_attention_forward),
 * not from the library. Batch-first; unbatched input is B = 1.
 *
 * All arrays are contiguous, C order, float64. E = embed dim, H heads,
 * hd = E / H, S' = S + add_bias_kv + add_zero_attn.
 *
 *   q = query·Wqᵀ + bq             (B,L,E)
 *   k = key·Wkᵀ + bk               (B,S,E), then the row bias_k (add_bias_kv),
 *                                   then a zero row (add_zero_attn)  -> (B,S',E)
 *   v likewise with Wv, bv, bias_v
 *   for head h (columns h·hd .. h·hd+hd-1 of q, k, v):
 *     s_ij = q_i·k_j / sqrt(hd) + mask_ij
 *     P_ij = softmax_j(s_ij)  (a row with every s_ij = -inf: P_i = 0)
 *     a_i  = Σ_j P_ij v_j
 *   out = a·Woᵀ + bo                (B,L,E)
 *
 * mask_ij for key j < S is the sum of: key_padding_mask[b,j] and attn_mask
 * [(b·H+h),i,j] or [i,j] (bool true = -inf, float added), and -inf when
 * causal and j > i. Appended keys (j >= S) have mask 0.
 */
#ifndef ATTN_MHA_REF64_H
#define ATTN_MHA_REF64_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    int64_t E, H, kdim, vdim;
    bool bias, add_bias_kv, add_zero_attn;
} mha64_config;

/* Parameters (or their gradients). Absent ones are NULL. */
typedef struct {
    double *wq, *wk, *wv; /* (E,E), (E,kdim), (E,vdim) */
    double *bq, *bk, *bv; /* (E) each, when bias */
    double *bias_k, *bias_v; /* (E) each, when add_bias_kv */
    double *wo;           /* (E,E) */
    double *bo;           /* (E), when bias */
} mha64_params;

typedef enum { MHA64_MASK_NONE = 0, MHA64_MASK_BOOL, MHA64_MASK_FLOAT } mha64_mask_kind;

typedef struct {
    int64_t B, L, S;
    const double *query; /* (B,L,E) */
    const double *key;   /* (B,S,kdim); NULL: self-attention, key = value = query */
    const double *value; /* (B,S,vdim) */
    mha64_mask_kind kpm_kind;
    const double *kpm; /* (B,S); bool masks as 0/1 */
    mha64_mask_kind am_kind;
    bool am_per_head;  /* (B·H,L,S) instead of (L,S) */
    const double *am;
    bool causal;
} mha64_inputs;

/* S' (keys after appending). */
int64_t mha64_src_len(const mha64_config *c, int64_t S);

/* out (B,L,E); weights (B,H,L,S') per head, or NULL. */
void mha64_forward(const mha64_config *c, const mha64_params *p, const mha64_inputs *in,
                   double *out, double *weights);

/* Gradients of Σ dout∘out: every non-NULL array of g (same presence as p)
 * and dquery (B,L,E), dkey (B,S,kdim), dvalue (B,S,vdim) are OVERWRITTEN
 * (any may be NULL). Self-attention: dquery is the shared input's total. */
void mha64_backward(const mha64_config *c, const mha64_params *p, const mha64_inputs *in,
                    const double *dout, mha64_params *g, double *dquery, double *dkey,
                    double *dvalue);

/* Points p into flat, a float64 copy of a module's flat parameter (or
 * gradient) buffer with the same offsets: the bridge from attn_mha's layout
 * to the oracle's parameters (absent ones NULL). */
struct attn_mha;
void mha64_map_params(struct attn_mha *m, double *flat, mha64_params *p);

/* Σ dout∘out. */
double mha64_loss(const mha64_config *c, const mha64_params *p, const mha64_inputs *in,
                  const double *dout);

#endif
