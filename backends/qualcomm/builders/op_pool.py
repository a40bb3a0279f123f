"""Window pools -> PoolMax2d / PoolAvg2d (1-D pools on a unit height, 2-D) and
PoolAvg3d. QNN 2.51's HTP has no PoolMax3d: a 3-D max pool is two PoolMax2d passes (max is
separable: (H, W) on [N*D, H, W, C], then D on [N, D, H'*W', C], joined by Reshapes that move no
data in channel-last). Activations channel-last (NWC / NHWC / NDHWC). torch's ceil_mode becomes explicit
extra bottom / right padding (QNN pads never win a max and are not counted by an average without
count_pad_for_edges), so torch's "last window must start inside the input" rule holds exactly."""

from __future__ import annotations

import operator
from dataclasses import dataclass, replace
from typing import List, Optional

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
    first_failure,
    register_builder,
)
from backends.qualcomm.builders.utils import int_list, is_quantized, reshape, scalar_tensor
from backends.qualcomm.serialization.qnn_graph import (
    QnnParam,
    QnnTensor,
    bool_scalar,
    float_scalar,
    uint32_scalar,
    uint32_tensor,
)
from backends.qualcomm.utils.constants import LAYOUT_CHANNEL_LAST, QCOM_QUANT_ATTRS

_aten = exir_ops.edge.aten

# Spatial dims of each op's input (1: rank 3, 2: rank 4, 3: rank 5).
POOL_SPATIAL = {
    _aten.max_pool1d.default: 1,
    _aten.max_pool2d.default: 2,
    _aten.max_pool2d_with_indices.default: 2,
    _aten.max_pool3d_with_indices.default: 3,  # two PoolMax2d passes (add_max_pool3d)
    _aten.avg_pool1d.default: 1,
    _aten.avg_pool2d.default: 2,
    _aten.avg_pool3d.default: 3,
}
_AVG = (_aten.avg_pool1d.default, _aten.avg_pool2d.default, _aten.avg_pool3d.default)
_WITH_INDICES = (_aten.max_pool2d_with_indices.default, _aten.max_pool3d_with_indices.default)


def arg(node: torch.fx.Node, index: int, name: str, default=None):
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def spatial_of(node: torch.fx.Node) -> int:
    """Spatial dims of a pool node (edge or export-level op)."""
    for op, spatial in POOL_SPATIAL.items():
        if node.target is op or node.target is op._op:  # edge or export-level op
            return spatial
    return len(logical_shape(node.args[0])) - 2


# QNN op of each (kind, spatial dims): 1-D pools run as 2-D ones on a unit height.
POOL_TYPES = {
    ("Max", 1): QnnOpType.PoolMax2d,
    ("Max", 2): QnnOpType.PoolMax2d,
    ("Avg", 1): QnnOpType.PoolAvg2d,
    ("Avg", 2): QnnOpType.PoolAvg2d,
    ("Avg", 3): QnnOpType.PoolAvg3d,
}


def check_rank(node: torch.fx.Node, spatial: int) -> SupportResult:
    rank = len(logical_shape(node.args[0]))
    if rank != spatial + 2:
        return False, (
            f"only batched input of rank {spatial + 2} is supported for a {spatial}-D pool (got rank {rank})"
        )
    return SUPPORTED


def only_values_used(node: torch.fx.Node) -> SupportResult:
    """Ops returning (values, indices): the indices may not be used."""
    for user in node.users:
        if user.target is operator.getitem and user.args[1] != 0 and not user.users:
            continue  # export's unused getitem of the indices
        if user.target is not operator.getitem or user.args[1] != 0:
            return False, (f"the indices output is used by '{user.name}': QNN's PoolMax returns the values only")
    return SUPPORTED


