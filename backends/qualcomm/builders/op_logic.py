"""Comparisons (eq / ne / lt / le / gt / ge, Tensor and Scalar overloads) to BOOL_8, logic on
BOOL_8 (logical_and / or / xor / not and their bitwise_ forms on bool tensors; logical_not of a
float32 / int tensor as ElementWiseEqual(x, 0)), and selection
(where, masked_fill; threshold = Select(Greater(x, t), x, value)) as ElementWiseSelect; isinf /
isnan of a graph input from its exact bits, isnan of another tensor -> IsNan (see ClassifyBuilder);
bitwise_not of an int32 / int64 tensor = -1 - x (two's complement); bitwise_and / or / xor of int32 /
int64 / uint8 tensors (Tensor and Scalar forms): byte-table lookups, op_bitwise.py. Tensors may be FLOAT_32, INT_32 / INT_64 (int64
stays INT_64 in the payload; the QNN side narrows it to INT_32) or BOOL_8.

Quantized graphs: a comparison reads its quantized inputs as they are (QnnQuantizer annotates
the inputs, not the bool output; the fold pass bypasses their dequantizes), so QNN compares
the dequantized values, as the PT2E reference does; a scalar operand becomes a quantized
constant that holds it exactly. Select's branches and output carry activation encodings."""

from __future__ import annotations

import math
from typing import List, Optional, Tuple, Union

import numpy as np
import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders import op_bitwise as bitwise
from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape
from backends.qualcomm.builders.op_elementwise import as_rank0
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.quant_encoding import is_dequantize
from backends.qualcomm.builders.registry import (
    SUPPORTED,
    NodeBuilder,
    SupportResult,
    FLOAT_DTYPES,
    is_float_dtype,
    node_val,
    register_builder,
    table_quant_annotations,
    tensor_vals,
)
from backends.qualcomm.builders.utils import is_constant, reshape, scalar_tensor
from backends.qualcomm.serialization.qnn_graph import DataType, QnnTensor, TensorType
from backends.qualcomm.utils.constants import QCOM_QUANT_ATTRS

_aten = exir_ops.edge.aten

# edge op -> QNN comparison
COMPARE_OPS = {
    _aten.eq.Tensor: QnnOpType.ElementWiseEqual,
    _aten.eq.Scalar: QnnOpType.ElementWiseEqual,
    _aten.ne.Tensor: QnnOpType.ElementWiseNotEqual,
    _aten.ne.Scalar: QnnOpType.ElementWiseNotEqual,
    _aten.lt.Tensor: QnnOpType.ElementWiseLess,
    _aten.lt.Scalar: QnnOpType.ElementWiseLess,
    _aten.le.Tensor: QnnOpType.ElementWiseLessEqual,
    _aten.le.Scalar: QnnOpType.ElementWiseLessEqual,
    _aten.gt.Tensor: QnnOpType.ElementWiseGreater,
    _aten.gt.Scalar: QnnOpType.ElementWiseGreater,
    _aten.ge.Tensor: QnnOpType.ElementWiseGreaterEqual,
    _aten.ge.Scalar: QnnOpType.ElementWiseGreaterEqual,
}
# edge op -> QNN logic op on BOOL_8 tensors
LOGIC_OPS = {
    _aten.logical_and.default: QnnOpType.ElementWiseAnd,
    _aten.bitwise_and.Tensor: QnnOpType.ElementWiseAnd,
    _aten.logical_or.default: QnnOpType.ElementWiseOr,
    _aten.bitwise_or.Tensor: QnnOpType.ElementWiseOr,
    _aten.logical_xor.default: QnnOpType.ElementWiseXor,
    _aten.bitwise_xor.Tensor: QnnOpType.ElementWiseXor,
    _aten.logical_not.default: QnnOpType.ElementWiseNot,
    _aten.bitwise_not.default: QnnOpType.ElementWiseNot,
}
# edge op -> (condition, then, else) argument positions, or None for masked_fill's own order
SELECT_OPS = {
    _aten.where.self: (0, 1, 2),
    _aten.where.ScalarOther: (0, 1, 2),
    _aten.where.ScalarSelf: (0, 1, 2),
    _aten.where.Scalar: (0, 1, 2),
    _aten.masked_fill.Scalar: (1, 2, 0),
    _aten.threshold.default: (None, 0, 2),  # x > threshold ? x : value (condition built here)
}

