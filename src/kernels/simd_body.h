/*
 * The SIMD kernels, written once and instantiated per instruction set by
 * avx2.c and avx512.c (one body, parameterised by vector width). The
 * including file compiles this under its target attribute and defines:
 *
 *   vf                         the float vector type, VW lanes
 *   VW, MR, NV                 lanes; microkernel rows; vectors per row
 *                              (a microtile is MR x NV·VW, NV·VW == npad)
 *   SIMD(name)                 prefixes names with the ISA
 *   V_ZERO() V_SET1(x) V_LOAD(p) V_STORE(p,v) V_BCAST(p)
 *   V_ADD V_SUB V_MUL V_MAX V_FMA(a,b,c)=a·b+c V_FNMA(a,b,c)=c-a·b
 *   V_RCP(a)                   approximate reciprocal (error bound in the ISA file)
 *   v_exp(vf)                  the exp documented in kernels.h
 *   v_exp_nonpos(vf)           the same for x <= 0, -inf or NaN only (cheaper)
 *   vmask, V_CMP_EQ V_CMP_GE (ordered), V_BLEND(m, a, b) = m ? b : a,
 *   v_any(vmask)               whether any lane is set
 *   V_ABS, v_copysign(mag, sign)
 *   v_cols_outside(c0, lo, hi) lanes whose column c0+lane is not in [lo, hi)
 *   v_hmax_rows(x), v_hsum_rows(x)   horizontal max / sum of each of the VW
 *                              vectors x[], lane i of the result for x[i]
 *                              (a fixed tree per row)
 *   v_hsum4(a, b, c, d)        the four horizontal sums in one v4f, each by
 *                              the same fixed tree
 *   v4f, V4_STORE(p, v)        a 4-float vector (v_hsum4's result), and
 *   v8f, SIMD(load8), SIMD(transpose8_rows)   an 8-float row of an 8 × 8
 *                              block transpose: the x86 ones below (__m128,
 *                              __m256), unless the ISA file defines
 *                              SIMD_HAVE_BLOCK8 and its own
 *   EXP_K, WIDE_ROWS, SCORES_KEYS   register blocking (defaults below, sized
 *                              for 16 ymm / 32 zmm), when the ISA file sets them
 *   v_bool_bias(const uint8_t *p)   VW mask bytes -> 0 (true) / -inf (false)
 *   v_hidden_bits(vf), v_nonzero_visible_bits(vf)   lane bitmasks
 *
 * Rows are always handled whole and in a fixed order, so results depend
 * only on the inputs, never on threads.
 */

#define NR (NV * VW) /* microtile columns */

/*
 * Microtile: C[rows × nv·VW] ⊕= A[rows × k] · B[k × nv·VW], accumulators in
 * registers, for rows <= mr <= MR (mr and nv compile-time constants at
 * every call site, so each instance keeps only mr × nv accumulators; nv is
 * NV, or 2·NV for up to WIDE_ROWS rows). Missing rows reuse the last valid
 * row's A (always readable) and are not stored. Each stored element's sum
 * runs over l in the same order for every mr and nv: the choice of
 * instance never changes a bit. With vmax (gemm_max, SET only), each stored
 * row's lane maxima are folded into vmax[r·SDPA_MAX_VW], starting from -inf
 * in the first column panel (vmax_first).
 */
/* One vector of B's row: float32, or 16-bit widened exactly (bt is a
 * compile-time constant at every call site). */
static inline __attribute__((always_inline)) vf SIMD(load_b)(const void *b, int64_t at,
                                                              attn_dtype bt)
{
    if (bt == ATTN_BF16) return V_LOAD_BF16((const uint16_t *)b + at);
    if (bt == ATTN_F16) return V_LOAD_F16((const uint16_t *)b + at);
    return V_LOAD((const float *)b + at);
}

static inline __attribute__((always_inline)) void
SIMD(microtile)(int64_t k, const float *a, int64_t a_rs, int64_t a_cs, const void *b,
                attn_dtype bt, int64_t ldb, float *c, int64_t ldc, int64_t rows,
                const float *row_scale, sdpa_gemm_mode mode, float *vmax, bool vmax_first,
                const int mr, const int nv)
{
    vf acc[MR][2 * NV];
    const float *ar[MR];
    for (int r = 0; r < mr; ++r) {
        ar[r] = a + (r < rows ? r : rows - 1) * a_rs;
        for (int v = 0; v < nv; ++v) acc[r][v] = V_ZERO();
    }
    for (int64_t l = 0; l < k; ++l) {
        vf bv[2 * NV];
        for (int v = 0; v < nv; ++v) bv[v] = SIMD(load_b)(b, l * ldb + v * VW, bt);
        const int64_t off = l * a_cs;
        for (int r = 0; r < mr; ++r) {
            const vf x = V_BCAST(ar[r] + off);
            for (int v = 0; v < nv; ++v) acc[r][v] = V_FMA(x, bv[v], acc[r][v]);
        }
    }
    for (int r = 0; r < mr; ++r) {
        if (r >= rows) break;
        float *cr = c + r * ldc;
        if (mode == SDPA_GEMM_SET) {
            for (int v = 0; v < nv; ++v) V_STORE(cr + v * VW, acc[r][v]);
            if (vmax) { /* gemm_max: the row's lane maxima, in column order */
                vf vm = vmax_first ? V_SET1(-INFINITY) : V_LOAD(vmax + r * SDPA_MAX_VW);
                for (int v = 0; v < nv; ++v) vm = V_MAX(vm, acc[r][v]);
                V_STORE(vmax + r * SDPA_MAX_VW, vm);
            }
        } else if (mode == SDPA_GEMM_ADD) {
            for (int v = 0; v < nv; ++v) V_STORE(cr + v * VW, V_ADD(V_LOAD(cr + v * VW), acc[r][v]));
        } else {
            const vf s = V_SET1(row_scale[r]);
            for (int v = 0; v < nv; ++v)
                V_STORE(cr + v * VW, V_FMA(V_LOAD(cr + v * VW), s, acc[r][v]));
        }
    }
}

/* Rows of accumulators a 2·NV-wide microtile may have: its accumulators, the
 * 2·NV B vectors and a broadcast fit the register file (32 zmm, 16 ymm). A
 * few rows then read B twice as wide per broadcast of A, with twice the
 * independent sums in flight (a decoding step's P·V: 4 rows). */
#ifndef WIDE_ROWS
#define WIDE_ROWS (VW == 16 ? 4 : 2)
#endif

/* One microtile of `rows` rows with the smallest instance that holds them
 * (1, 2, 4 or MR rows of accumulators) and nv vectors (NV, or NV/2 for a
 * last half panel): a decoding step's one to four stacked rows do not pay for MR. */
static inline __attribute__((always_inline)) void
SIMD(microtile_fit)(int64_t k, const float *a, int64_t a_rs, int64_t a_cs, const void *b,
                    attn_dtype bt, int64_t ldb, float *c, int64_t ldc, int64_t rows,
                    const float *row_scale, sdpa_gemm_mode mode, float *vmax, bool vmax_first,
                    const int nv)
{
    if (rows == 1)
        SIMD(microtile)(k, a, a_rs, a_cs, b, bt, ldb, c, ldc, rows, row_scale, mode, vmax,
                        vmax_first, 1, nv);
    else if (rows == 2)
        SIMD(microtile)(k, a, a_rs, a_cs, b, bt, ldb, c, ldc, rows, row_scale, mode, vmax,
                        vmax_first, 2, nv);
    else if (rows <= 4)
        SIMD(microtile)(k, a, a_rs, a_cs, b, bt, ldb, c, ldc, rows, row_scale, mode, vmax,
                        vmax_first, 4, nv);
    else
        SIMD(microtile)(k, a, a_rs, a_cs, b, bt, ldb, c, ldc, rows, row_scale, mode, vmax,
                        vmax_first, MR, nv);
}

/* The same, two column panels at once, for rows <= WIDE_ROWS. */
static inline __attribute__((always_inline)) void
SIMD(microtile_wide)(int64_t k, const float *a, int64_t a_rs, int64_t a_cs, const void *b,
                     attn_dtype bt, int64_t ldb, float *c, int64_t ldc, int64_t rows,
                     const float *row_scale, sdpa_gemm_mode mode, float *vmax,
                     bool vmax_first)
{
    if (rows == 1)
        SIMD(microtile)(k, a, a_rs, a_cs, b, bt, ldb, c, ldc, rows, row_scale, mode, vmax,
                        vmax_first, 1, 2 * NV);
    else if (rows == 2)
        SIMD(microtile)(k, a, a_rs, a_cs, b, bt, ldb, c, ldc, rows, row_scale, mode, vmax,
                        vmax_first, 2, 2 * NV);
    else
        SIMD(microtile)(k, a, a_rs, a_cs, b, bt, ldb, c, ldc, rows, row_scale, mode, vmax,
                        vmax_first, WIDE_ROWS, 2 * NV);
}

