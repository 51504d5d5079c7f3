/*
 * test_ring_cli — `mpiexec -n P attn ring ...` end to end: outputs equal
 * single-process attn_sdpa (causal zigzag and contiguous, a key padding
 * mask, the query's rank mirrored), and bad input (a missing file, a bad
 * shape, --causal with Nq != Nk) stops every rank with exit status 2 and a
 * message naming the file or option instead of hanging (ctest's TIMEOUT
 * catches a hang). The key padding mask is torch's (true = ignore the key),
 * as in attn mha; ranks given different --scale (or other result-changing
 * options), or --help on one rank, stop every rank.
 */
#include "attn.h"
#include "clirun.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fill(float *x, int64_t n, tu_rng *r)
{
    for (int64_t i = 0; i < n; ++i) x[i] = (float)tu_rng_normal(r);
}

/* Runs mpiexec -n np attn ring <args split on \x1f>. */
static bool ring(clirun_result *r, int np, const char *args)
{
    const char *argv[40];
    char npb[8], buf[2048];
    snprintf(npb, sizeof npb, "%d", np);
    snprintf(buf, sizeof buf, "%s", args);
    int n = 0;
    argv[n++] = "-n";
    argv[n++] = npb;
    argv[n++] = ATTN_CLI;
    argv[n++] = "ring";
    for (char *p = strtok(buf, "\x1f"); p && n < 38; p = strtok(NULL, "\x1f")) argv[n++] = p;
    argv[n] = NULL;
    return clirun(ATTN_MPIEXEC, argv, r);
}

/* mpiexec -n 1 attn ring A : -n 1 attn ring B (arguments split on \x1f). */
static bool ring_two(clirun_result *r, const char *a, const char *b)
{
    const char *argv[80];
    char ba[2048], bb[2048];
    snprintf(ba, sizeof ba, "%s", a);
    snprintf(bb, sizeof bb, "%s", b);
    int n = 0;
    char *bufs[2] = {ba, bb};
    for (int i = 0; i < 2; ++i) {
        if (i) argv[n++] = ":";
        argv[n++] = "-n";
        argv[n++] = "1";
        argv[n++] = ATTN_CLI;
        argv[n++] = "ring";
        for (char *p = strtok(bufs[i], "\x1f"); p && n < 76; p = strtok(NULL, "\x1f")) argv[n++] = p;
    }
    argv[n] = NULL;
    return clirun(ATTN_MPIEXEC, argv, r);
}

static double max_diff(const float *a, const float *b, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; ++i) {
        if (isinf(a[i]) || isinf(b[i])) {
            if (a[i] != b[i]) return INFINITY;
            continue;
        }
        m = fmax(m, fabs((double)a[i] - b[i]));
    }
    return m;
}

