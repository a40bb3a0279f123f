"""im2col (nn.Unfold / F.unfold; kept whole) -> one Gather at constant positions: x in its stored
layout (NCHW, or NHWC after a conv), zero-padded on H and W by a Pad when there is padding, each
batch image flattened, and out[n, c*kh*kw + i*kw + j, l] read from the position torch's own
unfold gives on a map of element positions of the padded image. Moves values only: exact in fp16
and on the codes of quantized graphs (QuantFamily.SHARED).

col2im (nn.Fold) is not lowered: it sums overlapping windows (stays on the CPU)."""
from __future__ import annotations

from typing import List

import numpy as np
import torch
import torch.nn.functional as F
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape, node_layout
from backends.qualcomm.builders.registry import (
    NodeBuilder, QuantFamily, SUPPORTED, SupportResult, aten_ops, first_failure, register_builder,
)
from backends.qualcomm.builders.utils import int_list, reshape
from backends.qualcomm.serialization.qnn_graph import float_scalar, int32_scalar, uint32_scalar, uint32_tensor
from backends.qualcomm.utils.constants import LAYOUT_CHANNEL_LAST

_aten = exir_ops.edge.aten
_IM2COL = _aten.im2col.default
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
            gb.add_op(node, "Pad", [x], [padded],
                      [uint32_scalar("scheme", 0), uint32_tensor("pad_amount", pads, [4, 2]),
                       float_scalar("pad_constant_value", 0.0)], suffix="pad")
            x = padded
        n = x.dims[0]
        flat = reshape(gb, node, x, [n, int(np.prod(x.dims[1:]))], "flat")
        positions = im2col_positions(node, channel_last)
        indices = gb.static_tensor(f"{node.name}_positions", positions)
        gathered = gb.like(flat, f"{node.name}_gathered", [n, positions.size])
        gb.add_op(node, "Gather", [flat, indices], [gathered], [int32_scalar("axis", 1)])
        gb.add_op(node, "Reshape", [gathered], [gb.define_output(node)], suffix="shape")
