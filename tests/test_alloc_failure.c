/* Out of memory at every allocation: for each command, the number N of
 * allocations attn's own code makes is counted, then the command is run N
 * times with allocation k = 1..N failing (tests/failalloc). Every run must
 * end cleanly: exit 0 with the same outputs as a normal run (a failure attn
 * could absorb), or exit 1 with exactly one line naming the shortage, every
 * output file still holding what it held before and no temporary file left.
 * Under ASan (make asan), LeakSanitizer adds "no leak" to every run. */
#include "clirun.h"
#include "testutil.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char OLD[] = "OLD CONTENT\n";

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static char *slurp_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 20;
    char *buf = malloc(cap + 1);
    size_t n = buf ? fread(buf, 1, cap, f) : 0;
    fclose(f);
    if (buf) buf[n] = '\0';
    *len = n;
    return buf;
}

static int temporaries(void)
{
    DIR *d = opendir(".");
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) n += !strncmp(e->d_name, ".attn-", 6);
    closedir(d);
    return n;
}

static void write_inputs(void)
{
    float q[2 * 3 * 4], k[2 * 5 * 4], v[2 * 5 * 4], x[2 * 3 * 4];
    for (int i = 0; i < 24; ++i) q[i] = (float)((i * 7) % 11) / 5.0f - 1.0f;
    for (int i = 0; i < 40; ++i) k[i] = (float)((i * 5) % 13) / 6.0f - 1.0f;
    for (int i = 0; i < 40; ++i) v[i] = (float)((i * 3) % 7) / 3.0f - 1.0f;
    for (int i = 0; i < 24; ++i) x[i] = (float)((i * 5) % 9) / 4.0f - 1.0f;
    attn_tensor tq = attn_tensor_3d(q, 2, 3, 4), tk = attn_tensor_3d(k, 2, 5, 4),
                tv = attn_tensor_3d(v, 2, 5, 4), tx = attn_tensor_3d(x, 2, 3, 4);
    attn_npy_write("q.npy", &tq, NULL);
    attn_npy_write("k.npy", &tk, NULL);
    attn_npy_write("v.npy", &tv, NULL);
    attn_npy_write("x.npy", &tx, NULL);
    attn_mha_config cfg = {.embed_dim = 4, .num_heads = 2, .bias = true};
    attn_mha *m = NULL;
    if (attn_mha_create(&cfg, &m, NULL) != ATTN_OK) return;
    attn_mha_init(m, 3);
    const char *names[8];
    attn_tensor ts[8];
    int n = attn_mha_num_params(m);
    for (int i = 0; i < n; ++i) attn_mha_param_at(m, i, &names[i], &ts[i], NULL);
    attn_safetensors_write("p.safetensors", names, ts, (size_t)n, NULL);
    attn_mha_free(m);
}

typedef struct {
    const char *name;
    const char *args[28];
    const char *outputs[4]; /* files the command writes */
    bool query_from_stdin;  /* --query - through a pipe */
} alloc_case;

static const alloc_case cases[] = {
    {"sdpa", {"sdpa", "--query", "q.npy", "--key", "k.npy", "--value", "v.npy", "--out", "o.npy",
              "--lse", "l.npy", "--attn-weights", "w.npy", NULL},
     {"o.npy", "l.npy", "w.npy"}, false},
    {"sdpa, query from a pipe", {"sdpa", "--query", "-", "--key", "k.npy", "--value", "v.npy",
                                 "--causal", "bottom-right", "--out", "o.npy", NULL},
     {"o.npy"}, true},
    {"sdpa-backward", {"sdpa-backward", "--query", "q.npy", "--key", "k.npy", "--value", "v.npy",
                       "--grad-out", "q.npy", "--grad-query", "dq.npy", "--grad-key", "dk.npy",
                       "--grad-value", "dv.npy", "--lse", "l.npy", NULL},
     {"dq.npy", "dk.npy", "dv.npy", "l.npy"}, false},
    {"mha", {"mha", "--params", "p.safetensors", "--num-heads", "2", "--query", "x.npy",
             "--out", "y.npy", "--attn-weights", "w.npy", "--per-head", NULL},
     {"y.npy", "w.npy"}, false},
    {"mha-backward", {"mha-backward", "--params", "p.safetensors", "--num-heads", "2", "--query",
                      "x.npy", "--key", "q.npy", "--value", "q.npy", "--causal", "--grad-out",
                      "x.npy", "--grads", "g.safetensors", "--out", "y.npy", NULL},
     {"g.safetensors", "y.npy"}, false},
};

