/* The public MHA calls: each validates a call (validate.c), runs a pass
 * (forward.c, backward.c) or sizes its workspace (buffers.c), and frees the
 * call. Nothing below calls back up here. */
#include "passes.h"

attn_status attn_mha_forward(const attn_mha *m, const attn_tensor *query, const attn_tensor *key,
                             const attn_tensor *value, attn_tensor *out,
                             const attn_mha_opts *opts, attn_error *err)
{
    mha_call c;
    RETURN_IF_ERROR(mha_call_init(&c, m, query, key, value, opts, err));
    attn_status s = mha_forward_pass(m, &c, out, opts, err);
    mha_call_free(&c);
    if (s == ATTN_OK) attn_ok(err);
    return s;
}

attn_status attn_mha_backward(attn_mha *m, const attn_tensor *query, const attn_tensor *key,
                              const attn_tensor *value, const attn_tensor *dout,
                              attn_tensor *dquery, attn_tensor *dkey, attn_tensor *dvalue,
                              const attn_mha_opts *opts, attn_error *err)
{
    mha_call c;
    RETURN_IF_ERROR(mha_call_init(&c, m, query, key, value, opts, err));
    const attn_tensor *ins[4] = {query, key, value, dout};
    attn_status s = mha_backward_pass(m, &c, ins, dquery, dkey, dvalue, opts, err);
    mha_call_free(&c);
    if (s == ATTN_OK) attn_ok(err);
    return s;
}

attn_status attn_mha_workspace_size(const attn_mha *m, const attn_tensor *query,
                                    const attn_tensor *key, const attn_tensor *value,
                                    bool backward, const attn_mha_opts *opts, size_t *bytes,
                                    attn_error *err)
{
    RETURN_IF(!bytes, err, ATTN_ERR_NULL, "bytes: pointer is NULL");
    mha_call c;
    RETURN_IF_ERROR(mha_call_init(&c, m, query, key, value, opts, err));
    attn_status s = mha_workspace_bytes(&c, backward, bytes, err);
    mha_call_free(&c);
    if (s == ATTN_OK) attn_ok(err);
    return s;
}
