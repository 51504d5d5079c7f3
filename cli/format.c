/* NumPy-like array printing (numpy's default 'maxprec' float mode). */
#include "format.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* numpy's print precision: most fractional digits shown (default 8). */
static int max_decimals = 8;
/* numpy's suppress: never scientific notation. */
static int suppress_scientific = 0;

void fmt_set_suppress(int on)
{
    suppress_scientific = on != 0;
}

void fmt_set_precision(int decimals)
{
    max_decimals = decimals < 0 ? 0 : decimals > 8 ? 8 : decimals;
}

/* Fewest decimals (≤ max_decimals) that print x so it reads back as x. */
static int decimals_needed(float x, int sci)
{
    char buf[64];
    for (int d = 0; d < max_decimals; ++d) {
        snprintf(buf, sizeof buf, sci ? "%.*e" : "%.*f", d, (double)x);
        if ((float)strtod(buf, NULL) == x) return d;
    }
    /* cut at the precision: trailing zeros of the rounded value are not
     * printed either (numpy shows -1.2290084 as -1.229 at precision 4) */
    snprintf(buf, sizeof buf, sci ? "%.*e" : "%.*f", max_decimals, (double)x);
    char *end = sci ? strchr(buf, 'e') : buf + strlen(buf);
    int d = max_decimals;
    while (d > 0 && end && end[-1] == '0') {
        --end;
        --d;
    }
    return d;
}

/* numpy switches to scientific notation when the range is too wide. */
static int use_scientific(const float *data, int64_t rows, int64_t cols, int64_t ld)
{
    float lo = INFINITY, hi = 0.0f;
    if (suppress_scientific) return 0;
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
            float a = fabsf(data[i * ld + j]);
            if (!isfinite(a) || a == 0.0f) continue;
            if (a < lo) lo = a;
            if (a > hi) hi = a;
        }
    if (hi == 0.0f) return 0;
    return hi >= 1e8f || lo < 1e-4f || hi / lo > 1e3f;
}

/* How every value of one array is printed. */
typedef struct {
    int sci;        /* scientific notation for the whole array */
    int frac;       /* fractional digits of the longest value */
    size_t lead;    /* characters before the '.', the widest value's */
    size_t width;   /* of every formatted value */
} layout;

/* One value: its own decimals, padded right to `frac` decimals (fixed) or
 * with `frac` mantissa decimals (scientific, numpy pads those with zeros). */
static void format_raw(char *out, size_t n, float x, const layout *l)
{
    if (!isfinite(x)) {
        snprintf(out, n, "%s", isnan(x) ? "nan" : x > 0 ? "inf" : "-inf");
        return;
    }
    if (l->sci) {
        snprintf(out, n, "%#.*e", l->frac, (double)x); /* '#': "1.e-05" like numpy */
        return;
    }
    int d = decimals_needed(x, 0);
    char num[64];
    snprintf(num, sizeof num, "%.*f", d, (double)x);
    if (d == 0) strcat(num, ".");
    snprintf(out, n, "%s%*s", num, l->frac - d, "");
}

static size_t lead_of(const char *s)
{
    const char *dot = strchr(s, '.');
    return dot ? (size_t)(dot - s) : strlen(s);
}

static layout plan(const float *data, int64_t rows, int64_t cols, int64_t ld)
{
    layout l = {.sci = use_scientific(data, rows, cols, ld)};
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
            float x = data[i * ld + j];
            if (isfinite(x)) {
                int d = decimals_needed(x, l.sci);
                if (d > l.frac) l.frac = d;
            }
        }
    /* decimal points line up: the widest integer part and the widest
     * fractional part of the finite values; a wider nan/inf widens the
     * integer part (numpy's pad_left) and is right-aligned */
    size_t tail = 0, special = 0;
    char buf[96];
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
            float x = data[i * ld + j];
            format_raw(buf, sizeof buf, x, &l);
            if (!isfinite(x)) {
                if (strlen(buf) > special) special = strlen(buf);
                continue;
            }
            size_t lead = lead_of(buf), rest = strlen(buf) - lead;
            if (lead > l.lead) l.lead = lead;
            if (rest > tail) tail = rest;
        }
    if (special > l.lead + tail) l.lead = special - tail;
    l.width = l.lead + tail;
    return l;
}

