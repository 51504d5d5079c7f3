/* Thread count defaults. The ISA query lives with the kernel dispatch
 * (src/kernels/dispatch.c). */
#include "internal.h"

#include <stdlib.h>
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

int attn_resolve_threads(int requested)
{
    return requested > 0 ? requested : attn_default_threads();
}
