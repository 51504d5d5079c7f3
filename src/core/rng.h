/* attn's seeded random numbers: the public generator (attn.h) and the
 * fills parameter initialisation needs (internal). */
#ifndef ATTN_CORE_RNG_H
#define ATTN_CORE_RNG_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h" /* attn_rng and its draws are public */

/* x[i] ~ U(lo, hi), rounded to float. */
void attn_rng_fill_uniform(attn_rng *r, float *x, size_t n, double lo, double hi);
/* x[i] ~ N(mean, std²), rounded to float. */
void attn_rng_fill_normal(attn_rng *r, float *x, size_t n, double mean, double std);

#endif
