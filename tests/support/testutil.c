/* Shared test helpers: RNG, strided tensors, tolerant comparison, counters,
 * options. See testutil.h for the contract of each function. */
#include "testutil.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------- RNG */

uint64_t tu_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void tu_rng_seed(tu_rng *r, uint64_t seed)
{
    /* splitmix64 expands the seed; xoshiro needs a state that is not all 0. */
    uint64_t x = seed;
    for (int i = 0; i < 4; ++i) {
        x += 0x9e3779b97f4a7c15ull;
        r->s[i] = tu_mix(x);
    }
    if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3])) r->s[0] = 1;
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t tu_rng_u64(tu_rng *r)
{
    uint64_t *s = r->s;
    const uint64_t result = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double tu_rng_uniform(tu_rng *r) { return (double)(tu_rng_u64(r) >> 11) * 0x1.0p-53; }

double tu_rng_range(tu_rng *r, double lo, double hi) { return lo + (hi - lo) * tu_rng_uniform(r); }

int64_t tu_rng_int(tu_rng *r, int64_t lo, int64_t hi)
{
    if (hi <= lo) return lo;
    uint64_t span = (uint64_t)(hi - lo) + 1;
    return lo + (int64_t)(tu_rng_u64(r) % span); /* bias is negligible for test sizes */
}

double tu_rng_normal(tu_rng *r)
{
    double u1 = tu_rng_uniform(r), u2 = tu_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

bool tu_rng_chance(tu_rng *r, double p) { return tu_rng_uniform(r) < p; }

int64_t tu_rng_pick(tu_rng *r, const int64_t *list, int n) { return list[tu_rng_int(r, 0, n - 1)]; }

/* --------------------------------------------------------------- layouts */

tu_layout tu_layout_contiguous(int ndim)
{
    tu_layout l;
    memset(&l, 0, sizeof l);
    for (int d = 0; d < ATTN_MAX_DIMS; ++d) l.order[d] = d;
    (void)ndim;
    l.inner_gap = 1;
    return l;
}

tu_layout tu_layout_random(tu_rng *r, int ndim, unsigned flags)
{
    tu_layout l = tu_layout_contiguous(ndim);
    if ((flags & TU_LAYOUT_PERMUTE) && tu_rng_chance(r, 0.7)) {
        for (int d = ndim - 1; d > 0; --d) { /* Fisher-Yates */
            int j = (int)tu_rng_int(r, 0, d);
            int tmp = l.order[d];
            l.order[d] = l.order[j];
            l.order[j] = tmp;
        }
    }
    if (flags & TU_LAYOUT_PAD) {
        for (int d = 0; d < ndim; ++d)
            if (tu_rng_chance(r, 0.5)) l.pad[d] = tu_rng_int(r, 1, 3);
        if (tu_rng_chance(r, 0.2)) l.inner_gap = 2;
    }
    for (int d = 0; d < ndim; ++d) {
        if ((flags & TU_LAYOUT_FLIP) && tu_rng_chance(r, 0.1)) l.flip[d] = true;
        if ((flags & TU_LAYOUT_BROADCAST) && tu_rng_chance(r, 0.08)) l.broadcast[d] = true;
    }
    return l;
}

/* --------------------------------------------------------------- tensors */

static size_t dtype_size(attn_dtype dtype) { return dtype == ATTN_BOOL ? 1 : sizeof(float); }

void tu_tensor_poison(tu_tensor *t)
{
    if (!t->base) return;
    if (t->elem_size == 1) {
        memset(t->base, TU_SENTINEL_BOOL, (size_t)t->count);
    } else {
        uint32_t bits = TU_SENTINEL_F32_BITS;
        for (int64_t i = 0; i < t->count; ++i)
            memcpy((char *)t->base + (size_t)i * 4, &bits, 4);
    }
}

bool tu_tensor_alloc(tu_tensor *t, attn_dtype dtype, int ndim, const int64_t *shape,
                     const tu_layout *layout)
{
    memset(t, 0, sizeof *t);
    tu_layout contiguous = tu_layout_contiguous(ndim);
    if (!layout) layout = &contiguous;
    t->elem_size = dtype_size(dtype);
    t->view.dtype = dtype;
    t->view.ndim = ndim;

    /* Strides from the innermost dimension in memory outwards. */
    int64_t running = layout->inner_gap > 0 ? layout->inner_gap : 1, start = 0;
    for (int k = ndim - 1; k >= 0; --k) {
        int d = layout->order[k];
        t->view.shape[d] = shape[d];
        if (layout->broadcast[d]) {
            t->view.stride[d] = 0;
            continue;
        }
        int64_t extent = shape[d] + layout->pad[d];
        t->view.stride[d] = running;
        running *= extent > 0 ? extent : 1;
    }
    for (int d = 0; d < ndim; ++d) {
        if (layout->flip[d] && shape[d] > 1 && t->view.stride[d] != 0) {
            start += (shape[d] - 1) * t->view.stride[d];
            t->view.stride[d] = -t->view.stride[d];
        }
    }
    t->count = running > 0 ? running : 1;
    t->base = malloc((size_t)t->count * t->elem_size);
    if (!t->base) {
        memset(t, 0, sizeof *t);
        return false;
    }
    t->view.data = (char *)t->base + (size_t)start * t->elem_size;
    tu_tensor_poison(t);
    return true;
}

void tu_tensor_free(tu_tensor *t)
{
    free(t->base);
    memset(t, 0, sizeof *t);
}

int64_t tu_numel(const attn_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; ++d) n *= t->shape[d];
    return n;
}

int64_t tu_offset(const attn_tensor *t, int64_t linear)
{
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; --d) {
        int64_t n = t->shape[d] > 0 ? t->shape[d] : 1;
        off += (linear % n) * t->stride[d];
        linear /= n;
    }
    return off;
}

