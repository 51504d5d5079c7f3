/*
 * The fused SDPA path's microkernels, one table per instruction set.
 *
 * forward.c and backward.c plan tiles, pack operands and own all memory;
 * the kernels below only compute on buffers they are given (no allocation,
 * no option parsing). Every ISA implements the same table:
 *   generic.c  portable C (the readable definition of each primitive)
 *   avx2.c     AVX2 + FMA      } one SIMD body, kernels/simd_body.h,
 *   avx512.c   AVX-512F        } instantiated per vector width
 *   neon.c     AArch64 NEON    }
 * dispatch.c picks one at run time from CPUID (x86), the OS's hardware
 * capabilities (AArch64) and ATTN_ARCH.
 *
 * Layout conventions shared by all primitives:
 *   - "n" column counts handed to sdpa_gemm_fn are multiples of the table's
 *     npad, or of npad / 2 (a last half panel: the score rows of a diagonal
 *     tile end there); B and C rows are unit-stride (any alignment).
 *   - A operands are read one element at a time (broadcast), so any strides
 *     work: element (r, l) of A is a[r*a_rs + l*a_cs].
 */
#ifndef ATTN_SDPA_KERNELS_H
#define ATTN_SDPA_KERNELS_H

#include "../core/half.h"
#include "../core/internal.h"

#include <math.h>
#include <stdint.h>

typedef enum {
    SDPA_GEMM_SET,       /* C = A·B */
    SDPA_GEMM_ADD,       /* C = C + A·B */
    SDPA_GEMM_SCALE_ADD, /* C = diag(row_scale)·C + A·B (online-softmax rescale) */
} sdpa_gemm_mode;

/*
 * C (m × n) ⊕= A (m × k) · B (k × n)
 *   A(r, l) = a[r*a_rs + l*a_cs]           any strides
 *   B(l, :) = b + l*ldb                    n contiguous floats, n % (npad/2) == 0
 *   C(r, :) = c + r*ldc                    n contiguous floats
 *   row_scale[m] only for SDPA_GEMM_SCALE_ADD.
 * k may be 0 (C = 0, C, or scaled C).
 */
typedef void (*sdpa_gemm_fn)(int64_t m, int64_t n, int64_t k, const float *a, int64_t a_rs,
                             int64_t a_cs, const float *b, int64_t ldb, float *c, int64_t ldc,
                             const float *row_scale, sdpa_gemm_mode mode);

/* sdpa_gemm_fn with a 16-bit B (bt = ATTN_BF16 or ATTN_F16, ldb in
 * elements), widened exactly as it is loaded: the bits of gemm on B's
 * float32 widening. (A decoding step's P·V reads a 16-bit V in place.)
 * NULL in tables that do not have it. */
typedef void (*sdpa_gemm16_fn)(attn_dtype bt, int64_t m, int64_t n, int64_t k, const float *a,
                               int64_t a_rs, int64_t a_cs, const uint16_t *b, int64_t ldb,
                               float *c, int64_t ldc, const float *row_scale,
                               sdpa_gemm_mode mode);

/* Lanes of the widest vector: the row stride of gemm_max's maxima. */
#define SDPA_MAX_VW 16

/*
 * A score tile and its rows' maxima in one pass: C = A·B as sdpa_gemm_fn
 * with SDPA_GEMM_SET, and vmax (m × SDPA_MAX_VW, the table's VW lanes used)
 * receives for every row r the lane-wise maximum of C's vectors in column
 * order,
 *   vmax[r] = max(...max(max(-inf, C(r, 0:VW)), C(r, VW:2VW))...)
 * (max(a, b) = a > b ? a : b), exactly the first pass of softmax_online,
 * which then need not read the tile for it. NULL in tables without it.
 */
typedef void (*sdpa_gemm_max_fn)(int64_t m, int64_t n, int64_t k, const float *a, int64_t a_rs,
                                 int64_t a_cs, const float *b, int64_t ldb, float *c,
                                 int64_t ldc, float *vmax);

