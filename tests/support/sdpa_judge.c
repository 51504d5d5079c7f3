/* Every path, every output, the accuracy criterion. See sdpa_judge.h. */
#include "sdpa_judge.h"

#include "ref64.h"
#include "ref64_variants.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sj_paths(sj_path *out)
{
    int n = 0;
    out[n++] = (sj_path){"reference", NULL, ATTN_PATH_REFERENCE};
    out[n++] = (sj_path){"generic", "generic", ATTN_PATH_FUSED};
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        out[n++] = (sj_path){"avx2", "avx2", ATTN_PATH_FUSED};
    if (__builtin_cpu_supports("avx512f")) out[n++] = (sj_path){"avx512", "avx512", ATTN_PATH_FUSED};
#endif
#if defined(__aarch64__) && defined(__ARM_NEON) && (defined(__GNUC__) || defined(__clang__))
    out[n++] = (sj_path){"neon", "neon", ATTN_PATH_FUSED}; /* every AArch64 CPU has it */
#endif
    return n;
}

void sj_select(const sj_path *p)
{
    if (p->arch)
        setenv("ATTN_ARCH", p->arch, 1);
    else
        unsetenv("ATTN_ARCH");
}

void sj_check_paths(tu_group *g)
{
    sj_path paths[SJ_MAX_PATHS];
    const int n = sj_paths(paths);
    for (int i = 0; i < n; ++i) {
        if (!paths[i].arch) continue;
        sj_select(&paths[i]);
        tu_check(g, !strcmp(attn_isa(), paths[i].name), "ATTN_ARCH=%s: attn_isa() = %s",
                 paths[i].arch, attn_isa());
    }
    unsetenv("ATTN_ARCH");
}

double sj_scale(const sj_case *c)
{
    if (c->scale != 0.0f) return (double)c->scale;
    return c->D > 0 ? (double)(1.0f / sqrtf((float)c->D)) : 1.0;
}

void sj_tensor_from(tu_tensor *t, int ndim, const int64_t *shape, const double *values)
{
    if (!tu_tensor_alloc(t, ATTN_F32, ndim, shape, NULL)) {
        fprintf(stderr, "sdpa_judge: out of memory\n");
        exit(2);
    }
    const int64_t n = tu_numel(&t->view);
    for (int64_t e = 0; e < n; ++e) tu_set(&t->view, e, values[e]);
}

/* (B,H,N,X) tensor; bnhd: a (B,N,H,X) buffer viewed through a transpose. */
static void alloc4(tu_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d, bool bnhd)
{
    int64_t shape[4] = {a, bnhd ? c : b, bnhd ? b : c, d};
    if (!tu_tensor_alloc(t, ATTN_F32, 4, shape, NULL)) {
        fprintf(stderr, "sdpa_judge: out of memory\n");
        exit(2);
    }
    if (bnhd) t->view = attn_tensor_transpose(t->view, 1, 2);
}

static void fill4(tu_tensor *t, const double *values)
{
    const int64_t n = tu_numel(&t->view);
    for (int64_t e = 0; e < n; ++e) tu_set(&t->view, e, values[e]);
}

/*
 * Extra allowance of the lse-only backward. attn.h: "With only lse, the
 * backward uses P = exp(x - lse), whose relative error is up to ulp(lse)/2".
 * With δ_i = exp(ulp(lse_i)/2) - 1 the relative error of row i's P, the
 * perturbation of each gradient is bounded by
 *   dv_je: Σ_i Pd_ij δ_i |dout_ie|
 *   dq_i : 3 δ_i · scale·|dout_i|_1·max|V|·max|K|/(1-p)   (P, and R through P)
 *   dk_j : 3 scale·max|V|·max|Q| Σ_i δ_i P_ij |dout_i|_1/(1-p)
 *   dsink: 3 Σ_i δ_i P_sink,i |dout_i|_1 max|V|
 * These are added to the criterion's allowance in that mode only. A row
 * whose |lse| is huge (every visible mask value finfo.min) gets δ = inf: the
 * documented bound makes no claim there, only finiteness is checked.
 */
