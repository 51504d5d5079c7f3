/* Every surface agrees: every command (from `attn --help`) has --help; the
 * options several commands share are shown the same way in each command's
 * help (read back from --help) and parse the same way: one bad value gets
 * the same one-line error everywhere, good values are accepted everywhere,
 * and a bare --causal means the command's natural alignment. */
#include "clirun.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_COMMANDS 32
#define MAX_OPTIONS 64

typedef struct {
    char name[32];
    int count;
    char option[MAX_OPTIONS][32];
    char metavar[MAX_OPTIONS][32]; /* "" for a flag */
    char help[MAX_OPTIONS][128];
} command_help;

/* The option lines of `attn NAME --help`: "  --name METAVAR    help", the
 * left column 26 wide (longer ones are skipped: none is shared). */
static bool read_help(const char *name, command_help *h, tu_group *g)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%.31s", name);
    const char *args[4] = {buf, "--help", NULL, NULL};
    char *space = strchr(buf, ' '); /* "ring bench" */
    if (space) *space = '\0', args[1] = space + 1, args[2] = "--help";
    clirun_result r;
    bool ran = clirun(ATTN_CLI, args, &r);
    char usage[64];
    snprintf(usage, sizeof usage, "usage: attn %.31s ", name);
    bool ok = tu_check(g, ran && r.status == 0 && !strncmp(r.out, usage, strlen(usage)) &&
                              strstr(r.out, "  --help "),
                       "attn %s --help: status %d, out: %.200s", name, r.status, r.out);
    memset(h, 0, sizeof *h);
    snprintf(h->name, sizeof h->name, "%.31s", name);
    for (char *line = r.out; ok && line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, "  --", 4) != 0 || h->count == MAX_OPTIONS) continue;
        const size_t len = strcspn(line, "\n");
        if (len < 30 || line[28] != ' ') continue; /* a left column of 26 or more */
        char left[32];
        snprintf(left, sizeof left, "%.26s", line + 2);
        char *sp = strchr(left, ' ');
        if (sp) *sp = '\0';
        snprintf(h->option[h->count], 32, "%.31s", left);
        if (sp) {
            char *mv = sp + 1;
            while (*mv == ' ') mv++;
            char *end = mv + strcspn(mv, " ");
            *end = '\0';
            snprintf(h->metavar[h->count], 32, "%.31s", mv);
        }
        snprintf(h->help[h->count], 128, "%.*s", (int)(len - 29 < 127 ? len - 29 : 127), line + 29);
        h->count++;
    }
    clirun_free(&r);
    return ok;
}

static int find(const command_help *h, const char *option)
{
    for (int i = 0; i < h->count; ++i)
        if (!strcmp(h->option[i], option)) return i;
    return -1;
}

/* Minimal arguments that run each command (files made in main), or
 * that get far enough to parse every option (ring: no MPI launcher). */
typedef struct {
    const char *name;
    const char *args[16];
    bool runs; /* good values are run to the end */
} command_args;

static const command_args minimal[] = {
    {"sdpa", {"--query", "q.npy", "--key", "k.npy", "--value", "k.npy", "--out", "o.npy"}, true},
    {"sdpa-backward",
     {"--query", "q.npy", "--key", "k.npy", "--value", "k.npy", "--grad-out", "q.npy",
      "--grad-query", "dq.npy"},
     true},
    {"mha", {"--params", "p.safetensors", "--num-heads", "2", "--query", "x.npy", "--out", "y.npy"},
     true},
    {"mha-backward",
     {"--params", "p.safetensors", "--num-heads", "2", "--query", "x.npy", "--grad-out", "x.npy",
      "--grads", "g.safetensors"},
     true},
    {"decode",
     {"--query", "q.npy", "--key-cache", "k.npy", "--value-cache", "k.npy", "--out", "o.npy"},
     true},
    {"bench", {"--seq", "8", "--head-dim", "8", "--heads", "2", "--runs", "1", "--warmup", "0"},
     true},
    {"explain", {"--x", "1,2,3;3,3,2", "--weights", ATTN_SOURCE_DIR "/examples/numpy_seed42.safetensors"},
     true},
    {"heatmap",
     {"--x", "1,2,3;3,3,2", "--weights", ATTN_SOURCE_DIR "/examples/numpy_seed42.safetensors",
      "--out", "h.svg"},
     true},
    {"train", {"--steps", "1", "--quiet", "--heldout", "4"}, true},
    {"heads", {"missing.safetensors"}, false},
    {"ring", {"--query", "q.npy", "--key", "k.npy", "--value", "k.npy", "--out", "o.npy"}, false},
    {"ring bench", {"--seq", "8"}, false},
};

