"""Adaptive pools (QNN has none): window i of an axis of length n pooled to o covers
[floor(i*n/o), ceil((i+1)*n/o)). When every axis's windows have one size and one step, that is
a PoolAvg / PoolMax (2-D for 1-D on a unit height and 2-D, 3-D; 3-D max: two PoolMax2d
passes); to a single element, a
ReduceMean / ReduceMax over the spatial axes; otherwise each axis in turn is
cut into its windows (StridedSlice), reduced (ReduceMean / ReduceMax, keep_dims) and
concatenated: a mean over a box is the mean over one axis of the means over the others."""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape
from backends.qualcomm.builders.op_pool import (
    Window,
    add_max_pool3d,
    add_pool,
    check_rank,
    only_values_used,
    to_qnn_view,
    unit_height,
)
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.registry import (
    SUPPORTED,
    LayoutPolicy,
    NodeBuilder,
    QuantFamily,
    SupportResult,
    aten_ops,
    check_float_io,
    first_failure,
    register_builder,
)
from backends.qualcomm.serialization.qnn_graph import QnnTensor, bool_scalar, int32_tensor, uint32_scalar, uint32_tensor
from backends.qualcomm.utils.constants import LAYOUT_CHANNEL_LAST

_aten = exir_ops.edge.aten

_SPATIAL = {
    _aten.adaptive_avg_pool1d.default: ("Avg", 1),
    _aten._adaptive_avg_pool2d.default: ("Avg", 2),
    _aten._adaptive_avg_pool3d.default: ("Avg", 3),
    _aten.adaptive_max_pool1d.default: ("Max", 1),
    _aten.adaptive_max_pool2d.default: ("Max", 2),
    _aten.adaptive_max_pool3d.default: ("Max", 3),
}
_REDUCE = {"Avg": QnnOpType.ReduceMean, "Max": QnnOpType.ReduceMax}
# Most windows cut by slices (summed over the axes): beyond that the graph grows too large.
MAX_SLICED_WINDOWS = 32


def kind_and_spatial(node: torch.fx.Node) -> Tuple[str, int]:
    for op, value in _SPATIAL.items():
        if node.target is op or node.target is op._op:  # edge or export-level op
            return value
    raise KeyError(node.target)


