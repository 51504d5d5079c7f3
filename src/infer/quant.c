/*
 * The KV cache's storage formats, one row at a time: float32 / bfloat16 /
 * float16 (attn_store_float's rounding), int8 with a scale per row, and fp8
 * e4m3 with a scale per kv head (attn/kvcache.h states the rounding).
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
    default:
        for (int64_t d = 0; d < n; ++d) x[d] = attn_load_float(src, c->cfg.dtype, d);
    }
}