/* The GEMM body for B of dtype bt (a compile-time constant). Column panels
 * outer: the k × NR panel of B stays in L1 across rows. Unit a_cs (A rows
 * contiguous) gets its own instance: one index register then walks all MR
 * rows. */
static inline __attribute__((always_inline)) void
SIMD(gemm_b)(int64_t m, int64_t n, int64_t k, const float *a, int64_t a_rs, int64_t a_cs,
             const void *b, attn_dtype bt, int64_t ldb, float *c, int64_t ldc,
             const float *row_scale, sdpa_gemm_mode mode, float *vmax)
{
    if (m <= 0) return;
    const size_t es = bt == ATTN_F32 ? sizeof(float) : sizeof(uint16_t);
    int64_t j0 = 0;
    if (m <= WIDE_ROWS)
        for (; j0 + 2 * NR <= n; j0 += 2 * NR) {
            const void *bj = (const char *)b + (size_t)j0 * es;
            if (a_cs == 1)
                SIMD(microtile_wide)(k, a, a_rs, 1, bj, bt, ldb, c + j0, ldc, m, row_scale, mode,
                                     vmax, j0 == 0);
            else
                SIMD(microtile_wide)(k, a, a_rs, a_cs, bj, bt, ldb, c + j0, ldc, m, row_scale,
                                     mode, vmax, j0 == 0);
        }
    for (int64_t j = j0; j < n; j += NR) {
        const bool half = n - j < NR; /* the last NR/2 columns: NV/2 vectors per row */
        for (int64_t i = 0; i < m; i += MR) {
            const int64_t rows = m - i < MR ? m - i : MR;
            const float *rs = row_scale ? row_scale + i : NULL;
            float *vm = vmax ? vmax + i * SDPA_MAX_VW : NULL;
            const void *bj = (const char *)b + (size_t)j * es;
            float *cij = c + i * ldc + j;
            if (a_cs == 1 && !half)
                SIMD(microtile_fit)(k, a + i * a_rs, a_rs, 1, bj, bt, ldb, cij, ldc, rows, rs,
                                    mode, vm, j == 0, NV);
            else if (a_cs == 1)
                SIMD(microtile_fit)(k, a + i * a_rs, a_rs, 1, bj, bt, ldb, cij, ldc, rows, rs,
                                    mode, vm, j == 0, NV / 2);
            else if (!half)
                SIMD(microtile_fit)(k, a + i * a_rs, a_rs, a_cs, bj, bt, ldb, cij, ldc, rows, rs,
                                    mode, vm, j == 0, NV);
            else
                SIMD(microtile_fit)(k, a + i * a_rs, a_rs, a_cs, bj, bt, ldb, cij, ldc, rows, rs,
                                    mode, vm, j == 0, NV / 2);
        }
    }
}

static void SIMD(gemm)(int64_t m, int64_t n, int64_t k, const float *a, int64_t a_rs,
                       int64_t a_cs, const float *b, int64_t ldb, float *c, int64_t ldc,
                       const float *row_scale, sdpa_gemm_mode mode)
{
    /* one instance per mode: the mode a compile-time constant in each */
    if (mode == SDPA_GEMM_SET)
        SIMD(gemm_b)(m, n, k, a, a_rs, a_cs, b, ATTN_F32, ldb, c, ldc, NULL, SDPA_GEMM_SET, NULL);
    else if (mode == SDPA_GEMM_ADD)
        SIMD(gemm_b)(m, n, k, a, a_rs, a_cs, b, ATTN_F32, ldb, c, ldc, NULL, SDPA_GEMM_ADD, NULL);
    else
        SIMD(gemm_b)(m, n, k, a, a_rs, a_cs, b, ATTN_F32, ldb, c, ldc, row_scale,
                     SDPA_GEMM_SCALE_ADD, NULL);
}

static void SIMD(gemm_max)(int64_t m, int64_t n, int64_t k, const float *a, int64_t a_rs,
                           int64_t a_cs, const float *b, int64_t ldb, float *c, int64_t ldc,
                           float *vmax)
{
    SIMD(gemm_b)(m, n, k, a, a_rs, a_cs, b, ATTN_F32, ldb, c, ldc, NULL, SDPA_GEMM_SET, vmax);
}

static void SIMD(gemm16)(attn_dtype bt, int64_t m, int64_t n, int64_t k, const float *a,
                         int64_t a_rs, int64_t a_cs, const uint16_t *b, int64_t ldb, float *c,
                         int64_t ldc, const float *row_scale, sdpa_gemm_mode mode)
{
    if (bt == ATTN_BF16)
        SIMD(gemm_b)(m, n, k, a, a_rs, a_cs, b, ATTN_BF16, ldb, c, ldc, row_scale, mode, NULL);
    else
        SIMD(gemm_b)(m, n, k, a, a_rs, a_cs, b, ATTN_F16, ldb, c, ldc, row_scale, mode, NULL);
}

/* First lane of v_exp: scalar exp with the same error bound. */
static inline float SIMD(exp1)(float x)
{
    float out[VW];
    V_STORE(out, v_exp(V_SET1(x)));
    return out[0];
}

/* tanh as documented in kernels.h (the generic kernel's tanh_generic, with
 * a refined reciprocal for its quotient). */
static inline vf SIMD(tanh)(vf y)
{
    const vf a = V_ABS(y), z = V_MUL(a, a);
    vf q = V_SET1(SDPA_TANH_P4);
    q = V_FMA(q, z, V_SET1(SDPA_TANH_P3));
    q = V_FMA(q, z, V_SET1(SDPA_TANH_P2));
    q = V_FMA(q, z, V_SET1(SDPA_TANH_P1));
    q = V_FMA(q, z, V_SET1(SDPA_TANH_P0));
    vf t = V_FMA(V_MUL(a, z), q, a);
    const vmask big = V_CMP_GE(a, V_SET1(SDPA_TANH_SMALL)); /* not NaN */
    if (v_any(big)) {
        /* 1 - 2e/(1 + e), e = e^{-2|y|} in (0, 0.29]: one Newton step on the
         * approximate reciprocal r0 of d = 1 + e leaves a relative error of
         * about r0's squared, damped in the result by 2e/(1 + e) < 0.45. */
        const vf one = V_SET1(1.0f), e = v_exp_nonpos(V_MUL(V_SET1(-2.0f), a));
        const vf d = V_ADD(one, e), r0 = V_RCP(d);
        const vf r = V_FMA(r0, V_FNMA(d, r0, one), r0);
        t = V_BLEND(big, t, V_FNMA(V_ADD(e, e), r, one));
    }
    return v_copysign(t, y);
}

/* ALiBi distances alibi_d0 + r - (c + lane) of row r from column c (exact
 * in float, as |·| < 2^24). */
static inline vf SIMD(alibi_dist)(const sdpa_logits *lg, int64_t r, int64_t c)
{
    float lane[VW];
    for (int l = 0; l < VW; ++l) lane[l] = (float)l;
    return V_SUB(V_SET1((float)(lg->alibi_d0 + r - c)), V_LOAD(lane));
}

/* Logits of columns [c, c+VW) of one row from raw scores s (sdpa_logits);
 * hidden lanes are selected to -inf. *t receives the tanh when softcapping;
 * *dist holds the row's ALiBi distances at c and is advanced to c + VW. */
static inline vf SIMD(logit)(const sdpa_logits *lg, const float *br, int64_t lo, int64_t hi,
                             int64_t c, vf s, vf *t, vf *dist)
{
    const vf ninf = V_SET1(-INFINITY);
    vf x = V_MUL(s, V_SET1(lg->scale));
    if (lg->softcap > 0.0f) {
        *t = SIMD(tanh)(V_MUL(x, V_SET1(lg->inv_softcap)));
        x = V_MUL(V_SET1(lg->softcap), *t);
    }
    if (br) {
        const vf b = V_LOAD(br + c);
        x = V_BLEND(V_CMP_EQ(b, ninf), V_ADD(x, b), ninf);
    }
    if (lg->alibi != 0.0f) {
        x = V_ADD(x, V_MUL(V_SET1(-lg->alibi), V_ABS(*dist)));
        *dist = V_SUB(*dist, V_SET1((float)VW));
    }
    if (c < lo || c + VW > hi) x = V_BLEND(v_cols_outside(c, lo, hi), x, ninf);
    return x;
}

/* Vectors one step of a probability row exponentiates together
 * (v_exp_nonpos_k): as many as the register file holds without spilling. */
