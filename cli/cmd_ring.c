/* attn ring: ring attention over MPI on .npy files (mpirun -np P attn ring
 * ...). Rank 0 reads the inputs and scatters each rank's shard, every rank
 * runs attn_ring_sdpa, rank 0 gathers and writes the outputs. Every step
 * that can fail on one rank ends with all ranks agreeing on the outcome, so
 * a bad file or shape stops every rank with a message instead of a hang.
 * Built only with MPI (see CMakeLists.txt). */
#include "cmd_ring.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cli_option ring_options[] = {
    {"--query", "Q.npy", "queries (B,H,N,D), (H,N,D) or (N,D)"},
    {"--key", "K.npy", "keys (B,Hkv,Nk,D)"},
    {"--value", "V.npy", "values (B,Hkv,Nk,Dv)"},
    {"--key-padding-mask", "M.npy", "(B,Nk) or (Nk): bool true = ignore the key (torch's), or float added"},
    {"--scale", "S", "score scale, > 0 (default 1/sqrt(D))"},
    {"--threads", "N", "threads per rank (default: ATTN_NUM_THREADS or all cores)"},
    RING_SHARED_OPTIONS,
    {"--out", "O.npy", "output (B,H,Nq,Dv) (required)"},
    {"--lse", "LSE.npy", "also write the log-sum-exp per query (B,H,Nq)"},
    {0},
};

static const char ring_details[] =
    "Run under MPI: mpirun -np P attn ring ... (as root add --allow-run-as-root;\n"
    "more ranks than cores need --oversubscribe). Rank 0 reads the files and\n"
    "sends each rank its slice of the sequence (contiguous, or the zigzag\n"
    "layout with --causal: rank r holds chunks r and 2P-1-r of 2P); key/value\n"
    "blocks then travel around the ring and partial results merge through\n"
    "their LSE. Results equal attn sdpa's up to rounding.\n"
    "--key-padding-mask follows nn.MultiheadAttention (as attn mha): bool true =\n"
    "ignore that key; integer masks are refused. Every rank must be given the\n"
    "same options: one that differs (--scale, --causal, --block-keys...) or a\n"
    "bad argument or --help on one rank stops them all with a message.\n"
    "attn ring bench --help: timing, communication wait and memory per rank.";

static int run_ring(int argc, char **argv);

const cli_command cmd_ring = {
    "ring", "ring attention over MPI (mpirun -np P attn ring ...; also: ring bench)",
    "--query Q.npy --key K.npy --value V.npy [--causal [ALIGN]] --out O.npy [--lse L.npy]",
    ring_details, ring_options, NULL, run_ring,
};

/* Views a rank-2..4 array as (B,H,N,D). */
static void as_4d(const attn_tensor *t, attn_tensor *out)
{
    const int pad = 4 - t->ndim;
    *out = *t;
    out->ndim = 4;
    for (int i = 3; i >= 0; --i) {
        out->shape[i] = i >= pad ? t->shape[i - pad] : 1;
        out->stride[i] = i >= pad ? t->stride[i - pad] : 0;
    }
}

/* What rank 0 learned from the files, sent to every rank. */
typedef struct {
    int32_t rc;   /* CLI_OK or the exit status every rank uses */
    int32_t rank_of_query, mask_dtype, has_mask;
    int64_t B, Hq, Hkv, Nq, Nk, D, Dv, mask_batched;
} ring_meta;

/* Blocking send/receive of any size (MPI counts are ints). */
static void send_floats(const void *buf, int64_t bytes, int to, MPI_Comm comm)
{
    const char *p = buf;
    do {
        const int n = bytes > INT_MAX ? INT_MAX : (int)bytes;
        MPI_Send(p, n, MPI_BYTE, to, 7, comm);
        p += n, bytes -= n;
    } while (bytes > 0);
}

