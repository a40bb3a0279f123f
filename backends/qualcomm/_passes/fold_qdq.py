"""Fold the QDQ pairs of a delegated graph into tensor encodings.

1. A dequantize of a constant (quantized weight / bias / table) becomes an encoding on the
   constant placeholder, which the builders write as a STATIC quantized tensor.
2. A quantize after an op whose activation inputs are all dequantized (a quantized op)
   becomes the op's output encoding. The op may also be a delegate output: only a quantize
   node moved to another delegate (partitioner/quant_boundaries.py) reads it there, and it
   gets the dequantized value (InsertIOQDQ), which that quantize maps back to the same
   integers; so the op stays quantized instead of running in float.
3. A dequantize of a quantized tensor is bypassed for consumers that are quantized ops
   (and for comparisons of quantized inputs, whose bool output has no encoding); it stays (QNN `Dequantize`) for float consumers and delegate outputs.
0. A dequantize -> data-movement chain -> quantize of one encoding (a reshape of a transposed
   tensor is annotated as one op, but export makes it clone + view) runs on the quantized
   tensor: the chain's nodes get the encoding and the quantize goes.
Quantize nodes left over are graph-input `Quantize`s or requantizations (InsertRequantize)."""

from __future__ import annotations

import operator
from typing import List

import torch
from torch.export import ExportedProgram

from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.quant_encoding import is_dequantize, is_quantize
from backends.qualcomm.builders.utils import is_constant
from backends.qualcomm.utils.constants import QCOM_DEQUANT_ATTRS, QCOM_QUANT_ATTRS


def _data_movement_targets() -> set:
    """Edge ops that only move or alias their one tensor input's values."""
    aten, dim_order = exir_ops.edge.aten, exir_ops.edge.dim_order_ops
    targets = {
        aten.view_copy.default,
        aten.clone.default,
        aten.alias_copy.default,
        aten.permute_copy.default,
        aten.unsqueeze_copy.default,
        aten.squeeze_copy.dims,
        aten.squeeze_copy.dim,
        aten.squeeze_copy.default,
        aten.expand_copy.default,
    }
    clone_dim_order = getattr(dim_order, "_clone_dim_order", None)
    if clone_dim_order is not None:
        targets.add(clone_dim_order.default)
    return targets


def compute_source(node: torch.fx.Node) -> torch.fx.Node:
    """The op that produces `node` (a getitem's tuple-returning source)."""
    return node.args[0] if node.target is operator.getitem else node


def _activation_inputs(node: torch.fx.Node) -> List[torch.fx.Node]:
    return [a for a in node.all_input_nodes if not is_constant(a)]


def _is_quantized_input(node: torch.fx.Node) -> bool:
    return is_dequantize(node) or QCOM_QUANT_ATTRS in node.meta


def _is_index_input(node: torch.fx.Node) -> bool:
    """An integer / bool tensor (indices, masks): never quantized, so it does not make an op float."""
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and not val.is_floating_point() and not _is_quantized_input(node)


def is_quantized_op(node: torch.fx.Node) -> bool:
    """Every non-constant float input comes from a dequantize (or is already quantized); an op
    whose only float data is a quantized constant (embedding: table + int indices) is too."""
    if node.op != "call_function" or is_quantize(node) or is_dequantize(node):
        return False
    if not node.all_input_nodes:
        return True  # a constant creator (full, arange): its value is quantized at lowering
    inputs = [a for a in _activation_inputs(node) if not _is_index_input(a)]
    if inputs:
        return all(_is_quantized_input(a) for a in inputs)
    return any(is_constant(a) and QCOM_QUANT_ATTRS in a.meta for a in node.all_input_nodes)