static void lse_only_extra(const rv_problem *rp, const double *q, const double *k,
                           const double *v, const double *dout, const double *lse,
                           const double *w, double *xdq, double *xdk, double *xdv,
                           double *xds)
{
    const int64_t group = rp->Hq / rp->Hkv;
    const int64_t nq = rp->B * rp->Hq * rp->Nq * rp->D, nk = rp->B * rp->Hkv * rp->Nk * rp->D,
                  nv = rp->B * rp->Hkv * rp->Nk * rp->Dv;
    double maxQ = 0, maxK = 0, maxV = 0;
    for (int64_t e = 0; e < nq; ++e) if (isfinite(q[e])) maxQ = fmax(maxQ, fabs(q[e]));
    for (int64_t e = 0; e < nk; ++e) if (isfinite(k[e])) maxK = fmax(maxK, fabs(k[e]));
    for (int64_t e = 0; e < nv; ++e) if (isfinite(v[e])) maxV = fmax(maxV, fabs(v[e]));
    const double inv = rp->keep ? 1.0 / (1.0 - rp->dropout_p) : 1.0, scale = fabs(rp->scale);
    memset(xdk, 0, (size_t)nk * sizeof *xdk);
    memset(xdv, 0, (size_t)nv * sizeof *xdv);
    memset(xds, 0, (size_t)rp->Hq * sizeof *xds);
    for (int64_t b = 0; b < rp->B; ++b)
        for (int64_t h = 0; h < rp->Hq; ++h)
            for (int64_t i = 0; i < rp->Nq; ++i) {
                const int64_t row = (b * rp->Hq + h) * rp->Nq + i, hk = h / group;
                const double delta = rv_lse_rel_bound(lse[row]);
                double do1 = 0, psum = 0;
                for (int64_t e = 0; e < rp->Dv; ++e) do1 += fabs(dout[row * rp->Dv + e]);
                for (int64_t j = 0; j < rp->Nk; ++j) psum += w[row * rp->Nk + j];
                const double mult = delta == 0 ? 0 : delta;
                for (int64_t d = 0; d < rp->D; ++d)
                    xdq[row * rp->D + d] =
                        mult == 0 ? 0 : 3 * mult * scale * do1 * maxV * maxK * inv;
                if (rp->sinks && psum < 1) xds[h] += mult == 0 ? 0 : 3 * mult * (1 - psum) * do1 * maxV;
                if (mult == 0) continue;
                for (int64_t j = 0; j < rp->Nk; ++j) {
                    const double P = w[row * rp->Nk + j];
                    if (P == 0) continue;
                    const double kf =
                        rp->keep ? (rp->keep[row * rp->Nk + j] ? inv : 0.0) : 1.0;
                    for (int64_t d = 0; d < rp->D; ++d)
                        xdk[((b * rp->Hkv + hk) * rp->Nk + j) * rp->D + d] +=
                            3 * mult * scale * maxV * maxQ * P * do1 * inv;
                    if (kf != 0)
                        for (int64_t e = 0; e < rp->Dv; ++e)
                            xdv[((b * rp->Hkv + hk) * rp->Nk + j) * rp->Dv + e] +=
                                mult * P * kf * fabs(dout[row * rp->Dv + e]);
                }
            }
}

typedef struct {
    const char *name;
    const double *ref, *fp32, *fp32b, *nat, *extra;
    const uint8_t *skip;
    int64_t n;
} quantity;

