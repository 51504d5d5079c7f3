/*
 * test_varlen — packed variable-length batches (attn_sdpa_varlen and its
 * backward).
 *
 * Every random case packs 1..7 sequences of mixed lengths (0 included) into
 * (total, H, D) buffers with random layouts (permuted, padded), and checks:
 *   - the varlen call equals one attn_sdpa / attn_sdpa_backward call per
 *     sequence on the same views, bit for bit (out, lse, softmax_stats, dq,
 *     dk, dv, grad_sinks summed in sequence order), and writes nothing
 *     outside its views;
 *   - threads 1, 2 and 3 give the same bits;
 *   - int32 offsets give the same bits as int64 ones;
 *   - each sequence matches the float64 oracle (tests/support/ref64_variants)
 *     by the accuracy criterion, forward and backward (not under dropout, whose
 *     keep mask the oracle would need).
 * Options drawn: causal (both alignments), window, ALiBi (Hq) and (nseq, Hq),
 * softcap, sinks, dropout, GQA, D != Dv.
 * Group "errors": offsets not starting at 0, decreasing, ending off the
 * tensor, NULL pointers, masks, workspace, shape mismatches: each a clear
 * error naming the argument, with every output left untouched.
 *
 * Usage: test_varlen [--seed S] [--cases N] [--case SEED] [--group NAME] [--quick] [-v]
 */
#include "attn.h"
#include "ref64_variants.h"
#include "sdpa_judge.h"
#include "testutil.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SEED 0x7a41e11ull
#define MAX_SEQ 8

typedef struct {
    int64_t nseq, lq[MAX_SEQ], lk[MAX_SEQ];
    int64_t Hq, Hkv, D, Dv;
    attn_causal causal;
    attn_window window;
    float softcap;
    int alibi; /* 0 none, 1 (Hq), 2 (nseq, Hq) */
    bool sinks;
    float dropout;
    bool backward;
} vcase;

static vcase random_case(uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    vcase c;
    memset(&c, 0, sizeof c);
    c.nseq = tu_rng_int(&r, 1, 7);
    for (int64_t s = 0; s < c.nseq; ++s) {
        c.lq[s] = tu_rng_chance(&r, 0.1) ? 0 : tu_rng_int(&r, 1, 70);
        c.lk[s] = tu_rng_chance(&r, 0.3) ? c.lq[s] : tu_rng_int(&r, 0, 90);
    }
    static const int64_t groups[] = {1, 1, 2, 4};
    c.Hkv = tu_rng_int(&r, 1, 3);
    c.Hq = c.Hkv * tu_rng_pick(&r, groups, 4);
    static const int64_t dims[] = {1, 8, 16, 17, 32, 64};
    c.D = tu_rng_pick(&r, dims, 6);
    c.Dv = tu_rng_chance(&r, 0.7) ? c.D : tu_rng_pick(&r, dims, 6);
    c.causal = (attn_causal)tu_rng_int(&r, 0, 2);
    sj_random_variants(&r, 20, 20, &c.window, &c.softcap, &c.alibi, &c.sinks);
    if (tu_rng_chance(&r, 0.1)) c.dropout = 0.25f;
    c.backward = tu_rng_chance(&r, 0.6);
    return c;
}

/* All buffers of one case. */
typedef struct {
    int64_t tq, tk;
    int64_t oq[MAX_SEQ + 1], ok[MAX_SEQ + 1];
    tu_tensor q, k, v, dout;
    float *slopes, *sinks;
    attn_tensor slopes_t, sinks_t;
} vdata;

static bool alloc_packed(tu_tensor *t, tu_rng *r, int64_t total, int64_t h, int64_t x,
                         bool input)
{
    const int64_t shape[3] = {total, h, x};
    tu_layout lay = tu_layout_random(r, 3, TU_LAYOUT_OUTPUT);
    if (!tu_tensor_alloc(t, ATTN_F32, 3, shape, &lay)) return false;
    if (input) tu_fill_uniform(&t->view, r, -1.0, 1.0);
    return true;
}

