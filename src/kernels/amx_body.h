/*
 * The AMX bfloat16 GEMM, written once against the tile layer (tile.h) and
 * instantiated twice: on the hardware (amx.c) and on the plain-C model
 * (amx_model.c). The includer defines AMX_FN(name), AMX_TARGET and
 * TILE_CONFIG / LOAD / STORE / ZERO / DP / RELEASE (tile numbers are
 * literals: the instructions encode them).
 *
 * C is cut into blocks of up to 32 rows × 32 columns, four 16 × 16 float32
 * tiles:
 *   tiles 0 1   C, row block 0 × column blocks 0 1
 *   tiles 2 3   C, row block 1 × column blocks 0 1
 *   tiles 4 5   A, row blocks 0 1: 16 rows × 16 pairs (64 bytes)
 *   tiles 6 7   B, column blocks 0 1: 16 pair rows × 16 columns
 * A block's k steps take 16 pairs each; a last step of fewer pairs (and a
 * last row block of fewer rows) takes a configuration of its own, C stored
 * and reloaded around the change (LDTILECFG zeroes the tiles).
 */
#include <string.h>

enum { AMX_KB = 16 }; /* pairs per k step: a 64-byte tile row */

/* The configuration of rows r0 and r1 (0: no second row block), kk pairs
 * per step and nb column blocks; tiles a block does not use stay 0 × 0. */
static void AMX_FN(config_for)(sdpa_tilecfg *cfg, int r0, int r1, int kk, int nb)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->palette_id = 1;
    const int rows[2] = {r0, r1};
    for (int i = 0; i < 2; ++i) {
        if (rows[i] == 0) continue;
        for (int j = 0; j < nb; ++j) {
            cfg->rows[2 * i + j] = (uint8_t)rows[i];
            cfg->colsb[2 * i + j] = SDPA_TILE_COLSB;
        }
        cfg->rows[4 + i] = (uint8_t)rows[i];
        cfg->colsb[4 + i] = (uint16_t)(4 * kk);
    }
    for (int j = 0; j < nb; ++j) {
        cfg->rows[6 + j] = (uint8_t)kk;
        cfg->colsb[6 + j] = SDPA_TILE_COLSB;
    }
}

/* The block's C tiles loaded from c, or stored to it. */
static AMX_TARGET void AMX_FN(c_move)(float *c, int64_t ldc, int r1, int nb, bool store)
{
    const int64_t s = ldc * (int64_t)sizeof(float);
#define AMX_C_MOVE(t, p) \
    do { \
        if (store) TILE_STORE(t, p, s); \
        else TILE_LOAD(t, p, s); \
    } while (0)
    AMX_C_MOVE(0, c);
    if (nb > 1) AMX_C_MOVE(1, c + 16);
    if (r1) AMX_C_MOVE(2, c + 16 * ldc);
    if (r1 && nb > 1) AMX_C_MOVE(3, c + 16 * ldc + 16);
#undef AMX_C_MOVE
}

/* One k step from pair l: A's row blocks and B's column blocks, then the
 * (up to) four products. */
static AMX_TARGET void AMX_FN(k_step)(const uint32_t *a, int64_t a_rs, const uint32_t *b,
                                      int64_t ldb, int64_t l, int r1, int nb)
{
    const int64_t as = a_rs * (int64_t)sizeof(uint32_t), bs = ldb * (int64_t)sizeof(uint32_t);
    TILE_LOAD(4, a + l, as);
    if (r1) TILE_LOAD(5, a + 16 * a_rs + l, as);
    TILE_LOAD(6, b + l * ldb, bs);
    if (nb > 1) TILE_LOAD(7, b + l * ldb + 16, bs);
    TILE_DP(0, 4, 6);
    if (nb > 1) TILE_DP(1, 4, 7);
    if (r1) TILE_DP(2, 5, 6);
    if (r1 && nb > 1) TILE_DP(3, 5, 7);
}

/* Configures the tiles unless *current already holds this shape. */
static AMX_TARGET void AMX_FN(configure)(int r0, int r1, int kk, int nb, int *current)
{
    const int key = r0 | r1 << 5 | kk << 10 | nb << 15;
    if (key == *current) return;
    sdpa_tilecfg cfg;
    AMX_FN(config_for)(&cfg, r0, r1, kk, nb);
    TILE_CONFIG(&cfg);
    *current = key;
}

/* A block of `rows` (1…32) rows and nb (1, 2) column blocks. */
static AMX_TARGET void AMX_FN(block)(int64_t rows, int nb, int64_t kp, const uint32_t *a,
                                     int64_t a_rs, const uint32_t *b, int64_t ldb, float *c,
                                     int64_t ldc, const float *row_scale, sdpa_gemm_mode mode,
                                     int *current)
{
    const int r0 = rows < 16 ? (int)rows : 16, r1 = (int)rows - r0;
    const int64_t kfull = kp - kp % AMX_KB, tail = kp - kfull;
    if (mode == SDPA_GEMM_SCALE_ADD) /* C = diag(row_scale)·C first, in memory */
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t x = 0; x < 16 * nb; ++x) c[r * ldc + x] *= row_scale[r];
    AMX_FN(configure)(r0, r1, kfull > 0 ? AMX_KB : (int)tail, nb, current);
    if (mode == SDPA_GEMM_SET) {
        TILE_ZERO(0);
        if (nb > 1) TILE_ZERO(1);
        if (r1) TILE_ZERO(2);
        if (r1 && nb > 1) TILE_ZERO(3);
    } else {
        AMX_FN(c_move)(c, ldc, r1, nb, false);
    }
    for (int64_t l = 0; l < kfull; l += AMX_KB) AMX_FN(k_step)(a, a_rs, b, ldb, l, r1, nb);
    if (tail && kfull) { /* a new shape: C through memory */
        AMX_FN(c_move)(c, ldc, r1, nb, true);
        AMX_FN(configure)(r0, r1, (int)tail, nb, current);
        AMX_FN(c_move)(c, ldc, r1, nb, false);
    }
    if (tail) AMX_FN(k_step)(a, a_rs, b, ldb, kfull, r1, nb);
    AMX_FN(c_move)(c, ldc, r1, nb, true);
}

/* sdpa_pair_gemm_fn (bf16_engine.h), n % 16 == 0. */
static AMX_TARGET void AMX_FN(gemm)(int64_t m, int64_t n, int64_t kp, const uint32_t *a,
                                    int64_t a_rs, const uint32_t *b, int64_t ldb, float *c,
                                    int64_t ldc, const float *row_scale, sdpa_gemm_mode mode)
{
    if (kp == 0) { /* no products: C = 0, C or diag(row_scale)·C */
        for (int64_t r = 0; r < m && mode != SDPA_GEMM_ADD; ++r)
            for (int64_t x = 0; x < n; ++x)
                c[r * ldc + x] = mode == SDPA_GEMM_SET ? 0.0f : c[r * ldc + x] * row_scale[r];
        return;
    }
    int current = -1;
    for (int64_t j = 0; j < n; j += 32) {
        const int nb = n - j >= 32 ? 2 : 1;
        for (int64_t i = 0; i < m; i += 32)
            AMX_FN(block)(m - i < 32 ? m - i : 32, nb, kp, a + i * a_rs, a_rs, b + j, ldb,
                          c + i * ldc + j, ldc, row_scale ? row_scale + i : NULL, mode, &current);
    }
    TILE_RELEASE();
}
