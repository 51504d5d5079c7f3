/*
 * ref64_variants.h — float64 oracle AND naive float32 implementation of SDPA
 * with every score variant of attn_sdpa_opts (the stress criterion,
 * the variants), written from the documented formulas in attn.h, not
 * from the library.
 *
 * Arrays are contiguous C order, float64 (the naive float32 path rounds every
 * input to float and computes in float, then widens its results):
 *   q (B,Hq,Nq,D)  k (B,Hkv,Nk,D)  v (B,Hkv,Nk,Dv)  out/dout (B,Hq,Nq,Dv)
 *   lse (B,Hq,Nq)  weights (B,Hq,Nq,Nk)  stats (B,Hq,Nq,2) = (m, ll)
 *
 * Score of query i, key j, head h (batch b), in this order:
 *   x = scale·(q_i·k_j)
 *   x = cap·tanh(x / cap)                          softcap > 0
 *   x = x − slope_{b,h}·|i + Nk − Nq − j|          alibi != NULL
 *   x = x + bias_{b,h,i,j}                         bias != NULL (-inf = hidden)
 * Key j is hidden (selected away: never read, never multiplied by zero) by
 * causality, the window (i+Nk−Nq−left <= j <= i+Nk−Nq+right, -1 unbounded)
 * and bias = -inf (bool false or a -inf float mask).
 *   m   = max(max_visible x, sink_h)
 *   Z   = exp(sink_h − m) + Σ_visible exp(x − m)
 *   P_j = exp(x_j − m) / Z,  lse = m + log Z (= sink_h if nothing is visible
 *         but a sink is; -inf, P = 0 and out = 0 if neither)
 *   out = Σ_j P_j·keep_j/(1−p)·v_j       (keep = dropout keep mask, 1 if NULL)
 * Backward (loss with dL/dout = dout):
 *   dv_j  += P_j·keep_j/(1−p)·dout_i
 *   dP_j   = keep_j/(1−p)·(dout_i·v_j),  R = Σ_j P_j dP_j
 *   dx_j   = P_j (dP_j − R)               (gradient w.r.t. the final score)
 *   dsink_h += −P_sink·R,  P_sink = exp(sink − m)/Z
 *   dx0_j  = dx_j·(1 − tanh²(x0_j/cap))    (softcap; x0 = scale·q·k)
 *   dq_i  += scale Σ_j dx0_j k_j,  dk_j += scale dx0_j q_i
 */
#ifndef ATTN_REF64_VARIANTS_H
#define ATTN_REF64_VARIANTS_H

#include "attn.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    int64_t B, Hq, Hkv, Nq, Nk, D, Dv;
    double scale;          /* the scale actually used (resolve 0 -> 1/sqrt(D) first) */
    attn_causal causal;
    attn_window window;    /* enabled / left / right as in attn.h */
    const double *bias;    /* (B,Hq,Nq,Nk) summed masks, -inf hidden; NULL: none */
    double softcap;        /* 0: off */
    const double *alibi;   /* (B,Hq) slopes (broadcast (Hq) yourself); NULL: off */
    const double *sinks;   /* (Hq); NULL: off */
    double dropout_p;      /* used only with keep */
    const uint8_t *keep;   /* (B,Hq,Nq,Nk) 1 = kept; NULL: no dropout */
    const uint8_t *rows;   /* (Nq) forward only: compute just rows with rows[i] != 0 */
} rv_problem;

/* Whether key j is visible to row i of (b,h) (causal, window, bias -inf). */
bool rv_visible(const rv_problem *p, int64_t b, int64_t h, int64_t i, int64_t j);
/* Number of (b,h,i) rows that see no key. */
int64_t rv_empty_rows(const rv_problem *p);

/* Float64 oracle. Any output may be NULL. Rows skipped by p->rows are left
 * untouched. */
void rv_forward64(const rv_problem *p, const double *q, const double *k, const double *v,
                  double *out, double *lse, double *weights, double *stats);
/* dq/dk/dv/dsinks overwritten (any may be NULL); dsinks has Hq entries. */
void rv_backward64(const rv_problem *p, const double *q, const double *k, const double *v,
                   const double *dout, double *dq, double *dk, double *dv, double *dsinks);
/* Σ out∘dout, the loss whose gradient rv_backward64 returns (for finite
 * differences). */
double rv_loss64(const rv_problem *p, const double *q, const double *k, const double *v,
                 const double *dout);