static bool make_data(const vcase *c, tu_rng *r, vdata *d)
{
    memset(d, 0, sizeof *d);
    for (int64_t s = 0; s < c->nseq; ++s) {
        d->oq[s + 1] = d->oq[s] + c->lq[s];
        d->ok[s + 1] = d->ok[s] + c->lk[s];
    }
    d->tq = d->oq[c->nseq];
    d->tk = d->ok[c->nseq];
    if (!alloc_packed(&d->q, r, d->tq, c->Hq, c->D, true) ||
        !alloc_packed(&d->k, r, d->tk, c->Hkv, c->D, true) ||
        !alloc_packed(&d->v, r, d->tk, c->Hkv, c->Dv, true) ||
        !alloc_packed(&d->dout, r, d->tq, c->Hq, c->Dv, true))
        return false;
    const int64_t ns = c->alibi == 2 ? c->nseq : 1;
    d->slopes = malloc(sizeof(float) * (size_t)(ns * c->Hq));
    d->sinks = malloc(sizeof(float) * (size_t)c->Hq);
    for (int64_t i = 0; i < ns * c->Hq; ++i) d->slopes[i] = (float)tu_rng_range(r, 0.01, 0.5);
    for (int64_t i = 0; i < c->Hq; ++i) d->sinks[i] = (float)tu_rng_range(r, -2.0, 2.0);
    d->slopes_t = c->alibi == 2 ? attn_tensor_2d(d->slopes, c->nseq, c->Hq)
                                : attn_tensor_1d(d->slopes, c->Hq);
    d->sinks_t = attn_tensor_1d(d->sinks, c->Hq);
    return true;
}

static void free_data(vdata *d)
{
    tu_tensor_free(&d->q);
    tu_tensor_free(&d->k);
    tu_tensor_free(&d->v);
    tu_tensor_free(&d->dout);
    free(d->slopes);
    free(d->sinks);
}

static attn_sdpa_opts case_opts(const vcase *c, const vdata *d, int threads)
{
    attn_sdpa_opts o = attn_sdpa_opts_default();
    o.causal = c->causal;
    o.window = c->window;
    o.softcap = c->softcap;
    if (c->alibi) o.alibi_slopes = &d->slopes_t;
    if (c->sinks) o.sinks = &d->sinks_t;
    o.dropout_p = c->dropout;
    o.dropout_seed = 99;
    o.dropout_offset = 5;
    o.num_threads = threads;
    return o;
}

/* The test's own per-sequence view of a packed (total, H, X) tensor. */
static attn_tensor view4(const attn_tensor *t, int64_t off, int64_t len)
{
    attn_tensor v = *t;
    v.ndim = 4;
    v.data = (float *)t->data + off * t->stride[0];
    const int64_t sh[4] = {1, t->shape[1], len, t->shape[2]};
    const int64_t st[4] = {0, t->stride[1], t->stride[0], t->stride[2]};
    memcpy(v.shape, sh, sizeof sh);
    memcpy(v.stride, st, sizeof st);
    return v;
}

static attn_tensor view3(const attn_tensor *t, int64_t off, int64_t len)
{
    attn_tensor v = *t;
    v.ndim = 3;
    v.data = (float *)t->data + off * t->stride[0];
    const int64_t sh[3] = {1, t->shape[1], len};
    const int64_t st[3] = {0, t->stride[1], t->stride[0]};
    memcpy(v.shape, sh, sizeof sh);
    memcpy(v.stride, st, sizeof st);
    return v;
}

/* Outputs of one run. */
typedef struct {
    tu_tensor out, lse, stats, dq, dk, dv;
    float dsinks[64];
} vout;

static bool alloc_outputs(const vcase *c, const vdata *d, uint64_t seed, vout *o)
{
    tu_rng r;
    tu_rng_seed(&r, seed); /* the same layouts for every run of a case */
    memset(o, 0, sizeof *o);
    const int64_t ls[2] = {d->tq, c->Hq}, ss[3] = {d->tq, c->Hq, 2};
    tu_layout l2 = tu_layout_random(&r, 2, TU_LAYOUT_OUTPUT);
    tu_layout l3 = tu_layout_random(&r, 3, TU_LAYOUT_OUTPUT);
    return alloc_packed(&o->out, &r, d->tq, c->Hq, c->Dv, false) &&
           tu_tensor_alloc(&o->lse, ATTN_F32, 2, ls, &l2) &&
           tu_tensor_alloc(&o->stats, ATTN_F32, 3, ss, &l3) &&
           alloc_packed(&o->dq, &r, d->tq, c->Hq, c->D, false) &&
           alloc_packed(&o->dk, &r, d->tk, c->Hkv, c->D, false) &&
           alloc_packed(&o->dv, &r, d->tk, c->Hkv, c->Dv, false);
}

