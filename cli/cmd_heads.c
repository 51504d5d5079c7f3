/* attn heads: what each head of a trained checkpoint attends to. For a few
 * examples it prints (and draws with --svg) every head's attention from the
 * query position over the sequence, and over many examples it measures how
 * often each head's strongest weight lands on the entry whose key matches
 * the query and how often on the previous position: the heads' jobs. */
#include "cli.h"
#include "svg.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cli_option heads_options[] = {
    {"--svg", "heads.svg", "draw each head's attention on the examples"},
    {"--example", "I", "first example to show (default 0)"},
    {"--examples", "K", "how many examples to show (default 3)"},
    {"--stream", "S", "example stream seed (default: the held-out stream of attn train)"},
    {"--stats", "M", "examples over which head roles are measured (default 1000)"},
    {"--threads", "N", "worker threads (default: ATTN_NUM_THREADS or all cores)"},
    {0},
};

static const char heads_details[] =
    "CHECKPOINT is a file written by attn train --save. The examples come from\n"
    "the held-out stream attn train evaluates on (never trained on), unless\n"
    "--stream picks another. A head's role is where its largest weight lands:\n"
    "'match' = the entry whose key equals the query key, 'prev' = the position\n"
    "just before the query.";

/* Largest role-measurement and display sizes. */
enum { MAX_SHOWN = 16 };

/* One example with the model's view of it. */
typedef struct {
    int32_t *tokens; /* (N, SLOTS) */
    int32_t target, predicted;
    float *weights;  /* (H, N) */
    int64_t match;   /* position of the entry whose key is the query's */
} shown_example;

typedef struct {
    attn_model *m;
    const attn_task *task;
    int64_t N, H, C;
    int threads;
} heads_ctx;

/* The entry holding the query's key (the query is the last position). */
static int64_t matching_position(const heads_ctx *c, const int32_t *tokens)
{
    const int32_t key = tokens[(c->N - 1) * ATTN_TASK_SLOTS];
    for (int64_t p = 0; p < c->N - 1; ++p)
        if (tokens[p * ATTN_TASK_SLOTS] == key && tokens[p * ATTN_TASK_SLOTS + 1] >= 0) return p;
    return -1;
}

static bool analyse(const heads_ctx *c, int32_t *tokens, int32_t target, shown_example *ex,
                    float *weights)
{
    attn_error err = {0};
    float *logits = malloc(sizeof(float) * (size_t)c->C);
    attn_tensor lt = attn_tensor_2d(logits, 1, c->C), wt = attn_tensor_2d(weights, c->H, c->N);
    bool ok = logits &&
              attn_model_forward(c->m, tokens, NULL, 1, &lt, NULL, NULL, c->threads, &err) == ATTN_OK &&
              attn_model_attention(c->m, tokens, &wt, c->threads, &err) == ATTN_OK;
    if (!ok) {
        if (logits) cli_report("heads", &err);
        else fprintf(stderr, "attn heads: out of memory\n");
        free(logits);
        return false;
    }
    int64_t best = 0;
    for (int64_t k = 1; k < c->C; ++k)
        if (logits[k] > logits[best]) best = k;
    free(logits);
    ex->tokens = tokens;
    ex->target = target;
    ex->predicted = (int32_t)best;
    ex->weights = weights;
    ex->match = matching_position(c, tokens);
    return true;
}

static void position_label(const heads_ctx *c, const int32_t *tok, char *buf, size_t size)
{
    char a[24], b[24];
    attn_task_token_label(c->task, tok[0], a, sizeof a);
    if (tok[1] >= 0) {
        attn_task_token_label(c->task, tok[1], b, sizeof b);
        snprintf(buf, size, "%s:%s", a, b);
    } else {
        snprintf(buf, size, "%s", a);
    }
}

