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
 *   V_ADD V_SUB V_MUL V_MAX V_FMA(a,b,c)=a·b+c
 *   v_exp(vf)                  the exp documented in kernels.h
 *   v_exp_nonpos(vf)           the same for x <= 0, -inf or NaN only (cheaper)
 *   v_hide_from(x, c0, lim, f) lanes whose column c0+lane >= lim become f
 *   v_hmax(vf), v_hsum(vf)     horizontal max / sum (fixed order)
 *   v_bool_bias(const uint8_t *p)   VW mask bytes -> 0 (true) / -inf (false)
 *   v_hidden_bits(vf), v_nonzero_visible_bits(vf)   lane bitmasks
 *
 * Rows are always handled whole and in a fixed order, so results depend
 * only on the inputs, never on threads.
 */

#define NR (NV * VW) /* microtile columns */

/*
 * Microtile: C[rows × NR] ⊕= A[rows × k] · B[k × NR], accumulators in
 * registers. rows <= MR: missing rows reuse the last valid row's A (always
 * readable) and are not stored.
 */
static inline __attribute__((always_inline)) void
SIMD(microtile)(int64_t k, const float *a, int64_t a_rs, int64_t a_cs, const float *b,
                int64_t ldb, float *c, int64_t ldc, int64_t rows, const float *row_scale,
                sdpa_gemm_mode mode)
{
    vf acc[MR][NV];
    const float *ar[MR];
    for (int r = 0; r < MR; ++r) {
        ar[r] = a + (r < rows ? r : rows - 1) * a_rs;
        for (int v = 0; v < NV; ++v) acc[r][v] = V_ZERO();
    }
    for (int64_t l = 0; l < k; ++l) {
        const float *bl = b + l * ldb;
        vf bv[NV];
        for (int v = 0; v < NV; ++v) bv[v] = V_LOAD(bl + v * VW);
        const int64_t off = l * a_cs;
        for (int r = 0; r < MR; ++r) {
            const vf x = V_BCAST(ar[r] + off);
            for (int v = 0; v < NV; ++v) acc[r][v] = V_FMA(x, bv[v], acc[r][v]);
        }
    }
    for (int r = 0; r < MR; ++r) {
        if (r >= rows) break;
        float *cr = c + r * ldc;
        if (mode == SDPA_GEMM_SET) {
            for (int v = 0; v < NV; ++v) V_STORE(cr + v * VW, acc[r][v]);
        } else if (mode == SDPA_GEMM_ADD) {
            for (int v = 0; v < NV; ++v) V_STORE(cr + v * VW, V_ADD(V_LOAD(cr + v * VW), acc[r][v]));
        } else {
            const vf s = V_SET1(row_scale[r]);
            for (int v = 0; v < NV; ++v)
                V_STORE(cr + v * VW, V_FMA(V_LOAD(cr + v * VW), s, acc[r][v]));
        }
    }
}

static void SIMD(gemm)(int64_t m, int64_t n, int64_t k, const float *a, int64_t a_rs,
                       int64_t a_cs, const float *b, int64_t ldb, float *c, int64_t ldc,
                       const float *row_scale, sdpa_gemm_mode mode)
{
    if (m <= 0) return;
    /* Column panels outer: the k × NR panel of B stays in L1 across rows.
     * Unit a_cs (A rows contiguous) gets its own instance: one index
     * register then walks all MR rows. */
    for (int64_t j = 0; j < n; j += NR)
        for (int64_t i = 0; i < m; i += MR) {
            const int64_t rows = m - i < MR ? m - i : MR;
            const float *rs = row_scale ? row_scale + i : NULL;
            if (a_cs == 1)
                SIMD(microtile)(k, a + i * a_rs, a_rs, 1, b + j, ldb, c + i * ldc + j, ldc, rows,
                                rs, mode);
            else
                SIMD(microtile)(k, a + i * a_rs, a_rs, a_cs, b + j, ldb, c + i * ldc + j, ldc,
                                rows, rs, mode);
        }
}

/* First lane of v_exp: scalar exp with the same error bound. */
static inline float SIMD(exp1)(float x)
{
    float out[VW];
    V_STORE(out, v_exp(V_SET1(x)));
    return out[0];
}

/* Zeroes columns [from rounded down to VW, n rounded up to VW) of a row
 * whose columns < from are already final (buffers are padded). */
static inline void SIMD(zero_tail)(float *row, int64_t from, int64_t n)
{
    for (int64_t c = from - from % VW + (from % VW ? VW : 0); c < n; c += VW)
        V_STORE(row + c, V_ZERO());
}

