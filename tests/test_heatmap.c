/*
 * attn heatmap: the SVG is well-formed (strict XML check), every cell holds
 * the weight it should (read back from the data-value attributes and
 * compared with the file the test wrote, or with softmax weights the test
 * computes itself), labels and colours are right, the terminal rendering
 * shows the same numbers, and failures leave no file behind.
 */
#include "clirun.h"
#include "testutil.h"
#include "xmlcheck.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_CELLS 4096
#define MAX_TEXTS 256

/* What the SVG says, collected by the XML callbacks. */
typedef struct {
    int cells;
    int head[MAX_CELLS], query[MAX_CELLS], key[MAX_CELLS];
    double value[MAX_CELLS];
    char fill[MAX_CELLS][8]; /* of the rect inside each cell */
    bool in_cell;
    int texts;
    char text[MAX_TEXTS][128];
    bool in_text;
    int panels;
} svg_facts;

static const char *attr(const xml_attr *a, int n, const char *name)
{
    for (int i = 0; i < n; ++i)
        if (!strcmp(a[i].name, name)) return a[i].value;
    return NULL;
}

static void on_element(void *user, const char *name, const xml_attr *a, int n, int depth)
{
    svg_facts *f = user;
    (void)depth;
    const char *cls = attr(a, n, "class");
    if (!strcmp(name, "g") && cls && !strcmp(cls, "panel")) f->panels++;
    if (!strcmp(name, "g") && cls && !strcmp(cls, "cell") && f->cells < MAX_CELLS) {
        const char *h = attr(a, n, "data-head"), *q = attr(a, n, "data-query"),
                   *k = attr(a, n, "data-key"), *v = attr(a, n, "data-value");
        int c = f->cells++;
        f->head[c] = h ? atoi(h) : -1;
        f->query[c] = q ? atoi(q) : -1;
        f->key[c] = k ? atoi(k) : -1;
        f->value[c] = v ? strtod(v, NULL) : NAN;
        f->fill[c][0] = '\0';
        f->in_cell = true;
    } else if (!strcmp(name, "rect") && f->in_cell) {
        const char *fill = attr(a, n, "fill");
        snprintf(f->fill[f->cells - 1], sizeof f->fill[0], "%s", fill ? fill : "");
        f->in_cell = false;
    }
}

static void on_text(void *user, const char *element, const char *text)
{
    svg_facts *f = user;
    if (!strcmp(element, "text") && f->texts < MAX_TEXTS)
        snprintf(f->text[f->texts++], sizeof f->text[0], "%s", text);
}

static bool has_text(const svg_facts *f, const char *t)
{
    for (int i = 0; i < f->texts; ++i)
        if (!strcmp(f->text[i], t)) return true;
    return false;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, fp) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(fp);
    if (buf) buf[n] = '\0';
    *len = (size_t)n;
    return buf;
}

/* Parses an SVG file strictly; facts may be NULL. */
static bool parse_svg(tu_group *g, const char *path, svg_facts *facts)
{
    size_t len;
    char *text = read_file(path, &len);
    if (!tu_check(g, text != NULL, "%s was not written", path)) return false;
    char err[512];
    bool ok = xml_parse(text, len, facts ? on_element : NULL, facts ? on_text : NULL, facts, err,
                        sizeof err);
    tu_check(g, ok, "%s is not well-formed XML: %s", path, err);
    tu_check(g, strstr(text, "<svg") && strstr(text, "viewBox"), "%s: no <svg> with a viewBox", path);
    free(text);
    return ok;
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* No temporary file (name containing ".tmp") left in dir. */
static bool no_temp_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return false;
    bool clean = true;
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, ".tmp")) clean = false;
    closedir(d);
    return clean;
}

/* Random softmax rows, float32, with an exact 0 and 1 row for the colours. */
static void random_weights(tu_rng *r, float *w, int heads, int nq, int nk)
{
    for (int h = 0; h < heads; ++h)
        for (int i = 0; i < nq; ++i) {
            double z[64], mx = -INFINITY, sum = 0;
            for (int j = 0; j < nk; ++j) {
                z[j] = 1.5 * tu_rng_normal(r);
                if (z[j] > mx) mx = z[j];
            }
            for (int j = 0; j < nk; ++j) sum += exp(z[j] - mx);
            for (int j = 0; j < nk; ++j) w[(h * nq + i) * nk + j] = (float)(exp(z[j] - mx) / sum);
        }
    /* head 0, query 0: one-hot on key 0 */
    for (int j = 0; j < nk; ++j) w[j] = j == 0 ? 1.0f : 0.0f;
}

