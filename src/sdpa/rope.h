/* Rotary embeddings inside the library (rope.c): the option checks and one
 * row's rotation, for attn_rope_apply and the KV cache. */
#ifndef ATTN_SDPA_ROPE_H
#define ATTN_SDPA_ROPE_H

#include "attn.h"

/* rope valid for rows of D features at positions up to max_pos. */
attn_status attn_rope_check(const attn_rope *rope, int64_t D, int64_t max_pos, attn_error *err);
/* Rotates x[0..D) as the row at position pos (rope already checked). */
void attn_rope_row(const attn_rope *rope, int64_t pos, float *x, int64_t D);

#endif /* ATTN_SDPA_ROPE_H */
