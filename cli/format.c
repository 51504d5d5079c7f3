/* NumPy-like array printing (numpy's default 'maxprec' float mode). */
#include "format.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DECIMALS 8

/* Fewest decimals (≤ MAX_DECIMALS) that print x so it reads back as x. */
static int decimals_needed(float x, int sci)
{
    char buf[64];
    for (int d = 0; d < MAX_DECIMALS; ++d) {
        snprintf(buf, sizeof buf, sci ? "%.*e" : "%.*f", d, (double)x);
        if ((float)strtod(buf, NULL) == x) return d;
    }
    return MAX_DECIMALS;
}

/* numpy switches to scientific notation when the range is too wide. */
static int use_scientific(const float *data, int64_t rows, int64_t cols, int64_t ld)
{
    float lo = INFINITY, hi = 0.0f;
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

/* Formats one value: its own decimals, padded right to `frac` decimals. */
static void format_value(char *out, size_t n, float x, int sci, int frac)
{
    if (!isfinite(x)) {
        snprintf(out, n, "%s", isnan(x) ? "nan" : x > 0 ? "inf" : "-inf");
        return;
    }
    int d = decimals_needed(x, sci);
    char num[64];
    snprintf(num, sizeof num, sci ? "%.*e" : "%.*f", d, (double)x);
    if (d == 0 && !sci) strcat(num, ".");
    if (sci) {
        /* pad the mantissa, not the exponent: 1.5e+00 -> 1.5    e+00 style is
         * not numpy's; numpy pads mantissas with zeros in sci mode */
        snprintf(num, sizeof num, "%.*e", frac, (double)x);
        snprintf(out, n, "%s", num);
        return;
    }
    snprintf(out, n, "%s%*s", num, frac - d, "");
}

void fmt_matrix(FILE *f, const float *data, int64_t rows, int64_t cols, int64_t ld, int indent)
{
    const int vector = rows == 0;
    if (vector) rows = 1;
    const int sci = use_scientific(data, rows, cols, ld);
    int frac = 0;
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
            float x = data[i * ld + j];
            if (isfinite(x)) {
                int d = decimals_needed(x, sci);
                if (d > frac) frac = d;
            }
        }
    size_t width = 0;
    char buf[96];
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
            format_value(buf, sizeof buf, data[i * ld + j], sci, frac);
            if (strlen(buf) > width) width = strlen(buf);
        }
    if (!vector) fputc('[', f);
    for (int64_t i = 0; i < rows; ++i) {
        if (i > 0) fprintf(f, "\n%*s", indent + 1, "");
        fputc('[', f);
        for (int64_t j = 0; j < cols; ++j) {
            format_value(buf, sizeof buf, data[i * ld + j], sci, frac);
            /* right-align the integer part: numbers with fewer leading
             * characters get leading spaces */
            char *dot = strchr(buf, '.');
            size_t lead = dot ? (size_t)(dot - buf) : strlen(buf);
            size_t maxlead = width - (strlen(buf) - lead);
            fprintf(f, "%s%*s%s", j ? " " : "", (int)(maxlead - lead), "", buf);
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
