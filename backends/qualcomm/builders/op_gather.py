"""Index gathers and reorderings:
index_select / index.Tensor (one index tensor) -> Gather; gather -> GatherElements;
flip -> one Gather per flipped dim with static reversed indices; repeat -> (Reshape +) Tile;
roll -> per rolled dim two StridedSlices + Concat; slice_scatter (step 1; step > 1: ScatterNd at static rows) / select_scatter ->
the slices of self around the window + src, one Concat.

Runtime index tensors keep their dtype in the payload (QNN narrows INT_64 to INT_32); an index
out of range is an execute error on the host engine. Negative runtime indices are not wrapped
(they cannot be checked at lowering): the host engine reports them as out of range."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch

from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape
from backends.qualcomm.builders.op_shape import edge_ops
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.registry import (
    SUPPORTED,
    NodeBuilder,
    QuantFamily,
    SupportResult,
    aten_ops,
    check_float_io,
    check_static_shapes,
    first_failure,
    node_val,
    register_builder,
)
from backends.qualcomm.builders.utils import normalize_axis, reshape, slice_axis
from backends.qualcomm.builders.op_index_put import permute, scatter_on_axes
from backends.qualcomm.serialization.qnn_graph import QnnTensor, int32_scalar, uint32_scalar, uint32_tensor

_INDEX_DTYPES = (torch.int32, torch.int64)


def _check_index(index: object, name: str = "index") -> SupportResult:
    val = node_val(index)
    if not isinstance(val, torch.Tensor) or val.dtype not in _INDEX_DTYPES:
        return False, f"{name} must be an int32 / int64 tensor (bool masks are not supported)"
    return SUPPORTED


def _float_data(node: torch.fx.Node) -> SupportResult:
    """Float32 data input (0) and output; index inputs are checked on their own."""
    return check_float_io(node, skip_inputs=tuple(range(1, len(node.args))))


def _output_of(
    gb: GraphBuilder, node: torch.fx.Node, last: bool, like: QnnTensor, dims: Sequence[int], suffix: str
) -> QnnTensor:
    return gb.define_output(node) if last else gb.like(like, f"{node.name}_{suffix}", dims)


# ---- index_select / index.Tensor -> Gather ---------------------------------------------------
def tensor_index(node: torch.fx.Node) -> Tuple[int, Optional[torch.fx.Node]]:
    """(axis, index node) of a gather by one index tensor; (-1, None) when not that form."""
    if node.target in edge_ops("index_select.default"):
        rank = len(logical_shape(node.args[0]))
        return normalize_axis(node.args[1], rank), node.args[2]
    found = [(i, e) for i, e in enumerate(node.args[1]) if e is not None]
    if len(found) != 1 or not isinstance(found[0][1], torch.fx.Node):
        return -1, None
    return found[0]


def _check_one_index(node: torch.fx.Node) -> SupportResult:
    axis, index = tensor_index(node)
    if index is None:
        return False, f"indices {list(node.args[1])}: exactly one index tensor (the others None) is supported"
    ok, reason = _check_index(index)
    if ok and node.target in edge_ops("index_select.default") and len(logical_shape(index)) != 1:
        return False, "index_select needs a rank-1 index"
    return ok, reason


@register_builder
class IndexGatherBuilder(NodeBuilder):
    targets = edge_ops("index_select.default", "index.Tensor")
    quant_annotations = dict.fromkeys(aten_ops("index_select.default", "index.Tensor"), QuantFamily.SHARED)

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return first_failure(
            lambda: _float_data(node), lambda: _check_one_index(node), lambda: check_static_shapes(node)
        )

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        axis, index = tensor_index(node)
        x, indices = gb.tensor(node.args[0]), gb.tensor(index)
        if 0 < axis < len(x.dims) - 1 and gb.constant_data(index) is None:
            _gather_middle_axis(gb, node, x, indices, axis)
            return
        gb.add_op(node, QnnOpType.Gather, [x, indices], [gb.define_output(node)], [int32_scalar("axis", axis)])


def _gather_middle_axis(gb: GraphBuilder, node: torch.fx.Node, x: QnnTensor, indices: QnnTensor, axis: int) -> None:
    """Runtime indices on a middle axis: Transpose the axis first, Gather on axis 0, Transpose
    back. QNN 2.51's HTP Gather with runtime indices on a middle axis of an fp16 graph gets all
    but the first outer row wrong (measured: zeros, max error 2.3 on [2, 3, 6] axis 1); static
    indices and axes 0 / last agree with the host engine."""
    rank, index_rank = len(x.dims), len(indices.dims)
    front = [axis] + [d for d in range(rank) if d != axis]
    moved = gb.like(x, f"{node.name}_axis_first", [x.dims[d] for d in front])
    gb.add_op(node, QnnOpType.Transpose, [x], [moved], [uint32_tensor("perm", front)], suffix="axis_first")
    rest = [x.dims[d] for d in range(rank) if d != axis]
    gathered = gb.like(x, f"{node.name}_gathered", list(indices.dims) + rest)
    gb.add_op(node, QnnOpType.Gather, [moved, indices], [gathered], [int32_scalar("axis", 0)], suffix="gather")
    back = (
        [index_rank + j for j in range(axis)]
        + list(range(index_rank))
        + [index_rank + j for j in range(axis, rank - 1)]
    )
    gb.add_op(
        node,
        QnnOpType.Transpose,
        [gathered],
        [gb.define_output(node)],
        [uint32_tensor("perm", back)],
        suffix="axis_back",
    )


# ---- gather -> GatherElements -----------------------------------------------------------------
def _check_gather_index(node: torch.fx.Node) -> SupportResult:
    ok, reason = _check_index(node.args[2])
    if not ok:
        return ok, reason
    if len(logical_shape(node.args[2])) != len(logical_shape(node.args[0])):
        return False, "index must have the input's rank"
    return SUPPORTED


@register_builder
class GatherElementsBuilder(NodeBuilder):
    targets = edge_ops("gather.default")
    quant_annotations = dict.fromkeys(aten_ops("gather.default"), QuantFamily.SHARED)

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return first_failure(
            lambda: _float_data(node), lambda: _check_gather_index(node), lambda: check_static_shapes(node)
        )

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x, indices = gb.tensor(node.args[0]), gb.tensor(node.args[2])
        axis = normalize_axis(node.args[1], len(x.dims))
        gb.add_op(node, QnnOpType.GatherElements, [x, indices], [gb.define_output(node)], [uint32_scalar("axis", axis)])


# ---- flip -> Gather with reversed static indices ---------------------------------------------
def _flip_dims(node: torch.fx.Node) -> List[int]:
    shape = logical_shape(node.args[0])
    dims = sorted({normalize_axis(d, len(shape)) for d in node.args[1]})
    return [d for d in dims if shape[d] > 1]


@register_builder
class FlipBuilder(NodeBuilder):
    targets = edge_ops("flip.default")
    quant_annotations = dict.fromkeys(aten_ops("flip.default"), QuantFamily.SHARED)

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return first_failure(lambda: check_float_io(node, skip_inputs=(1,)), lambda: check_static_shapes(node))

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x = gb.tensor(node.args[0])
        dims = _flip_dims(node)
        if not dims:
            gb.add_op(node, QnnOpType.Reshape, [x], [gb.define_output(node)])
            return
        for k, d in enumerate(dims):
            reversed_index = gb.static_tensor(
                f"{node.name}_reversed_{d}", np.arange(x.dims[d] - 1, -1, -1, dtype=np.int32)
            )
            out = _output_of(gb, node, k == len(dims) - 1, x, x.dims, f"flip_{d}")
            gb.add_op(node, QnnOpType.Gather, [x, reversed_index], [out], [int32_scalar("axis", d)], suffix=f"flip_{d}")
            x = out


# ---- repeat -> Tile --------------------------------------------------------------------------
@register_builder
class RepeatBuilder(NodeBuilder):
    targets = edge_ops("repeat.default")
    quant_annotations = dict.fromkeys(aten_ops("repeat.default"), QuantFamily.SHARED)

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return first_failure(lambda: check_float_io(node, skip_inputs=(1,)), lambda: check_static_shapes(node))

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x = gb.tensor(node.args[0])
        repeats = [int(r) for r in node.args[1]]
        if len(x.dims) < len(repeats):
            x = reshape(gb, node, x, [1] * (len(repeats) - len(x.dims)) + list(x.dims), "rank")
        if all(r == 1 for r in repeats):
            gb.add_op(node, QnnOpType.Reshape, [x], [gb.define_output(node)])
            return
        gb.add_op(node, QnnOpType.Tile, [x], [gb.define_output(node)], [uint32_tensor("multiples", repeats)])


# ---- roll -> StridedSlice x2 + Concat per dim ---------------------------------------------------
def roll_steps(node: torch.fx.Node) -> List[Tuple[int, int]]:
    """(dim, shift in [1, size)) per rolled dim, shifts of a full turn dropped."""
    shape = logical_shape(node.args[0])
    shifts = list(node.args[1])
    dims = list(node.args[2]) if len(node.args) > 2 else list(node.kwargs.get("dims", []))
    steps = []
    for shift, dim in zip(shifts, dims):
        d = normalize_axis(dim, len(shape))
        s = int(shift) % shape[d] if shape[d] else 0
        if s:
            steps.append((d, s))
    return steps


def _check_roll_args(node: torch.fx.Node) -> SupportResult:
    dims = list(node.args[2]) if len(node.args) > 2 else list(node.kwargs.get("dims", []))
    if len(dims) != len(list(node.args[1])):
        return False, "roll without dims (of the flattened tensor) is not supported"
    return SUPPORTED


@register_builder
class RollBuilder(NodeBuilder):
    targets = edge_ops("roll.default")
    keep_whole = edge_ops("roll.default")
    quant_annotations = dict.fromkeys(aten_ops("roll.default"), QuantFamily.SHARED)

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return first_failure(
            lambda: check_float_io(node, skip_inputs=(1, 2)),
            lambda: check_static_shapes(node),
            lambda: _check_roll_args(node),
        )

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x = gb.tensor(node.args[0])
        steps = roll_steps(node)
        if not steps:
            gb.add_op(node, QnnOpType.Reshape, [x], [gb.define_output(node)])
            return
        for k, (d, s) in enumerate(steps):
            n = x.dims[d]
            tail = slice_axis(gb, node, x, d, n - s, n, f"tail_{d}")
            head = slice_axis(gb, node, x, d, 0, n - s, f"head_{d}")
            out = _output_of(gb, node, k == len(steps) - 1, x, x.dims, f"roll_{d}")
            gb.add_op(node, QnnOpType.Concat, [tail, head], [out], [uint32_scalar("axis", d)], suffix=f"roll_{d}")
            x = out


# ---- slice_scatter / select_scatter -> StridedSlices + Concat (step > 1: ScatterNd) ------------
def _scatter_window(node: torch.fx.Node) -> Tuple[int, int, int]:
    """(dim, start, end) of the window of self that src replaces."""
    shape = logical_shape(node.args[0])
    dim = normalize_axis(node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0), len(shape))
    if node.target in edge_ops("select_scatter.default"):
        index = int(node.args[3]) % shape[dim]
        return dim, index, index + 1
    start = node.args[3] if len(node.args) > 3 else node.kwargs.get("start")
    end = node.args[4] if len(node.args) > 4 else node.kwargs.get("end")
    start = 0 if start is None else int(start)
    end = shape[dim] if end is None else int(end)
    start = min(max(start + shape[dim] if start < 0 else start, 0), shape[dim])
    end = min(max(end + shape[dim] if end < 0 else end, start), shape[dim])
    return dim, start, end


def _scatter_step(node: torch.fx.Node) -> int:
    if node.target not in edge_ops("slice_scatter.default"):
        return 1
    return int(node.args[5] if len(node.args) > 5 else node.kwargs.get("step", 1))


def _check_scatter_args(node: torch.fx.Node) -> SupportResult:
    if _scatter_step(node) < 1:
        return False, f"slice_scatter step {_scatter_step(node)} must be >= 1"
    dim, start, end = _scatter_window(node)
    if end - start < 1:
        return False, "empty slice_scatter window"
    return SUPPORTED


@register_builder
class SliceScatterBuilder(NodeBuilder):
    targets = edge_ops("slice_scatter.default", "select_scatter.default")
    keep_whole = edge_ops("select_scatter.default")  # else decomposed into arange == index + where
    quant_annotations = dict.fromkeys(aten_ops("slice_scatter.default", "select_scatter.default"), QuantFamily.SHARED)

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return first_failure(
            lambda: check_float_io(node, skip_inputs=(2, 3, 4, 5)),
            lambda: check_static_shapes(node),
            lambda: _check_scatter_args(node),
        )

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x, src = gb.tensor(node.args[0]), gb.tensor(node.args[1])
        dim, start, end = _scatter_window(node)
        if _scatter_step(node) > 1:
            self._strided(node, gb, x, src, dim, range(start, end, _scatter_step(node)))
            return
        window = list(x.dims)
        window[dim] = end - start
        if list(src.dims) != window:
            src = reshape(gb, node, src, window, "src")
        parts = []
        if start > 0:
            parts.append(slice_axis(gb, node, x, dim, 0, start, "before"))
        parts.append(src)
        if end < x.dims[dim]:
            parts.append(slice_axis(gb, node, x, dim, end, x.dims[dim], "after"))
        if len(parts) == 1:
            gb.add_op(node, QnnOpType.Reshape, parts, [gb.define_output(node)])
            return
        gb.add_op(node, QnnOpType.Concat, parts, [gb.define_output(node)], [uint32_scalar("axis", dim)])

    @staticmethod
    def _strided(node: torch.fx.Node, gb: GraphBuilder, x, src, dim: int, rows: range) -> None:
        """slice_scatter with step > 1: ScatterNd of src's rows at the static positions `rows`
        of `dim` (moved first)."""
        perm = [dim] + [d for d in range(len(x.dims)) if d != dim]
        window = list(x.dims)
        window[dim] = len(rows)
        if list(src.dims) != window:
            src = reshape(gb, node, src, window, "src")
        positions = gb.static_tensor(f"{node.name}_rows", np.asarray(list(rows), np.int32).reshape(-1, 1))
        updates = permute(gb, node, src, perm, "src_t")
        scatter_on_axes(gb, node, x, perm, positions, updates, 0)
