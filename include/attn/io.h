/*
 * attn/io.h — .npy and .safetensors files, and output sets
 * written all or nothing.
 *
 * Part of libattn's public API; include <attn.h> for all of it. Conventions
 * (status codes, attn_error, strided views, backward overwrites inputs'
 * gradients) are described in attn/core.h.
 */
#ifndef ATTN_IO_H
#define ATTN_IO_H

#include "attn/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ----------------------------------------------------------------- files */

/* An owned array read from a file; free with attn_array_free. Data is
 * float32 (other float and integer types are converted) or bool. */
typedef struct {
    char *name; /* tensor name (safetensors), NULL for .npy */
    attn_tensor t;
    char file_dtype[12]; /* the element type in the file: "<f4", "<i8", "BF16", ... */
    int64_t inexact;     /* integers float32 could not hold exactly (rounded), 0 if none */
} attn_array;

void attn_array_free(attn_array *a);

/* .npy versions 1.0/2.0/3.0; <f4, |b1, and <f8, <f2, signed and unsigned
 * integers of 1 to 8 bytes converted to float32 (integers above 2^24 may
 * round: see attn_array.inexact). Fortran order is read (converted to C
 * order). From a pipe, memory grows only as data arrives. */
attn_status attn_npy_read(const char *path, attn_array *out, attn_error *err);
/* Writes float32 (<f4), float16 (<f2) or bool (|b1), through a temporary
 * file and rename (bfloat16 has no .npy type: ATTN_ERR_DTYPE). */
attn_status attn_npy_write(const char *path, const attn_tensor *t, attn_error *err);

/* .safetensors: F32, F64, F16, BF16 and I8..I64, U8..U64 read (as float32),
 * BOOL read; F32, BF16, F16 and BOOL written. Tensors are returned in data
 * order. (A 16-bit file read as float32 converts back with
 * attn_tensor_convert exactly.) */
typedef struct {
    attn_array *arrays;
    size_t count;
} attn_safetensors;

attn_status attn_safetensors_read(const char *path, attn_safetensors *out, attn_error *err);
void attn_safetensors_free(attn_safetensors *st);
/* NULL if absent. */
const attn_array *attn_safetensors_find(const attn_safetensors *st, const char *name);
/* Writes the named tensors (any strides) atomically (temporary file + rename). */
attn_status attn_safetensors_write(const char *path, const char *const *names,
                                   const attn_tensor *tensors, size_t count, attn_error *err);

/* ----------------------------------------------------------- output sets */

/*
 * Several output files written all or nothing. attn_outputs_add checks a
 * destination at once, before anything is computed: symlinks are followed
 * (the target is replaced, the link kept); a directory, FIFO, device, socket
 * or read-only file is refused; "-" means standard output; two paths naming
 * the same file (by device and inode, or directory and name) are refused.
 * Each output is written to a temporary file in its target's directory.
 * attn_outputs_commit moves them all into place, keeping each replaced
 * file's mode (and, for root, owner): if any move fails the others are
 * undone, so every destination ends up with its new content or with exactly
 * what it held before. attn_outputs_free without a commit removes every
 * temporary file. Temporary files are named DIR/.attn-PID-N.tmp (and
 * .attn-PID-N.old for a replaced file while a commit runs).
 * A set is used by one thread at a time.
 */
#define ATTN_MAX_OUTPUTS 32

typedef struct attn_outputs attn_outputs;

attn_status attn_outputs_create(attn_outputs **out, attn_error *err);
/* Adds a destination; *index (may be NULL) receives its number, 0, 1, ... */
attn_status attn_outputs_add(attn_outputs *o, const char *path, int *index, attn_error *err);
/* One encoded file per output (.npy, .safetensors, a model checkpoint as
 * attn_model_save writes it), or raw bytes appended by any number of calls. */
attn_status attn_outputs_write_npy(attn_outputs *o, int index, const attn_tensor *t,
                                   attn_error *err);
attn_status attn_outputs_write_safetensors(attn_outputs *o, int index, const char *const *names,
                                           const attn_tensor *tensors, size_t count,
                                           attn_error *err);
struct attn_model;
attn_status attn_outputs_write_model(attn_outputs *o, int index, struct attn_model *m,
                                     attn_error *err);
attn_status attn_outputs_write_bytes(attn_outputs *o, int index, const void *data, size_t size,
                                     attn_error *err);
attn_status attn_outputs_commit(attn_outputs *o, attn_error *err);
/* Removes what was not committed, then frees. NULL is fine. */
void attn_outputs_free(attn_outputs *o);
/* Only unlinks the temporary files (async-signal-safe): for a SIGINT/SIGTERM
 * handler, which then ends the process without calling attn_outputs_free. */
void attn_outputs_remove_temporaries(const attn_outputs *o);

#ifdef __cplusplus
}
#endif
#endif /* ATTN_IO_H */