static bool judge(tu_group *g, sj_result *res, const char *path, const char *call,
                  const attn_tensor *got_view, const double *got_arr, const quantity *qt,
                  const char *desc)
{
    double *got = (double *)got_arr;
    if (!got) {
        got = tu_xcalloc(qt->n, sizeof *got);
        tu_to_f64(got_view, got);
    }
    rv_cmp c;
    bool ok = rv_criterion(got, qt->ref, qt->fp32, qt->fp32b, qt->nat, qt->extra, qt->skip, qt->n, &c);
    res->checks++;
    if (c.worst_ratio > res->worst_ratio && isfinite(c.worst_ratio)) res->worst_ratio = c.worst_ratio;
    if (!ok) {
        char buf[512];
        rv_cmp_describe(&c, qt->name, buf, sizeof buf);
        tu_group_fail(g, "%s %s: %s | %s", path, call, buf, desc);
        res->failures++;
    } else if (g->suite && g->suite->verbose) {
        tu_group_note(g, "%s %s %s ok (worst ratio %.3g, 3M %.3g)", path, call, qt->name,
                      c.worst_ratio, 3 * c.M);
    }
    if (got != got_arr) free(got);
    return ok;
}

static void free_all(tu_tensor *t, int n)
{
    for (int i = 0; i < n; ++i) tu_tensor_free(&t[i]);
}

