"""layer_norm / native_layer_norm -> LayerNorm; batch norm (eval) -> Batchnorm; group_norm ->
GroupNorm; instance_norm and batch norm with batch statistics -> InstanceNorm; rms_norm -> RmsNorm."""

from __future__ import annotations

import operator
from typing import List

import numpy as np
import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.quant_encoding import ZERO_INT32_ATTRS, QuantAttrs, is_dequantize, is_quantize
from backends.qualcomm.builders.registry import (
    SUPPORTED,
    LayoutPolicy,
    NodeBuilder,
    QuantFamily,
    SupportResult,
    aten_ops,
    check_float_io,
    first_failure,
    register_builder,
)
from backends.qualcomm.builders.utils import is_constant, is_quantized, reshape, view_as, view_back
from backends.qualcomm.serialization.qnn_graph import QnnTensor, bool_scalar, float_scalar, uint32_scalar, uint32_tensor
from backends.qualcomm.utils.constants import LAYOUT_CHANNEL_FIRST, LAYOUT_CHANNEL_LAST, QCOM_QUANT_ATTRS
from backends.qualcomm.utils.errors import QnnLoweringError

_aten = exir_ops.edge.aten


def only_output_zero_used(node: torch.fx.Node) -> SupportResult:
    """Tuple-returning ops: only getitem(node, 0) may be used."""
    for user in node.users:
        if user.target is not operator.getitem or user.args[1] != 0:
            return False, f"output used by '{user.name}' is not output 0 (mean/rstd outputs unsupported)"
    return SUPPORTED


# Encodings of an absent gamma (ones) in quantized graphs, by activation bits.
_UNIT_GAMMA_ATTRS = {8: QuantAttrs(1.0, 0, 0, 255, torch.uint8), 16: QuantAttrs(1.0, 0, -32768, 32767, torch.int16)}


def _unit_gamma_attrs(node: torch.fx.Node) -> QuantAttrs:
    """The encoding of an absent gamma; InstanceNorm's is uint8 whatever the activations (QNN's
    HTP refuses a 16-bit or signed gamma there, as for a given gamma: annotators.py)."""
    if node.target in (_INSTANCE_NORM, _BATCH_STATS_NORM):
        return _UNIT_GAMMA_ATTRS[8]
    return _UNIT_GAMMA_ATTRS[node.meta[QCOM_QUANT_ATTRS].bitwidth]


def _float_data(gb: GraphBuilder, node: object, what: str) -> np.ndarray:
    data = gb.constant_data(node)
    if data is None:
        raise QnnLoweringError(f"{what} must be a constant", node)
    return data.detach().float().contiguous().numpy()


def affine_input(gb: GraphBuilder, node: torch.fx.Node, arg: object, shape, fill: int, name: str) -> QnnTensor:
    """gamma / beta of a norm as `shape` (a constant is stored flattened to it); an absent one is
    `fill` (1 or 0): float, or in a quantized graph an exact integer encoding (scale 1; HTP
    refuses float gamma / beta there)."""
    if isinstance(arg, torch.fx.Node):
        data = gb.constant_data(arg)
        if data is None:
            tensor = gb.tensor(arg)
            return tensor if list(tensor.dims) == list(shape) else reshape(gb, node, tensor, shape, name)
        array = data.detach().contiguous().numpy().reshape(shape)
        attrs = arg.meta.get(QCOM_QUANT_ATTRS)
        return gb.quantized_static(arg.name, array, attrs) if attrs is not None else gb.static_tensor(arg.name, array)
    if not is_quantized(node):
        return gb.static_tensor(f"{node.name}_{name}", np.full(shape, fill, dtype=np.float32))
    attrs = _unit_gamma_attrs(node) if name == "gamma" else ZERO_INT32_ATTRS
    return gb.quantized_static(f"{node.name}_{name}", np.full(shape, fill, dtype=np.int64), attrs)


def last_axis_norm(gb: GraphBuilder, node: torch.fx.Node, k: int) -> tuple:
    """(x, output, node output, size) of a norm over the last k axes lowered on one axis (QNN
    2.51's LayerNorm refuses axes other than the last: 'incorrect Value 2, expected equal to
    3'): x viewed with those axes collapsed into their product."""
    x = gb.tensor(node.args[0])
    size = int(np.prod(x.dims[len(x.dims) - k :], dtype=np.int64))
    flat = list(x.dims[: len(x.dims) - k]) + [size]
    x_flat, out_flat, out = view_as(gb, node, x, flat)
    return x_flat, out_flat, out, size


