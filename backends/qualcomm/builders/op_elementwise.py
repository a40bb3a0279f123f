"""Binary elementwise ops: add / sub / mul / div (Tensor and Scalar overloads), pow(x, scalar),
maximum / minimum."""
from __future__ import annotations

import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape
from backends.qualcomm.builders.registry import (
    LayoutPolicy, NodeBuilder, SUPPORTED, SupportResult, check_float_io, register_builder,
    table_quant_annotations,
)
from backends.qualcomm.builders.utils import input_layout, is_quantized, operand, scalar_tensor
from backends.qualcomm.serialization.qnn_graph import QnnTensor, TensorType, uint32_tensor
from backends.qualcomm.utils.constants import QCOM_QUANT_ATTRS
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
    _aten.maximum.default: ("ElementWiseMaximum", False),
    _aten.minimum.default: ("ElementWiseMinimum", False),
}


@register_builder
class BinaryElementwiseBuilder(NodeBuilder):
    targets = list(BINARY_OPS)
    # The aten ops the op table lists for these QNN types (add_, mul_, rsub.Scalar included).
    quant_annotations = table_quant_annotations(qnn_type for qnn_type, _ in BINARY_OPS.values())
    layout_policy = LayoutPolicy.AGNOSTIC
    channel_last_any_rank = True

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
            return scalar_tensor(gb, f"{node.name}_b", float(b) * float(alpha), quantized=is_quantized(node),
                                 like=output_encoding(node))
        tb = quantized_scalar_constant(gb, node, b, "b") or operand(gb, node, b, layout, rank, "b")
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
        if isinstance(a, torch.fx.Node):
            ta = quantized_scalar_constant(gb, node, a, "a") or operand(gb, node, a, layout, rank, "a")
        else:
            ta = scalar_tensor(gb, f"{node.name}_a", float(a), quantized=is_quantized(node),
                               like=output_encoding(node))
        tb = self._scaled_second(gb, node, layout, rank)
        if rank == 0:  # 0-d output: a [1] operand would broadcast it to [1]
            ta, tb = as_rank0(gb, node, ta, "a"), as_rank0(gb, node, tb, "b")
        out = gb.define_output(node)
        if feeds_layer_norm(node):
            ta, tb = tiled_to(gb, node, ta, out.dims, "a"), tiled_to(gb, node, tb, out.dims, "b")
        gb.add_op(node, qnn_type, [ta, tb], [out])


def quantized_scalar_constant(gb: GraphBuilder, node: torch.fx.Node, arg: torch.fx.Node, name: str):
    """A one-element float constant operand of a quantized op (export lifts `x + 2.5` to a
    constant tensor) as a quantized scalar of the op's data type (QNN's op validation refuses
    a FLOAT_32 operand: error 3110 'mismatching datatypes'); None otherwise."""
    data = gb.constant_data(arg)
    if output_encoding(node) is None or data is None or data.numel() != 1 or not data.is_floating_point() \
            or QCOM_QUANT_ATTRS in arg.meta:
        return None
    return scalar_tensor(gb, f"{node.name}_{name}", float(data.reshape(-1)[0]), quantized=True,
                         like=output_encoding(node))


def output_encoding(node: torch.fx.Node):
    """The output encoding of a quantized op (None when float): its scalar operands are
    quantized in the same data type."""
    attrs = node.meta.get(QCOM_QUANT_ATTRS)
    return attrs


_LAYER_NORM_OPS = (_aten.native_layer_norm.default, _aten.layer_norm.default)


def feeds_layer_norm(node: torch.fx.Node) -> bool:
    """`node` reaches a LayerNorm through binary elementwise ops only (which HTP fuses)."""
    return any(user.target in _LAYER_NORM_OPS or (user.target in BINARY_OPS and feeds_layer_norm(user))
               for user in node.users)


def tiled_to(gb: GraphBuilder, node: torch.fx.Node, tensor: QnnTensor, dims, name: str) -> QnnTensor:
    """`tensor` repeated to `dims` (same rank). QNN 2.51's HTP fuses a broadcasting elementwise
    op into the LayerNorm after it and then computes every batch row but the first wrongly
    (fp16 and quantized, measured: max error 3 on outputs of magnitude 4); equal shapes are
    exact. Operands of scalars or of another rank are left alone."""
    if len(tensor.dims) != len(dims) or list(tensor.dims) == list(dims) or not tensor.dims:
        return tensor
    if any(d not in (1, o) for d, o in zip(tensor.dims, dims)) or all(d == 1 for d in tensor.dims):
        return tensor
    multiples = [o // d for d, o in zip(tensor.dims, dims)]
    tiled = gb.like(tensor, f"{node.name}_{name}_tiled", list(dims))
    gb.add_op(node, "Tile", [tensor], [tiled], [uint32_tensor("multiples", multiples)], suffix=f"{name}_tile")
    return tiled


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
