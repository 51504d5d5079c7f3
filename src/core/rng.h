/* attn's own seeded random numbers (internal): xoshiro256** seeded through
 * splitmix64. Used to initialise parameters. It is NOT PyTorch's generator:
 * the same seed gives the same numbers on every platform and build, but not
 * the numbers torch.manual_seed would give. */
#ifndef ATTN_CORE_RNG_H
#define ATTN_CORE_RNG_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t s[4];
} attn_rng;

/* Expands a 64-bit seed into the 256-bit state with splitmix64. */
void attn_rng_seed(attn_rng *r, uint64_t seed);
/* Next 64 random bits (xoshiro256**). */
uint64_t attn_rng_u64(attn_rng *r);
/* Uniform double in [0, 1) with 53 random bits. */
double attn_rng_uniform(attn_rng *r);
/* Standard normal N(0, 1) (Box–Muller; one draw per call). */
double attn_rng_normal(attn_rng *r);

/* x[i] ~ U(lo, hi), rounded to float. */
void attn_rng_fill_uniform(attn_rng *r, float *x, size_t n, double lo, double hi);
/* x[i] ~ N(mean, std²), rounded to float. */
void attn_rng_fill_normal(attn_rng *r, float *x, size_t n, double mean, double std);

#endif
