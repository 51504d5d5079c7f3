/* What the roofline programs (bench/sgemm_rate.c, bench/dnnl_rate.c) share:
 * the median wall time of timed calls after a warm-up, and JSON strings.
 * Header-only, as each program is one file that bench/run.sh compiles. */
#ifndef ATTN_BENCH_RATE_H
#define ATTN_BENCH_RATE_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double rate_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int rate_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Seconds: the median of runs timed calls of call(arg) after one untimed
 * one (which pays for first-touch page faults, thread start-up and any
 * packing a library caches); negative if out of memory or runs < 1. */
static double rate_median_seconds(void (*call)(void *), void *arg, int runs)
{
    double *t = runs > 0 ? malloc(sizeof(double) * (size_t)runs) : NULL;
    if (!t) return -1.0;
    for (int r = -1; r < runs; ++r) {
        const double t0 = rate_now();
        call(arg);
        if (r >= 0) t[r] = rate_now() - t0;
    }
    qsort(t, (size_t)runs, sizeof *t, rate_cmp);
    const double med = runs % 2 ? t[runs / 2] : 0.5 * (t[runs / 2 - 1] + t[runs / 2]);
    free(t);
    return med;
}

/* s as a JSON string, or null. */
static void rate_put_json_string(const char *s)
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

#endif
