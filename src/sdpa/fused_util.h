/* Small helpers shared by the fused forward and backward: tile sizes,
 * padding, operand packing and workspace carving. */
#ifndef ATTN_SDPA_FUSED_UTIL_H
#define ATTN_SDPA_FUSED_UTIL_H

#include "problem.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define AT4(s, a, b, c, d) ((a) * (s)[0] + (b) * (s)[1] + (c) * (s)[2] + (d) * (s)[3])

/* Work done once per call by whichever task first needs it (the forward's
 * shared Kᵀ tiles, the backward's row blocks): one state per item, set to
 * SDPA_ITEM_FREE (or READY) before the tasks start. */
enum { SDPA_ITEM_FREE, SDPA_ITEM_CLAIMED, SDPA_ITEM_READY };
typedef enum {
    SDPA_CLAIM_READY, /* done: its writes are visible (acquire) */
    SDPA_CLAIM_MINE,  /* the caller does it, then calls sdpa_item_done */
    SDPA_CLAIM_BUSY,  /* another task is doing it: make a private copy */
} sdpa_claim;

static inline sdpa_claim sdpa_item_claim(atomic_uchar *state)
{
    unsigned char s = atomic_load_explicit(state, memory_order_acquire);
    if (s == SDPA_ITEM_FREE &&
        atomic_compare_exchange_strong_explicit(state, &s, SDPA_ITEM_CLAIMED,
                                                memory_order_acquire, memory_order_acquire))
        return SDPA_CLAIM_MINE;
    return s == SDPA_ITEM_READY ? SDPA_CLAIM_READY : SDPA_CLAIM_BUSY;
}

/* Publishes a claimed item's writes (release). */
static inline void sdpa_item_done(atomic_uchar *state)
{
    atomic_store_explicit(state, SDPA_ITEM_READY, memory_order_release);
}

/* Workspace pieces start on cache lines. */
#define SDPA_ALIGN 64

/* Tasks handed out with affinity: tasks [0, groups · per) come in groups of
 * `per` (a kv head's), the groups cut into one block per thread of the
 * team. A thread takes its own block's tasks in order, so that one thread
 * runs a group's tasks back to back (finding the group's data in its own
 * cache), then the next tasks of the other blocks in turn, so that no
 * thread waits while tasks are left. One cursor per block, a cache line
 * each, zeroed before the team starts. */
typedef struct {
    atomic_llong next;
    char pad[SDPA_ALIGN - sizeof(atomic_llong)];
} sdpa_cursor;

/* The calling thread's index in its team and the team's size (0 and 1
 * outside a parallel region or without OpenMP). */
static inline void sdpa_team(int *me, int *team)
{
    *me = 0;
    *team = 1;
#ifdef _OPENMP
    *me = omp_get_thread_num();
    *team = omp_get_num_threads();
#endif
}

/* Thread `me`'s next task, or -1 when none is left. */
static inline int64_t sdpa_next_task(sdpa_cursor *cursor, int me, int team, int64_t groups,
                                     int64_t per)
{
    for (int i = 0; i < team; ++i) {
        const int b = (me + i) % team;
        const int64_t g0 = groups * b / team, g1 = groups * (b + 1) / team;
        const int64_t x = atomic_fetch_add_explicit(&cursor[b].next, 1, memory_order_relaxed);
        if (x < (g1 - g0) * per) return g0 * per + x;
    }
    return -1;
}

static inline int64_t sdpa_round_up(int64_t x, int64_t unit)
{
    return (x + unit - 1) / unit * unit;
}

/* A running byte count that fails (stays false) on overflow. */
typedef struct {
    size_t bytes;
    bool ok;
} sdpa_size;

/* Adds room for a·b elements of elem bytes, every product checked. */
static inline void sdpa_size_add(sdpa_size *s, int64_t a, int64_t b, size_t elem)
{
    int64_t n;
    if (!s->ok || !attn_mul_ok(a < 0 ? 0 : a, b < 0 ? 0 : b, &n) ||
        !attn_mul_ok(n, (int64_t)elem, &n) || !attn_add_ok(n, SDPA_ALIGN - 1, &n)) {
        s->ok = false;
        return;
    }
    n -= n % SDPA_ALIGN;
    if (s->bytes > SIZE_MAX - (size_t)n) {
        s->ok = false;
        return;
    }
    s->bytes += (size_t)n;
}

