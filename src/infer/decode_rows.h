/*
 * The two row primitives of the decode kernel (decode.c), per instruction
 * set, for every storage format: a few query rows against consecutive cache
 * rows, which are read once and dequantized in registers (the raw format
 * value: int8 as an integer, e4m3 as its value; the per-row or per-head
 * scales are applied by the caller, outside the inner loops; q4_0's
 * per-block scales inside, with the codes).
 *
 *   scores      s[r*lds + t] = Σ_d q[r*D + d]·x_t[d]     r < m, t < n
 *               s[r*lds + t] *= row_scale[t]  (row_scale not NULL: int8's
 *                 per-row scale, folded in as the sums are stored; NaN for
 *                 a non-finite row makes its scores NaN, 0 included)
 *               s[r*lds + t] = 0                         n <= t < n_out
 *   accumulate  acc[r*ldacc + d] = alpha[r]·acc[r*ldacc + d]
 *                                  + Σ_t p[r*ldp + t]·x_t[d]   r < m, d < Dv
 *               (the online softmax's rescale folded into the pass that
 *               holds the accumulators in registers anyway)
 *   scale       s[r*lds + t] *= scale[t]   r < m, lo <= t < hi (a NaN scale
 *               makes NaN of a 0 too: callers pass only the keys a row sees)
 *
 * x_t is cache row t (rows D, resp. Dv, elements apart from `rows`), m in
 * 1..KV_ROWS. Both spread software prefetches of [next, next + next_bytes)
 * (the rows the following call reads; NULL: none) over their loop, so that
 * memory is requested well before it is needed. Sums are float32 in a fixed order (independent of the thread
 * count). accumulate multiplies every probability it is given, 0 too (0·NaN
 * is NaN: callers pass each row only the keys it sees when values may be
 * NaN).
 */
#ifndef ATTN_INFER_DECODE_ROWS_H
#define ATTN_INFER_DECODE_ROWS_H

#include "cache.h"

enum { KV_ROWS = 4 };

typedef struct {
    const char *name;
    void (*scores)(kv_format f, const void *rows, int64_t n, int64_t n_out, int64_t D,
                   const float *q, int m, float *s, int64_t lds, const float *row_scale,
                   const void *next, int64_t next_bytes);
    void (*accumulate)(kv_format f, const void *rows, int64_t n, int64_t Dv, const float *p,
                       int64_t ldp, int m, const float *alpha, float *acc, int64_t ldacc,
                       const void *next, int64_t next_bytes);
    void (*scale)(float *s, int64_t m, int64_t lds, int64_t lo, int64_t hi, const float *scale);
    bool reads_float; /* faster on float storage than attn_sdpa's decode (attend.c) */
} kv_row_kernels;

extern const kv_row_kernels kv_rows_generic;
#if defined(__x86_64__) || defined(__i386__)
extern const kv_row_kernels kv_rows_avx512;
extern const kv_row_kernels kv_rows_avx2; /* AVX2, FMA, F16C; D % 8 == 0 (else generic) */
#endif

/* Bytes of [next, next + bytes) each of `iters` iterations prefetches: whole
 * lines (computed once per call: a division per iteration cost more than
 * the prefetches). */
static inline int64_t kv_prefetch_per(int64_t bytes, int64_t iters)
{
    return ((bytes + iters - 1) / iters + 63) & ~(int64_t)63;
}

/* Iteration i's share (`per` bytes) of the lines of [next, next + bytes)
 * (NULL: none), as integers: a prefetch never faults, so its address may
 * lie past the rows. */
typedef struct {
    uintptr_t at, end;
} kv_lines;

static inline kv_lines kv_lines_share(const void *next, int64_t bytes, int64_t i, int64_t per)
{
    const int64_t lo = i * per, hi = lo + per < bytes ? lo + per : bytes;
    const uintptr_t base = (uintptr_t)next;
    return next && lo < hi ? (kv_lines){base + (uintptr_t)lo, base + (uintptr_t)hi} : (kv_lines){0, 0};
}

/* Iteration i prefetches its share at once. */
static inline void kv_prefetch_share(const void *next, int64_t bytes, int64_t i, int64_t per)
{
#if defined(__GNUC__) || defined(__clang__)
    const kv_lines w = kv_lines_share(next, bytes, i, per);
    for (uintptr_t at = w.at; at < w.end; at += 64) __builtin_prefetch((const char *)at, 0, 3);
#else
    (void)next, (void)bytes, (void)i, (void)per;
#endif
}

/* Or `count` lines of it at a time (none once it is done), from inside the
 * iteration's feature loop: issued in one burst the lines fill the core's
 * miss buffers and stall it (on Zen 3 the AVX2 table then waited longer on
 * memory than attn_sdpa's kernel, which spreads its prefetches the same
 * way: docs/PERFORMANCE.md). */
static inline void kv_lines_prefetch(kv_lines *w, int64_t count)
{
#if defined(__GNUC__) || defined(__clang__)
    for (; count > 0 && w->at < w->end; --count, w->at += 64) __builtin_prefetch((const char *)w->at, 0, 3);
#else
    (void)w, (void)count;
#endif
}

/* The table for this CPU and ATTN_ARCH (as the SDPA kernels choose). */
const kv_row_kernels *kv_row_kernels_select(void);

#endif /* ATTN_INFER_DECODE_ROWS_H */
