/* A small SVG writer: an in-memory document, escaped text, primitives,
 * colour maps, axes with nice ticks, and a complete line plot. */
#include "svg.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct svg {
    char *buf;
    size_t len, cap;
    bool failed; /* an allocation failed: svg_save reports it */
    int next_id; /* for clip-path ids */
};

/* ------------------------------------------------------------- buffer */

static bool reserve(svg *s, size_t extra)
{
    if (s->failed) return false;
    if (s->len + extra + 1 <= s->cap) return true;
    size_t cap = s->cap ? s->cap : 4096;
    while (cap < s->len + extra + 1) cap *= 2;
    char *b = realloc(s->buf, cap);
    if (!b) {
        s->failed = true;
        return false;
    }
    s->buf = b;
    s->cap = cap;
    return true;
}

static void append(svg *s, const char *text, size_t n)
{
    if (!reserve(s, n)) return;
    memcpy(s->buf + s->len, text, n);
    s->len += n;
    s->buf[s->len] = '\0';
}

/* A string literal, its length known at compile time. */
#define append_lit(s, lit) append((s), (lit), sizeof(lit) - 1)

static void appendf(svg *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void appendf(svg *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !reserve(s, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(s->buf + s->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    s->len += (size_t)n;
}

/* Character data or attribute value with &, <, >, " and ' escaped. Control
 * characters XML 1.0 forbids are dropped. */
static void append_escaped(svg *s, const char *text)
{
    for (const char *p = text; *p; ++p) {
        unsigned char c = (unsigned char)*p;
        switch (c) {
        case '&': append_lit(s, "&amp;"); break;
        case '<': append_lit(s, "&lt;"); break;
        case '>': append_lit(s, "&gt;"); break;
        case '"': append_lit(s, "&quot;"); break;
        case '\'': append_lit(s, "&apos;"); break;
        default:
            if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') break;
            append(s, p, 1);
        }
    }
}

/* ----------------------------------------------------------- document */

svg *svg_new(double width, double height)
{
    svg *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    appendf(s,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "viewBox=\"0 0 %.0f %.0f\" font-family=\"%s\">\n",
            width, height, width, height, SVG_FONT);
    svg_rect(s, 0, 0, width, height, "white", NULL, 0);
    if (s->failed) {
        svg_free(s);
        return NULL;
    }
    return s;
}

void svg_free(svg *s)
{
    if (!s) return;
    free(s->buf);
    free(s);
}

bool svg_ok(const svg *s)
{
    return s && !s->failed;
}

const char *svg_text_of(svg *s, size_t *length)
{
    static const char close[] = "</svg>\n";
    /* written past the end, so later drawing calls overwrite it */
    if (!reserve(s, sizeof close)) return NULL;
    memcpy(s->buf + s->len, close, sizeof close);
    if (length) *length = s->len + sizeof close - 1;
    return s->buf;
}

int svg_save(svg *s, cli_outputs *o, int index)
{
    size_t n = 0;
    const char *text = svg_ok(s) ? svg_text_of(s, &n) : NULL;
    if (!text) {
        fprintf(stderr, "attn %s: out of memory while drawing\n", o->cmd->name);
        return CLI_FAIL;
    }
    return cli_outputs_bytes(o, index, text, n);
}

int svg_save_file(svg *s, const cli_command *cmd, const char *option, const char *path)
{
    cli_outputs o;
    int index, rc = cli_outputs_begin(&o, cmd);
    if (!rc) rc = cli_outputs_add(&o, option, path, &index);
    if (!rc) rc = svg_save(s, &o, index);
    if (!rc) rc = cli_outputs_commit(&o);
    cli_outputs_end(&o);
    return rc;
}

/* --------------------------------------------------------- primitives */

void svg_rect(svg *s, double x, double y, double w, double h, const char *fill,
              const char *stroke, double stroke_width)
{
    appendf(s, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"", x, y, w, h);
    append_escaped(s, fill ? fill : "none");
    append_lit(s, "\"");
    if (stroke) {
        append_lit(s, " stroke=\"");
        append_escaped(s, stroke);
        appendf(s, "\" stroke-width=\"%.2f\"", stroke_width);
    }
    append_lit(s, "/>\n");
}

static void stroke_attrs(svg *s, const char *stroke, double width, bool dashed)
{
    append_lit(s, " stroke=\"");
    append_escaped(s, stroke ? stroke : "#222");
    appendf(s, "\" stroke-width=\"%.2f\"", width);
    if (dashed) appendf(s, " stroke-dasharray=\"%.1f %.1f\"", 4 * width + 2, 2 * width + 2);
}

void svg_line(svg *s, double x1, double y1, double x2, double y2, const char *stroke,
              double width, bool dashed)
{
    appendf(s, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"", x1, y1, x2, y2);
    stroke_attrs(s, stroke, width, dashed);
    append_lit(s, "/>\n");
}

void svg_polyline(svg *s, const double *x, const double *y, int n, const char *stroke,
                  double width, bool dashed)
{
    int i = 0;
    while (i < n) {
        while (i < n && !(isfinite(x[i]) && isfinite(y[i]))) ++i;
        int start = i;
        while (i < n && isfinite(x[i]) && isfinite(y[i])) ++i;
        if (i - start < 2) continue;
        append_lit(s, "<polyline fill=\"none\" stroke-linejoin=\"round\" points=\"");
        for (int k = start; k < i; ++k) appendf(s, "%s%.2f,%.2f", k > start ? " " : "", x[k], y[k]);
        append_lit(s, "\"");
        stroke_attrs(s, stroke, width, dashed);
        append_lit(s, "/>\n");
    }
}

void svg_circle(svg *s, double cx, double cy, double r, const char *fill, const char *stroke)
{
    appendf(s, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"%.2f\" fill=\"", cx, cy, r);
    append_escaped(s, fill ? fill : "none");
    append_lit(s, "\"");
    if (stroke) {
        append_lit(s, " stroke=\"");
        append_escaped(s, stroke);
        append_lit(s, "\"");
    }
    append_lit(s, "/>\n");
}

void svg_text(svg *s, double x, double y, const svg_text_style *style, const char *text)
{
    static const svg_text_style plain = {0};
    if (!style) style = &plain;
    static const char *const anchors[] = {"start", "middle", "end"};
    double size = style->size > 0 ? style->size : 12;
    appendf(s, "<text x=\"%.2f\" y=\"%.2f\" font-size=\"%.1f\" text-anchor=\"%s\"", x, y, size,
            anchors[style->anchor]);
    if (style->middle) append_lit(s, " dominant-baseline=\"central\"");
    if (style->bold) append_lit(s, " font-weight=\"bold\"");
    if (style->rotate != 0)
        appendf(s, " transform=\"rotate(%.1f %.2f %.2f)\"", style->rotate, x, y);
    append_lit(s, " fill=\"");
    append_escaped(s, style->fill ? style->fill : "#222");
    append_lit(s, "\">");
    append_escaped(s, text);
    append_lit(s, "</text>\n");
}

void svg_textf(svg *s, double x, double y, const svg_text_style *style, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    svg_text(s, x, y, style, buf);
}

double svg_text_width(const char *text, double size)
{
    size_t chars = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p; ++p)
        if ((*p & 0xC0) != 0x80) ++chars; /* count UTF-8 code points */
    return (double)chars * SVG_CHAR_WIDTH * size;
}

void svg_group_begin(svg *s, const char *tooltip, const char *attrs)
{
    append_lit(s, "<g");
    if (attrs && *attrs) {
        append_lit(s, " ");
        append(s, attrs, strlen(attrs));
    }
    append_lit(s, ">");
    if (tooltip) {
        append_lit(s, "<title>");
        append_escaped(s, tooltip);
        append_lit(s, "</title>");
    }
    append_lit(s, "\n");
}

void svg_group_end(svg *s)
{
    append_lit(s, "</g>\n");
}

void svg_comment(svg *s, const char *text)
{
    append_lit(s, "<!-- ");
    for (const char *p = text; *p; ++p) {
        if (*p == '-' && (p[1] == '-' || p[1] == '\0')) { /* "--" may not appear in a comment */
            append_lit(s, "- ");
            continue;
        }
        if ((unsigned char)*p < 0x20 && *p != '\n' && *p != '\t') continue;
        append(s, p, 1);
    }
    append_lit(s, " -->\n");
}

/* ------------------------------------------------------------- colours */

static const svg_rgb viridis[] = {
    {0x44, 0x01, 0x54}, {0x48, 0x24, 0x75}, {0x41, 0x44, 0x87}, {0x35, 0x5f, 0x8d},
    {0x2a, 0x78, 0x8e}, {0x21, 0x91, 0x8c}, {0x22, 0xa8, 0x84}, {0x44, 0xbf, 0x70},
    {0x7a, 0xd1, 0x51}, {0xbd, 0xdf, 0x26}, {0xfd, 0xe7, 0x25},
};
static const svg_rgb blues[] = {
    {0xf7, 0xfb, 0xff}, {0xde, 0xeb, 0xf7}, {0xc6, 0xdb, 0xef}, {0x9e, 0xca, 0xe1},
    {0x6b, 0xae, 0xd6}, {0x42, 0x92, 0xc6}, {0x21, 0x71, 0xb5}, {0x08, 0x51, 0x9c},
    {0x08, 0x30, 0x6b},
};

svg_rgb svg_colormap_at(svg_colormap map, double t)
{
    if (isnan(t)) return (svg_rgb){0xbb, 0xbb, 0xbb};
    const svg_rgb *stops = map == SVG_BLUES ? blues : viridis;
    int n = map == SVG_BLUES ? (int)(sizeof blues / sizeof *blues)
                             : (int)(sizeof viridis / sizeof *viridis);
    t = t < 0 ? 0 : t > 1 ? 1 : t;
    double pos = t * (n - 1);
    int i = (int)pos;
    if (i >= n - 1) return stops[n - 1];
    double f = pos - i;
    svg_rgb a = stops[i], b = stops[i + 1];
    return (svg_rgb){(unsigned char)lround(a.r + f * (b.r - a.r)),
                     (unsigned char)lround(a.g + f * (b.g - a.g)),
                     (unsigned char)lround(a.b + f * (b.b - a.b))};
}

void svg_rgb_hex(svg_rgb c, char out[8])
{
    snprintf(out, 8, "#%02x%02x%02x", c.r, c.g, c.b);
}

const char *svg_text_colour_on(svg_rgb c)
{
    /* relative luminance (sRGB, linearised) against a mid threshold */
    double ch[3] = {c.r / 255.0, c.g / 255.0, c.b / 255.0}, lin[3];
    for (int i = 0; i < 3; ++i)
        lin[i] = ch[i] <= 0.04045 ? ch[i] / 12.92 : pow((ch[i] + 0.055) / 1.055, 2.4);
    double l = 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2];
    return l > 0.22 ? "#222" : "white";
}

const char *svg_palette(int i)
{
    static const char *const colours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                          "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
    return colours[(unsigned)i % (sizeof colours / sizeof *colours)];
}

/* ---------------------------------------------------------------- axes */

static int linear_ticks(double lo, double hi, int max_ticks, double *ticks, int cap)
{
    if (!(hi > lo) || max_ticks < 2) {
        if (cap > 0) ticks[0] = lo;
        return cap > 0;
    }
    double raw = (hi - lo) / (max_ticks - 1);
    double mag = pow(10, floor(log10(raw)));
    double step = mag;
    static const double mult[] = {1, 2, 2.5, 5, 10};
    for (size_t i = 0; i < sizeof mult / sizeof *mult; ++i)
        if (mult[i] * mag >= raw) {
            step = mult[i] * mag;
            break;
        }
    int n = 0;
    for (double k = ceil(lo / step - 1e-9); n < cap; ++k) {
        double v = k * step;
        if (v > hi + step * 1e-9) break;
        if (fabs(v) < step * 1e-9) v = 0; /* no "-0" or 1e-17 */
        ticks[n++] = v;
    }
    return n;
}

int svg_ticks(double lo, double hi, bool logarithmic, double base, int max_ticks, double *ticks, int cap)
{
    if (!logarithmic) return linear_ticks(lo, hi, max_ticks, ticks, cap);
    if (base <= 1) base = 10;
    if (!(lo > 0) || !(hi >= lo)) return 0;
    double e0 = ceil(log(lo) / log(base) - 1e-9), e1 = floor(log(hi) / log(base) + 1e-9);
    int count = (int)(e1 - e0) + 1;
    if (count < 3 && base == 10) {
        /* less than two decades: 1, 2, 5 (or every digit) times the powers of 10 */
        static const double fine[2][9] = {{1, 2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9}};
        static const int nfine[2] = {3, 9};
        for (int f = 0; f < 2; ++f) {
            int n = 0;
            for (double e = floor(log10(lo)); e <= ceil(log10(hi)) && n < cap; ++e)
                for (int m = 0; m < nfine[f] && n < cap; ++m) {
                    double v = fine[f][m] * pow(10, e);
                    if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) ticks[n++] = v;
                }
            if (n >= 3 || f == 1) {
                if (n >= 2) return n;
                break;
            }
        }
    }
    if (count < 2) return linear_ticks(lo, hi, max_ticks, ticks, cap);
    int every = (count + max_ticks - 1) / (max_ticks > 0 ? max_ticks : 1);
    if (every < 1) every = 1;
    int n = 0;
    for (double e = e0; e <= e1 + 1e-9 && n < cap; e += every) ticks[n++] = pow(base, e);
    return n;
}

