/* Independent items of known cost on a team of threads (schedule.h). */
#include "schedule.h"

#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct {
    double cost;
    int64_t item;
} item_cost;

/* Largest first; equal costs in item order (a fixed schedule). */
static int by_cost_desc(const void *x, const void *y)
{
    const item_cost *p = x, *q = y;
    if (p->cost != q->cost) return p->cost > q->cost ? -1 : 1;
    return p->item < q->item ? -1 : p->item > q->item;
}

attn_status attn_schedule_items(const double *cost, int64_t n, int threads, attn_item_fn fn,
                                void *ctx, const char *what, attn_error *err)
{
    if (n == 0) return ATTN_OK;
    item_cost *order = malloc((size_t)n * sizeof *order);
    RETURN_IF(!order, err, ATTN_ERR_ALLOC, "%s: cannot allocate the schedule", what);
    double remaining = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        order[i] = (item_cost){cost[i], i};
        remaining += cost[i];
    }
    qsort(order, (size_t)n, sizeof *order, by_cost_desc);
    attn_status status = ATTN_OK;
    int64_t first = 0;
    /* alone with every thread (all of them when there is one thread) */
    while (first < n && (threads == 1 || order[first].cost * threads > remaining)) {
        status = fn(ctx, order[first].item, threads, 0, err);
        if (status != ATTN_OK) break;
        remaining -= order[first].cost;
        first++;
    }
    if (status == ATTN_OK && first < n) {
        int64_t failed = INT64_MAX;
        attn_error failed_err = {ATTN_OK, ""};
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
        for (int64_t i = first; i < n; ++i) {
            int slot = 0;
#ifdef _OPENMP
            slot = omp_get_thread_num();
#endif
            attn_error e = {ATTN_OK, ""};
            const attn_status st = fn(ctx, order[i].item, 1, slot, &e);
            if (st != ATTN_OK) {
#pragma omp critical(attn_schedule_error)
                if (order[i].item < failed) {
                    failed = order[i].item;
                    failed_err = e;
                    failed_err.status = st;
                }
            }
        }
        if (failed != INT64_MAX) {
            status = failed_err.status;
            if (err) *err = failed_err;
        }
    }
    free(order);
    return status;
}