/* The naive float32 implementation (what plain torch float32 computes:
 * matmul, scale, tanh cap, bias, masked_fill(-inf), softmax with max
 * subtraction, dropout, matmul; autograd's chain rule with P stored), all in
 * float, sequential sums. Same signatures. */
void rv_forward32(const rv_problem *p, const double *q, const double *k, const double *v,
                  double *out, double *lse, double *weights, double *stats);
void rv_backward32(const rv_problem *p, const double *q, const double *k, const double *v,
                   const double *dout, double *dq, double *dk, double *dv, double *dsinks);
/* The same naive float32 implementation with every multiply-add fused
 * (fmaf), as FMA GEMMs (torch's CPU float32 matmul, the SIMD kernels) round. */
void rv_forward32fma(const rv_problem *p, const double *q, const double *k, const double *v,
                     double *out, double *lse, double *weights, double *stats);
void rv_backward32fma(const rv_problem *p, const double *q, const double *k, const double *v,
                      const double *dout, double *dq, double *dk, double *dv, double *dsinks);

/*
 * "natural" magnitudes of the accuracy criterion, per element (any may be NULL):
 *   out_e      max|V|                         (over finite V)
 *   lse_i      1 + |m_i| + S_i                (m_i the row max, 0 for empty rows;
 *                                             S_i = max_j scale·Σ_d|q_id k_jd|, the
 *                                             size the row's logits are built from)
 *   weights_ij max_l P_il · (1 + S_i)
 *   dv_je      Σ_{h,i} Pd_ij·|dout_ie|         (Pd = P·keep/(1−p))
 *   dq_id      scale·|dout_i|_1·max|V|·max|K|/(1−p)          (per row)
 *   dk_jd      scale·max|V|·max|Q|·Σ_{h,i} P_ij·|dout_i|_1/(1−p)
 *   dsinks_h   Σ_{b,i} P_sink,i·|dout_i|_1·max|V|
 * (The maxima skip non-finite entries: hidden NaN keys do not count.)
 */
void rv_natural(const rv_problem *p, const double *q, const double *k, const double *v,
                const double *dout, double *nat_out, double *nat_lse, double *nat_w,
                double *nat_dq, double *nat_dk, double *nat_dv, double *nat_dsinks);

/* Per-row relative bound of P computed from a rounded lse (attn.h: "relative
 * error up to ulp(lse)/2"): returns exp(ulp(float(lse))/2) − 1 (inf when the
 * lse is so large that the bound says nothing; 0 for an lse of -inf). */
double rv_lse_rel_bound(double lse);

/*
 * The criterion: element e passes when
 *   got finite where ref is finite, got == ref where ref is ±inf, and
 *   |got_e − ref_e| <= 3·M + 1e-6·nat_e + extra_e,
 *   M = max over finite (ref, fp32) pairs of |fp32 − ref| (one per tensor),
 *   taken over both naive float32 realisations when fp32b is given (plain
 *   and FMA-fused multiply-adds: one realisation's max error is a noisy
 *   estimate of float32's, and in large-logit corners, where a few logits'
 *   rounding dominates, the two differ by more than 3x).
 * extra (optional) is an additional per-element allowance (documented bounds).
 * Elements with skip[e] != 0 (optional) are not compared.
 */
typedef struct {
    bool ok;
    int64_t n, bad, nonfinite;
    double M;             /* max |fp32 − ref| */
    double max_err;       /* max |got − ref| over finite pairs */
    double worst_ratio;   /* max err / allowance */
    int64_t worst;        /* element index */
    double worst_got, worst_ref, worst_tol, worst_fp32;
} rv_cmp;

bool rv_criterion(const double *got, const double *ref, const double *fp32, const double *fp32b,
                  const double *nat, const double *extra, const uint8_t *skip, int64_t n,
                  rv_cmp *res);
/* "name: bad/n, worst [idx] got .. ref .. fp32 .. |err| .. tol .. (M ..)" */
void rv_cmp_describe(const rv_cmp *c, const char *name, char *buf, size_t size);

/* ALiBi slopes of the paper (Press et al.), computed in float64 from the
 * formula attn.h documents: n = largest power of two <= H; slope_h =
 * 2^(-8(h+1)/n) for h < n, then every other slope of the 2n sequence
 * (2^(-8(2(h-n)+1)/(2n))). */
void rv_alibi_slopes64(int64_t heads, double *out);

#endif
