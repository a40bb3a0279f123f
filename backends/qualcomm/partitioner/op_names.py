"""Op names for skip_node_op_set: what users write -> the names of the graph's node targets.

Users write the aten op of their model (`"aten.conv2d.default"`, `torch.ops.aten.linear.default`,
`"torch.ops.aten.conv2d.default"`, an OpOverloadPacket such as `torch.ops.aten.conv2d`) or the
edge op the partitioner sees (`"aten.convolution.default"`, `exir_ops.edge.aten.convolution.default`:
every convolution; `aten.conv2d` / `aten.conv_transpose2d` / ... name the convolutions of their
rank and kind).
Every entry resolves to canonical `namespace.name.overload` keys; ops that to_edge renames also
resolve to their edge op (view -> view_copy, batch_norm -> _native_batch_norm_legit_no_training, ...). A node matches when its own
op or an op it was decomposed from (its `from_node` provenance: linear -> permute_copy + addmm)
is named. An entry that names no op at all raises ValueError with close matches.
"""

from __future__ import annotations

import difflib
from functools import lru_cache
from typing import Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

import torch

_CONV = "aten.convolution.default"
# The aten conv ops an aten.convolution node of (input rank, transposed) was exported from:
# "aten.conv2d.default" names the 2-D convolutions only, "aten.conv_transpose2d.input" the
# transposed 2-D ones (an aten.convolution node matches them by its rank and transposed flag).
CONV_KINDS: Dict[Tuple[int, bool], Tuple[str, ...]] = {
    (3, False): ("aten.conv1d.default", "aten.conv1d.padding"),
    (4, False): ("aten.conv2d.default", "aten.conv2d.padding"),
    (5, False): ("aten.conv3d.default", "aten.conv3d.padding"),
    (3, True): ("aten.conv_transpose1d.default",),
    (4, True): ("aten.conv_transpose2d.input",),
    (5, True): ("aten.conv_transpose3d.input",),
}
# aten op -> the edge op(s) it becomes (besides the generic X -> X_copy rule).
DECOMPOSES_TO: Dict[str, List[str]] = {
    **{f"aten.{name}": [_CONV] for name in ("_convolution.default", "convolution.default")},
    "aten.batch_norm.default": ["aten._native_batch_norm_legit_no_training.default"],
    "aten._native_batch_norm_legit_no_training.default": ["aten._native_batch_norm_legit_no_training.default"],
    "aten.max_pool2d.default": ["aten.max_pool2d_with_indices.default"],
    "aten.adaptive_avg_pool2d.default": ["aten._adaptive_avg_pool2d.default"],
    "aten.softmax.int": ["aten._softmax.default"],
    "aten.relu6.default": ["aten.hardtanh.default"],
    "aten.layer_norm.default": ["aten.native_layer_norm.default"],
}
_NAMESPACE_PREFIXES = ("torch.ops.", "exir_ops.edge.", "ops.edge.", "edge.")


def op_key(target: object) -> Optional[str]:
    """`namespace.name.overload` of an OpOverload or EdgeOpOverload target, else None."""
    op = target if isinstance(target, torch._ops.OpOverload) else getattr(target, "_op", None)
    if isinstance(op, torch._ops.OpOverload):
        namespace, name = op._schema.name.split("::")
        return f"{namespace}.{name}.{op._overloadname or 'default'}"
    return None


def node_op_keys(node: torch.fx.Node, max_depth: int = 8) -> Set[str]:
    """The node's own op key and those of the ops it was decomposed from (meta "from_node")."""
    keys = {key for key in [op_key(node.target)] if key is not None}
    if _CONV in keys:
        keys.update(_conv_kind_keys(node))
    sources = list(node.meta.get("from_node") or [])
    for _ in range(max_depth):
        if not sources:
            break
        keys.update(str(s.target) for s in sources if getattr(s, "target", None) is not None)
        sources = [p for s in sources for p in (getattr(s, "from_node", None) or [])]
    return keys


