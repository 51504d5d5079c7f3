/* Option parsing and error reporting shared by every sub-command. */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cli_print_help(const cli_command *cmd)
{
    printf("usage: attn %s %s\n\n%s\n", cmd->name, cmd->usage, cmd->summary);
    if (cmd->options && cmd->options[0].name) {
        printf("\noptions:\n");
        for (const cli_option *o = cmd->options; o->name; ++o) {
            char left[64];
            snprintf(left, sizeof left, "%s%s%s", o->name, o->metavar ? " " : "",
                     o->metavar ? o->metavar : "");
            printf("  %-26s %s\n", left, o->help);
        }
    }
    printf("  %-26s %s\n", "--help", "show this help");
    if (cmd->details) printf("\n%s\n", cmd->details);
}

int cli_usage_error(const cli_command *cmd, const char *fmt, ...)
{
    char text[8192]; /* the line in one write (ranks of mpiexec share stderr) */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fprintf(stderr, "attn %s: %s\n", cmd->name, text);
    return CLI_USAGE;
}

static const cli_option *find_option(const cli_command *cmd, const char *name)
{
    for (const cli_option *o = cmd->options; o && o->name; ++o)
        if (!strcmp(o->name, name)) return o;
    return NULL;
}

/* The arguments of the command running (one a process): input errors name
 * the option that gave the file. */
static const cli_args *running;

const cli_args *cli_running(void)
{
    return running;
}

int cli_parse(const cli_command *cmd, int argc, char **argv, cli_args *args, bool *help_shown)
{
    memset(args, 0, sizeof *args);
    running = args;
    args->cmd = cmd;
    *help_shown = false;
    for (int i = 1; i < argc; ++i) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            cli_print_help(cmd);
            *help_shown = true;
            return CLI_OK;
        }
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
            if (!cmd->positional || args->npositional == 1)
                return cli_usage_error(cmd, "unexpected argument '%s' (see attn %s --help)", arg,
                                       cmd->name);
            args->positional[args->npositional++] = arg;
            continue;
        }
        /* --name=value or --name value */
        char name[64];
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        if (len >= sizeof name) return cli_usage_error(cmd, "unknown option '%s'", arg);
        memcpy(name, arg, len);
        name[len] = '\0';
        const cli_option *o = find_option(cmd, name);
        if (!o) return cli_usage_error(cmd, "unknown option '%s' (see attn %s --help)", name, cmd->name);
        const char *value = "";
        if (o->metavar && o->metavar[0] == '[') { /* an optional value: --causal [ALIGN] */
            if (eq) value = eq + 1;
            else if (i + 1 < argc && argv[i + 1][0] != '-') value = argv[++i];
        } else if (o->metavar) {
            if (eq) value = eq + 1;
            else if (i + 1 < argc) value = argv[++i];
            else return cli_usage_error(cmd, "option %s needs a value %s", name, o->metavar);
        } else if (eq) {
            return cli_usage_error(cmd, "option %s takes no value", name);
        }
        for (int k = 0; k < args->count; ++k)
            if (!strcmp(args->names[k], o->name))
                return cli_usage_error(cmd, "option %s given twice", name);
        if (args->count == CLI_MAX_VALUES) return cli_usage_error(cmd, "too many options");
        args->names[args->count] = o->name;
        args->values[args->count++] = value;
    }
    return CLI_OK;
}

const char *cli_get(const cli_args *a, const char *name)
{
    for (int i = 0; i < a->count; ++i)
        if (!strcmp(a->names[i], name)) return a->values[i];
    return NULL;
}

bool cli_flag(const cli_args *a, const char *name)
{
    return cli_get(a, name) != NULL;
}

const char *cli_require(const cli_args *a, const char *name)
{
    const char *v = cli_get(a, name);
    if (!v) cli_usage_error(a->cmd, "missing %s (see attn %s --help)", name, a->cmd->name);
    return v;
}

/* One decimal integer at p: an optional '-', then digits (no blank, no
 * '+'), within [lo, hi]; *end just after it. The one rule of every integer
 * option, list item and ATTN_NUM_THREADS. */
static bool scan_integer(const char *p, long long lo, long long hi, long long *v,
                         const char **end)
{
    char *e = (char *)p;
    errno = 0;
    if (*p == '-' || isdigit((unsigned char)*p)) *v = strtoll(p, &e, 10);
    *end = e;
    return e != p && !errno && *v >= lo && *v <= hi;
}

bool cli_get_int(const cli_args *a, const char *name, long lo, long hi, long *out)
{
    const char *v = cli_get(a, name);
    if (!v) return true; /* keep the default */
    long long n;
    const char *end;
    if (!scan_integer(v, lo, hi, &n, &end) || *end) {
        cli_usage_error(a->cmd, "%s: expected an integer from %ld to %ld, got '%s'", name, lo, hi, v);
        return false;
    }
    *out = (long)n;
    return true;
}