static void print_example(const heads_ctx *c, int64_t index, const shown_example *ex)
{
    char t[32], p[32], lab[48];
    attn_task_class_label(c->task, ex->target, t, sizeof t);
    attn_task_class_label(c->task, ex->predicted, p, sizeof p);
    printf("\nexample %lld: target %s, predicted %s (%s)\n", (long long)index, t, p,
           ex->target == ex->predicted ? "right" : "WRONG");
    printf("  %-8s", "position");
    for (int64_t n = 0; n < c->N; ++n) printf(" %7lld", (long long)n);
    printf("\n  %-8s", "tokens");
    for (int64_t n = 0; n < c->N; ++n) {
        position_label(c, ex->tokens + n * ATTN_TASK_SLOTS, lab, sizeof lab);
        printf(" %7s", lab);
    }
    printf("\n");
    for (int64_t h = 0; h < c->H; ++h) {
        printf("  head %-3lld", (long long)h);
        int64_t best = 0;
        for (int64_t n = 0; n < c->N; ++n) {
            const float w = ex->weights[h * c->N + n];
            printf(" %7.3f", (double)w);
            if (w > ex->weights[h * c->N + best]) best = n;
        }
        printf("   max at %lld%s\n", (long long)best,
               best == ex->match ? " (matching key)" : best == c->N - 2 ? " (previous)" : "");
    }
}

/* Per head: share of examples whose largest weight is on the matching
 * entry / on the previous position, and the mean weight on each. */
typedef struct {
    double argmax_match, argmax_prev, weight_match, weight_prev;
} head_role;

static bool measure_roles(const heads_ctx *c, uint64_t stream, int64_t count, head_role *roles,
                          double *accuracy)
{
    const int64_t per = c->N * ATTN_TASK_SLOTS;
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)per);
    float *w = malloc(sizeof(float) * (size_t)(c->H * c->N));
    if (!tokens || !w) {
        free(tokens);
        free(w);
        fprintf(stderr, "attn heads: out of memory\n");
        return false;
    }
    memset(roles, 0, sizeof(head_role) * (size_t)c->H);
    int64_t right = 0;
    bool ok = true;
    for (int64_t i = 0; i < count && ok; ++i) {
        int32_t target;
        shown_example ex;
        attn_error err = {0};
        ok = attn_task_generate(c->task, stream, i, 1, tokens, &target, &err) == ATTN_OK;
        if (!ok) {
            cli_report("heads", &err);
            break;
        }
        ok = analyse(c, tokens, target, &ex, w);
        right += ok && ex.predicted == target;
        for (int64_t h = 0; ok && h < c->H; ++h) {
            const float *row = w + h * c->N;
            int64_t best = 0;
            for (int64_t n = 1; n < c->N; ++n)
                if (row[n] > row[best]) best = n;
            roles[h].argmax_match += best == ex.match;
            roles[h].argmax_prev += best == c->N - 2;
            roles[h].weight_match += ex.match >= 0 ? row[ex.match] : 0.0;
            roles[h].weight_prev += row[c->N - 2];
        }
    }
    for (int64_t h = 0; h < c->H; ++h) {
        roles[h].argmax_match /= (double)count;
        roles[h].argmax_prev /= (double)count;
        roles[h].weight_match /= (double)count;
        roles[h].weight_prev /= (double)count;
    }
    *accuracy = (double)right / (double)count;
    free(tokens);
    free(w);
    return ok;
}

static const char *role_name(const head_role *r)
{
    if (r->argmax_match >= 0.9) return "matches the query key";
    if (r->argmax_prev >= 0.9) return "reads the previous position";
    return "mixed";
}

/* ------------------------------------------------------------------ SVG */

enum { CELL_W = 64, CELL_H = 30, LEFT = 80, RIGHT = 420, HEADER = 58, FOOTER = 30 };

