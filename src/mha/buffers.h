/* The bottom layer of MHA: what a validated call owns and how its data is
 * viewed — allocations freed with the call, inputs and outputs as row
 * matrices, (B,H,N,hd) head views of the activations, the call's SDPA
 * options, and the activations' place in the caller's workspace. Calls
 * nothing else in src/mha. */
#ifndef ATTN_MHA_BUFFERS_H
#define ATTN_MHA_BUFFERS_H

#include "mha.h"

/* Allocation owned by the call (freed by mha_call_free); NULL on failure. */
void *mha_call_alloc(mha_call *c, size_t bytes, const char *what, attn_error *err);
void mha_call_free(mha_call *c);

/* Rows of a checked view the GEMM can read/write directly, or false when
 * the layout needs a packed copy. */
bool mha_rows_direct(const attn_tensor *t, bool batched, int64_t C, mha_rows *out);
/* Rows of an input view: direct, or a contiguous copy owned by the call. */
attn_status mha_rows_input(mha_call *c, const attn_tensor *t, int64_t M, int64_t C,
                           const char *name, mha_rows *out, attn_error *err);
/* Copies contiguous (B,M,C) rows into a checked output view. */
void mha_rows_scatter(const float *src, const attn_tensor *dst, bool batched, int64_t B,
                      int64_t M, int64_t C);
/* Writes zeros to every element of a checked output view. */
void mha_rows_zero(const attn_tensor *dst, bool batched, int64_t B, int64_t M, int64_t C);

/* (B,N,E) buffer viewed as (B,H,N,E/H): heads split without a copy. */
attn_tensor mha_head_view(float *buf, const mha_call *c, int64_t N);
/* (H,B,N,E/H) buffer viewed as (B,H,N,E/H). */
attn_tensor mha_head_major_view(float *buf, const mha_call *c, int64_t N);

/* SDPA options for this call (masks, causal, threads, path). */
attn_sdpa_opts mha_sdpa_opts(const mha_call *c);

/* Bytes of the forward's activations (q, k, v, a: see mha_acts) and of the
 * backward's (those, then da, dq, dk, dv and the softmax statistics). */
size_t mha_forward_act_bytes(const mha_call *c);
size_t mha_backward_act_bytes(const mha_call *c);

/* act_bytes of activations (*act) and the attention's scratch (*sdpa_ws,
 * *sdpa_ws_size) from the caller's workspace, checked against what this
 * forward or backward needs; without one, *act is allocated (owned by the
 * call) and the attention allocates its own (*sdpa_ws NULL). */
attn_status mha_workspace(mha_call *c, const attn_mha_opts *opts, bool backward,
                          size_t act_bytes, float **act, void **sdpa_ws, size_t *sdpa_ws_size,
                          attn_error *err);
/* The activations q, k, v, a (in this order, see mha_acts) at the start of
 * the forward's or backward's mha_workspace, the attention's scratch in
 * act->sdpa_ws (NULL: it allocates its own). The backward's gradients
 * follow a (mha_backward_act_bytes). */
attn_status mha_acts_init(mha_call *c, const attn_mha_opts *opts, bool backward, mha_acts *act,
                          attn_error *err);
/* Bytes of workspace a forward (or backward) of this call needs. */
attn_status mha_workspace_bytes(const mha_call *c, bool backward, size_t *bytes,
                                attn_error *err);

#endif