static const command_args *minimal_for(const char *name)
{
    for (size_t i = 0; i < sizeof minimal / sizeof minimal[0]; ++i)
        if (!strcmp(minimal[i].name, name)) return &minimal[i];
    return NULL;
}

/* One shared option: its metavar, a bad value and the error every command
 * gives for it, good values every command accepts. */
typedef struct {
    const char *option, *metavar, *bad, *error;
    const char *good[3];
} shared_option;

static const shared_option shared[] = {
    {"--causal", "[ALIGN]", "sideways", "--causal: expected top-left or bottom-right", {"", "top-left", "bottom-right"}},
    {"--threads", "N", "0", "--threads: expected an integer from 1 to 1024", {"1", "2"}},
    {"--scale", "S", "-1", "--scale: must be a positive number", {"0.5"}},
    {"--window", "L,R", "3", "--window: expected L,R", {"1,0", "-1,-1"}},
    {"--dtype", "T", "f64", "--dtype: expected f32, bf16 or f16", {"f32", "bf16", "f16"}},
    {"--attn-mask", "M.npy", "mi.npy", "an integer mask (|i1): masks must be bool or float", {NULL}},
    {"--key-padding-mask", NULL, "kpmi.npy", "an integer mask (|i1): masks must be bool or float", {NULL}},
};

/* argv: the command's words, its minimal arguments, then option [value]. */
static int run(const char *command, const command_args *m, const char *option, const char *value,
               clirun_result *r)
{
    const char *args[40];
    char buf[64];
    snprintf(buf, sizeof buf, "%.31s", command);
    int n = 0;
    char *space = strchr(buf, ' ');
    if (space) *space = '\0';
    args[n++] = buf;
    if (space) args[n++] = space + 1;
    for (int i = 0; m->args[i]; ++i) args[n++] = m->args[i];
    if (option) args[n++] = option;
    if (value && *value) args[n++] = value;
    args[n] = NULL;
    /* OpenMPI leaks by design at MPI_Finalize: under ASan, `attn ring` is
     * checked for memory errors but not leaks (as tests/mpi does) */
    const bool ring = !strcmp(buf, "ring");
    const char *asan = getenv("ASAN_OPTIONS");
    char saved[256] = "", no_leaks[300];
    if (ring) {
        snprintf(saved, sizeof saved, "%s", asan ? asan : "");
        snprintf(no_leaks, sizeof no_leaks, "%s%sdetect_leaks=0", saved, asan ? ":" : "");
        setenv("ASAN_OPTIONS", no_leaks, 1);
    }
    const int st = clirun(ATTN_CLI, args, r) ? r->status : -1;
    if (ring && asan) setenv("ASAN_OPTIONS", saved, 1);
    else if (ring) unsetenv("ASAN_OPTIONS");
    return st;
}

