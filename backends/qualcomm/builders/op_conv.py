"""Convolutions -> Conv2d / DepthWiseConv2d / TransposeConv2d (conv1d and conv_transpose1d
as their 2-D op on a unit height), Conv3d / TransposeConv3d. Activations channel-last (NWC /
NHWC / NDHWC), weights spatial dims first: [k.., Cin/group, Cout]; transposed [k.., Cin, Cout/group]."""

from __future__ import annotations

from typing import List, Optional

import numpy as np
import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.conv_rows import append_bias_rows
from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.quant_encoding import ZERO_INT32_ATTRS, QuantAttrs, is_dequantize, lpbq_as_per_channel
from backends.qualcomm.builders.registry import (
    SUPPORTED,
    LayoutPolicy,
    NodeBuilder,
    QuantFamily,
    SupportResult,
    aten_ops,
    check_float_io,
    register_builder,
    tensor_vals,
)
from backends.qualcomm.builders.utils import add_weighted_op, int_list, is_constant, is_quantized, reshape
from backends.qualcomm.serialization.qnn_graph import QnnTensor, uint32_scalar, uint32_tensor
from backends.qualcomm.utils.constants import (
    LAYOUT_CHANNEL_FIRST,
    LAYOUT_CHANNEL_LAST,
    QCOM_PAD_AMOUNT,
    QCOM_QUANT_ATTRS,
)

_QNN_TYPES = {
    (2, False): QnnOpType.Conv2d,
    (2, True): QnnOpType.TransposeConv2d,
    (3, False): QnnOpType.Conv3d,
    (3, True): QnnOpType.TransposeConv3d,
}


def weight_perm(rank: int, transposed: bool) -> tuple:
    """torch weight [Cout, Cin/group, k..] (transposed: [Cin, Cout/group, k..]) -> QNN's
    [k.., Cin/group, Cout] (transposed: [k.., Cin, Cout/group])."""
    return tuple(range(2, rank)) + ((0, 1) if transposed else (1, 0))


def spatial_dims(node: torch.fx.Node) -> int:
    """Spatial dims of the QNN op: 2 for conv1d (unit height) and conv2d, 3 for conv3d."""
    return max(2, len(logical_shape(node)) - 2)


def unit_height(node: torch.fx.Node) -> bool:
    """conv1d / conv_transpose1d: lowered as the 2-D op with a height of 1."""
    return len(logical_shape(node)) == 3


def spatial_args(node: torch.fx.Node, key: str, default: int) -> List[int]:
    """stride / padding / dilation / output_padding per spatial dim of the QNN op (conv1d's
    unit height: stride 1, padding 0, dilation 1, output_padding 0)."""
    if unit_height(node):
        return [1 if key in ("stride", "dilation") else 0] + int_list(conv_args(node).get(key), 1, default)
    return int_list(conv_args(node).get(key), spatial_dims(node), default)


def conv_pad_amount(node: torch.fx.Node) -> List[List[int]]:
    """[[before, after]] per spatial dim ([[top, bottom], [left, right]] in 2-D): conv padding
    plus any zero pad folded into it."""
    if QCOM_PAD_AMOUNT in node.meta:
        return [list(p) for p in node.meta[QCOM_PAD_AMOUNT]]
    return [[p, p] for p in spatial_args(node, "padding", 0)]


def zero_bias_attrs(x: QnnTensor, weight: QnnTensor, cout: int) -> Optional[QuantAttrs]:
    """int32 encoding of the zero bias of a quantized conv / linear without one: HTP wants the
    bias scale = input scale x weight scale (per output channel when the weight is; LPBQ: its
    float channel scale); None for float weights."""
    if x.quant is None or weight.quant is None:
        return None
    wq = weight.quant
    w_scales = np.asarray(wq.scales if wq.scales is not None else [wq.scale] * cout, np.float64)
    scales = (np.float64(x.quant.scale) * w_scales).astype(np.float32)
    zero = ZERO_INT32_ATTRS
    if wq.scales is None:
        return QuantAttrs(float(scales[0]), 0, zero.qmin, zero.qmax, zero.dtype)
    return QuantAttrs(scales, np.zeros(cout, np.int64), zero.qmin, zero.qmax, zero.dtype, axis=0)


