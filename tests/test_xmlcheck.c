/* The strict XML checker the SVG tests rely on: it must accept well-formed
 * documents and reject each kind of malformation, or those tests prove
 * nothing. */
#include "testutil.h"
#include "xmlcheck.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    char title[128];
    char value[64];
    int elements;
} seen;

static void on_element(void *user, const char *name, const xml_attr *attrs, int n, int depth)
{
    seen *s = user;
    (void)depth;
    s->elements++;
    if (!strcmp(name, "g"))
        for (int i = 0; i < n; ++i)
            if (!strcmp(attrs[i].name, "data-value")) snprintf(s->value, sizeof s->value, "%s", attrs[i].value);
}

static void on_text(void *user, const char *element, const char *text)
{
    seen *s = user;
    if (!strcmp(element, "title")) snprintf(s->title, sizeof s->title, "%s", text);
}

int main(int argc, char **argv)
{
    tu_options opt;
    if (!tu_parse_options(argc, argv, 1, &opt)) return 2;
    tu_suite suite = {0};
    tu_group g;
    char err[512];

    static const char *const good[] = {
        "<a/>",
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\">"
        "<g><text x=\"1\">a &amp; b &lt; &#65; &#x42; &gt; &quot; &apos;</text></g><!-- c --></svg>\n",
        "<!DOCTYPE svg PUBLIC \"-//W3C//DTD SVG 1.1//EN\" \"http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd\"><svg/>",
        "<!DOCTYPE a [<!ELEMENT a ANY>]><a/>",
        "<a><![CDATA[x < y & z]]></a>",
        "<a>\xE2\x88\x9A" "d\xE2\x82\x96 \xF0\x9F\x98\x80</a>",
        "<a b='1' c=\"2\" d = \"'\" e='\"'/>",
        "<a/><?pi x?>\n<!-- after -->\n",
        "\xEF\xBB\xBF<a></a >",
        "<a><b><c/></b><b/></a>",
        "<?xml version='1.0'?><a>\t\r\n</a>",
        "<\xC3\xA9l\xC3\xA9ment/>",
    };
    tu_group_begin(&g, &suite, "accepts well-formed XML");
    for (size_t i = 0; i < sizeof good / sizeof *good; ++i)
        tu_check(&g, xml_parse(good[i], strlen(good[i]), NULL, NULL, NULL, err, sizeof err),
                 "rejected good document %zu: %s", i, err);
    tu_group_end(&g);

    static const char *const bad[] = {
        "",
        "   ",
        "<a>",
        "<a></b>",
        "<a><b></a></b>",
        "<a b=\"1\" b=\"2\"/>",
        "<a b=1/>",
        "<a b=\"<\"/>",
        "<a b=\"1\"c=\"2\"/>",
        "<a b/>",
        "<a>&</a>",
        "<a>& b</a>",
        "<a>&foo;</a>",
        "<a>&amp</a>",
        "<a>&#0;</a>",
        "<a>&#xD800;</a>",
        "<a>&#x110000;</a>",
        "<a>&#12a;</a>",
        "<a/><b/>",
        "text<a/>",
        "<a/>text",
        "<a><!-- x -- y --></a>",
        "<a><!-- x ---></a>",
        "<a>]]></a>",
        "<a>\xFF</a>",
        "<a>\xC0\xAF</a>",
        "<a>\xE2\x82</a>",
        "<a>\xED\xA0\x80</a>",
        "<a>\x01</a>",
        "<a b=\"\x02\"/>",
        "<?xml version=\"1.0\"?><?xml version=\"1.0\"?><a/>",
        " <?xml version=\"1.0\"?><a/>",
        "<?xml encoding=\"UTF-8\"?><a/>",
        "<?xml version=\"1.0\" encoding=\"latin1\"?><a/>",
        "<1a/>",
        "<-a/>",
        "<a></a><!DOCTYPE a>",
        "<a><!DOCTYPE a></a>",
        "<a><![CDATA[x</a>",
        "<a><?xml version=\"1.0\"?></a>",
        "</a>",
        "<a/",
        "<a b=\"1/>",
        "<a>\0</a>", /* the NUL is part of the length below */
    };
    tu_group_begin(&g, &suite, "rejects malformed XML");
    for (size_t i = 0; i < sizeof bad / sizeof *bad; ++i) {
        size_t len = strlen(bad[i]);
        if (i + 1 == sizeof bad / sizeof *bad) len = 8;
        tu_check(&g, !xml_parse(bad[i], len, NULL, NULL, NULL, err, sizeof err),
                 "accepted bad document %zu: %s", i, bad[i]);
    }
    tu_group_end(&g);

    tu_group_begin(&g, &suite, "callbacks and positions");
    const char *doc = "<svg>\n<g class=\"cell\" data-value=\"0.5&amp;1\"><title>q &amp; k &#x2192; &lt;v&gt;</title>"
                      "<rect/></g>\n</svg>";
    seen s = {0};
    tu_check(&g, xml_parse(doc, strlen(doc), on_element, on_text, &s, err, sizeof err), "%s", err);
    tu_check(&g, s.elements == 4, "%d elements, want 4", s.elements);
    tu_check(&g, !strcmp(s.value, "0.5&1"), "attribute value '%s'", s.value);
    tu_check(&g, !strcmp(s.title, "q & k \xE2\x86\x92 <v>"), "title '%s'", s.title);
    const char *broken = "<a>\n<b>\n</c></a>";
    xml_parse(broken, strlen(broken), NULL, NULL, NULL, err, sizeof err);
    tu_check(&g, strstr(err, "line 3") != NULL, "error position: %s", err);
    tu_check(&g, !xml_check_file("/nonexistent/file.svg", err, sizeof err), "missing file accepted");
    tu_group_end(&g);
    return tu_suite_finish(&suite);
}