#ifndef EXP_K
#define EXP_K (VW == 16 ? 4 : 2)
#endif

/* Where the probabilities of a row go: in place into its floats sr, or,
 * with pr (the row of softmax_online_p16's bfloat16 P, same columns),
 * rounded into pr only: two vectors (2·VW columns from col) at a time. An
 * ISA file without V_STORE_P16 (two vectors narrowed into 2·VW bfloat16)
 * never has a pr. */
#ifndef V_STORE_P16
#define V_STORE_P16(p, a, b) ((void)(p), (void)(a), (void)(b))
#endif
#define STORE_PROBS(col, a, b)                                                                 \
    do {                                                                                       \
        if (pr) {                                                                              \
            V_STORE_P16(pr + (col), a, b);                                                     \
        } else {                                                                               \
            V_STORE(sr + (col), a);                                                            \
            V_STORE(sr + (col) + VW, b);                                                       \
        }                                                                                      \
    } while (0)

/* Zero probabilities of columns [c, n) of a row (n - c a multiple of VW). */
static inline __attribute__((always_inline)) void SIMD(zero_probs)(float *sr, uint16_t *pr,
                                                                    int64_t c, int64_t n)
{
    if (pr) { /* vector stores, not a call per row piece: a window's rows have several */
#ifdef SIMD_HAVE_P16
        for (; c + 2 * VW <= n; c += 2 * VW) V_STORE_P16(pr + c, V_ZERO(), V_ZERO());
#endif
        if (n > c) memset(pr + c, 0, (size_t)(n - c) * sizeof(uint16_t));
        return;
    }
    for (; c < n; c += VW) V_STORE(sr + c, V_ZERO());
}

/* K vectors of a probability row from column c: p = exp(LOGIT(col) - vm)
 * stored (STORE_PROBS), even vectors (counted from the row's first column,
 * c and K even) summed into sum and odd ones into sum2. */
#define EXP_VECTORS(K, LOGIT)                                                                  \
    do {                                                                                       \
        vf p[K];                                                                               \
        _Pragma("GCC unroll 4") for (int j = 0; j < K; ++j)                                    \
            p[j] = V_SUB(LOGIT(c + j * VW), vm);                                               \
        v_exp_nonpos_k(p, K);                                                                  \
        _Pragma("GCC unroll 4") for (int j = 0; j < K; j += 2) {                               \
            STORE_PROBS(c + j * VW, p[j], p[j + 1]);                                           \
            sum = V_ADD(sum, p[j]);                                                            \
            sum2 = V_ADD(sum2, p[j + 1]);                                                      \
        }                                                                                      \
    } while (0)

/* The columns [*cb, *ce) of [c0, n) that hold all of a row's visible
 * columns [lo, hi), in whole steps of `step` from c0 (a divisor of n - c0);
 * empty when the row sees none. The columns outside are hidden: -inf
 * logits, zero probabilities. */
static inline void SIMD(visible_span)(int64_t c0, int64_t n, int64_t lo, int64_t hi, int64_t step,
                                      int64_t *cb, int64_t *ce)
{
    if (hi <= lo) {
        *cb = *ce = c0;
        return;
    }
    *cb = lo > c0 ? lo - (lo - c0) % step : c0;
    *ce = hi < n ? c0 + (hi - c0 + step - 1) / step * step : n;
}

/* Pass 2 of the online softmax for one row: s <- exp(x - m) over [c0, n)
 * (n - c0 a multiple of npad = 2·VW), returning the lane sums. x is s
 * itself, or for plain rows fl(scale·s) with the columns outside [lo, hi)
 * selected to -inf (the values pass 1 maximised). Always inlined with a
 * constant `plain`, so each caller gets a loop without the other's work. */
static inline __attribute__((always_inline)) vf
SIMD(exp_row)(float *sr, uint16_t *pr, int64_t c0, int64_t n, float m, bool plain, float scale,
              int64_t lo, int64_t hi)
{
    const vf vm = V_SET1(m), vscale = V_SET1(scale), ninf = V_SET1(-INFINITY);
    vf sum = V_ZERO(), sum2 = V_ZERO();
    int64_t c = c0;
#define LOGIT_AT(col)                                                                          \
    (!plain                           ? V_LOAD(sr + (col))                                     \
     : (col) < lo || (col) + VW > hi ? V_BLEND(v_cols_outside(col, lo, hi),                    \
                                               V_MUL(V_LOAD(sr + (col)), vscale), ninf)        \
                                     : V_MUL(V_LOAD(sr + (col)), vscale))
    for (; c + EXP_K * VW <= n; c += EXP_K * VW) EXP_VECTORS(EXP_K, LOGIT_AT);
    for (; c < n; c += 2 * VW) EXP_VECTORS(2, LOGIT_AT);
#undef LOGIT_AT
    return V_ADD(sum, sum2);
}

/* The exps of plain logits p = exp(fl(scale·s) - m) of one row's w columns
 * sr[0, w) (vm = m in every lane), in place; returns the lane sums, even
 * vectors summed in one accumulator and odd ones in another, then added
 * (w is a multiple of npad = 2·VW). */
static inline __attribute__((always_inline)) vf SIMD(exp_row_full)(float *sr, uint16_t *pr,
                                                                    int64_t w, vf vm, vf vscale)
{
    vf sum = V_ZERO(), sum2 = V_ZERO();
    int64_t c = 0;
#define SCALED_AT(col) V_MUL(V_LOAD(sr + (col)), vscale)
    _Pragma("GCC unroll 8") for (; c + EXP_K * VW <= w; c += EXP_K * VW)
        EXP_VECTORS(EXP_K, SCALED_AT);
    for (; c < w; c += 2 * VW) EXP_VECTORS(2, SCALED_AT);
#undef SCALED_AT
    return V_ADD(sum, sum2);
}

/* The running maxima of `rows` (<= VW) rows from acc[i], lanes of row i's
 * raw scores in the tile: max(fl(scale·s)) = fl(scale·max(s)) as scale >= 0
 * and rounding is monotone; x > old ? x : old lane by lane. alpha =
 * exp(max_old - max_new), 1 while a row has seen nothing (-inf - -inf
 * would be NaN). */
static inline __attribute__((always_inline)) void
SIMD(new_max)(int64_t rows, const vf *acc, vf vscale, float *rowmax, float *alpha)
{
    const vf ninf = V_SET1(-INFINITY);
    float pad[2][VW] = {{0}};
    for (int64_t i = 0; rows < VW && i < rows; ++i) pad[0][i] = rowmax[i];
    float *const vrowmax = rows == VW ? rowmax : pad[0];
    float *const valpha = rows == VW ? alpha : pad[1];
    const vf vold = V_LOAD(vrowmax);
    const vf vnew = V_MAX(V_MUL(v_hmax_rows(acc), vscale), vold);
    V_STORE(valpha, V_BLEND(V_CMP_EQ(vnew, ninf), v_exp_nonpos(V_SUB(vold, vnew)), V_SET1(1.0f)));
    V_STORE(vrowmax, vnew);
    for (int64_t i = 0; rows < VW && i < rows; ++i) {
        rowmax[i] = pad[0][i];
        alpha[i] = pad[1][i];
    }
}

/* The running sums of `rows` (<= VW) rows, sum = sum·alpha + the tile's
 * sum (acc[i]: lanes of row i's probabilities), where a row saw something
 * (else its sum stays 0). */
static inline __attribute__((always_inline)) void
SIMD(add_sums)(int64_t rows, const vf *acc, const float *rowmax, float *rowsum,
               const float *alpha)
{
    float tile[VW];
    V_STORE(tile, v_hsum_rows(acc));
    for (int64_t i = 0; i < rows; ++i)
        if (rowmax[i] != -INFINITY) rowsum[i] = rowsum[i] * alpha[i] + tile[i];
}

/* softmax_online for plain logits of rows that all see every column of
 * [c0, c0 + w) (the bulk of unmasked and causal attention): the values of
 * the general path below, bit for bit (each lane's max and sum in the same
 * order, reduced by the same trees), without its per-row bounds and
 * per-vector masks, with each step's exps interleaved, and (inlined with a
 * constant w) without loops over the columns. */
