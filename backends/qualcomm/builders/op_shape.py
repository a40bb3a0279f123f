"""Shape ops: view/reshape/squeeze/unsqueeze -> Reshape; permute/transpose -> Transpose;
expand -> (Reshape +) Tile; clone/alias/dropout -> identity Reshape."""

from __future__ import annotations

from typing import List

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
    check_data_io,
    register_builder,
)
from backends.qualcomm.builders.utils import input_layout, normalize_axis, reshape
from backends.qualcomm.serialization.qnn_graph import uint32_tensor

_aten = exir_ops.edge.aten


def edge_ops(*names: str) -> List[object]:
    """Edge ops by 'packet.overload' name, skipping any this executorch does not have."""
    ops = []
    for name in names:
        packet, overload = name.split(".")
        try:
            ops.append(getattr(getattr(_aten, packet), overload))
        except (AttributeError, RuntimeError):
            continue
    return ops


def dim_order_ops(*names: str) -> List[object]:
    ops = []
    for name in names:
        try:
            ops.append(getattr(getattr(exir_ops.edge.dim_order_ops, name), "default"))
        except (AttributeError, RuntimeError):
            continue
    return ops


@register_builder
class ReshapeBuilder(NodeBuilder):
    targets = edge_ops(
        "view_copy.default",
        "_unsafe_view.default",
        "reshape.default",
        "unsqueeze_copy.default",
        "squeeze_copy.dim",
        "squeeze_copy.dims",
        "squeeze_copy.default",
    )
    quant_annotations = dict.fromkeys(
        aten_ops(
            "view.default",
            "reshape.default",
            "flatten.using_ints",
            "squeeze.dim",
            "squeeze.dims",
            "squeeze.default",
            "unsqueeze.default",
            "_unsafe_view.default",
        ),
        QuantFamily.SHARED,
    )

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return check_data_io(node, skip_inputs=(1,))

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        gb.add_op(node, QnnOpType.Reshape, [gb.tensor(node.args[0])], [gb.define_output(node)])


def is_contiguous_dim_order(node: torch.fx.Node) -> bool:
    dim_order = node.kwargs.get("dim_order")
    memory_format = node.kwargs.get("memory_format")
    if dim_order is not None and list(dim_order) != list(range(len(dim_order))):
        return False
    return memory_format in (None, torch.contiguous_format, torch.preserve_format)


@register_builder
class IdentityBuilder(NodeBuilder):
    """Ops that do not change data: one Reshape with equal dims, in whatever layout."""

    targets = edge_ops("clone.default", "alias_copy.default", "dropout.default") + dim_order_ops("_clone_dim_order")
    quant_annotations = dict.fromkeys(
        aten_ops("clone.default", "contiguous.default", "dropout.default"), QuantFamily.SHARED
    )
    layout_policy = LayoutPolicy.AGNOSTIC

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        ok, reason = check_data_io(node)
        if not ok:
            return ok, reason
        if not is_contiguous_dim_order(node):
            return False, "memory-format change (non-contiguous dim order) is not supported"
        if node.target in edge_ops("dropout.default") and len(node.args) > 2 and node.args[2]:
            return False, "dropout in training mode is not supported"
        return SUPPORTED

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x = gb.tensor(node.args[0], input_layout(node))
        gb.add_op(node, QnnOpType.Reshape, [x], [gb.define_output(node)])


def permutation(node: torch.fx.Node) -> List[int]:
    rank = len(logical_shape(node.args[0]))
    if node.target in edge_ops("permute_copy.default"):
        return [normalize_axis(d, rank) for d in node.args[1]]
    if node.target in edge_ops("t_copy.default"):
        return list(range(rank))[::-1]
    d0, d1 = normalize_axis(node.args[1], rank), normalize_axis(node.args[2], rank)
    perm = list(range(rank))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return perm


@register_builder
class TransposeBuilder(NodeBuilder):
    targets = edge_ops("permute_copy.default", "t_copy.default", "transpose_copy.int")
    quant_annotations = dict.fromkeys(aten_ops("permute.default", "transpose.int", "t.default"), QuantFamily.SHARED)

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return check_data_io(node, skip_inputs=(1, 2))

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x = gb.tensor(node.args[0])
        perm = permutation(node)
        if len(perm) < 2:
            gb.add_op(node, QnnOpType.Reshape, [x], [gb.define_output(node)])
            return
        gb.add_op(node, QnnOpType.Transpose, [x], [gb.define_output(node)], [uint32_tensor("perm", perm)])


@register_builder
class ExpandBuilder(NodeBuilder):
    targets = edge_ops("expand_copy.default")
    quant_annotations = dict.fromkeys(aten_ops("expand.default"), QuantFamily.SHARED)

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        ok, reason = check_data_io(node, skip_inputs=(1,))
        if not ok:
            return ok, reason
        in_shape, out_shape = logical_shape(node.args[0]), logical_shape(node)
        padded = [1] * (len(out_shape) - len(in_shape)) + in_shape
        for i, (a, b) in enumerate(zip(padded, out_shape)):
            if a != b and a != 1:
                return False, f"cannot expand dim {i} of size {a} to {b}"
        return SUPPORTED

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x = gb.tensor(node.args[0])
        in_shape, out_shape = logical_shape(node.args[0]), logical_shape(node)
        if len(in_shape) < len(out_shape):
            in_shape = [1] * (len(out_shape) - len(in_shape)) + in_shape
            x = reshape(gb, node, x, in_shape, "rank")
        multiples = [o // i for i, o in zip(in_shape, out_shape)]
        if all(m == 1 for m in multiples):
            gb.add_op(node, QnnOpType.Reshape, [x], [gb.define_output(node)])
            return
        gb.add_op(node, QnnOpType.Tile, [x], [gb.define_output(node)], [uint32_tensor("multiples", multiples)])
