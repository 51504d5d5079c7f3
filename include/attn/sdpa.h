/*
 * attn/sdpa.h — scaled dot-product attention (forward, backward,
 * workspace), ALiBi slopes, merging partial results through their LSE, and
 * variable-length batches.
 *
 * Part of libattn's public API; include <attn.h> for all of it. Conventions
 * (status codes, attn_error, strided views, backward overwrites inputs'
 * gradients) are described in attn/core.h.
 */
#ifndef ATTN_SDPA_H
#define ATTN_SDPA_H

#include "attn/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------- SDPA */

typedef enum {
    ATTN_CAUSAL_NONE = 0,
    ATTN_CAUSAL_TOP_LEFT,     /* query i sees keys j <= i (PyTorch is_causal) */
    ATTN_CAUSAL_BOTTOM_RIGHT, /* query i sees keys j <= i + Nk - Nq (FlashAttention) */
} attn_causal;

typedef enum {
    ATTN_PATH_AUTO = 0,  /* fastest available path (ATTN_ARCH=reference forces the oracle) */
    ATTN_PATH_REFERENCE, /* the plain, obviously-correct path */
    ATTN_PATH_FUSED,     /* tiled online-softmax kernels */
} attn_path;

#define ATTN_SDPA_MAX_MASKS 2
#define ATTN_MAX_THREADS 1024 /* largest num_threads a call accepts */

/* Sliding window (FlashAttention's window_size=(left, right)): query i sees
 * keys j with i + Nk - Nq - left <= j <= i + Nk - Nq + right; -1 leaves that
 * side unbounded, as does any side wider than the sequences (up to
 * INT64_MAX). Off unless `enabled`. */
typedef struct {
    bool enabled;
    int64_t left, right;
} attn_window;

/*
 * Options for attn_sdpa / attn_sdpa_backward. Start from
 * attn_sdpa_opts_default() (or zero-initialise: all-zero is the default).
 *
 * The score of query i and key j of head h, in this order:
 *   x = scale·(q_i·k_j)                       (rounded to float once)
 *   x = softcap·tanh(x / softcap)              if softcap > 0 (x / softcap taken
 *                                              as x·fl(1/softcap) on every path)
 *   x = x - slope_h·|i + Nk - Nq - j|          if alibi_slopes
 *   x = x + mask values                        (bool false / -inf: key hidden)
 * and key j is hidden outright by causal, window and bool masks.
 * P = softmax over the visible keys (plus exp(sink_h) in the denominator),
 * then dropout; out = P·V.
 *
 * mask[i]  up to two masks, combined. Each broadcasts to (B,Hq,Nq,Nk) the
 *          PyTorch way (aligned from the right, size-1 dims broadcast), e.g.
 *          (Nq,Nk), (1,Nk), (B,1,Nq,Nk), (B,Hq,Nq,Nk), or (B,1,1,Nk) for
 *          key padding. ATTN_BOOL: true = may attend (PyTorch SDPA).
 *          ATTN_F32: added to the scaled scores (-inf allowed).
 * causal   combined with the masks.
 * scale    multiplies Q·Kᵀ; 0 means the default 1/sqrt(D). Must be finite and
 *          non-negative (torch also takes negative scales; the fused kernels
 *          rely on scale >= 0 when taking row maxima).
 * window   sliding window, see attn_window; composes with causal and masks.
 * alibi_slopes (Hq) or (B,Hq) float32: ALiBi bias -slope·|i + Nk - Nq - j|
 *          (FlashAttention's alibi_slopes); attn_alibi_slopes() gives the
 *          paper's geometric sequence.
 * softcap  > 0: logit soft-capping after scaling (Gemma 2); 0 = off.
 * sinks    (Hq) float32: one learned logit per head that joins every row's
 *          softmax denominator without a value (gpt-oss). The LSE output
 *          then includes it: lse = log(exp(sink_h) + Σ_j exp(x_ij)).
 * grad_sinks (Hq) float32, backward only: receives d loss / d sinks
 *          (OVERWRITTEN). NULL if not wanted.
 * grad_mask  float32, backward only, the shape of mask[0] (a float32 mask):
 *          receives d loss / d mask[0] (OVERWRITTEN), a learned bias's
 *          gradient: dX_ij = P_ij (dP_ij - D_i) (before the scale and
 *          softcap factor), summed over the dimensions mask[0] broadcasts
 *          along (missing, or size 1 against (B,Hq,Nq,Nk)) in a fixed
 *          order, so the result does not depend on the thread count. The
 *          call allocates B·Hq·Nq·Nk floats for the sum unless mask[0] has
 *          the full shape. A second float mask's gradient is the same
 *          summed over its own broadcast dimensions: pass it as mask[0].
 *          NULL if not wanted.
 * dropout_p  in [0, 1): each probability is zeroed with this chance and the
 *          kept ones scaled by 1/(1 - p) (torch SDPA dropout_p). The keep
 *          decision for (b, h, i, j) is a pure function of (dropout_seed,
 *          dropout_offset, b, h, i, j) (Philox4x32-10), so the backward
 *          regenerates it and results do not depend on threads or ISA. The
 *          LSE and the weights output are those before dropout.
 * softmax_stats (B,Hq,Nq,2) float32, optional. The forward writes, per row,
 *          the max m of its logits (the sink included) and ll = log Σ exp(x - m),
 *          so lse = m + ll without rounding m + ll. The backward reads it
 *          instead of lse: P = exp(x - m - ll) is then exact even where a
 *          rounded lse is not (|lse| large next to ll, e.g. rows whose mask
 *          values are all finfo.min). With only lse, the backward uses
 *          P = exp(x - lse), whose relative error is up to ulp(lse)/2 (as
 *          FlashAttention). Rows that see nothing: (-inf, 0)
 *          (with sinks: (sink, 0)).
 * rope     rotary embeddings on Q and K (attn_rope, below; NULL = off): the
 *          scores are those of the rotated R·q_i and R·k_j, key row j at
 *          position rope_offset + j and query row i at rope_offset + Nk -
 *          Nq + i (the window's and ALiBi's alignment: the queries are the
 *          last Nq positions, FlashAttention's rule for a cache; a prefill,
 *          Nq = Nk, starts both at rope_offset). rope_offset >= 0; with
 *          cos/sin tables every position used must be a row of them. Q and
 *          K are rotated into float32 copies (16-bit ones widened first, not
 *          rounded back), so a call equals the float32 call on the rotated
 *          values bit for bit, whatever the dtypes and precision; the
 *          caller's tensors are not modified. The backward takes the same
 *          unrotated Q and K and returns their gradients: those of the
 *          rotated copies rotated back (Rᵀ, the rotation by minus the
 *          angles); dV is unchanged. Varlen: positions restart per sequence.
 *          The KV cache's calls take their rope as an argument (the
 *          cache holds keys rotated as stored): their opts leave it NULL.
 */
