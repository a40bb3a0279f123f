"""Resize and channel rearrangement, channel-last: upsample_nearest1d / 2d -> ResizeNearestNeighbor
(1-D on a unit height), upsample_bilinear2d -> ResizeBilinear, upsample_bicubic2d -> Resize (cubic,
coefficient -0.75 as torch), pixel_shuffle -> DepthToSpace, pixel_unshuffle -> SpaceToDepth (both
CRD: torch's channel c*r*r + i*r + j), channel_shuffle -> ChannelShuffle."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch

from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape
from backends.qualcomm.builders.op_shape import edge_ops
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
    first_failure,
    register_builder,
)
from backends.qualcomm.builders.utils import view_as, view_back
from backends.qualcomm.serialization.qnn_graph import QnnTensor, bool_scalar, float_scalar, uint32_scalar, uint32_tensor
from backends.qualcomm.utils.constants import LAYOUT_CHANNEL_LAST

_NEAREST = edge_ops(
    "upsample_nearest2d.vec", "upsample_nearest2d.default", "upsample_nearest1d.vec", "upsample_nearest1d.default"
)
_BILINEAR = edge_ops("upsample_bilinear2d.vec", "upsample_bilinear2d.default")
_BICUBIC = edge_ops("upsample_bicubic2d.vec", "upsample_bicubic2d.default")
_SHUFFLES = edge_ops("pixel_shuffle.default", "pixel_unshuffle.default", "channel_shuffle.default")

# QNN Resize enums (QNN op definitions): transformation_mode, interpolation_mode.
_PYTORCH_HALF_PIXEL, _ALIGN_CORNERS = 1, 2
_CUBIC = 2
_TORCH_CUBIC_COEFF = -0.75  # torch's upsample_bicubic2d (A in its cubic convolution)
_CRD = 1  # DepthToSpace / SpaceToDepth mode: depth index c*bh*bw + i*bw + j (torch's order)


def _op_name(node: torch.fx.Node) -> str:
    """'packet.overload' of an edge or (in ExecuTorch's keep-whole query) aten node."""
    name = node.target.name() if hasattr(node.target, "name") else str(node.target)
    return name.split("::")[-1]


def _kind(node: torch.fx.Node) -> str:
    """nearest / bilinear / bicubic / pixel_shuffle / pixel_unshuffle / channel_shuffle."""
    packet = _op_name(node).split(".")[0]
    return packet.replace("upsample_", "").rstrip("123d") if packet.startswith("upsample_") else packet


def _has_align_corners(node: torch.fx.Node) -> bool:
    return _kind(node) != "nearest"


def align_corners(node: torch.fx.Node) -> bool:
    return bool(node.args[2]) if _has_align_corners(node) and len(node.args) > 2 else False


def requested_scales(node: torch.fx.Node) -> Optional[List[float]]:
    """The scale factors the caller gave (torch samples at 1 / scale when they are given),
    None when only an output size was."""
    first = 3 if _has_align_corners(node) else 2
    if _op_name(node).endswith(".vec"):
        scales = node.args[first] if len(node.args) > first else None
        return [float(s) for s in scales] if scales else None
    spatial = len(logical_shape(node)) - 2
    values = [node.args[i] if len(node.args) > i else None for i in range(first, first + spatial)]
    return None if all(v is None for v in values) else [float(v) if v is not None else 0.0 for v in values]


def _scale_matches_sizes(node: torch.fx.Node) -> SupportResult:
    """QNN samples at in / out; torch at 1 / scale_factor when a scale is given (and corners
    are not aligned): they agree only when in * scale == out exactly."""
    scales = requested_scales(node)
    if scales is None or align_corners(node):
        return SUPPORTED
    ins, outs = logical_shape(node.args[0])[2:], logical_shape(node)[2:]
    for size_in, size_out, scale in zip(ins, outs, scales):
        if scale <= 0 or abs(size_in * scale - size_out) > 1e-6 * size_out:
            return False, (
                f"scale_factor {scales} with input {ins} -> output {outs}: torch samples at "
                f"1/scale_factor, QNN at in/out (give size= or recompute_scale_factor=True)"
            )
    return SUPPORTED


def _rank(ranks: Sequence[int]):
    def check(node: torch.fx.Node) -> SupportResult:
        rank = len(logical_shape(node.args[0]))
        if rank not in ranks:
            return False, f"rank-{rank} input is not supported (rank {' / '.join(map(str, ranks))})"
        return SUPPORTED

    return check


def _bicubic_support(node: torch.fx.Node) -> SupportResult:
    if not align_corners(node) and 1 in logical_shape(node)[2:]:
        return False, (
            "bicubic to an output size of 1 without align_corners: QNN's pytorch_half_pixel "
            "samples pixel 0 there, torch -0.5 + in/2"
        )
    return SUPPORTED


def _unit_height(dims: Sequence[int]) -> List[int]:
    return list(dims) if len(dims) == 4 else [dims[0], 1] + list(dims[1:])


def _nhwc(gb: GraphBuilder, node: torch.fx.Node) -> Tuple[QnnTensor, QnnTensor, QnnTensor]:
    """view_as of channel-last x; rank 3 (NWC) as [N, 1, W, C]."""
    x = gb.tensor(node.args[0], LAYOUT_CHANNEL_LAST)
    out_dims = [d for d in logical_shape(node)]
    out_nwc = [out_dims[0]] + out_dims[2:] + [out_dims[1]]
    return view_as(gb, node, x, _unit_height(x.dims), _unit_height(out_nwc))


@register_builder
class ResizeBuilder(NodeBuilder):
    targets = _NEAREST + _BILINEAR + _BICUBIC
    keep_whole = _BICUBIC + edge_ops("upsample_nearest1d.vec", "upsample_nearest1d.default")  # else index math
    quant_annotations = {
        **dict.fromkeys(
            aten_ops(
                "upsample_nearest2d.vec",
                "upsample_nearest2d.default",
                "upsample_nearest1d.vec",
                "upsample_nearest1d.default",
                "upsample_bilinear2d.vec",
                "upsample_bilinear2d.default",
            ),
            QuantFamily.SHARED,
        ),
        **dict.fromkeys(aten_ops("upsample_bicubic2d.vec", "upsample_bicubic2d.default"), QuantFamily.COMPUTE),
    }
    layout_policy = LayoutPolicy.SENSITIVE
    channel_last_ranks = (3, 4)

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        nearest = _kind(node) == "nearest"
        checks = [
            lambda: check_data_io(node) if nearest else check_float_io(node),
            lambda: _rank((3, 4) if nearest else (4,))(node),
            lambda: _scale_matches_sizes(node),
        ]
        if _kind(node) == "bicubic":
            checks.append(lambda: _bicubic_support(node))
        return first_failure(*checks)

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        corners = align_corners(node)
        x4, out4, out = _nhwc(gb, node)
        if _kind(node) == "nearest":
            params = [bool_scalar("align_corners", False), bool_scalar("half_pixel_centers", False)]
            gb.add_op(node, QnnOpType.ResizeNearestNeighbor, [x4], [out4], params)
        elif _kind(node) == "bilinear":
            params = [bool_scalar("align_corners", corners), bool_scalar("half_pixel_centers", not corners)]
            gb.add_op(node, QnnOpType.ResizeBilinear, [x4], [out4], params)
        else:
            params = [
                bool_scalar("exclude_outside", False),
                uint32_scalar("transformation_mode", _ALIGN_CORNERS if corners else _PYTORCH_HALF_PIXEL),
                uint32_scalar("interpolation_mode", _CUBIC),
                float_scalar("cubic_coeff", _TORCH_CUBIC_COEFF),
            ]
            gb.add_op(node, QnnOpType.Resize, [x4], [out4], params)
        view_back(gb, node, out4, out)


def _shuffle_support(node: torch.fx.Node) -> SupportResult:
    shape = logical_shape(node.args[0])
    if _kind(node) == "channel_shuffle":
        groups = int(node.args[1])
        if len(shape) < 3 or groups <= 0 or shape[1] % groups:
            return False, f"channel_shuffle of {shape} into {groups} groups is not supported"
        return _rank((3, 4))(node)
    return _rank((4,))(node)


@register_builder
class ShuffleBuilder(NodeBuilder):
    targets = _SHUFFLES
    keep_whole = _SHUFFLES
    quant_annotations = dict.fromkeys(
        aten_ops("pixel_shuffle.default", "pixel_unshuffle.default", "channel_shuffle.default"), QuantFamily.SHARED
    )
    layout_policy = LayoutPolicy.SENSITIVE
    channel_last_ranks = (3, 4)

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return first_failure(lambda: check_data_io(node), lambda: _shuffle_support(node))

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x = gb.tensor(node.args[0], LAYOUT_CHANNEL_LAST)
        out = gb.define_output(node)
        factor = int(node.args[1])
        if _kind(node) == "channel_shuffle":
            params = [uint32_scalar("num_groups", factor), uint32_scalar("axis", len(x.dims) - 1)]
            gb.add_op(node, QnnOpType.ChannelShuffle, [x], [out], params)
            return
        params = [uint32_tensor("block_size", [factor, factor]), uint32_scalar("mode", _CRD)]
        if _kind(node) == "pixel_shuffle":
            gb.add_op(node, QnnOpType.DepthToSpace, [x], [out], params)
        else:
            gb.add_op(node, QnnOpType.SpaceToDepth, [x], [out], params)
