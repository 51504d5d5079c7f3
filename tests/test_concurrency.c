/* Several threads calling the library at once: SDPA forward and backward on
 * the fused and reference paths (with a mask, GQA and causal), MHA forward
 * and backward on one shared module, and the file readers and an output
 * set, all on shared read-only inputs. Every thread's results must be
 * bit-identical to the same calls made serially first. `make tsan` runs this
 * under gcc's ThreadSanitizer (OpenMP off there: libgomp is not
 * instrumented), which also checks that no call races on hidden state. */
#include "testutil.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define THREADS 4
#define ROUNDS 3

enum { B = 2, HQ = 4, HKV = 2, NQ = 33, NK = 41, D = 16, DV = 8 };
enum { E = 16, H = 4, L = 9, S = 12 };

typedef struct {
    float o[B * HQ * NQ * DV], lse[B * HQ * NQ];
    float dq[B * HQ * NQ * D], dk[B * HKV * NK * D], dv[B * HKV * NK * DV];
} sdpa_out;

typedef struct {
    sdpa_out sdpa[2]; /* fused, reference */
    float y[B * L * E], dx[B * L * E], dkey[B * S * E], dval[B * S * E];
    double file_sum;  /* of the arrays read back from the files */
} results;

/* Shared, read-only after setup. */
static float q[B * HQ * NQ * D], k[B * HKV * NK * D], v[B * HKV * NK * DV];
static float dout[B * HQ * NQ * DV];
static unsigned char mask[NQ * NK];
static float x[B * L * E], kv[B * S * E], dy[B * L * E];
static attn_mha *module; /* forward reads it; backward accumulates into its grads */
static const char *dir;

static void fill(float *p, size_t n, uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    for (size_t i = 0; i < n; ++i) p[i] = (float)tu_rng_normal(&r);
}

static bool run_sdpa(attn_path path, sdpa_out *out)
{
    attn_tensor tq = attn_tensor_4d(q, B, HQ, NQ, D), tk = attn_tensor_4d(k, B, HKV, NK, D),
                tv = attn_tensor_4d(v, B, HKV, NK, DV), to = attn_tensor_4d(out->o, B, HQ, NQ, DV),
                tl = attn_tensor_3d(out->lse, B, HQ, NQ),
                tdo = attn_tensor_4d(dout, B, HQ, NQ, DV),
                tdq = attn_tensor_4d(out->dq, B, HQ, NQ, D),
                tdk = attn_tensor_4d(out->dk, B, HKV, NK, D),
                tdv = attn_tensor_4d(out->dv, B, HKV, NK, DV);
    attn_tensor tm = attn_tensor_make(mask, ATTN_BOOL, 2, (const int64_t[]){NQ, NK});
    attn_sdpa_opts opts = attn_sdpa_opts_default();
    opts.path = path;
    opts.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    opts.mask[0] = &tm;
    opts.num_threads = 1;
    attn_error err;
    return attn_sdpa(&tq, &tk, &tv, &to, &tl, NULL, &opts, &err) == ATTN_OK &&
           attn_sdpa_backward(&tq, &tk, &tv, &to, &tl, &tdo, &tdq, &tdk, &tdv, &opts, &err) ==
               ATTN_OK;
}

/* MHA forward, and backward with the parameter gradients going to a private
 * module copy would need a second module: the shared module's forward is
 * read-only, so each thread differentiates only the inputs of its own. */
static bool run_mha(results *r, attn_mha *own)
{
    attn_tensor tx = attn_tensor_3d(x, B, L, E), tkv = attn_tensor_3d(kv, B, S, E),
                ty = attn_tensor_3d(r->y, B, L, E), tdy = attn_tensor_3d(dy, B, L, E),
                tdx = attn_tensor_3d(r->dx, B, L, E), tdk = attn_tensor_3d(r->dkey, B, S, E),
                tdv = attn_tensor_3d(r->dval, B, S, E);
    attn_mha_opts opts = attn_mha_opts_default();
    opts.causal = false;
    opts.num_threads = 1;
    attn_error err;
    return attn_mha_forward(module, &tx, &tkv, &tkv, &ty, &opts, &err) == ATTN_OK &&
           attn_mha_backward(own, &tx, &tkv, &tkv, &tdy, &tdx, &tdk, &tdv, &opts, &err) == ATTN_OK;
}

