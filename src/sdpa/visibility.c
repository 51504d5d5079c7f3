/* Which keys a query row sees and what is added to their scores, for every
 * path: the reference asks per element, the fused path per tile. */
#include "fused_util.h"

#include "../core/philox.h"

void sdpa_key_rows(const sdpa_problem *p, int64_t j0, int64_t j1, int64_t *first, int64_t *last)
{
    /* hi(i) > j0 holds from some row on and lo(i) < j1 up to some row (both
     * bounds are monotone): two binary searches. */
    int64_t a = 0, b = p->Nq, lo, hi;
    while (a < b) {
        const int64_t m = a + (b - a) / 2;
        sdpa_row_keys(p, m, &lo, &hi);
        if (hi > j0) b = m; else a = m + 1;
    }
    *first = a;
    b = p->Nq;
    while (a < b) {
        const int64_t m = a + (b - a) / 2;
        sdpa_row_keys(p, m, &lo, &hi);
        if (lo < j1) a = m + 1; else b = m;
    }
    *last = a;
}

/* ALiBi's -slope·|i + Nk - Nq - j| for row i, key j. */
static inline float alibi_bias(const sdpa_problem *p, float slope, int64_t i, int64_t j)
{
    const int64_t d = i + p->Nk - p->Nq - j;
    return -slope * (float)(d < 0 ? -d : d);
}

static inline float alibi_slope(const sdpa_problem *p, int64_t b, int64_t h)
{
    return p->alibi[b * p->alibi_s[0] + h * p->alibi_s[1]];
}

float sdpa_key_bias(const sdpa_problem *p, int64_t b, int64_t h, int64_t i, int64_t j)
{
    float bias = p->alibi ? alibi_bias(p, alibi_slope(p, b, h), i, j) : 0.0f;
    for (int m = 0; m < p->nmask; ++m) {
        const sdpa_mask *mk = &p->mask[m];
        const int64_t off = b * mk->stride[0] + h * mk->stride[1] + i * mk->stride[2] +
                            j * mk->stride[3];
        if (mk->dtype == ATTN_BOOL) {
            if (!((const uint8_t *)mk->data)[off]) return -INFINITY;
        } else {
            bias += ((const float *)mk->data)[off];
        }
    }
    return bias;
}

bool sdpa_key_visible(const sdpa_problem *p, int64_t b, int64_t h, int64_t i, int64_t j)
{
    int64_t lo, hi;
    sdpa_row_keys(p, i, &lo, &hi);
    return j >= lo && j < hi && sdpa_key_bias(p, b, h, i, j) != -INFINITY;
}

float sdpa_softcap_tanh(const sdpa_problem *p, float s)
{
    return tanhf(s * p->scale * sdpa_inv_softcap(p));
}

float sdpa_capped_logit(const sdpa_problem *p, float s)
{
    return p->softcap > 0.0f ? p->softcap * sdpa_softcap_tanh(p, s) : s * p->scale;
}

/* Bias of all masks for row i over keys [j0, j0+n) into out (added to what
 * out holds when accumulate); returns one past the last visible column;
 * *irregular as for sdpa_mask_row_fn. */
static int64_t mask_bias_row(const sdpa_problem *p, const sdpa_kernels *kern, int64_t b,
                             int64_t h, int64_t i, int64_t j0, int64_t n, float *out,
                             bool accumulate, bool *irregular)
{
    int64_t last = 0;
    for (int m = 0; m < p->nmask; ++m) {
        const sdpa_mask *mk = &p->mask[m];
        const int64_t off = b * mk->stride[0] + h * mk->stride[1] + i * mk->stride[2] +
                            j0 * mk->stride[3];
        const void *src = mk->dtype == ATTN_BOOL ? (const void *)((const uint8_t *)mk->data + off)
                                                 : (const void *)((const float *)mk->data + off);
        /* Each call reports on the bias combined so far; the last one counts. */
        last = kern->mask_row(out, src, mk->stride[3], mk->dtype, n, accumulate || m > 0,
                              irregular);
    }
    return last;
}

