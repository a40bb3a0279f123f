"""Edge pass: one quantize node per dequantize consumer, so that the partitioner can keep
every quantize -> dequantize pair inside one delegate (see partitioner/quant_boundaries)."""

from __future__ import annotations

import torch
from executorch.exir.pass_base import PassResult

from backends.qualcomm.builders.quant_encoding import is_quantize


class DuplicateQuantize:
    def __call__(self, graph_module: torch.fx.GraphModule) -> PassResult:
        graph = graph_module.graph
        modified = False
        for q in [n for n in graph.nodes if is_quantize(n) and len(n.users) > 1]:
            for index, user in enumerate(list(q.users)[1:], start=1):
                with graph.inserting_after(q):
                    clone = graph.call_function(q.target, q.args, q.kwargs)
                clone.meta = dict(q.meta)
                user.replace_input_with(q, clone)
                modified = True
        if modified:
            graph_module.recompile()
        return PassResult(graph_module, modified)