/*
 * How the fused paths multiply.
 *   ATTN_PRECISION_EXACT (0, the default): 16-bit inputs are widened
 *     exactly and all arithmetic is float32, so the result is the float32
 *     call's on the same values, bit for bit, on every CPU.
 *   ATTN_PRECISION_BF16: the products run on bfloat16 operands with
 *     float32 accumulation, as PyTorch's and FlashAttention's bfloat16
 *     kernels do: forward Q·Kᵀ and P·V (P rounded to bfloat16; the online
 *     softmax, its statistics and the LSE stay float32), backward the
 *     recomputed Q·Kᵀ, dV = Pᵀ·dO, dP = dO·Vᵀ, dQ = dS·K and dK = dSᵀ·Q
 *     (float32 gradient accumulators). Inputs of any dtype are rounded to
 *     bfloat16 (to nearest even) as they are packed. Every option composes.
 *     The products run on the CPU's matrix engine (attn_engine(): AMX, else
 *     AVX512_BF16); where there is none ("f32") the call is the exact one.
 *     Error: README "bfloat16 products" (at most twice a plain bfloat16
 *     implementation's, plus a small slack, against a float64 oracle on the
 *     same bfloat16 inputs). Results are deterministic and independent of
 *     the thread count, but differ between engines (each sums in its own
 *     order; AMX and AVX512_BF16 count subnormal operands as zero), and
 *     decoding shapes (a few query rows per kv head) keep float32 products.
 *     The weights output holds the probabilities of the same scores,
 *     normalised by the row statistics of the out and lse returned (which
 *     never depend on whether the weights are requested).
 *   ATTN_PRECISION_BF16_DOT: the former name of ATTN_PRECISION_BF16 (which
 *     took only bfloat16 Q, K and V, and only in the forward).
 */
