/* Per-thread scratch inside OpenMP regions. */
#include "internal.h"

#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

void *attn_thread_scratch(void *base, size_t bytes, bool zero)
{
    size_t tid = 0;
#ifdef _OPENMP
    tid = (size_t)omp_get_thread_num();
#endif
    char *mine = (char *)base + tid * bytes;
    if (zero) memset(mine, 0, bytes);
    return mine;
}
