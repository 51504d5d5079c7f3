/*
 * The bf16 linear layers' GEMM (gemm_bf16.h): the packers, then C in
 * MB × NB tiles (the threads' work items), each tile's sum over k in blocks
 * of KCP pairs into a float32 buffer that stays in L2, stored once with the
 * bias:
 *
 *   for each tile (i0, j0):                 item, one thread
 *     for pc in 0, KCP, 2·KCP, ...          fixed: the reduction order
 *       acc ⊕= A[i0.., pc..] · B[pc.., j0..]   eng->gemm (SET, then ADD)
 *     C[i0.., j0..] = acc + bias  (or += acc)
 *
 * A block (MB × KCP pairs, 96 KiB) and B block (KCP × NB, 128 KiB) stay in
 * L2 beside the tile (48 KiB).
 */
#include "gemm_bf16.h"
#if defined(__x86_64__)
#include "../kernels/bf16dot.h"
#endif

enum {
    MB = 96,   /* rows of a tile: a multiple of the engines' microtiles (12, 16) */
    NB = 128,  /* columns of a tile: a multiple of every engine's npad (32, 16) */
    KCP = 256, /* pairs of k per block: fixes the reduction order */
    CHUNK = 16, /* rows a packer's thread takes at a time */
    SERIAL_WORDS = 1 << 15, /* pair words below which packing stays on one thread */
    SERIAL_WORK = 1 << 18,  /* M·N·kp below which the product stays on one thread */
};

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static int threads_for(double work, double serial, int threads)
{
    return work < serial || threads < 1 ? 1 : threads;
}

int64_t gemm_bf16_cols(const sdpa_bf16_engine *eng, int64_t n)
{
    return ceil_div(n, eng->npad) * eng->npad;
}

/* dst[c*dld + r] = src[r*sld + c] for r < rows, c < cols (32-bit words). */
static void transpose32(const uint32_t *src, int64_t sld, int64_t rows, int64_t cols,
                        uint32_t *dst, int64_t dld)
{
#if defined(__x86_64__)
    if (sdpa_bf16dot_available()) {
        sdpa_bf16dot_transpose32(src, sld, rows, cols, dst, dld);
        return;
    }
#endif
    for (int64_t r0 = 0; r0 < rows; r0 += CHUNK)
        for (int64_t c0 = 0; c0 < cols; c0 += CHUNK)
            for (int64_t r = r0; r < min64(rows, r0 + CHUNK); ++r)
                for (int64_t c = c0; c < min64(cols, c0 + CHUNK); ++c)
                    dst[c * dld + r] = src[r * sld + c];
}

void gemm_bf16_pack_rows(const float *src, int64_t ld, int64_t rows, int64_t k, uint32_t *dst,
                         int threads)
{
    const int64_t kp = (k + 1) / 2;
    const int t = threads_for((double)rows * (double)kp, SERIAL_WORDS, threads);
#pragma omp parallel for num_threads(t) schedule(static)
    for (int64_t r = 0; r < rows; ++r)
        sdpa_pairs_narrow(src + r * ld, k, (uint16_t *)(dst + r * kp)); /* pairs, low half even */
}

void gemm_bf16_pack_keys(const float *src, int64_t ld, int64_t k, int64_t n, uint32_t *dst,
                         int64_t ldd, int threads)
{
    const int64_t kp = (k + 1) / 2;
    const int t = threads_for((double)kp * (double)n, SERIAL_WORDS, threads);
#pragma omp parallel for num_threads(t) schedule(static)
    for (int64_t l0 = 0; l0 < kp; l0 += CHUNK) {
        const int64_t rows = min64(k - 2 * l0, 2 * CHUNK); /* an odd k ends on a lone row */
        sdpa_pairs_keys_f32(src + 2 * l0 * ld, ld, rows, n, dst + l0 * ldd, ldd);
    }
}

void gemm_bf16_pack_cols(const float *src, int64_t ld, int64_t k, int64_t rows, uint32_t *dst,
                         uint32_t *tmp, int threads)
{
    /* Pairs along k first (kp × rows), then their transpose. */
    const int64_t kp = (k + 1) / 2;
    gemm_bf16_pack_keys(src, ld, k, rows, tmp, rows, threads);
    const int t = threads_for((double)kp * (double)rows, SERIAL_WORDS, threads);
#pragma omp parallel for num_threads(t) schedule(static)
    for (int64_t l0 = 0; l0 < kp; l0 += CHUNK)
        transpose32(tmp + l0 * rows, rows, min64(CHUNK, kp - l0), rows, dst + l0, kp);
}

