/* The MHA module: configuration, parameters under torch's state_dict names
 * in one flat buffer (gradients in a second buffer of the same layout), and
 * torch's initialisation. */
#include "mha.h"
#include "../core/rng.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

attn_mha_opts attn_mha_opts_default(void)
{
    attn_mha_opts o;
    memset(&o, 0, sizeof o);
    return o;
}

/* Appends a parameter; returns its offset (running total in *count). */
static size_t add_param(attn_mha *m, const char *name, int ndim, int64_t n0, int64_t n1,
                        int64_t n2, size_t numel)
{
    mha_param *p = &m->param[m->nparams++];
    p->name = name;
    p->ndim = ndim;
    p->shape[0] = n0;
    p->shape[1] = n1;
    p->shape[2] = n2;
    p->offset = m->count;
    p->numel = numel;
    m->count += numel;
    return p->offset;
}

attn_status attn_mha_create(const attn_mha_config *cfg, attn_mha **out, attn_error *err)
{
    RETURN_IF(!out, err, ATTN_ERR_NULL, "out: module pointer is NULL");
    *out = NULL;
    RETURN_IF(!cfg, err, ATTN_ERR_NULL, "config: pointer is NULL");
    const int64_t E = cfg->embed_dim, H = cfg->num_heads;
    RETURN_IF(E <= 0, err, ATTN_ERR_ARG, "embed_dim: must be positive, got %lld", (long long)E);
    RETURN_IF(H <= 0, err, ATTN_ERR_ARG, "num_heads: must be positive, got %lld", (long long)H);
    RETURN_IF(E % H != 0, err, ATTN_ERR_ARG,
              "embed_dim %% num_heads: embed_dim %lld is not divisible by num_heads %lld",
              (long long)E, (long long)H);
    RETURN_IF(!(cfg->dropout >= 0.0f && cfg->dropout < 1.0f), err, ATTN_ERR_ARG,
              "dropout: must be in [0, 1), got %g", (double)cfg->dropout);
    RETURN_IF(cfg->kdim < 0, err, ATTN_ERR_ARG, "kdim: must be >= 0 (0 = embed_dim), got %lld",
              (long long)cfg->kdim);
    RETURN_IF(cfg->vdim < 0, err, ATTN_ERR_ARG, "vdim: must be >= 0 (0 = embed_dim), got %lld",
              (long long)cfg->vdim);
    const int64_t kdim = cfg->kdim ? cfg->kdim : E, vdim = cfg->vdim ? cfg->vdim : E;

    /* Parameter count, overflow-checked: q, out, k, v weights and 6E biases. */
    int64_t ee, ek, ev, e6, total = 0;
    bool ok = attn_mul_ok(E, E, &ee) && attn_mul_ok(E, kdim, &ek) && attn_mul_ok(E, vdim, &ev) &&
              attn_mul_ok(E, 6, &e6) && attn_add_ok(total, ee, &total) &&
              attn_add_ok(total, ee, &total) && attn_add_ok(total, ek, &total) &&
              attn_add_ok(total, ev, &total) && attn_add_ok(total, e6, &total) &&
              (uint64_t)total <= SIZE_MAX / sizeof(float) / 2;
    RETURN_IF(!ok, err, ATTN_ERR_OVERFLOW,
              "embed_dim, kdim, vdim: parameter count overflows (%lld, %lld, %lld)",
              (long long)E, (long long)kdim, (long long)vdim);

    attn_mha *m = calloc(1, sizeof *m);
    RETURN_IF(!m, err, ATTN_ERR_ALLOC, "module: cannot allocate");
    m->cfg = *cfg;
    m->cfg.kdim = kdim;
    m->cfg.vdim = vdim;
    m->packed = kdim == E && vdim == E;
    m->b_in = m->bias_k = m->bias_v = m->b_out = SIZE_MAX;

    /* state_dict order: the module's own parameters in registration order,
     * then the out_proj submodule's. */
    if (m->packed) {
        m->w_q = add_param(m, "in_proj_weight", 2, 3 * E, E, 0, (size_t)(3 * ee));
        m->w_k = m->w_q + (size_t)ee;
        m->w_v = m->w_k + (size_t)ee;
    } else {
        m->w_q = add_param(m, "q_proj_weight", 2, E, E, 0, (size_t)ee);
        m->w_k = add_param(m, "k_proj_weight", 2, E, kdim, 0, (size_t)ek);
        m->w_v = add_param(m, "v_proj_weight", 2, E, vdim, 0, (size_t)ev);
    }
    if (cfg->bias) m->b_in = add_param(m, "in_proj_bias", 1, 3 * E, 0, 0, (size_t)(3 * E));
    if (cfg->add_bias_kv) {
        m->bias_k = add_param(m, "bias_k", 3, 1, 1, E, (size_t)E);
        m->bias_v = add_param(m, "bias_v", 3, 1, 1, E, (size_t)E);
    }
    m->w_out = add_param(m, "out_proj.weight", 2, E, E, 0, (size_t)ee);
    if (cfg->bias) m->b_out = add_param(m, "out_proj.bias", 1, E, 0, 0, (size_t)E);

    m->params = calloc(m->count, sizeof(float));
    m->grads = calloc(m->count, sizeof(float));
    if (!m->params || !m->grads) {
        const size_t count = m->count;
        attn_mha_free(m);
        return attn_fail(err, ATTN_ERR_ALLOC, "module: cannot allocate %zu parameters", count);
    }
    *out = m;
    attn_ok(err);
    return ATTN_OK;
}

