/* Reading the input files a command names: "-" for standard input, one
 * line per problem, a note when a conversion rounded, and a hint when a
 * file is of another kind than the option expects. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

#define STDIN_PATH "/dev/stdin"

/* Standard input can be read once per run. */
static bool stdin_taken;

static const char *input_path(const char *path, bool *ok)
{
    *ok = true;
    if (strcmp(path, "-") != 0) return path;
    if (stdin_taken) {
        fprintf(stderr, "attn: -: standard input can be given for one input only\n");
        *ok = false;
    }
    stdin_taken = true;
    return STDIN_PATH;
}

/* The library's message with "/dev/stdin" shown as the user wrote it. */
static void print_error(const char *path, const attn_error *err)
{
    const char *msg = err->message[0] ? err->message : attn_status_string(err->status);
    size_t n = strlen(STDIN_PATH);
    if (!strcmp(path, "-") && !strncmp(msg, STDIN_PATH, n))
        fprintf(stderr, "attn: - (standard input)%s\n", msg + n);
    else
        fprintf(stderr, "attn: %s\n", msg);
}

static void note_rounding(const char *path, const attn_array *a)
{
    if (a->inexact > 0)
        fprintf(stderr, "attn: note: %s%s%s: %lld %s value%s rounded to the nearest float32\n",
                path, a->name ? ": tensor " : "", a->name ? a->name : "",
                (long long)a->inexact, a->file_dtype, a->inexact == 1 ? "" : "s");
}

int cli_load_npy(const char *path, attn_array *out)
{
    bool ok;
    const char *real = input_path(path, &ok);
    if (!ok) return CLI_USAGE;
    attn_error err = {0};
    if (attn_npy_read(real, out, &err) != ATTN_OK) {
        print_error(path, &err);
        return cli_exit_code(err.status);
    }
    note_rounding(path, out);
    return CLI_OK;
}

/* What a file that is not safetensors looks like, from its first bytes. */
static const char *sniff(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char b[8] = {0};
    size_t n = fread(b, 1, sizeof b, f);
    fclose(f);
    if (n >= 6 && !memcmp(b, "\x93NUMPY", 6)) return "a .npy file";
    if (n >= 4 && !memcmp(b, "PK\x03\x04", 4)) return "a zip archive (torch.save's .pt format?)";
    if (n >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5) return "a Python pickle";
    if (n >= 1 && (b[0] == '{' || b[0] == '[')) return "a JSON or text file";
    return NULL;
}

int cli_load_safetensors(const char *option, const char *path, attn_safetensors *out)
{
    bool ok;
    const char *real = input_path(path, &ok);
    if (!ok) return CLI_USAGE;
    attn_error err = {0};
    if (attn_safetensors_read(real, out, &err) != ATTN_OK) {
        const char *kind = err.status == ATTN_ERR_FORMAT && real == path ? sniff(path) : NULL;
        if (kind)
            fprintf(stderr, "attn: %s %s: is %s, not .safetensors\n", option, path, kind);
        else
            print_error(path, &err);
        return cli_exit_code(err.status);
    }
    for (size_t i = 0; i < out->count; ++i) note_rounding(path, &out->arrays[i]);
    return CLI_OK;
}
