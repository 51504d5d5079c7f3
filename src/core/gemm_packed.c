/*
 * Packed SGEMM on the fused SDPA path's register-blocked microkernel
 * (sdpa_kernels.gemm: an MR × npad tile of C in registers, A broadcast one
 * element at a time, B read as rows of npad floats), in the Goto/BLIS order:
 *
 *   jc  columns of C in blocks of nc. op(B)'s K × nc block is packed once,
 *       shared by all threads, as npad-wide panels (K × npad each, columns
 *       past N zeroed), so B rows are unit-stride whatever trans_b is.
 *   ic  rows of C in blocks of at most MC_MAX (with column groups, the
 *       threads' work items).
 *   pc  K in steps of KC: op(A)'s mc × kc block is packed per thread into
 *       contiguous rows (it stays in L2) ...
 *   jr  ... and one kc × npad panel of B (it stays in L1) runs against the
 *       whole block, the microkernel walking MR rows at a time.
 * Partial sums for an item's mc × (its columns) tile live in a per-thread
 * buffer across K blocks; alpha and beta are applied once at the end.
 *
 * Determinism: element (i, j) of C is the sum of its K blocks of KC in
 * increasing order, each block summed by the microkernel in increasing k
 * (SET for the first block, ADD for the others). That depends on KC and the
 * kernel table only, never on mc, nc, the thread count or which thread ran
 * an item, so every thread count gives bit-identical results.
 */
#include "gemm_engines.h"

#include <stdlib.h>
#include <string.h>


enum {
    KC = 256,       /* depth of a packed block; fixes the reduction order */
    ROW_UNIT = 12,  /* row blocks are multiples of this: a multiple of every table's MR
                       (avx2 6, avx512 12, generic 1), so only the last block has a
                       partial microtile */
    MC_MAX = 144,   /* rows per A block: 144 × 256 floats = 144 KiB, in L2 */
    NC_MAX = 2048,  /* columns per B block (bounds the per-thread tile buffer) */
    TILE_FLOATS = 1 << 16, /* an item's partial sums: at most 256 KiB, in L2 */
    ALIGN = 64,     /* cache line: packed panels start on one */
    SERIAL_WORK = 1 << 17, /* M·N·K below which threads cost more than they save */
};
#define B_BLOCK_BYTES ((int64_t)4 << 20) /* packed B block: at most ~4 MiB, in L3 */

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

typedef struct {
    const sdpa_kernels *kern;
    bool trans_a, trans_b;
    int64_t M, N, K;
    float alpha, beta;
    const float *A, *B;
    float *C;
    int64_t lda, ldb, ldc;
    int64_t c_cols, c_stride; /* C's column groups (c_cols >= N: one) */
    const float *bias;        /* added to every row of C, or NULL */
    int64_t bias_s;
    int64_t np;         /* microkernel columns (kern->npad) */
    int64_t nc;         /* columns per B block, a multiple of np */
    int64_t units;      /* ROW_UNIT-row units covering M */
    int64_t row_blocks; /* row blocks of C per B block */
    int64_t col_groups; /* column groups per B block (threads' items = blocks × groups) */
    int64_t mc_max;     /* rows of the largest row block */
    int threads;
} gemm_plan;

/* Row block b of plan p: rows [*i0, *i0 + *mb). Units are spread evenly, so
 * blocks differ by at most one unit and threads get equal shares. */
static void row_block(const gemm_plan *p, int64_t b, int64_t *i0, int64_t *mb)
{
    const int64_t u0 = b * p->units / p->row_blocks, u1 = (b + 1) * p->units / p->row_blocks;
    *i0 = u0 * ROW_UNIT;
    *mb = min64(u1 * ROW_UNIT, p->M) - *i0;
}

/* Block sizes and thread count. None of this changes the result. */
static gemm_plan make_plan(const sdpa_kernels *kern, bool trans_a, bool trans_b, int64_t M,
                           int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                           const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
                           int64_t c_cols, int64_t c_stride, const float *bias, int64_t bias_s,
                           int threads)
{
    gemm_plan p = {
        .kern = kern, .trans_a = trans_a, .trans_b = trans_b, .M = M, .N = N, .K = K,
        .alpha = alpha, .beta = beta, .A = A, .B = B, .C = C, .lda = lda, .ldb = ldb,
        .ldc = ldc, .c_cols = c_cols < N ? c_cols : N, .c_stride = c_stride, .bias = bias,
        .bias_s = bias_s, .np = kern->npad,
    };
    const int64_t n_pad = ceil_div(N, p.np) * p.np;
    const int64_t nc_fit = B_BLOCK_BYTES / ((int64_t)sizeof(float) * K) / p.np * p.np;
    p.nc = min64(min64(n_pad, NC_MAX / p.np * p.np), max64(p.np, nc_fit));
    p.units = ceil_div(M, ROW_UNIT);

    int64_t t = threads < 1 ? 1 : threads;
    if ((double)M * (double)N * (double)K < (double)SERIAL_WORK) t = 1;
    /* Enough row blocks for A blocks of at most MC_MAX rows, rounded up to a
     * multiple of the threads. The panels of a B block are split into column
     * groups when rows are too few for every thread, and so that an item's
     * partial sums (its rows × its columns) stay in L2 beside its A block:
     * with a short K, one B block is thousands of columns wide. */
    int64_t rb = ceil_div(p.units, MC_MAX / ROW_UNIT);
    if (rb >= t) rb = min64(p.units, ceil_div(rb, t) * t);
    p.row_blocks = rb;
    p.mc_max = ceil_div(p.units, rb) * ROW_UNIT;
    const int64_t panels = p.nc / p.np;
    const int64_t tile_panels = max64(1, TILE_FLOATS / (p.mc_max * p.np));
    const int64_t for_threads = rb < t ? ceil_div(t, rb) : 1;
    p.col_groups = min64(panels, max64(for_threads, ceil_div(panels, tile_panels)));
    p.threads = (int)min64(t, rb * p.col_groups);
    return p;
}