void svg_tick_label(double v, char *out, size_t size)
{
    if (v == 0) {
        snprintf(out, size, "0");
        return;
    }
    double a = fabs(v);
    if (a >= 1e-3 && a < 1e6)
        snprintf(out, size, "%.6g", v);
    else
        snprintf(out, size, "%.0e", v);
}

void svg_colour_bar(svg *s, double x, double y, double width, double height, svg_colormap map,
                    double lo, double hi, const char *title)
{
    /* a vertical gradient through 21 samples of the map, bottom = lo */
    int id = s->next_id++;
    appendf(s, "<defs><linearGradient id=\"bar%d\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">", id);
    for (int i = 0; i <= 20; ++i) {
        char hex[8];
        svg_rgb_hex(svg_colormap_at(map, i / 20.0), hex);
        appendf(s, "<stop offset=\"%.2f\" stop-color=\"%s\"/>", i / 20.0, hex);
    }
    append_lit(s, "</linearGradient></defs>\n");
    char fill[32];
    snprintf(fill, sizeof fill, "url(#bar%d)", id);
    svg_rect(s, x, y, width, height, fill, NULL, 0);
    svg_rect(s, x, y, width, height, "none", "#444", 0.8);
    double ticks[16];
    int n = svg_ticks(lo, hi, false, 10, 6, ticks, 16);
    svg_text_style label = {.size = 11, .middle = true};
    for (int i = 0; i < n; ++i) {
        double ty = hi > lo ? y + height * (1 - (ticks[i] - lo) / (hi - lo)) : y + height;
        svg_line(s, x + width, ty, x + width + 4, ty, "#444", 0.8, false);
        char buf[32];
        svg_tick_label(ticks[i], buf, sizeof buf);
        svg_text(s, x + width + 7, ty, &label, buf);
    }
    if (title) {
        svg_text_style t = {.size = 11, .anchor = SVG_MIDDLE};
        svg_text(s, x + width / 2, y - 8, &t, title);
    }
}

/* ----------------------------------------------------------- line plot */

typedef struct {
    double lo, hi;   /* data range shown */
    bool log;
    double base;
    double p0, p1;   /* pixel positions of lo and hi */
} axis_map;

static double axis_px(const axis_map *a, double v)
{
    double t = a->log ? (log(v) - log(a->lo)) / (log(a->hi) - log(a->lo))
                      : (v - a->lo) / (a->hi - a->lo);
    return a->p0 + t * (a->p1 - a->p0);
}

static bool usable(const axis_map *a, double v)
{
    return isfinite(v) && (!a->log || v > 0);
}

/* Range of the finite (and, for a log axis, positive) values, padded. */
static void data_range(const svg_line_plot *p, bool y_axis, axis_map *a)
{
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < p->nseries; ++i) {
        const svg_series *s = &p->series[i];
        for (int k = 0; k < s->n; ++k) {
            double v = y_axis ? s->y[k] : s->x[k], other = y_axis ? s->x[k] : s->y[k];
            if (!isfinite(v) || !isfinite(other) || (a->log && v <= 0)) continue;
            if (v < lo) lo = v;
            if (v > hi) hi = v;
        }
    }
    if (lo > hi) { /* no data */
        lo = a->log ? 1 : 0;
        hi = a->log ? 10 : 1;
    }
    if (a->log) {
        if (hi / lo < 1.0001) {
            lo /= 2;
            hi *= 2;
        }
        if (y_axis) { /* a little headroom, in log space */
            double f = pow(hi / lo, 0.04);
            lo /= f;
            hi *= f;
        }
    } else {
        if (hi - lo < 1e-12 * (fabs(hi) + 1)) {
            lo -= 0.5 * (fabs(lo) + 1e-3);
            hi += 0.5 * (fabs(hi) + 1e-3);
        }
        double pad = 0.04 * (hi - lo);
        lo -= pad;
        hi += pad;
    }
    a->lo = lo;
    a->hi = hi;
}

