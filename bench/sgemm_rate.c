/* The machine's practical single-precision limit: OpenBLAS sgemm on
 * n×n×n (row-major, no transposes), median of runs timed calls after one
 * warm-up. Threads: OPENBLAS_NUM_THREADS. Prints one JSON line with the
 * OPENBLAS_CORETYPE it ran under ("coretype": null when unset, i.e.
 * OpenBLAS's own pick; bench/run.sh sets it to the best kernels the CPU's
 * ISA allows, and to narrower ones for the same-ISA roofline) and the
 * kernel set OpenBLAS actually ran ("core", e.g. "SkylakeX": an unknown
 * OPENBLAS_CORETYPE falls back to OpenBLAS's own pick).
 * Built by bench/run.sh: cc -O2 sgemm_rate.c -lopenblas
 * Usage: sgemm_rate [n (2048)] [runs (7)] */
#include <cblas.h>

#include "rate.h"

struct sgemm_call {
    int n;
    const float *a, *b;
    float *c;
};

static void sgemm_once(void *arg)
{
    const struct sgemm_call *s = arg;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s->n, s->n, s->n, 1.0f, s->a, s->n, s->b,
                s->n, 0.0f, s->c, s->n);
}

int main(int argc, char **argv)
{
    const int n = argc > 1 ? atoi(argv[1]) : 2048, runs = argc > 2 ? atoi(argv[2]) : 7;
    const char *threads = getenv("OPENBLAS_NUM_THREADS"), *coretype = getenv("OPENBLAS_CORETYPE");
    if (n < 1 || runs < 1) {
        fprintf(stderr, "usage: sgemm_rate [n >= 1] [runs >= 1]\n");
        return 2;
    }
    const size_t nn = (size_t)n * (size_t)n;
    float *a = malloc(sizeof(float) * nn), *b = malloc(sizeof(float) * nn), *c = malloc(sizeof(float) * nn);
    if (!a || !b || !c) return 1;
    for (size_t i = 0; i < nn; ++i) {
        a[i] = (float)(i % 7) * 0.1f - 0.3f;
        b[i] = (float)(i % 5) * 0.1f - 0.2f;
    }
    struct sgemm_call s = {n, a, b, c};
    const double med = rate_median_seconds(sgemm_once, &s, runs);
    if (med < 0) return 1;
    printf("{\"what\":\"sgemm\",\"n\":%d,\"threads\":%s,\"runs\":%d,\"ms\":%.4f,\"gflops\":%.3f,\"coretype\":", n,
           threads ? threads : "null", runs, med * 1e3, 2.0 * n * n * (double)n / med / 1e9);
    rate_put_json_string(coretype && *coretype ? coretype : NULL);
    fputs(",\"core\":", stdout);
    rate_put_json_string(openblas_get_corename());
    puts("}");
    free(a), free(b), free(c);
    return 0;
}
