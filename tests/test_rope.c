/*
 * test_rope — rotary embeddings (attn_rope_apply) and the KV cache's
 * append-and-attend with them (attn_kvcache_update_attend).
 *
 * Groups:
 *   apply    GPT-NeoX and GPT-J styles, rotary_dim < D and = D, theta,
 *            linear position scaling, cos/sin tables, per-entry positions:
 *            every element within 4 float roundings of this file's float64
 *            rotation; features past rotary_dim untouched.
 *   decode   random caches (float32 and int8, contiguous and paged) grown
 *            by several update_attend calls with RoPE: the stored keys are
 *            the float64-rotated ones (within rounding, resp. within the
 *            int8 step), and each call's output is float64 attention of the
 *            float64-rotated queries over the stored keys, within the accuracy criterion's
 *            criterion plus the rotation's rounding.
 *   errors   bad styles, odd or too large rotary_dim, short tables, a
 *            k_new without v_new: errors that leave the cache unchanged.
 */
#include "attn.h"
#include "clirun.h"
#include "ref64_variants.h"
#include "testutil.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_SEED 0x20be0e5ull

/* cos and sin of pair i at pos as the library computes them: the angle in
 * double, cos and sin of it rounded to float (or the tables' entries). */
static void angle_f(const attn_rope *r, int64_t rd, int64_t pos, int64_t i, double *c, double *s)
{
    if (r->cos) {
        *c = ((const float *)r->cos->data)[pos * r->cos->stride[0] + i * r->cos->stride[1]];
        *s = ((const float *)r->sin->data)[pos * r->sin->stride[0] + i * r->sin->stride[1]];
        return;
    }
    const double theta = r->theta > 0 ? r->theta : 10000.0;
    const double p = (double)pos / (r->position_scale > 0 ? r->position_scale : 1.0);
    const double a = p * pow(theta, -2.0 * (double)i / (double)rd);
    *c = (float)cos(a);
    *s = (float)sin(a);
}

/* The float64 rotation of row x (D) at position pos (inverse: by minus the
 * angles, the transpose). */
static void rotate64_dir(const attn_rope *r, int64_t pos, double *x, int64_t D, bool inverse)
{
    const int64_t rd = r->rotary_dim ? r->rotary_dim : D, half = rd / 2;
    const double theta = r->theta > 0 ? r->theta : 10000.0;
    const double p = (double)pos / (r->position_scale > 0 ? r->position_scale : 1.0);
    for (int64_t i = 0; i < half; ++i) {
        double c, s;
        if (r->cos) {
            angle_f(r, rd, pos, i, &c, &s);
        } else {
            const double a = p * pow(theta, -2.0 * (double)i / (double)rd);
            c = cos(a);
            s = sin(a);
        }
        if (inverse) s = -s;
        const int64_t i0 = r->style == ATTN_ROPE_GPTJ ? 2 * i : i;
        const int64_t i1 = r->style == ATTN_ROPE_GPTJ ? 2 * i + 1 : i + half;
        const double u = x[i0], v = x[i1];
        x[i0] = u * c - v * s;
        x[i1] = u * s + v * c;
    }
}

static void rotate64(const attn_rope *r, int64_t pos, double *x, int64_t D)
{
    rotate64_dir(r, pos, x, D, false);
}

/* The same rotation as a naive float32 implementation computes it (float
 * cos and sin, float products), x holding float values. */
static void rotate32_dir(const attn_rope *r, int64_t pos, double *x, int64_t D, bool inverse)
{
    const int64_t rd = r->rotary_dim ? r->rotary_dim : D, half = rd / 2;
    for (int64_t i = 0; i < half; ++i) {
        double cd, sd;
        angle_f(r, rd, pos, i, &cd, &sd);
        const float c = (float)cd, s = inverse ? -(float)sd : (float)sd;
        const int64_t i0 = r->style == ATTN_ROPE_GPTJ ? 2 * i : i;
        const int64_t i1 = r->style == ATTN_ROPE_GPTJ ? 2 * i + 1 : i + half;
        const float u = (float)x[i0], v = (float)x[i1];
        const float a = u * c, b = v * s, e = u * s, f = v * c;
        x[i0] = a - b;
        x[i1] = e + f;
    }
}

static attn_rope random_rope(tu_rng *r, int64_t D)
{
    attn_rope rope = {.style = tu_rng_chance(r, 0.5) ? ATTN_ROPE_NEOX : ATTN_ROPE_GPTJ};
    if (tu_rng_chance(r, 0.5)) rope.rotary_dim = 2 * tu_rng_int(r, 1, D / 2);
    if (tu_rng_chance(r, 0.5)) rope.theta = tu_rng_chance(r, 0.5) ? 500000.0 : 100.0;
    if (tu_rng_chance(r, 0.3)) rope.position_scale = tu_rng_range(r, 1.0, 8.0);
    return rope;
}

static void group_apply(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "apply");
    tu_rng r;
    tu_rng_seed(&r, DEFAULT_SEED);
    for (int c = 0; c < 200; ++c) {
        const int64_t B = tu_rng_int(&r, 1, 3), H = tu_rng_int(&r, 1, 3), N = tu_rng_int(&r, 1, 9);
        const int64_t D = 2 * tu_rng_int(&r, 1, 64);
        attn_rope rope = random_rope(&r, D);
        const int64_t rd = rope.rotary_dim ? rope.rotary_dim : D;
        int64_t pos[3];
        for (int64_t b = 0; b < B; ++b) pos[b] = tu_rng_int(&r, 0, 100000);
        float tc[64 * 16], ts[64 * 16]; /* a table of 16 positions when tables are used */
        attn_tensor tcos, tsin;
        const bool tables = tu_rng_chance(&r, 0.3);
        if (tables) {
            for (int64_t e = 0; e < 16 * rd / 2; ++e) {
                const double a = tu_rng_range(&r, -10.0, 10.0);
                tc[e] = (float)cos(a);
                ts[e] = (float)sin(a);
            }
            tcos = attn_tensor_2d(tc, 16, rd / 2);
            tsin = attn_tensor_2d(ts, 16, rd / 2);
            rope.cos = &tcos;
            rope.sin = &tsin;
            for (int64_t b = 0; b < B; ++b) pos[b] = tu_rng_int(&r, 0, 16 - N);
        }
        const int64_t n = B * H * N * D;
        float *x = malloc(sizeof(float) * (size_t)n);
        double *want = malloc(sizeof(double) * (size_t)n);
        for (int64_t e = 0; e < n; ++e) want[e] = x[e] = (float)tu_rng_normal(&r);
        for (int64_t b = 0; b < B; ++b)
            for (int64_t h = 0; h < H; ++h)
                for (int64_t t = 0; t < N; ++t) rotate64(&rope, pos[b] + t, want + ((b * H + h) * N + t) * D, D);
        attn_tensor X = attn_tensor_4d(x, B, H, N, D);
        attn_error err;
        bool ok = tu_check(&g, attn_rope_apply(&rope, &X, pos, &err) == ATTN_OK, "apply: %s", err.message);
        for (int64_t e = 0; e < n && ok; ++e) {
            const double bound = 4.0 * FLT_EPSILON * (1.0 + fabs(want[e]));
            if (fabs(x[e] - want[e]) > bound || ((e % D) >= rd && x[e] != (float)want[e])) {
                tu_group_fail(&g, "case %d style %d rd %" PRId64 "/%" PRId64 " element %" PRId64 ": %.9g, expected %.9g",
                              c, (int)rope.style, rd, D, e, (double)x[e], want[e]);
                ok = false;
            }
        }
        if (ok) tu_group_pass(&g);
        free(x), free(want);
    }
    tu_group_end(&g);
}

