/* attn: the sub-command table and top-level help. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cli_command *const commands[] = {
    &cmd_sdpa, &cmd_sdpa_backward, &cmd_decode, &cmd_mha, &cmd_mha_backward, &cmd_example,
    &cmd_explain, &cmd_heatmap, &cmd_scaling,
    &cmd_train, &cmd_heads, &cmd_bench, &cmd_info,
#ifdef ATTN_HAVE_MPI
    &cmd_ring,
#endif
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void print_help(FILE *f)
{
    fprintf(f, "usage: attn COMMAND [OPTIONS]\n\n"
               "Scaled dot-product and multi-head attention, forward and backward,\n"
               "with PyTorch's semantics. Tensors are .npy files, parameters .safetensors.\n\n"
               "commands:\n");
    for (size_t i = 0; i < NCOMMANDS; ++i)
        fprintf(f, "  %-15s %s\n", commands[i]->name, commands[i]->summary);
    fprintf(f, "\n  attn COMMAND --help    options of one command (or attn help COMMAND)\n"
               "  attn --version         version, kernel ISA and threads\n");
}

static int run(int argc, char **argv)
{
    if (argc < 2) {
        print_help(stderr);
        return CLI_USAGE;
    }
    const char *name = argv[1];
    if (!strcmp(name, "help") && argc >= 3 && strcmp(argv[2], "--help") && strcmp(argv[2], "-h")) {
        /* attn help CMD = attn CMD --help */
        for (size_t i = 0; i < NCOMMANDS; ++i)
            if (!strcmp(argv[2], commands[i]->name)) {
                cli_print_help(commands[i]);
                return CLI_OK;
            }
        fprintf(stderr, "attn help: unknown command '%s' (see attn --help)\n", argv[2]);
        return CLI_USAGE;
    }
    if (!strcmp(name, "--help") || !strcmp(name, "-h") || !strcmp(name, "help")) {
        print_help(stdout);
        return CLI_OK;
    }
    if (!strcmp(name, "--version")) {
        printf("attn %s (kernels: %s, bf16 engine: %s, threads: %d%s)\n", ATTN_VERSION_STRING,
               attn_isa(), attn_engine(), attn_default_threads(),
               CLI_OPENMP ? "" : ", built without OpenMP");
        /* the library ignores an ATTN_ARCH it cannot honour; say so here */
        const char *arch = getenv("ATTN_ARCH");
        if (arch && *arch && strcmp(arch, attn_isa()) != 0)
            printf("note: ATTN_ARCH=%s is not available here (choices: generic, avx2, avx512 "
                   "or neon where the CPU has it, reference)\n", arch);
        return CLI_OK;
    }
    for (size_t i = 0; i < NCOMMANDS; ++i)
        if (!strcmp(name, commands[i]->name)) return commands[i]->run(argc - 1, argv + 1);
    fprintf(stderr, "attn: unknown command '%s' (see attn --help)\n", name);
    return CLI_USAGE;
}

int main(int argc, char **argv)
{
    cli_signals_init();
    if (!cli_check_environment()) return CLI_USAGE;
    return cli_close_stdout(argc >= 2 && argv[1][0] != '-' ? argv[1] : "", run(argc, argv));
}
