/* The small model the tasks train:
 *   tokens (B,N,SLOTS) → embedding (B,N,E) + sinusoidal positions
 *   → self-attention MHA (B,N,E) → linear head on the last position (B,C)
 *   → softmax cross-entropy.
 * Every step is one of the library's layers; the model only wires them and
 * keeps the activations backward needs. */
#include "train.h"
#include "../core/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

attn_status attn_model_create(const attn_model_config *cfg, attn_model **out, attn_error *err)
{
    RETURN_IF(!cfg || !out, err, ATTN_ERR_NULL, "cfg/out: NULL");
    *out = NULL;
    RETURN_IF_ERROR(attn_task_check(&cfg->task, err));
    RETURN_IF(cfg->embed_dim < 1 || cfg->num_heads < 1 || cfg->embed_dim % cfg->num_heads, err,
              ATTN_ERR_ARG, "model: embed_dim %lld must be a positive multiple of num_heads %lld",
              (long long)cfg->embed_dim, (long long)cfg->num_heads);
    RETURN_IF(cfg->embed_dim > (1 << 16), err, ATTN_ERR_ARG, "model: embed_dim too large");

    attn_model *m = calloc(1, sizeof *m);
    RETURN_IF(!m, err, ATTN_ERR_ALLOC, "model: out of memory");
    m->cfg = *cfg;
    m->V = attn_task_vocab_size(&cfg->task);
    m->E = cfg->embed_dim;
    m->C = attn_task_num_classes(&cfg->task);
    m->N = attn_task_seq_len(&cfg->task);

    const attn_mha_config mc = {.embed_dim = m->E, .num_heads = cfg->num_heads, .bias = true};
    attn_status s = attn_mha_create(&mc, &m->mha, err);
    if (s != ATTN_OK) {
        attn_model_free(m);
        return s;
    }
    /* Sizes are bounded by the checks above (V, C <= 2^21, E <= 2^16). */
    const size_t ve = (size_t)(m->V * m->E), ce = (size_t)(m->C * m->E), c = (size_t)m->C;
    m->count = ve + ce + c;
    m->params = calloc(m->count, sizeof(float));
    m->grads = calloc(m->count, sizeof(float));
    if (!m->params || !m->grads) {
        attn_model_free(m);
        return attn_fail(err, ATTN_ERR_ALLOC, "model: out of memory for %zu parameters",
                         m->count);
    }
    m->embedding = m->params;
    m->head_w = m->params + ve;
    m->head_b = m->params + ve + ce;
    m->d_embedding = m->grads;
    m->d_head_w = m->grads + ve;
    m->d_head_b = m->grads + ve + ce;

    /* Names as torch's state_dict of embedding / mha / head submodules. */
    const int nmha = attn_mha_num_params(m->mha);
    m->nparams = nmha + 3;
    snprintf(m->names[0], MODEL_NAME_LEN, "embedding.weight");
    for (int i = 0; i < nmha; ++i) {
        const char *name;
        attn_tensor v, g;
        attn_mha_param_at(m->mha, i, &name, &v, &g);
        snprintf(m->names[1 + i], MODEL_NAME_LEN, "mha.%s", name);
    }
    snprintf(m->names[nmha + 1], MODEL_NAME_LEN, "head.weight");
    snprintf(m->names[nmha + 2], MODEL_NAME_LEN, "head.bias");
    *out = m;
    attn_ok(err);
    return ATTN_OK;
}

void attn_model_free(attn_model *m)
{
    if (!m) return;
    attn_mha_free(m->mha);
    free(m->params);
    free(m->grads);
    free(m->x);
    free(m->xq);
    free(m->y);
    free(m->logits);
    free(m->dlogits);
    free(m->dy);
    free(m->dq);
    free(m->dk);
    free(m->dv);
    free(m);
}

const attn_model_config *attn_model_get_config(const attn_model *m)
{
    return m ? &m->cfg : NULL;
}

attn_mha *attn_model_mha(attn_model *m)
{
    return m ? m->mha : NULL;
}