/* One random decode: Hkv heads, steps of update_attend with RoPE. */
static void run_decode(tu_group *g, uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    const int64_t B = tu_rng_int(&r, 1, 3), Hkv = tu_rng_int(&r, 1, 2), Hq = Hkv * tu_rng_int(&r, 1, 3);
    const int64_t D = 2 * tu_rng_int(&r, 2, 40), Dv = tu_rng_int(&r, 1, 40), cap = tu_rng_int(&r, 8, 200);
    const attn_kv_quant quant = tu_rng_chance(&r, 0.5) ? ATTN_KV_INT8 : ATTN_KV_FLOAT;
    const int64_t bs = tu_rng_chance(&r, 0.5) ? tu_rng_int(&r, 1, 16) : 0;
    attn_rope rope = random_rope(&r, D);
    char rp[128];
    snprintf(rp, sizeof rp, "seed 0x%016" PRIx64 " quant %d D %" PRId64 " bs %" PRId64, seed, (int)quant, D, bs);
    attn_kvcache_config cfg = {.batch = B, .kv_heads = Hkv, .capacity = cap, .head_dim = D,
                               .value_dim = Dv, .block_size = bs, .quant = quant};
    attn_kvcache *cache = NULL;
    attn_error err;
    if (!tu_check(g, attn_kvcache_create(&cfg, &cache, &err) == ATTN_OK, "create: %s", err.message)) return;
    /* what the keys should be: float64-rotated, per entry (Hkv, cap, D) */
    double *k64 = calloc((size_t)(B * Hkv * cap * D), sizeof(double));
    int64_t len[3] = {0, 0, 0};
    bool ok = true;
    for (int step = 0; step < 4 && ok; ++step) {
        const int64_t n = tu_rng_int(&r, 1, 6), Nq = n;
        int64_t counts[3];
        bool fits = true;
        for (int64_t b = 0; b < B; ++b) {
            counts[b] = n;
            fits &= len[b] + n <= cap;
        }
        if (!fits) break;
        float *k = malloc(sizeof(float) * (size_t)(B * Hkv * n * D)), *v = malloc(sizeof(float) * (size_t)(B * Hkv * n * Dv));
        float *q = malloc(sizeof(float) * (size_t)(B * Hq * Nq * D)), *o = malloc(sizeof(float) * (size_t)(B * Hq * Nq * Dv));
        float *lse = malloc(sizeof(float) * (size_t)(B * Hq * Nq));
        double *q64 = malloc(sizeof(double) * (size_t)(B * Hq * Nq * D));
        for (int64_t e = 0; e < B * Hkv * n * D; ++e) k[e] = (float)tu_rng_normal(&r);
        for (int64_t e = 0; e < B * Hkv * n * Dv; ++e) v[e] = (float)tu_rng_normal(&r);
        for (int64_t e = 0; e < B * Hq * Nq * D; ++e) q64[e] = q[e] = (float)tu_rng_normal(&r);
        for (int64_t b = 0; b < B; ++b) {
            for (int64_t h = 0; h < Hkv; ++h)
                for (int64_t t = 0; t < n; ++t) {
                    double *dst = k64 + ((b * Hkv + h) * cap + len[b] + t) * D;
                    for (int64_t d = 0; d < D; ++d) dst[d] = k[((b * Hkv + h) * n + t) * D + d];
                    rotate64(&rope, len[b] + t, dst, D);
                }
            for (int64_t h = 0; h < Hq; ++h)
                for (int64_t i = 0; i < Nq; ++i) rotate64(&rope, len[b] + i, q64 + ((b * Hq + h) * Nq + i) * D, D);
        }
        attn_tensor K = attn_tensor_4d(k, B, Hkv, n, D), V = attn_tensor_4d(v, B, Hkv, n, Dv);
        attn_tensor Q = attn_tensor_4d(q, B, Hq, Nq, D), O = attn_tensor_4d(o, B, Hq, Nq, Dv), L = attn_tensor_3d(lse, B, Hq, Nq);
        attn_sdpa_opts opts = attn_sdpa_opts_default();
        opts.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        const float q0 = q[0], k0 = k[0];
        ok = tu_check(g, attn_kvcache_update_attend(cache, &Q, &K, &V, counts, &rope, &O, &L, &opts, &err) == ATTN_OK,
                      "update_attend: %s (%s)", err.message, rp) &&
             tu_check(g, q[0] == q0 && k[0] == k0, "update_attend changed its inputs (%s)", rp);
        for (int64_t b = 0; b < B; ++b) len[b] += n;
        for (int64_t b = 0; b < B && ok; ++b) {
            const int64_t Lb = len[b];
            float *kd = malloc(sizeof(float) * (size_t)(Hkv * Lb * D)), *vd = malloc(sizeof(float) * (size_t)(Hkv * Lb * Dv));
            attn_tensor KD = attn_tensor_4d(kd, 1, Hkv, Lb, D), VD = attn_tensor_4d(vd, 1, Hkv, Lb, Dv);
            attn_kvcache_read(cache, b, &KD, &VD, &err);
            /* stored keys: the float64 rotation, to float rounding (int8: its step) */
            for (int64_t h = 0; h < Hkv && ok; ++h)
                for (int64_t t = 0; t < Lb && ok; ++t) {
                    const double *want = k64 + ((b * Hkv + h) * cap + t) * D;
                    double amax = 0;
                    for (int64_t d = 0; d < D; ++d) amax = fmax(amax, fabs(want[d]));
                    for (int64_t d = 0; d < D && ok; ++d) {
                        const double got = kd[(h * Lb + t) * D + d];
                        const double tol = quant ? amax / 127.0 * 0.5 + 8 * FLT_EPSILON * amax : 4 * FLT_EPSILON * (1 + fabs(want[d]));
                        ok = tu_check(g, fabs(got - want[d]) <= tol, "stored key b %" PRId64 " h %" PRId64 " t %" PRId64 " d %" PRId64 ": %.9g, rotated %.9g (%s)",
                                      b, h, t, d, got, want[d], rp);
                    }
                }
            /* the output: float64 attention of the rotated queries over the stored keys */
            double *ks = malloc(sizeof(double) * (size_t)(Hkv * Lb * D)), *vs = malloc(sizeof(double) * (size_t)(Hkv * Lb * Dv));
            for (int64_t e = 0; e < Hkv * Lb * D; ++e) ks[e] = kd[e];
            for (int64_t e = 0; e < Hkv * Lb * Dv; ++e) vs[e] = vd[e];
            rv_problem p = {.B = 1, .Hq = Hq, .Hkv = Hkv, .Nq = Nq, .Nk = Lb, .D = D, .Dv = Dv,
                            .scale = (double)(1.0f / sqrtf((float)D)), .causal = ATTN_CAUSAL_BOTTOM_RIGHT};
            const int64_t no = Hq * Nq * Dv;
            double *buf = calloc((size_t)(6 * no), sizeof(double));
            double *ro = buf, *fo = ro + no, *mo = fo + no, *nat = mo + no, *go = nat + no, *extra = go + no;
            const double *qb = q64 + b * Hq * Nq * D;
            rv_forward64(&p, qb, ks, vs, ro, NULL, NULL, NULL);
            rv_forward32(&p, qb, ks, vs, fo, NULL, NULL, NULL);
            rv_forward32fma(&p, qb, ks, vs, mo, NULL, NULL, NULL);
            rv_natural(&p, qb, ks, vs, NULL, nat, NULL, NULL, NULL, NULL, NULL, NULL);
            /* the queries were rotated in float: a few roundings of each
             * score, |Δx| <= 8u·scale·Σ|q||k|, moving out by <= 2|Δx|·max|V| */
            double vmax = 0;
            for (int64_t e = 0; e < Hkv * Lb * Dv; ++e) vmax = fmax(vmax, fabs(vs[e]));
            for (int64_t h = 0; h < Hq; ++h)
                for (int64_t i = 0; i < Nq; ++i) {
                    double smax = 0;
                    const double *qi = qb + (h * Nq + i) * D;
                    for (int64_t t = 0; t < Lb; ++t) {
                        double sum = 0;
                        for (int64_t d = 0; d < D; ++d) sum += fabs(qi[d] * ks[((h / (Hq / Hkv)) * Lb + t) * D + d]);
                        smax = fmax(smax, sum * p.scale);
                    }
                    for (int64_t d = 0; d < Dv; ++d) extra[(h * Nq + i) * Dv + d] = 16.0 * FLT_EPSILON * smax * vmax;
                }
            for (int64_t e = 0; e < no; ++e) go[e] = o[b * no + e];
            rv_cmp cmp;
            char msg[512];
            if (ok && !rv_criterion(go, ro, fo, mo, nat, extra, NULL, no, &cmp)) {
                rv_cmp_describe(&cmp, "out", msg, sizeof msg);
                tu_group_fail(g, "step %d entry %" PRId64 ": %s (%s)", step, b, msg, rp);
                ok = false;
            }
            free(kd), free(vd), free(ks), free(vs), free(buf);
        }
        free(k), free(v), free(q), free(o), free(lse), free(q64);
    }
    if (ok) tu_group_pass(g);
    free(k64);
    attn_kvcache_free(cache);
}

