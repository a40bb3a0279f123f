"""linear (kept whole) -> FullyConnected; matmul / bmm / mm / addmm -> MatMul (+ add)."""

from __future__ import annotations

import numpy as np
import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape
from backends.qualcomm.builders.op_conv import zero_bias_attrs
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.registry import (
    SUPPORTED,
    NodeBuilder,
    QuantFamily,
    SupportResult,
    aten_ops,
    check_float_io,
    register_builder,
    tensor_vals,
)
from backends.qualcomm.builders.utils import add_weighted_op, is_quantized
from backends.qualcomm.serialization.qnn_graph import bool_scalar

_aten = exir_ops.edge.aten


@register_builder
class LinearBuilder(NodeBuilder):
    targets = [_aten.linear.default]
    quant_annotations = dict.fromkeys(aten_ops("linear.default"), QuantFamily.WEIGHTED)
    keep_whole = [_aten.linear.default]

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        ok, reason = check_float_io(node)
        if ok and len(tensor_vals(node.args[1])[0].shape) != 2:
            return False, "linear weight must be rank 2"
        return ok, reason

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x = gb.tensor(node.args[0])
        w = gb.tensor(node.args[1])
        bias = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
        # quantized: an int32 zero bias (QNN 2.51 refuses a 16-bit FullyConnected next to a
        # FLOAT_32 one: op validation 3110, finalize 1002)
        attrs = zero_bias_attrs(x, w, w.dims[0])
        if isinstance(bias, torch.fx.Node):
            b = gb.tensor(bias)
        elif attrs is not None:
            b = gb.quantized_static(f"{node.name}_bias", np.zeros([w.dims[0]], np.int64), attrs)
        else:
            b = gb.static_tensor(f"{node.name}_bias", np.zeros([w.dims[0]], dtype=np.float32))
        out = gb.define_output(node)
        if len(x.dims) <= 2:
            add_weighted_op(gb, node, QnnOpType.FullyConnected, [x, w, b], out)
            return
        # QNN's FullyConnected takes keep_dims=false only (backendValidateOpConfig refuses
        # true): a [M, N] result, then a Reshape to the node's leading dims.
        rows = int(np.prod(x.dims[:-1]))
        flat = gb.like(out, f"{node.name}_2d", [rows, out.dims[-1]])
        add_weighted_op(gb, node, QnnOpType.FullyConnected, [x, w, b], flat)
        gb.add_op(node, QnnOpType.Reshape, [flat], [out], suffix="restore_dims")


_MATMUL_OPS = [_aten.matmul.default, _aten.bmm.default, _aten.mm.default, _aten.addmm.default]


@register_builder
class MatMulBuilder(NodeBuilder):
    targets = _MATMUL_OPS
    quant_annotations = dict.fromkeys(
        aten_ops("matmul.default", "bmm.default", "mm.default", "addmm.default"), QuantFamily.COMPUTE
    )
    keep_whole = [_aten.matmul.default]

    def _operands(self, node: torch.fx.Node):
        return node.args[1:3] if node.target == _aten.addmm.default else node.args[0:2]

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        ok, reason = check_float_io(node)
        if not ok:
            return ok, reason
        for operand in self._operands(node):
            if not isinstance(operand, torch.fx.Node) or len(logical_shape(operand)) < 2:
                return False, "MatMul operands must be tensors of rank >= 2"
        if node.target == _aten.addmm.default and _addmm_scales(node) != (1, 1) and is_quantized(node):
            return False, "quantized addmm with alpha / beta != 1 is not supported"
        return SUPPORTED

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        a, b = (gb.tensor(x) for x in self._operands(node))
        params = [bool_scalar("transpose_in0", False), bool_scalar("transpose_in1", False)]
        if node.target != _aten.addmm.default:
            gb.add_op(node, QnnOpType.MatMul, [a, b], [gb.define_output(node)], params)
            return
        product = gb.native_tensor(f"{node.name}_mm", logical_shape(node))
        gb.add_op(node, QnnOpType.MatMul, [a, b], [product], params, suffix="mm")
        beta, alpha = _addmm_scales(node)
        product = _scaled(gb, node, product, alpha, "alpha")
        if beta == 0:  # torch ignores the bias then (NaN / inf included)
            gb.add_op(node, QnnOpType.Reshape, [product], [gb.define_output(node)])
            return
        bias = _scaled(gb, node, gb.tensor(node.args[0]), beta, "beta")
        gb.add_op(node, QnnOpType.ElementWiseAdd, [product, bias], [gb.define_output(node)])


def _addmm_scales(node: torch.fx.Node):
    """(beta, alpha) of an addmm: out = beta * bias + alpha * (a @ b)."""
    return node.kwargs.get("beta", 1), node.kwargs.get("alpha", 1)


def _scaled(gb: GraphBuilder, node: torch.fx.Node, x, factor, suffix: str):
    """x * factor (float graphs; x itself for factor 1)."""
    if factor == 1:
        return x
    out = gb.native_tensor(f"{node.name}_{suffix}", x.dims)
    factor_t = gb.static_tensor(f"{node.name}_{suffix}_factor", np.array([float(factor)], np.float32))
    gb.add_op(node, QnnOpType.ElementWiseMultiply, [x, factor_t], [out], suffix=suffix)
    return out
