/* The forward's building blocks on one core, beside the FMA units' peak:
 *   peak       16 independent 512-bit (AVX2: 256-bit) FMAs per loop step,
 *              inline assembly, so nothing but FMAs issues;
 *   GEMM       the kernel table's microkernel on one unit-tile of the fused
 *              forward (96 query rows × SDPA_KEY_TILE keys × 64 features, in L1/L2):
 *              S = Q·Kᵀ with its row maxima (gemm_max), O = alpha∘O + P·V
 *              (SDPA_GEMM_SCALE_ADD), and plain C = A·B (SDPA_GEMM_SET);
 *   softmax    softmax_online over that score tile (ns per tile),
 *              fed the maxima from gemm_max as the forward does.
 * Medians of 7 timed batches; the peak from the fastest batch (a busy
 * sibling hyperthread or a lower clock only ever slows the loop down).
 * Used for bench/README.md "Where the time goes".
 *
 * Built against the static library and its internal headers:
 *   cc -O2 -fopenmp -Isrc -Iinclude bench/kernel_rates.c build/libattn.a -lm -o kernel_rates
 * Usage: kernel_rates [avx512|avx2] */
#include "kernels/kernels.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { M = 96, N = SDPA_KEY_TILE, K = 64, REPS = 7 }; /* one unit-tile of the forward */

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Seconds per call of f(arg) over REPS batches of `calls` calls: the median
 * batch, or (fastest) the fastest one. */
static double per_call(void (*f)(void *), void *arg, long calls, bool fastest)
{
    double t[REPS];
    for (int r = 0; r < REPS; ++r) {
        const double t0 = now();
        for (long i = 0; i < calls; ++i) f(arg);
        t[r] = (now() - t0) / (double)calls;
    }
    qsort(t, REPS, sizeof t[0], cmp);
    return t[fastest ? 0 : REPS / 2];
}

#if defined(__x86_64__)
/* 1000 steps of 16 (AVX2: 14) independent FMAs on 512-bit (256-bit)
 * registers, all zero (no denormal or NaN operands). */
__attribute__((target("avx512f"))) static void fma_loop512(void *unused)
{
    (void)unused;
    long i = 1000;
#define Z(n) "vfmadd231ps %%zmm30, %%zmm31, %%zmm" #n "\n"
    __asm__ volatile("vpxord %%zmm30, %%zmm30, %%zmm30\n vpxord %%zmm31, %%zmm31, %%zmm31\n"
                     "1:\n" Z(0) Z(1) Z(2) Z(3) Z(4) Z(5) Z(6) Z(7) Z(8) Z(9) Z(10) Z(11) Z(12)
                         Z(13) Z(14) Z(15) "dec %0\n jnz 1b\n"
                     : "+r"(i)
                     :
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
                       "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm30",
                       "xmm31", "cc");
#undef Z
}

__attribute__((target("avx2,fma"))) static void fma_loop256(void *unused)
{
    (void)unused;
    long i = 1000;
#define Y(n) "vfmadd231ps %%ymm14, %%ymm15, %%ymm" #n "\n"
    __asm__ volatile("vxorps %%ymm14, %%ymm14, %%ymm14\n vxorps %%ymm15, %%ymm15, %%ymm15\n"
                     "1:\n" Y(0) Y(1) Y(2) Y(3) Y(4) Y(5) Y(6) Y(7) Y(8) Y(9) Y(10) Y(11) Y(12)
                         Y(13) "dec %0\n jnz 1b\n"
                     : "+r"(i)
                     :
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
                       "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc");
#undef Y
}
#endif

typedef struct {
    const sdpa_kernels *kern;
    float *q, *kt, *s, *v, *o, *alpha, *rowmax, *rowsum, *vmax;
    int32_t start[M], end[M];
    sdpa_logits lg;
} tile;

static void gemm_set(void *p)
{
    tile *t = p;
    t->kern->gemm(M, N, K, t->q, K, 1, t->kt, N, t->s, N, NULL, SDPA_GEMM_SET);
}

