"""avg_pool2d / max_pool2d(_with_indices) / _adaptive_avg_pool2d -> PoolAvg2d / PoolMax2d / ReduceMean."""
from __future__ import annotations

from typing import List

import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape
from backends.qualcomm.builders.op_norm import only_output_zero_used
from backends.qualcomm.builders.registry import (
    LayoutPolicy, NodeBuilder, QuantFamily, SUPPORTED, SupportResult, aten_ops, check_float_io,
    first_failure, register_builder,
)
from backends.qualcomm.builders.utils import int_list
from backends.qualcomm.serialization.qnn_graph import QnnParam, bool_scalar, uint32_tensor
from backends.qualcomm.utils.constants import LAYOUT_CHANNEL_LAST

_aten = exir_ops.edge.aten


def _arg(node: torch.fx.Node, index: int, name: str, default=None):
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def _window_params(kernel: List[int], stride: List[int], padding: List[int]) -> List[QnnParam]:
    return [
        uint32_tensor("filter_size", kernel),
        uint32_tensor("stride", stride),
        uint32_tensor("pad_amount", [[padding[0], padding[0]], [padding[1], padding[1]]], [2, 2]),
    ]


def _rank4(node: torch.fx.Node) -> SupportResult:
    if len(logical_shape(node.args[0])) != 4:
        return False, "only rank-4 (N,C,H,W) input is supported"
    return SUPPORTED


@register_builder
class AvgPoolBuilder(NodeBuilder):
    targets = [_aten.avg_pool2d.default]
    quant_annotations = dict.fromkeys(aten_ops("avg_pool2d.default"),
                                      QuantFamily.COMPUTE)
    layout_policy = LayoutPolicy.SENSITIVE

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        def options() -> SupportResult:
            if _arg(node, 4, "ceil_mode", False):
                return False, "ceil_mode=True is not supported"
            if _arg(node, 6, "divisor_override") is not None:
                return False, "divisor_override is not supported"
            return SUPPORTED
        return first_failure(lambda: check_float_io(node), lambda: _rank4(node), options)

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        kernel = int_list(_arg(node, 1, "kernel_size"), 2, 1)
        stride = int_list(_arg(node, 2, "stride"), 2, 0) if _arg(node, 2, "stride") else kernel
        padding = int_list(_arg(node, 3, "padding", 0), 2, 0)
        params = _window_params(kernel, stride, padding)
        params.append(bool_scalar("count_pad_for_edges", _arg(node, 5, "count_include_pad", True)))
        x = gb.tensor(node.args[0], LAYOUT_CHANNEL_LAST)
        gb.add_op(node, "PoolAvg2d", [x], [gb.define_output(node)], params)


@register_builder
class MaxPoolBuilder(NodeBuilder):
    targets = [_aten.max_pool2d_with_indices.default, _aten.max_pool2d.default]
    quant_annotations = dict.fromkeys(aten_ops("max_pool2d.default"),
                                      QuantFamily.SHARED)
    layout_policy = LayoutPolicy.SENSITIVE

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        def options() -> SupportResult:
            if any(d != 1 for d in int_list(_arg(node, 4, "dilation", 1), 2, 1)):
                return False, "dilation != 1 is not supported"
            if _arg(node, 5, "ceil_mode", False):
                return False, "ceil_mode=True is not supported"
            if node.target == _aten.max_pool2d_with_indices.default:
                return only_output_zero_used(node)
            return SUPPORTED
        return first_failure(lambda: check_float_io(node), lambda: _rank4(node), options)

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        kernel = int_list(_arg(node, 1, "kernel_size"), 2, 1)
        stride = int_list(_arg(node, 2, "stride"), 2, 0) if _arg(node, 2, "stride") else kernel
        padding = int_list(_arg(node, 3, "padding", 0), 2, 0)
        x = gb.tensor(node.args[0], LAYOUT_CHANNEL_LAST)
        gb.add_op(node, "PoolMax2d", [x], [gb.define_output(node)], _window_params(kernel, stride, padding))


@register_builder
class AdaptiveAvgPoolBuilder(NodeBuilder):
    targets = [_aten._adaptive_avg_pool2d.default]
    quant_annotations = dict.fromkeys(aten_ops("adaptive_avg_pool2d.default"),
                                      QuantFamily.COMPUTE)
    layout_policy = LayoutPolicy.SENSITIVE

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        def divisible() -> SupportResult:
            h, w = logical_shape(node.args[0])[2:]
            oh, ow = logical_shape(node)[2:]
            if h % oh or w % ow:
                return False, f"input {h}x{w} is not divisible by output {oh}x{ow}"
            return SUPPORTED
        return first_failure(lambda: check_float_io(node), lambda: _rank4(node), divisible)

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        h, w = logical_shape(node.args[0])[2:]
        oh, ow = logical_shape(node)[2:]
        x = gb.tensor(node.args[0], LAYOUT_CHANNEL_LAST)
        out = gb.define_output(node)
        if oh == 1 and ow == 1:
            gb.add_op(node, "ReduceMean", [x], [out],
                      [uint32_tensor("axes", [1, 2]), bool_scalar("keep_dims", True)])
            return
        kernel = [h // oh, w // ow]
        params = _window_params(kernel, kernel, [0, 0])
        params.append(bool_scalar("count_pad_for_edges", False))
        gb.add_op(node, "PoolAvg2d", [x], [out], params)
