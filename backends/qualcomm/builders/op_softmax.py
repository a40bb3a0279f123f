"""softmax -> Softmax, log_softmax -> LogSoftmax (axis remapped to the stored layout; a non-last
axis moved last by Transposes)."""

from __future__ import annotations

import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder, inverse_perm, logical_shape
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
)
from backends.qualcomm.builders.utils import input_layout, stored_axis
from backends.qualcomm.serialization.qnn_graph import float_scalar, uint32_scalar, uint32_tensor

_aten = exir_ops.edge.aten


@register_builder
class SoftmaxBuilder(NodeBuilder):
    targets = [_aten._softmax.default, _aten._log_softmax.default] + (
        [_aten.softmax.int] if hasattr(_aten, "softmax") else []
    )
    quant_annotations = dict.fromkeys(
        aten_ops("softmax.int", "_softmax.default", "log_softmax.int", "_log_softmax.default"), QuantFamily.COMPUTE
    )
    layout_policy = LayoutPolicy.AGNOSTIC

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        ok, reason = check_float_io(node)
        if not ok:
            return ok, reason
        if node.target in (_aten._softmax.default, _aten._log_softmax.default) and len(node.args) > 2 and node.args[2]:
            return False, "half_to_float softmax is not supported"
        return SUPPORTED

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        layout = input_layout(node)
        x = gb.tensor(node.args[0], layout)
        axis = stored_axis(node.args[1], len(logical_shape(node)), layout)
        out = gb.define_output(node)
        qnn_type = QnnOpType.LogSoftmax if node.target == _aten._log_softmax.default else QnnOpType.Softmax
        last = len(x.dims) - 1
        if axis == last:
            gb.add_op(node, qnn_type, [x], [out], [uint32_scalar("axis", axis), float_scalar("beta", 1.0)])
            return
        # HTP's Softmax takes the last axis only (error 3110 otherwise): move `axis` last and back
        perm = [d for d in range(len(x.dims)) if d != axis] + [axis]
        moved = gb.like(x, f"{node.name}_axis_last", [x.dims[d] for d in perm])
        gb.add_op(node, QnnOpType.Transpose, [x], [moved], [uint32_tensor("perm", perm)], suffix="axis_last")
        result = gb.like(out, f"{node.name}_last", moved.dims)
        gb.add_op(node, qnn_type, [moved], [result], [uint32_scalar("axis", last), float_scalar("beta", 1.0)])
        gb.add_op(
            node, QnnOpType.Transpose, [result], [out], [uint32_tensor("perm", inverse_perm(perm))], suffix="axis_back"
        )
