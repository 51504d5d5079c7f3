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
#include "ref64_variants.h"
#include "testutil.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SEED 0x20be0e5ull

/* The float64 rotation of row x (D) at position pos. */
static void rotate64(const attn_rope *r, int64_t pos, double *x, int64_t D)
{
    const int64_t rd = r->rotary_dim ? r->rotary_dim : D, half = rd / 2;
    const double theta = r->theta > 0 ? r->theta : 10000.0;
    const double p = (double)pos / (r->position_scale > 0 ? r->position_scale : 1.0);
    for (int64_t i = 0; i < half; ++i) {
        double c, s;
        if (r->cos) {
            c = ((const float *)r->cos->data)[pos * r->cos->stride[0] + i];
            s = ((const float *)r->sin->data)[pos * r->sin->stride[0] + i];
        } else {
            const double a = p * pow(theta, -2.0 * (double)i / (double)rd);
            c = cos(a);
            s = sin(a);
        }
        const int64_t i0 = r->style == ATTN_ROPE_GPTJ ? 2 * i : i;
        const int64_t i1 = r->style == ATTN_ROPE_GPTJ ? 2 * i + 1 : i + half;
        const double u = x[i0], v = x[i1];
        x[i0] = u * c - v * s;
        x[i1] = u * s + v * c;
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
    tu_group_pass(&g);
    tu_group_end(&g);
}

int main(int argc, char **argv)
{
    tu_options opt;
    tu_suite s;
    if (!tu_begin(argc, argv, DEFAULT_SEED, &opt, &s)) return 2;
    if (tu_group_selected(&opt, "apply")) group_apply(&s);
    if (tu_group_selected(&opt, "decode")) group_decode(&s, &opt);
    if (tu_group_selected(&opt, "errors")) group_errors(&s);
    return tu_suite_finish(&s);
}