static bool write_npy(tu_group *g, const char *path, float *w, int ndim, const int64_t *shape)
{
    attn_tensor t = attn_tensor_make(w, ATTN_F32, ndim, shape);
    attn_error err = {0};
    return tu_check(g, attn_npy_write(path, &t, &err) == ATTN_OK, "write %s: %s", path, err.message);
}

/* Every cell of the SVG against want (heads, nq, nk). */
static void check_cells(tu_group *g, const svg_facts *f, const float *want, int heads, int nq, int nk)
{
    if (!tu_check(g, f->cells == heads * nq * nk, "%d cells, want %d", f->cells, heads * nq * nk)) return;
    int bad = 0;
    for (int c = 0; c < f->cells; ++c) {
        int h = f->head[c], i = f->query[c], j = f->key[c];
        if (h < 0 || h >= heads || i < 0 || i >= nq || j < 0 || j >= nk ||
            (float)f->value[c] != want[(h * nq + i) * nk + j]) {
            if (bad++ < 3)
                tu_group_note(g, "cell %d (head %d, query %d, key %d) = %.9g", c, h, i, j, f->value[c]);
        }
    }
    tu_check(g, bad == 0, "%d cells hold the wrong value", bad);
}

static void from_file(tu_suite *suite, tu_rng *rng, const char *dir)
{
    tu_group g;
    tu_group_begin(&g, suite, "weights from .npy");
    enum { H = 2, NQ = 3, NK = 4, B = 2 };
    float w[B * H * NQ * NK];
    random_weights(rng, w, B * H, NQ, NK);
    char npy[1024], out[1024];
    snprintf(npy, sizeof npy, "%s/w3.npy", dir);
    snprintf(out, sizeof out, "%s/w3.svg", dir);
    write_npy(&g, npy, w, 3, (int64_t[]){H, NQ, NK});
    clirun_result r;
    clirunf(&r, "heatmap\x1f--attn-weights\x1f%s\x1f--tokens\x1fk one,k two,k3,k4\x1f--query-tokens\x1f"
                "alpha,beta,gamma\x1f--out\x1f%s",
            npy, out);
    tu_check(&g, r.status == 0, "status %d: %s", r.status, r.err);
    char want_line[1200];
    snprintf(want_line, sizeof want_line, "wrote %s: 2 heads, 3 queries x 4 keys\n", out);
    tu_check(&g, !strcmp(r.out, want_line), "stdout '%s'", r.out);
    tu_check(&g, strstr(r.out, "\x1b[") == NULL, "ANSI colours although stdout is not a terminal");
    clirun_free(&r);
    svg_facts *f = calloc(1, sizeof *f);
    if (parse_svg(&g, out, f)) {
        check_cells(&g, f, w, H, NQ, NK);
        tu_check(&g, f->panels == H, "%d panels, want %d", f->panels, H);
        static const char *const labels[] = {"k one", "k two", "k3", "k4", "alpha", "beta", "gamma",
                                             "head 1", "head 2", "key", "query", "weight"};
        for (size_t i = 0; i < sizeof labels / sizeof *labels; ++i)
            tu_check(&g, has_text(f, labels[i]), "label '%s' missing", labels[i]);
        tu_check(&g, has_text(f, "Attention weights (w3.npy)"), "default title missing");
        /* the colour scale: viridis from #440154 (0) to #fde725 (1), the
         * matplotlib colour map's end points */
        tu_check(&g, !strcmp(f->fill[0], "#fde725") && !strcmp(f->fill[1], "#440154"),
                 "weight 1 drawn %s, weight 0 drawn %s", f->fill[0], f->fill[1]);
        bool labelled_values = has_text(f, "1.00") && has_text(f, "0.00");
        tu_check(&g, labelled_values, "cell values not printed in the cells");
    }
    free(f);

    /* (B, H, Nq, Nk) with --batch 1 */
    snprintf(npy, sizeof npy, "%s/w4.npy", dir);
    snprintf(out, sizeof out, "%s/w4.svg", dir);
    write_npy(&g, npy, w, 4, (int64_t[]){B, H, NQ, NK});
    clirunf(&r, "heatmap\x1f--attn-weights\x1f%s\x1f--batch\x1f" "1\x1f--out\x1f%s\x1f--title\x1f"
                "batch one",
            npy, out);
    tu_check(&g, r.status == 0, "4-D: status %d: %s", r.status, r.err);
    clirun_free(&r);
    f = calloc(1, sizeof *f);
    if (parse_svg(&g, out, f)) {
        check_cells(&g, f, w + H * NQ * NK, H, NQ, NK);
        tu_check(&g, has_text(f, "batch one"), "--title not used");
        tu_check(&g, has_text(f, "0") && has_text(f, "3"), "numeric labels missing");
    }
    free(f);

    /* (Nq, Nk): one panel, no head titles */
    snprintf(npy, sizeof npy, "%s/w2.npy", dir);
    snprintf(out, sizeof out, "%s/w2.svg", dir);
    write_npy(&g, npy, w, 2, (int64_t[]){NQ, NK});
    clirunf(&r, "heatmap\x1f--attn-weights\x1f%s\x1f--out\x1f%s", npy, out);
    tu_check(&g, r.status == 0, "2-D: status %d: %s", r.status, r.err);
    clirun_free(&r);
    f = calloc(1, sizeof *f);
    if (parse_svg(&g, out, f)) {
        check_cells(&g, f, w, 1, NQ, NK);
        tu_check(&g, f->panels == 1 && !has_text(f, "head 1"), "one matrix, one untitled panel");
    }
    free(f);
    tu_group_end(&g);
}

