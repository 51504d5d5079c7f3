/* The matrix engines' practical limit: oneDNN's matmul on n×n×n, median of
 * runs timed calls after one warm-up, in one of two modes:
 *   bf16: bf16 × bf16 with float32 accumulation into a float32 result, the
 *         products of attn's bf16 precision (AMX or AVX512_BF16 where the
 *         CPU has them);
 *   f32:  float32 throughout, a cross-check of OpenBLAS's sgemm rate.
 * All three matrices are plain row-major, as a caller's would be, so any
 * repacking oneDNN's kernel needs is inside the timed call, as it is for
 * sgemm. Threads: OMP_NUM_THREADS (Debian's oneDNN runs on OpenMP).
 * Prints one JSON line with the implementation oneDNN chose ("impl", e.g.
 * "brg:avx512_core_amx_bf16", "brg:avx512_core_bf16"); refuses (exit 3)
 * if that is a reference implementation, which is no roofline.
 * Built by bench/run.sh: cc -O2 -fopenmp dnnl_rate.c -ldnnl
 * Usage: dnnl_rate bf16|f32 [n (2048)] [runs (7)] */
#include <dnnl.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "rate.h"

struct matmul_call {
    dnnl_primitive_t prim;
    dnnl_stream_t stream;
    dnnl_exec_arg_t args[3];
};

static void matmul_once(void *arg)
{
    struct matmul_call *m = arg;
    if (dnnl_primitive_execute(m->prim, m->stream, 3, m->args) != dnnl_success ||
        dnnl_stream_wait(m->stream) != dnnl_success) {
        fprintf(stderr, "dnnl_rate: the matmul failed\n");
        exit(1);
    }
}

/* x rounded to the nearest bf16, ties to even (the inputs are finite). */
static uint16_t to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* A row-major n×n matrix of the given type with the values of element i
 * of a repeating pattern (the same as sgemm_rate's), or NULL. */
static void *pattern(int n, dnnl_data_type_t type, int period, float low)
{
    const size_t nn = (size_t)n * (size_t)n;
    void *p = malloc(nn * (type == dnnl_bf16 ? sizeof(uint16_t) : sizeof(float)));
    if (!p) return NULL;
    for (size_t i = 0; i < nn; ++i) {
        const float v = (float)(i % (size_t)period) * 0.1f + low;
        if (type == dnnl_bf16)
            ((uint16_t *)p)[i] = to_bf16(v);
        else
            ((float *)p)[i] = v;
    }
    return p;
}

#define CHECK(call, what)                                                  \
    do {                                                                   \
        if ((call) != dnnl_success) {                                      \
            fprintf(stderr, "dnnl_rate: %s failed\n", what);               \
            return 1;                                                      \
        }                                                                  \
    } while (0)

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    const int n = argc > 2 ? atoi(argv[2]) : 2048, runs = argc > 3 ? atoi(argv[3]) : 7;
    const int bf16 = !strcmp(mode, "bf16");
    if ((!bf16 && strcmp(mode, "f32")) || n < 1 || runs < 1) {
        fprintf(stderr, "usage: dnnl_rate bf16|f32 [n >= 1 (2048)] [runs >= 1 (7)]\n");
        return 2;
    }
    const dnnl_data_type_t in = bf16 ? dnnl_bf16 : dnnl_f32;
    const dnnl_dims_t dims = {n, n};
    dnnl_memory_desc_t a_md, b_md, c_md;
    CHECK(dnnl_memory_desc_init_by_tag(&a_md, 2, dims, in, dnnl_ab), "the source's descriptor");
    CHECK(dnnl_memory_desc_init_by_tag(&b_md, 2, dims, in, dnnl_ab), "the weights' descriptor");
    CHECK(dnnl_memory_desc_init_by_tag(&c_md, 2, dims, dnnl_f32, dnnl_ab), "the result's descriptor");
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    CHECK(dnnl_engine_create(&engine, dnnl_cpu, 0), "the CPU engine");
    CHECK(dnnl_stream_create(&stream, engine, dnnl_stream_default_flags), "the stream");
    dnnl_matmul_desc_t desc;
    dnnl_primitive_desc_t pd;
    CHECK(dnnl_matmul_desc_init(&desc, &a_md, &b_md, NULL, &c_md), "the matmul's descriptor");
    CHECK(dnnl_primitive_desc_create(&pd, &desc, NULL, engine, NULL), "the matmul (no implementation?)");
    const char *impl = NULL;
    CHECK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl), "the implementation's name");
    if (!impl || !strncmp(impl, "ref", 3)) {
        fprintf(stderr, "dnnl_rate: oneDNN has only its reference matmul (%s) for %s here\n",
                impl ? impl : "?", mode);
        return 3;
    }
    void *a = pattern(n, in, 7, -0.3f), *b = pattern(n, in, 5, -0.2f), *c = pattern(n, dnnl_f32, 1, 0.0f);
    if (!a || !b || !c) return 1;
    dnnl_memory_t am, bm, cm;
    CHECK(dnnl_memory_create(&am, &a_md, engine, a), "the source");
    CHECK(dnnl_memory_create(&bm, &b_md, engine, b), "the weights");
    CHECK(dnnl_memory_create(&cm, &c_md, engine, c), "the result");
    struct matmul_call m = {.stream = stream,
                            .args = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}}};
    CHECK(dnnl_primitive_create(&m.prim, pd), "the primitive");
    const double med = rate_median_seconds(matmul_once, &m, runs);
    if (med < 0) return 1;
    const dnnl_version_t *v = dnnl_version();
    printf("{\"what\":\"dnnl\",\"dtype\":\"%s\",\"n\":%d,\"threads\":%d,\"runs\":%d,\"ms\":%.4f,"
           "\"gflops\":%.3f,\"impl\":",
           mode, n, omp_get_max_threads(), runs, med * 1e3, 2.0 * n * n * (double)n / med / 1e9);
    rate_put_json_string(impl);
    printf(",\"dnnl\":\"%d.%d.%d\"}\n", v->major, v->minor, v->patch);
    dnnl_primitive_destroy(m.prim);
    dnnl_memory_destroy(am), dnnl_memory_destroy(bm), dnnl_memory_destroy(cm);
    dnnl_primitive_desc_destroy(pd);
    dnnl_stream_destroy(stream), dnnl_engine_destroy(engine);
    free(a), free(b), free(c);
    return 0;
}
