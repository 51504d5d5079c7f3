/* Strict JSON tokens for the safetensors header (RFC 8259 grammar). */
#include "json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void json_init(json_cursor *c, const char *text, size_t len)
{
    memset(c, 0, sizeof *c);
    c->text = text;
    c->len = len;
}

bool json_fail(json_cursor *c, const char *fmt, ...)
{
    if (!c->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->why, sizeof c->why, fmt, ap);
        va_end(ap);
        c->failed = true;
    }
    return false;
}

static void skip_whitespace(json_cursor *c)
{
    while (c->pos < c->len) {
        char ch = c->text[c->pos];
        if (ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r') break;
        c->pos++;
    }
}

char json_peek(json_cursor *c)
{
    if (c->failed) return 0;
    skip_whitespace(c);
    return c->pos < c->len ? c->text[c->pos] : 0;
}

bool json_accept(json_cursor *c, char ch)
{
    if (c->failed) return false;
    skip_whitespace(c);
    if (c->pos < c->len && c->text[c->pos] == ch) {
        c->pos++;
        return true;
    }
    return false;
}

/* A printable description of the byte at the cursor, for messages. */
static void describe_next(const json_cursor *c, char *buf, size_t size)
{
    if (c->pos >= c->len) {
        snprintf(buf, size, "end of header");
        return;
    }
    unsigned char ch = (unsigned char)c->text[c->pos];
    if (ch >= 0x20 && ch < 0x7f)
        snprintf(buf, size, "'%c'", ch);
    else
        snprintf(buf, size, "byte 0x%02x", ch);
}

bool json_expect(json_cursor *c, char ch, const char *context)
{
    if (json_accept(c, ch)) return true;
    if (c->failed) return false;
    char found[32];
    describe_next(c, found, sizeof found);
    return json_fail(c, "expected '%c' %s at byte %zu, found %s", ch, context, c->pos, found);
}

static int hex_value(char ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* Reads the 4 hex digits of a \u escape at text[at]. */
static bool read_hex4(const json_cursor *c, size_t at, unsigned *out)
{
    if (at > c->len || c->len - at < 4) return false;
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
        int h = hex_value(c->text[at + (size_t)i]);
        if (h < 0) return false;
        v = v * 16 + (unsigned)h;
    }
    *out = v;
    return true;
}

static size_t encode_utf8(unsigned cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

bool json_string(json_cursor *c, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    if (c->failed) return false;
    if (!json_accept(c, '"')) {
        char found[32];
        describe_next(c, found, sizeof found);
        return json_fail(c, "expected a string at byte %zu, found %s", c->pos, found);
    }
    const size_t open = c->pos - 1; /* the opening quote */

    /* Pass 1: find the closing quote so the buffer is sized by this token only
     * (decoded text is never longer than the escaped text). */
    size_t end = c->pos;
    while (end < c->len && c->text[end] != '"') end += c->text[end] == '\\' ? 2 : 1;
    if (end >= c->len) return json_fail(c, "unterminated string starting at byte %zu", open);

    char *buf = malloc(end - c->pos + 1);
    if (!buf) {
        c->out_of_memory = true;
        return json_fail(c, "out of memory reading a string at byte %zu", open);
    }
    size_t n = 0, i = c->pos;
    while (i < end) {
        unsigned char ch = (unsigned char)c->text[i];
        if (ch < 0x20) {
            free(buf);
            return json_fail(c, "raw control character 0x%02x in a string at byte %zu", ch, i);
        }
        if (ch != '\\') {
            buf[n++] = (char)ch;
            i++;
            continue;
        }
        char esc = c->text[i + 1]; /* i + 1 < end: pass 1 stepped over it */
        const char *simple = strchr("\"\\/bfnrt", esc);
        if (esc != 0 && simple) {
            static const char decoded[] = "\"\\/\b\f\n\r\t";
            buf[n++] = decoded[simple - "\"\\/bfnrt"];
            i += 2;
            continue;
        }
        unsigned cp;
        if (esc != 'u' || !read_hex4(c, i + 2, &cp)) {
            free(buf);
            return json_fail(c, "invalid escape in a string at byte %zu", i);
        }
        i += 6;
        if (cp >= 0xdc00 && cp <= 0xdfff) {
            free(buf);
            return json_fail(c, "unpaired low surrogate \\u%04x at byte %zu", cp, i - 6);
        }
        if (cp >= 0xd800 && cp <= 0xdbff) {
            unsigned low;
            if (i + 6 > end || c->text[i] != '\\' || c->text[i + 1] != 'u' ||
                !read_hex4(c, i + 2, &low) || low < 0xdc00 || low > 0xdfff) {
                free(buf);
                return json_fail(c, "unpaired high surrogate \\u%04x at byte %zu", cp, i - 6);
            }
            cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
            i += 6;
        }
        n += encode_utf8(cp, buf + n);
    }
    buf[n] = '\0';
    c->pos = end + 1;
    *out = buf;
    *len = n;
    return true;
}

static bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }

bool json_number(json_cursor *c, json_number_kind *kind, int64_t *value, size_t *start,
                 size_t *token_len)
{
    *kind = JSON_NOT_INTEGER;
    *value = 0;
    *start = 0;
    *token_len = 0;
    if (c->failed) return false;
    skip_whitespace(c);
    size_t p = c->pos;
    const char *t = c->text;
    bool negative = false;
    if (p < c->len && t[p] == '-') {
        negative = true;
        p++;
    }
    if (p >= c->len || !is_digit(t[p])) {
        char found[32];
        describe_next(c, found, sizeof found);
        return json_fail(c, "expected a number at byte %zu, found %s", c->pos, found);
    }
    /* Integer part: 0, or a non-zero digit followed by digits (no leading zeros). */
    uint64_t magnitude = 0;
    bool too_big = false;
    if (t[p] == '0') {
        p++;
    } else {
        while (p < c->len && is_digit(t[p])) {
            unsigned d = (unsigned)(t[p] - '0');
            if (magnitude > (UINT64_MAX - d) / 10)
                too_big = true;
            else
                magnitude = magnitude * 10 + d;
            p++;
        }
    }
    bool integer = true;
    if (p < c->len && t[p] == '.') {
        integer = false;
        p++;
        if (p >= c->len || !is_digit(t[p]))
            return json_fail(c, "malformed number at byte %zu", c->pos);
        while (p < c->len && is_digit(t[p])) p++;
    }
    if (p < c->len && (t[p] == 'e' || t[p] == 'E')) {
        integer = false;
        p++;
        if (p < c->len && (t[p] == '+' || t[p] == '-')) p++;
        if (p >= c->len || !is_digit(t[p]))
            return json_fail(c, "malformed number at byte %zu", c->pos);
        while (p < c->len && is_digit(t[p])) p++;
    }
    if (p < c->len && is_digit(t[p])) /* "01": a leading zero */
        return json_fail(c, "malformed number (leading zero) at byte %zu", c->pos);

    *start = c->pos;
    *token_len = p - c->pos;
    c->pos = p;
    if (!integer) {
        *kind = JSON_NOT_INTEGER;
    } else if (too_big || magnitude > (uint64_t)INT64_MAX) {
        *kind = JSON_INT_TOO_BIG;
    } else {
        *kind = JSON_INT;
        *value = negative ? -(int64_t)magnitude : (int64_t)magnitude;
    }
    return true;
}

bool json_at_end(json_cursor *c)
{
    if (c->failed) return false;
    skip_whitespace(c);
    return c->pos == c->len;
}

bool json_utf8_valid(const unsigned char *s, size_t len, size_t *bad_offset)
{
    size_t i = 0;
    while (i < len) {
        unsigned char b = s[i];
        size_t extra;
        uint32_t cp, min;
        if (b < 0x80) {
            i++;
            continue;
        } else if ((b & 0xe0) == 0xc0) {
            extra = 1, cp = b & 0x1f, min = 0x80;
        } else if ((b & 0xf0) == 0xe0) {
            extra = 2, cp = b & 0x0f, min = 0x800;
        } else if ((b & 0xf8) == 0xf0) {
            extra = 3, cp = b & 0x07, min = 0x10000;
        } else {
            *bad_offset = i;
            return false;
        }
        if (len - i <= extra) {
            *bad_offset = i;
            return false;
        }
        for (size_t k = 1; k <= extra; ++k) {
            if ((s[i + k] & 0xc0) != 0x80) {
                *bad_offset = i;
                return false;
            }
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
            *bad_offset = i;
            return false;
        }
        i += extra + 1;
    }
    return true;
}

/* Bytes the escaped form of ch takes inside a JSON string. */
static size_t escaped_size(unsigned char ch)
{
    if (ch == '"' || ch == '\\' || ch == '\n' || ch == '\t' || ch == '\r' || ch == '\b' ||
        ch == '\f')
        return 2;
    return ch < 0x20 ? 6 : 1;
}

size_t json_quoted_size(const char *s)
{
    size_t n = 2;
    for (; *s; ++s) n += escaped_size((unsigned char)*s);
    return n;
}

size_t json_write_quoted(char *buf, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;
    buf[n++] = '"';
    for (; *s; ++s) {
        unsigned char ch = (unsigned char)*s;
        const char *named = NULL;
        switch (ch) {
        case '"': named = "\\\""; break;
        case '\\': named = "\\\\"; break;
        case '\n': named = "\\n"; break;
        case '\t': named = "\\t"; break;
        case '\r': named = "\\r"; break;
        case '\b': named = "\\b"; break;
        case '\f': named = "\\f"; break;
        default: break;
        }
        if (named) {
            buf[n++] = named[0];
            buf[n++] = named[1];
        } else if (ch < 0x20) {
            memcpy(buf + n, "\\u00", 4);
            buf[n + 4] = hex[ch >> 4];
            buf[n + 5] = hex[ch & 15];
            n += 6;
        } else {
            buf[n++] = (char)ch;
        }
    }
    buf[n++] = '"';
    return n;
}
