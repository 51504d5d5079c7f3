/* A validated SDPA call, resolved to plain pointers and element strides, and
 * the mask semantics every path shares (reference and fused read visibility
 * only through these functions, so masks mean the same thing everywhere). */
#ifndef ATTN_SDPA_PROBLEM_H
#define ATTN_SDPA_PROBLEM_H

#include "../core/internal.h"
#include "../kernels/kernels.h"

#include <math.h>

/* One mask broadcast to (B,Hq,Nq,Nk): broadcast dims have stride 0. */
typedef struct {
    const void *data;
    attn_dtype dtype; /* ATTN_BOOL: true = may attend; ATTN_F32: added */
    int64_t stride[4];
} sdpa_mask;

typedef struct {
    int64_t B, Hq, Hkv, Nq, Nk, D, Dv;
    int64_t group; /* Hq / Hkv */
    float scale;
    attn_causal causal;
    int nmask;
    sdpa_mask mask[ATTN_SDPA_MAX_MASKS];
    int threads;
    attn_path path;  /* as requested; sdpa.c resolves AUTO */
    void *workspace; /* caller's, or NULL */
    size_t workspace_size;

    /* Inputs (B,H,N,·) with element strides [b,h,n,d]. */
    const float *q, *k, *v;
    int64_t qs[4], ks[4], vs[4];
    /* Forward outputs; lse and w may be NULL. Backward reads o and lse. */
    float *o, *lse, *w;
    int64_t os[4], ls[3], ws[4];
    /* Backward: do in, dq/dk/dv out (any may be NULL). */
    const float *dout;
    float *dq, *dk, *dv;
    int64_t dos[4], dqs[4], dks[4], dvs[4];
} sdpa_problem;

/* Keys [0, end) can be visible to query row i under causality; keys at or
 * past end never are. */
static inline int64_t sdpa_causal_end(const sdpa_problem *p, int64_t i)
{
    int64_t end;
    switch (p->causal) {
    case ATTN_CAUSAL_TOP_LEFT: end = i + 1; break;
    case ATTN_CAUSAL_BOTTOM_RIGHT: end = i + 1 + p->Nk - p->Nq; break;
    default: end = p->Nk; break;
    }
    return end < 0 ? 0 : end > p->Nk ? p->Nk : end;
}

/* Additive bias the masks put on score (b,h,i,j): 0, a float, or -inf. */
static inline float sdpa_mask_bias(const sdpa_problem *p, int64_t b, int64_t h, int64_t i,
                                   int64_t j)
{
    float bias = 0.0f;
    for (int m = 0; m < p->nmask; ++m) {
        const sdpa_mask *mk = &p->mask[m];
        int64_t off = b * mk->stride[0] + h * mk->stride[1] + i * mk->stride[2] +
                      j * mk->stride[3];
        if (mk->dtype == ATTN_BOOL) {
            if (!((const uint8_t *)mk->data)[off]) return -INFINITY;
        } else {
            bias += ((const float *)mk->data)[off];
        }
    }
    return bias;
}

/* First query row that may see key j under causality (sdpa_causal_end(i) > j
 * exactly for i >= this); Nq when no row does. */
static inline int64_t sdpa_causal_first_row(const sdpa_problem *p, int64_t j)
{
    int64_t first;
    switch (p->causal) {
    case ATTN_CAUSAL_TOP_LEFT: first = j; break;
    case ATTN_CAUSAL_BOTTOM_RIGHT: first = j - (p->Nk - p->Nq); break;
    default: first = 0; break;
    }
    return first < 0 ? 0 : first > p->Nq ? p->Nq : first;
}

/*
 * Visibility of one tile of the fused path: query rows [i0, i0+mi) of head
 * (b, h) against keys [j0, j0+nj). Causality and the masks are read only
 * here (through sdpa_causal_end and the sdpa_mask strides, like
 * sdpa_mask_bias), so the fused path means what the reference means.
 */
typedef struct {
    int64_t cols;   /* max_r limit[r]: columns any row may see; 0 = skip the tile untouched */
    bool use_bias;  /* bias holds something other than 0 in visible columns */
    int64_t ldbias; /* row stride of bias: 0 when every row shares row 0 */
} sdpa_tile;

/*
 * limit[r] (mi entries): row r may see only columns c < limit[r] (causal
 * bound, tile edge, and trailing columns every mask hides).
 * bias: (mi, ld) scratch, ld >= nj rounded up to SDPA_MAX_NPAD; receives the
 * masks' additive bias (0 / float / -inf) when the problem has masks.
 */
sdpa_tile sdpa_plan_tile(const sdpa_problem *p, const sdpa_kernels *kern, int64_t b, int64_t h,
                         int64_t i0, int64_t mi, int64_t j0, int64_t nj, int32_t *limit,
                         float *bias, int64_t ld);

/* Resolves and validates a forward (dout == NULL) or backward call. */
attn_status sdpa_problem_init(sdpa_problem *p, const attn_tensor *q, const attn_tensor *k,
                              const attn_tensor *v, const attn_sdpa_opts *opts, attn_error *err);

/* True when a visible score of row (b,h,i) is NaN: a row the fused path
 * found empty may really be poisoned by NaN inputs, which must show as NaN
 * (as in torch) rather than as a masked row. Costs O(Nk·D); called only for
 * rows that saw no key. */
bool sdpa_row_sees_nan(const sdpa_problem *p, int64_t b, int64_t h, int64_t i);

/* The plain paths: the oracle. Need no workspace beyond what they allocate. */
attn_status sdpa_reference_forward(const sdpa_problem *p, attn_error *err);
attn_status sdpa_reference_backward(const sdpa_problem *p, attn_error *err);

/* The fused paths (forward.c, backward.c) with a kernel table. Workspace:
 * p->workspace if given (ATTN_ERR_WORKSPACE when smaller than what
 * sdpa_fused_*_workspace report), else allocated per call. */
attn_status sdpa_fused_forward(const sdpa_problem *p, const sdpa_kernels *kern, attn_error *err);
attn_status sdpa_fused_backward(const sdpa_problem *p, const sdpa_kernels *kern, attn_error *err);
/* Bytes the fused forward / backward need (false on size overflow). */
bool sdpa_fused_forward_workspace(const sdpa_problem *p, size_t *bytes);
bool sdpa_fused_backward_workspace(const sdpa_problem *p, size_t *bytes);

#endif