void attn_model_init(attn_model *m, uint64_t seed)
{
    attn_rng r;
    attn_rng_seed(&r, seed);
    /* nn.Embedding: N(0, 1). */
    attn_rng_fill_normal(&r, m->embedding, (size_t)(m->V * m->E), 0.0, 1.0);
    /* nn.Linear: weight and bias U(-1/sqrt(in), 1/sqrt(in)). */
    const double bound = 1.0 / sqrt((double)m->E);
    attn_rng_fill_uniform(&r, m->head_w, (size_t)(m->C * m->E), -bound, bound);
    attn_rng_fill_uniform(&r, m->head_b, (size_t)m->C, -bound, bound);
    attn_mha_init(m->mha, attn_rng_u64(&r));
    attn_model_zero_grad(m);
}

int attn_model_num_params(const attn_model *m)
{
    return m ? m->nparams : 0;
}

attn_status attn_model_param_at(attn_model *m, int i, const char **name, attn_tensor *value,
                                attn_tensor *grad)
{
    RETURN_IF(!m, NULL, ATTN_ERR_NULL, "model: NULL");
    RETURN_IF(i < 0 || i >= m->nparams, NULL, ATTN_ERR_ARG, "parameter %d out of range", i);
    attn_tensor v, g;
    const int nmha = m->nparams - 3;
    if (i == 0) {
        v = attn_tensor_2d(m->embedding, m->V, m->E);
        g = attn_tensor_2d(m->d_embedding, m->V, m->E);
    } else if (i <= nmha) {
        const char *mha_name;
        RETURN_IF_ERROR(attn_mha_param_at(m->mha, i - 1, &mha_name, &v, &g));
    } else if (i == nmha + 1) {
        v = attn_tensor_2d(m->head_w, m->C, m->E);
        g = attn_tensor_2d(m->d_head_w, m->C, m->E);
    } else {
        v = attn_tensor_1d(m->head_b, m->C);
        g = attn_tensor_1d(m->d_head_b, m->C);
    }
    if (name) *name = m->names[i];
    if (value) *value = v;
    if (grad) *grad = g;
    return ATTN_OK;
}

void attn_model_zero_grad(attn_model *m)
{
    if (!m) return;
    memset(m->grads, 0, m->count * sizeof(float));
    attn_mha_zero_grad(m->mha);
}

void model_segments(attn_model *m, float **params, float **grads, size_t *counts)
{
    params[0] = m->params;
    grads[0] = m->grads;
    counts[0] = m->count;
    params[1] = attn_mha_params_flat(m->mha, &counts[1]);
    grads[1] = attn_mha_grads_flat(m->mha, &counts[1]);
}

/* MHA options for this model's calls (threads, and the scale ablation). */
static attn_mha_opts model_mha_opts(const attn_model *m, int num_threads)
{
    attn_mha_opts o = attn_mha_opts_default();
    o.num_threads = num_threads;
    if (m->cfg.unscaled) o.scale = 1.0f; /* scores q·k without 1/sqrt(d_k) */
    return o;
}

/* realloc that frees the old block on failure. */
static bool grow(float **p, size_t count)
{
    float *q = realloc(*p, count * sizeof(float));
    if (!q) return false;
    *p = q;
    return true;
}

/* Grows the activation buffers to hold `batch` examples. */
static attn_status model_reserve(attn_model *m, int64_t batch, attn_error *err)
{
    if (batch <= m->capacity) return ATTN_OK;
    int64_t bne, bc;
    RETURN_IF(!attn_mul_ok(batch, m->N * m->E, &bne) || !attn_mul_ok(batch, m->C, &bc) ||
                  bne > (int64_t)(SIZE_MAX / 8 / sizeof(float)),
              err, ATTN_ERR_OVERFLOW, "batch: %lld examples is too many", (long long)batch);
    const size_t be = (size_t)(batch * m->E);
    const bool ok = grow(&m->x, (size_t)bne) && grow(&m->dk, (size_t)bne) &&
                    grow(&m->dv, (size_t)bne) && grow(&m->xq, be) && grow(&m->y, be) && grow(&m->dy, be) &&
                    grow(&m->dq, be) && grow(&m->logits, (size_t)bc) &&
                    grow(&m->dlogits, (size_t)bc);
    RETURN_IF(!ok, err, ATTN_ERR_ALLOC, "model: out of memory for a batch of %lld",
              (long long)batch);
    m->capacity = batch;
    return ATTN_OK;
}