/* The value padded to l->width with its '.' in column l->lead. */
static void format_cell(char *out, size_t n, float x, const layout *l)
{
    char buf[96];
    format_raw(buf, sizeof buf, x, l);
    size_t len = strlen(buf), lead = lead_of(buf);
    size_t left = isfinite(x) ? l->lead - lead : l->width - len;
    if (left > l->width) left = 0;
    size_t right = l->width > left + len ? l->width - left - len : 0;
    snprintf(out, n, "%*s%s%*s", (int)left, "", buf, (int)right, "");
}

void fmt_matrix(FILE *f, const float *data, int64_t rows, int64_t cols, int64_t ld, int indent)
{
    const int vector = rows == 0;
    if (vector) rows = 1;
    layout l = plan(data, rows, cols, ld);
    char buf[128];
    if (!vector) fputc('[', f);
    for (int64_t i = 0; i < rows; ++i) {
        if (i > 0) fprintf(f, "\n%*s", indent + 1, "");
        fputc('[', f);
        for (int64_t j = 0; j < cols; ++j) {
            format_cell(buf, sizeof buf, data[i * ld + j], &l);
            fprintf(f, "%s%s", j ? " " : "", buf);
        }
        fputc(']', f);
    }
    if (!vector) fputc(']', f);
    fputc('\n', f);
}

void fmt_labeled(FILE *f, const char *label, const float *data, int64_t rows, int64_t cols)
{
    fprintf(f, "%s:\n", label);
    fmt_matrix(f, data, rows, cols, cols, 0);
    fputc('\n', f);
}

/* Display width of a UTF-8 string (code points). */
static size_t text_width(const char *s)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; ++p)
        if ((*p & 0xC0) != 0x80) ++n;
    return n;
}

void fmt_table(FILE *f, const float *data, int64_t rows, int64_t cols, int64_t ld,
               const char *const *row_labels, const char *const *col_labels, int indent)
{
    if (!row_labels && !col_labels) {
        fprintf(f, "%*s", indent, "");
        fmt_matrix(f, data, rows, cols, ld, indent);
        return;
    }
    if (rows == 0) rows = 1;
    layout l = plan(data, rows, cols, ld);
    size_t row_w = 0, col_w = l.width;
    for (int64_t i = 0; row_labels && i < rows; ++i)
        if (text_width(row_labels[i]) > row_w) row_w = text_width(row_labels[i]);
    for (int64_t j = 0; col_labels && j < cols; ++j)
        if (text_width(col_labels[j]) > col_w) col_w = text_width(col_labels[j]);
    const size_t gap = 2;
    if (col_labels) {
        fprintf(f, "%*s%*s", indent, "", (int)(row_w + (row_labels ? gap : 0)), "");
        for (int64_t j = 0; j < cols; ++j) {
            size_t w = text_width(col_labels[j]);
            fprintf(f, "%s%s%*s", j ? "  " : "", col_labels[j],
                    j + 1 < cols ? (int)(col_w - w) : 0, "");
        }
        fputc('\n', f);
    }
    char buf[128];
    for (int64_t i = 0; i < rows; ++i) {
        fprintf(f, "%*s", indent, "");
        if (row_labels) {
            size_t w = text_width(row_labels[i]);
            fprintf(f, "%s%*s", row_labels[i], (int)(row_w - w + gap), "");
        }
        for (int64_t j = 0; j < cols; ++j) {
            format_cell(buf, sizeof buf, data[i * ld + j], &l);
            /* trailing padding of the last column is dropped */
            int pad = j + 1 < cols ? (int)(col_w - l.width) : 0;
            if (j + 1 == cols) {
                size_t end = strlen(buf);
                while (end > 0 && buf[end - 1] == ' ') buf[--end] = '\0';
            }
            fprintf(f, "%s%s%*s", j ? "  " : "", buf, pad, "");
        }
        fputc('\n', f);
    }
}