/*
 * How the raw dot products of a score tile become logits, the same way in
 * every forward and backward primitive (so a probability recomputed in the
 * backward is the forward's, bit for bit):
 *   x = fl(scale·s)                         one rounding, never fused
 *   x = softcap·tanh(x·inv_softcap)         when softcap > 0 (inv_softcap =
 *                                           fl(1/softcap): no division per score)
 *   x = x + bias(r,c)                       when bias != NULL
 *   x = x + fl(-alibi·|alibi_d0 + r - c|)   when alibi != 0: ALiBi computed in
 *                                           registers, no bias tile (never
 *                                           together with bias)
 * Column c of row r is visible when start[r] <= c < end[r] and bias(r,c) is
 * not -inf; a hidden column is SELECTED to -inf (never added to, so a NaN
 * score of a hidden key cannot leak) and its probability is exactly 0.
 * The primitives below work on columns [c0, n): c0 is a multiple of npad,
 * start[r] >= c0, end[r] <= n; columns below c0 are neither read nor written.
 */
typedef struct {
    float scale;
    float softcap, inv_softcap; /* softcap 0: off */
    const int32_t *start, *end;
    const float *bias;          /* (m, ldbias) or NULL */
    int64_t ldbias;             /* 0: one row shared by all rows */
    float alibi;                /* ALiBi slope of every row; 0: none */
    int32_t alibi_d0;           /* i + Nk - Nq - j of row 0, column 0 (|·| < 2^24) */
} sdpa_logits;

/*
 * Online-softmax step of the forward pass over one score tile.
 *   s      (m, lds): on entry Q·Kᵀ for columns [c0, n); on return the
 *          unnormalised probabilities p = exp(x - rowmax_new), 0 where hidden.
 *   rowmax[r], rowsum[r]: running max and sum, updated;
 *   alpha[r] = exp(rowmax_old - rowmax_new), the factor for the output row
 *   (1 when the row has seen nothing yet).
 *   vmax   NULL, or gemm_max's maxima of s's raw rows over [c0, n): used
 *          where they are the maxima needed (plain logits, every column of
 *          [c0, n) visible), so s is not read for them.
 */
typedef void (*sdpa_softmax_fn)(int64_t m, int64_t c0, int64_t n, const sdpa_logits *lg,
                                float *s, int64_t lds, float *rowmax, float *rowsum,
                                float *alpha, const float *vmax);

/* sdpa_softmax_fn with the probabilities rounded to bfloat16 (to nearest
 * even) into p16 (m rows, lds apart, s's columns) in the exponentials' own
 * pass, instead of into s (which it may still overwrite): the bfloat16
 * forward's P for P·V. Bitwise the floats softmax_online would store,
 * rounded. NULL in tables without it; where set, it needs AVX512_BF16
 * (callers check sdpa_bf16dot_available()). */
typedef void (*sdpa_softmax16_fn)(int64_t m, int64_t c0, int64_t n, const sdpa_logits *lg,
                                  float *s, int64_t lds, uint16_t *p16, float *rowmax,
                                  float *rowsum, float *alpha, const float *vmax);

/*
 * The softmax of rows that take all their keys at once (the forward's
 * windowed bands): plain logits x = fl(scale·s), row r seeing columns
 * [start[r], end[r]) of s (z0 <= start, end <= n), from the statistics in
 * rowmax[r], rowsum[r] (a sink's, or -inf and 0) to the final ones there.
 * p = exp(x - max) goes to s, or with p16 (tables with softmax_online_p16
 * only) rounded to bfloat16 into p16 (lds apart, s's columns); columns
 * [z0, n) outside a row's keys receive 0. Rows may be written up to
 * 2·VW - 1 columns past n (lds leaves that room). The sums' order differs
 * from softmax_online's. NULL in tables without it.
 */
typedef void (*sdpa_softmax_rows_fn)(int64_t m, int64_t z0, int64_t n, float scale,
                                     const int32_t *start, const int32_t *end, float *s,
                                     int64_t lds, uint16_t *p16, float *rowmax, float *rowsum);

