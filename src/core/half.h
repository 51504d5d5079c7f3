/* The 16-bit float formats attn stores (IEEE binary16 "half" and bfloat16)
 * to and from float32, in portable C: widening is exact for every input;
 * narrowing rounds to nearest, ties to even (as F16C, AVX512_BF16 and
 * torch's .to() do), overflows to ±inf, keeps NaN a (quiet) NaN. The SIMD
 * kernels widen with their own instructions and must agree with these
 * (tests/test_lowp.c checks every half and bfloat16 value). */
#ifndef ATTN_HALF_H
#define ATTN_HALF_H

#include "attn.h"

#include <stdint.h>
#include <string.h>

static inline float attn_bits_to_f32(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint32_t attn_f32_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* bfloat16 is the top half of a float32. */
static inline float attn_bf16_to_f32(uint16_t h)
{
    return attn_bits_to_f32((uint32_t)h << 16);
}

static inline uint16_t attn_f32_to_bf16(float f)
{
    const uint32_t u = attn_f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(u >> 16 | 0x40); /* quiet NaN */
    return (uint16_t)((u + 0x7fffu + (u >> 16 & 1)) >> 16);
}

static inline float attn_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h >> 15) << 31;
    const uint32_t exponent = h >> 10 & 0x1f;
    uint32_t mantissa = h & 0x3ff;
    if (exponent == 0x1f) return attn_bits_to_f32(sign | 0x7f800000u | mantissa << 13);
    if (exponent != 0) return attn_bits_to_f32(sign | (exponent + 112) << 23 | mantissa << 13);
    if (mantissa == 0) return attn_bits_to_f32(sign);
    /* Subnormal: mantissa · 2^-24; shift the leading 1 into the implicit bit. */
    uint32_t e = 113;
    while (!(mantissa & 0x400)) {
        mantissa <<= 1;
        e--;
    }
    return attn_bits_to_f32(sign | e << 23 | (mantissa & 0x3ff) << 13);
}

static inline uint16_t attn_f32_to_f16(float f)
{
    const uint32_t u = attn_f32_to_bits(f), a = u & 0x7fffffffu;
    const uint16_t sign = (uint16_t)(u >> 16 & 0x8000);
    if (a > 0x7f800000u) return sign | 0x7e00 | (uint16_t)(a >> 13 & 0x3ff); /* quiet NaN */
    if (a >= 0x477ff000u) return sign | 0x7c00; /* >= 65520 rounds past 65504: inf */
    const uint32_t e = a >> 23;
    if (e < 113) { /* below 2^-14: a subnormal half, in units of 2^-24 */
        if (e < 102) return sign;                      /* below 2^-25: rounds to 0 */
        const uint32_t m = (a & 0x7fffff) | 0x800000, shift = 126 - e;
        uint32_t r = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) ++r; /* may carry into the smallest normal */
        return sign | (uint16_t)r;
    }
    uint32_t h = (e - 112) << 10 | (a >> 13 & 0x3ff);
    const uint32_t rem = a & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h; /* may carry into the exponent */
    return sign | (uint16_t)h;
}

/* Element idx of float data of dtype t (ATTN_F32, ATTN_BF16 or ATTN_F16). */
static inline float attn_load_float(const void *data, attn_dtype t, int64_t idx)
{
    if (t == ATTN_F32) return ((const float *)data)[idx];
    const uint16_t h = ((const uint16_t *)data)[idx];
    return t == ATTN_BF16 ? attn_bf16_to_f32(h) : attn_f16_to_f32(h);
}

static inline void attn_store_float(void *data, attn_dtype t, int64_t idx, float v)
{
    if (t == ATTN_F32) ((float *)data)[idx] = v;
    else ((uint16_t *)data)[idx] = t == ATTN_BF16 ? attn_f32_to_bf16(v) : attn_f32_to_f16(v);
}

static inline bool attn_is_float_dtype(attn_dtype t)
{
    return t == ATTN_F32 || t == ATTN_BF16 || t == ATTN_F16;
}

#endif
