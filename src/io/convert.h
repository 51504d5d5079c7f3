/* Element conversions of every reader, in one place: little-endian file
 * elements (float64/32/16, bfloat16, signed and unsigned integers of 1 to 8
 * bytes, bool) to attn's float32 or bool. */
#ifndef ATTN_IO_CONVERT_H
#define ATTN_IO_CONVERT_H

#include "../core/internal.h"

typedef enum {
    CONV_F32, CONV_F64, CONV_F16, CONV_BF16, CONV_BOOL,
    CONV_I8, CONV_I16, CONV_I32, CONV_I64,
    CONV_U8, CONV_U16, CONV_U32, CONV_U64,
} conv_kind;

/* Bytes per file element. */
size_t conv_size(conv_kind k);
/* The dtype attn holds it as: ATTN_BOOL for CONV_BOOL, else ATTN_F32. */
attn_dtype conv_dtype(conv_kind k);

/*
 * Converts n elements from src to dst (float32, or one byte per bool). dst
 * may be src, with room for n elements of the larger of the two sizes. Floats round to
 * nearest (float64 out of range becomes ±inf). *inexact counts the integers
 * that float32 cannot hold exactly (|v| > 2^24 with low bits set); float
 * rounding is not counted. Returns false at the first bool byte other than
 * 0 or 1, with its index in *bad.
 */
bool conv_run(conv_kind k, const unsigned char *src, size_t n, void *dst, int64_t *inexact,
              size_t *bad);

#endif
