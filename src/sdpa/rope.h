/* Rotary embeddings inside the library (rope.c): the option checks, one
 * row's rotation (attn_rope_apply, the KV cache) and tables of angles with
 * the rotation by them (attn_sdpa's rotary option, rope_prefill.c). */
#ifndef ATTN_SDPA_ROPE_H
#define ATTN_SDPA_ROPE_H

#include "attn.h"

/* rope valid for rows of D features at positions up to max_pos. */
attn_status attn_rope_check(const attn_rope *rope, int64_t D, int64_t max_pos, attn_error *err);
/* attn_sdpa's positions (attn/sdpa.h): key row j at offset + j, query row
 * i at offset + Nk - Nq + i; the table of angles spans [*pos0, *pos0 +
 * *npos), the positions either uses. */
static inline void attn_rope_positions(int64_t offset, int64_t Nq, int64_t Nk, int64_t *qpos,
                                       int64_t *kpos, int64_t *pos0, int64_t *npos)
{
    *kpos = offset;
    *qpos = offset + Nk - Nq;
    *pos0 = *qpos < *kpos ? *qpos : *kpos;
    *npos = offset + Nk - *pos0; /* both end at offset + Nk */
}
/* rope valid for an attn_sdpa call of Nq queries, Nk keys and D features
 * with this rope_offset (positions as attn_rope_positions). */
attn_status attn_rope_check_call(const attn_rope *rope, int64_t D, int64_t offset, int64_t Nq,
                                 int64_t Nk, attn_error *err);
/* Rotates x[0..D) as the row at position pos (rope already checked). */
void attn_rope_row(const attn_rope *rope, int64_t pos, float *x, int64_t D);
/* theta^(-2i / rotary_dim) for the rotary_dim / 2 pairs into freq (nothing
 * with tables), for attn_rope_angles. */
void attn_rope_frequencies(const attn_rope *rope, int64_t D, double *freq);
/* cos and sin of position pos's angles into c[0..rd/2), s[0..rd/2): the
 * values attn_rope_row rotates by (rope checked, pos within the tables). */
void attn_rope_angles(const attn_rope *rope, int64_t D, const double *freq, int64_t pos, float *c,
                      float *s);
/* Rotates the rd/2 = half pairs of x (element stride `stride`) by the angles
 * whose cos and sin are c[0..half), s[0..half); inverse: by minus them, the
 * transpose rotation (the backward's). */
void attn_rope_turn(attn_rope_style style, int64_t half, const float *c, const float *s,
                    bool inverse, float *x, int64_t stride);

#endif /* ATTN_SDPA_ROPE_H */
