"""The delegate's inputs and outputs.

Float inputs: the quantize node after a float graph input stays (FoldQDQ never folds it)
and becomes QNN `Quantize`. Float outputs: a delegate output that is still a quantized
tensor gets a dequantize node (QNN `Dequantize`).

Quantized integer inputs and outputs: when a quantize node and one of its dequantize
consumers land in different delegates (plain `to_edge_transform_and_lower` does not run
the DuplicateQuantize edge pass, and the partitioner may not change the graph), the edge
graph passes the quantized integer tensor (uint8; int32 holding uint16 values) from one
delegate to the next. The engine's quantized tensors are UFIXED_POINT_8/16, so at those
boundaries the integers cross as they are and the encoding comes from the quantize /
dequantize node's own args. uint8 codes of one per-tensor 0..255 encoding (an 8-bit KV cache
passed as uint8, llm/cache_codes.py) are UFIXED_POINT_8 graph inputs / outputs bound to the
uint8 tensor with no op; other integer codes (uint16 held in int32) are converted:
- input  (`quantize_integer_inputs`, first):  q_int -> Cast f32 -> - zero_point -> * scale
  -> Quantize(encoding) -> the dequantize's consumers (exactly the stored integers back);
- output (`insert_io_qdq`, after FoldQDQ):  quantized -> Dequantize -> * (1/scale)
  -> + (zero_point + 0.5) -> Cast to the edge dtype (truncation = rounding, q >= 0)."""

from __future__ import annotations

from typing import List, Optional

import torch
from executorch.exir.dialects._ops import ops as exir_ops
from torch.export import ExportedProgram

from backends.qualcomm.builders.graph_builder import io_dim_order
from backends.qualcomm.builders.quant_encoding import QuantAttrs, is_dequantize
from backends.qualcomm.utils.constants import (
    QCOM_DEQUANT_ATTRS,
    QCOM_OUTPUT_DIM_ORDERS,
    QCOM_OUTPUT_DTYPES,
    QCOM_QUANT_ATTRS,
)
from backends.qualcomm.utils.errors import QnnLoweringError

_DQ = exir_ops.edge.quantized_decomposed.dequantize_per_tensor.default
_Q = exir_ops.edge.quantized_decomposed.quantize_per_tensor.default
_CAST = exir_ops.edge.aten._to_copy.default
_MUL = exir_ops.edge.aten.mul.Scalar
_ADD = exir_ops.edge.aten.add.Scalar
_SUB = exir_ops.edge.aten.sub.Scalar


def _output_node(graph: torch.fx.Graph) -> torch.fx.Node:
    return next(n for n in graph.nodes if n.op == "output")


def _flat_outputs(output: torch.fx.Node) -> List[object]:
    outputs = output.args[0]
    return list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]


def _set_outputs(output: torch.fx.Node, flat: List[object]) -> None:
    outputs = output.args[0]
    output.args = (type(outputs)(flat) if isinstance(outputs, (tuple, list)) else flat[0],)


def _val_dtype(node: object) -> Optional[torch.dtype]:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return val.dtype if isinstance(val, torch.Tensor) else None


def _is_integer(dtype: Optional[torch.dtype]) -> bool:
    return dtype is not None and not dtype.is_floating_point and dtype is not torch.bool


def _call(
    graph: torch.fx.Graph, target, args: tuple, val: torch.Tensor, kwargs: Optional[dict] = None
) -> torch.fx.Node:
    node = graph.call_function(target, args, kwargs or {})
    node.meta["val"] = val
    return node


def _user_inputs(ep: ExportedProgram) -> List[torch.fx.Node]:
    names = set(ep.graph_signature.user_inputs)
    return [n for n in ep.graph_module.graph.nodes if n.op == "placeholder" and n.name in names]


def _quantize_integer_input(graph: torch.fx.Graph, placeholder: torch.fx.Node, dq: torch.fx.Node) -> None:
    """placeholder (stored integers) -> float real values -> Quantize with dq's encoding -> dq."""
    if "per_tensor" not in str(dq.target):
        raise QnnLoweringError(
            f"delegate input '{placeholder.name}' is a quantized integer tensor with a "
            "per-channel encoding; only per-tensor activations can cross delegates",
            dq,
        )
    _, scale, zero_point = dq.args[:3]
    if not isinstance(scale, (int, float)) or not isinstance(zero_point, int):
        raise QnnLoweringError(
            f"delegate input '{placeholder.name}': the dequantize's scale / zero point are not constants", dq
        )
    fval = placeholder.meta["val"].to(torch.float32)
    with graph.inserting_before(dq):
        as_float = _call(graph, _CAST, (placeholder,), fval, {"dtype": torch.float32})
        centered = _call(graph, _SUB, (as_float, int(zero_point)), fval)
        real = _call(graph, _MUL, (centered, float(scale)), fval)
        requantized = _call(graph, _Q, (real, *dq.args[1:]), placeholder.meta["val"])
    dq.replace_input_with(placeholder, requantized)


