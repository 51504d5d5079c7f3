/*
 * The two row primitives of the decode kernel (decode.c), per instruction
 * set, for every storage format: a few query rows against consecutive cache
 * rows, which are read once and dequantized in registers (the raw format
 * value: int8 as an integer, e4m3 as its value; the per-row or per-head
 * scales are applied by the caller, outside the inner loops; q4_0's
 * per-block scales inside, with the codes).
 *
 *   scores      s[r*lds + t] = Σ_d q[r*D + d]·x_t[d]     r < m, t < n
 *               s[r*lds + t] = 0                         n <= t < n_out
 *   accumulate  acc[r*ldacc + d] += Σ_t p[r*ldp + t]·x_t[d]   r < m, d < Dv
 *   scale       s[r*lds + t] *= scale[t]   r < m, lo <= t < hi (a NaN scale
 *               makes NaN of a 0 too: callers pass only the keys a row sees)
 *
 * x_t is cache row t (rows D, resp. Dv, elements apart from `rows`), m in
 * 1..KV_ROWS. Both spread software prefetches of [next, next + next_bytes)
 * (the rows the following call reads; NULL: none) over their loop, so that
 * memory is requested well before it is needed. Sums are float32 in a fixed order (independent of the thread
 * count). accumulate with skip_zero never multiplies a row by a zero
 * probability (0·NaN would be NaN).
 */
#ifndef ATTN_INFER_DECODE_ROWS_H
#define ATTN_INFER_DECODE_ROWS_H

#include "cache.h"

enum { KV_ROWS = 4 };

typedef struct {
    const char *name;
    void (*scores)(kv_format f, const void *rows, int64_t n, int64_t n_out, int64_t D,
                   const float *q, int m, float *s, int64_t lds, const void *next,
                   int64_t next_bytes);
    void (*accumulate)(kv_format f, const void *rows, int64_t n, int64_t Dv, const float *p,
                       int64_t ldp, int m, float *acc, int64_t ldacc, bool skip_zero,
                       const void *next, int64_t next_bytes);
    void (*scale)(float *s, int64_t m, int64_t lds, int64_t lo, int64_t hi, const float *scale);
} kv_row_kernels;

extern const kv_row_kernels kv_rows_generic;
#if defined(__x86_64__) || defined(__i386__)
extern const kv_row_kernels kv_rows_avx512;
#endif

/* The table for this CPU and ATTN_ARCH (as the SDPA kernels choose). */
const kv_row_kernels *kv_row_kernels_select(void);

#endif /* ATTN_INFER_DECODE_ROWS_H */