typedef enum {
    ATTN_PRECISION_EXACT = 0,
    ATTN_PRECISION_BF16 = 1,
    ATTN_PRECISION_BF16_DOT = ATTN_PRECISION_BF16,
} attn_precision;

/* The engine an ATTN_PRECISION_BF16 call runs its products on, given the
 * CPU, ATTN_ARCH and ATTN_ENGINE: "amx", "avx512bf16", "amx-model" (the
 * AMX kernel on a plain-C model of the tile instructions: slow, for tests;
 * only by ATTN_ENGINE) or "f32" (none: the exact float32 path).
 * ATTN_ENGINE=amx|avx512bf16|f32|amx-model forces one where it can run. */
const char *attn_engine(void);

typedef struct {
    float scale;
    attn_causal causal;
    const attn_tensor *mask[ATTN_SDPA_MAX_MASKS];
    int num_threads;      /* 0: ATTN_NUM_THREADS, else all cores */
    attn_path path;
    void *workspace;      /* optional; see attn_sdpa_workspace_size */
    size_t workspace_size;
    /* Variants used by current models (all zero = off). */
    attn_window window;
    const attn_tensor *alibi_slopes;
    float softcap;
    const attn_tensor *sinks;
    attn_tensor *grad_sinks;
    float dropout_p;
    uint64_t dropout_seed, dropout_offset;
    attn_tensor *softmax_stats;
    attn_precision precision; /* 0 = ATTN_PRECISION_EXACT */
    uint32_t reserved32;      /* zero */
    attn_tensor *grad_mask;   /* backward only; NULL if not wanted */
    /* Rotary embeddings on Q and K (NULL = off): see "rotary embeddings"
     * below for the rotation and for the positions rope_offset sets. */
    const struct attn_rope *rope;
    int64_t rope_offset;
} attn_sdpa_opts;

/* The standard ALiBi slopes for `heads` heads (Press et al., as in BLOOM and
 * FlashAttention's tests): for n = the largest power of two <= heads,
 * slope_h = 2^(-8(h+1)/n) for h < n, and the remaining heads take every
 * other slope of the sequence for 2n. out receives `heads` floats. */
attn_status attn_alibi_slopes(int64_t heads, float *out, attn_error *err);

attn_sdpa_opts attn_sdpa_opts_default(void);

/*
 * Forward.  Shapes (each a strided view):
 *   q   (B, Hq,  Nq, D)
 *   k   (B, Hkv, Nk, D)
 *   v   (B, Hkv, Nk, Dv)          Hq % Hkv == 0; query head h reads kv head h/(Hq/Hkv)
 *   out (B, Hq,  Nq, Dv)
 *   lse (B, Hq,  Nq)      optional: log Σ_j exp(scale·q·k_j + mask), natural log
 *   weights (B, Hq, Nq, Nk) optional: the softmax probabilities
 * A query row that sees no key gets out = 0, lse = -inf (the sink's logit
 * with sinks: +inf, -inf or NaN as the sink is), weights = 0.
 * Requesting the weights never changes the bits of out and lse.
 * q, k, v and out (and the backward's out, dout, dq, dk, dv) may each be
 * ATTN_F32, ATTN_BF16 or ATTN_F16; lse, weights and the options' tensors
 * are float32. 16-bit inputs are widened exactly and all arithmetic is
 * float32: the result is the float32 call's on the same values, 16-bit
 * outputs rounded to nearest even (README "bfloat16 and float16"). The
 * fused forward reads 16-bit Q, K and V and writes a 16-bit out in place;
 * other 16-bit tensors (the reference path's, the backward's) are staged
 * through float32 copies the call allocates.
 */
attn_status attn_sdpa(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                      attn_tensor *out, attn_tensor *lse, attn_tensor *weights,
                      const attn_sdpa_opts *opts, attn_error *err);

/*
 * Backward. Mirrors attn_sdpa: from dout (B,Hq,Nq,Dv) produce dq, dk, dv
 * (overwritten; dk/dv summed over the query heads sharing a kv head).
 * out and lse (or opts->softmax_stats, preferred) are what attn_sdpa
 * returned; without them (out NULL, or neither lse nor stats) they are
 * recomputed. Given, they may come from attention over MORE keys than k/v
 * hold (ring attention, split-KV): the result is then the part of the
 * gradients that flows through these keys (dq to be summed over the key
 * blocks), since P = exp(x - m - ll) and D = rowsum(dO∘O) use the caller's
 * statistics on every path. An out that contradicts q, k, v (finite where
 * a row sees a non-finite value) makes that row's D NaN, hence its
 * gradients (README "NaN, inf and empty rows"). dq, dk or dv may be NULL
 * if not wanted.
 */
