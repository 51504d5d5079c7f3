/* The plain bfloat16 baseline (bf16_ref.h). */
#include "bf16_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double bf16_round(double x)
{
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return x; /* NaN */
    u = (u + 0x7fffu + (u >> 16 & 1)) & 0xffff0000u;
    memcpy(&f, &u, sizeof f);
    return f;
}

static float b16(float x)
{
    return (float)bf16_round(x);
}

static void *xalloc(int64_t n, size_t size)
{
    void *p = calloc((size_t)(n > 0 ? n : 1), size);
    if (!p) abort();
    return p;
}

static float *rounded(const double *x, int64_t n)
{
    float *r = xalloc(n, sizeof(float));
    for (int64_t e = 0; e < n; ++e) r[e] = b16((float)x[e]);
    return r;
}

static float keep_factor(const rv_problem *p, int64_t b, int64_t h, int64_t i, int64_t j)
{
    if (!p->keep) return 1.0f;
    return p->keep[((b * p->Hq + h) * p->Nq + i) * p->Nk + j] ? 1.0f / (1.0f - (float)p->dropout_p)
                                                                : 0.0f;
}

/* Row i of head (b, h): P (float32, 0 hidden), x0 (pre-cap scores), m, Z and
 * the sink's probability. */
static void row_softmax(const rv_problem *p, const float *qi, const float *kh, int64_t b,
                        int64_t h, int64_t i, float *P, float *x0, uint8_t *vis, float *m_out,
                        float *Z_out, float *psink)
{
    const float scale = (float)p->scale, cap = (float)p->softcap;
    float m = -INFINITY;
    for (int64_t j = 0; j < p->Nk; ++j) {
        vis[j] = rv_visible(p, b, h, i, j);
        if (!vis[j]) continue;
        float s = 0.0f;
        for (int64_t d = 0; d < p->D; ++d) s = fmaf(qi[d], kh[j * p->D + d], s);
        float x = scale * s;
        x0[j] = x;
        if (cap > 0.0f) x = cap * tanhf(x / cap);
        if (p->alibi) {
            int64_t rel = i + p->Nk - p->Nq - j;
            rel = rel < 0 ? -rel : rel;
            x -= (float)p->alibi[b * p->Hq + h] * (float)rel;
        }
        if (p->bias) x += (float)p->bias[((b * p->Hq + h) * p->Nq + i) * p->Nk + j];
        if (x == -INFINITY) {
            vis[j] = 0;
            continue;
        }
        P[j] = x;
        m = x > m ? x : m;
    }
    const float sink = p->sinks ? (float)p->sinks[h] : -INFINITY;
    m = sink > m ? sink : m;
    float Z = 0.0f;
    for (int64_t j = 0; j < p->Nk; ++j) {
        P[j] = vis[j] && m != -INFINITY ? expf(P[j] - m) : 0.0f;
        Z += P[j];
    }
    const float es = p->sinks && m != -INFINITY ? expf(sink - m) : 0.0f;
    Z += es;
    for (int64_t j = 0; j < p->Nk; ++j) P[j] = Z > 0.0f ? P[j] / Z : 0.0f;
    *m_out = m;
    *Z_out = Z;
    *psink = Z > 0.0f ? es / Z : 0.0f;
}

typedef struct {
    float *q, *k, *v, *dout, *P, *x0;
    uint8_t *vis;
} bufs;

static void load(const rv_problem *p, const double *q, const double *k, const double *v,
                 const double *dout, bufs *w)
{
    w->q = rounded(q, p->B * p->Hq * p->Nq * p->D);
    w->k = rounded(k, p->B * p->Hkv * p->Nk * p->D);
    w->v = rounded(v, p->B * p->Hkv * p->Nk * p->Dv);
    w->dout = dout ? rounded(dout, p->B * p->Hq * p->Nq * p->Dv) : NULL;
    w->P = xalloc(p->Nk, sizeof(float));
    w->x0 = xalloc(p->Nk, sizeof(float));
    w->vis = xalloc(p->Nk, 1);
}

static void unload(bufs *w)
{
    free(w->q), free(w->k), free(w->v), free(w->dout), free(w->P), free(w->x0), free(w->vis);
}

