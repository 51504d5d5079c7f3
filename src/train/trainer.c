/* The training loop: batches from the seeded task stream (skipping any
 * example equal to a held-out one), forward, backward, gradient clipping,
 * warmup + cosine learning rate, SGD or AdamW, periodic held-out
 * evaluation. Nothing here depends on the thread count or on time, so a
 * seed fixes the loss curve bit for bit. */
#include "train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The training examples come from a stream derived from cfg->seed, distinct
 * from the one that initialises the parameters. */
#define TRAIN_STREAM_SALT 0x747261696e000000ull /* "train" */

/* Optimizer state per parameter segment. */
typedef struct {
    float *params[MODEL_SEGMENTS], *grads[MODEL_SEGMENTS];
    size_t counts[MODEL_SEGMENTS];
    float *m[MODEL_SEGMENTS], *v[MODEL_SEGMENTS]; /* AdamW moments, or SGD momentum in m */
} optim_state;

static void optim_free(optim_state *o)
{
    for (int s = 0; s < MODEL_SEGMENTS; ++s) {
        free(o->m[s]);
        free(o->v[s]);
    }
}

static attn_status optim_init(optim_state *o, attn_model *model, attn_error *err)
{
    memset(o, 0, sizeof *o);
    model_segments(model, o->params, o->grads, o->counts);
    for (int s = 0; s < MODEL_SEGMENTS; ++s) {
        o->m[s] = calloc(o->counts[s] ? o->counts[s] : 1, sizeof(float));
        o->v[s] = calloc(o->counts[s] ? o->counts[s] : 1, sizeof(float));
        RETURN_IF(!o->m[s] || !o->v[s], err, ATTN_ERR_ALLOC, "optimizer: out of memory");
    }
    return ATTN_OK;
}

static attn_status optim_step(optim_state *o, const attn_train_config *cfg, int64_t t, float lr,
                              attn_error *err)
{
    for (int s = 0; s < MODEL_SEGMENTS; ++s) {
        if (cfg->optimizer == ATTN_OPTIM_SGD) {
            const attn_sgd_opts so = {.momentum = cfg->momentum,
                                      .weight_decay = cfg->adamw.weight_decay};
            RETURN_IF_ERROR(attn_sgd_step(o->params[s], o->grads[s], o->m[s], o->counts[s], lr,
                                          &so, err));
        } else {
            RETURN_IF_ERROR(attn_adamw_step(o->params[s], o->grads[s], o->m[s], o->v[s],
                                            o->counts[s], t, lr, &cfg->adamw, err));
        }
    }
    return ATTN_OK;
}

static attn_status check_config(const attn_train_config *c, attn_error *err)
{
    RETURN_IF(c->steps < 1, err, ATTN_ERR_ARG, "steps: must be >= 1");
    RETURN_IF(c->batch_size < 1 || c->batch_size > (1 << 20), err, ATTN_ERR_ARG,
              "batch_size: must be in [1, 2^20]");
    RETURN_IF(c->warmup_steps < 0, err, ATTN_ERR_ARG, "warmup_steps: must be >= 0");
    RETURN_IF(!(c->lr > 0.0f) || !(c->min_lr >= 0.0f) || !isfinite(c->lr), err, ATTN_ERR_ARG,
              "lr must be > 0 and min_lr >= 0");
    RETURN_IF(c->optimizer != ATTN_OPTIM_ADAMW && c->optimizer != ATTN_OPTIM_SGD, err,
              ATTN_ERR_ARG, "optimizer: unknown kind %d", (int)c->optimizer);
    RETURN_IF(c->heldout_size < 1, err, ATTN_ERR_ARG, "heldout_size: must be >= 1");
    RETURN_IF(c->eval_every < 0, err, ATTN_ERR_ARG, "eval_every: must be >= 0");
    RETURN_IF(c->heldout_seed == c->seed, err, ATTN_ERR_ARG,
              "heldout_seed: must differ from seed");
    return ATTN_OK;
}

/* Training state that needs freeing. */
typedef struct {
    attn_model *model;
    optim_state opt;
    example_set heldout;
    int32_t *tokens, *targets; /* one batch (or the held-out set while building it) */
} train_run;

static void run_free(train_run *r, bool keep_model)
{
    if (!keep_model) attn_model_free(r->model);
    optim_free(&r->opt);
    example_set_free(&r->heldout);
    free(r->tokens);
    free(r->targets);
}

/* The next `batch` training examples of the stream, skipping held-out ones. */
static attn_status next_batch(train_run *r, const attn_task *task, uint64_t stream,
                              int64_t *cursor, int64_t batch, int64_t per, int64_t *skipped,
                              attn_error *err)
{
    for (int64_t i = 0; i < batch;) {
        int32_t *tok = r->tokens + i * per;
        RETURN_IF_ERROR(attn_task_generate(task, stream, (*cursor)++, 1, tok, &r->targets[i], err));
        if (example_set_contains(&r->heldout, example_fingerprint(tok, per, r->targets[i])))
            ++*skipped;
        else
            ++i;
    }
    return ATTN_OK;
}

