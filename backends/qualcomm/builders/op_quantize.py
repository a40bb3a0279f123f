"""Quantize / dequantize nodes left after FoldQDQ: float -> quantized (`Quantize`),
quantized -> quantized with another encoding (`Convert`), quantized -> float (`Dequantize`)."""

from __future__ import annotations

import numpy as np
import torch

from backends.qualcomm.builders.graph_builder import GraphBuilder, io_dim_order, logical_shape
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.quant_encoding import DEQUANTIZE_OPS, QUANTIZE_OPS
from backends.qualcomm.builders.registry import (
    is_float_dtype,
    SUPPORTED,
    LayoutPolicy,
    NodeBuilder,
    SupportResult,
    register_builder,
    tensor_vals,
)
from backends.qualcomm.builders.utils import input_layout, is_constant, is_quantized
from backends.qualcomm.serialization.qnn_graph import QnnTensor
from backends.qualcomm.utils.constants import NCHW_TO_NHWC
from backends.qualcomm.utils.errors import QnnLoweringError


@register_builder
class QuantizeBuilder(NodeBuilder):
    targets = sorted(QUANTIZE_OPS, key=str)
    layout_policy = LayoutPolicy.AGNOSTIC
    channel_last_any_rank = True

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        source = tensor_vals(node.args[0]) if isinstance(node.args[0], torch.fx.Node) else []
        if not source or not is_float_dtype(source[0].dtype):
            return False, "quantize input must be a float32 tensor"
        return SUPPORTED

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        """One op per (input tensor, encoding): the DuplicateQuantize edge pass gives every
        dequantize consumer its own quantize node (a graph input read by several quantized ops,
        e.g. an LLM's attention mask read by every head, had one Quantize per reader); the
        copies after the first are bound to its output."""
        x_node = node.args[0]
        x = gb.tensor(x_node, input_layout(node))
        op_type = QnnOpType.Convert if x.quant is not None or is_quantized(x_node) else QnnOpType.Quantize
        if any(user.op == "output" for user in node.users):
            _quantized(node, gb, x, op_type)
            return
        key = ("quantize", x.name, tuple(node.args[1:]))
        gb.bind(node, gb.shared(key, lambda: _quantized(node, gb, x, op_type)))


def _quantized(node: torch.fx.Node, gb: GraphBuilder, x: QnnTensor, op_type: str) -> QnnTensor:
    """`x` quantized (Quantize) or requantized (Convert) to `node`'s encoding."""
    output = gb.define_output(node, dims=_rank0_dims(node, x))
    gb.add_op(node, op_type, [x], [output])
    return output


@register_builder
class DequantizeBuilder(NodeBuilder):
    targets = sorted(DEQUANTIZE_OPS, key=str)
    layout_policy = LayoutPolicy.AGNOSTIC
    channel_last_any_rank = True

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        source = node.args[0]
        if not isinstance(source, torch.fx.Node):
            return False, "dequantize input is not a tensor"
        if source.op == "call_function" or is_constant(source):
            return SUPPORTED
        val = source.meta.get("val")
        if isinstance(val, torch.Tensor) and val.dtype in (torch.uint8, torch.int32):
            return SUPPORTED  # the codes of a quantized graph input (insert_io_qdq.quantize_integer_inputs)
        return False, "dequantize of a graph input that holds no integer codes"

    def supports_channel_last(self, node: torch.fx.Node) -> bool:
        """A Dequantize whose value only leaves the graph as a channel-first output reads its
        input channel-first: the layout Transpose then moves the quantized codes (exact)
        instead of the float values, which QNN 2.51's HTP transposes in float16 in a quantized
        graph (16-bit outputs 5-10 steps off; 8-bit ones are within float16's precision)."""
        return not _only_channel_first_outputs(node)

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        if is_constant(node.args[0]):
            gb.bind(node, dequantized_constant(node, gb))
            return
        x = gb.tensor(node.args[0], input_layout(node))
        gb.add_op(
            node, QnnOpType.Dequantize, [x], [gb.define_output(node, dims=_rank0_dims(node, x), dtype=torch.float32)]
        )


def _only_channel_first_outputs(node: torch.fx.Node) -> bool:
    return (
        bool(node.users)
        and all(user.op == "output" for user in node.users)
        and io_dim_order(node.meta.get("val")) != NCHW_TO_NHWC
    )


def _rank0_dims(node: torch.fx.Node, x: QnnTensor):
    """A 0-d node keeps its input's dims ([1] when the producer stored the 0-d tensor as [1]:
    QNN refuses rank 0); other nodes take their dims from meta."""
    return list(x.dims) if not logical_shape(node) else None


def dequantized_constant(node: torch.fx.Node, gb: GraphBuilder) -> QnnTensor:
    """A dequantized weight whose users stay outside the delegate (FoldQDQ folds it into the
    users it has inside): a float STATIC tensor computed here, as the QDQ reference does."""
    args = [gb.constant_data(a) if isinstance(a, torch.fx.Node) else a for a in node.args]
    if any(a is None for a in args):
        raise QnnLoweringError("dequantize of a constant with non-constant parameters", node)
    with torch.no_grad():
        value = node.target(*args, **node.kwargs)
    return gb.static_tensor(node.name, value.detach().contiguous().numpy().astype(np.float32))