/* Pixel positions of every series (NaN where a point cannot be shown). */
typedef struct {
    double *x, *y;
    int n;
} pixel_series;

/* How much of the data a box would hide: points along every segment that
 * fall inside it. */
static int hidden_points(const pixel_series *ps, int nseries, double x0, double y0, double x1,
                         double y1)
{
    int hidden = 0;
    for (int i = 0; i < nseries; ++i)
        for (int k = 0; k < ps[i].n; ++k) {
            const bool has_next = k + 1 < ps[i].n && isfinite(ps[i].x[k + 1]) && isfinite(ps[i].x[k]);
            const int steps = has_next ? 12 : 1;
            for (int t = 0; t < steps; ++t) {
                double f = (double)t / steps;
                double px = has_next ? ps[i].x[k] + f * (ps[i].x[k + 1] - ps[i].x[k]) : ps[i].x[k];
                double py = has_next ? ps[i].y[k] + f * (ps[i].y[k + 1] - ps[i].y[k]) : ps[i].y[k];
                if (px >= x0 && px <= x1 && py >= y0 && py <= y1) ++hidden;
            }
        }
    return hidden;
}

static void draw_legend(svg *s, const svg_line_plot *p, const pixel_series *ps, double left,
                        double top, double right, double bottom)
{
    int entries = 0;
    double text_w = 0;
    const double size = 11, row = 16, sample = 26;
    for (int i = 0; i < p->nseries; ++i)
        if (p->series[i].name) {
            ++entries;
            double w = svg_text_width(p->series[i].name, size);
            if (w > text_w) text_w = w;
        }
    if (!entries || p->legend == SVG_LEGEND_NONE) return;
    const double w = 8 + sample + 6 + text_w + 8, h = 6 + entries * row + 2, m = 8;
    /* candidate places: corners first, then the middles of the sides */
    const double xs[3] = {left + m, (left + right - w) / 2, right - m - w};
    const double ys[3] = {top + m, (top + bottom - h) / 2, bottom - m - h};
    static const int order[8][2] = {{2, 0}, {0, 0}, {2, 2}, {0, 2}, {2, 1}, {0, 1}, {1, 0}, {1, 2}};
    int pick = 0;
    switch (p->legend) {
    case SVG_LEGEND_TOP_RIGHT: pick = 0; break;
    case SVG_LEGEND_TOP_LEFT: pick = 1; break;
    case SVG_LEGEND_BOTTOM_RIGHT: pick = 2; break;
    case SVG_LEGEND_BOTTOM_LEFT: pick = 3; break;
    default: {
        int best = -1;
        for (int c = 0; c < 8; ++c) {
            double x0 = xs[order[c][0]], y0 = ys[order[c][1]];
            int hidden = hidden_points(ps, p->nseries, x0 - 2, y0 - 2, x0 + w + 2, y0 + h + 2);
            if (best < 0 || hidden < best) {
                best = hidden;
                pick = c;
            }
        }
    }
    }
    const double x = xs[order[pick][0]], y = ys[order[pick][1]];
    append_lit(s, "<g class=\"legend\">\n");
    svg_rect(s, x, y, w, h, "white", "#bbb", 0.8);
    int k = 0;
    svg_text_style t = {.size = size, .middle = true};
    for (int i = 0; i < p->nseries; ++i) {
        const svg_series *ser = &p->series[i];
        if (!ser->name) continue;
        double cy = y + 6 + row * k + row / 2 - 1;
        const char *c = ser->colour ? ser->colour : svg_palette(i);
        svg_line(s, x + 8, cy, x + 8 + sample, cy, c, 2, ser->dashed);
        if (ser->markers) svg_circle(s, x + 8 + sample / 2, cy, 2.8, c, NULL);
        svg_text(s, x + 8 + sample + 6, cy, &t, ser->name);
        ++k;
    }
    append_lit(s, "</g>\n");
}