/* Reads the shared files and writes its own outputs through an output set. */
static bool run_files(results *r, int id)
{
    attn_array a = {0};
    attn_safetensors st = {0};
    char p1[128], p2[128];
    snprintf(p1, sizeof p1, "%s/q.npy", dir);
    snprintf(p2, sizeof p2, "%s/w.safetensors", dir);
    bool ok = attn_npy_read(p1, &a, NULL) == ATTN_OK && attn_safetensors_read(p2, &st, NULL) == ATTN_OK;
    double sum = 0;
    for (int64_t i = 0; ok && i < attn_tensor_numel(&a.t); ++i) sum += ((float *)a.t.data)[i];
    for (size_t t = 0; ok && t < st.count; ++t)
        for (int64_t i = 0; i < attn_tensor_numel(&st.arrays[t].t); ++i)
            sum += ((float *)st.arrays[t].t.data)[i];
    r->file_sum = sum;
    attn_outputs *o = NULL;
    char out1[128], out2[128];
    snprintf(out1, sizeof out1, "%s/out%d.npy", dir, id);
    snprintf(out2, sizeof out2, "%s/out%d.safetensors", dir, id);
    int i1, i2;
    const char *names[1] = {"a"};
    ok = ok && attn_outputs_create(&o, NULL) == ATTN_OK &&
         attn_outputs_add(o, out1, &i1, NULL) == ATTN_OK &&
         attn_outputs_add(o, out2, &i2, NULL) == ATTN_OK &&
         attn_outputs_write_npy(o, i1, &a.t, NULL) == ATTN_OK &&
         attn_outputs_write_safetensors(o, i2, names, &a.t, 1, NULL) == ATTN_OK &&
         attn_outputs_commit(o, NULL) == ATTN_OK;
    attn_outputs_free(o);
    attn_array_free(&a);
    attn_safetensors_free(&st);
    return ok;
}

static attn_mha *copy_module(void)
{
    attn_mha *m = NULL;
    if (attn_mha_create(attn_mha_get_config(module), &m, NULL) != ATTN_OK) return NULL;
    size_t n, n2;
    float *src = attn_mha_params_flat(module, &n), *dst = attn_mha_params_flat(m, &n2);
    memcpy(dst, src, n * sizeof *dst);
    return m;
}

static bool run_all(results *r, int id)
{
    attn_mha *own = copy_module();
    bool ok = own && run_sdpa(ATTN_PATH_FUSED, &r->sdpa[0]) &&
              run_sdpa(ATTN_PATH_REFERENCE, &r->sdpa[1]) && run_mha(r, own) && run_files(r, id);
    attn_mha_free(own);
    return ok;
}

typedef struct {
    int id;
    results got;
    bool ok;
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    w->ok = true;
    for (int round = 0; round < ROUNDS && w->ok; ++round) w->ok = run_all(&w->got, w->id);
    return NULL;
}

int main(int argc, char **argv)
{
    tu_options opt;
    if (!tu_parse_options(argc, argv, 1, &opt)) return 2;
    dir = tu_scratch_dir("conc");
    fill(q, sizeof q / 4, 1);
    fill(k, sizeof k / 4, 2);
    fill(v, sizeof v / 4, 3);
    fill(dout, sizeof dout / 4, 4);
    fill(x, sizeof x / 4, 5);
    fill(kv, sizeof kv / 4, 6);
    fill(dy, sizeof dy / 4, 7);
    for (int i = 0; i < NQ * NK; ++i) mask[i] = (unsigned char)((i * 7) % 5 != 0);
    attn_mha_config cfg = {.embed_dim = E, .num_heads = H, .bias = true};
    tu_suite s = {0};
    tu_group g;
    tu_group_begin(&g, &s, "threads calling forward and backward at once");
    if (attn_mha_create(&cfg, &module, NULL) != ATTN_OK) return 1;
    attn_mha_init(module, 11);
    char path[128];
    snprintf(path, sizeof path, "%s/q.npy", dir);
    attn_tensor tq = attn_tensor_4d(q, B, HQ, NQ, D);
    attn_npy_write(path, &tq, NULL);
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    const char *names[2] = {"k", "v"};
    attn_tensor kvt[2] = {attn_tensor_4d(k, B, HKV, NK, D), attn_tensor_4d(v, B, HKV, NK, DV)};
    attn_safetensors_write(path, names, kvt, 2, NULL);

    static results serial;
    tu_check(&g, run_all(&serial, 99), "the serial run failed");
    static worker workers[THREADS];
    pthread_t ids[THREADS];
    for (int t = 0; t < THREADS; ++t) {
        workers[t].id = t;
        if (pthread_create(&ids[t], NULL, work, &workers[t]) != 0) workers[t].ok = false;
    }
    for (int t = 0; t < THREADS; ++t) pthread_join(ids[t], NULL);
    for (int t = 0; t < THREADS; ++t) {
        tu_check(&g, workers[t].ok, "thread %d: a call failed", t);
        tu_check(&g, !memcmp(&workers[t].got, &serial, sizeof serial),
                 "thread %d: results differ from the serial run", t);
    }
    tu_group_end(&g);
    attn_mha_free(module);
    return tu_suite_finish(&s);
}
