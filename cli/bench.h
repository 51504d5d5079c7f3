/* What attn bench's modes share: the parsed configuration and the timing
 * helpers. cmd_bench.c parses the options and runs forward, backward, mha
 * and varlen; bench_decode.c runs --mode decode. */
#ifndef ATTN_CLI_BENCH_H
#define ATTN_CLI_BENCH_H

#include "cli.h"

#include <stddef.h>
#include <stdint.h>

typedef enum { MODE_FORWARD, MODE_BACKWARD, MODE_MHA, MODE_DECODE, MODE_VARLEN, MODE_MHA_BACKWARD } bench_mode;

typedef struct {
    bench_mode mode;
    long batch, heads, kv_heads, seq, kv_seq, head_dim, value_dim;
    attn_causal causal; /* the mode's natural alignment when bare */
    long threads, runs, warmup;
    long block_size; /* decode: 0 = contiguous cache */
    long stream_mib; /* decode: streaming buffer size; 0 = sized against the LLC */
    long shared_prefix; /* decode: tokens every entry shares (0 = none) */
    int ncache;      /* decode: the cache storages compared, first = the ratios' base */
    attn_dtype cache_dtype[8];
    attn_kv_quant cache_quant[8];
    const char *cache_name[8];
    attn_path cache_path[8]; /* --cache-dtype's :PATH, else --path */
    attn_dtype dtype; /* storage of q, k, v, o, dout, dq, dk, dv and the cache */
    attn_path path;
    bool json;
    attn_window window;
    bool alibi, sinks;
    bool fresh_workspace; /* calls allocate their own workspace */
    bool bf16;            /* opts.precision = ATTN_PRECISION_BF16 */
    float softcap, dropout;
    attn_rope rope; /* forward: --rope (style NONE = off) */
} bench_config;

/* Monotonic wall-clock seconds. */
double bench_now_seconds(void);
/* Median of t[0..n) (sorts t). */
double bench_median(double *t, long n);
/* The process's peak resident set so far, bytes (0 when unknown). */
size_t bench_peak_rss_bytes(void);
/* n floats of deterministic values in [-1, 1); NULL when out of memory. */
float *bench_alloc_filled(int64_t n, uint64_t seed);

/* --mode decode: attn_kvcache_attend over caches of each --cache-dtype. */
int bench_decode(const bench_config *c);
/* --mode decode --shared-prefix: a forked cache (cascade) against the same
 * tokens unshared. */
int bench_decode_shared(const bench_config *c);

#endif
