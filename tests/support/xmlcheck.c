/* A strict XML 1.0 well-formedness checker (recursive descent over the
 * document grammar of the XML 1.0 recommendation, without a DTD). */
#include "xmlcheck.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define XML_MAX_DEPTH 512
#define XML_MAX_ATTRS 64
#define XML_MAX_NAME 256

typedef struct {
    const unsigned char *p, *end, *start;
    char *err;
    size_t err_size;
    bool failed;
    xml_element_fn on_element;
    xml_text_fn on_text;
    void *user;
    /* open elements */
    char stack[XML_MAX_DEPTH][XML_MAX_NAME];
    int depth;
    /* scratch for text and attribute values */
    char *buf;
    size_t len, cap;
} parser;

static bool fail(parser *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(parser *x, const char *fmt, ...)
{
    if (x->failed) return false;
    x->failed = true;
    int line = 1, col = 1;
    for (const unsigned char *q = x->start; q < x->p && q < x->end; ++q) {
        if (*q == '\n') {
            ++line;
            col = 1;
        } else if ((*q & 0xC0) != 0x80) {
            ++col;
        }
    }
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(x->err, x->err_size, "line %d, column %d: %s", line, col, msg);
    return false;
}

static bool at_end(const parser *x)
{
    return x->p >= x->end;
}

static bool starts(const parser *x, const char *s)
{
    size_t n = strlen(s);
    return (size_t)(x->end - x->p) >= n && !memcmp(x->p, s, n);
}

/* Decodes one UTF-8 character at q (not past end); returns its length, 0 if
 * malformed (overlong, surrogate, out of range, truncated). */
static int utf8_decode(const unsigned char *q, const unsigned char *end, uint32_t *cp)
{
    unsigned c = q[0];
    int len;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xE0) == 0xC0) {
        len = 2, v = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3, v = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (end - q < len) return 0;
    for (int i = 1; i < len; ++i) {
        if ((q[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (q[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

static bool is_xml_char(uint32_t c)
{
    return c == 0x9 || c == 0xA || c == 0xD || (c >= 0x20 && c <= 0xD7FF) ||
           (c >= 0xE000 && c <= 0xFFFD) || (c >= 0x10000 && c <= 0x10FFFF);
}

/* Next character (validated); advances. */
static bool next_char(parser *x, uint32_t *cp)
{
    if (at_end(x)) return fail(x, "unexpected end of document");
    int n = utf8_decode(x->p, x->end, cp);
    if (!n) return fail(x, "invalid UTF-8");
    if (!is_xml_char(*cp)) return fail(x, "character U+%04X is not allowed in XML", (unsigned)*cp);
    x->p += n;
    return true;
}

static bool is_space(unsigned c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static bool skip_space(parser *x)
{
    const unsigned char *before = x->p;
    while (!at_end(x) && is_space(*x->p)) ++x->p;
    return x->p > before;
}

static bool name_start(uint32_t c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || c == ':' ||
           (c >= 0xC0 && c <= 0xD6) || (c >= 0xD8 && c <= 0xF6) || (c >= 0xF8 && c <= 0x2FF) ||
           (c >= 0x370 && c <= 0x37D) || (c >= 0x37F && c <= 0x1FFF) ||
           (c >= 0x200C && c <= 0x200D) || (c >= 0x2070 && c <= 0x218F) ||
           (c >= 0x2C00 && c <= 0x2FEF) || (c >= 0x3001 && c <= 0xD7FF) ||
           (c >= 0xF900 && c <= 0xFDCF) || (c >= 0xFDF0 && c <= 0xFFFD) ||
           (c >= 0x10000 && c <= 0xEFFFF);
}

static bool name_char(uint32_t c)
{
    return name_start(c) || c == '-' || c == '.' || (c >= '0' && c <= '9') || c == 0xB7 ||
           (c >= 0x300 && c <= 0x36F) || (c >= 0x203F && c <= 0x2040);
}

/* Reads a Name into out. */
static bool read_name(parser *x, char *out, size_t size)
{
    const unsigned char *begin = x->p;
    uint32_t c;
    if (at_end(x)) return fail(x, "expected a name");
    int n = utf8_decode(x->p, x->end, &c);
    if (!n || !name_start(c)) return fail(x, "expected a name");
    x->p += n;
    while (!at_end(x)) {
        n = utf8_decode(x->p, x->end, &c);
        if (!n || !name_char(c)) break;
        x->p += n;
    }
    size_t len = (size_t)(x->p - begin);
    if (len >= size) return fail(x, "name too long");
    memcpy(out, begin, len);
    out[len] = '\0';
    return true;
}

static bool buf_add(parser *x, const void *data, size_t n)
{
    if (x->len + n + 1 > x->cap) {
        size_t cap = x->cap ? x->cap : 256;
        while (cap < x->len + n + 1) cap *= 2;
        char *b = realloc(x->buf, cap);
        if (!b) return fail(x, "out of memory");
        x->buf = b;
        x->cap = cap;
    }
    memcpy(x->buf + x->len, data, n);
    x->len += n;
    x->buf[x->len] = '\0';
    return true;
}

static bool buf_add_cp(parser *x, uint32_t c)
{
    unsigned char u[4];
    size_t n;
    if (c < 0x80) {
        u[0] = (unsigned char)c;
        n = 1;
    } else if (c < 0x800) {
        u[0] = (unsigned char)(0xC0 | (c >> 6));
        u[1] = (unsigned char)(0x80 | (c & 0x3F));
        n = 2;
    } else if (c < 0x10000) {
        u[0] = (unsigned char)(0xE0 | (c >> 12));
        u[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
        u[2] = (unsigned char)(0x80 | (c & 0x3F));
        n = 3;
    } else {
        u[0] = (unsigned char)(0xF0 | (c >> 18));
        u[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
        u[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
        u[3] = (unsigned char)(0x80 | (c & 0x3F));
        n = 4;
    }
    return buf_add(x, u, n);
}

/* A reference at '&'; appends its character to the buffer. */
static bool read_reference(parser *x)
{
    ++x->p; /* '&' */
    if (!at_end(x) && *x->p == '#') {
        ++x->p;
        bool hex = !at_end(x) && *x->p == 'x';
        if (hex) ++x->p;
        uint32_t v = 0;
        int digits = 0;
        while (!at_end(x) && *x->p != ';') {
            unsigned c = *x->p, d;
            if (c >= '0' && c <= '9') d = c - '0';
            else if (hex && c >= 'a' && c <= 'f') d = c - 'a' + 10;
            else if (hex && c >= 'A' && c <= 'F') d = c - 'A' + 10;
            else return fail(x, "bad character reference");
            if (v > 0x10FFFF) return fail(x, "character reference out of range");
            v = v * (hex ? 16 : 10) + d;
            ++digits;
            ++x->p;
        }
        if (at_end(x) || !digits) return fail(x, "unterminated character reference");
        ++x->p;
        if (!is_xml_char(v)) return fail(x, "character reference to a forbidden character");
        return buf_add_cp(x, v);
    }
    char name[XML_MAX_NAME];
    if (!read_name(x, name, sizeof name)) return fail(x, "bare '&' (write &amp;)");
    if (at_end(x) || *x->p != ';') return fail(x, "entity reference '&%s' without ';'", name);
    ++x->p;
    static const char *const names[] = {"amp", "lt", "gt", "quot", "apos"};
    static const char values[] = "&<>\"'";
    for (int i = 0; i < 5; ++i)
        if (!strcmp(name, names[i])) return buf_add(x, &values[i], 1);
    return fail(x, "undeclared entity '&%s;'", name);
}

static bool read_attribute_value(parser *x)
{
    x->len = 0;
    if (x->buf) x->buf[0] = '\0';
    if (at_end(x) || (*x->p != '"' && *x->p != '\''))
        return fail(x, "attribute value must be quoted");
    const unsigned char quote = *x->p++;
    for (;;) {
        if (at_end(x)) return fail(x, "unterminated attribute value");
        unsigned c = *x->p;
        if (c == quote) {
            ++x->p;
            return buf_add(x, "", 0);
        }
        if (c == '<') return fail(x, "'<' in an attribute value");
        if (c == '&') {
            if (!read_reference(x)) return false;
            continue;
        }
        const unsigned char *at = x->p;
        uint32_t cp;
        if (!next_char(x, &cp)) return false;
        /* attribute-value normalisation turns white space into spaces */
        if (is_space(cp)) {
            if (!buf_add(x, " ", 1)) return false;
        } else if (!buf_add(x, at, (size_t)(x->p - at))) {
            return false;
        }
    }
}

static bool read_comment(parser *x)
{
    x->p += 4; /* "<!--" */
    for (;;) {
        if (at_end(x)) return fail(x, "unterminated comment");
        if (starts(x, "--")) {
            if (starts(x, "-->")) {
                x->p += 3;
                return true;
            }
            return fail(x, "'--' inside a comment");
        }
        uint32_t cp;
        if (!next_char(x, &cp)) return false;
    }
}

static bool read_pi(parser *x)
{
    x->p += 2; /* "<?" */
    char target[XML_MAX_NAME];
    if (!read_name(x, target, sizeof target)) return false;
    if ((target[0] == 'x' || target[0] == 'X') && (target[1] == 'm' || target[1] == 'M') &&
        (target[2] == 'l' || target[2] == 'L') && target[3] == '\0')
        return fail(x, "the XML declaration may only appear at the very start");
    if (!starts(x, "?>") && !skip_space(x)) return fail(x, "expected space after the PI target");
    for (;;) {
        if (at_end(x)) return fail(x, "unterminated processing instruction");
        if (starts(x, "?>")) {
            x->p += 2;
            return true;
        }
        uint32_t cp;
        if (!next_char(x, &cp)) return false;
    }
}

/* <?xml version="1.0" encoding="..." standalone="..."?> */
static bool read_xml_decl(parser *x)
{
    x->p += 5; /* "<?xml" */
    static const char *const order[] = {"version", "encoding", "standalone"};
    int next = 0;
    bool seen_version = false;
    for (;;) {
        bool space = skip_space(x);
        if (starts(x, "?>")) {
            x->p += 2;
            break;
        }
        if (!space) return fail(x, "expected space in the XML declaration");
        char name[XML_MAX_NAME];
        if (!read_name(x, name, sizeof name)) return false;
        int which = -1;
        for (int i = next; i < 3; ++i)
            if (!strcmp(name, order[i])) which = i;
        if (which < 0) return fail(x, "unexpected '%s' in the XML declaration", name);
        next = which + 1;
        skip_space(x);
        if (at_end(x) || *x->p != '=') return fail(x, "expected '='");
        ++x->p;
        skip_space(x);
        if (!read_attribute_value(x)) return false;
        if (which == 0) {
            seen_version = true;
            if (strncmp(x->buf, "1.", 2) || !x->buf[2])
                return fail(x, "unsupported XML version '%s'", x->buf);
        }
        if (which == 1 && strcasecmp(x->buf, "UTF-8") && strcasecmp(x->buf, "UTF8"))
            return fail(x, "only UTF-8 documents are checked, not '%s'", x->buf);
        if (which == 2 && strcmp(x->buf, "yes") && strcmp(x->buf, "no"))
            return fail(x, "standalone must be yes or no");
        if (which != 0 && !seen_version) return fail(x, "version must come first");
    }
    if (!seen_version) return fail(x, "the XML declaration needs a version");
    return true;
}

/* <!DOCTYPE ...> including an internal subset in [...]; skipped. */
static bool read_doctype(parser *x)
{
    x->p += 9;
    int brackets = 0;
    unsigned char quote = 0;
    for (;;) {
        if (at_end(x)) return fail(x, "unterminated DOCTYPE");
        unsigned c = *x->p;
        if (quote) {
            if (c == quote) quote = 0;
        } else if (c == '"' || c == '\'') {
            quote = (unsigned char)c;
        } else if (c == '[') {
            ++brackets;
        } else if (c == ']') {
            --brackets;
        } else if (c == '>' && brackets == 0) {
            ++x->p;
            return true;
        }
        uint32_t cp;
        if (!next_char(x, &cp)) return false;
    }
}

static void flush_text(parser *x)
{
    if (x->len && x->on_text && x->depth > 0) x->on_text(x->user, x->stack[x->depth - 1], x->buf);
    x->len = 0;
    if (x->buf) x->buf[0] = '\0';
}

/* Start tag at '<' (name start follows). */
static bool read_start_tag(parser *x, bool *empty)
{
    ++x->p;
    if (x->depth == XML_MAX_DEPTH) return fail(x, "elements nested too deeply");
    char *name = x->stack[x->depth];
    if (!read_name(x, name, XML_MAX_NAME)) return false;
    /* attribute names and values, copied out of the scratch buffer */
    xml_attr attrs[XML_MAX_ATTRS];
    char *owned[XML_MAX_ATTRS * 2];
    int n = 0;
    bool ok = true;
    for (;;) {
        bool space = skip_space(x);
        if (at_end(x)) {
            ok = fail(x, "unterminated start tag <%s>", name);
            break;
        }
        if (*x->p == '>' || starts(x, "/>")) {
            *empty = *x->p == '/';
            x->p += *empty ? 2 : 1;
            break;
        }
        if (!space) {
            ok = fail(x, "expected space before an attribute in <%s>", name);
            break;
        }
        char aname[XML_MAX_NAME];
        if (!read_name(x, aname, sizeof aname)) {
            ok = false;
            break;
        }
        for (int i = 0; i < n; ++i)
            if (!strcmp(attrs[i].name, aname)) {
                ok = fail(x, "attribute '%s' repeated in <%s>", aname, name);
                break;
            }
        if (!ok) break;
        skip_space(x);
        if (at_end(x) || *x->p != '=') {
            ok = fail(x, "attribute '%s' without '='", aname);
            break;
        }
        ++x->p;
        skip_space(x);
        if (!read_attribute_value(x)) {
            ok = false;
            break;
        }
        if (n == XML_MAX_ATTRS) {
            ok = fail(x, "too many attributes");
            break;
        }
        owned[2 * n] = strdup(aname);
        owned[2 * n + 1] = strdup(x->buf ? x->buf : "");
        attrs[n].name = owned[2 * n];
        attrs[n].value = owned[2 * n + 1];
        ++n;
        if (!owned[2 * n - 2] || !owned[2 * n - 1]) {
            ok = fail(x, "out of memory");
            break;
        }
    }
    if (ok && x->on_element) x->on_element(x->user, name, attrs, n, x->depth);
    for (int i = 0; i < 2 * n; ++i) free(owned[i]);
    x->len = 0;
    if (x->buf) x->buf[0] = '\0';
    if (ok) ++x->depth;
    return ok;
}

static bool read_end_tag(parser *x)
{
    x->p += 2; /* "</" */
    char name[XML_MAX_NAME];
    if (!read_name(x, name, sizeof name)) return false;
    skip_space(x);
    if (at_end(x) || *x->p != '>') return fail(x, "expected '>' to close </%s", name);
    ++x->p;
    if (x->depth == 0) return fail(x, "end tag </%s> without a start tag", name);
    if (strcmp(x->stack[x->depth - 1], name))
        return fail(x, "end tag </%s> does not match <%s>", name, x->stack[x->depth - 1]);
    --x->depth;
    return true;
}

/* Element content until the root closes. */
static bool read_root(parser *x)
{
    bool empty = false;
    if (!read_start_tag(x, &empty)) return false;
    if (empty) {
        --x->depth;
        return true;
    }
    while (x->depth > 0) {
        if (at_end(x)) return fail(x, "unexpected end: <%s> is not closed", x->stack[x->depth - 1]);
        unsigned c = *x->p;
        if (c == '<') {
            flush_text(x);
            if (starts(x, "</")) {
                if (!read_end_tag(x)) return false;
            } else if (starts(x, "<!--")) {
                if (!read_comment(x)) return false;
            } else if (starts(x, "<![CDATA[")) {
                x->p += 9;
                const unsigned char *begin = x->p;
                while (!starts(x, "]]>")) {
                    uint32_t cp;
                    if (at_end(x)) return fail(x, "unterminated CDATA section");
                    if (!next_char(x, &cp)) return false;
                }
                if (!buf_add(x, begin, (size_t)(x->p - begin))) return false;
                x->p += 3;
                flush_text(x);
            } else if (starts(x, "<?")) {
                if (!read_pi(x)) return false;
            } else if (starts(x, "<!")) {
                return fail(x, "unexpected '<!' in content");
            } else {
                if (!read_start_tag(x, &empty)) return false;
                if (empty) --x->depth;
            }
        } else if (c == '&') {
            if (!read_reference(x)) return false;
        } else {
            if (starts(x, "]]>")) return fail(x, "']]>' in text");
            const unsigned char *at = x->p;
            uint32_t cp;
            if (!next_char(x, &cp)) return false;
            if (!buf_add(x, at, (size_t)(x->p - at))) return false;
        }
    }
    return true;
}

/* Comments, PIs and white space around the root. */
static bool read_misc(parser *x)
{
    for (;;) {
        skip_space(x);
        if (starts(x, "<!--")) {
            if (!read_comment(x)) return false;
        } else if (starts(x, "<?")) {
            if (!read_pi(x)) return false;
        } else {
            return true;
        }
    }
}

bool xml_parse(const char *text, size_t len, xml_element_fn on_element, xml_text_fn on_text,
               void *user, char *err, size_t err_size)
{
    parser *x = calloc(1, sizeof *x);
    if (!x) {
        snprintf(err, err_size, "out of memory");
        return false;
    }
    x->start = x->p = (const unsigned char *)text;
    x->end = x->p + len;
    x->err = err;
    x->err_size = err_size;
    x->on_element = on_element;
    x->on_text = on_text;
    x->user = user;
    if (starts(x, "\xEF\xBB\xBF")) x->p += 3;
    bool ok = true;
    if (starts(x, "<?xml") && x->end - x->p > 5 && (is_space(x->p[5]) || x->p[5] == '?'))
        ok = read_xml_decl(x);
    if (ok) ok = read_misc(x);
    if (ok && starts(x, "<!DOCTYPE")) {
        ok = read_doctype(x) && read_misc(x);
    }
    if (ok) {
        uint32_t c = 0;
        if (at_end(x) || *x->p != '<' || x->end - x->p < 2 || !utf8_decode(x->p + 1, x->end, &c) ||
            !name_start(c))
            ok = fail(x, at_end(x) ? "no root element" : "expected the root element");
    }
    if (ok) ok = read_root(x) && read_misc(x);
    if (ok && !at_end(x)) ok = fail(x, "content after the root element");
    free(x->buf);
    free(x);
    return ok;
}

bool xml_check_file(const char *path, char *err, size_t err_size)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, err_size, "%s: cannot open", path);
        return false;
    }
    size_t cap = 1 << 16, len = 0;
    char *data = malloc(cap);
    while (data) {
        size_t got = fread(data + len, 1, cap - len, f);
        len += got;
        if (len < cap) break;
        char *d = realloc(data, cap *= 2);
        if (!d) {
            free(data);
            data = NULL;
        } else {
            data = d;
        }
    }
    fclose(f);
    if (!data) {
        snprintf(err, err_size, "%s: out of memory", path);
        return false;
    }
    char inner[400];
    bool ok = xml_parse(data, len, NULL, NULL, NULL, inner, sizeof inner);
    if (!ok) snprintf(err, err_size, "%s: %s", path, inner);
    free(data);
    return ok;
}
