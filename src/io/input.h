/* Input files: opening one and reading what it declares without trusting
 * the declaration. A regular file's size bounds every length up front; a
 * pipe's size is unknown, so data is read in bounded chunks and the buffer
 * grows only as bytes actually arrive (a header that declares 9e10 elements
 * costs nothing until they come). */
#ifndef ATTN_IO_INPUT_H
#define ATTN_IO_INPUT_H

#include "../core/internal.h"

#include <stdio.h>

/* Opens path for binary reading. *file_size is its size for a regular file,
 * -1 otherwise (a pipe, a terminal). */
attn_status attn_open_input(const char *path, FILE **fp, int64_t *file_size, attn_error *err);

/* Reads exactly `bytes` bytes into a malloc'd buffer (*out, at least 1 byte
 * allocated). With known_size the buffer is allocated at once (the caller
 * has checked the length against the file size); otherwise it grows from
 * 1 MiB by doubling while data keeps coming. *got receives the bytes read;
 * a short read returns ATTN_ERR_FORMAT naming `what` ("file is truncated")
 * or ATTN_ERR_IO. *out is NULL after a failure. */
attn_status attn_read_bounded(FILE *fp, const char *path, size_t bytes, bool known_size,
                              const char *what, unsigned char **out, attn_error *err);

/* fread of `bytes` bytes that resumes after a signal interrupted the read
 * (EINTR from a handler installed without SA_RESTART, on a slow pipe);
 * returns the bytes read: fewer only at end of file or on a real error. */
size_t attn_read_retrying(FILE *fp, void *buf, size_t bytes);
/* fgetc, likewise resumed after EINTR. */
int attn_getc_retrying(FILE *fp);

#endif
