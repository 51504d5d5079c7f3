"""torch.nn.MultiheadAttention on NumPy arrays, over libattn's attn_mha module.

Same constructor and forward signature as torch (batch_first=False by
default: inputs (L, N, E)); masks follow torch's MHA convention (bool True =
blocked, the opposite of SDPA's). Parameters live in the C module; load them
from a torch state_dict with load_state_dict({k: v.numpy() ...}).
"""
import ctypes as C
import secrets
import threading

import numpy as np

from . import _features
from . import _structs as S
from . import _tensor
from . import _threads
from ._errors import UnsupportedError, check, new_error
from ._lib import lib
from ._sdpa_call import _PATHS


class MultiheadAttention:
    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False, device=None,
                 dtype=None, *, seed=0):
        if device not in (None, "cpu"):
            raise ValueError(f"device: attn runs on the CPU, got {device!r}")
        if dtype not in (None, np.float32, "float32"):
            raise ValueError(f"dtype: attn computes in float32, got {dtype!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout: must be in [0, 1), got {dropout!r}")
        cfg = S.attn_mha_config(embed_dim=embed_dim, num_heads=num_heads, kdim=kdim or 0,
                                vdim=vdim or 0, bias=bias, add_bias_kv=add_bias_kv,
                                add_zero_attn=add_zero_attn, dropout=dropout)
        handle, err = C.c_void_p(), new_error()
        check(lib.attn_mha_create(C.byref(cfg), C.byref(handle), C.byref(err)), err)
        self._handle = handle
        resolved = lib.attn_mha_get_config(handle).contents
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.kdim, self.vdim = resolved.kdim, resolved.vdim
        self.dropout, self.batch_first, self.training = dropout, batch_first, True
        self._params, self._grads = self._bind_parameters()
        # scratch kept between forward and backward calls (fresh pages every
        # call cost page faults); a call finding it busy (another thread)
        # allocates its own
        self._workspace, self._workspace_lock = None, threading.Lock()
        lib.attn_mha_init(handle, seed)

    def __del__(self):
        if getattr(self, "_handle", None):
            lib.attn_mha_free(self._handle)
            self._handle = None

    def _bind_parameters(self):
        """NumPy views of the module's parameter and gradient buffers, by name."""
        params, grads = {}, {}
        for i in range(lib.attn_mha_num_params(self._handle)):
            name, value, grad = C.c_char_p(), S.attn_tensor(), S.attn_tensor()
            lib.attn_mha_param_at(self._handle, i, C.byref(name), C.byref(value), C.byref(grad))
            params[name.value.decode()] = self._as_array(value)
            grads[name.value.decode()] = self._as_array(grad)
        return params, grads

    def _as_array(self, t):
        shape = tuple(t.shape[:t.ndim])
        buf = (C.c_float * int(np.prod(shape))).from_address(t.data)
        buf._owner = self  # the C memory lives as long as any view of it
        return np.frombuffer(buf, dtype=np.float32).reshape(shape)

    # -------------------------------------------------------- parameters
    def named_parameters(self):
        """(name, live float32 view) in torch's state_dict order."""
        return list(self._params.items())

    def named_grads(self):
        """(name, live view of the accumulated gradient)."""
        return list(self._grads.items())

    def zero_grad(self):
        lib.attn_mha_zero_grad(self._handle)

    def state_dict(self):
        """Copies of the parameters under torch's names, in torch's order."""
        return {k: v.copy() for k, v in self._params.items()}

    def load_state_dict(self, state_dict, strict=True):
        """Copy parameters from a dict of arrays (torch: {k: v.numpy() for k, v
        in module.state_dict().items()}). strict: the keys must match exactly."""
        given = dict(state_dict)
        missing = [k for k in self._params if k not in given]
        unexpected = [k for k in given if k not in self._params]
        if strict and (missing or unexpected):
            raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys "
                           f"{unexpected}")
        for name, dst in self._params.items():
            if name not in given:
                continue
            src = np.asarray(given[name])
            if src.shape != dst.shape:
                raise ValueError(f"{name}: shape {src.shape}, expected {dst.shape}")
            np.copyto(dst, src, casting="same_kind")
        return missing, unexpected

    def train(self, mode=True):
        self.training = mode
        return self

    def eval(self):
        return self.train(False)

    # ------------------------------------------------------- forward/back
    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False, *,
                dropout_seed=None, num_threads=None, path="auto"):
        """(attn_output, attn_output_weights or None), as torch. is_causal adds
        torch's triu(ones(L, S), 1) mask. With dropout in training mode, pass
        dropout_seed to repeat the mask in backward (random when None)."""
        call = _Call(self, query, key, value, key_padding_mask, attn_mask, is_causal,
                     dropout_seed, num_threads, path)
        out = np.empty(call.caller_shape(call.q_shape, self.embed_dim), dtype=np.float32)
        weights = None
        if need_weights:
            heads = () if average_attn_weights else (self.num_heads,)
            lead = (call.B,) if call.batched else ()
            weights = np.empty(lead + heads + (call.L, call.S_total), dtype=np.float32)
            call.opts.weights = call.pointer(weights, "weights")
            call.opts.per_head_weights = not average_attn_weights
        out_view = call.pointer(call.batch_first(out), "out")
        self._run(call, False, lambda err: lib.attn_mha_forward(
            self._handle, *call.inputs(), out_view, C.byref(call.opts), C.byref(err)))
        return out, weights

    def _run(self, call, backward, fn):
        """fn(err) with the module's kept workspace in call.opts, grown to what
        this call needs (a call finding it busy in another thread runs
        without one, allocating its own)."""
        err = new_error()
        if not self._workspace_lock.acquire(blocking=False):
            check(fn(err), err)
            return
        try:
            size = C.c_size_t()
            check(lib.attn_mha_workspace_size(self._handle, *call.inputs(), backward,
                                              C.byref(call.opts), C.byref(size), C.byref(err)),
                  err)
            if self._workspace is None or self._workspace.nbytes < size.value:
                self._workspace = np.empty(size.value, dtype=np.uint8)
            call.opts.workspace = self._workspace.ctypes.data
            call.opts.workspace_size = self._workspace.nbytes
            check(fn(err), err)
        finally:
            call.opts.workspace, call.opts.workspace_size = None, 0
            self._workspace_lock.release()

    def backward(self, grad_output, query, key, value, key_padding_mask=None, attn_mask=None,
                 is_causal=False, *, needs_input_grad=(True, True, True), dropout_seed=None,
                 num_threads=None, path="auto"):
        """Gradients (d query, d key, d value) of <grad_output, forward(...)>;
        parameter gradients ACCUMULATE into named_grads() (zero_grad() first).
        For self-attention (key is value is query) the one input's gradient
        is returned as d query, with None for the others."""
        if self.training and self.dropout and dropout_seed is None:
            raise ValueError("dropout_seed: the backward of dropout needs the forward's seed")
        call = _Call(self, query, key, value, key_padding_mask, attn_mask, is_causal,
                     dropout_seed, num_threads, path)
        dout = _tensor.float32(grad_output, "grad_output")
        if dout.shape != call.caller_shape(call.q_shape, self.embed_dim):
            raise ValueError(f"grad_output: shape {dout.shape}, expected the output's "
                             f"{call.caller_shape(call.q_shape, self.embed_dim)}")
        shapes = [call.q_shape] if call.self_attention else [call.q_shape, call.k_shape,
                                                             call.v_shape]
        grads = [np.empty(call.caller_shape(s, s[-1]), dtype=np.float32) if wanted else None
                 for s, wanted in zip(shapes, needs_input_grad)]
        views = [call.pointer(call.batch_first(g), n) if g is not None else None
                 for g, n in zip(grads, ("grad_query", "grad_key", "grad_value"))]
        views += [None] * (3 - len(views))
        dout_view = call.pointer(call.batch_first(dout), "grad_output")
        self._run(call, True, lambda err: lib.attn_mha_backward(
            self._handle, *call.inputs(), dout_view, *views, C.byref(call.opts), C.byref(err)))
        return tuple(grads) + (None,) * (3 - len(grads))