static inline __attribute__((always_inline)) void
SIMD(softmax_full)(int64_t m, int64_t c0, int64_t w, float scale, float *s, int64_t lds,
                   uint16_t *p16, float *rowmax, float *rowsum, float *alpha, const float *vmax)
{
    const vf ninf = V_SET1(-INFINITY), vscale = V_SET1(scale);
    s += c0;
    if (p16) p16 += c0;
    /* Pass 1 for all rows first, so that no row's exps wait for a reduction
     * tree: VW rows at a time, lane i of the statistics for row g+i (a last,
     * partial group through padded copies). */
    for (int64_t g = 0; g < m; g += VW) {
        const int64_t rows = m - g < VW ? m - g : VW;
        vf acc[VW];
        for (int64_t i = 0; i < VW; ++i) {
            if (i >= rows) { /* padding lanes: row g's maxima again, not recomputed */
                acc[i] = acc[0];
                continue;
            }
            const int64_t r = g + i;
            if (vmax) { /* gemm_max folded the row as below */
                acc[i] = V_LOAD(vmax + r * SDPA_MAX_VW);
                continue;
            }
            vf vm = ninf;
            _Pragma("GCC unroll 8") for (int64_t c = 0; c < w; c += VW)
                vm = V_MAX(vm, V_LOAD(s + r * lds + c));
            acc[i] = vm;
        }
        SIMD(new_max)(rows, acc, vscale, rowmax + g, alpha + g);
    }
    /* Pass 2: p = exp(x - max) (never positive), and per row
     * sum = sum·alpha + the tile's sum, where the row saw something. */
    for (int64_t g = 0; g < m; g += VW) {
        const int64_t rows = m - g < VW ? m - g : VW;
        vf acc[VW];
        for (int64_t i = 0; i < VW; ++i) {
            acc[i] = V_ZERO();
            if (i >= rows) continue;
            float *sr = s + (g + i) * lds;
            uint16_t *pr = p16 ? p16 + (g + i) * lds : NULL;
            const float mx = rowmax[g + i];
            if (mx == -INFINITY) { /* nothing visible so far: p = 0 */
                sdpa_nan_logits_poison(sr, 0, w, scale, &rowsum[g + i]);
                SIMD(zero_probs)(sr, pr, 0, w);
                continue;
            }
            acc[i] = SIMD(exp_row_full)(sr, pr, w, V_SET1(mx), vscale);
        }
        SIMD(add_sums)(rows, acc, rowmax + g, rowsum + g, alpha + g);
    }
}

static inline __attribute__((always_inline)) void
SIMD(softmax_online_full)(int64_t m, int64_t c0, int64_t n, float scale, float *s, int64_t lds,
                          uint16_t *p16, float *rowmax, float *rowsum, float *alpha,
                          const float *vmax)
{
    if (n - c0 == SDPA_KEY_TILE)
        SIMD(softmax_full)(m, c0, SDPA_KEY_TILE, scale, s, lds, p16, rowmax, rowsum, alpha, vmax);
    else
        SIMD(softmax_full)(m, c0, n - c0, scale, s, lds, p16, rowmax, rowsum, alpha, vmax);
}

/* softmax_online for plain logits of rows that see a prefix of the
 * columns, [c0, c0 + e) with e = end - c0 clamped to [0, n - c0] (rows that
 * start at or before c0: causal attention's diagonal tiles): the general
 * path's values bit for bit (but for which of several NaNs a sum keeps,
 * test_fused), each row's whole vectors without bounds and only its last
 * pair masked. The general path exponentiates the vectors past a row's
 * last visible pair too, but exp(-inf) = +0 adds nothing to a sum, so here
 * they are only stored. */
static inline __attribute__((always_inline)) void
SIMD(softmax_prefix)(int64_t m, int64_t c0, int64_t n, float scale, const int32_t *end, float *s,
                     int64_t lds, uint16_t *p16, float *rowmax, float *rowsum, float *alpha)
{
    const vf ninf = V_SET1(-INFINITY), vscale = V_SET1(scale);
    const int64_t w = n - c0;
    s += c0;
    if (p16) p16 += c0;
#define SEEN(r) (end[r] <= c0 ? 0 : end[r] - c0 < w ? end[r] - c0 : w)
    for (int64_t g = 0; g < m; g += VW) {
        const int64_t rows = m - g < VW ? m - g : VW;
        vf acc[VW];
        for (int64_t i = 0; i < VW; ++i) {
            if (i >= rows) { /* padding lanes: row g's maxima again, not recomputed */
                acc[i] = acc[0];
                continue;
            }
            const int64_t r = g + i, e = SEEN(r);
            const float *sr = s + r * lds;
            vf vm = ninf;
            int64_t c = 0;
            for (; c + VW <= e; c += VW) vm = V_MAX(vm, V_LOAD(sr + c));
            if (c < e) vm = V_MAX(vm, V_BLEND(v_cols_outside(c, 0, e), V_LOAD(sr + c), ninf));
            acc[i] = vm;
        }
        SIMD(new_max)(rows, acc, vscale, rowmax + g, alpha + g);
    }
    for (int64_t g = 0; g < m; g += VW) {
        const int64_t rows = m - g < VW ? m - g : VW;
        vf acc[VW];
        for (int64_t i = 0; i < VW; ++i) {
            acc[i] = V_ZERO();
            if (i >= rows) continue;
            const int64_t r = g + i, e = SEEN(r);
            float *sr = s + r * lds;
            uint16_t *pr = p16 ? p16 + r * lds : NULL;
            int64_t c = 0;
            if (rowmax[r] != -INFINITY) { /* else nothing visible so far: p = 0 */
                const vf vm = V_SET1(rowmax[r]);
                vf sum = V_ZERO(), sum2 = V_ZERO();
#define SCALED_AT(col) V_MUL(V_LOAD(sr + (col)), vscale)
#define MASKED_AT(col) V_BLEND(v_cols_outside(col, 0, e), SCALED_AT(col), ninf)
                for (; c + EXP_K * VW <= e; c += EXP_K * VW) EXP_VECTORS(EXP_K, SCALED_AT);
                for (; c + 2 * VW <= e; c += 2 * VW) EXP_VECTORS(2, SCALED_AT);
                if (c < e) {
                    EXP_VECTORS(2, MASKED_AT);
                    c += 2 * VW;
                }
#undef MASKED_AT
#undef SCALED_AT
                acc[i] = V_ADD(sum, sum2);
            } else {
                sdpa_nan_logits_poison(sr, 0, e, scale, &rowsum[r]);
            }
            SIMD(zero_probs)(sr, pr, c, w);
        }
        SIMD(add_sums)(rows, acc, rowmax + g, rowsum + g, alpha + g);
    }
#undef SEEN
}
#undef EXP_VECTORS

/* softmax_online, with p16 its probabilities rounded to bfloat16 into
 * p16 (row stride lds, the columns of s) instead of s (the same floats
 * rounded: V_STORE_P16). */
