"""Unary ops, one row per op: relu, hardtanh/relu6, clamp, sigmoid, tanh, gelu, silu, hardswish,
hardsigmoid (ElementWiseNeuron HARD_SIGMOID), rsqrt, sqrt, neg, abs,
exp, log, sin, cos, asin, atan, ceil, floor, round, sign."""

from __future__ import annotations

from typing import Callable, Dict, List

import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.registry import (
    LayoutPolicy,
    NodeBuilder,
    SUPPORTED,
    SupportResult,
    check_float_io,
    register_builder,
    table_quant_annotations,
)
from backends.qualcomm.builders.quant_encoding import is_dequantize
from backends.qualcomm.builders.utils import input_layout
from backends.qualcomm.utils.constants import QCOM_QUANT_ATTRS
from backends.qualcomm.serialization.qnn_graph import DataType, QnnParam, float_scalar, uint32_scalar

_aten = exir_ops.edge.aten


def sigmoid_encoding(node: torch.fx.Node) -> tuple:
    """(data type, encoding) of silu's inner Sigmoid: FLOAT_32 even in quantized graphs, so
    that x * sigmoid(x) is rounded once, to the output encoding, like the QDQ reference.
    QNN 2.51's op validation refuses the quantized-input FLOAT_32-output Sigmoid and the
    Multiply of the two (3110 'mismatching datatypes'); its finalize accepts them and the result
    matches the host engine (measured on SM8650), so both ops are marked finalize_accepts."""
    return DataType.FLOAT_32, None


def _no_params(node: torch.fx.Node) -> List[QnnParam]:
    return []


def _clamp_params(node: torch.fx.Node) -> List[QnnParam]:
    min_value = node.args[1] if len(node.args) > 1 else node.kwargs.get("min_val", -1.0)
    max_value = node.args[2] if len(node.args) > 2 else node.kwargs.get("max_val", 1.0)
    return [float_scalar("min_value", min_value), float_scalar("max_value", max_value)]


_FLOAT_MAX = 3.4028234663852886e38


def _clamp_bounds_params(node: torch.fx.Node) -> List[QnnParam]:
    """clamp(x, min=None, max=None): a missing bound is the float range's end."""
    low = node.args[1] if len(node.args) > 1 else node.kwargs.get("min")
    high = node.args[2] if len(node.args) > 2 else node.kwargs.get("max")
    return [
        float_scalar("min_value", -_FLOAT_MAX if low is None else float(low)),
        float_scalar("max_value", _FLOAT_MAX if high is None else float(high)),
    ]


def _clamp_check(node: torch.fx.Node) -> SupportResult:
    bounds = list(node.args[1:3]) + [node.kwargs.get("min"), node.kwargs.get("max")]
    if any(b is not None and not isinstance(b, (int, float)) for b in bounds):
        return False, "clamp bounds must be numbers"
    return SUPPORTED


def _gelu_check(node: torch.fx.Node) -> SupportResult:
    approximate = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
    if approximate != "none":
        return False, f"gelu approximate='{approximate}' is not supported (only 'none')"
    return SUPPORTED


def _hardsigmoid_params(node: torch.fx.Node) -> List[QnnParam]:
    """ElementWiseNeuron operation 2 (HARD_SIGMOID): clamp(x / 6 + 1 / 2, 0, 1)."""
    return [uint32_scalar("operation", 2), float_scalar("alpha", 1.0 / 6.0), float_scalar("beta", 0.5)]


def _elu_params(node: torch.fx.Node) -> List[QnnParam]:
    return [float_scalar("alpha", float(node.args[1]) if len(node.args) > 1 else float(node.kwargs.get("alpha", 1.0)))]


