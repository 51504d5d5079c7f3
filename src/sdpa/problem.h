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

    /* Variants (see attn_sdpa_opts). */
    bool window;
    int64_t window_left, window_right; /* -1: unbounded */
    const float *alibi;                /* slope of (b, h) at b*alibi_s[0] + h*alibi_s[1] */
    int64_t alibi_s[2];
    float softcap;                     /* 0: off */
    const float *sinks;                /* sink of head h at h*sinks_s */
    int64_t sinks_s;
    float *dsinks;                     /* backward output, h*dsinks_s */
    int64_t dsinks_s;
    float dropout_p;
    uint32_t dropout_keep;             /* keep when the 32-bit draw is >= this */
    float dropout_scale;               /* 1 / (1 - p) */
    uint64_t dropout_seed, dropout_offset;

    /* Inputs (B,H,N,·) with element strides [b,h,n,d]. Every path sees
     * float32 q, o and gradients (sdpa.c stages bfloat16/float16 tensors
     * through float32 copies, staging.c); K and V are float32 too (kt, vt)
     * except in the fused forward, which reads bfloat16/float16 K and V in
     * place and widens each tile as it packs it, and reads a 16-bit Q in
     * place too (then q16 holds it and q is NULL). qt: Q's dtype as given. */
    const float *q;
    const uint16_t *q16;
    attn_dtype qt;
    const void *k, *v;
    attn_dtype kt, vt;
    /* ATTN_PRECISION_BF16 asked for: the fused paths' products may run on
     * bfloat16 operands (kernels/bf16_engine.h), where an engine runs. */
    bool bf16_products;
    int64_t qs[4], ks[4], vs[4];
    /* Forward outputs; lse, w and stats may be NULL. Backward reads o, lse
     * and stats (row max and log-sum, preferred over lse when given). The
     * fused forward writes a 16-bit out in place (ot: then o16 holds it and
     * o is NULL), rounded as a staged copy would be. */
    float *o, *lse, *w, *stats;
    uint16_t *o16;
    attn_dtype ot;
    int64_t os[4], ls[3], ws[4], ss[4];
    /* Backward: do in, dq/dk/dv out (any may be NULL). */
    const float *dout;
    float *dq, *dk, *dv;
    int64_t dos[4], dqs[4], dks[4], dvs[4];
    /* Backward: the logits' gradient dX (B,Hq,Nq,Nk) for grad_mask, or NULL
     * (bias_grad.c). Every path writes each element once (0 where hidden). */
    float *dbias;
    int64_t dbs[4];
} sdpa_problem;

/* ------------------------------------------------------------ visibility
 * Which keys a query row sees and what is added to their scores: causal
 * alignments, the sliding window, ALiBi and the masks. The reference path,
 * the fused forward and backward and their tile skipping all ask here, so
 * every path means the same thing (visibility.c). */

/* Keys [*lo, *hi) that causality and the window let row i see (masks aside);
 * *lo == *hi when none. Both bounds are non-decreasing in i. */
static inline void sdpa_row_keys(const sdpa_problem *p, int64_t i, int64_t *lo, int64_t *hi)
{
    const int64_t diag = i + p->Nk - p->Nq; /* the bottom-right aligned diagonal */
    int64_t a = 0, e = p->Nk;
    if (p->causal == ATTN_CAUSAL_TOP_LEFT && i + 1 < e) e = i + 1;
    if (p->causal == ATTN_CAUSAL_BOTTOM_RIGHT && diag + 1 < e) e = diag + 1;
    /* Compared without forming diag ± window, which overflows for windows
     * near INT64_MAX: a window wider than the sequences bounds nothing. */
    if (p->window) {
        if (p->window_left >= 0 && p->window_left < diag - a) a = diag - p->window_left;
        if (p->window_right >= 0 && p->window_right < e - diag - 1) e = diag + p->window_right + 1;
    }
    if (a > p->Nk) a = p->Nk;
    if (e < a) e = a;
    *lo = a;
    *hi = e;
}

/* Query rows [*first, *last) whose sdpa_row_keys range meets [j0, j1). */
void sdpa_key_rows(const sdpa_problem *p, int64_t j0, int64_t j1, int64_t *first, int64_t *last);

/* What ALiBi and the masks add to score (b,h,i,j): a float, or -inf when a
 * mask hides the key. (Causality and the window: sdpa_row_keys.) */
