"""Decide the stored layout of every node: channel-last where layout-sensitive ops
(convolutions of rank 3 / 4 / 5, pools, Batchnorm) need it, kept through layout-agnostic
ops (rank 4; rank 3 / 5 through elementwise ops), channel-first
elsewhere. The GraphBuilder inserts one Transpose (or a Reshape when only unit dims
move) per tensor and layout actually requested, so permutes appear only at boundaries."""

from __future__ import annotations

import operator

import torch

from backends.qualcomm.builders.graph_builder import io_dim_order
from backends.qualcomm.builders.registry import LayoutPolicy, get_builder
from backends.qualcomm.utils.constants import (
    CHANNEL_LAST_RANKS,
    LAYOUT_CHANNEL_FIRST,
    LAYOUT_CHANNEL_LAST,
    NCHW_TO_NHWC,
    QCOM_CONSTANT,
    QCOM_INPUT_LAYOUT,
    QCOM_LAYOUT,
)


def _rank(node: torch.fx.Node) -> int:
    val = node.meta.get("val")
    if isinstance(val, (tuple, list)):
        val = val[0] if val else None
    return val.dim() if isinstance(val, torch.Tensor) else -1


def _is_channel_last(node: object) -> bool:
    return isinstance(node, torch.fx.Node) and node.meta.get(QCOM_LAYOUT) == LAYOUT_CHANNEL_LAST


def _layouts_for(node: torch.fx.Node) -> tuple:
    """(input layout, output layout) of a call_function node."""
    if node.target is operator.getitem:
        source_cl = _is_channel_last(node.args[0]) and _rank(node) in CHANNEL_LAST_RANKS  # pools' values
        layout = LAYOUT_CHANNEL_LAST if source_cl else LAYOUT_CHANNEL_FIRST
        return layout, layout
    builder = get_builder(node.target)
    policy = builder.layout_policy if builder is not None else LayoutPolicy.CHANNEL_FIRST
    if policy is LayoutPolicy.SENSITIVE and _rank(node.args[0]) in builder.channel_last_ranks:
        return LAYOUT_CHANNEL_LAST, LAYOUT_CHANNEL_LAST
    if policy is LayoutPolicy.AGNOSTIC:
        cl_inputs = [a for a in node.all_input_nodes if _is_channel_last(a)]
        if any(_rank(a) == 4 for a in cl_inputs) and builder.supports_channel_last(node):
            out = LAYOUT_CHANNEL_LAST if _rank(node) == 4 else LAYOUT_CHANNEL_FIRST
            return LAYOUT_CHANNEL_LAST, out
        if _keeps_other_rank_channel_last(node, builder, cl_inputs):
            return LAYOUT_CHANNEL_LAST, LAYOUT_CHANNEL_LAST
    return LAYOUT_CHANNEL_FIRST, LAYOUT_CHANNEL_FIRST


def _keeps_other_rank_channel_last(node: torch.fx.Node, builder, cl_inputs: list) -> bool:
    """An elementwise op (channel_last_any_rank) reading channel-last rank-3 / rank-5 tensors
    of its own output rank (conv1d / conv3d outputs) stays channel-last."""
    rank = _rank(node)
    return (
        bool(cl_inputs)
        and rank in CHANNEL_LAST_RANKS
        and rank != 4
        and builder.channel_last_any_rank
        and all(_rank(a) == rank for a in cl_inputs)
        and builder.supports_channel_last(node)
    )


def _graph_input_layout(node: torch.fx.Node) -> str:
    """A rank-4 graph input the caller passes channels_last is stored channel-last (the
    delegate reads the caller's NHWC memory as is); every other placeholder channel-first."""
    if node.meta.get(QCOM_CONSTANT, False):
        return LAYOUT_CHANNEL_FIRST
    return LAYOUT_CHANNEL_LAST if io_dim_order(node.meta.get("val")) == NCHW_TO_NHWC else LAYOUT_CHANNEL_FIRST


def annotate_layout(graph_module: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Set QCOM_INPUT_LAYOUT / QCOM_LAYOUT on every call_function node (topological order),
    and QCOM_LAYOUT on graph inputs."""
    for node in graph_module.graph.nodes:
        if node.op == "placeholder":
            node.meta[QCOM_LAYOUT] = _graph_input_layout(node)
        if node.op != "call_function":
            continue
        in_layout, out_layout = _layouts_for(node)
        node.meta[QCOM_INPUT_LAYOUT] = in_layout
        node.meta[QCOM_LAYOUT] = out_layout
    return graph_module