static void recv_floats(void *buf, int64_t bytes, int from, MPI_Comm comm)
{
    char *p = buf;
    do {
        const int n = bytes > INT_MAX ? INT_MAX : (int)bytes;
        MPI_Recv(p, n, MPI_BYTE, from, 7, comm, MPI_STATUS_IGNORE);
        p += n, bytes -= n;
    } while (bytes > 0);
}

static int load_on_root(const cli_args *a, attn_array *q, attn_array *k, attn_array *v,
                        attn_array *m, ring_meta *meta, bool causal)
{
    const cli_command *cmd = &cmd_ring;
    if (cli_load_npy(cli_get(a, "--query"), q) || cli_load_npy(cli_get(a, "--key"), k) ||
        cli_load_npy(cli_get(a, "--value"), v))
        return CLI_USAGE;
    const int rank = q->t.ndim;
    if (rank < 2 || rank > 4)
        return cli_usage_error(cmd, "--query: expected 2 to 4 dimensions, got %d", rank);
    const attn_array *in[3] = {q, k, v};
    const char *names[3] = {"--query", "--key", "--value"};
    attn_tensor t4[3];
    for (int i = 0; i < 3; ++i) {
        if (in[i]->t.dtype != ATTN_F32)
            return cli_usage_error(cmd, "%s: expected a float array", names[i]);
        if (in[i]->t.ndim != rank)
            return cli_usage_error(cmd, "%s: has %d dimensions but --query has %d", names[i],
                                   in[i]->t.ndim, rank);
        as_4d(&in[i]->t, &t4[i]);
    }
    meta->rank_of_query = rank;
    meta->B = t4[0].shape[0], meta->Hq = t4[0].shape[1], meta->Nq = t4[0].shape[2];
    meta->D = t4[0].shape[3], meta->Hkv = t4[1].shape[1], meta->Nk = t4[1].shape[2];
    meta->Dv = t4[2].shape[3];
    if (t4[1].shape[0] != meta->B || t4[2].shape[0] != meta->B)
        return cli_usage_error(cmd, "--key/--value: batch size differs from --query's %lld",
                               (long long)meta->B);
    if (t4[1].shape[3] != meta->D)
        return cli_usage_error(cmd, "--key: feature size is %lld, --query has %lld",
                               (long long)t4[1].shape[3], (long long)meta->D);
    if (t4[2].shape[1] != meta->Hkv || t4[2].shape[2] != meta->Nk)
        return cli_usage_error(cmd, "--value: heads and length must match --key's (%lld, %lld)",
                               (long long)meta->Hkv, (long long)meta->Nk);
    if (meta->Hkv < 1 || meta->Hq % meta->Hkv)
        return cli_usage_error(cmd, "--key: %lld heads do not divide --query's %lld",
                               (long long)meta->Hkv, (long long)meta->Hq);
    if (causal && meta->Nq != meta->Nk)
        return cli_usage_error(cmd, "--causal: needs as many queries as keys (%lld vs %lld)",
                               (long long)meta->Nq, (long long)meta->Nk);
    const char *mp = cli_get(a, "--key-padding-mask");
    if (mp) {
        if (cli_load_mask(mp, m)) return CLI_USAGE;
        const attn_tensor *t = &m->t;
        const bool batched = t->ndim == 2;
        if ((t->ndim != 1 && t->ndim != 2) || t->shape[t->ndim - 1] != meta->Nk ||
            (batched && t->shape[0] != meta->B))
            return cli_usage_error(cmd, "--key-padding-mask: expected (B, Nk) = (%lld, %lld) or (Nk)",
                                   (long long)meta->B, (long long)meta->Nk);
        /* torch's key_padding_mask (true = ignore) into the library's
         * (true = may attend) */
        if (t->dtype == ATTN_BOOL)
            for (int64_t i = 0, n = attn_tensor_numel(t); i < n; ++i)
                ((uint8_t *)t->data)[i] ^= 1;
        meta->has_mask = 1;
        meta->mask_dtype = t->dtype;
        meta->mask_batched = batched;
    }
    return CLI_OK;
}

