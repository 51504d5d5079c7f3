/*
 * testutil.h — small helpers shared by every attn test program.
 *
 *   - a seeded, portable RNG (splitmix64 seeding xoshiro256**), so a printed
 *     seed replays a case bit for bit on any machine;
 *   - owned tensors with arbitrary layouts (permuted dimensions, padded
 *     extents, negative or zero strides for inputs), whose unused elements
 *     hold a sentinel so out-of-view reads poison results and out-of-view
 *     writes are detected;
 *   - element access by logical (C-order) index, gathering into float64;
 *   - comparison with absolute + relative tolerances that reports the worst
 *     element (index, got, want, tolerance);
 *   - a pass/fail counter with one line per group and a final
 *     "N passed, M failed" line whose result is the exit code;
 *   - command-line / environment options for seed replay and quick runs.
 *
 * Nothing here knows about attention: MHA, CLI and training tests use it too.
 */
#ifndef ATTN_TESTUTIL_H
#define ATTN_TESTUTIL_H

#include "attn.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* TU_SANITIZED: built with AddressSanitizer or ThreadSanitizer (gcc's macros,
 * clang's features). They reserve terabytes of shadow memory, so the tests
 * that set an address-space limit (RLIMIT_AS) cannot run. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TU_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TU_SANITIZED 1
#endif
#endif

#if defined(__GNUC__)
#define ATTN_TU_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define ATTN_TU_PRINTF(f, a)
#endif

/* ------------------------------------------------------------------- RNG */

/* xoshiro256** state; seed it with tu_rng_seed (any 64-bit value works). */
typedef struct {
    uint64_t s[4];
} tu_rng;

/* One step of splitmix64: a good 64-bit mixer, also used to derive
 * per-case seeds from a base seed (tu_mix(base ^ index)). */
uint64_t tu_mix(uint64_t x);
void tu_rng_seed(tu_rng *r, uint64_t seed);
uint64_t tu_rng_u64(tu_rng *r);
/* Uniform double in [0, 1). */
double tu_rng_uniform(tu_rng *r);
/* Uniform double in [lo, hi). */
double tu_rng_range(tu_rng *r, double lo, double hi);
/* Uniform integer in [lo, hi] (inclusive). */
int64_t tu_rng_int(tu_rng *r, int64_t lo, int64_t hi);
/* Standard normal (Box-Muller). */
double tu_rng_normal(tu_rng *r);
/* true with probability p. */
bool tu_rng_chance(tu_rng *r, double p);
/* One element of list[0..n) chosen uniformly. */
int64_t tu_rng_pick(tu_rng *r, const int64_t *list, int n);

/* --------------------------------------------------------------- tensors */

/*
 * How a tensor's elements are laid out in memory. For a view of shape
 * (s_0, ..., s_{n-1}):
 *   order[k]   the dimension that is k-th from the outside in memory
 *              (identity = C order);
 *   pad[d]     extra elements of extent in dimension d (gaps between rows);
 *   inner_gap  the innermost stride (1 = dense; 2 = every other element);
 *   flip[d]    negative stride in dimension d (inputs only);
 *   broadcast[d] stride 0 in dimension d (inputs only: one stored slice seen
 *              s_d times).
 */
typedef struct {
    int order[ATTN_MAX_DIMS];
    int64_t pad[ATTN_MAX_DIMS];
    int64_t inner_gap;
    bool flip[ATTN_MAX_DIMS];
    bool broadcast[ATTN_MAX_DIMS];
} tu_layout;

/* Options for tu_layout_random. */
enum {
    TU_LAYOUT_PERMUTE = 1 << 0,   /* random dimension order */
    TU_LAYOUT_PAD = 1 << 1,       /* random padding per dimension */
    TU_LAYOUT_FLIP = 1 << 2,      /* occasionally a negative stride (inputs only) */
    TU_LAYOUT_BROADCAST = 1 << 3, /* occasionally a zero stride (inputs only) */
    TU_LAYOUT_OUTPUT = TU_LAYOUT_PERMUTE | TU_LAYOUT_PAD,
    TU_LAYOUT_INPUT = TU_LAYOUT_OUTPUT | TU_LAYOUT_FLIP | TU_LAYOUT_BROADCAST,
};

/* C order, no padding. */
tu_layout tu_layout_contiguous(int ndim);
/* A random layout drawing only the features in flags (TU_LAYOUT_*). */
tu_layout tu_layout_random(tu_rng *r, int ndim, unsigned flags);

/* A view plus the allocation behind it. view.data points inside base. */
typedef struct {
    attn_tensor view;
    void *base;        /* allocation; NULL for a zero-element tensor */
    int64_t count;     /* elements in base */
    size_t elem_size;  /* 4 (float) or 1 (bool) */
} tu_tensor;

/* Bit pattern every element outside the view holds after allocation: a
 * quiet NaN for float32 (reading it poisons results), 0xA5 for bool. */
#define TU_SENTINEL_F32_BITS 0x7fc0a5a5u
#define TU_SENTINEL_BOOL 0xA5u