# edge op -> (QNN type, params fn); silu is Sigmoid followed by ElementWiseMultiply.
UNARY_OPS: Dict[object, tuple] = {
    _aten.relu.default: (QnnOpType.Relu, _no_params),
    _aten.hardtanh.default: (QnnOpType.ReluMinMax, _clamp_params),
    _aten.clamp.default: (QnnOpType.ReluMinMax, _clamp_bounds_params),
    _aten.sigmoid.default: (QnnOpType.Sigmoid, _no_params),
    _aten.tanh.default: (QnnOpType.Tanh, _no_params),
    _aten.gelu.default: (QnnOpType.Gelu, _no_params),
    _aten.hardswish.default: (QnnOpType.HardSwish, _no_params),
    _aten.hardsigmoid.default: (QnnOpType.ElementWiseNeuron, _hardsigmoid_params),
    _aten.silu.default: (QnnOpType.Sigmoid, _no_params),
    _aten.rsqrt.default: (QnnOpType.ElementWiseRsqrt, _no_params),
    _aten.sqrt.default: (QnnOpType.ElementWiseSquareRoot, _no_params),
    _aten.neg.default: (QnnOpType.ElementWiseNeg, _no_params),
    _aten.abs.default: (QnnOpType.ElementWiseAbs, _no_params),
    _aten.exp.default: (QnnOpType.ElementWiseExp, _no_params),
    _aten.log.default: (QnnOpType.ElementWiseLog, _no_params),
    _aten.sin.default: (QnnOpType.ElementWiseSin, _no_params),
    _aten.cos.default: (QnnOpType.ElementWiseCos, _no_params),
    _aten.asin.default: (QnnOpType.ElementWiseAsin, _no_params),
    _aten.atan.default: (QnnOpType.ElementWiseAtan, _no_params),
    _aten.ceil.default: (QnnOpType.ElementWiseCeil, _no_params),
    _aten.floor.default: (QnnOpType.ElementWiseFloor, _no_params),
    _aten.round.default: (QnnOpType.ElementWiseRound, _no_params),
    _aten.sign.default: (QnnOpType.ElementWiseSign, _no_params),
    _aten.elu.default: (QnnOpType.Elu, _elu_params),
}


def _elu_check(node: torch.fx.Node) -> SupportResult:
    for i, name in ((2, "scale"), (3, "input_scale")):
        value = node.args[i] if len(node.args) > i else node.kwargs.get(name, 1.0)
        if value != 1:
            return False, f"elu {name}={value!r} is not supported (only 1)"
    return SUPPORTED


def _quantized_only_check(node: torch.fx.Node) -> SupportResult:
    """asin: QNN 2.51 HTP's ElementWiseAsin takes only 8/16-bit quantized tensors (validation
    3110: 'Unsupported input/output datatypes ... FLOAT_32'); in float graphs it stays on the CPU."""
    if any(is_dequantize(a) or QCOM_QUANT_ATTRS in a.meta for a in node.all_input_nodes):
        return SUPPORTED
    return False, "QNN HTP's ElementWiseAsin takes only quantized (8/16-bit) tensors, not FLOAT_32"


def _not_16_bit_check(node: torch.fx.Node) -> SupportResult:
    """log: QNN 2.51 HTP's 16-bit ElementWiseLog accepts the op but its outputs are far off
    (its measured table: 99% of 120 values > 16 steps off log, up to the whole range); 8-bit and
    float are right."""
    for arg in node.all_input_nodes:
        attrs = arg.meta.get(QCOM_QUANT_ATTRS)
        qmax = attrs.qmax if attrs is not None else (arg.args[4] if is_dequantize(arg) and len(arg.args) > 4 else 0)
        if isinstance(qmax, int) and qmax > 255:
            return False, "QNN HTP's 16-bit ElementWiseLog gives wrong values (measured); only 8-bit or float"
    return SUPPORTED


_EXTRA_CHECKS: Dict[object, Callable[[torch.fx.Node], SupportResult]] = {
    _aten.asin.default: _quantized_only_check,
    _aten.log.default: _not_16_bit_check,
    _aten.elu.default: _elu_check,
    _aten.gelu.default: _gelu_check,
    _aten.clamp.default: _clamp_check,
}


@register_builder
class UnaryActivationBuilder(NodeBuilder):
    targets = list(UNARY_OPS)
    # The aten ops the op table lists for these QNN types (relu_, relu6, silu_, ... included).
    quant_annotations = table_quant_annotations(qnn_type for qnn_type, _ in UNARY_OPS.values())
    keep_whole = [_aten.hardswish.default, _aten.hardsigmoid.default, _aten.gelu.default, _aten.silu.default]
    layout_policy = LayoutPolicy.AGNOSTIC
    channel_last_any_rank = True

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        ok, reason = check_float_io(node)
        if ok and node.target in _EXTRA_CHECKS:
            return _EXTRA_CHECKS[node.target](node)
        return ok, reason

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        qnn_type, params_fn = UNARY_OPS[node.target]
        x = gb.tensor(node.args[0], input_layout(node))
        if node.target == _aten.silu.default:
            sigmoid = gb.native_tensor(f"{node.name}_sigmoid", x.dims, *sigmoid_encoding(node))
            ops = [
                gb.add_op(node, QnnOpType.Sigmoid, [x], [sigmoid], suffix="sigmoid"),
                gb.add_op(node, QnnOpType.ElementWiseMultiply, [x, sigmoid], [gb.define_output(node)]),
            ]
            for op in ops:  # quantized x with the FLOAT_32 sigmoid: see sigmoid_encoding
                op.finalize_accepts = x.quant is not None
            return
        gb.add_op(node, qnn_type, [x], [gb.define_output(node)], params_fn(node))