void bf16_forward(const rv_problem *p, const double *q, const double *k, const double *v,
                  double *out, double *lse)
{
    bufs w;
    load(p, q, k, v, NULL, &w);
    const int64_t group = p->Hq / p->Hkv;
    for (int64_t b = 0; b < p->B; ++b)
        for (int64_t h = 0; h < p->Hq; ++h) {
            const int64_t hk = b * p->Hkv + h / group;
            const float *kh = w.k + hk * p->Nk * p->D, *vh = w.v + hk * p->Nk * p->Dv;
            for (int64_t i = 0; i < p->Nq; ++i) {
                const int64_t row = (b * p->Hq + h) * p->Nq + i;
                float m, Z, ps;
                row_softmax(p, w.q + row * p->D, kh, b, h, i, w.P, w.x0, w.vis, &m, &Z, &ps);
                for (int64_t j = 0; j < p->Nk; ++j) w.P[j] = b16(w.P[j] * keep_factor(p, b, h, i, j));
                for (int64_t e = 0; e < p->Dv && out; ++e) {
                    float acc = 0.0f;
                    for (int64_t j = 0; j < p->Nk; ++j)
                        if (w.vis[j]) acc = fmaf(w.P[j], vh[j * p->Dv + e], acc);
                    out[row * p->Dv + e] = b16(acc);
                }
                if (lse) lse[row] = m == -INFINITY ? -INFINITY : (double)(m + logf(Z));
            }
        }
    unload(&w);
}

void bf16_backward(const rv_problem *p, const double *q, const double *k, const double *v,
                   const double *dout, double *dq, double *dk, double *dv)
{
    bufs w;
    load(p, q, k, v, dout, &w);
    const int64_t group = p->Hq / p->Hkv;
    const int64_t nk = p->B * p->Hkv * p->Nk * p->D, nv = p->B * p->Hkv * p->Nk * p->Dv;
    float *gk = xalloc(nk, sizeof(float)), *gv = xalloc(nv, sizeof(float));
    float *gq = xalloc(p->D, sizeof(float)), *dS = xalloc(p->Nk, sizeof(float));
    const float scale = (float)p->scale, cap = (float)p->softcap;
    for (int64_t b = 0; b < p->B; ++b)
        for (int64_t h = 0; h < p->Hq; ++h) {
            const int64_t hk = b * p->Hkv + h / group;
            const float *kh = w.k + hk * p->Nk * p->D, *vh = w.v + hk * p->Nk * p->Dv;
            float *gkh = gk + hk * p->Nk * p->D, *gvh = gv + hk * p->Nk * p->Dv;
            for (int64_t i = 0; i < p->Nq; ++i) {
                const int64_t row = (b * p->Hq + h) * p->Nq + i;
                const float *qi = w.q + row * p->D, *doi = w.dout + row * p->Dv;
                float m, Z, ps;
                row_softmax(p, qi, kh, b, h, i, w.P, w.x0, w.vis, &m, &Z, &ps);
                float R = 0.0f;
                for (int64_t j = 0; j < p->Nk; ++j) {
                    if (!w.vis[j]) continue;
                    const float kf = keep_factor(p, b, h, i, j);
                    float dp = 0.0f;
                    for (int64_t e = 0; e < p->Dv; ++e) dp = fmaf(doi[e], vh[j * p->Dv + e], dp);
                    dS[j] = dp * kf;
                    R = fmaf(w.P[j], dS[j], R);
                    const float pz = b16(w.P[j] * kf);
                    for (int64_t e = 0; e < p->Dv; ++e)
                        gvh[j * p->Dv + e] = fmaf(pz, doi[e], gvh[j * p->Dv + e]);
                }
                for (int64_t d = 0; d < p->D; ++d) gq[d] = 0.0f;
                for (int64_t j = 0; j < p->Nk; ++j) {
                    if (!w.vis[j]) continue;
                    float s = w.P[j] * (dS[j] - R);
                    if (cap > 0.0f) {
                        const float t = tanhf(w.x0[j] / cap);
                        s *= 1.0f - t * t;
                    }
                    s = b16(s);
                    for (int64_t d = 0; d < p->D; ++d) {
                        gq[d] = fmaf(s, kh[j * p->D + d], gq[d]);
                        gkh[j * p->D + d] = fmaf(s, qi[d], gkh[j * p->D + d]);
                    }
                }
                for (int64_t d = 0; d < p->D && dq; ++d) dq[row * p->D + d] = b16(scale * gq[d]);
            }
        }
    for (int64_t e = 0; e < nk && dk; ++e) dk[e] = b16(scale * gk[e]);
    for (int64_t e = 0; e < nv && dv; ++e) dv[e] = b16(gv[e]);
    free(gk), free(gv), free(gq), free(dS);
    unload(&w);
}
