/* randn.h — a tiny seeded normal generator for the CLI's experiments and
 * random inputs (the CLI uses the library only through attn.h, so it has
 * its own): xoshiro256** seeded by splitmix64, Marsaglia's polar method for N(0, 1).
 * The same seed gives the same numbers on every platform. */
#ifndef ATTN_CLI_RANDN_H
#define ATTN_CLI_RANDN_H

#include <math.h>
#include <stdint.h>

typedef struct {
    uint64_t s[4];
    double spare; /* the polar method makes two normals per draw */
    int has_spare;
} randn_state;

static inline uint64_t randn_splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline void randn_seed(randn_state *r, uint64_t seed)
{
    for (int i = 0; i < 4; ++i) r->s[i] = randn_splitmix(&seed);
    r->has_spare = 0;
}

static inline uint64_t randn_u64(randn_state *r)
{
    uint64_t *s = r->s;
    uint64_t x = s[1] * 5, result = ((x << 7) | (x >> 57)) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}

/* Uniform in (0, 1]. */
static inline double randn_uniform(randn_state *r)
{
    return ((randn_u64(r) >> 11) + 1) * 0x1.0p-53;
}

/* N(0, 1) by Marsaglia's polar method (Box–Muller without sin/cos). */
static inline double randn_normal(randn_state *r)
{
    if (r->has_spare) {
        r->has_spare = 0;
        return r->spare;
    }
    double u, v, s;
    do {
        u = 2.0 * randn_uniform(r) - 1.0;
        v = 2.0 * randn_uniform(r) - 1.0;
        s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    double f = sqrt(-2.0 * log(s) / s);
    r->spare = v * f;
    r->has_spare = 1;
    return u * f;
}

#endif
