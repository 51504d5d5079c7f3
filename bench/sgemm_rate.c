/* The machine's practical single-precision limit: OpenBLAS (any CBLAS)
 * sgemm on n×n×n, median of --runs timed calls after one warm-up.
 * Threads: OPENBLAS_NUM_THREADS. Prints one JSON line, with the
 * OPENBLAS_CORETYPE it ran under ("coretype": null when unset, i.e. the
 * machine's own kernels; bench/run.sh sets it for the same-ISA roofline).
 * Built by bench/run.sh: cc -O2 sgemm_rate.c -lopenblas
 * Usage: sgemm_rate [n (2048)] [runs (7)] */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* s as a JSON string, or null. */
static void put_json_string(const char *s)
{
    if (!s) {
        fputs("null", stdout);
        return;
    }
    putchar('"');
    for (; *s; ++s) {
        if (*s == '"' || *s == '\\') putchar('\\');
        if ((unsigned char)*s >= 0x20) putchar(*s);
    }
    putchar('"');
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const int n = argc > 1 ? atoi(argv[1]) : 2048, runs = argc > 2 ? atoi(argv[2]) : 7;
    const char *threads = getenv("OPENBLAS_NUM_THREADS"), *coretype = getenv("OPENBLAS_CORETYPE");
    float *a = malloc(sizeof(float) * (size_t)n * n), *b = malloc(sizeof(float) * (size_t)n * n),
          *c = malloc(sizeof(float) * (size_t)n * n);
    double *t = malloc(sizeof(double) * (size_t)runs);
    if (!a || !b || !c || !t || runs < 1) return 1;
    for (size_t i = 0; i < (size_t)n * n; ++i) {
        a[i] = (float)(i % 7) * 0.1f - 0.3f;
        b[i] = (float)(i % 5) * 0.1f - 0.2f;
    }
    for (int r = -1; r < runs; ++r) {
        const double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        if (r >= 0) t[r] = now() - t0;
    }
    qsort(t, (size_t)runs, sizeof *t, cmp);
    const double med = runs % 2 ? t[runs / 2] : 0.5 * (t[runs / 2 - 1] + t[runs / 2]);
    printf("{\"what\":\"sgemm\",\"n\":%d,\"threads\":%s,\"runs\":%d,\"ms\":%.4f,\"gflops\":%.3f,\"coretype\":", n,
           threads ? threads : "null", runs, med * 1e3, 2.0 * n * n * (double)n / med / 1e9);
    put_json_string(coretype && *coretype ? coretype : NULL);
    puts("}");
    free(a), free(b), free(c), free(t);
    return 0;
}
