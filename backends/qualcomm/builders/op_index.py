"""cat -> Concat; slice_copy -> StridedSlice; select_copy -> StridedSlice + Reshape; embedding -> Gather."""

from __future__ import annotations

import sys
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
    check_float_io,
    register_builder,
    tensor_vals,
)
from backends.qualcomm.builders.utils import input_layout, normalize_axis, stored_axis
from backends.qualcomm.serialization.qnn_graph import int32_scalar, int32_tensor, uint32_scalar

_aten = exir_ops.edge.aten


@register_builder
class ConcatBuilder(NodeBuilder):
    targets = [_aten.cat.default]
    quant_annotations = dict.fromkeys(aten_ops("cat.default"), QuantFamily.SHARED)
    layout_policy = LayoutPolicy.AGNOSTIC
    channel_last_any_rank = True  # every input has the output's rank: concat on the stored axis

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        ok, reason = check_data_io(node)
        if ok and not all(isinstance(t, torch.fx.Node) for t in node.args[0]):
            return False, "cat inputs must be tensors"
        return ok, reason

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        layout = input_layout(node)
        inputs = [gb.tensor(t, layout) for t in node.args[0]]
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
        axis = stored_axis(dim, len(logical_shape(node)), layout)
        gb.add_op(node, QnnOpType.Concat, inputs, [gb.define_output(node)], [uint32_scalar("axis", axis)])


def slice_range(size: int, start, end, step: int) -> List[int]:
    """[begin, end, stride] normalized to 0 <= begin <= end <= size."""
    start = 0 if start is None else int(start)
    end = size if end is None or end == sys.maxsize else int(end)
    start = start + size if start < 0 else start
    end = end + size if end < 0 else end
    start = min(max(start, 0), size)
    end = min(max(end, start), size)
    return [start, end, int(step)]


def _full_ranges(dims: List[int]) -> List[List[int]]:
    return [[0, d, 1] for d in dims]


@register_builder
class SliceBuilder(NodeBuilder):
    targets = [_aten.slice_copy.Tensor]
    quant_annotations = dict.fromkeys(aten_ops("slice.Tensor"), QuantFamily.SHARED)
    layout_policy = LayoutPolicy.AGNOSTIC

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        ok, reason = check_data_io(node)
        step = node.args[4] if len(node.args) > 4 else node.kwargs.get("step", 1)
        if ok and int(step) < 1:
            return False, f"slice step {step} must be >= 1"
        return ok, reason

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        layout = input_layout(node)
        x = gb.tensor(node.args[0], layout)
        args = list(node.args) + [None] * (5 - len(node.args))
        dim = args[1] if args[1] is not None else node.kwargs.get("dim", 0)
        step = args[4] if args[4] is not None else node.kwargs.get("step", 1)
        rank = len(logical_shape(node.args[0]))
        logical_dim = normalize_axis(dim, rank)
        size = logical_shape(node.args[0])[logical_dim]
        ranges = _full_ranges(x.dims)
        ranges[stored_axis(dim, rank, layout)] = slice_range(size, args[2], args[3], step)
        gb.add_op(
            node,
            QnnOpType.StridedSlice,
            [x],
            [gb.define_output(node)],
            [int32_tensor("ranges", ranges, [len(ranges), 3])],
        )


@register_builder
class SelectBuilder(NodeBuilder):
    targets = [_aten.select_copy.int]
    quant_annotations = dict.fromkeys(aten_ops("select.int"), QuantFamily.SHARED)

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return check_data_io(node, skip_inputs=(1, 2))

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x = gb.tensor(node.args[0])
        shape = logical_shape(node.args[0])
        dim = normalize_axis(node.args[1], len(shape))
        index = int(node.args[2]) + (shape[dim] if int(node.args[2]) < 0 else 0)
        ranges = _full_ranges(shape)
        ranges[dim] = [index, index + 1, 1]
        sliced_dims = list(shape)
        sliced_dims[dim] = 1
        sliced = gb.like(x, f"{node.name}_slice", sliced_dims)
        gb.add_op(
            node,
            QnnOpType.StridedSlice,
            [x],
            [sliced],
            [int32_tensor("ranges", ranges, [len(ranges), 3])],
            suffix="slice",
        )
        gb.add_op(node, QnnOpType.Reshape, [sliced], [gb.define_output(node)])


@register_builder
class EmbeddingBuilder(NodeBuilder):
    targets = [_aten.embedding.default]
    quant_annotations = dict.fromkeys(aten_ops("embedding.default"), QuantFamily.EMBEDDING)

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        ok, reason = check_float_io(node, skip_inputs=(1,))
        if not ok:
            return ok, reason
        indices = tensor_vals(node.args[1])
        if not indices or indices[0].dtype not in (torch.int32, torch.int64):
            return False, "embedding indices must be int32 or int64"
        return SUPPORTED

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        table, indices = gb.tensor(node.args[0]), gb.tensor(node.args[1])
        gb.add_op(node, QnnOpType.Gather, [table, indices], [gb.define_output(node)], [int32_scalar("axis", 0)])