sj_result sj_run(tu_group *g, const sj_case *c, const char *desc)
{
    sj_result res = {0};
    const int64_t B = c->B, Hq = c->Hq, Hkv = c->Hkv, Nq = c->Nq, Nk = c->Nk, D = c->D, Dv = c->Dv;
    const int64_t nq = B * Hq * Nq * D, nk = B * Hkv * Nk * D, nv = B * Hkv * Nk * Dv,
                  no = B * Hq * Nq * Dv, nrow = B * Hq * Nq, nsc = B * Hq * Nq * Nk;
    const int threads = c->threads > 0 ? c->threads : 2;

    /* ---- oracle problem */
    rv_problem rp;
    memset(&rp, 0, sizeof rp);
    rp.B = B, rp.Hq = Hq, rp.Hkv = Hkv, rp.Nq = Nq, rp.Nk = Nk, rp.D = D, rp.Dv = Dv;
    rp.scale = sj_scale(c);
    rp.causal = c->causal;
    rp.window = c->window;
    rp.softcap = c->softcap;
    rp.sinks = c->sinks;
    rp.keep = c->keep;
    rp.dropout_p = c->dropout_p;
    rp.rows = c->rows;
    double *bias = NULL, *alibi = NULL;
    if (c->mask[0] || c->mask[1]) {
        bias = tu_xcalloc(nsc, sizeof *bias);
        for (int m = 0; m < ATTN_SDPA_MAX_MASKS; ++m)
            if (c->mask[m] && !ref64_add_mask(bias, B, Hq, Nq, Nk, c->mask[m])) {
                fprintf(stderr, "sdpa_judge: mask does not broadcast (%s)\n", desc);
                exit(2);
            }
        rp.bias = bias;
    }
    if (c->alibi) {
        alibi = tu_xcalloc(B * Hq, sizeof *alibi);
        for (int64_t b = 0; b < B; ++b)
            for (int64_t h = 0; h < Hq; ++h)
                alibi[b * Hq + h] = c->alibi_ndim == 2 ? c->alibi[b * Hq + h] : c->alibi[h];
        rp.alibi = alibi;
    }
    const bool want_w = c->weights || c->backward;
    double *out64 = tu_xcalloc(no, 8), *lse64 = tu_xcalloc(nrow, 8), *st64 = tu_xcalloc(2 * nrow, 8);
    double *out32 = tu_xcalloc(no, 8), *lse32 = tu_xcalloc(nrow, 8), *st32 = tu_xcalloc(2 * nrow, 8);
    double *out32b = tu_xcalloc(no, 8), *lse32b = tu_xcalloc(nrow, 8), *st32b = tu_xcalloc(2 * nrow, 8);
    double *w64 = want_w ? tu_xcalloc(nsc, 8) : NULL, *w32 = c->weights ? tu_xcalloc(nsc, 8) : NULL;
    double *w32b = c->weights ? tu_xcalloc(nsc, 8) : NULL;
    double *nout = tu_xcalloc(no, 8), *nlse = tu_xcalloc(nrow, 8), *nst = tu_xcalloc(2 * nrow, 8);
    double *nw = c->weights ? tu_xcalloc(nsc, 8) : NULL;
    rv_forward64(&rp, c->q, c->k, c->v, out64, lse64, w64, st64);
    rv_forward32(&rp, c->q, c->k, c->v, out32, lse32, w32, st32);
    rv_forward32fma(&rp, c->q, c->k, c->v, out32b, lse32b, w32b, st32b);
    double *dq64 = NULL, *dk64 = NULL, *dv64 = NULL, *ds64 = NULL, *dq32 = NULL, *dk32 = NULL,
           *dv32 = NULL, *ds32 = NULL, *ndq = NULL, *ndk = NULL, *ndv = NULL, *nds = NULL;
    double *xdq = NULL, *xdk = NULL, *xdv = NULL, *xds = NULL;
    double *dq32b = NULL, *dk32b = NULL, *dv32b = NULL, *ds32b = NULL;
    if (c->backward) {
        dq64 = tu_xcalloc(nq, 8), dk64 = tu_xcalloc(nk, 8), dv64 = tu_xcalloc(nv, 8), ds64 = tu_xcalloc(Hq, 8);
        dq32 = tu_xcalloc(nq, 8), dk32 = tu_xcalloc(nk, 8), dv32 = tu_xcalloc(nv, 8), ds32 = tu_xcalloc(Hq, 8);
        ndq = tu_xcalloc(nq, 8), ndk = tu_xcalloc(nk, 8), ndv = tu_xcalloc(nv, 8), nds = tu_xcalloc(Hq, 8);
        xdq = tu_xcalloc(nq, 8), xdk = tu_xcalloc(nk, 8), xdv = tu_xcalloc(nv, 8), xds = tu_xcalloc(Hq, 8);
        rv_backward64(&rp, c->q, c->k, c->v, c->dout, dq64, dk64, dv64, ds64);
        rv_backward32(&rp, c->q, c->k, c->v, c->dout, dq32, dk32, dv32, ds32);
        dq32b = tu_xcalloc(nq, 8), dk32b = tu_xcalloc(nk, 8), dv32b = tu_xcalloc(nv, 8), ds32b = tu_xcalloc(Hq, 8);
        rv_backward32fma(&rp, c->q, c->k, c->v, c->dout, dq32b, dk32b, dv32b, ds32b);
        lse_only_extra(&rp, c->q, c->k, c->v, c->dout, lse64, w64, xdq, xdk, xdv, xds);
    }
    rv_natural(&rp, c->q, c->k, c->v, c->backward ? c->dout : NULL, nout, nlse, nw, ndq, ndk,
               ndv, nds);
    for (int64_t r = 0; r < nrow; ++r) nst[2 * r] = nst[2 * r + 1] = nlse[r];
    uint8_t *skip_o = NULL, *skip_l = NULL, *skip_w = NULL, *skip_s = NULL;
    if (c->rows) {
        skip_o = tu_xcalloc(no, 1), skip_l = tu_xcalloc(nrow, 1), skip_w = tu_xcalloc(nsc, 1), skip_s = tu_xcalloc(2 * nrow, 1);
        for (int64_t r = 0; r < nrow; ++r) {
            const bool s = !c->rows[r % Nq];
            skip_l[r] = skip_s[2 * r] = skip_s[2 * r + 1] = s;
            for (int64_t e = 0; e < Dv; ++e) skip_o[r * Dv + e] = s;
            if (c->weights)
                for (int64_t j = 0; j < Nk; ++j) skip_w[r * Nk + j] = s;
        }
    }
    const quantity Qout = {"out", out64, out32, out32b, nout, NULL, skip_o, no};
    const quantity Qlse = {"lse", lse64, lse32, lse32b, nlse, NULL, skip_l, nrow};
    const quantity Qw = {"weights", w64, w32, w32b, nw, NULL, skip_w, nsc};
    const quantity Qst = {"softmax_stats", st64, st32, st32b, nst, NULL, skip_s, 2 * nrow};

    /* ---- library tensors shared by every path */
    tu_tensor in[8];
    memset(in, 0, sizeof in);
    alloc4(&in[0], B, Hq, Nq, D, c->bnhd);
    alloc4(&in[1], B, Hkv, Nk, D, c->bnhd);
    alloc4(&in[2], B, Hkv, Nk, Dv, c->bnhd);
    alloc4(&in[3], B, Hq, Nq, Dv, c->bnhd);
    fill4(&in[0], c->q), fill4(&in[1], c->k), fill4(&in[2], c->v);
    if (c->dout) fill4(&in[3], c->dout);
    if (c->alibi) {
        int64_t shape[2] = {c->alibi_ndim == 2 ? B : Hq, Hq};
        if (c->alibi_ndim == 2)
            sj_tensor_from(&in[4], 2, shape, c->alibi);
        else
            sj_tensor_from(&in[4], 1, shape + 1, c->alibi);
    }
    if (c->sinks) {
        const int64_t shape[1] = {Hq};
        sj_tensor_from(&in[5], 1, shape, c->sinks);
    }

    sj_path paths[SJ_MAX_PATHS];
    const int npaths = sj_paths(paths);
    for (int pi = 0; pi < npaths; ++pi) {
        const char *pn = paths[pi].name;
        sj_select(&paths[pi]);
        tu_tensor o[8];
        memset(o, 0, sizeof o);
        alloc4(&o[0], B, Hq, Nq, Dv, c->bnhd); /* out */
        const int64_t ls[3] = {B, Hq, Nq}, ss[4] = {B, Hq, Nq, 2}, ws[4] = {B, Hq, Nq, Nk};
        tu_tensor_alloc(&o[1], ATTN_F32, 3, ls, NULL);            /* lse */
        tu_tensor_alloc(&o[2], ATTN_F32, 4, ss, NULL);            /* stats */
        if (c->weights) tu_tensor_alloc(&o[3], ATTN_F32, 4, ws, NULL);
        attn_sdpa_opts opts = attn_sdpa_opts_default();
        opts.scale = c->scale;
        opts.causal = c->causal;
        opts.mask[0] = c->mask[0];
        opts.mask[1] = c->mask[1];
        opts.num_threads = threads;
        opts.path = paths[pi].path;
        opts.window = c->window;
        opts.softcap = c->softcap;
        opts.alibi_slopes = c->alibi ? &in[4].view : NULL;
        opts.sinks = c->sinks ? &in[5].view : NULL;
        opts.dropout_p = c->dropout_p;
        opts.dropout_seed = c->dropout_seed;
        opts.dropout_offset = c->dropout_offset;
        opts.softmax_stats = &o[2].view;
        attn_error err;
        memset(&err, 0, sizeof err);
        tu_crash_context("sdpa_judge forward %s | %s", pn, desc);
        attn_status st = attn_sdpa(&in[0].view, &in[1].view, &in[2].view, &o[0].view,
                                   &o[1].view, c->weights ? &o[3].view : NULL, &opts, &err);
        bool have_stats = true;
        char stats_note[320] = "";
        if (st == ATTN_ERR_UNSUPPORTED) {
            /* Try without softmax_stats: if that works, only stats are missing. */
            snprintf(stats_note, sizeof stats_note, "%s", err.message);
            opts.softmax_stats = NULL;
            have_stats = false;
            st = attn_sdpa(&in[0].view, &in[1].view, &in[2].view, &o[0].view, &o[1].view,
                           c->weights ? &o[3].view : NULL, &opts, &err);
            if (st == ATTN_OK) {
                tu_group_fail(g, "%s forward: softmax_stats refused (%s) | %s", pn, stats_note, desc);
                res.failures++;
                res.unsupported = true;
            }
        }
        if (st != ATTN_OK) {
            tu_group_fail(g, "%s forward: status %s: %s | %s", pn, attn_status_string(st),
                          err.message, desc);
            res.failures++;
            if (st == ATTN_ERR_UNSUPPORTED) res.unsupported = true;
            free_all(o, 8);
            continue;
        }
        bool ok = judge(g, &res, pn, "forward", &o[0].view, NULL, &Qout, desc);
        ok &= judge(g, &res, pn, "forward", &o[1].view, NULL, &Qlse, desc);
        if (c->weights) ok &= judge(g, &res, pn, "forward", &o[3].view, NULL, &Qw, desc);
        if (have_stats) ok &= judge(g, &res, pn, "forward", &o[2].view, NULL, &Qst, desc);
        if (ok) tu_group_pass(g);

        if (c->backward) {
            enum { BW_RECOMPUTE, BW_STATS, BW_LSE, BW_MODES };
            static const char *const mode_name[BW_MODES] = {"backward(recompute)",
                                                            "backward(out+lse+stats)",
                                                            "backward(out+lse only)"};
            for (int mode = 0; mode < BW_MODES; ++mode) {
                if (mode == BW_STATS && !have_stats) continue;
                if (mode == BW_LSE && have_stats && !c->modes_all) continue;
                tu_tensor gr[4];
                memset(gr, 0, sizeof gr);
                alloc4(&gr[0], B, Hq, Nq, D, c->bnhd);
                alloc4(&gr[1], B, Hkv, Nk, D, c->bnhd);
                alloc4(&gr[2], B, Hkv, Nk, Dv, c->bnhd);
                const int64_t hs[1] = {Hq};
                if (c->sinks) tu_tensor_alloc(&gr[3], ATTN_F32, 1, hs, NULL);
                attn_sdpa_opts bo = opts;
                bo.softmax_stats = mode == BW_STATS ? &o[2].view : NULL;
                bo.grad_sinks = c->sinks ? &gr[3].view : NULL;
                tu_crash_context("sdpa_judge %s %s | %s", mode_name[mode], pn, desc);
                st = attn_sdpa_backward(&in[0].view, &in[1].view, &in[2].view,
                                        mode == BW_RECOMPUTE ? NULL : &o[0].view,
                                        mode == BW_RECOMPUTE ? NULL : &o[1].view, &in[3].view,
                                        &gr[0].view, &gr[1].view, &gr[2].view, &bo, &err);
                if (st != ATTN_OK) {
                    tu_group_fail(g, "%s %s: status %s: %s | %s", pn, mode_name[mode],
                                  attn_status_string(st), err.message, desc);
                    res.failures++;
                    if (st == ATTN_ERR_UNSUPPORTED) res.unsupported = true;
                    free_all(gr, 4);
                    continue;
                }
                const bool lo = mode == BW_LSE;
                const quantity Qdq = {"dq", dq64, dq32, dq32b, ndq, lo ? xdq : NULL, NULL, nq};
                const quantity Qdk = {"dk", dk64, dk32, dk32b, ndk, lo ? xdk : NULL, NULL, nk};
                const quantity Qdv = {"dv", dv64, dv32, dv32b, ndv, lo ? xdv : NULL, NULL, nv};
                const quantity Qds = {"grad_sinks", ds64, ds32, ds32b, nds, lo ? xds : NULL, NULL, Hq};
                bool bok = judge(g, &res, pn, mode_name[mode], &gr[0].view, NULL, &Qdq, desc);
                bok &= judge(g, &res, pn, mode_name[mode], &gr[1].view, NULL, &Qdk, desc);
                bok &= judge(g, &res, pn, mode_name[mode], &gr[2].view, NULL, &Qdv, desc);
                if (c->sinks) bok &= judge(g, &res, pn, mode_name[mode], &gr[3].view, NULL, &Qds, desc);
                if (bok) tu_group_pass(g);
                free_all(gr, 4);
            }
        }
        free_all(o, 8);
    }
    unsetenv("ATTN_ARCH");
    free_all(in, 8);
    free(bias), free(alibi);
    free(out64), free(lse64), free(st64), free(out32), free(lse32), free(st32), free(w64), free(w32);
    free(nout), free(nlse), free(nst), free(nw);
    free(dq64), free(dk64), free(dv64), free(ds64), free(dq32), free(dk32), free(dv32), free(ds32);
    free(ndq), free(ndk), free(ndv), free(nds), free(xdq), free(xdk), free(xdv), free(xds);
    free(out32b), free(lse32b), free(st32b), free(w32b), free(dq32b), free(dk32b), free(dv32b), free(ds32b);
    free(skip_o), free(skip_l), free(skip_w), free(skip_s);
    return res;
}

