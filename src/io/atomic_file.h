/* One output staged in a temporary file next to its destination.
 *
 * attn_atomic_open resolves and checks the destination (destination.h) and
 * creates the temporary file in the target's directory (so the final rename
 * never crosses file systems), under a name of its own (".attn-PID-N.tmp")
 * that never depends on, or is cut from, the destination's name. Writes go
 * there. Committing is two steps so that a set of outputs can be committed
 * together and undone (outputs.c): attn_atomic_finish closes the file and
 * gives it the replaced file's mode and owner, attn_atomic_swap moves it into
 * place keeping a hard link to the replaced file, attn_atomic_undo puts that
 * back, attn_atomic_forget drops it. attn_atomic_abort removes whatever is
 * left. Standard output ("-") is staged in an unnamed temporary file and
 * copied out by the swap.
 *
 * No fsync: this protects against attn's own failures and signals, not
 * against power loss. Every call after the first failure is a no-op that
 * returns the same status. Messages start with the path as given.
 */
#ifndef ATTN_IO_ATOMIC_FILE_H
#define ATTN_IO_ATOMIC_FILE_H

#include "../core/internal.h"
#include "destination.h"

#include <stdio.h>

typedef enum {
    ATOMIC_WRITING = 0, /* temporary file open */
    ATOMIC_CREATING,    /* temp_path named, the file being created (it may exist) */
    ATOMIC_FINISHED,    /* closed, ready to move */
    ATOMIC_SWAPPED,     /* in place; the replaced file (if any) kept as `backup` */
    ATOMIC_DONE,        /* committed for good, or aborted */
} attn_atomic_state;

typedef struct {
    attn_destination dest;
    char *temp_path;   /* malloc'd; NULL for stdout */
    char *backup_path; /* malloc'd when the swap kept the replaced file */
    FILE *fp;
    volatile int state; /* attn_atomic_state; read by attn_atomic_remove_signal_safe */
    attn_status status; /* first failure, ATTN_OK while fine */
} attn_atomic_file;

attn_status attn_atomic_open(attn_atomic_file *f, const char *path, attn_error *err);
attn_status attn_atomic_write(attn_atomic_file *f, const void *data, size_t bytes, attn_error *err);

/*
 * Writes the elements of a strided view in C order (last index fastest), 4
 * bytes per ATTN_F32 element, 2 per 16-bit float (little-endian on every
 * host, io/byteorder.h) or 1 byte per ATTN_BOOL element. Bool elements other than 0/1 fail
 * with ATTN_ERR_ARG; `what` (may be NULL) names the tensor in that message.
 * The view must have been validated (attn_check_tensor).
 */
attn_status attn_atomic_write_tensor(attn_atomic_file *f, const attn_tensor *t,
                                     const char *what, attn_error *err);

attn_status attn_atomic_finish(attn_atomic_file *f, attn_error *err);
attn_status attn_atomic_swap(attn_atomic_file *f, attn_error *err);
/* Undoes a swap: the replaced file back, or the new one removed. */
void attn_atomic_undo(attn_atomic_file *f);
/* After every swap of a set succeeded: removes the kept replaced file. */
void attn_atomic_forget(attn_atomic_file *f);
/* finish + swap + forget, for a single output. */
attn_status attn_atomic_commit(attn_atomic_file *f, attn_error *err);
/* Removes the temporary file (undoing a swap not yet forgotten) and frees. */
void attn_atomic_abort(attn_atomic_file *f);
/* Only unlink(2) of the temporary file: safe in a signal handler. */
void attn_atomic_remove_signal_safe(const attn_atomic_file *f);

/* Thread-safe strerror: the text of errnum in buf. */
const char *attn_errno_text(int errnum, char *buf, size_t size);

#endif
