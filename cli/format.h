/* NumPy-style printing of vectors and matrices, so attn's numbers read like
 * the seeds' printed output. */
#ifndef ATTN_CLI_FORMAT_H
#define ATTN_CLI_FORMAT_H

#include <stdint.h>
#include <stdio.h>

/* Prints rows × cols floats (row stride ld) the way numpy prints a float32
 * array: fixed or scientific notation chosen for the whole array, each value
 * with the fewest digits (≤ 8 decimals) that identify it, decimal points
 * aligned. rows == 0 prints a 1-D vector. indent prefixes continuation rows. */
void fmt_matrix(FILE *f, const float *data, int64_t rows, int64_t cols, int64_t ld, int indent);

/* "Label (shape):\n" followed by the matrix and a blank line. */
void fmt_labeled(FILE *f, const char *label, const float *data, int64_t rows, int64_t cols);

#endif
