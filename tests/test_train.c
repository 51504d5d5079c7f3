/*
 * test_train — optimizers, schedule and clipping against hand-computed
 * updates and float64 re-implementations; the task generators; a
 * directional-derivative check of the whole model; a short training run that
 * must cut the loss by a fixed factor; bit-identical loss curves for 1 and 2
 * threads; checkpoints; and the train/heads commands end to end.
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static bool near(double got, double want, double tol)
{
    return fabs(got - want) <= tol;
}

/* ------------------------------------------------------------ optimizers */

static void test_sgd(tu_suite *suite, uint64_t seed)
{
    tu_group g;
    tu_group_begin(&g, suite, "optim-sgd");
    /* By hand: p=1, g=0.5, lr=0.1, momentum 0.9, weight_decay 0.1.
     * step 1: d = 0.5 + 0.1·1 = 0.6, buf = 0.6, p = 1 - 0.06 = 0.94
     * step 2: d = 0.5 + 0.094 = 0.594, buf = 0.54 + 0.594 = 1.134,
     *         p = 0.94 - 0.1134 = 0.8266 */
    float p = 1, grad = 0.5f, buf = 0;
    const attn_sgd_opts o = {.momentum = 0.9f, .weight_decay = 0.1f};
    attn_sgd_step(&p, &grad, &buf, 1, 0.1f, &o, NULL);
    tu_check(&g, near(p, 0.94, 1e-6) && near(buf, 0.6, 1e-6), "sgd step 1: p %.9g buf %.9g", p,
             buf);
    attn_sgd_step(&p, &grad, &buf, 1, 0.1f, &o, NULL);
    tu_check(&g, near(p, 0.8266, 1e-6) && near(buf, 1.134, 1e-6), "sgd step 2: p %.9g buf %.9g",
             p, buf);
    /* No momentum: plain p -= lr·g, no buffer needed. */
    p = 2;
    grad = -1;
    const attn_sgd_opts plain = {0};
    tu_check(&g, attn_sgd_step(&p, &grad, NULL, 1, 0.25f, &plain, NULL) == ATTN_OK && p == 2.25f,
             "sgd without momentum: p %.9g, want 2.25", p);
    tu_check(&g, attn_sgd_step(&p, &grad, NULL, 1, 0.25f, &o, NULL) == ATTN_ERR_NULL,
             "sgd with momentum and no buffer accepted");

    /* Random vectors over several steps vs a float64 loop. */
    tu_rng r;
    tu_rng_seed(&r, seed);
    enum { N = 37, STEPS = 6 };
    float pf[N], gf[N], bf[N] = {0};
    double pd[N], bd[N] = {0};
    for (int i = 0; i < N; ++i) pd[i] = pf[i] = (float)tu_rng_normal(&r);
    bool ok = true;
    for (int s = 0; s < STEPS; ++s) {
        for (int i = 0; i < N; ++i) gf[i] = (float)tu_rng_normal(&r);
        attn_sgd_step(pf, gf, bf, N, 0.05f, &o, NULL);
        for (int i = 0; i < N; ++i) {
            const double d = (double)gf[i] + (double)o.weight_decay * pd[i];
            bd[i] = (double)o.momentum * bd[i] + d;
            pd[i] -= 0.05 * bd[i];
        }
    }
    for (int i = 0; i < N; ++i) ok = ok && near(pf[i], pd[i], 1e-5 * (1 + fabs(pd[i])));
    tu_check(&g, ok, "sgd: 6 random steps differ from the float64 update");
    tu_group_end(&g);
}

