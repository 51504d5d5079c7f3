/* attn info FILE: what a .npy or .safetensors file holds, read with the
 * library's readers (so everything attn would refuse is refused here). */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const cli_option info_options[] = {{0}};

static void print_shape(const attn_tensor *t)
{
    printf("(");
    for (int d = 0; d < t->ndim; ++d) printf(d ? ", %lld" : "%lld", (long long)t->shape[d]);
    printf(t->ndim == 1 ? ",)" : ")");
}

static void print_array(const char *name, const attn_array *a)
{
    printf("  %-24s %-6s -> %-5s ", name, a->file_dtype, a->t.dtype == ATTN_BOOL ? "bool" : "f32");
    print_shape(&a->t);
    printf("  %lld elements", (long long)attn_tensor_numel(&a->t));
    if (a->inexact) printf(", %lld rounded", (long long)a->inexact);
    printf("\n");
}

static int run_info(int argc, char **argv)
{
    const cli_command *cmd = &cmd_info;
    cli_args a;
    bool help;
    int rc = cli_parse(cmd, argc, argv, &a, &help);
    if (rc || help) return rc;
    if (a.npositional != 1) return cli_usage_error(cmd, "give one FILE (see attn info --help)");
    const char *path = a.positional[0];
    attn_array arr = {0};
    attn_safetensors st = {0};
    bool npy = false;
    if ((rc = cli_load_file(path, &npy, &arr, &st))) return rc;
    if (npy) {
        printf("%s: .npy, 1 array\n", path);
        print_array("(array)", &arr);
        attn_array_free(&arr);
        return CLI_OK;
    }
    printf("%s: .safetensors, %zu tensor%s\n", path, st.count, st.count == 1 ? "" : "s");
    for (size_t i = 0; i < st.count; ++i) print_array(st.arrays[i].name, &st.arrays[i]);
    attn_safetensors_free(&st);
    return CLI_OK;
}

const cli_command cmd_info = {
    .name = "info",
    .summary = "list the tensors of a .npy or .safetensors file: names, dtypes, shapes",
    .usage = "FILE",
    .details = "FILE is read in full with the same checks as every other command; the\n"
               "dtype column shows the file's type and the float32/bool attn reads it as.\n"
               "Its kind comes from its first bytes; FILE may be '-' (standard input), a\n"
               "pipe or a FIFO, read once.",
    .options = info_options,
    .positional = "FILE",
    .run = run_info,
};
