/* .safetensors files, read and written.
 *
 * Layout: N as 8 bytes little-endian, then N bytes of UTF-8 JSON (padded with
 * spaces), then the data section:
 *   {"__metadata__": {"k": "v"},
 *    "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...}
 * Offsets are relative to the data section. Validation follows the reference
 * implementation: the tensors' byte ranges, sorted, must tile the data section
 * from 0 to its end with no hole or overlap, and each range must be exactly
 * prod(shape) * dtype size bytes.
 *
 * The header is walked by its schema with a JSON token cursor (json.h), so
 * memory stays proportional to the number of tensors.
 */
#include "convert.h"
#include "encode.h"
#include "input.h"
#include "json.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define ST_MAX_HEADER 100000000u /* the reference implementation's limit */
#define ST_MAX_HEADER_TEXT "100000000"
#define ST_READ_CHUNK 65536

/* ---------------------------------------------------------------- dtypes */

typedef struct {
    const char *name;
    bool supported;
    conv_kind kind; /* when supported */
    size_t size;
} st_dtype;

static const st_dtype st_dtypes[] = {
    {"F32", true, CONV_F32, 4},   {"F64", true, CONV_F64, 8},   {"F16", true, CONV_F16, 2},
    {"BF16", true, CONV_BF16, 2}, {"BOOL", true, CONV_BOOL, 1}, {"U8", true, CONV_U8, 1},
    {"I8", true, CONV_I8, 1},     {"U16", true, CONV_U16, 2},   {"I16", true, CONV_I16, 2},
    {"U32", true, CONV_U32, 4},   {"I32", true, CONV_I32, 4},   {"U64", true, CONV_U64, 8},
    {"I64", true, CONV_I64, 8},
    /* Known to the format, not to attn. */
    {"C64", false, 0, 8},     {"F8_E4M3", false, 0, 1}, {"F8_E5M2", false, 0, 1},
    {"F8_E8M0", false, 0, 1}, {"E8M0", false, 0, 1},    {"F4", false, 0, 1},
    {"F6_E2M3", false, 0, 1}, {"F6_E3M2", false, 0, 1},
};

static const st_dtype *find_dtype(const char *name)
{
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; ++i)
        if (strcmp(st_dtypes[i].name, name) == 0) return &st_dtypes[i];
    return NULL;
}

/* --------------------------------------------------------------- helpers */

/* A tensor name made safe for a one-line message: control bytes become '?',
 * long names are cut (at a UTF-8 character boundary) and end with "...". */
static const char *printable(const char *s, size_t len, char buf[64])
{
    size_t keep = len;
    if (keep > 48) {
        keep = 48;
        while (keep > 0 && ((unsigned char)s[keep] & 0xc0) == 0x80) keep--;
    }
    for (size_t i = 0; i < keep; ++i) {
        unsigned char ch = (unsigned char)s[i];
        buf[i] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
    }
    if (keep < len) {
        memcpy(buf + keep, "...", 4);
    } else {
        buf[keep] = '\0';
    }
    return buf;
}

/* "[2, 3]" for messages. */
static void format_shape(const int64_t *shape, int ndim, char *buf, size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && n < size; ++i)
        n += (size_t)snprintf(buf + n, size - n, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (n < size) snprintf(buf + n, size - n, "]");
}

/* ---------------------------------------------------------------- reading */

/* One tensor entry of the header. */
typedef struct {
    char *name; /* malloc'd, NUL-free */
    size_t name_len;
    const st_dtype *dtype;
    int ndim;
    int64_t shape[ATTN_MAX_DIMS];
    int64_t numel;
    int64_t begin, end; /* data_offsets */
    size_t header_index; /* position in the JSON object, to keep sorting stable */
} st_entry;

typedef struct {
    const char *path;
    attn_error *err;
    json_cursor c;
    st_entry *entries;
    size_t count, capacity;
} st_parser;

static attn_status syntax_error(st_parser *p)
{
    return attn_fail(p->err, p->c.out_of_memory ? ATTN_ERR_ALLOC : ATTN_ERR_FORMAT,
                     "%s: header JSON: %s", p->path, p->c.why);
}

#define JSON_OK(p, expr)                                                                      \
    do {                                                                                      \
        if (!(expr)) return syntax_error(p);                                                  \
    } while (0)

