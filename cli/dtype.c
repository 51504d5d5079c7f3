/* --dtype: the storage format of a command's tensors. Files are read as
 * float32 (a <f2 file exactly); bfloat16 and float16 inputs are those values
 * rounded to nearest even, and results come out in the same format. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool cli_get_dtype(const cli_args *a, attn_dtype *out)
{
    const char *v = cli_get(a, "--dtype");
    *out = ATTN_F32;
    if (!v || !strcmp(v, "f32") || !strcmp(v, "float32")) return true;
    if (!strcmp(v, "bf16") || !strcmp(v, "bfloat16")) *out = ATTN_BF16;
    else if (!strcmp(v, "f16") || !strcmp(v, "float16")) *out = ATTN_F16;
    else {
        cli_usage_error(a->cmd, "--dtype: expected f32, bf16 or f16, got '%s'", v);
        return false;
    }
    return true;
}

bool cli_round_input(const char *context, attn_tensor *t, attn_dtype dt, void **owned)
{
    *owned = NULL;
    if (dt == ATTN_F32) return true;
    const int64_t n = attn_tensor_numel(t);
    *owned = malloc((size_t)(n > 0 ? n : 1) * attn_dtype_size(dt));
    if (!*owned) {
        fprintf(stderr, "attn %s: out of memory\n", context);
        return false;
    }
    attn_tensor r = attn_tensor_make(*owned, dt, t->ndim, t->shape);
    attn_error err;
    if (attn_tensor_convert(t, &r, &err) != ATTN_OK) { /* cannot fail on a valid view */
        fprintf(stderr, "attn %s: %s\n", context, err.message);
        return false;
    }
    *t = r;
    return true;
}

attn_dtype cli_result_dtype(float *buf, int64_t n, attn_dtype dt)
{
    if (dt != ATTN_BF16) return dt;
    /* Element i moves from bytes [2i, 2i+2) to [4i, 4i+4): last to first,
     * nothing is overwritten before it is read. */
    const uint16_t *h = (const uint16_t *)buf;
    for (int64_t i = n - 1; i >= 0; --i) {
        const uint32_t bits = (uint32_t)h[i] << 16;
        memcpy(&buf[i], &bits, sizeof bits);
    }
    return ATTN_F32;
}

bool cli_parse_cache_dtype(const char *name, attn_dtype *dtype, attn_kv_quant *quant)
{
    static const struct {
        const char *name;
        attn_dtype dtype;
        attn_kv_quant quant;
    } names[] = {{"f32", ATTN_F32, ATTN_KV_FLOAT},  {"bf16", ATTN_BF16, ATTN_KV_FLOAT},
                 {"f16", ATTN_F16, ATTN_KV_FLOAT},  {"int8", ATTN_F32, ATTN_KV_INT8},
                 {"fp8", ATTN_F32, ATTN_KV_FP8_E4M3}, {"q4_0", ATTN_F32, ATTN_KV_Q4_0}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i)
        if (!strcmp(name, names[i].name)) {
            *dtype = names[i].dtype;
            *quant = names[i].quant;
            return true;
        }
    return false;
}
