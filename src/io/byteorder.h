/* Byte order of the files attn writes. Both formats are little-endian on
 * disk (.npy '<f4'/'<f2', .safetensors by specification), whatever the
 * host: a big-endian host (s390x, ppc64) reverses each element's bytes on
 * the way out. (The readers assemble values byte by byte, convert.c, so
 * they need no counterpart.) */
#ifndef ATTN_IO_BYTEORDER_H
#define ATTN_IO_BYTEORDER_H

#include <stddef.h>

#if defined(__BYTE_ORDER__) && defined(__ORDER_BIG_ENDIAN__) && \
    __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define ATTN_HOST_BIG_ENDIAN 1
#else
#define ATTN_HOST_BIG_ENDIAN 0
#endif

/* n elements of size bytes each at p, host order -> little-endian, in place. */
static inline void attn_host_to_le(unsigned char *p, size_t size, size_t n)
{
    if (!ATTN_HOST_BIG_ENDIAN || size < 2) return;
    for (size_t e = 0; e < n; ++e, p += size)
        for (size_t i = 0, j = size - 1; i < j; ++i, --j) {
            const unsigned char t = p[i];
            p[i] = p[j];
            p[j] = t;
        }
}

#endif
