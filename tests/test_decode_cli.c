/*
 * test_decode_cli — `attn decode` and `attn bench --mode decode|varlen`.
 *
 *   decode   the command's output and LSE equal attn_kvcache_attend on the
 *            same files bit for bit (contiguous and --block-size, per-entry
 *            --kv-len, a --kv-lens file, 3-D inputs, --causal);
 *   errors   lengths beyond the cache, the wrong number of lengths, a bad
 *            lengths file, mismatched cache shapes, missing options: exit
 *            status 2, one line naming the option, no output file;
 *   serving  --cache-dtype int8 with --rope neox --rotary-dim 4, --window,
 *            --softcap, --sinks and geometric --alibi-slopes equals the
 *            library (attn_rope_apply on the files, then the cache) bit for
 *            bit; bare --causal and --causal bottom-right agree; --causal
 *            top-left and a bad --cache-dtype are usage errors; --help
 *            prints no doubled percent sign;
 *   bench    both bench modes run on small shapes and print their figures;
 *            decode's errors are against float32 even when f32 is not listed.
 */
#include "attn.h"
#include "clirun.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *dir;

static const char *path(const char *name)
{
    static char bufs[8][512];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", dir, name);
    return b;
}

static void save(const char *name, float *data, int ndim, const int64_t *shape)
{
    attn_tensor t = attn_tensor_make(data, ATTN_F32, ndim, shape);
    attn_npy_write(path(name), &t, NULL);
}

/* The library's answer for the files: cache filled with counts = lens. */
static bool expected(const float *q, const float *k, const float *v, const int64_t *lens,
                     int64_t block, bool causal, float *o, float *l)
{
    attn_kvcache_config cfg = {.batch = 2, .kv_heads = 2, .capacity = 10, .head_dim = 8,
                               .value_dim = 5, .block_size = block};
    attn_kvcache *c;
    if (attn_kvcache_create(&cfg, &c, NULL) != ATTN_OK) return false;
    attn_tensor K = attn_tensor_4d((float *)k, 2, 2, 10, 8), V = attn_tensor_4d((float *)v, 2, 2, 10, 5);
    attn_tensor Q = attn_tensor_4d((float *)q, 2, 4, 3, 8), O = attn_tensor_4d(o, 2, 4, 3, 5);
    attn_tensor L = attn_tensor_3d(l, 2, 4, 3);
    attn_sdpa_opts opts = attn_sdpa_opts_default();
    if (causal) opts.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    bool ok = attn_kvcache_append(c, &K, &V, lens, NULL) == ATTN_OK &&
              attn_kvcache_attend(c, &Q, &O, &L, &opts, NULL) == ATTN_OK;
    attn_kvcache_free(c);
    return ok;
}

static bool file_equals(const char *name, const float *want, int64_t n)
{
    attn_array a;
    if (attn_npy_read(path(name), &a, NULL) != ATTN_OK) return false;
    bool ok = attn_tensor_numel(&a.t) == n && !memcmp(a.t.data, want, sizeof(float) * (size_t)n);
    attn_array_free(&a);
    return ok;
}

