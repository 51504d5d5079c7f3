/*
 * The engines of ATTN_PRECISION_BF16: a GEMM of bfloat16 operands with
 * float32 accumulation, one per matrix unit, and the packing of operands
 * into the "pair" layout they all read.
 *
 * A pair matrix holds uint32 elements, each two bfloat16 values of
 * consecutive positions along the contracted dimension, the even one in
 * the low half: the operand of vdpbf16ps and AMX's VNNI layout alike.
 *   A (m × kp pairs): A(r, l) = a[r*a_rs + l]   (row r, features 2l, 2l+1)
 *   B (kp × n):       B(l, :) = b + l*ldb        (rows 2l, 2l+1 interleaved)
 *
 * Engines, best first (sdpa_engine_select):
 *   amx         TDPBF16PS on 16 × 16 float32 tiles (amx.c); where CPUID
 *               reports AMX-BF16 and AMX-TILE and Linux grants the tile
 *               state (arch_prctl ARCH_REQ_XCOMP_PERM, XTILEDATA)
 *   avx512bf16  vdpbf16ps, a 12 × 32 microtile (avx512bf16.c); with the
 *               avx512 kernel table only (its npad)
 *   f32         none: a bfloat16 call runs the exact float32 path
 *   amx-model   the AMX kernel on the plain-C model of the tile
 *               instructions (amx_model.c); never chosen by itself, only
 *               by ATTN_ENGINE=amx-model (tests, machines without AMX)
 * ATTN_ENGINE=amx|avx512bf16|f32|amx-model forces one; an engine the CPU
 * or the kernel table cannot run is never honoured (the best one that can
 * is used instead), as with ATTN_ARCH.
 *
 * Every engine sums each output element's products in k order from 0, in
 * its own fixed grouping that depends on neither m, n nor the element's
 * position: the backward's recomputed scores are the forward's, bit for
 * bit, on one engine.
 */
#ifndef ATTN_SDPA_BF16_ENGINE_H
#define ATTN_SDPA_BF16_ENGINE_H

#include "kernels.h"

/* C (m × n) ⊕= A · B on pair operands (layouts above), sdpa_gemm_mode as
 * in kernels.h; n a multiple of the engine's npad; kp = 0 allowed. */
typedef void (*sdpa_pair_gemm_fn)(int64_t m, int64_t n, int64_t kp, const uint32_t *a,
                                  int64_t a_rs, const uint32_t *b, int64_t ldb, float *c,
                                  int64_t ldc, const float *row_scale, sdpa_gemm_mode mode);

/* The forward's score tile and its rows' maxima in one pass: gemm with
 * SDPA_GEMM_SET, and vmax (m × SDPA_MAX_VW) as sdpa_gemm_max_fn (kernels.h)
 * fills it, 16 lanes: what softmax_online's first pass would compute. */
typedef void (*sdpa_pair_gemm_max_fn)(int64_t m, int64_t n, int64_t kp, const uint32_t *a,
                                      int64_t a_rs, const uint32_t *b, int64_t ldb, float *c,
                                      int64_t ldc, float *vmax);

typedef struct {
    const char *name;
    int npad; /* n % npad == 0 */
    sdpa_pair_gemm_fn gemm;
    sdpa_pair_gemm_max_fn gemm_max; /* NULL: the softmax takes the maxima itself */
} sdpa_bf16_engine;

typedef enum {
    SDPA_ENGINE_F32,
    SDPA_ENGINE_AMX_MODEL,
    SDPA_ENGINE_AVX512BF16,
    SDPA_ENGINE_AMX,
} sdpa_engine_id;

extern const sdpa_bf16_engine sdpa_engine_amx_model;
#if defined(__x86_64__)
extern const sdpa_bf16_engine sdpa_engine_avx512bf16;
extern const sdpa_bf16_engine sdpa_engine_amx;
/* CPUID reports AMX-BF16 and AMX-TILE, and Linux granted the tile data
 * (asked once per process). */
bool sdpa_amx_available(void);
#endif

/* Whether engine id can run here beside the kernel table kern. */
bool sdpa_engine_runs(sdpa_engine_id id, const sdpa_kernels *kern);
/* The engine of a bfloat16 call with kernel table kern (ATTN_ENGINE read on
 * every call), or NULL for f32. */
const sdpa_bf16_engine *sdpa_engine_select(const sdpa_kernels *kern);

/* ----------------------------------------------------------------- packing
 * Values of dtype t (ATTN_F32, ATTN_BF16, ATTN_F16) rounded to bfloat16 to
 * nearest even (bfloat16 values are copied), odd counts completed by a
 * zero. */

/* A operand: dst[r*ld + l] = (x(r, 2l), x(r, 2l+1)) for r < rows, l <
 * ceil(k/2), x(r, c) = src[r*rs + c*cs]. */
void sdpa_pairs_rows(attn_dtype t, const void *src, int64_t rs, int64_t cs, int64_t rows,
                     int64_t k, uint32_t *dst, int64_t ld);

/* B operand from rows to be transposed (Kᵀ of Q·Kᵀ): dst[l*ld + j] =
 * (x(j, 2l), x(j, 2l+1)) for j < n, l < ceil(k/2); columns [n, ld) zero. */
void sdpa_pairs_kt(attn_dtype t, const void *src, int64_t rs, int64_t cs, int64_t n, int64_t k,
                   uint32_t *dst, int64_t ld);

/* B operand from rows paired in place (V of P·V): dst[l*ld + x] =
 * (x(2l, x), x(2l+1, x)) for l < ceil(k/2), x < n; columns [n, ld) zero.
 * Returns whether every value was finite. */
bool sdpa_pairs_keys(attn_dtype t, const void *src, int64_t rs, int64_t cs, int64_t k,
                     int64_t n, uint32_t *dst, int64_t ld);

/* dst[i] = src[i] rounded to bfloat16 for i < n (P before P·V), with a zero
 * after an odd n to complete the last pair. */
void sdpa_pairs_narrow(const float *src, int64_t n, uint16_t *dst);

/*
 * sdpa_gemm_fn's product on float32 operands rounded to bfloat16 (the
 * backward's products): A (m × k, any strides) and B (k × n, rows ldb
 * apart) are packed into pairs in scratch (at least
 * sdpa_pair_scratch(m, k, n) uint32), then eng->gemm. bp, when not NULL,
 * is B already as pairs (rows ldbp apart): b is not read.
 */
int64_t sdpa_pair_scratch(int64_t m, int64_t k, int64_t n);
void sdpa_pair_gemm_f32(const sdpa_bf16_engine *eng, uint32_t *scratch, int64_t m, int64_t n,
                        int64_t k, const float *a, int64_t a_rs, int64_t a_cs, const float *b,
                        int64_t ldb, const uint32_t *bp, int64_t ldbp, float *c, int64_t ldc,
                        const float *row_scale, sdpa_gemm_mode mode);
/* sdpa_pairs_rows of float32 rows with unit stride (the fastest packer):
 * the A operand sdpa_pair_gemm_f32 packs from such rows, bit for bit. */
void sdpa_pairs_rows_f32(const float *src, int64_t rs, int64_t rows, int64_t k, uint32_t *dst,
                         int64_t ld);
/* sdpa_pairs_keys of float32 rows with unit stride (the fastest packer). */
void sdpa_pairs_keys_f32(const float *src, int64_t rs, int64_t k, int64_t n, uint32_t *dst,
                         int64_t ld);

#endif
