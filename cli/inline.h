/* Matrices typed on the command line ("1,2,3;3,3,2") or read from .npy, and
 * other small argument parsers the teaching commands share. */
#ifndef ATTN_CLI_INLINE_H
#define ATTN_CLI_INLINE_H

#include "cli.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Parses an inline matrix. Rows are separated by ';', values by ',' and/or
 * spaces: "1,2,3;3,3,2" or "1 2 3; 3 3 2" is 2 × 3. The NumPy spelling
 * "[[1,2,3],[3,3,2]]" works too, and "[1,2,3]" or "1,2,3" is one row.
 * Values must be finite numbers and every row the same length.
 * On success *data is malloc'd (rows*cols floats, C order). On failure
 * writes a message (without the option name) to err and returns false.
 */
bool inline_parse_matrix(const char *text, float **data, int64_t *rows, int64_t *cols, char *err,
                         size_t err_size);

/*
 * The value of a matrix option: a path ending in ".npy" is read as a 1-D
 * (one row), 2-D, or (1, rows, cols) float array; anything else is parsed
 * inline. On failure
 * prints one line ("attn CMD: --x: ...") and returns false.
 */
bool cli_matrix_arg(const cli_command *cmd, const char *option, const char *value, float **data,
                    int64_t *rows, int64_t *cols);

/*
 * Splits a token list into words: "the hunter saw a duck" or
 * "the,hunter,saw" (commas take precedence when present, so a token may
 * contain spaces). Returns the count and a malloc'd array of malloc'd
 * strings in *words (free with inline_free_words), or -1 on an empty list.
 */
int inline_split_words(const char *text, char ***words);
void inline_free_words(char **words, int count);

#endif