@register_builder
class LayerNormBuilder(NodeBuilder):
    targets = [_aten.native_layer_norm.default, _aten.layer_norm.default]
    quant_annotations = dict.fromkeys(aten_ops("layer_norm.default"), QuantFamily.LAYER_NORM)
    keep_whole = [_aten.layer_norm.default]

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        ok, reason = check_float_io(node)
        if ok and node.target == _aten.native_layer_norm.default:
            return only_output_zero_used(node)
        return ok, reason

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        normalized_shape = list(node.args[1])
        weight = node.args[2] if len(node.args) > 2 else None
        bias = node.args[3] if len(node.args) > 3 else None
        eps = node.args[4] if len(node.args) > 4 else 1e-5
        x, out_flat, out, size = last_axis_norm(gb, node, len(normalized_shape))
        inputs = [
            x,
            affine_input(gb, node, weight, [size], 1, "gamma"),
            affine_input(gb, node, bias, [size], 0, "beta"),
        ]
        params = [float_scalar("epsilon", eps), uint32_tensor("axes", [len(x.dims) - 1])]
        gb.add_op(node, QnnOpType.LayerNorm, inputs, [out_flat], params)
        view_back(gb, node, out_flat, out)


@register_builder
class BatchNormBuilder(NodeBuilder):
    targets = [_aten._native_batch_norm_legit_no_training.default]
    quant_annotations = dict.fromkeys(
        aten_ops("batch_norm.default", "_native_batch_norm_legit_no_training.default"), QuantFamily.COMPUTE
    )
    layout_policy = LayoutPolicy.SENSITIVE
    channel_last_ranks = (3, 4, 5)  # BatchNorm1d after a conv1d, BatchNorm3d: channels last

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        ok, reason = check_float_io(node)
        if not ok:
            return ok, reason
        if len(logical_shape(node.args[0])) not in (2, 3, 4, 5):
            return False, "batch norm input must be rank 2 to 5"
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
        # HTP's Batchnorm takes rank 2 to 4: NDHWC runs as [N, D*H, W, C]
        dims = list(x.dims) if len(x.dims) < 5 else [x.dims[0], x.dims[1] * x.dims[2], *x.dims[3:]]
        x_in, out, node_out = view_as(gb, node, x, dims)
        inputs = [
            x_in,
            gb.static_tensor(f"{node.name}_scale", scale.astype(np.float32)),
            gb.static_tensor(f"{node.name}_offset", offset.astype(np.float32)),
        ]
        gb.add_op(node, QnnOpType.Batchnorm, inputs, [out])
        view_back(gb, node, out, node_out)


# ---- normalization with statistics over channels groups / spatial positions (channel-last) ----


def _constant_through_qdq(arg: object) -> bool:
    """A constant, or (before QDQ folding, when ExecuTorch asks which ops to keep whole) the
    dequantized quantized constant."""
    while isinstance(arg, torch.fx.Node) and (is_quantize(arg) or is_dequantize(arg)):
        arg = arg.args[0]
    return is_constant(arg)


def _constant_affine(node: torch.fx.Node, *args: object) -> SupportResult:
    if not all(a is None or _constant_through_qdq(a) for a in args):
        return False, "weight / bias must be constants"
    return SUPPORTED


def _rank_in(node: torch.fx.Node, ranks: tuple) -> SupportResult:
    rank = len(logical_shape(node.args[0]))
    if rank not in ranks:
        return False, f"rank-{rank} input is not supported (rank {' / '.join(map(str, ranks))})"
    return SUPPORTED


def _per_image_dims(shape: List[int]) -> List[int]:
    """NHWC dims of a channel-last [N, C, *spatial] tensor, spatial dims flattened into W
    (rank 3 [N, C, L] -> [N, 1, L, C])."""
    if len(shape) == 4:
        return [shape[0], shape[2], shape[3], shape[1]]
    return [shape[0], 1, int(np.prod(shape[2:], dtype=np.int64)), shape[1]]


@register_builder
class GroupNormBuilder(NodeBuilder):
    """native_group_norm(x, weight, bias, N, C, HxW, group, eps) -> GroupNorm."""

    targets = [_aten.native_group_norm.default]
    quant_annotations = dict.fromkeys(aten_ops("group_norm.default"), QuantFamily.LAYER_NORM)
    layout_policy = LayoutPolicy.SENSITIVE
    channel_last_ranks = (3, 4)

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return first_failure(
            lambda: check_float_io(node),
            lambda: _rank_in(node, self.channel_last_ranks),
            lambda: _constant_affine(node, node.args[1], node.args[2]),
            lambda: only_output_zero_used(node),
        )

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x_node, weight, bias = node.args[:3]
        group, eps = int(node.args[6]), float(node.args[7])
        shape = logical_shape(x_node)
        affine = [
            affine_input(gb, node, weight, [shape[1]], 1, "gamma"),
            affine_input(gb, node, bias, [shape[1]], 0, "beta"),
        ]
        params = [float_scalar("epsilon", eps), uint32_scalar("group", group)]
        x4, out4, out = view_as(gb, node, gb.tensor(x_node, LAYOUT_CHANNEL_LAST), _per_image_dims(shape))
        gb.add_op(node, QnnOpType.GroupNorm, [x4] + affine, [out4], params)
        view_back(gb, node, out4, out)


