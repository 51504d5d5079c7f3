/*
 * The tile layer of the AMX engine: the five operations the bfloat16
 * microkernel (amx_body.h) is written against, and a plain-C model of them
 * (amx_model.c) so that the kernel's packing, tails and layouts run on
 * every machine, AMX or not.
 *
 *   config(cfg)        LDTILECFG: palette 1, per tile t its rows (<= 16) and
 *                      bytes per row colsb (<= 64); every tile is zeroed
 *   load(t, p, s)      TILELOADD: row r of tile t = the colsb bytes at p + r·s
 *   store(t, p, s)     TILESTORED
 *   zero(t)            TILEZERO
 *   dpbf16ps(c, a, b)  TDPBF16PS: C (M × N fp32) += A (M × K bf16 pairs) ·
 *                      B (K pair rows × N, "VNNI": row k of B holds the pairs
 *                      (B[2k][n], B[2k+1][n]) of every column n)
 *   release()          TILERELEASE
 *
 * The model follows the Intel SDM's operation of TDPBF16PS, not the shorter
 * one of the intrinsics guide: for each row m of C and column n, two float32
 * accumulators t0 and t1 start at 0; for k = 0, 1, … (in order)
 *   t0 = fma(A[m].bf16[2k],   B[k].bf16[2n],   t0)
 *   t1 = fma(A[m].bf16[2k+1], B[k].bf16[2n+1], t1)
 * then C[m][n] = C[m][n] + (t0 + t1). Every operation rounds to nearest
 * even, treats subnormal inputs as zero (DAZ) and flushes subnormal results
 * to zero (FTZ), whatever MXCSR says. (A product of two bfloat16 values is
 * exact in float32 range, so each fma rounds once.) Shapes are checked as
 * the hardware does (#UD on a mismatch): A.rows == C.rows, A.colsb / 4 ==
 * B.rows, B.colsb == C.colsb; the model counts violations instead of
 * faulting (sdpa_tile_model_faults) and leaves C alone. Rows past a tile's
 * configured rows read and write nothing; loads zero the bytes past colsb.
 */
#ifndef ATTN_SDPA_TILE_H
#define ATTN_SDPA_TILE_H

#include <stdint.h>

enum { SDPA_TILES = 8, SDPA_TILE_ROWS = 16, SDPA_TILE_COLSB = 64 };

/* LDTILECFG's 64-byte memory operand (palette 1). */
typedef struct {
    uint8_t palette_id, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} sdpa_tilecfg;

_Static_assert(sizeof(sdpa_tilecfg) == 64, "LDTILECFG reads 64 bytes");

/* The model's tile registers are per thread, as the hardware's. */
void sdpa_tile_model_config(const sdpa_tilecfg *cfg);
void sdpa_tile_model_load(int t, const void *base, int64_t stride);
void sdpa_tile_model_store(int t, void *base, int64_t stride);
void sdpa_tile_model_zero(int t);
void sdpa_tile_model_dpbf16ps(int c, int a, int b);
void sdpa_tile_model_release(void);
/* Shape violations this thread's model has seen (the hardware would raise
 * #UD): always 0 for a correct kernel. */
unsigned long sdpa_tile_model_faults(void);

#endif