sdpa_tile sdpa_plan_tile(const sdpa_problem *p, const sdpa_kernels *kern, int64_t b, int64_t h,
                         int64_t i0, int64_t mi, int64_t j0, int64_t nj, int32_t *start,
                         int32_t *end, float *bias, int64_t ld)
{
    sdpa_tile t = {.c0 = nj, .cols = 0, .use_bias = false, .ldbias = ld, .ragged = false,
                   .alibi = 0.0f, .alibi_d0 = 0};
    /* Row r is query row (i0 + r) % Nq of head h + (i0 + r) / Nq: a block of
     * one head's rows, or the stacked rows of a GQA group (decode). */
    const bool one_head = (i0 + mi - 1) / p->Nq == i0 / p->Nq;
    /* Within one head the bounds are monotone in the row: equal at both
     * ends, equal for all. */
    int64_t lo0, hi0, lo1, hi1;
    sdpa_row_keys(p, i0 % p->Nq, &lo0, &hi0);
    sdpa_row_keys(p, (i0 + mi - 1) % p->Nq, &lo1, &hi1);
    if (one_head && (hi1 <= j0 || lo0 >= j0 + nj)) { /* no row reaches the tile */
        t.c0 = 0;
        return t;
    }
    const bool same = one_head && lo0 == lo1 && hi0 == hi1;
    /* ... and when the last row starts and the first row ends outside the
     * tile, every row sees all of it (most tiles of a causal call). */
    const bool whole = one_head && lo1 <= j0 && hi0 >= j0 + nj;
    const int64_t i_first = i0 % p->Nq; /* one head: row r is query row i_first + r */
    for (int64_t r = 0; r < mi; ++r) {
        int64_t lo = lo0, hi = hi0;
        if (!same && !whole)
            sdpa_row_keys(p, one_head ? i_first + r : (i0 + r) % p->Nq, &lo, &hi);
        lo -= j0, hi -= j0;
        lo = lo < 0 ? 0 : lo > nj ? nj : lo;
        hi = hi < lo ? lo : hi > nj ? nj : hi;
        start[r] = (int32_t)lo, end[r] = (int32_t)hi;
    }
    if ((same || whole) && p->nmask == 0 && !p->alibi) { /* every row [start[0], end[0]) */
        if (mi > 0 && end[0] > start[0]) {
            t.c0 = start[0];
            t.cols = end[0];
            t.ragged = t.c0 % kern->npad != 0; /* columns below c0 hidden from every row */
        } else {
            t.c0 = 0;
        }
        return t;
    }

    if (p->alibi && p->nmask == 0 && one_head) {
        /* ALiBi alone: the kernels add -slope·|i + Nk - Nq - j| themselves. */
        t.alibi = alibi_slope(p, b, h + i0 / p->Nq);
        t.alibi_d0 = (int32_t)(i0 % p->Nq + p->Nk - p->Nq - j0);
    } else if (p->nmask > 0 || p->alibi) {
        /* one bias row when every mask broadcasts over the tile's rows */
        bool rows_shared = !p->alibi;
        for (int m = 0; m < p->nmask; ++m)
            rows_shared &= (p->mask[m].stride[2] == 0 || mi == 1) &&
                           (p->mask[m].stride[1] == 0 || one_head);
        if (rows_shared) {
            int64_t r = 0;
            while (r < mi && end[r] <= start[r]) ++r;
            if (r < mi) {
                bool irregular = false;
                const int64_t g = i0 + r;
                const int64_t last = mask_bias_row(p, kern, b, h + g / p->Nq, g % p->Nq, j0, nj,
                                                   bias, false, &irregular);
                t.ldbias = 0;
                t.use_bias = irregular;
                t.ragged = irregular;
                for (r = 0; r < mi; ++r)
                    if (end[r] > last) end[r] = (int32_t)(last > start[r] ? last : start[r]);
            }
        } else {
            for (int64_t r = 0; r < mi; ++r) {
                if (end[r] <= start[r]) continue;
                const int64_t g = i0 + r, hh = h + g / p->Nq, ii = g % p->Nq;
                float *br = bias + r * ld;
                bool irregular = p->alibi != NULL;
                if (p->alibi) /* -slope·|i + Nk - Nq - j| */
                    kern->alibi_row(br, alibi_slope(p, b, hh), (int32_t)(ii + p->Nk - p->Nq - j0),
                                    end[r]);
                if (p->nmask > 0) {
                    bool masked = false;
                    const int64_t last = mask_bias_row(p, kern, b, hh, ii, j0, end[r], br,
                                                       p->alibi != NULL, &masked);
                    irregular |= masked;
                    t.ragged |= masked;
                    if (end[r] > last) end[r] = (int32_t)(last > start[r] ? last : start[r]);
                }
                t.use_bias |= irregular;
            }
        }
    }

    for (int64_t r = 0; r < mi; ++r) {
        if (end[r] <= start[r]) continue;
        if (start[r] < t.c0) t.c0 = start[r];
        if (end[r] > t.cols) t.cols = end[r];
    }
    if (t.cols == 0) {
        t.c0 = 0;
        return t;
    }
    /* The kernels start at c0 rounded down to npad: columns below t.c0 are
     * hidden for every row. */
    t.ragged |= t.c0 % kern->npad != 0;
    for (int64_t r = 0; r < mi && !t.ragged; ++r) t.ragged = start[r] != t.c0 || end[r] != t.cols;
    return t;
}

