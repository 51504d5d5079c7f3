/*
 * test_ring_options — every option that changes attn_ring_sdpa's result must
 * agree across ranks: ranks given different scales (one explicit, one the
 * default 1/sqrt(D), or two explicit ones) all fail with ATTN_ERR_ARG and a
 * message naming the scale, instead of computing a mixed result; the same
 * scale spelled two ways (0 = default, and 1/sqrt(D) given) agrees.
 * Run with 2 ranks.
 */
#include "attn_mpi.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int P, me;
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    tu_suite suite = {0};
    tu_group g;
    enum { H = 2, N = 8, D = 4 };
    static float q[H * N * D], k[H * N * D], v[H * N * D], o[H * N * D], l[H * N];
    tu_rng r;
    tu_rng_seed(&r, 11 + (uint64_t)me);
    for (int i = 0; i < H * N * D; ++i)
        q[i] = (float)tu_rng_normal(&r), k[i] = (float)tu_rng_normal(&r), v[i] = (float)tu_rng_normal(&r);
    attn_tensor Q = attn_tensor_4d(q, 1, H, N, D), K = attn_tensor_4d(k, 1, H, N, D),
                V = attn_tensor_4d(v, 1, H, N, D), O = attn_tensor_4d(o, 1, H, N, D),
                L = attn_tensor_3d(l, 1, H, N);
    tu_group_begin(&g, &suite, "ranks' scales must agree");
    const float deflt = 1.0f / sqrtf((float)D);
    const struct {
        const char *what;
        float rank0, others;
        bool agree;
    } cases[] = {
        {"0.1 and 5", 0.1f, 5.0f, false},
        {"the default and 5", 0.0f, 5.0f, false},
        {"the default and 1/sqrt(D)", 0.0f, deflt, true},
        {"0.25 on every rank", 0.25f, 0.25f, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        attn_ring_opts opts = attn_ring_opts_default();
        opts.scale = me == 0 ? cases[i].rank0 : cases[i].others;
        opts.num_threads = 1;
        attn_error err = {0};
        const attn_status s = attn_ring_sdpa(MPI_COMM_WORLD, &Q, &K, &V, &O, &L, &opts, &err);
        if (cases[i].agree || P == 1)
            tu_check(&g, s == ATTN_OK, "%s: %s", cases[i].what, err.message);
        else
            tu_check(&g, s == ATTN_ERR_ARG && strstr(err.message, "scale"),
                     "%s: status %d, message: %s", cases[i].what, (int)s, err.message);
    }
    tu_group_end(&g);
    const int rc = tu_suite_finish(&suite);
    MPI_Finalize();
    return rc;
}