/*
 * Probabilities from the row statistics (backward, and the forward's weights
 * pass): s(r,c) <- exp(x(r,c) - rowmax[r] - rowll[r]) where visible, else 0;
 * rows with rowmax = -inf are all 0. With softcap, dfac (m, lds) receives
 * d x / d s = scale·(1 - tanh²) for the backward (else it is not touched).
 */
typedef void (*sdpa_probs_fn)(int64_t m, int64_t c0, int64_t n, const sdpa_logits *lg, float *s,
                              int64_t lds, const float *rowmax, const float *rowll, float *dfac);

/*
 * Softmax backward: dp(r,c) <- p·(dp - di[r])·f for c in [c0, n), where
 * f = dfac(r,c) (softcap) or scale; exactly 0 where p = 1 (a softmax of one
 * key is constant) and, with guard, where p = 0 (a hidden key's dP may be
 * NaN; it is selected away). dfac has row stride ldp.
 */
typedef void (*sdpa_dsoftmax_fn)(int64_t m, int64_t c0, int64_t n, float scale, const float *p,
                                 int64_t ldp, float *dp, int64_t lddp, const float *di,
                                 const float *dfac, bool guard);

/*
 * Dropout of a tile: for rows r < m and columns c in [c0, n),
 *   s(r,c) *= f, z(r,c) = f (z may be NULL), f = scale when
 *   word (j % 4) of Philox4x32-10(counter (j/4, i, bh, ctr3), key) >= keep,
 *   else 0, with i = i0 + r, j = j0 + c.
 * j0 + c0 is a multiple of 4. The same bits on every ISA (integer work).
 */
typedef struct {
    uint32_t key[2];
    uint32_t bh, ctr3; /* counter words 2 and 3 */
    uint32_t keep;     /* threshold on the 32-bit word */
    float scale;       /* 1 / (1 - p) */
} sdpa_dropout_args;

typedef void (*sdpa_dropout_fn)(const sdpa_dropout_args *d, int64_t m, int64_t i0, int64_t j0,
                                int64_t c0, int64_t n, float *s, int64_t lds, float *z);

/* ALiBi bias of one row: bias[c] = -slope·|dist0 - c| for c < n (|dist0 - c|
 * < 2^24, so the distance is exact in float). */
typedef void (*sdpa_alibi_row_fn)(float *bias, float slope, int32_t dist0, int64_t n);

/*
 * One mask row turned into an additive bias: for c < n,
 *   bool:  bias[c] (+)= src[c*cs] ? 0 : -inf      (true = may attend)
 *   float: bias[c] (+)= src[c*cs]
 * with "+=" when accumulate, "=" otherwise. Returns `last`, one past the last
 * column whose bias is not -inf (0 if every column is hidden), and stores in
 * *irregular whether bias[0, last) holds anything but zeros (a float value or
 * a hidden column), i.e. whether softmax must read the bias at all.
 */
typedef int64_t (*sdpa_mask_row_fn)(float *bias, const void *src, int64_t cs, attn_dtype dtype,
                                    int64_t n, bool accumulate, bool *irregular);

/* softmax_online's step for row r when its running max is still -inf
 * after a tile: the max passed over nothing but hidden columns, -inf
 * logits and NaN ones (x > max is false for NaN, and a SIMD max may even
 * end a lane on NaN and drop the finite values before it). If one of the
 * logits fl(scale·x[c]), c in [lo, hi), is NaN, the row's sum becomes NaN,
 * which every later rescale keeps (NaN·alpha + sum): the row's out and lse
 * are NaN, as on the reference path, wherever its NaN key sits. A cold
 * path: rows reach it only before their first visible key. */
static inline void sdpa_nan_logits_poison(const float *x, int64_t lo, int64_t hi, float scale,
                                          float *rowsum)
{
    for (int64_t c = lo; c < hi; ++c)
        if (isnan(x[c] * scale)) {
            *rowsum = NAN;
            return;
        }
}

