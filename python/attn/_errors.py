"""Library failures as Python exceptions carrying attn's one-line message."""
import ctypes as C
import threading

from . import _structs as S
from ._lib import lib


class AttnError(ValueError):
    """A call into libattn failed. `message` names the offending argument,
    `status` is the attn_status code and `status_name` its stable name."""

    def __init__(self, status, message):
        self.status = status
        self.status_name = lib.attn_status_string(status).decode()
        self.message = message
        super().__init__(message or self.status_name)


class UnsupportedError(AttnError):
    """Valid input this libattn build does not support (ATTN_ERR_UNSUPPORTED)."""


_local = threading.local()


def new_error():
    """An attn_error for one call: one per thread, reused (a call overwrites
    it only when it fails, and check() reads it at once)."""
    err = getattr(_local, "err", None)
    if err is None:
        err = _local.err = S.attn_error()
    return err


def check(status, err):
    """Raise for a failed status: MemoryError for allocation failures,
    UnsupportedError / AttnError (both ValueError) for everything else."""
    if status == S.OK:
        return
    message = C.string_at(err.message).decode(errors="replace")
    if status == S.ERR_ALLOC:
        raise MemoryError(message)
    if status == S.ERR_UNSUPPORTED:
        raise UnsupportedError(status, message)
    raise AttnError(status, message)