/* Takes count elements of elem bytes from *cursor (sized with sdpa_size_add). */
static inline void *sdpa_take(char **cursor, int64_t count, size_t elem)
{
    void *p = *cursor;
    size_t n = (size_t)(count < 0 ? 0 : count) * elem;
    n = (n + SDPA_ALIGN - 1) / SDPA_ALIGN * SDPA_ALIGN;
    *cursor += n;
    return p;
}

/* The caller's workspace (checked) or a fresh aligned allocation of `need`
 * bytes into *ws; *owned is what to free. */
static inline attn_status sdpa_workspace(const sdpa_problem *p, size_t need, void **owned,
                                         char **ws, attn_error *err)
{
    *owned = NULL;
    *ws = NULL;
    if (p->workspace) {
        const uintptr_t at = (uintptr_t)p->workspace;
        const size_t skew = (SDPA_ALIGN - at % SDPA_ALIGN) % SDPA_ALIGN;
        RETURN_IF(need > SIZE_MAX - skew || p->workspace_size < need + skew, err,
                  ATTN_ERR_WORKSPACE, "workspace: %zu bytes given, %zu needed",
                  p->workspace_size, need + skew);
        *ws = (char *)p->workspace + skew;
        return ATTN_OK;
    }
    void *mem = NULL;
    RETURN_IF(posix_memalign(&mem, SDPA_ALIGN, need ? need : SDPA_ALIGN) != 0, err,
              ATTN_ERR_ALLOC, "workspace: cannot allocate %zu bytes", need);
    *owned = mem;
    *ws = mem;
    return ATTN_OK;
}

/* True when every element of the (nrows × w) block (row stride rs, element
 * stride cs) is finite: no exponent field is all ones. An OR over integer
 * lanes, so the compiler vectorises it (a float sum into lanes it would
 * not: it ran at a store-forwarding latency per element). */
static inline bool sdpa_rows_finite(const float *src, int64_t rs, int64_t cs, int64_t nrows,
                                    int64_t w)
{
    const uint32_t exponent = 0x7f800000u;
    uint32_t nonfinite = 0;
    for (int64_t r = 0; r < nrows; ++r)
        for (int64_t c = 0; c < w; ++c) {
            uint32_t u;
            memcpy(&u, src + r * rs + c * cs, sizeof u);
            nonfinite |= (u & exponent) == exponent;
        }
    return !nonfinite;
}

/* The columns rows [0, rb) of a tile see, per their start/end: [*c0, *c1)
 * with c0 rounded down to npad; 0 and 0 when no row sees any. */
static inline void sdpa_band_cols(const int32_t *start, const int32_t *end, int64_t rb,
                                  int64_t npad, int64_t *c0, int64_t *c1)
{
    int64_t lo = INT64_MAX, hi = 0;
    for (int64_t r = 0; r < rb; ++r) {
        if (end[r] <= start[r]) continue;
        lo = start[r] < lo ? start[r] : lo;
        hi = end[r] > hi ? end[r] : hi;
    }
    *c0 = hi > 0 ? lo - lo % npad : 0;
    *c1 = hi > *c0 ? hi : *c0;
}

/* Slack a caller-provided workspace needs for our alignment. */
#define SDPA_WORKSPACE_SLACK SDPA_ALIGN

/* Packs nrows rows of width w (row stride rs, element stride cs) into
 * dst rows of ld floats, zero-padding columns [w, ld). */
static inline void sdpa_pack_rows(const float *src, int64_t rs, int64_t cs, int64_t nrows,
                                  int64_t w, float *dst, int64_t ld)
{
    for (int64_t r = 0; r < nrows; ++r) {
        const float *s = src + r * rs;
        float *d = dst + r * ld;
        if (cs == 1) {
            memcpy(d, s, (size_t)w * sizeof *d);
        } else {
            for (int64_t c = 0; c < w; ++c) d[c] = s[c * cs];
        }
        for (int64_t c = w; c < ld; ++c) d[c] = 0.0f;
    }
}

/*
 * A B operand of rows of width w: the source itself when its elements are
 * unit-stride and w is a multiple of npad (no copy), else packed into buf
 * (rows of ld floats). *ld_out receives the row stride to use.
 */
