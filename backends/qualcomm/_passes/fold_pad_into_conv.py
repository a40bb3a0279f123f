"""Fold a zero constant_pad_nd of H/W into the pad_amount of the convolutions reading it."""
from __future__ import annotations

from typing import List

import torch
from executorch.exir.dialects._ops import ops as exir_ops
from torch.export import ExportedProgram

from backends.qualcomm.builders.op_pad import foldable_pad
from backends.qualcomm.builders.op_conv import conv_pad_amount
from backends.qualcomm.utils.constants import QCOM_PAD_AMOUNT

_PAD = exir_ops.edge.aten.constant_pad_nd.default


def _hw_pad(pad_node: torch.fx.Node) -> List[List[int]]:
    pad = [int(p) for p in pad_node.args[1]] + [0] * (4 - len(pad_node.args[1]))
    left, right, top, bottom = pad
    return [[top, bottom], [left, right]]


def fold_pad_into_conv(ep: ExportedProgram) -> ExportedProgram:
    graph = ep.graph_module.graph
    changed = False
    for pad_node in [n for n in graph.nodes if n.target == _PAD]:
        if not foldable_pad(pad_node)[0]:
            continue
        extra = _hw_pad(pad_node)
        for conv in list(pad_node.users):
            base = conv_pad_amount(conv)
            conv.meta[QCOM_PAD_AMOUNT] = [[base[i][j] + extra[i][j] for j in range(2)] for i in range(2)]
            conv.replace_input_with(pad_node, pad_node.args[0])
        graph.erase_node(pad_node)
        changed = True
    if changed:
        ep.graph_module.recompile()
    return ep