static attn_status train_loop(train_run *r, const attn_train_config *cfg,
                              attn_train_callback callback, void *user, attn_train_result *res,
                              attn_error *err)
{
    const attn_task *task = &cfg->model.task;
    const int64_t per = attn_task_seq_len(task) * ATTN_TASK_SLOTS, B = cfg->batch_size;

    /* The held-out fingerprints (the buffers are sized for the larger of
     * the held-out set and a batch). */
    const int64_t rows = cfg->heldout_size > B ? cfg->heldout_size : B;
    r->tokens = malloc(sizeof(int32_t) * (size_t)(rows * per));
    r->targets = malloc(sizeof(int32_t) * (size_t)rows);
    RETURN_IF(!r->tokens || !r->targets, err, ATTN_ERR_ALLOC, "train: out of memory");
    RETURN_IF_ERROR(attn_task_generate(task, cfg->heldout_seed, 0, cfg->heldout_size, r->tokens,
                                       r->targets, err));
    RETURN_IF_ERROR(example_set_build(&r->heldout, r->tokens, r->targets, cfg->heldout_size, per,
                                      err));

    RETURN_IF_ERROR(attn_model_create(&cfg->model, &r->model, err));
    attn_model_init(r->model, cfg->seed);
    RETURN_IF_ERROR(optim_init(&r->opt, r->model, err));

    const uint64_t stream = cfg->seed ^ TRAIN_STREAM_SALT;
    int64_t cursor = 0;
    memset(res, 0, sizeof *res);
    res->heldout_accuracy = res->heldout_loss = NAN;
    for (int64_t step = 0; step < cfg->steps; ++step) {
        RETURN_IF_ERROR(next_batch(r, task, stream, &cursor, B, per, &res->skipped_examples, err));
        attn_model_zero_grad(r->model);
        float loss;
        int64_t correct;
        RETURN_IF_ERROR(attn_model_forward(r->model, r->tokens, r->targets, B, NULL, &loss,
                                           &correct, cfg->num_threads, err));
        RETURN_IF_ERROR(
            attn_model_backward(r->model, r->tokens, r->targets, B, cfg->num_threads, err));
        float norm;
        RETURN_IF_ERROR(attn_clip_grad_norm(r->opt.grads, r->opt.counts, MODEL_SEGMENTS,
                                            cfg->clip_norm, &norm, err));
        const float lr =
            attn_lr_warmup_cosine(step, cfg->warmup_steps, cfg->steps, cfg->lr, cfg->min_lr);
        RETURN_IF_ERROR(optim_step(&r->opt, cfg, step + 1, lr, err));

        attn_train_progress p = {
            .step = step + 1, .total_steps = cfg->steps, .loss = loss,
            .accuracy = (float)correct / (float)B, .lr = lr, .grad_norm = norm,
            .heldout_accuracy = NAN, .heldout_loss = NAN,
        };
        const bool last = step + 1 == cfg->steps;
        if (last || (cfg->eval_every > 0 && (step + 1) % cfg->eval_every == 0)) {
            RETURN_IF_ERROR(attn_model_evaluate(r->model, cfg->heldout_seed, cfg->heldout_size,
                                                &p.heldout_accuracy, &p.heldout_loss,
                                                cfg->num_threads, err));
            res->heldout_accuracy = p.heldout_accuracy;
            res->heldout_loss = p.heldout_loss;
        }
        res->steps = step + 1;
        res->final_loss = loss;
        const bool go_on = !callback || callback(&p, user);
        if (!go_on && !last) {
            /* Stopped early: the result reports the model as it is now. */
            if (isnan(p.heldout_accuracy)) {
                RETURN_IF_ERROR(attn_model_evaluate(r->model, cfg->heldout_seed,
                                                    cfg->heldout_size, &res->heldout_accuracy,
                                                    &res->heldout_loss, cfg->num_threads, err));
            }
            break;
        }
    }
    return ATTN_OK;
}

attn_status attn_train(const attn_train_config *cfg, attn_train_callback callback, void *user,
                       attn_model **model, attn_train_result *result, attn_error *err)
{
    RETURN_IF(!cfg, err, ATTN_ERR_NULL, "cfg: NULL");
    RETURN_IF_ERROR(check_config(cfg, err));
    RETURN_IF_ERROR(attn_task_check(&cfg->model.task, err));
    train_run r;
    memset(&r, 0, sizeof r);
    attn_train_result res;
    const attn_status s = train_loop(&r, cfg, callback, user, &res, err);
    run_free(&r, s == ATTN_OK && model != NULL);
    if (s != ATTN_OK) return s;
    if (model) *model = r.model;
    if (result) *result = res;
    attn_ok(err);
    return ATTN_OK;
}