static void SIMD(softmax_online)(int64_t m, int64_t n, float scale, float *s, int64_t lds,
                                 const int32_t *limit, const float *bias, int64_t ldbias,
                                 float *rowmax, float *rowsum, float *alpha)
{
    const vf vscale = V_SET1(scale), ninf = V_SET1(-INFINITY);
    /* Pass 1, per row: the max of x = scale·s + bias (hidden columns -inf),
     * kept in alpha[] for now. Without a bias, max(scale·s) = scale·max(s)
     * (scale > 0 and rounding is monotone), so s is only read. */
    for (int64_t r = 0; r < m; ++r) {
        float *sr = s + r * lds;
        const float *br = bias ? bias + r * ldbias : NULL;
        const int64_t lim = limit[r];
        vf vmax = ninf;
        for (int64_t c = 0; c < lim; c += VW) {
            vf x = V_LOAD(sr + c);
            if (br) {
                x = V_FMA(x, vscale, V_LOAD(br + c));
                if (c + VW > lim) x = v_hide_from(x, c, lim, ninf);
                V_STORE(sr + c, x);
            } else if (c + VW > lim) {
                x = v_hide_from(x, c, lim, ninf);
            }
            vmax = V_MAX(vmax, x);
        }
        float mx = v_hmax(vmax);
        if (!br) mx *= scale;
        alpha[r] = mx > rowmax[r] ? mx : rowmax[r];
    }
    /* alpha = exp(max_old - max_new) for all rows at once (1 while a row has
     * seen nothing: -inf - -inf would be NaN); the new max becomes current. */
    int64_t r = 0;
    for (; r + VW <= m; r += VW) {
        const vf old = V_LOAD(rowmax + r), mnew = V_LOAD(alpha + r);
        const vf a = v_exp_nonpos(V_SUB(old, mnew));
        V_STORE(alpha + r, a);
        V_STORE(rowmax + r, mnew);
    }
    for (; r < m; ++r) {
        const float mnew = alpha[r];
        alpha[r] = SIMD(exp1)(rowmax[r] - mnew);
        rowmax[r] = mnew;
    }
    for (r = 0; r < m; ++r)
        if (rowmax[r] == -INFINITY) alpha[r] = 1.0f;
    /* Pass 2, per row: p = exp(x - max) and the running sum. */
    for (r = 0; r < m; ++r) {
        float *sr = s + r * lds;
        const int64_t lim = limit[r];
        const float mnew = rowmax[r];
        if (mnew == -INFINITY) { /* nothing visible so far: p = 0, sum stays 0 */
            SIMD(zero_tail)(sr, 0, n);
            continue;
        }
        const vf vm = V_SET1(mnew), vnm = V_SET1(-mnew);
        vf vsum = V_ZERO(), vsum2 = V_ZERO();
        int64_t c = 0;
        /* Two independent exps per step while whole vectors remain. */
        for (; c + 2 * VW <= lim; c += 2 * VW) {
            const vf x0 = bias ? V_SUB(V_LOAD(sr + c), vm) : V_FMA(V_LOAD(sr + c), vscale, vnm);
            const vf x1 = bias ? V_SUB(V_LOAD(sr + c + VW), vm)
                               : V_FMA(V_LOAD(sr + c + VW), vscale, vnm);
            const vf p0 = v_exp_nonpos(x0), p1 = v_exp_nonpos(x1);
            V_STORE(sr + c, p0);
            V_STORE(sr + c + VW, p1);
            vsum = V_ADD(vsum, p0);
            vsum2 = V_ADD(vsum2, p1);
        }
        for (; c < lim; c += VW) {
            vf x = bias ? V_SUB(V_LOAD(sr + c), vm) : V_FMA(V_LOAD(sr + c), vscale, vnm);
            if (!bias && c + VW > lim) x = v_hide_from(x, c, lim, ninf);
            const vf pv = v_exp_nonpos(x);
            V_STORE(sr + c, pv);
            vsum = V_ADD(vsum, pv);
        }
        vsum = V_ADD(vsum, vsum2);
        SIMD(zero_tail)(sr, lim, n);
        rowsum[r] = rowsum[r] * alpha[r] + v_hsum(vsum);
    }
}

static void SIMD(probs_from_lse)(int64_t m, int64_t n, float scale, float *s, int64_t lds,
                                 const int32_t *limit, const float *bias, int64_t ldbias,
                                 const float *lse)
{
    const vf vscale = V_SET1(scale), ninf = V_SET1(-INFINITY);
    for (int64_t r = 0; r < m; ++r) {
        float *sr = s + r * lds;
        const float *br = bias ? bias + r * ldbias : NULL;
        const int64_t lim = lse[r] == -INFINITY ? 0 : limit[r];
        const vf vl = V_SET1(lse[r]), vnl = V_SET1(-lse[r]);
        for (int64_t c = 0; c < lim; c += VW) {
            vf x = br ? V_SUB(V_FMA(V_LOAD(sr + c), vscale, V_LOAD(br + c)), vl)
                      : V_FMA(V_LOAD(sr + c), vscale, vnl);
            if (c + VW > lim) x = v_hide_from(x, c, lim, ninf);
            V_STORE(sr + c, v_exp(x));
        }
        SIMD(zero_tail)(sr, lim, n);
    }
}

static void SIMD(dsoftmax)(int64_t m, int64_t n, float scale, const float *p, int64_t ldp,
                           float *dp, int64_t lddp, const float *di)
{
    const vf vscale = V_SET1(scale);
    for (int64_t r = 0; r < m; ++r) {
        const float *pr = p + r * ldp;
        float *dr = dp + r * lddp;
        const vf vd = V_SET1(di[r]);
        for (int64_t c = 0; c < n; c += VW)
            V_STORE(dr + c, V_MUL(V_MUL(V_LOAD(pr + c), V_SUB(V_LOAD(dr + c), vd)), vscale));
    }
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

/* 8 × 8 block transpose (AVX, available under both SIMD targets):
 * dst[i*ld + j] = src[j*rs + i]. */
static inline void SIMD(transpose8)(const float *src, int64_t rs, float *dst, int64_t ld)
{
    __m256 r[8], t[8], u[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * rs);
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
        _mm256_storeu_ps(dst + i * ld, _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
        _mm256_storeu_ps(dst + (i + 4) * ld, _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
    }
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

static void SIMD(vexp)(const float *x, float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + VW <= n; i += VW) V_STORE(y + i, v_exp(V_LOAD(x + i)));
    for (; i < n; ++i) y[i] = SIMD(exp1)(x[i]);
}

#undef NR
