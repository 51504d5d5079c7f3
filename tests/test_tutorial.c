/*
 * docs/TUTORIAL.md promises that every number in it is printed by attn.
 * This test keeps that promise: it runs the command of every ```console
 * block and checks that the block shows exactly its output, that the
 * pictures the commands write are byte-identical to the ones committed
 * under docs/img, and that every picture the tutorial embeds is well-formed.
 *
 * A block shows the whole output, or the lines a preceding
 *     <!-- attn-tutorial: keep 1-13,80-86 -->
 * selects (1-based, inclusive), with "[...]" where lines are left out.
 *
 *     test_tutorial --update   rewrites the blocks and docs/img from attn's
 *                              current output (after a deliberate change).
 */
#include "clirun.h"
#include "testutil.h"
#include "xmlcheck.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_ARGS 64
#define MAX_LINES 8192
#define MAX_FILES 4

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    if (len) *len = (size_t)n;
    return buf;
}

static bool write_all(const char *path, const char *data, size_t len)
{
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return false;
    bool ok = fwrite(data, 1, len, f) == len;
    ok = fclose(f) == 0 && ok;
    if (ok) ok = rename(tmp, path) == 0;
    if (!ok) remove(tmp);
    return ok;
}

/* Splits text into lines in place (a final '\n' gives no empty line). */
static int split_lines(char *text, char **lines, int cap)
{
    int n = 0;
    char *p = text;
    while (*p && n < cap) {
        lines[n++] = p;
        char *nl = strchr(p, '\n');
        if (!nl) break;
        *nl = '\0';
        p = nl + 1;
    }
    return n;
}

/* Shell-like words: blanks separate, "..." and '...' quote, a backslash
 * before a newline continues the line. Returns the count or -1. */
static int shell_words(const char *cmd, char *buf, size_t size, char **words, int cap)
{
    int n = 0;
    size_t w = 0;
    const char *p = cmd;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || (*p == '\\' && p[1] == '\n')) p += *p == '\\' ? 2 : 1;
        if (!*p) return n;
        if (n == cap) return -1;
        words[n++] = buf + w;
        while (*p && *p != ' ' && *p != '\t' && *p != '\n' && !(*p == '\\' && p[1] == '\n')) {
            if (*p == '"' || *p == '\'') {
                char q = *p++;
                while (*p && *p != q) {
                    if (w + 1 >= size) return -1;
                    buf[w++] = *p++;
                }
                if (!*p) return -1;
                ++p;
            } else {
                if (w + 1 >= size) return -1;
                buf[w++] = *p++;
            }
        }
        if (w + 1 >= size) return -1;
        buf[w++] = '\0';
    }
}

/* Replaces every `from` in r->out by `to` (no longer than from). */
static void replace_all(clirun_result *r, const char *from, const char *to)
{
    const size_t lf = strlen(from), lt = strlen(to);
    if (lt > lf || !lf) return;
    char *w = r->out;
    for (const char *p = r->out; *p;) {
        if (!strncmp(p, from, lf)) {
            memmove(w, to, lt);
            w += lt;
            p += lf;
        } else {
            *w++ = *p++;
        }
    }
    *w = '\0';
    r->out_len = (size_t)(w - r->out);
}

/* What the block should show: all lines, or the kept ranges with "[...]"
 * for each gap. Returns the line count or -1 for a bad spec. */
static int expected_lines(const char *spec, char **got, int ngot, const char **out, int cap)
{
    static const char *const gap = "[...]";
    int n = 0;
    if (!spec) {
        for (int i = 0; i < ngot && n < cap; ++i) out[n++] = got[i];
        return n;
    }
    int prev = 0;
    const char *p = spec;
    while (*p) {
        char *end;
        long a = strtol(p, &end, 10), b;
        if (end == p) return -1;
        p = end;
        if (*p == '-') {
            b = strtol(p + 1, &end, 10);
            if (end == p + 1) return -1;
            p = end;
        } else {
            b = a;
        }
        if (a <= prev || b < a || b > ngot) return -1;
        if (a > prev + 1 && n < cap) out[n++] = gap;
        for (long i = a; i <= b && n < cap; ++i) out[n++] = got[i - 1];
        prev = (int)b;
        while (*p == ',' || *p == ' ') ++p;
    }
    if (prev < ngot && n < cap) out[n++] = gap;
    return n;
}

