/* Where the fused kernels' cycles go, unmasked beside causal (or beside a
 * sliding window, --window L,R: then the last column is window − its visible
 * fraction × unmasked, what the window costs beyond its share): the profiling
 * build's per-part counts (src/sdpa/profile.h) for calls of attn_sdpa (or
 * attn_sdpa_backward) on random data, as a markdown table with, for each
 * part, causal − unmasked ÷ 2: what causal attention does not halve.
 *
 * Each round runs the unmasked and then the causal configuration, one
 * untimed call each and then --runs counted calls; of the rounds, the one
 * whose calls took fewest cycles is shown for each configuration (the one
 * least disturbed by whatever else the machine ran). Cycles are the
 * time-stamp counter's, millions per call.
 *
 * Built by the profiling build (make tile-cycles runs it):
 *   cmake -S . -B build-profile -DATTN_PROFILE=ON -DATTN_BUILD_TESTS=OFF
 *   cmake --build build-profile --target tile_cycles
 *   build-profile/tile_cycles --threads 1
 * ATTN_ARCH chooses the kernels, as everywhere. */
#include "attn.h"
#include "sdpa/profile.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    bool backward;
    attn_precision precision;
    bool window; /* the masked call is a sliding window (wl, wr), not causal */
    long wl, wr;
    long batch, heads, seq, dim, threads, runs, rounds;
} options;

static void usage(FILE *f)
{
    fputs("usage: tile_cycles [--mode forward|backward] [--precision exact|bf16] [--seq N]\n"
          "                   [--heads H] [--dim D] [--batch B] [--threads T] [--runs R]\n"
          "                   [--rounds K] [--window L,R]\n\n"
          "cycles per part of the fused kernels (a -DATTN_PROFILE=ON build), unmasked and\n"
          "causal side by side; defaults: forward, exact products, B=1, H=8, N=2048, D=64,\n"
          "1 thread, 10 calls per round, 3 rounds (the least disturbed round is shown);\n"
          "--precision bf16: products on the bfloat16 engine (attn_engine(), ATTN_ENGINE);\n"
          "--window L,R: the sliding window (L, R >= 0) instead of causal, and its cost\n"
          "beyond its visible fraction of the unmasked call\n",
          f);
}

static bool parse(int argc, char **argv, options *o)
{
    *o = (options){false, ATTN_PRECISION_EXACT, false, 0, 0, 1, 8, 2048, 64, 1, 10, 3};
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            exit(0);
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "tile_cycles: %s: needs a value\n", argv[i]);
            return false;
        }
        const char *v = argv[++i];
        if (!strcmp(argv[i - 1], "--mode")) {
            if (strcmp(v, "forward") && strcmp(v, "backward")) {
                fprintf(stderr, "tile_cycles: --mode: '%s' is not forward or backward\n", v);
                return false;
            }
            o->backward = !strcmp(v, "backward");
            continue;
        }
        if (!strcmp(argv[i - 1], "--window")) {
            char *end;
            o->wl = strtol(v, &end, 10);
            if (*end == ',') o->wr = strtol(end + 1, &end, 10);
            if (*end || o->wl < 0 || o->wr < 0 || !strchr(v, ',')) {
                fprintf(stderr, "tile_cycles: --window: '%s' is not L,R (two counts >= 0)\n", v);
                return false;
            }
            o->window = true;
            continue;
        }
        if (!strcmp(argv[i - 1], "--precision")) {
            if (strcmp(v, "exact") && strcmp(v, "bf16")) {
                fprintf(stderr, "tile_cycles: --precision: '%s' is not exact or bf16\n", v);
                return false;
            }
            o->precision = !strcmp(v, "bf16") ? ATTN_PRECISION_BF16 : ATTN_PRECISION_EXACT;
            continue;
        }
        long *dst = !strcmp(argv[i - 1], "--seq")       ? &o->seq
                    : !strcmp(argv[i - 1], "--heads")   ? &o->heads
                    : !strcmp(argv[i - 1], "--dim")     ? &o->dim
                    : !strcmp(argv[i - 1], "--batch")   ? &o->batch
                    : !strcmp(argv[i - 1], "--threads") ? &o->threads
                    : !strcmp(argv[i - 1], "--runs")    ? &o->runs
                    : !strcmp(argv[i - 1], "--rounds")  ? &o->rounds
                                                        : NULL;
        if (!dst) {
            fprintf(stderr, "tile_cycles: %s: unknown option (see --help)\n", argv[i - 1]);
            return false;
        }
        char *end;
        *dst = strtol(v, &end, 10);
        if (*end || *dst < 1 || *dst > (1L << 20)) {
            fprintf(stderr, "tile_cycles: %s: '%s' is not a count from 1 to 2^20\n", argv[i - 1], v);
            return false;
        }
    }
    return true;
}

