"""Binary elementwise ops: add / sub / mul / div (Tensor and Scalar overloads), pow (tensor ^ scalar,
tensor ^ tensor, scalar ^ tensor), maximum / minimum, floor_divide (div rounding_mode='floor'),
remainder and fmod (float32; add / sub / mul, floor_divide, remainder and fmod take int32 / int64
tensors too: QNN's INT_32 Add / Subtract / Multiply saturate on overflow, the host engine's too). Where QNN 2.51's HTP refuses the
single op (fmod always, float / quantized remainder, integer floor_divide) or gets it wrong (float
floor_divide), op_division.py composes it from ops HTP takes."""

from __future__ import annotations

import dataclasses

from typing import Optional

import numpy as np
import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders import op_division as division
from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.registry import (
    SUPPORTED,
    LayoutPolicy,
    NodeBuilder,
    QuantFamily,
    SupportResult,
    aten_ops,
    check_float_io,
    register_builder,
    table_quant_annotations,
    tensor_vals,
)
from backends.qualcomm.builders.utils import input_layout, is_quantized, operand, scalar_tensor
from backends.qualcomm.serialization.qnn_graph import QnnTensor, TensorType, uint32_tensor
from backends.qualcomm.utils.constants import QCOM_BEYOND_INT32, QCOM_QUANT_ATTRS
from backends.qualcomm.utils.errors import QnnLoweringError

_aten = exir_ops.edge.aten

# edge op -> (QNN type, whether the op takes `alpha`)
BINARY_OPS = {
    _aten.add.Tensor: (QnnOpType.ElementWiseAdd, True),
    _aten.add.Scalar: (QnnOpType.ElementWiseAdd, True),
    _aten.sub.Tensor: (QnnOpType.ElementWiseSubtract, True),
    _aten.sub.Scalar: (QnnOpType.ElementWiseSubtract, True),
    _aten.mul.Tensor: (QnnOpType.ElementWiseMultiply, False),
    _aten.mul.Scalar: (QnnOpType.ElementWiseMultiply, False),
    _aten.div.Tensor: (QnnOpType.ElementWiseDivide, False),
    _aten.div.Scalar: (QnnOpType.ElementWiseDivide, False),
    _aten.pow.Tensor_Scalar: (QnnOpType.ElementWisePower, False),
    _aten.pow.Tensor_Tensor: (QnnOpType.ElementWisePower, False),
    _aten.pow.Scalar: (QnnOpType.ElementWisePower, False),
    _aten.div.Tensor_mode: (QnnOpType.ElementWiseFloorDiv, False),  # rounding_mode None: ElementWiseDivide
    _aten.remainder.Tensor: (QnnOpType.ElementWiseMod, False),
    _aten.remainder.Scalar: (QnnOpType.ElementWiseMod, False),
    _aten.maximum.default: (QnnOpType.ElementWiseMaximum, False),
    _aten.minimum.default: (QnnOpType.ElementWiseMinimum, False),
}


# QNN types whose builder rows also take int32 / int64 tensors (the kernels compute in the
# tensors' integer type; a number operand must then be an integer).
INTEGER_OPS = (
    QnnOpType.ElementWiseFloorDiv,
    QnnOpType.ElementWiseMod,
    QnnOpType.ElementWiseAdd,
    QnnOpType.ElementWiseSubtract,
    QnnOpType.ElementWiseMultiply,
)
# fmod: always a composition (QNN 2.51 HTP has no ElementWiseFmod: 3110 'OpValidator not found').
FMOD_OPS = (_aten.fmod.Tensor, _aten.fmod.Scalar)
_INT_DTYPES = {torch.int32: np.int32, torch.int64: np.int64}


def qnn_binary_type(node: torch.fx.Node) -> str:
    """The QNN type of a binary node (div.Tensor_mode: by its rounding mode; fmod: "fmod", a
    composition)."""
    if node.target in FMOD_OPS:
        return "fmod"
    if node.target == _aten.div.Tensor_mode and node.kwargs.get("rounding_mode") is None:
        return QnnOpType.ElementWiseDivide
    if node.target == _aten.div.Tensor_mode and node.kwargs.get("rounding_mode") == "trunc":
        return "trunc_divide"
    return BINARY_OPS[node.target][0]


