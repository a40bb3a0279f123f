"""Runtime options of the loaded backend, forwarded to the native extension."""

from __future__ import annotations

from typing import Any, Optional

_EXTENSION_ERROR: Optional[BaseException] = None


def load_extension() -> Optional[Any]:
    """Import backends.qualcomm._qnn_delegate (registers the QnnDelegate runtime); None if missing."""
    global _EXTENSION_ERROR
    try:
        from backends.qualcomm import _qnn_delegate  # type: ignore[attr-defined]
    except ImportError as exc:
        _EXTENSION_ERROR = exc
        return None
    return _qnn_delegate


def require_extension() -> Any:
    extension = load_extension()
    if extension is None:
        raise ImportError(
            "qnn-delegate native extension backends.qualcomm._qnn_delegate is not built; "
            f"run `pip install --no-build-isolation --no-deps -e .` ({_EXTENSION_ERROR})"
        )
    return extension


def set_runtime_option(key: str, value: Any) -> None:
    """Set a runtime option (e.g. 'qnn_runtime_log_level') of the QnnDelegate backend."""
    require_extension().set_runtime_option(key, value)


def get_runtime_option(key: str) -> Any:
    """Current value of a runtime option of the QnnDelegate backend."""
    return require_extension().get_runtime_option(key)
