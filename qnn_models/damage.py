"""Fault injection for checking the debugger (the debugger demo's `--damage_node` and the
debugger tests): coarsen one conv's weights in the delegate only.

Inside `damage_conv_weights_in_delegate(node_name, bits)`, lowering keeps the
ETRecord's reference graph intact but the delegate payload gets that conv's (or
linear's) weights rounded to `bits` bits of resolution: quantized weights keep their
8-bit encoding, only 2**bits levels remain; float weights keep 2**bits levels over
their range. The debugger must then name that
node as the first one departing from the CPU reference."""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from executorch.backends.transforms.utils import get_param_tensor, is_param_node
from torch.export import ExportedProgram

import backends.qualcomm.qnn_preprocess as qnn_preprocess
from backends.qualcomm.utils.constants import QCOM_QUANT_ATTRS


def coarsen_weights(weights: torch.Tensor, bits: int, qmax: int) -> torch.Tensor:
    """Integer weights with only 2**bits levels left (same encoding, step qmax+1 >> (bits-1))."""
    step = (int(qmax) + 1) >> (bits - 1)
    levels = torch.clamp(torch.round(weights.to(torch.float32) / step), -(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    return (levels * step).to(weights.dtype)


def _damage(ep: ExportedProgram, node_name: str, bits: int) -> None:
    node = next((n for n in ep.graph_module.graph.nodes if n.name == node_name), None)
    if node is None or node.op != "call_function" or len(node.args) < 2:
        return  # the node lives in another delegate
    weight = node.args[1]
    if not isinstance(weight, torch.fx.Node) or not is_param_node(ep, weight):
        raise ValueError(f"node '{node_name}' has no constant weight to damage")
    attrs = weight.meta.get(QCOM_QUANT_ATTRS)
    data = get_param_tensor(ep, weight)
    if attrs is not None:
        data.copy_(coarsen_weights(data, bits, attrs.qmax))
    else:  # float weights: 2**bits levels over their range
        with torch.no_grad():
            step = float(data.abs().max()) / (1 << (bits - 1))
            data.copy_(torch.round(data / step) * step)


@contextlib.contextmanager
def damage_conv_weights_in_delegate(node_name: str, bits: int = 2) -> Iterator[None]:
    """While active, QnnDelegate.preprocess coarsens the weights of edge node `node_name`."""
    original = qnn_preprocess.run_preprocess_passes

    def damaged_preprocess(ep: ExportedProgram) -> ExportedProgram:
        ep = original(ep)
        _damage(ep, node_name, bits)
        return ep

    qnn_preprocess.run_preprocess_passes = damaged_preprocess
    try:
        yield
    finally:
        qnn_preprocess.run_preprocess_passes = original
