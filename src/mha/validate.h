/* The validation layer of MHA: a call from the caller's module, inputs,
 * masks and options, every check done and every mask in SDPA form. Uses
 * buffers.h only. */
#ifndef ATTN_MHA_VALIDATE_H
#define ATTN_MHA_VALIDATE_H

#include "buffers.h"

/* Validates module, inputs and masks; converts masks; packs inputs whose
 * layout the GEMM cannot read. Release with mha_call_free (also on error). */
attn_status mha_call_init(mha_call *c, const attn_mha *m, const attn_tensor *query,
                          const attn_tensor *key, const attn_tensor *value,
                          const attn_mha_opts *opts, attn_error *err);

/* Checks a (B,M,C) (or unbatched (M,C)) float view against the call. */
attn_status mha_check_rows_view(const attn_tensor *t, const char *name, const mha_call *c,
                                int64_t M, int64_t C, bool is_output, attn_error *err);

#endif