static inline __attribute__((always_inline)) void
SIMD(softmax_any)(int64_t m, int64_t c0, int64_t n, const sdpa_logits *lgp, float *s, int64_t lds,
                  uint16_t *p16, float *rowmax, float *rowsum, float *alpha, const float *vmax)
{
    /* A local copy: the stores into s cannot alias it, so the parameters
     * stay in registers instead of being reloaded for every vector. */
    const sdpa_logits lgc = *lgp, *lg = &lgc;
    const vf ninf = V_SET1(-INFINITY);
    /* Plain logits (no bias, no cap) stay raw scores between the passes:
     * max(fl(scale·s)) = fl(scale·max(s)) as scale >= 0 and rounding is
     * monotone, and pass 2 forms fl(scale·s) itself, so nothing is stored. */
    const bool plain = !lg->bias && !(lg->softcap > 0.0f) && lg->alibi == 0.0f;
    bool prefix = plain, full = plain;
    for (int64_t r = 0; prefix && r < m; ++r) {
        prefix = lg->start[r] <= c0;
        full &= lg->end[r] >= n;
    }
    if (prefix && full) {
        SIMD(softmax_online_full)(m, c0, n, lg->scale, s, lds, p16, rowmax, rowsum, alpha, vmax);
        return;
    }
    if (prefix) {
        SIMD(softmax_prefix)(m, c0, n, lg->scale, lg->end, s, lds, p16, rowmax, rowsum, alpha);
        return;
    }
    /* Pass 1, VW rows at a time: each row's logits x (hidden columns -inf)
     * replace its raw scores; the rows' maxima, reduced together, are kept
     * in alpha[] for now. */
    for (int64_t g = 0; g < m; g += VW) {
        const int64_t rows = m - g < VW ? m - g : VW;
        vf lanemax[VW];
        float mx[VW];
        for (int64_t i = rows; i < VW; ++i) lanemax[i] = ninf;
        for (int64_t i = 0; i < rows; ++i) {
            const int64_t r = g + i;
            float *sr = s + r * lds;
            const float *br = lg->bias ? lg->bias + r * lg->ldbias : NULL;
            const int64_t lo = lg->start[r], hi = lg->end[r];
            vf vm = ninf;
            if (plain) { /* the vectors holding a visible column: the rest are -inf */
                int64_t cb, ce;
                SIMD(visible_span)(c0, n, lo, hi, VW, &cb, &ce);
                for (int64_t c = cb; c < ce; c += VW) {
                    vf x = V_LOAD(sr + c);
                    if (c < lo || c + VW > hi) x = V_BLEND(v_cols_outside(c, lo, hi), x, ninf);
                    vm = V_MAX(vm, x);
                }
            } else {
                vf t, dist = SIMD(alibi_dist)(lg, r, c0);
                for (int64_t c = c0; c < n; c += VW) {
                    const vf x = SIMD(logit)(lg, br, lo, hi, c, V_LOAD(sr + c), &t, &dist);
                    V_STORE(sr + c, x);
                    vm = V_MAX(vm, x);
                }
            }
            lanemax[i] = vm;
        }
        V_STORE(mx, v_hmax_rows(lanemax));
        for (int64_t i = 0; i < rows; ++i) {
            const float x = plain ? mx[i] * lg->scale : mx[i];
            alpha[g + i] = x > rowmax[g + i] ? x : rowmax[g + i];
        }
    }
    /* alpha = exp(max_old - max_new) for all rows at once (1 while a row has
     * seen nothing: -inf - -inf would be NaN); the new max becomes current. */
    int64_t r = 0;
    for (; r + VW <= m; r += VW) {
        const vf old = V_LOAD(rowmax + r), mnew = V_LOAD(alpha + r);
        V_STORE(alpha + r, v_exp_nonpos(V_SUB(old, mnew)));
        V_STORE(rowmax + r, mnew);
    }
    if (r < m) { /* the last rows: one padded vector, not one exp per row */
        float diff[VW] = {0}, out[VW];
        for (int64_t x = r; x < m; ++x) diff[x - r] = rowmax[x] - alpha[x];
        V_STORE(out, v_exp_nonpos(V_LOAD(diff)));
        for (int64_t x = r; x < m; ++x) {
            rowmax[x] = alpha[x];
            alpha[x] = out[x - r];
        }
    }
    for (r = 0; r < m; ++r)
        if (rowmax[r] == -INFINITY) alpha[r] = 1.0f;
    /* Pass 2, VW rows at a time: p = exp(x - max) (never positive: x <= max
     * exactly) and the running sums. */
    for (int64_t g = 0; g < m; g += VW) {
        const int64_t rows = m - g < VW ? m - g : VW;
        vf vsum[VW];
        for (int64_t i = 0; i < VW; ++i) vsum[i] = V_ZERO();
        for (int64_t i = 0; i < rows; ++i) {
            float *sr = s + (g + i) * lds;
            uint16_t *pr = p16 ? p16 + (g + i) * lds : NULL;
            const float mnew = rowmax[g + i];
            if (mnew == -INFINITY) { /* nothing visible so far: p = 0 */
                if (plain) { /* the raw scores of the visible columns */
                    const int64_t lo = lg->start[g + i], hi = lg->end[g + i];
                    sdpa_nan_logits_poison(sr, lo > c0 ? lo : c0, hi < n ? hi : n, lg->scale,
                                           &rowsum[g + i]);
                } else { /* the logits, hidden columns -inf */
                    sdpa_nan_logits_poison(sr, c0, n, 1.0f, &rowsum[g + i]);
                }
                SIMD(zero_probs)(sr, pr, c0, n);
                continue;
            }
            if (!plain) {
                vsum[i] = SIMD(exp_row)(sr, pr, c0, n, mnew, false, 0.0f, 0, 0);
                continue;
            }
            /* Plain rows exponentiate the pairs of vectors that hold a
             * visible column (pairs: the lane sums' order is kept) and
             * store the other probabilities, exp(-inf) = 0, directly. */
            const int64_t lo = lg->start[g + i], hi = lg->end[g + i];
            int64_t cb, ce;
            SIMD(visible_span)(c0, n, lo, hi, 2 * VW, &cb, &ce);
            SIMD(zero_probs)(sr, pr, c0, cb);
            SIMD(zero_probs)(sr, pr, ce, n);
            vsum[i] = SIMD(exp_row)(sr, pr, cb, ce, mnew, true, lg->scale, lo, hi);
        }
        SIMD(add_sums)(rows, vsum, rowmax + g, rowsum + g, alpha + g);
    }
}

static void SIMD(softmax_online)(int64_t m, int64_t c0, int64_t n, const sdpa_logits *lg,
                                 float *s, int64_t lds, float *rowmax, float *rowsum,
                                 float *alpha, const float *vmax)
{
    SIMD(softmax_any)(m, c0, n, lg, s, lds, NULL, rowmax, rowsum, alpha, vmax);
}

#ifdef SIMD_HAVE_P16
static void SIMD(softmax_online_p16)(int64_t m, int64_t c0, int64_t n, const sdpa_logits *lg,
                                     float *s, int64_t lds, uint16_t *p16, float *rowmax,
                                     float *rowsum, float *alpha, const float *vmax)
{
    SIMD(softmax_any)(m, c0, n, lg, s, lds, p16, rowmax, rowsum, alpha, vmax);
}
#endif

/* softmax_rows (kernels.h): per row, its keys' vectors from its first
 * column (unaligned), four at a time and then pairs, the last pair masked;
 * maxima in four independent lanes' chains (max is exact: the order
 * changes no value but which NaN a lane keeps, and a NaN logit makes the
 * sum NaN either way); zeros stored around the keys. */
static inline __attribute__((always_inline)) void
SIMD(softmax_rows_any)(int64_t m, int64_t z0, int64_t n, float scale, const int32_t *start,
                       const int32_t *end, float *s, int64_t lds, uint16_t *p16, float *rowmax,
                       float *rowsum)
{
    const vf ninf = V_SET1(-INFINITY), vscale = V_SET1(scale), zero = V_ZERO();
    for (int64_t g = 0; g < m; g += VW) {
        const int64_t rows = m - g < VW ? m - g : VW;
        vf acc[VW];
        float alpha[VW];
        for (int64_t i = 0; i < VW; ++i) {
            acc[i] = ninf;
            if (i >= rows) continue;
            const float *sr = s + (g + i) * lds;
            const int64_t lo = start[g + i], hi = end[g + i];
            vf m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;
            int64_t c = lo;
            for (; c + 4 * VW <= hi; c += 4 * VW) {
                m0 = V_MAX(m0, V_LOAD(sr + c));
                m1 = V_MAX(m1, V_LOAD(sr + c + VW));
                m2 = V_MAX(m2, V_LOAD(sr + c + 2 * VW));
                m3 = V_MAX(m3, V_LOAD(sr + c + 3 * VW));
            }
            for (; c < hi; c += VW)
                m0 = V_MAX(m0, V_BLEND(v_cols_outside(c, lo, hi), V_LOAD(sr + c), ninf));
            acc[i] = V_MAX(V_MAX(m0, m1), V_MAX(m2, m3));
        }
        SIMD(new_max)(rows, acc, vscale, rowmax + g, alpha);
        for (int64_t i = 0; i < VW; ++i) {
            acc[i] = zero;
            if (i >= rows) continue;
            float *sr = s + (g + i) * lds;
            uint16_t *pr = p16 ? p16 + (g + i) * lds : NULL;
            const int64_t lo = start[g + i], hi = end[g + i];
            const float mx = rowmax[g + i];
            int64_t c = lo;
            if (mx == -INFINITY) { /* nothing visible: p = 0 */
                sdpa_nan_logits_poison(sr, lo, hi, scale, &rowsum[g + i]);
                c = z0;
            } else {
                /* zeros before the keys: into p16 by whole steps (the exps then
                 * overwrite those past lo), into s short of its scores */
                int64_t cz = z0;
                for (; pr && cz < lo; cz += 2 * VW) STORE_PROBS(cz, zero, zero);
                for (; cz + VW <= lo; cz += VW) V_STORE(sr + cz, zero);
                for (; cz < lo; ++cz) sr[cz] = 0.0f;
                const vf vm = V_SET1(mx);
                vf sum = zero, sum2 = zero;
                for (; c + 4 * VW <= hi; c += 4 * VW) {
                    vf x[4];
                    for (int j = 0; j < 4; ++j) x[j] = V_SUB(V_MUL(V_LOAD(sr + c + j * VW), vscale), vm);
                    v_exp_nonpos_k(x, 4);
                    STORE_PROBS(c, x[0], x[1]);
                    STORE_PROBS(c + 2 * VW, x[2], x[3]);
                    sum = V_ADD(V_ADD(sum, x[0]), x[2]);
                    sum2 = V_ADD(V_ADD(sum2, x[1]), x[3]);
                }
                for (; c < hi; c += 2 * VW) {
                    vf x[2];
                    for (int j = 0; j < 2; ++j)
                        x[j] = V_BLEND(v_cols_outside(c + j * VW, lo, hi),
                                       V_SUB(V_MUL(V_LOAD(sr + c + j * VW), vscale), vm), ninf);
                    v_exp_nonpos_k(x, 2);
                    STORE_PROBS(c, x[0], x[1]);
                    sum = V_ADD(sum, x[0]);
                    sum2 = V_ADD(sum2, x[1]);
                }
                acc[i] = V_ADD(sum, sum2);
            }
            for (; c < n; c += 2 * VW) STORE_PROBS(c, zero, zero); /* zeros after them */
        }
        SIMD(add_sums)(rows, acc, rowmax + g, rowsum + g, alpha);
    }
}