static void test_adamw(tu_suite *suite, uint64_t seed)
{
    tu_group g;
    tu_group_begin(&g, suite, "optim-adamw");
    /* By hand (torch's formula), p=1, lr=0.1, β=(0.9, 0.999), eps=1e-8,
     * weight_decay=0.01:
     * step 1, g=0.5: p = 0.999; m = 0.05, v = 0.00025; m̂ = 0.5, √v̂ = 0.5
     *         p = 0.999 - 0.1·0.5/(0.5 + 1e-8) = 0.899000002
     * step 2, g=-0.25: p = 0.899000002·0.999; m = 0.02, v = 0.00031225;
     *         p -= (0.1/0.19)·0.02/(√0.00031225/√0.001999 + 1e-8)
     *         = 0.8714672987 */
    float p = 1, m = 0, v = 0, grad = 0.5f;
    const attn_adamw_opts o = attn_adamw_opts_default();
    tu_check(&g, o.beta1 == 0.9f && o.beta2 == 0.999f && o.eps == 1e-8f && o.weight_decay == 0.01f,
             "AdamW defaults are not torch's");
    attn_adamw_step(&p, &grad, &m, &v, 1, 1, 0.1f, &o, NULL);
    tu_check(&g, near(p, 0.899000002, 2e-7), "adamw step 1: p %.9g, want 0.899000002", p);
    grad = -0.25f;
    attn_adamw_step(&p, &grad, &m, &v, 1, 2, 0.1f, &o, NULL);
    tu_check(&g, near(p, 0.8714672987, 2e-7), "adamw step 2: p %.9g, want 0.8714672987", p);
    tu_check(&g, attn_adamw_step(&p, &grad, &m, &v, 1, 0, 0.1f, &o, NULL) == ATTN_ERR_ARG,
             "adamw accepted step 0");

    /* Decoupled decay: with zero gradients the moments stay 0 and the
     * parameter only shrinks by (1 - lr·wd) a step. (Adam with L2 would
     * normalise wd·p and move it by about lr a step.) */
    float q = 3, zero = 0, mq = 0, vq = 0;
    const attn_adamw_opts wd = {.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.5f};
    for (int t = 1; t <= 10; ++t) attn_adamw_step(&q, &zero, &mq, &vq, 1, t, 0.1f, &wd, NULL);
    tu_check(&g, near(q, 3 * pow(0.95, 10), 1e-5), "adamw decay only: %.9g, want %.9g", q,
             3 * pow(0.95, 10));

    /* Random vectors over several steps vs a float64 loop. */
    tu_rng r;
    tu_rng_seed(&r, seed);
    enum { N = 41, STEPS = 8 };
    float pf[N], gf[N], mf[N] = {0}, vf[N] = {0};
    double pd[N], md[N] = {0}, vd[N] = {0};
    for (int i = 0; i < N; ++i) pd[i] = pf[i] = (float)tu_rng_normal(&r);
    for (int s = 1; s <= STEPS; ++s) {
        for (int i = 0; i < N; ++i) gf[i] = (float)tu_rng_normal(&r);
        attn_adamw_step(pf, gf, mf, vf, N, s, 0.01f, &o, NULL);
        for (int i = 0; i < N; ++i) {
            pd[i] *= 1 - 0.01 * (double)o.weight_decay;
            md[i] = 0.9 * md[i] + 0.1 * gf[i];
            vd[i] = 0.999 * vd[i] + 0.001 * (double)gf[i] * gf[i];
            const double mh = md[i] / (1 - pow(0.9, s)), vh = vd[i] / (1 - pow(0.999, s));
            pd[i] -= 0.01 * mh / (sqrt(vh) + 1e-8);
        }
    }
    bool ok = true;
    for (int i = 0; i < N; ++i) ok = ok && near(pf[i], pd[i], 1e-5 * (1 + fabs(pd[i])));
    tu_check(&g, ok, "adamw: 8 random steps differ from the float64 update");
    tu_group_end(&g);
}