double tu_get(const attn_tensor *t, int64_t linear)
{
    int64_t off = tu_offset(t, linear);
    if (t->dtype == ATTN_BOOL) return ((const uint8_t *)t->data)[off] ? 1.0 : 0.0;
    return ((const float *)t->data)[off];
}

void tu_set(const attn_tensor *t, int64_t linear, double v)
{
    int64_t off = tu_offset(t, linear);
    if (t->dtype == ATTN_BOOL)
        ((uint8_t *)t->data)[off] = v != 0.0;
    else
        ((float *)t->data)[off] = (float)v;
}

void tu_format_index(const attn_tensor *t, int64_t linear, char *buf, size_t size)
{
    int64_t idx[ATTN_MAX_DIMS];
    for (int d = t->ndim - 1; d >= 0; --d) {
        int64_t n = t->shape[d] > 0 ? t->shape[d] : 1;
        idx[d] = linear % n;
        linear /= n;
    }
    size_t used = 0;
    used += (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < t->ndim && used < size; ++d)
        used += (size_t)snprintf(buf + used, size - used, "%s%" PRId64, d ? "," : "", idx[d]);
    if (used < size) snprintf(buf + used, size - used, "]");
}

void tu_fill_uniform(const attn_tensor *t, tu_rng *r, double lo, double hi)
{
    int64_t n = tu_numel(t);
    for (int64_t i = 0; i < n; ++i) tu_set(t, i, tu_rng_range(r, lo, hi));
}

void tu_fill_normal(const attn_tensor *t, tu_rng *r, double mean, double stddev)
{
    int64_t n = tu_numel(t);
    for (int64_t i = 0; i < n; ++i) tu_set(t, i, mean + stddev * tu_rng_normal(r));
}

void tu_fill_value(const attn_tensor *t, double v)
{
    int64_t n = tu_numel(t);
    for (int64_t i = 0; i < n; ++i) tu_set(t, i, v);
}

void tu_to_f64(const attn_tensor *t, double *dst)
{
    int64_t n = tu_numel(t);
    for (int64_t i = 0; i < n; ++i) dst[i] = tu_get(t, i);
}

void tu_gather_bytes(const attn_tensor *t, void *dst)
{
    int64_t n = tu_numel(t);
    size_t es = dtype_size(t->dtype);
    for (int64_t i = 0; i < n; ++i)
        memcpy((char *)dst + (size_t)i * es, (const char *)t->data + tu_offset(t, i) * (int64_t)es,
               es);
}

int64_t tu_count_nan(const attn_tensor *t)
{
    int64_t n = tu_numel(t), nan = 0;
    if (t->dtype != ATTN_F32) return 0;
    for (int64_t i = 0; i < n; ++i) nan += isnan(tu_get(t, i));
    return nan;
}

