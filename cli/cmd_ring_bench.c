/* attn ring bench: times ring attention on random data under MPI. Every
 * rank fills its own shard; per rank: compute time, time inside MPI
 * (waiting on transfers), packing, peak memory; plus the measured transfer
 * rate between neighbours and the per-piece compute time, the inputs of
 * docs/SCALING.md's model. --single runs plain attn_sdpa over the whole
 * sequence on one rank: the baseline the ring is compared with; on P ranks
 * it runs P independent copies at once, which measures what P cores give
 * to P times the work: the ceiling of the ring's speedup. */
#include "cmd_ring.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static int run_bench(int argc, char **argv);

static const cli_option bench_options[] = {
    {"--seq", "N", "global sequence length (default 4096)"},
    {"--batch", "B", "batch size (default 1)"},
    {"--heads", "H", "query heads (default 8)"},
    {"--kv-heads", "H", "key/value heads (default: --heads)"},
    {"--head-dim", "D", "feature size per head, also of values (default 64)"},
    RING_SHARED_OPTIONS,
    {"--mode", "MODE", "forward, backward or both (default both)"},
    {"--runs", "R", "timed runs, median reported (default 3)"},
    {"--threads", "N", "threads per rank (default 1)"},
    {"--single", NULL, "plain attn_sdpa over the whole sequence on every rank (the baseline)"},
    {"--json", NULL, "one JSON object per mode and line (rank 0)"},
    {0},
};

static const char bench_details[] =
    "Run as mpirun -np P attn ring bench ... Each rank reports the median over\n"
    "--runs of its time per call: compute (attn_sdpa calls, merges, sums), of which\n"
    "merge (merging partial outputs, adding partial gradients), comm (inside MPI:\n"
    "posting, testing, waiting), pack (message copies), and its peak resident\n"
    "memory (VmHWM) at the end. 'step' is the slowest rank's total.\n"
    "ns/pair: the attn_sdpa time (compute - merge) per (query, key) pair scored\n"
    "(per head; the same measure for the single process), the kernels' efficiency\n"
    "on the rank's calls; Mpairs: the pairs, the rank's share of the work.\n"
    "transfer: a ring exchange of one piece-sized message, timed alone.\n"
    "per-piece compute: median compute / pieces computed with, per rank.\n"
    "cpu: CPU seconds of all ranks (getrusage), which a busy machine does not\n"
    "inflate the way it inflates wall time; the load average is printed too.\n"
    "--mode backward runs one untimed forward for out and lse first.\n"
    "--single on P ranks runs P independent copies at once (GFLOP/s per copy):\n"
    "P x the one-rank step over their step is the most P ranks can gain here.";

const cli_command cmd_ring_bench = {
    "ring bench", "time ring attention (compute, communication, memory per rank)",
    "--seq N [--causal [ALIGN]] [--mode forward|backward|both] [--single] [--json]",
    bench_details, bench_options, NULL, run_bench,
};

static void fill(float *x, int64_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; ++i) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 11) * 0x1p-53 * 2.0 - 1.0);
    }
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Peak resident set (VmHWM) in bytes, 0 if unknown. */
static double peak_rss(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    double kib = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kib = atof(line + 6);
    fclose(f);
    return kib * 1024.0;
}

/* Time of one ring exchange of `floats` floats to the right neighbour
 * (median of 20), in seconds; 0 on one rank. */
static double transfer_time(MPI_Comm comm, int64_t floats)
{
    int P, me;
    MPI_Comm_size(comm, &P);
    MPI_Comm_rank(comm, &me);
    if (P < 2 || floats <= 0) return 0;
    float *a = calloc((size_t)floats, 4), *b = calloc((size_t)floats, 4);
    double t[20];
    for (int i = 0; i < 22; ++i) {
        MPI_Barrier(comm);
        const double t0 = MPI_Wtime();
        MPI_Sendrecv(a, (int)floats, MPI_FLOAT, (me + 1) % P, 9, b, (int)floats, MPI_FLOAT,
                     (me + P - 1) % P, 9, comm, MPI_STATUS_IGNORE);
        if (i >= 2) t[i - 2] = MPI_Wtime() - t0;
    }
    free(a), free(b);
    return median(t, 20);
}

