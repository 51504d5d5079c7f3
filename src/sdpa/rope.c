/*
 * Rotary position embeddings (attn/sdpa.h, attn_rope): the checks and the
 * rotation of rows at given positions, shared by attn_rope_apply and the KV
 * cache's rotary appends and queries.
 */
#include "../core/half.h"
#include "../core/internal.h"
#include "rope.h"

#include <math.h>
#include <stdlib.h>

attn_status attn_rope_check(const attn_rope *rope, int64_t D, int64_t max_pos, attn_error *err)
{
    RETURN_IF(!rope, err, ATTN_ERR_NULL, "rope: pointer is NULL");
    RETURN_IF(rope->style != ATTN_ROPE_NEOX && rope->style != ATTN_ROPE_GPTJ, err, ATTN_ERR_ARG,
              "rope: style must be ATTN_ROPE_NEOX or ATTN_ROPE_GPTJ, got %d", (int)rope->style);
    const int64_t rd = rope->rotary_dim ? rope->rotary_dim : D;
    RETURN_IF(rd < 2 || rd > D || rd % 2, err, ATTN_ERR_ARG,
              "rope: rotary_dim %lld must be even and in [2, D = %lld]", (long long)rd,
              (long long)D);
    RETURN_IF(!(rope->theta >= 0.0) || !isfinite(rope->theta) || rope->theta == 1.0, err,
              ATTN_ERR_ARG, "rope: theta must be finite, > 0 and not 1 (0 = 10000), got %g",
              rope->theta);
    RETURN_IF(!(rope->position_scale >= 0.0) || !isfinite(rope->position_scale), err,
              ATTN_ERR_ARG, "rope: position_scale must be finite and > 0 (0 = 1), got %g",
              rope->position_scale);
    RETURN_IF(!rope->cos != !rope->sin, err, ATTN_ERR_ARG,
              "rope: cos and sin tables come together");
    for (int which = 0; rope->cos && which < 2; ++which) {
        const attn_tensor *t = which ? rope->sin : rope->cos;
        const char *name = which ? "rope sin" : "rope cos";
        RETURN_IF_ERROR(attn_check_tensor(t, name, 2, ATTN_F32, false, err));
        RETURN_IF(t->shape[1] != rd / 2, err, ATTN_ERR_SHAPE,
                  "%s: %lld columns, rotary_dim / 2 is %lld", name, (long long)t->shape[1],
                  (long long)(rd / 2));
        RETURN_IF(t->shape[0] <= max_pos, err, ATTN_ERR_SHAPE,
                  "%s: %lld positions, position %lld is needed", name, (long long)t->shape[0],
                  (long long)max_pos);
    }
    return ATTN_OK;
}

attn_status attn_rope_check_call(const attn_rope *rope, int64_t D, int64_t offset, int64_t Nq,
                                 int64_t Nk, attn_error *err)
{
    RETURN_IF(!rope, err, ATTN_ERR_NULL, "rope: pointer is NULL");
    RETURN_IF(offset < 0 || offset > INT64_MAX - Nk, err, ATTN_ERR_ARG,
              "rope_offset: must be >= 0 (and leave room for %lld keys), got %lld",
              (long long)Nk, (long long)offset);
    int64_t qpos, kpos, pos0, npos;
    attn_rope_positions(offset, Nq, Nk, &qpos, &kpos, &pos0, &npos);
    RETURN_IF(rope->cos && pos0 < 0, err, ATTN_ERR_ARG,
              "rope_offset: query row 0 sits at position %lld (rope_offset + Nk - Nq), before "
              "the cos/sin tables' first",
              (long long)pos0);
    return attn_rope_check(rope, D, npos > 0 ? pos0 + npos - 1 : 0, err);
}

/* The pair of feature i: (i, i + half) for GPT-NeoX, (2i, 2i + 1) for GPT-J. */
static void pair(attn_rope_style style, int64_t half, int64_t i, int64_t *i0, int64_t *i1)
{
    *i0 = style == ATTN_ROPE_GPTJ ? 2 * i : i;
    *i1 = style == ATTN_ROPE_GPTJ ? 2 * i + 1 : i + half;
}

/* theta^(-2i / rd): the angle of pair i per unit of (scaled) position. */
static double frequency(const attn_rope *rope, int64_t rd, int64_t i)
{
    const double theta = rope->theta > 0.0 ? rope->theta : 10000.0;
    return pow(theta, -2.0 * (double)i / (double)rd);
}

