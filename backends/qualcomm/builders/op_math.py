"""Math ops QNN has no single op for, decomposed into ops it has (and leaky_relu = Prelu with a
one-element STATIC slope):
clamp(x, min_tensor, max_tensor) = Minimum(Maximum(x, min), max); reciprocal(x) = Divide(1, x);
log2 / log10(x) = Log(x) * (1 / ln 2 | 1 / ln 10); log1p(x) = Log(x + 1); expm1(x) = Exp(x) - 1;
prelu(x, weight) = Prelu with the weight as a slope along axis 1 (one element: all channels);
trunc(x) = Select(x < 0, Ceil(x), Floor(x)) (float and quantized: Ceil / Floor in the output's
encoding, a lane selects only the one in range). Float chains (_RECIPES, with log2 / log10 / log1p /
expm1 above):
tan = Sin / Cos; sinh / cosh = (e -/+ 1 / e) / 2 with e = Exp(x);
asinh = sign(x) * Log(|x| + Sqrt(x^2 + 1)); acosh = Log(x + Sqrt((x - 1)(x + 1)));
atanh = Log((1 + x) / (1 - x)) / 2; acos = pi / 2 - Atan(x * Rsqrt((1 - x)(1 + x)));
atan2(y, x) = x == 0 ? sign(y) pi / 2 : Atan(y / x) + (x < 0 ? (y >= 0 ? pi : -pi) : 0) (no division by
zero: atan2(0, 0) = 0 as torch).
fp16 overflows x^2 for |x| > 256 (asinh / acosh give inf there).

Quantized graphs: clamp's intermediate takes the output's encoding (values above it saturate,
then the Minimum bounds them); reciprocal's 1 is an exact quantized constant. The unary float
chains (all but atan2) with per-tensor uint8 / uint16 input and output are a lookup table
instead (op_lookup.py: Gather of the QDQ reference's output codes by the input code, exact);
atan2 with per-tensor uint16 inputs and output is exact integer ops and table lookups
(op_atan2.py, within 1 step). 8-bit atan2 and other encodings run the chains between a
Dequantize of each input and a Quantize to the output's encoding (QNN HTP refuses a FLOAT_32
operand of a quantized op, 3110 'mismatching datatypes', measured on QNN 2.51, but takes float
ops between Dequantize and Quantize); HTP runs them in fp16."""

from __future__ import annotations

import math
from typing import Callable, Dict, List, Tuple

import numpy as np
import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.registry import (
    LayoutPolicy,
    NodeBuilder,
    QuantFamily,
    SUPPORTED,
    SupportResult,
    aten_ops,
    check_float_io,
    node_val,
    register_builder,
)
from backends.qualcomm.builders.op_logic import number_operand, padded_rank
from backends.qualcomm.builders.op_atan2 import emit_atan2
from backends.qualcomm.builders.op_lookup import emit_lookup
from backends.qualcomm.builders.quant_encoding import is_dequantize, is_quantize
from backends.qualcomm.builders.utils import dequantized, input_layout, is_quantized, reshape
from backends.qualcomm.serialization.qnn_graph import DataType, QnnTensor, TensorType
from backends.qualcomm.utils.constants import LAYOUT_CHANNEL_LAST, QCOM_QUANT_ATTRS

_aten = exir_ops.edge.aten


class _Chain:
    """Emits a float decomposition of `node`: op() adds one QNN op with a FLOAT_32 (or BOOL_8)
    intermediate output; the last op of a recipe writes the node's output (last())."""

    def __init__(self, gb: GraphBuilder, node: torch.fx.Node, out: QnnTensor, inputs: List[QnnTensor]):
        self.gb, self.node, self.out, self._count = gb, node, out, 0
        self.inputs = inputs
        self.x = self.inputs[0]

    def const(self, value: float) -> QnnTensor:
        self._count += 1
        return self.gb.static_tensor(
            f"{self.node.name}_c{self._count}", np.full([1] * len(self.out.dims), value, np.float32)
        )

    def op(self, qnn_type: str, *inputs: QnnTensor, boolean: bool = False) -> QnnTensor:
        self._count += 1
        dims = list(np.broadcast_shapes(*(tuple(t.dims) for t in inputs)))
        result = self.gb.native_tensor(
            f"{self.node.name}_t{self._count}", dims, DataType.BOOL_8 if boolean else DataType.FLOAT_32
        )
        self.gb.add_op(self.node, qnn_type, list(inputs), [result], suffix=f"{qnn_type[11:].lower()}{self._count}")
        return result

    def last(self, qnn_type: str, *inputs: QnnTensor) -> None:
        self.gb.add_op(self.node, qnn_type, list(inputs), [self.out])