/* The scalar body of a mask row for columns [c, n), continuing the running
 * *last, *hidden and *nonzero: the generic kernel's whole loop and the SIMD
 * kernels' tail. */
static inline void sdpa_mask_cols(float *bias, const void *src, int64_t cs, attn_dtype dtype,
                                  int64_t c, int64_t n, bool accumulate, int64_t *last,
                                  int64_t *hidden, bool *nonzero)
{
    for (; c < n; ++c) {
        float v = dtype == ATTN_BOOL ? (((const uint8_t *)src)[c * cs] ? 0.0f : -INFINITY)
                                     : ((const float *)src)[c * cs];
        if (accumulate) v += bias[c];
        bias[c] = v;
        if (v == -INFINITY) {
            ++*hidden;
        } else {
            *last = c + 1;
            *nonzero |= v != 0.0f;
        }
    }
}

/*
 * Transposed packing of a key (or value) tile: dst[d*ld + c] = src[c*rs + d*cs]
 * for d < D, c < n; columns [n, ld) are zeroed. (The B operand of Q·Kᵀ.)
 */
typedef void (*sdpa_pack_t_fn)(const float *src, int64_t rs, int64_t cs, int64_t n, int64_t D,
                               float *dst, int64_t ld);

/*
 * Rows of 16-bit floats (t = ATTN_BF16 or ATTN_F16) widened to float32,
 * exactly: dst[r*ld + c] = src[r*rs + c*cs] for r < rows, c < cols; columns
 * [cols, ld) are zeroed. The dtype-aware step of packing V tiles.
 */
typedef void (*sdpa_widen_fn)(attn_dtype t, const uint16_t *src, int64_t rs, int64_t cs,
                              int64_t rows, int64_t cols, float *dst, int64_t ld);

/* dst[i] = src[i] rounded to t (ATTN_BF16 or ATTN_F16), to nearest even,
 * for i < n: the same bits as attn_store_float. */
typedef void (*sdpa_narrow_fn)(attn_dtype t, const float *src, int64_t n, uint16_t *dst);

/* sdpa_pack_t_fn of 16-bit rows (t = ATTN_BF16 or ATTN_F16), widened
 * exactly as they are transposed: the K tile of a 16-bit forward. */
typedef void (*sdpa_pack_t16_fn)(attn_dtype t, const uint16_t *src, int64_t rs, int64_t cs,
                                 int64_t n, int64_t D, float *dst, int64_t ld);

/*
 * Scores of a few query rows straight from the rows of K (decoding: no Kᵀ
 * tile is packed):
 *   s[r*lds + j] = Σ_l q[r*ldq + l]·k[j*rs + l]    r < m (1…SDPA_SCORES_ROWS), j < n
 * and s[r*lds + j] = 0 for n <= j < n_out. k holds float32 or 16-bit floats
 * (t), each row D contiguous values, D a multiple of 8; q holds m rows of
 * D contiguous floats. The sum runs along K's rows: lane i of a vector
 * accumulates features i, i + VW, … by fused multiply-adds, and the lanes
 * are added by a fixed tree, so a score depends only on its two rows (not
 * on m, n or the key's position) and has the error bound of any float32
 * dot product, within (D/VW + log2 VW)·u·Σ|q·k|. (The packed GEMM sums
 * the same products in another order: the two agree to that bound, not to
 * the bit.) NULL in tables without fused multiply-add.
 * The kernel prefetches K's rows SDPA_SCORES_AHEAD keys ahead (past n too:
 * the next tile's) and, when pf is given, the rows pf->rows + j·pf->rs
 * (pf->row_bytes each) of the keys it works on: V's, for the P·V that follows.
 */
enum { SDPA_SCORES_ROWS = 4, SDPA_SCORES_AHEAD = 32 };
typedef struct {
    const char *rows;
    int64_t rs, row_bytes; /* in bytes */
} sdpa_prefetch;
typedef void (*sdpa_scores_rows_fn)(attn_dtype t, const void *k, int64_t rs, int64_t n,
                                    int64_t n_out, int64_t D, const float *q, int64_t ldq, int m, float *s,
                                    int64_t lds, const sdpa_prefetch *pf);

