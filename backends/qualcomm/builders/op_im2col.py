"""im2col (nn.Unfold / F.unfold; kept whole) -> one Gather at constant positions: x in its stored
layout (NCHW, or NHWC after a conv), zero-padded on H and W by a Pad when there is padding, each
batch image flattened, and out[n, c*kh*kw + i*kw + j, l] read from the position torch's own
unfold gives on a map of element positions of the padded image. Moves values only: exact in fp16
and on the codes of quantized graphs (QuantFamily.SHARED).

col2im (nn.Fold / F.fold; kept whole: its decomposition's index_put(accumulate=True) stays on the
CPU) -> one grouped TransposeConv2d with one-hot weights: the input [N, C*kh*kw, L] read
channel-last ([N, L, C*kh*kw], no Transpose after a conv1d) and viewed as [N, Lh, Lw, C*kh*kw];
group c (input channels c*kh*kw ..) writes output channel c, weight[i*dh, j*dw, c*kh*kw + i*kw + j]
= 1 (a dilated window is a sparse kernel: TransposeConv2d has no dilation), stride = the fold's
stride, padding = cropping; the rows / columns no window reaches are a zero Pad after it. Sums of inputs
x 1: exact in fp16 up to its rounding of the sums; quantized it requantizes like a conv
(QuantFamily.COMPUTE: the output has its own encoding)."""

from __future__ import annotations

from typing import List

import numpy as np
import torch
import torch.nn.functional as F
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape, node_layout
from backends.qualcomm.builders.op_conv import zero_bias_attrs
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.quant_encoding import QuantAttrs
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
from backends.qualcomm.builders.utils import int_list, is_quantized, reshape
from backends.qualcomm.serialization.qnn_graph import (
    QnnTensor,
    float_scalar,
    int32_scalar,
    uint32_scalar,
    uint32_tensor,
)
from backends.qualcomm.utils.constants import LAYOUT_CHANNEL_LAST

_aten = exir_ops.edge.aten
_IM2COL, _COL2IM = _aten.im2col.default, _aten.col2im.default
# The one-hot weight's encoding in quantized graphs: 1.0 is code 127 of scale 1/127 (with code 1
# of scale 1, HTP's 16-bit conv path, which keeps the top 8 bits of x * w, lost the input's low
# byte: 16a8w max 128 steps from the QDQ reference).
ONE_HOT_CODE = 127
ONE_HOT_WEIGHT_ATTRS = QuantAttrs(1.0 / ONE_HOT_CODE, 0, -127, 127, torch.int8)
# Largest position table (output elements per batch image) built.
MAX_POSITIONS = 1 << 22


def _window_args(node: torch.fx.Node) -> List[List[int]]:
    """kernel, dilation, padding, stride (two ints each)."""
    return [int_list(node.args[i], 2, 1 if i != 3 else 0) for i in (1, 2, 3, 4)]


def _check(node: torch.fx.Node) -> SupportResult:
    shape = logical_shape(node.args[0])
    val = node.args[0].meta.get("val")
    if len(shape) != 4:
        return False, f"im2col: only batched [N, C, H, W] input is supported (got rank {len(shape)})"
    if val is None or val.dtype != node.meta["val"].dtype:
        return False, "im2col: input and output must have one dtype"
    out = logical_shape(node)
    if int(np.prod(out[1:])) > MAX_POSITIONS or int(np.prod(out)) == 0:
        return False, f"im2col: output {out} is empty or has more than {MAX_POSITIONS} elements per image"
    return SUPPORTED


def im2col_positions(node: torch.fx.Node, channel_last: bool) -> np.ndarray:
    """Flat position (within one stored, padded image) of every output element of one batch
    image, in the output's order."""
    _, c, h, w = logical_shape(node.args[0])
    kernel, dilation, padding, stride = _window_args(node)
    h, w = h + 2 * padding[0], w + 2 * padding[1]
    index = torch.arange(c * h * w, dtype=torch.float64)
    index = index.reshape(1, h, w, c).permute(0, 3, 1, 2) if channel_last else index.reshape(1, c, h, w)
    cols = F.unfold(index, kernel, dilation=dilation, stride=stride)
    return cols.reshape(-1).to(torch.int64).numpy().astype(np.int32)


@register_builder
class Im2ColBuilder(NodeBuilder):
    targets = [_IM2COL]
    keep_whole = [_IM2COL]
    quant_annotations = dict.fromkeys(aten_ops("im2col.default"), QuantFamily.SHARED)

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return first_failure(lambda: _check(node))

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        source = node.args[0]
        channel_last = node_layout(source) == LAYOUT_CHANNEL_LAST
        x = gb.tensor(source, node_layout(source))
        ph, pw = _window_args(node)[2]
        if ph or pw:
            pads = [[0, 0], [ph, ph], [pw, pw], [0, 0]] if channel_last else [[0, 0], [0, 0], [ph, ph], [pw, pw]]
            dims = [d + a + b for d, (a, b) in zip(x.dims, pads)]
            padded = gb.like(x, f"{node.name}_padded", dims)
            gb.add_op(
                node,
                QnnOpType.Pad,
                [x],
                [padded],
                [
                    uint32_scalar("scheme", 0),
                    uint32_tensor("pad_amount", pads, [4, 2]),
                    float_scalar("pad_constant_value", 0.0),
                ],
                suffix="pad",
            )
            x = padded
        n = x.dims[0]
        flat = reshape(gb, node, x, [n, int(np.prod(x.dims[1:]))], "flat")
        positions = im2col_positions(node, channel_last)
        indices = gb.static_tensor(f"{node.name}_positions", positions)
        gathered = gb.like(flat, f"{node.name}_gathered", [n, positions.size])
        gb.add_op(node, QnnOpType.Gather, [flat, indices], [gathered], [int32_scalar("axis", 1)])
        gb.add_op(node, QnnOpType.Reshape, [gathered], [gb.define_output(node)], suffix="shape")


