/* Special values and hostile arguments: NaN inputs propagate as in torch
 * (never silently become a "masked" zero row), and arguments that could
 * crash or overflow are refused with a status. Both SDPA paths. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 1, H = 2, NQ = 5, NK = 6, D = 8 };

static const attn_path paths[2] = {ATTN_PATH_REFERENCE, ATTN_PATH_FUSED};
static const char *const path_names[2] = {"reference", "fused"};

static void fill(float *x, int64_t n, tu_rng *r)
{
    for (int64_t i = 0; i < n; ++i) x[i] = (float)tu_rng_normal(r);
}

static bool row_nan(const float *o, int64_t row, int64_t width)
{
    for (int64_t c = 0; c < width; ++c)
        if (!isnan(o[row * width + c])) return false;
    return true;
}

static bool row_finite(const float *o, int64_t row, int64_t width)
{
    for (int64_t c = 0; c < width; ++c)
        if (!isfinite(o[row * width + c])) return false;
    return true;
}

int main(int argc, char **argv)
{
    tu_options opt;
    if (!tu_parse_options(argc, argv, 7, &opt)) return 2;
    tu_suite suite = {0};
    tu_group g;
    tu_rng rng;
    tu_rng_seed(&rng, opt.seed);
    static float q[B * H * NQ * D], k[B * H * NK * D], v[B * H * NK * D], o[B * H * NQ * D],
        lse[B * H * NQ];
    attn_tensor Q = attn_tensor_4d(q, B, H, NQ, D), K = attn_tensor_4d(k, B, H, NK, D),
                V = attn_tensor_4d(v, B, H, NK, D), O = attn_tensor_4d(o, B, H, NQ, D),
                L = attn_tensor_3d(lse, B, H, NQ);

    for (int pi = 0; pi < 2; ++pi) {
        char name[64];
        snprintf(name, sizeof name, "NaN propagation (%s)", path_names[pi]);
        tu_group_begin(&g, &suite, name);
        attn_sdpa_opts opts = attn_sdpa_opts_default();
        opts.path = paths[pi];
        /* A query row of NaN: every score of that row is NaN. */
        fill(q, B * H * NQ * D, &rng);
        fill(k, B * H * NK * D, &rng);
        fill(v, B * H * NK * D, &rng);
        for (int d = 0; d < D; ++d) q[(0 * NQ + 1) * D + d] = NAN; /* head 0, row 1 */
        q[(1 * NQ + 2) * D + 3] = NAN;                            /* head 1, row 2: one entry */
        attn_status s = attn_sdpa(&Q, &K, &V, &O, &L, NULL, &opts, NULL);
        if (tu_check(&g, s == ATTN_OK, "attn_sdpa failed: %s", attn_status_string(s))) {
            tu_check(&g, row_nan(o, 0 * NQ + 1, D) && isnan(lse[0 * NQ + 1]),
                     "a NaN query row must give NaN output and LSE");
            tu_check(&g, row_nan(o, 1 * NQ + 2, D) && isnan(lse[1 * NQ + 2]),
                     "one NaN entry in a query must give a NaN row");
            tu_check(&g, row_finite(o, 0, D) && row_finite(o, 1 * NQ + 1, D),
                     "rows without NaN inputs must stay finite");
        }
        /* A NaN key that every query sees poisons every row ... */
        fill(q, B * H * NQ * D, &rng);
        for (int d = 0; d < D; ++d) k[(0 * NK + 4) * D + d] = NAN; /* head 0, key 4 */
        s = attn_sdpa(&Q, &K, &V, &O, &L, NULL, &opts, NULL);
        tu_check(&g, s == ATTN_OK && row_nan(o, 0, D) && row_finite(o, NQ, D),
                 "a NaN key must poison its head's rows only");
        /* ... unless causality hides it: top-left, rows 0..3 never see key 4. */
        opts.causal = ATTN_CAUSAL_TOP_LEFT;
        s = attn_sdpa(&Q, &K, &V, &O, &L, NULL, &opts, NULL);
        tu_check(&g, s == ATTN_OK && row_finite(o, 0, D) && row_finite(o, 3, D) && row_nan(o, 4, D),
                 "a NaN key hidden by causality must not reach earlier rows");
        tu_group_end(&g);
    }

    tu_group_begin(&g, &suite, "hostile arguments");
    attn_sdpa_opts opts = attn_sdpa_opts_default();
    attn_error err;
    opts.num_threads = ATTN_MAX_THREADS + 1;
    tu_check(&g, attn_sdpa(&Q, &K, &V, &O, &L, NULL, &opts, &err) == ATTN_ERR_ARG &&
                     strstr(err.message, "num_threads"),
             "num_threads above ATTN_MAX_THREADS must be refused");
    opts = attn_sdpa_opts_default();
    opts.scale = -1.0f;
    tu_check(&g, attn_sdpa(&Q, &K, &V, &O, &L, NULL, &opts, &err) == ATTN_ERR_ARG &&
                     strstr(err.message, "scale"),
             "a negative scale must be refused");
    opts.scale = INFINITY;
    tu_check(&g, attn_sdpa(&Q, &K, &V, &O, &L, NULL, &opts, &err) == ATTN_ERR_ARG,
             "an infinite scale must be refused");
    /* Keys broadcast (stride 0) to 2^61 rows: the reference's row buffers
     * would overflow size_t. */
    for (int pi = 0; pi < 2; ++pi) {
        opts = attn_sdpa_opts_default();
        opts.path = paths[pi];
        attn_tensor K2 = K, V2 = V;
        K2.shape[2] = V2.shape[2] = (int64_t)1 << 61;
        K2.stride[2] = V2.stride[2] = 0;
        attn_status s = attn_sdpa(&Q, &K2, &V2, &O, &L, NULL, &opts, &err);
        tu_check(&g, s == ATTN_ERR_OVERFLOW || s == ATTN_ERR_ALLOC || s == ATTN_ERR_UNSUPPORTED,
                 "%s: 2^61 broadcast keys must be refused, got %s", path_names[pi],
                 attn_status_string(s));
        /* Feature size 2^57 on broadcast (stride-0) queries and keys: the
         * workspace size products overflow (issue 12, defect 5). */
        attn_tensor Q3 = Q, K3 = K;
        Q3.shape[3] = K3.shape[3] = (int64_t)1 << 57;
        Q3.stride[3] = K3.stride[3] = 0;
        s = attn_sdpa(&Q3, &K3, &V, &O, &L, NULL, &opts, &err);
        tu_check(&g, s == ATTN_ERR_OVERFLOW || s == ATTN_ERR_UNSUPPORTED,
                 "%s: D = 2^57 broadcast must be refused, got %s", path_names[pi],
                 attn_status_string(s));
    }
    /* A finite scale whose scores overflow (issue 12, defect 6): the same
     * answer on both paths, an overflowing logit is +-inf like any other. */
    {
        static float o2[2][B * H * NQ * D], l2[2][B * H * NQ];
        fill(q, B * H * NQ * D, &rng);
        for (int i = 0; i < B * H * NQ * D; ++i) q[i] *= 0.5f;
        fill(k, B * H * NK * D, &rng);
        fill(v, B * H * NK * D, &rng);
        for (int pi = 0; pi < 2; ++pi) {
            opts = attn_sdpa_opts_default();
            opts.path = paths[pi];
            opts.scale = 3e38f;
            attn_tensor Ox = attn_tensor_4d(o2[pi], B, H, NQ, D), Lx = attn_tensor_3d(l2[pi], B, H, NQ);
            tu_check(&g, attn_sdpa(&Q, &K, &V, &Ox, &Lx, NULL, &opts, &err) == ATTN_OK,
                     "%s: scale 3e38 must run", path_names[pi]);
        }
        /* Logits are 3e38·(q·k): rows with some q·k > ~1.1 overflow to +inf
         * (out NaN, LSE +inf, as torch's softmax and logsumexp), the others
         * stay finite; both paths must say the same. */
        bool same = true;
        int overflowed = 0;
        for (int i = 0; i < B * H * NQ; ++i) {
            overflowed += l2[0][i] == INFINITY;
            same &= (isinf(l2[0][i]) && l2[0][i] == l2[1][i]) ||
                    (isfinite(l2[0][i]) && fabsf(l2[0][i] - l2[1][i]) <= 1e-5f * fabsf(l2[0][i]));
            for (int c = 0; c < D; ++c) {
                const float a = o2[0][i * D + c], b = o2[1][i * D + c];
                same &= isinf(l2[0][i]) ? isnan(a) && isnan(b) : fabsf(a - b) <= 1e-4f;
            }
        }
        tu_check(&g, same, "scale 3e38: the reference and fused paths must agree");
        tu_check(&g, overflowed > 0 && overflowed < B * H * NQ,
                 "scale 3e38: the case must overflow some rows and not others (%d of %d)",
                 overflowed, B * H * NQ);
    }
    /* Outputs sharing memory with inputs are refused (issue 12, defect 7). */
    {
        static float dq[B * H * NQ * D], dk[B * H * NK * D], dv[B * H * NK * D];
        attn_tensor dQ = attn_tensor_4d(dq, B, H, NQ, D), dK = attn_tensor_4d(dk, B, H, NK, D),
                    dV = attn_tensor_4d(dv, B, H, NK, D);
        opts = attn_sdpa_opts_default();
        tu_check(&g, attn_sdpa(&Q, &K, &V, &O, &L, NULL, &opts, &err) == ATTN_OK, "forward");
        tu_check(&g, attn_sdpa_backward(&Q, &K, &V, &O, &L, &O, &Q, &dK, &dV, &opts, &err) ==
                             ATTN_ERR_ARG && strstr(err.message, "grad_query") &&
                         strstr(err.message, "query"),
                 "grad_query sharing memory with query must be refused (got '%s')", err.message);
        tu_check(&g, attn_sdpa_backward(&Q, &K, &V, &O, &L, &O, &dQ, &K, &dV, &opts, &err) ==
                         ATTN_ERR_ARG,
                 "grad_key sharing memory with key must be refused");
        tu_check(&g, attn_sdpa(&Q, &K, &V, &Q, NULL, NULL, &opts, &err) == ATTN_ERR_ARG &&
                         strstr(err.message, "out"),
                 "out sharing memory with query must be refused");
        attn_tensor Lq = attn_tensor_3d(v, B, H, NQ); /* the LSE written over V */
        tu_check(&g, attn_sdpa(&Q, &K, &V, &O, &Lq, NULL, &opts, &err) == ATTN_ERR_ARG,
                 "lse sharing memory with value must be refused");
        tu_check(&g, attn_sdpa_backward(&Q, &K, &V, &O, &L, &O, &dQ, &dK, &dV, &opts, &err) ==
                         ATTN_OK,
                 "disjoint outputs must run");
    }
    /* An output whose rows alias each other. */
    opts = attn_sdpa_opts_default();
    attn_tensor O2 = O;
    O2.stride[2] = 1; /* rows 1 float apart, 8 floats wide */
    tu_check(&g, attn_sdpa(&Q, &K, &V, &O2, NULL, NULL, &opts, &err) == ATTN_ERR_STRIDE &&
                     strstr(err.message, "out"),
             "an output view whose elements alias must be refused");
    attn_tensor bad = attn_tensor_make(q, ATTN_F32, ATTN_MAX_DIMS + 2, (int64_t[10]){1});
    tu_check(&g, bad.ndim == -1, "attn_tensor_make with too many dimensions must be invalid");
    tu_group_end(&g);
    return tu_suite_finish(&suite);
}