void svg_plot_lines(svg *s, double x, double y, double w, double h, const svg_line_plot *p)
{
    axis_map ax = {.log = p->log_x, .base = p->log_base_x > 1 ? p->log_base_x : 10};
    axis_map ay = {.log = p->log_y, .base = p->log_base_y > 1 ? p->log_base_y : 10};
    if (p->fix_x) {
        ax.lo = p->x_min;
        ax.hi = p->x_max;
    } else {
        data_range(p, false, &ax);
    }
    if (p->fix_y) {
        ay.lo = p->y_min;
        ay.hi = p->y_max;
    } else {
        data_range(p, true, &ay);
    }

    /* y tick labels decide the left margin */
    double yt[64], xt[64];
    int nyt = svg_ticks(ay.lo, ay.hi, ay.log, ay.base, h > 260 ? 7 : 5, yt, 64);
    const double tick_size = 11;
    double label_w = 0;
    char buf[32];
    for (int i = 0; i < nyt; ++i) {
        svg_tick_label(yt[i], buf, sizeof buf);
        double lw = svg_text_width(buf, tick_size);
        if (lw > label_w) label_w = lw;
    }
    double left = x + (p->y_label ? 22 : 6) + label_w + 10;
    double right = x + w - 14;
    double top = y + (p->title ? 30 : 10);
    double bottom = y + h - (p->x_label ? 40 : 24);
    ax.p0 = left;
    ax.p1 = right;
    ay.p0 = bottom;
    ay.p1 = top;
    int max_xt = (int)((right - left) / 38);
    int nxt = svg_ticks(ax.lo, ax.hi, ax.log, ax.base, max_xt < 2 ? 2 : max_xt, xt, 64);

    append_lit(s, "<g class=\"line-plot\">\n");
    if (p->title) {
        svg_text_style t = {.size = 14, .anchor = SVG_MIDDLE, .bold = true};
        svg_text(s, (left + right) / 2, y + 19, &t, p->title);
    }
    svg_rect(s, left, top, right - left, bottom - top, "white", NULL, 0);
    /* grid and ticks */
    svg_text_style xl = {.size = tick_size, .anchor = SVG_MIDDLE};
    for (int i = 0; i < nxt; ++i) {
        if (!usable(&ax, xt[i])) continue;
        double px = axis_px(&ax, xt[i]);
        if (px < left - 0.5 || px > right + 0.5) continue;
        svg_line(s, px, top, px, bottom, "#e4e4e4", 0.8, false);
        svg_line(s, px, bottom, px, bottom + 4, "#444", 0.8, false);
        svg_tick_label(xt[i], buf, sizeof buf);
        svg_text(s, px, bottom + 16, &xl, buf);
    }
    svg_text_style yl = {.size = tick_size, .anchor = SVG_END, .middle = true};
    for (int i = 0; i < nyt; ++i) {
        if (!usable(&ay, yt[i])) continue;
        double py = axis_px(&ay, yt[i]);
        if (py < top - 0.5 || py > bottom + 0.5) continue;
        svg_line(s, left, py, right, py, "#e4e4e4", 0.8, false);
        svg_line(s, left - 4, py, left, py, "#444", 0.8, false);
        svg_tick_label(yt[i], buf, sizeof buf);
        svg_text(s, left - 7, py, &yl, buf);
    }
    svg_rect(s, left, top, right - left, bottom - top, "none", "#444", 0.8);
    if (p->x_label) {
        svg_text_style t = {.size = 12, .anchor = SVG_MIDDLE};
        svg_text(s, (left + right) / 2, bottom + 34, &t, p->x_label);
    }
    if (p->y_label) {
        svg_text_style t = {.size = 12, .anchor = SVG_MIDDLE, .rotate = -90};
        svg_text(s, x + 14, (top + bottom) / 2, &t, p->y_label);
    }

    /* series, clipped to the plot area */
    int id = s->next_id++;
    appendf(s, "<clipPath id=\"plot%d\"><rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\"/>"
               "</clipPath>\n<g clip-path=\"url(#plot%d)\">\n",
            id, left, top, right - left, bottom - top, id);
    pixel_series *ps = calloc((size_t)(p->nseries > 0 ? p->nseries : 1), sizeof *ps);
    if (!ps) s->failed = true;
    for (int i = 0; ps && i < p->nseries; ++i) {
        const svg_series *ser = &p->series[i];
        const char *c = ser->colour ? ser->colour : svg_palette(i);
        double *px = malloc(sizeof(double) * (size_t)(ser->n > 0 ? ser->n : 1));
        double *py = malloc(sizeof(double) * (size_t)(ser->n > 0 ? ser->n : 1));
        ps[i] = (pixel_series){px, py, px && py ? ser->n : 0};
        if (!px || !py) {
            s->failed = true;
            continue;
        }
        for (int k = 0; k < ser->n; ++k) {
            bool ok = usable(&ax, ser->x[k]) && usable(&ay, ser->y[k]);
            px[k] = ok ? axis_px(&ax, ser->x[k]) : NAN;
            py[k] = ok ? axis_px(&ay, ser->y[k]) : NAN;
        }
        svg_polyline(s, px, py, ser->n, c, 2, ser->dashed);
        if (ser->markers)
            for (int k = 0; k < ser->n; ++k)
                if (isfinite(px[k])) svg_circle(s, px[k], py[k], 2.8, c, NULL);
    }
    append_lit(s, "</g>\n");
    if (ps) {
        draw_legend(s, p, ps, left, top, right, bottom);
        for (int i = 0; i < p->nseries; ++i) {
            free(ps[i].x);
            free(ps[i].y);
        }
        free(ps);
    }
    append_lit(s, "</g>\n");
}
