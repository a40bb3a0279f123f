"""Requantization where producer and consumer encodings differ: a dequantize -> quantize
chain (e.g. 8-bit producer, 16-bit consumer) becomes one quantize node reading the
quantized tensor, which the builder emits as QNN `Convert`; equal encodings fold away."""

from __future__ import annotations

import torch
from torch.export import ExportedProgram

from backends.qualcomm.builders.quant_encoding import is_dequantize, is_quantize
from backends.qualcomm.utils.constants import QCOM_QUANT_ATTRS


def _requantize(graph: torch.fx.Graph, dq: torch.fx.Node) -> None:
    source = dq.args[0]
    source_attrs = source.meta.get(QCOM_QUANT_ATTRS)
    if source_attrs is None:
        return
    for q in [u for u in dq.users if is_quantize(u)]:
        if source_attrs.same_encoding(q.meta[QCOM_QUANT_ATTRS]):
            q.replace_all_uses_with(source)
            graph.erase_node(q)
        else:
            q.replace_input_with(dq, source)
    if not dq.users:
        graph.erase_node(dq)


def insert_requantize(ep: ExportedProgram) -> ExportedProgram:
    graph = ep.graph_module.graph
    for dq in [n for n in graph.nodes if is_dequantize(n)]:
        _requantize(graph, dq)
    ep.graph_module.recompile()
    return ep