attn_status attn_sdpa_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                               const attn_tensor *out, const attn_tensor *lse,
                               const attn_tensor *dout,
                               attn_tensor *dq, attn_tensor *dk, attn_tensor *dv,
                               const attn_sdpa_opts *opts, attn_error *err);

/* Bytes of workspace attn_sdpa / attn_sdpa_backward need for these inputs
 * (without a workspace they allocate it themselves). The figure also serves
 * every call with at most these query rows and keys (slices of q, k and v,
 * as strided views or copies) with the same heads, dtypes and options, the
 * causal alignment, window and masks aside (and a forward's with or
 * without weights), so one workspace sized for the largest call serves
 * them all. One workspace must not serve two calls at the same time.
 * With opts->rope it includes the rotated float32 copies of Q and K and
 * a table of cos and sin for max(Nq, Nk) positions. */
attn_status attn_sdpa_workspace_size(const attn_tensor *q, const attn_tensor *k,
                                     const attn_tensor *v, bool backward,
                                     const attn_sdpa_opts *opts, size_t *bytes,
                                     attn_error *err);

/* ------------------------------------------------------------- LSE merge */

/*
 * Exact merge of two partial attentions of the same queries over DISJOINT
 * key sets (split-KV, ring attention, prefix sharing): the result is what
 * one attn_sdpa call over the union of the keys gives, up to rounding.
 *   out1, out2, out (B, H, N, Dv)
 *   lse1, lse2, lse (B, H, N)      LSE form, or
 *                   (B, H, N, 2)   softmax-stats form (m, ll), lse = m + ll
 *                                  (attn_sdpa_opts.softmax_stats).
 * The three statistics tensors have the same form (told apart by ndim).
 * LSE form, per row:
 *   lse = log(e^lse1 + e^lse2) = max(lse1, lse2) + log1p(e^-|lse1 - lse2|)
 *   out = e^(lse1 - lse)·out1 + e^(lse2 - lse)·out2
 * Stats form: m = max(m1, m2), ll = log(e^(m1-m+ll1) + e^(m2-m+ll2)),
 *   out = e^(m1-m+ll1-ll)·out1 + e^(m2-m+ll2-ll)·out2; m + ll is never
 *   rounded, so the merged stats stay exact where a rounded lse is not.
 * The weights and sums are computed in double and rounded once.
 * A side whose row saw no key (lse -inf, stats (-inf, 0)) has weight 0 and
 * the other side is copied bit for bit; both empty gives out 0, lse -inf
 * (stats (-inf, 0)). A NaN statistic makes the row's out and lse NaN.
 * Merging is commutative and associative up to rounding.
 * out may be the same view as out1 or out2, lse the same as lse1 or lse2
 * (in place); other overlaps are not allowed. lse may be NULL.
 */
attn_status attn_lse_merge(const attn_tensor *out1, const attn_tensor *lse1,
                           const attn_tensor *out2, const attn_tensor *lse2, attn_tensor *out,
                           attn_tensor *lse, attn_error *err);

/* ------------------------------------------------------------------ varlen */

/*
 * Packed variable-length batches (FlashAttention's *_varlen_func): nseq
 * sequences stored back to back. Sequence s owns query tokens
 * [cu_seqlens_q[s], cu_seqlens_q[s+1]) and key tokens
 * [cu_seqlens_k[s], cu_seqlens_k[s+1]); each offset array has nseq + 1
 * entries, starts at 0, never decreases and ends at the packed length.
 */
typedef enum {
    ATTN_OFFSETS_I64 = 0, /* const int64_t * */
    ATTN_OFFSETS_I32,     /* const int32_t * */
} attn_offsets_type;

typedef struct {
    int64_t nseq;             /* >= 0 */
    attn_offsets_type type;   /* element type of both offset arrays */
    const void *cu_seqlens_q; /* (nseq + 1) */
    const void *cu_seqlens_k; /* (nseq + 1) */
} attn_varlen_seqs;