/* ap[i*kb + l] = op(A)[i0+i][pc+l] for i < mb, l < kb. */
static void pack_a(const gemm_plan *p, int64_t i0, int64_t mb, int64_t pc, int64_t kb,
                   float *restrict ap)
{
    if (!p->trans_a) {
        for (int64_t i = 0; i < mb; ++i)
            memcpy(ap + i * kb, p->A + (i0 + i) * p->lda + pc, (size_t)kb * sizeof(float));
    } else {
        /* op(A)[i][l] = A[l][i]: a transpose (8 × 8 blocks in the SIMD tables). */
        p->kern->pack_transposed(p->A + pc * p->lda + i0, p->lda, 1, kb, mb, ap, kb);
    }
}

/* bp[l*np + j] = op(B)[pc+l][j0+j] for l < kb, j < np (0 for columns >= N). */
static void pack_b(const gemm_plan *p, int64_t pc, int64_t kb, int64_t j0, float *restrict bp)
{
    const int64_t np = p->np, nr = min64(np, p->N - j0);
    if (!p->trans_b) {
        for (int64_t l = 0; l < kb; ++l) {
            float *dst = bp + l * np;
            memcpy(dst, p->B + (pc + l) * p->ldb + j0, (size_t)nr * sizeof(float));
            for (int64_t j = nr; j < np; ++j) dst[j] = 0.0f;
        }
    } else {
        /* op(B)[l][j] = B[j][l]: a transpose, zero-padded to np columns. */
        p->kern->pack_transposed(p->B + j0 * p->ldb + pc, p->ldb, 1, nr, kb, bp, np);
    }
}

/* C[i0.., j0..] (mb × nn) = alpha·acc + beta·C (+ bias); acc has row stride
 * ldacc. The columns are cut where C's column groups end. beta == 0 never
 * reads C (BLAS). */
static void store_tile(const gemm_plan *p, int64_t i0, int64_t mb, int64_t j0, int64_t nn,
                       const float *acc, int64_t ldacc)
{
    const float alpha = p->alpha, beta = p->beta;
    for (int64_t js = j0; js < j0 + nn;) {
        const int64_t group = js / p->c_cols, je = min64(j0 + nn, (group + 1) * p->c_cols);
        const int64_t n = je - js, bs = p->bias_s;
        float *const cg = p->C + group * p->c_stride + (js - group * p->c_cols);
        const float *const bias = p->bias ? p->bias + js * bs : NULL;
        for (int64_t i = 0; i < mb; ++i) {
            float *restrict c = cg + (i0 + i) * p->ldc;
            const float *restrict a = acc + i * ldacc + (js - j0);
            if (beta == 0.0f && bias && bs == 1) { /* a linear layer's store, in one pass */
                for (int64_t j = 0; j < n; ++j) c[j] = alpha * a[j] + bias[j];
            } else if (beta == 0.0f && bias) {
                for (int64_t j = 0; j < n; ++j) c[j] = alpha * a[j] + bias[j * bs];
            } else if (beta == 0.0f) {
                for (int64_t j = 0; j < n; ++j) c[j] = alpha * a[j];
            } else {
                for (int64_t j = 0; j < n; ++j) c[j] = alpha * a[j] + beta * c[j];
                if (bias)
                    for (int64_t j = 0; j < n; ++j) c[j] += bias[j * bs];
            }
        }
        js = je;
    }
}

/* One work item: rows [i0, i0+mb) × panels [pan0, pan1) of the B block at
 * column jc, whose packed panels (K × np each) start at bpack. */
static void run_item(const gemm_plan *p, const float *bpack, int64_t jc, int64_t i0, int64_t mb,
                     int64_t pan0, int64_t pan1, float *ap, float *acc)
{
    const int64_t np = p->np, K = p->K, ldacc = (pan1 - pan0) * np;
    for (int64_t pc = 0; pc < K; pc += KC) {
        const int64_t kb = min64(KC, K - pc);
        const sdpa_gemm_mode mode = pc == 0 ? SDPA_GEMM_SET : SDPA_GEMM_ADD;
        pack_a(p, i0, mb, pc, kb, ap);
        for (int64_t pan = pan0; pan < pan1; ++pan)
            p->kern->gemm(mb, np, kb, ap, kb, 1, bpack + pan * K * np + pc * np, np,
                          acc + (pan - pan0) * np, ldacc, NULL, mode);
    }
    const int64_t j0 = jc + pan0 * np;
    store_tile(p, i0, mb, j0, min64(p->N, jc + pan1 * np) - j0, acc, ldacc);
}

