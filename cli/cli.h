/* The attn command-line tool: sub-command table, option parsing and the
 * helpers every sub-command shares. Uses the library only through attn.h. */
#ifndef ATTN_CLI_H
#define ATTN_CLI_H

#include "attn.h"

#include <stdbool.h>
#include <stdint.h>

/* Whether attn was built with OpenMP (the CLI is compiled with the
 * library's flags): without it every call runs on one thread, which
 * `attn --version` and `attn bench --json` say. */
#ifdef _OPENMP
#define CLI_OPENMP 1
#define CLI_OPENMP_JSON ",\"openmp\":true"
#else
#define CLI_OPENMP 0
#define CLI_OPENMP_JSON ",\"openmp\":false,\"note\":\"built without OpenMP\""
#endif

/* Exit statuses: 0 success; 1 out of memory (or threads) or an internal
 * error; 2 anything the user must change: usage, an argument, an input
 * file, an output destination (see cli_exit_code). */
enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* One option of a sub-command. metavar NULL = a flag without a value. */
typedef struct {
    const char *name; /* "--query" */
    const char *metavar; /* "[ALIGN]": the value is optional */
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

/* Options several commands share, each parsed here only (absent: *out
 * keeps its default). --causal takes an optional value: bare, the command's
 * natural alignment; top-left or bottom-right. */
bool cli_get_causal(const cli_args *a, attn_causal natural, attn_causal *out);
bool cli_get_threads(const cli_args *a, int *out);        /* 1..ATTN_MAX_THREADS */
bool cli_get_precision(const cli_args *a, attn_precision *out); /* exact (absent) or bf16 */
bool cli_get_scale(const cli_args *a, float *out);        /* > 0 */
bool cli_get_window(const cli_args *a, attn_window *out); /* L,R each >= -1 */
/* --rope neox|gptj, --rope-theta T, --rotary-dim R (CLI_ROPE_OPTIONS) into
 * *out: style ATTN_ROPE_NONE without --rope (the other two are then refused). */
bool cli_get_rope(const cli_args *a, attn_rope *out);
#define CLI_ROPE_OPTIONS                                                                          \
    {"--rope", "STYLE", "rotary embeddings on keys and queries: neox (halves) or gptj (interleaved)"}, \
    {"--rope-theta", "T", "RoPE base (default 10000)"},                                          \
    {"--rotary-dim", "R", "features rotated (even, <= D; default D)"}
/* name N[,N...]: integers in [lo, hi], no empty field; *count of them. */
bool cli_get_list(const cli_args *a, const char *name, long long lo, long long hi,
                  long long *vals, int max, int *count);
/* The arguments cli_parse filled last: the command running. */
const cli_args *cli_running(void);

/* The environment the library reads, checked: one line and false for an
 * ATTN_NUM_THREADS the library would ignore. */
bool cli_check_environment(void);
/* Flushes and closes standard output at exit: a write that failed (a full
 * disk, /dev/full) prints one line and turns a success into CLI_USAGE. */
int cli_close_stdout(const char *context, int rc);

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

/* Exit status for a library status: CLI_FAIL for out of memory (and other
 * resources) and internal errors, CLI_USAGE for everything the user must
 * change (arguments, files, destinations). The one rule of every command. */
int cli_exit_code(attn_status status);

/* Reads a .npy file ("-": standard input); on failure prints one line
 * naming the command and the option ("attn sdpa: --query q.npy: ...") and
 * returns the exit status, else CLI_OK. Notes integers rounded to float32. */
int cli_load_npy(const char *path, attn_array *out);
/* The same for a mask: an integer file (<i1, |u1, <i8...) is refused, as
 * torch refuses integer masks: masks are bool or float. */
int cli_load_mask(const char *path, attn_array *out);
/* A file of either kind, opened once (pipes, FIFOs, "-" work), told apart
 * by its first bytes: *is_npy says which of npy and st was filled. */
int cli_load_file(const char *path, bool *is_npy, attn_array *npy, attn_safetensors *st);
/* The same for .safetensors; `option` names it when the file is of another
 * kind (a .npy, a torch .pt zip, a pickle). */
int cli_load_safetensors(const char *option, const char *path, attn_safetensors *out);

/*
 * The outputs of a command, all or nothing (attn_outputs): every
 * destination is added, and so checked, before the work starts; writers
 * then fill them; commit moves them all into place, or none. While a set
 * is open, SIGINT, SIGTERM and SIGHUP remove its temporary files. Every
 * call returns an exit status after printing "attn CMD: --opt PATH: why".
 */
/* signals.c: from the start of main, SIGINT, SIGTERM and SIGHUP wait for
 * any commit in progress, remove the temporaries of the sets tracked, and
 * end the process by that signal; SIGXFSZ is ignored (the write fails). */
void cli_signals_init(void);
void cli_signals_track(attn_outputs *set, bool on);
void cli_signals_hold(bool hold); /* around a commit */

typedef struct {
    const cli_command *cmd;
    attn_outputs *set;
    int n;
    const char *option[ATTN_MAX_OUTPUTS];
    const char *path[ATTN_MAX_OUTPUTS];
} cli_outputs;

int cli_outputs_begin(cli_outputs *o, const cli_command *cmd);
/* Adds --option PATH; path NULL adds nothing (*index = -1, and writes to
 * index -1 do nothing). */
int cli_outputs_add(cli_outputs *o, const char *option, const char *path, int *index);
int cli_outputs_npy(cli_outputs *o, int index, const attn_tensor *t);
int cli_outputs_safetensors(cli_outputs *o, int index, const char *const *names,
                            const attn_tensor *tensors, size_t count);
int cli_outputs_model(cli_outputs *o, int index, attn_model *m);
int cli_outputs_bytes(cli_outputs *o, int index, const void *data, size_t size);
int cli_outputs_commit(cli_outputs *o);
/* Removes whatever was not committed. */
void cli_outputs_end(cli_outputs *o);
/* One set in one go, at the end of a command: options[i] PATH paths[i]
 * (NULL: not wanted) receives tensors[i] as .npy. */
int cli_save_npys(const cli_command *cmd, const char *const *options, const char *const *paths,
                  const attn_tensor *tensors, int n);

/* malloc of the product of n sizes in floats (at least one float), NULL
 * with a message on overflow or exhaustion. */
float *cli_alloc_floats(const char *context, int n, ...);
/* A float array of `rank` (2..4) dims viewed as (B,H,N,D), size-1 dims
 * prepended (stride 0); one line naming opt and false when it is not float or
 * its rank differs from the query's. */
bool cli_as_4d(const cli_command *cmd, const char *opt, const attn_array *a, int rank,
               attn_tensor *out);

/* --dtype f32|bf16|f16 (also float32, bfloat16, float16) into *out
 * (default float32); false with a usage line for anything else. */
bool cli_get_dtype(const cli_args *a, attn_dtype *out);
/* *t (float32) replaced by a contiguous copy rounded to dt (to nearest
 * even) in *owned, which the caller frees; float32 changes nothing. */
bool cli_round_input(const char *context, attn_tensor *t, attn_dtype dt, void **owned);
/* A KV cache storage by name: f32, bf16, f16, int8 or fp8 (e4m3). */
bool cli_parse_cache_dtype(const char *name, attn_dtype *dtype, attn_kv_quant *quant);
/* A result of dtype dt computed into a float buffer of n elements, made
 * writable as .npy: float16 stays (<f2); bfloat16, which .npy cannot hold,
 * is widened in place to float32 (exactly). Returns what buf now holds. */
attn_dtype cli_result_dtype(float *buf, int64_t n, attn_dtype dt);

/* Command tables (one per file). */
extern const cli_command cmd_sdpa, cmd_sdpa_backward;
extern const cli_command cmd_mha, cmd_mha_backward;
extern const cli_command cmd_example;
extern const cli_command cmd_explain, cmd_heatmap, cmd_scaling;
extern const cli_command cmd_train, cmd_heads;
extern const cli_command cmd_bench, cmd_info;
/* Only in builds with MPI (ATTN_HAVE_MPI): cmd_ring.c, cmd_ring_bench.c. */
extern const cli_command cmd_ring, cmd_ring_bench;
extern const cli_command cmd_decode;

#endif
