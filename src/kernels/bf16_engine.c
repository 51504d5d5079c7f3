/* The choice of ATTN_PRECISION_BF16's engine (bf16_engine.h) and the
 * packing of operands into pairs, portable C with AVX-512 paths for
 * bfloat16 rows. */
#include "bf16_engine.h"
#include "bf16dot.h"

#include <stdlib.h>
#include <string.h>

bool sdpa_engine_runs(sdpa_engine_id id, const sdpa_kernels *kern)
{
    switch (id) {
    case SDPA_ENGINE_F32:
    case SDPA_ENGINE_AMX_MODEL:
        return kern->npad % sdpa_engine_amx_model.npad == 0;
#if defined(__x86_64__)
    case SDPA_ENGINE_AVX512BF16:
        return kern == &sdpa_kernels_avx512 && sdpa_bf16dot_available();
    case SDPA_ENGINE_AMX:
        return kern->npad % sdpa_engine_amx.npad == 0 && sdpa_amx_available();
#endif
    default:
        return false;
    }
}

static const sdpa_bf16_engine *engine_of(sdpa_engine_id id)
{
    switch (id) {
    case SDPA_ENGINE_AMX_MODEL:
        return &sdpa_engine_amx_model;
#if defined(__x86_64__)
    case SDPA_ENGINE_AVX512BF16:
        return &sdpa_engine_avx512bf16;
    case SDPA_ENGINE_AMX:
        return &sdpa_engine_amx;
#endif
    default:
        return NULL;
    }
}

const sdpa_bf16_engine *sdpa_engine_select(const sdpa_kernels *kern)
{
    sdpa_engine_id best = SDPA_ENGINE_F32;
    if (sdpa_engine_runs(SDPA_ENGINE_AMX, kern))
        best = SDPA_ENGINE_AMX;
    else if (sdpa_engine_runs(SDPA_ENGINE_AVX512BF16, kern))
        best = SDPA_ENGINE_AVX512BF16;
    const char *env = getenv("ATTN_ENGINE");
    sdpa_engine_id want = best;
    if (env && strcmp(env, "amx") == 0) want = SDPA_ENGINE_AMX;
    else if (env && strcmp(env, "avx512bf16") == 0) want = SDPA_ENGINE_AVX512BF16;
    else if (env && strcmp(env, "f32") == 0) want = SDPA_ENGINE_F32;
    else if (env && strcmp(env, "amx-model") == 0) want = SDPA_ENGINE_AMX_MODEL;
    return engine_of(sdpa_engine_runs(want, kern) ? want : best);
}

const char *attn_engine(void)
{
    const sdpa_isa isa = sdpa_isa_select();
    const sdpa_bf16_engine *e =
        isa == SDPA_ISA_REFERENCE ? NULL : sdpa_engine_select(sdpa_kernels_for(isa));
    return e ? e->name : "f32";
}

/* x of dtype t rounded to bfloat16. */
static inline uint32_t to_bf16(attn_dtype t, const void *src, int64_t idx)
{
    if (t == ATTN_BF16) return ((const uint16_t *)src)[idx];
    return attn_f32_to_bf16(attn_load_float(src, t, idx));
}

static inline uint32_t pair_at(attn_dtype t, const void *src, int64_t i0, int64_t i1, bool second)
{
    return to_bf16(t, src, i0) | (second ? to_bf16(t, src, i1) << 16 : 0u);
}

void sdpa_pairs_rows(attn_dtype t, const void *src, int64_t rs, int64_t cs, int64_t rows,
                     int64_t k, uint32_t *dst, int64_t ld)
{
    const int64_t kp = (k + 1) / 2;
    for (int64_t r = 0; r < rows; ++r) {
        uint32_t *d = dst + r * ld;
        if (t == ATTN_BF16 && cs == 1) { /* already pairs */
            memcpy(d, (const uint16_t *)src + r * rs, (size_t)k * sizeof(uint16_t));
            if (k % 2) ((uint16_t *)d)[k] = 0;
            continue;
        }
        if (t == ATTN_F32 && cs == 1) { /* the common case, vectorisable */
            const float *s = (const float *)src + r * rs;
            for (int64_t l = 0; l < k / 2; ++l)
                d[l] = attn_f32_to_bf16(s[2 * l]) | (uint32_t)attn_f32_to_bf16(s[2 * l + 1]) << 16;
            if (k % 2) d[kp - 1] = attn_f32_to_bf16(s[k - 1]);
            continue;
        }
        for (int64_t l = 0; l < kp; ++l)
            d[l] = pair_at(t, src, r * rs + 2 * l * cs, r * rs + (2 * l + 1) * cs, 2 * l + 1 < k);
    }
}

void sdpa_pairs_kt(attn_dtype t, const void *src, int64_t rs, int64_t cs, int64_t n, int64_t k,
                   uint32_t *dst, int64_t ld)
{
#if defined(__x86_64__)
    if (t == ATTN_BF16 && cs == 1 && k % 2 == 0 && sdpa_bf16dot_available()) {
        sdpa_bf16dot_pack_kt(src, rs, n, k, dst, ld);
        return;
    }
    if (t == ATTN_F32 && cs == 1 && ld % 16 == 0 && sdpa_bf16dot_available()) {
        sdpa_bf16dot_pack_kt_f32(src, rs, n, k, dst, ld);
        return;
    }
#endif
    const int64_t kp = (k + 1) / 2;
    for (int64_t l = 0; l < kp; ++l) {
        uint32_t *d = dst + l * ld;
        for (int64_t j = 0; j < n; ++j)
            d[j] = pair_at(t, src, j * rs + 2 * l * cs, j * rs + (2 * l + 1) * cs, 2 * l + 1 < k);
        for (int64_t j = n; j < ld; ++j) d[j] = 0;
    }
}