/* A JSON array of non-negative integers, at most `max` of them. */
static attn_status parse_integers(st_parser *p, const char *tensor, const char *key,
                                  int64_t *values, int max, int *count, attn_status too_many)
{
    *count = 0;
    RETURN_IF(json_peek(&p->c) != '[', p->err, ATTN_ERR_FORMAT,
              "%s: tensor '%s': '%s' must be an array of integers", p->path, tensor, key);
    JSON_OK(p, json_expect(&p->c, '[', "to open an array"));
    if (json_accept(&p->c, ']')) return ATTN_OK;
    for (;;) {
        char next = json_peek(&p->c);
        RETURN_IF(next != '-' && !(next >= '0' && next <= '9'), p->err, ATTN_ERR_FORMAT,
                  "%s: tensor '%s': '%s' entries must be non-negative integers", p->path, tensor,
                  key);
        json_number_kind kind;
        int64_t v;
        size_t start, len;
        JSON_OK(p, json_number(&p->c, &kind, &v, &start, &len));
        int shown = (int)(len > 30 ? 30 : len);
        const char *token = p->c.text + start;
        RETURN_IF(kind == JSON_NOT_INTEGER, p->err, ATTN_ERR_FORMAT,
                  "%s: tensor '%s': '%s' entry %.*s is not an integer", p->path, tensor, key,
                  shown, token);
        RETURN_IF(token[0] == '-' && !(kind == JSON_INT && v == 0), p->err, ATTN_ERR_FORMAT,
                  "%s: tensor '%s': '%s' entry %.*s is negative", p->path, tensor, key, shown,
                  token);
        RETURN_IF(kind == JSON_INT_TOO_BIG, p->err, ATTN_ERR_OVERFLOW,
                  "%s: tensor '%s': '%s' entry %.*s does not fit in 64 bits", p->path, tensor, key,
                  shown, token);
        RETURN_IF(*count == max, p->err, too_many, "%s: tensor '%s': '%s' has more than %d entries",
                  p->path, tensor, key, max);
        values[(*count)++] = v;
        if (!json_accept(&p->c, ',')) break;
    }
    JSON_OK(p, json_expect(&p->c, ']', "to close an array"));
    return ATTN_OK;
}

