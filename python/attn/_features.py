"""Which optional SDPA features this libattn implements (older builds reject
some with ATTN_ERR_UNSUPPORTED). Probed once with a 1-element call."""
import functools

import numpy as np

_PROBES = {
    "window": dict(window=(0, 0)),
    "alibi": dict(alibi_slopes=np.ones(1, np.float32)),
    "softcap": dict(softcap=1.0),
    "sinks": dict(sinks=np.zeros(1, np.float32)),
    "dropout": dict(dropout_p=0.5, dropout_seed=1),
    "softmax_stats": dict(return_softmax_stats=True),
}

NAMES = tuple(_PROBES)


@functools.lru_cache(maxsize=None)
def supported(name):
    """True if the library accepts the feature `name` (one of NAMES)."""
    from ._errors import UnsupportedError
    from .sdpa import scaled_dot_product_attention

    x = np.ones((1, 1, 1, 1), np.float32)
    try:
        scaled_dot_product_attention(x, x, x, **_PROBES[name])
    except UnsupportedError:
        return False
    return True
