/* Model checkpoints in safetensors: every parameter under its torch
 * state_dict name (embedding.weight, mha.in_proj_weight, ..., head.bias),
 * so torch's load_state_dict reads them, plus the configuration as config.*
 * scalars (shape (1,), float32, integer-valued). */
#include "train.h"
#include "../io/encode.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The config.* scalars, in file order. */
enum { CFG_TASK, CFG_KEYS, CFG_VALUES, CFG_PAIRS, CFG_HEADS, CFG_POSENC, CFG_UNSCALED, CFG_COUNT };
static const char *const config_names[CFG_COUNT] = {
    "config.task",      "config.num_keys",  "config.num_values",        "config.num_pairs",
    "config.num_heads", "config.positional_encoding", "config.unscaled",
};

attn_status attn_model_encode(attn_atomic_file *f, attn_model *m, attn_error *err)
{
    RETURN_IF(!m, err, ATTN_ERR_NULL, "model: NULL");
    const attn_model_config *c = &m->cfg;
    float config[CFG_COUNT] = {
        [CFG_TASK] = (float)c->task.kind,         [CFG_KEYS] = (float)c->task.num_keys,
        [CFG_VALUES] = (float)c->task.num_values, [CFG_PAIRS] = (float)c->task.num_pairs,
        [CFG_HEADS] = (float)c->num_heads,        [CFG_POSENC] = c->positional_encoding,
        [CFG_UNSCALED] = c->unscaled,
    };
    const char *names[MODEL_MAX_PARAMS + CFG_COUNT];
    attn_tensor tensors[MODEL_MAX_PARAMS + CFG_COUNT];
    size_t n = 0;
    for (int i = 0; i < m->nparams; ++i, ++n)
        RETURN_IF_ERROR(attn_model_param_at(m, i, &names[n], &tensors[n], NULL));
    for (int i = 0; i < CFG_COUNT; ++i, ++n) {
        names[n] = config_names[i];
        tensors[n] = attn_tensor_1d(&config[i], 1);
    }
    return attn_safetensors_encode(f, names, tensors, n, err);
}

attn_status attn_model_save(attn_model *m, const char *path, attn_error *err)
{
    RETURN_IF(!m || !path, err, ATTN_ERR_NULL, "model/path: NULL");
    attn_atomic_file f;
    RETURN_IF_ERROR(attn_atomic_open(&f, path, err));
    attn_status st = attn_model_encode(&f, m, err);
    if (st != ATTN_OK) {
        attn_atomic_abort(&f);
        return st;
    }
    return attn_atomic_commit(&f, err);
}

/* A config.* scalar as a non-negative integer. */
static attn_status read_config(const attn_safetensors *st, const char *path, int which,
                               int64_t *out, attn_error *err)
{
    const attn_array *a = attn_safetensors_find(st, config_names[which]);
    RETURN_IF(!a, err, ATTN_ERR_FORMAT, "%s: missing tensor '%s' (not an attn train checkpoint?)",
              path, config_names[which]);
    RETURN_IF(a->t.dtype != ATTN_F32 || attn_tensor_numel(&a->t) != 1, err, ATTN_ERR_FORMAT,
              "%s: '%s' must be one float32", path, config_names[which]);
    const float v = *(const float *)a->t.data;
    RETURN_IF(!(v >= 0.0f && v <= 16777216.0f) || v != floorf(v), err, ATTN_ERR_FORMAT,
              "%s: '%s' = %g is not a valid count", path, config_names[which], (double)v);
    *out = (int64_t)v;
    return ATTN_OK;
}

/* Copies the named tensor of the file into a model parameter, checking the
 * shape. */
static attn_status load_param(const attn_safetensors *st, const char *path, const char *name,
                              const attn_tensor *value, attn_error *err)
{
    const attn_array *a = attn_safetensors_find(st, name);
    RETURN_IF(!a, err, ATTN_ERR_FORMAT, "%s: missing tensor '%s'", path, name);
    bool same = a->t.dtype == ATTN_F32 && a->t.ndim == value->ndim;
    for (int d = 0; same && d < value->ndim; ++d) same = a->t.shape[d] == value->shape[d];
    RETURN_IF(!same, err, ATTN_ERR_FORMAT, "%s: tensor '%s' has the wrong shape or dtype", path,
              name);
    /* Both are contiguous: the reader returns C-order arrays, parameters are
     * slices of flat buffers. */
    memcpy(value->data, a->t.data, sizeof(float) * (size_t)attn_tensor_numel(value));
    return ATTN_OK;
}

attn_status attn_model_load(const char *path, attn_model **out, attn_error *err)
{
    RETURN_IF(!path || !out, err, ATTN_ERR_NULL, "path/out: NULL");
    *out = NULL;
    attn_safetensors st = {0};
    RETURN_IF_ERROR(attn_safetensors_read(path, &st, err));
    attn_model *m = NULL;
    attn_status s = ATTN_OK;
    int64_t v[CFG_COUNT];
    for (int i = 0; i < CFG_COUNT && s == ATTN_OK; ++i) s = read_config(&st, path, i, &v[i], err);
    const attn_array *emb = attn_safetensors_find(&st, "embedding.weight");
    if (s == ATTN_OK && (!emb || emb->t.ndim != 2))
        s = attn_fail(err, ATTN_ERR_FORMAT, "%s: missing 2-D tensor 'embedding.weight'", path);
    if (s == ATTN_OK) {
        attn_model_config cfg = {
            .task = {.kind = (attn_task_kind)v[CFG_TASK], .num_keys = (int32_t)v[CFG_KEYS],
                     .num_values = (int32_t)v[CFG_VALUES], .num_pairs = (int32_t)v[CFG_PAIRS]},
            .embed_dim = emb->t.shape[1],
            .num_heads = v[CFG_HEADS],
            .positional_encoding = v[CFG_POSENC] != 0,
            .unscaled = v[CFG_UNSCALED] != 0,
        };
        s = attn_model_create(&cfg, &m, err);
        if (s != ATTN_OK) s = attn_fail(err, ATTN_ERR_FORMAT, "%s: %s", path, err ? err->message : "bad config");
    }
    for (int i = 0; s == ATTN_OK && i < m->nparams; ++i) {
        const char *name;
        attn_tensor value;
        s = attn_model_param_at(m, i, &name, &value, NULL);
        if (s == ATTN_OK) s = load_param(&st, path, name, &value, err);
    }
    attn_safetensors_free(&st);
    if (s != ATTN_OK) {
        attn_model_free(m);
        return s;
    }
    attn_model_zero_grad(m);
    *out = m;
    attn_ok(err);
    return ATTN_OK;
}
