/* attn heatmap: attention weights as an SVG heatmap (one panel per head,
 * token labels, colour scale) and, on a terminal, as coloured text. */
#include "cli.h"
#include "inline.h"
#include "steps.h"
#include "svg.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const cli_option heatmap_options[] = {
    {"--attn-weights", "A.npy", "weights to draw: (Nq,Nk), (H,Nq,Nk) or (B,H,Nq,Nk)"},
    {"--batch", "B", "with a 4-D file: which batch entry (default 0)"},
    {"--query-tokens", "WORDS", "labels of the queries when they differ from the keys"},
    STEPS_INPUT_OPTIONS,
    {"--out", "FILE.svg", "write the SVG heatmap"},
    {"--title", "TEXT", "title of the picture"},
    {"--colormap", "NAME", "viridis (default) or blues"},
    {"--vmax", "V", "value of the top colour (default 1 for weights in [0,1], else the max)"},
    {"--ansi", NULL, "print the coloured terminal rendering even when stdout is not a terminal"},
    {"--no-ansi", NULL, "never print the terminal rendering"},
    {0},
};

/* What to draw: H matrices of Nq × Nk. */
typedef struct {
    int64_t heads, nq, nk;
    float *w; /* (heads, nq, nk), owned */
    char **qlab, **klab; /* labels (owned), never NULL after make_labels */
    double vmin, vmax;
    svg_colormap map;
    char title[512], subtitle[700];
} heatmap;

static void free_labels(char **l, int64_t n)
{
    if (!l) return;
    for (int64_t i = 0; i < n; ++i) free(l[i]);
    free(l);
}

static void heatmap_free(heatmap *h)
{
    free(h->w);
    free_labels(h->qlab, h->nq);
    free_labels(h->klab, h->nk);
}

/* Copies words, or numbers "0", "1", ... when words is NULL. */
static char **make_labels(char *const *words, int64_t n)
{
    char **l = calloc((size_t)n, sizeof *l);
    if (!l) return NULL;
    for (int64_t i = 0; i < n; ++i) {
        char num[24];
        snprintf(num, sizeof num, "%lld", (long long)i);
        const char *src = words ? words[i] : num;
        l[i] = malloc(strlen(src) + 1);
        if (!l[i]) {
            free_labels(l, n);
            return NULL;
        }
        strcpy(l[i], src);
    }
    return l;
}

/* Words of a token option, checked against the count it labels. */
static int token_option(const cli_command *cmd, const cli_args *a, const char *name, int64_t want,
                        const char *what, char ***words, int *count)
{
    *words = NULL;
    *count = 0;
    const char *text = cli_get(a, name);
    if (!text) return CLI_OK;
    *count = inline_split_words(text, words);
    if (*count < 0) return cli_usage_error(cmd, "%s: no tokens in '%s'", name, text);
    if (*count != want) {
        cli_usage_error(cmd, "%s has %d words but there are %lld %s", name, *count,
                        (long long)want, what);
        inline_free_words(*words, *count);
        *words = NULL;
        *count = 0;
        return CLI_USAGE;
    }
    return CLI_OK;
}

