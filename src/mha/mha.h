/* Private parts of the MHA module: the module layout, a validated call and
 * the forward's activations — the types every layer of src/mha shares.
 *
 * The layers, each calling only the ones below it (one header each):
 *   api.c        attn_mha_forward, attn_mha_backward, attn_mha_workspace_size
 *   forward.c    the forward pass         backward.c  the backward pass   (passes.h)
 *   attend.c     projections and attention, shared by both passes        (attend.h)
 *   validate.c   a call from the caller's module, inputs, masks, options (validate.h)
 *   buffers.c    the call's allocations, row matrices, head views,
 *                workspace layout                                        (buffers.h)
 * module.c (the module's parameters) stands apart: it needs only this file. */
#ifndef ATTN_MHA_PRIVATE_H
#define ATTN_MHA_PRIVATE_H

#include "../core/internal.h"
#include "../core/linear_bf16.h"

enum { MHA_MAX_PARAMS = 8 };

/* One parameter: a slice [offset, offset + numel) of the flat buffers. */
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[3];
    size_t offset;
    size_t numel;
} mha_param;

struct attn_mha {
    attn_mha_config cfg; /* kdim/vdim resolved (never 0) */
    bool packed;         /* in_proj_weight (kdim == vdim == embed_dim) */
    int nparams;
    mha_param param[MHA_MAX_PARAMS];
    size_t count; /* floats in params (and in grads) */
    float *params;
    float *grads;
    /* Offsets into params/grads, SIZE_MAX when absent. */
    size_t w_q, w_k, w_v; /* (E,E), (E,kdim), (E,vdim), rows of in_proj_weight when packed */
    size_t b_in;          /* in_proj_bias (3E): q, k, v */
    size_t bias_k, bias_v;
    size_t w_out, b_out;
};

/* A batch of row matrices: element (b, i, c) at data[b*batch + i*ld + c]. */
typedef linear_rows mha_rows; /* row matrices of a batch (core/linear.h) */

/* Contiguous (B,M,C) rows at data. */
static inline mha_rows mha_rows_dense(float *data, int64_t M, int64_t C)
{
    return (mha_rows){.data = data, .batch = M * C, .ld = C};
}

/* A validated forward/backward call, shapes resolved to batched form. */
typedef struct {
    int64_t B, L, S, Sp; /* Sp = S + appended keys (bias_kv, zero_attn) */
    int64_t E, H, hd, kdim, vdim;
    bool batched, self;
    int threads;
    attn_path path;
    bool reference; /* the plain path: reference SDPA and GEMM */
    attn_precision precision; /* the SDPA's; the projections' when bf16 is set */
    const sdpa_bf16_engine *bf16; /* the projections' engine (ATTN_PRECISION_BF16), or NULL */
    float scale; /* SDPA scale; 0 = default */
    float dropout_p; /* on the attention weights: the config's in training, else 0 */
    uint64_t dropout_seed;

    /* Inputs as row matrices (views of the caller's data or packed copies). */
    mha_rows query, key, value;

    /* Masks in SDPA form (true = may attend, float added), each broadcasting
     * to (B,H,L,Sp); causal handed to SDPA when no key was appended. */
    int nmask;
    attn_tensor mask[ATTN_SDPA_MAX_MASKS];
    attn_causal causal;

    void *owned[16]; /* packed inputs, mask copies, work buffers */
    int nowned;
} mha_call;

/* The forward activations the output projection and backward need. q, k
 * and v are head-major, so that each head's rows, which SDPA reads again
 * for every tile, are contiguous; a stays (B,L,E) for the out-projection. */
typedef struct {
    float *q; /* (H,B,L,hd)  projected queries */
    float *k; /* (H,B,Sp,hd) projected keys, then bias_k row, then zero row */
    float *v; /* (H,B,Sp,hd) likewise; k = q + B·L·E and v = k + B·Sp·E let
                 self-attention project all three in one GEMM */
    float *a; /* (B,L,E)     attention output, heads concatenated */
    void *sdpa_ws; /* the attention's workspace, or NULL: it allocates its own */
    size_t sdpa_ws_size;
    /* The projections' engine and, with one, the scratch of their pair
     * operands: the attention's workspace (the two never run at once), or
     * an allocation of the call's. */
    linear_bf16 proj;
} mha_acts;

/* The projections multiply with core/linear_bf16.h's linear layers (on
 * c->bf16, or core/linear.h's float32 ones when it is NULL). */
static inline linear_engine mha_gemm_of(const mha_call *c)
{
    return (linear_engine){c->threads, c->reference};
}

#endif
