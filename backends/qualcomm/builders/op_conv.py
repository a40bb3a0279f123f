"""2D convolution -> Conv2d / DepthWiseConv2d (NHWC activations, HWIO weights)."""
from __future__ import annotations

from typing import List, Optional

import numpy as np
import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape
from backends.qualcomm.builders.registry import (
    LayoutPolicy, NodeBuilder, QuantFamily, SUPPORTED, SupportResult, aten_ops, check_float_io,
    register_builder, tensor_vals,
)
from backends.qualcomm.builders.quant_encoding import ZERO_INT32_ATTRS, QuantAttrs
from backends.qualcomm.builders.utils import int_list, is_quantized
from backends.qualcomm.serialization.qnn_graph import QnnTensor, uint32_scalar, uint32_tensor
from backends.qualcomm.utils.constants import LAYOUT_CHANNEL_FIRST, LAYOUT_CHANNEL_LAST, QCOM_PAD_AMOUNT

OIHW_TO_HWIO = (2, 3, 1, 0)


def conv_pad_amount(node: torch.fx.Node) -> List[List[int]]:
    """[[top, bottom], [left, right]]: conv padding plus any zero pad folded into it."""
    if QCOM_PAD_AMOUNT in node.meta:
        return [list(p) for p in node.meta[QCOM_PAD_AMOUNT]]
    ph, pw = int_list(conv_args(node).get("padding"), 2, 0)
    return [[ph, ph], [pw, pw]]


def zero_bias_attrs(x: QnnTensor, weight: QnnTensor, cout: int) -> Optional[QuantAttrs]:
    """int32 encoding of the zero bias of a quantized conv without one: HTP wants the bias
    scale = input scale x weight scale (per output channel when the weight is); None for
    LPBQ / float weights."""
    if x.quant is None or weight.quant is None or weight.quant.block_size:
        return None
    wq = weight.quant
    w_scales = np.asarray(wq.scales if wq.scales is not None else [wq.scale] * cout, np.float64)
    scales = (np.float64(x.quant.scale) * w_scales).astype(np.float32)
    zero = ZERO_INT32_ATTRS
    if wq.scales is None:
        return QuantAttrs(float(scales[0]), 0, zero.qmin, zero.qmax, zero.dtype)
    return QuantAttrs(scales, np.zeros(cout, np.int64), zero.qmin, zero.qmax, zero.dtype, axis=0)


def conv_args(node: torch.fx.Node) -> dict:
    """Named args of aten.convolution."""
    names = ["input", "weight", "bias", "stride", "padding", "dilation", "transposed",
             "output_padding", "groups"]
    values = dict(zip(names, node.args))
    values.update(node.kwargs)
    return values


@register_builder
class ConvolutionBuilder(NodeBuilder):
    targets = [exir_ops.edge.aten.convolution.default]
    quant_annotations = dict.fromkeys(aten_ops("conv2d.default", "conv2d.padding", "convolution.default"),
                                      QuantFamily.WEIGHTED)
    layout_policy = LayoutPolicy.SENSITIVE

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        ok, reason = check_float_io(node)
        if not ok:
            return ok, reason
        args = conv_args(node)
        if args.get("transposed", False):
            return False, "transposed convolution is not supported"
        if len(tensor_vals(node)[0].shape) != 4:
            return False, "only 2D convolution (rank-4 input) is supported"
        if any(int(p) < 0 for p in args.get("padding", [0])):
            return False, "negative padding is not supported"
        return SUPPORTED

    def _weight(self, gb: GraphBuilder, node: torch.fx.Node, weight: torch.fx.Node) -> QnnTensor:
        if gb.constant_data(weight) is not None:
            return gb.static_from_constant(weight, OIHW_TO_HWIO)
        source = gb.tensor(weight, LAYOUT_CHANNEL_FIRST)
        dims = [source.dims[p] for p in OIHW_TO_HWIO]
        out = gb.like(source, f"{weight.name}_hwio", dims)
        gb.add_op(node, "Transpose", [source], [out], [uint32_tensor("perm", OIHW_TO_HWIO)], suffix="weight")
        return out

    def _bias(self, gb: GraphBuilder, node: torch.fx.Node, bias: object, cout: int, x: QnnTensor,
              weight: QnnTensor) -> QnnTensor:
        if isinstance(bias, torch.fx.Node):
            return gb.tensor(bias)
        attrs = zero_bias_attrs(x, weight, cout) if is_quantized(node) else None
        if attrs is not None:  # HTP refuses a FLOAT_32 bias in a quantized conv (error 3110)
            return gb.quantized_static(f"{node.name}_bias", np.zeros([cout], np.int64), attrs)
        return gb.static_tensor(f"{node.name}_bias", np.zeros([cout], dtype=np.float32))

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        args = conv_args(node)
        x = gb.tensor(args["input"], LAYOUT_CHANNEL_LAST)
        cout, cin_per_group = logical_shape(args["weight"])[:2]
        cin = logical_shape(args["input"])[1]
        groups = int(args.get("groups", 1))
        params = [
            uint32_tensor("stride", int_list(args.get("stride"), 2, 1)),
            uint32_tensor("pad_amount", conv_pad_amount(node), [2, 2]),
            uint32_tensor("dilation", int_list(args.get("dilation"), 2, 1)),
        ]
        depthwise = groups > 1 and groups == cin and cin_per_group == 1
        if not depthwise:
            params.append(uint32_scalar("group", groups))
        weight = self._weight(gb, node, args["weight"])
        inputs = [x, weight, self._bias(gb, node, args.get("bias"), cout, x, weight)]
        qnn_type = "DepthWiseConv2d" if depthwise else "Conv2d"
        gb.add_op(node, qnn_type, inputs, [gb.define_output(node)], params)
