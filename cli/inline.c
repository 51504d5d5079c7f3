/* Inline matrices, matrix options (.npy or inline) and token lists. */
#include "inline.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Values collected row by row. */
typedef struct {
    float *data;
    int64_t count, cap;
    int64_t rows, cols;   /* cols: length of the first finished row */
    int64_t in_row;       /* values in the row being read */
    char *err;
    size_t err_size;
} collector;

static bool push_value(collector *c, double v)
{
    if (c->count == c->cap) {
        int64_t cap = c->cap ? 2 * c->cap : 16;
        float *d = realloc(c->data, sizeof(float) * (size_t)cap);
        if (!d) {
            snprintf(c->err, c->err_size, "out of memory");
            return false;
        }
        c->data = d;
        c->cap = cap;
    }
    c->data[c->count++] = (float)v;
    c->in_row++;
    return true;
}

static bool end_row(collector *c)
{
    if (c->in_row == 0) {
        snprintf(c->err, c->err_size, "row %lld is empty", (long long)c->rows + 1);
        return false;
    }
    if (c->rows == 0) {
        c->cols = c->in_row;
    } else if (c->in_row != c->cols) {
        snprintf(c->err, c->err_size, "row %lld has %lld values but row 1 has %lld",
                 (long long)c->rows + 1, (long long)c->in_row, (long long)c->cols);
        return false;
    }
    c->rows++;
    c->in_row = 0;
    return true;
}

/* Reads one number at *p; advances *p. */
static bool read_number(collector *c, const char **p)
{
    char *end;
    errno = 0;
    double v = strtod(*p, &end);
    if (end == *p) {
        char shown[16];
        snprintf(shown, sizeof shown, "%.10s", *p);
        snprintf(c->err, c->err_size, "expected a number at '%s'", shown);
        return false;
    }
    if (!isfinite(v) || (errno == ERANGE && fabs(v) > 1)) {
        snprintf(c->err, c->err_size, "'%.*s' is not a finite float32 number", (int)(end - *p), *p);
        return false;
    }
    if (fabs(v) > 3.4028234663852886e38) {
        snprintf(c->err, c->err_size, "'%.*s' is too large for float32", (int)(end - *p), *p);
        return false;
    }
    *p = end;
    return push_value(c, v);
}

static void skip_space(const char **p)
{
    while (isspace((unsigned char)**p)) ++*p;
}

/* "1,2,3;3,3,2": ';' ends a row; ',' or spaces separate values. */
static bool parse_plain(collector *c, const char *p)
{
    for (;;) {
        skip_space(&p);
        if (!read_number(c, &p)) return false;
        const char *after = p;
        skip_space(&p);
        if (*p == ',') {
            ++p;
            skip_space(&p);
            if (*p == '\0' || *p == ';' || *p == ',') {
                snprintf(c->err, c->err_size, "empty value after ',' in row %lld",
                         (long long)c->rows + 1);
                return false;
            }
            continue;
        }
        if (*p == ';') {
            ++p;
            if (!end_row(c)) return false;
            skip_space(&p);
            if (*p == '\0') return true; /* a trailing ';' */
            continue;
        }
        if (*p == '\0') return end_row(c);
        if (p > after && (isdigit((unsigned char)*p) || *p == '-' || *p == '+' || *p == '.'))
            continue; /* values separated by spaces */
        snprintf(c->err, c->err_size, "unexpected '%c' (rows are separated by ';', values by ',')",
                 *p);
        return false;
    }
}

/* "[[1,2,3],[3,3,2]]" or "[1,2,3]". */
static bool parse_brackets(collector *c, const char *p)
{
    int depth = 0;
    bool rows_nested = false, flat_values = false, closed = false;
    while (*p) {
        char ch = *p;
        if (isspace((unsigned char)ch) || ch == ',') {
            ++p;
        } else if (closed) {
            snprintf(c->err, c->err_size, "unexpected '%c' after the closing ']'", ch);
            return false;
        } else if (ch == '[') {
            if (++depth > 2) {
                snprintf(c->err, c->err_size, "too many '[': a matrix has two dimensions");
                return false;
            }
            if (depth == 2) {
                if (flat_values) goto mixed;
                rows_nested = true;
            }
            ++p;
        } else if (ch == ']') {
            if (depth == 0) {
                snprintf(c->err, c->err_size, "unbalanced ']'");
                return false;
            }
            if (depth == 2 || (depth == 1 && flat_values))
                if (!end_row(c)) return false;
            if (--depth == 0) closed = true;
            ++p;
        } else {
            if (depth == 0) {
                snprintf(c->err, c->err_size, "expected '['");
                return false;
            }
            if (depth == 1) {
                if (rows_nested) goto mixed;
                flat_values = true;
            }
            if (!read_number(c, &p)) return false;
            if (*p && !isspace((unsigned char)*p) && *p != ',' && *p != ']') {
                snprintf(c->err, c->err_size, "unexpected '%c' after a number", *p);
                return false;
            }
        }
    }
    if (depth != 0) {
        snprintf(c->err, c->err_size, "missing ']'");
        return false;
    }
    if (c->rows == 0) {
        snprintf(c->err, c->err_size, "the matrix is empty");
        return false;
    }
    return true;
mixed:
    snprintf(c->err, c->err_size, "mixes numbers and rows at the same level");
    return false;
}