static void test_clip_and_schedule(tu_suite *suite)
{
    tu_group g;
    tu_group_begin(&g, suite, "clip-schedule");
    /* Two segments: (3, 4) and (12): norm 13. */
    float a[2] = {3, 4}, b[1] = {12};
    float *grads[2] = {a, b};
    size_t counts[2] = {2, 1};
    float norm = 0;
    attn_clip_grad_norm(grads, counts, 2, 0, &norm, NULL);
    tu_check(&g, norm == 13 && a[0] == 3 && b[0] == 12, "clip measure only: norm %g", norm);
    attn_clip_grad_norm(grads, counts, 2, 20, &norm, NULL);
    tu_check(&g, a[0] == 3 && a[1] == 4 && b[0] == 12, "clip above the norm changed gradients");
    attn_clip_grad_norm(grads, counts, 2, 6.5f, &norm, NULL);
    tu_check(&g, norm == 13 && near(a[0], 1.5, 1e-6) && near(a[1], 2, 1e-6) && near(b[0], 6, 1e-6),
             "clip to 6.5: (%g, %g, %g), want (1.5, 2, 6)", a[0], a[1], b[0]);

    /* warmup 10, 110 steps, peak 1, min 0.1. */
    const float lr0 = attn_lr_warmup_cosine(0, 10, 110, 1, 0.1f);
    const float lr9 = attn_lr_warmup_cosine(9, 10, 110, 1, 0.1f);
    const float lr10 = attn_lr_warmup_cosine(10, 10, 110, 1, 0.1f);
    const float mid = attn_lr_warmup_cosine(10 + 99 / 2, 10, 110, 1, 0.1f);
    const float last = attn_lr_warmup_cosine(109, 10, 110, 1, 0.1f);
    tu_check(&g, near(lr0, 0.1, 1e-7) && near(lr9, 1, 1e-7) && near(lr10, 1, 1e-7),
             "warmup: %g %g %g, want 0.1 1 1", lr0, lr9, lr10);
    /* Progress 49/99 of a half cosine from 1 to 0.1. */
    const double want_mid = 0.1 + 0.9 * 0.5 * (1 + cos(3.14159265358979323846 * 49.0 / 99.0));
    tu_check(&g, near(mid, want_mid, 1e-6) && near(last, 0.1, 1e-7),
             "cosine: mid %g (want %g), last %g (want 0.1)", mid, want_mid, last);
    bool monotone = true;
    for (int64_t s = 10; s < 109; ++s)
        monotone = monotone && attn_lr_warmup_cosine(s + 1, 10, 110, 1, 0.1f) <=
                                   attn_lr_warmup_cosine(s, 10, 110, 1, 0.1f);
    tu_check(&g, monotone, "cosine decay is not monotone");
    tu_group_end(&g);
}

/* ------------------------------------------------------------------ tasks */