static void group_decode(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "decode");
    tu_rng r;
    tu_rng_seed(&r, 10);
    float q[2 * 4 * 3 * 8], k[2 * 2 * 10 * 8], v[2 * 2 * 10 * 5], o[2 * 4 * 3 * 5], l[2 * 4 * 3];
    for (size_t i = 0; i < sizeof q / 4; ++i) q[i] = (float)tu_rng_normal(&r);
    for (size_t i = 0; i < sizeof k / 4; ++i) k[i] = (float)tu_rng_normal(&r);
    for (size_t i = 0; i < sizeof v / 4; ++i) v[i] = (float)tu_rng_normal(&r);
    save("q.npy", q, 4, (int64_t[]){2, 4, 3, 8});
    save("k.npy", k, 4, (int64_t[]){2, 2, 10, 8});
    save("v.npy", v, 4, (int64_t[]){2, 2, 10, 5});
    const int64_t lens[2] = {7, 10};
    clirun_result res;
    for (int block = 0; block <= 3; block += 3) {
        char bs[32] = "";
        if (block) snprintf(bs, sizeof bs, "\x1f--block-size\x1f%d", block);
        clirunf(&res, "decode\x1f--query\x1f%s\x1f--key-cache\x1f%s\x1f--value-cache\x1f%s"
                      "\x1f--kv-len\x1f" "7,10\x1f--causal\x1f--out\x1f%s\x1f--lse\x1f%s%s",
                path("q.npy"), path("k.npy"), path("v.npy"), path("o.npy"), path("l.npy"), bs);
        const bool ran = res.status == 0;
        tu_check(&g, ran, "decode (block %d): exit %d: %s", block, res.status, res.err);
        clirun_free(&res);
        if (!ran) continue;
        tu_check(&g, expected(q, k, v, lens, block, true, o, l), "library call");
        tu_check(&g, file_equals("o.npy", o, 2 * 4 * 3 * 5) && file_equals("l.npy", l, 24),
                 "decode (block %d): out/lse differ from attn_kvcache_attend", block);
    }
    /* a lengths file, no --causal */
    FILE *f = fopen(path("lens.txt"), "w");
    fputs("3\n10\n", f);
    fclose(f);
    clirunf(&res, "decode\x1f--query\x1f%s\x1f--key-cache\x1f%s\x1f--value-cache\x1f%s"
                  "\x1f--kv-lens\x1f%s\x1f--out\x1f%s",
            path("q.npy"), path("k.npy"), path("v.npy"), path("lens.txt"), path("o2.npy"));
    tu_check(&g, res.status == 0, "decode --kv-lens: exit %d: %s", res.status, res.err);
    clirun_free(&res);
    const int64_t lens2[2] = {3, 10};
    tu_check(&g, expected(q, k, v, lens2, 0, false, o, l) && file_equals("o2.npy", o, 120),
             "decode --kv-lens: output differs");
    /* 3-D inputs: entry 0 alone, default length = all 10 tokens */
    save("q3.npy", q, 3, (int64_t[]){4, 3, 8});
    save("k3.npy", k, 3, (int64_t[]){2, 10, 8});
    save("v3.npy", v, 3, (int64_t[]){2, 10, 5});
    clirunf(&res, "decode\x1f--query\x1f%s\x1f--key-cache\x1f%s\x1f--value-cache\x1f%s"
                  "\x1f--out\x1f%s",
            path("q3.npy"), path("k3.npy"), path("v3.npy"), path("o3.npy"));
    tu_check(&g, res.status == 0, "decode 3-D: exit %d: %s", res.status, res.err);
    clirun_free(&res);
    attn_array a;
    if (tu_check(&g, attn_npy_read(path("o3.npy"), &a, NULL) == ATTN_OK, "read o3.npy")) {
        tu_check(&g, a.t.ndim == 3 && a.t.shape[0] == 4 && a.t.shape[2] == 5,
                 "3-D query gives a 3-D output");
        attn_array_free(&a);
    }
    tu_group_end(&g);
}

/* The serving options' expected output through the library. */
static bool expected_serving(const float *q, const float *k, const float *v, const int64_t *lens,
                             const float *sinks, float *o)
{
    float qr[2 * 4 * 3 * 8], kr[2 * 2 * 10 * 8], slopes[4];
    memcpy(qr, q, sizeof qr);
    memcpy(kr, k, sizeof kr);
    attn_alibi_slopes(4, slopes, NULL);
    attn_kvcache_config cfg = {.batch = 2, .kv_heads = 2, .capacity = 10, .head_dim = 8,
                               .value_dim = 5, .quant = ATTN_KV_INT8};
    attn_kvcache *c;
    if (attn_kvcache_create(&cfg, &c, NULL) != ATTN_OK) return false;
    attn_tensor K = attn_tensor_4d(kr, 2, 2, 10, 8), V = attn_tensor_4d((float *)v, 2, 2, 10, 5);
    attn_tensor Q = attn_tensor_4d(qr, 2, 4, 3, 8), O = attn_tensor_4d(o, 2, 4, 3, 5);
    attn_tensor S = attn_tensor_1d((float *)sinks, 4), A = attn_tensor_1d(slopes, 4);
    attn_rope rope = {.style = ATTN_ROPE_NEOX, .rotary_dim = 4};
    const int64_t qpos[2] = {lens[0] - 3, lens[1] - 3};
    attn_sdpa_opts opts = attn_sdpa_opts_default();
    opts.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    opts.window = (attn_window){.enabled = true, .left = 3, .right = 0};
    opts.softcap = 5.0f;
    opts.sinks = &S;
    opts.alibi_slopes = &A;
    bool ok = attn_rope_apply(&rope, &K, NULL, NULL) == ATTN_OK &&
              attn_rope_apply(&rope, &Q, qpos, NULL) == ATTN_OK &&
              attn_kvcache_append(c, &K, &V, lens, NULL) == ATTN_OK &&
              attn_kvcache_attend(c, &Q, &O, NULL, &opts, NULL) == ATTN_OK;
    attn_kvcache_free(c);
    return ok;
}