def _tan(c: _Chain) -> None:
    c.last(QnnOpType.ElementWiseDivide, c.op(QnnOpType.ElementWiseSin, c.x), c.op(QnnOpType.ElementWiseCos, c.x))


def _hyperbolic(combine: str) -> Callable[[_Chain], None]:
    def recipe(c: _Chain) -> None:
        e = c.op(QnnOpType.ElementWiseExp, c.x)
        c.last(
            QnnOpType.ElementWiseMultiply,
            c.op(combine, e, c.op(QnnOpType.ElementWiseDivide, c.const(1.0), e)),
            c.const(0.5),
        )

    return recipe


def _asinh(c: _Chain) -> None:
    a = c.op(QnnOpType.ElementWiseAbs, c.x)
    square_plus_one = c.op(QnnOpType.ElementWiseAdd, c.op(QnnOpType.ElementWiseMultiply, a, a), c.const(1.0))
    root = c.op(QnnOpType.ElementWiseSquareRoot, square_plus_one)
    sign = c.op(QnnOpType.ElementWiseSign, c.x)
    c.last(QnnOpType.ElementWiseMultiply, sign, c.op(QnnOpType.ElementWiseLog, c.op(QnnOpType.ElementWiseAdd, a, root)))


def _one_minus_x_times_one_plus_x(c: _Chain, sign: float) -> QnnTensor:
    """(1 - x)(1 + x) (sign 1) or (x - 1)(x + 1) (sign -1), without x^2's cancellation near 1."""
    low = (
        c.op(QnnOpType.ElementWiseSubtract, c.const(1.0), c.x)
        if sign > 0
        else c.op(QnnOpType.ElementWiseSubtract, c.x, c.const(1.0))
    )
    return c.op(QnnOpType.ElementWiseMultiply, low, c.op(QnnOpType.ElementWiseAdd, c.x, c.const(1.0)))


def _acosh(c: _Chain) -> None:
    root = c.op(QnnOpType.ElementWiseSquareRoot, _one_minus_x_times_one_plus_x(c, -1.0))
    c.last(QnnOpType.ElementWiseLog, c.op(QnnOpType.ElementWiseAdd, c.x, root))


def _atanh(c: _Chain) -> None:
    ratio = c.op(
        QnnOpType.ElementWiseDivide,
        c.op(QnnOpType.ElementWiseAdd, c.const(1.0), c.x),
        c.op(QnnOpType.ElementWiseSubtract, c.const(1.0), c.x),
    )
    c.last(QnnOpType.ElementWiseMultiply, c.op(QnnOpType.ElementWiseLog, ratio), c.const(0.5))


def _acos(c: _Chain) -> None:
    inv = c.op(QnnOpType.ElementWiseRsqrt, _one_minus_x_times_one_plus_x(c, 1.0))
    half_pi = c.const(math.pi / 2)
    c.last(
        QnnOpType.ElementWiseSubtract,
        half_pi,
        c.op(QnnOpType.ElementWiseAtan, c.op(QnnOpType.ElementWiseMultiply, c.x, inv)),
    )


def _atan2(c: _Chain) -> None:
    """Atan(y / x) plus the quadrant's offset off the y axis; on it (x == 0) sign(y) pi / 2, so
    that no division by zero happens (atan2(0, 0) = 0 as torch; HTP's fp16 Atan never sees inf)."""
    y, x = c.inputs
    on_y_axis = c.op(QnnOpType.ElementWiseEqual, x, c.const(0.0), boolean=True)
    divisor = c.op(QnnOpType.ElementWiseSelect, on_y_axis, c.const(1.0), x)
    base = c.op(QnnOpType.ElementWiseAtan, c.op(QnnOpType.ElementWiseDivide, y, divisor))
    turn = c.op(
        QnnOpType.ElementWiseSelect,
        c.op(QnnOpType.ElementWiseGreaterEqual, y, c.const(0.0), boolean=True),
        c.const(math.pi),
        c.const(-math.pi),
    )
    negative = c.op(QnnOpType.ElementWiseLess, x, c.const(0.0), boolean=True)
    offset = c.op(QnnOpType.ElementWiseSelect, negative, turn, c.const(0.0))
    off_axis = c.op(QnnOpType.ElementWiseAdd, base, offset)
    on_axis = c.op(QnnOpType.ElementWiseMultiply, c.op(QnnOpType.ElementWiseSign, y), c.const(math.pi / 2))
    c.last(QnnOpType.ElementWiseSelect, on_y_axis, on_axis, off_axis)


