"""layer_norm / native_layer_norm -> LayerNorm; batch norm (eval) -> Batchnorm."""
from __future__ import annotations

import operator

import numpy as np
import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape
from backends.qualcomm.builders.registry import (
    LayoutPolicy, NodeBuilder, QuantFamily, SUPPORTED, SupportResult, aten_ops, check_float_io,
    register_builder,
)
from backends.qualcomm.builders.quant_encoding import ZERO_INT32_ATTRS, QuantAttrs
from backends.qualcomm.builders.utils import is_constant, is_quantized
from backends.qualcomm.serialization.qnn_graph import QnnTensor, float_scalar, uint32_tensor
from backends.qualcomm.utils.constants import LAYOUT_CHANNEL_LAST, QCOM_QUANT_ATTRS
from backends.qualcomm.utils.errors import QnnLoweringError

_aten = exir_ops.edge.aten


def only_output_zero_used(node: torch.fx.Node) -> SupportResult:
    """Tuple-returning ops: only getitem(node, 0) may be used."""
    for user in node.users:
        if user.target is not operator.getitem or user.args[1] != 0:
            return False, f"output used by '{user.name}' is not output 0 (mean/rstd outputs unsupported)"
    return SUPPORTED


# Encodings of an absent gamma (ones) in quantized graphs, by activation bits.
_UNIT_GAMMA_ATTRS = {8: QuantAttrs(1.0, 0, 0, 255, torch.uint8),
                     16: QuantAttrs(1.0, 0, -32768, 32767, torch.int16)}


def _float_data(gb: GraphBuilder, node: object, what: str) -> np.ndarray:
    data = gb.constant_data(node)
    if data is None:
        raise QnnLoweringError(f"{what} must be a constant", node)
    return data.detach().float().contiguous().numpy()


@register_builder
class LayerNormBuilder(NodeBuilder):
    targets = [_aten.native_layer_norm.default, _aten.layer_norm.default]
    quant_annotations = dict.fromkeys(aten_ops("layer_norm.default"),
                                      QuantFamily.LAYER_NORM)
    keep_whole = [_aten.layer_norm.default]

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        ok, reason = check_float_io(node)
        if ok and node.target == _aten.native_layer_norm.default:
            return only_output_zero_used(node)
        return ok, reason

    def _affine(self, gb: GraphBuilder, node: torch.fx.Node, arg: object, shape, fill: int, name: str) -> QnnTensor:
        """gamma / beta; an absent one is `fill` (1 or 0): float, or in a quantized graph an
        exact integer encoding (scale 1; HTP refuses float gamma / beta there)."""
        if isinstance(arg, torch.fx.Node):
            return gb.tensor(arg)
        if not is_quantized(node):
            return gb.static_tensor(f"{node.name}_{name}", np.full(shape, fill, dtype=np.float32))
        attrs = _UNIT_GAMMA_ATTRS[node.meta[QCOM_QUANT_ATTRS].bitwidth] if name == "gamma" else ZERO_INT32_ATTRS
        return gb.quantized_static(f"{node.name}_{name}", np.full(shape, fill, dtype=np.int64), attrs)

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x_node, normalized_shape = node.args[0], list(node.args[1])
        weight = node.args[2] if len(node.args) > 2 else None
        bias = node.args[3] if len(node.args) > 3 else None
        eps = node.args[4] if len(node.args) > 4 else 1e-5
        rank, k = len(logical_shape(x_node)), len(normalized_shape)
        inputs = [gb.tensor(x_node), self._affine(gb, node, weight, normalized_shape, 1, "gamma"),
                  self._affine(gb, node, bias, normalized_shape, 0, "beta")]
        params = [float_scalar("epsilon", eps), uint32_tensor("axes", list(range(rank - k, rank)))]
        gb.add_op(node, "LayerNorm", inputs, [gb.define_output(node)], params)


@register_builder
class BatchNormBuilder(NodeBuilder):
    targets = [_aten._native_batch_norm_legit_no_training.default]
    quant_annotations = dict.fromkeys(aten_ops("batch_norm.default", "_native_batch_norm_legit_no_training.default"),
                                      QuantFamily.COMPUTE)
    layout_policy = LayoutPolicy.SENSITIVE

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        ok, reason = check_float_io(node)
        if not ok:
            return ok, reason
        if len(logical_shape(node.args[0])) not in (2, 4):
            return False, "batch norm input must be rank 2 or 4"
        if not all(is_constant(a) for a in node.args[1:5] if a is not None):
            return False, "batch norm weight/bias/mean/var must be constants"
        return only_output_zero_used(node)

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x_node, weight, bias, mean, var = node.args[:5]
        eps = float(node.args[6]) if len(node.args) > 6 else 1e-5
        channels = logical_shape(x_node)[1]
        gamma = _float_data(gb, weight, "weight") if weight is not None else np.ones(channels, np.float32)
        beta = _float_data(gb, bias, "bias") if bias is not None else np.zeros(channels, np.float32)
        scale = gamma / np.sqrt(_float_data(gb, var, "running_var") + eps)
        offset = beta - _float_data(gb, mean, "running_mean") * scale
        x = gb.tensor(x_node, LAYOUT_CHANNEL_LAST)
        inputs = [x, gb.static_tensor(f"{node.name}_scale", scale.astype(np.float32)),
                  gb.static_tensor(f"{node.name}_offset", offset.astype(np.float32))]
        gb.add_op(node, "Batchnorm", inputs, [gb.define_output(node)])
