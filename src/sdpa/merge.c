/* attn_lse_merge: the exact merge of two partial attentions over disjoint key
 * sets, from their outputs and log-sum-exps (or softmax stats). */
#include "../core/internal.h"

#include <math.h>
#include <stddef.h>

/* Per row, the merged log-sum and the weights of each side. */
typedef struct {
    double w1, w2;
    bool nan; /* the row is NaN on every output */
    bool zero; /* neither side saw a key: out 0 */
} merge_row;

/* log(e^a + e^b) and the weights e^{a-l}, e^{b-l}, for a and b that are not
 * both -inf and not NaN. Uses l = max + log1p(e^{-|a-b|}), and computes the
 * weights from e = e^{-|a-b|} directly (1/(1+e), e/(1+e)), so a side at -inf
 * gets weight exactly 0 and the other exactly 1. */
static double log_add(double a, double b, double *w1, double *w2)
{
    if (a == b) { /* also both +inf, where a - b would be NaN */
        *w1 = *w2 = 0.5;
        return a + log(2.0);
    }
    const double e = exp(-fabs(a - b)), big = 1.0 / (1.0 + e), small = e / (1.0 + e);
    *w1 = a > b ? big : small;
    *w2 = a > b ? small : big;
    return (a > b ? a : b) + log1p(e);
}

/* LSE form: a, b are the two rows' LSEs; writes the merged LSE to *l. */
static merge_row merge_lse(double a, double b, double *l)
{
    merge_row r = {0, 0, false, false};
    if (isnan(a) || isnan(b)) {
        r.nan = true;
        *l = NAN;
    } else if (a == -INFINITY && b == -INFINITY) {
        r.zero = true;
        *l = -INFINITY;
    } else {
        *l = log_add(a, b, &r.w1, &r.w2);
    }
    return r;
}

/* Stats form: (m1, ll1), (m2, ll2) with lse = m + ll; a row that saw nothing
 * is (-inf, 0). m = max(m1, m2) and ll = log(e^{m1-m+ll1} + e^{m2-m+ll2}),
 * so no m + ll is ever rounded. */
static merge_row merge_stats(double m1, double ll1, double m2, double ll2, double *m, double *ll)
{
    merge_row r = {0, 0, false, false};
    if (isnan(m1) || isnan(ll1) || isnan(m2) || isnan(ll2)) {
        r.nan = true;
        *m = *ll = NAN;
    } else if (m1 == -INFINITY && m2 == -INFINITY) {
        r.zero = true;
        *m = -INFINITY;
        *ll = 0.0;
    } else if (m2 == -INFINITY) { /* side 2 saw nothing: keep side 1 bit for bit */
        r.w1 = 1.0;
        *m = m1;
        *ll = ll1;
    } else if (m1 == -INFINITY) {
        r.w2 = 1.0;
        *m = m2;
        *ll = ll2;
    } else {
        *m = m1 > m2 ? m1 : m2;
        const double x1 = m1 - *m + ll1, x2 = m2 - *m + ll2;
        *ll = log_add(x1, x2, &r.w1, &r.w2);
        if (isnan(*ll)) r.nan = true; /* e.g. both maxima +inf */
    }
    return r;
}

/* Rows of the output, Dv elements with element strides. Each element is read
 * before its write, so out may be the same view as out1 or out2. */
static void fill_row(float *z, int64_t sz, float value, int64_t n)
{
    for (int64_t d = 0; d < n; ++d) z[d * sz] = value;
}

static void copy_row(float *z, int64_t sz, const float *x, int64_t sx, int64_t n)
{
    if (z == x && sz == sx) return;
    for (int64_t d = 0; d < n; ++d) z[d * sz] = x[d * sx];
}

/* z = w1·x + w2·y in double, rounded once. (The compiler vectorises the
 * unit-stride case: the same operations lane by lane, the same bits.) */
static void mix_row(float *z, int64_t sz, const float *x, int64_t sx, double w1, const float *y,
                    int64_t sy, double w2, int64_t n)
{
    for (int64_t d = 0; d < n; ++d) z[d * sz] = (float)(w1 * (double)x[d * sx] + w2 * (double)y[d * sy]);
}

static attn_status check_same(const attn_tensor *t, const attn_tensor *ref, const char *name,
                              const char *ref_name, int ndim, bool is_output, attn_error *err)
{
    RETURN_IF(!t, err, ATTN_ERR_NULL, "%s: tensor is NULL", name);
    RETURN_IF_ERROR(attn_check_tensor(t, name, ndim, ATTN_F32, is_output, err));
    for (int d = 0; d < ndim; ++d)
        RETURN_IF(t->shape[d] != ref->shape[d], err, ATTN_ERR_SHAPE,
                  "%s: size %lld in dimension %d, %s has %lld", name, (long long)t->shape[d], d,
                  ref_name, (long long)ref->shape[d]);
    return ATTN_OK;
}

/* The same view: in-place merging reads each element before writing it. */
static bool same_view(const attn_tensor *a, const attn_tensor *b)
{
    if (a->data != b->data || a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; ++d)
        if (a->shape[d] != b->shape[d] || (a->shape[d] > 1 && a->stride[d] != b->stride[d]))
            return false;
    return true;
}

/* Each output may be the same view as an input of its kind; any other
 * shared memory would let the loop read what it already wrote. */
