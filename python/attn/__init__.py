"""attn: scaled dot-product and multi-head attention, forward and backward,
over libattn's fused CPU kernels. NumPy API here; `import attn.torch` for the
PyTorch autograd Function and nn.Module; attn.flash_attn and attn.flashinfer
for those packages' calls (NumPy or torch)."""
from ._errors import AttnError, UnsupportedError
from ._lib import path as library_path
from ._threads import get_num_threads, set_num_threads
from .mha import MultiheadAttention
from .sdpa import (alibi_slopes, scaled_dot_product_attention,
                   scaled_dot_product_attention_backward)

__version__ = "0.3.0"


def engine():
    """The engine precision="bf16" runs its products on ("amx",
    "avx512bf16", or "f32": none, and such calls are the exact ones)."""
    from ._lib import lib
    return lib.attn_engine().decode()


def isa():
    """The instruction set the fused kernels use ("avx512", "avx2", "generic"
    or "reference")."""
    from ._lib import lib
    return lib.attn_isa().decode()


__all__ = ["AttnError", "MultiheadAttention", "alibi_slopes", "UnsupportedError", "engine", "get_num_threads", "isa", "library_path",
           "scaled_dot_product_attention", "scaled_dot_product_attention_backward",
           "set_num_threads"]