static void gemm_max(void *p)
{
    tile *t = p;
    t->kern->gemm_max(M, N, K, t->q, K, 1, t->kt, N, t->s, N, t->vmax);
}

static void gemm_pv(void *p)
{
    tile *t = p;
    t->kern->gemm(M, K, N, t->s, N, 1, t->v, K, t->o, K, t->alpha, SDPA_GEMM_SCALE_ADD);
}

/* One online-softmax step on a fresh copy of the scores (the softmax
 * overwrites them), from a fresh running max and sum. */
static void softmax(void *p)
{
    tile *t = p;
    for (int r = 0; r < M; ++r) t->rowmax[r] = -INFINITY, t->rowsum[r] = 0.0f;
    t->kern->softmax_online(M, 0, N, &t->lg, t->s, N, t->rowmax, t->rowsum, t->alpha, t->vmax);
}

int main(int argc, char **argv)
{
    const sdpa_isa isa = argc > 1 && strcmp(argv[1], "avx2") == 0 ? SDPA_ISA_AVX2 : sdpa_isa_best();
    if (isa < SDPA_ISA_AVX2 || sdpa_isa_best() < isa) {
        fprintf(stderr, "kernel_rates: needs AVX2 (or AVX-512) kernels on this CPU\n");
        return 1;
    }
    tile t = {.kern = sdpa_kernels_for(isa)};
    float *mem = aligned_alloc(64, sizeof(float) * (size_t)(M * K + K * N + 2 * M * N + N * K +
                                                            3 * M + M * SDPA_MAX_VW + 64));
    if (!mem || !t.kern->gemm_max) return 1;
    t.q = mem, t.kt = t.q + M * K, t.s = t.kt + K * N, t.o = t.s + M * N, t.v = t.o + M * N;
    t.alpha = t.v + N * K, t.rowmax = t.alpha + M, t.rowsum = t.rowmax + M;
    t.vmax = t.rowsum + M;
    for (int i = 0; i < M * K; ++i) t.q[i] = (float)(i % 17) * 0.01f;
    for (int i = 0; i < K * N; ++i) t.kt[i] = t.v[i] = (float)(i % 13) * 0.01f;
    for (int i = 0; i < M * N; ++i) t.o[i] = 0.0f;
    for (int r = 0; r < M; ++r) t.alpha[r] = 1.0f, t.start[r] = 0, t.end[r] = N;
    t.lg = (sdpa_logits){.scale = 0.125f, .start = t.start, .end = t.end};

    const double flops = 2.0 * M * N * K;
    printf("kernels: %s, one thread, tile %d × %d × %d\n", isa == SDPA_ISA_AVX512 ? "avx512" : "avx2",
           M, N, K);
#if defined(__x86_64__)
    const bool wide = isa == SDPA_ISA_AVX512;
    const double peak = (wide ? 16.0 * 32 : 14.0 * 16) * 1000.0 /
                        per_call(wide ? fma_loop512 : fma_loop256, NULL, 2000, true);
    printf("FMA peak           %7.1f GFLOP/s\n", peak / 1e9);
#else
    const double peak = 0.0;
#endif
    struct {
        const char *name;
        void (*f)(void *);
    } g[3] = {{"GEMM SET", gemm_set}, {"GEMM max (S)", gemm_max}, {"GEMM scale-add (PV)", gemm_pv}};
    for (int i = 0; i < 3; ++i) {
        const double rate = flops / per_call(g[i].f, &t, 20000, false);
        printf("%-18s %7.1f GFLOP/s", g[i].name, rate / 1e9);
        if (peak > 0.0) printf("  (%.2f of the peak)", rate / peak);
        printf("\n");
    }
    gemm_max(&t); /* the scores and maxima the softmax starts from */
    const double sm = per_call(softmax, &t, 20000, false);
    printf("softmax_online     %7.0f ns per %d × %d tile (%.2f ns per %d-float vector)\n", sm * 1e9,
           M, N, sm * 1e9 / (M * N / (isa == SDPA_ISA_AVX512 ? 16.0 : 8.0)),
           isa == SDPA_ISA_AVX512 ? 16 : 8);
    free(mem);
    return 0;
}
