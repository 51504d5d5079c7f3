/* Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
 * 3", SC 2011): a counter-based generator, so the random bits of dropout at
 * (b, h, i, j) are a pure function of the seed and those indices, whatever
 * thread, tile or ISA computes them, and the backward regenerates them. */
#ifndef ATTN_CORE_PHILOX_H
#define ATTN_CORE_PHILOX_H

#include <stdint.h>

/* Four 32-bit words of Philox4x32-10 for counter c and key k. */
static inline void attn_philox4x32(const uint32_t c[4], const uint32_t k[2], uint32_t out[4])
{
    uint32_t x0 = c[0], x1 = c[1], x2 = c[2], x3 = c[3], k0 = k[0], k1 = k[1];
    for (int round = 0; round < 10; ++round) {
        const uint64_t p0 = (uint64_t)0xD2511F53u * x0, p1 = (uint64_t)0xCD9E8D57u * x2;
        const uint32_t y0 = (uint32_t)(p1 >> 32) ^ x1 ^ k0, y2 = (uint32_t)(p0 >> 32) ^ x3 ^ k1;
        x1 = (uint32_t)p1;
        x3 = (uint32_t)p0;
        x0 = y0;
        x2 = y2;
        k0 += 0x9E3779B9u; /* the Weyl key schedule */
        k1 += 0xBB67AE85u;
    }
    out[0] = x0, out[1] = x1, out[2] = x2, out[3] = x3;
}

#endif
