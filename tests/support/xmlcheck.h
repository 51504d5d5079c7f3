/*
 * xmlcheck.h — a strict XML 1.0 well-formedness checker for the tests, with
 * optional callbacks so a test can look inside a document it accepted.
 *
 * Checked: UTF-8 encoding and the XML Char range; the XML declaration (only
 * at the very start); one root element; matching start and end tags; names;
 * quoted attribute values without '<'; unique attribute names per element;
 * references (&amp; &lt; &gt; &quot; &apos; and valid &#N; / &#xH;; no other
 * entity is declared, as there is no DTD processing); no "]]>" in text;
 * comments without "--"; processing instructions not named "xml"; CDATA
 * sections; a DOCTYPE (skipped, internal subset included) before the root.
 * Not checked: namespaces, validity against any schema.
 */
#ifndef ATTN_TEST_XMLCHECK_H
#define ATTN_TEST_XMLCHECK_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    const char *name;
    const char *value; /* references replaced */
} xml_attr;

/* Called for every start (or empty) element, depth 0 for the root. */
typedef void (*xml_element_fn)(void *user, const char *name, const xml_attr *attrs, int nattrs,
                               int depth);
/* Called with character data (references replaced; CDATA included) and the
 * name of the element that contains it. Whitespace-only runs are passed too. */
typedef void (*xml_text_fn)(void *user, const char *element, const char *text);

/* Parses text[0..len). Returns true if well-formed; otherwise writes
 * "line L, column C: what" to err. Callbacks may be NULL. */
bool xml_parse(const char *text, size_t len, xml_element_fn on_element, xml_text_fn on_text,
               void *user, char *err, size_t err_size);
/* The same for a whole file (an unreadable file is an error too). */
bool xml_check_file(const char *path, char *err, size_t err_size);

#endif
