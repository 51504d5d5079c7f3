/* .npy files (NumPy format versions 1.0, 2.0 and 3.0), read and written.
 *
 * Layout: "\x93NUMPY", major, minor, header length (uint16 LE for 1.0,
 * uint32 LE for 2.0/3.0), then the header: a Python dict literal
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * padded with spaces and ended by '\n' (latin-1 for 1.0/2.0, UTF-8 for 3.0),
 * then exactly prod(shape) * itemsize bytes of data.
 *
 * Files are untrusted: every length is checked against the file size before
 * anything is allocated, the header is parsed by a strict literal grammar (no
 * eval, no pickles), and the data must fill the rest of the file exactly.
 */
#include "convert.h"
#include "encode.h"
#include "input.h"
#include "json.h" /* json_utf8_valid, for 3.0 headers */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_MAX_HEADER (1u << 20) /* 1 MiB; numpy itself refuses more than 10 kB by default */
#define NPY_ALIGN 64              /* numpy pads the header so data starts 64-byte aligned */

void attn_array_free(attn_array *a)
{
    if (!a) return;
    free(a->name);
    free(a->t.data);
    memset(a, 0, sizeof *a);
}

/* ------------------------------------------------------------ the header */

/* The element types attn reads from .npy files ('|' or '<' where numpy
 * writes either for one-byte types). */
static const struct {
    const char *descr;
    conv_kind kind;
} npy_types[] = {
    {"<f4", CONV_F32}, {"<f8", CONV_F64}, {"<f2", CONV_F16}, {"|b1", CONV_BOOL},
    {"|i1", CONV_I8},  {"<i1", CONV_I8},  {"<i2", CONV_I16}, {"<i4", CONV_I32},
    {"<i8", CONV_I64}, {"|u1", CONV_U8},  {"<u1", CONV_U8},  {"<u2", CONV_U16},
    {"<u4", CONV_U32}, {"<u8", CONV_U64},
};
#define NPY_READS "'<f4', '<f8', '<f2', '|b1' and little-endian integers"

typedef struct {
    conv_kind kind;
    char descr[4];
    bool fortran_order;
    int ndim;
    int64_t shape[ATTN_MAX_DIMS];
} npy_header;

/* A cursor over the header text with the first error it met. */
typedef struct {
    const char *s;
    size_t len, pos;
    attn_status status;
    char why[200];
} literal_parser;

static bool parse_fail(literal_parser *p, attn_status status, const char *fmt, ...)
    ATTN_PRINTF(3, 4);
static bool parse_fail(literal_parser *p, attn_status status, const char *fmt, ...)
{
    if (p->status == ATTN_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->why, sizeof p->why, fmt, ap);
        va_end(ap);
        p->status = status;
    }
    return false;
}

/* Python whitespace inside brackets (implicit line joining). */
static void skip_space(literal_parser *p)
{
    while (p->pos < p->len && strchr(" \t\n\r\f\v", p->s[p->pos]) && p->s[p->pos] != '\0') p->pos++;
}

static bool accept(literal_parser *p, char ch)
{
    skip_space(p);
    if (p->pos < p->len && p->s[p->pos] == ch) {
        p->pos++;
        return true;
    }
    return false;
}

static bool expect(literal_parser *p, char ch, const char *context)
{
    if (accept(p, ch)) return true;
    if (p->pos >= p->len)
        return parse_fail(p, ATTN_ERR_FORMAT, "header ends where '%c' %s was expected", ch, context);
    unsigned char found = (unsigned char)p->s[p->pos];
    if (found >= 0x20 && found < 0x7f)
        return parse_fail(p, ATTN_ERR_FORMAT, "header: expected '%c' %s at byte %zu, found '%c'",
                          ch, context, p->pos, found);
    return parse_fail(p, ATTN_ERR_FORMAT, "header: expected '%c' %s at byte %zu, found byte 0x%02x",
                      ch, context, p->pos, found);
}