def lpbq_in_payload(node: torch.fx.Node) -> bool:
    """Whether the payload keeps this conv's LPBQ weights as BLOCKWISE_EXPANSION: a Conv2d
    (conv1d included) whose host kernel takes block scales. Transposed, 3-D and depthwise
    convs get the same weights as 8-bit per-channel codes k * q (lpbq_as_per_channel), which
    is also how every LPBQ weight goes to QNN (runtime/qnn/QnnTensorDesc.h)."""
    return not is_transposed(node) and spatial_dims(node) == 2 and not is_depthwise(node)


def is_depthwise(node: torch.fx.Node) -> bool:
    """One input channel per group: groups == Cin > 1 (QNN's DepthWiseConv2d, any channel
    multiplier); a transposed conv also one output channel per group (groups == Cin == Cout)."""
    args = conv_args(node)
    groups, cin = int(args.get("groups", 1)), logical_shape(args["input"])[1]
    if is_transposed(node):
        return groups == cin == logical_shape(node)[1]
    return groups == cin > 1


def uses_depthwise_op(node: torch.fx.Node) -> bool:
    """A depthwise conv1d / conv2d: lowered as QNN's DepthWiseConv2d."""
    return not is_transposed(node) and spatial_dims(node) == 2 and is_depthwise(node)


def conv_args(node: torch.fx.Node) -> dict:
    """Named args of aten.convolution."""
    names = ["input", "weight", "bias", "stride", "padding", "dilation", "transposed", "output_padding", "groups"]
    values = dict(zip(names, node.args))
    values.update(node.kwargs)
    return values


def is_transposed(node: torch.fx.Node) -> bool:
    return bool(conv_args(node).get("transposed", False))


def transposed_dilation(node: torch.fx.Node) -> List[int]:
    """Per spatial axis of the node, the dilation of a transposed conv (1: none)."""
    return int_list(conv_args(node).get("dilation"), len(logical_shape(node)) - 2, 1)


def _constant_weight(node: torch.fx.Node) -> bool:
    weight = conv_args(node)["weight"]
    while is_dequantize(weight):  # a quantized weight reads its constant through a Dequantize
        weight = weight.args[0]
    return isinstance(weight, torch.fx.Node) and is_constant(weight)


def _transposed_support(node: torch.fx.Node) -> SupportResult:
    """What TransposeConv2d / TransposeConv3d take. They have no dilation param (QNN 2.51 op def):
    a dilated one gets a constant kernel with d - 1 zero taps between taps (dilate_kernel), the
    same sums exactly."""
    args = conv_args(node)
    dilation = transposed_dilation(node)
    if any(d != 1 for d in dilation) and not _constant_weight(node):
        return False, (
            f"dilation {dilation} of a transposed convolution with a weight that is not a constant is "
            "not supported (QNN's TransposeConv has no dilation; a constant kernel is dilated with zeros)"
        )
    stride = int_list(args.get("stride"), len(dilation), 1)
    output_padding = int_list(args.get("output_padding"), len(dilation), 0)
    if any(p < 0 or p >= s for p, s in zip(output_padding, stride)):
        return False, f"output_padding {output_padding} must be in [0, stride {stride})"
    bias = args.get("bias")
    while is_dequantize(bias):  # a quantized bias reads its int32 constant through a Dequantize
        bias = bias.args[0]
    unset = rows_qnn_leaves_unset(node)
    if any(unset) and isinstance(bias, torch.fx.Node) and not is_constant(bias):
        return False, (
            f"transposed convolution whose output ends {unset} rows per spatial "
            "axis beyond what QNN's TransposeConv writes, with a bias that is not a constant (those "
            "rows are the bias, appended as constant rows)"
        )
    return SUPPORTED


def rows_qnn_leaves_unset(node: torch.fx.Node) -> List[int]:
    """Per spatial axis, the trailing output rows of a transposed conv that QNN's TransposeConv
    does not write. Measured (QNN 2.51, SM8650, fp16 / 8a8w / 16a8w): it writes output rows up
    to full position max((in - 1) * stride + kernel, in * stride) (position = output row +
    padding); rows past that hold 0 or garbage where torch has the bias. They are the bias alone (no
    kernel tap reaches past position (in - 1) * stride + kernel), so the builder lowers the
    TransposeConv on the rows QNN writes (output_padding less the unset rows) and appends them as
    constant bias rows (append_bias_rows)."""
    args = conv_args(node)
    sizes = logical_shape(args["input"])[2:]
    kernels = logical_shape(args["weight"])[2:]
    if is_transposed(node):  # a dilated kernel is lowered as its zero-dilated kernel
        kernels = [(k - 1) * d + 1 for k, d in zip(kernels, transposed_dilation(node)[-len(kernels) :])]
    n = len(sizes)
    stride, padding = int_list(args.get("stride"), n, 1), int_list(args.get("padding"), n, 0)
    output_padding = int_list(args.get("output_padding"), n, 0)
    if depthwise_transposed(node):  # output_padding becomes less padding at the end (below)
        return [max(0, op - p) for p, op in zip(padding, output_padding)]
    unset = []
    for size, k, s, p, op in zip(sizes, kernels, stride, padding, output_padding):
        out = (size - 1) * s - 2 * p + k + op
        written = max((size - 1) * s + k, size * s) - p
        unset.append(max(0, out - written))
    return unset