float sdpa_key_bias(const sdpa_problem *p, int64_t b, int64_t h, int64_t i, int64_t j);

/* Whether row (b,h,i) sees key j: inside its sdpa_row_keys range and not
 * hidden by a mask (a bias of -inf). A key it sees takes part in its
 * softmax, also where its probability underflows to 0: a NaN in its value
 * reaches the row (0·NaN). */
bool sdpa_key_visible(const sdpa_problem *p, int64_t b, int64_t h, int64_t i, int64_t j);

/* fl(1/softcap): the soft-capping tanh's argument is fl(scale·s)·this on
 * every path (a multiply per score, not a division). */
static inline float sdpa_inv_softcap(const sdpa_problem *p)
{
    return p->softcap > 0.0f ? 1.0f / p->softcap : 0.0f;
}

/* The logit of a raw score q·k before the bias: fl(scale·s), soft-capped. */
float sdpa_capped_logit(const sdpa_problem *p, float s);
/* The soft-capping tanh of a raw score (softcap > 0). */
float sdpa_softcap_tanh(const sdpa_problem *p, float s);

/* Dropout: multiplies s(r, c) of the tile rows [i0, i0+mi) × keys j0 + c,
 * c in [c0, n), by their keep factor (0 or 1/(1-p)), also stored in z (same
 * layout as s) when z != NULL. The keep decision of (b, h, i, j) is one
 * Philox word of counter (j/4, i, b·Hq + h, offset) and key (seed). */
void sdpa_dropout_tile(const sdpa_problem *p, const sdpa_kernels *kern, int64_t b, int64_t h,
                       int64_t i0, int64_t mi, int64_t j0, int64_t c0, int64_t n, float *s,
                       int64_t lds, float *z);
/* The keep factor of one element (the reference path). */
float sdpa_dropout_factor(const sdpa_problem *p, int64_t b, int64_t h, int64_t i, int64_t j);

/* The sink logit of head h, -inf without sinks. */
static inline float sdpa_sink(const sdpa_problem *p, int64_t h)
{
    return p->sinks ? p->sinks[h * p->sinks_s] : -INFINITY;
}

/*
 * One tile of the fused path: query rows [i0, i0+mi) of head (b, h) against
 * keys [j0, j0+nj). Rows past Nq continue into the next heads (row g is row
 * g % Nq of head h + g / Nq): the stacked rows of a GQA group when decoding. Fills start/end (mi entries, columns relative to j0) and,
 * when use_bias, the bias rows (mi × ld, or one shared row when ldbias = 0).
 */
typedef struct {
    int64_t c0, cols;  /* columns [c0, cols) some row may see; cols == 0: skip the tile */
    bool use_bias;     /* the bias holds something other than 0 on visible columns */
    int64_t ldbias;    /* row stride of the bias: 0 when every row shares row 0 */
    bool ragged;       /* some row sees less than [c0, cols): products with its zero
                        * probabilities must not meet non-finite operand rows */
    float alibi;       /* ALiBi slope the kernels apply themselves (no mask, one
                        * head; else it is in the bias), 0: none */
    int32_t alibi_d0;  /* i0 + Nk - Nq - j0: the distance at row 0, column 0 */
} sdpa_tile;

sdpa_tile sdpa_plan_tile(const sdpa_problem *p, const sdpa_kernels *kern, int64_t b, int64_t h,
                         int64_t i0, int64_t mi, int64_t j0, int64_t nj, int32_t *start,
                         int32_t *end, float *bias, int64_t ld);

/* The kernels' view of rows [r0, ...) of a planned tile. */
static inline sdpa_logits sdpa_tile_logits(const sdpa_problem *p, const sdpa_tile *t, int64_t r0,
                                           const int32_t *start, const int32_t *end,
                                           const float *bias)
{
    sdpa_logits lg = {.scale = p->scale,
                      .softcap = p->softcap,
                      .inv_softcap = sdpa_inv_softcap(p),
                      .start = start + r0,
                      .end = end + r0,
                      .bias = t->use_bias ? bias + r0 * t->ldbias : NULL,
                      .ldbias = t->ldbias,
                      .alibi = t->alibi,
                      .alibi_d0 = t->alibi_d0 + (int32_t)r0};
    return lg;
}

/* Element idx of Q as float, whatever its storage (qt). */
static inline float sdpa_q_at(const sdpa_problem *p, int64_t idx)
{
    return p->q ? p->q[idx] : attn_load_float(p->q16, p->qt, idx);
}