def _integer_dtype(node: torch.fx.Node) -> Optional[torch.dtype]:
    """int32 / int64 when the node's output is an integer tensor, else None."""
    vals = tensor_vals(node)
    return vals[0].dtype if vals and vals[0].dtype in _INT_DTYPES else None


def _check_integer_io(node: torch.fx.Node, dtype: torch.dtype) -> SupportResult:
    """Integer add / sub / mul / floor_divide / remainder / fmod: every tensor operand has the
    output's dtype, numbers (and alpha, and a number times alpha) are integers that fit INT_32."""
    for i, arg in enumerate(node.args[:2]):
        if isinstance(arg, torch.fx.Node):
            vals = tensor_vals(arg)
            if not vals or vals[0].dtype != dtype:
                return False, f"input {i} has dtype {vals[0].dtype if vals else None}, the output {dtype}"
            if arg.meta.get(QCOM_BEYOND_INT32):
                return False, f"constant input {i} holds values that do not fit INT_32 (QNN's integer type)"
        elif isinstance(arg, bool) or not (isinstance(arg, int) or (isinstance(arg, float) and arg.is_integer())):
            return False, f"operand {arg!r} is not an integer but the tensors are {dtype}"
        elif abs(arg) >= 2**31:
            return False, f"operand {arg!r} does not fit INT_32 (QNN's integer type)"
    alpha = node.kwargs.get("alpha", 1)
    if isinstance(alpha, bool) or not isinstance(alpha, int) or abs(alpha) >= 2**31:
        return False, f"alpha={alpha!r} is not an integer that fits INT_32"
    if len(node.args) > 1 and not isinstance(node.args[1], torch.fx.Node) and abs(int(node.args[1]) * alpha) >= 2**31:
        return False, f"operand {node.args[1]!r} * alpha {alpha} does not fit INT_32 (QNN's integer type)"
    return SUPPORTED


def composed(node: torch.fx.Node, int_dtype: Optional[torch.dtype]) -> bool:
    """The cases QNN 2.51 HTP refuses as one op (measured), lowered by op_division.py: fmod; float /
    quantized remainder (ElementWiseMod: INT_32 only, 3110 FLOAT_16 'Input[0] has incorrect data
    type', 8/16-bit 'Unsupported input/output datatypes'); integer floor_divide (INT_32
    ElementWiseFloorDiv: 3110 'Unsupported input/output datatypes'); float / quantized
    floor_divide (HTP's fp16 ElementWiseFloorDiv gives one less at an exact integer quotient:
    3 // 1.5 = 1)."""
    qnn_type = qnn_binary_type(node)
    return qnn_type in ("fmod", "trunc_divide", QnnOpType.ElementWiseFloorDiv) or (
        qnn_type == QnnOpType.ElementWiseMod and int_dtype is None
    )


def _check_qnn_refusals(node: torch.fx.Node) -> SupportResult:
    """Cases kept on the CPU (measured)."""
    alpha = node.kwargs.get("alpha", 1)
    b = node.args[1] if len(node.args) > 1 else None
    if alpha != 1 and isinstance(b, torch.fx.Node) and QCOM_QUANT_ATTRS in b.meta:
        attrs = b.meta[QCOM_QUANT_ATTRS]
        if not float(alpha) > 0 or getattr(attrs, "axis", -1) >= 0:
            return False, f"alpha={alpha} on a quantized operand: only alpha > 0 on a per-tensor encoding"
    if node.target == _aten.pow.Scalar and (
        is_quantized(node) or any(QCOM_QUANT_ATTRS in a.meta for a in node.all_input_nodes)
    ):
        return False, (
            "quantized scalar ^ tensor (pow.Scalar) is not supported: its 8-bit result was measured "
            "wrong (max 255 steps from the QDQ reference)"
        )
    return SUPPORTED


def _check_rounding_mode(node: torch.fx.Node) -> SupportResult:
    mode = node.kwargs.get("rounding_mode")
    if node.target == _aten.div.Tensor_mode and mode not in (None, "floor", "trunc"):
        return False, f"div rounding_mode={mode!r} is not supported (None, 'floor' or 'trunc')"
    return SUPPORTED