/* Embeds tokens (batch, N, SLOTS) into m->x, positions added. */
static attn_status model_embed(attn_model *m, const int32_t *tokens, int64_t batch,
                               attn_error *err)
{
    attn_tensor table = attn_tensor_2d(m->embedding, m->V, m->E);
    attn_tensor x2 = attn_tensor_2d(m->x, batch * m->N, m->E);
    RETURN_IF_ERROR(attn_embedding_forward(&table, tokens, ATTN_TASK_SLOTS, &x2, err));
    if (m->cfg.positional_encoding) {
        attn_tensor x3 = attn_tensor_3d(m->x, batch, m->N, m->E);
        RETURN_IF_ERROR(attn_posenc_forward(&x3, &x3, err));
    }
    return ATTN_OK;
}

/* The query (B,1,E): a contiguous copy of x's last position. */
static attn_tensor query_copy(const attn_model *m, int64_t batch)
{
    for (int64_t b = 0; b < batch; ++b)
        memcpy(m->xq + b * m->E, m->x + (b * m->N + m->N - 1) * m->E,
               (size_t)m->E * sizeof(float));
    return attn_tensor_3d(m->xq, batch, 1, m->E);
}

attn_status attn_model_forward(attn_model *m, const int32_t *tokens, const int32_t *targets,
                               int64_t batch, attn_tensor *logits, float *loss, int64_t *correct,
                               int num_threads, attn_error *err)
{
    RETURN_IF(!m || (batch > 0 && !tokens), err, ATTN_ERR_NULL, "model/tokens: NULL");
    RETURN_IF(batch < 1, err, ATTN_ERR_ARG, "batch: must be >= 1, got %lld", (long long)batch);
    RETURN_IF((loss || correct) && !targets, err, ATTN_ERR_NULL,
              "targets: needed for the loss and accuracy");
    RETURN_IF_ERROR(model_reserve(m, batch, err));
    m->forward_batch = 0;

    /* tokens → x (B,N,E): embedding, then positions. */
    RETURN_IF_ERROR(model_embed(m, tokens, batch, err));
    /* x → y (B,1,E): only the query position's output is used, so MHA runs
     * with query = x[:, N-1:N] and key = value = x: exactly the last row of
     * self-attention, without computing the rows nobody reads. */
    attn_tensor x = attn_tensor_3d(m->x, batch, m->N, m->E);
    attn_tensor q = query_copy(m, batch);
    attn_tensor y = attn_tensor_3d(m->y, batch, 1, m->E);
    const attn_mha_opts mo = model_mha_opts(m, num_threads);
    RETURN_IF_ERROR(attn_mha_forward(m->mha, &q, &x, &x, &y, &mo, err));
    /* y → logits (B,C). */
    attn_tensor y2 = attn_tensor_2d(m->y, batch, m->E);
    attn_tensor w = attn_tensor_2d(m->head_w, m->C, m->E), b = attn_tensor_1d(m->head_b, m->C);
    attn_tensor z = attn_tensor_2d(m->logits, batch, m->C);
    RETURN_IF_ERROR(attn_linear_forward(&y2, &w, &b, &z, num_threads, err));
    /* logits → mean loss, correct predictions. */
    if (loss || correct) {
        float l;
        RETURN_IF_ERROR(attn_cross_entropy_forward(&z, targets, &l, correct, err));
        if (loss) *loss = l;
    }
    if (logits) {
        RETURN_IF_ERROR(attn_check_tensor(logits, "logits", 2, ATTN_F32, true, err));
        RETURN_IF(logits->shape[0] != batch || logits->shape[1] != m->C, err, ATTN_ERR_SHAPE,
                  "logits: expected (%lld, %lld)", (long long)batch, (long long)m->C);
        for (int64_t i = 0; i < batch; ++i)
            for (int64_t c = 0; c < m->C; ++c)
                ((float *)logits->data)[i * logits->stride[0] + c * logits->stride[1]] =
                    m->logits[i * m->C + c];
    }
    m->forward_batch = batch;
    attn_ok(err);
    return ATTN_OK;
}

