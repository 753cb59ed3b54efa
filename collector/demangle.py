"""Demangle C++ kernel names with the C++ runtime's ``__cxa_demangle`` (Itanium C++ ABI).

CUPTI reports mangled names (``_Z...``); shards carry both the demangled name (for people) and the
``kernel_id`` of the mangled name (for joins). Names that are not mangled, or that the runtime
cannot demangle, are returned unchanged. Results are cached: a job has hundreds of kernel names.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

_cxa = None
_free = None


def _load() -> bool:
    global _cxa, _free
    if _cxa is not None:
        return _cxa is not False
    for name in ("libstdc++.so.6", ctypes.util.find_library("stdc++"), "libc++.so.1"):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            fn = lib.__cxa_demangle
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        libc = ctypes.CDLL(None)
        libc.free.argtypes = [ctypes.c_void_p]
        _cxa, _free = fn, libc.free
        return True
    _cxa = False
    return False


@functools.lru_cache(maxsize=65536)
def demangle(name: str) -> str:
    """The demangled form of ``name``, or ``name`` itself when it is not a mangled C++ name."""
    if not name.startswith("_Z") or not _load():
        return name
    status = ctypes.c_int(0)
    ptr = _cxa(name.encode("utf-8", "surrogateescape"), None, None, ctypes.byref(status))
    if not ptr or status.value != 0:
        return name
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        _free(ptr)