static bool same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    for (int ca = 0, cb = 0; same && ca != EOF;) {
        ca = fgetc(fa), cb = fgetc(fb);
        same = ca == cb;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

static void write_int8_npy(const char *path, const char *shape, const int8_t *x, size_t n)
{
    char hdr[118];
    int len = snprintf(hdr, sizeof hdr, "{'descr': '|i1', 'fortran_order': False, 'shape': %s, }",
                       shape);
    while (len < 117) hdr[len++] = ' ';
    hdr[117] = '\n';
    FILE *f = fopen(path, "wb");
    fwrite("\x93NUMPY\x01\x00\x76\x00", 1, 10, f);
    fwrite(hdr, 1, 118, f);
    fwrite(x, 1, n, f);
    fclose(f);
}

int main(int argc, char **argv)
{
    tu_options opt;
    if (!tu_parse_options(argc, argv, 1, &opt)) return 2;
    tu_scratch_dir("consistency");
    /* q (2,3,4) against k = v (2,5,4): Nq != Nk, so the alignments differ */
    float q[24], k[40], x[24];
    for (int i = 0; i < 24; ++i) q[i] = (float)((i * 7) % 11) / 5.0f - 1.0f;
    for (int i = 0; i < 40; ++i) k[i] = (float)((i * 5) % 13) / 6.0f - 1.0f;
    for (int i = 0; i < 24; ++i) x[i] = (float)((i * 3) % 7) / 3.0f - 1.0f;
    attn_tensor tq = attn_tensor_3d(q, 2, 3, 4), tk = attn_tensor_3d(k, 2, 5, 4),
                tx = attn_tensor_3d(x, 2, 3, 4);
    attn_npy_write("q.npy", &tq, NULL);
    attn_npy_write("k.npy", &tk, NULL);
    attn_npy_write("x.npy", &tx, NULL);
    const int8_t ones[15] = {1, 0, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 0, 1, 1};
    write_int8_npy("mi.npy", "(3, 5)", ones, 15);
    write_int8_npy("kpmi.npy", "(2, 3)", ones, 6);
    attn_mha_config cfg = {.embed_dim = 4, .num_heads = 2, .bias = true};
    attn_mha *m = NULL;
    attn_mha_create(&cfg, &m, NULL);
    attn_mha_init(m, 5);
    const char *names[8];
    attn_tensor ts[8];
    const int np = attn_mha_num_params(m);
    for (int i = 0; i < np && i < 8; ++i) attn_mha_param_at(m, i, &names[i], &ts[i], NULL);
    attn_safetensors_write("p.safetensors", names, ts, (size_t)np, NULL);
    attn_mha_free(m);

    tu_suite s = {0};
    tu_group g;

    /* every command, from the top-level help */
    tu_group_begin(&g, &s, "every command has --help");
    clirun_result top;
    const char *targs[] = {"--help", NULL};
    clirun(ATTN_CLI, targs, &top);
    char commands[MAX_COMMANDS][32];
    int ncommands = 0;
    const char *at = strstr(top.out, "commands:\n");
    for (at = at ? strchr(at, '\n') + 1 : NULL; at && !strncmp(at, "  ", 2) && at[2] != ' ' &&
                                                ncommands < MAX_COMMANDS - 1;
         at = strchr(at, '\n') + 1) {
        sscanf(at + 2, "%31s", commands[ncommands]);
        if (!strcmp(commands[ncommands], "ring")) /* and its sub-command */
            snprintf(commands[++ncommands], 32, "ring bench");
        ncommands++;
    }
    clirun_free(&top);
    tu_check(&g, ncommands >= 12, "attn --help lists %d commands", ncommands);
    static command_help helps[MAX_COMMANDS];
    for (int i = 0; i < ncommands; ++i) read_help(commands[i], &helps[i], &g);
    clirun_result hh;
    const char *hargs[] = {"help", "--help", NULL};
    clirun(ATTN_CLI, hargs, &hh);
    tu_check(&g, hh.status == 0 && strstr(hh.out, "usage: attn COMMAND"), "attn help --help: %d",
             hh.status);
    clirun_free(&hh);
    tu_group_end(&g);

    tu_group_begin(&g, &s, "shared options shown alike in every --help");
    for (size_t o = 0; o < sizeof shared / sizeof shared[0]; ++o)
        for (int c = 0; c < ncommands; ++c) {
            const int i = find(&helps[c], shared[o].option);
            if (i < 0 || !shared[o].metavar) continue;
            tu_check(&g, !strcmp(helps[c].metavar[i], shared[o].metavar),
                     "attn %s: %s %s, elsewhere %s %s", helps[c].name, shared[o].option,
                     helps[c].metavar[i], shared[o].option, shared[o].metavar);
        }
    for (int c = 0; c < ncommands; ++c) { /* torch's key_padding_mask everywhere */
        const int i = find(&helps[c], "--key-padding-mask");
        if (i >= 0)
            tu_check(&g, strstr(helps[c].help[i], "true = ignore") != NULL,
                     "attn %s --key-padding-mask: %s", helps[c].name, helps[c].help[i]);
    }
    tu_group_end(&g);

    tu_group_begin(&g, &s, "shared options parse alike in every command");
    for (int c = 0; c < ncommands; ++c) {
        const command_args *ma = minimal_for(helps[c].name);
        for (size_t o = 0; o < sizeof shared / sizeof shared[0]; ++o) {
            if (find(&helps[c], shared[o].option) < 0) continue;
            if (!tu_check(&g, ma != NULL, "attn %s has %s but no row in the test's table",
                          helps[c].name, shared[o].option))
                continue;
            clirun_result r;
            int st = run(helps[c].name, ma, shared[o].option, shared[o].bad, &r);
            tu_check(&g, st == 2 && strstr(r.err, shared[o].error) && clirun_count_lines(r.err) == 1,
                     "attn %s %s %s: status %d, stderr: %s", helps[c].name, shared[o].option,
                     shared[o].bad, st, r.err);
            clirun_free(&r);
            for (int v = 0; ma->runs && v < 3 && shared[o].good[v]; ++v) {
                if (!strcmp(helps[c].name, "decode") && !strcmp(shared[o].good[v], "top-left"))
                    continue; /* refused: the cache's new tokens align bottom-right */
                st = run(helps[c].name, ma, shared[o].option, shared[o].good[v], &r);
                tu_check(&g, st == 0,
                         "attn %s %s %s: status %d, stderr: %s", helps[c].name, shared[o].option,
                         shared[o].good[v], st, r.err);
                clirun_free(&r);
            }
        }
    }
    tu_group_end(&g);

    /* the bare flag is the natural alignment; the value form is honoured */
    tu_group_begin(&g, &s, "--causal: bare = the command's natural alignment");
    struct {
        const char *command, *natural, *other, *out;
    } aligned[] = {
        {"sdpa", "top-left", "bottom-right", "o.npy"},
        {"mha", "top-left", NULL, "y.npy"},
        {"decode", "bottom-right", NULL, "o.npy"}, /* the cache aligns bottom-right */
    };
    for (size_t i = 0; i < sizeof aligned / sizeof aligned[0]; ++i) {
        const command_args *ma = minimal_for(aligned[i].command);
        clirun_result r;
        char bare[32], nat[32];
        snprintf(bare, sizeof bare, "bare_%.20s", aligned[i].out);
        snprintf(nat, sizeof nat, "nat_%.20s", aligned[i].out);
        int st = run(aligned[i].command, ma, "--causal", "", &r);
        clirun_free(&r);
        rename(aligned[i].out, bare);
        int st2 = run(aligned[i].command, ma, "--causal", aligned[i].natural, &r);
        clirun_free(&r);
        rename(aligned[i].out, nat);
        tu_check(&g, st == 0 && st2 == 0 && same_file(bare, nat),
                 "attn %s: --causal and --causal %s differ (status %d, %d)", aligned[i].command,
                 aligned[i].natural, st, st2);
        if (aligned[i].other) {
            st2 = run(aligned[i].command, ma, "--causal", aligned[i].other, &r);
            clirun_free(&r);
            tu_check(&g, st2 == 0 && !same_file(bare, aligned[i].out),
                     "attn %s: --causal %s is the same as %s with Nq != Nk", aligned[i].command,
                     aligned[i].other, aligned[i].natural);
        }
    }
    tu_group_end(&g);
    return tu_suite_finish(&s);
}