static void test_tasks(tu_suite *suite)
{
    tu_group g;
    tu_group_begin(&g, suite, "tasks");
    const attn_task_kind kinds[2] = {ATTN_TASK_RECALL, ATTN_TASK_RECALL_PREV};
    for (int k = 0; k < 2; ++k) {
        const attn_task t = {.kind = kinds[k], .num_keys = 11, .num_values = 7, .num_pairs = 5};
        const bool prev = kinds[k] == ATTN_TASK_RECALL_PREV;
        const int64_t N = attn_task_seq_len(&t), per = N * ATTN_TASK_SLOTS;
        tu_check(&g, N == 5 + (prev ? 2 : 1) && attn_task_vocab_size(&t) == 18 &&
                         attn_task_num_classes(&t) == (prev ? 49 : 7),
                 "%s: sizes", attn_task_name(kinds[k]));
        enum { COUNT = 400 };
        int32_t *tok = malloc(sizeof(int32_t) * (size_t)(per * COUNT)), tgt[COUNT];
        int32_t *tok2 = malloc(sizeof(int32_t) * (size_t)(per * COUNT)), tgt2[COUNT];
        attn_task_generate(&t, 99, 0, COUNT, tok, tgt, NULL);
        /* Example i depends only on (seed, i): a slice regenerates equal. */
        attn_task_generate(&t, 99, 150, 50, tok2, tgt2, NULL);
        tu_check(&g, !memcmp(tok + 150 * per, tok2, sizeof(int32_t) * (size_t)(50 * per)) &&
                         !memcmp(tgt + 150, tgt2, sizeof(int32_t) * 50),
                 "%s: a slice of the stream differs", attn_task_name(kinds[k]));
        attn_task_generate(&t, 100, 0, COUNT, tok2, tgt2, NULL);
        tu_check(&g, memcmp(tok, tok2, sizeof(int32_t) * (size_t)(per * COUNT)) != 0,
                 "%s: seeds 99 and 100 give the same examples", attn_task_name(kinds[k]));
        /* Structure: distinct keys with values, [lone value], query key
         * among them; the target is what the layout says. */
        bool ok = true;
        int value_seen[7] = {0};
        for (int i = 0; i < COUNT && ok; ++i) {
            const int32_t *e = tok + i * per;
            const int32_t q = e[(N - 1) * 2];
            int32_t answer = -1;
            for (int p = 0; p < 5; ++p) {
                ok = ok && e[2 * p] >= 0 && e[2 * p] < 11 && e[2 * p + 1] >= 11 && e[2 * p + 1] < 18;
                for (int o = 0; o < p; ++o) ok = ok && e[2 * o] != e[2 * p];
                if (e[2 * p] == q) answer = e[2 * p + 1] - 11;
            }
            ok = ok && answer >= 0 && e[(N - 1) * 2 + 1] == -1;
            if (prev) {
                const int32_t u = e[(N - 2) * 2] - 11;
                ok = ok && u >= 0 && u < 7 && e[(N - 2) * 2 + 1] == -1 && tgt[i] == answer * 7 + u;
            } else {
                ok = ok && tgt[i] == answer;
            }
            if (answer >= 0) value_seen[answer] = 1;
            if (!ok) tu_group_note(&g, "%s example %d breaks the layout", attn_task_name(kinds[k]), i);
        }
        for (int v = 0; v < 7; ++v) ok = ok && value_seen[v];
        tu_check(&g, ok, "%s: example structure", attn_task_name(kinds[k]));
        free(tok);
        free(tok2);
    }
    attn_task_kind kind;
    tu_check(&g, attn_task_from_name("recall-prev", &kind) && kind == ATTN_TASK_RECALL_PREV &&
                     !attn_task_from_name("nope", &kind),
             "task names");
    const attn_task bad = {.kind = ATTN_TASK_RECALL, .num_keys = 3, .num_values = 4, .num_pairs = 5};
    tu_check(&g, attn_task_check(&bad, NULL) == ATTN_ERR_ARG, "fewer keys than entries accepted");
    char lab[32];
    const attn_task t = {.kind = ATTN_TASK_RECALL_PREV, .num_keys = 4, .num_values = 5, .num_pairs = 2};
    attn_task_token_label(&t, 6, lab, sizeof lab);
    bool labels = !strcmp(lab, "v2");
    attn_task_class_label(&t, 13, lab, sizeof lab);
    labels = labels && !strcmp(lab, "v2,v3");
    tu_check(&g, labels, "labels");
    tu_group_end(&g);
}

/* ------------------------------------------------------------------ model */

static attn_model_config tiny_config(attn_task_kind kind)
{
    attn_model_config c = {
        .task = {.kind = kind, .num_keys = 6, .num_values = 5, .num_pairs = 3},
        .embed_dim = 8, .num_heads = 2, .positional_encoding = true,
    };
    return c;
}

/* Mean loss of the model on a fixed batch. */
static float batch_loss(attn_model *m, const int32_t *tok, const int32_t *tgt, int64_t B)
{
    float l = NAN;
    attn_model_forward(m, tok, tgt, B, NULL, &l, NULL, 1, NULL);
    return l;
}

/* The whole model's gradient along random directions vs central
 * differences of its float32 loss: catches wiring mistakes (a missing
 * dquery, a wrong slice) that the per-layer checks cannot see. */