_VALUE_DTYPES = (torch.float32, torch.float16, torch.int32, torch.int64, torch.bool)
_NUMPY_DTYPES = {
    torch.float32: np.float32,
    torch.float16: np.float32,
    torch.int32: np.int32,
    torch.int64: np.int64,
    torch.bool: np.bool_,
}
Operand = Union[torch.fx.Node, int, float, bool]


def _dtype(arg: Operand) -> Optional[torch.dtype]:
    val = node_val(arg)
    return val.dtype if isinstance(val, torch.Tensor) else None


def _is_number(arg: object) -> bool:
    return isinstance(arg, (int, float, bool))


def _output_dtype_is(node: torch.fx.Node, dtypes) -> SupportResult:
    outputs = tensor_vals(node)
    if not outputs:
        return False, "output has no tensor meta"
    if outputs[0].dtype not in dtypes:
        return False, f"output dtype {outputs[0].dtype} is not supported"
    return SUPPORTED


def check_scalar_fits(scalar: object, dtype: torch.dtype, what: str) -> SupportResult:
    """A number operand next to a tensor of `dtype`: it must keep its value in that dtype
    (torch would compare an int tensor with 0.5 in float)."""
    if not _is_number(scalar):
        return False, f"{what} {scalar!r} is not a tensor or number"
    if dtype == torch.bool:
        return False, f"{what} {scalar!r} next to a bool tensor is not supported"
    if not is_float_dtype(dtype) and (isinstance(scalar, float) and not float(scalar).is_integer()):
        return False, f"{what} {scalar!r} is not an integer but the tensor is {dtype}"
    if not is_float_dtype(dtype) and abs(scalar) >= 2**31:
        return False, f"{what} {scalar!r} does not fit INT_32 (QNN's integer type)"
    return SUPPORTED


def number_operand(
    gb: GraphBuilder, node: torch.fx.Node, value: Union[int, float], like: torch.fx.Node, name: str
) -> QnnTensor:
    """A STATIC scalar in the data type of tensor `like`: quantized so that it holds the value
    exactly when `like` is quantized, else of its dtype."""
    attrs = like.meta.get(QCOM_QUANT_ATTRS)
    if attrs is not None:
        return scalar_tensor(gb, f"{node.name}_{name}", float(value), quantized=True, like=attrs)
    return scalar_tensor(gb, f"{node.name}_{name}", value, dtype=_NUMPY_DTYPES[_dtype(like)])


def value_operand(gb: GraphBuilder, node: torch.fx.Node, arg: Operand, like: torch.fx.Node, name: str) -> QnnTensor:
    if isinstance(arg, torch.fx.Node):
        return gb.tensor(arg)
    return number_operand(gb, node, arg, like, name)


def select_positions(node: torch.fx.Node) -> tuple:
    """(condition, then, else) argument positions of a select node (edge or aten op)."""
    for op, positions in SELECT_OPS.items():
        if node.target in (op, getattr(op, "_op", None)):
            return positions
    raise KeyError(node.target)


def padded_rank(gb: GraphBuilder, node: torch.fx.Node, tensor: QnnTensor, rank: int, name: str) -> QnnTensor:
    """`tensor` with leading 1s up to `rank` (QNN's Select refuses operands of lower rank:
    'Input[2] has incorrect Rank 0')."""
    if len(tensor.dims) >= rank:
        return tensor
    dims = [1] * (rank - len(tensor.dims)) + list(tensor.dims)
    if tensor.type == TensorType.STATIC:
        return gb.add_tensor(
            f"{tensor.name}_rank{rank}",
            TensorType.STATIC,
            tensor.data_type,
            dims,
            None if tensor.data is None else tensor.data.reshape(dims),
            tensor.quant,
        )
    return reshape(gb, node, tensor, dims, f"{name}_rank{rank}")


