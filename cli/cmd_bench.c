/* attn bench: parses the options; times SDPA forward / backward, MHA
 * forward and varlen on random data (--mode decode: bench_decode.c).
 * Per configuration: median wall time over --runs timed calls after
 * --warmup untimed ones, GFLOP/s, peak RSS, path/ISA and threads. */
#include "bench.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

extern const cli_command cmd_bench; /* also in cli.h's table of commands */

static const cli_option bench_options[] = {
    {"--mode", "MODE", "forward (default), backward, mha, mha-backward, decode or varlen"},
    {"--seq-lens", "L[,L...]", "varlen: the packed sequences' lengths (Nq = Nk = L each)"},
    {"--batch", "B", "batch size (default 1)"},
    {"--heads", "H", "query heads (default 8)"},
    {"--kv-heads", "H", "key/value heads (default: --heads)"},
    {"--seq", "N[,N...]", "query sequence length(s) (default 1024)"},
    {"--kv-seq", "N", "key/value sequence length (default: --seq)"},
    {"--head-dim", "D[,D...]", "feature size(s) per head (default 64)"},
    {"--dim", "D", "the same as --head-dim"},
    {"--block-size", "N", "decode: paged KV cache with blocks of N tokens (default contiguous)"},
    {"--cache-dtype", "T[:PATH][,...]", "decode: KV cache storages compared: f32, bf16, f16, int8, fp8, q4_0, each on --path or its own (bf16,bf16:fused; default: --dtype)"},
    {"--shared-prefix", "N", "decode: the batch shares its first N of --kv-seq tokens (forked, cascade) vs the same tokens unshared"},
    {"--stream-mib", "N", "decode: streaming-read buffer in MiB (default: 4x the LLC, >= 256, >= the K/V)"},
    {"--dtype", "T", "storage of Q, K, V, O (and the KV cache): f32 (default), bf16, f16"},
    {"--precision", "P", "forward, backward, mha, mha-backward: products exact (default) or bf16 (on the matrix engine)"},
    {"--bf16-dot", NULL, "the former name of --precision bf16"},
    {"--value-dim", "Dv", "value feature size (default: --head-dim)"},
    {"--causal", "[ALIGN]", "causal mask, top-left (bare) or bottom-right; FLOPs counted as half"},
    {"--threads", "N", "worker threads (default: ATTN_NUM_THREADS or all cores)"},
    {"--runs", "R", "timed runs per configuration, median reported (default 5, >= 1)"},
    {"--warmup", "W", "untimed runs first (default 1)"},
    {"--path", "PATH", "auto (default), fused or reference"},
    {"--window", "L,R", "sliding window (FlashAttention window_size, -1 = unbounded)"},
    {"--alibi", NULL, "ALiBi with the geometric slopes"},
    {"--softcap", "C", "logit soft-capping C*tanh(x/C)"},
    {"--sinks", NULL, "one attention sink logit per head (0.5)"},
    {"--dropout", "P", "dropout on the weights"},
    CLI_ROPE_OPTIONS, /* forward: opts.rope, Q and K rotated inside the timed call;
                       * decode: the new token's rotation timed beside each step */
    {"--fresh-workspace", NULL, "let every call allocate its own workspace (default: one, reused)"},
    {"--json", NULL, "one JSON object per configuration and line"},
    {0},
};

static const char bench_details[] =
    "FLOPs: forward 2·B·Hq·Nq·Nk·(D+Dv) (= 4·B·Hq·Nq·Nk·D; causal counts half),\n"
    "backward 2.5x forward. --mode backward times attn_sdpa_backward given the\n"
    "forward's out and lse (the forward runs once, untimed). --mode mha times\n"
    "attn_mha_forward for self-attention with E = heads·head-dim (no weights):\n"
    "FLOPs 8·B·L·E² (projections) + 4·B·L·S·E (attention; causal half).\n"
    "--mode mha-backward times attn_mha_backward (input and parameter\n"
    "gradients) on the same module: FLOPs 16·B·L·E² + 2.5x the attention's.\n"
    "peak_rss_bytes is the process's peak resident set so far (getrusage):\n"
    "run one configuration per process to attribute it. With --window the\n"
    "fraction of (query, key) pairs visible is printed; FLOPs stay dense.\n"
    "Forward, backward and mha calls share one workspace sized by\n"
    "attn_sdpa_workspace_size (attn_mha_workspace_size), as a training or serving\n"
    "loop would pass it; --fresh-workspace times the calls allocating (and\n"
    "faulting in) their own.\n"
    "--mode decode times attn_kvcache_attend: --seq new query tokens (default 1)\n"
    "per batch entry against a KV cache of --kv-seq tokens (default 32768;\n"
    "defaults H 32, Hkv 8, D 128), bottom-right causal, one cache per\n"
    "--cache-dtype holding the same tokens (keys N(0,1) with outlier channels\n"
    "16x larger). Per storage: bytes per token, tokens/s and its ratio to the\n"
    "first storage's, the GB/s of K/V read (int8 counts its row scales), the\n"
    "share of a streaming read's bandwidth over a separate buffer of at least\n"
    "4x the last-level cache (and 256 MiB, and the largest K/V; --stream-mib\n"
    "sets it), and the\n"
    "output's max and mean |difference| from the f32 cache's (a float32\n"
    "cache holding the same tokens is attended once, untimed, when f32 is not\n"
    "listed). The storages and the streaming read are timed in turn in every\n"
    "run; medians. \"cpu\" is the process's CPU time per call (one thread:\n"
    "the call's work without the time it waited for a core on a loaded\n"
    "machine; more threads add their waiting). --rope neox|gptj also times attn_rope_apply on the new\n"
    "token's queries and key (positions Nk..), as a decode step with rotary\n"
    "embeddings runs it, and prints it as a share of each storage's step.\n"
    "--shared-prefix N (decode, paged: --block-size, default 16 here): every\n"
    "entry's first N of its --kv-seq tokens are the same; the cache that holds\n"
    "them once (entry 0 forked to the others: attn_kvcache_attend's cascade)\n"
    "is timed in turn with one holding a copy per entry; tokens/s of both, their\n"
    "ratio and the outputs' max |difference|, per --cache-dtype.\n"
    "--mode varlen times attn_sdpa_varlen over packed sequences of --seq-lens\n"
    "(default 64,128,256,512,1024,2048) and, alternately, attn_sdpa on one\n"
    "sequence with the same number of (query, key) pairs, N = sqrt(sum L^2);\n"
    "prints both GFLOP/s and their ratio (forward; --causal: bottom-right).";