bool sdpa_pairs_keys(attn_dtype t, const void *src, int64_t rs, int64_t cs, int64_t k,
                     int64_t n, uint32_t *dst, int64_t ld)
{
#if defined(__x86_64__)
    if (t == ATTN_BF16 && cs == 1 && sdpa_bf16dot_available())
        return sdpa_bf16dot_pack_v(src, rs, k, n, dst, ld);
    if (t == ATTN_F32 && cs == 1 && sdpa_bf16dot_available())
        return sdpa_bf16dot_pairs_keys_f32(src, rs, k, n, dst, ld);
#endif
    uint32_t nonfinite = 0;
    for (int64_t l = 0; 2 * l < k; ++l) {
        uint32_t *d = dst + l * ld;
        const bool second = 2 * l + 1 < k;
        if (t == ATTN_F32 && cs == 1) { /* the common case, vectorisable */
            const float *s0 = (const float *)src + 2 * l * rs, *s1 = second ? s0 + rs : s0;
            for (int64_t x = 0; x < n; ++x) {
                const uint32_t lo = attn_f32_to_bf16(s0[x]);
                const uint32_t hi = second ? attn_f32_to_bf16(s1[x]) : 0u;
                nonfinite |= ((lo & 0x7f80u) == 0x7f80u) | ((hi & 0x7f80u) == 0x7f80u);
                d[x] = lo | hi << 16;
            }
        } else {
            for (int64_t x = 0; x < n; ++x) {
                const uint32_t p = pair_at(t, src, 2 * l * rs + x * cs, (2 * l + 1) * rs + x * cs,
                                           second);
                nonfinite |= ((p & 0x7f80u) == 0x7f80u) | ((p >> 16 & 0x7f80u) == 0x7f80u);
                d[x] = p;
            }
        }
        for (int64_t x = n; x < ld; ++x) d[x] = 0;
    }
    return !nonfinite;
}

void sdpa_pairs_narrow(const float *src, int64_t n, uint16_t *dst)
{
#if defined(__x86_64__)
    if (sdpa_bf16dot_available()) {
        sdpa_bf16dot_narrow(src, n, dst);
    } else
#endif
    {
        for (int64_t i = 0; i < n; ++i) dst[i] = attn_f32_to_bf16(src[i]);
    }
    if (n % 2) dst[n] = 0;
}

int64_t sdpa_pair_scratch(int64_t m, int64_t k, int64_t n)
{
    return (2 * m + n) * ((k + 1) / 2);
}

void sdpa_pairs_rows_f32(const float *src, int64_t rs, int64_t rows, int64_t k, uint32_t *dst,
                         int64_t ld)
{
#if defined(__x86_64__)
    if (sdpa_bf16dot_available()) {
        for (int64_t r = 0; r < rows; ++r)
            sdpa_pairs_narrow(src + r * rs, k, (uint16_t *)(dst + r * ld));
        return;
    }
#endif
    sdpa_pairs_rows(ATTN_F32, src, rs, 1, rows, k, dst, ld);
}

/* The A operand of float32 rows (a_cs = 1) or of columns (a_rs = 1: Aᵀ's
 * rows, paired and then transposed), in tmp's room if needed. */
static void pairs_a_f32(const float *a, int64_t a_rs, int64_t a_cs, int64_t m, int64_t k,
                        uint32_t *dst, uint32_t *tmp)
{
    const int64_t kp = (k + 1) / 2;
    if (a_cs == 1) {
        sdpa_pairs_rows_f32(a, a_rs, m, k, dst, kp);
        return;
    }
#if defined(__x86_64__)
    if (sdpa_bf16dot_available() && a_rs == 1) {
        sdpa_bf16dot_pairs_keys_f32(a, a_cs, k, m, tmp, m);
        sdpa_bf16dot_transpose32(tmp, m, kp, m, dst, kp);
        return;
    }
#else
    (void)tmp;
#endif
    sdpa_pairs_rows(ATTN_F32, a, a_rs, a_cs, m, k, dst, kp);
}

void sdpa_pairs_keys_f32(const float *src, int64_t rs, int64_t k, int64_t n, uint32_t *dst,
                         int64_t ld)
{
#if defined(__x86_64__)
    if (sdpa_bf16dot_available()) {
        sdpa_bf16dot_pairs_keys_f32(src, rs, k, n, dst, ld);
        return;
    }
#endif
    sdpa_pairs_keys(ATTN_F32, src, rs, 1, k, n, dst, ld);
}

void sdpa_pair_gemm_f32(const sdpa_bf16_engine *eng, uint32_t *scratch, int64_t m, int64_t n,
                        int64_t k, const float *a, int64_t a_rs, int64_t a_cs, const float *b,
                        int64_t ldb, const uint32_t *bp, int64_t ldbp, float *c, int64_t ldc,
                        const float *row_scale, sdpa_gemm_mode mode)
{
    const int64_t kp = (k + 1) / 2;
    uint32_t *pa = scratch, *pb = scratch + m * kp, *tmp = pb + n * kp;
    pairs_a_f32(a, a_rs, a_cs, m, k, pa, tmp);
    if (!bp) {
        sdpa_pairs_keys_f32(b, ldb, k, n, pb, n);
        bp = pb, ldbp = n;
    }
    eng->gemm(m, n, kp, pa, kp, bp, ldbp, c, ldc, row_scale, mode);
}