/*
 * Allocates a tensor of the given dtype and shape with the given layout
 * (NULL = contiguous). Every element, in view or not, starts as the sentinel.
 * Returns false on allocation failure (t is then zeroed).
 */
bool tu_tensor_alloc(tu_tensor *t, attn_dtype dtype, int ndim, const int64_t *shape,
                     const tu_layout *layout);
void tu_tensor_free(tu_tensor *t);
/* Resets every element of the allocation (in view or not) to the sentinel. */
void tu_tensor_poison(tu_tensor *t);

/* Element count of a view (product of its shape). */
int64_t tu_numel(const attn_tensor *t);
/* Element offset from view.data of the element with logical C-order index
 * `linear` (0 <= linear < numel). */
int64_t tu_offset(const attn_tensor *t, int64_t linear);
/* Read/write one element by logical index; bool reads give 0 or 1 (any
 * nonzero byte reads as 1), bool writes store v != 0. */
double tu_get(const attn_tensor *t, int64_t linear);
void tu_set(const attn_tensor *t, int64_t linear, double v);
/* Logical multi-index of a linear index, written as "[a,b,c]" into buf. */
void tu_format_index(const attn_tensor *t, int64_t linear, char *buf, size_t size);

/* Fill every view element (a zero-stride dim is written repeatedly; the last
 * write wins, so gathering reads back what the view really sees). */
void tu_fill_uniform(const attn_tensor *t, tu_rng *r, double lo, double hi);
void tu_fill_normal(const attn_tensor *t, tu_rng *r, double mean, double stddev);
void tu_fill_value(const attn_tensor *t, double v);
/* Gather the view into a contiguous C-order float64 array of numel. */
void tu_to_f64(const attn_tensor *t, double *dst);
/* Gather the view's raw element bytes (C order) into dst (numel·elem size
 * bytes), e.g. for memcmp determinism checks. */
void tu_gather_bytes(const attn_tensor *t, void *dst);

/* Number of NaN elements in a float32 view. */
int64_t tu_count_nan(const attn_tensor *t);
/* True when every element of the allocation outside the view still holds
 * the sentinel (i.e. nothing wrote outside the view). */
bool tu_padding_intact(const tu_tensor *t);

/* ------------------------------------------------------------ comparison */

/*
 * Element i passes when  |got_i - want_i| <= atol * scale_i + rtol * |want_i|
 * with scale_i = atol_scale[i] if atol_scale is non-NULL, else 1 (so atol is
 * then a plain absolute tolerance). Infinite `want` values must be matched
 * exactly; a NaN in `got` (or in `want`) always fails.
 */
typedef struct {
    double atol;
    double rtol;
    const double *atol_scale; /* optional per-element magnitude, C order */
} tu_tol;

typedef struct {
    bool ok;
    int64_t count;       /* elements compared */
    int64_t bad;         /* elements outside tolerance */
    int64_t nan;         /* NaNs in got */
    int64_t worst;       /* linear index of the largest err/tolerance, -1 if none */
    double worst_got, worst_want, worst_tol;
    double max_ratio;    /* max over elements of err / tolerance (inf: exact mismatch) */
    double max_abs_err;  /* max |got - want| over finite pairs */
    double max_scaled_err; /* max |got - want| / scale_i (needs atol_scale; else = max_abs_err) */
} tu_cmp;

/* Compare a float32 view with a contiguous float64 array of its numel. */
bool tu_compare(const attn_tensor *got, const double *want, tu_tol tol, tu_cmp *res);
/* Same for two contiguous float64 arrays of n elements. */
bool tu_compare_f64(const double *got, const double *want, int64_t n, tu_tol tol, tu_cmp *res);
/* One line describing a comparison, e.g. "out: 3/120 bad, worst [0,1,2,3]
 * got 0.5 want 0.49 |err| 0.01 > tol 1e-05". `view` (optional) formats the
 * index as a multi-index. */
void tu_cmp_describe(const tu_cmp *c, const char *name, const attn_tensor *view, char *buf,
                     size_t size);

/* ------------------------------------------------------- pass/fail counting */

/* Totals over a program run. */
typedef struct {
    int64_t passed, failed, skipped;
    int verbose;
} tu_suite;

/* A named group of items (cases, checks); prints one line when it ends. */
typedef struct {
    tu_suite *suite;
    const char *name;
    int64_t passed, failed, skipped;
    int64_t details_printed; /* detail lines printed so far (capped) */
    const char *skip_reason; /* reported in the group line if anything skipped */
    double start;            /* tu_now_seconds() at tu_group_begin: the line gives the time */
} tu_group;

/* Detail lines (tu_group_note) printed per group; FAIL lines always print. */
#define TU_MAX_DETAILS 40

void tu_group_begin(tu_group *g, tu_suite *s, const char *name);
/* Count one item. */
void tu_group_pass(tu_group *g);
void tu_group_skip(tu_group *g, const char *reason);
/* Count one failed item and print "FAIL [group] message" (printf format);
 * always printed, so put the case's seed in it. */