static void draw_example(svg *doc, const heads_ctx *c, double y0, int64_t index,
                         const shown_example *ex, const head_role *roles)
{
    const svg_text_style title = {.size = 13, .bold = true};
    const svg_text_style small = {.size = 11, .anchor = SVG_MIDDLE};
    const svg_text_style left = {.size = 12, .anchor = SVG_END, .middle = true};
    char t[32], p[32], lab[48];
    attn_task_class_label(c->task, ex->target, t, sizeof t);
    attn_task_class_label(c->task, ex->predicted, p, sizeof p);
    svg_textf(doc, 12, y0 + 18, &title, "example %lld: target %s, predicted %s%s",
              (long long)index, t, p, ex->target == ex->predicted ? "" : "  (wrong)");
    /* Column headers: the position's tokens; the query is the last one. */
    for (int64_t n = 0; n < c->N; ++n) {
        const double x = LEFT + (double)n * CELL_W + CELL_W / 2.0;
        position_label(c, ex->tokens + n * ATTN_TASK_SLOTS, lab, sizeof lab);
        svg_text(doc, x, y0 + 38, &small, lab);
        const char *note = n == c->N - 1 ? "query" : n == ex->match ? "match" : n == c->N - 2 ? "prev" : "";
        const svg_text_style tag = {.size = 10, .anchor = SVG_MIDDLE, .fill = "#b35806"};
        if (*note) svg_text(doc, x, y0 + 52, &tag, note);
    }
    for (int64_t h = 0; h < c->H; ++h) {
        const double y = y0 + HEADER + (double)h * CELL_H;
        svg_textf(doc, LEFT - 8, y + CELL_H / 2.0, &left, "head %lld", (long long)h);
        for (int64_t n = 0; n < c->N; ++n) {
            const double w = ex->weights[h * c->N + n], x = LEFT + (double)n * CELL_W;
            const svg_rgb rgb = svg_colormap_at(SVG_BLUES, w);
            char hex[8], tip[160];
            svg_rgb_hex(rgb, hex);
            position_label(c, ex->tokens + n * ATTN_TASK_SLOTS, lab, sizeof lab);
            snprintf(tip, sizeof tip, "head %lld -> position %lld (%s): %.3f", (long long)h,
                     (long long)n, lab, w);
            svg_group_begin(doc, tip, NULL);
            svg_rect(doc, x, y, CELL_W, CELL_H, hex, "#ffffff", 1);
            const svg_text_style val = {.size = 11, .anchor = SVG_MIDDLE, .middle = true,
                                        .fill = svg_text_colour_on(rgb)};
            svg_textf(doc, x + CELL_W / 2.0, y + CELL_H / 2.0, &val, "%.2f", w);
            svg_group_end(doc);
        }
        const svg_text_style role = {.size = 11, .middle = true};
        svg_textf(doc, LEFT + (double)c->N * CELL_W + 12, y + CELL_H / 2.0, &role,
                  "%s (match %.0f%%, prev %.0f%%)", role_name(&roles[h]),
                  100.0 * roles[h].argmax_match, 100.0 * roles[h].argmax_prev);
    }
    /* Outline the matching entry's column. */
    if (ex->match >= 0)
        svg_rect(doc, LEFT + (double)ex->match * CELL_W, y0 + HEADER, CELL_W,
                 (double)c->H * CELL_H, "none", "#e6550d", 2);
}

static int write_svg(const char *path, const char *ckpt, const heads_ctx *c,
                      const shown_example *ex, int64_t first, int64_t shown,
                      const head_role *roles, int64_t stats, double accuracy)
{
    const double panel = HEADER + (double)c->H * CELL_H + FOOTER;
    const double width = LEFT + (double)c->N * CELL_W + RIGHT, height = 70 + panel * (double)shown + 50;
    svg *doc = svg_new(width, height);
    if (!doc) {
        fprintf(stderr, "attn heads: out of memory\n");
        return CLI_FAIL;
    }
    const svg_text_style title = {.size = 15, .bold = true};
    const svg_text_style sub = {.size = 11, .fill = "#555"};
    svg_textf(doc, 12, 22, &title, "Attention of each head from the query position (%s, %lld heads)",
              attn_task_name(c->task->kind), (long long)c->H);
    svg_textf(doc, 12, 42, &sub, "%s; held-out examples; role = where a head's largest weight lands "
              "over %lld examples (model accuracy %.1f%%)", ckpt, (long long)stats, 100.0 * accuracy);
    svg_textf(doc, 12, 58, &sub, "tokens: kI = key I, vJ = value J, kI:vJ = an entry; "
              "orange box = the entry whose key matches the query");
    for (int64_t i = 0; i < shown; ++i)
        draw_example(doc, c, 70 + panel * (double)i, first + i, &ex[i], roles);
    svg_colour_bar(doc, width - 60, 96, 14, 120, SVG_BLUES, 0, 1, "weight");
    const int rc = svg_save_file(doc, &cmd_heads, "--svg", path);
    svg_free(doc);
    return rc;
}

