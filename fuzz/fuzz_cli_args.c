/* libFuzzer target: the CLI's option parser (cli/args.c) and its number
 * readers, on every command's option table. The input is a command index
 * byte and NUL-separated arguments. Properties: no crash; what it accepts
 * is one known option per name, each at most once, with a value exactly
 * when the option takes one. */
#include "../cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

static const cli_command *const commands[] = {
    &cmd_sdpa, &cmd_sdpa_backward, &cmd_mha, &cmd_mha_backward, &cmd_example, &cmd_explain,
    &cmd_heatmap, &cmd_scaling, &cmd_train, &cmd_heads, &cmd_bench, &cmd_info, &cmd_decode,
};

/* Help and error lines are expected: they go to /dev/null while the parser
 * runs; fd 2 comes back afterwards for the fuzzer's and sanitizers' reports
 * (a crash's input is saved as crash-* either way). */
static int saved_stderr = -1, devnull = -1;

int LLVMFuzzerInitialize(int *argc, char **argv[])
{
    (void)argc;
    (void)argv;
    if (!freopen("/dev/null", "w", stdout)) abort();
    saved_stderr = dup(2);
    devnull = open("/dev/null", O_WRONLY);
    if (saved_stderr < 0 || devnull < 0) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 1 || size > 4096) return 0;
    const cli_command *cmd = commands[data[0] % (sizeof commands / sizeof commands[0])];
    char *text = malloc(size);
    char *argv[130];
    if (!text) abort();
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    int argc = 0;
    argv[argc++] = (char *)cmd->name;
    for (char *p = text; p < text + size - 1 && argc < 129; p += strlen(p) + 1) argv[argc++] = p;
    argv[argc] = NULL;
    cli_args a;
    bool help = false;
    fflush(stderr);
    dup2(devnull, 2);
    int rc = cli_parse(cmd, argc, argv, &a, &help);
    if (rc == CLI_OK && !help) {
        if (a.count > CLI_MAX_VALUES || a.npositional > 1) abort();
        for (int i = 0; i < a.count; ++i) {
            const cli_option *o = cmd->options;
            while (o && o->name && strcmp(o->name, a.names[i])) ++o;
            if (!o || !o->name || !a.values[i]) abort();
            if (!o->metavar && a.values[i][0]) abort(); /* a flag has no value */
            for (int k = 0; k < i; ++k)
                if (!strcmp(a.names[k], a.names[i])) abort();
            long l;
            float f;
            uint64_t u;
            cli_get_int(&a, a.names[i], -1000000, 1000000, &l);
            cli_get_float(&a, a.names[i], &f);
            cli_get_u64(&a, a.names[i], &u);
            long long list[8];
            int n = 0;
            cli_get_list(&a, a.names[i], -5, 1 << 30, list, 8, &n);
            if (n < 0 || n > 8) abort();
        }
        /* the shared options' own parsers */
        attn_causal causal = ATTN_CAUSAL_NONE;
        attn_window window = {0};
        int threads = 0;
        float scale = 0;
        if (cli_get_causal(&a, ATTN_CAUSAL_TOP_LEFT, &causal) && cli_get(&a, "--causal") &&
            causal == ATTN_CAUSAL_NONE)
            abort(); /* --causal given, in any form, is causal */
        if (cli_get_window(&a, &window) && window.enabled && (window.left < -1 || window.right < -1))
            abort();
        if (cli_get_threads(&a, &threads) && (threads < 0 || threads > ATTN_MAX_THREADS)) abort();
        if (cli_get_scale(&a, &scale) && cli_get(&a, "--scale") && !(scale > 0.0f)) abort();
    } else if (rc != CLI_OK && rc != CLI_USAGE) {
        abort();
    }
    fflush(stderr);
    dup2(saved_stderr, 2);
    free(text);
    return 0;
}