static void free_outputs(vout *o)
{
    tu_tensor_free(&o->out);
    tu_tensor_free(&o->lse);
    tu_tensor_free(&o->stats);
    tu_tensor_free(&o->dq);
    tu_tensor_free(&o->dk);
    tu_tensor_free(&o->dv);
}

/* The varlen calls (forward, then backward from its out and stats). */
static attn_status run_varlen(const vcase *c, const vdata *d, vout *o, int threads, bool i32,
                              attn_error *err)
{
    int32_t q32[MAX_SEQ + 1], k32[MAX_SEQ + 1];
    for (int64_t s = 0; s <= c->nseq; ++s) {
        q32[s] = (int32_t)d->oq[s];
        k32[s] = (int32_t)d->ok[s];
    }
    attn_varlen_seqs seqs = {c->nseq, i32 ? ATTN_OFFSETS_I32 : ATTN_OFFSETS_I64,
                             i32 ? (const void *)q32 : (const void *)d->oq,
                             i32 ? (const void *)k32 : (const void *)d->ok};
    attn_sdpa_opts opts = case_opts(c, d, threads);
    opts.softmax_stats = &o->stats.view;
    attn_status s = attn_sdpa_varlen(&d->q.view, &d->k.view, &d->v.view, &seqs, &o->out.view,
                                     &o->lse.view, &opts, err);
    if (s != ATTN_OK || !c->backward) return s;
    attn_tensor gs = attn_tensor_1d(o->dsinks, c->Hq);
    if (c->sinks) opts.grad_sinks = &gs;
    return attn_sdpa_varlen_backward(&d->q.view, &d->k.view, &d->v.view, &seqs, &o->out.view,
                                     &o->lse.view, &d->dout.view, &o->dq.view, &o->dk.view,
                                     &o->dv.view, &opts, err);
}

/* The same through one attn_sdpa (and backward) call per sequence. */
static attn_status run_per_sequence(const vcase *c, const vdata *d, vout *o, attn_error *err)
{
    float part[64];
    for (int64_t h = 0; h < c->Hq; ++h) o->dsinks[h] = 0.0f;
    for (int64_t s = 0; s < c->nseq; ++s) {
        const int64_t q0 = d->oq[s], nq = c->lq[s], k0 = d->ok[s], nk = c->lk[s];
        attn_sdpa_opts opts = case_opts(c, d, 2);
        opts.dropout_offset += (uint64_t)s;
        attn_tensor slopes = d->slopes_t;
        if (c->alibi == 2) {
            slopes.data = d->slopes + s * c->Hq;
            slopes.shape[0] = 1;
            opts.alibi_slopes = &slopes;
        }
        attn_tensor q = view4(&d->q.view, q0, nq), k = view4(&d->k.view, k0, nk),
                    v = view4(&d->v.view, k0, nk), out = view4(&o->out.view, q0, nq),
                    lse = view3(&o->lse.view, q0, nq), st = view4(&o->stats.view, q0, nq);
        opts.softmax_stats = &st;
        attn_status r = ATTN_OK;
        if (nq > 0) r = attn_sdpa(&q, &k, &v, &out, &lse, NULL, &opts, err);
        if (r != ATTN_OK) return r;
        if (!c->backward) continue;
        attn_tensor dout = view4(&d->dout.view, q0, nq), dq = view4(&o->dq.view, q0, nq),
                    dk = view4(&o->dk.view, k0, nk), dv = view4(&o->dv.view, k0, nk);
        attn_tensor gs = attn_tensor_1d(part, c->Hq);
        if (c->sinks) opts.grad_sinks = &gs;
        r = attn_sdpa_backward(&q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv, &opts, err);
        if (r != ATTN_OK) return r;
        if (c->sinks)
            for (int64_t h = 0; h < c->Hq; ++h) o->dsinks[h] += part[h];
    }
    return ATTN_OK;
}

static bool same_bits(const tu_tensor *a, const tu_tensor *b)
{
    return a->count == b->count && (a->count == 0 || !memcmp(a->base, b->base,
                                                            (size_t)a->count * a->elem_size));
}