/* {"dtype": ..., "shape": [...], "data_offsets": [begin, end]}: exactly these keys. */
static attn_status parse_entry(st_parser *p, st_entry *e)
{
    char shown[64];
    const char *tensor = printable(e->name, e->name_len, shown);
    RETURN_IF(json_peek(&p->c) != '{', p->err, ATTN_ERR_FORMAT,
              "%s: tensor '%s': entry must be a JSON object", p->path, tensor);
    JSON_OK(p, json_expect(&p->c, '{', "to open a tensor entry"));
    bool have_dtype = false, have_shape = false, have_offsets = false;
    int64_t offsets[2];
    int offset_count = 0;
    /* Members; a ',' must be followed by another member (no trailing comma). */
    for (bool more = !json_accept(&p->c, '}'); more;) {
        char *key;
        size_t key_len;
        JSON_OK(p, json_string(&p->c, &key, &key_len));
        bool known = true, duplicate = false;
        attn_status st = ATTN_OK;
        if (!json_expect(&p->c, ':', "after a key")) {
            st = syntax_error(p);
        } else if (strcmp(key, "dtype") == 0 && key_len == 5) {
            duplicate = have_dtype;
            have_dtype = true;
            char *dtype = NULL;
            size_t dtype_len;
            if (json_peek(&p->c) != '"') {
                st = attn_fail(p->err, ATTN_ERR_FORMAT, "%s: tensor '%s': 'dtype' must be a string",
                               p->path, tensor);
            } else if (!json_string(&p->c, &dtype, &dtype_len)) {
                st = syntax_error(p);
            } else {
                char dshown[64];
                e->dtype = strlen(dtype) == dtype_len ? find_dtype(dtype) : NULL;
                if (!e->dtype)
                    st = attn_fail(p->err, ATTN_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%s'",
                                   p->path, tensor, printable(dtype, dtype_len, dshown));
                else if (!e->dtype->supported)
                    st = attn_fail(p->err, ATTN_ERR_UNSUPPORTED,
                                   "%s: tensor '%s': dtype %s is not supported (attn reads F32, "
                                   "F64, F16, BF16, BOOL and integers)",
                                   p->path, tensor, e->dtype->name);
            }
            free(dtype);
        } else if (strcmp(key, "shape") == 0 && key_len == 5) {
            duplicate = have_shape;
            have_shape = true;
            st = parse_integers(p, tensor, "shape", e->shape, ATTN_MAX_DIMS, &e->ndim,
                                ATTN_ERR_UNSUPPORTED);
        } else if (strcmp(key, "data_offsets") == 0 && key_len == 12) {
            duplicate = have_offsets;
            have_offsets = true;
            st = parse_integers(p, tensor, "data_offsets", offsets, 2, &offset_count,
                                ATTN_ERR_FORMAT);
        } else {
            known = false;
        }
        if (st == ATTN_OK && !known) {
            char kshown[64];
            st = attn_fail(p->err, ATTN_ERR_FORMAT, "%s: tensor '%s': unexpected key '%s'",
                           p->path, tensor, printable(key, key_len, kshown));
        }
        if (st == ATTN_OK && duplicate)
            st = attn_fail(p->err, ATTN_ERR_FORMAT, "%s: tensor '%s': duplicate key '%s'",
                           p->path, tensor, key);
        free(key);
        RETURN_IF_ERROR(st);
        if (!json_accept(&p->c, ',')) {
            JSON_OK(p, json_expect(&p->c, '}', "to close a tensor entry"));
            more = false;
        }
    }
    RETURN_IF(!have_dtype, p->err, ATTN_ERR_FORMAT, "%s: tensor '%s': missing 'dtype'", p->path,
              tensor);
    RETURN_IF(!have_shape, p->err, ATTN_ERR_FORMAT, "%s: tensor '%s': missing 'shape'", p->path,
              tensor);
    RETURN_IF(!have_offsets, p->err, ATTN_ERR_FORMAT, "%s: tensor '%s': missing 'data_offsets'",
              p->path, tensor);
    RETURN_IF(offset_count != 2, p->err, ATTN_ERR_FORMAT,
              "%s: tensor '%s': 'data_offsets' must be [begin, end], got %d entries", p->path,
              tensor, offset_count);
    e->begin = offsets[0];
    e->end = offsets[1];
    RETURN_IF(e->end < e->begin, p->err, ATTN_ERR_FORMAT,
              "%s: tensor '%s': data_offsets [%lld, %lld] end before they begin", p->path, tensor,
              (long long)e->begin, (long long)e->end);

    char shape_text[200];
    format_shape(e->shape, e->ndim, shape_text, sizeof shape_text);
    int64_t numel = 1, bytes;
    for (int d = 0; d < e->ndim; ++d)
        RETURN_IF(!attn_mul_ok(numel, e->shape[d], &numel), p->err, ATTN_ERR_OVERFLOW,
                  "%s: tensor '%s': shape %s has too many elements", p->path, tensor, shape_text);
    RETURN_IF(!attn_mul_ok(numel, (int64_t)e->dtype->size, &bytes), p->err, ATTN_ERR_OVERFLOW,
              "%s: tensor '%s': shape %s of %s overflows a 64-bit byte count", p->path, tensor,
              shape_text, e->dtype->name);
    RETURN_IF(bytes != e->end - e->begin, p->err, ATTN_ERR_FORMAT,
              "%s: tensor '%s': shape %s of %s is %lld bytes but data_offsets [%lld, %lld] span "
              "%lld",
              p->path, tensor, shape_text, e->dtype->name, (long long)bytes, (long long)e->begin,
              (long long)e->end, (long long)(e->end - e->begin));
    e->numel = numel;
    return ATTN_OK;
}