static int run_heads(int argc, char **argv)
{
    cli_args a;
    bool help;
    int rc = cli_parse(&cmd_heads, argc, argv, &a, &help);
    if (rc != CLI_OK || help) return rc;
    if (a.npositional != 1) return cli_usage_error(&cmd_heads, "expected one CHECKPOINT");
    long first = 0, shown = 3, stats = 1000;
    int threads = 0;
    if (!cli_get_int(&a, "--example", 0, 1L << 40, &first) ||
        !cli_get_int(&a, "--examples", 1, MAX_SHOWN, &shown) ||
        !cli_get_int(&a, "--stats", 1, 10000000, &stats) ||
        !cli_get_threads(&a, &threads))
        return CLI_USAGE;
    uint64_t stream = attn_train_config_default(ATTN_TASK_RECALL).heldout_seed;
    if (!cli_get_u64(&a, "--stream", &stream)) return CLI_USAGE;
    const char *ckpt = a.positional[0];
    attn_error err = {0};
    heads_ctx c = {.threads = threads};
    if (attn_model_load(ckpt, &c.m, &err) != ATTN_OK) return cli_report("heads", &err);
    const attn_model_config *cfg = attn_model_get_config(c.m);
    c.task = &cfg->task;
    c.N = attn_task_seq_len(c.task);
    c.H = cfg->num_heads;
    c.C = attn_task_num_classes(c.task);
    printf("%s: task %s, %d entries, embed_dim %lld, %lld heads of d_k %lld%s\n", ckpt,
           attn_task_name(c.task->kind), (int)c.task->num_pairs, (long long)cfg->embed_dim,
           (long long)c.H, (long long)(cfg->embed_dim / c.H),
           cfg->unscaled ? ", unscaled scores" : "");

    const int64_t per = c.N * ATTN_TASK_SLOTS;
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)(per * shown));
    int32_t *targets = malloc(sizeof(int32_t) * (size_t)shown);
    float *weights = malloc(sizeof(float) * (size_t)(c.H * c.N * shown));
    head_role *roles = calloc((size_t)c.H, sizeof(head_role));
    shown_example ex[MAX_SHOWN];
    double accuracy = 0;
    rc = tokens && targets && weights && roles ? CLI_OK : CLI_FAIL;
    if (rc != CLI_OK) fprintf(stderr, "attn heads: out of memory\n");
    if (rc == CLI_OK &&
        attn_task_generate(c.task, stream, first, shown, tokens, targets, &err) != ATTN_OK)
        rc = cli_report("heads", &err);
    for (long i = 0; rc == CLI_OK && i < shown; ++i) {
        if (!analyse(&c, tokens + i * per, targets[i], &ex[i], weights + i * c.H * c.N))
            rc = CLI_FAIL;
        else
            print_example(&c, first + i, &ex[i]);
    }
    if (rc == CLI_OK && !measure_roles(&c, stream, stats, roles, &accuracy)) rc = CLI_FAIL;
    if (rc == CLI_OK) {
        printf("\nroles over %ld examples (accuracy %.2f%%): where each head's largest weight "
               "lands\n", stats, 100.0 * accuracy);
        printf("  %-7s %14s %14s %14s %14s  %s\n", "head", "argmax=match", "argmax=prev",
               "mean w(match)", "mean w(prev)", "role");
        for (int64_t h = 0; h < c.H; ++h)
            printf("  %-7lld %13.1f%% %13.1f%% %14.3f %14.3f  %s\n", (long long)h,
                   100.0 * roles[h].argmax_match, 100.0 * roles[h].argmax_prev,
                   roles[h].weight_match, roles[h].weight_prev, role_name(&roles[h]));
    }
    const char *svg_path = cli_get(&a, "--svg");
    if (rc == CLI_OK && svg_path) {
        rc = write_svg(svg_path, ckpt, &c, ex, first, shown, roles, stats, accuracy);
        if (!rc) printf("wrote %s\n", svg_path);
    }
    free(tokens);
    free(targets);
    free(weights);
    free(roles);
    attn_model_free(c.m);
    return rc;
}

const cli_command cmd_heads = {
    .name = "heads",
    .summary = "show what each attention head of a trained checkpoint does",
    .usage = "CHECKPOINT [--svg heads.svg] [OPTIONS]",
    .details = heads_details,
    .options = heads_options,
    .positional = "CHECKPOINT",
    .run = run_heads,
};
