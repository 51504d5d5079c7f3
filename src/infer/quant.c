/*
 * The KV cache's storage formats, one row at a time: float32 / bfloat16 /
 * float16 (attn_store_float's rounding), int8 with a scale per row, fp8
 * e4m3 with a scale per kv head, and ggml's q4_0 blocks of 32 with a
 * float16 scale each (attn/kvcache.h states the rounding).
 */
#include "../core/half.h"
#include "cache.h"

#include <math.h>

enum { E4M3_MAX_CODE = 0x7e, E4M3_NAN = 0x7f }; /* 0x7e = 448 */

/* e4m3fn: s eeee mmm, bias 7; exponent 0 is subnormal (m/8 · 2^-6); the
 * all-ones pattern s 1111 111 is NaN, there are no infinities. */
float kv_e4m3_decode(uint8_t b)
{
    const int e = b >> 3 & 0xf, m = b & 7;
    const float sign = b & 0x80 ? -1.0f : 1.0f;
    if (e == 0xf && m == 7) return NAN;
    if (e == 0) return sign * ldexpf((float)m, -9);
    return sign * ldexpf((float)(8 + m), e - 10);
}

uint8_t kv_e4m3_encode(float x)
{
    const uint32_t bits = attn_f32_to_bits(x);
    const uint8_t sign = (uint8_t)(bits >> 24 & 0x80);
    const float a = fabsf(x);
    if (a != a) return sign | E4M3_NAN;
    if (a >= 448.0f) return sign | E4M3_MAX_CODE; /* saturate (inf too) */
    if (a < 0x1p-6f)                              /* subnormal: steps of 2^-9, exact scaling */
        return sign | (uint8_t)rintf(a * 512.0f); /* rint: nearest even; 8 is 2^-6's code */
    /* normal: keep 3 of float's 23 mantissa bits, nearest even; a carry
     * moves into the exponent, which is what the code's layout wants */
    const uint32_t u = attn_f32_to_bits(a), mant = u & 0x7fffff;
    uint32_t code = ((u >> 23) - 127 + 7) << 3 | mant >> 20;
    const uint32_t rest = mant & 0xfffff, half = 0x80000;
    if (rest > half || (rest == half && (code & 1))) code++;
    return sign | (uint8_t)(code > E4M3_MAX_CODE ? E4M3_MAX_CODE : code);
}

/* int8, symmetric: s = max|x| / 127, q = rne(x / s). */
static void store_int8(int8_t *q, float *scale, const float *x, int64_t n)
{
    float amax = 0.0f;
    bool finite = true;
    for (int64_t d = 0; d < n; ++d) {
        finite &= isfinite(x[d]);
        if (fabsf(x[d]) > amax) amax = fabsf(x[d]);
    }
    const float s = finite ? amax / 127.0f : NAN;
    *scale = s;
    for (int64_t d = 0; d < n; ++d) {
        const float r = s > 0.0f ? rintf(x[d] / s) : 0.0f;
        q[d] = (int8_t)(r > 127.0f ? 127 : r < -127.0f ? -127 : r);
    }
}

/* q4_0, one block of 32: d = float16(m / -8) for m the value of largest
 * magnitude, codes rne(x / d) + 8 in 0..15, value j in the low nibble of
 * byte j (j < 16) or the high nibble of byte j - 16. */
static void store_q4_block(uint8_t *blk, const float *x)
{
    float m = 0.0f;
    bool finite = true;
    for (int j = 0; j < KV_Q4_BLOCK; ++j) {
        finite &= isfinite(x[j]);
        if (fabsf(x[j]) > fabsf(m)) m = x[j];
    }
    float d = m / -8.0f;
    if (fabsf(d) > 65504.0f) d = copysignf(65504.0f, d); /* float16's largest */
    const uint16_t d16 = attn_f32_to_f16(finite ? d : NAN);
    blk[0] = (uint8_t)(d16 & 0xff); /* little-endian, as ggml writes it */
    blk[1] = (uint8_t)(d16 >> 8);
    const float dr = attn_f16_to_f32(d16);
    uint8_t code[KV_Q4_BLOCK];
    for (int j = 0; j < KV_Q4_BLOCK; ++j) {
        const float r = finite && dr != 0.0f ? rintf(x[j] / dr) : 0.0f;
        code[j] = (uint8_t)((r > 7.0f ? 7 : r < -8.0f ? -8 : (int)r) + 8);
    }
    for (int j = 0; j < KV_Q4_BLOCK / 2; ++j)
        blk[2 + j] = (uint8_t)(code[j] | code[j + KV_Q4_BLOCK / 2] << 4);
}

/* Value j of a q4_0 row. */
float kv_q4_at(const uint8_t *row, int64_t j)
{
    const uint8_t *blk = row + j / KV_Q4_BLOCK * KV_Q4_BLOCK_BYTES;
    const int i = (int)(j % KV_Q4_BLOCK);
    const int code = i < KV_Q4_BLOCK / 2 ? blk[2 + i] & 15 : blk[2 + i - KV_Q4_BLOCK / 2] >> 4;
    return attn_f16_to_f32((uint16_t)(blk[0] | blk[1] << 8)) * (float)(code - 8);
}

bool kv_store_row(attn_kvcache *c, bool v, int64_t row, int64_t head, const float *x, int64_t n)
{
    void *dst = kv_row_data(c, v, row);
    bool finite = true;
    for (int64_t d = 0; d < n; ++d) finite &= isfinite(x[d]);
    switch (c->fmt) {
    case KV_I8:
        store_int8(dst, (v ? c->v_rs : c->k_rs) + row, x, n);
        break;
    case KV_E4M3: {
        const float s = (v ? c->v_hs : c->k_hs)[head];
        uint8_t *q = dst;
        for (int64_t d = 0; d < n; ++d) q[d] = kv_e4m3_encode(x[d] / s);
        break;
    }
    case KV_Q4_0:
        for (int64_t b = 0; b < n / KV_Q4_BLOCK; ++b)
            store_q4_block((uint8_t *)dst + b * KV_Q4_BLOCK_BYTES, x + b * KV_Q4_BLOCK);
        break;
    default:
        for (int64_t d = 0; d < n; ++d) attn_store_float(dst, c->cfg.dtype, d, x[d]);
    }
    return !finite;
}

void kv_load_row(const attn_kvcache *c, bool v, int64_t row, int64_t head, float *x, int64_t n)
{
    const void *src = kv_row_data(c, v, row);
    switch (c->fmt) {
    case KV_I8: {
        const float s = (v ? c->v_rs : c->k_rs)[row];
        for (int64_t d = 0; d < n; ++d) x[d] = s * (float)((const int8_t *)src)[d];
        return;
    }
    case KV_E4M3: {
        const float s = (v ? c->v_hs : c->k_hs)[head];
        for (int64_t d = 0; d < n; ++d) x[d] = s * kv_e4m3_decode(((const uint8_t *)src)[d]);
        return;
    }
    case KV_Q4_0:
        for (int64_t d = 0; d < n; ++d) x[d] = kv_q4_at(src, d);
        return;
    default:
        for (int64_t d = 0; d < n; ++d) x[d] = attn_load_float(src, c->cfg.dtype, d);
    }
}