def dilate_kernel(array: np.ndarray, dilation: List[int]) -> np.ndarray:
    """A kernel [C0, C1, k..] with d - 1 zeros between its taps on each spatial axis: the kernel
    [C0, C1, (k - 1) * d + 1 ..] of the same convolution without dilation."""
    spatial = array.shape[2:]
    dilation = [1] * (len(spatial) - len(dilation)) + list(dilation)  # conv1d's unit height
    out = np.zeros(array.shape[:2] + tuple((k - 1) * d + 1 for k, d in zip(spatial, dilation)), array.dtype)
    out[(slice(None), slice(None)) + tuple(slice(None, None, d) for d in dilation)] = array
    return out


def depthwise_transposed(node: torch.fx.Node) -> bool:
    """A transposed conv with one input and one output channel per group and an output_padding:
    QNN 2.51's TransposeConv computes its output_padding wrong on every row (measured fp16 up to
    1.5 off), so the builder gives it output_padding 0 and crops op fewer rows at the end
    (pad_amount [p, p - op]); rows past the uncropped output (op > p) are bias rows."""
    output_padding = int_list(conv_args(node).get("output_padding"), len(logical_shape(node)) - 2, 0)
    return is_transposed(node) and any(output_padding) and is_depthwise(node)


def _conv3d_support(node: torch.fx.Node) -> SupportResult:
    """QNN 2.51's HTP Conv3d refuses a stride > 1 together with a dilation > 1 (on any axes:
    op validation error 3110 'has incorrect Value 2, expected equal to 1')."""
    args = conv_args(node)
    stride, dilation = int_list(args.get("stride"), 3, 1), int_list(args.get("dilation"), 3, 1)
    if any(s > 1 for s in stride) and any(d > 1 for d in dilation):
        return False, (
            f"conv3d with stride {stride} and dilation {dilation}: QNN's Conv3d refuses a stride > 1 "
            "together with a dilation > 1"
        )
    return SUPPORTED