/* Compares two runs' allocations byte for byte (padding included). */
static bool same_outputs(const vcase *c, const vout *a, const vout *b, const char **which)
{
    *which = "out";
    if (!same_bits(&a->out, &b->out)) return false;
    *which = "lse";
    if (!same_bits(&a->lse, &b->lse)) return false;
    *which = "softmax_stats";
    if (!same_bits(&a->stats, &b->stats)) return false;
    if (!c->backward) return true;
    *which = "dq";
    if (!same_bits(&a->dq, &b->dq)) return false;
    *which = "dk";
    if (!same_bits(&a->dk, &b->dk)) return false;
    *which = "dv";
    if (!same_bits(&a->dv, &b->dv)) return false;
    *which = "grad_sinks";
    return !c->sinks || !memcmp(a->dsinks, b->dsinks, sizeof(float) * (size_t)c->Hq);
}

/* Sequence s of a packed view into a contiguous (1, H, len, X) float64 array. */
static double *gather_seq(const attn_tensor *t, int64_t off, int64_t len)
{
    const int64_t H = t->shape[1], X = t->ndim == 3 ? t->shape[2] : 1;
    double *out = malloc(sizeof(double) * (size_t)(H * len * X > 0 ? H * len * X : 1));
    for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < len; ++i)
            for (int64_t x = 0; x < X; ++x)
                out[(h * len + i) * X + x] = tu_get(t, ((off + i) * H + h) * X + x);
    return out;
}

/* One quantity of sequence s against the oracle (the accuracy criterion). */
static bool judge(tu_group *g, const char *name, const double *got, const double *ref,
                  const double *f32, const double *f32b, const double *nat, int64_t n,
                  int64_t s, const char *rp)
{
    rv_cmp cmp;
    if (n == 0 || rv_criterion(got, ref, f32, f32b, nat, NULL, NULL, n, &cmp)) return true;
    char buf[512];
    rv_cmp_describe(&cmp, name, buf, sizeof buf);
    tu_group_fail(g, "sequence %" PRId64 ": %s (%s)", s, buf, rp);
    return false;
}

/* Every sequence against the float64 oracle. */
static bool check_oracle(tu_group *g, const vcase *c, const vdata *d, const vout *o,
                         const char *rp)
{
    bool ok = true;
    for (int64_t s = 0; s < c->nseq && ok; ++s) {
        const int64_t q0 = d->oq[s], nq = c->lq[s], k0 = d->ok[s], nk = c->lk[s];
        if (nq == 0) continue;
        double *q = gather_seq(&d->q.view, q0, nq), *k = gather_seq(&d->k.view, k0, nk);
        double *v = gather_seq(&d->v.view, k0, nk), *dout = gather_seq(&d->dout.view, q0, nq);
        double slopes[64], sinks[64];
        for (int64_t h = 0; h < c->Hq; ++h) {
            slopes[h] = d->slopes[(c->alibi == 2 ? s * c->Hq : 0) + h];
            sinks[h] = d->sinks[h];
        }
        rv_problem p = {.B = 1, .Hq = c->Hq, .Hkv = c->Hkv, .Nq = nq, .Nk = nk, .D = c->D,
                        .Dv = c->Dv, .scale = 1.0 / sqrt((double)(float)c->D),
                        .causal = c->causal, .window = c->window, .softcap = c->softcap,
                        .alibi = c->alibi ? slopes : NULL, .sinks = c->sinks ? sinks : NULL};
        p.scale = (double)(1.0f / sqrtf((float)c->D));
        const int64_t no = c->Hq * nq * c->Dv, nl = c->Hq * nq, nkd = c->Hkv * nk * c->D,
                      nkv = c->Hkv * nk * c->Dv, nqd = c->Hq * nq * c->D;
        double *buf = calloc((size_t)(6 * (no + nl) + 3 * (nqd + nkd + nkv) + 16), sizeof(double));
        double *fma = calloc((size_t)(no + nl + nqd + nkd + nkv + 8), sizeof(double));
        double *mo = fma, *ml = mo + no, *mq = ml + nl, *mk = mq + nqd, *mv = mk + nkd;
        double *ro = buf, *fo = ro + no, *no_ = fo + no, *rl = no_ + no, *fl = rl + nl,
               *nl_ = fl + nl, *go = nl_ + nl, *gl = go + no;
        double *rq = gl + nl, *fq = rq + nqd, *nq_ = fq + nqd, *rk = nq_ + nqd, *fk = rk + nkd,
               *nk_ = fk + nkd, *rv = nk_ + nkd, *fv = rv + nkv, *nv_ = fv + nkv;
        rv_forward64(&p, q, k, v, ro, rl, NULL, NULL);
        rv_forward32(&p, q, k, v, fo, fl, NULL, NULL);
        rv_forward32fma(&p, q, k, v, mo, ml, NULL, NULL);
        rv_natural(&p, q, k, v, dout, no_, nl_, NULL, nq_, nk_, nv_, NULL);
        double *got_o = gather_seq(&o->out.view, q0, nq), *got_l = gather_seq(&o->lse.view, q0, nq);
        ok &= judge(g, "out", got_o, ro, fo, mo, no_, no, s, rp);
        ok &= judge(g, "lse", got_l, rl, fl, ml, nl_, nl, s, rp);
        (void)go;
        if (ok && c->backward) {
            rv_backward64(&p, q, k, v, dout, rq, rk, rv, NULL);
            rv_backward32(&p, q, k, v, dout, fq, fk, fv, NULL);
            rv_backward32fma(&p, q, k, v, dout, mq, mk, mv, NULL);
            double *gq = gather_seq(&o->dq.view, q0, nq), *gk = gather_seq(&o->dk.view, k0, nk),
                   *gv = gather_seq(&o->dv.view, k0, nk);
            ok &= judge(g, "dq", gq, rq, fq, mq, nq_, nqd, s, rp);
            ok &= judge(g, "dk", gk, rk, fk, mk, nk_, nkd, s, rp);
            ok &= judge(g, "dv", gv, rv, fv, mv, nv_, nkv, s, rp);
            free(gq), free(gk), free(gv);
        }
        free(got_o), free(got_l), free(buf), free(fma), free(q), free(k), free(v), free(dout);
    }
    return ok;
}