/* "__metadata__": an object whose values are all strings (kept by nobody). */
static attn_status parse_metadata(st_parser *p)
{
    RETURN_IF(json_peek(&p->c) != '{', p->err, ATTN_ERR_FORMAT,
              "%s: '__metadata__' must be a JSON object of strings", p->path);
    JSON_OK(p, json_expect(&p->c, '{', "to open '__metadata__'"));
    for (bool more = !json_accept(&p->c, '}'); more;) {
        char *key, *value;
        size_t key_len, value_len;
        JSON_OK(p, json_string(&p->c, &key, &key_len));
        char shown[64];
        printable(key, key_len, shown);
        free(key);
        JSON_OK(p, json_expect(&p->c, ':', "after a key"));
        RETURN_IF(json_peek(&p->c) != '"', p->err, ATTN_ERR_FORMAT,
                  "%s: '__metadata__' value of '%s' must be a string", p->path, shown);
        JSON_OK(p, json_string(&p->c, &value, &value_len));
        free(value);
        if (!json_accept(&p->c, ',')) {
            JSON_OK(p, json_expect(&p->c, '}', "to close '__metadata__'"));
            more = false;
        }
    }
    return ATTN_OK;
}

static attn_status parse_header(st_parser *p)
{
    RETURN_IF(json_peek(&p->c) != '{', p->err, ATTN_ERR_FORMAT,
              "%s: header is not a JSON object", p->path);
    JSON_OK(p, json_expect(&p->c, '{', "to open the header"));
    bool have_metadata = false;
    size_t index = 0;
    for (bool more = !json_accept(&p->c, '}'); more;) {
        char *name;
        size_t name_len;
        JSON_OK(p, json_string(&p->c, &name, &name_len));
        if (!json_expect(&p->c, ':', "after a tensor name")) {
            free(name);
            return syntax_error(p);
        }
        if (name_len == 12 && strcmp(name, "__metadata__") == 0) {
            free(name);
            RETURN_IF(have_metadata, p->err, ATTN_ERR_FORMAT, "%s: duplicate '__metadata__'",
                      p->path);
            have_metadata = true;
            RETURN_IF_ERROR(parse_metadata(p));
        } else {
            if (p->count == p->capacity) {
                size_t cap = p->capacity ? p->capacity * 2 : 16;
                st_entry *grown = realloc(p->entries, cap * sizeof *grown);
                if (!grown) {
                    free(name);
                    return attn_fail(p->err, ATTN_ERR_ALLOC, "%s: out of memory for the header",
                                     p->path);
                }
                p->entries = grown;
                p->capacity = cap;
            }
            st_entry *e = &p->entries[p->count++];
            memset(e, 0, sizeof *e);
            e->name = name;
            e->name_len = name_len;
            e->header_index = index++;
            char shown[64];
            RETURN_IF(strlen(name) != name_len, p->err, ATTN_ERR_UNSUPPORTED,
                      "%s: tensor '%s': names containing NUL characters are not supported",
                      p->path, printable(name, name_len, shown));
            RETURN_IF_ERROR(parse_entry(p, e));
        }
        if (!json_accept(&p->c, ',')) {
            JSON_OK(p, json_expect(&p->c, '}', "to close the header"));
            more = false;
        }
    }
    /* Only whitespace may follow (writers pad the header with spaces). */
    if (!json_at_end(&p->c)) {
        if (p->c.failed) return syntax_error(p);
        return attn_fail(p->err, ATTN_ERR_FORMAT,
                         "%s: unexpected data after the header JSON object at byte %zu", p->path,
                         p->c.pos);
    }
    return ATTN_OK;
}

static int compare_by_name(const void *a, const void *b)
{
    return strcmp(((const st_entry *)a)->name, ((const st_entry *)b)->name);
}

static int compare_by_offset(const void *a, const void *b)
{
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->header_index < y->header_index ? -1 : x->header_index > y->header_index;
}

/* Names unique; byte ranges tile [0, data_size) exactly. Sorts the entries
 * into data order. data_size < 0: unknown (not a regular file). */