/* A quoted Python string without escapes; *text points into the header. */
static bool parse_string(literal_parser *p, const char **text, size_t *len)
{
    skip_space(p);
    if (p->pos >= p->len || (p->s[p->pos] != '\'' && p->s[p->pos] != '"'))
        return parse_fail(p, ATTN_ERR_FORMAT, "header: expected a quoted string at byte %zu",
                          p->pos);
    char quote = p->s[p->pos++];
    size_t start = p->pos;
    while (p->pos < p->len && p->s[p->pos] != quote) {
        unsigned char ch = (unsigned char)p->s[p->pos];
        if (ch == '\\')
            return parse_fail(p, ATTN_ERR_FORMAT,
                              "header: escape sequences in strings are not supported (byte %zu)",
                              p->pos);
        if (ch < 0x20 || ch == 0x7f)
            return parse_fail(p, ATTN_ERR_FORMAT,
                              "header: control character 0x%02x in a string at byte %zu", ch,
                              p->pos);
        p->pos++;
    }
    if (p->pos >= p->len)
        return parse_fail(p, ATTN_ERR_FORMAT, "header: unterminated string at byte %zu",
                          start - 1);
    *text = p->s + start;
    *len = p->pos - start;
    p->pos++; /* closing quote */
    return true;
}

static bool is_ident_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_';
}

/* True or False. */
static bool parse_bool(literal_parser *p, bool *value)
{
    skip_space(p);
    size_t start = p->pos;
    while (p->pos < p->len && is_ident_char(p->s[p->pos])) p->pos++;
    size_t n = p->pos - start;
    if (n == 4 && memcmp(p->s + start, "True", 4) == 0) {
        *value = true;
        return true;
    }
    if (n == 5 && memcmp(p->s + start, "False", 5) == 0) {
        *value = false;
        return true;
    }
    return parse_fail(p, ATTN_ERR_FORMAT, "header: 'fortran_order' must be True or False (byte %zu)",
                      start);
}

/* A non-negative decimal integer (a shape entry). */
static bool parse_dimension(literal_parser *p, int64_t *value)
{
    skip_space(p);
    size_t start = p->pos;
    if (p->pos < p->len && p->s[p->pos] == '-')
        return parse_fail(p, ATTN_ERR_FORMAT, "header: negative dimension in 'shape' at byte %zu",
                          start);
    if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9')
        return parse_fail(p, ATTN_ERR_FORMAT,
                          "header: 'shape' entries must be non-negative integers (byte %zu)", start);
    int64_t v = 0;
    bool overflow = false;
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        int digit = p->s[p->pos] - '0';
        if (v > (INT64_MAX - digit) / 10) overflow = true;
        else v = v * 10 + digit;
        p->pos++;
    }
    size_t n = p->pos - start;
    if (p->pos < p->len && (is_ident_char(p->s[p->pos]) || p->s[p->pos] == '.'))
        return parse_fail(p, ATTN_ERR_FORMAT,
                          "header: 'shape' entries must be non-negative integers (byte %zu)", start);
    if (n > 1 && p->s[start] == '0' && v != 0)
        return parse_fail(p, ATTN_ERR_FORMAT, "header: leading zero in a 'shape' entry (byte %zu)",
                          start);
    if (overflow)
        return parse_fail(p, ATTN_ERR_OVERFLOW, "header: dimension %.*s does not fit in 64 bits",
                          (int)(n > 40 ? 40 : n), p->s + start);
    *value = v;
    return true;
}

/* A tuple of dimensions: (), (3,), (2, 3) or (2, 3,). */
static bool parse_shape(literal_parser *p, npy_header *h)
{
    skip_space(p);
    if (p->pos < p->len && p->s[p->pos] == '[')
        return parse_fail(p, ATTN_ERR_FORMAT, "header: 'shape' must be a tuple, not a list");
    if (!expect(p, '(', "to open 'shape'")) return false;
    h->ndim = 0;
    if (accept(p, ')')) return true;
    for (;;) {
        int64_t dim = 0;
        if (!parse_dimension(p, &dim)) return false;
        if (h->ndim == ATTN_MAX_DIMS)
            return parse_fail(p, ATTN_ERR_UNSUPPORTED,
                              "header: 'shape' has more than %d dimensions", ATTN_MAX_DIMS);
        h->shape[h->ndim++] = dim;
        if (accept(p, ',')) {
            if (accept(p, ')')) return true;
            continue;
        }
        if (!expect(p, ')', "to close 'shape'")) return false;
        /* "(3)" is the integer 3 in Python, not a tuple. */
        if (h->ndim == 1)
            return parse_fail(p, ATTN_ERR_FORMAT, "header: 'shape' (%lld) is not a tuple",
                              (long long)h->shape[0]);
        return true;
    }
}