int main(void)
{
    tu_suite suite = {0};
    tu_group g;
    tu_rng r;
    tu_rng_seed(&r, 0xC11);
    enum { H = 2, N = 21, NK = 17, D = 4 };
    static float q[H * N * D], k[H * N * D], v[H * N * D], k2[H * NK * D], v2[H * NK * D],
        kb[H * N * (D - 1)], o[H * N * D], l[H * N];
    static uint8_t m[NK], ignore[NK];
    static int8_t m_int[NK];
    fill(q, H * N * D, &r), fill(k, H * N * D, &r), fill(v, H * N * D, &r);
    fill(k2, H * NK * D, &r), fill(v2, H * NK * D, &r), fill(kb, H * N * (D - 1), &r);
    for (int j = 0; j < NK; ++j) m[j] = j % 3 != 1, ignore[j] = !m[j], m_int[j] = (int8_t)ignore[j];
    attn_tensor Q = attn_tensor_3d(q, H, N, D), K = attn_tensor_3d(k, H, N, D),
                V = attn_tensor_3d(v, H, N, D), K2 = attn_tensor_3d(k2, H, NK, D),
                V2 = attn_tensor_3d(v2, H, NK, D), KB = attn_tensor_3d(kb, H, N, D - 1);
    const int64_t ms[1] = {NK};
    /* the file holds torch's key_padding_mask: true = ignore */
    attn_tensor M = attn_tensor_make(ignore, ATTN_BOOL, 1, ms);
    attn_error e;
    attn_npy_write("ring_q.npy", &Q, &e), attn_npy_write("ring_k.npy", &K, &e);
    attn_npy_write("ring_v.npy", &V, &e), attn_npy_write("ring_k2.npy", &K2, &e);
    attn_npy_write("ring_v2.npy", &V2, &e), attn_npy_write("ring_kb.npy", &KB, &e);
    attn_npy_write("ring_m.npy", &M, &e);
    /* an int8 0/1 mask: attn_npy_write has no integer type, so by hand */
    FILE *mf = fopen("ring_mi.npy", "wb");
    char hdr[118];
    int hl = snprintf(hdr, sizeof hdr, "{'descr': '|i1', 'fortran_order': False, 'shape': (%d,), }",
                      NK);
    while (hl < 117) hdr[hl++] = ' ';
    hdr[117] = '\n';
    fwrite("\x93NUMPY\x01\x00\x76\x00", 1, 10, mf), fwrite(hdr, 1, 118, mf);
    fwrite(m_int, 1, NK, mf), fclose(mf);

    tu_group_begin(&g, &suite, "ring CLI vs attn_sdpa");
    for (int pass = 0; pass < 2; ++pass) {
        const bool causal = pass == 0;
        const int np = causal ? 2 : 3;
        clirun_result res;
        remove("ring_o.npy"), remove("ring_l.npy");
        const bool ran = ring(&res, np,
                              causal ? "--query\x1fring_q.npy\x1f--key\x1fring_k.npy\x1f--value\x1f"
                                       "ring_v.npy\x1f--causal\x1f" "bottom-right\x1f--threads\x1f" "1\x1f--out\x1f"
                                       "ring_o.npy\x1f--lse\x1fring_l.npy"
                                     : "--query\x1fring_q.npy\x1f--key\x1fring_k2.npy\x1f--value\x1f"
                                       "ring_v2.npy\x1f--key-padding-mask\x1fring_m.npy\x1f--block-keys\x1f"
                                       "3\x1f--threads\x1f" "1\x1f--out\x1fring_o.npy\x1f--lse\x1fring_l.npy");
        if (!tu_check(&g, ran && res.status == 0, "%s, %d ranks: status %d, stderr: %s",
                      causal ? "causal" : "masked", np, res.status, res.err)) {
            clirun_free(&res);
            continue;
        }
        clirun_free(&res);
        attn_array ao = {0}, al = {0};
        bool read = attn_npy_read("ring_o.npy", &ao, &e) == ATTN_OK &&
                    attn_npy_read("ring_l.npy", &al, &e) == ATTN_OK;
        if (!tu_check(&g, read && ao.t.ndim == 3 && ao.t.shape[1] == N && al.t.ndim == 2,
                      "outputs missing or not (H,N,D)/(H,N): %s", e.message)) {
            attn_array_free(&ao), attn_array_free(&al);
            continue;
        }
        attn_tensor Q4 = attn_tensor_4d(q, 1, H, N, D),
                    K4 = causal ? attn_tensor_4d(k, 1, H, N, D) : attn_tensor_4d(k2, 1, H, NK, D),
                    V4 = causal ? attn_tensor_4d(v, 1, H, N, D) : attn_tensor_4d(v2, 1, H, NK, D),
                    O4 = attn_tensor_4d(o, 1, H, N, D), L3 = attn_tensor_3d(l, 1, H, N);
        const int64_t m4s[4] = {1, 1, 1, NK};
        attn_tensor M4 = attn_tensor_make(m, ATTN_BOOL, 4, m4s);
        attn_sdpa_opts so = attn_sdpa_opts_default();
        so.causal = causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
        so.mask[0] = causal ? NULL : &M4;
        attn_sdpa(&Q4, &K4, &V4, &O4, &L3, NULL, &so, &e);
        const double dO = max_diff(ao.t.data, o, H * N * D), dL = max_diff(al.t.data, l, H * N);
        tu_check(&g, dO < 2e-5 && dL < 2e-5, "%s: |out - attn_sdpa| %.3g, |lse - attn_sdpa| %.3g",
                 causal ? "causal" : "masked", dO, dL);
        attn_array_free(&ao), attn_array_free(&al);
    }
    tu_group_end(&g);

    tu_group_begin(&g, &suite, "ring CLI failures stop every rank");
    struct {
        const char *what, *args, *needle;
    } bad[] = {
        {"missing file", "--query\x1fring_missing.npy\x1f--key\x1fring_k.npy\x1f--value\x1fring_v.npy\x1f--out\x1fring_x.npy",
         "ring_missing.npy"},
        {"bad key shape", "--query\x1fring_q.npy\x1f--key\x1fring_kb.npy\x1f--value\x1fring_v.npy\x1f--out\x1fring_x.npy",
         "--key: feature size is 3"},
        {"causal Nq != Nk", "--query\x1fring_q.npy\x1f--key\x1fring_k2.npy\x1f--value\x1fring_v2.npy\x1f--causal\x1f--out\x1fring_x.npy",
         "--causal: needs as many queries as keys"},
        {"integer mask", "--query\x1fring_q.npy\x1f--key\x1fring_k2.npy\x1f--value\x1fring_v2.npy\x1f--key-padding-mask\x1fring_mi.npy\x1f--out\x1fring_x.npy",
         "--key-padding-mask ring_mi.npy: an integer mask"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        clirun_result res;
        bool ran = ring(&res, 3, bad[i].args);
        tu_check(&g, ran && res.status == 2 && strstr(res.err, bad[i].needle) &&
                         strstr(res.err, "(rank 1): stopped") && strstr(res.err, "(rank 2): stopped"),
                 "%s: status %d, stderr: %s", bad[i].what, res.status, ran ? res.err : "");
        FILE *f = fopen("ring_x.npy", "rb");
        tu_check(&g, !f, "%s: no output may be written", bad[i].what);
        if (f) fclose(f);
        clirun_free(&res);
    }
    tu_group_end(&g);

    tu_group_begin(&g, &suite, "every rank given the same options");
    static const char base[] = "--query\x1fring_q.npy\x1f--key\x1fring_k.npy\x1f--value\x1f"
                               "ring_v.npy\x1f--threads\x1f" "1\x1f--out\x1fring_x.npy";
    struct {
        const char *what, *a, *b, *needle;
    } differ[] = {
        {"--scale", "\x1f--scale\x1f" "0.1", "\x1f--scale\x1f" "5", "--scale: '5' here, '0.1' on rank 0"},
        {"--causal", "\x1f--causal", "", "--causal"},
        {"--help on one rank", "", "\x1f--help", "rank 1 printed --help"},
        {"a bad option on one rank", "", "\x1f--scale\x1f" "-1", "--scale: must be a positive"},
    };
    for (size_t i = 0; i < sizeof differ / sizeof differ[0]; ++i) {
        char a[512], b[512];
        snprintf(a, sizeof a, "%s%s", base, differ[i].a);
        snprintf(b, sizeof b, "%s%s", base, differ[i].b);
        clirun_result res;
        remove("ring_x.npy");
        bool ran = ring_two(&res, a, b);
        tu_check(&g, ran && res.status == 2 && strstr(res.err, differ[i].needle),
                 "%s: status %d, stderr: %s", differ[i].what, res.status, ran ? res.err : "");
        FILE *f = fopen("ring_x.npy", "rb");
        tu_check(&g, !f, "%s: no output may be written", differ[i].what);
        if (f) fclose(f);
        clirun_free(&res);
    }
    tu_group_end(&g);
    return tu_suite_finish(&suite);
}