/* Resolves and validates a forward (dout == NULL) or backward call. */
attn_status sdpa_problem_init(sdpa_problem *p, const attn_tensor *q, const attn_tensor *k,
                              const attn_tensor *v, const attn_sdpa_opts *opts, attn_error *err);

/* True when a visible score of row (b,h,i) is NaN: a row the fused path
 * found empty may really be poisoned by NaN inputs, which must show as NaN
 * (as in torch) rather than as a masked row. Costs O(Nk·D); called only for
 * rows that saw no key. */
bool sdpa_row_sees_nan(const sdpa_problem *p, int64_t b, int64_t h, int64_t i);
/* True when row (b,h,i) has a visible key (a logit other than -inf). The
 * fused path cannot tell from its statistics when a non-finite sink
 * started them; O(Nk·D), called only then. */
bool sdpa_row_sees_key(const sdpa_problem *p, int64_t b, int64_t h, int64_t i);
/* True when row (b,h,i) sees a key by causal, window and masks, whatever
 * its logit. O(Nk). */
bool sdpa_row_has_keys(const sdpa_problem *p, int64_t b, int64_t h, int64_t i);

/* bfloat16 / float16 tensors through float32 copies (staging.c). Start
 * from {0}; sdpa_stage_in/out leave float32 tensors alone and otherwise
 * point *data and strides at the copy; sdpa_staging_finish rounds the
 * staged outputs into their tensors when status is ATTN_OK, then frees. */
#define SDPA_MAX_STAGED 8
typedef struct {
    void *owned[SDPA_MAX_STAGED];
    int nowned, nout;
    struct {
        float *buf;
        attn_tensor *dst;
        int64_t strides[ATTN_MAX_DIMS];
    } out[SDPA_MAX_STAGED];
} sdpa_staging;

attn_status sdpa_stage_in(sdpa_staging *s, const attn_tensor *t, const char *name,
                          const float **data, int64_t *strides, attn_error *err);
attn_status sdpa_stage_out(sdpa_staging *s, attn_tensor *t, const char *name, float **data,
                           int64_t *strides, attn_error *err);
void sdpa_staging_finish(sdpa_staging *s, attn_status status);

/* grad_mask (bias_grad.c): sdpa_bias_grad_check checks it against mask[0];
 * sdpa_bias_grad_begin points p->dbias at a zeroed (B,Hq,Nq,Nk) buffer (the caller's tensor
 * when mask[0] has the full shape); after the backward wrote dX there,
 * sdpa_bias_grad_finish sums it over mask[0]'s broadcast dimensions into
 * the caller's tensor (when status is ATTN_OK) and frees the buffer. */
typedef struct {
    const attn_tensor *grad; /* the caller's grad_mask, or NULL */
    float *owned;            /* the full buffer, when mask[0] broadcasts */
} sdpa_bias_grad;

attn_status sdpa_bias_grad_check(const attn_tensor *grad, const attn_tensor *mask,
                                 attn_error *err);
attn_status sdpa_bias_grad_begin(sdpa_problem *p, sdpa_bias_grad *g, const attn_tensor *grad,
                                 const attn_tensor *mask, attn_error *err);
void sdpa_bias_grad_finish(const sdpa_problem *p, sdpa_bias_grad *g, attn_status status);

/* The plain paths: the oracle. Need no workspace beyond what they allocate. */
attn_status sdpa_reference_forward(const sdpa_problem *p, attn_error *err);
attn_status sdpa_reference_backward(const sdpa_problem *p, attn_error *err);

/* The fused paths (forward.c, backward.c) with a kernel table. Workspace:
 * p->workspace if given (ATTN_ERR_WORKSPACE when smaller than what
 * sdpa_fused_*_workspace report), else allocated per call. */
attn_status sdpa_fused_forward(const sdpa_problem *p, const sdpa_kernels *kern, attn_error *err);
attn_status sdpa_fused_backward(const sdpa_problem *p, const sdpa_kernels *kern, attn_error *err);
/* Bytes the fused forward / backward need (false on size overflow); the
 * forward's figure also covers every call with fewer query rows. */
bool sdpa_fused_forward_workspace(const sdpa_problem *p, size_t *bytes);
bool sdpa_fused_backward_workspace(const sdpa_problem *p, size_t *bytes);

#endif