void attn_mha_free(attn_mha *m)
{
    if (!m) return;
    free(m->params);
    free(m->grads);
    free(m);
}

const attn_mha_config *attn_mha_get_config(const attn_mha *m)
{
    return m ? &m->cfg : NULL;
}

/* torch.nn.init._calculate_fan_in_and_fan_out: fan_in = size(1)·receptive,
 * fan_out = size(0)·receptive, receptive = product of dims from 2 on. */
static void fans(const mha_param *p, double *fan_in, double *fan_out)
{
    double receptive = 1.0;
    for (int d = 2; d < p->ndim; ++d) receptive *= (double)p->shape[d];
    *fan_in = (double)p->shape[1] * receptive;
    *fan_out = (double)p->shape[0] * receptive;
}

static void xavier_uniform(attn_rng *r, float *x, const mha_param *p)
{
    double fi, fo;
    fans(p, &fi, &fo);
    const double bound = sqrt(6.0 / (fi + fo)); /* gain 1 */
    attn_rng_fill_uniform(r, x, p->numel, -bound, bound);
}

static void xavier_normal(attn_rng *r, float *x, const mha_param *p)
{
    double fi, fo;
    fans(p, &fi, &fo);
    attn_rng_fill_normal(r, x, p->numel, 0.0, sqrt(2.0 / (fi + fo)));
}

/* Mirrors MultiheadAttention._reset_parameters (plus the Linear init that
 * out_proj.weight keeps): each tensor drawn in state_dict order from one
 * stream seeded by seed. */
void attn_mha_init(attn_mha *m, uint64_t seed)
{
    if (!m) return;
    attn_rng r;
    attn_rng_seed(&r, seed);
    const double E = (double)m->cfg.embed_dim;
    for (int i = 0; i < m->nparams; ++i) {
        const mha_param *p = &m->param[i];
        float *x = m->params + p->offset;
        if (p->offset == m->b_in || p->offset == m->b_out) {
            memset(x, 0, p->numel * sizeof(float)); /* constant_(bias, 0) */
        } else if (p->offset == m->bias_k || p->offset == m->bias_v) {
            xavier_normal(&r, x, p);
        } else if (p->offset == m->w_out) {
            /* kaiming_uniform_(a=sqrt(5)) on (E,E): gain sqrt(2/(1+5)),
             * bound gain·sqrt(3/fan_in) = 1/sqrt(E). */
            const double bound = 1.0 / sqrt(E);
            attn_rng_fill_uniform(&r, x, p->numel, -bound, bound);
        } else {
            xavier_uniform(&r, x, p); /* in_proj_weight, or q/k/v_proj_weight each */
        }
    }
}

int attn_mha_num_params(const attn_mha *m)
{
    return m ? m->nparams : 0;
}

static void param_views(attn_mha *m, const mha_param *p, attn_tensor *value, attn_tensor *grad)
{
    if (value) *value = attn_tensor_make(m->params + p->offset, ATTN_F32, p->ndim, p->shape);
    if (grad) *grad = attn_tensor_make(m->grads + p->offset, ATTN_F32, p->ndim, p->shape);
}

attn_status attn_mha_param_at(attn_mha *m, int i, const char **name, attn_tensor *value,
                              attn_tensor *grad)
{
    if (!m) return ATTN_ERR_NULL;
    if (i < 0 || i >= m->nparams) return ATTN_ERR_ARG;
    if (name) *name = m->param[i].name;
    param_views(m, &m->param[i], value, grad);
    return ATTN_OK;
}

attn_status attn_mha_param(attn_mha *m, const char *name, attn_tensor *value, attn_tensor *grad,
                           attn_error *err)
{
    RETURN_IF(!m, err, ATTN_ERR_NULL, "module: pointer is NULL");
    RETURN_IF(!name, err, ATTN_ERR_NULL, "name: pointer is NULL");
    for (int i = 0; i < m->nparams; ++i) {
        if (strcmp(m->param[i].name, name) == 0) {
            param_views(m, &m->param[i], value, grad);
            attn_ok(err);
            return ATTN_OK;
        }
    }
    return attn_fail(err, ATTN_ERR_ARG, "name: this module has no parameter '%s'", name);
}

float *attn_mha_params_flat(attn_mha *m, size_t *count)
{
    if (count) *count = m ? m->count : 0;
    return m ? m->params : NULL;
}

float *attn_mha_grads_flat(attn_mha *m, size_t *count)
{
    if (count) *count = m ? m->count : 0;
    return m ? m->grads : NULL;
}

void attn_mha_zero_grad(attn_mha *m)
{
    if (m) memset(m->grads, 0, m->count * sizeof(float));
}