static void SIMD(softmax_rows)(int64_t m, int64_t z0, int64_t n, float scale,
                               const int32_t *start, const int32_t *end, float *s, int64_t lds,
                               uint16_t *p16, float *rowmax, float *rowsum)
{
#ifdef SIMD_HAVE_P16
    if (p16) {
        SIMD(softmax_rows_any)(m, z0, n, scale, start, end, s, lds, p16, rowmax, rowsum);
        return;
    }
#else
    (void)p16; /* never given where the table has no softmax_online_p16 */
#endif
    SIMD(softmax_rows_any)(m, z0, n, scale, start, end, s, lds, NULL, rowmax, rowsum);
}

static void SIMD(probs)(int64_t m, int64_t c0, int64_t n, const sdpa_logits *lgp, float *s,
                        int64_t lds, const float *rowmax, const float *rowll, float *dfac)
{
    const sdpa_logits lgc = *lgp, *lg = &lgc; /* not reloaded after each store (softmax_online) */
    const bool capped = lg->softcap > 0.0f && dfac;
    const vf vscale = V_SET1(lg->scale), one = V_SET1(1.0f);
    for (int64_t r = 0; r < m; ++r) {
        float *sr = s + r * lds;
        const float *br = lg->bias ? lg->bias + r * lg->ldbias : NULL;
        const int64_t lo = lg->start[r], hi = lg->end[r];
        if (rowmax[r] == -INFINITY) {
            for (int64_t c = c0; c < n; c += VW) V_STORE(sr + c, V_ZERO());
            continue;
        }
        const vf vm = V_SET1(rowmax[r]), vll = V_SET1(rowll[r]);
        const bool has_ll = rowll[r] != 0.0f; /* x - m - 0 is x - m: one step less */
        /* Hidden columns are 0 (exp(-inf - m - ll)), also where a NaN
         * statistic would make that NaN (a hidden key never influences);
         * with softcap dfac is written whole. */
        const bool nan_stats = !((-INFINITY - rowmax[r]) - rowll[r] == -INFINITY);
        int64_t cb = c0, ce = n;
        if (!capped) {
            SIMD(visible_span)(c0, n, lo, hi, VW, &cb, &ce);
            for (int64_t c = c0; c < cb; c += VW) V_STORE(sr + c, V_ZERO());
            for (int64_t c = ce; c < n; c += VW) V_STORE(sr + c, V_ZERO());
        }
        vf t = V_ZERO(), dist = SIMD(alibi_dist)(lg, r, cb);
        for (int64_t c = cb; c < ce; c += VW) {
            const vf x = SIMD(logit)(lg, br, lo, hi, c, V_LOAD(sr + c), &t, &dist);
            const vf e = has_ll ? V_SUB(V_SUB(x, vm), vll) : V_SUB(x, vm);
            const vf pe = v_exp(e);
            V_STORE(sr + c, nan_stats ? V_BLEND(V_CMP_EQ(x, V_SET1(-INFINITY)), pe, V_ZERO()) : pe);
            if (capped) V_STORE(dfac + r * lds + c, V_MUL(vscale, V_SUB(one, V_MUL(t, t))));
        }
    }
}

static void SIMD(dsoftmax)(int64_t m, int64_t c0, int64_t n, float scale, const float *p,
                           int64_t ldp, float *dp, int64_t lddp, const float *di,
                           const float *dfac, bool guard)
{
    const vf vscale = V_SET1(scale), zero = V_ZERO(), one = V_SET1(1.0f);
    for (int64_t r = 0; r < m; ++r) {
        const float *pr = p + r * ldp, *fr = dfac ? dfac + r * ldp : NULL;
        float *dr = dp + r * lddp;
        const vf vd = V_SET1(di[r]);
        for (int64_t c = c0; c < n; c += VW) {
            const vf pv = V_LOAD(pr + c), f = fr ? V_LOAD(fr + c) : vscale;
            /* P = 1: the softmax is this key alone, constant, so dS is 0
             * exactly (dP and D are one sum rounded two ways) */
            const vf ds = V_BLEND(V_CMP_EQ(pv, one), V_MUL(V_MUL(pv, V_SUB(V_LOAD(dr + c), vd)), f),
                                  zero);
            V_STORE(dr + c, guard ? V_BLEND(V_CMP_EQ(pv, zero), ds, zero) : ds);
        }
    }
}

enum { PHILOX_ROUNDS = 10 };

/* Philox4x32-10 on VW counters at once (lane L: counter word 0 = base + L),
 * the words of every lane regrouped into column order: cols[v] holds the
 * words of columns 4·base + v·VW .. + VW - 1.
 * The state lives in the low halves of 64-bit lanes, the even counters in
 * one vector and the odd ones in another: VI_MULU then yields the whole
 * 64-bit product, the low word in place and the high word one shift away,
 * with no shuffling. The high halves carry garbage that only VI_MULU (which
 * ignores them) and XORs (lane-wise) ever see. rk0, rk1: the round keys,
 * broadcast. */
static inline void SIMD(philox_cols)(const sdpa_dropout_args *d, const vi *rk0, const vi *rk1,
                                     uint32_t base, uint32_t row, vi cols[4])
{
    vi x0[2], x1[2], x2[2], x3[2];
    for (int h = 0; h < 2; ++h) {
        x0[h] = VI_ADD(VI_SET1(base + (uint32_t)h), VI_IOTA2());
        x1[h] = VI_SET1(row);
        x2[h] = VI_SET1(d->bh);
        x3[h] = VI_SET1(d->ctr3);
    }
    for (int round = 0; round < PHILOX_ROUNDS; ++round)
        for (int h = 0; h < 2; ++h) {
            const vi p0 = VI_MULU(x0[h], 0xD2511F53u), p2 = VI_MULU(x2[h], 0xCD9E8D57u);
            x0[h] = VI_XOR3(VI_HI64(p2), x1[h], rk0[round]);
            x2[h] = VI_XOR3(VI_HI64(p0), x3[h], rk1[round]);
            x1[h] = p2;
            x3[h] = p0;
        }
    v_words_to_columns(VI_ZIP(x0[0], x0[1]), VI_ZIP(x1[0], x1[1]), VI_ZIP(x2[0], x2[1]),
                       VI_ZIP(x3[0], x3[1]), cols);
}

static void SIMD(dropout)(const sdpa_dropout_args *d, int64_t m, int64_t i0, int64_t j0,
                          int64_t c0, int64_t n, float *s, int64_t lds, float *z)
{
    const vf scale = V_SET1(d->scale), zero = V_ZERO();
    const vi keep = VI_SET1(d->keep);
    /* The round keys, broadcast once for the whole tile. */
    vi rk0[PHILOX_ROUNDS], rk1[PHILOX_ROUNDS];
    for (uint32_t round = 0, k0 = d->key[0], k1 = d->key[1]; round < PHILOX_ROUNDS;
         ++round, k0 += 0x9E3779B9u, k1 += 0xBB67AE85u) {
        rk0[round] = VI_SET1(k0);
        rk1[round] = VI_SET1(k1);
    }
    for (int64_t r = 0; r < m; ++r) {
        float *sr = s + r * lds, *zr = z ? z + r * lds : NULL;
        for (int64_t c = c0; c < n; c += 4 * VW) {
            vi cols[4];
            SIMD(philox_cols)(d, rk0, rk1, (uint32_t)((j0 + c) / 4), (uint32_t)(i0 + r), cols);
            for (int v = 0; v < 4 && c + v * VW < n; ++v) {
                const int64_t at = c + v * VW;
                const vf f = V_BLEND(v_keep(cols[v], keep), zero, scale);
                if (at + VW <= n) {
                    V_STORE(sr + at, V_MUL(V_LOAD(sr + at), f));
                    if (zr) V_STORE(zr + at, f);
                } else { /* a partial last vector (n is a multiple of VW here) */
                    float fs[VW];
                    V_STORE(fs, f);
                    for (int64_t q = at; q < n; ++q) {
                        sr[q] *= fs[q - at];
                        if (zr) zr[q] = fs[q - at];
                    }
                }
            }
        }
    }
}

