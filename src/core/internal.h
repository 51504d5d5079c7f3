/* Internal helpers shared by every part of the library: error reporting,
 * overflow-checked arithmetic, threads. Never included by users. */
#ifndef ATTN_INTERNAL_H
#define ATTN_INTERNAL_H

#include "attn.h"

#include <stdarg.h>

#if defined(__GNUC__)
#define ATTN_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define ATTN_PRINTF(f, a)
#endif

/* Records status and a formatted message in err (if any) and returns status. */
attn_status attn_fail(attn_error *err, attn_status status, const char *fmt, ...) ATTN_PRINTF(3, 4);

/* Returns from the enclosing function with a message when cond holds. */
#define RETURN_IF(cond, err, status, ...)                                                     \
    do {                                                                                      \
        if (cond) return attn_fail((err), (status), __VA_ARGS__);                             \
    } while (0)

/* Propagates a non-OK status. */
#define RETURN_IF_ERROR(expr)                                                                 \
    do {                                                                                      \
        attn_status attn_s_ = (expr);                                                         \
        if (attn_s_ != ATTN_OK) return attn_s_;                                               \
    } while (0)

static inline void attn_ok(attn_error *err)
{
    if (err) {
        err->status = ATTN_OK;
        err->message[0] = '\0';
    }
}

/* a*b and a+b for non-negative sizes; false on overflow (result untouched). */
static inline bool attn_mul_ok(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}
static inline bool attn_add_ok(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}

/* Inside an OpenMP parallel region: this thread's slice of per-thread
 * scratch, base + thread·bytes (the one place that indexes scratch by
 * thread). zero: clear it first (padding must hold zeros, never garbage). */
void *attn_thread_scratch(void *base, size_t bytes, bool zero);

/* Threads for a call: requested if > 0, else attn_default_threads(). */
int attn_resolve_threads(int requested);

/* Checks a view: non-NULL data, the expected rank and dtype, non-negative
 * shape, and (for outputs) no zero/negative strides on dims of size > 1.
 * Also checks that the element count fits in int64. */
attn_status attn_check_tensor(const attn_tensor *t, const char *name, int ndim, attn_dtype dtype,
                              bool is_output, attn_error *err);
/* attn_check_tensor for float data of any storage type (float32, bfloat16,
 * float16). */
attn_status attn_check_float_tensor(const attn_tensor *t, const char *name, int ndim,
                                    bool is_output, attn_error *err);
/* attn_tensor_convert of two views already checked (same shape). */
void attn_tensor_convert_unchecked(const attn_tensor *src, attn_tensor *dst);

/* An output must not share memory with an input (the computation reads the
 * input while writing the output). Compares the byte ranges the two views
 * span, so interleaved views of one buffer count as sharing. Both already
 * checked with attn_check_tensor; NULL skips. */
attn_status attn_check_disjoint(const attn_tensor *out, const char *out_name,
                                const attn_tensor *in, const char *in_name, attn_error *err);
/* Every memory rule of one call: no output shares memory with an input
 * (attn_check_disjoint), with another output, or any tensor with the
 * caller's workspace. NULL tensors and a NULL workspace skip. */
attn_status attn_check_call_memory(const attn_tensor *const *outs, const char *const *out_names,
                                   int nout, const attn_tensor *const *ins,
                                   const char *const *in_names, int nin, const void *workspace,
                                   size_t workspace_size, attn_error *err);

#endif
