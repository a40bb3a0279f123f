"""Edge pass (always last): one unique debug handle per call_function node.

ExecuTorch's to_edge gives every node of a decomposition the handle of the
op it came from (hardsigmoid -> add, clamp, clamp, div all share one handle),
and passes that copy meta duplicate handles further. The intermediate-output
debugger needs one handle per op, so this pass renumbers the graph: every
call_function node gets 1, 2, 3... in topological order; a getitem node takes
the handle of the node it reads from (its source's outputs are compared per
output under that one handle).

Without our edge passes (plain to_edge_transform_and_lower users), handles may
still be shared; `dumped_handle_owners` picks the one node per handle whose
output stands for the group (the last one, as ExecuTorch's Inspector does).
"""

from __future__ import annotations

import operator
from typing import Dict, Iterable, List, Optional, Set, Tuple

import torch
from executorch.exir.pass_base import PassResult

from backends.qualcomm.utils.constants import DEBUG_HANDLE


def _is_getitem(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target is operator.getitem


def node_debug_handle(node: torch.fx.Node) -> Optional[int]:
    """The node's debug handle as one positive int (first of a tuple), else None."""
    handle = node.meta.get(DEBUG_HANDLE)
    if isinstance(handle, (tuple, list)):
        handle = handle[0] if handle else None
    return int(handle) if isinstance(handle, int) and handle > 0 else None


def resolve_debug_handles(graph: torch.fx.Graph) -> int:
    """Renumber the handles of `graph` in place; returns the number of handles given."""
    next_handle = 0
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        source = node.args[0] if _is_getitem(node) else None
        if isinstance(source, torch.fx.Node) and node_debug_handle(source) is not None:
            node.meta[DEBUG_HANDLE] = node_debug_handle(source)
            continue
        next_handle += 1
        node.meta[DEBUG_HANDLE] = next_handle
    return next_handle


class ResolveDebugHandle:
    """Graph-module pass usable as an ExecuTorch transform pass (register it last)."""

    def __call__(self, graph_module: torch.fx.GraphModule) -> PassResult:
        resolve_debug_handles(graph_module.graph)
        return PassResult(graph_module, True)


def dumped_handle_owners(nodes: Iterable[torch.fx.Node]) -> Dict[torch.fx.Node, int]:
    """{node: handle} for the one call_function node per handle whose output is dumped:
    the last node in topological order carrying that handle (getitem nodes excluded:
    they alias their source's outputs)."""
    last_by_handle: Dict[int, torch.fx.Node] = {}
    for node in nodes:
        if node.op != "call_function" or _is_getitem(node):
            continue
        handle = node_debug_handle(node)
        if handle is not None:
            last_by_handle[handle] = node
    return {node: handle for handle, node in last_by_handle.items()}


def _output_shape(node: torch.fx.Node) -> Optional[tuple]:
    """Shape of the node's (first, e.g. batch norm's normalized) output."""
    value = node.meta.get("val")
    if isinstance(value, (list, tuple)) and value:
        value = value[0]
    return tuple(value.shape) if isinstance(value, torch.Tensor) else None


def _surviving_neighbour(node: torch.fx.Node, surviving: Set[int], downstream: bool) -> Optional[torch.fx.Node]:
    """The nearest node with a surviving handle through single-input chains: upstream through
    args[0], or downstream through the only user."""
    current = node
    while True:
        if downstream:
            users = list(current.users)
            current = users[0] if len(users) == 1 else None
        else:
            current = current.args[0] if current.args and isinstance(current.args[0], torch.fx.Node) else None
        if current is None or current.op != "call_function":
            return None
        if node_debug_handle(current) in surviving:
            return current


def folded_handle_groups(original: torch.fx.Graph, lowered: torch.fx.Graph) -> Dict[int, Tuple[int, ...]]:
    """{handle of a node of `lowered` (the delegate's graph after preprocessing): the handles of
    the edge nodes of `original` its output stands for, in topological order}. A node that
    preprocessing folded away joins the group of the node that now computes its value: a batch
    norm, quantize / dequantize or identity op the node upstream of it with the same shape (its
    output is what the dumped tensor holds: the group's last handle), a pad folded into a conv
    the conv after it (before the conv's own handle)."""
    surviving = {h for h in (node_debug_handle(n) for n in lowered.nodes if n.op == "call_function") if h is not None}
    groups: Dict[int, List[int]] = {h: [h] for h in surviving}
    for node in original.nodes:
        handle = node_debug_handle(node) if node.op == "call_function" and not _is_getitem(node) else None
        if handle is None or handle in surviving:
            continue
        is_pad = "constant_pad_nd" in str(node.target)
        owner = _surviving_neighbour(node, surviving, downstream=is_pad)
        if owner is None:
            continue
        group = groups[node_debug_handle(owner)]
        if is_pad:
            group.insert(0, handle)
        elif _output_shape(node) is not None and _output_shape(node) == _output_shape(owner):
            group.append(handle)
    return {h: tuple(group) for h, group in groups.items()}