@register_builder
class BinaryElementwiseBuilder(NodeBuilder):
    targets = list(BINARY_OPS) + list(FMOD_OPS)
    # The aten ops the op table lists for these QNN types (add_, mul_, rsub.Scalar included), and fmod.
    quant_annotations = {
        **table_quant_annotations(qnn_type for qnn_type, _ in BINARY_OPS.values()),
        **dict.fromkeys(aten_ops("fmod.Tensor", "fmod.Scalar"), QuantFamily.COMPUTE),
    }
    layout_policy = LayoutPolicy.AGNOSTIC
    channel_last_any_rank = True

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        ok, reason = _check_rounding_mode(node)
        if not ok:
            return ok, reason
        int_dtype = _integer_dtype(node) if qnn_binary_type(node) in INTEGER_OPS + ("fmod",) else None
        ok, reason = check_float_io(node) if int_dtype is None else _check_integer_io(node, int_dtype)
        if not ok:
            return ok, reason
        ok, reason = _check_qnn_refusals(node)
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
            return number_operand(gb, node, float(b) * float(alpha), "b")
        scalar = quantized_scalar_constant(gb, node, b, "b", float(alpha))
        if scalar is not None:  # alpha * the constant, quantized as one number
            return scalar
        tb = operand(gb, node, b, layout, rank, "b")
        if alpha == 1:
            return tb
        if tb.quant is not None:
            return self._quantized_alpha(gb, node, b, tb, float(alpha))
        scaled = gb.native_tensor(f"{node.name}_alpha_b", tb.dims, tb.data_type)
        int_dtype = _integer_dtype(node)
        alpha_t = (
            scalar_tensor(gb, f"{node.name}_alpha", float(alpha))
            if int_dtype is None
            else scalar_tensor(gb, f"{node.name}_alpha", int(alpha), dtype=_INT_DTYPES[int_dtype])
        )
        gb.add_op(node, QnnOpType.ElementWiseMultiply, [tb, alpha_t], [scaled], suffix="alpha")
        return scaled

    @staticmethod
    def _quantized_alpha(gb: GraphBuilder, node: torch.fx.Node, b: torch.fx.Node, tb, alpha: float):
        """alpha * b for a quantized b (alpha > 0): Multiply by alpha held exactly (code qmax),
        into b's encoding with alpha times its scale: the same codes, so no rounding."""
        attrs = b.meta.get(QCOM_QUANT_ATTRS)
        if not alpha > 0 or tb.quant.axis >= 0 or attrs is None:
            raise QnnLoweringError(f"alpha={alpha} on a per-channel or unannotated quantized operand", node)
        quant = dataclasses.replace(tb.quant, scale=tb.quant.scale * alpha)
        scaled = gb.native_tensor(f"{node.name}_alpha_b", tb.dims, tb.data_type, quant)
        alpha_t = scalar_tensor(gb, f"{node.name}_alpha", alpha, quantized=True, like=attrs)
        gb.add_op(node, QnnOpType.ElementWiseMultiply, [tb, alpha_t], [scaled], suffix="alpha")
        return scaled

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        layout = input_layout(node)
        rank = len(logical_shape(node))
        a = node.args[0]
        if isinstance(a, torch.fx.Node):
            ta = quantized_scalar_constant(gb, node, a, "a") or operand(gb, node, a, layout, rank, "a")
        else:
            ta = number_operand(gb, node, float(a), "a")
        tb = self._scaled_second(gb, node, layout, rank)
        one_element = rank == 0 and list(ta.dims) == [1] and list(tb.dims) == [1]
        if rank == 0 and not one_element:  # 0-d output: a [1] operand would broadcast it to [1]
            ta, tb = as_rank0(gb, node, ta, "a"), as_rank0(gb, node, tb, "b")
        # 0-d results of builders that store them as [1] (QNN refuses rank 0): the output too
        out = gb.define_output(node, dims=[1] if one_element else None)
        if feeds_layer_norm(node):
            ta, tb = tiled_to(gb, node, ta, out.dims, "a"), tiled_to(gb, node, tb, out.dims, "b")
        int_dtype = _integer_dtype(node)
        if composed(node, int_dtype):
            _compose(gb, node, int_dtype, ta, tb, out)
            return
        qnn_type, _ = BINARY_OPS[node.target]
        if qnn_binary_type(node) == QnnOpType.ElementWiseDivide:  # div.Tensor_mode, rounding_mode None
            qnn_type = QnnOpType.ElementWiseDivide
        gb.add_op(node, qnn_type, [ta, tb], [out])