void tu_group_fail(tu_group *g, const char *fmt, ...) ATTN_TU_PRINTF(2, 3);
/* Print a detail line (indented) if the group's detail budget allows. */
void tu_group_note(tu_group *g, const char *fmt, ...) ATTN_TU_PRINTF(2, 3);
/* pass or fail by cond; returns cond. */
bool tu_check(tu_group *g, bool cond, const char *fmt, ...) ATTN_TU_PRINTF(3, 4);
/* Prints "group NAME: a passed, b failed[, c skipped (reason)]" and adds the
 * counts to the suite. */
void tu_group_end(tu_group *g);
/* Prints "N passed, M failed" (", K skipped" when any) and returns the exit
 * code: 0 when nothing failed and something passed, 1 otherwise. */
int tu_suite_finish(const tu_suite *s);

/* ---------------------------------------------------------- crash context */

/* Installs handlers for SIGSEGV, SIGFPE, SIGBUS, SIGILL and SIGABRT that print
 * "CRASH (signal N) while: <context>" to stderr, then die with the signal as
 * before; a crashing library call thus still names its case and seed. */
void tu_install_crash_handler(void);
/* Sets the context (printf format) a crash would print. */
void tu_crash_context(const char *fmt, ...) ATTN_TU_PRINTF(1, 2);

/* ----------------------------------------------------------------- OpenMP */

/*
 * Busy-waiting OpenMP workers make a test several times slower on a shared,
 * oversubscribed machine (e.g. 3 threads on 2 cores next to other builds),
 * and libgomp reads OMP_WAIT_POLICY only at load time. When it is unset, this
 * sets it to "passive" and re-executes the program (/proc/self/exe) with the
 * same arguments; results do not depend on the wait policy. Set
 * OMP_WAIT_POLICY yourself (any value) to opt out. Returns only when no
 * re-exec happened.
 */
void tu_prefer_passive_openmp(char **argv);

/* --------------------------------------------------------------- options */

/*
 * Common test options, from the environment first, then argv:
 *   ATTN_TEST_SEED=S   / --seed S     base seed (decimal or 0x hex)
 *   ATTN_TEST_CASES=N  / --cases N    number of random cases
 *   ATTN_TEST_QUICK=1  / --quick      fewer cases (for sanitizer builds)
 *   ATTN_TEST_CASE=S   / --case S     replay the one random case with seed S
 *   ATTN_TEST_GROUP=G  / --group G    run only groups whose name contains G
 *   ATTN_TEST_VERBOSE=1 / -v          print every case
 * cases stays -1 when not given so each test picks its own default.
 */
typedef struct {
    uint64_t seed;
    bool seed_given;
    int64_t cases;
    bool quick;
    bool replay;
    uint64_t replay_seed;
    const char *group;
    int verbose;
} tu_options;

/* Fills opt (seed defaults to default_seed). Returns false and prints usage
 * on an unknown argument. */
bool tu_parse_options(int argc, char **argv, uint64_t default_seed, tu_options *opt);
/* True when group filtering (if any) selects `name`. */
bool tu_group_selected(const tu_options *opt, const char *name);

/* The start of every suite's main: passive OpenMP (tu_prefer_passive_openmp),
 * the crash handler, the options (false on a bad argument: exit 2) and an
 * empty suite, verbose as the options say. */
bool tu_begin(int argc, char **argv, uint64_t default_seed, tu_options *opt, tu_suite *s);
/* A suite's group: the name --group selects it by, and what runs it. */
typedef struct {
    const char *name;
    void (*run)(tu_suite *s);
} tu_group_entry;
/* Runs, in order, each of the n groups the options select. */
void tu_run_groups(tu_suite *s, const tu_options *opt, const tu_group_entry *groups, int n);
/* Replays the one random case opt->replay_seed names, verbosely, in a group
 * "replay": run(g, seed, replay) with replay = "ATTN_TEST_CASE=0x... ./PROG";
 * returns tu_suite_finish's exit code. */
int tu_replay(tu_suite *s, const tu_options *opt, const char *prog,
              void (*run)(tu_group *g, uint64_t seed, const char *replay));
/* True when the environment variable is set to something other than "" or
 * "0" (e.g. ATTN_STRESS_FULL=1). */
bool tu_env_flag(const char *name);
/* True when the suite runs under an emulator (ATTN_TEST_EMULATOR, set by
 * CMake in cross builds): groups whose subject is the same on every
 * architecture for the portable code (thread invariance, workspace sizes)
 * then run only the tables this architecture adds; the native runs cover
 * the portable ones. */
bool tu_emulated(void);

/* Makes a fresh directory $TMPDIR/attn-test-NAME-XXXXXX (/tmp without
 * TMPDIR) the working directory and returns its path; the directory and
 * everything in it are removed when this process exits (not a forked
 * child). Exits with status 2 when it cannot be made. */
const char *tu_scratch_dir(const char *name);

/* ----------------------------------------------------- memory and time */

/* calloc of n (at least 1) elements of size bytes; exits with status 2 and
 * a message when memory runs out (a test cannot go on without it). */
void *tu_xcalloc(int64_t n, size_t size);
/* Monotonic wall time in seconds. */
double tu_now_seconds(void);

#endif