bool tu_padding_intact(const tu_tensor *t)
{
    if (!t->base) return true;
    uint8_t *in_view = calloc((size_t)t->count, 1);
    if (!in_view) return false;
    int64_t origin = ((const char *)t->view.data - (const char *)t->base) / (int64_t)t->elem_size;
    int64_t n = tu_numel(&t->view);
    for (int64_t i = 0; i < n; ++i) in_view[origin + tu_offset(&t->view, i)] = 1;
    bool ok = true;
    for (int64_t i = 0; i < t->count && ok; ++i) {
        if (in_view[i]) continue;
        if (t->elem_size == 1) {
            ok = ((const uint8_t *)t->base)[i] == TU_SENTINEL_BOOL;
        } else {
            uint32_t bits;
            memcpy(&bits, (const char *)t->base + (size_t)i * 4, 4);
            ok = bits == TU_SENTINEL_F32_BITS;
        }
    }
    free(in_view);
    return ok;
}

/* ------------------------------------------------------------ comparison */

static void cmp_reset(tu_cmp *c)
{
    memset(c, 0, sizeof *c);
    c->worst = -1;
}

/* Folds one (got, want) pair into c. */
static void cmp_add(tu_cmp *c, int64_t i, double got, double want, tu_tol tol)
{
    double scale = tol.atol_scale ? tol.atol_scale[i] : 1.0;
    double limit = tol.atol * scale + tol.rtol * fabs(want);
    double ratio;
    c->count++;
    if (isnan(got) || isnan(want)) {
        c->nan += isnan(got);
        ratio = INFINITY;
    } else if (isinf(got) || isinf(want)) {
        ratio = got == want ? 0.0 : INFINITY;
    } else {
        double err = fabs(got - want);
        if (err > c->max_abs_err) c->max_abs_err = err;
        double scaled = scale > 0 ? err / scale : (err > 0 ? INFINITY : 0.0);
        if (scaled > c->max_scaled_err) c->max_scaled_err = scaled;
        ratio = limit > 0 ? err / limit : (err > 0 ? INFINITY : 0.0);
    }
    if (ratio > 1.0) c->bad++;
    if (c->worst < 0 || ratio > c->max_ratio) {
        c->max_ratio = ratio;
        c->worst = i;
        c->worst_got = got;
        c->worst_want = want;
        c->worst_tol = limit;
    }
}

bool tu_compare(const attn_tensor *got, const double *want, tu_tol tol, tu_cmp *res)
{
    cmp_reset(res);
    int64_t n = tu_numel(got);
    for (int64_t i = 0; i < n; ++i) cmp_add(res, i, tu_get(got, i), want[i], tol);
    res->ok = res->bad == 0;
    return res->ok;
}

bool tu_compare_f64(const double *got, const double *want, int64_t n, tu_tol tol, tu_cmp *res)
{
    cmp_reset(res);
    for (int64_t i = 0; i < n; ++i) cmp_add(res, i, got[i], want[i], tol);
    res->ok = res->bad == 0;
    return res->ok;
}

void tu_cmp_describe(const tu_cmp *c, const char *name, const attn_tensor *view, char *buf,
                     size_t size)
{
    char idx[96] = "-";
    if (c->worst >= 0) {
        if (view)
            tu_format_index(view, c->worst, idx, sizeof idx);
        else
            snprintf(idx, sizeof idx, "[%" PRId64 "]", c->worst);
    }
    snprintf(buf, size,
             "%s: %" PRId64 "/%" PRId64 " outside tolerance (%" PRId64
             " NaN); worst %s got %.9g want %.9g |err| %.3g tol %.3g (ratio %.3g); max |err| %.3g",
             name, c->bad, c->count, c->nan, idx, c->worst_got, c->worst_want,
             fabs(c->worst_got - c->worst_want), c->worst_tol, c->max_ratio, c->max_abs_err);
}

/* ------------------------------------------------------- pass/fail counting */

void tu_group_begin(tu_group *g, tu_suite *s, const char *name)
{
    memset(g, 0, sizeof *g);
    g->suite = s;
    g->name = name;
    g->start = tu_now_seconds();
}

void tu_group_pass(tu_group *g) { g->passed++; }

void tu_group_skip(tu_group *g, const char *reason)
{
    g->skipped++;
    if (!g->skip_reason) g->skip_reason = reason;
}

/* Failure lines always print (each names its case); notes stop after
 * TU_MAX_DETAILS per group so a broken build does not flood the log. */
static void vprint_line(const char *prefix, const char *fmt, va_list ap)
{
    printf("%s", prefix);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
}