void gemm_bf16_pack_transposed(const float *src, int64_t ld, int64_t n, int64_t k,
                               uint32_t *dst, int64_t ldd, uint32_t *tmp, int threads)
{
    /* W's rows as pairs (n × kp), then their transpose, then zero columns. */
    const int64_t kp = (k + 1) / 2;
    gemm_bf16_pack_rows(src, ld, n, k, tmp, threads);
    const int t = threads_for((double)kp * (double)n, SERIAL_WORDS, threads);
#pragma omp parallel for num_threads(t) schedule(static)
    for (int64_t r0 = 0; r0 < n; r0 += CHUNK)
        transpose32(tmp + r0 * kp, kp, min64(CHUNK, n - r0), kp, dst + r0, ldd);
    for (int64_t l = 0; l < kp; ++l)
        for (int64_t c = n; c < ldd; ++c) dst[l * ldd + c] = 0;
}

typedef struct {
    int64_t N, ldc, c_cols, c_stride, bias_s;
    float *C;
    const float *bias;
    bool accumulate;
} store_to;

/* C[i0.., j0..] (mb × nn) = acc + bias, or += acc; columns cut where C's
 * groups end. */
static void store_tile(const store_to *s, int64_t i0, int64_t mb, int64_t j0, int64_t nn,
                       const float *acc)
{
    for (int64_t js = j0; js < j0 + nn;) {
        const int64_t group = js / s->c_cols, je = min64(j0 + nn, (group + 1) * s->c_cols);
        float *const cg = s->C + group * s->c_stride + (js - group * s->c_cols);
        const float *const bias = s->bias ? s->bias + js * s->bias_s : NULL;
        for (int64_t i = 0; i < mb; ++i) {
            float *restrict c = cg + (i0 + i) * s->ldc;
            const float *restrict a = acc + i * NB + (js - j0);
            if (s->accumulate)
                for (int64_t j = 0; j < je - js; ++j) c[j] += a[j];
            else if (bias)
                for (int64_t j = 0; j < je - js; ++j) c[j] = a[j] + bias[j * s->bias_s];
            else
                for (int64_t j = 0; j < je - js; ++j) c[j] = a[j];
        }
        js = je;
    }
}

void gemm_bf16(const sdpa_bf16_engine *eng, int64_t M, int64_t N, int64_t kp, const uint32_t *A,
               int64_t lda, const uint32_t *B, int64_t ldb, bool accumulate, float *C,
               int64_t ldc, int64_t c_cols, int64_t c_stride, const float *bias, int64_t bias_s,
               int threads)
{
    if (M <= 0 || N <= 0) return;
    const store_to s = {N, ldc, c_cols < N ? c_cols : N, c_stride, bias_s, C,
                        accumulate ? NULL : bias, accumulate};
    const int64_t rb = ceil_div(M, MB), cb = ceil_div(N, NB), items = rb * cb;
    int t = threads_for((double)M * (double)N * (double)kp, SERIAL_WORK, threads);
    if (t > items) t = (int)items;
#pragma omp parallel num_threads(t)
    {
        _Alignas(64) float acc[MB * NB];
#pragma omp for schedule(static)
        for (int64_t it = 0; it < items; ++it) {
            /* Items walk a row block's column tiles in turn: its A block is
             * reused from L2. */
            const int64_t i0 = it / cb * MB, j0 = it % cb * NB;
            const int64_t mb = min64(MB, M - i0), nb = min64(NB, ldb - j0);
            int64_t pc = 0;
            do {
                const int64_t kc = min64(KCP, kp - pc);
                eng->gemm(mb, nb, kc, A + i0 * lda + pc, lda, B + pc * ldb + j0, ldb, acc, NB,
                          NULL, pc == 0 ? SDPA_GEMM_SET : SDPA_GEMM_ADD);
                pc += kc;
            } while (pc < kp);
            store_tile(&s, i0, mb, j0, min64(NB, N - j0), acc);
        }
    }
}