def _rank0(gb: GraphBuilder, node: torch.fx.Node, tensors: List[QnnTensor]) -> List[QnnTensor]:
    """0-d output: operands stored as [1] would broadcast it to [1]."""
    if logical_shape(node):
        return tensors
    return [as_rank0(gb, node, t, f"in{i}") for i, t in enumerate(tensors)]


def _bool_against_bit(node: torch.fx.Node) -> bool:
    """`mask != 0` / `mask == 1` (and their negations) of a bool tensor: the mask or its Not
    (upstream's `logical_and(x != 0, y != 0)` of bool inputs; HTP compares no BOOL_8)."""
    a, b = node.args[0], node.args[1]
    return (
        node.target in (_aten.eq.Scalar, _aten.ne.Scalar)
        and isinstance(a, torch.fx.Node)
        and _dtype(a) == torch.bool
        and _is_number(b)
        and float(b) in (0.0, 1.0)
    )


@register_builder
class CompareBuilder(NodeBuilder):
    targets = list(COMPARE_OPS)
    # Inputs annotated, the bool output not (annotators.annotate_compute).
    quant_annotations = table_quant_annotations(COMPARE_OPS.values())

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        ok, reason = _output_dtype_is(node, (torch.bool,))
        if not ok:
            return ok, reason
        a, b = node.args[0], node.args[1]
        if not isinstance(a, torch.fx.Node):
            return False, f"operand {a!r} is not a tensor"
        dtype = _dtype(a)
        if dtype not in _VALUE_DTYPES:
            return False, f"input dtype {dtype} is not supported (float32, float16, int32, int64, bool)"
        if isinstance(b, torch.fx.Node):
            if _dtype(b) != dtype:
                return False, f"inputs differ in dtype ({dtype} and {_dtype(b)}); cast them first"
            return SUPPORTED
        if (
            is_float_dtype(dtype)
            and isinstance(b, (int, float))
            and not math.isfinite(float(b))
            and QCOM_QUANT_ATTRS in a.meta
        ):
            return False, f"scalar {b!r} has no quantized form"
        if _bool_against_bit(node):
            return SUPPORTED
        return check_scalar_fits(b, dtype, "scalar")

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        a, b = node.args[0], node.args[1]
        if _bool_against_bit(node):  # x != 0, x == 1: x itself; x == 0, x != 1: Not(x)
            kept = (node.target == _aten.ne.Scalar) == (float(b) == 0.0)
            op_type = QnnOpType.Reshape if kept else QnnOpType.ElementWiseNot
            gb.add_op(node, op_type, [gb.tensor(a)], [gb.define_output(node)])
            return
        operands = _rank0(gb, node, [gb.tensor(a), value_operand(gb, node, b, a, "b")])
        gb.add_op(node, COMPARE_OPS[node.target], operands, [gb.define_output(node)])


