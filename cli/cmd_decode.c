/* attn decode: attention of new query tokens against a key/value cache held
 * in .npy files, through the library's KV cache (attn_kvcache_*). */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const cli_command cmd_decode; /* also in cli.h's table of commands */

static const cli_option decode_options[] = {
    {"--query", "Q.npy", "new queries (B,Hq,Nq,D) or (Hq,Nq,D) (required)"},
    {"--key-cache", "K.npy", "cached keys (B,Hkv,N,D) or (Hkv,N,D) (required)"},
    {"--value-cache", "V.npy", "cached values (B,Hkv,N,Dv) or (Hkv,N,Dv) (required)"},
    {"--kv-len", "L[,L...]", "valid cached tokens per batch entry (one value: every entry; default N)"},
    {"--kv-lens", "FILE", "the same from a text file of integers (spaces, commas or newlines)"},
    {"--causal", "[ALIGN]", "bottom-right (alone: the same): query i sees keys j <= i + L - Nq"},
    {"--window", "L,R", "sliding window (FlashAttention window_size, -1 = unbounded)"},
    {"--softcap", "C", "logit soft-capping C*tanh(x/C)"},
    {"--alibi-slopes", "FILE|geometric", "ALiBi slopes (Hq) or (B,Hq)"},
    {"--sinks", "S.npy", "attention sink logits, one per query head (Hq)"},
    {"--scale", "S", "score scale (default 1/sqrt(D))"},
    {"--block-size", "N", "store the cache paged in blocks of N tokens (default contiguous)"},
    {"--threads", "N", "worker threads (default: ATTN_NUM_THREADS or all cores)"},
    {"--dtype", "T", "storage of the cache, the queries and the output: f32 (default), bf16, f16"},
    {"--cache-dtype", "T", "storage of the cache alone: f32, bf16, f16, int8, fp8 (default --dtype)"},
    CLI_ROPE_OPTIONS,
    {"--out", "O.npy", "output (B,Hq,Nq,Dv) (required)"},
    {"--lse", "LSE.npy", "also write the log-sum-exp per query (B,Hq,Nq)"},
    {0},
};

static const char decode_details[] =
    "Entry b attends the first L_b tokens of its cache (FlashAttention's\n"
    "cache_seqlens); the rest of the file's N tokens are ignored. Hq % Hkv == 0\n"
    "(GQA). The new tokens are the last Nq positions: --causal aligns them\n"
    "bottom-right. An entry with L_b = 0 gives output 0 and LSE -inf.\n"
    "--dtype bf16|f16 stores the cache and the queries rounded to that format\n"
    "(float32 arithmetic); the output comes out in it: float16 as .npy <f2,\n"
    "bfloat16 as its exact float32 values. The LSE is float32.\n"
    "--cache-dtype int8 stores one int8 per element and a scale per token and\n"
    "kv head; fp8 stores e4m3 (scale 1, saturating at +-448). --rope rotates\n"
    "the cached keys at positions 0..L_b-1 as they are stored and the queries\n"
    "at L_b - Nq + i (the new tokens' positions), so the files hold keys and\n"
    "queries before rotation.";

static const char *const option_names[][2] = {
    {"query", "--query"},     {"key", "--key-cache"}, {"value", "--value-cache"},
    {"scale", "--scale"},     {"num_threads", "--threads"}, {"block_size", "--block-size"},
    {NULL, NULL},
};

/* Parses integers separated by commas/whitespace into lens[0..*n). */
static bool parse_lengths(const cli_command *cmd, const char *opt, const char *text,
                          int64_t *lens, int64_t max, int64_t *n)
{
    *n = 0;
    const char *p = text;
    for (;;) {
        while (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 0 ||
            (*end && *end != ',' && *end != ' ' && *end != '\t' && *end != '\n' && *end != '\r')) {
            const int len = (int)strcspn(p, ", \t\r\n");
            cli_usage_error(cmd, "%s: expected non-negative integers, got '%.*s'", opt,
                            len < 40 ? len : 40, p);
            return false;
        }
        if (*n == max) {
            cli_usage_error(cmd, "%s: more than %lld lengths (the batch size)", opt, (long long)max);
            return false;
        }
        lens[(*n)++] = v;
        p = end;
    }
    if (*n == 0) {
        cli_usage_error(cmd, "%s: no lengths given", opt);
        return false;
    }
    return true;
}