static void group_serving(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "serving");
    tu_rng r;
    tu_rng_seed(&r, 11);
    float q[2 * 4 * 3 * 8], k[2 * 2 * 10 * 8], v[2 * 2 * 10 * 5], o[2 * 4 * 3 * 5], sinks[4];
    for (size_t i = 0; i < sizeof q / 4; ++i) q[i] = (float)tu_rng_normal(&r);
    for (size_t i = 0; i < sizeof k / 4; ++i) k[i] = (float)tu_rng_normal(&r);
    for (size_t i = 0; i < sizeof v / 4; ++i) v[i] = (float)tu_rng_normal(&r);
    for (int i = 0; i < 4; ++i) sinks[i] = (float)tu_rng_normal(&r);
    save("sq.npy", q, 4, (int64_t[]){2, 4, 3, 8});
    save("sk.npy", k, 4, (int64_t[]){2, 2, 10, 8});
    save("sv.npy", v, 4, (int64_t[]){2, 2, 10, 5});
    save("ss.npy", sinks, 1, (int64_t[]){4});
    const char *common = "decode\x1f--query\x1f%s\x1f--key-cache\x1f%s\x1f--value-cache\x1f%s"
                         "\x1f--kv-len\x1f" "7,10\x1f--out\x1f%s%s";
    clirun_result res;
    char extra[600];
    snprintf(extra, sizeof extra, "\x1f--sinks\x1f%s", path("ss.npy"));
    char fmt[1200];
    snprintf(fmt, sizeof fmt, "%s%s", common, extra);
    clirunf(&res, fmt, path("sq.npy"), path("sk.npy"), path("sv.npy"), path("so.npy"),
            "\x1f--cache-dtype\x1fint8\x1f--rope\x1fneox\x1f--rotary-dim\x1f" "4\x1f--window\x1f" "3,0"
            "\x1f--softcap\x1f" "5\x1f--alibi-slopes\x1fgeometric\x1f--causal");
    const int64_t lens[2] = {7, 10};
    if (tu_check(&g, res.status == 0, "decode with the serving options: exit %d: %s", res.status, res.err))
        tu_check(&g, expected_serving(q, k, v, lens, sinks, o) && file_equals("so.npy", o, 120),
                 "decode with the serving options: output differs from the library's");
    clirun_free(&res);
    /* bare --causal = --causal bottom-right */
    clirunf(&res, common, path("sq.npy"), path("sk.npy"), path("sv.npy"), path("c1.npy"), "\x1f--causal");
    clirun_free(&res);
    clirunf(&res, common, path("sq.npy"), path("sk.npy"), path("sv.npy"), path("c2.npy"),
            "\x1f--causal\x1f" "bottom-right");
    clirun_free(&res);
    attn_array c1;
    if (tu_check(&g, attn_npy_read(path("c1.npy"), &c1, NULL) == ATTN_OK, "read c1.npy")) {
        tu_check(&g, file_equals("c2.npy", c1.t.data, 120), "--causal and --causal bottom-right differ");
        attn_array_free(&c1);
    }
    clirunf(&res, common, path("sq.npy"), path("sk.npy"), path("sv.npy"), path("bad.npy"), "\x1f--causal\x1ftop-left");
    tu_check(&g, res.status == 2 && strstr(res.err, "--causal top-left"), "--causal top-left: exit %d, '%s'", res.status, res.err);
    clirun_free(&res);
    clirunf(&res, common, path("sq.npy"), path("sk.npy"), path("sv.npy"), path("bad.npy"), "\x1f--cache-dtype\x1fint4");
    tu_check(&g, res.status == 2 && strstr(res.err, "--cache-dtype"), "--cache-dtype int4: exit %d, '%s'", res.status, res.err);
    clirun_free(&res);
    clirunf(&res, "decode\x1f--help");
    tu_check(&g, res.status == 0 && !strstr(res.out, "%%") && strstr(res.out, "Hq % Hkv"), "decode --help: '%s'", res.out);
    clirun_free(&res);
    tu_group_end(&g);
}

static void expect_usage(tu_group *g, const char *what, const char *needle, const char *args)
{
    clirun_result res;
    char fmt[1024];
    snprintf(fmt, sizeof fmt, "decode\x1f--query\x1f%s\x1f--key-cache\x1f%s\x1f--value-cache\x1f%s%s",
             path("q.npy"), path("k.npy"), path("v.npy"), args);
    clirunf(&res, "%s", fmt);
    tu_check(g, res.status == 2 && strstr(res.err, needle) && clirun_count_lines(res.err) == 1 &&
                    access(path("bad.npy"), F_OK) != 0,
             "%s: exit %d (want 2), stderr '%s' (want one line with '%s')", what, res.status,
             res.err, needle);
    clirun_free(&res);
}

