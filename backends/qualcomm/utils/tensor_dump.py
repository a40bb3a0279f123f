"""Names of dumped tensors: `<node>_debugID_<handle>` (the only place the format is spelled)."""

from __future__ import annotations

import re
from typing import Optional

DEBUG_ID_MARKER = "_debugID_"
_DEBUG_ID_SUFFIX = re.compile(r"_debugID_(\d+)$")


def dump_tensor_name(base: str, handle: int) -> str:
    """Name of a dumped tensor produced by the node with debug handle `handle`."""
    return f"{base}{DEBUG_ID_MARKER}{int(handle)}"


def handle_from_tensor_name(name: str) -> Optional[int]:
    """The debug handle carried by a dumped tensor's name, else None."""
    match = _DEBUG_ID_SUFFIX.search(name)
    return int(match.group(1)) if match else None