/* Whether the rows [0, rows) of w floats each (ld apart) hold only finite
 * values: else a zero probability of a key some row does not see would
 * meet an infinite or NaN value in a product (0·inf = NaN). */
typedef bool (*sdpa_finite_fn)(const float *src, int64_t ld, int64_t rows, int64_t w);

/* y[i] = exp(x[i]) with the kernel's vectorised exp (exposed for tests). */
typedef void (*sdpa_vexp_fn)(const float *x, float *y, int64_t n);

typedef struct {
    const char *name; /* "generic", "avx2", "avx512", "neon" */
    int npad;         /* gemm column counts are multiples of this */
    sdpa_gemm_fn gemm;
    sdpa_gemm16_fn gemm16;
    sdpa_gemm_max_fn gemm_max;
    sdpa_softmax_fn softmax_online;
    sdpa_softmax16_fn softmax_online_p16;
    sdpa_softmax_rows_fn softmax_rows;
    sdpa_probs_fn probs;
    sdpa_dsoftmax_fn dsoftmax;
    sdpa_dropout_fn dropout;
    sdpa_mask_row_fn mask_row;
    sdpa_alibi_row_fn alibi_row;
    sdpa_pack_t_fn pack_transposed;
    sdpa_pack_t16_fn pack_transposed16;
    sdpa_scores_rows_fn scores_rows; /* NULL: pack Kᵀ and use gemm */
    sdpa_widen_fn widen;
    sdpa_narrow_fn narrow;
    sdpa_finite_fn rows_finite;
    sdpa_vexp_fn vexp;
    sdpa_vexp_fn vtanh; /* the soft-capping tanh, exposed for tests */
} sdpa_kernels;

/* Largest npad of any table: buffers sized with it fit every ISA. */
#define SDPA_MAX_NPAD 32

/* Keys per tile of the fused forward's GEMM path: softmax_online has an
 * instance for exactly this many columns, its loops unrolled. 128 rather
 * than 64: half the online-softmax rescales and P·V accumulator passes per
 * row, 1-4% less time for unmasked calls at N = 128…8192
 * (docs/PERFORMANCE.md). */
#define SDPA_KEY_TILE 128

/* The GEMM of sdpa_gemm_fn that skips zero elements of A, so a hidden key
 * (probability exactly 0) never multiplies its operand row: 0·NaN would be
 * NaN. Portable and slow; only for tiles whose operands are not all finite. */
void sdpa_gemm_skip_zeros(int64_t m, int64_t n, int64_t k, const float *a, int64_t a_rs,
                          int64_t a_cs, const float *b, int64_t ldb, float *c, int64_t ldc,
                          const float *row_scale, sdpa_gemm_mode mode);

extern const sdpa_kernels sdpa_kernels_generic;
#if defined(__x86_64__) || defined(__i386__)
#define SDPA_HAVE_X86 1
extern const sdpa_kernels sdpa_kernels_avx2;
extern const sdpa_kernels sdpa_kernels_avx512;
#endif

/* Whether kern is the AVX-512 table (which the bfloat16 pair dot products
 * of bf16dot.h accompany); false on other architectures, where that table
 * does not exist. */
static inline bool sdpa_kernels_is_avx512(const sdpa_kernels *kern)
{
#if defined(SDPA_HAVE_X86)
    return kern == &sdpa_kernels_avx512;
#else
    (void)kern;
    return false;
#endif
}

#if defined(__aarch64__) && defined(__ARM_NEON) && (defined(__GNUC__) || defined(__clang__))
#define SDPA_HAVE_NEON 1
extern const sdpa_kernels sdpa_kernels_neon;
#endif

/* The x86 tables in increasing order (each CPU with one runs the ones
 * before it); NEON is another family: generic or neon on AArch64. */
