/* attn ring and attn ring bench: shared options, MPI set-up and the
 * agreement on arguments (cmd_ring.h). */
#include "cmd_ring.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Started by a launcher (mpirun, mpiexec, srun): other ranks are waiting. */
static bool launched(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

static void start_mpi(cli_ring_run *r)
{
    int inited = 0, provided;
    MPI_Initialized(&inited);
    if (!inited) MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    r->started_here = !inited;
    r->comm = MPI_COMM_WORLD;
    MPI_Comm_size(r->comm, &r->ranks);
    MPI_Comm_rank(r->comm, &r->me);
}

int cli_ring_agree(int rc, MPI_Comm comm)
{
    int worst = rc;
    MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, comm);
    return worst;
}

/* The options in `agreed` as text, one line each: "=VALUE" when given,
 * "-" when absent. */
static char *option_text(const cli_args *a, const char *const *agreed, int *len)
{
    size_t n = 1;
    for (int i = 0; agreed[i]; ++i) n += strlen(cli_get(a, agreed[i]) ? cli_get(a, agreed[i]) : "") + 2;
    char *text = malloc(n), *p = text;
    for (int i = 0; text && agreed[i]; ++i) {
        const char *v = cli_get(a, agreed[i]);
        p += sprintf(p, "%c%s\n", v ? '=' : '-', v ? v : "");
    }
    *len = text ? (int)(p - text) : 0;
    return text;
}

/* Each rank compares the options that change the result with rank 0's. */
static int agree_options(const cli_command *cmd, const cli_args *a, const char *const *agreed,
                         const cli_ring_run *r)
{
    int len = 0, len0;
    char *mine = option_text(a, agreed, &len), *theirs = NULL;
    len0 = len;
    MPI_Bcast(&len0, 1, MPI_INT, 0, r->comm);
    theirs = r->me == 0 ? mine : malloc((size_t)len0 + 1);
    int rc = mine && theirs ? CLI_OK : CLI_FAIL;
    if (cli_ring_agree(rc, r->comm) != CLI_OK) {
        if (theirs != mine) free(theirs);
        free(mine);
        fprintf(stderr, "attn %s (rank %d): out of memory\n", cmd->name, r->me);
        return CLI_FAIL;
    }
    MPI_Bcast(theirs, len0, MPI_CHAR, 0, r->comm);
    const char *p = mine, *q = theirs;
    for (int i = 0; agreed[i] && rc == CLI_OK; ++i) {
        const size_t lp = strcspn(p, "\n"), lq = strcspn(q, "\n");
        if (lp != lq || memcmp(p, q, lp)) {
            fprintf(stderr, "attn %s (rank %d): %s: '%.*s' here, '%.*s' on rank 0: every rank "
                            "must be given the same %s\n",
                    cmd->name, r->me, agreed[i], (int)lp - 1, p + 1, (int)lq - 1, q + 1, agreed[i]);
            rc = CLI_USAGE;
        }
        p += lp + 1, q += lq + 1;
    }
    if (theirs != mine) free(theirs);
    free(mine);
    const int worst = cli_ring_agree(rc, r->comm);
    if (rc == CLI_OK && worst != CLI_OK)
        fprintf(stderr, "attn %s (rank %d): stopped: the ranks were given different options\n",
                cmd->name, r->me);
    return worst;
}

int cli_ring_begin(const cli_command *cmd, int argc, char **argv, cli_args *a,
               int (*more)(const cli_args *a, void *ctx), void *ctx, const char *const *agreed,
               cli_ring_run *r, bool *stop)
{
    bool help = false;
    *stop = true;
    r->started_here = false;
    const bool others = launched();
    if (others) start_mpi(r);
    int rc = cli_parse(cmd, argc, argv, a, &help);
    if (rc == CLI_OK && !help) rc = more(a, ctx);
    if (!others && (rc != CLI_OK || help)) return rc;
    if (!others) start_mpi(r);
    /* the first rank that cannot go on (P: none) */
    int mine = rc != CLI_OK || help ? r->me : r->ranks, first = mine;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, r->comm);
    if (first == r->ranks) {
        if ((rc = agree_options(cmd, a, agreed, r)) == CLI_OK) {
            *stop = false;
            return CLI_OK;
        }
        cli_ring_end(r);
        return rc;
    }
    const int worst = cli_ring_agree(rc, r->comm);
    if (mine == r->ranks)
        fprintf(stderr, "attn %s (rank %d): stopped: rank %d %s\n", cmd->name, r->me, first,
                worst != CLI_OK ? "could not use its arguments" : "printed --help");
    cli_ring_end(r);
    return help ? rc : worst != CLI_OK ? worst : CLI_USAGE;
}

int cli_ring_options(const cli_args *a, attn_ring_opts *opts)
{
    attn_causal causal;
    long bk = opts->block_keys, bq = opts->block_queries;
    if (!cli_get_causal(a, ATTN_CAUSAL_TOP_LEFT, &causal) ||
        !cli_get_threads(a, &opts->num_threads) ||
        !cli_get_int(a, "--block-keys", 1, 1L << 30, &bk) ||
        !cli_get_int(a, "--block-queries", 1, 1L << 30, &bq))
        return CLI_USAGE;
    opts->causal = causal != ATTN_CAUSAL_NONE;
    opts->block_keys = bk, opts->block_queries = bq;
    return CLI_OK;
}

void cli_ring_end(cli_ring_run *r)
{
    if (r->started_here) MPI_Finalize();
    r->started_here = false;
}
