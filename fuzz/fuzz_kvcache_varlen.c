/* libFuzzer target: the KV cache and varlen APIs against the plain calls
 * they promise to equal. The input picks the shapes (small), the options
 * (causal bottom-right or none, a window, a softcap), the cache's layout
 * and the values. Properties, with one thread and attn_sdpa's path
 * (ATTN_PATH_FUSED: the decode kernel that AUTO may pick for long caches has
 * its own tests):
 *   - a paged cache filled by one append (each entry's blocks consecutive
 *     in the pool) attends bit for bit like the contiguous cache, and the
 *     contiguous cache like attn_sdpa on the entry's keys;
 *   - a paged entry whose blocks the input scatters over the pool stays
 *     within kvcache.h's bound of the contiguous result;
 *   - attn_sdpa_varlen equals attn_sdpa on each sequence alone, bit for bit;
 * and no crash, leak or sanitizer report on any input the APIs accept or
 * refuse. */
#include "attn.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const uint8_t *p;
    size_t n;
} bytes;

static unsigned take(bytes *b, unsigned range)
{
    if (b->n == 0) return 0;
    const unsigned v = *b->p++;
    b->n--;
    return v % range;
}

/* Values on a grid of 1/8 in [-4, 4): exact in every storage format. */
static void fill(float *x, int64_t n, bytes *b)
{
    for (int64_t i = 0; i < n; ++i) x[i] = ((float)take(b, 64) - 32.0f) / 8.0f;
}

static float *floats(int64_t n)
{
    float *p = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    if (!p) abort();
    return p;
}

static bool same_bits(const float *a, const float *b, int64_t n)
{
    return memcmp(a, b, sizeof(float) * (size_t)n) == 0;
}

static attn_sdpa_opts options(bytes *b)
{
    attn_sdpa_opts o = attn_sdpa_opts_default();
    o.num_threads = 1;
    o.path = ATTN_PATH_FUSED;
    o.causal = take(b, 2) ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
    if (take(b, 3) == 0) {
        o.window.enabled = true;
        o.window.left = (int64_t)take(b, 6) - 1;
        o.window.right = (int64_t)take(b, 6) - 1;
    }
    if (take(b, 4) == 0) o.softcap = 1.0f + (float)take(b, 20);
    return o;
}

static void fuzz_kvcache(bytes *b)
{
    const int64_t B = 1 + take(b, 3), Hkv = 1 + take(b, 2), Hq = Hkv * (1 + take(b, 2)),
                  D = 1 + take(b, 12), Dv = 1 + take(b, 12), cap = 1 + take(b, 24),
                  bs = 1 + take(b, 6), Nq = 1 + take(b, 3);
    int64_t len[3];
    for (int64_t e = 0; e < B; ++e) len[e] = take(b, (unsigned)cap + 1);
    attn_sdpa_opts o = options(b);
    const int64_t n = cap; /* appended tokens per entry, counts = len */
    float *k = floats(B * Hkv * n * D), *v = floats(B * Hkv * n * Dv), *q = floats(B * Hq * Nq * D);
    fill(k, B * Hkv * n * D, b), fill(v, B * Hkv * n * Dv, b), fill(q, B * Hq * Nq * D, b);
    attn_tensor K = attn_tensor_4d(k, B, Hkv, n, D), V = attn_tensor_4d(v, B, Hkv, n, Dv),
                Q = attn_tensor_4d(q, B, Hq, Nq, D);
    attn_kvcache_config cfg = {.batch = B, .kv_heads = Hkv, .capacity = cap, .head_dim = D,
                               .value_dim = Dv};
    attn_kvcache *contiguous = NULL, *paged = NULL;
    attn_error err;
    float *oc = floats(B * Hq * Nq * Dv), *op = floats(B * Hq * Nq * Dv),
          *lc = floats(B * Hq * Nq), *lp = floats(B * Hq * Nq), *os = floats(Hq * Nq * Dv),
          *ls = floats(Hq * Nq);
    if (attn_kvcache_create(&cfg, &contiguous, &err) != ATTN_OK) abort();
    cfg.block_size = bs;
    if (attn_kvcache_create(&cfg, &paged, &err) != ATTN_OK) abort();
    if (attn_kvcache_append(contiguous, &K, &V, len, &err) != ATTN_OK ||
        attn_kvcache_append(paged, &K, &V, len, &err) != ATTN_OK)
        abort(); /* len[e] <= capacity: must fit */
    attn_tensor Oc = attn_tensor_4d(oc, B, Hq, Nq, Dv), Op = attn_tensor_4d(op, B, Hq, Nq, Dv),
                Lc = attn_tensor_3d(lc, B, Hq, Nq), Lp = attn_tensor_3d(lp, B, Hq, Nq);
    const attn_status sc = attn_kvcache_attend(contiguous, &Q, &Oc, &Lc, &o, &err),
                      sp = attn_kvcache_attend(paged, &Q, &Op, &Lp, &o, &err);
    if (sc != sp) abort();
    if (sc == ATTN_OK) {
        if (!same_bits(oc, op, B * Hq * Nq * Dv) || !same_bits(lc, lp, B * Hq * Nq)) abort();
        /* each entry: attn_sdpa on its first len[e] keys, the same bits */
        for (int64_t e = 0; e < B; ++e) {
            attn_tensor Qe = Q, Ke = K, Ve = V;
            Qe.shape[0] = Ke.shape[0] = Ve.shape[0] = 1;
            Qe.data = q + e * Hq * Nq * D, Ke.data = k + e * Hkv * n * D, Ve.data = v + e * Hkv * n * Dv;
            Ke.shape[2] = Ve.shape[2] = len[e];
            attn_tensor Os = attn_tensor_4d(os, 1, Hq, Nq, Dv), Ls = attn_tensor_3d(ls, 1, Hq, Nq);
            if (attn_sdpa(&Qe, &Ke, &Ve, &Os, &Ls, NULL, &o, &err) != ATTN_OK) abort();
            if (!same_bits(os, oc + e * Hq * Nq * Dv, Hq * Nq * Dv) ||
                !same_bits(ls, lc + e * Hq * Nq, Hq * Nq))
                abort();
        }
    }
    /* entry 0's blocks scattered over the pool by the input (a table set
     * before the append fills them): within kvcache.h's bound */
    attn_kvcache *scattered = NULL;
    const int64_t blocks = (len[0] + bs - 1) / bs;
    if (sc == ATTN_OK && blocks > 1 && attn_kvcache_create(&cfg, &scattered, &err) == ATTN_OK) {
        const int64_t pool = attn_kvcache_get_config(scattered)->num_blocks;
        int32_t *table = malloc(sizeof(int32_t) * (size_t)pool);
        if (!table) abort();
        for (int64_t i = 0; i < pool; ++i) table[i] = (int32_t)i;
        for (int64_t i = pool - 1; i > 0; --i) { /* Fisher-Yates from the input */
            const int64_t j = take(b, (unsigned)i + 1);
            const int32_t t = table[i];
            table[i] = table[j], table[j] = t;
        }
        if (attn_kvcache_set_block_table(scattered, 0, table, blocks, &err) != ATTN_OK ||
            attn_kvcache_append(scattered, &K, &V, len, &err) != ATTN_OK ||
            attn_kvcache_attend(scattered, &Q, &Op, &Lp, &o, &err) != ATTN_OK)
            abort();
        float vmax = 0.0f;
        for (int64_t i = 0; i < B * Hkv * n * Dv; ++i) vmax = fmaxf(vmax, fabsf(v[i]));
        for (int64_t i = 0; i < B * Hq * Nq * Dv; ++i)
            if (!(fabsf(op[i] - oc[i]) <= 8.0f * FLT_EPSILON * vmax)) abort();
        free(table);
    }
    attn_kvcache_free(scattered);
    attn_kvcache_free(contiguous);
    attn_kvcache_free(paged);
    free(k), free(v), free(q), free(oc), free(op), free(lc), free(lp), free(os), free(ls);
}