static void run_case(tu_group *g, uint64_t seed, bool verbose)
{
    const vcase c = random_case(seed);
    char rp[96];
    snprintf(rp, sizeof rp, "ATTN_TEST_CASE=0x%016" PRIx64 " ./test_varlen", seed);
    tu_crash_context("%s", rp);
    tu_rng r;
    tu_rng_seed(&r, seed ^ 0xda7a);
    vdata d;
    vout a, b, t1, t3, i32;
    if (!make_data(&c, &r, &d) || !alloc_outputs(&c, &d, seed, &a) ||
        !alloc_outputs(&c, &d, seed, &b) || !alloc_outputs(&c, &d, seed, &t1) ||
        !alloc_outputs(&c, &d, seed, &t3) || !alloc_outputs(&c, &d, seed, &i32)) {
        tu_group_fail(g, "allocation failed (%s)", rp);
        return;
    }
    if (verbose)
        tu_group_note(g, "nseq %" PRId64 " Hq %" PRId64 " Hkv %" PRId64 " D %" PRId64
                         " Dv %" PRId64 " causal %d window %d softcap %g alibi %d sinks %d "
                         "dropout %g backward %d",
                      c.nseq, c.Hq, c.Hkv, c.D, c.Dv, (int)c.causal, (int)c.window.enabled,
                      (double)c.softcap, c.alibi, (int)c.sinks, (double)c.dropout,
                      (int)c.backward);
    attn_error err;
    const char *which = "";
    if (run_varlen(&c, &d, &a, 2, false, &err) != ATTN_OK) {
        tu_group_fail(g, "varlen call failed: %s (%s)", err.message, rp);
    } else if (run_per_sequence(&c, &d, &b, &err) != ATTN_OK) {
        tu_group_fail(g, "per-sequence call failed: %s (%s)", err.message, rp);
    } else if (!tu_check(g, same_outputs(&c, &a, &b, &which),
                         "varlen != per-sequence calls in %s (%s)", which, rp)) {
    } else if (run_varlen(&c, &d, &t1, 1, false, &err) != ATTN_OK ||
               run_varlen(&c, &d, &t3, 3, false, &err) != ATTN_OK ||
               run_varlen(&c, &d, &i32, 2, true, &err) != ATTN_OK) {
        tu_group_fail(g, "rerun failed: %s (%s)", err.message, rp);
    } else if (tu_check(g, same_outputs(&c, &a, &t1, &which) && same_outputs(&c, &a, &t3, &which),
                        "threads 1/2/3 differ in %s (%s)", which, rp) &&
               tu_check(g, same_outputs(&c, &a, &i32, &which),
                        "int32 offsets differ in %s (%s)", which, rp)) {
        if (c.dropout == 0.0f && check_oracle(g, &c, &d, &a, rp)) tu_group_pass(g);
    }
    free_outputs(&a), free_outputs(&b), free_outputs(&t1), free_outputs(&t3), free_outputs(&i32);
    free_data(&d);
}