/* CPU seconds this process used so far (all its threads), user + system. */
static double cpu_seconds(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
           (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

enum { F_TOTAL, F_COMPUTE, F_MERGE, F_COMM, F_PACK, F_PIECE, F_CPU, F_NS_PAIR, F_PAIRS, F_PEAK, F_N };

/* The 1-minute load average: benchmarks on a shared machine say how busy it was. */
static double load_average(void)
{
    FILE *f = fopen("/proc/loadavg", "r");
    double l = -1;
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1;
        fclose(f);
    }
    return l;
}

/* The sizes and modes of one benchmark. */
typedef struct {
    long N, B, H, Hkv, D, runs;
    bool fwd, bwd, single, json;
    attn_ring_opts ro;
} bench_args;

static int bench_arguments(const cli_args *a, void *ctx)
{
    bench_args *b = ctx;
    const cli_command *cmd = a->cmd;
    if (!cli_get_int(a, "--seq", 1, 1L << 31, &b->N) || !cli_get_int(a, "--batch", 1, 1 << 16, &b->B) ||
        !cli_get_int(a, "--heads", 1, 1 << 16, &b->H) || !cli_get_int(a, "--kv-heads", 1, 1 << 16, &b->Hkv) ||
        !cli_get_int(a, "--head-dim", 1, 1 << 16, &b->D) || !cli_get_int(a, "--runs", 1, 1000, &b->runs))
        return CLI_USAGE;
    int rc = cli_ring_options(a, &b->ro);
    if (rc) return rc;
    if (b->Hkv < 0) b->Hkv = b->H;
    if (b->H % b->Hkv)
        return cli_usage_error(cmd, "--kv-heads: %ld does not divide --heads %ld", b->Hkv, b->H);
    const char *mode = cli_get(a, "--mode");
    if (mode && !strcmp(mode, "forward")) b->bwd = false;
    else if (mode && !strcmp(mode, "backward")) b->fwd = false;
    else if (mode && strcmp(mode, "both"))
        return cli_usage_error(cmd, "--mode: expected forward, backward or both, got '%s'", mode);
    b->single = cli_flag(a, "--single"), b->json = cli_flag(a, "--json");
    return CLI_OK;
}

static int run_bench(int argc, char **argv)
{
    const cli_command *cmd = &cmd_ring_bench;
    cli_args a;
    bench_args b = {.N = 4096, .B = 1, .H = 8, .Hkv = -1, .D = 64, .runs = 3, .fwd = true,
                    .bwd = true, .ro = attn_ring_opts_default()};
    b.ro.num_threads = 1;
    /* every rank runs the same collective calls: all but --threads and --json agree */
    static const char *const agreed[] = {"--seq", "--batch", "--heads", "--kv-heads", "--head-dim",
                                         "--causal", "--mode", "--runs", "--block-keys",
                                         "--block-queries", "--single", NULL};
    cli_ring_run run;
    bool stop;
    int rc = cli_ring_begin(cmd, argc, argv, &a, bench_arguments, &b, agreed, &run, &stop);
    if (stop) return rc;
    const long N = b.N, B = b.B, H = b.H, Hkv = b.Hkv, D = b.D, runs = b.runs,
               threads = b.ro.num_threads;
    const bool fwd = b.fwd, bwd = b.bwd, single = b.single, json = b.json, causal = b.ro.causal;
    MPI_Comm comm = run.comm;
    const int P = run.ranks, me = run.me;
    float *q = NULL, *k = NULL, *v = NULL, *o = NULL, *l = NULL, *dq = NULL, *dk = NULL, *dv = NULL,
          *dout = NULL;
    attn_ring_span sp;
    attn_ring_layout(N, P, me, causal, &sp, NULL);
    const int64_t n = single ? N : sp.length[0] + sp.length[1];
    q = cli_alloc_floats("ring bench", 4, B, H, n, D);
    k = cli_alloc_floats("ring bench", 4, B, Hkv, n, D);
    v = cli_alloc_floats("ring bench", 4, B, Hkv, n, D);
    o = cli_alloc_floats("ring bench", 4, B, H, n, D);
    l = cli_alloc_floats("ring bench", 3, B, H, n, 1);
    if (bwd) {
        dout = cli_alloc_floats("ring bench", 4, B, H, n, D);
        dq = cli_alloc_floats("ring bench", 4, B, H, n, D);
        dk = cli_alloc_floats("ring bench", 4, B, Hkv, n, D);
        dv = cli_alloc_floats("ring bench", 4, B, Hkv, n, D);
    }
    int ok = q && k && v && o && l && (!bwd || (dout && dq && dk && dv)), all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
    if (!all_ok) {
        rc = CLI_FAIL;
        goto done;
    }
    fill(q, B * H * n * D, 1 + 4 * (uint64_t)me);
    fill(k, B * Hkv * n * D, 2 + 4 * (uint64_t)me);
    fill(v, B * Hkv * n * D, 3 + 4 * (uint64_t)me);
    if (bwd) fill(dout, B * H * n * D, 4 + 4 * (uint64_t)me);
    attn_tensor Q = attn_tensor_4d(q, B, H, n, D), K = attn_tensor_4d(k, B, Hkv, n, D),
                V = attn_tensor_4d(v, B, Hkv, n, D), O = attn_tensor_4d(o, B, H, n, D),
                L = attn_tensor_3d(l, B, H, n), dO = attn_tensor_4d(dout, B, H, n, D),
                dQ = attn_tensor_4d(dq, B, H, n, D), dK = attn_tensor_4d(dk, B, Hkv, n, D),
                dV = attn_tensor_4d(dv, B, Hkv, n, D);
    attn_ring_timing tm;
    attn_ring_opts ro = b.ro;
    ro.timing = &tm;
    attn_sdpa_opts so = attn_sdpa_opts_default();
    so.causal = causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
    so.num_threads = (int)threads;
    so.path = ATTN_PATH_FUSED;
    /* transfer rate for one piece (the model's input), before any compute */
    const int64_t piece = ro.block_keys ? ro.block_keys : 2048;
    const int64_t piece_floats = B * Hkv * piece * 2 * D;
    const double t_xfer = single ? 0 : transfer_time(comm, piece_floats);
    const double flops_fwd = 4.0 * (double)B * H * (double)N * (double)N * D * (causal ? 0.5 : 1.0);
    const double single_pairs = (double)B * H * (causal ? (double)N * (N + 1) / 2 : (double)N * N);
    for (int pass = 0; pass < 2; ++pass) {
        const bool backward = pass == 1;
        if ((backward && !bwd) || (!backward && !fwd)) continue;
        attn_error err = {0};
        attn_status s = ATTN_OK;
        if (backward) /* out and lse for the backward, untimed */
            s = single ? attn_sdpa(&Q, &K, &V, &O, &L, NULL, &so, &err)
                       : attn_ring_sdpa(comm, &Q, &K, &V, &O, &L, &ro, &err);
        double f[F_N][1000];
        for (int r = 0; s == ATTN_OK && r < runs; ++r) {
            memset(&tm, 0, sizeof tm);
            MPI_Barrier(comm);
            const double t0 = MPI_Wtime(), c0 = cpu_seconds();
            if (single)
                s = backward ? attn_sdpa_backward(&Q, &K, &V, &O, &L, &dO, &dQ, &dK, &dV, &so, &err)
                             : attn_sdpa(&Q, &K, &V, &O, &L, NULL, &so, &err);
            else
                s = backward ? attn_ring_sdpa_backward(comm, &Q, &K, &V, &O, &L, &dO, &dQ, &dK, &dV,
                                                       &ro, &err)
                             : attn_ring_sdpa(comm, &Q, &K, &V, &O, &L, &ro, &err);
            const double wall = MPI_Wtime() - t0;
            f[F_CPU][r] = cpu_seconds() - c0;
            f[F_TOTAL][r] = single ? wall : tm.total_s;
            f[F_COMPUTE][r] = single ? wall : tm.compute_s;
            f[F_MERGE][r] = tm.merge_s;
            f[F_PAIRS][r] = single ? single_pairs : (double)tm.pairs;
            f[F_NS_PAIR][r] = f[F_PAIRS][r] > 0 ? 1e9 * (f[F_COMPUTE][r] - tm.merge_s) / f[F_PAIRS][r] : 0;
            f[F_COMM][r] = tm.comm_s;
            f[F_PACK][r] = tm.pack_s;
            f[F_PIECE][r] = tm.blocks ? tm.compute_s / (double)tm.blocks : 0;
        }
        if (s != ATTN_OK) {
            if (me != 0) fprintf(stderr, "attn ring bench (rank %d): ", me);
            rc = cli_report("ring bench", &err);
            goto done;
        }
        double mine[F_N];
        for (int x = 0; x < F_PEAK; ++x) mine[x] = median(f[x], (int)runs);
        mine[F_PEAK] = peak_rss();
        double *all = me == 0 ? malloc(sizeof(double) * F_N * (size_t)P) : NULL;
        MPI_Gather(mine, F_N, MPI_DOUBLE, all, F_N, MPI_DOUBLE, 0, comm);
        if (me == 0) {
            double step = 0, comm_max = 0, peak_max = 0, piece_med = 0, cpu_sum = 0;
            for (int r = 0; r < P; ++r) {
                cpu_sum += all[r * F_N + F_CPU];
                step = fmax(step, all[r * F_N + F_TOTAL]);
                comm_max = fmax(comm_max, all[r * F_N + F_COMM]);
                peak_max = fmax(peak_max, all[r * F_N + F_PEAK]);
                piece_med += all[r * F_N + F_PIECE] / P;
            }
            const double flops = flops_fwd * (backward ? 2.5 : 1.0);
            const char *mname = backward ? "backward" : "forward";
            if (json) {
                printf("{\"mode\":\"%s\",\"ranks\":%d,\"seq\":%ld,\"batch\":%ld,\"heads\":%ld,"
                       "\"kv_heads\":%ld,\"head_dim\":%ld,\"causal\":%s,\"single\":%s,\"threads\":%ld,"
                       "\"step_s\":%.6f,\"gflops\":%.2f,\"comm_max_s\":%.6f,\"comm_fraction\":%.5f,"
                       "\"piece_compute_s\":%.6f,\"piece_bytes\":%lld,\"transfer_s\":%.6f,"
                       "\"transfer_gbps\":%.3f,\"peak_rss_max_bytes\":%.0f,\"cpu_sum_s\":%.6f,"
                       "\"load_avg\":%.2f,\"ranks_detail\":[",
                       mname, P, N, B, H, Hkv, D, causal ? "true" : "false",
                       single ? "true" : "false", threads, step, flops / step * 1e-9, comm_max,
                       comm_max / step, piece_med, (long long)(piece_floats * 4), t_xfer,
                       t_xfer > 0 ? 8.0 * 4.0 * (double)piece_floats / t_xfer * 1e-9 : 0.0,
                       peak_max, cpu_sum, load_average());
                for (int r = 0; r < P; ++r)
                    printf("%s{\"total_s\":%.6f,\"compute_s\":%.6f,\"merge_s\":%.6f,\"comm_s\":%.6f,"
                           "\"pack_s\":%.6f,\"cpu_s\":%.6f,\"pairs\":%.0f,\"ns_per_pair\":%.4f,"
                           "\"peak_rss_bytes\":%.0f}",
                           r ? "," : "", all[r * F_N + F_TOTAL], all[r * F_N + F_COMPUTE],
                           all[r * F_N + F_MERGE], all[r * F_N + F_COMM], all[r * F_N + F_PACK],
                           all[r * F_N + F_CPU], all[r * F_N + F_PAIRS], all[r * F_N + F_NS_PAIR],
                           all[r * F_N + F_PEAK]);
                printf("]}\n");
            } else {
                printf("%s%s  ranks %d  N %ld  B %ld  H %ld/%ld  D %ld  %s  threads/rank %ld  "
                       "(median of %ld)\n",
                       mname, single ? " (single attn_sdpa)" : "", P, N, B, H, Hkv, D,
                       causal ? (single ? "causal" : "causal (zigzag)") : "full", threads, runs);
                printf("  rank   total s  compute s  merge s   comm s   pack s    cpu s  ns/pair"
                       "   Mpairs   peak MiB\n");
                for (int r = 0; r < P; ++r)
                    printf("  %4d  %8.3f  %9.3f  %7.4f  %7.4f  %7.4f  %7.3f  %7.3f  %7.1f  %9.1f\n", r,
                           all[r * F_N + F_TOTAL], all[r * F_N + F_COMPUTE], all[r * F_N + F_MERGE],
                           all[r * F_N + F_COMM], all[r * F_N + F_PACK], all[r * F_N + F_CPU],
                           all[r * F_N + F_NS_PAIR], all[r * F_N + F_PAIRS] * 1e-6,
                           all[r * F_N + F_PEAK] / 1048576.0);
                printf("  step %.3f s  %.1f GFLOP/s  comm wait %.2f%% of the step  cpu %.3f s "
                       "(all ranks)  load average %.2f\n",
                       step, flops / step * 1e-9, 100.0 * comm_max / step, cpu_sum, load_average());
                if (!single)
                    printf("  per-piece compute %.4f s  transfer of a %.2f MiB piece %.5f s "
                           "(%.2f Gb/s)\n",
                           piece_med, 4.0 * (double)piece_floats / 1048576.0, t_xfer,
                           t_xfer > 0 ? 32.0 * (double)piece_floats / t_xfer * 1e-9 : 0.0);
            }
            fflush(stdout);
            free(all);
        }
    }
done:
    free(q), free(k), free(v), free(o), free(l), free(dq), free(dk), free(dv), free(dout);
    cli_ring_end(&run);
    return rc;
}