static int from_file(const cli_command *cmd, const cli_args *a, const char *path, heatmap *h)
{
    attn_array arr = {0};
    int rc = cli_load_npy(path, &arr);
    if (rc) return rc;
    rc = CLI_USAGE;
    const attn_tensor *t = &arr.t;
    long batch = 0;
    if (t->dtype != ATTN_F32 || t->ndim < 2 || t->ndim > 4) {
        cli_usage_error(cmd, "%s: expected float weights (Nq,Nk), (H,Nq,Nk) or (B,H,Nq,Nk)", path);
        goto done;
    }
    if (!cli_get_int(a, "--batch", 0, t->ndim == 4 ? t->shape[0] - 1 : 0, &batch)) goto done;
    h->heads = t->ndim >= 3 ? t->shape[t->ndim - 3] : 1;
    h->nq = t->shape[t->ndim - 2];
    h->nk = t->shape[t->ndim - 1];
    if (h->heads < 1 || h->nq < 1 || h->nk < 1) {
        cli_usage_error(cmd, "%s: the weights are empty", path);
        goto done;
    }
    if (h->heads > 64 || h->nq > 1024 || h->nk > 1024) {
        cli_usage_error(cmd, "%s: %lld heads of %lld x %lld is too large to draw (at most 64 heads "
                        "of 1024 x 1024)", path, (long long)h->heads, (long long)h->nq,
                        (long long)h->nk);
        goto done;
    }
    h->w = malloc(sizeof(float) * (size_t)(h->heads * h->nq * h->nk));
    if (!h->w) {
        fprintf(stderr, "attn heatmap: out of memory\n");
        rc = CLI_FAIL;
        goto done;
    }
    const float *src = t->data;
    const int d = t->ndim;
    const int64_t base = d == 4 ? batch * t->stride[0] : 0, hs = d >= 3 ? t->stride[d - 3] : 0;
    for (int64_t hh = 0; hh < h->heads; ++hh)
        for (int64_t i = 0; i < h->nq; ++i)
            for (int64_t j = 0; j < h->nk; ++j)
                h->w[(hh * h->nq + i) * h->nk + j] =
                    src[base + hh * hs + i * t->stride[d - 2] + j * t->stride[d - 1]];
    char **kw, **qw;
    int kc, qc;
    if (token_option(cmd, a, "--tokens", h->nk, "keys", &kw, &kc)) goto done;
    if (token_option(cmd, a, "--query-tokens", h->nq, "queries", &qw, &qc)) {
        inline_free_words(kw, kc);
        goto done;
    }
    if (kw && !qw && h->nq != h->nk) {
        cli_usage_error(cmd, "--tokens labels the %lld keys; give --query-tokens for the %lld "
                        "queries", (long long)h->nk, (long long)h->nq);
        inline_free_words(kw, kc);
        goto done;
    }
    h->klab = make_labels(kw, h->nk);
    h->qlab = make_labels(qw ? qw : (h->nq == h->nk ? kw : NULL), h->nq);
    inline_free_words(kw, kc);
    inline_free_words(qw, qc);
    if (!h->klab || !h->qlab) {
        fprintf(stderr, "attn heatmap: out of memory\n");
        rc = CLI_FAIL;
        goto done;
    }
    const char *slash = strrchr(path, '/');
    snprintf(h->title, sizeof h->title, "Attention weights (%s)", slash ? slash + 1 : path);
    if (d == 4)
        snprintf(h->subtitle, sizeof h->subtitle, "batch %ld of %lld", batch, (long long)t->shape[0]);
    rc = CLI_OK;
done:
    attn_array_free(&arr);
    return rc;
}

static int from_steps(const cli_command *cmd, const cli_args *a, heatmap *h)
{
    if (cli_get(a, "--query-tokens"))
        return cli_usage_error(cmd, "--query-tokens is for --attn-weights files (self-attention "
                                    "labels queries and keys with --tokens)");
    if (cli_get(a, "--batch")) return cli_usage_error(cmd, "--batch goes with --attn-weights");
    steps s;
    int rc = steps_load(cmd, a, &s);
    if (!rc) rc = steps_compute(cmd, &s);
    if (!rc) {
        h->heads = s.heads;
        h->nq = h->nk = s.n;
        h->w = s.weights;
        s.weights = NULL; /* taken over */
        h->qlab = make_labels(s.tokens, s.n);
        h->klab = make_labels(s.tokens, s.n);
        if (!h->qlab || !h->klab) {
            fprintf(stderr, "attn heatmap: out of memory\n");
            rc = CLI_FAIL;
        }
        snprintf(h->title, sizeof h->title, "Attention weights softmax(QK\u1D40 %s)%s",
                 s.default_scale ? "/ \u221Ad\u2096" : "\u00D7 scale", s.causal ? ", causal" : "");
        snprintf(h->subtitle, sizeof h->subtitle, "%lld head%s, d_k = %lld; weights: %s",
                 (long long)s.heads, s.heads == 1 ? "" : "s", (long long)s.d_k, s.source);
    }
    steps_free(&s);
    return rc;
}

/* ------------------------------------------------------------- SVG */