void tu_group_fail(tu_group *g, const char *fmt, ...)
{
    char prefix[128];
    g->failed++;
    snprintf(prefix, sizeof prefix, "FAIL [%s] ", g->name);
    va_list ap;
    va_start(ap, fmt);
    vprint_line(prefix, fmt, ap);
    va_end(ap);
}

void tu_group_note(tu_group *g, const char *fmt, ...)
{
    if (g->details_printed >= TU_MAX_DETAILS) return;
    g->details_printed++;
    va_list ap;
    va_start(ap, fmt);
    vprint_line("    ", fmt, ap);
    va_end(ap);
}

bool tu_check(tu_group *g, bool cond, const char *fmt, ...)
{
    if (cond) {
        g->passed++;
        return true;
    }
    char prefix[128];
    g->failed++;
    snprintf(prefix, sizeof prefix, "FAIL [%s] ", g->name);
    va_list ap;
    va_start(ap, fmt);
    vprint_line(prefix, fmt, ap);
    va_end(ap);
    return false;
}

void tu_group_end(tu_group *g)
{
    printf("group %-34s %6" PRId64 " passed, %" PRId64 " failed", g->name, g->passed, g->failed);
    if (g->skipped)
        printf(", %" PRId64 " skipped (%s)", g->skipped, g->skip_reason ? g->skip_reason : "?");
    if (g->details_printed >= TU_MAX_DETAILS)
        printf("  [detail lines capped at %d]", TU_MAX_DETAILS);
    printf("  (%.1f s)\n", tu_now_seconds() - g->start);
    fflush(stdout);
    if (g->suite) {
        g->suite->passed += g->passed;
        g->suite->failed += g->failed;
        g->suite->skipped += g->skipped;
    }
}

int tu_suite_finish(const tu_suite *s)
{
    printf("%" PRId64 " passed, %" PRId64 " failed", s->passed, s->failed);
    if (s->skipped) printf(", %" PRId64 " skipped", s->skipped);
    printf("\n");
    fflush(stdout);
    return s->failed == 0 && s->passed > 0 ? 0 : 1;
}

/* ---------------------------------------------------------- crash context */

/* Written by tu_crash_context, read only by the signal handler. */
static char crash_context[512] = "(no context set)";

static void crash_handler(int sig)
{
    /* Only async-signal-safe calls here: write() and re-raising. */
    char head[64] = "\nCRASH (signal ";
    size_t n = strlen(head);
    if (sig >= 10) head[n++] = (char)('0' + sig / 10);
    head[n++] = (char)('0' + sig % 10);
    memcpy(head + n, ") while: ", 10);
    if (write(STDERR_FILENO, head, strlen(head)) < 0) { /* nothing to do */ }
    if (write(STDERR_FILENO, crash_context, strlen(crash_context)) < 0) { /* idem */ }
    if (write(STDERR_FILENO, "\n", 1) < 0) { /* idem */ }
    signal(sig, SIG_DFL);
    raise(sig);
}

void tu_install_crash_handler(void)
{
    static const int sigs[] = {SIGSEGV, SIGFPE, SIGBUS, SIGILL, SIGABRT};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = crash_handler;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; ++i) sigaction(sigs[i], &sa, NULL);
}

void tu_crash_context(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(crash_context, sizeof crash_context, fmt, ap);
    va_end(ap);
}

/* ----------------------------------------------------------------- OpenMP */

void tu_prefer_passive_openmp(char **argv)
{
    if (getenv("OMP_WAIT_POLICY")) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
    fflush(stdout);
    execv("/proc/self/exe", argv); /* returns only on failure: carry on as we are */
}

/* --------------------------------------------------------------- options */

static bool parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s) return false;
    char *end;
    unsigned long long v = strtoull(s, &end, 0);
    if (*end) return false;
    *out = (uint64_t)v;
    return true;
}

