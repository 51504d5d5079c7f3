/* Prints the size of every struct attn's Python package mirrors and the
 * offset of each field, one "name value" per line, for test_layout.py. */
#include <attn.h>
#include <stddef.h>
#include <stdio.h>

#define SIZE(T) printf(#T " %zu\n", sizeof(T))
#define FIELD(T, f) printf(#T "." #f " %zu\n", offsetof(T, f))

int main(void)
{
    SIZE(attn_error);
    FIELD(attn_error, status);
    FIELD(attn_error, message);

    SIZE(attn_tensor);
    FIELD(attn_tensor, data);
    FIELD(attn_tensor, dtype);
    FIELD(attn_tensor, ndim);
    FIELD(attn_tensor, shape);
    FIELD(attn_tensor, stride);

    SIZE(attn_window);
    FIELD(attn_window, enabled);
    FIELD(attn_window, left);
    FIELD(attn_window, right);

    SIZE(attn_sdpa_opts);
    FIELD(attn_sdpa_opts, scale);
    FIELD(attn_sdpa_opts, causal);
    FIELD(attn_sdpa_opts, mask);
    FIELD(attn_sdpa_opts, num_threads);
    FIELD(attn_sdpa_opts, path);
    FIELD(attn_sdpa_opts, workspace);
    FIELD(attn_sdpa_opts, workspace_size);
    FIELD(attn_sdpa_opts, window);
    FIELD(attn_sdpa_opts, alibi_slopes);
    FIELD(attn_sdpa_opts, softcap);
    FIELD(attn_sdpa_opts, sinks);
    FIELD(attn_sdpa_opts, grad_sinks);
    FIELD(attn_sdpa_opts, dropout_p);
    FIELD(attn_sdpa_opts, dropout_seed);
    FIELD(attn_sdpa_opts, dropout_offset);
    FIELD(attn_sdpa_opts, softmax_stats);
    FIELD(attn_sdpa_opts, precision);
    FIELD(attn_sdpa_opts, reserved32);
    FIELD(attn_sdpa_opts, grad_mask);
    FIELD(attn_sdpa_opts, rope);
    FIELD(attn_sdpa_opts, rope_offset);

    SIZE(attn_varlen_seqs);
    FIELD(attn_varlen_seqs, nseq);
    FIELD(attn_varlen_seqs, type);
    FIELD(attn_varlen_seqs, cu_seqlens_q);
    FIELD(attn_varlen_seqs, cu_seqlens_k);

    SIZE(attn_mha_config);
    FIELD(attn_mha_config, embed_dim);
    FIELD(attn_mha_config, num_heads);
    FIELD(attn_mha_config, kdim);
    FIELD(attn_mha_config, vdim);
    FIELD(attn_mha_config, bias);
    FIELD(attn_mha_config, add_bias_kv);
    FIELD(attn_mha_config, add_zero_attn);
    FIELD(attn_mha_config, dropout);

    SIZE(attn_mha_opts);
    FIELD(attn_mha_opts, key_padding_mask);
    FIELD(attn_mha_opts, attn_mask);
    FIELD(attn_mha_opts, causal);
    FIELD(attn_mha_opts, weights);
    FIELD(attn_mha_opts, per_head_weights);
    FIELD(attn_mha_opts, num_threads);
    FIELD(attn_mha_opts, path);
    FIELD(attn_mha_opts, scale);
    FIELD(attn_mha_opts, training);
    FIELD(attn_mha_opts, dropout_seed);
    FIELD(attn_mha_opts, workspace);
    FIELD(attn_mha_opts, workspace_size);
    FIELD(attn_mha_opts, reserved);

    SIZE(attn_rope);
    FIELD(attn_rope, style);
    FIELD(attn_rope, rotary_dim);
    FIELD(attn_rope, theta);
    FIELD(attn_rope, position_scale);
    FIELD(attn_rope, cos);
    FIELD(attn_rope, sin);
    return 0;
}
