/*
 * decode_rows.h's primitives in portable C (the readable definition), and
 * the choice of a table for the CPU.
 */
#include "decode_rows.h"

#include "../core/half.h"
#include "../kernels/kernels.h"

/* Element d of a raw row of format f (scales not applied). */
static inline float raw_at(kv_format f, const void *row, int64_t d)
{
    switch (f) {
    case KV_F32: return ((const float *)row)[d];
    case KV_BF16: return attn_bf16_to_f32(((const uint16_t *)row)[d]);
    case KV_F16: return attn_f16_to_f32(((const uint16_t *)row)[d]);
    case KV_I8: return (float)((const int8_t *)row)[d];
    case KV_E4M3: return kv_e4m3_decode(((const uint8_t *)row)[d]);
    case KV_Q4_0: return kv_q4_at(row, d);
    default: return kv_e4m3_decode(((const uint8_t *)row)[d]) * 0x1p-8f;
    }
}

static void scores_generic(kv_format f, const void *rows, int64_t n, int64_t n_out, int64_t D,
                           const float *q, int m, float *s, int64_t lds,
                           const float *row_scale, const void *next, int64_t next_bytes)
{
    (void)next, (void)next_bytes; /* the portable path leaves memory to the hardware */
    const size_t row_bytes = (size_t)kv_format_row_bytes(f, D);
    for (int64_t t = 0; t < n; ++t) {
        const void *x = (const char *)rows + (size_t)t * row_bytes;
        for (int r = 0; r < m; ++r) {
            float sum = 0.0f;
            for (int64_t d = 0; d < D; ++d) sum += q[r * D + d] * raw_at(f, x, d);
            s[r * lds + t] = !row_scale ? sum : sum * row_scale[t];
        }
    }
    for (int r = 0; r < m; ++r)
        for (int64_t t = n; t < n_out; ++t) s[r * lds + t] = 0.0f;
}

static void accumulate_generic(kv_format f, const void *rows, int64_t n, int64_t Dv,
                               const float *p, int64_t ldp, int m, const float *alpha,
                               float *acc, int64_t ldacc, const void *next, int64_t next_bytes)
{
    (void)next, (void)next_bytes;
    const size_t row_bytes = (size_t)kv_format_row_bytes(f, Dv);
    for (int r = 0; r < m; ++r)
        for (int64_t d = 0; d < Dv; ++d) acc[r * ldacc + d] *= alpha[r];
    for (int64_t t = 0; t < n; ++t) {
        const void *x = (const char *)rows + (size_t)t * row_bytes;
        for (int r = 0; r < m; ++r) {
            const float pr = p[r * ldp + t];
            for (int64_t d = 0; d < Dv; ++d) acc[r * ldacc + d] += pr * raw_at(f, x, d);
        }
    }
}

static void scale_generic(float *s, int64_t m, int64_t lds, int64_t lo, int64_t hi,
                          const float *scale)
{
    for (int64_t r = 0; r < m; ++r)
        for (int64_t t = lo; t < hi; ++t)
            s[r * lds + t] *= scale[t];
}

const kv_row_kernels kv_rows_generic = {"generic", scores_generic, accumulate_generic,
                                        scale_generic, false};

const kv_row_kernels *kv_row_kernels_select(void)
{
#if defined(__x86_64__) || defined(__i386__)
#if defined(__GNUC__) || defined(__clang__)
    const sdpa_isa isa = sdpa_isa_select();
    if (isa == SDPA_ISA_AVX512 && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        return &kv_rows_avx512;
    if (isa == SDPA_ISA_AVX512 || isa == SDPA_ISA_AVX2) /* both imply AVX2, FMA and F16C */
        return &kv_rows_avx2;
#endif
#endif
    return &kv_rows_generic;
}