static attn_status check_layout(st_parser *p, int64_t data_size)
{
    char shown[64], other[64];
    if (p->count > 1) qsort(p->entries, p->count, sizeof *p->entries, compare_by_name);
    for (size_t i = 1; i < p->count; ++i)
        RETURN_IF(strcmp(p->entries[i - 1].name, p->entries[i].name) == 0, p->err,
                  ATTN_ERR_FORMAT, "%s: duplicate tensor name '%s'", p->path,
                  printable(p->entries[i].name, p->entries[i].name_len, shown));

    if (p->count > 1) qsort(p->entries, p->count, sizeof *p->entries, compare_by_offset);
    int64_t covered = 0;
    for (size_t i = 0; i < p->count; ++i) {
        const st_entry *e = &p->entries[i];
        const char *name = printable(e->name, e->name_len, shown);
        RETURN_IF(i == 0 && e->begin != 0, p->err, ATTN_ERR_FORMAT,
                  "%s: data offsets do not start at 0: the first tensor '%s' begins at %lld",
                  p->path, name, (long long)e->begin);
        RETURN_IF(e->begin < covered, p->err, ATTN_ERR_FORMAT,
                  "%s: tensor '%s' data_offsets [%lld, %lld] overlap tensor '%s' ending at %lld",
                  p->path, name, (long long)e->begin, (long long)e->end,
                  printable(p->entries[i - 1].name, p->entries[i - 1].name_len, other),
                  (long long)covered);
        RETURN_IF(e->begin > covered, p->err, ATTN_ERR_FORMAT,
                  "%s: data bytes [%lld, %lld) belong to no tensor (gap before tensor '%s')",
                  p->path, (long long)covered, (long long)e->begin, name);
        covered = e->end;
    }
    if (data_size >= 0) {
        RETURN_IF(covered > data_size, p->err, ATTN_ERR_FORMAT,
                  "%s: file is truncated: the tensors need %lld data bytes, the file has %lld",
                  p->path, (long long)covered, (long long)data_size);
        RETURN_IF(covered < data_size, p->err, ATTN_ERR_FORMAT,
                  "%s: %lld trailing data bytes are not covered by any tensor", p->path,
                  (long long)(data_size - covered));
    }
    return ATTN_OK;
}

/* Reads one tensor's bytes and converts them to float32 / bool, a chunk at
 * a time. From a pipe (known_size false) the result grows as data comes. */
static attn_status read_tensor(st_parser *p, FILE *fp, const st_entry *e, bool known_size,
                               unsigned char *scratch, attn_array *out)
{
    const size_t in_size = e->dtype->size;
    const bool is_bool = e->dtype->kind == CONV_BOOL;
    const size_t out_size = is_bool ? 1 : sizeof(float);
    char shown[64];
    const char *name = printable(e->name, e->name_len, shown);
    RETURN_IF((uint64_t)e->numel > SIZE_MAX / out_size / 2, p->err, ATTN_ERR_OVERFLOW,
              "%s: tensor '%s' is too large to hold in memory", p->path, name);
    const size_t numel = (size_t)e->numel;
    const size_t per_chunk = ST_READ_CHUNK / in_size;
    size_t cap = known_size || numel <= per_chunk ? numel : per_chunk;
    unsigned char *data = malloc(cap ? cap * out_size : 1);
    RETURN_IF(!data, p->err, ATTN_ERR_ALLOC, "%s: tensor '%s': out of memory for %zu elements",
              p->path, name, cap);
    out->t = attn_tensor_make(data, conv_dtype(e->dtype->kind), e->ndim, e->shape);
    snprintf(out->file_dtype, sizeof out->file_dtype, "%s", e->dtype->name);

    for (size_t done = 0; done < numel;) {
        size_t n = numel - done < per_chunk ? numel - done : per_chunk;
        if (attn_read_retrying(fp, scratch, in_size * n) != in_size * n) {
            char text[96];
            if (ferror(fp))
                return attn_fail(p->err, ATTN_ERR_IO, "%s: read error in tensor '%s': %s",
                                 p->path, name, attn_errno_text(errno ? errno : EIO, text,
                                                                sizeof text));
            return attn_fail(p->err, ATTN_ERR_FORMAT,
                             "%s: file is truncated inside the data of tensor '%s'", p->path, name);
        }
        if (done + n > cap) {
            size_t next = cap > numel / 2 ? numel : cap * 2;
            unsigned char *grown = realloc(data, next * out_size);
            RETURN_IF(!grown, p->err, ATTN_ERR_ALLOC,
                      "%s: tensor '%s': out of memory for %zu elements", p->path, name, next);
            data = grown;
            out->t.data = data;
            cap = next;
        }
        size_t bad = 0;
        RETURN_IF(!conv_run(e->dtype->kind, scratch, n, data + done * out_size, &out->inexact,
                            &bad),
                  p->err, ATTN_ERR_FORMAT, "%s: tensor '%s': bool element %zu is %u, must be 0 or 1",
                  p->path, name, done + bad, (unsigned)scratch[bad]);
        done += n;
    }
    return ATTN_OK;
}