static void group_errors(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "errors");
    char buf[512];
    snprintf(buf, sizeof buf, "\x1f--kv-len\x1f" "7,11\x1f--out\x1f%s", path("bad.npy"));
    expect_usage(&g, "length beyond the cache", "--kv-len: entry 1 has length 11", buf);
    snprintf(buf, sizeof buf, "\x1f--kv-len\x1f" "1,2,3\x1f--out\x1f%s", path("bad.npy"));
    expect_usage(&g, "three lengths", "--kv-len: more than 2 values", buf);
    snprintf(buf, sizeof buf, "\x1f--kv-len\x1f" "x\x1f--out\x1f%s", path("bad.npy"));
    expect_usage(&g, "not a number", "--kv-len: expected integers from 0", buf);
    static const char *const empty_fields[] = {"5,", ",5", "5,,6"};
    for (int i = 0; i < 3; ++i) {
        snprintf(buf, sizeof buf, "\x1f--kv-len\x1f%s\x1f--out\x1f%s", empty_fields[i],
                 path("bad.npy"));
        expect_usage(&g, empty_fields[i], "(no empty fields)", buf);
    }
    FILE *f = fopen(path("badlens.txt"), "w");
    fputs("4 five\n", f);
    fclose(f);
    snprintf(buf, sizeof buf, "\x1f--kv-lens\x1f%s\x1f--out\x1f%s", path("badlens.txt"), path("bad.npy"));
    expect_usage(&g, "bad lengths file", "--kv-lens: expected non-negative integers", buf);
    snprintf(buf, sizeof buf, "\x1f--kv-lens\x1f%s\x1f--out\x1f%s", path("missing.txt"), path("bad.npy"));
    expect_usage(&g, "missing lengths file", "--kv-lens", buf);
    expect_usage(&g, "no --out", "--out", "");
    snprintf(buf, sizeof buf, "\x1f--block-size\x1f" "0\x1f--out\x1f%s", path("bad.npy"));
    expect_usage(&g, "block size 0", "--block-size", buf);
    /* a key cache whose feature size differs from the query's */
    clirun_result res;
    float k[2 * 2 * 10 * 4] = {0};
    save("k4.npy", k, 4, (int64_t[]){2, 2, 10, 4});
    clirunf(&res, "decode\x1f--query\x1f%s\x1f--key-cache\x1f%s\x1f--value-cache\x1f%s\x1f--out\x1f%s",
            path("q.npy"), path("k4.npy"), path("v.npy"), path("bad.npy"));
    tu_check(&g, res.status == 2 && strstr(res.err, "--key-cache") && access(path("bad.npy"), F_OK) != 0,
             "feature mismatch: exit %d, stderr '%s'", res.status, res.err);
    clirun_free(&res);
    tu_group_end(&g);
}