bool cli_get_u64(const cli_args *a, const char *name, uint64_t *out)
{
    const char *v = cli_get(a, name);
    if (!v) return true; /* keep the default */
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 0);
    if (errno || end == v || *end || !isdigit((unsigned char)*v)) {
        cli_usage_error(a->cmd, "%s: expected a non-negative integer, got '%s'", name, v);
        return false;
    }
    *out = n;
    return true;
}

bool cli_get_float(const cli_args *a, const char *name, float *out)
{
    const char *v = cli_get(a, name);
    if (!v) return true;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x)) {
        cli_usage_error(a->cmd, "%s: expected a finite number, got '%s'", name, v);
        return false;
    }
    *out = (float)x;
    return true;
}

int cli_exit_code(attn_status status)
{
    switch (status) {
    case ATTN_OK: return CLI_OK;
    case ATTN_ERR_ALLOC:
    case ATTN_ERR_WORKSPACE:
    case ATTN_ERR_NULL: return CLI_FAIL;
    default: return CLI_USAGE;
    }
}

int cli_report(const char *context, const attn_error *err)
{
    fprintf(stderr, "attn %s: %s\n", context, err->message[0] ? err->message
                                                             : attn_status_string(err->status));
    return cli_exit_code(err->status);
}

int cli_report_as(const cli_args *a, const attn_error *err, const char *const (*map)[2])
{
    const char *colon = strchr(err->message, ':');
    for (int i = 0; colon && map[i][0]; ++i) {
        size_t len = strlen(map[i][0]);
        if ((size_t)(colon - err->message) != len || strncmp(err->message, map[i][0], len)) continue;
        const char *value = cli_get(a, map[i][1]);
        attn_error named = *err;
        snprintf(named.message, sizeof named.message, "%s%s%s%s", map[i][1], value ? " " : "",
                 value ? value : "", colon);
        return cli_report(a->cmd->name, &named);
    }
    return cli_report(a->cmd->name, err);
}

float *cli_alloc_floats(const char *context, int n, ...)
{
    va_list ap;
    va_start(ap, n);
    int64_t count = 1;
    bool ok = true;
    for (int i = 0; i < n; ++i) {
        int64_t d = va_arg(ap, int64_t);
        if (d < 0 || __builtin_mul_overflow(count, d, &count)) ok = false;
    }
    va_end(ap);
    if (ok && (uint64_t)count > SIZE_MAX / sizeof(float) - 1) ok = false;
    float *p = ok ? malloc(sizeof(float) * ((size_t)count + 1)) : NULL;
    if (!p) fprintf(stderr, "attn %s: %s\n", context, ok ? "out of memory" : "array size overflows");
    return p;
}

bool cli_as_4d(const cli_command *cmd, const char *opt, const attn_array *a, int rank,
                  attn_tensor *out)
{
    const attn_tensor *t = &a->t;
    if (t->dtype != ATTN_F32) {
        cli_usage_error(cmd, "%s: expected a float array", opt);
        return false;
    }
    if (t->ndim != rank) {
        cli_usage_error(cmd, "%s: has %d dimensions but --query has %d", opt, t->ndim, rank);
        return false;
    }
    *out = *t;
    out->ndim = 4;
    int pad = 4 - rank;
    for (int i = 3; i >= 0; --i) {
        out->shape[i] = i >= pad ? t->shape[i - pad] : 1;
        out->stride[i] = i >= pad ? t->stride[i - pad] : 0;
    }
    return true;
}

bool cli_get_causal(const cli_args *a, attn_causal natural, attn_causal *out)
{
    const char *v = cli_get(a, "--causal");
    *out = ATTN_CAUSAL_NONE;
    if (!v) return true;
    if (!*v) *out = natural;
    else if (!strcmp(v, "top-left")) *out = ATTN_CAUSAL_TOP_LEFT;
    else if (!strcmp(v, "bottom-right")) *out = ATTN_CAUSAL_BOTTOM_RIGHT;
    else {
        cli_usage_error(a->cmd, "--causal: expected top-left or bottom-right (or no value), got '%s'",
                        v);
        return false;
    }
    return true;
}

bool cli_get_precision(const cli_args *a, attn_precision *out)
{
    const char *v = cli_get(a, "--precision");
    if (!v || !strcmp(v, "exact")) return true;
    if (strcmp(v, "bf16") != 0) {
        cli_usage_error(a->cmd, "--precision: expected exact or bf16, got '%s'", v);
        return false;
    }
    *out = ATTN_PRECISION_BF16;
    return true;
}

