"""Finding and loading libattn, and the prototypes of the calls the package makes.

Search order:
  1. $ATTN_LIBRARY (a path to libattn.so), when set;
  2. next to this package (what `make python` and `pip install ./python` put there);
  3. the source tree's build directory (build/libattn.so), for PYTHONPATH=python;
  4. the installed library (the dynamic loader's search path).

The library is loaded with ctypes.CDLL, whose calls release the GIL for their
whole duration: other Python threads run while attn computes.
"""
import ctypes as C
import ctypes.util
import os

from . import _structs as S

_HERE = os.path.dirname(os.path.abspath(__file__))
_NAMES = ("libattn.so", "libattn.so.0")


def _candidates():
    env = os.environ.get("ATTN_LIBRARY")
    if env:
        yield env
        return  # an explicit choice is not second-guessed
    for name in _NAMES:
        yield os.path.join(_HERE, name)
    build = os.path.join(_HERE, os.pardir, os.pardir, "build")
    for name in _NAMES:
        yield os.path.normpath(os.path.join(build, name))
    found = ctypes.util.find_library("attn")
    if found:
        yield found
    yield "libattn.so.0"  # let the loader try LD_LIBRARY_PATH and the cache


def _load():
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(path + " (missing)")
            continue
        try:
            return C.CDLL(path), path
        except OSError as e:
            tried.append(f"{path} ({e})")
    raise ImportError("attn: cannot load libattn; tried " + "; ".join(tried) +
                      ". Build it with `make python`, or set ATTN_LIBRARY=/path/to/libattn.so")


lib, path = _load()

_status = C.c_int
_err = C.POINTER(S.attn_error)
_tensor = C.POINTER(S.attn_tensor)
_mha = C.c_void_p  # attn_mha * (opaque)


def _proto(name, restype, *argtypes):
    fn = getattr(lib, name, None)
    if fn is None:  # an older libattn: its absence surfaces when it is called
        return
    fn.restype = restype
    fn.argtypes = argtypes


_proto("attn_status_string", C.c_char_p, _status)
_proto("attn_isa", C.c_char_p)
_proto("attn_engine", C.c_char_p)
_proto("attn_default_threads", C.c_int)
_proto("attn_sdpa", _status, _tensor, _tensor, _tensor, _tensor, _tensor, _tensor,
       C.POINTER(S.attn_sdpa_opts), _err)
_proto("attn_sdpa_backward", _status, _tensor, _tensor, _tensor, _tensor, _tensor, _tensor,
       _tensor, _tensor, _tensor, C.POINTER(S.attn_sdpa_opts), _err)
_proto("attn_sdpa_varlen", _status, _tensor, _tensor, _tensor, C.POINTER(S.attn_varlen_seqs),
       _tensor, _tensor, C.POINTER(S.attn_sdpa_opts), _err)
_proto("attn_sdpa_varlen_backward", _status, _tensor, _tensor, _tensor,
       C.POINTER(S.attn_varlen_seqs), _tensor, _tensor, _tensor, _tensor, _tensor, _tensor,
       C.POINTER(S.attn_sdpa_opts), _err)
_proto("attn_lse_merge", _status, _tensor, _tensor, _tensor, _tensor, _tensor, _tensor, _err)
_proto("attn_rope_apply", _status, C.POINTER(S.attn_rope), _tensor, C.POINTER(C.c_int64), _err)
_proto("attn_alibi_slopes", _status, C.c_int64, C.POINTER(C.c_float), _err)
_proto("attn_mha_create", _status, C.POINTER(S.attn_mha_config), C.POINTER(_mha), _err)
_proto("attn_mha_free", None, _mha)
_proto("attn_mha_get_config", C.POINTER(S.attn_mha_config), _mha)
_proto("attn_mha_init", None, _mha, C.c_uint64)
_proto("attn_mha_num_params", C.c_int, _mha)
_proto("attn_mha_param_at", _status, _mha, C.c_int, C.POINTER(C.c_char_p), _tensor, _tensor)
_proto("attn_mha_zero_grad", None, _mha)
_proto("attn_mha_forward", _status, _mha, _tensor, _tensor, _tensor, _tensor,
       C.POINTER(S.attn_mha_opts), _err)
_proto("attn_mha_workspace_size", _status, _mha, _tensor, _tensor, _tensor, C.c_bool,
       C.POINTER(S.attn_mha_opts), C.POINTER(C.c_size_t), _err)
_proto("attn_mha_backward", _status, _mha, _tensor, _tensor, _tensor, _tensor, _tensor, _tensor,
       _tensor, C.POINTER(S.attn_mha_opts), _err)