def record_output_meta(ep: ExportedProgram) -> ExportedProgram:
    """Record the dtype and dim order the edge graph expects of each output (first pass:
    FoldQDQ and this file replace output nodes later)."""
    output = _output_node(ep.graph_module.graph)
    flat = _flat_outputs(output)
    output.meta[QCOM_OUTPUT_DTYPES] = [_val_dtype(n) for n in flat]
    output.meta[QCOM_OUTPUT_DIM_ORDERS] = [
        list(io_dim_order(n.meta.get("val"))) if isinstance(n, torch.fx.Node) else [] for n in flat
    ]
    return ep


def _uint8_encoding(ep: ExportedProgram, node: torch.fx.Node) -> Optional[QuantAttrs]:
    """The encoding of a uint8 input whose readers are all dequantizes of one per-tensor uint8
    encoding (0..255): its codes can be a UFIXED_POINT_8 graph input as they are."""
    from backends.qualcomm._passes.annotate_quant_attrs import quant_attrs_of

    readers = [u for u in node.users if u.op != "output"]
    if _val_dtype(node) != torch.uint8 or not readers or not all(is_dequantize(u) for u in readers):
        return None
    attrs = [quant_attrs_of(ep, dq) for dq in readers]
    first = attrs[0]
    if not _is_direct_uint8(first):
        return None
    return first if all(a.same_encoding(first) for a in attrs) else None


def quantize_integer_inputs(ep: ExportedProgram) -> ExportedProgram:
    """Give every quantized integer input (a graph input read by dequantize nodes) its
    encoding: a uint8 input whose dequantizes agree is a UFIXED_POINT_8 graph input read as
    it is (no op); another (uint16 codes in int32) becomes Cast + dequantize arithmetic +
    Quantize, so the delegate's own quantized tensors carry the encoding."""
    graph = ep.graph_module.graph
    changed = False
    for placeholder in _user_inputs(ep):
        if not _is_integer(_val_dtype(placeholder)):
            continue
        attrs = _uint8_encoding(ep, placeholder)
        if attrs is not None:
            placeholder.meta[QCOM_QUANT_ATTRS] = attrs
            continue
        for dq in [u for u in placeholder.users if is_dequantize(u)]:
            _quantize_integer_input(graph, placeholder, dq)
            changed = True
    if changed:
        ep.graph_module.recompile()
    return ep


def _dequantize_after(graph: torch.fx.Graph, node: torch.fx.Node, attrs: QuantAttrs) -> torch.fx.Node:
    with graph.inserting_after(node):
        dq = graph.call_function(
            _DQ, (node, float(attrs.scale), int(attrs.zero_point), attrs.qmin, attrs.qmax, attrs.dtype)
        )
    dq.meta["val"] = node.meta["val"].to(torch.float32)
    dq.meta[QCOM_DEQUANT_ATTRS] = attrs
    return dq


def _integer_output(graph: torch.fx.Graph, node: torch.fx.Node, attrs: QuantAttrs, dtype: torch.dtype) -> torch.fx.Node:
    """The stored integers of quantized `node` as a plain `dtype` tensor."""
    if attrs.axis != -1 or attrs.qmin < 0:
        raise QnnLoweringError(
            f"delegate output '{node.name}' is a quantized integer tensor with a "
            "per-channel or signed encoding; only unsigned per-tensor activations can "
            "cross delegates",
            node,
        )
    real = _dequantize_after(graph, node, attrs)
    fval = real.meta["val"]
    with graph.inserting_after(real):
        scaled = _call(graph, _MUL, (real, 1.0 / float(attrs.scale)), fval)
    with graph.inserting_after(scaled):
        shifted = _call(graph, _ADD, (scaled, float(attrs.zero_point) + 0.5), fval)
    with graph.inserting_after(shifted):
        return _call(graph, _CAST, (shifted,), fval.to(dtype), {"dtype": dtype})


def _is_direct_uint8(attrs: QuantAttrs) -> bool:
    return attrs.axis == -1 and (attrs.qmin, attrs.qmax) == (0, 255) and attrs.dtype == torch.uint8


def insert_io_qdq(ep: ExportedProgram) -> ExportedProgram:
    graph = ep.graph_module.graph
    output = _output_node(graph)
    flat = _flat_outputs(output)
    expected = output.meta.get(QCOM_OUTPUT_DTYPES) or [None] * len(flat)
    changed = False
    for i, node in enumerate(flat):
        attrs = node.meta.get(QCOM_QUANT_ATTRS) if isinstance(node, torch.fx.Node) else None
        if attrs is None or node.op == "placeholder":
            continue
        if expected[i] == torch.uint8 and _is_direct_uint8(attrs):
            continue  # the UFIXED_POINT_8 tensor is the uint8 output as it is
        if _is_integer(expected[i]):
            flat[i] = _integer_output(graph, node, attrs, expected[i])
        else:
            flat[i] = _dequantize_after(graph, node, attrs)
        changed = True
    if changed:
        _set_outputs(output, flat)
        ep.graph_module.recompile()
    return ep
