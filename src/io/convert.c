/* Element conversions shared by the .npy and .safetensors readers. */
#include "convert.h"

#include "../core/half.h"

#include <string.h>

size_t conv_size(conv_kind k)
{
    switch (k) {
    case CONV_F64: case CONV_I64: case CONV_U64: return 8;
    case CONV_F32: case CONV_I32: case CONV_U32: return 4;
    case CONV_F16: case CONV_BF16: case CONV_I16: case CONV_U16: return 2;
    default: return 1;
    }
}

attn_dtype conv_dtype(conv_kind k)
{
    return k == CONV_BOOL ? ATTN_BOOL : ATTN_F32;
}

static uint64_t load_le(const unsigned char *b, size_t size)
{
    uint64_t v = 0;
    for (size_t i = size; i-- > 0;) v = v << 8 | b[i];
    return v;
}

bool conv_run(conv_kind k, const unsigned char *src, size_t n, void *dst, int64_t *inexact,
              size_t *bad)
{
    const size_t size = conv_size(k);
    unsigned char *out = dst;
    /* In place, outputs no larger than inputs go forward and larger ones
     * backward, so every element is read before a write reaches it. */
    const size_t out_size = k == CONV_BOOL ? 1 : sizeof(float);
    const bool backward = out_size > size;
    for (size_t step = 0; step < n; ++step) {
        const size_t i = backward ? n - 1 - step : step;
        const unsigned char *b = src + i * size;
        const uint64_t raw = load_le(b, size);
        float f;
        switch (k) {
        case CONV_BOOL:
            if (raw > 1) {
                *bad = i;
                return false;
            }
            out[i] = (unsigned char)raw;
            continue;
        case CONV_F32: f = attn_bits_to_f32((uint32_t)raw); break;
        case CONV_F64: {
            double v;
            memcpy(&v, &raw, sizeof v);
            f = (float)v;
            break;
        }
        case CONV_F16: f = attn_f16_to_f32((uint16_t)raw); break;
        case CONV_BF16: f = attn_bf16_to_f32((uint16_t)raw); break;
        case CONV_U8: case CONV_U16: case CONV_U32: case CONV_U64:
            f = (float)raw;
            /* exact iff converting back gives raw; values that round up to
             * 2^64 (e.g. 2^64 - 1) are out of uint64's range: inexact */
            if (raw > (1u << 24) && (f >= 18446744073709551616.0f || (uint64_t)f != raw))
                ++*inexact;
            break;
        default: { /* signed: sign-extend from size bytes */
            const unsigned shift = (unsigned)(64 - 8 * size);
            const int64_t v = (int64_t)(raw << shift) >> shift;
            f = (float)v;
            /* exact iff converting back gives v (the float is within range) */
            if ((v > (1 << 24) || v < -(1 << 24)) &&
                (f >= 9.2233720368547758e18f || (int64_t)f != v))
                ++*inexact;
            break;
        }
        }
        memcpy(out + i * sizeof f, &f, sizeof f);
    }
    return true;
}
