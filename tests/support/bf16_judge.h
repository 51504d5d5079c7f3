/* bf16_judge.h — the accuracy rule of ATTN_PRECISION_BF16 (README
 * "bfloat16 products") for one tensor: against a float64 oracle on the
 * same bfloat16 inputs, the largest error of the result under test is at
 * most twice the plain bfloat16 baseline's plus BF16_CONTRACT_SLACK times
 * the tensor's largest magnitude. */
#ifndef ATTN_TEST_BF16_JUDGE_H
#define ATTN_TEST_BF16_JUDGE_H

#include "testutil.h"

/* A sixteenth of bfloat16's unit roundoff: a baseline whose error happens
 * to be tiny does not demand better than bfloat16. */
#define BF16_CONTRACT_SLACK 0x1p-13

/* Max |x - ref| over elements where ref is finite (inf where x is not
 * finite there); where ref is ±inf, x must equal it (else inf). *refmax:
 * the largest finite |ref|. */
double bf16_max_err(const double *x, const double *ref, int64_t n, double *refmax);

/* Checks the rule for `what` in g (a note with the figures when the suite
 * is verbose); *worst is raised to the error's share of the allowance. */
void bf16_judge(tu_group *g, const char *what, const double *got, const double *ref,
                const double *base, int64_t n, double *worst);

#endif
