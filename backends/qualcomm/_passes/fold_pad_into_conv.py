"""Fold a zero constant_pad_nd of H/W into the pad_amount of the convolutions reading it
(directly, or through the dequantize FoldQDQ leaves before a float convolution)."""

from __future__ import annotations

from typing import List, Set

import torch
from executorch.exir.dialects._ops import ops as exir_ops
from torch.export import ExportedProgram

from backends.qualcomm.builders.op_pad import consumers, foldable_pad
from backends.qualcomm.builders.op_conv import conv_pad_amount
from backends.qualcomm.utils.constants import QCOM_PAD_AMOUNT

_PAD = exir_ops.edge.aten.constant_pad_nd.default


def _hw_pad(pad_node: torch.fx.Node) -> List[List[int]]:
    pad = [int(p) for p in pad_node.args[1]] + [0] * (4 - len(pad_node.args[1]))
    left, right, top, bottom = pad
    return [[top, bottom], [left, right]]


def _nodes_between(pad_node: torch.fx.Node, convs: Set[torch.fx.Node]) -> List[torch.fx.Node]:
    """Quantize / dequantize nodes on the paths from the pad to its convolutions."""
    found, frontier = [], list(pad_node.users)
    while frontier:
        node = frontier.pop()
        if node not in convs and node not in found:
            found.append(node)
            frontier.extend(node.users)
    return found


def _set_shape(nodes: List[torch.fx.Node], shape: torch.Size) -> None:
    """They now carry the unpadded tensor: same dtype, the pad input's shape."""
    for node in nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            node.meta["val"] = val.new_empty(shape)


def fold_pad_into_conv(ep: ExportedProgram) -> ExportedProgram:
    graph = ep.graph_module.graph
    changed = False
    for pad_node in [n for n in graph.nodes if n.target == _PAD]:
        if not foldable_pad(pad_node)[0]:
            continue
        extra = _hw_pad(pad_node)
        for conv in {conv: None for conv, _ in consumers(pad_node)}:
            base = conv_pad_amount(conv)
            conv.meta[QCOM_PAD_AMOUNT] = [[base[i][j] + extra[i][j] for j in range(2)] for i in range(2)]
        # Every path from the pad ends in those convolutions (directly or through a dequantize
        # that shares its encoding), so its readers read the unpadded input instead.
        convs = {conv for conv, _ in consumers(pad_node)}
        between = _nodes_between(pad_node, convs)
        pad_node.replace_all_uses_with(pad_node.args[0])
        _set_shape(between, pad_node.args[0].meta["val"].shape)
        graph.erase_node(pad_node)
        changed = True
    if changed:
        ep.graph_module.recompile()
    return ep