static char *read_text(const cli_command *cmd, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        cli_usage_error(cmd, "--kv-lens %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        if (cap > ((size_t)1 << 26)) {
            free(buf);
            buf = NULL;
            cli_usage_error(cmd, "--kv-lens %s: file too large", path);
            break;
        }
        char *more = realloc(buf, 2 * cap + 1);
        if (!more) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = more;
        cap *= 2;
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    return buf;
}


/* --window, --softcap, --alibi-slopes, --sinks and --causal into opts;
 * geometric slopes are written to *geometric (Hq floats, owned). */
static int load_variants(const cli_command *cmd, const cli_args *a, int64_t Hq,
                         attn_sdpa_opts *opts, attn_array *slopes, attn_array *sinks,
                         float **geometric, attn_tensor *geo_t)
{
    if (!cli_get_causal(a, ATTN_CAUSAL_BOTTOM_RIGHT, &opts->causal)) return CLI_USAGE;
    if (opts->causal == ATTN_CAUSAL_TOP_LEFT)
        return cli_usage_error(cmd, "--causal top-left: the new tokens are the cache's last; "
                                    "decode aligns them bottom-right");
    if (!cli_get_window(a, &opts->window)) return CLI_USAGE;
    if (!cli_get_float(a, "--softcap", &opts->softcap)) return CLI_USAGE;
    if (cli_get(a, "--softcap") && !(opts->softcap > 0.0f))
        return cli_usage_error(cmd, "--softcap: must be > 0, got '%s'", cli_get(a, "--softcap"));
    const char *sl = cli_get(a, "--alibi-slopes"), *sk = cli_get(a, "--sinks");
    int rc;
    if (sl && !strcmp(sl, "geometric")) {
        if (!(*geometric = malloc((size_t)(Hq > 0 ? Hq : 1) * sizeof(float)))) {
            fprintf(stderr, "attn %s: --alibi-slopes: out of memory\n", cmd->name);
            return CLI_FAIL;
        }
        attn_alibi_slopes(Hq > 0 ? Hq : 1, *geometric, NULL);
        *geo_t = attn_tensor_1d(*geometric, Hq);
        opts->alibi_slopes = geo_t;
    } else if (sl) {
        if ((rc = cli_load_npy(sl, slopes))) return rc;
        opts->alibi_slopes = &slopes->t;
    }
    if (sk) {
        if ((rc = cli_load_npy(sk, sinks))) return rc;
        opts->sinks = &sinks->t;
    }
    return CLI_OK;
}

