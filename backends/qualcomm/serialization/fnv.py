"""FNV-1a 64-bit hash of the payload bytes (the QnnContextBinary signature).

The native extension computes it (the same function the runtime uses to check
a blob); `fnv1a64_python` is the readable reference, used for small inputs
and by tests to cross-check the native one.
"""

from __future__ import annotations

FNV_OFFSET_BASIS = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
_MASK = (1 << 64) - 1
_NATIVE_THRESHOLD = 4096


def fnv1a64_python(data: bytes) -> int:
    """Reference implementation (slow: about 1 s per 10 MB)."""
    h = FNV_OFFSET_BASIS
    for byte in data:
        h = ((h ^ byte) * FNV_PRIME) & _MASK
    return h


def fnv1a64(data: bytes) -> int:
    """FNV-1a 64 of `data`."""
    if len(data) < _NATIVE_THRESHOLD:
        return fnv1a64_python(data)
    from backends.qualcomm.utils.runtime_options import require_extension

    return int(require_extension().fnv1a64(data))