/* The new document is built here when updating. */
typedef struct {
    char *data;
    size_t len, cap;
} text_buf;

static void put(text_buf *t, const char *line)
{
    size_t n = strlen(line);
    if (t->len + n + 2 > t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 1 << 16;
        while (cap < t->len + n + 2) cap *= 2;
        char *d = realloc(t->data, cap);
        if (!d) abort(); /* a test helper: out of memory ends the run */
        t->data = d;
        t->cap = cap;
    }
    memcpy(t->data + t->len, line, n);
    t->len += n;
    t->data[t->len++] = '\n';
}

int main(int argc, char **argv)
{
    bool update = false;
    for (int i = 1; i < argc; ++i)
        if (!strcmp(argv[i], "--update")) {
            update = true;
            for (int k = i; k + 1 < argc; ++k) argv[k] = argv[k + 1];
            --argc;
            break;
        }
    tu_options opt;
    if (!tu_parse_options(argc, argv, 1, &opt)) return 2;
    tu_suite suite = {.verbose = opt.verbose};
    tu_group g;
    if (chdir(ATTN_SOURCE_DIR) != 0) {
        perror(ATTN_SOURCE_DIR);
        return 1;
    }
    size_t len;
    char *doc = read_all("docs/TUTORIAL.md", &len);
    char dir[] = "/tmp/attn-test-tutorial-XXXXXX";
    if (!doc || !mkdtemp(dir)) {
        fprintf(stderr, "cannot read docs/TUTORIAL.md or make a temporary directory\n");
        return 1;
    }
    static char *lines[MAX_LINES];
    char *copy = malloc(len + 1);
    memcpy(copy, doc, len + 1);
    const int n = split_lines(copy, lines, MAX_LINES);
    text_buf fresh = {0};

    tu_group_begin(&g, &suite, "console blocks show what attn prints");
    int blocks = 0;
    for (int i = 0; i < n; ++i) {
        if (strcmp(lines[i], "```console")) {
            put(&fresh, lines[i]);
            continue;
        }
        put(&fresh, lines[i]);
        const char *keep = NULL;
        char spec[256] = "";
        if (i > 0 && sscanf(lines[i - 1], "<!-- attn-tutorial: keep %255[0-9,-] -->", spec) == 1) keep = spec;
        const int start = ++i;
        char cmd[8192] = "";
        size_t cl = 0;
        /* "$ attn ..." and its continuation lines (ending in a backslash) */
        while (i < n && (i == start ? !strncmp(lines[i], "$ ", 2)
                                    : strlen(lines[i - 1]) && lines[i - 1][strlen(lines[i - 1]) - 1] == '\\')) {
            cl += (size_t)snprintf(cmd + cl, sizeof cmd - cl, "%s\n", i == start ? lines[i] + 2 : lines[i]);
            put(&fresh, lines[i]);
            ++i;
        }
        const int out_start = i;
        while (i < n && strcmp(lines[i], "```")) ++i;
        const int nshown = i - out_start;
        ++blocks;
        static char words_buf[8192];
        char *words[MAX_ARGS + 1];
        int nw = shell_words(cmd, words_buf, sizeof words_buf, words, MAX_ARGS);
        if (!tu_check(&g, nw > 1 && !strcmp(words[0], "attn"), "line %d: not an attn command: %s", start, cmd)) {
            for (int k = out_start; k <= i && k < n; ++k) put(&fresh, lines[k]);
            continue;
        }
        /* Quick mode (qemu, the sanitizers) leaves out the scaling experiment:
         * 139 million normal draws in double precision, which emulation runs
         * about 20 times slower (80 s of the suite's 85 under qemu-aarch64),
         * and no kernel work beyond 16-key softmaxes; test_scaling runs the
         * same command at smaller sizes there. */
        if (opt.quick && !update && !strcmp(words[1], "scaling") && !strstr(cmd, "--scores")) {
            printf("quick mode: the block at line %d (%s) is left out\n", start, words[1]);
            for (int k = out_start; k <= i && k < n; ++k) put(&fresh, lines[k]);
            continue;
        }
        /* pictures go to the temporary directory, then are compared with docs/img */
        char written[MAX_FILES][1024], committed[MAX_FILES][1024];
        int nfiles = 0;
        for (int k = 1; k + 1 < nw; ++k)
            if ((!strcmp(words[k], "--out") || !strcmp(words[k], "--svg")) && nfiles < MAX_FILES) {
                const char *base = strrchr(words[k + 1], '/');
                snprintf(committed[nfiles], sizeof committed[0], "%s", words[k + 1]);
                snprintf(written[nfiles], sizeof written[0], "%s/%s", dir, base ? base + 1 : words[k + 1]);
                words[k + 1] = written[nfiles++];
            }
        words[nw] = NULL;
        clirun_result r;
        clirun(ATTN_CLI, (const char *const *)(words + 1), &r);
        bool ran = tu_check(&g, r.status == 0, "line %d: %s: status %d: %s", start, cmd, r.status, r.err);
        /* the output names the tutorial's paths, not the temporary ones */
        for (int f = 0; f < nfiles; ++f) replace_all(&r, written[f], committed[f]);
        static char *got[MAX_LINES];
        static const char *want[MAX_LINES];
        size_t ol = strlen(r.out);
        if (ol && r.out[ol - 1] == '\n') r.out[ol - 1] = '\0';
        const int ngot = split_lines(r.out, got, MAX_LINES);
        const int nwant = ran ? expected_lines(keep, got, ngot, want, MAX_LINES) : -1;
        if (ran && tu_check(&g, nwant >= 0, "line %d: bad keep spec '%s' for %d lines of output", start,
                            keep ? keep : "", ngot)) {
            int diff = 0;
            while (diff < nwant && diff < nshown && !strcmp(want[diff], lines[out_start + diff])) ++diff;
            bool same = diff == nwant && nwant == nshown;
            if (!update)
                tu_check(&g, same, "line %d: the block differs at its line %d: shows '%s', attn prints '%s' "
                                   "(tests/test_tutorial --update rewrites it)",
                         start, out_start + diff + 1, diff < nshown ? lines[out_start + diff] : "(nothing)",
                         diff < nwant ? want[diff] : "(nothing)");
            if (update)
                for (int k = 0; k < nwant; ++k) put(&fresh, want[k]);
        }
        if (update && !(ran && nwant >= 0))
            for (int k = out_start; k < i; ++k) put(&fresh, lines[k]);
        if (i < n) put(&fresh, lines[i]);
        clirun_free(&r);
        for (int f = 0; f < nfiles; ++f) {
            size_t a, b;
            char *x = read_all(written[f], &a), *y = read_all(committed[f], &b);
            if (update && x) {
                tu_check(&g, write_all(committed[f], x, a), "cannot write %s", committed[f]);
            } else {
                tu_check(&g, x && y && a == b && !memcmp(x, y, a),
                         "%s is out of date: the command at line %d draws a different picture", committed[f],
                         start);
            }
            free(x);
            free(y);
            remove(written[f]);
        }
    }
    tu_check(&g, blocks >= 10, "only %d console blocks found", blocks);
    tu_group_end(&g);

    if (update) {
        bool ok = write_all("docs/TUTORIAL.md", fresh.data, fresh.len);
        printf("%s docs/TUTORIAL.md\n", ok ? "rewrote" : "could not rewrite");
    }

    tu_group_begin(&g, &suite, "embedded pictures are well-formed");
    int images = 0;
    for (const char *p = strstr(doc, "](img/"); p; p = strstr(p + 1, "](img/")) {
        const char *end = strchr(p + 2, ')');
        if (!end || end - (p + 2) >= 400) continue;
        char path[512], err[512];
        snprintf(path, sizeof path, "docs/%.*s", (int)(end - (p + 2)), p + 2);
        tu_check(&g, xml_check_file(path, err, sizeof err), "%s", err);
        ++images;
    }
    tu_check(&g, images >= 3, "only %d pictures embedded", images);
    tu_group_end(&g);
    rmdir(dir);
    free(fresh.data);
    free(copy);
    free(doc);
    return tu_suite_finish(&suite);
}