/* ------------------------------------------------- building and naming cases */

const char *sj_causal_name(attn_causal c)
{
    return c == ATTN_CAUSAL_TOP_LEFT ? "top-left" : c == ATTN_CAUSAL_BOTTOM_RIGHT ? "bottom-right" : "none";
}

double *sj_random_normal(int64_t n, double mag, tu_rng *r)
{
    double *x = tu_xcalloc(n, sizeof *x);
    for (int64_t e = 0; e < n; ++e) x[e] = (double)(float)(mag * tu_rng_normal(r));
    return x;
}

void sj_poison_hidden_keys(const sj_case *c, double *k, double *v, tu_rng *r)
{
    double *bias = NULL;
    for (int m = 0; m < ATTN_SDPA_MAX_MASKS; ++m) {
        if (!c->mask[m]) continue;
        if (!bias) bias = tu_xcalloc(c->B * c->Hq * c->Nq * c->Nk, 8);
        ref64_add_mask(bias, c->B, c->Hq, c->Nq, c->Nk, c->mask[m]);
    }
    rv_problem rp;
    memset(&rp, 0, sizeof rp);
    rp.B = c->B, rp.Hq = c->Hq, rp.Hkv = c->Hkv, rp.Nq = c->Nq, rp.Nk = c->Nk;
    rp.causal = c->causal, rp.window = c->window, rp.bias = bias;
    const int64_t group = c->Hq / c->Hkv;
    static const double poison[] = {NAN, INFINITY, -INFINITY};
    for (int64_t b = 0; b < c->B; ++b)
        for (int64_t hk = 0; hk < c->Hkv; ++hk)
            for (int64_t j = 0; j < c->Nk; ++j) {
                bool seen = false;
                for (int64_t h = hk * group; h < (hk + 1) * group && !seen; ++h)
                    for (int64_t i = 0; i < c->Nq && !seen; ++i) seen = rv_visible(&rp, b, h, i, j);
                if (seen) continue;
                const double pv = poison[tu_rng_int(r, 0, 2)];
                const int64_t kr = (b * c->Hkv + hk) * c->Nk + j;
                for (int64_t e = 0; e < c->D; ++e) k[kr * c->D + e] = pv;
                for (int64_t e = 0; e < c->Dv; ++e) v[kr * c->Dv + e] = pv;
            }
    free(bias);
}

void sj_random_variants(tu_rng *r, int64_t max_left, int64_t max_right, attn_window *window,
                        float *softcap, int *alibi, bool *sinks)
{
    if (tu_rng_chance(r, 0.2)) {
        window->enabled = true;
        window->left = tu_rng_chance(r, 0.3) ? -1 : tu_rng_int(r, 0, max_left);
        window->right = tu_rng_chance(r, 0.3) ? -1 : tu_rng_int(r, 0, max_right);
    }
    if (tu_rng_chance(r, 0.15)) *softcap = (float)tu_rng_range(r, 1.0, 20.0);
    if (tu_rng_chance(r, 0.2)) *alibi = (int)tu_rng_int(r, 1, 2);
    *sinks = tu_rng_chance(r, 0.15);
}

void sj_print_header(const char *prog, const char *mode, uint64_t seed)
{
    sj_path paths[SJ_MAX_PATHS];
    const int np = sj_paths(paths);
    printf("%s: %s mode, seed 0x%" PRIx64 ", paths:", prog, mode, seed);
    for (int i = 0; i < np; ++i) printf(" %s", paths[i].name);
    printf("\n");
    fflush(stdout);
}
