"""Math ops QNN has no single op for, decomposed into ops it has (and leaky_relu = Prelu with a
one-element STATIC slope):
clamp(x, min_tensor, max_tensor) = Minimum(Maximum(x, min), max); reciprocal(x) = Divide(1, x);
log2 / log10(x) = Log(x) * (1 / ln 2 | 1 / ln 10); log1p(x) = Log(x + 1); expm1(x) = Exp(x) - 1.

Quantized graphs: clamp's intermediate takes the output's encoding (values above it saturate,
then the Minimum bounds them); reciprocal's 1 is an exact quantized constant. log2 / log10 /
log1p / expm1 stay on the CPU there: a FLOAT_32 intermediate between quantized tensors is
refused by QNN HTP (3110 'mismatching datatypes', measured on QNN 2.51)."""
from __future__ import annotations

import math
from typing import Dict

import numpy as np
import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder
from backends.qualcomm.builders.registry import (
    NodeBuilder, QuantFamily, SUPPORTED, SupportResult, aten_ops, check_float_io, register_builder,
)
from backends.qualcomm.builders.op_logic import padded_rank
from backends.qualcomm.builders.quant_encoding import is_dequantize
from backends.qualcomm.serialization.qnn_graph import QnnTensor
from backends.qualcomm.utils.constants import QCOM_QUANT_ATTRS

_aten = exir_ops.edge.aten

# edge op -> (first op, constant operand or None, second op)
_CHAINS = {
    _aten.log2.default: ("ElementWiseLog", 1.0 / math.log(2.0), "ElementWiseMultiply"),
    _aten.log10.default: ("ElementWiseLog", 1.0 / math.log(10.0), "ElementWiseMultiply"),
    _aten.expm1.default: ("ElementWiseExp", 1.0, "ElementWiseSubtract"),
}


# Decompositions lowered in float graphs only (quantized: they stay on the CPU).
_QUANT_REFUSED = {_aten.log2.default: "log2 = Log * c", _aten.log10.default: "log10 = Log * c",
                  _aten.expm1.default: "expm1 = Exp - 1", _aten.log1p.default: "log1p = Log(x + 1)"}


def reads_quantized(node: torch.fx.Node) -> bool:
    """A tensor input of `node` is quantized (a dequantize in the QDQ graph, or folded)."""
    return any(is_dequantize(a) or QCOM_QUANT_ATTRS in a.meta for a in node.all_input_nodes)


@register_builder
class DecomposedMathBuilder(NodeBuilder):
    targets = [_aten.clamp.Tensor, _aten.reciprocal.default, _aten.log1p.default, _aten.leaky_relu.default] + list(_CHAINS)
    quant_annotations: Dict[object, QuantFamily] = dict.fromkeys(
        aten_ops("clamp.Tensor", "reciprocal.default", "leaky_relu.default"), QuantFamily.COMPUTE)

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        ok, reason = check_float_io(node)
        if ok and node.target in _QUANT_REFUSED and reads_quantized(node):
            return False, (f"{_QUANT_REFUSED[node.target]} needs a FLOAT_32 intermediate, which QNN HTP "
                           "refuses between quantized tensors (3110 'mismatching datatypes')")
        if not ok or node.target not in (_aten.clamp.Tensor, torch.ops.aten.clamp.Tensor):
            return ok, reason
        bounds = list(node.args[1:3]) + [node.kwargs.get("min"), node.kwargs.get("max")]
        if all(not isinstance(b, torch.fx.Node) for b in bounds):
            return False, "clamp.Tensor without a tensor bound"
        return SUPPORTED

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x = gb.tensor(node.args[0])
        out = gb.define_output(node)
        if node.target == _aten.clamp.Tensor:
            self._clamp(gb, node, x, out)
        elif node.target == _aten.leaky_relu.default:
            slope = float(node.args[1]) if len(node.args) > 1 else float(node.kwargs.get("negative_slope", 0.01))
            slope_t = padded_rank(gb, node, self._constant(gb, node, x, slope, "slope"), len(x.dims), "slope")
            gb.add_op(node, "Prelu", [x, slope_t], [out])
        elif node.target == _aten.reciprocal.default:
            gb.add_op(node, "ElementWiseDivide", [self._constant(gb, node, x, 1.0, "one"), x], [out])
        elif node.target == _aten.log1p.default:
            shifted = gb.native_tensor(f"{node.name}_plus_one", x.dims)
            gb.add_op(node, "ElementWiseAdd", [x, self._constant(gb, node, x, 1.0, "one")], [shifted], suffix="add")
            gb.add_op(node, "ElementWiseLog", [shifted], [out])
        else:
            first, constant, second = _CHAINS[node.target]
            inner = gb.native_tensor(f"{node.name}_{first.lower()}", x.dims)
            gb.add_op(node, first, [x], [inner], suffix="inner")
            gb.add_op(node, second, [inner, gb.static_tensor(f"{node.name}_c", np.array([constant], np.float32))], [out])

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
            gb.add_op(node, "ElementWiseMinimum", [x, self._bound(gb, node, x, high, "max")], [out])
            return
        low_t = self._bound(gb, node, x, low, "min")
        if high is None:
            gb.add_op(node, "ElementWiseMaximum", [x, low_t], [out])
            return
        dims = list(np.broadcast_shapes(tuple(x.dims), tuple(low_t.dims)))
        raised = gb.like(out, f"{node.name}_max", dims)  # quantized: the output's encoding
        gb.add_op(node, "ElementWiseMaximum", [x, low_t], [raised], suffix="max")
        gb.add_op(node, "ElementWiseMinimum", [raised, self._bound(gb, node, x, high, "max")], [out])

    def _bound(self, gb: GraphBuilder, node: torch.fx.Node, x: QnnTensor, bound: object, name: str) -> QnnTensor:
        if isinstance(bound, torch.fx.Node):
            return gb.tensor(bound)
        return self._constant(gb, node, x, float(bound), name)
