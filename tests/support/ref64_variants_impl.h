/* Template body of ref64_variants.c, included twice: once with R = double
 * (the oracle) and once with R = float (the naive float32 implementation).
 * Needs: R, RX(x) (literal/convert to R), REXP, RLOG, RTANH, RFMA(a,b,c) (a·b + c:
 * separate roundings, or fused), SUFFIX(name). */

/* One row: final scores x (Nk), raw scaled scores x0 (for softcap), visible
 * flags; returns m, Z (or m = -inf). P receives probabilities (0 hidden). */
static void SUFFIX(row_probs)(const rv_problem *p, const R *qi, const R *kh, int64_t b,
                              int64_t h, int64_t i, R *x0, R *P, uint8_t *vis, R *m_out,
                              R *Z_out, R *psink_out)
{
    const R scale = RX(p->scale);
    const R cap = RX(p->softcap);
    R m = RX(-INFINITY);
    for (int64_t j = 0; j < p->Nk; ++j) {
        vis[j] = rv_visible(p, b, h, i, j);
        if (!vis[j]) continue;
        R dot = RX(0.0);
        for (int64_t d = 0; d < p->D; ++d) dot = RFMA(qi[d], kh[j * p->D + d], dot);
        R x = scale * dot;
        x0[j] = x;
        if (p->softcap > 0) x = cap * RTANH(x / cap);
        if (p->alibi) {
            const R slope = RX(p->alibi[b * p->Hq + h]);
            int64_t rel = i + p->Nk - p->Nq - j;
            if (rel < 0) rel = -rel;
            x = x - slope * RX((double)rel);
        }
        if (p->bias) x = x + RX(p->bias[((b * p->Hq + h) * p->Nq + i) * p->Nk + j]);
        if (x == RX(-INFINITY)) { /* e.g. a finite bias that overflowed: exp gives 0 */
            vis[j] = 0;
            continue;
        }
        P[j] = x;
        if (x > m) m = x;
    }
    const R sink = p->sinks ? RX(p->sinks[h]) : RX(-INFINITY);
    if (sink > m) m = sink;
    if (m == RX(-INFINITY)) {
        for (int64_t j = 0; j < p->Nk; ++j) P[j] = RX(0.0);
        *m_out = m;
        *Z_out = RX(0.0);
        *psink_out = RX(0.0);
        return;
    }
    R Z = RX(0.0);
    for (int64_t j = 0; j < p->Nk; ++j) {
        if (!vis[j]) {
            P[j] = RX(0.0);
            continue;
        }
        P[j] = REXP(P[j] - m);
        Z += P[j];
    }
    R esink = p->sinks ? REXP(sink - m) : RX(0.0);
    Z += esink;
    for (int64_t j = 0; j < p->Nk; ++j)
        if (vis[j]) P[j] = P[j] / Z;
    *m_out = m;
    *Z_out = Z;
    *psink_out = esink / Z;
}

static R SUFFIX(keep_factor)(const rv_problem *p, int64_t b, int64_t h, int64_t i, int64_t j)
{
    if (!p->keep) return RX(1.0);
    const uint8_t kept = p->keep[((b * p->Hq + h) * p->Nq + i) * p->Nk + j];
    return kept ? RX(1.0) / (RX(1.0) - RX(p->dropout_p)) : RX(0.0);
}

typedef struct {
    R *q, *k, *v, *dout;
    R *x0, *P;
    uint8_t *vis;
} SUFFIX(buffers);

static void SUFFIX(load)(const rv_problem *p, const double *q, const double *k, const double *v,
                         const double *dout, SUFFIX(buffers) *w)
{
    const int64_t nq = p->B * p->Hq * p->Nq * p->D, nk = p->B * p->Hkv * p->Nk * p->D,
                  nv = p->B * p->Hkv * p->Nk * p->Dv, no = p->B * p->Hq * p->Nq * p->Dv;
    w->q = tu_xcalloc(nq, sizeof(R));
    w->k = tu_xcalloc(nk, sizeof(R));
    w->v = tu_xcalloc(nv, sizeof(R));
    w->dout = tu_xcalloc(no, sizeof(R));
    w->x0 = tu_xcalloc(p->Nk, sizeof(R));
    w->P = tu_xcalloc(p->Nk, sizeof(R));
    w->vis = tu_xcalloc(p->Nk, 1);
    for (int64_t e = 0; e < nq; ++e) w->q[e] = RX(q[e]);
    for (int64_t e = 0; e < nk; ++e) w->k[e] = RX(k[e]);
    for (int64_t e = 0; e < nv; ++e) w->v[e] = RX(v[e]);
    if (dout)
        for (int64_t e = 0; e < no; ++e) w->dout[e] = RX(dout[e]);
}

static void SUFFIX(unload)(SUFFIX(buffers) *w)
{
    free(w->q), free(w->k), free(w->v), free(w->dout), free(w->x0), free(w->P), free(w->vis);
}