static attn_status read_safetensors(st_parser *p, FILE *fp, int64_t file_size,
                                    attn_safetensors *out)
{
    const char *path = p->path;
    attn_error *err = p->err;
    unsigned char prefix[8];
    size_t got = attn_read_retrying(fp, prefix, 8);
    if (got != 8) {
        char text[96];
        RETURN_IF(ferror(fp), err, ATTN_ERR_IO, "%s: read error: %s", path,
                  attn_errno_text(errno ? errno : EIO, text, sizeof text));
        return attn_fail(err, ATTN_ERR_FORMAT,
                         "%s: file is %zu bytes, too short for the 8-byte header length", path,
                         got);
    }
    uint64_t header_len = 0;
    for (int k = 7; k >= 0; --k) header_len = header_len << 8 | prefix[k];
    RETURN_IF(header_len > ST_MAX_HEADER, err, ATTN_ERR_FORMAT,
              "%s: header length %llu exceeds the " ST_MAX_HEADER_TEXT "-byte limit", path,
              (unsigned long long)header_len);
    RETURN_IF(file_size >= 0 && (int64_t)header_len > file_size - 8, err, ATTN_ERR_FORMAT,
              "%s: header length %llu is longer than the rest of the file (%lld bytes)", path,
              (unsigned long long)header_len, (long long)(file_size - 8));

    /* From a pipe the declared length is not trusted: memory follows the data. */
    unsigned char *bytes;
    RETURN_IF_ERROR(attn_read_bounded(fp, path, (size_t)header_len, file_size >= 0, "header",
                                      &bytes, err));
    char *text = realloc(bytes, (size_t)header_len + 1);
    if (!text) {
        free(bytes);
        return attn_fail(err, ATTN_ERR_ALLOC, "%s: out of memory for the header", path);
    }
    text[header_len] = '\0';
    size_t bad;
    if (!json_utf8_valid((const unsigned char *)text, header_len, &bad)) {
        free(text);
        return attn_fail(err, ATTN_ERR_FORMAT, "%s: header is not valid UTF-8 (byte %zu)", path,
                         bad);
    }
    json_init(&p->c, text, header_len);
    attn_status st = parse_header(p);
    free(text);
    RETURN_IF_ERROR(st);
    RETURN_IF_ERROR(check_layout(p, file_size >= 0 ? file_size - 8 - (int64_t)header_len : -1));

    /* The data section, tensor by tensor in offset order. */
    out->arrays = p->count ? calloc(p->count, sizeof *out->arrays) : NULL;
    RETURN_IF(p->count && !out->arrays, err, ATTN_ERR_ALLOC, "%s: out of memory", path);
    unsigned char *scratch = malloc(ST_READ_CHUNK);
    RETURN_IF(!scratch, err, ATTN_ERR_ALLOC, "%s: out of memory", path);
    for (size_t i = 0; i < p->count; ++i) {
        attn_array *a = &out->arrays[out->count++];
        st = read_tensor(p, fp, &p->entries[i], file_size >= 0, scratch, a);
        a->name = p->entries[i].name; /* ownership moves to the result */
        p->entries[i].name = NULL;
        if (st != ATTN_OK) break;
    }
    free(scratch);
    RETURN_IF_ERROR(st);
    RETURN_IF(attn_getc_retrying(fp) != EOF, err, ATTN_ERR_FORMAT,
              "%s: trailing data bytes are not covered by any tensor", path);
    return ATTN_OK;
}

attn_status attn_safetensors_read(const char *path, attn_safetensors *out, attn_error *err)
{
    RETURN_IF(!out, err, ATTN_ERR_NULL, "attn_safetensors_read: out is NULL");
    memset(out, 0, sizeof *out);
    RETURN_IF(!path, err, ATTN_ERR_NULL, "attn_safetensors_read: path is NULL");
    FILE *fp;
    int64_t file_size;
    RETURN_IF_ERROR(attn_open_input(path, &fp, &file_size, err));

    st_parser p = {.path = path, .err = err};
    attn_status st = read_safetensors(&p, fp, file_size, out);
    fclose(fp);
    for (size_t i = 0; i < p.count; ++i) free(p.entries[i].name);
    free(p.entries);
    if (st != ATTN_OK) attn_safetensors_free(out);
    else attn_ok(err);
    return st;
}