/* Sizes of the picture, decided once from the matrix and the labels. */
typedef struct {
    double cell;       /* side of one cell */
    double label_size; /* font size of the token labels */
    double row_w;      /* widest query label */
    double col_h;      /* height taken by the key labels above the grid */
    double overhang;   /* how far slanted key labels reach right of the grid */
    int col_rotate;    /* 0, -45 or -90 degrees */
    int row_step, col_step; /* label every n-th token when cells are small */
    int ncols, nrows;  /* panels */
    double panel_w, panel_h, top;
} picture;

static picture plan_picture(const heatmap *h)
{
    picture p = {0};
    const int64_t big = h->nq > h->nk ? h->nq : h->nk;
    p.cell = floor(380.0 / (double)big);
    if (p.cell > 64) p.cell = 64;
    if (p.cell < 4) p.cell = 4;
    p.label_size = p.cell < 20 ? (p.cell < 12 ? 9 : 10.5) : 12;
    double col_w = 0;
    for (int64_t i = 0; i < h->nq; ++i) p.row_w = fmax(p.row_w, svg_text_width(h->qlab[i], p.label_size));
    for (int64_t j = 0; j < h->nk; ++j) col_w = fmax(col_w, svg_text_width(h->klab[j], p.label_size));
    /* one label per line of text height: thin them out on small cells */
    const double line = p.label_size * 1.25;
    p.row_step = (int)ceil(line / p.cell);
    p.col_step = 1;
    if (col_w + 4 <= p.cell) { /* horizontal labels fit their cells */
        p.col_h = p.label_size;
    } else if (p.cell >= 1.6 * p.label_size) { /* slanted: baselines cell/sqrt(2) apart */
        p.col_rotate = -45;
        p.col_h = col_w * 0.71 + 6;
        p.overhang = col_w * 0.71;
    } else { /* vertical, thinned like the rows */
        p.col_rotate = -90;
        p.col_h = col_w + 2;
        p.col_step = p.row_step;
    }
    p.panel_w = 22 + p.row_w + 8 + p.cell * (double)h->nk + 24 + p.overhang;
    p.panel_h = 22 + p.col_h + 8 + p.cell * (double)h->nq + 34;
    /* up to 4 panels a row, as many as fit in about 1300 pixels */
    int fit = (int)((1300 - 130) / p.panel_w);
    fit = fit < 1 ? 1 : fit > 4 ? 4 : fit;
    /* as few rows as fit allows, then as even as possible: 4 heads by 3 is 2 + 2 */
    p.nrows = (int)((h->heads + fit - 1) / fit);
    p.ncols = (int)((h->heads + p.nrows - 1) / p.nrows);
    p.top = h->subtitle[0] ? 62 : 44;
    return p;
}