static inline const float *sdpa_rows_operand(const float *src, int64_t rs, int64_t cs,
                                             int64_t nrows, int64_t w, int64_t npad, float *buf,
                                             int64_t ld, int64_t *ld_out)
{
    if (cs == 1 && w % npad == 0 && rs >= w) {
        *ld_out = rs;
        return src;
    }
    sdpa_pack_rows(src, rs, cs, nrows, w, buf, ld);
    *ld_out = ld;
    return buf;
}

/*
 * Whether the logits of Q·Kᵀ come from the kernels' scores_rows (dot
 * products along K's rows, no Kᵀ tile) instead of the packed GEMM. The two
 * sum in different orders, so the rule depends on the shape alone: the
 * forward (outputs, LSE, weights) and the backward of one problem take the
 * same side, and the probabilities a backward recomputes from the forward's
 * LSE are the forward's, bit for bit, whatever the strides or options of
 * either call. Decoding shapes, a few query rows per K/V head (those of
 * all heads of a GQA group counted), are where transposing a K tile costs
 * as much as the product; with more rows the GEMM's 12-row microtile
 * wins (Nq = 16 with groups of 4 took 1.25x as long direct, Zen 4).
 */
enum { SDPA_DIRECT_ROWS = 16 };

static inline bool sdpa_scores_direct(const sdpa_problem *p, const sdpa_kernels *kern)
{
    return kern->scores_rows && p->group * p->Nq <= SDPA_DIRECT_ROWS && p->D % 8 == 0;
}

/*
 * s(r, c) = scores of `rows` query rows (row r at q + r*q_rs, features
 * q_cs apart) against keys [0, n) of K's rows (kr, dtype kt, D contiguous
 * values, rows ldk apart), 0 for n <= c < n_out: scores_rows on groups of
 * up to SDPA_SCORES_ROWS rows. Rows whose features are not contiguous are
 * copied to qbuf (SDPA_SCORES_ROWS × D floats) first. pf (V's rows, see
 * sdpa_scores_rows_fn) is handed to the first group only.
 */
static inline void sdpa_direct_scores(const sdpa_kernels *kern, attn_dtype kt, const void *kr,
                                      int64_t ldk, int64_t n, int64_t n_out, int64_t D,
                                      const float *q, int64_t q_rs, int64_t q_cs, int64_t rows,
                                      float *s, int64_t lds, const sdpa_prefetch *pf,
                                      float *qbuf)
{
    for (int64_t g = 0; g < rows; g += SDPA_SCORES_ROWS) {
        const int m = rows - g < SDPA_SCORES_ROWS ? (int)(rows - g) : SDPA_SCORES_ROWS;
        const float *qg = q + g * q_rs;
        int64_t ldq = q_rs;
        if (q_cs != 1) {
            for (int r = 0; r < m; ++r)
                for (int64_t l = 0; l < D; ++l) qbuf[r * D + l] = qg[r * q_rs + l * q_cs];
            qg = qbuf;
            ldq = D;
        }
        kern->scores_rows(kt, kr, ldk, n, n_out, D, qg, ldq, m, s + g * lds, lds,
                          g == 0 ? pf : NULL);
    }
}

/*
 * After a product C += A·B that skipped A's zeros (sdpa_gemm_skip_zeros),
 * the terms it left out that torch keeps: a zero of a key the row sees
 * (P underflowed or dropped, dS = 0) times a non-finite B value is NaN
 * (0·inf, 0·NaN), as in the reference's sums over visible keys. A's entry
 * (i, l) of m × k is query row r, key column c of the tile: r = i0 + i,
 * c = l0 + l (O += P·V, dQ += dS·K); r = l0 + l, c = i0 + i with by_key
 * (dK += dSᵀ·Q, dV += Pᵀ·dO). B: k rows of n values, ldb apart; vis: the
 * rows' bounds and bias (-inf: masked); rows whose flags (or NULL) hold a
 * bit of `skip` add nothing. Defined in visibility.c.
 */
void sdpa_add_zero_terms(const sdpa_logits *vis, const uint8_t *flags, uint8_t skip, bool by_key,
                         int64_t m, int64_t n, int64_t k, const float *a, int64_t a_rs,
                         int64_t a_cs, int64_t i0, int64_t l0, const float *b, int64_t ldb,
                         float *c, int64_t ldc);

#endif