static void group_bench(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "bench");
    clirun_result res;
    clirunf(&res, "bench\x1f--mode\x1f" "decode\x1f--kv-seq\x1f" "300\x1f--heads\x1f" "4\x1f"
                  "--kv-heads\x1f" "2\x1f--dim\x1f" "32\x1f--runs\x1f" "1\x1f--warmup\x1f" "0\x1f--stream-mib\x1f" "8");
    tu_check(&g, res.status == 0 && strstr(res.out, "K/V") && strstr(res.out, "stream read"),
             "bench --mode decode: exit %d, out '%s' err '%s'", res.status, res.out, res.err);
    clirun_free(&res);
    clirunf(&res, "bench\x1f--mode\x1f" "decode\x1f--kv-seq\x1f" "300\x1f--heads\x1f" "2\x1f"
                  "--dim\x1f" "16\x1f--block-size\x1f" "16\x1f--runs\x1f" "1\x1f--json\x1f--stream-mib\x1f" "8");
    tu_check(&g, res.status == 0 && strstr(res.out, "\"kv_gbs\"") && strstr(res.out, "\"paged\""),
             "bench --mode decode --json: exit %d, out '%s' err '%s'", res.status, res.out, res.err);
    clirun_free(&res);
    clirunf(&res, "bench\x1f--mode\x1f" "varlen\x1f--seq-lens\x1f" "16,40,3\x1f--heads\x1f" "2\x1f"
                  "--runs\x1f" "1\x1f--causal");
    tu_check(&g, res.status == 0 && strstr(res.out, "ratio"),
             "bench --mode varlen: exit %d, out '%s' err '%s'", res.status, res.out, res.err);
    clirun_free(&res);
    clirunf(&res, "bench\x1f--mode\x1f" "decode\x1f--kv-seq\x1f" "100\x1f--heads\x1f" "4\x1f--kv-heads\x1f" "2\x1f"
                  "--dim\x1f" "32\x1f--runs\x1f" "1\x1f--cache-dtype\x1f" "f32,int8,fp8\x1f--stream-mib\x1f" "8");
    tu_check(&g, res.status == 0 && strstr(res.out, "int8") && strstr(res.out, "fp8") && strstr(res.out, "err max") &&
                     strstr(res.out, "LLC"),
             "bench --mode decode --cache-dtype: exit %d, out '%s' err '%s'", res.status, res.out, res.err);
    clirun_free(&res);
    /* a storage on its own path: attn_sdpa's beside the decode kernel's, in turn in one run */
    clirunf(&res, "bench\x1f--mode\x1f" "decode\x1f--kv-seq\x1f" "600\x1f--heads\x1f" "4\x1f--kv-heads\x1f" "2\x1f"
                  "--dim\x1f" "32\x1f--runs\x1f" "1\x1f--cache-dtype\x1f" "bf16,bf16:fused\x1f--stream-mib\x1f" "8\x1f--json");
    tu_check(&g, res.status == 0 && strstr(res.out, "\"cache_dtype\":\"bf16\"") &&
                     strstr(res.out, "\"cache_dtype\":\"bf16:fused\""),
             "bench --cache-dtype bf16,bf16:fused: exit %d, out '%s' err '%s'", res.status, res.out, res.err);
    clirun_free(&res);
    /* without f32 among the storages the errors are still against a float32
     * cache: finite, and the same figures as with f32 listed */
    char with_f32[256] = "", without_f32[256] = "";
    clirunf(&res, "bench\x1f--mode\x1f" "decode\x1f--kv-seq\x1f" "100\x1f--heads\x1f" "4\x1f--kv-heads\x1f" "2\x1f"
                  "--dim\x1f" "32\x1f--runs\x1f" "1\x1f--cache-dtype\x1f" "f32,int8\x1f--stream-mib\x1f" "8\x1f--json");
    const char *e = strstr(res.out, "\"cache_dtype\":\"int8\"");
    if (e && (e = strstr(e, "\"err_max\""))) snprintf(with_f32, sizeof with_f32, "%.40s", e);
    clirun_free(&res);
    clirunf(&res, "bench\x1f--mode\x1f" "decode\x1f--kv-seq\x1f" "100\x1f--heads\x1f" "4\x1f--kv-heads\x1f" "2\x1f"
                  "--dim\x1f" "32\x1f--runs\x1f" "1\x1f--cache-dtype\x1f" "int8\x1f--stream-mib\x1f" "8\x1f--json");
    if ((e = strstr(res.out, "\"err_max\""))) snprintf(without_f32, sizeof without_f32, "%.40s", e);
    tu_check(&g, res.status == 0 && *with_f32 && !strstr(res.out, "nan") && !strcmp(with_f32, without_f32),
             "bench --cache-dtype int8 (no f32): errors '%s' against '%s' with f32; exit %d, out '%s'",
             without_f32, with_f32, res.status, res.out);
    clirun_free(&res);
    clirunf(&res, "bench\x1f--mode\x1f" "decode\x1f--cache-dtype\x1f" "q4");
    tu_check(&g, res.status == 2 && strstr(res.err, "--cache-dtype"), "bench --cache-dtype q4");
    clirun_free(&res);
    clirunf(&res, "bench\x1f--mode\x1f" "forward\x1f--block-size\x1f" "4");
    tu_check(&g, res.status == 2 && strstr(res.err, "--block-size"), "--block-size outside decode");
    clirun_free(&res);
    tu_group_end(&g);
}

int main(int argc, char **argv)
{
    tu_prefer_passive_openmp(argv);
    tu_options opt;
    if (!tu_parse_options(argc, argv, 1, &opt)) return 2;
    dir = tu_scratch_dir("decode-cli");
    tu_suite s = {0};
    if (tu_group_selected(&opt, "decode")) group_decode(&s);
    if (tu_group_selected(&opt, "errors")) group_errors(&s);
    if (tu_group_selected(&opt, "serving")) group_serving(&s);
    if (tu_group_selected(&opt, "bench")) group_bench(&s);
    return tu_suite_finish(&s);
}