class _Call:
    """The views and attn_mha_opts of one MHA call."""

    def __init__(self, m, query, key, value, key_padding_mask, attn_mask, is_causal,
                 dropout_seed, num_threads, path):
        self.m, self.keep = m, []
        self.self_attention = key is query and value is query
        self.q = _tensor.float32(query, "query")
        if self.q.ndim not in (2, 3):
            raise ValueError(f"query: expected (L, N, E), (N, L, E) or unbatched (L, E), got "
                             f"{self.q.ndim} dimensions")
        self.batched = self.q.ndim == 3
        self.k = None if self.self_attention else _tensor.float32(key, "key")
        self.v = None if self.self_attention else _tensor.float32(value, "value")
        self.q_shape = self.q.shape
        self.k_shape = self.k.shape if self.k is not None else self.q.shape
        self.v_shape = self.v.shape if self.v is not None else self.q.shape
        bf = self.batch_first(self.q)
        self.B = bf.shape[0] if self.batched else 1
        self.L = bf.shape[-2]
        S_ = self.batch_first(self.k).shape[-2] if self.k is not None else self.L
        cfg = lib.attn_mha_get_config(m._handle).contents
        self.S_total = S_ + int(cfg.add_bias_kv) + int(cfg.add_zero_attn)  # appended keys

        o = self.opts = S.attn_mha_opts()
        if key_padding_mask is not None:
            o.key_padding_mask = self.pointer(_mha_mask(key_padding_mask, "key_padding_mask"),
                                              "key_padding_mask")
        if attn_mask is not None:
            o.attn_mask = self.pointer(_mha_mask(attn_mask, "attn_mask"), "attn_mask")
        o.causal = bool(is_causal)
        o.num_threads = _threads.resolve(num_threads)
        if path not in _PATHS:
            raise ValueError(f"path: must be one of {', '.join(_PATHS)}, got {path!r}")
        o.path = _PATHS[path]
        if m.training and m.dropout:
            if not _features.supported("dropout"):
                raise UnsupportedError(S.ERR_UNSUPPORTED, "dropout: this libattn does not "
                                       "implement dropout yet (call eval() or use dropout=0)")
            o.training = True
            o.dropout_seed = secrets.randbits(63) if dropout_seed is None else int(dropout_seed)
        self.dropout_seed = o.dropout_seed

    def batch_first(self, a):
        """A caller-layout array as the library's (N, L, E) (or unbatched) view."""
        return a.swapaxes(0, 1) if self.batched and not self.m.batch_first else a

    def caller_shape(self, shape, features):
        """The shape of an array like `shape` with `features` in the last dimension."""
        return shape[:-1] + (features,)

    def pointer(self, a, name):
        t = _tensor.view(a, name)
        self.keep.append(t)
        return C.pointer(t)

    def inputs(self):
        if self.self_attention:
            return self.pointer(self.batch_first(self.q), "query"), None, None
        return tuple(self.pointer(self.batch_first(a), n)
                     for a, n in ((self.q, "query"), (self.k, "key"), (self.v, "value")))


def _mha_mask(x, name):
    a = np.asarray(x)
    if a.dtype == np.uint8:  # torch 1.13 still takes byte masks (deprecated)
        a = a.astype(np.bool_)
    return _tensor.mask(a, name)