static const char *const mode_name[] = {"forward", "backward", "mha", "decode", "varlen",
                                        "mha-backward"};

static bool is_mha(bench_mode m)
{
    return m == MODE_MHA || m == MODE_MHA_BACKWARD;
}

/* Fraction of (query, key) pairs that causality and the window leave
 * visible (sdpa semantics: bottom-right aligned window, causal as given). */
static double visible_fraction(const bench_config *c)
{
    double seen = 0.0;
    for (long i = 0; i < c->seq; ++i) {
        const long diag = i + c->kv_seq - c->seq;
        long lo = 0, hi = c->kv_seq;
        if (c->causal == ATTN_CAUSAL_TOP_LEFT && i + 1 < hi) hi = i + 1;
        if (c->causal == ATTN_CAUSAL_BOTTOM_RIGHT && diag + 1 < hi) hi = diag + 1;
        /* sides up to INT64_MAX: compared without forming diag ± side */
        if (c->window.enabled && c->window.left >= 0 && c->window.left < diag - lo)
            lo = diag - c->window.left;
        if (c->window.enabled && c->window.right >= 0 && c->window.right < hi - diag - 1)
            hi = diag + c->window.right + 1;
        if (hi > lo) seen += (double)(hi - lo);
    }
    return seen / ((double)c->seq * (double)c->kv_seq);
}

double bench_now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* CPU time of the whole process (all threads): on a shared machine a
 * call's cost, where wall time also counts the others' turns. */
static double cpu_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bench_median(double *t, long n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

size_t bench_peak_rss_bytes(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (size_t)ru.ru_maxrss * 1024u; /* Linux reports KiB */
}

/* Deterministic values in [-1, 1): the data only has to be finite. */
static void fill(float *x, int64_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; ++i) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
    }
}

/* Everything one timed call needs. */
typedef struct {
    const bench_config *c;
    attn_tensor q, k, v, o, lse, dout, dq, dk, dv, vec;
    attn_sdpa_opts sopts;
    attn_mha *mha;
    attn_mha_opts mopts;
    attn_tensor x, y, dy, dx; /* mha: input, output; mha-backward: their gradients */
} bench_state;

static attn_status run_once(bench_state *s, attn_error *err)
{
    switch (s->c->mode) {
    case MODE_FORWARD:
        return attn_sdpa(&s->q, &s->k, &s->v, &s->o, &s->lse, NULL, &s->sopts, err);
    case MODE_BACKWARD:
        return attn_sdpa_backward(&s->q, &s->k, &s->v, &s->o, &s->lse, &s->dout, &s->dq, &s->dk,
                                  &s->dv, &s->sopts, err);
    case MODE_MHA_BACKWARD:
        return attn_mha_backward(s->mha, &s->x, NULL, NULL, &s->dy, &s->dx, NULL, NULL, &s->mopts,
                                 err);
    default:
        return attn_mha_forward(s->mha, &s->x, NULL, NULL, &s->y, &s->mopts, err);
    }
}

static double flops(const bench_config *c)
{
    const double causal = c->causal ? 0.5 : 1.0;
    const double attn = 2.0 * c->batch * c->heads * (double)c->seq * (double)c->kv_seq *
                        (double)(c->head_dim + c->value_dim) * causal;
    if (c->mode == MODE_FORWARD) return attn;
    if (c->mode == MODE_BACKWARD) return 2.5 * attn;
    const double e = (double)c->heads * (double)c->head_dim;
    if (c->mode == MODE_MHA_BACKWARD) return 16.0 * c->batch * (double)c->seq * e * e + 2.5 * attn;
    return 8.0 * c->batch * (double)c->seq * e * e + attn;
}

