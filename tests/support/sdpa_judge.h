/*
 * sdpa_judge.h — runs one SDPA case on every path this machine has (the
 * reference path, the generic kernels and each SIMD ISA the CPU supports,
 * chosen through ATTN_ARCH) and judges every output and gradient with
 * the accuracy criterion against the float64 oracle and the naive float32
 * implementation of ref64_variants.h:
 *
 *   max|attn − ref64| <= 3·max|fp32 − ref64| + 1e-6·natural   (per element)
 *   and no NaN/inf where ref64 is finite (±inf must match exactly).
 *
 * Forward: out, lse, weights (optional), softmax_stats (when the library
 * accepts the option). Backward, in three modes:
 *   recompute  out = lse = NULL, no stats;
 *   stats      the forward's out and lse plus opts.softmax_stats (only when
 *              the forward accepted softmax_stats): exact, plain criterion;
 *   lse-only   the forward's out and lse without stats. attn.h documents this
 *              mode as exact only to ulp(lse)/2 relative in P, so each row
 *              gets the extra allowance that bound implies (see
 *              sdpa_judge.c, lse_only_extra); rows with huge |lse| (a mask of
 *              finfo.min) are thus judged by the documented bound.
 * Gradients: dq, dk, dv and grad_sinks (with sinks).
 */
#ifndef ATTN_SDPA_JUDGE_H
#define ATTN_SDPA_JUDGE_H

#include "attn.h"
#include "testutil.h"

#include <stdbool.h>
#include <stdint.h>

#define SJ_MAX_PATHS 4

typedef struct {
    const char *name;  /* "reference", "generic", "avx2", "avx512" */
    const char *arch;  /* ATTN_ARCH value, NULL = unset */
    attn_path path;
} sj_path;

/* Paths this machine runs: reference, generic, then each ISA the CPU has. */
int sj_paths(sj_path *out);
/* Sets ATTN_ARCH for a path (unset for the reference path). */
void sj_select(const sj_path *p);
/* Verifies attn_isa() matches each fused path (one check per path). */
void sj_check_paths(tu_group *g);

typedef struct {
    int64_t B, Hq, Hkv, Nq, Nk, D, Dv;
    float scale; /* as passed (0 = 1/sqrt(D)) */
    attn_causal causal;
    const attn_tensor *mask[ATTN_SDPA_MAX_MASKS];
    /* variants */
    attn_window window;
    float softcap;
    const double *alibi; /* alibi_ndim 1: (Hq); 2: (B,Hq) */
    int alibi_ndim;
    const double *sinks; /* (Hq) */
    float dropout_p;
    uint64_t dropout_seed, dropout_offset;
    const uint8_t *keep; /* (B,Hq,Nq,Nk) dropout keep mask the oracle uses */
    /* data: contiguous float64 holding float32 values */
    const double *q, *k, *v, *dout;
    const uint8_t *rows; /* (Nq) compare only these query rows (forward only) */
    bool weights;        /* request and judge the weights output */
    bool backward;
    bool modes_all;      /* backward in all three modes (else recompute + stats/lse) */
    int threads;         /* 0 -> 2 */
    bool bnhd;           /* q/k/v/out as (B,N,H,D) buffers viewed transposed */
} sj_case;

typedef struct {
    int64_t checks, failures;
    bool unsupported; /* some call answered ATTN_ERR_UNSUPPORTED */
    double worst_ratio;
} sj_result;

/* Runs the case on every path; each failing quantity is one tu_group_fail
 * line carrying `desc` (put the seed/replay command in it), each passing
 * (path, call) one pass. */
sj_result sj_run(tu_group *g, const sj_case *c, const char *desc);

/* Resolved scale the library uses: scale, or 1/sqrt(D) in float. */
double sj_scale(const sj_case *c);

/* A float32 tensor (contiguous) holding the given float64 values. */
void sj_tensor_from(tu_tensor *t, int ndim, const int64_t *shape, const double *values);

/* ------------------------------------------------- building and naming cases */

/* "none", "top-left" or "bottom-right". */
const char *sj_causal_name(attn_causal c);
/* n float32-rounded mag·N(0,1) draws from r, in order, in a new float64
 * array (free it). */
double *sj_random_normal(int64_t n, double mag, tu_rng *r);
/* Keys hidden from every row of every query head sharing them (by c's
 * causality, window and masks) get NaN, +inf or -inf (one draw from r per
 * key, in (b, kv head, key) order) in every element of k (B,Hkv,Nk,D) and v
 * (B,Hkv,Nk,Dv): values a kernel must never read. */
void sj_poison_hidden_keys(const sj_case *c, double *k, double *v, tu_rng *r);
/* Random score variants, drawn from r in this order: a window (chance 0.2;
 * each side unbounded with chance 0.3, else 0..max_left / 0..max_right), a
 * softcap (chance 0.15, in [1, 20)), ALiBi slopes (chance 0.2: *alibi 1 or 2,
 * the suite's two slope shapes, else 0) and sinks (chance 0.15). */
void sj_random_variants(tu_rng *r, int64_t max_left, int64_t max_right, attn_window *window,
                        float *softcap, int *alibi, bool *sinks);
/* "PROG: MODE mode, seed 0x..., paths: reference generic ..." (flushed). */
void sj_print_header(const char *prog, const char *mode, uint64_t seed);

#endif
