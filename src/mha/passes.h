/* The MHA passes on a validated call (forward.c, backward.c): each checks
 * its outputs, then computes them. The public entry points (api.c) validate
 * the call, run a pass and free the call. */
#ifndef ATTN_MHA_PASSES_H
#define ATTN_MHA_PASSES_H

#include "attend.h"
#include "validate.h"

/* out (and opts->weights) of the call. */
attn_status mha_forward_pass(const attn_mha *m, mha_call *c, attn_tensor *out,
                             const attn_mha_opts *opts, attn_error *err);
/* Gradients of the call for dout: accumulated into m's grads, written to
 * dquery/dkey/dvalue (any may be NULL). ins = {query, key, value, dout} as
 * the caller passed them (checked against the outputs for overlap). */
attn_status mha_backward_pass(attn_mha *m, mha_call *c, const attn_tensor *const ins[4],
                              attn_tensor *dquery, attn_tensor *dkey, attn_tensor *dvalue,
                              const attn_mha_opts *opts, attn_error *err);

#endif