static void test_model_gradient(tu_suite *suite, uint64_t seed)
{
    tu_group g;
    tu_group_begin(&g, suite, "model-gradient");
    const attn_task_kind kinds[2] = {ATTN_TASK_RECALL, ATTN_TASK_RECALL_PREV};
    for (int k = 0; k < 2; ++k) {
        attn_model_config cfg = tiny_config(kinds[k]);
        attn_model *m;
        if (!tu_check(&g, attn_model_create(&cfg, &m, NULL) == ATTN_OK, "create")) continue;
        attn_model_init(m, seed + (uint64_t)k);
        enum { B = 6 };
        const int64_t per = attn_task_seq_len(&cfg.task) * ATTN_TASK_SLOTS;
        int32_t tok[B * 16], tgt[B];
        attn_task_generate(&cfg.task, seed, 0, B, tok, tgt, NULL);
        attn_model_zero_grad(m);
        batch_loss(m, tok, tgt, B);
        attn_model_backward(m, tok, tgt, B, 1, NULL);
        (void)per;
        const int np = attn_model_num_params(m);
        tu_rng r;
        tu_rng_seed(&r, seed ^ 0xD1);
        for (int dir = 0; dir < 4; ++dir) {
            /* A random direction over every parameter; the gradient is
             * copied first (forward passes below do not touch it). */
            double predicted = 0;
            float *saved[16], *dirs[16];
            int64_t counts[16];
            for (int i = 0; i < np; ++i) {
                attn_tensor v, gr;
                attn_model_param_at(m, i, NULL, &v, &gr);
                counts[i] = attn_tensor_numel(&v);
                saved[i] = malloc(sizeof(float) * (size_t)counts[i]);
                dirs[i] = malloc(sizeof(float) * (size_t)counts[i]);
                memcpy(saved[i], v.data, sizeof(float) * (size_t)counts[i]);
                for (int64_t j = 0; j < counts[i]; ++j) {
                    dirs[i][j] = (float)tu_rng_normal(&r);
                    predicted += (double)dirs[i][j] * ((float *)gr.data)[j];
                }
            }
            const double h = 1e-2;
            float lp, lm;
            for (int sign = 0; sign < 2; ++sign) {
                for (int i = 0; i < np; ++i) {
                    attn_tensor v;
                    attn_model_param_at(m, i, NULL, &v, NULL);
                    for (int64_t j = 0; j < counts[i]; ++j)
                        ((float *)v.data)[j] =
                            (float)(saved[i][j] + (sign ? -h : h) * dirs[i][j]);
                }
                *(sign ? &lm : &lp) = batch_loss(m, tok, tgt, B);
            }
            for (int i = 0; i < np; ++i) {
                attn_tensor v;
                attn_model_param_at(m, i, NULL, &v, NULL);
                memcpy(v.data, saved[i], sizeof(float) * (size_t)counts[i]);
                free(saved[i]);
                free(dirs[i]);
            }
            const double fd = ((double)lp - (double)lm) / (2 * h);
            tu_check(&g, fabs(fd - predicted) <= 0.02 * fabs(predicted) + 2e-3,
                     "%s direction %d: finite difference %.6g, gradient %.6g",
                     attn_task_name(kinds[k]), dir, fd, predicted);
        }
        attn_model_free(m);
    }
    tu_group_end(&g);
}

/* ----------------------------------------------------------------- training */

typedef struct {
    float loss[4096], norm[4096];
    int64_t n, stop_at;
} curve;

static bool record(const attn_train_progress *p, void *user)
{
    curve *c = user;
    if (c->n < 4096) {
        c->loss[c->n] = p->loss;
        c->norm[c->n] = p->grad_norm;
        ++c->n;
    }
    return !(c->stop_at > 0 && p->step >= c->stop_at);
}

static attn_train_config short_config(void)
{
    attn_train_config c = attn_train_config_default(ATTN_TASK_RECALL);
    c.model.task.num_keys = 16;
    c.model.task.num_values = 16;
    c.model.task.num_pairs = 6;
    c.model.embed_dim = 32;
    c.model.num_heads = 2;
    c.batch_size = 32;
    c.steps = 400;
    c.warmup_steps = 20;
    c.heldout_size = 500;
    c.eval_every = 0;
    c.num_threads = 1;
    return c;
}

static double mean(const float *x, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += x[i];
    return s / (double)n;
}