def _compose(
    gb: GraphBuilder,
    node: torch.fx.Node,
    int_dtype: Optional[torch.dtype],
    ta: QnnTensor,
    tb: QnnTensor,
    out: QnnTensor,
) -> None:
    if qnn_binary_type(node) == "trunc_divide":
        division.trunc_divide(gb, node, ta, tb, out)
    elif int_dtype is None and qnn_binary_type(node) == QnnOpType.ElementWiseFloorDiv:
        division.float_floor_divide(gb, node, ta, tb, out)
    elif int_dtype is None:
        division.float_remainder(gb, node, ta, tb, out, truncate=node.target in FMOD_OPS)
    elif node.target in FMOD_OPS:
        division.integer_fmod(gb, node, ta, tb, out)
    else:
        division.integer_floor_divide(gb, node, ta, tb, out)


def number_operand(gb: GraphBuilder, node: torch.fx.Node, value: float, name: str) -> QnnTensor:
    """A number operand: in the integer dtype of an integer node, else a float32 scalar
    (quantized exactly in the output's data type when the node is quantized)."""
    int_dtype = _integer_dtype(node)
    if int_dtype is not None:
        return scalar_tensor(gb, f"{node.name}_{name}", int(value), dtype=_INT_DTYPES[int_dtype])
    return scalar_tensor(gb, f"{node.name}_{name}", value, quantized=is_quantized(node), like=output_encoding(node))


def quantized_scalar_constant(
    gb: GraphBuilder, node: torch.fx.Node, arg: torch.fx.Node, name: str, factor: float = 1.0
):
    """A one-element float constant operand of a quantized op (export lifts `x + 2.5` to a
    constant tensor), times `factor` (add / sub's alpha), as a quantized scalar of the op's data
    type (QNN's op validation refuses a FLOAT_32 operand: error 3110 'mismatching datatypes');
    None otherwise."""
    data = gb.constant_data(arg)
    if (
        output_encoding(node) is None
        or data is None
        or data.numel() != 1
        or not data.is_floating_point()
        or QCOM_QUANT_ATTRS in arg.meta
    ):
        return None
    return scalar_tensor(
        gb, f"{node.name}_{name}", float(data.reshape(-1)[0]) * factor, quantized=True, like=output_encoding(node)
    )


def output_encoding(node: torch.fx.Node):
    """The output encoding of a quantized op (None when float): its scalar operands are
    quantized in the same data type."""
    attrs = node.meta.get(QCOM_QUANT_ATTRS)
    return attrs


_LAYER_NORM_OPS = (_aten.native_layer_norm.default, _aten.layer_norm.default)


def feeds_layer_norm(node: torch.fx.Node) -> bool:
    """`node` reaches a LayerNorm through binary elementwise ops only (which HTP fuses)."""
    return any(
        user.target in _LAYER_NORM_OPS or (user.target in BINARY_OPS and feeds_layer_norm(user)) for user in node.users
    )


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
    gb.add_op(node, QnnOpType.Tile, [tensor], [tiled], [uint32_tensor("multiples", multiples)], suffix=f"{name}_tile")
    return tiled


def as_rank0(gb: GraphBuilder, node: torch.fx.Node, tensor: QnnTensor, name: str) -> QnnTensor:
    """`tensor` (one element) with dims []: STATIC scalars are stored with dims [1]
    (numpy makes 0-d arrays 1-d), which would give a 0-d op a [1] output."""
    if not tensor.dims:
        return tensor
    if tensor.type == TensorType.STATIC:
        return gb.add_tensor(f"{tensor.name}_rank0", TensorType.STATIC, tensor.data_type, [], tensor.data, tensor.quant)
    out = gb.like(tensor, f"{node.name}_{name}_rank0", [])
    gb.add_op(node, QnnOpType.Reshape, [tensor], [out], suffix=f"{name}_rank0")
    return out
