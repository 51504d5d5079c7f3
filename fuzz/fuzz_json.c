/* libFuzzer target: the JSON cursor (src/io/json.c) walking any document of
 * objects, arrays, strings and numbers. Properties: no crash or leak, a
 * failure always has a reason, and every string it decodes survives a round
 * trip: json_write_quoted of the decoded text parses back to the same bytes. */
#include "../src/io/json.h"

#include <stdlib.h>
#include <string.h>

static void check_string_round_trip(const char *s, size_t len)
{
    if (strlen(s) != len) return; /* \u0000 inside: not a C string to re-quote */
    size_t n = json_quoted_size(s);
    char *quoted = malloc(n + 1);
    if (!quoted) abort();
    size_t wrote = json_write_quoted(quoted, s);
    if (wrote > n) abort();
    json_cursor c;
    json_init(&c, quoted, wrote);
    char *back = NULL;
    size_t back_len = 0;
    if (!json_string(&c, &back, &back_len) || back_len != len || memcmp(back, s, len) ||
        !json_at_end(&c))
        abort();
    free(back);
    free(quoted);
}

/* One value; false on failure (the cursor holds the reason). */
static int walk(json_cursor *c, int depth)
{
    if (depth > 64) return json_fail(c, "too deep");
    char next = json_peek(c);
    if (next == '{' || next == '[') {
        const char close = next == '{' ? '}' : ']';
        if (!json_expect(c, next, "to open")) return 0;
        if (json_accept(c, close)) return 1;
        for (;;) {
            if (next == '{') {
                char *key = NULL;
                size_t len = 0;
                if (!json_string(c, &key, &len)) return 0;
                check_string_round_trip(key, len);
                free(key);
                if (!json_expect(c, ':', "after a key")) return 0;
            }
            if (!walk(c, depth + 1)) return 0;
            if (!json_accept(c, ',')) break;
        }
        return json_expect(c, close, "to close");
    }
    if (next == '"') {
        char *s = NULL;
        size_t len = 0;
        if (!json_string(c, &s, &len)) return 0;
        check_string_round_trip(s, len);
        free(s);
        return 1;
    }
    json_number_kind kind;
    int64_t v;
    size_t start, len;
    return json_number(c, &kind, &v, &start, &len);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    size_t bad;
    json_utf8_valid(data, size, &bad);
    json_cursor c;
    json_init(&c, (const char *)data, size);
    int ok = walk(&c, 0) && json_at_end(&c);
    if (!ok && c.failed && !c.why[0]) abort();
    return 0;
}
