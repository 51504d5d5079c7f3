/* Tile visibility for the fused path: which keys of a tile each query row
 * may see, and the additive bias the masks put on them. */
#include "problem.h"

/* Bias of all masks for row i over keys [j0, j0+n) into out; returns one past
 * the last visible column; *irregular as for sdpa_mask_row_fn. */
static int64_t mask_bias_row(const sdpa_problem *p, const sdpa_kernels *kern, int64_t b,
                             int64_t h, int64_t i, int64_t j0, int64_t n, float *out,
                             bool *irregular)
{
    int64_t last = 0;
    for (int m = 0; m < p->nmask; ++m) {
        const sdpa_mask *mk = &p->mask[m];
        const int64_t off = b * mk->stride[0] + h * mk->stride[1] + i * mk->stride[2] +
                            j0 * mk->stride[3];
        const void *src = mk->dtype == ATTN_BOOL ? (const void *)((const uint8_t *)mk->data + off)
                                                 : (const void *)((const float *)mk->data + off);
        /* Each call reports on the bias combined so far; the last one counts. */
        last = kern->mask_row(out, src, mk->stride[3], mk->dtype, n, m > 0, irregular);
    }
    return last;
}

sdpa_tile sdpa_plan_tile(const sdpa_problem *p, const sdpa_kernels *kern, int64_t b, int64_t h,
                         int64_t i0, int64_t mi, int64_t j0, int64_t nj, int32_t *limit,
                         float *bias, int64_t ld)
{
    sdpa_tile t = {.cols = 0, .use_bias = false, .ldbias = ld};
    for (int64_t r = 0; r < mi; ++r) {
        int64_t end = sdpa_causal_end(p, i0 + r) - j0;
        end = end < 0 ? 0 : end > nj ? nj : end;
        limit[r] = (int32_t)end;
        if (end > t.cols) t.cols = end;
    }
    if (p->nmask == 0 || t.cols == 0) return t;

    bool rows_shared = true; /* every mask broadcasts over query rows */
    for (int m = 0; m < p->nmask; ++m) rows_shared &= p->mask[m].stride[2] == 0 || mi == 1;
    if (rows_shared) {
        /* One bias row for the whole tile (key padding masks and the like). */
        bool irregular = false;
        const int64_t last = mask_bias_row(p, kern, b, h, i0, j0, nj, bias, &irregular);
        t.ldbias = 0;
        t.use_bias = irregular;
        t.cols = 0;
        for (int64_t r = 0; r < mi; ++r) {
            if (limit[r] > last) limit[r] = (int32_t)last;
            if (limit[r] > t.cols) t.cols = limit[r];
        }
        return t;
    }
    t.cols = 0;
    for (int64_t r = 0; r < mi; ++r) {
        if (limit[r] == 0) continue;
        bool irregular = false;
        limit[r] = (int32_t)mask_bias_row(p, kern, b, h, i0 + r, j0, limit[r], bias + r * ld,
                                          &irregular);
        t.use_bias |= irregular;
        if (limit[r] > t.cols) t.cols = limit[r];
    }
    return t;
}