/* Is `s` shaped like a numpy type string ("<i8", "|S10", "<M8[ns]", "O")? */
static bool looks_like_typestr(const char *s, size_t n)
{
    size_t i = 0;
    if (i < n && strchr("<>|=", s[i])) i++;
    if (i >= n || !((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z'))) return false;
    i++;
    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    if (i < n && s[i] == '[') {
        i++;
        while (i < n && is_ident_char(s[i])) i++;
        if (i >= n || s[i] != ']') return false;
        i++;
    }
    return i == n;
}

static bool parse_descr(literal_parser *p, npy_header *h)
{
    skip_space(p);
    if (p->pos < p->len && (p->s[p->pos] == '[' || p->s[p->pos] == '{'))
        return parse_fail(p, ATTN_ERR_UNSUPPORTED,
                          "structured dtypes are not supported (attn reads " NPY_READS ")");
    const char *d;
    size_t n;
    if (!parse_string(p, &d, &n)) return false;
    int shown = (int)(n > 40 ? 40 : n);
    for (size_t i = 0; n == 3 && i < sizeof npy_types / sizeof npy_types[0]; ++i)
        if (memcmp(d, npy_types[i].descr, 3) == 0) {
            h->kind = npy_types[i].kind;
            memcpy(h->descr, d, 3);
            h->descr[3] = '\0';
            return true;
        }
    if (n >= 1 && (d[0] == 'O' || (n >= 2 && strchr("<>|=", d[0]) && d[1] == 'O')) &&
             looks_like_typestr(d, n))
        return parse_fail(p, ATTN_ERR_UNSUPPORTED,
                          "dtype '%.*s' is an object array (pickled Python objects), "
                          "which attn never loads",
                          shown, d);
    else if (n >= 1 && d[0] == '>' && looks_like_typestr(d, n))
        return parse_fail(p, ATTN_ERR_UNSUPPORTED,
                          "big-endian dtype '%.*s' is not supported (attn reads " NPY_READS ")",
                          shown, d);
    else if (looks_like_typestr(d, n))
        return parse_fail(p, ATTN_ERR_UNSUPPORTED,
                          "dtype '%.*s' is not supported (attn reads " NPY_READS ")",
                          shown, d);
    return parse_fail(p, ATTN_ERR_FORMAT, "unknown dtype '%.*s'", shown, d);
}

/* The header dict: exactly the keys descr, fortran_order and shape. */
static bool parse_header(literal_parser *p, npy_header *h)
{
    bool have_descr = false, have_order = false, have_shape = false;
    if (!expect(p, '{', "to open the header dict")) return false;
    while (!accept(p, '}')) {
        const char *key;
        size_t n;
        if (!parse_string(p, &key, &n)) return false;
        if (!expect(p, ':', "after a key")) return false;
        bool *seen;
        bool ok;
        if (n == 5 && memcmp(key, "descr", 5) == 0) {
            seen = &have_descr;
            ok = parse_descr(p, h);
        } else if (n == 13 && memcmp(key, "fortran_order", 13) == 0) {
            seen = &have_order;
            ok = parse_bool(p, &h->fortran_order);
        } else if (n == 5 && memcmp(key, "shape", 5) == 0) {
            seen = &have_shape;
            ok = parse_shape(p, h);
        } else {
            return parse_fail(p, ATTN_ERR_FORMAT, "header: unexpected key '%.*s'",
                              (int)(n > 40 ? 40 : n), key);
        }
        if (!ok) return false;
        if (*seen)
            return parse_fail(p, ATTN_ERR_FORMAT, "header: duplicate key '%.*s'", (int)n, key);
        *seen = true;
        if (!accept(p, ',')) {
            if (!expect(p, '}', "to close the header dict")) return false;
            break;
        }
    }
    if (!have_descr) return parse_fail(p, ATTN_ERR_FORMAT, "header: missing key 'descr'");
    if (!have_order) return parse_fail(p, ATTN_ERR_FORMAT, "header: missing key 'fortran_order'");
    if (!have_shape) return parse_fail(p, ATTN_ERR_FORMAT, "header: missing key 'shape'");
    skip_space(p);
    if (p->pos != p->len)
        return parse_fail(p, ATTN_ERR_FORMAT, "header: unexpected text after the dict at byte %zu",
                          p->pos);
    return true;
}

/* "(2, 3)" for messages. */
static void format_shape(const int64_t *shape, int ndim, char *buf, size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "(");
    for (int i = 0; i < ndim && n < size; ++i)
        n += (size_t)snprintf(buf + n, size - n, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (n < size) snprintf(buf + n, size - n, ndim == 1 ? ",)" : ")");
}

/* -------------------------------------------------------------- reading */

typedef struct {
    FILE *fp;
    const char *path;
    int64_t file_size; /* -1 when not a regular file */
} npy_reader;

static attn_status read_exact(npy_reader *r, void *buf, size_t n, const char *what,
                              attn_error *err)
{
    size_t got = attn_read_retrying(r->fp, buf, n);
    if (got == n) return ATTN_OK;
    if (ferror(r->fp)) {
        char text[96];
        return attn_fail(err, ATTN_ERR_IO, "%s: read error in the %s: %s", r->path, what,
                         attn_errno_text(errno ? errno : EIO, text, sizeof text));
    }
    return attn_fail(err, ATTN_ERR_FORMAT, "%s: file is truncated: it ends inside the %s (%zu of %zu bytes)",
                     r->path, what, got, n);
}

/* C-order copy of a Fortran-order array: dst[i0,...,ik] = src[i0 + n0*(i1 + n1*(...))]. */
static void fortran_to_c(unsigned char *dst, const unsigned char *src, size_t elsize, int ndim,
                         const int64_t *shape, int64_t numel)
{
    int64_t fstride[ATTN_MAX_DIMS], index[ATTN_MAX_DIMS] = {0};
    int64_t s = 1;
    for (int d = 0; d < ndim; ++d) {
        fstride[d] = s;
        s *= shape[d];
    }
    int64_t src_offset = 0;
    for (int64_t i = 0; i < numel; ++i) {
        memcpy(dst + (size_t)i * elsize, src + (size_t)src_offset * elsize, elsize);
        /* Advance the C-order odometer, keeping the Fortran offset in step. */
        for (int d = ndim - 1; d >= 0; --d) {
            src_offset += fstride[d];
            if (++index[d] < shape[d]) break;
            src_offset -= fstride[d] * shape[d];
            index[d] = 0;
        }
    }
}

static attn_status read_npy(npy_reader *r, attn_array *out, attn_error *err)
{
    const char *path = r->path;
    unsigned char preamble[12];
    RETURN_IF_ERROR(read_exact(r, preamble, 8, "magic string and version", err));
    RETURN_IF(memcmp(preamble, NPY_MAGIC, NPY_MAGIC_LEN) != 0, err, ATTN_ERR_FORMAT,
              "%s: not a .npy file (bad magic string)", path);
    unsigned major = preamble[6], minor = preamble[7];
    RETURN_IF(major < 1 || major > 3 || minor != 0, err, ATTN_ERR_UNSUPPORTED,
              "%s: .npy format version %u.%u is not supported (1.0, 2.0 and 3.0 are)", path, major,
              minor);
    size_t length_bytes = major == 1 ? 2 : 4;
    RETURN_IF_ERROR(read_exact(r, preamble + 8, length_bytes, "header length", err));
    uint32_t header_len = (uint32_t)preamble[8] | (uint32_t)preamble[9] << 8;
    if (length_bytes == 4) header_len |= (uint32_t)preamble[10] << 16 | (uint32_t)preamble[11] << 24;
    int64_t data_start = 8 + (int64_t)length_bytes + header_len;
    RETURN_IF(header_len > NPY_MAX_HEADER, err, ATTN_ERR_FORMAT,
              "%s: header length %u exceeds the 1 MiB limit", path, header_len);
    RETURN_IF(r->file_size >= 0 && data_start > r->file_size, err, ATTN_ERR_FORMAT,
              "%s: header length %u is longer than the file (%lld bytes)", path, header_len,
              (long long)r->file_size);

    char *text = malloc(header_len + 1u);
    RETURN_IF(!text, err, ATTN_ERR_ALLOC, "%s: out of memory for the header", path);
    attn_status st = read_exact(r, text, header_len, "header", err);
    if (st != ATTN_OK) {
        free(text);
        return st;
    }
    text[header_len] = '\0';
    size_t bad;
    if (major == 3 && !json_utf8_valid((const unsigned char *)text, header_len, &bad)) {
        free(text);
        return attn_fail(err, ATTN_ERR_FORMAT, "%s: header is not valid UTF-8 (byte %zu)", path,
                         bad);
    }
    literal_parser p = {.s = text, .len = header_len};
    npy_header h = {0};
    bool parsed = parse_header(&p, &h);
    free(text);
    RETURN_IF(!parsed, err, p.status, "%s: %s", path, p.why);

    /* Sizes: every product checked, and the data must fill the file exactly. */
    char shape_text[200];
    format_shape(h.shape, h.ndim, shape_text, sizeof shape_text);
    const size_t item = conv_size(h.kind);
    const size_t out_item = h.kind == CONV_BOOL ? 1 : 4;
    int64_t numel = 1, bytes, out_bytes;
    for (int d = 0; d < h.ndim; ++d)
        RETURN_IF(!attn_mul_ok(numel, h.shape[d], &numel), err, ATTN_ERR_OVERFLOW,
                  "%s: shape %s has too many elements", path, shape_text);
    RETURN_IF(!attn_mul_ok(numel, (int64_t)item, &bytes) ||
                  !attn_mul_ok(numel, (int64_t)out_item, &out_bytes) ||
                  (uint64_t)bytes > SIZE_MAX / 2 || (uint64_t)out_bytes > SIZE_MAX / 2,
              err, ATTN_ERR_OVERFLOW, "%s: shape %s is too large to hold in memory", path,
              shape_text);
    if (r->file_size >= 0) {
        int64_t available = r->file_size - data_start;
        RETURN_IF(available < bytes, err, ATTN_ERR_FORMAT,
                  "%s: file is truncated: shape %s needs %lld data bytes, the file has %lld", path,
                  shape_text, (long long)bytes, (long long)available);
        RETURN_IF(available > bytes, err, ATTN_ERR_FORMAT,
                  "%s: %lld trailing bytes after the array data (shape %s)", path,
                  (long long)(available - bytes), shape_text);
    }

    /* The raw data (memory follows the bytes that arrive), then converted in
     * place after growing to the float32 size. */
    unsigned char *raw;
    RETURN_IF_ERROR(attn_read_bounded(r->fp, path, (size_t)bytes, r->file_size >= 0, "array data",
                                      &raw, err));
    if (attn_getc_retrying(r->fp) != EOF) {
        free(raw);
        return attn_fail(err, ATTN_ERR_FORMAT, "%s: trailing bytes after the array data (shape %s)",
                         path, shape_text);
    }
    if (out_bytes > bytes) {
        unsigned char *grown = realloc(raw, (size_t)out_bytes);
        if (!grown) {
            free(raw);
            return attn_fail(err, ATTN_ERR_ALLOC, "%s: out of memory converting %lld elements",
                             path, (long long)numel);
        }
        raw = grown;
    }
    bad = 0;
    if (!conv_run(h.kind, raw, (size_t)numel, raw, &out->inexact, &bad)) {
        unsigned value = raw[bad];
        free(raw);
        return attn_fail(err, ATTN_ERR_FORMAT, "%s: bool element %zu is %u, must be 0 or 1", path,
                         bad, value);
    }
    if (h.fortran_order && h.ndim > 1 && numel > 0) {
        unsigned char *c_order = malloc((size_t)out_bytes);
        if (!c_order) {
            free(raw);
            return attn_fail(err, ATTN_ERR_ALLOC, "%s: out of memory converting Fortran order",
                             path);
        }
        fortran_to_c(c_order, raw, out_item, h.ndim, h.shape, numel);
        free(raw);
        raw = c_order;
    } else if (out_bytes < bytes && out_bytes > 0) {
        unsigned char *smaller = realloc(raw, (size_t)out_bytes);
        if (smaller) raw = smaller;
    }
    memcpy(out->file_dtype, h.descr, sizeof h.descr);
    out->name = NULL;
    out->t = attn_tensor_make(raw, conv_dtype(h.kind), h.ndim, h.shape);
    return ATTN_OK;
}

attn_status attn_npy_read(const char *path, attn_array *out, attn_error *err)
{
    RETURN_IF(!out, err, ATTN_ERR_NULL, "attn_npy_read: out is NULL");
    memset(out, 0, sizeof *out);
    RETURN_IF(!path, err, ATTN_ERR_NULL, "attn_npy_read: path is NULL");
    FILE *fp;
    npy_reader r = {.path = path};
    RETURN_IF_ERROR(attn_open_input(path, &fp, &r.file_size, err));
    r.fp = fp;
    attn_status st = read_npy(&r, out, err);
    fclose(fp);
    if (st != ATTN_OK) attn_array_free(out);
    else attn_ok(err);
    return st;
}

/* -------------------------------------------------------------- writing */

/* The header exactly as numpy writes it, padded so the data is 64-byte aligned. */
attn_status attn_npy_encode(attn_atomic_file *f, const attn_tensor *t, attn_error *err)
{
    const char *path = f->dest.shown;
    RETURN_IF(!t, err, ATTN_ERR_NULL, "%s: tensor is NULL", path);
    RETURN_IF(t->ndim < 0 || t->ndim > ATTN_MAX_DIMS, err, ATTN_ERR_SHAPE,
              "%s: tensor has %d dimensions (0 to %d allowed)", path, t->ndim, ATTN_MAX_DIMS);
    RETURN_IF(t->dtype == ATTN_BF16, err, ATTN_ERR_DTYPE,
              "%s: .npy has no bfloat16 type; write .safetensors (BF16), or float32/float16", path);
    RETURN_IF(t->dtype != ATTN_F32 && t->dtype != ATTN_F16 && t->dtype != ATTN_BOOL, err,
              ATTN_ERR_DTYPE, "%s: unknown tensor dtype %d", path, (int)t->dtype);
    RETURN_IF_ERROR(attn_check_tensor(t, path, t->ndim, t->dtype, false, err));

    char shape_text[200];
    format_shape(t->shape, t->ndim, shape_text, sizeof shape_text);
    char header[512];
    int n = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     t->dtype == ATTN_F32 ? "<f4" : t->dtype == ATTN_F16 ? "<f2" : "|b1",
                     shape_text);
    size_t len = (size_t)n;
    size_t total = 10 + len + 1;
    size_t padded = (total + NPY_ALIGN - 1) / NPY_ALIGN * NPY_ALIGN;
    memset(header + len, ' ', padded - total);
    len += padded - total;
    header[len++] = '\n';

    unsigned char preamble[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                                  (unsigned char)(len & 0xff), (unsigned char)(len >> 8)};
    attn_atomic_write(f, preamble, sizeof preamble, err);
    attn_atomic_write(f, header, len, err);
    return attn_atomic_write_tensor(f, t, NULL, err);
}

attn_status attn_npy_write(const char *path, const attn_tensor *t, attn_error *err)
{
    RETURN_IF(!path, err, ATTN_ERR_NULL, "attn_npy_write: path is NULL");
    RETURN_IF(!t, err, ATTN_ERR_NULL, "%s: tensor is NULL", path);
    attn_atomic_file f;
    RETURN_IF_ERROR(attn_atomic_open(&f, path, err));
    attn_status st = attn_npy_encode(&f, t, err);
    if (st != ATTN_OK) {
        attn_atomic_abort(&f);
        return st;
    }
    return attn_atomic_commit(&f, err);
}