static void SIMD(alibi_row)(float *bias, float slope, int32_t dist0, int64_t n)
{
    float lane[VW];
    for (int l = 0; l < VW; ++l) lane[l] = (float)l;
    const vf nslope = V_SET1(-slope), step = V_SET1((float)VW);
    vf dist = V_SUB(V_SET1((float)dist0), V_LOAD(lane)); /* dist0 - c, exact */
    int64_t c = 0;
    for (; c + VW <= n; c += VW, dist = V_SUB(dist, step))
        V_STORE(bias + c, V_MUL(nslope, V_ABS(dist)));
    for (; c < n; ++c) bias[c] = -slope * fabsf((float)dist0 - (float)c);
}

static int64_t SIMD(mask_row)(float *bias, const void *src, int64_t cs, attn_dtype dtype,
                              int64_t n, bool accumulate, bool *irregular)
{
    int64_t last = 0, hidden = 0, c = 0;
    bool nonzero = false;
    if (cs == 1) {
        for (; c + VW <= n; c += VW) {
            vf v = dtype == ATTN_BOOL ? v_bool_bias((const uint8_t *)src + c)
                                      : V_LOAD((const float *)src + c);
            if (accumulate) v = V_ADD(v, V_LOAD(bias + c));
            V_STORE(bias + c, v);
            const unsigned hid = v_hidden_bits(v), all = (1u << VW) - 1u;
            hidden += __builtin_popcount(hid);
            if (hid != all) last = c + 32 - __builtin_clz(~hid & all);
            nonzero |= v_nonzero_visible_bits(v) != 0;
        }
    }
    sdpa_mask_cols(bias, src, cs, dtype, c, n, accumulate, &last, &hidden, &nonzero);
    *irregular = nonzero || hidden > n - last;
    return last;
}

#ifndef SIMD_HAVE_BLOCK8
typedef __m128 v4f;
#define V4_STORE(p, v) _mm_storeu_ps((p), (v))
typedef __m256 v8f;

/* 8 × 8 block transpose in registers (AVX, available under both SIMD
 * targets): o[i][j] = r[j][i]. */
static inline __attribute__((always_inline)) void SIMD(transpose8_regs)(const __m256 r[8],
                                                                         __m256 o[8])
{
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; ++i) {
        o[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        o[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

/* The same, stored: dst[i*ld + j] = r[j][i]. */
static inline void SIMD(transpose8_rows)(const v8f r[8], float *dst, int64_t ld)
{
    __m256 o[8];
    SIMD(transpose8_regs)(r, o);
    for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + i * ld, o[i]);
}

/* Eight consecutive values of a float32 or 16-bit row, widened exactly. */
static inline __attribute__((always_inline)) v8f SIMD(load8)(attn_dtype t, const void *p,
                                                                 int64_t at)
{
    if (t == ATTN_F32) return _mm256_loadu_ps((const float *)p + at);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + at));
    return t == ATTN_BF16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
                          : _mm256_cvtph_ps(h);
}
#endif /* SIMD_HAVE_BLOCK8 */

/* The cache lines of `rows` rows (row_bytes each, rs apart), walked in
 * ascending order a few at a time: the feature loop spreads its prefetches
 * over its steps, since issued in one burst they fill the miss buffers and
 * stall the core, and out of order the hardware streamers stop following.
 * The lines go to L2 (prefetcht1), not L1: the 16 KB of K ahead and a
 * tile's 32 KB of V would evict from L1 the K lines being multiplied (a
 * decode step took 1.4x as long with prefetcht0, Zen 4, bench/README.md). */
typedef struct {
    const char *base;
    int64_t rs, row_bytes, rows, row, x;
} line_walk;

static inline int lines_per_step(int64_t rows, int64_t row_bytes, int64_t steps)
{
    return (int)((rows * ((row_bytes + 63) / 64) + steps - 1) / steps);
}

static inline __attribute__((always_inline)) void prefetch_lines(line_walk *w, int count)
{
    for (int q = 0; q < count && w->row < w->rows; ++q) {
        __builtin_prefetch(w->base + w->row * w->rs + w->x, 0, 2);
        w->x += 64;
        if (w->x >= w->row_bytes) w->x = 0, ++w->row;
    }
}

/* Keys per group of scores_group: its m·g accumulators, g K vectors and a
 * Q vector fit the register file (32 zmm, 16 ymm). */
#ifndef SCORES_KEYS
#define SCORES_KEYS (VW == 16 ? 4 : 2)
#endif

/* K's features [l, l+VW/2) widened into the low half of a vector, the high
 * half 0 (the last step when D is an odd multiple of VW/2). */
static inline __attribute__((always_inline)) vf SIMD(load_half)(attn_dtype t, const void *p,
                                                                 int64_t at)
{
#if VW == 16
    const __m256 h = SIMD(load8)(t, p, at);
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_setzero_pd(), _mm256_castps_pd(h), 0));
#else
    (void)t, (void)p, (void)at;
    __builtin_unreachable(); /* D is a multiple of 8 = VW */
#endif
}

/*
 * Scores of m rows (compile-time, <= SDPA_SCORES_ROWS) against keys
 * [j, j+g) (g <= SCORES_KEYS, compile-time). Shape: per VW features, g K
 * row loads (lanes = features, no transpose), then m·g fused multiply-adds
 * with Q's rows; lane i accumulates features i, i+VW, … Each (row, key)
 * vector is then summed by v_hsum4, whose tree is the same in all four
 * positions: a score depends on its Q row and K row only, never on m, g or
 * where the key falls in the tile.
 */
static inline __attribute__((always_inline)) void
SIMD(scores_group)(attn_dtype t, const void *k, int64_t rs, int64_t j, int64_t D,
                   const float *q, int64_t ldq, float *s, int64_t lds, line_walk *kw, line_walk *vw,
                   int klines, int vlines, const int m, const int g)
{
    enum { ACC = SDPA_SCORES_ROWS * SCORES_KEYS };
    vf acc[ACC];
    for (int i = 0; i < m * g; ++i) acc[i] = V_ZERO();
    int64_t l = 0;
    for (; l + VW <= D; l += VW) {
        prefetch_lines(kw, klines);
        prefetch_lines(vw, vlines);
        vf kv[SCORES_KEYS];
        for (int x = 0; x < g; ++x) kv[x] = SIMD(load_b)(k, (j + x) * rs + l, t);
        for (int r = 0; r < m; ++r) {
            const vf qv = V_LOAD(q + r * ldq + l);
            for (int x = 0; x < g; ++x) acc[r * g + x] = V_FMA(qv, kv[x], acc[r * g + x]);
        }
    }
    if (l < D) { /* VW/2 features left: Q's are loaded the same way, so the high lanes add 0 */
        vf kv[SCORES_KEYS];
        for (int x = 0; x < g; ++x) kv[x] = SIMD(load_half)(t, k, (j + x) * rs + l);
        for (int r = 0; r < m; ++r) {
            const vf qv = SIMD(load_half)(ATTN_F32, q, r * ldq + l);
            for (int x = 0; x < g; ++x) acc[r * g + x] = V_FMA(qv, kv[x], acc[r * g + x]);
        }
    }
    /* accumulator i = r·g + x is the score of row r, key j + x */
    for (int i = 0; i < m * g; i += 4) {
        const vf z = V_ZERO();
        const v4f sum = v_hsum4(acc[i], i + 1 < m * g ? acc[i + 1] : z,
                                   i + 2 < m * g ? acc[i + 2] : z, i + 3 < m * g ? acc[i + 3] : z);
        if (g == 4) {
            V4_STORE(s + (i / 4) * lds + j, sum);
        } else {
            float out[4];
            V4_STORE(out, sum);
            for (int x = 0; x < 4 && i + x < m * g; ++x)
                s[(i + x) / g * lds + j + (i + x) % g] = out[x];
        }
    }
}

/* sdpa_scores_rows_fn for a compile-time dtype t and row count m: groups of
 * SCORES_KEYS keys, then the keys left one at a time. */