static void test_short_run(tu_suite *suite)
{
    tu_group g;
    tu_group_begin(&g, suite, "train-short");
    static curve c;
    memset(&c, 0, sizeof c);
    attn_train_config cfg = short_config();
    attn_train_result res;
    attn_model *m = NULL;
    attn_error err = {0};
    const double t0 = now_seconds();
    const attn_status s = attn_train(&cfg, record, &c, &m, &res, &err);
    const double secs = now_seconds() - t0;
    if (tu_check(&g, s == ATTN_OK, "train failed: %s", err.message)) {
        const double first = mean(c.loss, 10), last = mean(c.loss + c.n - 10, 10);
        printf("  train-short: %lld steps in %.2f s, loss %.4f -> %.5f (x%.0f), held-out %.1f%%\n",
               (long long)res.steps, secs, first, last, first / last,
               100.0 * res.heldout_accuracy);
        /* Chance loss is ln 16 = 2.77; a model that learned the lookup is
         * far below it. The factor is fixed, not measured from this code. */
        tu_check(&g, c.n == cfg.steps && res.steps == cfg.steps, "steps recorded %lld",
                 (long long)c.n);
        tu_check(&g, first / last >= 20, "loss only fell from %.4f to %.4f (need x20)", first,
                 last);
        tu_check(&g, res.heldout_accuracy >= 0.95f, "held-out accuracy %.3f < 0.95",
                 (double)res.heldout_accuracy);
        tu_check(&g, res.final_loss == c.loss[c.n - 1], "final_loss is not the last step's");
    }
    attn_model_free(m);

    /* SGD with momentum learns too (more slowly: a weaker bar). */
    memset(&c, 0, sizeof c);
    cfg.optimizer = ATTN_OPTIM_SGD;
    cfg.lr = 0.1f;
    cfg.steps = 300;
    if (tu_check(&g, attn_train(&cfg, record, &c, NULL, &res, &err) == ATTN_OK, "sgd train: %s",
                 err.message)) {
        const double first = mean(c.loss, 10), last = mean(c.loss + c.n - 10, 10);
        printf("  train-short sgd: loss %.4f -> %.4f\n", first, last);
        tu_check(&g, first / last >= 5, "SGD: loss only fell from %.4f to %.4f (need x5)", first,
                 last);
    }

    /* A callback returning false stops the run. */
    memset(&c, 0, sizeof c);
    c.stop_at = 7;
    cfg = short_config();
    tu_check(&g, attn_train(&cfg, record, &c, NULL, &res, &err) == ATTN_OK && res.steps == 7 &&
                     c.n == 7 && !isnan(res.heldout_accuracy),
             "early stop: %lld steps", (long long)res.steps);

    /* Bad configurations are refused. */
    cfg = short_config();
    cfg.heldout_seed = cfg.seed;
    tu_check(&g, attn_train(&cfg, NULL, NULL, NULL, &res, &err) == ATTN_ERR_ARG,
             "held-out stream equal to the training seed accepted");
    cfg = short_config();
    cfg.model.num_heads = 3;
    tu_check(&g, attn_train(&cfg, NULL, NULL, NULL, &res, &err) == ATTN_ERR_ARG,
             "embed_dim 32 with 3 heads accepted");
    tu_group_end(&g);
}

/* Same seed: the same loss curve bit for bit, on 1 or 2 threads. */
static void test_determinism(tu_suite *suite)
{
    tu_group g;
    tu_group_begin(&g, suite, "determinism");
    static curve c[3];
    attn_model *m[3] = {0};
    attn_train_result res;
    for (int i = 0; i < 3; ++i) {
        memset(&c[i], 0, sizeof c[i]);
        attn_train_config cfg = short_config();
        cfg.steps = 40;
        /* Wide enough that GEMMs and SDPA really split across threads. */
        cfg.model.embed_dim = 64;
        cfg.batch_size = 64;
        cfg.num_threads = i == 1 ? 2 : 1;
        if (i == 2) cfg.seed = 2;
        attn_train(&cfg, record, &c[i], &m[i], &res, NULL);
    }
    tu_check(&g, c[0].n == 40 && !memcmp(c[0].loss, c[1].loss, sizeof(float) * 40) &&
                     !memcmp(c[0].norm, c[1].norm, sizeof(float) * 40),
             "loss curves differ between 1 and 2 threads");
    bool same_params = m[0] && m[1];
    for (int i = 0; same_params && i < attn_model_num_params(m[0]); ++i) {
        attn_tensor a, b;
        attn_model_param_at(m[0], i, NULL, &a, NULL);
        attn_model_param_at(m[1], i, NULL, &b, NULL);
        same_params = !memcmp(a.data, b.data, sizeof(float) * (size_t)attn_tensor_numel(&a));
    }
    tu_check(&g, same_params, "trained parameters differ between 1 and 2 threads");
    tu_check(&g, memcmp(c[0].loss, c[2].loss, sizeof(float) * 40) != 0,
             "seeds 1 and 2 give the same loss curve");
    for (int i = 0; i < 3; ++i) attn_model_free(m[i]);
    tu_group_end(&g);
}