def _data_movement_chain(q: torch.fx.Node, targets: set) -> List[torch.fx.Node]:
    """The data-movement nodes between `q` and the dequantize they start from (first first),
    each read by the next only; [] when `q` is not at the end of such a chain."""
    chain: List[torch.fx.Node] = []
    node = q.args[0]
    while (
        isinstance(node, torch.fx.Node)
        and node.op == "call_function"
        and node.target in targets
        and len(node.users) == 1
        and QCOM_QUANT_ATTRS not in node.meta
    ):
        chain.append(node)
        node = node.args[0]
    if not chain or not isinstance(node, torch.fx.Node) or not is_dequantize(node):
        return []
    return chain[::-1]


def _fold_data_movement_chains(graph: torch.fx.Graph) -> None:
    targets = _data_movement_targets()
    for q in [n for n in graph.nodes if is_quantize(n)]:
        chain = _data_movement_chain(q, targets)
        if not chain:
            continue
        attrs, dq = q.meta[QCOM_QUANT_ATTRS], chain[0].args[0]
        if not dq.meta[QCOM_DEQUANT_ATTRS].same_encoding(attrs):
            continue  # a requantization: the chain runs in float between the two
        for node in chain:
            node.meta[QCOM_QUANT_ATTRS] = attrs
        q.replace_all_uses_with(chain[-1])
        graph.erase_node(q)


def _fold_constant_dequantizes(graph: torch.fx.Graph) -> None:
    for dq in [n for n in graph.nodes if is_dequantize(n)]:
        source = dq.args[0]
        if not is_constant(source):
            continue
        source.meta[QCOM_QUANT_ATTRS] = dq.meta[QCOM_DEQUANT_ATTRS]
        for user in list(dq.users):
            if user.op != "output":
                user.replace_input_with(dq, source)
        if not dq.users:
            graph.erase_node(dq)


def _fold_output_quantizes(graph: torch.fx.Graph) -> None:
    for q in [n for n in graph.nodes if is_quantize(n)]:
        producer = q.args[0]
        if not isinstance(producer, torch.fx.Node) or not is_quantized_op(compute_source(producer)):
            continue
        if any(not is_quantize(u) and u.op != "output" for u in producer.users):
            continue  # a float consumer inside the delegate reads the unquantized value
        attrs = q.meta[QCOM_QUANT_ATTRS]
        existing = producer.meta.get(QCOM_QUANT_ATTRS)
        if existing is not None and not existing.same_encoding(attrs):
            continue  # a second encoding of the same tensor: InsertRequantize makes it a Convert
        producer.meta[QCOM_QUANT_ATTRS] = attrs
        compute_source(producer).meta[QCOM_QUANT_ATTRS] = attrs
        q.replace_all_uses_with(producer)
        graph.erase_node(q)


def _consumes_quantized(user: torch.fx.Node) -> bool:
    if user.op == "call_function" and _compares_quantized(user):
        return True
    return user.op == "call_function" and QCOM_QUANT_ATTRS in compute_source(user).meta and not is_quantize(user)


def _compares_quantized(node: torch.fx.Node) -> bool:
    """A comparison whose float inputs are all quantized: it reads them as they are (bool
    output, no encoding of its own)."""
    from backends.qualcomm.builders.op_logic import COMPARE_OPS

    return node.target in COMPARE_OPS and is_quantized_op(node)


def _bypass_activation_dequantizes(graph: torch.fx.Graph) -> None:
    for dq in [n for n in graph.nodes if is_dequantize(n)]:
        source = dq.args[0]
        if QCOM_QUANT_ATTRS not in source.meta or is_constant(source):
            continue
        for user in list(dq.users):
            if _consumes_quantized(user):
                user.replace_input_with(dq, source)
        if not dq.users:
            graph.erase_node(dq)


def fold_qdq(ep: ExportedProgram) -> ExportedProgram:
    graph = ep.graph_module.graph
    _fold_data_movement_chains(graph)
    _fold_constant_dequantizes(graph)
    _fold_output_quantizes(graph)
    _bypass_activation_dequantizes(graph)
    ep.graph_module.recompile()
    return ep
