/* The plain-C model of the AMX tile instructions (tile.h states what is
 * modelled), and the AMX microkernel (amx_body.h) instantiated on it: the
 * "amx-model" engine, which runs on every machine. */
#include "bf16_engine.h"
#include "tile.h"

#include <float.h>
#include <math.h>
#include <string.h>

typedef struct {
    uint8_t data[SDPA_TILE_ROWS][SDPA_TILE_COLSB];
    int rows, colsb;
} model_tile;

static _Thread_local model_tile tiles[SDPA_TILES];
static _Thread_local unsigned long faults;

static bool tile_ok(int t)
{
    if (t >= 0 && t < SDPA_TILES && tiles[t].rows > 0) return true;
    ++faults;
    return false;
}

void sdpa_tile_model_config(const sdpa_tilecfg *cfg)
{
    memset(tiles, 0, sizeof tiles);
    if (cfg->palette_id != 1) { /* palette 0 would release the tiles */
        if (cfg->palette_id != 0) ++faults;
        return;
    }
    for (int t = 0; t < SDPA_TILES; ++t) {
        if (cfg->rows[t] > SDPA_TILE_ROWS || cfg->colsb[t] > SDPA_TILE_COLSB ||
            (cfg->rows[t] == 0) != (cfg->colsb[t] == 0)) {
            ++faults;
            memset(tiles, 0, sizeof tiles);
            return;
        }
        tiles[t].rows = cfg->rows[t];
        tiles[t].colsb = cfg->colsb[t];
    }
}

void sdpa_tile_model_load(int t, const void *base, int64_t stride)
{
    if (!tile_ok(t)) return;
    model_tile *x = &tiles[t];
    for (int r = 0; r < x->rows; ++r) {
        memcpy(x->data[r], (const char *)base + r * stride, (size_t)x->colsb);
        memset(x->data[r] + x->colsb, 0, (size_t)(SDPA_TILE_COLSB - x->colsb));
    }
}

void sdpa_tile_model_store(int t, void *base, int64_t stride)
{
    if (!tile_ok(t)) return;
    const model_tile *x = &tiles[t];
    for (int r = 0; r < x->rows; ++r)
        memcpy((char *)base + r * stride, x->data[r], (size_t)x->colsb);
}

void sdpa_tile_model_zero(int t)
{
    if (tile_ok(t)) memset(tiles[t].data, 0, sizeof tiles[t].data);
}

void sdpa_tile_model_release(void)
{
    memset(tiles, 0, sizeof tiles);
}

unsigned long sdpa_tile_model_faults(void)
{
    return faults;
}

/* DAZ: a subnormal input counts as a zero of its sign. */
static float daz(float x)
{
    return fpclassify(x) == FP_SUBNORMAL ? copysignf(0.0f, x) : x;
}

/* FTZ: a subnormal result becomes a zero of its sign. */
static float ftz(float x)
{
    return fabsf(x) < FLT_MIN ? copysignf(0.0f, x) : x;
}

/* fma(a, b, t) of bfloat16 a and b, rounded once to nearest even: a·b is
 * exact in double; t + a·b is exact in double unless the exponents are
 * more than 29 (product larger) or 37 (t larger) apart, and then the
 * smaller term is far below half an ulp of the larger, so rounding the
 * double sum to float gives the correctly rounded result all the same. */
static float fma_bf16(float a, float b, float t)
{
    return ftz((float)((double)t + (double)daz(a) * (double)daz(b)));
}

static float pair_elem(const uint8_t *row, int i)
{
    uint16_t h;
    memcpy(&h, row + 2 * i, sizeof h);
    return attn_bf16_to_f32(h);
}

void sdpa_tile_model_dpbf16ps(int c, int a, int b)
{
    if (!tile_ok(c) || !tile_ok(a) || !tile_ok(b)) return;
    model_tile *C = &tiles[c];
    const model_tile *A = &tiles[a], *B = &tiles[b];
    if (A->rows != C->rows || A->colsb / 4 != B->rows || B->colsb != C->colsb || A->colsb % 4 ||
        C->colsb % 4) {
        ++faults;
        return;
    }
    const int K = A->colsb / 4, N = C->colsb / 4;
    for (int m = 0; m < C->rows; ++m)
        for (int n = 0; n < N; ++n) {
            float t0 = 0.0f, t1 = 0.0f;
            for (int k = 0; k < K; ++k) {
                t0 = fma_bf16(pair_elem(A->data[m], 2 * k), pair_elem(B->data[k], 2 * n), t0);
                t1 = fma_bf16(pair_elem(A->data[m], 2 * k + 1), pair_elem(B->data[k], 2 * n + 1), t1);
            }
            float acc;
            memcpy(&acc, C->data[m] + 4 * n, sizeof acc);
            acc = ftz(daz(acc) + ftz(t0 + t1));
            memcpy(C->data[m] + 4 * n, &acc, sizeof acc);
        }
    for (int m = C->rows; m < SDPA_TILE_ROWS; ++m) memset(C->data[m], 0, SDPA_TILE_COLSB);
}

#define AMX_FN(name) amx_model_##name
#define AMX_TARGET
#define TILE_CONFIG(cfg) sdpa_tile_model_config(cfg)
#define TILE_LOAD(t, p, s) sdpa_tile_model_load((t), (p), (s))
#define TILE_STORE(t, p, s) sdpa_tile_model_store((t), (p), (s))
#define TILE_ZERO(t) sdpa_tile_model_zero(t)
#define TILE_DP(c, a, b) sdpa_tile_model_dpbf16ps((c), (a), (b))
#define TILE_RELEASE() sdpa_tile_model_release()
#include "amx_body.h"

const sdpa_bf16_engine sdpa_engine_amx_model = {
    .name = "amx-model",
    .npad = 16,
    .gemm = amx_model_gemm,
};
