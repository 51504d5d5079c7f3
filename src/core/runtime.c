/* Thread count defaults, capped by what the process can afford. The ISA
 * query lives with the kernel dispatch (src/kernels/dispatch.c). */
/* MAP_ANONYMOUS, MAP_NORESERVE */
#define _DEFAULT_SOURCE
#include "internal.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

int attn_default_threads(void)
{
    const char *env = getenv("ATTN_NUM_THREADS");
    if (env && *env) {
        char *end;
        long n = strtol(env, &end, 10);
        if (*end == '\0' && n > 0 && n <= ATTN_MAX_THREADS) return (int)n;
    }
#ifdef _OPENMP
    return omp_get_num_procs();
#else
    return 1;
#endif
}

#ifdef _OPENMP
/*
 * libgomp ends the process (gomp_fatal) when it cannot create a thread of a
 * parallel region, e.g. under `prlimit --as` or a small RLIMIT_NPROC. The
 * library must never exit, so when such a limit is set the threads a call
 * will use are created once here first: probe threads with libgomp's stack
 * size, then an empty parallel region of the size that worked, which leaves
 * libgomp's pool holding those threads for the call's own regions. Results
 * do not depend on the thread count, so fewer threads only cost time.
 */

/* libgomp's thread stack: OMP_STACKSIZE / GOMP_STACKSIZE, else the default
 * (0: let pthread_create pick it, as libgomp then does). */
static size_t gomp_stack_size(void)
{
    const char *env = getenv("OMP_STACKSIZE");
    char unit = 'K';
    if (!env || !*env) {
        env = getenv("GOMP_STACKSIZE");
        if (!env || !*env) return 0;
    }
    char *end;
    unsigned long long v = strtoull(env, &end, 10);
    while (isspace((unsigned char)*end)) end++;
    if (*end) unit = (char)toupper((unsigned char)*end);
    const unsigned shift = unit == 'B' ? 0 : unit == 'K' ? 10 : unit == 'M' ? 20 : unit == 'G' ? 30 : 10;
    return v > (SIZE_MAX >> shift) ? 0 : (size_t)(v << shift);
}

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t go;
    bool released;
} probe_gate;

static void *probe_wait(void *arg)
{
    probe_gate *g = arg;
    pthread_mutex_lock(&g->lock);
    while (!g->released) pthread_cond_wait(&g->go, &g->lock);
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

/* Half of the address space left under RLIMIT_AS (0 if unlimited): kept
 * free while probing, so that threads never take the memory the call is
 * about to allocate. */
static size_t address_space_reserve(void)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_AS, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return 0;
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long pages = 0;
    if (!f) return 0;
    if (fscanf(f, "%llu", &pages) != 1) pages = 0;
    fclose(f);
    const unsigned long long used = pages * (unsigned long long)sysconf(_SC_PAGESIZE);
    return used < r.rlim_cur ? (size_t)((r.rlim_cur - used) / 2) : 0;
}

/* How many of `want` threads can exist at once right now (creating them),
 * with half the free address space held back. */
static int probe_threads(int want)
{
    const size_t reserve = address_space_reserve();
    void *held = reserve ? mmap(NULL, reserve, PROT_NONE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                         : MAP_FAILED;
    probe_gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};
    pthread_t ids[ATTN_MAX_THREADS];
    pthread_attr_t attr;
    const size_t stack = gomp_stack_size();
    bool have_attr = stack > 0 && pthread_attr_init(&attr) == 0;
    if (have_attr && pthread_attr_setstacksize(&attr, stack) != 0) {
        pthread_attr_destroy(&attr);
        have_attr = false;
    }
    int made = 0;
    while (made < want && pthread_create(&ids[made], have_attr ? &attr : NULL, probe_wait, &g) == 0)
        made++;
    if (have_attr) pthread_attr_destroy(&attr);
    pthread_mutex_lock(&g.lock);
    g.released = true;
    pthread_cond_broadcast(&g.go);
    pthread_mutex_unlock(&g.lock);
    for (int i = 0; i < made; ++i) pthread_join(ids[i], NULL);
    if (held != MAP_FAILED) munmap(held, reserve);
    return made;
}

static bool thread_limits_apply(void)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY) return true;
    /* RLIMIT_NPROC counts every thread of the user; root is exempt */
    return getrlimit(RLIMIT_NPROC, &r) == 0 && r.rlim_cur != RLIM_INFINITY && geteuid() != 0;
}

/* The team size this thread last warmed: libgomp keeps that many threads
 * in the thread's pool (until a smaller team runs), so a later call only
 * probes the threads beyond it. A per-thread cache of libgomp's state, not
 * shared between threads. */
static _Thread_local int warmed_team = 1;

static int affordable_threads(int n)
{
    if (n <= 1 || omp_in_parallel() || !thread_limits_apply()) return n;
    if (n > warmed_team) n = warmed_team + probe_threads(n - warmed_team);
    /* the team now, while the probe showed it fits (a body, so that the
     * region is not optimised away) */
    int joined = 0;
#pragma omp parallel num_threads(n) reduction(+ : joined)
    joined += 1;
    warmed_team = joined > 0 ? joined : 1;
    return warmed_team;
}
#else
static int affordable_threads(int n)
{
    return n;
}
#endif

int attn_resolve_threads(int requested)
{
    return affordable_threads(requested > 0 ? requested : attn_default_threads());
}
