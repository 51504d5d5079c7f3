/*
 * attn.h — scaled dot-product attention and multi-head attention in C11.
 *
 * libattn's public API. This header includes every part of it; each part is
 * also a self-contained header of its own (attn/core.h lists them), for
 * code that needs one layer only.
 *
 * Conventions
 *   - Every fallible call returns an attn_status and takes a last argument
 *     `attn_error *err` that may be NULL; on failure it receives a one-line
 *     message naming the offending argument. The library never prints, exits
 *     or aborts, and has no global mutable state: calls are thread-safe as
 *     long as they do not write the same buffers.
 *   - Tensors are strided views (attn_tensor): shape and element strides per
 *     dimension, so (B,N,H,D) buffers straight out of a projection are valid
 *     (B,H,N,D) views without a copy. Strides may be 0 (broadcast) for inputs.
 *   - float32 data and float32 accumulation. Boolean tensors are one byte per
 *     element, 0 or 1.
 *   - Each forward has a backward with a mirrored signature. Backward calls
 *     OVERWRITE input gradients (dQ, dK, dV, d query...). MHA parameter
 *     gradients ACCUMULATE into the module's gradient buffer (zero it with
 *     attn_mha_zero_grad), so several backward calls can form one batch.
 */
#ifndef ATTN_H
#define ATTN_H

#include "attn/core.h"
#include "attn/sdpa.h"
#include "attn/kvcache.h"
#include "attn/mha.h"
#include "attn/io.h"
#include "attn/train.h"

#endif /* ATTN_H */