static bool run_case(const alloc_case *c, clirun_result *r)
{
    if (!c->query_from_stdin) return clirun(ATTN_FAILALLOC, c->args, r);
    size_t len = 0;
    char *q = slurp_file("q.npy", &len);
    bool ok = q && clirun_input(ATTN_FAILALLOC, c->args, q, len, r);
    free(q);
    return ok;
}

static void reset_outputs(const alloc_case *c)
{
    for (int i = 0; i < 4 && c->outputs[i]; ++i) put(c->outputs[i], OLD);
}

int main(int argc, char **argv)
{
    tu_options opt;
    if (!tu_parse_options(argc, argv, 1, &opt)) return 2;
    tu_scratch_dir("alloc");
    write_inputs();
    setenv("ATTN_NUM_THREADS", "1", 1); /* one order of allocations */
    tu_suite s = {0};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ++ci) {
        const alloc_case *c = &cases[ci];
        if (!tu_group_selected(&opt, c->name)) continue;
        tu_group g;
        tu_group_begin(&g, &s, c->name);
        /* the reference run: its outputs, and how many allocations it makes */
        reset_outputs(c);
        setenv("ATTN_COUNT_ALLOC", "count.txt", 1);
        unsetenv("ATTN_FAIL_ALLOC");
        clirun_result r;
        run_case(c, &r);
        unsetenv("ATTN_COUNT_ALLOC");
        long total = 0;
        FILE *f = fopen("count.txt", "r");
        if (!f || fscanf(f, "%ld", &total) != 1) total = 0;
        if (f) fclose(f);
        tu_check(&g, r.status == 0 && total > 0, "reference run: status %d, %ld allocations: %s",
                 r.status, total, r.err);
        clirun_free(&r);
        char *want[4] = {0};
        size_t want_len[4] = {0};
        for (int i = 0; i < 4 && c->outputs[i]; ++i)
            want[i] = slurp_file(c->outputs[i], &want_len[i]);

        int absorbed = 0;
        for (long k = 1; k <= total; ++k) {
            reset_outputs(c);
            char kt[32];
            snprintf(kt, sizeof kt, "%ld", k);
            setenv("ATTN_FAIL_ALLOC", kt, 1);
            run_case(c, &r);
            bool clean = true;
            if (r.status == 0) {
                absorbed++;
                for (int i = 0; i < 4 && c->outputs[i]; ++i) {
                    size_t len = 0;
                    char *got = slurp_file(c->outputs[i], &len);
                    clean = clean && got && want[i] && len == want_len[i] &&
                            !memcmp(got, want[i], len);
                    free(got);
                }
                tu_check(&g, clean, "allocation %ld failed, exit 0, but the outputs differ", k);
            } else {
                tu_check(&g, r.status == 1, "allocation %ld: exit status %d, want 1: %s", k,
                         r.status, r.err);
                tu_check(&g, clirun_count_lines(r.err) == 1 && !strncmp(r.err, "attn", 4) &&
                                 (strstr(r.err, "memory") || strstr(r.err, "allocate")),
                         "allocation %ld: want one line about memory, got: %s", k, r.err);
                for (int i = 0; i < 4 && c->outputs[i]; ++i) {
                    size_t len = 0;
                    char *got = slurp_file(c->outputs[i], &len);
                    tu_check(&g, got && !strcmp(got, OLD), "allocation %ld: %s was changed", k,
                             c->outputs[i]);
                    free(got);
                }
            }
            tu_check(&g, temporaries() == 0, "allocation %ld: temporary files left", k);
            clirun_free(&r);
        }
        tu_group_note(&g, "%ld allocations failed one at a time, %d absorbed", total, absorbed);
        for (int i = 0; i < 4; ++i) free(want[i]);
        tu_group_end(&g);
    }
    return tu_suite_finish(&s);
}