float *bench_alloc_filled(int64_t n, uint64_t seed)
{
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (p) fill(p, n, seed);
    return p;
}

/* True when every tensor of the configuration has a size that fits int64
 * and a plausible allocation (2^40 floats). */
static bool sizes_fit(const bench_config *c)
{
    const int64_t n = c->seq > c->kv_seq ? c->seq : c->kv_seq;
    const int64_t d = c->head_dim > c->value_dim ? c->head_dim : c->value_dim;
    int64_t total = c->batch;
    return !__builtin_mul_overflow(total, c->heads, &total) &&
           !__builtin_mul_overflow(total, n, &total) && !__builtin_mul_overflow(total, d, &total) &&
           total <= ((int64_t)1 << 40);
}

/* Runs one configuration and prints its line. */
static int bench_one(const bench_config *c)
{
    bench_state s;
    memset(&s, 0, sizeof s);
    s.c = c;
    const int64_t B = c->batch, H = c->heads, Hkv = c->kv_heads, Nq = c->seq, Nk = c->kv_seq;
    const int64_t D = c->head_dim, Dv = c->value_dim;
    float *bufs[10] = {0};
    void *rounded[4] = {0}; /* q, k, v, dout in --dtype */
    void *workspace = NULL;
    int rc = CLI_FAIL;
    attn_error err = {0};
    if (is_mha(c->mode)) {
        attn_mha_config cfg = {.embed_dim = H * D, .num_heads = H, .bias = true};
        if (attn_mha_create(&cfg, &s.mha, &err) != ATTN_OK) return cli_report("bench", &err);
        attn_mha_init(s.mha, 1);
        s.mopts = attn_mha_opts_default();
        s.mopts.causal = c->causal != ATTN_CAUSAL_NONE;
        s.mopts.num_threads = (int)c->threads;
        s.mopts.path = c->path;
        s.mopts.precision = c->bf16 ? ATTN_PRECISION_BF16 : ATTN_PRECISION_EXACT;
        for (int i = 0; i < (c->mode == MODE_MHA_BACKWARD ? 4 : 2); ++i)
            if (!(bufs[i] = bench_alloc_filled(B * Nq * H * D, (uint64_t)i + 1))) goto oom;
        s.x = attn_tensor_3d(bufs[0], B, Nq, H * D);
        s.y = attn_tensor_3d(bufs[1], B, Nq, H * D);
        s.dy = attn_tensor_3d(bufs[2], B, Nq, H * D);
        s.dx = attn_tensor_3d(bufs[3], B, Nq, H * D);
    } else {
        const int64_t n[9] = {B * H * Nq * D,  B * Hkv * Nk * D, B * Hkv * Nk * Dv,
                              B * H * Nq * Dv, B * H * Nq,       B * H * Nq * Dv,
                              B * H * Nq * D,  B * Hkv * Nk * D, B * Hkv * Nk * Dv};
        const int used = c->mode == MODE_BACKWARD ? 9 : 5;
        for (int i = 0; i < used; ++i)
            if (!(bufs[i] = bench_alloc_filled(n[i], (uint64_t)i + 1))) goto oom;
        s.q = attn_tensor_4d(bufs[0], B, H, Nq, D);
        s.k = attn_tensor_4d(bufs[1], B, Hkv, Nk, D);
        s.v = attn_tensor_4d(bufs[2], B, Hkv, Nk, Dv);
        /* outputs in --dtype: 16-bit elements fit the float buffers */
        s.o = attn_tensor_make(bufs[3], c->dtype, 4, (int64_t[]){B, H, Nq, Dv});
        if (!cli_round_input("bench", &s.q, c->dtype, &rounded[0]) ||
            !cli_round_input("bench", &s.k, c->dtype, &rounded[1]) ||
            !cli_round_input("bench", &s.v, c->dtype, &rounded[2]))
            goto done;
        s.lse = attn_tensor_3d(bufs[4], B, H, Nq);
        s.sopts = attn_sdpa_opts_default();
        s.sopts.causal = c->causal;
        s.sopts.num_threads = (int)c->threads;
        s.sopts.path = c->path;
        s.sopts.window = c->window;
        s.sopts.softcap = c->softcap;
        s.sopts.dropout_p = c->dropout;
        s.sopts.precision = c->bf16 ? ATTN_PRECISION_BF16 : ATTN_PRECISION_EXACT;
        if (c->rope.style != ATTN_ROPE_NONE) s.sopts.rope = &c->rope;
        if (c->alibi || c->sinks) {
            if (!(bufs[9] = malloc(sizeof(float) * (size_t)H))) goto oom;
            if (c->alibi) attn_alibi_slopes(H, bufs[9], NULL);
            else for (int64_t h = 0; h < H; ++h) bufs[9][h] = 0.5f;
            s.vec = attn_tensor_1d(bufs[9], H);
            if (c->alibi) s.sopts.alibi_slopes = &s.vec;
            else s.sopts.sinks = &s.vec;
        }
        if (c->mode == MODE_BACKWARD) {
            s.dout = attn_tensor_4d(bufs[5], B, H, Nq, Dv);
            s.dq = attn_tensor_make(bufs[6], c->dtype, 4, (int64_t[]){B, H, Nq, D});
            s.dk = attn_tensor_make(bufs[7], c->dtype, 4, (int64_t[]){B, Hkv, Nk, D});
            s.dv = attn_tensor_make(bufs[8], c->dtype, 4, (int64_t[]){B, Hkv, Nk, Dv});
            if (!cli_round_input("bench", &s.dout, c->dtype, &rounded[3])) goto done;
            /* out and lse of these inputs, as training would have them */
            if (attn_sdpa(&s.q, &s.k, &s.v, &s.o, &s.lse, NULL, &s.sopts, &err) != ATTN_OK) {
                rc = cli_report("bench", &err);
                goto done;
            }
        }
    }

    if (!c->fresh_workspace) {
        size_t bytes;
        const attn_status st =
            is_mha(c->mode)
                ? attn_mha_workspace_size(s.mha, &s.x, NULL, NULL, c->mode == MODE_MHA_BACKWARD,
                                          &s.mopts, &bytes, &err)
                : attn_sdpa_workspace_size(&s.q, &s.k, &s.v, c->mode == MODE_BACKWARD, &s.sopts,
                                           &bytes, &err);
        if (st != ATTN_OK) {
            rc = cli_report("bench", &err);
            goto done;
        }
        workspace = malloc(bytes ? bytes : 1);
        if (!workspace) goto oom;
        if (is_mha(c->mode)) {
            s.mopts.workspace = workspace;
            s.mopts.workspace_size = bytes;
        } else {
            s.sopts.workspace = workspace;
            s.sopts.workspace_size = bytes;
        }
    }
    double *times = malloc(sizeof(double) * (size_t)c->runs);
    double *cpu = times ? malloc((size_t)c->runs * sizeof *cpu) : NULL;
    if (!cpu) {
        free(times);
        goto oom;
    }
    for (long r = 0; r < c->warmup + c->runs; ++r) {
        const double t0 = bench_now_seconds(), u0 = cpu_seconds();
        if (run_once(&s, &err) != ATTN_OK) {
            free(times), free(cpu);
            rc = cli_report("bench", &err);
            goto done;
        }
        if (r >= c->warmup) times[r - c->warmup] = bench_now_seconds() - t0;
        if (r >= c->warmup) cpu[r - c->warmup] = cpu_seconds() - u0;
    }
    const double med = bench_median(times, c->runs), cpu_med = bench_median(cpu, c->runs);
    const double best = times[0]; /* sorted by bench_median */
    free(times), free(cpu);

    const char *isa = c->path == ATTN_PATH_REFERENCE ? "reference" : attn_isa();
    /* ATTN_ARCH=reference only redirects AUTO; FUSED then runs the best ISA. */
    if (c->path == ATTN_PATH_FUSED && !strcmp(isa, "reference")) isa = "best-available";
    const char *path = c->path == ATTN_PATH_REFERENCE ? "reference"
                       : c->path == ATTN_PATH_FUSED   ? "fused"
                       : strcmp(attn_isa(), "reference") ? "fused" : "reference";
    const int threads = c->threads > 0 ? (int)c->threads : attn_default_threads();
    const double gflops = flops(c) / med / 1e9;
    const size_t rss = bench_peak_rss_bytes();
    char variant[160] = "";
    if (c->window.enabled)
        snprintf(variant, sizeof variant, " window=%lld,%lld visible=%.4f", (long long)c->window.left,
                 (long long)c->window.right, visible_fraction(c));
    if (c->alibi) strncat(variant, " alibi", sizeof variant - strlen(variant) - 1);
    if (c->bf16)
        snprintf(variant + strlen(variant), sizeof variant - strlen(variant), " bf16 engine=%s",
                 attn_engine());
    if (c->sinks) strncat(variant, " sinks", sizeof variant - strlen(variant) - 1);
    if (c->rope.style != ATTN_ROPE_NONE)
        strncat(variant, c->rope.style == ATTN_ROPE_NEOX ? " rope=neox" : " rope=gptj",
                sizeof variant - strlen(variant) - 1);
    if (c->softcap > 0.0f)
        snprintf(variant + strlen(variant), sizeof variant - strlen(variant), " softcap=%g",
                 (double)c->softcap);
    if (c->dropout > 0.0f)
        snprintf(variant + strlen(variant), sizeof variant - strlen(variant), " dropout=%g",
                 (double)c->dropout);
    if (c->json) {
        printf("{\"mode\":\"%s\",\"batch\":%ld,\"heads\":%ld,\"kv_heads\":%ld,\"seq\":%ld,"
               "\"kv_seq\":%ld,\"head_dim\":%ld,\"value_dim\":%ld,\"causal\":%s,\"path\":\"%s\","
               "\"isa\":\"%s\",\"threads\":%d,\"runs\":%ld,\"ms\":%.4f,\"ms_min\":%.4f,\"cpu_ms\":%.4f,"
               "\"gflops\":%.3f,\"peak_rss_bytes\":%zu,\"variant\":\"%s\",\"dtype\":\"%s\","
               "\"precision\":\"%s\",\"engine\":\"%s\"" CLI_OPENMP_JSON "}\n",
               mode_name[c->mode], c->batch, c->heads, c->kv_heads, c->seq, c->kv_seq, c->head_dim,
               c->value_dim, c->causal ? "true" : "false", path, isa, threads, c->runs, med * 1e3,
               best * 1e3, cpu_med * 1e3, gflops, rss, variant[0] ? variant + 1 : "", attn_dtype_name(c->dtype),
               c->bf16 ? "bf16" : "exact", c->bf16 ? attn_engine() : "f32");
    } else {
        printf("%-8s B=%ld H=%ld Hkv=%ld N=%ld Nk=%ld D=%ld Dv=%ld%s %s  %-9s %-7s threads=%d  "
               "median %9.3f ms  %8.2f GFLOP/s  peak RSS %.1f MiB%s\n",
               mode_name[c->mode], c->batch, c->heads, c->kv_heads, c->seq, c->kv_seq,
               c->head_dim, c->value_dim, c->causal ? " causal" : "", attn_dtype_name(c->dtype),
               path, isa, threads, med * 1e3, gflops, (double)rss / (1024.0 * 1024.0), variant);
    }
    fflush(stdout);
    rc = CLI_OK;
    goto done;
oom:
    fprintf(stderr, "attn bench: out of memory\n");
    rc = CLI_FAIL;
done:
    for (int i = 0; i < 10; ++i) free(bufs[i]);
    for (int i = 0; i < 4; ++i) free(rounded[i]);
    free(workspace);
    attn_mha_free(s.mha);
    return rc;
}

