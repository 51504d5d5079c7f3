/* attn bench --mode decode: attn_kvcache_attend over KV caches of several
 * storages holding the same tokens, beside a streaming read of memory that
 * sizes what the machine can read; per storage its bytes per token,
 * tokens/s, share of the streaming bandwidth and error against float32;
 * with --rope, the rotation of the new token as a share of a step. */
#include "bench.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* One pass of a streaming read over n floats (16 independent lanes so the
 * compiler vectorises it); returns the sum so the loads cannot be dropped. */
static float stream_read(const float *x, int64_t n, int threads)
{
    float total = 0.0f;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) reduction(+ : total) schedule(static)
#endif
    for (int64_t blk = 0; blk < n / 4096; ++blk) {
        float acc[16] = {0};
        const float *p = x + blk * 4096;
        for (int64_t i = 0; i < 4096; i += 16)
            for (int l = 0; l < 16; ++l) acc[l] += p[i + l];
        float s = 0.0f;
        for (int l = 0; l < 16; ++l) s += acc[l];
        total += s;
    }
    (void)threads;
    return total;
}

/* Bytes of the last-level cache (the largest cache sysfs lists for cpu0,
 * else glibc's sysconf), 0 when unknown. */
static int64_t llc_bytes(void)
{
    int64_t best = 0;
    int best_level = 0;
    for (int i = 0; i < 16; ++i) {
        char path[96], text[32];
        int level = 0;
        long long size = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f) break;
        if (fscanf(f, "%d", &level) != 1) level = 0;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (!(f = fopen(path, "r"))) continue;
        if (fscanf(f, "%31s", text) == 1) {
            char *unit;
            size = strtoll(text, &unit, 10);
            size <<= *unit == 'K' ? 10 : *unit == 'M' ? 20 : 0;
        }
        fclose(f);
        if (level > best_level || (level == best_level && size > best)) {
            best_level = level;
            best = size;
        }
    }
#ifdef _SC_LEVEL3_CACHE_SIZE
    if (best == 0) {
        const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
        best = l3 > 0 ? l3 : l2 > 0 ? l2 : 0;
    }
#endif
    return best;
}

/* Keys as LLM keys are: N(0, 1) with a few outlier channels 16x larger
 * (the channels quantization has to cover); values and queries N(0, 1). */
static void fill_keys(float *x, int64_t rows, int64_t D, attn_rng *r, bool outliers)
{
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t d = 0; d < D; ++d) {
            const bool big = outliers && (d % 32 == 7 || d == 1);
            x[i * D + d] = (float)(attn_rng_normal(r) * (big ? 16.0 : 1.0));
        }
}

/* CPU seconds the process has used: on a loaded machine, with one thread,
 * the work of a call without the time it waited for a core. */
static double cpu_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One cache storage of a decode benchmark. */
typedef struct {
    attn_dtype dtype;
    attn_kv_quant quant;
    const char *name;
    attn_kvcache *cache;
    float *out;     /* its last output, float32 */
    double *times;  /* (runs) */
    double *cpu;    /* (runs) the process's CPU time per call */
    double bytes;   /* K/V bytes a step reads */
} decode_format;

/* attn_kvcache_attend on caches of each --cache-dtype holding the same
 * tokens and a streaming read of memory, timed in turn in every run;
 * prints per storage its bytes, tokens/s, the share of the streaming read's
 * bandwidth, and its output's error against the float32 cache's. */