static void group_decode(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "decode");
    const int cases = opt->cases > 0 ? (int)opt->cases : opt->quick ? 20 : 80;
    for (int i = 0; i < cases; ++i) run_decode(&g, tu_mix(opt->seed ^ (uint64_t)i));
    tu_group_end(&g);
}

/* ------------------------------------------------------------- prefill */

/* Every (b, h, n) row of the contiguous (B,H,N,D) x rotated at first + n. */
static void rotate_rows(const attn_rope *r, double *x, int64_t BH, int64_t N, int64_t D,
                        int64_t first, bool f32, bool inverse)
{
    for (int64_t row = 0; row < BH * N; ++row) {
        if (f32) rotate32_dir(r, first + row % N, x + row * D, D, inverse);
        else rotate64_dir(r, first + row % N, x + row * D, D, inverse);
    }
}

/* An (n_pos, rd/2) table of random angles' cos and sin, held in buf. */
static void random_tables(tu_rng *r, attn_rope *rope, int64_t npos, int64_t half, float **buf,
                          attn_tensor *tc, attn_tensor *ts)
{
    *buf = malloc(sizeof(float) * (size_t)(2 * npos * half));
    for (int64_t e = 0; e < npos * half; ++e) {
        const double a = tu_rng_range(r, -10.0, 10.0);
        (*buf)[e] = (float)cos(a);
        (*buf)[npos * half + e] = (float)sin(a);
    }
    *tc = attn_tensor_2d(*buf, npos, half);
    *ts = attn_tensor_2d(*buf + npos * half, npos, half);
    rope->cos = tc;
    rope->sin = ts;
}

static double max_abs(const double *x, int64_t n)
{
    double m = 0;
    for (int64_t e = 0; e < n; ++e) m = fmax(m, fabs(x[e]));
    return m;
}

/* Judges got (a view) against the float64 chain's ref by the criterion. */
static bool judge(tu_group *g, const char *name, const attn_tensor *got, const double *ref,
                  const double *f32, const double *fma, const double *nat, const double *extra,
                  int64_t n, const char *what)
{
    double *gd = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    tu_to_f64(got, gd);
    rv_cmp cmp;
    const bool ok = rv_criterion(gd, ref, f32, fma, nat, extra, NULL, n, &cmp);
    if (!ok) {
        char msg[512];
        rv_cmp_describe(&cmp, name, msg, sizeof msg);
        tu_group_fail(g, "%s (%s)", msg, what);
    }
    free(gd);
    return ok;
}

/* One random prefill: attn_sdpa and attn_sdpa_backward with opts.rope on
 * both paths against the float64 chain (rotate, attend, backprop, rotate
 * back); the float32 realisations rotate in float. */
