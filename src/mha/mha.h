/* Private parts of the MHA module: the module layout, a validated call, and
 * the steps forward and backward share. */
#ifndef ATTN_MHA_PRIVATE_H
#define ATTN_MHA_PRIVATE_H

#include "../core/internal.h"
#include "../core/linear.h"

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

/* Validates module, inputs and masks; converts masks; packs inputs whose
 * layout the GEMM cannot read. Release with mha_call_free (also on error). */
attn_status mha_call_init(mha_call *c, const attn_mha *m, const attn_tensor *query,
                          const attn_tensor *key, const attn_tensor *value,
                          const attn_mha_opts *opts, attn_error *err);
void mha_call_free(mha_call *c);
/* Allocation owned by the call (freed by mha_call_free); NULL on failure. */
void *mha_call_alloc(mha_call *c, size_t bytes, const char *what, attn_error *err);

/* Checks a (B,M,C) (or unbatched (M,C)) float view against the call. */
attn_status mha_check_rows_view(const attn_tensor *t, const char *name, const mha_call *c,
                                int64_t M, int64_t C, bool is_output, attn_error *err);
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
} mha_acts;

/* (B,N,E) buffer viewed as (B,H,N,E/H): heads split without a copy. */
attn_tensor mha_head_view(float *buf, const mha_call *c, int64_t N);
/* (H,B,N,E/H) buffer viewed as (B,H,N,E/H). */
attn_tensor mha_head_major_view(float *buf, const mha_call *c, int64_t N);

/* SDPA options for this call (masks, causal, threads, path). */
attn_sdpa_opts mha_sdpa_opts(const mha_call *c);

/* act_bytes of activations (*act) and the attention's scratch (*sdpa_ws,
 * *sdpa_ws_size) from the caller's workspace, checked against what this
 * forward or backward needs; without one, *act is allocated (owned by the
 * call) and the attention allocates its own (*sdpa_ws NULL). */
attn_status mha_workspace(mha_call *c, const attn_mha_opts *opts, bool backward,
                          size_t act_bytes, float **act, void **sdpa_ws, size_t *sdpa_ws_size,
                          attn_error *err);
/* Bytes of the forward's activations (forward.c) and of the backward's
 * activations and gradients (backward.c). */
size_t mha_forward_act_bytes(const mha_call *c);
size_t mha_backward_act_bytes(const mha_call *c);

/* Forward up to the attention output: projections (with appended keys)
 * and SDPA. lse (B,H,L) and per-head weights (B,H,L,Sp) are optional. */
attn_status mha_attend(const attn_mha *m, const mha_call *c, const mha_acts *act,
                       attn_tensor *stats, attn_tensor *weights, attn_error *err);

/* The projections multiply with core/linear.h's linear layers. */
static inline linear_engine mha_gemm_of(const mha_call *c)
{
    return (linear_engine){c->threads, c->reference};
}

#endif