static inline __attribute__((always_inline)) void
SIMD(scores_rows_tm)(attn_dtype t, const void *k, int64_t rs, int64_t n, int64_t n_out,
                     int64_t D, const float *q, int64_t ldq, float *s, int64_t lds,
                     const sdpa_prefetch *pf, const int m)
{
    const int64_t es = t == ATTN_F32 ? 4 : 2, steps = D / VW > 0 ? D / VW : 1;
    const int klines = lines_per_step(SCORES_KEYS, D * es, steps);
    const int vlines = pf ? lines_per_step(SCORES_KEYS, pf->row_bytes, steps) : 0;
    int64_t j = 0;
    for (; j < n; j += SCORES_KEYS) {
        const int g = n - j < SCORES_KEYS ? 1 : SCORES_KEYS;
        /* K's rows SDPA_SCORES_AHEAD keys ahead (past n too: the next
         * tile's), and V's rows of these keys for the P·V that follows, are
         * wanted soon: the hardware prefetchers do not follow that many
         * interleaved row streams far enough, and a decoding step has
         * nothing to hide a miss behind. */
        line_walk kw = {(const char *)k + (j + SDPA_SCORES_AHEAD) * rs * es, rs * es, D * es, g, 0, 0};
        line_walk vw = {pf ? pf->rows + j * pf->rs : NULL, pf ? pf->rs : 0,
                        pf ? pf->row_bytes : 0, pf ? g : 0, 0, 0};
        if (g == SCORES_KEYS) {
            SIMD(scores_group)(t, k, rs, j, D, q, ldq, s, lds, &kw, &vw, klines, vlines, m, SCORES_KEYS);
        } else {
            for (; j < n; ++j) {
                kw.row = vw.row = kw.x = vw.x = 0;
                SIMD(scores_group)(t, k, rs, j, D, q, ldq, s, lds, &kw, &vw, klines, vlines, m, 1);
                kw.base += rs * es;
                if (pf) vw.base += pf->rs;
            }
            break;
        }
    }
    for (j = n; j < n_out; ++j)
        for (int r = 0; r < m; ++r) s[r * lds + j] = 0.0f;
}

static inline __attribute__((always_inline)) void
SIMD(scores_rows_t)(attn_dtype t, const void *k, int64_t rs, int64_t n, int64_t n_out, int64_t D,
                    const float *q, int64_t ldq, int m, float *s, int64_t lds,
                    const sdpa_prefetch *pf)
{
    if (m == 1) SIMD(scores_rows_tm)(t, k, rs, n, n_out, D, q, ldq, s, lds, pf, 1);
    else if (m == 2) SIMD(scores_rows_tm)(t, k, rs, n, n_out, D, q, ldq, s, lds, pf, 2);
    else if (m == 3) SIMD(scores_rows_tm)(t, k, rs, n, n_out, D, q, ldq, s, lds, pf, 3);
    else SIMD(scores_rows_tm)(t, k, rs, n, n_out, D, q, ldq, s, lds, pf, 4);
}

static void SIMD(scores_rows)(attn_dtype t, const void *k, int64_t rs, int64_t n, int64_t n_out,
                              int64_t D, const float *q, int64_t ldq, int m, float *s,
                              int64_t lds, const sdpa_prefetch *pf)
{
    if (t == ATTN_F32) SIMD(scores_rows_t)(ATTN_F32, k, rs, n, n_out, D, q, ldq, m, s, lds, pf);
    else if (t == ATTN_BF16) SIMD(scores_rows_t)(ATTN_BF16, k, rs, n, n_out, D, q, ldq, m, s, lds, pf);
    else SIMD(scores_rows_t)(ATTN_F16, k, rs, n, n_out, D, q, ldq, m, s, lds, pf);
}

/* dst[i*ld + j] = src[j*rs + i] for an 8 × 8 block. */
static inline void SIMD(transpose8)(const float *src, int64_t rs, float *dst, int64_t ld)
{
    v8f r[8];
    for (int i = 0; i < 8; ++i) r[i] = SIMD(load8)(ATTN_F32, src, i * rs);
    SIMD(transpose8_rows)(r, dst, ld);
}

static void SIMD(pack_transposed)(const float *src, int64_t rs, int64_t cs, int64_t n, int64_t D,
                                  float *dst, int64_t ld)
{
    const int64_t n8 = n - n % 8, d8 = cs == 1 ? D - D % 8 : 0;
    for (int64_t c = 0; c < n8; c += 8)
        for (int64_t d = 0; d < d8; d += 8)
            SIMD(transpose8)(src + c * rs + d, rs, dst + d * ld + c, ld);
    for (int64_t d = 0; d < D; ++d) {
        float *out = dst + d * ld;
        const float *in = src + d * cs;
        if (d >= d8)
            for (int64_t c = 0; c < n8; ++c) out[c] = in[c * rs];
        for (int64_t c = n8; c < n; ++c) out[c] = in[c * rs];
        for (int64_t c = n; c < ld; ++c) out[c] = 0.0f;
    }
}

/* pack_transposed of 16-bit rows, widened in registers on the way (load8:
 * bfloat16 by a shift, float16 by F16C). */
static void SIMD(pack_transposed16)(attn_dtype t, const uint16_t *src, int64_t rs, int64_t cs,
                                    int64_t n, int64_t D, float *dst, int64_t ld)
{
    const int64_t n8 = n - n % 8, d8 = cs == 1 ? D - D % 8 : 0;
    for (int64_t c = 0; c < n8; c += 8)
        for (int64_t d = 0; d < d8; d += 8) {
            v8f r[8];
            for (int i = 0; i < 8; ++i) r[i] = SIMD(load8)(t, src, (c + i) * rs + d);
            SIMD(transpose8_rows)(r, dst + d * ld + c, ld);
        }
    for (int64_t d = 0; d < D; ++d) {
        float *out = dst + d * ld;
        const uint16_t *in = src + d * cs;
        if (d >= d8)
            for (int64_t c = 0; c < n8; ++c) out[c] = attn_load_float(in, t, c * rs);
        for (int64_t c = n8; c < n; ++c) out[c] = attn_load_float(in, t, c * rs);
        for (int64_t c = n; c < ld; ++c) out[c] = 0.0f;
    }
}

static void SIMD(widen)(attn_dtype t, const uint16_t *src, int64_t rs, int64_t cs, int64_t rows,
                        int64_t cols, float *dst, int64_t ld)
{
    for (int64_t r = 0; r < rows; ++r) {
        const uint16_t *in = src + r * rs;
        float *out = dst + r * ld;
        int64_t c = 0;
        if (cs == 1)
            for (; c + VW <= cols; c += VW)
                V_STORE(out + c, t == ATTN_BF16 ? V_LOAD_BF16(in + c) : V_LOAD_F16(in + c));
        for (; c < cols; ++c) out[c] = attn_load_float(in, t, c * cs);
        for (; c < ld; ++c) out[c] = 0.0f;
    }
}

static void SIMD(narrow)(attn_dtype t, const float *src, int64_t n, uint16_t *dst)
{
    int64_t i = 0;
    if (t == ATTN_BF16)
        for (; i + VW <= n; i += VW) V_STORE_BF16(dst + i, V_LOAD(src + i));
    else
        for (; i + VW <= n; i += VW) V_STORE_F16(dst + i, V_LOAD(src + i));
    for (; i < n; ++i) attn_store_float(dst, t, i, src[i]);
}

/* x·0 is NaN exactly when x is infinite or NaN: four sums of those
 * (independent chains) stay zero while every value is finite. */
static bool SIMD(rows_finite)(const float *src, int64_t ld, int64_t rows, int64_t w)
{
    const vf zero = V_ZERO();
    vf acc[4] = {zero, zero, zero, zero};
    for (int64_t r = 0; r < rows; ++r) {
        const float *row = src + r * ld;
        int64_t c = 0;
        for (; c + 4 * VW <= w; c += 4 * VW)
            for (int j = 0; j < 4; ++j)
                acc[j] = V_ADD(acc[j], V_MUL(V_LOAD(row + c + j * VW), zero));
        for (; c + VW <= w; c += VW) acc[0] = V_ADD(acc[0], V_MUL(V_LOAD(row + c), zero));
        for (; c < w; ++c)
            if (!isfinite(row[c])) return false;
    }
    float lanes[VW];
    V_STORE(lanes, V_ADD(V_ADD(acc[0], acc[1]), V_ADD(acc[2], acc[3])));
    for (int l = 0; l < VW; ++l)
        if (lanes[l] != 0.0f) return false; /* NaN */
    return true;
}

static void SIMD(vexp)(const float *x, float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + VW <= n; i += VW) V_STORE(y + i, v_exp(V_LOAD(x + i)));
    for (; i < n; ++i) y[i] = SIMD(exp1)(x[i]);
}

static void SIMD(vtanh)(const float *x, float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + VW <= n; i += VW) V_STORE(y + i, SIMD(tanh)(V_LOAD(x + i)));
    for (; i < n; ++i) {
        float in[VW] = {0}, out[VW];
        in[0] = x[i];
        V_STORE(out, SIMD(tanh)(V_LOAD(in)));
        y[i] = out[0];
    }
}

#undef NR