def _conv_kind_keys(node: torch.fx.Node) -> Tuple[str, ...]:
    """The aten conv ops (CONV_KINDS) an aten.convolution node stands for."""
    val = node.meta.get("val")
    transposed = bool(node.args[6]) if len(node.args) > 6 else False
    return CONV_KINDS.get((val.dim(), transposed), ()) if isinstance(val, torch.Tensor) else ()


@lru_cache(maxsize=1)
def _all_op_keys() -> FrozenSet[str]:
    keys = set()
    for qualified in torch._C._dispatch_get_all_op_names():
        head, _, overload = qualified.partition(".")
        namespace, _, name = head.partition("::")
        keys.add(f"{namespace}.{name}.{overload or 'default'}")
    return frozenset(keys)


def _packet(namespace: str, name: str) -> Optional[torch._ops.OpOverloadPacket]:
    try:
        packet = getattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError):
        return None
    return packet if isinstance(packet, torch._ops.OpOverloadPacket) else None


def _keys_of_packet(packet: torch._ops.OpOverloadPacket) -> Set[str]:
    namespace, name = packet._qualified_op_name.split("::")
    return {f"{namespace}.{name}.{overload or 'default'}" for overload in packet.overloads()}


def _keys_of_string(entry: str) -> Set[str]:
    parts = _normalized(entry)  # "conv2d.default", "conv2d": aten by default
    if len(parts) == 2:
        packet = _packet(*parts)
        return _keys_of_packet(packet) if packet is not None else set()
    if len(parts) == 3:
        key = ".".join(parts)
        packet = _packet(parts[0], parts[1])
        if packet is not None and key in _keys_of_packet(packet):
            return {key}
    return set()


def _normalized(entry: str) -> List[str]:
    text = entry.strip().replace("::", ".")
    for prefix in _NAMESPACE_PREFIXES:
        text = text[len(prefix) :] if text.startswith(prefix) else text
    parts = text.split(".")
    return parts if len(parts) >= 2 and _packet(parts[0], parts[1]) is not None else ["aten"] + parts


def _suggestions(entry: object) -> str:
    if not isinstance(entry, str):
        return f" (entries are op names or OpOverload objects, not {type(entry).__name__})"
    parts = _normalized(entry)
    packet = _packet(parts[0], parts[1]) if len(parts) >= 2 else None
    if packet is not None:
        candidates = sorted(_keys_of_packet(packet))
        return f"; {parts[0]}.{parts[1]} has overloads {', '.join(repr(c) for c in candidates)}"
    if len(parts) >= 3:
        pool = sorted(_all_op_keys())
    else:
        pool = sorted({k.rsplit(".", 1)[0] for k in _all_op_keys()})
    matches = difflib.get_close_matches(".".join(parts), pool, n=3, cutoff=0.6)
    return f"; did you mean {', '.join(repr(m) for m in matches)}?" if matches else ""


def entry_keys(entry: object) -> Set[str]:
    """The canonical keys one skip_node_op_set entry names (empty: names no op)."""
    if isinstance(entry, torch._ops.OpOverloadPacket):
        return _keys_of_packet(entry)
    key = op_key(entry)
    if key is not None:
        return {key}
    return _keys_of_string(entry) if isinstance(entry, str) else set()


def _with_decompositions(keys: Iterable[str]) -> Set[str]:
    out = set()
    for key in keys:
        out.add(key)
        out.update(DECOMPOSES_TO.get(key, ()))
        namespace, name, overload = key.split(".")
        copy = f"{namespace}.{name}_copy.{overload}"
        if copy in _all_op_keys():
            out.add(copy)
    return out


def resolve_skip_ops(entries: Optional[Iterable[object]]) -> Set[str]:
    """Canonical keys of every op a skip_node_op_set names, decompositions included.
    ValueError naming the first entry that names no op, with close matches."""
    resolved: Set[str] = set()
    for entry in entries or ():
        keys = entry_keys(entry)
        if not keys:
            raise ValueError(
                f"skip_node_op_set entry {entry!r} names no op{_suggestions(entry)} "
                "(write an aten op such as 'aten.conv2d.default' or an edge op such as "
                "'aten.convolution.default', or pass the OpOverload)"
            )
        resolved |= _with_decompositions(keys)
    return resolved