@register_builder
class LogicBuilder(NodeBuilder):
    # bool tensors, and int tensors' bitwise ops: never quantized (op table quant = "float")
    targets = list(LOGIC_OPS) + list(bitwise.SCALAR_OPS)

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        if bitwise.is_integer_bitwise(node):
            return bitwise.check_integer_bitwise(node)
        if node.target in bitwise.SCALAR_OPS:
            return False, f"a number next to a bool tensor is not supported ({node.args[1]!r})"
        arity = 1 if LOGIC_OPS[node.target] == QnnOpType.ElementWiseNot else 2
        if _is_value_not(node):
            return _output_dtype_is(node, (torch.bool,))
        if _is_integer_not(node):
            return _output_dtype_is(node, (_dtype(node.args[0]),))
        for i, arg in enumerate(node.args[:arity]):
            if not isinstance(arg, torch.fx.Node):
                return False, f"operand {i} ({arg!r}) is not a tensor"
            if _dtype(arg) != torch.bool:
                return False, f"operand {i} has dtype {_dtype(arg)}; the other is bool"
        return _output_dtype_is(node, (torch.bool,))

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        if bitwise.is_integer_bitwise(node):
            bitwise.emit_integer_bitwise(gb, node)
            return
        arity = 1 if LOGIC_OPS[node.target] == QnnOpType.ElementWiseNot else 2
        operands = [gb.tensor(a) for a in node.args[:arity]]
        if _is_integer_not(node):  # ~x = -1 - x
            minus_one = number_operand(gb, node, -1, node.args[0], "minus_one")
            gb.add_op(
                node,
                QnnOpType.ElementWiseSubtract,
                _rank0(gb, node, [minus_one, operands[0]]),
                [gb.define_output(node)],
            )
            return
        if _is_value_not(node):  # logical_not of numbers: x == 0
            operands.append(number_operand(gb, node, 0, node.args[0], "zero"))
        if one_element_operands(node, operands):
            out = gb.define_output(node, dims=[1])
        else:
            operands, out = _rank0(gb, node, operands), gb.define_output(node)
        gb.add_op(node, QnnOpType.ElementWiseEqual if _is_value_not(node) else LOGIC_OPS[node.target], operands, [out])


def _is_value_not(node: torch.fx.Node) -> bool:
    """logical_not of a float32 / int32 / int64 tensor (all(x) of a float x exports as
    logical_not -> any -> logical_not): lowered as x == 0."""
    x = node.args[0]
    return (
        node.target == _aten.logical_not.default
        and isinstance(x, torch.fx.Node)
        and _dtype(x) in (torch.float32, torch.float16, torch.int32, torch.int64)
    )


def _is_integer_not(node: torch.fx.Node) -> bool:
    """bitwise_not of an int32 / int64 tensor: -1 - x (QNN's ElementWiseNot is logical)."""
    x = node.args[0]
    return (
        node.target == _aten.bitwise_not.default
        and isinstance(x, torch.fx.Node)
        and _dtype(x) in (torch.int32, torch.int64)
    )


def one_element_operands(node: torch.fx.Node, operands: List[QnnTensor]) -> bool:
    """A 0-d node whose operands are all stored as [1] (0-d results of builders that store them
    so, QNN refusing rank 0): its output is [1] too."""
    return not logical_shape(node) and all(list(t.dims) == [1] for t in operands)


# edge op -> QNN classification op (FLOAT_32 -> BOOL_8)
CLASSIFY_OPS = {_aten.isnan.default: QnnOpType.IsNan}
ISINF = _aten.isinf.default
# IEEE bit patterns as signed integers of the float's width: +inf, -inf (float32 0xff800000,
# float16 0xfc00); NaNs lie above +inf and between -inf and 0 (sign bit set, exponent all ones,
# mantissa not 0). float16 bits (INT_16) are widened to INT_32 before the comparisons.
INF_BITS = {DataType.INT_32: (0x7F800000, -0x800000), DataType.INT_16: (0x7C00, -0x400)}
# name -> (exact INT_32 comparison, index into INF_BITS' pair or None: compared with 0)
BIT_TESTS = {
    "pos_inf": ("ElementWiseEqual", 0),
    "neg_inf": ("ElementWiseEqual", 1),
    "pos_nan": (QnnOpType.ElementWiseGreater, 0),
    "signed": (QnnOpType.ElementWiseLess, None),
    "above_neg_inf": ("ElementWiseGreater", 1),
}


