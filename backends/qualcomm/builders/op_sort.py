"""sort (last axis) -> TopK with k = the axis size (values FLOAT_32, indices INT_32 + Cast to
INT_64). descending=True is TopK itself; ascending sorts -x descending and negates the values back.
Equal values: the host engine keeps the lower index first (PyTorch's stable order), QNN 2.51's
HTP TopK puts the higher index first (measured) - both valid for stable=False (sort.default), so
stable=True is rejected. NaN sorts first in both directions (PyTorch puts it last when
ascending). Indices are not quantized: in quantized graphs sort runs in float."""
from __future__ import annotations

import operator
from typing import Tuple

import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape
from backends.qualcomm.builders.registry import (
    NodeBuilder, SupportResult, SUPPORTED, first_failure, node_val, register_builder,
)
from backends.qualcomm.builders.utils import normalize_axis
from backends.qualcomm.serialization.qnn_graph import DataType, QnnTensor, uint32_scalar

_aten = exir_ops.edge.aten
SORT_OPS = [_aten.sort.default] + ([_aten.sort.stable] if hasattr(_aten.sort, "stable") else [])


def sort_args(node: torch.fx.Node) -> Tuple[int, bool]:
    """(dim, descending): sort.default(x, dim=-1, descending=False); sort.stable takes keywords."""
    args = list(node.args[1:]) if node.target is _aten.sort.default else []
    dim = args[0] if len(args) > 0 else node.kwargs.get("dim", -1)
    return int(dim), bool(args[1] if len(args) > 1 else node.kwargs.get("descending", False))


def _check_input(node: torch.fx.Node) -> SupportResult:
    val = node_val(node.args[0])
    if not isinstance(val, torch.Tensor) or val.dtype != torch.float32 or val.dim() == 0:
        return False, "input must be a float32 tensor of rank >= 1"
    if val.shape[-1] == 0:
        return False, "empty sort axis"
    return SUPPORTED


def _check_stable(node: torch.fx.Node) -> SupportResult:
    if node.kwargs.get("stable"):
        return False, ("stable=True: QNN's TopK orders equal values by the higher index first "
                       "(measured on QNN 2.51), not PyTorch's stable order")
    return SUPPORTED


def _check_axis(node: torch.fx.Node) -> SupportResult:
    rank = len(logical_shape(node.args[0]))
    dim, _ = sort_args(node)
    if normalize_axis(dim, rank) != rank - 1:
        return False, f"dim={dim}: only a sort over the last axis is supported (QNN TopK's axis)"
    return SUPPORTED


def _negated(gb: GraphBuilder, node: torch.fx.Node, x: QnnTensor, what: str) -> QnnTensor:
    out = gb.native_tensor(f"{node.name}_{what}", x.dims, DataType.FLOAT_32)
    gb.add_op(node, "ElementWiseNeg", [x], [out], suffix=what)
    return out


@register_builder
class SortBuilder(NodeBuilder):
    targets = SORT_OPS
    num_outputs = 2

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return first_failure(lambda: _check_input(node), lambda: _check_stable(node), lambda: _check_axis(node))

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x = gb.tensor(node.args[0])
        k = uint32_scalar("k", int(x.dims[-1]))
        indices = gb.native_tensor(f"{node.name}_indices_int32", x.dims, DataType.INT_32)
        if sort_args(node)[1]:
            gb.add_op(node, "TopK", [x], [gb.define_output(node, dtype=torch.float32), indices], [k])
        else:
            top = gb.native_tensor(f"{node.name}_negated_sorted", x.dims, DataType.FLOAT_32)
            gb.add_op(node, "TopK", [_negated(gb, node, x, "negated")], [top, indices], [k])
            gb.add_op(node, "ElementWiseNeg", [top], [gb.define_output(node, dtype=torch.float32)], suffix="values")
        users = [u for u in node.users if u.target is operator.getitem and u.args[1] == 1]
        if users:
            indices64 = gb.native_tensor(f"{node.name}_indices", x.dims, DataType.INT_64)
            gb.add_op(node, "Cast", [indices], [indices64], suffix="indices")
            for user in users:
                gb.bind(user, indices64)
