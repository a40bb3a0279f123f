"""The converted PT2E (QDQ) module run in float64: quantize / dequantize, and so every op between
them, in double precision (separates the float32 reference's own rounding from an engine's)."""

from __future__ import annotations

import copy

import torch

_QD = torch.ops.quantized_decomposed


def _quantize64(x, scale, zero_point, qmin, qmax, dtype):
    return torch.clamp(torch.round(x.double() * (1.0 / float(scale))) + zero_point, qmin, qmax).to(dtype)


def _dequantize64(x, scale, zero_point, qmin, qmax, dtype, out_dtype=None):
    return (x.double() - zero_point) * float(scale)


def _dequantize_per_channel64(x, scales, zero_points, axis, qmin, qmax, dtype, out_dtype=None):
    shape = [1] * x.dim()
    shape[axis] = -1
    offset = zero_points.view(shape).double() if zero_points is not None else 0.0
    return (x.double() - offset) * scales.double().view(shape)


_FLOAT64_TARGETS = {
    _QD.quantize_per_tensor.default: _quantize64,
    _QD.dequantize_per_tensor.default: _dequantize64,
    _QD.dequantize_per_channel.default: _dequantize_per_channel64,
}


def qdq_reference_float64(converted: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of a converted QDQ module whose quantize / dequantize run in float64 (so every
    op between them does too)."""
    reference = copy.deepcopy(converted)
    for node in reference.graph.nodes:
        if node.op == "call_function" and node.target in _FLOAT64_TARGETS:
            node.target = _FLOAT64_TARGETS[node.target]
        elif node.op == "call_function" and "quantize" in str(node.target):
            raise NotImplementedError(f"no float64 version of {node.target}")
    reference.recompile()
    return reference