bool inline_parse_matrix(const char *text, float **data, int64_t *rows, int64_t *cols, char *err,
                         size_t err_size)
{
    collector c = {.err = err, .err_size = err_size};
    const char *p = text;
    skip_space(&p);
    bool ok;
    if (*p == '\0') {
        snprintf(err, err_size, "the matrix is empty");
        ok = false;
    } else {
        ok = *p == '[' ? parse_brackets(&c, p) : parse_plain(&c, p);
    }
    if (!ok) {
        free(c.data);
        return false;
    }
    *data = c.data;
    *rows = c.rows;
    *cols = c.cols;
    return true;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

bool cli_matrix_arg(const cli_command *cmd, const char *option, const char *value, float **data,
                    int64_t *rows, int64_t *cols)
{
    if (ends_with(value, ".npy")) {
        attn_array a = {0};
        attn_error err = {0};
        if (attn_npy_read(value, &a, &err) != ATTN_OK) {
            fprintf(stderr, "attn %s: %s: %s\n", cmd->name, option, err.message);
            return false;
        }
        /* a batch of one, (1, rows, cols), is a matrix too */
        if (a.t.ndim == 3 && a.t.shape[0] == 1) {
            a.t.ndim = 2;
            a.t.shape[0] = a.t.shape[1];
            a.t.shape[1] = a.t.shape[2];
            a.t.stride[0] = a.t.stride[1];
            a.t.stride[1] = a.t.stride[2];
        }
        if (a.t.dtype != ATTN_F32 || a.t.ndim < 1 || a.t.ndim > 2 || attn_tensor_numel(&a.t) == 0) {
            fprintf(stderr, "attn %s: %s: %s must hold a non-empty 1-D or 2-D float array\n",
                    cmd->name, option, value);
            attn_array_free(&a);
            return false;
        }
        int64_t r = a.t.ndim == 2 ? a.t.shape[0] : 1, k = a.t.shape[a.t.ndim - 1];
        float *d = malloc(sizeof(float) * (size_t)(r * k));
        if (!d) {
            fprintf(stderr, "attn %s: out of memory\n", cmd->name);
            attn_array_free(&a);
            return false;
        }
        const float *src = a.t.data;
        int64_t rs = a.t.ndim == 2 ? a.t.stride[0] : 0, cs = a.t.stride[a.t.ndim - 1];
        bool finite = true;
        for (int64_t i = 0; i < r; ++i)
            for (int64_t j = 0; j < k; ++j) {
                d[i * k + j] = src[i * rs + j * cs];
                finite = finite && isfinite(d[i * k + j]);
            }
        attn_array_free(&a);
        if (!finite) {
            fprintf(stderr, "attn %s: %s: %s holds a NaN or infinity\n", cmd->name, option, value);
            free(d);
            return false;
        }
        *data = d;
        *rows = r;
        *cols = k;
        return true;
    }
    char err[160];
    if (!inline_parse_matrix(value, data, rows, cols, err, sizeof err)) {
        fprintf(stderr, "attn %s: %s: %s (write rows like \"1,2,3;3,3,2\" or give a .npy file)\n",
                cmd->name, option, err);
        return false;
    }
    return true;
}

int inline_split_words(const char *text, char ***words)
{
    const bool commas = strchr(text, ',') != NULL;
    int count = 0, cap = 0;
    char **list = NULL;
    const char *p = text;
    while (*p) {
        if (commas) {
            while (*p == ' ') ++p;
        } else {
            while (isspace((unsigned char)*p)) ++p;
        }
        if (!*p) break;
        const char *start = p;
        if (commas) {
            while (*p && *p != ',') ++p;
        } else {
            while (*p && !isspace((unsigned char)*p)) ++p;
        }
        const char *end = p;
        while (commas && end > start && end[-1] == ' ') --end;
        if (commas && *p == ',') ++p;
        if (count == cap) {
            cap = cap ? 2 * cap : 8;
            char **l = realloc(list, sizeof *l * (size_t)cap);
            if (!l) goto fail;
            list = l;
        }
        size_t n = (size_t)(end - start);
        list[count] = malloc(n + 1);
        if (!list[count]) goto fail;
        memcpy(list[count], start, n);
        list[count++][n] = '\0';
    }
    if (count == 0) goto fail;
    *words = list;
    return count;
fail:
    inline_free_words(list, count);
    return -1;
}

void inline_free_words(char **words, int count)
{
    if (!words) return;
    for (int i = 0; i < count; ++i) free(words[i]);
    free(words);
}
