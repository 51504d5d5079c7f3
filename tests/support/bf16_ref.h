/*
 * bf16_ref.h — the plain bfloat16 baseline of the accuracy contract of
 * ATTN_PRECISION_BF16 (README "bfloat16 products"): SDPA as a PyTorch user
 * writes it in bfloat16, written from that description, not from the
 * library. Same problem (rv_problem, every variant) and array conventions
 * as ref64_variants.h; inputs are rounded to bfloat16 first.
 *
 * Forward, per row: S = Q·Kᵀ with float32 accumulation (sequential fmaf),
 * x = scale·S, softcap, ALiBi and bias in float32, softmax in float32 (max
 * subtracted, the sink in the denominator), P rounded to bfloat16 (after
 * dropout's factor), out = P·V with float32 accumulation, rounded to
 * bfloat16; lse = m + log Z in float32.
 * Backward (autograd through the same graph, P kept in float32 for the
 * softmax backward): dV = bf16(P∘Z)ᵀ·dO, dP = (dO·Vᵀ)∘Z, R = Σ P·dP,
 * dS = P∘(dP - R) (times 1 - tanh² under softcap), dQ = scale·bf16(dS)·K,
 * dK = scale·bf16(dS)ᵀ·Q, all float32-accumulated, each gradient rounded to
 * bfloat16 at the end; dsinks = -Σ P_sink·R in float32.
 */
#ifndef ATTN_BF16_REF_H
#define ATTN_BF16_REF_H

#include "ref64_variants.h"

/* x rounded to bfloat16 (to nearest even), as a double. */
double bf16_round(double x);

void bf16_forward(const rv_problem *p, const double *q, const double *k, const double *v,
                  double *out, double *lse);
void bf16_backward(const rv_problem *p, const double *q, const double *k, const double *v,
                   const double *dout, double *dq, double *dk, double *dv);

#endif