static void draw_panels(svg *doc, const heatmap *h, const picture *p, double left)
{
    const double cell = p->cell;
    const bool values = cell >= 30;
    for (int64_t hh = 0; hh < h->heads; ++hh) {
        const double px = left + (double)(hh % p->ncols) * p->panel_w,
                     py = p->top + (double)(hh / p->ncols) * p->panel_h;
        const double gx = px + 22 + p->row_w + 8, gy = py + 22 + p->col_h + 8;
        const double gw = cell * (double)h->nk, gh = cell * (double)h->nq;
        char buf[1024];
        snprintf(buf, sizeof buf, "class=\"panel\" data-head=\"%lld\"", (long long)hh);
        svg_group_begin(doc, NULL, buf);
        if (h->heads > 1) {
            svg_text_style t = {.size = 14, .anchor = SVG_MIDDLE, .bold = true};
            svg_textf(doc, gx + gw / 2, py + 14, &t, "head %lld", (long long)hh + 1);
        }
        svg_text_style axis = {.size = 11, .anchor = SVG_MIDDLE, .fill = "#555"};
        svg_text(doc, gx + gw / 2, gy + gh + 18, &axis, "key");
        svg_text_style axis_v = axis;
        axis_v.rotate = -90;
        svg_text(doc, px + 10, gy + gh / 2, &axis_v, "query");
        /* labels */
        svg_text_style rl = {.size = p->label_size, .anchor = SVG_END, .middle = true};
        for (int64_t i = 0; i < h->nq; i += p->row_step)
            svg_text(doc, gx - 6, gy + cell * ((double)i + 0.5), &rl, h->qlab[i]);
        svg_text_style cl = {.size = p->label_size, .anchor = p->col_rotate ? SVG_START : SVG_MIDDLE,
                             .rotate = p->col_rotate, .middle = p->col_rotate == -90};
        for (int64_t j = 0; j < h->nk; j += p->col_step) {
            double x = gx + cell * ((double)j + 0.5) - (p->col_rotate == -45 ? 3 : 0);
            svg_text(doc, x, gy - 6, &cl, h->klab[j]);
        }
        /* cells */
        const float *w = h->w + hh * h->nq * h->nk;
        for (int64_t i = 0; i < h->nq; ++i)
            for (int64_t j = 0; j < h->nk; ++j) {
                const double v = w[i * h->nk + j];
                const double t = h->vmax > h->vmin ? (v - h->vmin) / (h->vmax - h->vmin) : 0;
                svg_rgb c = svg_colormap_at(h->map, t);
                char hex[8];
                svg_rgb_hex(c, hex);
                char tip[600], attrs[160], head[32] = "";
                if (h->heads > 1) snprintf(head, sizeof head, "head %lld: ", (long long)hh + 1);
                snprintf(tip, sizeof tip, "%squery %s -> key %s: %.6g", head, h->qlab[i],
                         h->klab[j], v);
                snprintf(attrs, sizeof attrs,
                         "class=\"cell\" data-head=\"%lld\" data-query=\"%lld\" data-key=\"%lld\" "
                         "data-value=\"%.9g\"",
                         (long long)hh, (long long)i, (long long)j, v);
                svg_group_begin(doc, tip, attrs);
                svg_rect(doc, gx + cell * (double)j, gy + cell * (double)i, cell, cell, hex, NULL, 0);
                if (values) {
                    svg_text_style vt = {.size = cell >= 56 ? 13 : cell >= 40 ? 11 : 9.5, .anchor = SVG_MIDDLE,
                                         .middle = true, .fill = svg_text_colour_on(c)};
                    svg_textf(doc, gx + cell * ((double)j + 0.5), gy + cell * ((double)i + 0.5),
                              &vt, "%.2f", v);
                }
                svg_group_end(doc);
            }
        svg_rect(doc, gx, gy, gw, gh, "none", "#444", 0.8);
        svg_group_end(doc);
    }
}

static int write_svg(const heatmap *h, const char *path)
{
    const picture p = plan_picture(h);
    double width = 20 + p.ncols * p.panel_w + 90, height = p.top + p.nrows * p.panel_h + 10;
    width = fmax(width, svg_text_width(h->title, 16) + 40);
    width = fmax(width, svg_text_width(h->subtitle, 12) + 40);
    width = fmax(width, 320);
    svg *doc = svg_new(width, height);
    if (!doc) {
        fprintf(stderr, "attn heatmap: out of memory\n");
        return CLI_FAIL;
    }
    svg_text_style t = {.size = 16, .anchor = SVG_MIDDLE, .bold = true};
    svg_text(doc, width / 2, 26, &t, h->title);
    if (h->subtitle[0]) {
        svg_text_style st = {.size = 12, .anchor = SVG_MIDDLE, .fill = "#555"};
        svg_text(doc, width / 2, 46, &st, h->subtitle);
    }
    /* panels and colour bar centred when the titles make the picture wider */
    const double content = p.ncols * p.panel_w + 90, left = 20 + (width - 20 - content) / 2;
    draw_panels(doc, h, &p, left);
    /* colour bar at the right, level with the first row of grids */
    const double grid_top = p.top + 22 + p.col_h + 8;
    const double bar_h = fmax(fmin(p.cell * (double)h->nq, 260), 80);
    svg_colour_bar(doc, left + p.ncols * p.panel_w + 10, grid_top, 14, bar_h, h->map, h->vmin,
                   h->vmax, "weight");
    int rc = svg_save_file(doc, &cmd_heatmap, "--out", path);
    svg_free(doc);
    return rc;
}

/* -------------------------------------------------------- terminal */

