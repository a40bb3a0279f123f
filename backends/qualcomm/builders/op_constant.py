"""Constant creators: full / full_like / zeros_like / ones_like / scalar_tensor / arange.

No QNN op: the value is known at lowering (full_like only reads its input's shape), so the
node becomes a STATIC tensor of the payload, quantized with the node's encoding when the
FoldQDQ pass gave it one (a graph output gets the usual Reshape copy)."""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from backends.qualcomm.builders.graph_builder import GraphBuilder
from backends.qualcomm.builders.op_shape import edge_ops
from backends.qualcomm.builders.quant_encoding import QuantAttrs
from backends.qualcomm.builders.registry import (
    NodeBuilder,
    QuantFamily,
    SUPPORTED,
    SupportResult,
    aten_ops,
    check_static_shapes,
    first_failure,
    node_val,
    register_builder,
)
from backends.qualcomm.utils.constants import QCOM_QUANT_ATTRS

_CONSTANT_DTYPES = (torch.float32, torch.float16, torch.int32, torch.int64, torch.bool)


def _materialize(arg: object) -> object:
    """A tensor argument replaced by a zero tensor of its meta shape / dtype (only its shape and
    dtype matter to a *_like op); other arguments as they are."""
    if isinstance(arg, torch.fx.Node):
        val = node_val(arg)
        return torch.zeros(tuple(int(d) for d in val.shape), dtype=val.dtype)
    return arg


def constant_value(node: torch.fx.Node) -> torch.Tensor:
    """The node's value, computed at lowering with the aten op itself."""
    op = getattr(node.target, "_op", node.target)
    args = [_materialize(a) for a in node.args]
    kwargs = {k: _materialize(v) for k, v in node.kwargs.items() if k not in ("device", "pin_memory")}
    # the meta dtype (a *_like op's input may be a quantized graph's integer tensor by now)
    kwargs["dtype"] = node_val(node).dtype
    with torch.no_grad():
        return op(*args, **kwargs).contiguous()


def _check_output(node: torch.fx.Node) -> SupportResult:
    val = node_val(node)
    if not isinstance(val, torch.Tensor) or val.dtype not in _CONSTANT_DTYPES:
        dtype = getattr(val, "dtype", None)
        return False, f"output dtype {dtype}; only float32, float16, int32, int64 and bool constants are supported"
    return SUPPORTED


def _check_value(node: torch.fx.Node) -> SupportResult:
    try:
        value = constant_value(node)
    except Exception as error:  # noqa: BLE001 (any failure keeps the node on the CPU)
        return False, f"value cannot be computed at lowering: {error}"
    if tuple(value.shape) != tuple(node_val(node).shape) or value.dtype != node_val(node).dtype:
        return False, f"computed value {tuple(value.shape)} {value.dtype} does not match the node's meta"
    return SUPPORTED


def quantized_codes(array: np.ndarray, attrs: QuantAttrs) -> np.ndarray:
    """Per-tensor quantization of `array` with `attrs` (round half to even, clamped)."""
    codes = np.rint(array.astype(np.float64) / float(attrs.scale)) + int(attrs.zero_point)
    return np.clip(codes, attrs.qmin, attrs.qmax).astype(np.int64)


@register_builder
class ConstantBuilder(NodeBuilder):
    targets = edge_ops(
        "full.default",
        "full_like.default",
        "zeros_like.default",
        "ones_like.default",
        "scalar_tensor.default",
        "arange.start_step",
        "arange.default",
        "arange.start",
        "zeros.default",
        "ones.default",
    )
    quant_annotations = dict.fromkeys(
        aten_ops(
            "full.default",
            "full_like.default",
            "zeros_like.default",
            "ones_like.default",
            "scalar_tensor.default",
            "zeros.default",
            "ones.default",
            "arange.start_step",
            "arange.default",
            "arange.start",
        ),
        QuantFamily.COMPUTE,
    )

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return first_failure(lambda: _check_output(node), lambda: check_static_shapes(node), lambda: _check_value(node))

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        array = constant_value(node).numpy()
        if array.ndim == 0:
            array = array.reshape(1)  # QNN refuses rank-0 tensors (op validation: "incorrect Rank 0")
        attrs: Optional[QuantAttrs] = node.meta.get(QCOM_QUANT_ATTRS)
        if attrs is not None and attrs.axis < 0:
            tensor = gb.quantized_static(node.name, quantized_codes(array, attrs), attrs)
        else:
            tensor = gb.static_tensor(node.name, array)
        gb.bind(node, tensor)
