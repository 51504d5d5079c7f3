/*
 * test_ring — ring attention over MPI, run by ctest as
 * `mpirun -np P test_ring` for P = 1, 2, 3, 4.
 *
 * Every rank draws the same full Q, K, V, dO (and key padding mask) from a
 * seed, computes the float64 oracle (tests/support/ref64.c) over the whole
 * sequence, takes its shard (attn_ring_shard) and runs attn_ring_sdpa and
 * attn_ring_sdpa_backward. Its local out, lse, dq, dk and dv must match the
 * oracle's rows for its positions under test_sdpa's tolerance
 * (TOL_UNITS · eps · kappa · mag), exactly where the oracle is exact (rows
 * that see nothing: out 0, lse -inf, zero gradients); single-process
 * attn_sdpa/attn_sdpa_backward must meet the same bound on the same case. A
 * second run must give the same bits. Cases: causal (zigzag) and not,
 * uneven N, N < 2P (empty chunks), GQA, D != Dv, cross-attention lengths,
 * key padding with fully masked rows, small pieces and row chunks (many
 * ticks and diagonal splits), strided views.
 * Failures: a rank with a bad shape, ranks that disagree on heads, a causal
 * shard of the wrong length: every rank must get an error (naming the
 * failing rank) and none may hang.
 *
 * Each rank counts its own checks; rank 0 prints the totals and every rank
 * exits with the same status.
 */
#include "attn_mpi.h"
#include "ref64.h"
#include "testutil.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EPS32 ((double)FLT_EPSILON)
#define TOL_UNITS 32.0

static int g_rank, g_P;
static long g_pass, g_fail;

static void check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(bool ok, const char *fmt, ...)
{
    if (ok) {
        g_pass++;
        return;
    }
    g_fail++;
    char buf[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    printf("FAIL [P=%d rank %d] %s\n", g_P, g_rank, buf);
    fflush(stdout);
}

typedef struct {
    const char *name;
    int64_t B, Hq, Hkv, Nq, Nk, D, Dv;
    bool causal, mask, strided;
    int64_t block_keys, block_queries;
    bool stats; /* forward writes softmax stats, the backward reads them (no lse) */
    int threads; /* the ring's num_threads (0: 1) */
} ring_case;

/* Global position of local row i of a shard. */
static int64_t global_row(const attn_ring_span *sp, int64_t i)
{
    return i < sp->length[0] ? sp->start[0] + i : sp->start[1] + (i - sp->length[0]);
}

/* Compares local rows (B,H,n,X) of got with the global (B,H,N,X) oracle. */
static void compare(const ring_case *c, const char *what, const attn_tensor *got, const double *want,
                    const double *mag, int64_t N, int64_t X, const attn_ring_span *sp,
                    double atol_units, bool lse_like, double kappa, const char *who)
{
    const int64_t B = got->shape[0], H = got->shape[1], n = got->shape[2];
    int64_t bad = 0;
    double worst = 0;
    char first[200] = "";
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < n; ++i)
                for (int64_t x = 0; x < X; ++x) {
                    const int64_t gi = global_row(sp, i);
                    const int64_t wi = ((b * H + h) * N + gi) * X + x;
                    const float *p = (const float *)got->data + b * got->stride[0] +
                                     h * got->stride[1] + i * got->stride[2] +
                                     (got->ndim == 4 ? x * got->stride[3] : 0);
                    const double g = *p, w = want[wi];
                    const double tol = lse_like ? atol_units * EPS32 * (kappa + log1p((double)c->Nk))
                                                : atol_units * EPS32 * kappa * mag[wi];
                    bool ok;
                    if (isinf(w)) ok = g == w;
                    else ok = !isnan(g) && fabs(g - w) <= tol;
                    if (!ok) {
                        if (!bad)
                            snprintf(first, sizeof first, "[%lld,%lld,%lld(global %lld),%lld] got %.9g want %.9g tol %.3g",
                                     (long long)b, (long long)h, (long long)i, (long long)gi,
                                     (long long)x, g, w, tol);
                        bad++;
                    }
                    if (tol > 0 && isfinite(w)) worst = fmax(worst, fabs(g - w) / tol);
                }
    check(bad == 0, "%s: %s %s: %lld bad, first %s", c->name, who, what, (long long)bad, first);
    (void)worst;
}

