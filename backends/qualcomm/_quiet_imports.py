"""Silences known, harmless third-party start-up noise; real errors still show.

Importing our package imports torchao and ExecuTorch, which print on every
import, on this CPU-only stack:
- torchao: "Failed to load .../_C_mxfp8...so" and "..._C_cutlass_90a...so":
  CUDA-only kernel libraries that cannot load without CUDA (its other
  libraries load, and any other load failure is still shown);
- torch's pytree logger: "<enum 'KernelPreference'> is an Enum subclass ...
  register_constant() ... deprecated", a deprecation inside torchao;
- a FutureWarning "`isinstance(treespec, LeafSpec)` is deprecated" raised when
  ExecuTorch unpickles tree specs.
Each filter matches one exact message; nothing else is dropped.
"""

from __future__ import annotations

import logging
import re
import warnings

# torchao's CUDA-only extension libraries: unloadable on a CPU build of torch.
_CUDA_ONLY_TORCHAO_LIBS = re.compile(r"^Failed to load \S*/torchao/_C_(mxfp8|cutlass_\w+)[\w.-]*\.so: ")
_PYTREE_ENUM_DEPRECATION = re.compile(r"is an Enum subclass and is now natively supported by torch\.compile")
_LEAFSPEC_DEPRECATION = r"`isinstance\(treespec, LeafSpec\)` is deprecated"


class _DropMatching(logging.Filter):
    """Drops the records whose formatted message matches `pattern`."""

    def __init__(self, pattern: "re.Pattern[str]") -> None:
        super().__init__()
        self.pattern = pattern

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken record is not ours to hide
            return True
        return self.pattern.search(message) is None


_installed = False


def silence_third_party_noise() -> None:
    """Installs the filters once (idempotent); call before torchao is imported."""
    global _installed
    if _installed:
        return
    _installed = True
    logging.getLogger("torchao").addFilter(_DropMatching(_CUDA_ONLY_TORCHAO_LIBS))
    logging.getLogger("torch.utils._pytree").addFilter(_DropMatching(_PYTREE_ENUM_DEPRECATION))
    warnings.filterwarnings("ignore", message=_LEAFSPEC_DEPRECATION, category=FutureWarning)
