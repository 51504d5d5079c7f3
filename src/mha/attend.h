/* The step both MHA passes share: the forward up to the attention output.
 * Uses buffers.h only (the call is validated by then). */
#ifndef ATTN_MHA_ATTEND_H
#define ATTN_MHA_ATTEND_H

#include "buffers.h"

/* Forward up to the attention output: projections (with appended keys)
 * and SDPA. lse (B,H,L) and per-head weights (B,H,L,Sp) are optional. */
attn_status mha_attend(const attn_mha *m, const mha_call *c, const mha_acts *act,
                       attn_tensor *stats, attn_tensor *weights, attn_error *err);

#endif