bool cli_get_threads(const cli_args *a, int *out)
{
    long n = *out;
    if (!cli_get_int(a, "--threads", 1, ATTN_MAX_THREADS, &n)) return false;
    *out = (int)n;
    return true;
}

bool cli_get_scale(const cli_args *a, float *out)
{
    const char *v = cli_get(a, "--scale");
    if (!cli_get_float(a, "--scale", out)) return false;
    if (v && !(*out > 0.0f)) {
        cli_usage_error(a->cmd, "--scale: must be a positive number, got %s (omit it for the "
                                "default 1/sqrt(D))", v);
        return false;
    }
    return true;
}

/* One decimal integer of a list, from p up to the next ',' or the end. */
static bool list_item(const char *p, long long lo, long long hi, long long *v, const char **next)
{
    return scan_integer(p, lo, hi, v, next) && (**next == '\0' || **next == ',');
}

bool cli_get_window(const cli_args *a, attn_window *out)
{
    const char *v = cli_get(a, "--window");
    if (!v) return true;
    long long left, right;
    const char *p;
    if (!list_item(v, -1, INT64_MAX, &left, &p) || *p != ',' ||
        !list_item(p + 1, -1, INT64_MAX, &right, &p) || *p) {
        cli_usage_error(a->cmd, "--window: expected L,R (two integers >= 0, -1 = unbounded), got "
                                "'%s'", v);
        return false;
    }
    *out = (attn_window){.enabled = true, .left = left, .right = right};
    return true;
}

bool cli_get_rope(const cli_args *a, attn_rope *out)
{
    memset(out, 0, sizeof *out);
    const char *style = cli_get(a, "--rope"), *theta_text = cli_get(a, "--rope-theta");
    float theta = 0.0f;
    long rd = 0;
    if (!cli_get_float(a, "--rope-theta", &theta) || !cli_get_int(a, "--rotary-dim", 2, 1L << 30, &rd))
        return false;
    if (!style) {
        if (theta_text || cli_get(a, "--rotary-dim")) {
            cli_usage_error(a->cmd, "--rope-theta/--rotary-dim: only with --rope neox|gptj");
            return false;
        }
        return true;
    }
    if (!strcmp(style, "neox")) out->style = ATTN_ROPE_NEOX;
    else if (!strcmp(style, "gptj")) out->style = ATTN_ROPE_GPTJ;
    else {
        cli_usage_error(a->cmd, "--rope: expected neox or gptj, got '%s'", style);
        return false;
    }
    if (theta_text && !(theta > 0.0f && theta != 1.0f)) {
        cli_usage_error(a->cmd, "--rope-theta: must be > 0 and not 1, got '%s'", theta_text);
        return false;
    }
    out->theta = theta;
    out->rotary_dim = rd;
    return true;
}

bool cli_get_list(const cli_args *a, const char *name, long long lo, long long hi,
                  long long *vals, int max, int *count)
{
    const char *v = cli_get(a, name);
    if (!v) return true; /* keep the defaults */
    int n = 0;
    for (const char *p = v;; ++p) {
        long long x;
        if (n == max) {
            cli_usage_error(a->cmd, "%s: more than %d values in '%s'", name, max, v);
            return false;
        }
        if (!list_item(p, lo, hi, &x, &p)) {
            cli_usage_error(a->cmd, "%s: expected integers from %lld to %lld separated by commas "
                                    "(no empty fields), got '%s'", name, lo, hi, v);
            return false;
        }
        vals[n++] = x;
        if (!*p) break;
    }
    *count = n;
    return true;
}

bool cli_check_environment(void)
{
    const char *v = getenv("ATTN_NUM_THREADS");
    if (!v || !*v) return true;
    long long n;
    const char *end;
    if (!scan_integer(v, 1, ATTN_MAX_THREADS, &n, &end) || *end) {
        fprintf(stderr, "attn: ATTN_NUM_THREADS=%s: expected an integer from 1 to %d (or unset "
                        "for every core)\n", v, ATTN_MAX_THREADS);
        return false;
    }
    return true;
}

int cli_close_stdout(const char *context, int rc)
{
    /* stdout is buffered: a full disk or a closed pipe shows at the flush */
    const bool failed_before = ferror(stdout) != 0;
    errno = 0;
    const bool flushed = fflush(stdout) == 0;
    const int errnum = errno;
    if (flushed && !failed_before && fclose(stdout) == 0) return rc;
    if (rc) return rc; /* the command failed and said why: one line */
    fprintf(stderr, "attn%s%s: standard output: %s\n", *context ? " " : "", context,
            !flushed && errnum ? strerror(errnum) : "write error");
    return rc ? rc : CLI_USAGE;
}
