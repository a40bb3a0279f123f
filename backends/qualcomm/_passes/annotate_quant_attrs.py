"""Read every quantize / dequantize node of a delegated QDQ graph into a QuantAttrs:
quantize nodes get QCOM_QUANT_ATTRS (encoding of their output), dequantize nodes get
QCOM_DEQUANT_ATTRS (encoding of their input)."""

from __future__ import annotations

from typing import Callable, Dict

import numpy as np
import torch
from executorch.backends.transforms.utils import get_param_tensor, is_param_node
from torch.export import ExportedProgram

from backends.qualcomm.builders.quant_encoding import QuantAttrs, is_dequantize, is_quantize
from backends.qualcomm.utils.constants import QCOM_DEQUANT_ATTRS, QCOM_QUANT_ATTRS
from backends.qualcomm.utils.errors import QnnLoweringError


def _value(ep: ExportedProgram, arg: object, node: torch.fx.Node) -> object:
    """A literal, or the data of a constant placeholder, as numpy / python number."""
    if isinstance(arg, torch.fx.Node):
        if arg.op == "placeholder" and is_param_node(ep, arg):
            data = get_param_tensor(ep, arg).detach()
            return data.item() if data.numel() == 1 and data.dim() == 0 else data.numpy()
        raise QnnLoweringError(f"quantization parameter '{arg.name}' is not a constant", node)
    return arg


def _affine_attrs(ep: ExportedProgram, node: torch.fx.Node) -> QuantAttrs:
    _, block_size, scale, zp, dtype, qmin, qmax = list(node.args[:7])
    scale = np.asarray(_value(ep, scale, node), np.float32)
    zp = np.asarray(_value(ep, zp, node)) if zp is not None else np.zeros(scale.shape, np.int32)
    block_size = tuple(int(b) for b in block_size)
    # A transposed conv's weight [Cin, Cout, k..] is blocked along dim 0 (block (b, 1, k..)):
    # its channel axis is 1. The effective scales are kept as [channel, block].
    axis = 1 if len(block_size) > 2 and block_size[0] > 1 and block_size[1] == 1 else 0
    scale = np.moveaxis(scale, axis, 0)
    return QuantAttrs(
        scale.reshape(scale.shape[0], -1), zp, int(qmin), int(qmax), dtype, axis=axis, block_size=block_size
    )


def _per_channel_attrs(ep: ExportedProgram, node: torch.fx.Node) -> QuantAttrs:
    _, scales, zps, axis, qmin, qmax, dtype = list(node.args[:7])
    scales = np.asarray(_value(ep, scales, node), np.float32).reshape(-1)
    zps = np.asarray(_value(ep, zps, node)).reshape(-1) if zps is not None else np.zeros(len(scales), np.int64)
    return QuantAttrs(scales, zps, int(qmin), int(qmax), dtype, axis=int(axis))


def _per_tensor_attrs(ep: ExportedProgram, node: torch.fx.Node) -> QuantAttrs:
    _, scale, zp, qmin, qmax, dtype = list(node.args[:6])
    scale, zp = _value(ep, scale, node), _value(ep, zp, node)
    return QuantAttrs(
        float(np.asarray(scale).reshape(-1)[0]), int(np.asarray(zp).reshape(-1)[0]), int(qmin), int(qmax), dtype
    )


def quant_attrs_of(ep: ExportedProgram, node: torch.fx.Node) -> QuantAttrs:
    """The encoding a Q/DQ node describes."""
    name = str(node.target)
    readers: Dict[str, Callable] = {"dequantize_affine": _affine_attrs, "per_channel": _per_channel_attrs}
    for key, reader in readers.items():
        if key in name:
            return reader(ep, node)
    return _per_tensor_attrs(ep, node)


def annotate_quant_attrs(ep: ExportedProgram) -> ExportedProgram:
    for node in ep.graph_module.graph.nodes:
        if is_quantize(node):
            node.meta[QCOM_QUANT_ATTRS] = quant_attrs_of(ep, node)
        elif is_dequantize(node):
            node.meta[QCOM_DEQUANT_ATTRS] = quant_attrs_of(ep, node)
    return ep