def _scaled_log(factor: float) -> Callable[[_Chain], None]:
    def recipe(c: _Chain) -> None:
        c.last(QnnOpType.ElementWiseMultiply, c.op(QnnOpType.ElementWiseLog, c.x), c.const(factor))

    return recipe


def _expm1(c: _Chain) -> None:
    c.last(QnnOpType.ElementWiseSubtract, c.op(QnnOpType.ElementWiseExp, c.x), c.const(1.0))


def _log1p(c: _Chain) -> None:
    c.last(QnnOpType.ElementWiseLog, c.op(QnnOpType.ElementWiseAdd, c.x, c.const(1.0)))


# Decompositions: edge op -> recipe (in float; quantized graphs run them between Dequantize and Quantize).
_RECIPES: Dict[object, Callable[[_Chain], None]] = {
    _aten.log2.default: _scaled_log(1.0 / math.log(2.0)),
    _aten.log10.default: _scaled_log(1.0 / math.log(10.0)),
    _aten.expm1.default: _expm1,
    _aten.log1p.default: _log1p,
    _aten.tan.default: _tan,
    _aten.sinh.default: _hyperbolic(QnnOpType.ElementWiseSubtract),
    _aten.cosh.default: _hyperbolic(QnnOpType.ElementWiseAdd),
    _aten.asinh.default: _asinh,
    _aten.acosh.default: _acosh,
    _aten.atanh.default: _atanh,
    _aten.acos.default: _acos,
    _aten.atan2.default: _atan2,
}


_INTEGER_DTYPES = (torch.int32, torch.int64)


def _integer_inputs(node: torch.fx.Node) -> Tuple[int, ...]:
    """Positions of int32 / int64 tensor inputs, which torch promotes to the float output (atan2
    of two int tensors): the decomposition casts them to FLOAT_32 first."""
    return tuple(
        i
        for i, a in enumerate(node.args)
        if isinstance(a, torch.fx.Node) and getattr(node_val(a), "dtype", None) in _INTEGER_DTYPES
    )


def _as_float(gb: GraphBuilder, node: torch.fx.Node, x: QnnTensor, index: int) -> QnnTensor:
    if x.data_type not in (DataType.INT_32, DataType.INT_64):
        return x
    out = gb.native_tensor(f"{node.name}_input{index}_float", x.dims, DataType.FLOAT_32)
    gb.add_op(node, QnnOpType.Cast, [x], [out], suffix=f"input{index}_float")
    return out


def reads_quantized(node: torch.fx.Node) -> bool:
    """A tensor input of `node` is quantized (a dequantize in the QDQ graph, or folded)."""
    return any(is_dequantize(a) or QCOM_QUANT_ATTRS in a.meta for a in node.all_input_nodes)


def writes_quantized(node: torch.fx.Node) -> bool:
    """The output gets an encoding: folded (lowering), or every user a quantize (partitioning)."""
    return is_quantized(node) or (bool(node.users) and all(is_quantize(u) for u in node.users))


# Ops whose Prelu runs in either layout (the slope is one value, or per channel on the stored
# channel axis).
_SLOPE_OPS = (_aten.leaky_relu.default, _aten.prelu.default)