/* A task so small that random training examples often equal held-out ones:
 * they must be skipped. */
static void test_heldout_exclusion(tu_suite *suite)
{
    tu_group g;
    tu_group_begin(&g, suite, "heldout");
    attn_train_config cfg = short_config();
    cfg.model.task = (attn_task){.kind = ATTN_TASK_RECALL, .num_keys = 2, .num_values = 2,
                                 .num_pairs = 2};
    /* 2 key orders x 4 value pairs x 2 queries = 16 distinct examples. */
    cfg.heldout_size = 6;
    cfg.steps = 10;
    cfg.batch_size = 16;
    attn_train_result res;
    attn_error err;
    tu_check(&g, attn_train(&cfg, NULL, NULL, NULL, &res, &err) == ATTN_OK && res.skipped_examples > 0,
             "no training example skipped although a third of them are held out (%lld)",
             (long long)res.skipped_examples);
    printf("  heldout: %lld training examples skipped for equalling a held-out one\n",
           (long long)res.skipped_examples);
    tu_group_end(&g);
}

static void test_checkpoint(tu_suite *suite)
{
    tu_group g;
    tu_group_begin(&g, suite, "checkpoint");
    attn_train_config cfg = short_config();
    cfg.model.task.kind = ATTN_TASK_RECALL_PREV;
    cfg.steps = 5;
    attn_model *m = NULL, *l = NULL;
    attn_error err = {0};
    char path[] = "test_train_ckpt.safetensors";
    if (!tu_check(&g, attn_train(&cfg, NULL, NULL, &m, NULL, &err) == ATTN_OK, "train: %s", err.message))
        goto done;
    tu_check(&g, attn_model_save(m, path, &err) == ATTN_OK, "save: %s", err.message);
    if (!tu_check(&g, attn_model_load(path, &l, &err) == ATTN_OK, "load: %s", err.message)) goto done;
    const attn_model_config *a = attn_model_get_config(m), *b = attn_model_get_config(l);
    tu_check(&g, !memcmp(&a->task, &b->task, sizeof a->task) && a->embed_dim == b->embed_dim &&
                     a->num_heads == b->num_heads &&
                     a->positional_encoding == b->positional_encoding && a->unscaled == b->unscaled,
             "configuration changed through the checkpoint");
    bool same = attn_model_num_params(m) == attn_model_num_params(l);
    for (int i = 0; same && i < attn_model_num_params(m); ++i) {
        const char *na, *nb;
        attn_tensor va, vb;
        attn_model_param_at(m, i, &na, &va, NULL);
        attn_model_param_at(l, i, &nb, &vb, NULL);
        same = !strcmp(na, nb) &&
               !memcmp(va.data, vb.data, sizeof(float) * (size_t)attn_tensor_numel(&va));
    }
    tu_check(&g, same, "parameters changed through the checkpoint");
    /* torch names: the MHA's under "mha.". */
    attn_safetensors st = {0};
    if (attn_safetensors_read(path, &st, NULL) == ATTN_OK) {
        tu_check(&g, attn_safetensors_find(&st, "mha.in_proj_weight") &&
                         attn_safetensors_find(&st, "mha.out_proj.bias") &&
                         attn_safetensors_find(&st, "embedding.weight") &&
                         attn_safetensors_find(&st, "head.weight") &&
                         attn_safetensors_find(&st, "config.num_heads"),
                 "checkpoint lacks a torch-named tensor");
        /* Without the config the file is refused. */
        const char *names[64];
        attn_tensor ts[64];
        size_t n = 0;
        for (size_t i = 0; i < st.count && n < 64; ++i)
            if (strncmp(st.arrays[i].name, "config.", 7)) {
                names[n] = st.arrays[i].name;
                ts[n++] = st.arrays[i].t;
            }
        attn_safetensors_write(path, names, ts, n, NULL);
        attn_model *bad = NULL;
        tu_check(&g, attn_model_load(path, &bad, &err) == ATTN_ERR_FORMAT && !bad,
                 "checkpoint without config accepted");
        attn_safetensors_free(&st);
    }
    attn_model *missing = NULL;
    tu_check(&g, attn_model_load("no/such/file.safetensors", &missing, &err) != ATTN_OK && !missing,
             "missing file accepted");
done:
    remove(path);
    attn_model_free(m);
    attn_model_free(l);
    tu_group_end(&g);
}

