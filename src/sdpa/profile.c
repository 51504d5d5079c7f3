/* The profiling build's counters (profile.h); empty in every other build. */
#include "profile.h"

#ifdef ATTN_PROFILE

#include <stdatomic.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__)
#include <x86intrin.h>
#else
#include <time.h>
#endif

/* One set of counters per OpenMP thread number, each on its own cache
 * lines: shared counters would bounce between the cores and slow down
 * the very parts they time. (Threads of different teams with the same
 * number share a set; the adds stay atomic for them.) */
enum { SLOTS = 64 };
typedef struct {
    _Alignas(64) _Atomic uint64_t cycles[SDPA_PROF_PASSES][SDPA_PROF_KINDS][SDPA_PROF_PARTS];
    _Atomic uint64_t visible[SDPA_PROF_PASSES][SDPA_PROF_KINDS];
    _Atomic uint64_t computed[SDPA_PROF_PASSES][SDPA_PROF_KINDS];
    _Atomic uint64_t calls[SDPA_PROF_PASSES];
} counters;
static counters slots[SLOTS];

static counters *mine(void)
{
#ifdef _OPENMP
    return &slots[omp_get_thread_num() % SLOTS];
#else
    return &slots[0];
#endif
}

uint64_t sdpa_prof_clock(void)
{
#if defined(__x86_64__)
    return __rdtsc();
#else
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
#endif
}

void sdpa_prof_add(int pass, int kind, sdpa_prof_part part, uint64_t c)
{
    atomic_fetch_add_explicit(&mine()->cycles[pass][kind][part], c, memory_order_relaxed);
}

void sdpa_prof_count(int pass, int kind, uint64_t v, uint64_t c)
{
    counters *m = mine();
    atomic_fetch_add_explicit(&m->visible[pass][kind], v, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->computed[pass][kind], c, memory_order_relaxed);
}

uint64_t sdpa_prof_visible(const int32_t *start, const int32_t *end, int64_t rows)
{
    uint64_t n = 0;
    for (int64_t r = 0; r < rows; ++r)
        if (end[r] > start[r]) n += (uint64_t)(end[r] - start[r]);
    return n;
}

void sdpa_prof_call(int pass)
{
    atomic_fetch_add_explicit(&mine()->calls[pass], 1, memory_order_relaxed);
}

void sdpa_prof_take(sdpa_profile out[SDPA_PROF_PASSES])
{
    memset(out, 0, SDPA_PROF_PASSES * sizeof *out);
    for (int t = 0; t < SLOTS; ++t) {
        counters *m = &slots[t];
        for (int p = 0; p < SDPA_PROF_PASSES; ++p) {
            for (int k = 0; k < SDPA_PROF_KINDS; ++k) {
                for (int x = 0; x < SDPA_PROF_PARTS; ++x)
                    out[p].cycles[k][x] += atomic_exchange(&m->cycles[p][k][x], 0);
                out[p].visible[k] += atomic_exchange(&m->visible[p][k], 0);
                out[p].computed[k] += atomic_exchange(&m->computed[p][k], 0);
            }
            out[p].calls += atomic_exchange(&m->calls[p], 0);
        }
    }
}

#endif
