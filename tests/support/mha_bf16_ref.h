/*
 * mha_bf16_ref.h — the plain bfloat16 baseline of MHA's accuracy contract
 * under ATTN_PRECISION_BF16 (README "bfloat16 products"): the MHA of
 * mha_ref64.h as a PyTorch user runs it with every tensor in bfloat16,
 * written from that description, not from the library. Same configuration,
 * parameter and input conventions as mha_ref64.h (float64 arrays holding
 * the values; they are rounded to bfloat16 first).
 *
 * Every linear layer is torch's bfloat16 addmm: products of bfloat16
 * values summed in float32 in k order (fmaf), the bias added in float32,
 * the result rounded to bfloat16. Forward:
 *   q, k, v = bf16(x·Wᵀ + b)   (k, v then get the bias_k/bias_v row and the
 *                               zero row, as mha_ref64.h)
 *   a = the attention of support/bf16_ref.h per head (P rounded to
 *       bfloat16, softmax in float32, a rounded to bfloat16)
 *   out = bf16(a·Woᵀ + bo)
 * Backward (autograd through the same graph, each gradient a bfloat16
 * tensor): da = bf16(dout·Wo), dWo = bf16(doutᵀ·a), dbo = bf16(Σ dout);
 * dq, dk, dv from bf16_backward; the appended rows' gradients summed over
 * the batch in float32 and rounded; dW = bf16(dᵀ·x), db = bf16(Σ d) and
 * dx = bf16(d·W) for each projection (self-attention: dx = bf16(dq·Wq +
 * dk·Wk + dv·Wv) in one float32 sum, the packed in_proj's one matmul).
 */
#ifndef ATTN_MHA_BF16_REF_H
#define ATTN_MHA_BF16_REF_H

#include "mha_ref64.h"

/* out (B,L,E). */
void mhabf_forward(const mha64_config *c, const mha64_params *p, const mha64_inputs *in,
                   double *out);

/* As mha64_backward: every non-NULL array of g and dquery, dkey, dvalue
 * overwritten. */
void mhabf_backward(const mha64_config *c, const mha64_params *p, const mha64_inputs *in,
                    const double *dout, mha64_params *g, double *dquery, double *dkey,
                    double *dvalue);

#endif
