"""topk (last axis, largest, sorted) -> TopK (values FLOAT_32, indices INT_32) + Cast to INT_64.

A multi-output op: output 0 is the node's own tensor (getitem 0 aliases it),
output 1 is bound to the getitem(node, 1) user (the int64 indices PyTorch returns)."""

from __future__ import annotations

import operator

import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.registry import (
    is_float_dtype,
    SUPPORTED,
    NodeBuilder,
    SupportResult,
    first_failure,
    node_val,
    register_builder,
)
from backends.qualcomm.builders.utils import normalize_axis
from backends.qualcomm.serialization.qnn_graph import DataType, uint32_scalar

_aten = exir_ops.edge.aten


def _arg(node: torch.fx.Node, index: int, name: str, default):
    return node.args[index] if len(node.args) > index else node.kwargs.get(name, default)


def _check_input(node: torch.fx.Node) -> SupportResult:
    val = node_val(node.args[0])
    if not isinstance(val, torch.Tensor) or not is_float_dtype(val.dtype) or val.dim() == 0:
        return False, "input must be a float32 tensor of rank >= 1"
    return SUPPORTED


def _check_args(node: torch.fx.Node) -> SupportResult:
    rank = len(logical_shape(node.args[0]))
    if normalize_axis(_arg(node, 2, "dim", -1), rank) != rank - 1:
        return False, "only topk over the last axis is supported"
    if not _arg(node, 3, "largest", True):
        return False, "largest=False is not supported"
    return SUPPORTED


@register_builder
class TopKBuilder(NodeBuilder):
    targets = [_aten.topk.default]
    num_outputs = 2

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return first_failure(lambda: _check_input(node), lambda: _check_args(node))

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x = gb.tensor(node.args[0])
        values = gb.define_output(node, dtype=torch.float32)
        indices = gb.native_tensor(f"{node.name}_indices_int32", values.dims, DataType.INT_32)
        gb.add_op(node, QnnOpType.TopK, [x], [values, indices], [uint32_scalar("k", int(node.args[1]))])
        for user in node.users:
            if user.target is operator.getitem and user.args[1] == 1:
                indices64 = gb.native_tensor(f"{node.name}_indices", values.dims, DataType.INT_64)
                gb.add_op(node, QnnOpType.Cast, [indices], [indices64], suffix="indices")
                gb.bind(user, indices64)