_INSTANCE_NORM = _aten.instance_norm.default
_BATCH_STATS_NORM = _aten._native_batch_norm_legit.no_stats


def _instance_norm_params(eps: float) -> list:
    # mode 0 (mu_sigma), region 0 (across spatial), normalize_variance: QNN op definition
    return [
        float_scalar("epsilon", eps),
        uint32_scalar("mode", 0),
        bool_scalar("normalize_variance", True),
        uint32_scalar("region", 0),
    ]


@register_builder
class InstanceNormBuilder(NodeBuilder):
    """instance_norm (use_input_stats) -> InstanceNorm per image; batch_norm with batch statistics
    (_native_batch_norm_legit.no_stats: training mode, or no running stats) -> InstanceNorm on
    the batch folded into the height, [1, N*H, W, C]."""

    targets = [_INSTANCE_NORM, _BATCH_STATS_NORM]
    keep_whole = [_INSTANCE_NORM]
    # _native_batch_norm_legit.no_stats: QnnQuantizer's form of a batch-statistics batch_norm
    # (quantizer/batch_stats_norm.py)
    quant_annotations = dict.fromkeys(
        aten_ops("instance_norm.default", "_native_batch_norm_legit.no_stats"), QuantFamily.LAYER_NORM
    )
    layout_policy = LayoutPolicy.SENSITIVE
    channel_last_ranks = (3, 4)

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        def options() -> SupportResult:
            if node.target == _BATCH_STATS_NORM:
                return only_output_zero_used(node)
            if len(node.args) > 5 and not node.args[5]:
                return False, "use_input_stats=False (running statistics) is not supported"
            return SUPPORTED

        ranks = (2, 3, 4) if node.target == _BATCH_STATS_NORM else (3, 4)
        return first_failure(
            lambda: check_float_io(node),
            lambda: _rank_in(node, ranks),
            lambda: _constant_affine(node, node.args[1], node.args[2]),
            options,
        )

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x_node, weight, bias = node.args[:3]
        shape = logical_shape(x_node)
        eps = float(node.args[7] if node.target == _INSTANCE_NORM else node.args[5])
        affine = [
            affine_input(gb, node, weight, [shape[1]], 1, "gamma"),
            affine_input(gb, node, bias, [shape[1]], 0, "beta"),
        ]
        dims4 = _per_image_dims(shape)
        if node.target == _BATCH_STATS_NORM:  # one image of all batches' pixels
            dims4 = [1, dims4[0] * dims4[1], dims4[2], dims4[3]]
        layout = LAYOUT_CHANNEL_LAST if len(shape) in self.channel_last_ranks else LAYOUT_CHANNEL_FIRST
        x4, out4, out = view_as(gb, node, gb.tensor(x_node, layout), dims4)
        gb.add_op(node, QnnOpType.InstanceNorm, [x4] + affine, [out4], _instance_norm_params(eps))
        view_back(gb, node, out4, out)


@register_builder
class RmsNormBuilder(NodeBuilder):
    """rms_norm(x, normalized_shape, weight, eps) -> RmsNorm over the last len(normalized_shape)
    axes (beta zero; eps None: torch's finfo(float32).eps)."""

    targets = [_aten.rms_norm.default]
    keep_whole = [_aten.rms_norm.default]
    quant_annotations = dict.fromkeys(aten_ops("rms_norm.default"), QuantFamily.LAYER_NORM)

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        weight = node.args[2] if len(node.args) > 2 else None
        return first_failure(lambda: check_float_io(node), lambda: _constant_affine(node, weight))

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        normalized_shape = [int(d) for d in node.args[1]]
        weight = node.args[2] if len(node.args) > 2 else None
        eps = node.args[3] if len(node.args) > 3 and node.args[3] is not None else float(torch.finfo(torch.float32).eps)
        x, out_flat, out, size = last_axis_norm(gb, node, len(normalized_shape))
        inputs = [
            x,
            affine_input(gb, node, weight, [size], 1, "gamma"),
            affine_input(gb, node, None, [size], 0, "beta"),
        ]
        params = [float_scalar("epsilon", float(eps)), uint32_tensor("axes", [len(x.dims) - 1])]
        gb.add_op(node, QnnOpType.RmsNorm, inputs, [out_flat], params)
        view_back(gb, node, out_flat, out)
