"""Opt-in: linear as a 1x1 Conv2d (faster on HTP).

MarkLinearAsConv2d (edge pass, enabled by to_edge_transform_and_lower_to_qnn(...,
convert_linear_to_conv2d=True)) marks linear nodes; the preprocess pass
convert_linear_to_conv2d rewrites each marked linear with a constant weight as
    x [..., K] -> view [M, K, 1, 1] -> convolution(weight [N, K, 1, 1]) -> view [..., N]
The weight keeps its encoding: per-channel scales on the output channel, LPBQ block scales
per output channel and per block of input channels (HWIO: axis 3, block axis 2)."""

from __future__ import annotations

import dataclasses
import math

import torch
from executorch.backends.transforms.utils import create_constant_placeholder, get_param_tensor, is_param_node
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.pass_base import PassResult
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from backends.qualcomm.utils.constants import QCOM_CONSTANT, QCOM_LINEAR_AS_CONV, QCOM_QUANT_ATTRS

_aten = exir_ops.edge.aten


class MarkLinearAsConv2d:
    """Edge pass: flag every linear node for the preprocess rewrite."""

    def __call__(self, graph_module: torch.fx.GraphModule) -> PassResult:
        marked = False
        for node in graph_module.graph.nodes:
            if node.op == "call_function" and node.target == _aten.linear.default:
                node.meta[QCOM_LINEAR_AS_CONV] = True
                marked = True
        return PassResult(graph_module, marked)


def _view(graph: torch.fx.Graph, source: torch.fx.Node, shape, like: torch.fx.Node) -> torch.fx.Node:
    node = graph.call_function(_aten.view_copy.default, (source, list(shape)))
    node.meta["val"] = like.meta["val"].new_empty(shape)
    if QCOM_QUANT_ATTRS in like.meta:
        node.meta[QCOM_QUANT_ATTRS] = like.meta[QCOM_QUANT_ATTRS]
    return node


def _conv_weight(ep: ExportedProgram, graph: torch.fx.Graph, linear: torch.fx.Node) -> torch.fx.Node:
    weight = linear.args[1]
    data = get_param_tensor(ep, weight)
    first_placeholder = next(n for n in graph.nodes if n.op == "placeholder")
    with graph.inserting_before(first_placeholder):
        node = create_constant_placeholder(
            ep, graph, f"{weight.name}_oihw", InputKind.PARAMETER, data.reshape(*data.shape, 1, 1).contiguous()
        )
    node.meta[QCOM_CONSTANT] = True
    attrs = weight.meta.get(QCOM_QUANT_ATTRS)
    if attrs is not None:
        block = None if attrs.block_size is None else tuple(attrs.block_size) + (1, 1)
        node.meta[QCOM_QUANT_ATTRS] = dataclasses.replace(attrs, block_size=block)
    return node


def _rewrite(ep: ExportedProgram, linear: torch.fx.Node) -> None:
    graph = ep.graph_module.graph
    x, out_shape = linear.args[0], list(linear.meta["val"].shape)
    k, n = int(x.meta["val"].shape[-1]), out_shape[-1]
    m = math.prod(out_shape[:-1])
    bias = linear.args[2] if len(linear.args) > 2 else None
    with graph.inserting_before(linear):
        weight = _conv_weight(ep, graph, linear)
        x4 = _view(graph, x, [m, k, 1, 1], x)
        conv = graph.call_function(
            _aten.convolution.default, (x4, weight, bias, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
        )
        conv.meta["val"] = linear.meta["val"].new_empty([m, n, 1, 1])
        conv.meta.update({k_: v for k_, v in linear.meta.items() if k_ not in ("val",)})
        out = _view(graph, conv, out_shape, linear)
    linear.replace_all_uses_with(out)
    graph.erase_node(linear)


def _convertible(ep: ExportedProgram, node: torch.fx.Node) -> bool:
    if node.op != "call_function" or node.target != _aten.linear.default:
        return False
    weight = node.args[1]
    return (
        node.meta.get(QCOM_LINEAR_AS_CONV, False)
        and isinstance(weight, torch.fx.Node)
        and weight.op == "placeholder"
        and is_param_node(ep, weight)
    )


def convert_linear_to_conv2d(ep: ExportedProgram) -> ExportedProgram:
    """Preprocess pass: rewrite marked linear nodes (no-op when none is marked)."""
    linears = [n for n in ep.graph_module.graph.nodes if _convertible(ep, n)]
    for linear in linears:
        _rewrite(ep, linear)
    if linears:
        ep.graph_module.graph.eliminate_dead_code()
        ep.graph_module.recompile()
    return ep