static attn_status check_merge_memory(const attn_tensor *const ins[4], const attn_tensor *out,
                                      const attn_tensor *lse, attn_error *err)
{
    static const char *const in_names[4] = {"out1", "lse1", "out2", "lse2"};
    const attn_tensor *const outs[2] = {out, lse};
    static const char *const out_names[2] = {"out", "lse"};
    for (int o = 0; o < 2; ++o)
        for (int i = 0; outs[o] && i < 4; ++i)
            if (i % 2 != o || !same_view(outs[o], ins[i]))
                RETURN_IF_ERROR(attn_check_disjoint(outs[o], out_names[o], ins[i], in_names[i], err));
    return attn_check_call_memory(outs, out_names, 2, NULL, NULL, 0, NULL, 0, err);
}

attn_status attn_lse_merge(const attn_tensor *out1, const attn_tensor *lse1,
                           const attn_tensor *out2, const attn_tensor *lse2, attn_tensor *out,
                           attn_tensor *lse, attn_error *err)
{
    RETURN_IF(!out1, err, ATTN_ERR_NULL, "out1: tensor is NULL");
    RETURN_IF(!lse1, err, ATTN_ERR_NULL, "lse1: tensor is NULL");
    RETURN_IF_ERROR(attn_check_tensor(out1, "out1", 4, ATTN_F32, false, err));
    RETURN_IF(lse1->ndim != 3 && lse1->ndim != 4, err, ATTN_ERR_SHAPE,
              "lse1: expected (B,H,N) LSE or (B,H,N,2) softmax stats, got %d dimensions",
              lse1->ndim);
    const int lnd = lse1->ndim;
    const bool stats = lnd == 4;
    RETURN_IF_ERROR(attn_check_tensor(lse1, "lse1", lnd, ATTN_F32, false, err));
    for (int d = 0; d < 3; ++d)
        RETURN_IF(lse1->shape[d] != out1->shape[d], err, ATTN_ERR_SHAPE,
                  "lse1: size %lld in dimension %d, out1 has %lld", (long long)lse1->shape[d], d,
                  (long long)out1->shape[d]);
    RETURN_IF(stats && lse1->shape[3] != 2, err, ATTN_ERR_SHAPE,
              "lse1: softmax stats need size 2 in dimension 3 (m, ll), got %lld",
              (long long)lse1->shape[3]);
    RETURN_IF_ERROR(check_same(out2, out1, "out2", "out1", 4, false, err));
    RETURN_IF(lse2 && lse2->ndim != lnd, err, ATTN_ERR_SHAPE,
              "lse2: has %d dimensions, lse1 has %d (both LSE or both softmax stats)", lse2->ndim,
              lnd);
    RETURN_IF_ERROR(check_same(lse2, lse1, "lse2", "lse1", lnd, false, err));
    RETURN_IF_ERROR(check_same(out, out1, "out", "out1", 4, true, err));
    if (lse) {
        RETURN_IF(lse->ndim != lnd, err, ATTN_ERR_SHAPE,
                  "lse: has %d dimensions, lse1 has %d (both LSE or both softmax stats)",
                  lse->ndim, lnd);
        RETURN_IF_ERROR(check_same(lse, lse1, "lse", "lse1", lnd, true, err));
    }
    RETURN_IF_ERROR(check_merge_memory((const attn_tensor *const[4]){out1, lse1, out2, lse2},
                                       out, lse, err));

    const int64_t B = out1->shape[0], H = out1->shape[1], N = out1->shape[2],
                  Dv = out1->shape[3];
    const float *o1 = out1->data, *o2 = out2->data, *l1 = lse1->data, *l2 = lse2->data;
    float *o = out->data, *l = lse ? lse->data : NULL;
    const int64_t *s1 = out1->stride, *s2 = out2->stride, *so = out->stride;
    const int64_t *t1 = lse1->stride, *t2 = lse2->stride, *tl = lse ? lse->stride : NULL;
    /* strides of the second entry (ll) of each (m, ll) pair */
    const int64_t u1 = stats ? t1[3] : 0, u2 = stats ? t2[3] : 0, ul = stats && l ? tl[3] : 0;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < N; ++i) {
                const float *a = l1 + b * t1[0] + h * t1[1] + i * t1[2];
                const float *c = l2 + b * t2[0] + h * t2[1] + i * t2[2];
                /* Read both sides' statistics before writing: lse may alias lse1. */
                double r0, r1 = 0.0;
                const merge_row w = stats ? merge_stats(a[0], a[u1], c[0], c[u2], &r0, &r1)
                                          : merge_lse(a[0], c[0], &r0);
                const float *x = o1 + b * s1[0] + h * s1[1] + i * s1[2];
                const float *y = o2 + b * s2[0] + h * s2[1] + i * s2[2];
                float *z = o + b * so[0] + h * so[1] + i * so[2];
                if (w.nan || w.zero) fill_row(z, so[3], w.nan ? NAN : 0.0f, Dv);
                else if (w.w2 == 0.0) copy_row(z, so[3], x, s1[3], Dv); /* exact, also where out2 is junk */
                else if (w.w1 == 0.0) copy_row(z, so[3], y, s2[3], Dv);
                else mix_row(z, so[3], x, s1[3], w.w1, y, s2[3], w.w2, Dv);
                if (l) {
                    float *q = l + b * tl[0] + h * tl[1] + i * tl[2];
                    q[0] = (float)r0;
                    if (stats) q[ul] = (float)r1;
                }
            }
    attn_ok(err);
    return ATTN_OK;
}
