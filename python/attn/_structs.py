"""ctypes mirrors of the structs and enums in include/attn.h.

Field order, types and array sizes follow the header exactly; tests/test_layout.py
compares every offset and size with what the C compiler says.
"""
import ctypes as C

MAX_DIMS = 8
SDPA_MAX_MASKS = 2

# attn_status
OK = 0
ERR_NULL, ERR_SHAPE, ERR_STRIDE, ERR_DTYPE, ERR_ARG, ERR_OVERFLOW = 1, 2, 3, 4, 5, 6
ERR_ALLOC, ERR_WORKSPACE, ERR_IO, ERR_FORMAT, ERR_UNSUPPORTED = 7, 8, 9, 10, 11

# attn_dtype
F32, BOOL, BF16, F16 = 0, 1, 2, 3

# attn_causal
CAUSAL_NONE, CAUSAL_TOP_LEFT, CAUSAL_BOTTOM_RIGHT = 0, 1, 2

# attn_path
PATH_AUTO, PATH_REFERENCE, PATH_FUSED = 0, 1, 2

# attn_precision
PRECISION_EXACT, PRECISION_BF16 = 0, 1

_enum = C.c_int  # C enums here are int-sized (all values small and non-negative)


class attn_error(C.Structure):
    _fields_ = [("status", _enum), ("message", C.c_char * 256)]


class attn_tensor(C.Structure):
    _fields_ = [
        ("data", C.c_void_p),
        ("dtype", _enum),
        ("ndim", C.c_int),
        ("shape", C.c_int64 * MAX_DIMS),
        ("stride", C.c_int64 * MAX_DIMS),
    ]


class attn_window(C.Structure):
    _fields_ = [("enabled", C.c_bool), ("left", C.c_int64), ("right", C.c_int64)]


class attn_sdpa_opts(C.Structure):
    _fields_ = [
        ("scale", C.c_float),
        ("causal", _enum),
        ("mask", C.POINTER(attn_tensor) * SDPA_MAX_MASKS),
        ("num_threads", C.c_int),
        ("path", _enum),
        ("workspace", C.c_void_p),
        ("workspace_size", C.c_size_t),
        ("window", attn_window),
        ("alibi_slopes", C.POINTER(attn_tensor)),
        ("softcap", C.c_float),
        ("sinks", C.POINTER(attn_tensor)),
        ("grad_sinks", C.POINTER(attn_tensor)),
        ("dropout_p", C.c_float),
        ("dropout_seed", C.c_uint64),
        ("dropout_offset", C.c_uint64),
        ("softmax_stats", C.POINTER(attn_tensor)),
        ("precision", _enum),
        ("reserved32", C.c_uint32),
        ("grad_mask", C.POINTER(attn_tensor)),
        ("rope", C.c_void_p),  # const attn_rope * (attn_rope is mirrored below)
        ("rope_offset", C.c_int64),
    ]


# attn_offsets_type
OFFSETS_I64, OFFSETS_I32 = 0, 1


class attn_varlen_seqs(C.Structure):
    _fields_ = [
        ("nseq", C.c_int64),
        ("type", _enum),
        ("cu_seqlens_q", C.c_void_p),
        ("cu_seqlens_k", C.c_void_p),
    ]


class attn_mha_config(C.Structure):
    _fields_ = [
        ("embed_dim", C.c_int64),
        ("num_heads", C.c_int64),
        ("kdim", C.c_int64),
        ("vdim", C.c_int64),
        ("bias", C.c_bool),
        ("add_bias_kv", C.c_bool),
        ("add_zero_attn", C.c_bool),
        ("dropout", C.c_float),
    ]


class attn_mha_opts(C.Structure):
    _fields_ = [
        ("key_padding_mask", C.POINTER(attn_tensor)),
        ("attn_mask", C.POINTER(attn_tensor)),
        ("causal", C.c_bool),
        ("weights", C.POINTER(attn_tensor)),
        ("per_head_weights", C.c_bool),
        ("num_threads", C.c_int),
        ("path", _enum),
        ("scale", C.c_float),
        ("training", C.c_bool),
        ("dropout_seed", C.c_uint64),
        ("workspace", C.c_void_p),
        ("workspace_size", C.c_size_t),
        ("reserved", C.c_uint64 * 4),
    ]


# attn_rope_style
ROPE_NONE, ROPE_NEOX, ROPE_GPTJ = 0, 1, 2


class attn_rope(C.Structure):
    _fields_ = [
        ("style", _enum),
        ("rotary_dim", C.c_int64),
        ("theta", C.c_double),
        ("position_scale", C.c_double),
        ("cos", C.POINTER(attn_tensor)),
        ("sin", C.POINTER(attn_tensor)),
    ]


# Every mirrored struct, for the layout test.
ALL = (attn_error, attn_tensor, attn_window, attn_sdpa_opts, attn_varlen_seqs, attn_mha_config,
       attn_mha_opts, attn_rope)
