/* hello_attn: causal attention forward and backward through libattn.
 * Build: cc hello_attn.c $(pkg-config --cflags --libs attn) */
#include <attn.h>

#include <stdio.h>

enum { B = 1, H = 2, NQ = 4, NK = 4, D = 8 };

int main(void)
{
    static float q[B * H * NQ * D], k[B * H * NK * D], v[B * H * NK * D], o[B * H * NQ * D],
        lse[B * H * NQ], dout[B * H * NQ * D], dq[B * H * NQ * D], dk[B * H * NK * D],
        dv[B * H * NK * D];
    for (int i = 0; i < B * H * NQ * D; ++i) q[i] = (float)((i * 7) % 11) / 11.0f - 0.5f;
    for (int i = 0; i < B * H * NK * D; ++i) k[i] = (float)((i * 5) % 13) / 13.0f - 0.5f;
    for (int i = 0; i < B * H * NK * D; ++i) v[i] = (float)(i % 8);
    for (int i = 0; i < B * H * NQ * D; ++i) dout[i] = 1.0f;

    attn_tensor Q = attn_tensor_4d(q, B, H, NQ, D);   /* (B, Hq,  Nq, D)  */
    attn_tensor K = attn_tensor_4d(k, B, H, NK, D);   /* (B, Hkv, Nk, D)  */
    attn_tensor V = attn_tensor_4d(v, B, H, NK, D);   /* (B, Hkv, Nk, Dv) */
    attn_tensor O = attn_tensor_4d(o, B, H, NQ, D);   /* (B, Hq,  Nq, Dv) */
    attn_tensor L = attn_tensor_3d(lse, B, H, NQ);    /* (B, Hq,  Nq)     */

    attn_sdpa_opts opts = attn_sdpa_opts_default();   /* scale 1/sqrt(D), no mask */
    opts.causal = ATTN_CAUSAL_TOP_LEFT;
    attn_error err;
    if (attn_sdpa(&Q, &K, &V, &O, &L, NULL, &opts, &err) != ATTN_OK) {
        fprintf(stderr, "attn: %s\n", err.message);
        return 1;
    }

    /* backward: dO -> dQ, dK, dV (overwritten), reusing O and the LSE */
    attn_tensor dO = attn_tensor_4d(dout, B, H, NQ, D), dQ = attn_tensor_4d(dq, B, H, NQ, D),
                dK = attn_tensor_4d(dk, B, H, NK, D), dV = attn_tensor_4d(dv, B, H, NK, D);
    if (attn_sdpa_backward(&Q, &K, &V, &O, &L, &dO, &dQ, &dK, &dV, &opts, &err) != ATTN_OK) {
        fprintf(stderr, "attn: %s\n", err.message);
        return 1;
    }
    /* Query 0 sees only key 0, so its output is value row 0 exactly. */
    printf("o[0,0,0,:3] = %.3f %.3f %.3f (kernels: %s)\n", o[0], o[1], o[2], attn_isa());
    return o[0] == v[0] && o[1] == v[1] && o[2] == v[2] ? 0 : 1;
}
