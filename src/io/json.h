/* A small strict JSON reader for the safetensors header.
 *
 * Not a tree builder: a cursor with one call per token, so the safetensors
 * reader walks the header by its schema and keeps only what it needs (memory
 * stays proportional to the number of tensors, whatever the header holds).
 * Every call consumes leading whitespace, returns false on failure and records
 * the first failure in cursor->why ("expected ':' at byte 57"). After a failure
 * every later call also fails, so callers may check once at the end of a step.
 */
#ifndef ATTN_IO_JSON_H
#define ATTN_IO_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *text;
    size_t len;
    size_t pos;
    bool failed;
    bool out_of_memory; /* the failure was an allocation, not the input */
    char why[128];
} json_cursor;

void json_init(json_cursor *c, const char *text, size_t len);

/* Records a failure (first one wins). Returns false for `return json_fail(...)`. */
bool json_fail(json_cursor *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Skips whitespace and returns the next byte without consuming it, or 0 at the end. */
char json_peek(json_cursor *c);
/* Consumes `ch` if it is next. */
bool json_accept(json_cursor *c, char ch);
/* Consumes `ch` or fails with "expected 'ch' ... at byte N". */
bool json_expect(json_cursor *c, char ch, const char *context);

/* Reads a string token; *out receives the decoded UTF-8, NUL-terminated and
 * malloc'd (free it), *len its length (it may contain NUL bytes from \u0000).
 * Unpaired surrogate escapes and raw control characters are rejected. */
bool json_string(json_cursor *c, char **out, size_t *len);

/* The kind of a number token. */
typedef enum {
    JSON_INT,          /* an integer that fits int64 */
    JSON_INT_TOO_BIG,  /* an integer outside int64 */
    JSON_NOT_INTEGER,  /* has a fraction or an exponent */
} json_number_kind;

/* Reads a number token. *value is set for JSON_INT. The token text stays at
 * c->text + *start, *token_len bytes, for messages. */
bool json_number(json_cursor *c, json_number_kind *kind, int64_t *value, size_t *start,
                 size_t *token_len);

/* True when only whitespace remains. */
bool json_at_end(json_cursor *c);

/* Strict UTF-8 check (no overlong forms, surrogates or code points above
 * U+10FFFF). On failure *bad_offset is the offset of the first bad byte. */
bool json_utf8_valid(const unsigned char *s, size_t len, size_t *bad_offset);

/* Appends `s` as a JSON string literal (quotes included) to buf, which must
 * have room for json_quoted_size(s) bytes; returns the bytes written. */
size_t json_quoted_size(const char *s);
size_t json_write_quoted(char *buf, const char *s);

#endif