static void run_prefill(tu_group *g, uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    const int64_t B = tu_rng_int(&r, 1, 2), Hkv = tu_rng_int(&r, 1, 2), Hq = Hkv * tu_rng_int(&r, 1, 3);
    const int64_t Nk = tu_rng_int(&r, 1, 40);
    const int64_t Nq = tu_rng_chance(&r, 0.5) ? Nk : tu_rng_int(&r, 1, 40);
    int64_t D = 2 * tu_rng_int(&r, 1, 36);
    attn_rope rope = random_rope(&r, D);
    if (rope.rotary_dim && rope.rotary_dim < D && tu_rng_chance(&r, 0.3)) D += 1; /* odd D, rd < D */
    const int64_t Dv = tu_rng_int(&r, 1, 40), rd = rope.rotary_dim ? rope.rotary_dim : D;
    const attn_causal causal = (attn_causal)tu_rng_int(&r, 0, 2);
    int64_t offset = tu_rng_chance(&r, 0.5) ? 0 : tu_rng_int(&r, 0, 5000);
    float *tab = NULL;
    attn_tensor tc, ts;
    if (tu_rng_chance(&r, 0.3)) {
        if (offset + Nk - Nq < 0) offset = Nq - Nk; /* tables start at position 0 */
        random_tables(&r, &rope, offset + (Nq > Nk ? Nq : Nk) + tu_rng_int(&r, 0, 3), rd / 2, &tab, &tc, &ts);
    }
    char what[160];
    snprintf(what, sizeof what, "seed 0x%016" PRIx64 " style %d rd %" PRId64 "/%" PRId64 " Nq %" PRId64 " Nk %" PRId64 " causal %d offset %" PRId64 "%s",
             seed, (int)rope.style, rd, D, Nq, Nk, (int)causal, offset, tab ? " tables" : "");
    const int64_t qsh[4] = {B, Hq, Nq, D}, ksh[4] = {B, Hkv, Nk, D}, vsh[4] = {B, Hkv, Nk, Dv}, osh[4] = {B, Hq, Nq, Dv};
    const tu_layout lin[4] = {tu_layout_random(&r, 4, TU_LAYOUT_INPUT), tu_layout_random(&r, 4, TU_LAYOUT_INPUT),
                              tu_layout_random(&r, 4, TU_LAYOUT_INPUT), tu_layout_random(&r, 4, TU_LAYOUT_INPUT)};
    tu_tensor q, k, v, dout;
    tu_tensor_alloc(&q, ATTN_F32, 4, qsh, &lin[0]);
    tu_tensor_alloc(&k, ATTN_F32, 4, ksh, &lin[1]);
    tu_tensor_alloc(&v, ATTN_F32, 4, vsh, &lin[2]);
    tu_tensor_alloc(&dout, ATTN_F32, 4, osh, &lin[3]);
    tu_fill_normal(&q.view, &r, 0, 1);
    tu_fill_normal(&k.view, &r, 0, 1);
    tu_fill_normal(&v.view, &r, 0, 1);
    tu_fill_normal(&dout.view, &r, 0, 1);
    const int64_t nq = B * Hq * Nq * D, nk = B * Hkv * Nk * D, nv = B * Hkv * Nk * Dv, no = B * Hq * Nq * Dv, nl = B * Hq * Nq;
    /* the float64 chain and the two float32 realisations */
    double *buf = calloc((size_t)(9 * nq + 9 * nk + 6 * nv + 7 * no + 5 * nl + 8), sizeof(double));
    double *cur = buf;
#define TAKE(n) (cur += (n), cur - (n))
    double *q64 = TAKE(nq), *k64 = TAKE(nk), *v64 = TAKE(nv), *do64 = TAKE(no);
    double *qr = TAKE(nq), *kr = TAKE(nk), *qf = TAKE(nq), *kf = TAKE(nk);
    double *ro = TAKE(no), *fo = TAKE(no), *mo = TAKE(no), *rl = TAKE(nl), *fl = TAKE(nl), *ml = TAKE(nl);
    double *rdq = TAKE(nq), *fdq = TAKE(nq), *mdq = TAKE(nq), *rdk = TAKE(nk), *fdk = TAKE(nk), *mdk = TAKE(nk);
    double *rdv = TAKE(nv), *fdv = TAKE(nv), *mdv = TAKE(nv);
    double *nat_o = TAKE(no), *nat_l = TAKE(nl), *nat_dq = TAKE(nq), *nat_dk = TAKE(nk), *nat_dv = TAKE(nv);
    double *x_o = TAKE(no), *x_l = TAKE(nl), *x_dq = TAKE(nq), *x_dk = TAKE(nk), *x_dv = TAKE(nv);
#undef TAKE
    tu_to_f64(&q.view, q64);
    tu_to_f64(&k.view, k64);
    tu_to_f64(&v.view, v64);
    tu_to_f64(&dout.view, do64);
    memcpy(qr, q64, sizeof(double) * (size_t)nq), memcpy(qf, q64, sizeof(double) * (size_t)nq);
    memcpy(kr, k64, sizeof(double) * (size_t)nk), memcpy(kf, k64, sizeof(double) * (size_t)nk);
    const int64_t qpos = offset + Nk - Nq;
    rotate_rows(&rope, qr, B * Hq, Nq, D, qpos, false, false);
    rotate_rows(&rope, kr, B * Hkv, Nk, D, offset, false, false);
    rotate_rows(&rope, qf, B * Hq, Nq, D, qpos, true, false);
    rotate_rows(&rope, kf, B * Hkv, Nk, D, offset, true, false);
    rv_problem p = {.B = B, .Hq = Hq, .Hkv = Hkv, .Nq = Nq, .Nk = Nk, .D = D, .Dv = Dv,
                    .scale = (double)(1.0f / sqrtf((float)D)), .causal = causal};
    rv_forward64(&p, qr, kr, v64, ro, rl, NULL, NULL);
    rv_forward32(&p, qf, kf, v64, fo, fl, NULL, NULL);
    rv_forward32fma(&p, qf, kf, v64, mo, ml, NULL, NULL);
    rv_backward64(&p, qr, kr, v64, do64, rdq, rdk, rdv, NULL);
    rv_backward32(&p, qf, kf, v64, do64, fdq, fdk, fdv, NULL);
    rv_backward32fma(&p, qf, kf, v64, do64, mdq, mdk, mdv, NULL);
    rv_natural(&p, qr, kr, v64, do64, nat_o, nat_l, NULL, nat_dq, nat_dk, nat_dv, NULL);
    /* dL/dq = Rᵀ·dL/d(Rq): the chain's last step, in double and in float */
    rotate_rows(&rope, rdq, B * Hq, Nq, D, qpos, false, true);
    rotate_rows(&rope, rdk, B * Hkv, Nk, D, offset, false, true);
    rotate_rows(&rope, fdq, B * Hq, Nq, D, qpos, true, true);
    rotate_rows(&rope, mdq, B * Hq, Nq, D, qpos, true, true);
    rotate_rows(&rope, fdk, B * Hkv, Nk, D, offset, true, true);
    rotate_rows(&rope, mdk, B * Hkv, Nk, D, offset, true, true);
    /* The library rotates in float: each score moves by |Δx| <= 8u·S_i
     * (S_i = max_j scale·Σ|q||k|, as the decode group), out by 2|Δx|·max|V|,
     * the LSE by |Δx|, and the gradients by that relative change of P
     * (plus the rotation back's rounding) times their natural size. */
    const double u = FLT_EPSILON / 2, vmax = max_abs(v64, nv);
    double smax_all = 0;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < Hq; ++h)
            for (int64_t i = 0; i < Nq; ++i) {
                double smax = 0;
                const double *qi = qr + ((b * Hq + h) * Nq + i) * D;
                for (int64_t j = 0; j < Nk; ++j) {
                    const double *kj = kr + ((b * Hkv + h / (Hq / Hkv)) * Nk + j) * D;
                    double sum = 0;
                    for (int64_t d = 0; d < D; ++d) sum += fabs(qi[d] * kj[d]);
                    smax = fmax(smax, sum * p.scale);
                }
                smax_all = fmax(smax_all, smax);
                const int64_t row = (b * Hq + h) * Nq + i;
                x_l[row] = 16 * u * smax;
                for (int64_t e = 0; e < Dv; ++e) x_o[row * Dv + e] = 32 * u * smax * vmax;
                for (int64_t d = 0; d < D; ++d) x_dq[row * D + d] = 64 * u * (1 + smax) * nat_dq[row * D + d];
            }
    for (int64_t e = 0; e < nk; ++e) x_dk[e] = 64 * u * (1 + smax_all) * nat_dk[e];
    for (int64_t e = 0; e < nv; ++e) x_dv[e] = 32 * u * smax_all * nat_dv[e];

    const tu_layout lout = tu_layout_random(&r, 4, TU_LAYOUT_OUTPUT);
    bool ok = true;
    for (int path = 0; path < 2 && ok; ++path) {
        tu_tensor o, dq, dk, dv;
        tu_tensor_alloc(&o, ATTN_F32, 4, osh, &lout);
        tu_tensor_alloc(&dq, ATTN_F32, 4, qsh, &lout);
        tu_tensor_alloc(&dk, ATTN_F32, 4, ksh, &lout);
        tu_tensor_alloc(&dv, ATTN_F32, 4, vsh, &lout);
        float *lse = malloc(sizeof(float) * (size_t)(nl > 0 ? nl : 1));
        attn_tensor L = attn_tensor_3d(lse, B, Hq, Nq);
        attn_sdpa_opts opts = attn_sdpa_opts_default();
        opts.causal = causal;
        opts.path = path ? ATTN_PATH_FUSED : ATTN_PATH_REFERENCE;
        opts.rope = &rope;
        opts.rope_offset = offset;
        char w2[200];
        snprintf(w2, sizeof w2, "%s, %s path", what, path ? "fused" : "reference");
        attn_error err;
        ok = tu_check(g, attn_sdpa(&q.view, &k.view, &v.view, &o.view, &L, NULL, &opts, &err) == ATTN_OK,
                      "forward: %s (%s)", err.message, w2) &&
             judge(g, "out", &o.view, ro, fo, mo, nat_o, x_o, no, w2) &&
             judge(g, "lse", &L, rl, fl, ml, nat_l, x_l, nl, w2) &&
             tu_check(g, attn_sdpa_backward(&q.view, &k.view, &v.view, &o.view, &L, &dout.view, &dq.view, &dk.view,
                                            &dv.view, &opts, &err) == ATTN_OK,
                      "backward: %s (%s)", err.message, w2) &&
             judge(g, "dq", &dq.view, rdq, fdq, mdq, nat_dq, x_dq, nq, w2) &&
             judge(g, "dk", &dk.view, rdk, fdk, mdk, nat_dk, x_dk, nk, w2) &&
             judge(g, "dv", &dv.view, rdv, fdv, mdv, nat_dv, x_dv, nv, w2) &&
             tu_check(g, tu_padding_intact(&o) && tu_padding_intact(&dq) && tu_padding_intact(&dk),
                      "wrote outside a view (%s)", w2);
        tu_tensor_free(&o), tu_tensor_free(&dq), tu_tensor_free(&dk), tu_tensor_free(&dv);
        free(lse);
    }
    if (ok) tu_group_pass(g);
    tu_tensor_free(&q), tu_tensor_free(&k), tu_tensor_free(&v), tu_tensor_free(&dout);
    free(buf), free(tab);
}

static void group_prefill(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "prefill");
    const int cases = opt->cases > 0 ? (int)opt->cases : opt->quick ? 30 : 120;
    for (int i = 0; i < cases; ++i) run_prefill(&g, tu_mix(opt->seed ^ 0x9e11u ^ (uint64_t)i));
    tu_group_end(&g);
}

/* ------------------------------------------------------------- compose */

/* A contiguous float32 copy of x (any float dtype) into buf. */
static attn_tensor widened(const attn_tensor *x, float *buf)
{
    attn_tensor w = attn_tensor_4d(buf, x->shape[0], x->shape[1], x->shape[2], x->shape[3]);
    attn_tensor_convert(x, &w, NULL);
    return w;
}