typedef struct {
    double *q, *k, *v, *dout, *bias, *out, *lse, *w, *dq, *dk, *dv;
    double *mag_out, *mag_dq, *mag_dk, *mag_dv;
    double kappa;
} oracle;

static void fill(float *x, int64_t n, tu_rng *r, double sd)
{
    for (int64_t i = 0; i < n; ++i) x[i] = (float)(sd * tu_rng_normal(r));
}

static double *f64(const float *x, int64_t n)
{
    double *d = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; ++i) d[i] = x[i];
    return d;
}

static void floor_mag(double *m, int64_t n)
{
    for (int64_t i = 0; i < n; ++i)
        if (m[i] > 0 && m[i] < 1e-30) m[i] = 1e-30;
}

/* One full run (forward + backward) on this rank's shards. */
typedef struct {
    float *o, *l, *dq, *dk, *dv, *st;
    attn_tensor O, L, dQ, dK, dV, S;
    int64_t pairs[2]; /* (query, key) pairs this rank scored: forward, backward */
} ring_out;

static bool run_ring(const ring_case *c, const attn_tensor *q, const attn_tensor *k,
                     const attn_tensor *v, const attn_tensor *dout, const attn_tensor *mask,
                     int64_t nq, int64_t nk, ring_out *r, attn_error *err)
{
    const int64_t no = c->B * c->Hq * nq * c->Dv, nl = c->B * c->Hq * nq,
                  ndq = c->B * c->Hq * nq * c->D, ndk = c->B * c->Hkv * nk * c->D,
                  ndv = c->B * c->Hkv * nk * c->Dv;
    r->o = calloc((size_t)no + 1, 4), r->l = calloc((size_t)nl + 1, 4);
    r->dq = calloc((size_t)ndq + 1, 4), r->dk = calloc((size_t)ndk + 1, 4);
    r->dv = calloc((size_t)ndv + 1, 4);
    r->st = calloc(2 * (size_t)nl + 1, 4);
    r->S = attn_tensor_4d(r->st, c->B, c->Hq, nq, 2);
    r->O = attn_tensor_4d(r->o, c->B, c->Hq, nq, c->Dv);
    r->L = attn_tensor_3d(r->l, c->B, c->Hq, nq);
    r->dK = attn_tensor_4d(r->dk, c->B, c->Hkv, nk, c->D);
    r->dV = attn_tensor_4d(r->dv, c->B, c->Hkv, nk, c->Dv);
    if (c->strided) /* dQ and out as (B,N,H,X) buffers seen as (B,H,N,X) */
        r->dQ = attn_tensor_transpose(attn_tensor_4d(r->dq, c->B, nq, c->Hq, c->D), 1, 2),
        r->O = attn_tensor_transpose(attn_tensor_4d(r->o, c->B, nq, c->Hq, c->Dv), 1, 2);
    else
        r->dQ = attn_tensor_4d(r->dq, c->B, c->Hq, nq, c->D);
    attn_ring_opts o = attn_ring_opts_default();
    o.causal = c->causal;
    o.key_padding_mask = c->mask ? mask : NULL;
    o.num_threads = c->threads > 0 ? c->threads : 1;
    o.block_keys = c->block_keys;
    o.block_queries = c->block_queries;
    if (c->stats) o.softmax_stats = &r->S;
    attn_ring_timing tm;
    o.timing = &tm;
    if (attn_ring_sdpa(MPI_COMM_WORLD, q, k, v, &r->O, &r->L, &o, err) != ATTN_OK) return false;
    r->pairs[0] = tm.pairs;
    const bool ok = attn_ring_sdpa_backward(MPI_COMM_WORLD, q, k, v, &r->O, c->stats ? NULL : &r->L,
                                            dout, &r->dQ, &r->dK, &r->dV, &o, err) == ATTN_OK;
    r->pairs[1] = tm.pairs;
    return ok;
}