static void group_random(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "random");
    const int64_t n = opt->cases > 0 ? opt->cases : opt->quick ? 60 : 250;
    for (int64_t i = 0; i < n; ++i) run_case(&g, tu_mix(opt->seed ^ (uint64_t)i), opt->verbose);
    tu_group_end(&g);
}

/* ---------------------------------------------------------------- errors */

static void expect_error(tu_group *g, attn_status got, attn_status want, const attn_error *err,
                         const char *needle, const tu_tensor *out, const uint8_t *before,
                         const char *what)
{
    bool untouched = !memcmp(out->base, before, (size_t)out->count * out->elem_size);
    tu_check(g, got == want && strstr(err->message, needle) && untouched,
             "%s: status %d (want %d), message '%s' (want '%s'), output %s", what, (int)got,
             (int)want, err->message, needle, untouched ? "untouched" : "WRITTEN");
}

static void group_errors(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "errors");
    tu_rng r;
    tu_rng_seed(&r, 1);
    float q[6 * 2 * 4], k[7 * 1 * 4], v[7 * 1 * 4], dout[6 * 2 * 4];
    for (int i = 0; i < 48; ++i) q[i] = dout[i] = (float)tu_rng_range(&r, -1, 1);
    for (int i = 0; i < 28; ++i) k[i] = v[i] = (float)tu_rng_range(&r, -1, 1);
    attn_tensor Q = attn_tensor_3d(q, 6, 2, 4), K = attn_tensor_3d(k, 7, 1, 4),
                V = attn_tensor_3d(v, 7, 1, 4), dO = attn_tensor_3d(dout, 6, 2, 4);
    tu_tensor out;
    const int64_t oshape[3] = {6, 2, 4};
    tu_tensor_alloc(&out, ATTN_F32, 3, oshape, NULL);
    uint8_t *before = malloc((size_t)out.count * 4);
    memcpy(before, out.base, (size_t)out.count * 4);
    attn_error err;
    struct {
        int64_t q[4], k[4];
        const char *needle;
        attn_status st;
    } bad[] = {
        {{1, 3, 6}, {0, 3, 7}, "cu_seqlens_q: must start at 0", ATTN_ERR_ARG},
        {{0, 4, 3, 6}, {0, 3, 5, 7}, "cu_seqlens_q: decreases at entry 2", ATTN_ERR_ARG},
        {{0, 3, 5}, {0, 3, 7}, "cu_seqlens_q: ends at 5, but query has 6", ATTN_ERR_SHAPE},
        {{0, 3, 6}, {0, 3, 9}, "cu_seqlens_k: ends at 9, but key has 7", ATTN_ERR_SHAPE},
        {{0, 3, 6}, {0, 5, 4}, "cu_seqlens_k: decreases", ATTN_ERR_ARG},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        const int64_t n = bad[i].q[3] ? 3 : 2;
        attn_varlen_seqs seqs = {n, ATTN_OFFSETS_I64, bad[i].q, bad[i].k};
        attn_status st = attn_sdpa_varlen(&Q, &K, &V, &seqs, &out.view, NULL, NULL, &err);
        expect_error(&g, st, bad[i].st, &err, bad[i].needle, &out, before, bad[i].needle);
        /* the backward validates the same way */
        st = attn_sdpa_varlen_backward(&Q, &K, &V, &seqs, NULL, NULL, &dO, &out.view, NULL, NULL,
                                       NULL, &err);
        expect_error(&g, st, bad[i].st, &err, bad[i].needle, &out, before, "backward");
    }
    int32_t q32[3] = {0, 4, 3}, k32[3] = {0, 3, 7};
    attn_varlen_seqs s32 = {2, ATTN_OFFSETS_I32, q32, k32};
    expect_error(&g, attn_sdpa_varlen(&Q, &K, &V, &s32, &out.view, NULL, NULL, &err), ATTN_ERR_ARG,
                 &err, "cu_seqlens_q: decreases", &out, before, "int32 offsets");
    const int64_t oq[3] = {0, 3, 6}, ok[3] = {0, 3, 7};
    attn_varlen_seqs good = {2, ATTN_OFFSETS_I64, oq, ok};
    expect_error(&g, attn_sdpa_varlen(&Q, &K, &V, NULL, &out.view, NULL, NULL, &err), ATTN_ERR_NULL,
                 &err, "seqs", &out, before, "NULL seqs");
    attn_varlen_seqs nullq = {2, ATTN_OFFSETS_I64, NULL, ok};
    expect_error(&g, attn_sdpa_varlen(&Q, &K, &V, &nullq, &out.view, NULL, NULL, &err),
                 ATTN_ERR_NULL, &err, "cu_seqlens_q", &out, before, "NULL offsets");
    attn_varlen_seqs neg = {-1, ATTN_OFFSETS_I64, oq, ok};
    expect_error(&g, attn_sdpa_varlen(&Q, &K, &V, &neg, &out.view, NULL, NULL, &err), ATTN_ERR_ARG,
                 &err, "nseq", &out, before, "negative nseq");
    uint8_t m = 1;
    attn_tensor M = attn_tensor_make(&m, ATTN_BOOL, 1, (int64_t[]){1});
    attn_sdpa_opts o = attn_sdpa_opts_default();
    o.mask[0] = &M;
    expect_error(&g, attn_sdpa_varlen(&Q, &K, &V, &good, &out.view, NULL, &o, &err),
                 ATTN_ERR_UNSUPPORTED, &err, "mask[0]", &out, before, "mask");
    char ws[64];
    o = attn_sdpa_opts_default();
    o.workspace = ws;
    o.workspace_size = sizeof ws;
    expect_error(&g, attn_sdpa_varlen(&Q, &K, &V, &good, &out.view, NULL, &o, &err),
                 ATTN_ERR_UNSUPPORTED, &err, "workspace", &out, before, "workspace");
    attn_tensor K5 = attn_tensor_3d(k, 7, 1, 3);
    expect_error(&g, attn_sdpa_varlen(&Q, &K5, &V, &good, &out.view, NULL, NULL, &err),
                 ATTN_ERR_SHAPE, &err, "key: feature size", &out, before, "key feature size");
    float slopes[6];
    attn_tensor S = attn_tensor_2d(slopes, 3, 2);
    o = attn_sdpa_opts_default();
    o.alibi_slopes = &S;
    expect_error(&g, attn_sdpa_varlen(&Q, &K, &V, &good, &out.view, NULL, &o, &err),
                 ATTN_ERR_SHAPE, &err, "alibi_slopes", &out, before, "alibi (3, Hq) for 2 sequences");
    float lse[5 * 2];
    attn_tensor L = attn_tensor_2d(lse, 5, 2);
    expect_error(&g, attn_sdpa_varlen(&Q, &K, &V, &good, &out.view, &L, NULL, &err),
                 ATTN_ERR_SHAPE, &err, "lse: 5 tokens", &out, before, "lse tokens");
    /* and a good call works */
    tu_check(&g, attn_sdpa_varlen(&Q, &K, &V, &good, &out.view, NULL, NULL, &err) == ATTN_OK,
             "good call: %s", err.message);
    free(before);
    tu_tensor_free(&out);
    tu_group_end(&g);
}

int main(int argc, char **argv)
{
    tu_options opt;
    tu_suite s;
    if (!tu_begin(argc, argv, DEFAULT_SEED, &opt, &s)) return 2;
    if (opt.replay) {
        tu_group g;
        tu_group_begin(&g, &s, "replay");
        run_case(&g, opt.replay_seed, true);
        tu_group_end(&g);
        return tu_suite_finish(&s);
    }
    if (tu_group_selected(&opt, "errors")) group_errors(&s);
    if (tu_group_selected(&opt, "random")) group_random(&s, &opt);
    return tu_suite_finish(&s);
}