static bool env_true(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

bool tu_parse_options(int argc, char **argv, uint64_t default_seed, tu_options *opt)
{
    memset(opt, 0, sizeof *opt);
    opt->seed = default_seed;
    opt->cases = -1;
    uint64_t v;
    if (parse_u64(getenv("ATTN_TEST_SEED"), &v)) opt->seed = v, opt->seed_given = true;
    if (parse_u64(getenv("ATTN_TEST_CASES"), &v)) opt->cases = (int64_t)v;
    if (parse_u64(getenv("ATTN_TEST_CASE"), &v)) opt->replay = true, opt->replay_seed = v;
    opt->quick = env_true("ATTN_TEST_QUICK");
    opt->verbose = env_true("ATTN_TEST_VERBOSE");
    if (getenv("ATTN_TEST_GROUP") && *getenv("ATTN_TEST_GROUP")) opt->group = getenv("ATTN_TEST_GROUP");

    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--seed") && parse_u64(next, &v)) {
            opt->seed = v, opt->seed_given = true, ++i;
        } else if (!strcmp(a, "--cases") && parse_u64(next, &v)) {
            opt->cases = (int64_t)v, ++i;
        } else if (!strcmp(a, "--case") && parse_u64(next, &v)) {
            opt->replay = true, opt->replay_seed = v, ++i;
        } else if (!strcmp(a, "--group") && next) {
            opt->group = next, ++i;
        } else if (!strcmp(a, "--quick")) {
            opt->quick = true;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            opt->verbose = 1;
        } else {
            fprintf(stderr,
                    "usage: %s [--seed S] [--cases N] [--case SEED] [--group NAME] [--quick] [-v]\n"
                    "  (or ATTN_TEST_SEED, ATTN_TEST_CASES, ATTN_TEST_CASE, ATTN_TEST_GROUP,\n"
                    "   ATTN_TEST_QUICK=1, ATTN_TEST_VERBOSE=1)\n",
                    argv[0]);
            return false;
        }
    }
    return true;
}

bool tu_group_selected(const tu_options *opt, const char *name)
{
    return !opt->group || strstr(name, opt->group) != NULL;
}

bool tu_begin(int argc, char **argv, uint64_t default_seed, tu_options *opt, tu_suite *s)
{
    tu_prefer_passive_openmp(argv);
    tu_install_crash_handler();
    memset(s, 0, sizeof *s);
    if (!tu_parse_options(argc, argv, default_seed, opt)) return false;
    s->verbose = opt->verbose;
    return true;
}

void tu_run_groups(tu_suite *s, const tu_options *opt, const tu_group_entry *groups, int n)
{
    for (int i = 0; i < n; ++i)
        if (tu_group_selected(opt, groups[i].name)) groups[i].run(s);
}

int tu_replay(tu_suite *s, const tu_options *opt, const char *prog,
              void (*run)(tu_group *g, uint64_t seed, const char *replay))
{
    tu_group g;
    tu_group_begin(&g, s, "replay");
    char rp[128];
    snprintf(rp, sizeof rp, "ATTN_TEST_CASE=0x%016" PRIx64 " ./%s", opt->replay_seed, prog);
    s->verbose = 1;
    run(&g, opt->replay_seed, rp);
    tu_group_end(&g);
    return tu_suite_finish(s);
}

bool tu_env_flag(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

bool tu_emulated(void)
{
    const char *v = getenv("ATTN_TEST_EMULATOR");
    return v && *v;
}

static char scratch_path[512];
static pid_t scratch_owner;

/* Removes name (in the directory open as parent) and, for a directory,
 * everything in it; relative to open directories, so paths longer than
 * PATH_MAX go too. */
static void remove_tree_at(int parent, const char *name)
{
    const int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    if (fd < 0) {
        unlinkat(parent, name, 0);
        return;
    }
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) remove_tree_at(fd, e->d_name);
    closedir(d);
    unlinkat(parent, name, AT_REMOVEDIR);
}

static void remove_scratch(void)
{
    if (getpid() == scratch_owner) remove_tree_at(AT_FDCWD, scratch_path);
}

const char *tu_scratch_dir(const char *name)
{
    const char *base = getenv("TMPDIR");
    snprintf(scratch_path, sizeof scratch_path, "%s/attn-test-%s-XXXXXX",
             base && *base ? base : "/tmp", name);
    if (!mkdtemp(scratch_path) || chdir(scratch_path) != 0) {
        fprintf(stderr, "cannot make a scratch directory %s\n", scratch_path);
        exit(2);
    }
    if (!scratch_owner) atexit(remove_scratch);
    scratch_owner = getpid();
    return scratch_path;
}

/* ----------------------------------------------------- memory and time */

void *tu_xcalloc(int64_t n, size_t size)
{
    void *p = calloc((size_t)(n > 0 ? n : 1), size);
    if (!p) {
        fprintf(stderr, "test: out of memory (%lld elements of %zu bytes)\n", (long long)n, size);
        exit(2);
    }
    return p;
}

double tu_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
