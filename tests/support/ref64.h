/*
 * ref64.h — an independent float64 oracle for scaled dot-product attention,
 * forward and backward, written from the math (not from the library), plus
 * a central finite-difference helper that proves its backward.
 *
 * All arrays are contiguous, C order, float64:
 *   q    (B, Hq,  Nq, D)        k  (B, Hkv, Nk, D)     v (B, Hkv, Nk, Dv)
 *   out  (B, Hq,  Nq, Dv)       lse (B, Hq, Nq)         weights (B, Hq, Nq, Nk)
 *   bias (B, Hq,  Nq, Nk)       additive score bias, -inf = blocked (optional)
 * Query head h reads key/value head h / (Hq / Hkv).
 *
 * Math, per query row i of head h:
 *   s_ij = scale · q_i·k_j + bias_ij     for keys j visible under causality
 *   s_ij = -inf                          otherwise
 *   top-left causal:     j visible iff j <= i
 *   bottom-right causal: j visible iff j <= i + Nk - Nq
 *   P_ij = exp(s_ij - m_i) / Σ_l exp(s_il - m_i),  m_i = max_j s_ij
 *   lse_i = m_i + log Σ_l exp(s_il - m_i),  out_i = Σ_j P_ij v_j
 *   a row with every s_ij = -inf: P_i = 0, lse_i = -inf, out_i = 0.
 * Backward of the loss L with dL/dout = dout:
 *   dv_j  = Σ_{h in group, i} P_ij dout_i
 *   dP_ij = dout_i · v_j
 *   dS_ij = P_ij (dP_ij - Σ_l P_il dP_il)
 *   dq_i  = scale Σ_j dS_ij k_j,   dk_j = scale Σ_{h in group, i} dS_ij q_i
 */
#ifndef ATTN_REF64_H
#define ATTN_REF64_H

#include "attn.h"

#include <stdint.h>

typedef struct {
    int64_t B, Hq, Hkv, Nq, Nk, D, Dv;
    double scale;       /* the scale actually used (resolve the default first) */
    attn_causal causal;
    const double *bias; /* (B,Hq,Nq,Nk) or NULL */
} ref64_sdpa;

/* Adds one mask, broadcast PyTorch-style (aligned from the right, size-1
 * dims repeat) to (B,Hq,Nq,Nk), into bias: a bool mask adds -inf where it is
 * false (false = may not attend), a float32 mask adds its value. Returns
 * false (bias untouched) if the mask does not broadcast. */
bool ref64_add_mask(double *bias, int64_t B, int64_t Hq, int64_t Nq, int64_t Nk,
                    const attn_tensor *mask);

/* Whether causality lets query row i see key j. */
bool ref64_causal_visible(attn_causal causal, int64_t Nq, int64_t Nk, int64_t i, int64_t j);

/* Forward. lse and weights may be NULL. */
void ref64_sdpa_forward(const ref64_sdpa *p, const double *q, const double *k, const double *v,
                        double *out, double *lse, double *weights);

/* Backward (overwrites dq, dk, dv; any may be NULL). */
void ref64_sdpa_backward(const ref64_sdpa *p, const double *q, const double *k, const double *v,
                         const double *dout, double *dq, double *dk, double *dv);

/*
 * Error magnitudes for comparing float32 results with this oracle: for each
 * output element, the same sum with every term replaced by its absolute
 * value (the condition of that sum), given the forward probabilities P
 * (weights). A float32 computation of element x has error of order
 * eps · (score magnitude) · mag(x). Any output pointer may be NULL.
 *   out_mag_i,d = Σ_j P_ij |v_jd|
 *   dv_mag_j,d  = Σ_{h,i} P_ij |dout_id|
 *   dq_mag_i,d  = scale Σ_j P_ij (|dP|_ij + A_i) |k_jd|
 *   dk_mag_j,d  = scale Σ_{h,i} P_ij (|dP|_ij + A_i) |q_id|
 *   with |dP|_ij = Σ_d |dout_id v_jd| and A_i = Σ_l P_il |dP|_il.
 */
void ref64_sdpa_magnitudes(const ref64_sdpa *p, const double *q, const double *k,
                           const double *v, const double *dout, const double *weights,
                           double *out_mag, double *dq_mag, double *dk_mag, double *dv_mag);

/* Largest |score| contribution over visible (i, j): scale · Σ_d |q_id k_jd|
 * + |bias_ij| (finite biases only). Sizes the float32 rounding of scores. */
double ref64_sdpa_score_magnitude(const ref64_sdpa *p, const double *q, const double *k);

/* Σ out ∘ dout: the scalar loss whose gradients ref64_sdpa_backward returns. */
double ref64_sdpa_loss(const ref64_sdpa *p, const double *q, const double *k, const double *v,
                       const double *dout);

/* Central finite differences: grad[i] = (f(x + h e_i) - f(x - h e_i)) / 2h
 * for i < n, where f reads x through ctx. x is restored afterwards. */
void ref64_fd_gradient(double (*f)(void *ctx), void *ctx, double *x, int64_t n, double h,
                       double *grad);

#endif