@register_builder
class ClassifyBuilder(NodeBuilder):
    """isinf / isnan of a float32 / float16 graph input: exact, from its IEEE bits. The caller's
    buffer is bound a second time as an INT_32 / INT_16 graph input (GraphBuilder.input_bits; QNN
    passes integer inputs unconverted; INT_16 is Cast to INT_32) and tested with exact INT_32
    comparisons: isinf = bits == +inf | bits ==
    -inf; isnan = bits > +inf | (bits < 0 & bits > -inf). isnan of another tensor -> IsNan, which
    on QNN is also true for +-inf and |x| > 65504 (HTP holds floats without infinities; measured).
    isinf of another tensor stays on the CPU: QNN 2.51 HTP validates IsInf but its graphFinalize
    fails ('no properties registered for q::IsInf', error 1002), and no float composition can
    tell inf from NaN there (measured: an infinite tensor compares like NaN, x != x and IsNan(x)
    are True for +-inf and for |x| > 65504, Abs(x) > 65504 and Abs(x) == inf are False)."""

    targets = list(CLASSIFY_OPS) + [ISINF]

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        x = node.args[0]
        if not isinstance(x, torch.fx.Node) or not is_float_dtype(_dtype(x)):
            return (
                False,
                f"input dtype {_dtype(x) if isinstance(x, torch.fx.Node) else x!r} is not supported (float32, float16)",
            )
        if QCOM_QUANT_ATTRS in x.meta or is_dequantize(x):
            return (
                False,
                f"{'isinf' if node.target == ISINF else 'isnan'} of a quantized tensor (which holds no NaN / inf) stays on the CPU",
            )
        if node.target == ISINF and not is_user_input(x):
            return False, (
                "isinf of a tensor that is not a graph input: QNN 2.51 HTP cannot finalize IsInf (error "
                "1002) and holds an infinite tensor like NaN (x != x, IsNan true; Abs(x) == inf false: "
                "measured); only a graph input's exact bits tell them apart"
            )
        return _output_dtype_is(node, (torch.bool,))

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x = node.args[0]
        out = gb.define_output(node)
        if not gb.is_graph_input(x):  # isnan only (is_supported)
            gb.add_op(node, CLASSIFY_OPS[node.target], _rank0(gb, node, [gb.tensor(x)]), [out])
            return
        bits = gb.input_bits(x)
        inf_bits = INF_BITS[bits.data_type]
        if bits.data_type != DataType.INT_32:
            wide = gb.native_tensor(f"{node.name}_bits_int32", bits.dims, DataType.INT_32)
            gb.add_op(node, QnnOpType.Cast, [bits], [wide], suffix="bits_int32")
            bits = wide
        if node.target == ISINF:
            positive, negative = (_bits_test(gb, node, bits, name, inf_bits) for name in ("pos_inf", "neg_inf"))
            gb.add_op(node, QnnOpType.ElementWiseOr, [positive, negative], [out])
            return
        positive, signed, above = (
            _bits_test(gb, node, bits, name, inf_bits) for name in ("pos_nan", "signed", "above_neg_inf")
        )
        negative = gb.native_tensor(f"{node.name}_neg_nan", out.dims, DataType.BOOL_8)
        gb.add_op(node, QnnOpType.ElementWiseAnd, [signed, above], [negative], suffix="neg_nan")
        gb.add_op(node, QnnOpType.ElementWiseOr, [positive, negative], [out])


def is_user_input(node: torch.fx.Node) -> bool:
    """A placeholder that is not a param / buffer / constant: a graph input of every delegate
    that reads it."""
    return node.op == "placeholder" and not is_constant(node)


def _bits_test(
    gb: GraphBuilder, node: torch.fx.Node, bits: QnnTensor, name: str, inf_bits: Tuple[int, int]
) -> QnnTensor:
    """BOOL_8 result of BIT_TESTS[name] on INT_32 `bits` (an exact comparison with +inf's / -inf's
    bits `inf_bits` or 0)."""
    op_type, which = BIT_TESTS[name]
    value = 0 if which is None else inf_bits[which]
    operands = _rank0(gb, node, [bits, scalar_tensor(gb, f"{node.name}_{name}_bits", value, dtype=np.int32)])
    out = gb.native_tensor(f"{node.name}_{name}", logical_shape(node), DataType.BOOL_8)
    gb.add_op(node, op_type, operands, [out], suffix=name)
    return out


