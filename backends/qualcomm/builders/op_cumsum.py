"""cumsum -> QNN CumulativeSum (axis; exclusive = reverse = false).

float32 -> float32; int32 / int64 / bool inputs (PyTorch sums them in int64) -> int64, the
input Cast first when its dtype differs from the output's; an explicit `dtype=` the same way.
Quantized graphs: the output gets its own encoding (QuantFamily.COMPUTE, from the op table);
QNN 2.51's HTP refuses a quantized CumulativeSum (op validation 3110, "Tensor 0 and 0 have
mismatching datatypes"), so it runs in float between a Dequantize of the input and a Quantize to
the node's encoding, which is what the PT2E reference computes."""

from __future__ import annotations

import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape, qnn_dtype
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.registry import (
    SUPPORTED,
    NodeBuilder,
    SupportResult,
    check_static_shapes,
    first_failure,
    node_val,
    register_builder,
    table_quant_annotations,
    tensor_vals,
)
from backends.qualcomm.builders.utils import dequantized, is_quantized, normalize_axis
from backends.qualcomm.serialization.qnn_graph import DataType, QnnTensor, bool_scalar, uint32_scalar
from backends.qualcomm.utils.constants import QCOM_QUANT_ATTRS

_aten = exir_ops.edge.aten
_INPUT_DTYPES = (torch.float32, torch.int32, torch.int64, torch.bool)
_OUTPUT_DTYPES = (torch.float32, torch.int32, torch.int64)


def _quantized(node: torch.fx.Node) -> bool:
    source = node.args[0]
    return is_quantized(node) or (isinstance(source, torch.fx.Node) and QCOM_QUANT_ATTRS in source.meta)


def _dtypes(node: torch.fx.Node):
    """(input dtype, output dtype); float32 for both in a quantized graph (codes are stored in
    integer dtypes there)."""
    if _quantized(node):
        return torch.float32, torch.float32
    source, out = node_val(node.args[0]), tensor_vals(node)
    return (source.dtype if isinstance(source, torch.Tensor) else None), (out[0].dtype if out else None)


def _check_cumsum(node: torch.fx.Node) -> SupportResult:
    source, out = _dtypes(node)
    if source not in _INPUT_DTYPES or out not in _OUTPUT_DTYPES:
        return (
            False,
            f"cumsum of {source} -> {out}: inputs float32 / int32 / int64 / bool, outputs float32 / int32 / int64",
        )
    if (source == torch.float32) != (out == torch.float32):
        return False, f"cumsum of {source} -> {out}: a float <-> integer change (dtype=) is not supported"
    if not logical_shape(node.args[0]):
        return False, "0-d input is not supported (QNN refuses rank-0 tensors)"
    return SUPPORTED


def _source(gb: GraphBuilder, node: torch.fx.Node) -> QnnTensor:
    """The input, Cast to the output's dtype when they differ (int32 / bool -> int64), or
    Dequantized to float32 when quantized."""
    x = gb.tensor(node.args[0])
    if x.quant is not None:
        return dequantized(gb, node, x, "in")
    source, out = _dtypes(node)
    if source == out:
        return x
    cast = gb.native_tensor(f"{node.name}_cast", x.dims, qnn_dtype(out, node))
    gb.add_op(node, QnnOpType.Cast, [x], [cast], suffix="cast")
    return cast


@register_builder
class CumsumBuilder(NodeBuilder):
    targets = [_aten.cumsum.default]
    quant_annotations = table_quant_annotations([QnnOpType.CumulativeSum])

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return first_failure(lambda: _check_cumsum(node), lambda: check_static_shapes(node))

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x = _source(gb, node)
        axis = normalize_axis(int(node.args[1]), len(x.dims))
        params = [uint32_scalar("axis", axis), bool_scalar("exclusive", False), bool_scalar("reverse", False)]
        if not is_quantized(node):
            gb.add_op(node, QnnOpType.CumulativeSum, [x], [gb.define_output(node, dims=x.dims)], params)
            return
        total = gb.native_tensor(f"{node.name}_float", x.dims, DataType.FLOAT_32)
        gb.add_op(node, QnnOpType.CumulativeSum, [x], [total], params)
        gb.add_op(node, QnnOpType.Quantize, [total], [gb.define_output(node, dims=x.dims)], suffix="quantize")
