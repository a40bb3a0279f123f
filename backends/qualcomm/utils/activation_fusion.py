"""Which relu / relu6 / hardtanh nodes of a QDQ graph QNN HTP fuses into the conv / linear
before them: HTP requantizes that op's accumulator once, straight into the activation's
encoding, so the quantize -> dequantize pair between them never rounds (the host engine does
the same: runtime/engine/ActivationFusion.h). References that model HTP (the test suite's QDQ
reference, the debugger's isolated per-op reference) skip that pair."""

from __future__ import annotations

from typing import Optional

import torch

from backends.qualcomm.builders.quant_encoding import DEQUANTIZE_OPS, QUANTIZE_OPS

_PRODUCERS = {"aten::conv2d", "aten::convolution", "aten::linear"}
_ACTIVATIONS = {"aten::relu", "aten::relu_", "aten::hardtanh", "aten::hardtanh_"}


def _target_is(node: torch.fx.Node, names: set) -> bool:
    """Whether node calls an aten op (or its edge variant) named in `names`."""
    schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
    return schema is not None and schema.name in names


def _only_input(node: object, targets: set) -> Optional[torch.fx.Node]:
    """node's first argument when `node` is a single-user call of one of `targets`."""
    if (
        isinstance(node, torch.fx.Node)
        and node.op == "call_function"
        and node.target in targets
        and len(node.users) == 1
        and isinstance(node.args[0], torch.fx.Node)
    ):
        return node.args[0]
    return None


def fused_activation_producer(node: torch.fx.Node) -> Optional[torch.fx.Node]:
    """The conv / linear whose output reaches activation `node` only through one quantize ->
    dequantize pair (so HTP fuses the two); None for any other node."""
    if not _target_is(node, _ACTIVATIONS) or not node.args:
        return None
    q = _only_input(node.args[0], DEQUANTIZE_OPS)
    producer = _only_input(q, QUANTIZE_OPS) if q is not None else None
    if producer is None or not _target_is(producer, _PRODUCERS) or len(producer.users) != 1:
        return None
    return producer


def with_fused_activations(module: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of a converted QDQ module whose fused activations read their conv / linear
    unrounded (one rounding, into the activation's encoding, as HTP computes the pair)."""
    import copy

    fused = copy.deepcopy(module)
    for node in list(fused.graph.nodes):
        producer = fused_activation_producer(node)
        if producer is not None:
            node.replace_input_with(node.args[0], producer)
    fused.graph.eliminate_dead_code()
    fused.recompile()
    return fused