static void ansi_cell(svg_rgb c, const char *text)
{
    const bool dark_text = !strcmp(svg_text_colour_on(c), "#222");
    printf("\x1b[48;2;%d;%d;%dm\x1b[38;2;%s%s\x1b[0m", c.r, c.g, c.b,
           dark_text ? "20;20;20m" : "255;255;255m", text);
}

/* Up to max display columns of a label, padded to exactly max. */
static void print_fitted(const char *label, int max, bool right)
{
    char buf[64];
    int n = 0, cols = 0;
    for (const char *p = label; *p && n < (int)sizeof buf - 4;) {
        int len = 1;
        unsigned char c = (unsigned char)*p;
        if (c >= 0xF0) len = 4;
        else if (c >= 0xE0) len = 3;
        else if (c >= 0xC0) len = 2;
        if (cols == max) break;
        for (int k = 0; k < len && p[k]; ++k) buf[n++] = p[k];
        p += len;
        ++cols;
    }
    buf[n] = '\0';
    if (right) printf("%*s%s", max - cols, "", buf);
    else printf("%s%*s", buf, max - cols, "");
}

static void print_ansi(const heatmap *h)
{
    int row_w = 1;
    for (int64_t i = 0; i < h->nq; ++i) {
        int w = (int)svg_text_width(h->qlab[i], 1 / SVG_CHAR_WIDTH);
        if (w > row_w) row_w = w;
    }
    if (row_w > 12) row_w = 12;
    for (int64_t hh = 0; hh < h->heads; ++hh) {
        if (h->heads > 1) printf("head %lld\n", (long long)hh + 1);
        printf("%*s ", row_w, "");
        for (int64_t j = 0; j < h->nk; ++j) {
            printf(" ");
            print_fitted(h->klab[j], 5, true);
        }
        printf("\n");
        const float *w = h->w + hh * h->nq * h->nk;
        for (int64_t i = 0; i < h->nq; ++i) {
            print_fitted(h->qlab[i], row_w, false);
            printf(" ");
            for (int64_t j = 0; j < h->nk; ++j) {
                const double v = w[i * h->nk + j];
                const double t = h->vmax > h->vmin ? (v - h->vmin) / (h->vmax - h->vmin) : 0;
                char text[32];
                snprintf(text, sizeof text, " %5.2f", v);
                if (strlen(text) > 6) snprintf(text, sizeof text, " %5.0e", v);
                ansi_cell(svg_colormap_at(h->map, t), text);
            }
            printf("\n");
        }
        printf("\n");
    }
    /* the scale */
    printf("%*s  %-6.3g", row_w, "", h->vmin);
    for (int k = 0; k < 10; ++k) ansi_cell(svg_colormap_at(h->map, (k + 0.5) / 10), "  ");
    printf("  %.3g\n", h->vmax);
}

/* ------------------------------------------------------------- run */