/* Weights computed like attn explain, against softmax computed here. */
static void computed(tu_suite *suite, const char *dir)
{
    tu_group g;
    tu_group_begin(&g, suite, "weights computed from X and W");
    enum { N = 4, E = 4, H = 2, D = 2 };
    const double x[N * E] = {1, 0, 2, -1, 0.5, 1, -1, 0, -2, 1, 0.25, 1, 0, -1, 1, 2};
    const double wq[E * E] = {1, 0, 0.5, 0, 0, 1, 0, -0.5, 0.5, 0, 1, 0, 0, 0.5, 0, 1};
    const double wk[E * E] = {0, 1, 0, 0, 1, 0, 0, 0.5, 0, 0, 1, 0, 0.5, 0, 0, -1};
    float want[H * N * N];
    for (int h = 0; h < H; ++h)
        for (int i = 0; i < N; ++i) {
            double z[N], mx = -INFINITY, sum = 0;
            for (int j = 0; j < N; ++j) {
                double acc = 0;
                for (int t = 0; t < D; ++t) {
                    double q = 0, k = 0;
                    for (int e = 0; e < E; ++e) {
                        q += x[i * E + e] * wq[e * E + h * D + t];
                        k += x[j * E + e] * wk[e * E + h * D + t];
                    }
                    acc += q * k;
                }
                z[j] = j > i ? -INFINITY : acc / sqrt((double)D); /* --causal */
                if (z[j] > mx) mx = z[j];
            }
            for (int j = 0; j < N; ++j) sum += exp(z[j] - mx);
            for (int j = 0; j < N; ++j) want[(h * N + i) * N + j] = (float)(exp(z[j] - mx) / sum);
        }
    char out[1024];
    snprintf(out, sizeof out, "%s/computed.svg", dir);
    clirun_result r;
    clirunf(&r, "heatmap\x1f--x\x1f" "1,0,2,-1;0.5,1,-1,0;-2,1,0.25,1;0,-1,1,2\x1f--wq\x1f"
                "1,0,0.5,0;0,1,0,-0.5;0.5,0,1,0;0,0.5,0,1\x1f--wk\x1f"
                "0,1,0,0;1,0,0,0.5;0,0,1,0;0.5,0,0,-1\x1f--wv\x1f" "1,0,0,0;0,1,0,0;0,0,1,0;0,0,0,1"
                "\x1f--heads\x1f" "2\x1f--causal\x1f--tokens\x1fwe saw her duck\x1f--out\x1f%s\x1f--ansi",
            out);
    tu_check(&g, r.status == 0, "status %d: %s", r.status, r.err);
    svg_facts *f = calloc(1, sizeof *f);
    if (parse_svg(&g, out, f)) {
        if (tu_check(&g, f->cells == H * N * N, "%d cells", f->cells)) {
            int bad = 0;
            for (int c = 0; c < f->cells; ++c) {
                double w = want[(f->head[c] * N + f->query[c]) * N + f->key[c]];
                if (!(fabs(f->value[c] - w) <= 1e-6)) ++bad;
            }
            tu_check(&g, bad == 0, "%d cells differ from softmax(QK^T/sqrt(d)) by more than 1e-6", bad);
        }
        tu_check(&g, has_text(f, "duck") && has_text(f, "head 2"), "labels missing");
    }
    free(f);
    remove(out);

    /* the terminal rendering: the same weights to 2 decimals */
    tu_check(&g, strstr(r.out, "\x1b[48;2;") != NULL, "--ansi: no 24-bit colour escapes");
    clirun_strip_ansi(r.out);
    for (int h = 0; h < H; ++h) {
        char label[16];
        snprintf(label, sizeof label, "head %d", h + 1);
        double got[N * N];
        if (!tu_check(&g, clirun_numbers_after(r.out, label, got, N * N), "--ansi: %s not printed", label))
            continue;
        int bad = 0;
        for (int i = 0; i < N * N; ++i)
            if (!(fabs(got[i] - want[h * N * N + i]) <= 0.005 + 1e-9)) ++bad;
        tu_check(&g, bad == 0, "--ansi %s: %d values differ from the weights", label, bad);
    }
    tu_check(&g, strstr(r.out, "duck") != NULL, "--ansi: token labels missing");
    clirun_free(&r);
    tu_group_end(&g);
}