def windows(length: int, out: int) -> List[Tuple[int, int]]:
    """torch's adaptive windows [start, end) of one axis."""
    return [((i * length) // out, -((-(i + 1) * length) // out)) for i in range(out)]


def uniform(length: int, out: int) -> Optional[Tuple[int, int]]:
    """(kernel, stride) when the windows of one axis have one size and one step."""
    spans = windows(length, out)
    kernel = spans[0][1] - spans[0][0]
    step = spans[1][0] - spans[0][0] if out > 1 else kernel
    if all(e - s == kernel and s == i * step for i, (s, e) in enumerate(spans)) and step > 0:
        return kernel, step
    return None


def _axes(node: torch.fx.Node) -> List[Tuple[int, int]]:
    """(input length, output length) per spatial axis."""
    return list(zip(logical_shape(node.args[0])[2:], logical_shape(node)[2:]))


def _size_check(node: torch.fx.Node) -> SupportResult:
    axes = _axes(node)
    if any(o <= 0 or o > n for n, o in axes):
        return False, f"output size {[o for _, o in axes]} must be within [1, input size {[n for n, _ in axes]}]"
    if all(uniform(n, o) for n, o in axes):
        return SUPPORTED
    sliced = sum(o for n, o in axes if o != n)
    if sliced > MAX_SLICED_WINDOWS:
        return False, (
            f"non-uniform adaptive windows {[(n, o) for n, o in axes]} need {sliced} slices "
            f"(limit {MAX_SLICED_WINDOWS})"
        )
    return SUPPORTED


@register_builder
class AdaptivePoolBuilder(NodeBuilder):
    targets = list(_SPATIAL)
    # adaptive_max_pool1d cannot be kept whole: torchgen reads its (values, indices) as aliasing,
    # so ExecuTorch decomposes it to unsqueeze + adaptive_max_pool2d + squeeze.
    keep_whole = [_aten.adaptive_avg_pool1d.default]
    quant_annotations = {
        **dict.fromkeys(
            aten_ops("adaptive_avg_pool1d.default", "adaptive_avg_pool2d.default", "adaptive_avg_pool3d.default"),
            QuantFamily.COMPUTE,
        ),
        **dict.fromkeys(
            aten_ops("adaptive_max_pool1d.default", "adaptive_max_pool2d.default", "adaptive_max_pool3d.default"),
            QuantFamily.SHARED,
        ),
    }
    layout_policy = LayoutPolicy.SENSITIVE
    channel_last_ranks = (3, 4, 5)

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        kind, spatial = kind_and_spatial(node)
        checks = [lambda: check_float_io(node), lambda: check_rank(node, spatial), lambda: _size_check(node)]
        if kind == "Max":
            checks.append(lambda: only_values_used(node))
        return first_failure(*checks)

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        kind, spatial = kind_and_spatial(node)
        x = gb.tensor(node.args[0], LAYOUT_CHANNEL_LAST)
        axes = _axes(node)
        if all(o == 1 for _, o in axes):  # global: one reduction over every spatial axis
            gb.add_op(
                node,
                _REDUCE[kind],
                [x],
                [gb.define_output(node)],
                [uint32_tensor("axes", list(range(1, spatial + 1))), bool_scalar("keep_dims", True)],
            )
            return
        pools = [uniform(n, o) for n, o in axes]
        if all(pools):
            self._pool(gb, node, kind, spatial, x, pools)
            return
        out = gb.define_output(node)
        todo = [i for i, (n, o) in enumerate(axes) if n != o]
        for i in todo:  # stored axis of spatial axis i: 1 + i (channel-last)
            n, o = axes[i]
            target = out if i == todo[-1] else None
            x = self._reduce_axis(gb, node, kind, x, 1 + i, windows(n, o), target)

    def _pool(
        self, gb: GraphBuilder, node: torch.fx.Node, kind: str, spatial: int, x: QnnTensor, pools: List[Tuple[int, int]]
    ) -> None:
        kernel, stride = [k for k, _ in pools], [s for _, s in pools]
        window = Window(
            unit_height(kernel, 1, spatial), unit_height(stride, 1, spatial), [[0, 0]] * (3 if spatial == 3 else 2)
        )
        if (kind, spatial) == ("Max", 3):  # no PoolMax3d on HTP
            add_max_pool3d(gb, node, x, window)
            return
        params = window.params()
        if kind == "Avg":
            params.append(bool_scalar("count_pad_for_edges", False))
        add_pool(gb, node, kind, spatial, to_qnn_view(gb, node, x, spatial), params)

    def _reduce_axis(
        self,
        gb: GraphBuilder,
        node: torch.fx.Node,
        kind: str,
        x: QnnTensor,
        axis: int,
        spans: List[Tuple[int, int]],
        out: Optional[QnnTensor],
    ) -> QnnTensor:
        """Windows `spans` of stored `axis` of x: slice, reduce, concatenate (into `out`, or a
        tensor with x's encoding for the next axis)."""
        parts = []
        for j, (start, end) in enumerate(spans):
            ranges = [[0, d, 1] for d in x.dims]
            ranges[axis] = [start, end, 1]
            dims = list(x.dims)
            dims[axis] = end - start
            piece = gb.like(x, f"{node.name}_a{axis}_w{j}", dims)
            gb.add_op(
                node,
                QnnOpType.StridedSlice,
                [x],
                [piece],
                [int32_tensor("ranges", ranges, [len(dims), 3])],
                suffix=f"a{axis}_slice{j}",
            )
            dims[axis] = 1
            reduced = gb.like(out if out is not None else x, f"{node.name}_a{axis}_r{j}", dims)
            gb.add_op(
                node,
                _REDUCE[kind],
                [piece],
                [reduced],
                [uint32_tensor("axes", [axis]), bool_scalar("keep_dims", True)],
                suffix=f"a{axis}_reduce{j}",
            )
            parts.append(reduced)
        dims = list(x.dims)
        dims[axis] = len(spans)
        result = out if out is not None else gb.like(x, f"{node.name}_a{axis}", dims)
        gb.add_op(node, QnnOpType.Concat, parts, [result], [uint32_scalar("axis", axis)], suffix=f"a{axis}_concat")
        return result
