/* ggml's fused CPU attention (ggml_flash_attn_ext) timed like `attn bench`:
 * the same shapes, FLOP count and JSON keys, median of --runs calls after
 * --warmup, so bench/run.sh can put it beside attn in one table.
 *
 *   ggml_flash_attn [--batch B] [--heads H] [--seq N] [--head-dim D]
 *                   [--causal] [--threads T] [--runs R] [--warmup W] [--kv f32|f16]
 *
 * Q is float32 (D, N, H, B) in ggml's order, K and V are --kv (f32: the same
 * precision as attn; f16: what llama.cpp's KV cache holds), float32
 * accumulators (GGML_PREC_F32). --causal passes ggml's additive F16 mask
 * (-inf above the diagonal); FLOPs count half, as attn's do.
 * Built from ggml's source by bench/ggml/build.sh (which defines GGML_SOURCE,
 * where that source came from); not part of attn. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include "ggml-cpu.h"
#include "ggml.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#ifndef GGML_SOURCE
#define GGML_SOURCE "unknown"
#endif

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Uniform values in [-1, 1) from a fixed LCG, converted to the tensor's type. */
static void fill(struct ggml_tensor *t, uint64_t seed)
{
    const int64_t n = ggml_nelements(t);
    for (int64_t i = 0; i < n; ++i) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        const float x = (float)(seed >> 40) * (2.0f / 16777216.0f) - 1.0f;
        if (t->type == GGML_TYPE_F16) ((ggml_fp16_t *)t->data)[i] = ggml_fp32_to_fp16(x);
        else ((float *)t->data)[i] = x;
    }
}

static int usage(void)
{
    fprintf(stderr, "usage: ggml_flash_attn [--batch B] [--heads H] [--seq N] [--head-dim D] "
                    "[--causal] [--threads T] [--runs R] [--warmup W] [--kv f32|f16]\n");
    return 2;
}

int main(int argc, char **argv)
{
    long B = 1, H = 8, N = 1024, D = 64, threads = 2, runs = 5, warmup = 1;
    int causal = 0;
    enum ggml_type kv = GGML_TYPE_F32;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--causal")) { causal = 1; continue; }
        if (!v) return usage();
        ++i;
        if (!strcmp(a, "--batch")) B = atol(v);
        else if (!strcmp(a, "--heads")) H = atol(v);
        else if (!strcmp(a, "--seq")) N = atol(v);
        else if (!strcmp(a, "--head-dim")) D = atol(v);
        else if (!strcmp(a, "--threads")) threads = atol(v);
        else if (!strcmp(a, "--runs")) runs = atol(v);
        else if (!strcmp(a, "--warmup")) warmup = atol(v);
        else if (!strcmp(a, "--kv") && !strcmp(v, "f16")) kv = GGML_TYPE_F16;
        else if (!strcmp(a, "--kv") && !strcmp(v, "f32")) kv = GGML_TYPE_F32;
        else return usage();
    }
    if (B < 1 || H < 1 || N < 1 || D < 1 || threads < 1 || runs < 1 || warmup < 0) return usage();

    const size_t kv_size = ggml_type_size(kv), elems = (size_t)(B * H * N * D);
    const size_t data = elems * (sizeof(float) * 2 + kv_size * 2) + (size_t)(N * N) * 2;
    const size_t overhead = 16 * ggml_tensor_overhead() + ggml_graph_overhead() + (1u << 20);
    struct ggml_init_params ip = {data + overhead, NULL, false};
    struct ggml_context *ctx = ggml_init(ip);
    if (!ctx) return 1;
    struct ggml_tensor *q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, N, H, B);
    struct ggml_tensor *k = ggml_new_tensor_4d(ctx, kv, D, N, H, B);
    struct ggml_tensor *v = ggml_new_tensor_4d(ctx, kv, D, N, H, B);
    struct ggml_tensor *mask = NULL;
    fill(q, 1), fill(k, 2), fill(v, 3);
    if (causal) {
        mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, N, N);
        ggml_fp16_t *m = mask->data;
        for (long i = 0; i < N; ++i)
            for (long j = 0; j < N; ++j)
                m[i * N + j] = ggml_fp32_to_fp16(j <= i ? 0.0f : -INFINITY);
    }
    struct ggml_tensor *out =
        ggml_flash_attn_ext(ctx, q, k, v, mask, 1.0f / sqrtf((float)D), 0.0f, 0.0f);
    ggml_flash_attn_ext_set_prec(out, GGML_PREC_F32);
    struct ggml_cgraph *graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, out);
    struct ggml_cplan plan = ggml_graph_plan(graph, (int)threads, NULL);
    void *work = plan.work_size ? malloc(plan.work_size) : NULL;
    double *t = malloc(sizeof(double) * (size_t)runs);
    if ((plan.work_size && !work) || !t) return 1;
    plan.work_data = work;

    for (long r = -warmup; r < runs; ++r) {
        const double t0 = now();
        if (ggml_graph_compute(graph, &plan) != GGML_STATUS_SUCCESS) return 1;
        if (r >= 0) t[r] = now() - t0;
    }
    qsort(t, (size_t)runs, sizeof *t, cmp);
    const double med = runs % 2 ? t[runs / 2] : 0.5 * (t[runs / 2 - 1] + t[runs / 2]);
    const double flops = 4.0 * (double)B * H * N * N * D * (causal ? 0.5 : 1.0);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"what\":\"ggml\",\"ggml\":\"%s\",\"source\":\"%s\",\"mode\":\"forward\","
           "\"batch\":%ld,\"heads\":%ld,\"seq\":%ld,\"head_dim\":%ld,\"causal\":%s,"
           "\"path\":\"ggml_flash_attn_ext\",\"kv_type\":\"%s\",\"threads\":%ld,\"runs\":%ld,"
           "\"ms\":%.4f,\"ms_min\":%.4f,\"gflops\":%.3f,\"peak_rss_bytes\":%ld}\n",
           ggml_version(), GGML_SOURCE, B, H, N, D, causal ? "true" : "false", ggml_type_name(kv),
           threads, runs, med * 1e3, t[0] * 1e3, flops / med / 1e9, ru.ru_maxrss * 1024L);
    free(t), free(work);
    ggml_free(ctx);
    return 0;
}
