"""Keep the delegate's inputs and outputs float32. Inputs: the quantize node after a float
graph input stays (FoldQDQ never folds it) and becomes QNN `Quantize`. Outputs: a delegate
output that is still a quantized tensor gets a dequantize node (QNN `Dequantize`)."""
from __future__ import annotations

import torch
from executorch.exir.dialects._ops import ops as exir_ops
from torch.export import ExportedProgram

from backends.qualcomm.builders.quant_encoding import QuantAttrs
from backends.qualcomm.utils.constants import QCOM_DEQUANT_ATTRS, QCOM_QUANT_ATTRS

_DQ = exir_ops.edge.quantized_decomposed.dequantize_per_tensor.default


def _dequantize_after(graph: torch.fx.Graph, node: torch.fx.Node, attrs: QuantAttrs) -> torch.fx.Node:
    with graph.inserting_after(node):
        dq = graph.call_function(_DQ, (node, float(attrs.scale), int(attrs.zero_point), attrs.qmin,
                                       attrs.qmax, attrs.dtype))
    dq.meta["val"] = node.meta["val"]
    dq.meta[QCOM_DEQUANT_ATTRS] = attrs
    return dq


def insert_io_qdq(ep: ExportedProgram) -> ExportedProgram:
    graph = ep.graph_module.graph
    output = next(n for n in graph.nodes if n.op == "output")
    outputs = output.args[0]
    flat = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
    changed = False
    for i, node in enumerate(flat):
        attrs = node.meta.get(QCOM_QUANT_ATTRS) if isinstance(node, torch.fx.Node) else None
        if attrs is not None and node.op != "placeholder":
            flat[i] = _dequantize_after(graph, node, attrs)
            changed = True
    if changed:
        output.args = (type(outputs)(flat) if isinstance(outputs, (tuple, list)) else flat[0],)
        ep.graph_module.recompile()
    return ep
