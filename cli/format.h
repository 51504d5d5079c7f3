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

/* Most fractional digits printed, 0..8 (numpy's print precision, default 8).
 * Values that need fewer digits still print with fewer. */
void fmt_set_precision(int decimals);
/* Nonzero: always fixed-point notation, tiny values print as 0 (numpy's
 * suppress=True). */
void fmt_set_suppress(int on);

/* The same numbers as fmt_matrix, laid out as a table with row labels (left)
 * and/or column labels (a header line), either may be NULL (both NULL is
 * fmt_matrix). Every line starts with indent spaces. rows == 0 is one row. */
void fmt_table(FILE *f, const float *data, int64_t rows, int64_t cols, int64_t ld,
               const char *const *row_labels, const char *const *col_labels, int indent);

#endif