@register_builder
class DecomposedMathBuilder(NodeBuilder):
    targets = [
        _aten.clamp.Tensor,
        _aten.reciprocal.default,
        _aten.leaky_relu.default,
        _aten.prelu.default,
        _aten.trunc.default,
    ] + list(_RECIPES)
    keep_whole = [_aten.prelu.default]
    quant_annotations: Dict[object, QuantFamily] = dict.fromkeys(
        aten_ops(
            "clamp.Tensor",
            "reciprocal.default",
            "leaky_relu.default",
            "prelu.default",
            "trunc.default",
            "log2.default",
            "log10.default",
            "expm1.default",
            "log1p.default",
            "tan.default",
            "sinh.default",
            "cosh.default",
            "asinh.default",
            "acosh.default",
            "atanh.default",
            "acos.default",
            "atan2.default",
        ),
        QuantFamily.COMPUTE,
    )
    # leaky_relu / prelu run in the layout of their input (conv -> leaky_relu -> conv keeps
    # channel-last); the other decompositions read channel-first tensors.
    layout_policy = LayoutPolicy.AGNOSTIC
    channel_last_any_rank = True

    def supports_channel_last(self, node: torch.fx.Node) -> bool:
        return node.target in _SLOPE_OPS

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        ok, reason = check_float_io(node, _integer_inputs(node) if node.target in _RECIPES else ())
        if ok and node.target in _RECIPES and reads_quantized(node) and not writes_quantized(node):
            return False, (
                "a decomposition that reads quantized inputs needs its output quantized too (its "
                "float chain runs between Dequantize and Quantize)"
            )
        if ok and node.target in (_aten.prelu.default, torch.ops.aten.prelu.default):
            return self._prelu_supported(node)
        if not ok or node.target not in (_aten.clamp.Tensor, torch.ops.aten.clamp.Tensor):
            return ok, reason
        bounds = list(node.args[1:3]) + [node.kwargs.get("min"), node.kwargs.get("max")]
        if all(not isinstance(b, torch.fx.Node) for b in bounds):
            return False, "clamp.Tensor without a tensor bound"
        return SUPPORTED

    def _prelu_supported(self, node: torch.fx.Node) -> SupportResult:
        x, weight = node.args[0], node.args[1]
        if not isinstance(weight, torch.fx.Node):
            return False, f"prelu weight {weight!r} is not a tensor"
        x_shape, w_shape = tuple(node_val(x).shape), tuple(node_val(weight).shape)
        for arg in node.all_input_nodes:
            attrs = arg.meta.get(QCOM_QUANT_ATTRS)
            qmax = attrs.qmax if attrs is not None else (arg.args[4] if is_dequantize(arg) and len(arg.args) > 4 else 0)
            if isinstance(qmax, int) and qmax > 255:
                return False, (
                    "QNN 2.51 HTP cannot build a 16-bit Prelu with a weight tensor (graphFinalize: "
                    "'could not create op q::prelu.opt', error 1002)"
                )
        channels = x_shape[1] if len(x_shape) > 1 else 1
        if len(w_shape) > 1 or (w_shape and w_shape[0] not in (1, channels)):
            return False, f"prelu weight of shape {list(w_shape)} is not one value or one per channel ({channels})"
        return SUPPORTED

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        if node.target in _RECIPES:
            self._decomposition(gb, node)
            return
        x = gb.tensor(node.args[0], input_layout(node))
        out = gb.define_output(node)
        if node.target == _aten.prelu.default:
            gb.add_op(node, QnnOpType.Prelu, [x, self._channel_slope(gb, node, len(x.dims))], [out])
        elif node.target == _aten.trunc.default:
            self._trunc(gb, node, x, out)
        elif node.target == _aten.clamp.Tensor:
            self._clamp(gb, node, x, out)
        elif node.target == _aten.leaky_relu.default:
            slope = float(node.args[1]) if len(node.args) > 1 else float(node.kwargs.get("negative_slope", 0.01))
            slope_t = padded_rank(gb, node, self._constant(gb, node, x, slope, "slope"), len(x.dims), "slope")
            gb.add_op(node, QnnOpType.Prelu, [x, slope_t], [out])
        else:  # reciprocal
            gb.add_op(node, QnnOpType.ElementWiseDivide, [self._constant(gb, node, x, 1.0, "one"), x], [out])

    def _decomposition(self, gb: GraphBuilder, node: torch.fx.Node) -> None:
        """The recipe in float; quantized: on Dequantized inputs, its result Quantized to the
        output's encoding (HTP refuses a FLOAT_32 operand of a quantized op, 3110 'mismatching
        datatypes', but takes float ops between Dequantize and Quantize), as PT2E computes it."""
        inputs = [
            _as_float(gb, node, gb.tensor(a), i) for i, a in enumerate(node.args[:2]) if isinstance(a, torch.fx.Node)
        ]
        out = gb.define_output(node)
        if not is_quantized(node):
            _RECIPES[node.target](_Chain(gb, node, out, inputs))
            return
        if len(inputs) == 1 and emit_lookup(gb, node, node.target, inputs[0], out):
            return
        if node.target == _aten.atan2.default and len(inputs) == 2 and emit_atan2(gb, node, *inputs, out):
            return
        floats = [_dequantized(gb, node, t, i) for i, t in enumerate(inputs)]
        result = gb.native_tensor(f"{node.name}_float", out.dims)
        _RECIPES[node.target](_Chain(gb, node, result, floats))
        gb.add_op(node, QnnOpType.Quantize, [result], [out], suffix="quantize")

    def _channel_slope(self, gb: GraphBuilder, node: torch.fx.Node, rank: int) -> QnnTensor:
        """prelu's weight ([C] or [1]) shaped [1, C, 1, ...] to broadcast along axis 1 (a
        channel-last input: [1, ..., 1, C])."""
        weight = gb.tensor(node.args[1])
        count = int(np.prod(weight.dims)) if weight.dims else 1
        dims = [1] * rank if count == 1 or rank < 2 else [1, count] + [1] * (rank - 2)
        if count > 1 and rank >= 2 and input_layout(node) == LAYOUT_CHANNEL_LAST:
            dims = [1] * (rank - 1) + [count]
        if list(weight.dims) == dims:
            return weight
        if weight.type == TensorType.STATIC:
            return gb.add_tensor(
                f"{weight.name}_slope",
                TensorType.STATIC,
                weight.data_type,
                dims,
                None if weight.data is None else weight.data.reshape(dims),
                weight.quant,
            )
        return reshape(gb, node, weight, dims, "slope")

    def _trunc(self, gb: GraphBuilder, node: torch.fx.Node, x: QnnTensor, out: QnnTensor) -> None:
        """Select(x < 0, Ceil(x), Floor(x)); quantized: Ceil / Floor in the output's encoding (a
        lane's unselected value may saturate, its selected one is in range)."""
        negative = gb.native_tensor(f"{node.name}_negative", x.dims, DataType.BOOL_8)
        zero = number_operand(gb, node, 0, node.args[0], "zero")
        gb.add_op(
            node,
            QnnOpType.ElementWiseLess,
            [x, padded_rank(gb, node, zero, len(x.dims), "zero")],
            [negative],
            suffix="negative",
        )
        ceil, floor = gb.like(out, f"{node.name}_ceil"), gb.like(out, f"{node.name}_floor")
        gb.add_op(node, QnnOpType.ElementWiseCeil, [x], [ceil], suffix="ceil")
        gb.add_op(node, QnnOpType.ElementWiseFloor, [x], [floor], suffix="floor")
        gb.add_op(node, QnnOpType.ElementWiseSelect, [negative, ceil, floor], [out])

    def _constant(self, gb: GraphBuilder, node: torch.fx.Node, like: QnnTensor, value: float, name: str) -> QnnTensor:
        """A one-element operand in `like`'s data type: HTP wants both operands of a quantized
        op quantized (exact_scalar_attrs holds 1.0 exactly)."""
        from backends.qualcomm.builders.utils import scalar_tensor

        attrs = node.args[0].meta.get(QCOM_QUANT_ATTRS)
        return scalar_tensor(gb, f"{node.name}_{name}", value, quantized=attrs is not None, like=attrs)

    def _clamp(self, gb: GraphBuilder, node: torch.fx.Node, x: QnnTensor, out: QnnTensor) -> None:
        low = node.args[1] if len(node.args) > 1 else node.kwargs.get("min")
        high = node.args[2] if len(node.args) > 2 else node.kwargs.get("max")
        if low is None:
            gb.add_op(node, QnnOpType.ElementWiseMinimum, [x, self._bound(gb, node, x, high, "max")], [out])
            return
        low_t = self._bound(gb, node, x, low, "min")
        if high is None:
            gb.add_op(node, QnnOpType.ElementWiseMaximum, [x, low_t], [out])
            return
        dims = list(np.broadcast_shapes(tuple(x.dims), tuple(low_t.dims)))
        raised = gb.like(out, f"{node.name}_max", dims)  # quantized: the output's encoding
        gb.add_op(node, QnnOpType.ElementWiseMaximum, [x, low_t], [raised], suffix="max")
        gb.add_op(node, QnnOpType.ElementWiseMinimum, [raised, self._bound(gb, node, x, high, "max")], [out])

    def _bound(self, gb: GraphBuilder, node: torch.fx.Node, x: QnnTensor, bound: object, name: str) -> QnnTensor:
        if isinstance(bound, torch.fx.Node):
            return gb.tensor(bound)
        return self._constant(gb, node, x, float(bound), name)


def _dequantized(gb: GraphBuilder, node: torch.fx.Node, tensor: QnnTensor, index: int) -> QnnTensor:
    return dequantized(gb, node, tensor, f"in{index}")
