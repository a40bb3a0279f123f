"""grid_sampler_2d (F.grid_sample on a 4-D input) -> GridSample: the input channel-last
[N, H, W, C], the grid as torch gives it [N, OH, OW, 2] (x, y), the output channel-last
[N, OH, OW, C]. QNN's enums equal torch's: mode 0 bilinear / 1 nearest, padding_mode 0 zeros /
1 border. Rejected (stay on the CPU): bicubic, reflection padding and 5-D (3-D) sampling,
which are not implemented here (the host engine has no kernel for them)."""
from __future__ import annotations

import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape
from backends.qualcomm.builders.registry import (
    LayoutPolicy, NodeBuilder, QuantFamily, SUPPORTED, SupportResult, aten_ops, check_float_io,
    first_failure, register_builder,
)
from backends.qualcomm.serialization.qnn_graph import bool_scalar, uint32_scalar
from backends.qualcomm.utils.constants import LAYOUT_CHANNEL_FIRST, LAYOUT_CHANNEL_LAST

_aten = exir_ops.edge.aten
_MODES = {0: "bilinear", 1: "nearest", 2: "bicubic"}
_PADDINGS = {0: "zeros", 1: "border", 2: "reflection"}
SUPPORTED_MODES, SUPPORTED_PADDINGS = (0, 1), (0, 1)


def _modes(node: torch.fx.Node) -> SupportResult:
    mode, padding = int(node.args[2]), int(node.args[3])
    if mode not in SUPPORTED_MODES:
        return False, (f"grid_sampler_2d: interpolation mode '{_MODES.get(mode, mode)}' is not supported "
                       "(bilinear and nearest only)")
    if padding not in SUPPORTED_PADDINGS:
        return False, (f"grid_sampler_2d: padding_mode '{_PADDINGS.get(padding, padding)}' is not supported "
                       "(zeros and border only)")
    return SUPPORTED


def _shapes(node: torch.fx.Node) -> SupportResult:
    x, grid = logical_shape(node.args[0]), logical_shape(node.args[1])
    if len(x) != 4 or len(grid) != 4 or grid[-1] != 2 or grid[0] != x[0]:
        return False, f"grid_sampler_2d: input {x} and grid {grid} must be [N, C, H, W] and [N, OH, OW, 2]"
    return SUPPORTED


@register_builder
class GridSampleBuilder(NodeBuilder):
    targets = [_aten.grid_sampler_2d.default]
    quant_annotations = dict.fromkeys(aten_ops("grid_sampler.default", "grid_sampler_2d.default"),
                                      QuantFamily.COMPUTE)
    layout_policy = LayoutPolicy.SENSITIVE
    channel_last_ranks = (4,)

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return first_failure(lambda: check_float_io(node), lambda: _shapes(node), lambda: _modes(node))

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x = gb.tensor(node.args[0], LAYOUT_CHANNEL_LAST)
        grid = gb.tensor(node.args[1], LAYOUT_CHANNEL_FIRST)  # [N, OH, OW, 2] as torch gives it
        params = [bool_scalar("align_corners", bool(node.args[4])), uint32_scalar("mode", int(node.args[2])),
                  uint32_scalar("padding_mode", int(node.args[3]))]
        gb.add_op(node, "GridSample", [x, grid], [gb.define_output(node)], params)
