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