/*
 * Forward over packed sequences. Shapes (strided views):
 *   q   (total_q, Hq,  D)
 *   k   (total_k, Hkv, D)
 *   v   (total_k, Hkv, Dv)       Hq % Hkv == 0 (GQA as attn_sdpa)
 *   out (total_q, Hq,  Dv)
 *   lse (total_q, Hq)            optional (FlashAttention's (Hq, total_q) is
 *                                its transposed view)
 *   opts->softmax_stats (total_q, Hq, 2) optional
 * Each sequence is its own attn_sdpa problem (Nq, Nk = its lengths): causal,
 * window and ALiBi are aligned per sequence (bottom-right: query i of a
 * sequence sees its keys j <= i + Nk - Nq), and nothing attends across a
 * sequence boundary. opts->alibi_slopes may be (Hq) or (nseq, Hq); sinks
 * (Hq); dropout keys sequence s with dropout_offset + s (and batch index 0).
 * Not supported: opts->mask (per-sequence masks) and opts->workspace
 * (ATTN_ERR_UNSUPPORTED). Results are bit-identical to one attn_sdpa call
 * per sequence on the same views, for any num_threads. Bad offsets or shapes
 * give an error naming the argument before anything is written.
 */
attn_status attn_sdpa_varlen(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                             const attn_varlen_seqs *seqs, attn_tensor *out, attn_tensor *lse,
                             const attn_sdpa_opts *opts, attn_error *err);

/*
 * Backward, mirroring attn_sdpa_varlen: from dout (total_q, Hq, Dv) produce
 * dq (total_q, Hq, D), dk (total_k, Hkv, D), dv (total_k, Hkv, Dv), each
 * OVERWRITTEN and each may be NULL. out and lse (or opts->softmax_stats)
 * are the forward's; NULL recomputes them. opts->grad_sinks (Hq) receives
 * the sum over sequences (in sequence order) of each sequence's gradient.
 */
attn_status attn_sdpa_varlen_backward(const attn_tensor *q, const attn_tensor *k,
                                      const attn_tensor *v, const attn_varlen_seqs *seqs,
                                      const attn_tensor *out, const attn_tensor *lse,
                                      const attn_tensor *dout, attn_tensor *dq, attn_tensor *dk,
                                      attn_tensor *dv, const attn_sdpa_opts *opts,
                                      attn_error *err);

/* ------------------------------------------------------ rotary embeddings */

/*
 * Rotary position embeddings (RoPE, Su et al.), as flash_attn_with_kvcache's
 * rotary_cos / rotary_sin / rotary_interleaved. The first rotary_dim
 * features of a row at position p are rotated in pairs by angles
 * a_i = (p / position_scale)·theta^(-2i / rotary_dim), i < rotary_dim / 2
 * (or a_i with cos a_i = cos[p, i], sin a_i = sin[p, i] from tables):
 *   (x, y) -> (x·cos a_i - y·sin a_i, x·sin a_i + y·cos a_i)
 * with the pair (i, i + rotary_dim/2) for ATTN_ROPE_NEOX (GPT-NeoX, Llama:
 * halves) and (2i, 2i + 1) for ATTN_ROPE_GPTJ (interleaved). Features past
 * rotary_dim are left alone. Angles are computed in double, cos and sin
 * rounded to float, the rotation in float. Used by attn_rope_apply, by
 * attn_kvcache_update_attend and by attn_sdpa (attn_sdpa_opts.rope, whose
 * rope_offset places the rows).
 */
typedef enum { ATTN_ROPE_NONE = 0, ATTN_ROPE_NEOX = 1, ATTN_ROPE_GPTJ = 2 } attn_rope_style;

typedef struct attn_rope {
    attn_rope_style style;
    int64_t rotary_dim;        /* even, <= D; 0 = D */
    double theta;              /* base; 0 = 10000 */
    double position_scale;     /* linear position scaling (positions divided by it); 0 = 1 */
    const attn_tensor *cos, *sin; /* optional (P, rotary_dim/2) float32 tables by position */
} attn_rope;

/* Rotates x (B, H, N, D), any float dtype, in place: token n of batch
 * entry b sits at position positions[b] + n (positions NULL: n). */
attn_status attn_rope_apply(const attn_rope *rope, attn_tensor *x, const int64_t *positions,
                            attn_error *err);

#ifdef __cplusplus
}
#endif
#endif /* ATTN_SDPA_H */