static int run_decode(int argc, char **argv)
{
    const cli_command *cmd = &cmd_decode;
    cli_args a;
    bool help;
    int rc = cli_parse(cmd, argc, argv, &a, &help);
    if (rc || help) return rc;
    if (a.npositional > 0) return cli_usage_error(cmd, "unexpected argument '%s'", a.positional[0]);
    const char *qp, *kp, *vp, *out_path;
    if (!(qp = cli_require(&a, "--query")) || !(kp = cli_require(&a, "--key-cache")) ||
        !(vp = cli_require(&a, "--value-cache")) || !(out_path = cli_require(&a, "--out")))
        return CLI_USAGE;
    if (cli_get(&a, "--kv-len") && cli_get(&a, "--kv-lens"))
        return cli_usage_error(cmd, "--kv-len and --kv-lens: give one of them");
    attn_sdpa_opts opts = attn_sdpa_opts_default();
    long threads = 0, block = 0;
    if (!cli_get_float(&a, "--scale", &opts.scale) ||
        !cli_get_int(&a, "--threads", 1, ATTN_MAX_THREADS, &threads) ||
        !cli_get_int(&a, "--block-size", 1, 1L << 30, &block))
        return CLI_USAGE;
    if (cli_get(&a, "--scale") && !(opts.scale > 0.0f))
        return cli_usage_error(cmd, "--scale: must be a positive number, got %s (omit it for "
                                    "the default 1/sqrt(D))",
                               cli_get(&a, "--scale"));
    opts.num_threads = (int)threads;
    attn_rope rope;
    if (!cli_get_rope(&a, &rope)) return CLI_USAGE;

    attn_array q = {0}, k = {0}, v = {0}, slopes = {0}, sinks = {0};
    float *geometric = NULL;
    attn_tensor geo_t;
    attn_kvcache *cache = NULL;
    float *o = NULL, *lse = NULL;
    void *q16 = NULL;
    int64_t *lens = NULL;
    char *text = NULL;
    rc = CLI_USAGE;
    if ((rc = cli_load_npy(qp, &q)) || (rc = cli_load_npy(kp, &k)) || (rc = cli_load_npy(vp, &v)))
        goto done;
    rc = CLI_USAGE;
    const int rank = q.t.ndim;
    if (rank != 3 && rank != 4) {
        cli_usage_error(cmd, "--query %s: expected (B,Hq,Nq,D) or (Hq,Nq,D), got %d dimensions", qp,
                        rank);
        goto done;
    }
    attn_tensor q4, k4, v4;
    if (!cli_as_4d(cmd, "--query", &q, rank, &q4) || !cli_as_4d(cmd, "--key-cache", &k, rank, &k4) ||
        !cli_as_4d(cmd, "--value-cache", &v, rank, &v4))
        goto done;
    const int64_t B = q4.shape[0], Hq = q4.shape[1], Nq = q4.shape[2], N = k4.shape[2];
    const int64_t Dv = v4.shape[3];
    if (k4.shape[0] != B) {
        cli_usage_error(cmd, "--key-cache %s: batch size %lld, --query has %lld", kp,
                        (long long)k4.shape[0], (long long)B);
        goto done;
    }
    if (v4.shape[0] != B || v4.shape[1] != k4.shape[1] || v4.shape[2] != N) {
        cli_usage_error(cmd, "--value-cache %s: expected (%lld,%lld,%lld,Dv) like --key-cache", vp,
                        (long long)B, (long long)k4.shape[1], (long long)N);
        goto done;
    }
    lens = malloc(sizeof *lens * (size_t)(B > 0 ? B : 1));
    if (!lens) goto oom;
    const char *opt = cli_get(&a, "--kv-len") ? "--kv-len" : "--kv-lens";
    int64_t n = 0;
    if (cli_get(&a, "--kv-len")) { /* the shared list parser: no empty fields */
        long long *vals = malloc(sizeof *vals * (size_t)(B > 0 ? B : 1));
        if (!vals) goto oom;
        int count = 0;
        const bool ok = cli_get_list(&a, "--kv-len", 0, LLONG_MAX, vals,
                                     B > INT_MAX ? INT_MAX : (int)B, &count);
        for (int i = 0; ok && i < count; ++i) lens[i] = vals[i];
        free(vals);
        if (!ok) goto done;
        n = count;
    } else if (cli_get(&a, "--kv-lens")) {
        if (!(text = read_text(cmd, cli_get(&a, "--kv-lens")))) goto done;
        if (!parse_lengths(cmd, opt, text, lens, B, &n)) goto done;
    } else {
        lens[0] = N;
        n = 1;
    }
    if (n == 1)
        for (int64_t b = 1; b < B; ++b) lens[b] = lens[0];
    else if (n != B) {
        cli_usage_error(cmd, "%s: %lld lengths for a batch of %lld", opt, (long long)n, (long long)B);
        goto done;
    }
    for (int64_t b = 0; b < B; ++b)
        if (lens[b] > N) {
            cli_usage_error(cmd, "%s: entry %lld has length %lld, but --key-cache holds %lld tokens",
                            opt, (long long)b, (long long)lens[b], (long long)N);
            goto done;
        }

    if ((rc = load_variants(cmd, &a, Hq, &opts, &slopes, &sinks, &geometric, &geo_t))) goto done;
    rc = CLI_USAGE;
    attn_dtype dtype, cache_dtype;
    attn_kv_quant quant = ATTN_KV_FLOAT;
    if (!cli_get_dtype(&a, &dtype)) goto done;
    cache_dtype = dtype;
    const char *cd = cli_get(&a, "--cache-dtype");
    if (cd && !cli_parse_cache_dtype(cd, &cache_dtype, &quant)) {
        cli_usage_error(cmd, "--cache-dtype: expected f32, bf16, f16, int8 or fp8, got '%s'", cd);
        goto done;
    }
    attn_error err = {0};
    if (rope.style != ATTN_ROPE_NONE) { /* keys at 0.., queries at L_b - Nq + i */
        for (int64_t b = 0; b < B; ++b)
            if (lens[b] < Nq) {
                cli_usage_error(cmd, "--rope: entry %lld holds %lld tokens, fewer than the %lld queries",
                                (long long)b, (long long)lens[b], (long long)Nq);
                goto done;
            }
        for (int64_t b = 0; b < B; ++b) lens[b] -= Nq; /* the queries' first positions */
        const attn_status st = attn_rope_apply(&rope, &k4, NULL, &err) != ATTN_OK
                                   ? err.status
                                   : attn_rope_apply(&rope, &q4, lens, &err);
        for (int64_t b = 0; b < B; ++b) lens[b] += Nq;
        if (st != ATTN_OK) {
            rc = cli_usage_error(cmd, "--rope: %s", err.message);
            goto done;
        }
    }
    if (!cli_round_input(cmd->name, &q4, dtype, &q16)) {
        rc = CLI_FAIL;
        goto done;
    }
    attn_kvcache_config cfg = {.batch = B, .kv_heads = k4.shape[1], .capacity = N > 0 ? N : 1,
                               .head_dim = k4.shape[3], .value_dim = Dv, .block_size = block,
                               .dtype = cache_dtype, .quant = quant};
    if (attn_kvcache_create(&cfg, &cache, &err) != ATTN_OK ||
        attn_kvcache_append(cache, &k4, &v4, lens, &err) != ATTN_OK) {
        rc = cli_report_as(&a, &err, option_names);
        goto done;
    }
    o = cli_alloc_floats(cmd->name, 4, B, Hq, Nq, Dv);
    lse = cli_alloc_floats(cmd->name, 3, B, Hq, Nq);
    if (!o || !lse) {
        rc = CLI_FAIL;
        goto done;
    }
    /* a 16-bit output fits the float buffer */
    attn_tensor o4 = attn_tensor_make(o, dtype, 4, (int64_t[]){B, Hq, Nq, Dv});
    attn_tensor l3 = attn_tensor_3d(lse, B, Hq, Nq);
    if (attn_kvcache_attend(cache, &q4, &o4, &l3, &opts, &err) != ATTN_OK) {
        rc = cli_report_as(&a, &err, option_names);
        goto done;
    }
    /* outputs mirror the query's rank */
    const attn_dtype written = cli_result_dtype(o, B * Hq * Nq * Dv, dtype);
    attn_tensor to = attn_tensor_make(o, written, 4, (int64_t[]){B, Hq, Nq, Dv}), tl = l3;
    if (rank == 3) {
        to = attn_tensor_make(o, written, 3, (int64_t[]){Hq, Nq, Dv});
        tl = attn_tensor_2d(lse, Hq, Nq);
    }
    const char *paths[2] = {out_path, cli_get(&a, "--lse")};
    const attn_tensor ts[2] = {to, tl};
    static const char *const options[2] = {"--out", "--lse"};
    rc = cli_save_npys(cmd, options, paths, ts, 2);
    goto done;
oom:
    fprintf(stderr, "attn decode: out of memory\n");
    rc = CLI_FAIL;
done:
    attn_kvcache_free(cache);
    free(o);
    free(lse);
    free(q16);
    free(lens);
    free(text);
    free(geometric);
    attn_array_free(&slopes);
    attn_array_free(&sinks);
    attn_array_free(&q);
    attn_array_free(&k);
    attn_array_free(&v);
    return rc;
}

const cli_command cmd_decode = {
    .name = "decode",
    .summary = "attention of new queries against a KV cache (.npy), per-entry lengths",
    .usage = "--query Q.npy --key-cache K.npy --value-cache V.npy --out O.npy [--kv-len L,...] [options]",
    .details = decode_details,
    .options = decode_options,
    .run = run_decode,
};