typedef enum {
    SDPA_ISA_REFERENCE,
    SDPA_ISA_GENERIC,
    SDPA_ISA_AVX2,
    SDPA_ISA_AVX512,
    SDPA_ISA_NEON,
} sdpa_isa;

/* What this CPU runs (CPUID, AArch64 HWCAP), capped by ATTN_ARCH; ATTN_ARCH=reference gives
 * SDPA_ISA_REFERENCE. An ATTN_ARCH the CPU lacks is never honoured: the best
 * supported ISA is used instead. Reads the environment on every call (no
 * cached state); the CPUID query itself is cached by the compiler runtime. */
sdpa_isa sdpa_isa_select(void);
/* Best supported ISA, ignoring ATTN_ARCH. */
sdpa_isa sdpa_isa_best(void);
/* Kernel table for an ISA (SDPA_ISA_REFERENCE maps to the best supported one). */
const sdpa_kernels *sdpa_kernels_for(sdpa_isa isa);

/*
 * The exp every kernel uses (scalar in generic.c, vectorised in the SIMD
 * bodies): Cody–Waite range reduction x = n·ln2 + r with |r| <= ln2/2, a
 * degree-6 polynomial for e^r (coefficients fitted for minimal relative
 * error by bench/fit_exp_poly.py, 3e-9 before float rounding), and 2^n by
 * exponent arithmetic.
 *   x <  SDPA_EXP_MIN  gives exactly 0 (so -inf -> 0; the true value is below
 *                      2^-125 ~ 2.4e-38, so the absolute error is below that);
 *   x >  SDPA_EXP_MAX  gives +inf (true value above 2.4e38);
 *   in between, the error is at most SDPA_EXP_MAX_ULP units in the last
 *   place, checked against double exp over the whole range (4M points plus
 *   the neighbourhoods of 0 and both ends) by tests/test_fused.c, which
 *   measured 1.01 ulp for the FMA kernels (avx2: the polynomial by Estrin's
 *   scheme in float) and 0.71 ulp for the generic C one (Horner's scheme in
 *   double, rounded once).
 */
#define SDPA_EXP_MIN (-86.64f)
#define SDPA_EXP_MAX 88.37f
#define SDPA_EXP_MAX_ULP 2
#define SDPA_LOG2E 1.44269504088896341f
#define SDPA_LN2_HI 0.693145751953125f      /* 15 significant bits: n·hi is exact */
#define SDPA_LN2_LO 1.42860682030941723e-6f /* ln2 - hi */
#define SDPA_EXP_C2 4.999999404e-01f
#define SDPA_EXP_C3 1.666652113e-01f
#define SDPA_EXP_C4 4.166838899e-02f
#define SDPA_EXP_C5 8.368710056e-03f
#define SDPA_EXP_C6 1.381461276e-03f

/*
 * tanh for logit soft-capping: for |y| < SDPA_TANH_SMALL an odd polynomial
 * y + y³·P(y²) (coefficients fitted for relative error by least squares on
 * Chebyshev nodes, 0.77 ulp in float arithmetic), above it
 * (1 - e^{-2|y|}) / (1 + e^{-2|y|}) with the kernels' exp (no cancellation
 * there), sign restored. The SIMD bodies form that quotient as
 * 1 - 2e·r with r a Newton-refined approximate reciprocal of 1 + e (no
 * division), and skip it when no lane needs it (logits well inside the cap,
 * the common case). tests/test_fused.c checks it against double tanh:
 * within SDPA_TANH_MAX_ULP units in the last place.
 */
#define SDPA_TANH_MAX_ULP 2
#define SDPA_TANH_SMALL 0.625f
#define SDPA_TANH_P0 (-0.3333328366279602f)
#define SDPA_TANH_P1 0.13331516087055206f
#define SDPA_TANH_P2 (-0.053746115416288376f)
#define SDPA_TANH_P3 0.020660405978560448f
#define SDPA_TANH_P4 (-0.005728976335376501f)

#endif