/* ---------------------------------------------------------------- varlen */

/* attn_sdpa_varlen over packed sequences vs attn_sdpa on one sequence with
 * the same number of (query, key) pairs, timed alternately. */
static int bench_varlen(const bench_config *c, const long long *lens, int nl)
{
    const int64_t H = c->heads, Hkv = c->kv_heads, D = c->head_dim, Dv = c->value_dim;
    if (H % Hkv) return cli_usage_error(&cmd_bench, "--kv-heads: %ld does not divide --heads %ld",
                                        c->kv_heads, c->heads);
    int64_t total = 0, off[257];
    double pairs = 0.0;
    off[0] = 0;
    for (int i = 0; i < nl; ++i) {
        total += lens[i];
        off[i + 1] = total;
        pairs += (double)lens[i] * (double)lens[i];
    }
    const int64_t N = (int64_t)llround(sqrt(pairs));
    const int64_t rows = total > N ? total : N;
    float *q = bench_alloc_filled(rows * H * D, 1), *k = bench_alloc_filled(rows * Hkv * D, 2);
    float *v = bench_alloc_filled(rows * Hkv * Dv, 3), *o = bench_alloc_filled(rows * H * Dv, 4);
    double *tv = malloc(sizeof(double) * (size_t)c->runs), *ts = malloc(sizeof(double) * (size_t)c->runs);
    int rc = CLI_FAIL;
    if (!q || !k || !v || !o || !tv || !ts) {
        fprintf(stderr, "attn bench: out of memory\n");
        goto done;
    }
    attn_tensor Q = attn_tensor_3d(q, total, H, D), K = attn_tensor_3d(k, total, Hkv, D);
    attn_tensor V = attn_tensor_3d(v, total, Hkv, Dv), O = attn_tensor_3d(o, total, H, Dv);
    /* the single sequence: the same buffers as (1, H, N, D) views of (N, H, D) */
    attn_tensor Q1 = attn_tensor_transpose(attn_tensor_4d(q, 1, N, H, D), 1, 2);
    attn_tensor K1 = attn_tensor_transpose(attn_tensor_4d(k, 1, N, Hkv, D), 1, 2);
    attn_tensor V1 = attn_tensor_transpose(attn_tensor_4d(v, 1, N, Hkv, Dv), 1, 2);
    attn_tensor O1 = attn_tensor_transpose(attn_tensor_4d(o, 1, N, H, Dv), 1, 2);
    attn_varlen_seqs seqs = {nl, ATTN_OFFSETS_I64, off, off};
    attn_sdpa_opts opts = attn_sdpa_opts_default();
    opts.causal = c->causal; /* Nq = Nk: either alignment */
    opts.num_threads = (int)c->threads;
    opts.path = c->path;
    attn_error err = {0};
    for (long r = 0; r < c->warmup + c->runs; ++r) {
        double t0 = bench_now_seconds();
        if (attn_sdpa_varlen(&Q, &K, &V, &seqs, &O, NULL, &opts, &err) != ATTN_OK) {
            rc = cli_report("bench", &err);
            goto done;
        }
        const double a = bench_now_seconds() - t0;
        t0 = bench_now_seconds();
        if (attn_sdpa(&Q1, &K1, &V1, &O1, NULL, NULL, &opts, &err) != ATTN_OK) {
            rc = cli_report("bench", &err);
            goto done;
        }
        const double b = bench_now_seconds() - t0;
        if (r >= c->warmup) {
            tv[r - c->warmup] = a;
            ts[r - c->warmup] = b;
        }
    }
    const double mv = bench_median(tv, c->runs), ms = bench_median(ts, c->runs);
    /* dense-equivalent FLOPs, causal half, on both sides */
    const double half = c->causal ? 0.5 : 1.0;
    const double fv = 2.0 * H * pairs * (double)(D + Dv) * half / mv / 1e9;
    const double fs = 2.0 * H * (double)N * (double)N * (double)(D + Dv) * half / ms / 1e9;
    const int threads = c->threads > 0 ? (int)c->threads : attn_default_threads();
    if (c->json) {
        printf("{\"mode\":\"varlen\",\"sequences\":%d,\"total\":%lld,\"single_n\":%lld,"
               "\"heads\":%ld,\"kv_heads\":%ld,\"head_dim\":%ld,\"causal\":%s,\"isa\":\"%s\","
               "\"threads\":%d,\"runs\":%ld,\"varlen_ms\":%.4f,\"single_ms\":%.4f,"
               "\"varlen_gflops\":%.3f,\"single_gflops\":%.3f,\"ratio\":%.4f" CLI_OPENMP_JSON "}\n",
               nl, (long long)total, (long long)N, c->heads, c->kv_heads, c->head_dim,
               c->causal ? "true" : "false", attn_isa(), threads, c->runs, mv * 1e3, ms * 1e3,
               fv, fs, fv / fs);
    } else {
        printf("varlen   %d sequences, %lld tokens, H=%ld Hkv=%ld D=%ld%s  %-7s threads=%d  "
               "varlen %8.3f ms %7.2f GFLOP/s | one sequence N=%lld %8.3f ms %7.2f GFLOP/s | "
               "ratio %.2f\n",
               nl, (long long)total, c->heads, c->kv_heads, c->head_dim,
               c->causal ? " causal" : "", attn_isa(), threads, mv * 1e3, fv, (long long)N,
               ms * 1e3, fs, fv / fs);
    }
    fflush(stdout);
    rc = CLI_OK;
done:
    free(q), free(k), free(v), free(o), free(tv), free(ts);
    return rc;
}