static void ring_out_free(ring_out *r)
{
    free(r->o), free(r->l), free(r->dq), free(r->dk), free(r->dv), free(r->st);
}

static bool same_bits(const ring_out *a, const ring_out *b, const ring_case *c, int64_t nq,
                      int64_t nk)
{
    return !memcmp(a->o, b->o, 4 * (size_t)(c->B * c->Hq * nq * c->Dv)) &&
           !memcmp(a->l, b->l, 4 * (size_t)(c->B * c->Hq * nq)) &&
           !memcmp(a->dq, b->dq, 4 * (size_t)(c->B * c->Hq * nq * c->D)) &&
           !memcmp(a->dk, b->dk, 4 * (size_t)(c->B * c->Hkv * nk * c->D)) &&
           !memcmp(a->dv, b->dv, 4 * (size_t)(c->B * c->Hkv * nk * c->Dv));
}

static void run_case(const ring_case *c, uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    const int64_t B = c->B, Hq = c->Hq, Hkv = c->Hkv, Nq = c->Nq, Nk = c->Nk, D = c->D, Dv = c->Dv;
    const int64_t nqf = B * Hq * Nq * D, nkf = B * Hkv * Nk * D, nvf = B * Hkv * Nk * Dv,
                  nof = B * Hq * Nq * Dv;
    float *q = malloc(4 * (size_t)nqf + 4), *k = malloc(4 * (size_t)nkf + 4),
          *v = malloc(4 * (size_t)nvf + 4), *dO = malloc(4 * (size_t)nof + 4);
    uint8_t *mask = malloc((size_t)(B * Nk) + 1);
    fill(q, nqf, &r, 1.2), fill(k, nkf, &r, 1.2), fill(v, nvf, &r, 1.0), fill(dO, nof, &r, 1.0);
    for (int64_t i = 0; i < B * Nk; ++i) mask[i] = !c->mask || tu_rng_chance(&r, 0.75);
    if (c->mask && B > 1)
        for (int64_t j = 0; j < Nk; ++j) mask[Nk + j] = 0; /* batch 1: every row sees nothing */
    attn_tensor Qf = attn_tensor_4d(q, B, Hq, Nq, D), Kf = attn_tensor_4d(k, B, Hkv, Nk, D),
                Vf = attn_tensor_4d(v, B, Hkv, Nk, Dv), dOf = attn_tensor_4d(dO, B, Hq, Nq, Dv);
    const int64_t ms[2] = {B, Nk}, m4[4] = {B, 1, 1, Nk};
    attn_tensor Mf = attn_tensor_make(mask, ATTN_BOOL, 2, ms), M4 = attn_tensor_make(mask, ATTN_BOOL, 4, m4);

    /* The oracle over the whole sequence. */
    oracle o;
    memset(&o, 0, sizeof o);
    o.q = f64(q, nqf), o.k = f64(k, nkf), o.v = f64(v, nvf), o.dout = f64(dO, nof);
    o.bias = calloc((size_t)(B * Hq * Nq * Nk) + 1, sizeof(double));
    if (c->mask) ref64_add_mask(o.bias, B, Hq, Nq, Nk, &M4);
    o.out = malloc(8 * (size_t)nof + 8), o.lse = malloc(8 * (size_t)(B * Hq * Nq) + 8);
    o.w = malloc(8 * (size_t)(B * Hq * Nq * Nk) + 8);
    o.dq = malloc(8 * (size_t)nqf + 8), o.dk = malloc(8 * (size_t)nkf + 8), o.dv = malloc(8 * (size_t)nvf + 8);
    o.mag_out = malloc(8 * (size_t)nof + 8), o.mag_dq = malloc(8 * (size_t)nqf + 8);
    o.mag_dk = malloc(8 * (size_t)nkf + 8), o.mag_dv = malloc(8 * (size_t)nvf + 8);
    ref64_sdpa rp = {B, Hq, Hkv, Nq, Nk, D, Dv, 1.0 / sqrt((double)D),
                     c->causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE, o.bias};
    ref64_sdpa_forward(&rp, o.q, o.k, o.v, o.out, o.lse, o.w);
    ref64_sdpa_backward(&rp, o.q, o.k, o.v, o.dout, o.dq, o.dk, o.dv);
    ref64_sdpa_magnitudes(&rp, o.q, o.k, o.v, o.dout, o.w, o.mag_out, o.mag_dq, o.mag_dk, o.mag_dv);
    floor_mag(o.mag_out, nof), floor_mag(o.mag_dq, nqf), floor_mag(o.mag_dk, nkf), floor_mag(o.mag_dv, nvf);
    o.kappa = 1.0 + ref64_sdpa_score_magnitude(&rp, o.q, o.k);

    /* Single process on the same case must meet the same bound (rank 0). */
    attn_ring_span all_q = {1, {0, 0}, {Nq, 0}}, all_k = {1, {0, 0}, {Nk, 0}};
    if (g_rank == 0) {
        float *so = malloc(4 * (size_t)nof + 4), *sl = malloc(4 * (size_t)(B * Hq * Nq) + 4),
              *sdq = malloc(4 * (size_t)nqf + 4), *sdk = malloc(4 * (size_t)nkf + 4),
              *sdv = malloc(4 * (size_t)nvf + 4);
        attn_tensor O = attn_tensor_4d(so, B, Hq, Nq, Dv), L = attn_tensor_3d(sl, B, Hq, Nq),
                    dQ = attn_tensor_4d(sdq, B, Hq, Nq, D), dK = attn_tensor_4d(sdk, B, Hkv, Nk, D),
                    dV = attn_tensor_4d(sdv, B, Hkv, Nk, Dv);
        attn_sdpa_opts so_ = attn_sdpa_opts_default();
        so_.causal = c->causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
        so_.mask[0] = c->mask ? &M4 : NULL;
        so_.num_threads = 1;
        attn_error e = {0};
        bool ok = attn_sdpa(&Qf, &Kf, &Vf, &O, &L, NULL, &so_, &e) == ATTN_OK &&
                  attn_sdpa_backward(&Qf, &Kf, &Vf, &O, &L, &dOf, &dQ, &dK, &dV, &so_, &e) == ATTN_OK;
        check(ok, "%s: single-process attn_sdpa failed: %s", c->name, e.message);
        if (ok) {
            compare(c, "out", &O, o.out, o.mag_out, Nq, Dv, &all_q, TOL_UNITS, false, o.kappa, "single");
            compare(c, "lse", &L, o.lse, NULL, Nq, 1, &all_q, TOL_UNITS, true, o.kappa, "single");
            compare(c, "dq", &dQ, o.dq, o.mag_dq, Nq, D, &all_q, TOL_UNITS, false, o.kappa, "single");
            compare(c, "dk", &dK, o.dk, o.mag_dk, Nk, D, &all_k, TOL_UNITS, false, o.kappa, "single");
            compare(c, "dv", &dV, o.dv, o.mag_dv, Nk, Dv, &all_k, TOL_UNITS, false, o.kappa, "single");
        }
        free(so), free(sl), free(sdq), free(sdk), free(sdv);
    }

    /* This rank's shards. */
    attn_ring_span sq, sk;
    attn_ring_layout(Nq, g_P, g_rank, c->causal, &sq, NULL);
    attn_ring_layout(Nk, g_P, g_rank, c->causal, &sk, NULL);
    const int64_t nq = sq.length[0] + sq.length[1], nk = sk.length[0] + sk.length[1];
    float *lq = malloc(4 * (size_t)(B * Hq * nq * D) + 4), *lk = malloc(4 * (size_t)(B * Hkv * nk * D) + 4),
          *lv = malloc(4 * (size_t)(B * Hkv * nk * Dv) + 4), *ldo = malloc(4 * (size_t)(B * Hq * nq * Dv) + 4);
    uint8_t *lm = malloc((size_t)(B * nk) + 1);
    attn_tensor Ql = c->strided ? attn_tensor_transpose(attn_tensor_4d(lq, B, nq, Hq, D), 1, 2)
                                : attn_tensor_4d(lq, B, Hq, nq, D);
    attn_tensor Kl = attn_tensor_4d(lk, B, Hkv, nk, D), Vl = attn_tensor_4d(lv, B, Hkv, nk, Dv),
                dOl = attn_tensor_4d(ldo, B, Hq, nq, Dv);
    const int64_t lms[2] = {B, nk};
    attn_tensor Ml = attn_tensor_make(lm, ATTN_BOOL, 2, lms);
    attn_error e = {0};
    bool ok = attn_ring_shard(&Qf, 2, g_P, g_rank, c->causal, &Ql, &e) == ATTN_OK &&
              attn_ring_shard(&Kf, 2, g_P, g_rank, c->causal, &Kl, &e) == ATTN_OK &&
              attn_ring_shard(&Vf, 2, g_P, g_rank, c->causal, &Vl, &e) == ATTN_OK &&
              attn_ring_shard(&dOf, 2, g_P, g_rank, c->causal, &dOl, &e) == ATTN_OK &&
              attn_ring_shard(&Mf, 1, g_P, g_rank, c->causal, &Ml, &e) == ATTN_OK;
    check(ok, "%s: attn_ring_shard failed: %s", c->name, e.message);
    ring_out r1, r2;
    memset(&r1, 0, sizeof r1), memset(&r2, 0, sizeof r2);
    if (ok) {
        ok = run_ring(c, &Ql, &Kl, &Vl, &dOl, &Ml, nq, nk, &r1, &e);
        check(ok, "%s: ring failed: %s", c->name, e.message);
    }
    if (ok) {
        compare(c, "out", &r1.O, o.out, o.mag_out, Nq, Dv, &sq, TOL_UNITS, false, o.kappa, "ring");
        compare(c, "lse", &r1.L, o.lse, NULL, Nq, 1, &sq, TOL_UNITS, true, o.kappa, "ring");
        compare(c, "dq", &r1.dQ, o.dq, o.mag_dq, Nq, D, &sq, TOL_UNITS, false, o.kappa, "ring");
        compare(c, "dk", &r1.dK, o.dk, o.mag_dk, Nk, D, &sk, TOL_UNITS, false, o.kappa, "ring");
        compare(c, "dv", &r1.dV, o.dv, o.mag_dv, Nk, Dv, &sk, TOL_UNITS, false, o.kappa, "ring");
        /* The ranks together score every visible (query, key) pair once. */
        int64_t pairs[2];
        MPI_Allreduce(r1.pairs, pairs, 2, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        const int64_t visible = B * Hq * (c->causal ? Nq * (Nq + 1) / 2 : Nq * Nk);
        check(pairs[0] == visible && pairs[1] == visible,
              "%s: the ranks scored %lld (forward) and %lld (backward) pairs, want %lld", c->name,
              (long long)pairs[0], (long long)pairs[1], (long long)visible);
        if (c->stats) {
            /* (m, ll): m + ll is the oracle's lse, and the lse output is it rounded once */
            bool st_ok = true;
            for (int64_t x = 0; x < B * Hq * nq && st_ok; ++x) {
                const int64_t b = x / (Hq * nq), h = (x / nq) % Hq, i = x % nq;
                const double want = o.lse[(b * Hq + h) * Nq + global_row(&sq, i)];
                const double m = r1.st[2 * x], ll = r1.st[2 * x + 1];
                if (isinf(want)) st_ok = m == -INFINITY && ll == 0.0 && r1.l[x] == -INFINITY;
                else st_ok = fabs(m + ll - want) <= TOL_UNITS * EPS32 * (o.kappa + log1p((double)Nk)) &&
                             r1.l[x] == (float)(m + ll);
            }
            check(st_ok, "%s: softmax stats must match the oracle's lse and give the lse output", c->name);
        }
        ok = run_ring(c, &Ql, &Kl, &Vl, &dOl, &Ml, nq, nk, &r2, &e);
        check(ok && same_bits(&r1, &r2, c, nq, nk), "%s: a second run must give the same bits (%s)",
              c->name, e.message);
        /* unshard puts the rows back where they came from */
        float *back = calloc((size_t)nqf + 1, 4);
        attn_tensor Bf = attn_tensor_4d(back, B, Hq, Nq, D);
        ok = attn_ring_unshard(&Ql, 2, g_P, g_rank, c->causal, &Bf, &e) == ATTN_OK;
        bool same = ok;
        for (int64_t b = 0; same && b < B; ++b)
            for (int64_t h = 0; same && h < Hq; ++h)
                for (int64_t i = 0; same && i < nq; ++i) {
                    const int64_t gi = global_row(&sq, i);
                    same = !memcmp(back + ((b * Hq + h) * Nq + gi) * D, q + ((b * Hq + h) * Nq + gi) * D,
                                   4 * (size_t)D);
                }
        check(same, "%s: unshard(shard(Q)) must restore this rank's rows (%s)", c->name, e.message);
        free(back);
    }
    ring_out_free(&r1), ring_out_free(&r2);
    free(lq), free(lk), free(lv), free(ldo), free(lm);
    free(q), free(k), free(v), free(dO), free(mask);
    double *all[] = {o.q, o.k, o.v, o.dout, o.bias, o.out, o.lse, o.w, o.dq, o.dk, o.dv,
                     o.mag_out, o.mag_dq, o.mag_dk, o.mag_dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) free(all[i]);
}

/* Bad input on one rank: every rank must return an error, none may hang. */
static void failures(void)
{
    enum { B = 1, H = 2, D = 4 };
    const int64_t N = 4 * g_P;
    attn_ring_span sp;
    attn_ring_layout(N, g_P, g_rank, true, &sp, NULL);
    const int64_t n = sp.length[0] + sp.length[1];
    float *q = calloc((size_t)(B * H * (n + 1) * D), 4), *o = calloc((size_t)(B * H * (n + 1) * D), 4),
          *l = calloc((size_t)(B * H * (n + 1)), 4);
    attn_tensor Q = attn_tensor_4d(q, B, H, n, D), O = attn_tensor_4d(o, B, H, n, D),
                L = attn_tensor_3d(l, B, H, n);
    attn_ring_opts opts = attn_ring_opts_default();
    opts.causal = true;
    const int bad = g_P - 1;
    char msg[64];

    /* 1. the last rank's key has the wrong feature size */
    attn_tensor K = Q;
    if (g_rank == bad) K.shape[3] = D - 1;
    attn_error e = {0};
    attn_status s = attn_ring_sdpa(MPI_COMM_WORLD, &Q, &K, &Q, &O, &L, &opts, &e);
    snprintf(msg, sizeof msg, "rank %d: key", bad);
    check(s == ATTN_ERR_SHAPE && strstr(e.message, g_rank == bad ? "key: feature size" : msg),
          "bad shape on rank %d: got %s '%s'", bad, attn_status_string(s), e.message);

    /* 2. the last rank disagrees on the number of heads */
    attn_tensor Q1 = Q, O1 = O, L1 = L;
    if (g_rank == bad && g_P > 1) Q1.shape[1] = 1, O1.shape[1] = 1, L1.shape[1] = 1, K = Q1;
    else K = Q;
    if (g_P > 1) {
        memset(&e, 0, sizeof e);
        s = attn_ring_sdpa(MPI_COMM_WORLD, &Q1, &K, &K, &O1, &L1, &opts, &e);
        snprintf(msg, sizeof msg, "rank %d: query heads is 1, rank 0 has 2", bad);
        check(s == ATTN_ERR_SHAPE && strstr(e.message, msg), "heads disagree: got %s '%s'",
              attn_status_string(s), e.message);
    }

    /* 3. a causal shard of the wrong length (one extra row on the last rank;
     * with one rank any length is a valid layout) */
    if (g_P > 1) {
        attn_tensor Q3 = Q, O3 = O, L3 = L;
        if (g_rank == bad) Q3.shape[2] = O3.shape[2] = L3.shape[2] = n + 1;
        memset(&e, 0, sizeof e);
        s = attn_ring_sdpa(MPI_COMM_WORLD, &Q3, &Q3, &Q3, &O3, &L3, &opts, &e);
        check(s == ATTN_ERR_SHAPE && strstr(e.message, "zigzag layout of N = ") &&
                  strstr(e.message, "holds"),
              "wrong shard length: got %s '%s'", attn_status_string(s), e.message);
    }

    /* 4. backward without lse on one rank */
    memset(&e, 0, sizeof e);
    s = attn_ring_sdpa_backward(MPI_COMM_WORLD, &Q, &Q, &Q, &O, g_rank == bad ? NULL : &L, &O,
                                &Q, NULL, NULL, &opts, &e);
    check(s == ATTN_ERR_NULL && strstr(e.message, "lse"), "backward without lse: got %s '%s'",
          attn_status_string(s), e.message);
    free(q), free(o), free(l);
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_P);
    const uint64_t seed = 0x5199e7ull;
    const int64_t tiny = 2 * g_P - 1 > 1 ? 2 * g_P - 1 : 2;
    const ring_case cases[] = {
        {"non-causal, uneven N", 1, 2, 2, 37, 37, 8, 8, false, false, false, 0, 0, false, 0},
        {"causal GQA D!=Dv, small pieces", 2, 4, 2, 45, 45, 16, 12, true, false, false, 4, 5, false, 0},
        {"causal key padding, masked batch", 2, 2, 2, 64, 64, 8, 8, true, true, false, 6, 7, false, 0},
        {"non-causal cross lengths, GQA, padding", 2, 6, 3, 29, 51, 8, 4, false, true, false, 5, 4, false, 0},
        {"causal N < 2P (empty chunks)", 1, 2, 1, tiny, tiny, 4, 4, true, false, false, 0, 0, false, 0},
        {"causal N = 3", 1, 1, 1, 3, 3, 4, 4, true, false, false, 0, 0, false, 0},
        {"causal default blocks, strided views", 1, 3, 3, 100, 100, 8, 8, true, false, true, 0, 0, false, 0},
        {"causal one-key pieces", 1, 2, 2, 23, 23, 4, 4, true, true, false, 1, 3, false, 0},
        {"causal softmax stats, GQA, padding", 2, 4, 1, 33, 33, 8, 8, true, true, false, 4, 6, true, 0},
        {"non-causal softmax stats", 1, 2, 2, 19, 19, 4, 4, false, false, true, 3, 0, true, 0},
        /* 16 rows per rank: the row slices the ring computes on (strided
         * views of GQA queries) fit the workspace it sized once */
        {"causal GQA, 16-row shards", 1, 2, 1, 16 * g_P, 16 * g_P, 32, 32, true, false, false, 0, 0, false, 1},
        {"causal GQA, 16-row shards, 2 threads", 1, 2, 1, 16 * g_P, 16 * g_P, 32, 32, true, false, false, 0, 0, false, 2},
        {"non-causal GQA 8:1, 16-row shards", 1, 8, 1, 16 * g_P, 300, 32, 32, false, false, false, 0, 0, false, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        tu_crash_context("test_ring case %s", cases[i].name);
        run_case(&cases[i], tu_mix(seed ^ i));
    }
    failures();
    long counts[2] = {g_pass, g_fail}, total[2];
    MPI_Reduce(counts, total, 2, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    int rc = 0;
    if (g_rank == 0) {
        printf("ring attention on %d ranks: %ld passed, %ld failed\n", g_P, total[0], total[1]);
        rc = total[1] == 0 && total[0] > 0 ? 0 : 1;
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    (void)argc, (void)argv;
    return rc;
}
