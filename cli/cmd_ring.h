/* What attn ring and attn ring bench share: their common options, MPI set
 * up, and every rank agreeing on its arguments before any work, so that one
 * rank's bad option or --help stops all of them instead of leaving the
 * others waiting. Built only with MPI. */
#ifndef ATTN_CLI_CMD_RING_H
#define ATTN_CLI_CMD_RING_H

#include "attn_mpi.h"
#include "cli.h"

#define RING_SHARED_OPTIONS                                                                    \
    {"--causal", "[ALIGN]", "causal over the whole sequence (zigzag layout); Nq = Nk, so "     \
                            "top-left and bottom-right agree"},                                \
    {"--block-keys", "N", "keys per transferred piece (default 2048)"},                        \
    {"--block-queries", "N", "query rows per attn_sdpa call (default 4096)"}

typedef struct {
    MPI_Comm comm;
    int ranks, me;
    bool started_here; /* MPI_Init ran here: MPI_Finalize at the end */
} cli_ring_run;

/* Parses the command's arguments (cli_parse, then `more`, which parses the
 * command's own options into ctx and returns an exit status) on every rank
 * and agrees on the outcome, then checks that every rank was given the same
 * text for each option of `agreed` (NULL-terminated: those that change the
 * result or the collective calls). Returns CLI_OK with r set up when every
 * rank can go on; otherwise the exit status to end with (CLI_OK after this
 * rank's --help), *stop set, having printed why. Under a launcher MPI starts
 * first; a process started alone parses before starting MPI, so --help and
 * usage errors need no MPI. */
int cli_ring_begin(const cli_command *cmd, int argc, char **argv, cli_args *a,
               int (*more)(const cli_args *a, void *ctx), void *ctx, const char *const *agreed,
               cli_ring_run *r, bool *stop);
/* The shared options, and --threads, into opts (absent: kept). */
int cli_ring_options(const cli_args *a, attn_ring_opts *opts);
/* Every rank ends with the worst exit status of all. */
int cli_ring_agree(int rc, MPI_Comm comm);
void cli_ring_end(cli_ring_run *r);

#endif