typedef struct {
    void *workspace; /* one, reused by every call (as attn bench passes it) */
    size_t workspace_size;
    float *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv;
    attn_tensor tq, tk, tv, to, tl, tdo, tdq, tdk, tdv;
} buffers;

static float *random_floats(size_t n, unsigned *state)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; x && i < n; ++i) {
        *state = *state * 1664525u + 1013904223u;
        x[i] = (float)(*state >> 8) / 16777216.0f * 2.0f - 1.0f;
    }
    return x;
}

static bool make_buffers(const options *o, buffers *b)
{
    const size_t n = (size_t)(o->batch * o->heads * o->seq * o->dim);
    unsigned s = 1;
    b->q = random_floats(n, &s), b->k = random_floats(n, &s), b->v = random_floats(n, &s);
    b->dout = random_floats(n, &s);
    b->o = malloc(n * sizeof(float)), b->dq = malloc(n * sizeof(float));
    b->dk = malloc(n * sizeof(float)), b->dv = malloc(n * sizeof(float));
    b->lse = malloc((size_t)(o->batch * o->heads * o->seq) * sizeof(float));
    if (!b->q || !b->k || !b->v || !b->dout || !b->o || !b->dq || !b->dk || !b->dv || !b->lse)
        return false;
    const long B = o->batch, H = o->heads, N = o->seq, D = o->dim;
    b->tq = attn_tensor_4d(b->q, B, H, N, D), b->tk = attn_tensor_4d(b->k, B, H, N, D);
    b->tv = attn_tensor_4d(b->v, B, H, N, D), b->to = attn_tensor_4d(b->o, B, H, N, D);
    b->tl = attn_tensor_3d(b->lse, B, H, N), b->tdo = attn_tensor_4d(b->dout, B, H, N, D);
    b->tdq = attn_tensor_4d(b->dq, B, H, N, D), b->tdk = attn_tensor_4d(b->dk, B, H, N, D);
    b->tdv = attn_tensor_4d(b->dv, B, H, N, D);
    attn_sdpa_opts op = attn_sdpa_opts_default();
    op.num_threads = (int)o->threads;
    op.precision = o->precision;
    attn_error e;
    if (attn_sdpa_workspace_size(&b->tq, &b->tk, &b->tv, true, &op, &b->workspace_size, &e) !=
        ATTN_OK)
        return false;
    b->workspace = malloc(b->workspace_size ? b->workspace_size : 1);
    return b->workspace != NULL;
}

/* One call of the measured pass (the backward's forward first, untimed). */
static bool call(const options *o, buffers *b, bool masked, bool counted, sdpa_profile *out)
{
    attn_sdpa_opts op = attn_sdpa_opts_default();
    op.path = ATTN_PATH_FUSED;
    op.num_threads = (int)o->threads;
    op.precision = o->precision;
    op.causal = masked && !o->window ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
    if (masked && o->window) op.window = (attn_window){true, o->wl, o->wr};
    op.workspace = b->workspace;
    op.workspace_size = b->workspace_size;
    attn_error e;
    sdpa_profile discard[SDPA_PROF_PASSES];
    attn_status s = ATTN_OK;
    if (o->backward) s = attn_sdpa(&b->tq, &b->tk, &b->tv, &b->to, &b->tl, NULL, &op, &e);
    sdpa_prof_take(discard);
    if (s == ATTN_OK)
        s = o->backward ? attn_sdpa_backward(&b->tq, &b->tk, &b->tv, &b->to, &b->tl, &b->tdo,
                                             &b->tdq, &b->tdk, &b->tdv, &op, &e)
                        : attn_sdpa(&b->tq, &b->tk, &b->tv, &b->to, &b->tl, NULL, &op, &e);
    if (s != ATTN_OK) {
        fprintf(stderr, "tile_cycles: attn_sdpa%s: %s\n", o->backward ? "_backward" : "",
                e.message);
        return false;
    }
    sdpa_profile got[SDPA_PROF_PASSES];
    sdpa_prof_take(got);
    if (!counted) return true;
    const sdpa_profile *g = &got[o->backward ? SDPA_PROF_BACKWARD : SDPA_PROF_FORWARD];
    for (int k = 0; k < SDPA_PROF_KINDS; ++k) {
        for (int x = 0; x < SDPA_PROF_PARTS; ++x) out->cycles[k][x] += g->cycles[k][x];
        out->visible[k] += g->visible[k];
        out->computed[k] += g->computed[k];
    }
    out->calls += g->calls;
    return true;
}

