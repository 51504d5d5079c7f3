/* The file encoders, writing into a staged output (atomic_file.h): shared by
 * the one-file writers (attn_npy_write, ...) and output sets (outputs.c). */
#ifndef ATTN_IO_ENCODE_H
#define ATTN_IO_ENCODE_H

#include "atomic_file.h"

attn_status attn_npy_encode(attn_atomic_file *f, const attn_tensor *t, attn_error *err);
attn_status attn_safetensors_encode(attn_atomic_file *f, const char *const *names,
                                    const attn_tensor *tensors, size_t count, attn_error *err);
/* src/train/checkpoint.c */
attn_status attn_model_encode(attn_atomic_file *f, attn_model *m, attn_error *err);

#endif