int bench_decode(const bench_config *c)
{
    const int64_t B = c->batch, H = c->heads, Hkv = c->kv_heads, Nq = c->seq, Nk = c->kv_seq;
    const int64_t D = c->head_dim, Dv = c->value_dim;
    const int threads = c->threads > 0 ? (int)c->threads : attn_default_threads();
    const int nf = c->ncache;
    /* the float32 cache the errors are measured against: one of the timed
     * storages, or an extra cache (f[nf]) attended once, untimed */
    int nref = -1;
    for (int i = 0; i < nf; ++i)
        if (c->cache_quant[i] == ATTN_KV_FLOAT && c->cache_dtype[i] == ATTN_F32 && nref < 0) nref = i;
    const int ncaches = nref < 0 ? nf + 1 : nf;
    decode_format f[9];
    memset(f, 0, sizeof f);
    attn_error err = {0};
    int rc = CLI_FAIL;
    float *kbuf = NULL, *vbuf = NULL, *q = NULL, *lse = NULL, *stream = NULL;
    float *rq = NULL, *rk = NULL; /* --rope: the new token's queries and key, rotated in turn */
    int64_t *rpos = NULL;
    double *t_rope = NULL;
    void *q16 = NULL;
    double *t_mem = malloc(sizeof(double) * (size_t)c->runs);
    const int64_t chunk = Nk < 1024 ? Nk : 1024;
    kbuf = malloc(sizeof(float) * (size_t)(B * Hkv * chunk * D));
    vbuf = malloc(sizeof(float) * (size_t)(B * Hkv * chunk * Dv));
    q = malloc(sizeof(float) * (size_t)(B * H * Nq * D));
    lse = malloc(sizeof(float) * (size_t)(B * H * Nq));
    bool ok = t_mem && kbuf && vbuf && q && lse;
    if (c->rope.style != ATTN_ROPE_NONE) {
        rq = bench_alloc_filled(B * H * Nq * D, 21);
        rk = bench_alloc_filled(B * Hkv * Nq * D, 22);
        rpos = malloc(sizeof(int64_t) * (size_t)B);
        t_rope = malloc(sizeof(double) * (size_t)c->runs);
        ok = ok && rq && rk && rpos && t_rope;
        for (int64_t b = 0; ok && b < B; ++b) rpos[b] = Nk - Nq; /* the new tokens' positions */
    }
    double max_bytes = 0.0;
    for (int i = 0; i < ncaches && ok; ++i) {
        f[i].dtype = i < nf ? c->cache_dtype[i] : ATTN_F32;
        f[i].quant = i < nf ? c->cache_quant[i] : ATTN_KV_FLOAT;
        f[i].name = i < nf ? c->cache_name[i] : "f32";
        attn_kvcache_config cfg = {.batch = B, .kv_heads = Hkv, .capacity = Nk, .head_dim = D,
                                   .value_dim = Dv, .block_size = c->block_size,
                                   .dtype = f[i].dtype, .quant = f[i].quant};
        if (attn_kvcache_create(&cfg, &f[i].cache, &err) != ATTN_OK) {
            rc = cli_report("bench", &err);
            goto done;
        }
        /* q4_0: 18 bytes per 32 values (a float16 scale and 16 bytes of nibbles) */
        const double elem = f[i].quant == ATTN_KV_Q4_0 ? 18.0 / 32.0
                            : f[i].quant                ? 1.0
                                                        : (double)attn_dtype_size(f[i].dtype);
        const double scales = f[i].quant == ATTN_KV_INT8 ? 8.0 : 0.0; /* a float per K and V row */
        f[i].bytes = (double)B * (double)Hkv * (double)Nk * (elem * (double)(D + Dv) + scales);
        if (f[i].bytes > max_bytes && i < nf) max_bytes = f[i].bytes;
        f[i].out = malloc(sizeof(float) * (size_t)(B * H * Nq * Dv));
        f[i].times = malloc(sizeof(double) * (size_t)c->runs);
        f[i].cpu = malloc(sizeof(double) * (size_t)c->runs);
        ok = f[i].out && f[i].times && f[i].cpu;
    }
    /* the streaming buffer: past the last-level cache (4x) and at least
     * as large as the biggest K/V, so it measures memory */
    const int64_t llc = llc_bytes();
    double stream_bytes = max_bytes;
    if (stream_bytes < 4.0 * (double)llc) stream_bytes = 4.0 * (double)llc;
    if (stream_bytes < (double)(256 << 20)) stream_bytes = (double)(256 << 20);
    if (c->stream_mib) stream_bytes = (double)c->stream_mib * 1048576.0; /* the caller's choice */
    int64_t sn = (int64_t)(stream_bytes / 4.0);
    sn -= sn % 4096;
    if (ok) ok = (stream = bench_alloc_filled(sn, 16)) != NULL;
    if (!ok) {
        fprintf(stderr, "attn bench: out of memory\n");
        goto done;
    }
    attn_rng rng;
    attn_rng_seed(&rng, 11);
    for (int64_t done_n = 0; done_n < Nk; done_n += chunk) {
        const int64_t n = Nk - done_n < chunk ? Nk - done_n : chunk;
        fill_keys(kbuf, B * Hkv * chunk, D, &rng, true);
        fill_keys(vbuf, B * Hkv * chunk, Dv, &rng, false);
        attn_tensor k = attn_tensor_4d(kbuf, B, Hkv, n, D), v = attn_tensor_4d(vbuf, B, Hkv, n, Dv);
        k.stride[1] = chunk * D;
        k.stride[0] = Hkv * chunk * D;
        v.stride[1] = chunk * Dv;
        v.stride[0] = Hkv * chunk * Dv;
        for (int i = 0; i < ncaches; ++i)
            if (attn_kvcache_append(f[i].cache, &k, &v, NULL, &err) != ATTN_OK) {
                rc = cli_report("bench", &err);
                goto done;
            }
    }
    fill_keys(q, B * H * Nq, D, &rng, false);
    attn_tensor Q = attn_tensor_4d(q, B, H, Nq, D);
    attn_tensor L = attn_tensor_3d(lse, B, H, Nq);
    if (!cli_round_input("bench", &Q, c->dtype, &q16)) goto done;
    attn_sdpa_opts opts = attn_sdpa_opts_default();
    opts.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    opts.num_threads = threads;
    volatile float sink = 0.0f;
    for (long r = 0; r < c->warmup + c->runs; ++r) {
        for (int i = 0; i < nf; ++i) { /* in turn: the machine's load falls on all alike */
            attn_tensor O = attn_tensor_4d(f[i].out, B, H, Nq, Dv);
            opts.path = c->cache_path[i];
            const double t0 = bench_now_seconds(), c0 = cpu_seconds();
            if (attn_kvcache_attend(f[i].cache, &Q, &O, &L, &opts, &err) != ATTN_OK) {
                rc = cli_report("bench", &err);
                goto done;
            }
            if (r >= c->warmup) {
                f[i].times[r - c->warmup] = bench_now_seconds() - t0;
                f[i].cpu[r - c->warmup] = cpu_seconds() - c0;
            }
        }
        if (c->rope.style != ATTN_ROPE_NONE) { /* what a step with rotary embeddings adds: q and the new k */
            attn_tensor RQ = attn_tensor_4d(rq, B, H, Nq, D), RK = attn_tensor_4d(rk, B, Hkv, Nq, D);
            const double t0 = bench_now_seconds();
            if (attn_rope_apply(&c->rope, &RQ, rpos, &err) != ATTN_OK ||
                attn_rope_apply(&c->rope, &RK, rpos, &err) != ATTN_OK) {
                rc = cli_report("bench", &err);
                goto done;
            }
            if (r >= c->warmup) t_rope[r - c->warmup] = bench_now_seconds() - t0;
        }
        const double t0 = bench_now_seconds();
        sink += stream_read(stream, sn, threads);
        if (r >= c->warmup) t_mem[r - c->warmup] = bench_now_seconds() - t0;
    }
    (void)sink;
    if (nref < 0) { /* the untimed float32 reference */
        attn_tensor O = attn_tensor_4d(f[nf].out, B, H, Nq, Dv);
        opts.path = c->path;
        if (attn_kvcache_attend(f[nf].cache, &Q, &O, &L, &opts, &err) != ATTN_OK) {
            rc = cli_report("bench", &err);
            goto done;
        }
    }
    const double mem_gbs = 4.0 * (double)sn / bench_median(t_mem, c->runs) / 1e9;
    const char *layout = c->block_size ? "paged" : "contiguous";
    const decode_format *ref = &f[nref < 0 ? nf : nref]; /* the float32 cache, for the error */
    const double base_tps = (double)B * (double)Nq / bench_median(f[0].times, c->runs);
    const double rope_s = c->rope.style != ATTN_ROPE_NONE ? bench_median(t_rope, c->runs) : 0.0;
    if (!c->json)
        printf("decode   B=%ld H=%ld Hkv=%ld Nq=%ld Nk=%ld D=%ld Dv=%ld %s  %s threads=%d  "
               "LLC %.1f MiB, stream read of %.0f MiB: %.2f GB/s\n",
               c->batch, c->heads, c->kv_heads, c->seq, c->kv_seq, c->head_dim, c->value_dim,
               layout, attn_isa(), threads, (double)llc / 1048576.0, 4.0 * (double)sn / 1048576.0,
               mem_gbs);
    if (!c->json && c->rope.style != ATTN_ROPE_NONE)
        printf("  rope %s on the new token (queries and key): median %.1f us\n",
               c->rope.style == ATTN_ROPE_NEOX ? "neox" : "gptj", rope_s * 1e6);
    int name_width = 5; /* "bf16:fused" and the like line up too */
    for (int i = 0; i < nf; ++i) name_width = (int)strlen(f[i].name) > name_width ? (int)strlen(f[i].name) : name_width;
    for (int i = 0; i < nf; ++i) {
        const double med = bench_median(f[i].times, c->runs), gbs = f[i].bytes / med / 1e9;
        const double cpu = bench_median(f[i].cpu, c->runs);
        const double tps = (double)B * (double)Nq / med;
        double emax = 0.0, esum = 0.0;
        const int64_t no = B * H * Nq * Dv;
        for (int64_t e = 0; e < no; ++e) {
            const double d = fabs((double)f[i].out[e] - (double)ref->out[e]);
            emax = d > emax ? d : emax;
            esum += d;
        }
        const double bpt = f[i].bytes / ((double)B * (double)Nk);
        char rope_text[96] = ""; /* the rotation's share of this storage's step */
        if (c->rope.style != ATTN_ROPE_NONE)
            snprintf(rope_text, sizeof rope_text,
                     c->json ? ",\"rope_us\":%.2f,\"rope_share\":%.5f" : "  rope %.0f us = %.2f%% of the step",
                     rope_s * 1e6, (c->json ? 1.0 : 100.0) * rope_s / (med + rope_s));
        if (c->json)
            printf("{\"mode\":\"decode\",\"cache_dtype\":\"%s\",\"batch\":%ld,\"heads\":%ld,"
                   "\"kv_heads\":%ld,\"seq\":%ld,\"kv_seq\":%ld,\"head_dim\":%ld,\"value_dim\":%ld,"
                   "\"layout\":\"%s\",\"block_size\":%ld,\"isa\":\"%s\",\"threads\":%d,"
                   "\"runs\":%ld,\"ms\":%.4f,\"bytes_per_token\":%.0f,\"kv_gbs\":%.3f,"
                   "\"stream_gbs\":%.3f,\"llc_bytes\":%lld,\"stream_bytes\":%.0f,"
                   "\"fraction\":%.4f,\"tokens_per_s\":%.2f,\"speedup\":%.3f,"
                   "\"err_max\":%.3e,\"err_mean\":%.3e,\"cpu_ms\":%.4f,\"peak_rss_bytes\":%zu%s" CLI_OPENMP_JSON "}\n",
                   f[i].name, c->batch, c->heads, c->kv_heads, c->seq, c->kv_seq, c->head_dim,
                   c->value_dim, layout, c->block_size, attn_isa(), threads, c->runs, med * 1e3,
                   bpt, gbs, mem_gbs, (long long)llc, 4.0 * (double)sn, gbs / mem_gbs, tps,
                   tps / base_tps, emax, esum / (double)no,
                   cpu * 1e3, bench_peak_rss_bytes(), rope_text);
        else
            printf("  %-*s %6.0f B/token  median %8.3f ms (cpu %8.3f)  %8.1f tokens/s (%.2fx %s)  "
                   "K/V %6.2f GB/s (%3.0f%% of stream)  err max %.2e mean %.2e%s\n",
                   name_width, f[i].name, bpt, med * 1e3, cpu * 1e3, tps, tps / base_tps, f[0].name, gbs,
                   100.0 * gbs / mem_gbs, emax, esum / (double)no, rope_text);
    }
    fflush(stdout);
    rc = CLI_OK;
done:
    for (int i = 0; i < 9; ++i) attn_kvcache_free(f[i].cache), free(f[i].out), free(f[i].times), free(f[i].cpu);
    free(kbuf), free(vbuf), free(q), free(q16), free(lse), free(stream), free(t_mem);
    free(rq), free(rk), free(rpos), free(t_rope);
    return rc;
}

