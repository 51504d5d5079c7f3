/*
 * Independent items of known cost on a team of threads (the sequences of
 * attn_sdpa_varlen, the entries of a KV-cache attend): an item worth more
 * than a fair share of what is left (cost · threads > remaining) runs alone
 * with every thread, largest first; the rest run side by side, one thread
 * each, handed out largest first (dynamic schedule). With one thread every
 * item runs in turn on the caller's thread. Each item writes its own
 * outputs and no item's bits depend on its thread count, so the schedule
 * never changes a result.
 */
#ifndef ATTN_CORE_SCHEDULE_H
#define ATTN_CORE_SCHEDULE_H

#include "internal.h"

/* Runs item `item` with `threads` threads; slot (< the team's threads) is
 * the calling thread's number in the team, for per-thread scratch. */
typedef attn_status (*attn_item_fn)(void *ctx, int64_t item, int threads, int slot,
                                    attn_error *err);

/* Runs items 0 .. n-1 (cost[i] >= 0) on `threads` threads. On failure:
 * among the items run alone, the first failure stops the call; among those
 * run side by side, the lowest-numbered failing item's error is returned.
 * `what` names the caller in an allocation failure. */
attn_status attn_schedule_items(const double *cost, int64_t n, int threads, attn_item_fn fn,
                                void *ctx, const char *what, attn_error *err);

#endif