static int run(int argc, char **argv)
{
    const cli_command *cmd = &cmd_heatmap;
    cli_args a;
    bool help;
    int rc = cli_parse(cmd, argc, argv, &a, &help);
    if (rc || help) return rc;
    const char *out = cli_get(&a, "--out");
    if (out && !*out) return cli_usage_error(cmd, "--out: empty file name");
    const bool force_ansi = cli_flag(&a, "--ansi"), no_ansi = cli_flag(&a, "--no-ansi");
    if (force_ansi && no_ansi) return cli_usage_error(cmd, "--ansi and --no-ansi contradict");
    heatmap h = {0};
    const char *cm = cli_get(&a, "--colormap");
    if (cm && !strcmp(cm, "blues")) h.map = SVG_BLUES;
    else if (cm && strcmp(cm, "viridis"))
        return cli_usage_error(cmd, "--colormap: expected viridis or blues, got '%s'", cm);
    float vmax = 0;
    const char *vmax_text = cli_get(&a, "--vmax");
    if (vmax_text && strcmp(vmax_text, "auto") && !cli_get_float(&a, "--vmax", &vmax)) return CLI_USAGE;

    const char *file = cli_get(&a, "--attn-weights");
    if (file) {
        static const char *const exclusive[] = {"--x", "--weights", "--wq", "--wk", "--wv",
                                                "--wo", "--seed", "--heads", "--causal",
                                                "--scale", "--d-model"};
        for (size_t i = 0; i < sizeof exclusive / sizeof *exclusive; ++i)
            if (cli_get(&a, exclusive[i]))
                return cli_usage_error(cmd, "%s computes weights; --attn-weights gives them "
                                            "(use one or the other)", exclusive[i]);
        rc = from_file(cmd, &a, file, &h);
    } else {
        rc = from_steps(cmd, &a, &h);
    }
    if (rc) {
        heatmap_free(&h);
        return rc;
    }

    /* colour range */
    double lo = INFINITY, hi = -INFINITY;
    const int64_t count = h.heads * h.nq * h.nk;
    for (int64_t i = 0; i < count; ++i) {
        if (!isfinite(h.w[i])) {
            heatmap_free(&h);
            return cli_usage_error(cmd, "%s holds a NaN or infinity", file ? file : "the weights");
        }
        if (h.w[i] < lo) lo = h.w[i];
        if (h.w[i] > hi) hi = h.w[i];
    }
    const bool probabilities = lo >= 0 && hi <= 1 + 1e-6;
    h.vmin = probabilities ? 0 : lo;
    h.vmax = probabilities ? 1 : hi;
    if (vmax_text) h.vmax = strcmp(vmax_text, "auto") ? vmax : hi;
    if (!(h.vmax > h.vmin)) {
        if (vmax_text && strcmp(vmax_text, "auto")) {
            heatmap_free(&h);
            return cli_usage_error(cmd, "--vmax %g must be above the smallest value %g", vmax, h.vmin);
        }
        h.vmax = h.vmin + 1;
    }
    const char *title = cli_get(&a, "--title");
    if (title) snprintf(h.title, sizeof h.title, "%s", title);

    const char *no_color = getenv("NO_COLOR"), *term = getenv("TERM");
    const bool small = h.nq <= 40 && h.nk <= 16;
    const bool tty = isatty(STDOUT_FILENO) && !(no_color && *no_color) &&
                     !(term && !strcmp(term, "dumb"));
    const bool ansi = force_ansi || (!no_ansi && tty && small);
    if (!out && !ansi) {
        heatmap_free(&h);
        return cli_usage_error(cmd, "nothing to do: give --out FILE.svg%s",
                               small ? " (or --ansi for the terminal rendering)" : "");
    }
    if (out) rc = write_svg(&h, out);
    if (!rc && ansi) print_ansi(&h);
    if (!rc && out)
        printf("wrote %s: %lld head%s, %lld queries x %lld keys\n", out, (long long)h.heads,
               h.heads == 1 ? "" : "s", (long long)h.nq, (long long)h.nk);
    heatmap_free(&h);
    return rc;
}

const cli_command cmd_heatmap = {
    .name = "heatmap",
    .summary = "attention weights as an SVG heatmap and a coloured terminal picture",
    .usage = "(--attn-weights A.npy | --x X ... like attn explain) [--out FILE.svg] [options]",
    .details =
        "Draws each head's weight matrix as a grid: one row per query, one column per\n"
        "key, one panel per head, with the tokens on both axes and a colour scale\n"
        "(weights in [0,1] use the fixed range 0..1, so panels compare). Each cell's\n"
        "value is in its tooltip and in a data-value attribute; cells large enough\n"
        "also print it. The weights come from a file (what attn sdpa / attn mha\n"
        "--attn-weights wrote: (Nq,Nk), (H,Nq,Nk) or (B,H,Nq,Nk) with --batch), or are\n"
        "computed from X and weights exactly like attn explain.\n"
        "On a terminal a small matrix is also printed in colour (24-bit ANSI);\n"
        "--ansi forces that, --no-ansi (or NO_COLOR) turns it off. The SVG is\n"
        "written to a temporary file and renamed, so a failure leaves no file.\n\n" STEPS_INPUT_DETAILS
        "\n\nexamples:\n"
        "  attn heatmap --tokens \"the hunter saw a duck\" --seed 7 --heads 2 --out heads.svg\n"
        "  attn mha ... --attn-weights A.npy --per-head && attn heatmap --attn-weights A.npy "
        "--out a.svg",
    .options = heatmap_options,
    .run = run,
};
