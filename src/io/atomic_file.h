/* Output files that appear whole or not at all.
 *
 * attn_atomic_open creates a temporary file next to the destination (same
 * directory, so the final rename never crosses file systems); writes go there;
 * attn_atomic_commit renames it over the destination; attn_atomic_abort (or a
 * failed commit) unlinks it. A failed write therefore never leaves a partial
 * file and never clobbers an existing one. No fsync: this protects against
 * our own failures, not against power loss.
 *
 * Every call after the first failure is a no-op that returns the same status,
 * so writers may check once per logical step. Messages start with the
 * destination path.
 */
#ifndef ATTN_IO_ATOMIC_FILE_H
#define ATTN_IO_ATOMIC_FILE_H

#include "../core/internal.h"

#include <stdio.h>

typedef struct {
    const char *path; /* destination, borrowed */
    char *temp_path;  /* malloc'd */
    FILE *fp;
    attn_status status; /* first failure, ATTN_OK while writing */
} attn_atomic_file;

attn_status attn_atomic_open(attn_atomic_file *f, const char *path, attn_error *err);
attn_status attn_atomic_write(attn_atomic_file *f, const void *data, size_t bytes, attn_error *err);

/*
 * Writes the elements of a strided view in C order (last index fastest), 4
 * bytes per ATTN_F32 element (host order, little-endian on every supported
 * target) or 1 byte per ATTN_BOOL element. Bool elements other than 0/1 fail
 * with ATTN_ERR_ARG; `what` (may be NULL) names the tensor in that message.
 * The view must have been validated (attn_check_tensor).
 */
attn_status attn_atomic_write_tensor(attn_atomic_file *f, const attn_tensor *t,
                                     const char *what, attn_error *err);

/* Closes and renames into place; on failure the temporary file is removed. */
attn_status attn_atomic_commit(attn_atomic_file *f, attn_error *err);
/* Closes and removes the temporary file. Safe after a failed commit. */
void attn_atomic_abort(attn_atomic_file *f);

/* Opens path for binary reading. *file_size is its size for a regular file,
 * -1 otherwise (a pipe: readers then rely on short reads). */
attn_status attn_open_input(const char *path, FILE **fp, int64_t *file_size, attn_error *err);

/* Thread-safe strerror: the text of errnum in buf. */
const char *attn_errno_text(int errnum, char *buf, size_t size);

#endif