/* ------------------------------------------------------------ shared prefix */

/* Appends n tokens per entry in chunks: the same tokens to every entry
 * (shared: only entry 0 takes them; the others fork from it afterwards),
 * or tokens of their own (own). */
static bool fill_caches(attn_kvcache *const *caches, int ncaches, const bench_config *c, int64_t n,
                        bool same, attn_rng *rng, attn_error *err)
{
    const int64_t B = c->batch, Hkv = c->kv_heads, D = c->head_dim, Dv = c->value_dim;
    const int64_t chunk = n < 512 ? n : 512, rows = same ? Hkv : B * Hkv;
    float *k = malloc(sizeof(float) * (size_t)(rows * chunk * D));
    float *v = malloc(sizeof(float) * (size_t)(rows * chunk * Dv));
    int64_t *first = calloc((size_t)B, sizeof *first);
    bool ok = k && v && first;
    for (int64_t at = 0; at < n && ok; at += chunk) {
        const int64_t m = n - at < chunk ? n - at : chunk;
        fill_keys(k, rows * chunk, D, rng, true);
        fill_keys(v, rows * chunk, Dv, rng, false);
        attn_tensor K = attn_tensor_4d(k, B, Hkv, m, D), V = attn_tensor_4d(v, B, Hkv, m, Dv);
        K.stride[1] = chunk * D, V.stride[1] = chunk * Dv;
        K.stride[0] = same ? 0 : Hkv * chunk * D, V.stride[0] = same ? 0 : Hkv * chunk * Dv;
        first[0] = m;
        for (int i = 0; i < ncaches && ok; ++i) /* cache 0 is the shared one */
            ok = attn_kvcache_append(caches[i], &K, &V, same && i == 0 ? first : NULL, err) == ATTN_OK;
    }
    free(k), free(v), free(first);
    return ok;
}