/* rope with tables of the library's cos and minus its sin over positions
 * [0, npos): attn_rope_apply with it rotates by the transpose. */
static attn_rope inverse_rope(const attn_rope *rope, int64_t D, int64_t npos, float *buf,
                              attn_tensor *tc, attn_tensor *ts)
{
    const int64_t rd = rope->rotary_dim ? rope->rotary_dim : D, half = rd / 2;
    for (int64_t t = 0; t < npos; ++t)
        for (int64_t i = 0; i < half; ++i) {
            double c, s;
            angle_f(rope, rd, t, i, &c, &s);
            buf[t * half + i] = (float)c;
            buf[(npos + t) * half + i] = -(float)s;
        }
    *tc = attn_tensor_2d(buf, npos, half);
    *ts = attn_tensor_2d(buf + npos * half, npos, half);
    attn_rope inv = {.style = rope->style, .rotary_dim = rd, .cos = tc, .sin = ts};
    return inv;
}

static bool same_bits(const attn_tensor *a, const attn_tensor *b)
{
    const int64_t n = tu_numel(a);
    bool same = true;
    for (int64_t e = 0; e < n && same; ++e) {
        const double x = tu_get(a, e), y = tu_get(b, e);
        same = memcmp(&x, &y, sizeof x) == 0;
    }
    return same;
}

/* One random case: attn_sdpa with opts.rope is, bit for bit, attn_rope_apply
 * on float32 copies of Q and K followed by attn_sdpa without it, and the
 * backward's dQ, dK are the plain backward's rotated back; Q, K and V in
 * float32, bfloat16 or float16, exact or bfloat16 products, both paths,
 * with and without a caller's workspace of attn_sdpa_workspace_size bytes. */
static void run_compose(tu_group *g, uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    const int64_t B = tu_rng_int(&r, 1, 2), Hkv = tu_rng_int(&r, 1, 2), Hq = Hkv * tu_rng_int(&r, 1, 2);
    const int64_t Nk = tu_rng_int(&r, 1, 80), Nq = tu_rng_chance(&r, 0.5) ? Nk : tu_rng_int(&r, 1, Nk);
    const int64_t D = 2 * tu_rng_int(&r, 1, 40), Dv = tu_rng_int(&r, 1, 40);
    attn_rope rope = random_rope(&r, D);
    const int64_t offset = tu_rng_chance(&r, 0.5) ? 0 : tu_rng_int(&r, 0, 300), npos = offset + Nk;
    const attn_dtype dts[3] = {ATTN_F32, ATTN_BF16, ATTN_F16};
    const attn_dtype dt = dts[tu_rng_int(&r, 0, 2)];
    attn_sdpa_opts opts = attn_sdpa_opts_default();
    opts.causal = (attn_causal)tu_rng_int(&r, 0, 2);
    opts.precision = tu_rng_chance(&r, 0.5) ? ATTN_PRECISION_BF16 : ATTN_PRECISION_EXACT;
    opts.path = tu_rng_chance(&r, 0.5) ? ATTN_PATH_FUSED : ATTN_PATH_REFERENCE;
    char what[200];
    snprintf(what, sizeof what, "seed 0x%016" PRIx64 " dtype %d precision %d path %d style %d Nq %" PRId64 " Nk %" PRId64 " D %" PRId64 " offset %" PRId64,
             seed, (int)dt, (int)opts.precision, (int)opts.path, (int)rope.style, Nq, Nk, D, offset);
    const int64_t nq = B * Hq * Nq * D, nk = B * Hkv * Nk * D, nv = B * Hkv * Nk * Dv, no = B * Hq * Nq * Dv;
    float *f = malloc(sizeof(float) * (size_t)(4 * nq + 4 * nk + 3 * nv + 3 * no + 2 * B * Hq * Nq + npos * D + 8));
    float *qf = f, *kf = qf + nq, *vf = kf + nk, *dof = vf + nv, *qw = dof + no, *kw = qw + nq;
    float *oa = kw + nk, *ob = oa + no, *la = ob + no, *lb = la + B * Hq * Nq;
    float *dqa = lb + B * Hq * Nq, *dqb = dqa + nq, *dka = dqb + nq, *dkb = dka + nk, *dva = dkb + nk, *dvb = dva + nv;
    float *tab = dvb + nv;
    uint16_t *h16 = malloc(sizeof(uint16_t) * (size_t)(nq + nk + nv + no + 4));
    for (int64_t e = 0; e < nq + nk + nv + no; ++e) qf[e] = (float)tu_rng_normal(&r);
    attn_tensor Q = attn_tensor_4d(qf, B, Hq, Nq, D), K = attn_tensor_4d(kf, B, Hkv, Nk, D);
    attn_tensor V = attn_tensor_4d(vf, B, Hkv, Nk, Dv), dO = attn_tensor_4d(dof, B, Hq, Nq, Dv);
    if (dt != ATTN_F32) { /* Q, K, V in 16 bits */
        attn_tensor Q16 = attn_tensor_make(h16, dt, 4, Q.shape), K16 = attn_tensor_make(h16 + nq, dt, 4, K.shape);
        attn_tensor V16 = attn_tensor_make(h16 + nq + nk, dt, 4, V.shape);
        attn_tensor_convert(&Q, &Q16, NULL), attn_tensor_convert(&K, &K16, NULL), attn_tensor_convert(&V, &V16, NULL);
        Q = Q16, K = K16, V = V16;
    }
    attn_tensor Qw = widened(&Q, qw), Kw = widened(&K, kw);
    int64_t qpos[2] = {offset + Nk - Nq, offset + Nk - Nq}, kpos[2] = {offset, offset};
    attn_error err;
    bool ok = tu_check(g, attn_rope_apply(&rope, &Qw, qpos, &err) == ATTN_OK && attn_rope_apply(&rope, &Kw, kpos, &err) == ATTN_OK,
                       "apply: %s (%s)", err.message, what);
    attn_tensor Oa = attn_tensor_4d(oa, B, Hq, Nq, Dv), Ob = attn_tensor_4d(ob, B, Hq, Nq, Dv);
    attn_tensor La = attn_tensor_3d(la, B, Hq, Nq), Lb = attn_tensor_3d(lb, B, Hq, Nq);
    attn_tensor dQa = attn_tensor_4d(dqa, B, Hq, Nq, D), dQb = attn_tensor_4d(dqb, B, Hq, Nq, D);
    attn_tensor dKa = attn_tensor_4d(dka, B, Hkv, Nk, D), dKb = attn_tensor_4d(dkb, B, Hkv, Nk, D);
    attn_tensor dVa = attn_tensor_4d(dva, B, Hkv, Nk, Dv), dVb = attn_tensor_4d(dvb, B, Hkv, Nk, Dv);
    attn_sdpa_opts with = opts;
    with.rope = &rope;
    with.rope_offset = offset;
    void *ws = NULL;
    size_t bytes = 0;
    if (ok && tu_rng_chance(&r, 0.5)) { /* the caller's workspace, sized by the query */
        ok = tu_check(g, attn_sdpa_workspace_size(&Q, &K, &V, true, &with, &bytes, &err) == ATTN_OK, "workspace size: %s", err.message);
        ws = malloc(bytes ? bytes : 1);
        with.workspace = ws;
        with.workspace_size = bytes;
    }
    ok = ok &&
         tu_check(g, attn_sdpa(&Q, &K, &V, &Oa, &La, NULL, &with, &err) == ATTN_OK, "forward with rope: %s (%s)", err.message, what) &&
         tu_check(g, attn_sdpa(&Qw, &Kw, &V, &Ob, &Lb, NULL, &opts, &err) == ATTN_OK, "forward: %s (%s)", err.message, what) &&
         tu_check(g, same_bits(&Oa, &Ob) && same_bits(&La, &Lb), "forward: out or lse differ from rotate-then-attend (%s)", what) &&
         tu_check(g, attn_sdpa_backward(&Q, &K, &V, &Oa, &La, &dO, &dQa, &dKa, &dVa, &with, &err) == ATTN_OK,
                  "backward with rope: %s (%s)", err.message, what) &&
         tu_check(g, attn_sdpa_backward(&Qw, &Kw, &V, &Ob, &Lb, &dO, &dQb, &dKb, &dVb, &opts, &err) == ATTN_OK,
                  "backward: %s (%s)", err.message, what);
    if (ok) { /* the plain gradients rotated back by attn_rope_apply */
        attn_tensor tc, ts;
        attn_rope inv = inverse_rope(&rope, D, npos, tab, &tc, &ts);
        ok = tu_check(g, attn_rope_apply(&inv, &dQb, qpos, &err) == ATTN_OK && attn_rope_apply(&inv, &dKb, kpos, &err) == ATTN_OK,
                      "apply inverse: %s", err.message) &&
             tu_check(g, same_bits(&dQa, &dQb) && same_bits(&dKa, &dKb) && same_bits(&dVa, &dVb),
                      "backward: dq, dk or dv differ from the plain backward rotated back (%s)", what);
    }
    if (ok) tu_group_pass(g);
    free(f), free(h16), free(ws);
}