@register_builder
class ConvolutionBuilder(NodeBuilder):
    targets = [exir_ops.edge.aten.convolution.default]
    quant_annotations = dict.fromkeys(
        aten_ops(
            "conv1d.default",
            "conv1d.padding",
            "conv2d.default",
            "conv2d.padding",
            "conv3d.default",
            "conv3d.padding",
            "convolution.default",
            "conv_transpose1d.default",
            "conv_transpose2d.input",
            "conv_transpose3d.input",
        ),
        QuantFamily.WEIGHTED,
    )
    layout_policy = LayoutPolicy.SENSITIVE
    channel_last_ranks = (3, 4, 5)

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        ok, reason = check_float_io(node)
        if not ok:
            return ok, reason
        args = conv_args(node)
        rank = len(tensor_vals(node)[0].shape)
        if rank not in self.channel_last_ranks:
            return False, f"rank-{rank} convolution is not supported (conv1d / conv2d / conv3d: rank 3 / 4 / 5)"
        if any(int(p) < 0 for p in int_list(args.get("padding"), rank - 2, 0)):
            return False, "negative padding is not supported"
        if is_transposed(node):
            return _transposed_support(node)
        return _conv3d_support(node) if rank == 5 else SUPPORTED

    def _weight(self, gb: GraphBuilder, node: torch.fx.Node, weight: torch.fx.Node) -> QnnTensor:
        """The weight in QNN's layout: conv1d's [Cout, Cin/group, k] is viewed as
        [Cout, Cin/group, 1, k] first."""
        shape = logical_shape(weight)
        if len(shape) == 3:
            shape = shape[:2] + [1] + shape[2:]
        perm = weight_perm(len(shape), is_transposed(node))
        data = gb.constant_data(weight)
        if data is not None:
            array = data.detach().contiguous().numpy().reshape(shape)
            if is_transposed(node) and any(d != 1 for d in transposed_dilation(node)):
                array = dilate_kernel(array, transposed_dilation(node))
            attrs = weight.meta.get(QCOM_QUANT_ATTRS)
            if attrs is not None and attrs.block_size is not None and not lpbq_in_payload(node):
                array, attrs = lpbq_as_per_channel(array, attrs)
            array = array.transpose(perm)
            if attrs is not None:
                return gb.quantized_static(weight.name, np.ascontiguousarray(array), attrs, perm)
            return gb.static_tensor(weight.name, array)
        source = gb.tensor(weight, LAYOUT_CHANNEL_FIRST)
        if len(source.dims) != len(shape):
            source = reshape(gb, node, source, shape, "weight_view")
        out = gb.like(source, f"{weight.name}_hwio", [shape[p] for p in perm])
        gb.add_op(node, QnnOpType.Transpose, [source], [out], [uint32_tensor("perm", perm)], suffix="weight")
        return out

    def _bias(
        self, gb: GraphBuilder, node: torch.fx.Node, bias: object, cout: int, x: QnnTensor, weight: QnnTensor
    ) -> QnnTensor:
        if isinstance(bias, torch.fx.Node):
            return gb.tensor(bias)
        attrs = zero_bias_attrs(x, weight, cout) if is_quantized(node) else None
        if attrs is not None:  # HTP refuses a FLOAT_32 bias in a quantized conv (error 3110)
            return gb.quantized_static(f"{node.name}_bias", np.zeros([cout], np.int64), attrs)
        return gb.static_tensor(f"{node.name}_bias", np.zeros([cout], dtype=np.float32))

    def _params(self, node: torch.fx.Node, depthwise: bool, unset: List[int]) -> list:
        spatial = spatial_dims(node)
        pad_amount = conv_pad_amount(node)
        output_padding = [p - u for p, u in zip(spatial_args(node, "output_padding", 0), unset)]
        if depthwise_transposed(node):
            pad_amount = [[b, e - op] for (b, e), op in zip(pad_amount, output_padding)]
            output_padding = [0] * len(output_padding)
        params = [
            uint32_tensor("stride", spatial_args(node, "stride", 1)),
            uint32_tensor("pad_amount", pad_amount, [spatial, 2]),
        ]
        if is_transposed(node):
            params.append(uint32_tensor("output_padding", output_padding))
        else:
            params.append(uint32_tensor("dilation", spatial_args(node, "dilation", 1)))
        if not depthwise:
            params.append(uint32_scalar("group", int(conv_args(node).get("groups", 1))))
        return params

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        args = conv_args(node)
        x = gb.tensor(args["input"], LAYOUT_CHANNEL_LAST)
        weight = self._weight(gb, node, args["weight"])
        cout = logical_shape(node)[1]
        depthwise = uses_depthwise_op(node)
        if unit_height(node):  # [N, L, C] -> [N, 1, L, C]
            x = reshape(gb, node, x, [x.dims[0], 1] + list(x.dims[1:]), "unit_height")
        inputs = [x, weight, self._bias(gb, node, args.get("bias"), cout, x, weight)]
        qnn_type = QnnOpType.DepthWiseConv2d if depthwise else _QNN_TYPES[(spatial_dims(node), is_transposed(node))]
        out = gb.define_output(node)
        target = (
            out if not unit_height(node) else gb.like(out, f"{node.name}_2d", [out.dims[0], 1] + list(out.dims[1:]))
        )
        # per spatial axis of the QNN op: the trailing rows its TransposeConv leaves unset
        unset = ([0] if unit_height(node) else []) + (rows_qnn_leaves_unset(node) if is_transposed(node) else [])
        unset = unset or [0] * spatial_dims(node)
        written = target
        if any(unset):
            written = gb.like(
                target,
                f"{node.name}_written",
                [target.dims[0]] + [d - u for d, u in zip(target.dims[1:-1], unset)] + [target.dims[-1]],
            )
        add_weighted_op(gb, node, qnn_type, inputs, written, self._params(node, depthwise, unset))
        if any(unset):
            append_bias_rows(gb, node, written, inputs[2], unset, target)
        if unit_height(node):
            gb.add_op(node, QnnOpType.Reshape, [target], [out], suffix="drop_unit_height")