@dataclass
class Window:
    """One QNN pool window in QNN's spatial order (1-D pools: a unit height first)."""

    kernel: List[int]
    stride: List[int]
    pads: List[List[int]]  # [[before, after]] per spatial dim, incl. ceil_mode's extra after

    def params(self) -> List[QnnParam]:
        return [
            uint32_tensor("filter_size", self.kernel),
            uint32_tensor("stride", self.stride),
            uint32_tensor("pad_amount", self.pads, [len(self.kernel), 2]),
        ]


def unit_height(values: List[int], fill: int, spatial: int) -> List[int]:
    return [fill] + values if spatial == 1 else values


def window_of(node: torch.fx.Node, spatial: int) -> Window:
    """kernel / stride / padding of a window pool; the after-padding grows until QNN's floor
    rounding gives torch's output size (ceil_mode adds at most stride - 1)."""
    kernel = int_list(arg(node, 1, "kernel_size"), spatial, 1)
    stride_arg = arg(node, 2, "stride")
    stride = int_list(stride_arg, spatial, 1) if stride_arg else list(kernel)
    padding = int_list(arg(node, 3, "padding", 0), spatial, 0)
    lengths = logical_shape(node.args[0])[2:]
    outs = logical_shape(node)[2:]
    pads = [[p, max(p, (o - 1) * s + k - n - p)] for p, s, k, n, o in zip(padding, stride, kernel, lengths, outs)]
    return Window(
        unit_height(kernel, 1, spatial), unit_height(stride, 1, spatial), [[0, 0]] + pads if spatial == 1 else pads
    )


def _overhangs(node: torch.fx.Node, spatial: int) -> bool:
    """A window reaches past the right padding (ceil_mode): torch does not count that part."""
    window = window_of(node, spatial)
    return any(after > before for before, after in window.pads)


# Measured on QNN 2.51's HTP (x86 emulation, fp16): op validation of PoolMax3d fails with 3110
# "OpValidator not found" (hence add_max_pool3d); PoolAvg3d with count_pad_for_edges and padding differs from torch by
# up to 0.37 on N(0,1) inputs (without padding, or without count_pad_for_edges: 2.4e-7). So a 3-D
# average pool that counts its padding pads explicitly (a zero Pad) and pools without padding.


def pads_counted_explicitly(node: torch.fx.Node, spatial: int) -> bool:
    """A 3-D average pool whose divisor counts the padding (count_include_pad without a ceil_mode
    overhang, or divisor_override) and that has padding: lowered as a zero Pad + PoolAvg3d."""
    if spatial != 3 or not any(p for pair in window_of(node, spatial).pads for p in pair):
        return False
    divisor = arg(node, 6, "divisor_override")
    return divisor is not None or (bool(arg(node, 5, "count_include_pad", True)) and not _overhangs(node, spatial))


def avg_options(node: torch.fx.Node, spatial: int) -> SupportResult:
    """count_include_pad with ceil_mode: torch counts the padding but not the overhang of the
    last window; QNN counts the whole window or only the input. Equal when the padding is 0."""
    count_pad = bool(arg(node, 5, "count_include_pad", True))
    padding = int_list(arg(node, 3, "padding", 0), spatial, 0)
    divisor = arg(node, 6, "divisor_override") if spatial > 1 else None
    if divisor is None and count_pad and any(padding) and _overhangs(node, spatial):
        return False, (
            "ceil_mode with count_include_pad and padding > 0: the last window's divisor "
            "counts the padding but not its overhang, which QNN's PoolAvg cannot express"
        )
    if divisor is not None and int(divisor) <= 0:
        return False, f"divisor_override {divisor} must be positive"
    return SUPPORTED


def max_options(node: torch.fx.Node, spatial: int) -> SupportResult:
    dilation = int_list(arg(node, 4, "dilation", 1), spatial, 1)
    if any(d != 1 for d in dilation):
        return False, f"dilation {dilation} is not supported (QNN's PoolMax has no dilation parameter)"
    if node.target in _WITH_INDICES or node.target in [t._op for t in _WITH_INDICES]:
        return only_values_used(node)
    return SUPPORTED


