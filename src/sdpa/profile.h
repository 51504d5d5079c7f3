/*
 * Where the fused kernels' cycles go, by part and by kind of tile: compiled
 * in only by the profiling build (CMake -DATTN_PROFILE=ON), which
 * bench/tile_cycles.c reads. In every other build each macro below is
 * empty: nothing is counted, timed or linked.
 *
 * The clock is the time-stamp counter on x86-64 (nanoseconds elsewhere), so
 * the counts are wall time of the thread that takes them, including any
 * time the machine lends to others; within one run, ratios between parts
 * hold up under such noise better than totals across runs do.
 */
#ifndef ATTN_SDPA_PROFILE_H
#define ATTN_SDPA_PROFILE_H

#include <stdint.h>

typedef enum {
    SDPA_PROF_PLAN,    /* sdpa_plan_tile: which keys each row sees */
    SDPA_PROF_PACK,    /* Kᵀ and V tiles packed (the forward's pack_kv) */
    SDPA_PROF_SCORES,  /* S = Q·Kᵀ */
    SDPA_PROF_SOFTMAX, /* the online softmax */
    SDPA_PROF_PV,      /* O = alpha∘O + P·V */
    SDPA_PROF_FINISH,  /* out = O / l, LSE, attention weights */
    SDPA_PROF_SETUP,   /* each thread's scratch set up (zeroed) */
    SDPA_PROF_TASKS,   /* whole tasks, summed over the threads */
    SDPA_PROF_LOOP,    /* the task loop's wall time, once per call */
    SDPA_PROF_CALL,    /* the whole call */
    SDPA_PROF_PARTS
} sdpa_prof_part;

/* Kinds of tile (a unit's rows against one key tile): WHOLE when every row
 * sees the same columns, PARTIAL when some row sees fewer (the diagonal
 * of causal attention, windows, masks): the forward passes the tile's
 * `ragged` as the kind. Parts outside a tile count as WHOLE. */
enum { SDPA_PROF_WHOLE, SDPA_PROF_PARTIAL, SDPA_PROF_KINDS };

enum { SDPA_PROF_FORWARD, SDPA_PROF_BACKWARD, SDPA_PROF_PASSES };

typedef struct {
    uint64_t cycles[SDPA_PROF_KINDS][SDPA_PROF_PARTS];
    uint64_t visible[SDPA_PROF_KINDS];  /* (query, key) pairs the rows see */
    uint64_t computed[SDPA_PROF_KINDS]; /* (query, key) pairs the score GEMMs compute */
    uint64_t calls;
} sdpa_profile;

#ifdef ATTN_PROFILE

uint64_t sdpa_prof_clock(void);
void sdpa_prof_add(int pass, int kind, sdpa_prof_part part, uint64_t cycles);
void sdpa_prof_count(int pass, int kind, uint64_t visible, uint64_t computed);
void sdpa_prof_call(int pass);
/* Σ (end[r] - start[r]) over the rows that see something. */
uint64_t sdpa_prof_visible(const int32_t *start, const int32_t *end, int64_t rows);
/* The counts since the last take (per pass), then zero. */
void sdpa_prof_take(sdpa_profile out[SDPA_PROF_PASSES]);

#define SDPA_PROF_START(t) const uint64_t t = sdpa_prof_clock()
#define SDPA_PROF_STOP(pass, kind, part, t) sdpa_prof_add(pass, kind, part, sdpa_prof_clock() - (t))
#define SDPA_PROF_COUNT(pass, kind, visible, computed) sdpa_prof_count(pass, kind, visible, computed)
#define SDPA_PROF_CALL(pass) sdpa_prof_call(pass)

#else

#define SDPA_PROF_START(t) ((void)0)
#define SDPA_PROF_STOP(pass, kind, part, t) ((void)0)
#define SDPA_PROF_COUNT(pass, kind, visible, computed) ((void)0)
#define SDPA_PROF_CALL(pass) ((void)0)

#endif
#endif
