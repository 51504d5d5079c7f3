/*
 * svg.h — a small SVG writer for attn's pictures: heatmaps, line plots.
 *
 * A document is built in memory (svg_new, then drawing calls) and written in
 * one go with svg_save, through the command's output set (cli.h), so a
 * failure never leaves a half-written picture. Every string that reaches the
 * document is XML-escaped; numbers are printed with at most 2 decimals.
 * Drawing calls never fail: an allocation failure is remembered and reported
 * by svg_save (and svg_ok).
 *
 * Coordinates are SVG user units (pixels), origin top-left, y downwards.
 *
 * Example: a line plot (loss curves) with labelled axes and a legend
 *
 *     double step[100], train[100], valid[100];   // ... filled
 *     svg_series s[2] = {
 *         {.name = "train", .x = step, .y = train, .n = 100},
 *         {.name = "validation", .x = step, .y = valid, .n = 100, .dashed = true},
 *     };
 *     svg_line_plot p = {.title = "Loss", .x_label = "step", .y_label = "loss",
 *                        .log_y = true, .series = s, .nseries = 2};
 *     svg *doc = svg_new(640, 420);
 *     svg_plot_lines(doc, 0, 0, 640, 420, &p);
 *     int rc = svg_save_file(doc, &cmd_train, "--plot", "loss.svg");
 *     svg_free(doc);
 */
#ifndef ATTN_CLI_SVG_H
#define ATTN_CLI_SVG_H

#include "cli.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct svg svg;

/* The font every text element uses, and a rough average character width
 * (as a fraction of the font size) for layout. */
#define SVG_FONT "DejaVu Sans, Helvetica, Arial, sans-serif"
#define SVG_CHAR_WIDTH 0.58

/* ------------------------------------------------------------- document */

/* A width × height document with a white background. NULL if out of memory. */
svg *svg_new(double width, double height);
void svg_free(svg *s);
/* False after any allocation failure while drawing. */
bool svg_ok(const svg *s);
/* The document text so far, closed with </svg> (valid until the next call). */
const char *svg_text_of(svg *s, size_t *length);
/* Writes the document as output `index` of an output set (cli.h), or as
 * the one output `option PATH` of a command; returns the exit status after
 * printing any failure. Nothing is left behind on failure. */
int svg_save(svg *s, cli_outputs *o, int index);
int svg_save_file(svg *s, const cli_command *cmd, const char *option, const char *path);

/* ----------------------------------------------------------- primitives */

typedef enum { SVG_START, SVG_MIDDLE, SVG_END } svg_anchor;

/* Colours are CSS colour strings ("#1f77b4", "none", "white"). */
void svg_rect(svg *s, double x, double y, double w, double h, const char *fill,
              const char *stroke, double stroke_width);
void svg_line(svg *s, double x1, double y1, double x2, double y2, const char *stroke,
              double width, bool dashed);
/* Points with a non-finite coordinate break the line into pieces. */
void svg_polyline(svg *s, const double *x, const double *y, int n, const char *stroke,
                  double width, bool dashed);
void svg_circle(svg *s, double cx, double cy, double r, const char *fill, const char *stroke);

/* Text at (x, y) (the baseline), rotated by rotate degrees about that point. */
typedef struct {
    double size;       /* font size; 0 = 12 */
    svg_anchor anchor; /* horizontal alignment */
    double rotate;     /* degrees, clockwise */
    bool bold;
    const char *fill;  /* NULL = "#222" */
    bool middle;       /* centre vertically on y instead of using the baseline */
} svg_text_style;
void svg_text(svg *s, double x, double y, const svg_text_style *style, const char *text);
void svg_textf(svg *s, double x, double y, const svg_text_style *style, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Estimated width of text at a font size (no font metrics: an average glyph). */
double svg_text_width(const char *text, double size);

/* Group with a tooltip: svg_group_begin(s, "query the → key duck: 0.80"),
 * drawing calls, svg_group_end(s). attrs (may be NULL) is raw attribute text
 * added to <g>, e.g. "class=\"cell\" data-value=\"0.8\"" — not escaped. */
void svg_group_begin(svg *s, const char *tooltip, const char *attrs);
void svg_group_end(svg *s);
/* An XML comment (escaped so that it cannot close early). */
void svg_comment(svg *s, const char *text);

/* ------------------------------------------------------------- colours */

typedef struct {
    unsigned char r, g, b;
} svg_rgb;

typedef enum {
    SVG_VIRIDIS, /* dark purple → teal → yellow, perceptually uniform */
    SVG_BLUES,   /* white → dark blue */
} svg_colormap;

/* Colour of t in [0, 1] (clamped; NaN gives grey). */
svg_rgb svg_colormap_at(svg_colormap map, double t);
/* "#rrggbb" into out[8]. */
void svg_rgb_hex(svg_rgb c, char out[8]);
/* "#222" or "white", whichever reads better on the background c. */
const char *svg_text_colour_on(svg_rgb c);
/* The i-th colour of a palette for line series (cycles). */
const char *svg_palette(int i);

/* A vertical colour bar of width × height at (x, y), values lo (bottom) to
 * hi (top), with ticks and labels to its right, and a title above. */
void svg_colour_bar(svg *s, double x, double y, double width, double height, svg_colormap map,
                    double lo, double hi, const char *title);

/* ---------------------------------------------------------------- axes */

/*
 * Nice tick positions for [lo, hi]: multiples of 1, 2 or 5 × 10^k for a
 * linear axis (about max_ticks of them), powers of base for a log axis
 * (thinned to at most max_ticks). Returns the count written to ticks
 * (at most cap).
 */
int svg_ticks(double lo, double hi, bool logarithmic, double base, int max_ticks, double *ticks, int cap);
/* Compact label of a tick: "0.5", "1e-05", "4096", "2^12" for base-2 log
 * axes when exponent labels are asked for. */
void svg_tick_label(double v, char *out, size_t size);

/* ----------------------------------------------------------- line plot */

typedef struct {
    const char *name;     /* legend entry; NULL = not in the legend */
    const double *x, *y;  /* n points; a non-finite y breaks the line */
    int n;
    const char *colour;   /* NULL = svg_palette(series index) */
    bool dashed;
    bool markers;         /* a small circle at each point */
} svg_series;

typedef enum {
    SVG_LEGEND_AUTO = 0, /* the corner or side where it hides the fewest data */
    SVG_LEGEND_TOP_RIGHT,
    SVG_LEGEND_TOP_LEFT,
    SVG_LEGEND_BOTTOM_RIGHT,
    SVG_LEGEND_BOTTOM_LEFT,
    SVG_LEGEND_NONE,
} svg_legend_pos;

typedef struct {
    const char *title;    /* above the plot, may be NULL */
    const char *x_label;  /* below the x axis */
    const char *y_label;  /* left of the y axis, rotated */
    bool log_x, log_y;    /* logarithmic axes (positive values only) */
    double log_base_x;    /* 2 or 10 (0 = 10): where log-x ticks go */
    double log_base_y;
    bool fix_x, fix_y;    /* use the ranges below instead of the data's */
    double x_min, x_max, y_min, y_max;
    const svg_series *series;
    int nseries;
    svg_legend_pos legend; /* default: automatic placement */
} svg_line_plot;

/*
 * Draws a complete line plot inside the box (x, y, w, h): title, frame,
 * grid lines, ticks with labels, axis labels, the series and a legend.
 * Linear axes get 4% padding around the data; points a log axis cannot show
 * (≤ 0) are skipped.
 */
void svg_plot_lines(svg *s, double x, double y, double w, double h, const svg_line_plot *p);

#endif