int bench_decode_shared(const bench_config *c)
{
    const int64_t B = c->batch, H = c->heads, Hkv = c->kv_heads, Nq = c->seq, Nk = c->kv_seq;
    const int64_t P = c->shared_prefix, D = c->head_dim, Dv = c->value_dim;
    const int threads = c->threads > 0 ? (int)c->threads : attn_default_threads();
    const int64_t no = B * H * Nq * Dv;
    float *q = malloc(sizeof(float) * (size_t)(B * H * Nq * D)), *lse = malloc(sizeof(float) * (size_t)(B * H * Nq));
    float *out[2] = {malloc(sizeof(float) * (size_t)no), malloc(sizeof(float) * (size_t)no)};
    double *times[2] = {malloc(sizeof(double) * (size_t)c->runs), malloc(sizeof(double) * (size_t)c->runs)};
    double *cpu[2] = {malloc(sizeof(double) * (size_t)c->runs), malloc(sizeof(double) * (size_t)c->runs)};
    void *q16 = NULL;
    attn_error err = {0};
    int rc = CLI_FAIL;
    if (!q || !lse || !out[0] || !out[1] || !times[0] || !times[1] || !cpu[0] || !cpu[1]) {
        fprintf(stderr, "attn bench: out of memory\n");
        goto done;
    }
    if (!c->json)
        printf("decode   B=%ld H=%ld Hkv=%ld Nq=%ld Nk=%ld (shared prefix %ld + %ld own) D=%ld Dv=%ld "
               "paged bs=%ld  %s threads=%d\n",
               c->batch, c->heads, c->kv_heads, c->seq, c->kv_seq, c->shared_prefix,
               c->kv_seq - c->shared_prefix, c->head_dim, c->value_dim, c->block_size, attn_isa(),
               threads);
    for (int f = 0; f < c->ncache; ++f) {
        attn_kvcache *caches[2] = {NULL, NULL}; /* forked (cascade), unshared */
        attn_kvcache_config cfg = {.batch = B, .kv_heads = Hkv, .capacity = Nk, .head_dim = D,
                                   .value_dim = Dv, .block_size = c->block_size,
                                   .dtype = c->cache_dtype[f], .quant = c->cache_quant[f]};
        attn_rng rng;
        attn_rng_seed(&rng, 11);
        bool ok = attn_kvcache_create(&cfg, &caches[0], &err) == ATTN_OK &&
                  attn_kvcache_create(&cfg, &caches[1], &err) == ATTN_OK &&
                  fill_caches(caches, 2, c, P, true, &rng, &err);
        for (int64_t b = 1; b < B && ok; ++b) ok = attn_kvcache_fork(caches[0], 0, b, &err) == ATTN_OK;
        ok = ok && fill_caches(caches, 2, c, Nk - P, false, &rng, &err);
        fill_keys(q, B * H * Nq, D, &rng, false);
        attn_tensor Q = attn_tensor_4d(q, B, H, Nq, D), L = attn_tensor_3d(lse, B, H, Nq);
        free(q16), q16 = NULL;
        if (ok && !cli_round_input("bench", &Q, c->dtype, &q16)) ok = false;
        attn_sdpa_opts opts = attn_sdpa_opts_default();
        opts.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        opts.num_threads = threads;
        opts.path = c->cache_path[f];
        for (long r = 0; r < c->warmup + c->runs && ok; ++r)
            for (int i = 0; i < 2 && ok; ++i) { /* in turn: the machine's load falls on both alike */
                attn_tensor O = attn_tensor_4d(out[i], B, H, Nq, Dv);
                const double t0 = bench_now_seconds(), c0 = cpu_seconds();
                ok = attn_kvcache_attend(caches[i], &Q, &O, &L, &opts, &err) == ATTN_OK;
                if (r >= c->warmup) {
                    times[i][r - c->warmup] = bench_now_seconds() - t0;
                    cpu[i][r - c->warmup] = cpu_seconds() - c0;
                }
            }
        attn_kvcache_free(caches[0]);
        attn_kvcache_free(caches[1]);
        if (!ok) {
            rc = err.status != ATTN_OK ? cli_report("bench", &err) : CLI_FAIL;
            goto done;
        }
        double emax = 0.0;
        for (int64_t e = 0; e < no; ++e) {
            const double d = fabs((double)out[0][e] - (double)out[1][e]);
            emax = d > emax ? d : emax;
        }
        const double med[2] = {bench_median(times[0], c->runs), bench_median(times[1], c->runs)};
        const double cpu_med[2] = {bench_median(cpu[0], c->runs), bench_median(cpu[1], c->runs)};
        static const char *const variant[2] = {"cascade", "unshared"};
        for (int i = 1; i >= 0; --i) {
            const double tps = (double)B * (double)Nq / med[i];
            if (c->json)
                printf("{\"mode\":\"decode\",\"variant\":\"%s\",\"cache_dtype\":\"%s\",\"batch\":%ld,"
                       "\"heads\":%ld,\"kv_heads\":%ld,\"seq\":%ld,\"kv_seq\":%ld,"
                       "\"shared_prefix\":%ld,\"head_dim\":%ld,\"value_dim\":%ld,\"block_size\":%ld,"
                       "\"isa\":\"%s\",\"threads\":%d,\"runs\":%ld,\"ms\":%.4f,"
                       "\"tokens_per_s\":%.2f,\"speedup\":%.3f,\"cpu_ms\":%.4f,"
                       "\"cpu_speedup\":%.3f,\"diff_max\":%.3e,"
                       "\"peak_rss_bytes\":%zu" CLI_OPENMP_JSON "}\n",
                       variant[i], c->cache_name[f], c->batch, c->heads, c->kv_heads, c->seq,
                       c->kv_seq, c->shared_prefix, c->head_dim, c->value_dim, c->block_size,
                       attn_isa(), threads, c->runs, med[i] * 1e3, tps, med[1] / med[i],
                       cpu_med[i] * 1e3, cpu_med[1] / cpu_med[i], emax, bench_peak_rss_bytes());
            else
                printf("  %-5s %-8s median %9.3f ms (cpu %9.3f)  %9.1f tokens/s (%.2fx unshared, "
                       "cpu %.2fx)\n",
                       c->cache_name[f], variant[i], med[i] * 1e3, cpu_med[i] * 1e3, tps,
                       med[1] / med[i], cpu_med[1] / cpu_med[i]);
        }
        if (!c->json) printf("  %-5s max |cascade - unshared| %.2e\n", c->cache_name[f], emax);
    }
    fflush(stdout);
    rc = CLI_OK;
done:
    free(q), free(lse), free(out[0]), free(out[1]), free(times[0]), free(times[1]), free(q16);
    free(cpu[0]), free(cpu[1]);
    return rc;
}