/* Varlen: positions restart per sequence (query row i of sequence s at
 * offset + Nk_s - Nq_s + i): the same bits as attn_rope_apply per sequence
 * followed by attn_sdpa_varlen without rope. */
static void run_varlen(tu_group *g, uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    const int64_t nseq = tu_rng_int(&r, 1, 4), H = tu_rng_int(&r, 1, 3), D = 2 * tu_rng_int(&r, 1, 24), Dv = tu_rng_int(&r, 1, 24);
    attn_rope rope = random_rope(&r, D);
    const int64_t offset = tu_rng_chance(&r, 0.5) ? 0 : tu_rng_int(&r, 0, 300);
    int64_t cq[5] = {0}, ck[5] = {0};
    for (int64_t s = 0; s < nseq; ++s) {
        const int64_t nk = tu_rng_int(&r, 0, 30);
        ck[s + 1] = ck[s] + nk;
        cq[s + 1] = cq[s] + (tu_rng_chance(&r, 0.5) ? nk : tu_rng_int(&r, 0, nk));
    }
    const int64_t Tq = cq[nseq], Tk = ck[nseq];
    float *f = malloc(sizeof(float) * (size_t)(2 * Tq * H * D + 2 * Tk * H * D + Tk * H * Dv + 2 * Tq * H * Dv + 4));
    float *q = f, *qr = q + Tq * H * D, *k = qr + Tq * H * D, *kr = k + Tk * H * D, *v = kr + Tk * H * D;
    float *oa = v + Tk * H * Dv, *ob = oa + Tq * H * Dv;
    for (int64_t e = 0; e < Tq * H * D; ++e) qr[e] = q[e] = (float)tu_rng_normal(&r);
    for (int64_t e = 0; e < Tk * H * D; ++e) kr[e] = k[e] = (float)tu_rng_normal(&r);
    for (int64_t e = 0; e < Tk * H * Dv; ++e) v[e] = (float)tu_rng_normal(&r);
    attn_error err;
    bool ok = true;
    for (int64_t s = 0; s < nseq && ok; ++s) { /* (len, H, D) rows as (1, H, len, D) */
        const int64_t nq = cq[s + 1] - cq[s], nk = ck[s + 1] - ck[s];
        attn_tensor qs = attn_tensor_4d(qr + cq[s] * H * D, 1, H, nq, D), ks = attn_tensor_4d(kr + ck[s] * H * D, 1, H, nk, D);
        qs.stride[1] = ks.stride[1] = D, qs.stride[2] = ks.stride[2] = H * D;
        const int64_t qp = offset + nk - nq, kp = offset;
        ok = tu_check(g, attn_rope_apply(&rope, &qs, &qp, &err) == ATTN_OK && attn_rope_apply(&rope, &ks, &kp, &err) == ATTN_OK,
                      "apply: %s", err.message);
    }
    attn_varlen_seqs seqs = {.nseq = nseq, .type = ATTN_OFFSETS_I64, .cu_seqlens_q = cq, .cu_seqlens_k = ck};
    attn_tensor Q = attn_tensor_3d(q, Tq, H, D), QR = attn_tensor_3d(qr, Tq, H, D), K = attn_tensor_3d(k, Tk, H, D);
    attn_tensor KR = attn_tensor_3d(kr, Tk, H, D), V = attn_tensor_3d(v, Tk, H, Dv);
    attn_tensor Oa = attn_tensor_3d(oa, Tq, H, Dv), Ob = attn_tensor_3d(ob, Tq, H, Dv);
    attn_sdpa_opts opts = attn_sdpa_opts_default(), with;
    opts.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    with = opts;
    with.rope = &rope;
    with.rope_offset = offset;
    ok = ok && tu_check(g, attn_sdpa_varlen(&Q, &K, &V, &seqs, &Oa, NULL, &with, &err) == ATTN_OK, "varlen with rope: %s", err.message) &&
         tu_check(g, attn_sdpa_varlen(&QR, &KR, &V, &seqs, &Ob, NULL, &opts, &err) == ATTN_OK, "varlen: %s", err.message) &&
         tu_check(g, same_bits(&Oa, &Ob), "varlen: out differs from per-sequence rotation (seed 0x%016" PRIx64 ")", seed);
    if (ok) tu_group_pass(g);
    free(f);
}

static void group_compose(tu_suite *s, const tu_options *opt)
{
    tu_group g;
    tu_group_begin(&g, s, "compose");
    const int cases = opt->cases > 0 ? (int)opt->cases : opt->quick ? 30 : 120;
    for (int i = 0; i < cases; ++i) run_compose(&g, tu_mix(opt->seed ^ 0xc0u ^ (uint64_t)i));
    for (int i = 0; i < cases / 2; ++i) run_varlen(&g, tu_mix(opt->seed ^ 0x7a1u ^ (uint64_t)i));
    tu_group_end(&g);
}