/* ------------------------------------------------------------------ CLI */

/* Runs a command; the last line of its output into last (may be NULL). */
static int run(const char *cmd, char *last, size_t size)
{
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char line[4096];
    if (last) last[0] = '\0';
    while (fgets(line, sizeof line, p))
        if (last) snprintf(last, size, "%s", line);
    return pclose(p);
}

static void test_cli(tu_suite *suite)
{
    tu_group g;
    tu_group_begin(&g, suite, "cli");
    char last[4096];
    const char *train = ATTN_CLI " train --task recall-prev --steps 30 --keys 8 --values 4 "
                                 "--pairs 3 --embed-dim 16 --heads 2 --heldout 100 --threads 1 "
                                 "--save test_cli.safetensors --plot test_cli.svg "
                                 "--log test_cli.csv --json 2>&1";
    int rc = run(train, last, sizeof last);
    tu_check(&g, rc == 0 && last[0] == '{' && strstr(last, "\"heldout_accuracy\":") &&
                     strstr(last, "\"final_loss\":") && strstr(last, "\"steps\":30") &&
                     strstr(last, "\"seconds\":"),
             "attn train --json: rc %d, last line %s", rc, last);
    FILE *f = fopen("test_cli.csv", "r");
    int lines = 0;
    char line[512];
    while (f && fgets(line, sizeof line, f)) ++lines;
    if (f) fclose(f);
    tu_check(&g, lines == 31, "loss.csv has %d lines, want a header and 30 steps", lines);
    f = fopen("test_cli.svg", "r");
    bool svg = false;
    for (int i = 0; f && i < 3 && fgets(line, sizeof line, f); ++i) svg = svg || strstr(line, "<svg");
    tu_check(&g, svg, "plot is not an SVG");
    if (f) fclose(f);
    rc = run(ATTN_CLI " heads test_cli.safetensors --svg test_cli_heads.svg --stats 50 2>&1", last,
             sizeof last);
    tu_check(&g, rc == 0 && strstr(last, "wrote test_cli_heads.svg"), "attn heads: rc %d, %s", rc,
             last);
    rc = run(ATTN_CLI " train --task nope 2>&1", last, sizeof last);
    tu_check(&g, WEXITSTATUS(rc) == 2, "unknown task: exit %d", WEXITSTATUS(rc));
    rc = run(ATTN_CLI " heads no-such-file.safetensors 2>&1", last, sizeof last);
    tu_check(&g, WEXITSTATUS(rc) == 2, "missing checkpoint: exit %d", WEXITSTATUS(rc));
    remove("test_cli.safetensors");
    remove("test_cli.svg");
    remove("test_cli.csv");
    remove("test_cli_heads.svg");
    tu_group_end(&g);
}

int main(int argc, char **argv)
{
    tu_options opt;
    if (!tu_parse_options(argc, argv, 0x747261696eull, &opt)) return 2;
    tu_suite suite = {0};
    suite.verbose = opt.verbose;
    printf("test_train: seed 0x%llx\n", (unsigned long long)opt.seed);
    if (tu_group_selected(&opt, "optim")) test_sgd(&suite, opt.seed);
    if (tu_group_selected(&opt, "optim")) test_adamw(&suite, opt.seed);
    if (tu_group_selected(&opt, "clip-schedule")) test_clip_and_schedule(&suite);
    if (tu_group_selected(&opt, "tasks")) test_tasks(&suite);
    if (tu_group_selected(&opt, "model-gradient")) test_model_gradient(&suite, opt.seed);
    if (tu_group_selected(&opt, "train-short")) test_short_run(&suite);
    if (tu_group_selected(&opt, "determinism")) test_determinism(&suite);
    if (tu_group_selected(&opt, "heldout")) test_heldout_exclusion(&suite);
    if (tu_group_selected(&opt, "checkpoint")) test_checkpoint(&suite);
    if (tu_group_selected(&opt, "cli")) test_cli(&suite);
    return tu_suite_finish(&suite);
}