/* "auto", "fused" or "reference" into *path; false for anything else. */
static bool parse_path(const char *name, attn_path *path)
{
    if (!strcmp(name, "auto")) *path = ATTN_PATH_AUTO;
    else if (!strcmp(name, "fused")) *path = ATTN_PATH_FUSED;
    else if (!strcmp(name, "reference")) *path = ATTN_PATH_REFERENCE;
    else return false;
    return true;
}

static int run_bench(int argc, char **argv)
{
    const cli_command *cmd = &cmd_bench;
    cli_args a;
    bool help;
    int rc = cli_parse(cmd, argc, argv, &a, &help);
    if (rc != CLI_OK || help) return rc;
    if (a.npositional > 0) return cli_usage_error(cmd, "unexpected argument '%s'", a.positional[0]);

    int threads = 0;
    bench_config c = {.mode = MODE_FORWARD, .batch = 1, .heads = 8, .kv_heads = 0, .kv_seq = 0,
                      .value_dim = 0, .threads = 0, .runs = 5, .warmup = 1,
                      .path = ATTN_PATH_AUTO};
    const char *mode = cli_get(&a, "--mode");
    if (mode) {
        if (!strcmp(mode, "forward")) c.mode = MODE_FORWARD;
        else if (!strcmp(mode, "backward")) c.mode = MODE_BACKWARD;
        else if (!strcmp(mode, "mha")) c.mode = MODE_MHA;
        else if (!strcmp(mode, "mha-backward")) c.mode = MODE_MHA_BACKWARD;
        else if (!strcmp(mode, "decode")) c.mode = MODE_DECODE;
        else if (!strcmp(mode, "varlen")) c.mode = MODE_VARLEN;
        else return cli_usage_error(cmd, "--mode: expected forward, backward, mha, mha-backward, decode or varlen, got '%s'", mode);
    }
    const char *path = cli_get(&a, "--path");
    if (path && !parse_path(path, &c.path))
        return cli_usage_error(cmd, "--path: expected auto, fused or reference, got '%s'", path);
    const long big = 1L << 30;
    if (!cli_get_int(&a, "--batch", 1, big, &c.batch) ||
        !cli_get_int(&a, "--heads", 1, big, &c.heads) ||
        !cli_get_int(&a, "--kv-heads", 1, big, &c.kv_heads) ||
        !cli_get_int(&a, "--kv-seq", 1, big, &c.kv_seq) ||
        !cli_get_int(&a, "--value-dim", 1, big, &c.value_dim) ||
        !cli_get_threads(&a, &threads) ||
        !cli_get_int(&a, "--runs", 1, 100000, &c.runs) ||
        !cli_get_int(&a, "--warmup", 0, 100000, &c.warmup) ||
        !cli_get_int(&a, "--block-size", 1, big, &c.block_size) || !cli_get_dtype(&a, &c.dtype))
        return CLI_USAGE;
    c.threads = threads;
    const attn_causal natural =
        c.mode == MODE_DECODE || c.mode == MODE_VARLEN ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_TOP_LEFT;
    if (!cli_get_causal(&a, natural, &c.causal)) return CLI_USAGE;
    if (c.mode == MODE_DECODE && c.causal == ATTN_CAUSAL_TOP_LEFT)
        return cli_usage_error(cmd, "--causal top-left: --mode decode times bottom-right causal "
                                    "attention (the cache's alignment)");
    if (is_mha(c.mode) && c.causal == ATTN_CAUSAL_BOTTOM_RIGHT)
        c.causal = ATTN_CAUSAL_TOP_LEFT; /* self-attention, L = S: the same mask */
    if (c.dtype != ATTN_F32 && (is_mha(c.mode) || c.mode == MODE_VARLEN))
        return cli_usage_error(cmd, "--dtype: --mode %s measures float32 only", mode_name[c.mode]);
    if (c.block_size && c.mode != MODE_DECODE)
        return cli_usage_error(cmd, "--block-size: only with --mode decode");
    if (c.mode == MODE_DECODE || c.mode == MODE_VARLEN) {
        static const char *const variants[] = {"--window", "--alibi", "--softcap", "--sinks",
                                               "--dropout"};
        for (size_t i = 0; i < sizeof variants / sizeof variants[0]; ++i)
            if (cli_get(&a, variants[i]))
                return cli_usage_error(cmd, "%s: not measured by --mode %s", variants[i],
                                       mode_name[c.mode]);
    }
    if ((cli_get(&a, "--cache-dtype") || cli_get(&a, "--stream-mib")) && c.mode != MODE_DECODE)
        return cli_usage_error(cmd, "--cache-dtype, --stream-mib: only with --mode decode");
    if (!cli_get_int(&a, "--stream-mib", 1, 1L << 20, &c.stream_mib)) return CLI_USAGE;
    if (!cli_get_int(&a, "--shared-prefix", 1, 1L << 40, &c.shared_prefix)) return CLI_USAGE;
    if (c.shared_prefix && c.mode != MODE_DECODE)
        return cli_usage_error(cmd, "--shared-prefix: only with --mode decode");
    if (c.shared_prefix && !c.block_size) c.block_size = 16; /* sharing needs the paged cache */
    if (c.mode == MODE_DECODE) {
        /* the storages to compare: names split at commas, kept in a static
         * copy of the argument */
        static char names[256];
        const char *text = cli_get(&a, "--cache-dtype");
        snprintf(names, sizeof names, "%s", text ? text : attn_dtype_name(c.dtype));
        if (!text) /* --dtype's name, spelled as --cache-dtype spells it */
            snprintf(names, sizeof names, "%s", c.dtype == ATTN_BF16 ? "bf16" : c.dtype == ATTN_F16 ? "f16" : "f32");
        for (char *tok = names, *next; tok; tok = next) { /* every field, empty ones too */
            next = strchr(tok, ',');
            if (next) *next++ = '\0';
            if (!*tok) return cli_usage_error(cmd, "--cache-dtype: empty field in '%s'", text);
            if (c.ncache == 8) return cli_usage_error(cmd, "--cache-dtype: at most 8 storages");
            char storage[32];
            const char *colon = strchr(tok, ':'); /* STORAGE:PATH: this storage on its own path */
            snprintf(storage, sizeof storage, "%.*s", colon ? (int)(colon - tok) : (int)strlen(tok), tok);
            if (!cli_parse_cache_dtype(storage, &c.cache_dtype[c.ncache], &c.cache_quant[c.ncache]))
                return cli_usage_error(cmd, "--cache-dtype: expected f32, bf16, f16, int8, fp8 or q4_0, got '%s'", storage);
            c.cache_path[c.ncache] = c.path;
            if (colon && !parse_path(colon + 1, &c.cache_path[c.ncache]))
                return cli_usage_error(cmd, "--cache-dtype: expected :auto, :fused or :reference after %s, got '%s'",
                                       storage, colon);
            c.cache_name[c.ncache++] = tok;
        }
        if (c.ncache == 0) return cli_usage_error(cmd, "--cache-dtype: no storage given");
    }
    if (c.mode == MODE_DECODE) { /* Llama-style defaults: H 32, Hkv 8, D 128, Nk 32768, Nq 1 */
        if (!cli_get(&a, "--heads")) c.heads = 32;
        if (!cli_get(&a, "--kv-heads")) c.kv_heads = cli_get(&a, "--heads") ? 0 : 8;
        if (!cli_get(&a, "--kv-seq")) c.kv_seq = 32768;
    }
    if (c.kv_heads == 0) c.kv_heads = c.heads;
    if (!cli_get_rope(&a, &c.rope)) return CLI_USAGE;
    if (c.rope.style != ATTN_ROPE_NONE && c.mode != MODE_FORWARD && c.mode != MODE_DECODE)
        return cli_usage_error(cmd, "--rope: with --mode forward or decode");
    if (c.mode == MODE_VARLEN) {
        long long lens[256] = {64, 128, 256, 512, 1024, 2048};
        int nl = 6;
        if (!cli_get_list(&a, "--seq-lens", 1, 1 << 30, lens, 256, &nl)) return CLI_USAGE;
        if (cli_get(&a, "--seq") || cli_get(&a, "--kv-seq"))
            return cli_usage_error(cmd, "--mode varlen: lengths come from --seq-lens, not --seq/--kv-seq");
        long long dim = 64;
        int nd = 1;
        if (!cli_get_list(&a, cli_get(&a, "--dim") ? "--dim" : "--head-dim", 1, 1 << 30, &dim, 1, &nd))
            return CLI_USAGE;
        c.head_dim = (long)dim;
        if (!c.value_dim) c.value_dim = c.head_dim;
        c.json = cli_flag(&a, "--json");
        return bench_varlen(&c, lens, nl);
    }
    if (c.heads % c.kv_heads != 0)
        return cli_usage_error(cmd, "--kv-heads: %ld does not divide --heads %ld", c.kv_heads, c.heads);
    c.json = cli_flag(&a, "--json");
    c.alibi = cli_flag(&a, "--alibi");
    c.sinks = cli_flag(&a, "--sinks");
    c.fresh_workspace = cli_flag(&a, "--fresh-workspace");
    const char *prec = cli_get(&a, "--precision");
    if (prec && strcmp(prec, "exact") != 0 && strcmp(prec, "bf16") != 0)
        return cli_usage_error(cmd, "--precision: expected exact or bf16, got '%s'", prec);
    c.bf16 = cli_flag(&a, "--bf16-dot") || (prec && !strcmp(prec, "bf16"));
    if (c.bf16 && (c.mode == MODE_DECODE || c.mode == MODE_VARLEN))
        return cli_usage_error(cmd, "--precision bf16: with --mode forward, backward, mha or mha-backward");
    if (c.alibi && c.sinks) return cli_usage_error(cmd, "--alibi and --sinks: time one variant at a time");
    if (!cli_get_window(&a, &c.window) || !cli_get_float(&a, "--softcap", &c.softcap) || !cli_get_float(&a, "--dropout", &c.dropout))
        return CLI_USAGE;
    if (c.softcap < 0.0f || !(c.dropout >= 0.0f && c.dropout < 1.0f))
        return cli_usage_error(cmd, "--softcap must be > 0 and --dropout in [0, 1)");
    if (is_mha(c.mode) && (c.window.enabled || c.alibi || c.sinks || c.softcap > 0.0f || c.dropout > 0.0f))
        return cli_usage_error(cmd, "--mode mha: the variant options are for forward and backward");
    long long seqs[32] = {c.mode == MODE_DECODE ? 1 : 1024},
              dims[32] = {c.mode == MODE_DECODE ? 128 : 64};
    int nseq = 1, ndim = 1;
    if (cli_get(&a, "--dim") && cli_get(&a, "--head-dim"))
        return cli_usage_error(cmd, "--dim and --head-dim: give one of them");
    if (!cli_get_list(&a, "--seq", 1, 1 << 30, seqs, 32, &nseq) ||
        !cli_get_list(&a, cli_get(&a, "--dim") ? "--dim" : "--head-dim", 1, 1 << 30, dims, 32, &ndim))
        return CLI_USAGE;
    if (is_mha(c.mode) && (c.kv_heads != c.heads || c.value_dim || c.kv_seq))
        return cli_usage_error(cmd, "--mode mha: self-attention only (no --kv-heads, --kv-seq, --value-dim)");

    rc = CLI_OK;
    for (int i = 0; i < nseq && rc == CLI_OK; ++i)
        for (int j = 0; j < ndim && rc == CLI_OK; ++j) {
            bench_config one = c;
            one.seq = (long)seqs[i];
            one.head_dim = (long)dims[j];
            if (!one.kv_seq) one.kv_seq = one.seq;
            if (!one.value_dim) one.value_dim = one.head_dim;
            if (one.shared_prefix >= one.kv_seq)
                return cli_usage_error(cmd, "--shared-prefix: %ld must be below --kv-seq %ld",
                                       one.shared_prefix, one.kv_seq);
            if (!sizes_fit(&one))
                return cli_usage_error(cmd, "--batch/--heads/--seq/--head-dim: %ld x %ld x %ld x %ld "
                                            "floats per tensor do not fit in memory",
                                       one.batch, one.heads, one.seq > one.kv_seq ? one.seq : one.kv_seq,
                                       one.head_dim > one.value_dim ? one.head_dim : one.value_dim);
            rc = one.mode != MODE_DECODE ? bench_one(&one)
                 : one.shared_prefix     ? bench_decode_shared(&one)
                                         : bench_decode(&one);
        }
    return rc;
}

const cli_command cmd_bench = {
    .name = "bench",
    .summary = "time attention on random data: median ms, GFLOP/s, peak memory, ISA",
    .usage = "[--mode forward|backward|mha|mha-backward|decode|varlen] [--seq N[,N...]] [--head-dim D] [options]",
    .details = bench_details,
    .options = bench_options,
    .run = run_bench,
};