static void escaping_and_size(tu_suite *suite, const char *dir)
{
    tu_group g;
    tu_group_begin(&g, suite, "escaping, large matrices");
    float w[4] = {0.25f, 0.75f, 0.5f, 0.5f};
    char npy[1024], out[1024];
    snprintf(npy, sizeof npy, "%s/e.npy", dir);
    snprintf(out, sizeof out, "%s/e.svg", dir);
    write_npy(&g, npy, w, 2, (int64_t[]){2, 2});
    clirun_result r;
    clirunf(&r, "heatmap\x1f--attn-weights\x1f%s\x1f--tokens\x1f<b>,it's \"q\" & k\x1f--title\x1f"
                "a<b & \"c\" ]]> --\x1f--out\x1f%s", npy, out);
    tu_check(&g, r.status == 0, "status %d: %s", r.status, r.err);
    clirun_free(&r);
    svg_facts *f = calloc(1, sizeof *f);
    if (parse_svg(&g, out, f)) {
        tu_check(&g, has_text(f, "<b>") && has_text(f, "it's \"q\" & k"), "labels not preserved");
        tu_check(&g, has_text(f, "a<b & \"c\" ]]> --"), "title not preserved");
    }
    free(f);

    /* 60 x 60: small cells, no numbers in them, still every cell */
    enum { N = 60 };
    static float big[N * N];
    for (int i = 0; i < N; ++i)
        for (int j = 0; j < N; ++j) big[i * N + j] = j <= i ? 1.0f / (float)(i + 1) : 0.0f;
    write_npy(&g, npy, big, 2, (int64_t[]){N, N});
    clirunf(&r, "heatmap\x1f--attn-weights\x1f%s\x1f--out\x1f%s\x1f--colormap\x1f" "blues", npy, out);
    tu_check(&g, r.status == 0, "60x60: status %d: %s", r.status, r.err);
    clirun_free(&r);
    f = calloc(1, sizeof *f);
    if (parse_svg(&g, out, f)) {
        check_cells(&g, f, big, 1, N, N);
        tu_check(&g, !has_text(f, "0.50"), "values printed in tiny cells");
        /* ColorBrewer Blues end points: #f7fbff (0) ... #08306b (1) */
        tu_check(&g, !strcmp(f->fill[0], "#08306b") && !strcmp(f->fill[1], "#f7fbff"),
                 "blues: %s %s", f->fill[0], f->fill[1]);
    }
    free(f);
    tu_group_end(&g);
}

