/* attn_sdpa's rotary option (opts->rope, rope_prefill.c): Q and K rotated
 * into float32 copies before a path runs, and the gradients with respect
 * to the copies rotated back into the gradients of Q and K. */
#ifndef ATTN_SDPA_ROPE_PREFILL_H
#define ATTN_SDPA_ROPE_PREFILL_H

#include "problem.h"

/* One call's rotation: the positions, the table of angles and the copies. */
typedef struct {
    const attn_rope *rope;
    int64_t half;       /* rotary_dim / 2 */
    int64_t qpos, kpos; /* positions of query row 0 and key row 0 */
    int64_t pos0, npos; /* the positions the table holds */
    float *cos, *sin;   /* (npos, half) */
    attn_tensor q, k;   /* the rotated copies: float32, contiguous */
    void *owned;        /* allocated when the caller gave no workspace */
} sdpa_rope;

/* opts->rope (when set) and rope_offset judged against p's shapes. */
attn_status sdpa_rope_check(const sdpa_problem *p, const attn_sdpa_opts *opts, attn_error *err);

/* Bytes of workspace the rotation takes (0 without opts->rope), alignment
 * slack included; false on overflow. */
bool sdpa_rope_workspace(const sdpa_problem *p, const attn_sdpa_opts *opts, size_t *bytes);

/* Rotates *q and *k (the caller's views) into copies taken from the front of
 * p->workspace (which shrinks by what they take) or allocated, and points p
 * and *q, *k at the copies. */
attn_status sdpa_rope_begin(sdpa_rope *r, sdpa_problem *p, const attn_sdpa_opts *opts,
                            const attn_tensor **q, const attn_tensor **k, attn_error *err);

/* Backward: p->dq and p->dk (float32, either may be NULL), the gradients
 * with respect to the rotated copies, rotated back in place. */
void sdpa_rope_grads(const sdpa_rope *r, const sdpa_problem *p);

void sdpa_rope_end(sdpa_rope *r);

#endif /* ATTN_SDPA_ROPE_PREFILL_H */