static float *align_up(void *ptr)
{
    const uintptr_t u = (uintptr_t)ptr;
    return (float *)(u + (ALIGN - u % ALIGN) % ALIGN);
}

/* The workspace: the shared packed B block, then per thread an A block and a
 * tile buffer. All sizes are multiples of 16 floats, so every part starts on
 * a cache line. Returns NULL (nothing allocated) when it cannot. */
static void *alloc_workspace(const gemm_plan *p, size_t *per_thread)
{
    const double b = (double)p->K * (double)p->nc;
    const double t = (double)p->mc_max * KC + (double)p->mc_max * (double)p->nc;
    const double total = (b + (double)p->threads * t) * sizeof(float) + ALIGN;
    if (total > (double)(SIZE_MAX / 2)) return NULL;
    *per_thread = (size_t)t;
    return malloc((size_t)total);
}

/* The heap path: shared B blocks, parallel items. */
static void gemm_blocked(const gemm_plan *p, float *work, size_t per_thread)
{
    float *const bpack = work;
    const int64_t np = p->np, items = p->row_blocks * p->col_groups;

#pragma omp parallel num_threads(p->threads)
    {
        float *ap = attn_thread_scratch(work + (size_t)p->K * (size_t)p->nc,
                                        per_thread * sizeof(float), false);
        float *acc = ap + (size_t)p->mc_max * KC;
        for (int64_t jc = 0; jc < p->N; jc += p->nc) {
            const int64_t panels = ceil_div(min64(p->nc, p->N - jc), np);
            /* All threads pack the block's panels, then all use them. */
#pragma omp for schedule(static)
            for (int64_t pan = 0; pan < panels; ++pan)
                pack_b(p, 0, p->K, jc + pan * np, bpack + pan * p->K * np);
#pragma omp for schedule(dynamic, 1)
            for (int64_t it = 0; it < items; ++it) {
                const int64_t b = it / p->col_groups, g = it % p->col_groups;
                const int64_t pan0 = g * panels / p->col_groups;
                const int64_t pan1 = (g + 1) * panels / p->col_groups;
                int64_t i0, mb;
                row_block(p, b, &i0, &mb);
                if (mb > 0 && pan1 > pan0) run_item(p, bpack, jc, i0, mb, pan0, pan1, ap, acc);
            }
            /* (the loop's implicit barrier keeps bpack until every item is done) */
        }
    }
}

/* The no-heap path: serial, one ROW_UNIT × np tile at a time, B re-packed
 * per tile. Slow, but the same microkernel calls per element and the same KC
 * blocks, so the same bits as gemm_blocked. */
static void gemm_unbuffered(const gemm_plan *p)
{
    _Alignas(ALIGN) float bp[KC * SDPA_MAX_NPAD];
    _Alignas(ALIGN) float ap[ROW_UNIT * KC];
    _Alignas(ALIGN) float acc[ROW_UNIT * SDPA_MAX_NPAD];
    const int64_t np = p->np;
    for (int64_t j0 = 0; j0 < p->N; j0 += np)
        for (int64_t i0 = 0; i0 < p->M; i0 += ROW_UNIT) {
            const int64_t mb = min64(ROW_UNIT, p->M - i0);
            for (int64_t pc = 0; pc < p->K; pc += KC) {
                const int64_t kb = min64(KC, p->K - pc);
                pack_a(p, i0, mb, pc, kb, ap);
                pack_b(p, pc, kb, j0, bp);
                p->kern->gemm(mb, np, kb, ap, kb, 1, bp, np, acc, np, NULL,
                              pc == 0 ? SDPA_GEMM_SET : SDPA_GEMM_ADD);
            }
            store_tile(p, i0, mb, j0, min64(np, p->N - j0), acc, np);
        }
}

void gemm_packed(const sdpa_kernels *kern, bool trans_a, bool trans_b, int64_t M, int64_t N,
                 int64_t K, float alpha, const float *A, int64_t lda, const float *B,
                 int64_t ldb, float beta, float *C, int64_t ldc, int64_t c_cols, int64_t c_stride,
                 const float *bias, int64_t bias_s, int threads, bool use_heap)
{
    gemm_plan p = make_plan(kern, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                            c_cols, c_stride, bias, bias_s, threads);
    if (use_heap) {
        size_t per_thread = 0;
        void *mem = alloc_workspace(&p, &per_thread);
        if (!mem && p.threads > 1) { /* less memory with one thread; same result */
            p.threads = 1;
            mem = alloc_workspace(&p, &per_thread);
        }
        if (mem) {
            gemm_blocked(&p, align_up(mem), per_thread);
            free(mem);
            return;
        }
    }
    gemm_unbuffered(&p);
}