static void failures(tu_suite *suite, const char *dir)
{
    tu_group g;
    tu_group_begin(&g, suite, "help and failures leave nothing behind");
    clirun_result r;
    clirunf(&r, "heatmap\x1f--help");
    tu_check(&g, r.status == 0 && strstr(r.out, "usage: attn heatmap") && !r.err_len, "--help");
    clirun_free(&r);

    char npy[1024], bad1d[1024], nan[1024], out[1024], old[1024];
    snprintf(npy, sizeof npy, "%s/f.npy", dir);
    snprintf(bad1d, sizeof bad1d, "%s/f1.npy", dir);
    snprintf(nan, sizeof nan, "%s/fnan.npy", dir);
    snprintf(out, sizeof out, "%s/fail.svg", dir);
    snprintf(old, sizeof old, "%s/old.svg", dir);
    float w[6] = {0.5f, 0.5f, 0.2f, 0.8f, 1, 0}, wn[4] = {0.5f, NAN, 1, 0};
    write_npy(&g, npy, w, 2, (int64_t[]){3, 2});
    write_npy(&g, bad1d, w, 1, (int64_t[]){6});
    write_npy(&g, nan, wn, 2, (int64_t[]){2, 2});
    FILE *fp = fopen(old, "w");
    if (fp) {
        fputs("old", fp);
        fclose(fp);
    }
    struct {
        const char *why;
        char args[2400];
        const char *target;
    } cases[] = {
        {"output directory missing", "", NULL},
        {"1-D weights", "", out},
        {"NaN weights", "", out},
        {"token count", "", out},
        {"missing file", "", out},
        {"keys and queries differ, no --query-tokens", "", out},
        {"existing file kept on failure", "", old},
        {"output is a directory", "", NULL},
        {"nothing to do", "", NULL},
        {"--attn-weights with --x", "", out},
        {"bad colormap", "", out},
        {"--batch out of range", "", out},
    };
    snprintf(cases[0].args, sizeof cases[0].args, "heatmap\x1f--attn-weights\x1f%s\x1f--out\x1f%s/no/such/dir/x.svg", npy, dir);
    snprintf(cases[1].args, sizeof cases[1].args, "heatmap\x1f--attn-weights\x1f%s\x1f--out\x1f%s", bad1d, out);
    snprintf(cases[2].args, sizeof cases[2].args, "heatmap\x1f--attn-weights\x1f%s\x1f--out\x1f%s", nan, out);
    snprintf(cases[3].args, sizeof cases[3].args, "heatmap\x1f--attn-weights\x1f%s\x1f--tokens\x1f" "a b c\x1f--out\x1f%s", npy, out);
    snprintf(cases[4].args, sizeof cases[4].args, "heatmap\x1f--attn-weights\x1f%s/missing.npy\x1f--out\x1f%s", dir, out);
    snprintf(cases[5].args, sizeof cases[5].args, "heatmap\x1f--attn-weights\x1f%s\x1f--tokens\x1f" "a b\x1f--out\x1f%s", npy, out);
    snprintf(cases[6].args, sizeof cases[6].args, "heatmap\x1f--attn-weights\x1f%s\x1f--tokens\x1f" "a\x1f--out\x1f%s", npy, old);
    snprintf(cases[7].args, sizeof cases[7].args, "heatmap\x1f--attn-weights\x1f%s\x1f--out\x1f%s", npy, dir);
    snprintf(cases[8].args, sizeof cases[8].args, "heatmap\x1f--attn-weights\x1f%s", npy);
    snprintf(cases[9].args, sizeof cases[9].args, "heatmap\x1f--attn-weights\x1f%s\x1f--x\x1f" "1,2\x1f--out\x1f%s", npy, out);
    snprintf(cases[10].args, sizeof cases[10].args, "heatmap\x1f--attn-weights\x1f%s\x1f--colormap\x1fjet\x1f--out\x1f%s", npy, out);
    snprintf(cases[11].args, sizeof cases[11].args, "heatmap\x1f--attn-weights\x1f%s\x1f--batch\x1f" "1\x1f--out\x1f%s", npy, out);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; ++i) {
        clirunf(&r, "%s", cases[i].args);
        tu_check(&g, r.status == 2 && r.out_len == 0 && clirun_count_lines(r.err) == 1,
                 "%s: status %d, stdout %zu bytes, stderr: %s", cases[i].why, r.status, r.out_len, r.err);
        clirun_free(&r);
        if (cases[i].target == out) tu_check(&g, !exists(out), "%s: %s was written", cases[i].why, out);
    }
    size_t len;
    char *kept = read_file(old, &len);
    tu_check(&g, kept && !strcmp(kept, "old"), "a failed run changed an existing file");
    free(kept);
    tu_check(&g, no_temp_files(dir), "a temporary file was left in %s", dir);
    tu_group_end(&g);
}

int main(int argc, char **argv)
{
    tu_options opt;
    if (!tu_parse_options(argc, argv, 0x4ea7, &opt)) return 2;
    tu_suite suite = {.verbose = opt.verbose};
    tu_rng rng;
    tu_rng_seed(&rng, opt.seed);
    const char *dir = tu_scratch_dir("heatmap");
    printf("seed %llu\n", (unsigned long long)opt.seed);
    from_file(&suite, &rng, dir);
    computed(&suite, dir);
    escaping_and_size(&suite, dir);
    failures(&suite, dir);
    return tu_suite_finish(&suite);
}
