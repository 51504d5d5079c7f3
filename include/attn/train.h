/*
 * attn/train.h — what training needs around MHA: layers,
 * optimizers, synthetic tasks, a small model and the training loop.
 *
 * Part of libattn's public API; include <attn.h> for all of it. Conventions
 * (status codes, attn_error, strided views, backward overwrites inputs'
 * gradients) are described in attn/core.h.
 */
#ifndef ATTN_TRAIN_H
#define ATTN_TRAIN_H

#include "attn/mha.h"

#ifdef __cplusplus
extern "C" {
#endif

/* -------------------------------------------------------- training: layers */

/*
 * What training needs around MHA: a few layers, optimizers, two synthetic
 * tasks, a small model and a training loop. Conventions as in attn/core.h: each layer
 * is a forward/backward pair with mirrored signatures; backward OVERWRITES
 * input gradients and ACCUMULATES parameter gradients. Token ids and targets
 * are int32; a negative id is an empty slot (embedding) or an ignored row
 * (cross-entropy). Matrices given to these layers need unit stride in their
 * last dimension (rows may be strided). Everything is deterministic: the
 * same inputs give bit-identical results for any num_threads (0 = default).
 */

/* Token embedding, summed over slots (torch nn.Embedding when slots == 1):
 *   table (V,E), tokens (T,slots) contiguous int32, out (T,E)
 *   out[t] = Σ_s table[tokens[t,s]] over the slots with an id >= 0
 *            (0 if a row has none). An id >= V is an error. */
attn_status attn_embedding_forward(const attn_tensor *table, const int32_t *tokens,
                                   int64_t slots, attn_tensor *out, attn_error *err);
/* dtable (V,E) ACCUMULATES Σ over (t,s) with tokens[t,s] = v of dout[t]. */
attn_status attn_embedding_backward(const attn_tensor *dout, const int32_t *tokens,
                                    int64_t slots, attn_tensor *dtable, attn_error *err);

/* Sinusoidal positional encoding (Vaswani et al. 2017), no parameters:
 *   x, out (N,E) or (B,N,E); out = x + PE, PE[n,2i] = sin(n / 10000^(2i/E)),
 *   PE[n,2i+1] = cos(n / 10000^(2i/E)). out may be x (in place). */
attn_status attn_posenc_forward(const attn_tensor *x, attn_tensor *out, attn_error *err);
/* dx = dout (OVERWRITTEN; dx may be dout). */
attn_status attn_posenc_backward(const attn_tensor *dout, attn_tensor *dx, attn_error *err);

/* Linear (torch nn.Linear): x (T,in), w (out,in), b (out) or NULL, y (T,out)
 *   y = x·wᵀ + b. */
attn_status attn_linear_forward(const attn_tensor *x, const attn_tensor *w, const attn_tensor *b,
                                attn_tensor *y, int num_threads, attn_error *err);
/* dx (T,in) OVERWRITTEN (may be NULL); dw (out,in) and db (out) ACCUMULATE
 * (db may be NULL). */
attn_status attn_linear_backward(const attn_tensor *x, const attn_tensor *w, const attn_tensor *dy,
                                 attn_tensor *dx, attn_tensor *dw, attn_tensor *db,
                                 int num_threads, attn_error *err);

/* Softmax cross-entropy (torch F.cross_entropy, mean reduction):
 *   logits (T,C), targets (T) int32 in [0,C) or negative = ignored.
 *   loss = mean over counted rows of logsumexp(logits[t]) - logits[t,target];
 *   0 when no row counts. correct (optional) = rows whose argmax (first
 *   maximum) is the target. */
attn_status attn_cross_entropy_forward(const attn_tensor *logits, const int32_t *targets,
                                       float *loss, int64_t *correct, attn_error *err);
/* dlogits (T,C) OVERWRITTEN = dloss · (softmax(logits) - onehot(target)) / count,
 * zero on ignored rows. dlogits may be logits. */
attn_status attn_cross_entropy_backward(const attn_tensor *logits, const int32_t *targets,
                                        float dloss, attn_tensor *dlogits, attn_error *err);

/* ------------------------------------------------------------- optimizers */

/* torch.optim.SGD (dampening 0, no Nesterov): g = grad + weight_decay·p;
 * buf = momentum·buf + g (buf starts at 0, so the first step gives buf = g);
 * p -= lr·buf. momentum_buf (n) may be NULL when momentum == 0. */
typedef struct {
    float momentum;
    float weight_decay;
} attn_sgd_opts;

attn_status attn_sgd_step(float *param, const float *grad, float *momentum_buf, size_t n,
                          float lr, const attn_sgd_opts *opts, attn_error *err);

/* torch.optim.AdamW (decoupled weight decay): p *= 1 - lr·weight_decay;
 * m = β1·m + (1-β1)·g; v = β2·v + (1-β2)·g²;
 * p -= (lr / (1-β1^t)) · m / (sqrt(v) / sqrt(1-β2^t) + eps).
 * m and v (n each) start at 0; step t counts from 1. */
typedef struct {
    float beta1, beta2, eps, weight_decay;
} attn_adamw_opts;

/* torch's defaults: 0.9, 0.999, 1e-8, 0.01. */
attn_adamw_opts attn_adamw_opts_default(void);
attn_status attn_adamw_step(float *param, const float *grad, float *m, float *v, size_t n,
                            int64_t t, float lr, const attn_adamw_opts *opts, attn_error *err);

/* torch.nn.utils.clip_grad_norm_: the L2 norm of all segments together
 * (grads[i] has counts[i] floats) is returned in *norm (accumulated in
 * double, in a fixed order); if it exceeds max_norm every gradient is
 * multiplied by max_norm / (norm + 1e-6). max_norm <= 0 only measures. */
attn_status attn_clip_grad_norm(float *const *grads, const size_t *counts, size_t nseg,
                                float max_norm, float *norm, attn_error *err);

/* Learning rate at step (0-based) of total: linear warmup from peak/warmup to
 * peak over the first `warmup` steps, then cosine decay to min_lr at the
 * last step. */
float attn_lr_warmup_cosine(int64_t step, int64_t warmup, int64_t total, float peak_lr,
                            float min_lr);

/* ------------------------------------------------------------------ tasks */

/*
 * Synthetic tasks where attention is the right tool. Every position holds
 * ATTN_TASK_SLOTS token ids (summed by the embedding, -1 = empty). Keys are
 * ids [0, num_keys), values [num_keys, num_keys + num_values).
 *
 * ATTN_TASK_RECALL (associative recall): num_pairs entries, each a distinct
 *   key and a value in ONE position, then a query position holding a key
 *   that occurs among the entries. Target: the value stored under it
 *   (class = value index). seq_len = num_pairs + 1.
 * ATTN_TASK_RECALL_PREV: the same entries, then a lone value u, then the
 *   query key. Target: the pair (value under the query key, u), class =
 *   value·num_values + u. One head must match keys, another copy the
 *   previous position. seq_len = num_pairs + 2.
 */
#define ATTN_TASK_SLOTS 2

typedef enum {
    ATTN_TASK_RECALL = 0,
    ATTN_TASK_RECALL_PREV,
} attn_task_kind;

typedef struct {
    attn_task_kind kind;
    int32_t num_keys;   /* >= num_pairs */
    int32_t num_values; /* >= 2 */
    int32_t num_pairs;  /* >= 1 */
} attn_task;

attn_status attn_task_check(const attn_task *task, attn_error *err);
int64_t attn_task_seq_len(const attn_task *task);
int64_t attn_task_vocab_size(const attn_task *task);
int64_t attn_task_num_classes(const attn_task *task);
/* "recall" / "recall-prev"; NULL for an unknown kind. */
const char *attn_task_name(attn_task_kind kind);
/* Kind by name; false if unknown. */
bool attn_task_from_name(const char *name, attn_task_kind *kind);

/* Examples [first, first+count) of the stream `seed`: example i is a pure
 * function of (task, seed, i). tokens (count, seq_len, ATTN_TASK_SLOTS),
 * targets (count). */
attn_status attn_task_generate(const attn_task *task, uint64_t seed, int64_t first,
                               int64_t count, int32_t *tokens, int32_t *targets, attn_error *err);
/* A short label for a token id ("k3", "v12") or a class ("v5", "v5,v2"). */
void attn_task_token_label(const attn_task *task, int32_t id, char *buf, size_t size);
void attn_task_class_label(const attn_task *task, int32_t cls, char *buf, size_t size);

/* ------------------------------------------------------------------ model */

/*
 * The small model the tasks train:
 *   tokens (B,N,SLOTS) → x = embedding (B,N,E) (+ sinusoidal positions)
 *   → MHA(query = x[:, N-1:N], key = value = x) (B,1,E): the query
 *     position's row of self-attention, the only row the head reads
 *   → linear head (B,C) → cross-entropy.
 * Parameters, in order and under torch state_dict names of
 * `embedding = nn.Embedding(V,E); mha = nn.MultiheadAttention(E,H,
 * batch_first=True); head = nn.Linear(E,C)`: embedding.weight (V,E),
 * mha.<MHA parameters>, head.weight (C,E), head.bias (C).
 */
typedef struct {
    attn_task task;
    int64_t embed_dim;
    int64_t num_heads;
    bool positional_encoding; /* add sinusoidal positions to the embeddings */
    bool unscaled;            /* scores q·k without 1/sqrt(d_k) (ablation) */
} attn_model_config;

typedef struct attn_model attn_model;

attn_status attn_model_create(const attn_model_config *cfg, attn_model **out, attn_error *err);
void attn_model_free(attn_model *m);
const attn_model_config *attn_model_get_config(const attn_model *m);
/* The attention layer (owned by the model). */
attn_mha *attn_model_mha(attn_model *m);
/* Embedding N(0,1) like torch, MHA as attn_mha_init, head like nn.Linear;
 * all from `seed` (attn's generator). */
void attn_model_init(attn_model *m, uint64_t seed);

int attn_model_num_params(const attn_model *m);
attn_status attn_model_param_at(attn_model *m, int i, const char **name, attn_tensor *value,
                                attn_tensor *grad);
void attn_model_zero_grad(attn_model *m);

/* Forward on tokens (batch, seq_len, SLOTS). logits (batch, C) optional;
 * with targets (batch) also the mean loss and the number of correct argmax
 * predictions (each optional). Keeps the activations for attn_model_backward
 * (so a model is not shared between concurrent calls). */
attn_status attn_model_forward(attn_model *m, const int32_t *tokens, const int32_t *targets,
                               int64_t batch, attn_tensor *logits, float *loss, int64_t *correct,
                               int num_threads, attn_error *err);
/* Gradient of the mean loss of the last forward (same tokens and targets)
 * ACCUMULATED into the parameter gradients. */
attn_status attn_model_backward(attn_model *m, const int32_t *tokens, const int32_t *targets,
                                int64_t batch, int num_threads, attn_error *err);
/* Per-head attention of one example's query (last) position over its N
 * positions: weights (H, N). */
attn_status attn_model_attention(attn_model *m, const int32_t *tokens, attn_tensor *weights,
                                 int num_threads, attn_error *err);

/* Checkpoint: the parameters under their names plus config.* scalars
 * (config.task, config.num_keys, config.num_values, config.num_pairs,
 * config.num_heads, config.positional_encoding, config.unscaled). */
attn_status attn_model_save(attn_model *m, const char *path, attn_error *err);
attn_status attn_model_load(const char *path, attn_model **out, attn_error *err);

/* --------------------------------------------------------------- training */

typedef enum {
    ATTN_OPTIM_ADAMW = 0,
    ATTN_OPTIM_SGD,
} attn_optimizer;

typedef struct {
    attn_model_config model;
    attn_optimizer optimizer;
    int64_t steps;
    int64_t batch_size;
    int64_t warmup_steps;
    float lr, min_lr;        /* peak and final learning rate */
    float momentum;          /* SGD */
    attn_adamw_opts adamw;   /* AdamW (its weight_decay also used by SGD) */
    float clip_norm;         /* <= 0: no clipping */
    uint64_t seed;           /* initialisation and training examples */
    uint64_t heldout_seed;   /* the held-out stream (must differ from seed) */
    int64_t heldout_size;
    int64_t eval_every;      /* held-out evaluation period in steps (0 = only at the end) */
    int num_threads;
} attn_train_config;

/* The settings `attn train --task NAME` starts from (the CLI then runs on one
 * thread unless --threads is given). */
attn_train_config attn_train_config_default(attn_task_kind kind);

typedef struct {
    int64_t step;             /* steps done, 1..total */
    int64_t total_steps;
    float loss;               /* mean training loss of this step's batch */
    float accuracy;           /* training accuracy of this step's batch */
    float lr;                 /* learning rate used by this step */
    float grad_norm;          /* before clipping */
    float heldout_accuracy;   /* NaN unless evaluated after this step */
    float heldout_loss;       /* NaN unless evaluated after this step */
} attn_train_progress;

/* Called after every step; return false to stop early. */
typedef bool (*attn_train_callback)(const attn_train_progress *p, void *user);

typedef struct {
    int64_t steps;
    float final_loss;          /* training loss of the last step */
    float heldout_accuracy;
    float heldout_loss;
    int64_t skipped_examples;  /* training examples dropped for equalling a held-out one */
} attn_train_result;

/* Accuracy and mean loss of a model on examples [0, count) of a stream. */
attn_status attn_model_evaluate(attn_model *m, uint64_t seed, int64_t count, float *accuracy,
                                float *loss, int num_threads, attn_error *err);

/* Trains a new model (returned in *model, free with attn_model_free). Held-out
 * examples are never trained on: a training example equal to one of them is
 * skipped. The loss curve depends only on cfg, never on num_threads. */
attn_status attn_train(const attn_train_config *cfg, attn_train_callback callback, void *user,
                       attn_model **model, attn_train_result *result, attn_error *err);

#ifdef __cplusplus
}
#endif
#endif /* ATTN_TRAIN_H */