void SUFFIX(rv_forward)(const rv_problem *p, const double *q, const double *k, const double *v,
                        double *out, double *lse, double *weights, double *stats)
{
    SUFFIX(buffers) w;
    SUFFIX(load)(p, q, k, v, NULL, &w);
    const int64_t group = p->Hq / p->Hkv;
    for (int64_t b = 0; b < p->B; ++b)
        for (int64_t h = 0; h < p->Hq; ++h) {
            const int64_t hk = h / group;
            const R *kh = w.k + (b * p->Hkv + hk) * p->Nk * p->D;
            const R *vh = w.v + (b * p->Hkv + hk) * p->Nk * p->Dv;
            for (int64_t i = 0; i < p->Nq; ++i) {
                if (p->rows && !p->rows[i]) continue;
                const int64_t row = (b * p->Hq + h) * p->Nq + i;
                R m, Z, ps;
                SUFFIX(row_probs)(p, w.q + row * p->D, kh, b, h, i, w.x0, w.P, w.vis, &m, &Z, &ps);
                if (out)
                    for (int64_t e = 0; e < p->Dv; ++e) {
                        R acc = RX(0.0);
                        for (int64_t j = 0; j < p->Nk; ++j)
                            if (w.vis[j])
                                acc = RFMA(w.P[j] * SUFFIX(keep_factor)(p, b, h, i, j),
                                           vh[j * p->Dv + e], acc);
                        out[row * p->Dv + e] = (double)acc;
                    }
                if (lse) lse[row] = m == RX(-INFINITY) ? -INFINITY : (double)(m + RLOG(Z));
                if (stats) {
                    stats[2 * row] = (double)m;
                    stats[2 * row + 1] = m == RX(-INFINITY) ? 0.0 : (double)RLOG(Z);
                }
                if (weights)
                    for (int64_t j = 0; j < p->Nk; ++j) weights[row * p->Nk + j] = (double)w.P[j];
            }
        }
    SUFFIX(unload)(&w);
}

void SUFFIX(rv_backward)(const rv_problem *p, const double *q, const double *k, const double *v,
                         const double *dout, double *dq, double *dk, double *dv, double *dsinks)
{
    SUFFIX(buffers) w;
    SUFFIX(load)(p, q, k, v, dout, &w);
    const int64_t group = p->Hq / p->Hkv;
    const int64_t nk = p->B * p->Hkv * p->Nk * p->D, nv = p->B * p->Hkv * p->Nk * p->Dv;
    R *gk = tu_xcalloc(nk, sizeof(R)), *gv = tu_xcalloc(nv, sizeof(R));
    R *gq = tu_xcalloc(p->D, sizeof(R)), *dx = tu_xcalloc(p->Nk, sizeof(R));
    R *gs = tu_xcalloc(p->Hq, sizeof(R));
    const R scale = RX(p->scale), cap = RX(p->softcap);
    for (int64_t b = 0; b < p->B; ++b)
        for (int64_t h = 0; h < p->Hq; ++h) {
            const int64_t hk = h / group;
            const R *kh = w.k + (b * p->Hkv + hk) * p->Nk * p->D;
            const R *vh = w.v + (b * p->Hkv + hk) * p->Nk * p->Dv;
            R *gkh = gk + (b * p->Hkv + hk) * p->Nk * p->D;
            R *gvh = gv + (b * p->Hkv + hk) * p->Nk * p->Dv;
            for (int64_t i = 0; i < p->Nq; ++i) {
                const int64_t row = (b * p->Hq + h) * p->Nq + i;
                const R *qi = w.q + row * p->D, *doi = w.dout + row * p->Dv;
                R m, Z, ps;
                SUFFIX(row_probs)(p, qi, kh, b, h, i, w.x0, w.P, w.vis, &m, &Z, &ps);
                R Rsum = RX(0.0);
                for (int64_t j = 0; j < p->Nk; ++j) {
                    if (!w.vis[j]) continue;
                    R dpd = RX(0.0);
                    for (int64_t e = 0; e < p->Dv; ++e) dpd = RFMA(doi[e], vh[j * p->Dv + e], dpd);
                    const R kf = SUFFIX(keep_factor)(p, b, h, i, j);
                    dx[j] = dpd * kf; /* dP */
                    Rsum = RFMA(w.P[j], dx[j], Rsum);
                    const R pd = w.P[j] * kf;
                    for (int64_t e = 0; e < p->Dv; ++e) gvh[j * p->Dv + e] = RFMA(pd, doi[e], gvh[j * p->Dv + e]);
                }
                gs[h] += -ps * Rsum;
                for (int64_t d = 0; d < p->D; ++d) gq[d] = RX(0.0);
                for (int64_t j = 0; j < p->Nk; ++j) {
                    if (!w.vis[j]) continue;
                    R s = w.P[j] * (dx[j] - Rsum);
                    if (p->softcap > 0) {
                        const R t = RTANH(w.x0[j] / cap);
                        s = s * (RX(1.0) - t * t);
                    }
                    for (int64_t d = 0; d < p->D; ++d) {
                        gq[d] = RFMA(s, kh[j * p->D + d], gq[d]);
                        gkh[j * p->D + d] = RFMA(scale * s, qi[d], gkh[j * p->D + d]);
                    }
                }
                if (dq)
                    for (int64_t d = 0; d < p->D; ++d) dq[row * p->D + d] = (double)(scale * gq[d]);
            }
        }
    if (dk)
        for (int64_t e = 0; e < nk; ++e) dk[e] = (double)gk[e];
    if (dv)
        for (int64_t e = 0; e < nv; ++e) dv[e] = (double)gv[e];
    if (dsinks)
        for (int64_t h = 0; h < p->Hq; ++h) dsinks[h] = (double)gs[h];
    free(gk), free(gv), free(gq), free(dx), free(gs);
    SUFFIX(unload)(&w);
}
