"""Edge pass: rand_like / randn_like -> rand / randn of the input's shape and dtype.

torch.export keeps `rand_like` / `randn_like` whole; they are not core ATen (plain
`to_edge_transform_and_lower` rejects them at edge verification) and ExecuTorch's CPU kernels have
no `rand_like.out` (the program failed at load, error 0x14), but they do have `rand.out` /
`randn.out`. QNN has no random op: the draws stay on the CPU, the rest is delegated."""

from __future__ import annotations

import torch
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.pass_base import PassResult

_aten = exir_ops.edge.aten


def _replacements() -> dict:
    return {_aten.rand_like.default: _aten.rand.default, _aten.randn_like.default: _aten.randn.default}


class DecomposeRandomLike:
    """Graph-module pass usable as an ExecuTorch transform pass."""

    def __call__(self, graph_module: torch.fx.GraphModule) -> PassResult:
        replacements = _replacements()
        modified = False
        for node in list(graph_module.graph.nodes):
            if node.op != "call_function" or node.target not in replacements:
                continue
            val = node.meta.get("val")
            if not isinstance(val, torch.Tensor) or any(not isinstance(d, int) for d in val.shape):
                continue  # dynamic shapes: left as it is
            with graph_module.graph.inserting_before(node):
                draw = graph_module.graph.call_function(
                    replacements[node.target], (list(val.shape),), {"dtype": val.dtype}
                )
            draw.meta = dict(node.meta)
            node.replace_all_uses_with(draw)
            graph_module.graph.erase_node(node)
            modified = True
        if modified:
            graph_module.graph.lint()
            graph_module.recompile()
        return PassResult(graph_module, modified)