static void group_errors(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "errors");
    attn_kvcache_config cfg = {.batch = 1, .kv_heads = 1, .capacity = 8, .head_dim = 8};
    attn_kvcache *c = NULL;
    attn_error err;
    attn_kvcache_create(&cfg, &c, &err);
    float k[8 * 8] = {0}, o[8] = {0};
    attn_tensor K = attn_tensor_4d(k, 1, 1, 2, 8), Q = attn_tensor_4d(k, 1, 1, 1, 8), O = attn_tensor_4d(o, 1, 1, 1, 8);
    float tab[4] = {1, 1, 1, 1};
    attn_tensor T = attn_tensor_2d(tab, 1, 4);
    const struct {
        attn_rope rope;
        const char *want;
    } bad[] = {
        {{.style = (attn_rope_style)5}, "style"},
        {{.style = ATTN_ROPE_NEOX, .rotary_dim = 3}, "rotary_dim"},
        {{.style = ATTN_ROPE_NEOX, .rotary_dim = 10}, "rotary_dim"},
        {{.style = ATTN_ROPE_GPTJ, .theta = -1.0}, "theta"},
        {{.style = ATTN_ROPE_GPTJ, .cos = &T, .sin = &T}, "positions"},
        {{.style = ATTN_ROPE_GPTJ, .cos = &T}, "together"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        const attn_status st = attn_kvcache_update_attend(c, &Q, &K, &K, NULL, &bad[i].rope, &O, NULL, NULL, &err);
        tu_check(&g, st != ATTN_OK && strstr(err.message, bad[i].want) && attn_kvcache_length(c, 0) == 0,
                 "bad rope %zu: status %d, '%s', length %lld", i, (int)st, err.message, (long long)attn_kvcache_length(c, 0));
    }
    tu_check(&g, attn_kvcache_update_attend(c, &Q, &K, NULL, NULL, NULL, &O, NULL, NULL, &err) == ATTN_ERR_NULL &&
                     attn_kvcache_length(c, 0) == 0,
             "k_new without v_new: %s", err.message);
    attn_kvcache_free(c);

    /* attn_sdpa and its backward with bad rope options: an error naming
     * the field, and out / dq untouched. Q (1,1,3,8), K (1,1,5,8). */
    float qa[24], ka[40], va[40], oa[24], dqa[24], dka[40], dva[40], wsa[16];
    for (int e = 0; e < 40; ++e) ka[e] = va[e] = (float)(e % 7) - 3.0f;
    for (int e = 0; e < 24; ++e) qa[e] = (float)(e % 5) - 2.0f;
    attn_tensor Qs = attn_tensor_4d(qa, 1, 1, 3, 8), Ks = attn_tensor_4d(ka, 1, 1, 5, 8), Vs = attn_tensor_4d(va, 1, 1, 5, 8);
    attn_tensor Os = attn_tensor_4d(oa, 1, 1, 3, 8), dQ = attn_tensor_4d(dqa, 1, 1, 3, 8);
    attn_tensor dK = attn_tensor_4d(dka, 1, 1, 5, 8), dV = attn_tensor_4d(dva, 1, 1, 5, 8);
    float tab5[5 * 4];
    for (int e = 0; e < 20; ++e) tab5[e] = 0.5f;
    attn_tensor T4 = attn_tensor_2d(tab5, 4, 4), T5 = attn_tensor_2d(tab5, 5, 4);
    const struct {
        attn_rope rope;
        int64_t offset, nq;
        const char *want;
    } sbad[] = {
        {{.style = (attn_rope_style)7}, 0, 3, "style"},
        {{.style = ATTN_ROPE_NONE}, 0, 3, "style"},
        {{.style = ATTN_ROPE_NEOX, .rotary_dim = 5}, 0, 3, "rotary_dim"},
        {{.style = ATTN_ROPE_GPTJ, .rotary_dim = 10}, 0, 3, "rotary_dim"},
        {{.style = ATTN_ROPE_GPTJ, .position_scale = -2.0}, 0, 3, "position_scale"},
        {{.style = ATTN_ROPE_NEOX}, -1, 3, "rope_offset"},
        {{.style = ATTN_ROPE_NEOX}, INT64_MAX - 2, 3, "rope_offset"},
        {{.style = ATTN_ROPE_NEOX, .cos = &T4, .sin = &T4}, 0, 3, "positions"},  /* keys reach position 4 */
        {{.style = ATTN_ROPE_NEOX, .cos = &T5, .sin = &T5}, 1, 3, "positions"},  /* ... 5 with the offset */
        {{.style = ATTN_ROPE_NEOX, .cos = &T5, .sin = &T5}, 0, 6, "rope_offset"}, /* query 0 at -1 */
        {{.style = ATTN_ROPE_NEOX, .cos = &T5}, 0, 3, "together"},
    };
    for (size_t i = 0; i < sizeof sbad / sizeof sbad[0]; ++i) {
        float q6[48] = {0}, o6[48];
        attn_tensor Q6 = attn_tensor_4d(q6, 1, 1, 6, 8), O6 = attn_tensor_4d(o6, 1, 1, 6, 8);
        attn_tensor *qv = sbad[i].nq == 6 ? &Q6 : &Qs, *ov = sbad[i].nq == 6 ? &O6 : &Os;
        attn_sdpa_opts so = attn_sdpa_opts_default();
        so.rope = &sbad[i].rope;
        so.rope_offset = sbad[i].offset;
        for (int e = 0; e < 24; ++e) oa[e] = dqa[e] = 42.0f;
        for (int e = 0; e < 48; ++e) o6[e] = 42.0f;
        attn_status f = attn_sdpa(qv, &Ks, &Vs, ov, NULL, NULL, &so, &err);
        const bool fok = f != ATTN_OK && strstr(err.message, sbad[i].want) && ((float *)ov->data)[0] == 42.0f;
        char fmsg[256];
        snprintf(fmsg, sizeof fmsg, "%s", err.message);
        attn_status bw = attn_sdpa_backward(qv, &Ks, &Vs, NULL, NULL, ov, sbad[i].nq == 6 ? NULL : &dQ, &dK, &dV, &so, &err);
        tu_check(&g, fok && bw != ATTN_OK && strstr(err.message, sbad[i].want) && dqa[0] == 42.0f,
                 "bad sdpa rope %zu: forward %d '%s', backward %d '%s'", i, (int)f, fmsg, (int)bw, err.message);
    }
    /* a caller's workspace too small for the rotated copies */
    attn_rope good = {.style = ATTN_ROPE_GPTJ};
    attn_sdpa_opts so = attn_sdpa_opts_default();
    so.rope = &good;
    so.workspace = wsa;
    so.workspace_size = sizeof wsa;
    tu_check(&g, attn_sdpa(&Qs, &Ks, &Vs, &Os, NULL, NULL, &so, &err) == ATTN_ERR_WORKSPACE && strstr(err.message, "workspace"),
             "small workspace: %s", err.message);
    /* a table that is an output too */
    so.workspace = NULL;
    so.workspace_size = 0;
    attn_rope overlap = {.style = ATTN_ROPE_NEOX, .rotary_dim = 2, .cos = &T5, .sin = &T5};
    attn_tensor Ot = attn_tensor_4d(tab5, 1, 1, 1, 8);
    attn_tensor Q1 = attn_tensor_4d(qa, 1, 1, 1, 8);
    so.rope = &overlap;
    T5 = attn_tensor_2d(tab5, 5, 1);
    tu_check(&g, attn_sdpa(&Q1, &Ks, &Vs, &Ot, NULL, NULL, &so, &err) != ATTN_OK && strstr(err.message, "rope"),
             "out overlapping the rope table: %s", err.message);
    /* varlen: the second sequence's keys reach past the table: nothing written */
    {
        float vq[5 * 8] = {0}, vk[9 * 8] = {0}, vo[5 * 8];
        for (int e = 0; e < 40; ++e) vo[e] = 42.0f;
        const int64_t cq[3] = {0, 4, 5}, ck[3] = {0, 4, 9}; /* the larger, valid one runs first */
        attn_varlen_seqs seqs = {.nseq = 2, .type = ATTN_OFFSETS_I64, .cu_seqlens_q = cq, .cu_seqlens_k = ck};
        attn_tensor VQ = attn_tensor_3d(vq, 5, 1, 8), VK = attn_tensor_3d(vk, 9, 1, 8), VO = attn_tensor_3d(vo, 5, 1, 8);
        attn_rope tabled = {.style = ATTN_ROPE_GPTJ, .cos = &T4, .sin = &T4};
        T4 = attn_tensor_2d(tab5, 4, 4);
        attn_sdpa_opts vo_opts = attn_sdpa_opts_default();
        vo_opts.rope = &tabled;
        bool untouched = true;
        const attn_status st = attn_sdpa_varlen(&VQ, &VK, &VK, &seqs, &VO, NULL, &vo_opts, &err);
        for (int e = 0; e < 40; ++e) untouched &= vo[e] == 42.0f;
        tu_check(&g, st != ATTN_OK && strstr(err.message, "positions") && untouched,
                 "varlen with a short table: status %d '%s', untouched %d", (int)st, err.message, (int)untouched);
    }
    tu_group_pass(&g);
    tu_group_end(&g);
}

/* ----------------------------------------------------------------- cli */

static char cli_dir[256];

static const char *cli_path(const char *name)
{
    static char bufs[8][512];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", cli_dir, name);
    return b;
}

