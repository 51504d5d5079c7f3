/* Allocation failure injection for the attn CLI, linked with
 * -Wl,--wrap=malloc,... so that only the allocations of attn's own code
 * (library and CLI, not libc's or libgomp's) are counted:
 *   ATTN_FAIL_ALLOC=k   the k-th of them (1-based) returns NULL (ENOMEM)
 *   ATTN_COUNT_ALLOC=F  at exit, the number of them is written to file F
 * Atomic counters: OpenMP workers may allocate too (tests use one thread). */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t align, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);

static atomic_long calls;
static long fail_at = -2; /* -2: not read yet, -1: never */

static void write_count(void)
{
    const char *path = getenv("ATTN_COUNT_ALLOC");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (f) {
        fprintf(f, "%ld\n", (long)atomic_load(&calls));
        fclose(f);
    }
}

/* True when this allocation is the one to fail. */
static bool fail_now(void)
{
    if (fail_at == -2) {
        const char *k = getenv("ATTN_FAIL_ALLOC");
        fail_at = k && *k ? strtol(k, NULL, 10) : -1;
        if (getenv("ATTN_COUNT_ALLOC")) atexit(write_count);
    }
    long n = atomic_fetch_add(&calls, 1) + 1;
    if (n != fail_at) return false;
    errno = ENOMEM;
    return true;
}

void *__wrap_malloc(size_t n)
{
    return fail_now() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
    return fail_now() ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
    return fail_now() ? NULL : __real_realloc(p, n);
}

int __wrap_posix_memalign(void **p, size_t align, size_t n)
{
    return fail_now() ? ENOMEM : __real_posix_memalign(p, align, n);
}

char *__wrap_strdup(const char *s)
{
    return fail_now() ? NULL : __real_strdup(s);
}

char *__wrap_strndup(const char *s, size_t n)
{
    return fail_now() ? NULL : __real_strndup(s, n);
}