# ---- col2im ------------------------------------------------------------------------------------
def _fold_args(node: torch.fx.Node) -> List[List[int]]:
    """output_size, kernel, dilation, padding, stride of col2im (two ints each)."""
    return [int_list(node.args[i], 2, 1 if i != 4 else 0) for i in (1, 2, 3, 4, 5)]


def fold_geometry(node: torch.fx.Node) -> dict:
    """Window grid (Lh, Lw), dilated kernel extent, and output_padding of the TransposeConv2d."""
    size, kernel, dilation, padding, stride = _fold_args(node)
    extent = [d * (k - 1) + 1 for k, d in zip(kernel, dilation)]
    blocks = [(s + 2 * p - e) // st + 1 for s, p, e, st in zip(size, padding, extent, stride)]
    output_padding = [s - ((b - 1) * st - 2 * p + e) for s, b, st, p, e in zip(size, blocks, stride, padding, extent)]
    return {
        "size": size,
        "kernel": kernel,
        "dilation": dilation,
        "padding": padding,
        "stride": stride,
        "extent": extent,
        "blocks": blocks,
        "output_padding": output_padding,
    }


def _check_fold(node: torch.fx.Node) -> SupportResult:
    shape = logical_shape(node.args[0])
    if len(shape) != 3:
        return False, f"col2im: only batched [N, C*kh*kw, L] input is supported (got rank {len(shape)})"
    geo = fold_geometry(node)
    if any(b <= 0 for b in geo["blocks"]) or shape[2] != geo["blocks"][0] * geo["blocks"][1]:
        return False, f"col2im: {shape[2]} columns do not match the {geo['blocks']} windows of the output"
    return SUPPORTED


def one_hot_fold_weight(channels: int, kernel: List[int], dilation: List[int]) -> np.ndarray:
    """TransposeConv2d weight [eh, ew, C*kh*kw, 1]: input channel c*kh*kw + i*kw + j adds to
    output channel c at kernel offset (i*dh, j*dw)."""
    (kh, kw), (dh, dw) = kernel, dilation
    weight = np.zeros([dh * (kh - 1) + 1, dw * (kw - 1) + 1, channels * kh * kw, 1], np.int8)
    for c in range(channels):
        for i in range(kh):
            for j in range(kw):
                weight[i * dh, j * dw, c * kh * kw + i * kw + j, 0] = 1
    return weight


@register_builder
class Col2ImBuilder(NodeBuilder):
    targets = [_COL2IM]
    keep_whole = [_COL2IM]
    quant_annotations = dict.fromkeys(aten_ops("col2im.default"), QuantFamily.COMPUTE)
    layout_policy = LayoutPolicy.SENSITIVE
    channel_last_ranks = (3,)  # reads [N, L, C*kh*kw], writes NHWC

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return first_failure(lambda: check_float_io(node), lambda: _check_fold(node))

    def _weight(self, gb: GraphBuilder, node: torch.fx.Node, geo: dict, channels: int) -> QnnTensor:
        ones = one_hot_fold_weight(channels, geo["kernel"], geo["dilation"])
        if is_quantized(node):
            return gb.quantized_static(f"{node.name}_one_hot", ones * ONE_HOT_CODE, ONE_HOT_WEIGHT_ATTRS)
        return gb.static_tensor(f"{node.name}_one_hot", ones.astype(np.float32))

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        geo = fold_geometry(node)
        x = gb.tensor(node.args[0], LAYOUT_CHANNEL_LAST)  # [N, L, C*kh*kw]
        n, _, columns = x.dims
        channels = logical_shape(node)[1]
        x = reshape(gb, node, x, [n] + geo["blocks"] + [columns], "windows")
        weight = self._weight(gb, node, geo, channels)
        attrs = zero_bias_attrs(x, weight, channels) if is_quantized(node) else None
        bias = (
            gb.quantized_static(f"{node.name}_bias", np.zeros([channels], np.int64), attrs)
            if attrs is not None
            else gb.static_tensor(f"{node.name}_bias", np.zeros([channels], np.float32))
        )
        # Output row y is row y + p of the padded image; the windows reach its rows [0, reach):
        # crop p at the top and reach - p - H (if > 0) at the bottom, zero-pad the rest.
        crop = [[p, max(0, p - extra)] for p, extra in zip(geo["padding"], geo["output_padding"])]
        unreached = [max(0, extra - p) for p, extra in zip(geo["padding"], geo["output_padding"])]
        params = [
            uint32_tensor("stride", geo["stride"]),
            uint32_tensor("pad_amount", crop, [2, 2]),
            uint32_tensor("output_padding", [0, 0]),
            uint32_scalar("group", channels),
        ]
        out = gb.define_output(node)
        if not any(unreached):
            gb.add_op(node, QnnOpType.TransposeConv2d, [x, weight, bias], [out], params)
            return
        # A zero Pad after the conv, not its output_padding: QNN's quantized TransposeConv2d wrote
        # non-zero values into output_padding rows (up to 106 steps).
        (uh, uw) = unreached
        reached = gb.like(out, f"{node.name}_reached", [n, out.dims[1] - uh, out.dims[2] - uw, channels])
        gb.add_op(node, QnnOpType.TransposeConv2d, [x, weight, bias], [reached], params)
        gb.add_op(
            node,
            QnnOpType.Pad,
            [reached],
            [out],
            [
                uint32_scalar("scheme", 0),
                uint32_tensor("pad_amount", [[0, 0], [0, uh], [0, uw], [0, 0]], [4, 2]),
                float_scalar("pad_constant_value", 0.0),
            ],
            suffix="unreached",
        )
