"""Binary elementwise ops: add / sub / mul / div (Tensor and Scalar overloads), pow(x, scalar)."""
from __future__ import annotations

import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape
from backends.qualcomm.builders.registry import (
    LayoutPolicy, NodeBuilder, SupportResult, SUPPORTED, check_float_io, register_builder,
)
from backends.qualcomm.builders.utils import input_layout, is_quantized, operand, scalar_tensor
from backends.qualcomm.serialization.qnn_graph import QnnTensor, TensorType
from backends.qualcomm.utils.errors import QnnLoweringError

_aten = exir_ops.edge.aten

# edge op -> (QNN type, whether the op takes `alpha`)
BINARY_OPS = {
    _aten.add.Tensor: ("ElementWiseAdd", True),
    _aten.add.Scalar: ("ElementWiseAdd", True),
    _aten.sub.Tensor: ("ElementWiseSubtract", True),
    _aten.sub.Scalar: ("ElementWiseSubtract", True),
    _aten.mul.Tensor: ("ElementWiseMultiply", False),
    _aten.mul.Scalar: ("ElementWiseMultiply", False),
    _aten.div.Tensor: ("ElementWiseDivide", False),
    _aten.div.Scalar: ("ElementWiseDivide", False),
    _aten.pow.Tensor_Scalar: ("ElementWisePower", False),
}


@register_builder
class BinaryElementwiseBuilder(NodeBuilder):
    targets = list(BINARY_OPS)
    layout_policy = LayoutPolicy.AGNOSTIC

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        ok, reason = check_float_io(node)
        if not ok:
            return ok, reason
        if len(node.args) < 2:
            return False, "expected two operands"
        if not any(isinstance(a, torch.fx.Node) for a in node.args[:2]):
            return False, "both operands are scalars"
        for a in node.args[:2]:
            if not isinstance(a, (torch.fx.Node, int, float)) or isinstance(a, bool):
                return False, f"operand {a!r} is not a tensor or number"
        return SUPPORTED

    def _scaled_second(self, gb: GraphBuilder, node: torch.fx.Node, layout: str, rank: int):
        b = node.args[1]
        alpha = node.kwargs.get("alpha", 1)
        if not isinstance(b, torch.fx.Node):
            return scalar_tensor(gb, f"{node.name}_b", float(b) * float(alpha), quantized=is_quantized(node))
        tb = operand(gb, node, b, layout, rank, "b")
        if alpha == 1:
            return tb
        if tb.quant is not None:
            raise QnnLoweringError(f"alpha={alpha} on quantized operands is not supported", node)
        scaled = gb.native_tensor(f"{node.name}_alpha_b", tb.dims)
        alpha_t = scalar_tensor(gb, f"{node.name}_alpha", float(alpha))
        gb.add_op(node, "ElementWiseMultiply", [tb, alpha_t], [scaled], suffix="alpha")
        return scaled

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        qnn_type, _ = BINARY_OPS[node.target]
        layout = input_layout(node)
        rank = len(logical_shape(node))
        a = node.args[0]
        ta = operand(gb, node, a, layout, rank, "a") if isinstance(a, torch.fx.Node) else \
            scalar_tensor(gb, f"{node.name}_a", float(a), quantized=is_quantized(node))
        tb = self._scaled_second(gb, node, layout, rank)
        if rank == 0:  # 0-d output: a [1] operand would broadcast it to [1]
            ta, tb = as_rank0(gb, node, ta, "a"), as_rank0(gb, node, tb, "b")
        gb.add_op(node, qnn_type, [ta, tb], [gb.define_output(node)])


def as_rank0(gb: GraphBuilder, node: torch.fx.Node, tensor: QnnTensor, name: str) -> QnnTensor:
    """`tensor` (one element) with dims []: STATIC scalars are stored with dims [1]
    (numpy makes 0-d arrays 1-d), which would give a 0-d op a [1] output."""
    if not tensor.dims:
        return tensor
    if tensor.type == TensorType.STATIC:
        return gb.add_tensor(f"{tensor.name}_rank0", TensorType.STATIC, tensor.data_type, [],
                             tensor.data, tensor.quant)
    out = gb.like(tensor, f"{node.name}_{name}_rank0", [])
    gb.add_op(node, "Reshape", [tensor], [out], suffix=f"{name}_rank0")
    return out
