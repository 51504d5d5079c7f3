/* The attn command-line tool: sub-command table, option parsing and the
 * helpers every sub-command shares. Uses the library only through attn.h. */
#ifndef ATTN_CLI_H
#define ATTN_CLI_H

#include "attn.h"

#include <stdbool.h>
#include <stdint.h>

/* Exit statuses: 0 success, 1 a computation failed, 2 bad usage or a bad file. */
enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* One option of a sub-command. metavar NULL = a flag without a value. */
typedef struct {
    const char *name; /* "--query" */
    const char *metavar;
    const char *help;
} cli_option;

typedef struct {
    const char *name;    /* "sdpa" */
    const char *summary; /* one line for `attn --help` */
    const char *usage;   /* text after "usage: attn NAME " */
    const char *details; /* paragraph printed by --help after the options, may be NULL */
    const cli_option *options; /* terminated by {0} */
    const char *positional;    /* metavar of the one positional argument, or NULL for none */
    int (*run)(int argc, char **argv);
} cli_command;

/* Parsed options: values by name. */
#define CLI_MAX_VALUES 64
typedef struct {
    const cli_command *cmd;
    int count;
    const char *names[CLI_MAX_VALUES];
    const char *values[CLI_MAX_VALUES]; /* "" for flags */
    int npositional;
    const char *positional[CLI_MAX_VALUES];
} cli_args;

/* Parses argv (argv[0] is the command name). Prints help and returns 0 with
 * *help_shown = true on --help; prints one error line and returns CLI_USAGE on
 * a bad option. */
int cli_parse(const cli_command *cmd, int argc, char **argv, cli_args *args, bool *help_shown);
void cli_print_help(const cli_command *cmd);

const char *cli_get(const cli_args *a, const char *name);   /* NULL if absent */
bool cli_flag(const cli_args *a, const char *name);
/* Required option: prints "attn CMD: missing --name" and returns NULL. */
const char *cli_require(const cli_args *a, const char *name);
/* Numeric options; print a one-line error and return false on bad input. */
bool cli_get_int(const cli_args *a, const char *name, long lo, long hi, long *out);
bool cli_get_float(const cli_args *a, const char *name, float *out);
/* A non-negative integer of 64 bits (decimal or 0x hex), e.g. a seed. */
bool cli_get_u64(const cli_args *a, const char *name, uint64_t *out);

/* Prints "attn CONTEXT: message" for a library error. Returns exit code:
 * CLI_USAGE for file/argument errors, CLI_FAIL otherwise. */
int cli_report(const char *context, const attn_error *err);
/* The same, naming the command-line option instead of the library argument:
 * a message "query: ..." becomes "--query q.npy: ..." when map holds
 * {"query", "--query"} (map ends with {NULL, NULL}). */
int cli_report_as(const cli_args *a, const attn_error *err, const char *const (*map)[2]);
/* Prints "attn CMD: message" and returns CLI_USAGE. */
int cli_usage_error(const cli_command *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Reads a .npy file; on failure prints the one-line error and returns false. */
bool cli_load_npy(const char *path, attn_array *out);
/* Writes a float32 tensor; prints the error and returns false on failure. */
bool cli_save_npy(const char *path, const attn_tensor *t);
/* Writes every tensor whose path is non-NULL, all or nothing: each goes to a
 * temporary name first and all are renamed into place only when every write
 * succeeded, so a failed command leaves no output behind and never removes a
 * file that existed before. Two outputs with the same path are an error. */
bool cli_save_all(const char *const *paths, const attn_tensor *tensors, int n);

/* Outputs written at the end of a long run, all or nothing: cli_stage_add
 * checks up front that a file can be created next to each destination (so
 * a bad path fails before the work starts, with exit status 2), writers
 * then write to cli_stage_path(), and cli_stage_commit renames them all
 * into place (or cli_stage_abort removes them). */
#define CLI_MAX_STAGED 8
typedef struct {
    int n;
    const char *option[CLI_MAX_STAGED];
    const char *final[CLI_MAX_STAGED];
    char part[CLI_MAX_STAGED][4096];
} cli_staged;
bool cli_stage_add(cli_staged *st, const cli_command *cmd, const char *option, const char *path);
const char *cli_stage_path(const cli_staged *st, const char *path);
bool cli_stage_commit(cli_staged *st);
void cli_stage_abort(cli_staged *st);

/* malloc of the product of n sizes in floats (at least one float), NULL
 * with a message on overflow or exhaustion. */
float *cli_alloc_floats(const char *context, int n, ...);

/* Command tables (one per file). */
extern const cli_command cmd_sdpa, cmd_sdpa_backward;
extern const cli_command cmd_mha, cmd_mha_backward;
extern const cli_command cmd_example;
extern const cli_command cmd_explain, cmd_heatmap, cmd_scaling;
extern const cli_command cmd_train, cmd_heads;
extern const cli_command cmd_bench;
/* Only in builds with MPI (ATTN_HAVE_MPI): cmd_ring.c, cmd_ring_bench.c. */
extern const cli_command cmd_ring, cmd_ring_bench;
extern const cli_command cmd_decode;

#endif