/* Output with the query's rank: drop the leading size-1 dims it lacked. */
static attn_tensor mirror(float *data, int rank, int64_t b, int64_t h, int64_t n, int64_t d)
{
    const int64_t full[4] = {b, h, n, d};
    int64_t shape[4];
    const int nd = rank - (d < 0), first = (d < 0 ? 3 : 4) - nd;
    for (int i = 0; i < nd; ++i) shape[i] = full[first + i];
    return attn_tensor_make(data, ATTN_F32, nd, shape);
}

/* Everything but the shared options must be given; --scale > 0. */
static int ring_arguments(const cli_args *a, void *ctx)
{
    attn_ring_opts *opts = ctx;
    if (!cli_require(a, "--query") || !cli_require(a, "--key") || !cli_require(a, "--value") ||
        !cli_require(a, "--out") || !cli_get_scale(a, &opts->scale))
        return CLI_USAGE;
    return cli_ring_options(a, opts);
}

static int ring_main(int argc, char **argv)
{
    const cli_command *cmd = &cmd_ring;
    cli_args a;
    attn_ring_opts opts = attn_ring_opts_default();
    cli_ring_run run;
    bool stop;
    /* rank 0 alone reads the files and writes the outputs */
    static const char *const agreed[] = {"--causal", "--scale", "--block-keys", "--block-queries",
                                         NULL};
    int rc = cli_ring_begin(cmd, argc, argv, &a, ring_arguments, &opts, agreed, &run, &stop);
    if (stop) return rc;
    const bool causal = opts.causal;
    MPI_Comm comm = run.comm;
    const int P = run.ranks, me = run.me;

    attn_array q = {0}, k = {0}, v = {0}, m = {0};
    ring_meta meta;
    memset(&meta, 0, sizeof meta);
    if (me == 0) meta.rc = load_on_root(&a, &q, &k, &v, &m, &meta, causal);
    MPI_Bcast(&meta, (int)sizeof meta, MPI_BYTE, 0, comm);
    float *lq = NULL, *lk = NULL, *lv = NULL, *lo = NULL, *ll = NULL;
    void *lm = NULL;
    float *fo = NULL, *fl = NULL;
    if (meta.rc != CLI_OK) {
        if (me != 0) fprintf(stderr, "attn ring (rank %d): stopped: rank 0 could not use the inputs\n", me);
        rc = meta.rc;
        goto done;
    }
    const int64_t B = meta.B, Hq = meta.Hq, Hkv = meta.Hkv, D = meta.D, Dv = meta.Dv;
    attn_ring_span sq, sk;
    attn_ring_layout(meta.Nq, P, me, causal, &sq, NULL);
    attn_ring_layout(meta.Nk, P, me, causal, &sk, NULL);
    const int64_t nq = sq.length[0] + sq.length[1], nk = sk.length[0] + sk.length[1];
    const size_t msz = meta.mask_dtype == ATTN_BOOL ? 1 : sizeof(float);
    lq = cli_alloc_floats("ring", 4, B, Hq, nq, D);
    lk = cli_alloc_floats("ring", 4, B, Hkv, nk, D);
    lv = cli_alloc_floats("ring", 4, B, Hkv, nk, Dv);
    lo = cli_alloc_floats("ring", 4, B, Hq, nq, Dv);
    ll = cli_alloc_floats("ring", 3, B, Hq, nq, 1);
    lm = meta.has_mask ? calloc((size_t)(B * nk + 1), msz) : NULL;
    rc = lq && lk && lv && lo && ll && (!meta.has_mask || lm) ? CLI_OK : CLI_FAIL;
    if ((rc = cli_ring_agree(rc, comm)) != CLI_OK) {
        fprintf(stderr, "attn ring (rank %d): stopped: out of memory on a rank\n", me);
        goto done;
    }
    const int64_t mshape[2] = {B, nk};
    attn_tensor Lq = attn_tensor_4d(lq, B, Hq, nq, D), Lk = attn_tensor_4d(lk, B, Hkv, nk, D),
                Lv = attn_tensor_4d(lv, B, Hkv, nk, Dv), Lo = attn_tensor_4d(lo, B, Hq, nq, Dv),
                Ll = attn_tensor_3d(ll, B, Hq, nq),
                Lm = attn_tensor_make(lm, (attn_dtype)meta.mask_dtype, 2, mshape);
    /* Rank 0 cuts every rank's shard out of the full arrays and sends it. */
    if (me == 0) {
        attn_tensor Q4, K4, V4, M2;
        as_4d(&q.t, &Q4), as_4d(&k.t, &K4), as_4d(&v.t, &V4);
        if (meta.has_mask) {
            M2 = m.t;
            if (!meta.mask_batched) /* (Nk): the same row for every batch entry */
                M2.ndim = 2, M2.shape[1] = M2.shape[0], M2.stride[1] = M2.stride[0],
                M2.shape[0] = B, M2.stride[0] = 0;
        }
        for (int r = P - 1; r >= 0 && rc == CLI_OK; --r) {
            attn_ring_span rq, rk;
            attn_ring_layout(meta.Nq, P, r, causal, &rq, NULL);
            attn_ring_layout(meta.Nk, P, r, causal, &rk, NULL);
            const int64_t rnq = rq.length[0] + rq.length[1], rnk = rk.length[0] + rk.length[1];
            /* rank r's shards: in our own buffers for r = 0, else in
             * temporaries of its size, sent and freed */
            float *tq = r ? cli_alloc_floats("ring", 4, B, Hq, rnq, D) : lq,
                  *tk = r ? cli_alloc_floats("ring", 4, B, Hkv, rnk, D) : lk,
                  *tv = r ? cli_alloc_floats("ring", 4, B, Hkv, rnk, Dv) : lv;
            void *tm = r && meta.has_mask ? calloc((size_t)(B * rnk + 1), msz) : lm;
            if (!tq || !tk || !tv || (meta.has_mask && !tm)) {
                rc = CLI_FAIL; /* the others wait in MPI_Recv: abort the job */
                fprintf(stderr, "attn ring: out of memory scattering the inputs\n");
                MPI_Abort(comm, CLI_FAIL);
            }
            attn_tensor sQ = attn_tensor_4d(tq, B, Hq, rnq, D), sK = attn_tensor_4d(tk, B, Hkv, rnk, D),
                        sV = attn_tensor_4d(tv, B, Hkv, rnk, Dv);
            const int64_t rms[2] = {B, rnk};
            attn_tensor sM = attn_tensor_make(tm, (attn_dtype)meta.mask_dtype, 2, rms);
            attn_ring_shard(&Q4, 2, P, r, causal, &sQ, NULL);
            attn_ring_shard(&K4, 2, P, r, causal, &sK, NULL);
            attn_ring_shard(&V4, 2, P, r, causal, &sV, NULL);
            if (meta.has_mask) attn_ring_shard(&M2, 1, P, r, causal, &sM, NULL);
            if (r == 0) break;
            send_floats(tq, 4 * B * Hq * rnq * D, r, comm);
            send_floats(tk, 4 * B * Hkv * rnk * D, r, comm);
            send_floats(tv, 4 * B * Hkv * rnk * Dv, r, comm);
            if (meta.has_mask) send_floats(tm, (int64_t)msz * B * rnk, r, comm);
            free(tq), free(tk), free(tv);
            if (meta.has_mask) free(tm);
        }
        attn_array_free(&q), attn_array_free(&k), attn_array_free(&v), attn_array_free(&m);
    } else {
        recv_floats(lq, 4 * B * Hq * nq * D, 0, comm);
        recv_floats(lk, 4 * B * Hkv * nk * D, 0, comm);
        recv_floats(lv, 4 * B * Hkv * nk * Dv, 0, comm);
        if (meta.has_mask) recv_floats(lm, (int64_t)msz * B * nk, 0, comm);
    }
    opts.key_padding_mask = meta.has_mask ? &Lm : NULL;
    attn_error err = {0};
    if (attn_ring_sdpa(comm, &Lq, &Lk, &Lv, &Lo, &Ll, &opts, &err) != ATTN_OK) {
        /* every rank has the same status; the message names the failing rank */
        static const char *const names[][2] = {{"query", "--query"}, {"key", "--key"},
                                               {"value", "--value"}, {"scale", "--scale"},
                                               {"key_padding_mask", "--key-padding-mask"},
                                               {NULL, NULL}};
        if (me != 0) fprintf(stderr, "attn ring (rank %d): ", me);
        rc = cli_report_as(&a, &err, names);
        goto done;
    }
    /* Rank 0 gathers the outputs into the full arrays and writes them. */
    if (me == 0) {
        fo = cli_alloc_floats("ring", 4, B, Hq, meta.Nq, Dv);
        fl = cli_alloc_floats("ring", 3, B, Hq, meta.Nq, 1);
        rc = fo && fl ? CLI_OK : CLI_FAIL;
    }
    if ((rc = cli_ring_agree(rc, comm)) != CLI_OK) goto done;
    if (me == 0) {
        attn_tensor Fo = attn_tensor_4d(fo, B, Hq, meta.Nq, Dv), Fl = attn_tensor_3d(fl, B, Hq, meta.Nq);
        for (int r = 0; r < P; ++r) {
            attn_ring_span rq;
            attn_ring_layout(meta.Nq, P, r, causal, &rq, NULL);
            const int64_t rnq = rq.length[0] + rq.length[1];
            float *to = r ? cli_alloc_floats("ring", 4, B, Hq, rnq, Dv) : lo,
                  *tl = r ? cli_alloc_floats("ring", 3, B, Hq, rnq, 1) : ll;
            if (!to || !tl) {
                fprintf(stderr, "attn ring: out of memory gathering the outputs\n");
                MPI_Abort(comm, CLI_FAIL);
            }
            if (r > 0) {
                recv_floats(to, 4 * B * Hq * rnq * Dv, r, comm);
                recv_floats(tl, 4 * B * Hq * rnq, r, comm);
            }
            attn_tensor sO = attn_tensor_4d(to, B, Hq, rnq, Dv), sL = attn_tensor_3d(tl, B, Hq, rnq);
            attn_ring_unshard(&sO, 2, P, r, causal, &Fo, NULL);
            attn_ring_unshard(&sL, 2, P, r, causal, &Fl, NULL);
            if (r) free(to), free(tl);
        }
        const char *paths[2] = {cli_get(&a, "--out"), cli_get(&a, "--lse")};
        attn_tensor ts[2] = {mirror(fo, meta.rank_of_query, B, Hq, meta.Nq, Dv),
                             mirror(fl, meta.rank_of_query, B, Hq, meta.Nq, -1)};
        static const char *const options[2] = {"--out", "--lse"};
        rc = cli_save_npys(&cmd_ring, options, paths, ts, 2);
    } else {
        send_floats(lo, 4 * B * Hq * nq * Dv, 0, comm);
        send_floats(ll, 4 * B * Hq * nq, 0, comm);
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, comm);
    if (rc != CLI_OK && me != 0)
        fprintf(stderr, "attn ring (rank %d): stopped: rank 0 could not write the outputs\n", me);
done:
    free(lq), free(lk), free(lv), free(lo), free(ll), free(lm), free(fo), free(fl);
    if (me == 0) attn_array_free(&q), attn_array_free(&k), attn_array_free(&v), attn_array_free(&m);
    cli_ring_end(&run);
    return rc;
}

static int run_ring(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "bench")) return cmd_ring_bench.run(argc - 1, argv + 1);
    return ring_main(argc, argv);
}
