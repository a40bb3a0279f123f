"""Per-op reference with the delegate's inputs: separates an op's own error from drift.

ExecuTorch's IntermediateOutputCapturer runs the whole reference graph on the
sample input, so small (1-step) differences accumulate through a deep
quantized network and late layers show low agreement even when every op is
right. This capturer computes each dumped node's reference from the values
the delegate produced for its inputs: after a dumped node runs, its output is
replaced by the delegate's tensor (dequantized, back in PyTorch layout) for
the nodes downstream (a node folded into a later one, e.g. a conv whose batch norm
the delegate folded, keeps its reference value). A low score then means this op itself departs. An activation
that QNN HTP fuses into the conv / linear before it is computed from that op's unrounded
reference output (utils/activation_fusion.py), as HTP computes the pair."""

from __future__ import annotations

import operator
from typing import Any, Dict, List

import torch

from backends.qualcomm._passes.resolve_debug_handle import dumped_handle_owners
from backends.qualcomm.debugger.dump_info import DumpedTensor, dumps_by_edge_handle
from backends.qualcomm.utils.activation_fusion import fused_activation_producer


class IsolatingCapturer(torch.fx.Interpreter):
    """{(handle,): reference output} like IntermediateOutputCapturer, with delegate inputs."""

    def __init__(
        self,
        module: torch.fx.GraphModule,
        runtime: Dict[int, List[torch.Tensor]],
        dumped: Dict[int, List[DumpedTensor]],
    ):
        super().__init__(module)
        self.runtime = runtime
        self.dumped = dumped
        self.owners = dumped_handle_owners(module.graph.nodes)
        self.dump_of = dumps_by_edge_handle(dumped)  # {edge handle: dump holding its output}
        self.captured: Dict[tuple, Any] = {}
        self.unrounded: Dict[torch.fx.Node, Any] = {}  # fusing producers' own results

    def run_and_capture(self, *args) -> Dict[tuple, Any]:
        self.captured = {}
        self.unrounded = {}
        self.run(*args)
        return self.captured

    def run_node(self, node: torch.fx.Node) -> Any:
        producer = fused_activation_producer(node)
        if producer is not None and producer in self.unrounded:
            args, kwargs = self.fetch_args_kwargs_from_env(node)
            result = getattr(self, node.op)(node.target, (self.unrounded[producer],) + tuple(args[1:]), kwargs)
        else:
            result = super().run_node(node)
        if any(fused_activation_producer(user) is node for user in _users_after_qdq(node)):
            self.unrounded[node] = result
        handle = self.owners.get(node) if node.target is not operator.getitem else None
        dump_handle = self.dump_of.get(handle) if handle is not None else None
        if dump_handle is None or dump_handle not in self.runtime:
            return result  # not dumped, or folded into a later node (its tensor holds that one's value)
        self.captured[(handle,)] = _detached(result)
        return self._delegate_value(dump_handle, result)

    def _delegate_value(self, dump_handle: int, result: Any) -> Any:
        references = list(result) if isinstance(result, (list, tuple)) else [result]
        actual, infos = self.runtime[dump_handle], self.dumped.get(dump_handle, [])
        replaced = [
            self._restored(ref, actual[i], infos[i]) if i < min(len(actual), len(infos)) else ref
            for i, ref in enumerate(references)
        ]
        if isinstance(result, (list, tuple)):
            return type(result)(replaced)
        return replaced[0]

    @staticmethod
    def _restored(reference: Any, actual: torch.Tensor, info: DumpedTensor) -> Any:
        if not isinstance(reference, torch.Tensor):
            return reference
        value = info.to_reference_layout(actual, dequantize=reference.is_floating_point()).to(reference.dtype)
        return value if value.shape == reference.shape else reference


def _users_after_qdq(node: torch.fx.Node) -> list:
    """The nodes two users down from `node` (through its quantize -> dequantize)."""
    return [u for q in node.users for dq in q.users for u in dq.users]


def _detached(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return [v.detach().clone() if isinstance(v, torch.Tensor) else v for v in value]
    return value