def add_max_pool3d(gb: GraphBuilder, node: torch.fx.Node, x: QnnTensor, window: Window) -> None:
    """max over (kd, kh, kw) = max over kd of the max over (kh, kw): PoolMax2d of [N*D, H, W, C]
    over (H, W), then PoolMax2d of [N, D, H'*W', C] over (D, 1). QNN's pads never win a max, so
    padding and ceil_mode's overhang stay per axis. Quantized: every tensor has the input's
    encoding (max moves values only)."""
    n, d, h, w, c = x.dims
    out = gb.define_output(node)
    _, d_out, h_out, w_out, _ = out.dims
    planes = reshape(gb, node, x, [n * d, h, w, c], "planes")
    pooled = gb.like(out, f"{node.name}_hw", [n * d, h_out, w_out, c])
    gb.add_op(
        node,
        QnnOpType.PoolMax2d,
        [planes],
        [pooled],
        Window(window.kernel[1:], window.stride[1:], window.pads[1:]).params(),
        suffix="hw",
    )
    columns = reshape(gb, node, pooled, [n, d, h_out * w_out, c], "depth_columns")
    depth = gb.like(out, f"{node.name}_d", [n, d_out, h_out * w_out, c])
    gb.add_op(
        node,
        QnnOpType.PoolMax2d,
        [columns],
        [depth],
        Window([window.kernel[0], 1], [window.stride[0], 1], [window.pads[0], [0, 0]]).params(),
        suffix="depth",
    )
    gb.add_op(node, QnnOpType.Reshape, [depth], [out], suffix="view_back")


def to_qnn_view(gb: GraphBuilder, node: torch.fx.Node, x: QnnTensor, spatial: int) -> QnnTensor:
    """1-D: [N, L, C] -> [N, 1, L, C] (a unit height); otherwise x."""
    if spatial != 1:
        return x
    return reshape(gb, node, x, [x.dims[0], 1] + list(x.dims[1:]), "unit_height")


def _zero_padded(gb: GraphBuilder, node: torch.fx.Node, x: QnnTensor, pads: List[List[int]]) -> QnnTensor:
    """x [N, spatial.., C] with zeros added around its spatial dims (a quantized x: its zero point)."""
    amounts = [[0, 0]] + [list(p) for p in pads] + [[0, 0]]
    padded = gb.like(x, f"{node.name}_padded", [d + b + a for d, (b, a) in zip(x.dims, amounts)])
    params = [
        uint32_scalar("scheme", 0),
        uint32_tensor("pad_amount", amounts, [len(amounts), 2]),
        float_scalar("pad_constant_value", 0.0),
    ]
    gb.add_op(node, QnnOpType.Pad, [x], [padded], params, suffix="pad")
    return padded


def add_pool(
    gb: GraphBuilder,
    node: torch.fx.Node,
    kind: str,
    spatial: int,
    x: QnnTensor,
    params: List[QnnParam],
    out: Optional[QnnTensor] = None,
) -> None:
    """The QNN pool of x (in the QNN view) writing `out` (default: the node's output; 1-D: through
    a unit-height tensor and a Reshape)."""
    out = out if out is not None else gb.define_output(node)
    written = gb.like(out, f"{node.name}_2d", [out.dims[0], 1] + list(out.dims[1:])) if spatial == 1 else out
    gb.add_op(node, POOL_TYPES[(kind, spatial)], [x], [written], params)
    if spatial == 1:
        gb.add_op(node, QnnOpType.Reshape, [written], [out], suffix="drop_unit_height")


class _PoolBuilder(NodeBuilder):
    layout_policy = LayoutPolicy.SENSITIVE
    channel_last_ranks = (3, 4, 5)