attn_status attn_model_backward(attn_model *m, const int32_t *tokens, const int32_t *targets,
                                int64_t batch, int num_threads, attn_error *err)
{
    RETURN_IF(!m || !tokens || !targets, err, ATTN_ERR_NULL, "model/tokens/targets: NULL");
    RETURN_IF(batch < 1 || batch != m->forward_batch, err, ATTN_ERR_ARG,
              "batch: %lld is not the batch of the last forward", (long long)batch);
    const int64_t N = m->N, E = m->E;
    attn_tensor z = attn_tensor_2d(m->logits, batch, m->C);
    attn_tensor dz = attn_tensor_2d(m->dlogits, batch, m->C);

    /* In the forward pass loss = CE(logits): d logits = (softmax - onehot)/B. */
    RETURN_IF_ERROR(attn_cross_entropy_backward(&z, targets, 1.0f, &dz, err));
    /* logits = y·Wᵀ + b: dW, db accumulate, dy is written. */
    attn_tensor y2 = attn_tensor_2d(m->y, batch, E), dy2 = attn_tensor_2d(m->dy, batch, E);
    attn_tensor w = attn_tensor_2d(m->head_w, m->C, E);
    attn_tensor dw = attn_tensor_2d(m->d_head_w, m->C, E);
    attn_tensor db = attn_tensor_1d(m->d_head_b, m->C);
    RETURN_IF_ERROR(attn_linear_backward(&y2, &w, &dz, &dy2, &dw, &db, num_threads, err));
    /* y = MHA(query = x[:, N-1:N], key = x, value = x): MHA gradients
     * accumulate; x feeds three inputs, so its gradient is the sum
     * dkey + dvalue, plus dquery on the last position. */
    attn_tensor x = attn_tensor_3d(m->x, batch, N, E), q = attn_tensor_3d(m->xq, batch, 1, E);
    attn_tensor dy = attn_tensor_3d(m->dy, batch, 1, E), dq = attn_tensor_3d(m->dq, batch, 1, E);
    attn_tensor dk = attn_tensor_3d(m->dk, batch, N, E), dv = attn_tensor_3d(m->dv, batch, N, E);
    const attn_mha_opts mo = model_mha_opts(m, num_threads);
    RETURN_IF_ERROR(attn_mha_backward(m->mha, &q, &x, &x, &dy, &dq, &dk, &dv, &mo, err));
    float *dx = m->dk;
    for (int64_t i = 0; i < batch * N * E; ++i) dx[i] += m->dv[i];
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t e = 0; e < E; ++e) dx[(b * N + N - 1) * E + e] += m->dq[b * E + e];
    /* x = embedding + PE: PE passes dx through, the table accumulates it. */
    if (m->cfg.positional_encoding) RETURN_IF_ERROR(attn_posenc_backward(&dk, &dk, err));
    attn_tensor dx2 = attn_tensor_2d(dx, batch * N, E);
    attn_tensor dtable = attn_tensor_2d(m->d_embedding, m->V, E);
    RETURN_IF_ERROR(attn_embedding_backward(&dx2, tokens, ATTN_TASK_SLOTS, &dtable, err));
    attn_ok(err);
    return ATTN_OK;
}

attn_status attn_model_attention(attn_model *m, const int32_t *tokens, attn_tensor *weights,
                                 int num_threads, attn_error *err)
{
    RETURN_IF(!m || !tokens, err, ATTN_ERR_NULL, "model/tokens: NULL");
    const int64_t H = m->cfg.num_heads, N = m->N;
    RETURN_IF_ERROR(attn_check_tensor(weights, "weights", 2, ATTN_F32, true, err));
    RETURN_IF(weights->shape[0] != H || weights->shape[1] != N, err, ATTN_ERR_SHAPE,
              "weights: expected (%lld, %lld)", (long long)H, (long long)N);
    RETURN_IF_ERROR(model_reserve(m, 1, err));
    m->forward_batch = 0;
    RETURN_IF_ERROR(model_embed(m, tokens, 1, err));
    attn_tensor x = attn_tensor_3d(m->x, 1, N, m->E), q = query_copy(m, 1);
    attn_tensor y = attn_tensor_3d(m->y, 1, 1, m->E);
    /* The caller's (H,N) as MHA's per-head (B=1, H, L=1, S=N). */
    attn_tensor w4 = attn_tensor_4d(weights->data, 1, H, 1, N);
    w4.stride[1] = weights->stride[0];
    w4.stride[3] = weights->stride[1];
    attn_mha_opts mo = model_mha_opts(m, num_threads);
    mo.weights = &w4;
    mo.per_head_weights = true;
    RETURN_IF_ERROR(attn_mha_forward(m->mha, &q, &x, &x, &y, &mo, err));
    attn_ok(err);
    return ATTN_OK;
}
