/* model_variants.c — attention as three current models call it, with attn.
 *
 *   Mistral-style:  sliding window (4096, 0) + causal + GQA (Hq = 8, Hkv = 2)
 *   Gemma-2-style:  logit soft-capping at 50 + causal
 *   gpt-oss-style:  attention sinks + sliding window (128, 0) + causal, and
 *                   the sinks' gradient
 *
 * Built and run by `make test`; docs/VARIANTS.md walks through it. The data
 * is random: the point is the calls. Exits non-zero if a call fails or an
 * output is not finite. */
#include <attn.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { B = 1, HQ = 8, HKV = 2, N = 256, D = 64 };

static float *randn(attn_rng *r, size_t n)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; x && i < n; ++i) x[i] = (float)attn_rng_normal(r);
    return x;
}

static int finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; ++i)
        if (!isfinite(x[i])) return 0;
    return 1;
}

int main(void)
{
    attn_rng r;
    attn_rng_seed(&r, 2024);
    const size_t nq = (size_t)B * HQ * N * D, nkv = (size_t)B * HKV * N * D;
    float *q = randn(&r, nq), *k = randn(&r, nkv), *v = randn(&r, nkv), *dout = randn(&r, nq);
    float *o = malloc(nq * sizeof *o), *lse = malloc((size_t)B * HQ * N * sizeof *lse);
    float *dq = malloc(nq * sizeof *dq), *dk = malloc(nkv * sizeof *dk), *dv = malloc(nkv * sizeof *dv);
    if (!q || !k || !v || !dout || !o || !lse || !dq || !dk || !dv) return 1;

    attn_tensor Q = attn_tensor_4d(q, B, HQ, N, D), K = attn_tensor_4d(k, B, HKV, N, D),
                V = attn_tensor_4d(v, B, HKV, N, D), O = attn_tensor_4d(o, B, HQ, N, D),
                L = attn_tensor_3d(lse, B, HQ, N), dO = attn_tensor_4d(dout, B, HQ, N, D),
                dQ = attn_tensor_4d(dq, B, HQ, N, D), dK = attn_tensor_4d(dk, B, HKV, N, D),
                dV = attn_tensor_4d(dv, B, HKV, N, D);
    attn_error err;
    int ok = 1;

    /* Mistral: each token sees itself and the 4096 before it (GQA comes
     * from the shapes: 8 query heads share 2 key/value heads). */
    attn_sdpa_opts mistral = attn_sdpa_opts_default();
    mistral.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    mistral.window = (attn_window){.enabled = true, .left = 4096, .right = 0};
    ok &= attn_sdpa(&Q, &K, &V, &O, &L, NULL, &mistral, &err) == ATTN_OK && finite(o, nq);
    printf("mistral  window (4096, 0), GQA 8/2: out[0] = %.6f  lse[0] = %.6f\n", o[0], lse[0]);

    /* Gemma 2: logits capped at 50 by 50·tanh(x/50). */
    attn_sdpa_opts gemma = attn_sdpa_opts_default();
    gemma.causal = ATTN_CAUSAL_TOP_LEFT;
    gemma.softcap = 50.0f;
    ok &= attn_sdpa(&Q, &K, &V, &O, &L, NULL, &gemma, &err) == ATTN_OK && finite(o, nq);
    printf("gemma2   softcap 50:                out[0] = %.6f  lse[0] = %.6f\n", o[0], lse[0]);

    /* gpt-oss: a learned sink logit per head in every softmax denominator,
     * alternating with banded layers; its gradient comes with the backward. */
    float sinks[HQ], dsinks[HQ];
    for (int h = 0; h < HQ; ++h) sinks[h] = 0.25f * (float)h;
    attn_tensor S = attn_tensor_1d(sinks, HQ), dS = attn_tensor_1d(dsinks, HQ);
    attn_sdpa_opts oss = attn_sdpa_opts_default();
    oss.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    oss.window = (attn_window){.enabled = true, .left = 128, .right = 0};
    oss.sinks = &S;
    ok &= attn_sdpa(&Q, &K, &V, &O, &L, NULL, &oss, &err) == ATTN_OK && finite(o, nq);
    oss.grad_sinks = &dS;
    ok &= attn_sdpa_backward(&Q, &K, &V, &O, &L, &dO, &dQ, &dK, &dV, &oss, &err) == ATTN_OK &&
          finite(dq, nq) && finite(dsinks, HQ);
    printf("gpt-oss  sinks + window (128, 0):   out[0] = %.6f  lse[0] = %.6f  dsink[0] = %.6f\n",
           o[0], lse[0], dsinks[0]);

    if (!ok) fprintf(stderr, "model_variants: %s\n", err.message);
    free(q), free(k), free(v), free(dout), free(o), free(lse), free(dq), free(dk), free(dv);
    return ok ? 0 : 1;
}