@register_builder
class WhereBuilder(NodeBuilder):
    targets = list(SELECT_OPS)
    # Export keeps number branches (where.ScalarOther, masked_fill.Scalar); ExecuTorch would
    # make them scalar_tensor nodes.
    keep_whole = [op for op in SELECT_OPS if op != _aten.where.self]
    quant_annotations = table_quant_annotations([QnnOpType.ElementWiseSelect])

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        if select_positions(node)[0] is None:
            return self._threshold_supported(node)
        c, x, y = (node.args[i] for i in select_positions(node))
        if not isinstance(c, torch.fx.Node) or _dtype(c) != torch.bool:
            return False, f"condition must be a bool tensor (got {_dtype(c) if isinstance(c, torch.fx.Node) else c!r})"
        ok, reason = _output_dtype_is(node, _VALUE_DTYPES)
        if not ok:
            return ok, reason
        out_dtype = tensor_vals(node)[0].dtype
        quantized = QCOM_QUANT_ATTRS in node.meta
        for what, arg in (("then", x), ("else", y)):
            if isinstance(arg, torch.fx.Node):
                if _dtype(arg) != out_dtype:
                    return False, f"{what} branch dtype {_dtype(arg)} differs from the output's {out_dtype}"
                continue
            ok, reason = check_scalar_fits(arg, out_dtype, f"{what} value")
            if not ok:
                return ok, reason
            if quantized and not math.isfinite(float(arg)):
                return False, f"{what} value {arg!r} has no quantized form"
        return SUPPORTED

    def _threshold_supported(self, node: torch.fx.Node) -> SupportResult:
        x, threshold, value = node.args[0], node.args[1], node.args[2]
        if not isinstance(x, torch.fx.Node) or not is_float_dtype(_dtype(x)):
            return False, "threshold of a non-float tensor is not supported"
        for what, number in (("threshold", threshold), ("value", value)):
            if not isinstance(number, (int, float)) or isinstance(number, bool) or not math.isfinite(float(number)):
                return False, f"threshold {what} {number!r} must be a finite number"
        return _output_dtype_is(node, FLOAT_DTYPES)

    def _condition(self, gb: GraphBuilder, node: torch.fx.Node, c: Optional[torch.fx.Node]) -> QnnTensor:
        """The condition tensor; threshold's is Greater(x, threshold), BOOL_8."""
        if c is not None:
            return gb.tensor(c)
        x = node.args[0]
        above = gb.native_tensor(f"{node.name}_above", gb.tensor(x).dims, DataType.BOOL_8)
        gb.add_op(
            node,
            QnnOpType.ElementWiseGreater,
            [gb.tensor(x), number_operand(gb, node, node.args[1], x, "threshold")],
            [above],
            suffix="above",
        )
        return above

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        positions = select_positions(node)
        c = node.args[positions[0]] if positions[0] is not None else None
        x, y = node.args[positions[1]], node.args[positions[2]]
        out = gb.define_output(node)
        operands = [self._condition(gb, node, c), self._branch(gb, node, x, "then"), self._branch(gb, node, y, "else")]
        rank = len(out.dims)
        operands = [padded_rank(gb, node, t, rank, name) for t, name in zip(operands, ("condition", "then", "else"))]
        gb.add_op(node, QnnOpType.ElementWiseSelect, _rank0(gb, node, operands), [out])

    def _branch(self, gb: GraphBuilder, node: torch.fx.Node, arg: Operand, name: str) -> QnnTensor:
        if isinstance(arg, torch.fx.Node):
            return gb.tensor(arg)
        attrs = node.meta.get(QCOM_QUANT_ATTRS)
        if attrs is not None:  # the code of the output encoding: Select copies it, as PT2E rounds it
            code = np.clip(np.rint(float(arg) / float(attrs.scale)) + int(attrs.zero_point), attrs.qmin, attrs.qmax)
            return gb.quantized_static(f"{node.name}_{name}", np.array([code], np.int64), attrs)
        return scalar_tensor(gb, f"{node.name}_{name}", arg, dtype=_NUMPY_DTYPES[tensor_vals(node)[0].dtype])