/* The position the angles multiply: pos / position_scale. */
static double scaled_position(const attn_rope *rope, int64_t pos)
{
    return (double)pos / (rope->position_scale > 0.0 ? rope->position_scale : 1.0);
}

/* cos and sin of pair i at pos, from the tables or the base. */
static void angle(const attn_rope *rope, int64_t rd, int64_t pos, int64_t i, float *c, float *s)
{
    if (rope->cos) {
        *c = ((const float *)rope->cos->data)[pos * rope->cos->stride[0] + i * rope->cos->stride[1]];
        *s = ((const float *)rope->sin->data)[pos * rope->sin->stride[0] + i * rope->sin->stride[1]];
        return;
    }
    const double a = scaled_position(rope, pos) * frequency(rope, rd, i);
    *c = (float)cos(a);
    *s = (float)sin(a);
}

void attn_rope_row(const attn_rope *rope, int64_t pos, float *x, int64_t D)
{
    const int64_t rd = rope->rotary_dim ? rope->rotary_dim : D, half = rd / 2;
    for (int64_t i = 0; i < half; ++i) {
        float c, s;
        angle(rope, rd, pos, i, &c, &s);
        int64_t i0, i1;
        pair(rope->style, half, i, &i0, &i1);
        const float u = x[i0], v = x[i1];
        x[i0] = u * c - v * s;
        x[i1] = u * s + v * c;
    }
}

void attn_rope_frequencies(const attn_rope *rope, int64_t D, double *freq)
{
    const int64_t rd = rope->rotary_dim ? rope->rotary_dim : D;
    for (int64_t i = 0; !rope->cos && i < rd / 2; ++i) freq[i] = frequency(rope, rd, i);
}

void attn_rope_angles(const attn_rope *rope, int64_t D, const double *freq, int64_t pos, float *c,
                      float *s)
{
    const int64_t rd = rope->rotary_dim ? rope->rotary_dim : D, half = rd / 2;
    if (rope->cos) {
        for (int64_t i = 0; i < half; ++i) angle(rope, rd, pos, i, &c[i], &s[i]);
        return;
    }
    const double p = scaled_position(rope, pos);
    for (int64_t i = 0; i < half; ++i) { /* the values angle() gives, one pow per pair */
        const double a = p * freq[i];
        c[i] = (float)cos(a);
        s[i] = (float)sin(a);
    }
}

void attn_rope_turn(attn_rope_style style, int64_t half, const float *c, const float *s,
                    bool inverse, float *x, int64_t stride)
{
    for (int64_t i = 0; i < half; ++i) {
        int64_t i0, i1;
        pair(style, half, i, &i0, &i1);
        const float u = x[i0 * stride], v = x[i1 * stride], si = inverse ? -s[i] : s[i];
        x[i0 * stride] = u * c[i] - v * si;
        x[i1 * stride] = u * si + v * c[i];
    }
}

attn_status attn_rope_apply(const attn_rope *rope, attn_tensor *x, const int64_t *positions,
                            attn_error *err)
{
    RETURN_IF_ERROR(attn_check_float_tensor(x, "x", 4, true, err));
    const int64_t B = x->shape[0], H = x->shape[1], N = x->shape[2], D = x->shape[3];
    int64_t max_pos = N > 0 ? N - 1 : 0;
    for (int64_t b = 0; positions && b < B; ++b) {
        RETURN_IF(positions[b] < 0 || positions[b] > INT64_MAX - N, err, ATTN_ERR_ARG,
                  "positions[%lld]: %lld is negative or too large", (long long)b,
                  (long long)positions[b]);
        if (positions[b] + N - 1 > max_pos) max_pos = positions[b] + N - 1;
    }
    RETURN_IF_ERROR(attn_rope_check(rope, D, max_pos, err));
    float *row = malloc((size_t)(D > 0 ? D : 1) * sizeof *row);
    RETURN_IF(!row, err, ATTN_ERR_ALLOC, "rope: cannot allocate a row");
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t n = 0; n < N; ++n) {
                const int64_t at = b * x->stride[0] + h * x->stride[1] + n * x->stride[2];
                for (int64_t d = 0; d < D; ++d)
                    row[d] = attn_load_float(x->data, x->dtype, at + d * x->stride[3]);
                attn_rope_row(rope, (positions ? positions[b] : 0) + n, row, D);
                for (int64_t d = 0; d < D; ++d)
                    attn_store_float(x->data, x->dtype, at + d * x->stride[3], row[d]);
            }
    free(row);
    attn_ok(err);
    return ATTN_OK;
}