/* Millions of cycles per call. */
static double per_call(const sdpa_profile *p, int kind, sdpa_prof_part part)
{
    return p->calls ? (double)p->cycles[kind][part] / 1e6 / (double)p->calls : 0.0;
}

typedef struct {
    const char *name;
    double value[2]; /* unmasked, causal */
} row;

/* The share of the masked call's (query, key) pairs that are visible:
 * 1/2 for causal (what the table compares against), or the window's. */
static double visible_fraction(const options *o)
{
    if (!o->window) return 0.5;
    double seen = 0;
    for (long i = 0; i < o->seq; ++i) {
        const long lo = i - o->wl < 0 ? 0 : i - o->wl, hi = i + o->wr >= o->seq ? o->seq - 1 : i + o->wr;
        seen += (double)(hi - lo + 1);
    }
    return seen / ((double)o->seq * (double)o->seq);
}

static void print_row(const row *r, double fraction)
{
    printf("| %s | %.2f | %.2f | %+.2f |\n", r->name, r->value[0], r->value[1],
           r->value[1] - r->value[0] * fraction);
}

static void report(const options *o, const sdpa_profile p[2])
{
    enum { W = SDPA_PROF_WHOLE, P = SDPA_PROF_PARTIAL };
    printf("attn tile cycles: %s, B=%ld H=%ld N=%ld D=%ld, %s kernels, products %s, %ld "
           "thread%s, least disturbed of %ld rounds of %ld calls; millions of cycles per call\n\n",
           o->backward ? "backward" : "forward", o->batch, o->heads, o->seq, o->dim, attn_isa(),
           o->precision == ATTN_PRECISION_BF16 ? attn_engine() : "exact", o->threads, o->threads > 1 ? "s" : "", o->rounds, o->runs);
    const double fraction = visible_fraction(o);
    if (o->window)
        printf("| part | unmasked | window %ld,%ld | window − %.4f × unmasked |\n|---|---|---|---|\n",
               o->wl, o->wr, fraction);
    else
        printf("| part | unmasked | causal | causal − unmasked ÷ 2 |\n|---|---|---|---|\n");
    row rows[16];
    int n = 0;
    double inside[2] = {0, 0};
    if (!o->backward) {
        static const struct {
            const char *name;
            int kind;
            sdpa_prof_part part;
        } parts[] = {
            {"tile planning", W, SDPA_PROF_PLAN},
            {"packing Kᵀ (and V)", W, SDPA_PROF_PACK},
            {"Q·Kᵀ, whole tiles", W, SDPA_PROF_SCORES},
            {"Q·Kᵀ, partial tiles", P, SDPA_PROF_SCORES},
            {"softmax, whole tiles", W, SDPA_PROF_SOFTMAX},
            {"softmax, partial tiles", P, SDPA_PROF_SOFTMAX},
            {"P·V, whole tiles", W, SDPA_PROF_PV},
            {"P·V, partial tiles", P, SDPA_PROF_PV},
            {"finishing rows (out, LSE)", W, SDPA_PROF_FINISH},
        };
        for (size_t i = 0; i < sizeof parts / sizeof *parts; ++i, ++n) {
            rows[n].name = parts[i].name;
            for (int c = 0; c < 2; ++c) {
                rows[n].value[c] = per_call(&p[c], parts[i].kind, parts[i].part);
                inside[c] += rows[n].value[c];
            }
        }
    }
    row rest = {o->backward ? "tasks" : "rest of the tasks", {0, 0}};
    row setup = {"threads' scratch set up", {0, 0}};
    row idle = {"threads waiting in the task loop", {0, 0}};
    row outside = {"outside the task loop", {0, 0}};
    row total = {"**the call**", {0, 0}};
    for (int c = 0; c < 2; ++c) {
        const double tasks = per_call(&p[c], W, SDPA_PROF_TASKS);
        const double loop = per_call(&p[c], W, SDPA_PROF_LOOP);
        total.value[c] = per_call(&p[c], W, SDPA_PROF_CALL);
        rest.value[c] = tasks - inside[c];
        setup.value[c] = per_call(&p[c], W, SDPA_PROF_SETUP);
        idle.value[c] = loop * (double)o->threads - tasks - setup.value[c];
        outside.value[c] = (total.value[c] - loop) * (double)o->threads;
        total.value[c] *= (double)o->threads;
    }
    rows[n++] = rest, rows[n++] = setup, rows[n++] = idle, rows[n++] = outside, rows[n++] = total;
    for (int i = 0; i < n; ++i) print_row(&rows[i], fraction);
    if (o->window)
        printf("\nCycles of all threads (the call: its wall time × %ld). window ÷ (visible "
               "fraction %.4f × unmasked): %.3f.\n",
               o->threads, fraction, total.value[1] / (fraction * total.value[0]));
    else
        printf("\nCycles of all threads (the call: its wall time × %ld). causal ÷ unmasked: %.3f.\n",
               o->threads, total.value[1] / total.value[0]);
    if (o->backward || !p[1].visible[P]) return;
    /* per visible (query, key) pair, partial against whole tiles */
    const double vw = (double)p[1].visible[W], vp = (double)p[1].visible[P];
    const double cw = (double)p[1].computed[W], cp = (double)p[1].computed[P];
    double rel[3];
    const sdpa_prof_part prods[3] = {SDPA_PROF_SCORES, SDPA_PROF_SOFTMAX, SDPA_PROF_PV};
    for (int i = 0; i < 3; ++i)
        rel[i] = ((double)p[1].cycles[P][prods[i]] / vp) / ((double)p[1].cycles[W][prods[i]] / vw);
    printf("%s, partial tiles: %.1f%% of the visible (query, key) pairs; per visible "
           "pair they take %.2f× (Q·Kᵀ), %.2f× (softmax) and %.2f× (P·V) the cycles of whole "
           "tiles; their Q·Kᵀ computes %.2f× the visible pairs (whole tiles %.2f×), so per "
           "computed pair it takes %.2f× whole tiles' cycles.\n",
           o->window ? "Window" : "Causal (diagonal)", 100.0 * vp / (vw + vp), rel[0], rel[1], rel[2], cp / vp, cw / vw,
           rel[0] * (vp / cp) / (vw / cw));
}

int main(int argc, char **argv)
{
    options o;
    buffers b;
    if (!parse(argc, argv, &o)) return 2;
    if (!make_buffers(&o, &b)) {
        fprintf(stderr, "tile_cycles: out of memory for N=%ld\n", o.seq);
        return 1;
    }
    sdpa_profile best[2];
    memset(best, 0, sizeof best);
    for (long r = 0; r < o.rounds; ++r) {
        for (int c = 0; c < 2; ++c) {
            sdpa_profile got;
            memset(&got, 0, sizeof got);
            if (!call(&o, &b, c == 1, false, NULL)) return 1;
            for (long i = 0; i < o.runs; ++i)
                if (!call(&o, &b, c == 1, true, &got)) return 1;
            if (r == 0 || got.cycles[SDPA_PROF_WHOLE][SDPA_PROF_CALL] <
                              best[c].cycles[SDPA_PROF_WHOLE][SDPA_PROF_CALL])
                best[c] = got;
        }
    }
    report(&o, best);
    return 0;
}
