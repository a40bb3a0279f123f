"""The one exception type raised by the AOT side of qnn-delegate."""

from __future__ import annotations

from typing import Optional


class QnnLoweringError(RuntimeError):
    """Lowering failed; the message names the op, the node and the reason."""

    def __init__(self, reason: str, node: Optional[object] = None, op: Optional[str] = None):
        self.reason = reason
        self.node_name = getattr(node, "name", None) if node is not None else None
        self.op = op if op is not None else _target_name(node)
        parts = []
        if self.op:
            parts.append(f"op {self.op}")
        if self.node_name:
            parts.append(f"node '{self.node_name}'")
        where = (", ".join(parts) + ": ") if parts else ""
        super().__init__(f"QNN lowering failed: {where}{reason}")


def _target_name(node: Optional[object]) -> Optional[str]:
    target = getattr(node, "target", None)
    if target is None:
        return None
    return getattr(target, "__name__", None) or str(target)


class ContextBinaryError(ValueError):
    """A QNN context binary cannot be wrapped or read: QNN cannot parse it, it was built for
    another SoC or by a newer QNN, or custom_info does not fit it. The message names the file."""


class ContextBinaryNotSupportedError(NotImplementedError):
    """dump_context_from_pte of a .pte whose delegates carry no QNN context binary."""
