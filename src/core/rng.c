/* xoshiro256** (Blackman & Vigna) with splitmix64 seeding, and the uniform
 * and normal draws parameter initialisation needs. */
#include "rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void attn_rng_seed(attn_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; ++i) r->s[i] = splitmix64(&x);
}

uint64_t attn_rng_u64(attn_rng *r)
{
    uint64_t *s = r->s;
    const uint64_t result = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double attn_rng_uniform(attn_rng *r)
{
    return (double)(attn_rng_u64(r) >> 11) * 0x1.0p-53;
}

double attn_rng_normal(attn_rng *r)
{
    /* u1 in (0, 1] so the log is finite. */
    const double u1 = 1.0 - attn_rng_uniform(r);
    const double u2 = attn_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}

void attn_rng_fill_uniform(attn_rng *r, float *x, size_t n, double lo, double hi)
{
    for (size_t i = 0; i < n; ++i) {
        float v = (float)(lo + (hi - lo) * attn_rng_uniform(r));
        /* Rounding to float may land on hi itself; keep the open bound. */
        if (v >= hi && hi > lo) v = nextafterf((float)hi, (float)lo);
        x[i] = v;
    }
}

void attn_rng_fill_normal(attn_rng *r, float *x, size_t n, double mean, double std)
{
    for (size_t i = 0; i < n; ++i) x[i] = (float)(mean + std * attn_rng_normal(r));
}
