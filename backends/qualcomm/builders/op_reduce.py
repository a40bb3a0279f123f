"""mean.dim / sum.dim_IntList -> ReduceMean / ReduceSum (axes remapped to the stored layout; a
0-d result, every element reduced, is the flattened input reduced to [1]: QNN refuses rank 0).

prod: QNN 2.51's HTP has no ReduceProd (validation: 3110 'OpValidator not found'); op_prod.py
lowers it as a tree of ElementWiseMultiply."""

from __future__ import annotations

from typing import List

import numpy as np
import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.registry import (
    SUPPORTED,
    LayoutPolicy,
    NodeBuilder,
    QuantFamily,
    SupportResult,
    aten_ops,
    check_float_io,
    register_builder,
)
from backends.qualcomm.builders.utils import input_layout, normalize_axis, one_element_dims, reshape, stored_axis
from backends.qualcomm.serialization.qnn_graph import bool_scalar, uint32_tensor
from backends.qualcomm.utils.constants import NCHW_TO_NHWC

_aten = exir_ops.edge.aten
REDUCE_OPS = {
    _aten.mean.dim: QnnOpType.ReduceMean,
    _aten.mean.default: QnnOpType.ReduceMean,  # x.mean(): every element
    _aten.sum.dim_IntList: QnnOpType.ReduceSum,
}


def reduce_axes(node: torch.fx.Node) -> List[int]:
    rank = len(logical_shape(node.args[0]))
    dims = node.args[1] if len(node.args) > 1 else None
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(rank))
    dims = [dims] if isinstance(dims, int) else dims
    return sorted({normalize_axis(d, rank) for d in dims})


def keep_dims(node: torch.fx.Node) -> bool:
    return bool(node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False))


@register_builder
class ReduceBuilder(NodeBuilder):
    targets = list(REDUCE_OPS)
    quant_annotations = dict.fromkeys(aten_ops("mean.dim", "mean.default", "sum.dim_IntList"), QuantFamily.COMPUTE)
    layout_policy = LayoutPolicy.AGNOSTIC

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        ok, reason = check_float_io(node)
        if not ok:
            return ok, reason
        if node.kwargs.get("dtype") not in (None, torch.float32):
            return False, f"dtype={node.kwargs['dtype']} is not supported"
        return SUPPORTED

    def supports_channel_last(self, node: torch.fx.Node) -> bool:
        """Channel-last input works when the kept dims stay in logical order."""
        if len(logical_shape(node.args[0])) != 4 or keep_dims(node):
            return True
        kept = [p for p in NCHW_TO_NHWC if p not in reduce_axes(node)]
        return kept == sorted(kept)

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        layout = input_layout(node)
        x = gb.tensor(node.args[0], layout)
        rank = len(logical_shape(node.args[0]))
        axes = sorted(stored_axis(a, rank, layout) for a in reduce_axes(node))
        keep = keep_dims(node)
        if not logical_shape(node):  # every element, a 0-d result: the flat input to [1] (QNN refuses rank 0)
            x = reshape(gb, node, x, [int(np.prod(x.dims))], "flat") if len(x.dims) != 1 else x
            axes, keep = [0], True
        out = gb.define_output(node, dims=one_element_dims(node))
        gb.add_op(
            node,
            REDUCE_OPS[node.target],
            [x],
            [out],
            [uint32_tensor("axes", axes), bool_scalar("keep_dims", keep)],
        )