@register_builder
class MaxPoolBuilder(_PoolBuilder):
    targets = [
        _aten.max_pool1d.default,
        _aten.max_pool2d.default,
        _aten.max_pool2d_with_indices.default,
        _aten.max_pool3d_with_indices.default,
    ]
    keep_whole = [_aten.max_pool1d.default]
    quant_annotations = dict.fromkeys(
        aten_ops(
            "max_pool1d.default",
            "max_pool2d.default",
            "max_pool2d_with_indices.default",
            "max_pool3d.default",
            "max_pool3d_with_indices.default",
        ),
        QuantFamily.SHARED,
    )

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        spatial = spatial_of(node)
        return first_failure(
            lambda: check_float_io(node), lambda: check_rank(node, spatial), lambda: max_options(node, spatial)
        )

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        spatial = spatial_of(node)
        x = to_qnn_view(gb, node, gb.tensor(node.args[0], LAYOUT_CHANNEL_LAST), spatial)
        if spatial == 3:
            add_max_pool3d(gb, node, x, window_of(node, spatial))
            return
        add_pool(gb, node, "Max", spatial, x, window_of(node, spatial).params())


@register_builder
class AvgPoolBuilder(_PoolBuilder):
    targets = [_aten.avg_pool1d.default, _aten.avg_pool2d.default, _aten.avg_pool3d.default]
    keep_whole = [_aten.avg_pool1d.default]
    quant_annotations = dict.fromkeys(
        aten_ops("avg_pool1d.default", "avg_pool2d.default", "avg_pool3d.default"), QuantFamily.COMPUTE
    )

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        spatial = spatial_of(node)
        return first_failure(
            lambda: check_float_io(node), lambda: check_rank(node, spatial), lambda: avg_options(node, spatial)
        )

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        spatial = spatial_of(node)
        window = window_of(node, spatial)
        divisor = arg(node, 6, "divisor_override") if spatial > 1 else None
        count_pad = bool(arg(node, 5, "count_include_pad", True))
        if count_pad and _overhangs(node, spatial):
            count_pad = False  # no padding (avg_options): torch's divisor is the in-bounds count
        x = to_qnn_view(gb, node, gb.tensor(node.args[0], LAYOUT_CHANNEL_LAST), spatial)
        if pads_counted_explicitly(node, spatial):
            x = _zero_padded(gb, node, x, window.pads)
            window = Window(window.kernel, window.stride, [[0, 0]] * spatial)
        # Without padding every window is whole: count_pad_for_edges changes nothing in torch's
        # terms, and QNN 2.51's quantized PoolAvg3d is wrong with it set (up to 48 steps measured)
        padded = any(p for pair in window.pads for p in pair)
        counted = (count_pad or divisor is not None) and padded
        params = window.params() + [bool_scalar("count_pad_for_edges", counted)]
        if divisor is None:
            add_pool(gb, node, "Avg", spatial, x, params)
            return
        self._divisor_override(gb, node, spatial, x, params, int(divisor), int(np.prod(window.kernel)))

    def _divisor_override(
        self,
        gb: GraphBuilder,
        node: torch.fx.Node,
        spatial: int,
        x: QnnTensor,
        params: List[QnnParam],
        divisor: int,
        window_size: int,
    ) -> None:
        """sum / divisor = PoolAvg (every window divided by its full size) x (size / divisor)
        (2-D / 3-D only: avg_pool1d has no divisor_override). Quantized: the mean carries the
        output's encoding scaled by divisor / size (the output's resolution at its own range);
        the factor is an exact quantized scalar."""
        factor = window_size / divisor
        out = gb.define_output(node)
        mean = gb.like(out, f"{node.name}_mean")
        if out.quant is not None:
            mean.quant = replace(out.quant, scale=float(np.float32(out.quant.scale / factor)))
        gb.add_op(node, POOL_TYPES[("Avg", spatial)], [x], [mean], params)
        attrs = node.meta.get(QCOM_QUANT_ATTRS)
        scale = scalar_tensor(gb, f"{node.name}_divisor", factor, quantized=is_quantized(node), like=attrs)
        gb.add_op(node, QnnOpType.ElementWiseMultiply, [mean, scale], [out], suffix="divisor")