void attn_safetensors_free(attn_safetensors *st)
{
    if (!st) return;
    for (size_t i = 0; i < st->count; ++i) attn_array_free(&st->arrays[i]);
    free(st->arrays);
    st->arrays = NULL;
    st->count = 0;
}

const attn_array *attn_safetensors_find(const attn_safetensors *st, const char *name)
{
    if (!st || !name) return NULL;
    for (size_t i = 0; i < st->count; ++i)
        if (st->arrays[i].name && strcmp(st->arrays[i].name, name) == 0) return &st->arrays[i];
    return NULL;
}

/* ---------------------------------------------------------------- writing */

typedef struct {
    char *data;
    size_t len, cap;
    bool failed;
} text_buffer;

static char *reserve(text_buffer *b, size_t extra)
{
    if (b->failed) return NULL;
    if (extra > SIZE_MAX - b->len - 1) {
        b->failed = true;
        return NULL;
    }
    if (b->len + extra + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + extra + 1) cap = cap > SIZE_MAX / 2 ? b->len + extra + 1 : cap * 2;
        char *grown = realloc(b->data, cap);
        if (!grown) {
            b->failed = true;
            return NULL;
        }
        b->data = grown;
        b->cap = cap;
    }
    return b->data + b->len;
}

static void append(text_buffer *b, const char *s)
{
    size_t n = strlen(s);
    char *at = reserve(b, n);
    if (!at) return;
    memcpy(at, s, n + 1);
    b->len += n;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Names present, non-empty, valid UTF-8, not reserved, unique; tensors valid. */
static attn_status check_write_args(const char *path, const char *const *names,
                                    const attn_tensor *tensors, size_t count, attn_error *err)
{
    for (size_t i = 0; i < count; ++i) {
        const char *name = names[i];
        RETURN_IF(!name, err, ATTN_ERR_NULL, "%s: tensor name %zu is NULL", path, i);
        RETURN_IF(!*name, err, ATTN_ERR_ARG, "%s: tensor name %zu is empty", path, i);
        char shown[64];
        size_t len = strlen(name), bad;
        printable(name, len, shown);
        RETURN_IF(!json_utf8_valid((const unsigned char *)name, len, &bad), err, ATTN_ERR_ARG,
                  "%s: tensor name %zu is not valid UTF-8", path, i);
        RETURN_IF(strcmp(name, "__metadata__") == 0, err, ATTN_ERR_ARG,
                  "%s: '__metadata__' is reserved and cannot name a tensor", path);
        const attn_tensor *t = &tensors[i];
        char what[128];
        snprintf(what, sizeof what, "%s: tensor '%s'", path, shown);
        RETURN_IF(t->ndim < 0 || t->ndim > ATTN_MAX_DIMS, err, ATTN_ERR_SHAPE,
                  "%s has %d dimensions (0 to %d allowed)", what, t->ndim, ATTN_MAX_DIMS);
        RETURN_IF(t->dtype != ATTN_F32 && t->dtype != ATTN_BF16 && t->dtype != ATTN_F16 &&
                      t->dtype != ATTN_BOOL,
                  err, ATTN_ERR_DTYPE, "%s has unknown dtype %d", what, (int)t->dtype);
        RETURN_IF_ERROR(attn_check_tensor(t, what, t->ndim, t->dtype, false, err));
    }
    if (count < 2) return ATTN_OK;
    const char **sorted = malloc(count * sizeof *sorted);
    RETURN_IF(!sorted, err, ATTN_ERR_ALLOC, "%s: out of memory", path);
    memcpy(sorted, names, count * sizeof *sorted);
    qsort(sorted, count, sizeof *sorted, compare_names);
    attn_status st = ATTN_OK;
    for (size_t i = 1; i < count && st == ATTN_OK; ++i)
        if (strcmp(sorted[i - 1], sorted[i]) == 0) {
            char shown[64];
            st = attn_fail(err, ATTN_ERR_ARG, "%s: duplicate tensor name '%s'", path,
                           printable(sorted[i], strlen(sorted[i]), shown));
        }
    free(sorted);
    return st;
}

/* The JSON header, padded with spaces to a multiple of 8 bytes. */
static attn_status build_header(const char *path, const char *const *names,
                                const attn_tensor *tensors, size_t count, text_buffer *b,
                                attn_error *err)
{
    int64_t offset = 0;
    append(b, "{");
    for (size_t i = 0; i < count; ++i) {
        const attn_tensor *t = &tensors[i];
        int64_t bytes;
        RETURN_IF(!attn_mul_ok(attn_tensor_numel(t), (int64_t)attn_dtype_size(t->dtype), &bytes) ||
                      !attn_add_ok(offset, bytes, &bytes),
                  err, ATTN_ERR_OVERFLOW, "%s: total data size overflows", path);
        if (i) append(b, ",");
        char *at = reserve(b, json_quoted_size(names[i]));
        if (at) b->len += json_write_quoted(at, names[i]);
        append(b, ":{\"dtype\":\"");
        append(b, t->dtype == ATTN_BOOL   ? "BOOL"
                  : t->dtype == ATTN_BF16 ? "BF16"
                  : t->dtype == ATTN_F16  ? "F16"
                                          : "F32");
        append(b, "\",\"shape\":[");
        char number[48];
        for (int d = 0; d < t->ndim; ++d) {
            snprintf(number, sizeof number, d ? ",%lld" : "%lld", (long long)t->shape[d]);
            append(b, number);
        }
        snprintf(number, sizeof number, "%lld,%lld", (long long)offset, (long long)bytes);
        append(b, "],\"data_offsets\":[");
        append(b, number);
        append(b, "]}");
        offset = bytes;
    }
    append(b, "}");
    while (!b->failed && b->len % 8 != 0) append(b, " ");
    RETURN_IF(b->failed, err, ATTN_ERR_ALLOC, "%s: out of memory for the header", path);
    RETURN_IF(b->len > ST_MAX_HEADER, err, ATTN_ERR_ARG,
              "%s: header would be %zu bytes, over the " ST_MAX_HEADER_TEXT "-byte limit", path,
              b->len);
    return ATTN_OK;
}

attn_status attn_safetensors_encode(attn_atomic_file *f, const char *const *names,
                                    const attn_tensor *tensors, size_t count, attn_error *err)
{
    const char *path = f->dest.shown;
    RETURN_IF(count > 0 && (!names || !tensors), err, ATTN_ERR_NULL,
              "%s: names or tensors is NULL", path);
    RETURN_IF_ERROR(check_write_args(path, names, tensors, count, err));

    text_buffer header = {0};
    attn_status st = build_header(path, names, tensors, count, &header, err);
    if (st != ATTN_OK) {
        free(header.data);
        return st;
    }
    unsigned char prefix[8];
    for (int k = 0; k < 8; ++k) prefix[k] = (unsigned char)((uint64_t)header.len >> (8 * k));
    attn_atomic_write(f, prefix, sizeof prefix, err);
    st = attn_atomic_write(f, header.data, header.len, err);
    free(header.data);
    for (size_t i = 0; i < count && st == ATTN_OK; ++i) {
        char shown[64];
        char what[80];
        snprintf(what, sizeof what, "tensor '%s'", printable(names[i], strlen(names[i]), shown));
        st = attn_atomic_write_tensor(f, &tensors[i], what, err);
    }
    return st;
}

attn_status attn_safetensors_write(const char *path, const char *const *names,
                                   const attn_tensor *tensors, size_t count, attn_error *err)
{
    RETURN_IF(!path, err, ATTN_ERR_NULL, "attn_safetensors_write: path is NULL");
    RETURN_IF(count > 0 && (!names || !tensors), err, ATTN_ERR_NULL,
              "%s: names or tensors is NULL", path);
    /* arguments first: a bad call leaves no temporary file behind */
    RETURN_IF_ERROR(check_write_args(path, names, tensors, count, err));
    attn_atomic_file f;
    RETURN_IF_ERROR(attn_atomic_open(&f, path, err));
    attn_status st = attn_safetensors_encode(&f, names, tensors, count, err);
    if (st != ATTN_OK) {
        attn_atomic_abort(&f);
        return st;
    }
    return attn_atomic_commit(&f, err);
}