static void fuzz_varlen(bytes *b)
{
    const int64_t nseq = take(b, 5), Hkv = 1 + take(b, 2), Hq = Hkv * (1 + take(b, 2)),
                  D = 1 + take(b, 12), Dv = 1 + take(b, 12);
    int64_t cq[5] = {0}, ck[5] = {0};
    for (int64_t s = 0; s < nseq; ++s) {
        cq[s + 1] = cq[s] + take(b, 9);
        ck[s + 1] = ck[s] + take(b, 9);
    }
    const int64_t tq = cq[nseq], tk = ck[nseq];
    attn_sdpa_opts o = options(b);
    float *q = floats(tq * Hq * D), *k = floats(tk * Hkv * D), *v = floats(tk * Hkv * Dv),
          *out = floats(tq * Hq * Dv), *lse = floats(tq * Hq), *os = floats(tq * Hq * Dv),
          *ls = floats(tq * Hq);
    fill(q, tq * Hq * D, b), fill(k, tk * Hkv * D, b), fill(v, tk * Hkv * Dv, b);
    attn_tensor Q = attn_tensor_3d(q, tq, Hq, D), K = attn_tensor_3d(k, tk, Hkv, D),
                V = attn_tensor_3d(v, tk, Hkv, Dv), O = attn_tensor_3d(out, tq, Hq, Dv),
                L = attn_tensor_2d(lse, tq, Hq);
    attn_varlen_seqs seqs = {nseq, ATTN_OFFSETS_I64, cq, ck};
    attn_error err;
    if (attn_sdpa_varlen(&Q, &K, &V, &seqs, &O, &L, &o, &err) == ATTN_OK) {
        /* sequence s alone: (1, H, N, D) views of its rows of the packed (N, H, D) */
        for (int64_t s = 0; s < nseq; ++s) {
            const int64_t nq = cq[s + 1] - cq[s], nk = ck[s + 1] - ck[s];
            attn_tensor Qs = attn_tensor_transpose(attn_tensor_4d(q + cq[s] * Hq * D, 1, nq, Hq, D), 1, 2),
                        Ks = attn_tensor_transpose(attn_tensor_4d(k + ck[s] * Hkv * D, 1, nk, Hkv, D), 1, 2),
                        Vs = attn_tensor_transpose(attn_tensor_4d(v + ck[s] * Hkv * Dv, 1, nk, Hkv, Dv), 1, 2),
                        Os = attn_tensor_transpose(attn_tensor_4d(os + cq[s] * Hq * Dv, 1, nq, Hq, Dv), 1, 2),
                        Ls = attn_tensor_transpose(attn_tensor_3d(ls + cq[s] * Hq, 1, nq, Hq), 1, 2);
            if (attn_sdpa(&Qs, &Ks, &Vs, &Os, &Ls, NULL, &o, &err) != ATTN_OK) abort();
        }
        if (!same_bits(out, os, tq * Hq * Dv) || !same_bits(lse, ls, tq * Hq)) abort();
    }
    free(q), free(k), free(v), free(out), free(lse), free(os), free(ls);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 65536) return 0;
    bytes b = {data + 1, size - 1};
    if (data[0] & 1) fuzz_varlen(&b);
    else fuzz_kvcache(&b);
    return 0;
}
