"""The thread count calls use when they are not given one."""
from ._lib import lib

_MAX = 1024  # ATTN_MAX_THREADS
_default = 0  # 0: the library's choice (ATTN_NUM_THREADS, else every core)


def set_num_threads(n):
    """Threads for every later call without num_threads=; 0 restores the
    library's default (the ATTN_NUM_THREADS environment variable, else all cores)."""
    global _default
    _default = resolve(n)


def get_num_threads():
    """Threads a call without num_threads= uses."""
    return _default or lib.attn_default_threads()


def resolve(n):
    if n is None:
        return _default
    if isinstance(n, bool) or int(n) != n or not 0 <= n <= _MAX:
        raise ValueError(f"num_threads: must be an integer from 0 (default) to {_MAX}, got {n!r}")
    return int(n)