/* The .npy file name holds exactly the n floats of want. */
static bool file_equals(const char *name, const float *want, int64_t n)
{
    attn_array a;
    if (attn_npy_read(cli_path(name), &a, NULL) != ATTN_OK) return false;
    const bool same = a.t.dtype == ATTN_F32 && attn_tensor_numel(&a.t) == n &&
                      memcmp(a.t.data, want, sizeof(float) * (size_t)n) == 0;
    attn_array_free(&a);
    return same;
}

/* `attn sdpa` and `attn sdpa-backward` with --rope equal the library's
 * attn_sdpa and attn_sdpa_backward with opts.rope bit for bit; bad --rope
 * values are usage errors naming the option. */
static void group_cli(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "cli");
    snprintf(cli_dir, sizeof cli_dir, "/tmp/attn_rope_cli_XXXXXX");
    if (!tu_check(&g, mkdtemp(cli_dir) != NULL, "mkdtemp")) {
        tu_group_end(&g);
        return;
    }
    enum { B = 2, H = 4, HK = 2, NQ = 5, NK = 7, D = 8, DV = 5 };
    static float q[B * H * NQ * D], k[B * HK * NK * D], v[B * HK * NK * DV], dout[B * H * NQ * DV];
    static float o[B * H * NQ * DV], l[B * H * NQ], dq[B * H * NQ * D], dk[B * HK * NK * D], dv[B * HK * NK * DV];
    tu_rng r;
    tu_rng_seed(&r, 0xc11);
    for (int e = 0; e < B * H * NQ * D; ++e) q[e] = (float)tu_rng_normal(&r);
    for (int e = 0; e < B * HK * NK * D; ++e) k[e] = (float)tu_rng_normal(&r);
    for (int e = 0; e < B * HK * NK * DV; ++e) v[e] = (float)tu_rng_normal(&r);
    for (int e = 0; e < B * H * NQ * DV; ++e) dout[e] = (float)tu_rng_normal(&r);
    attn_tensor Q = attn_tensor_4d(q, B, H, NQ, D), K = attn_tensor_4d(k, B, HK, NK, D);
    attn_tensor V = attn_tensor_4d(v, B, HK, NK, DV), dO = attn_tensor_4d(dout, B, H, NQ, DV);
    attn_tensor O = attn_tensor_4d(o, B, H, NQ, DV), L = attn_tensor_3d(l, B, H, NQ);
    attn_tensor dQ = attn_tensor_4d(dq, B, H, NQ, D), dK = attn_tensor_4d(dk, B, HK, NK, D);
    attn_tensor dV = attn_tensor_4d(dv, B, HK, NK, DV);
    attn_npy_write(cli_path("q.npy"), &Q, NULL);
    attn_npy_write(cli_path("k.npy"), &K, NULL);
    attn_npy_write(cli_path("v.npy"), &V, NULL);
    attn_npy_write(cli_path("do.npy"), &dO, NULL);
    attn_rope rope = {.style = ATTN_ROPE_GPTJ, .rotary_dim = 6, .theta = 500.0};
    attn_sdpa_opts opts = attn_sdpa_opts_default();
    opts.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    opts.rope = &rope;
    opts.rope_offset = 3;
    static float stats[B * H * NQ * 2]; /* as sdpa-backward: the backward reads the row statistics */
    attn_tensor ST = attn_tensor_4d(stats, B, H, NQ, 2);
    opts.softmax_stats = &ST;
    attn_error err;
    tu_check(&g, attn_sdpa(&Q, &K, &V, &O, &L, NULL, &opts, &err) == ATTN_OK &&
                     attn_sdpa_backward(&Q, &K, &V, &O, &L, &dO, &dQ, &dK, &dV, &opts, &err) == ATTN_OK,
             "library: %s", err.message);
    const char *common = "%s\x1f--query\x1f%s\x1f--key\x1f%s\x1f--value\x1f%s\x1f--causal\x1f" "bottom-right\x1f"
                         "--rope\x1fgptj\x1f--rotary-dim\x1f" "6\x1f--rope-theta\x1f" "500\x1f--rope-offset\x1f" "3%s";
    clirun_result res;
    clirunf(&res, common, "sdpa", cli_path("q.npy"), cli_path("k.npy"), cli_path("v.npy"), "\x1f--out\x1f/dev/null");
    clirun_free(&res);
    char extra[600];
    snprintf(extra, sizeof extra, "\x1f--out\x1f%s\x1f--lse\x1f%s", cli_path("o.npy"), cli_path("l.npy"));
    clirunf(&res, common, "sdpa", cli_path("q.npy"), cli_path("k.npy"), cli_path("v.npy"), extra);
    tu_check(&g, res.status == 0 && file_equals("o.npy", o, B * H * NQ * DV) && file_equals("l.npy", l, B * H * NQ),
             "attn sdpa --rope: status %d, '%s', or outputs differ from attn_sdpa", res.status, res.err);
    clirun_free(&res);
    snprintf(extra, sizeof extra, "\x1f--grad-out\x1f%s\x1f--grad-query\x1f%s\x1f--grad-key\x1f%s\x1f--grad-value\x1f%s",
             cli_path("do.npy"), cli_path("dq.npy"), cli_path("dk.npy"), cli_path("dv.npy"));
    clirunf(&res, common, "sdpa-backward", cli_path("q.npy"), cli_path("k.npy"), cli_path("v.npy"), extra);
    tu_check(&g, res.status == 0 && file_equals("dq.npy", dq, B * H * NQ * D) && file_equals("dk.npy", dk, B * HK * NK * D) &&
                     file_equals("dv.npy", dv, B * HK * NK * DV),
             "attn sdpa-backward --rope: status %d, '%s', or gradients differ from attn_sdpa_backward", res.status, res.err);
    clirun_free(&res);
    const struct {
        const char *args, *want;
    } bad[] = {
        {"\x1f--rope\x1fhalves", "--rope: expected neox or gptj"},
        {"\x1f--rope\x1fneox\x1f--rotary-dim\x1f" "5", "--rope"},
        {"\x1f--rope\x1fneox\x1f--rotary-dim\x1f" "10", "--rope"},
        {"\x1f--rope-theta\x1f" "100", "only with --rope"},
        {"\x1f--rope-offset\x1f" "4", "only with --rope"},
        {"\x1f--rope\x1fgptj\x1f--rope-offset\x1f-1", "--rope-offset"},
        {"\x1f--rope\x1fgptj\x1f--rope-theta\x1f" "1", "--rope-theta"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        char args[300];
        snprintf(args, sizeof args, "%s\x1f--out\x1f%s", bad[i].args, cli_path("bad.npy"));
        clirunf(&res, "sdpa\x1f--query\x1f%s\x1f--key\x1f%s\x1f--value\x1f%s%s", cli_path("q.npy"), cli_path("k.npy"),
                cli_path("v.npy"), args);
        tu_check(&g, res.status == 2 && clirun_count_lines(res.err) == 1 && strstr(res.err, bad[i].want) &&
                         access(cli_path("bad.npy"), F_OK) != 0,
                 "bad %zu: status %d, stderr '%s'", i, res.status, res.err);
        clirun_free(&res);
    }
    const char *names[] = {"q.npy", "k.npy", "v.npy", "do.npy", "o.npy", "l.npy", "dq.npy", "dk.npy", "dv.npy", "bad.npy"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) unlink(cli_path(names[i]));
    rmdir(cli_dir);
    tu_group_end(&g);
}

int main(int argc, char **argv)
{
    tu_options opt;
    tu_suite s;
    if (!tu_begin(argc, argv, DEFAULT_SEED, &opt, &s)) return 2;
    if (tu_group_selected(&opt, "apply")) group_apply(&s);
    if (tu_group_selected(&opt, "decode")) group_decode(&s, &opt);
    if (tu_group_selected(&opt, "prefill")) group_prefill(&s, &opt);
    if (tu_group_selected(&opt, "compose")) group_compose(&s, &opt);
    if (tu_group_selected(&opt, "errors")) group_errors(&s);
    if (tu_group_selected(&opt, "cli")) group_cli(&s);
    return tu_suite_finish(&s);
}