/* ------------------------------------------------------------- dropout */

static inline void dropout_words(const sdpa_problem *p, int64_t b, int64_t h, int64_t i,
                                 int64_t j4, uint32_t out[4])
{
    const uint32_t c[4] = {(uint32_t)j4, (uint32_t)i, (uint32_t)(b * p->Hq + h),
                           (uint32_t)p->dropout_offset};
    const uint32_t k[2] = {(uint32_t)p->dropout_seed,
                           (uint32_t)(p->dropout_seed >> 32) ^ (uint32_t)(p->dropout_offset >> 32)};
    attn_philox4x32(c, k, out);
}

float sdpa_dropout_factor(const sdpa_problem *p, int64_t b, int64_t h, int64_t i, int64_t j)
{
    uint32_t w[4];
    dropout_words(p, b, h, i, j / 4, w);
    return w[j % 4] >= p->dropout_keep ? p->dropout_scale : 0.0f;
}

void sdpa_dropout_tile(const sdpa_problem *p, const sdpa_kernels *kern, int64_t b, int64_t h,
                       int64_t i0, int64_t mi, int64_t j0, int64_t c0, int64_t n, float *s,
                       int64_t lds, float *z)
{
    const sdpa_dropout_args d = {
        .key = {(uint32_t)p->dropout_seed,
                (uint32_t)(p->dropout_seed >> 32) ^ (uint32_t)(p->dropout_offset >> 32)},
        .bh = (uint32_t)(b * p->Hq + h),
        .ctr3 = (uint32_t)p->dropout_offset,
        .keep = p->dropout_keep,
        .scale = p->dropout_scale,
    };
    kern->dropout(&d, mi, i0, j0, c0, n, s, lds, z);
}

/* --------------------------------------------------------------- ALiBi */

attn_status attn_alibi_slopes(int64_t heads, float *out, attn_error *err)
{
    RETURN_IF(heads < 1, err, ATTN_ERR_ARG, "heads: must be >= 1, got %lld", (long long)heads);
    RETURN_IF(!out, err, ATTN_ERR_NULL, "out: pointer is NULL");
    int64_t n = 1;
    while (n * 2 <= heads) n *= 2;
    /* 2^(-8(h+1)/n) for the first n heads, then every other slope of the
     * 2n-head sequence, 2^(-8(2j+1)/(2n)). */
    for (int64_t h = 0; h < n; ++h) out[h] = (float)exp2(-8.0 * (double)(h + 1) / (double)n);
    for (int64_t j = 0; n + j < heads; ++j)
        out[n + j] = (float)exp2(-8.0 * (double)(2 * j + 1) / (double)(2 * n));
    attn_ok(err);
    return ATTN_OK;
}

void sdpa_add_zero_terms(const sdpa_logits *vis, const uint8_t *flags, uint8_t skip, bool by_key,
                         int64_t m, int64_t n, int64_t k, const float *a, int64_t a_rs,
                         int64_t a_cs, int64_t i0, int64_t l0, const float *b, int64_t ldb,
                         float *c, int64_t ldc)
{
    for (int64_t l = 0; l < k; ++l) {
        const float *bl = b + l * ldb;
        if (sdpa_rows_finite(bl, 0, 1, 1, n)) continue;
        for (int64_t i = 0; i < m; ++i) {
            const int64_t r = by_key ? l0 + l : i0 + i, col = by_key ? i0 + i : l0 + l;
            if (a[i * a_rs + l * a_cs] != 0.0f || (flags && flags[r] & skip) ||
                col < vis->start[r] || col >= vis->end[r] ||
                (vis->bias && vis->bias[r * vis->ldbias + col] == -INFINITY))
                continue;
            for (int64_t x = 0; x < n; ++x)
                if (!isfinite(bl[x])) c[i * ldc + x] += 0.0f * bl[x];
        }
    }
}
