"""operator.getitem of a tuple-returning op: output 0 is the op's own tensor; output i > 0
of a multi-output op (builder with `num_outputs` or `output_count(node)`) is bound by that op's builder. No op."""

from __future__ import annotations

import operator

import torch

from backends.qualcomm.builders.graph_builder import GraphBuilder
from backends.qualcomm.builders.registry import (
    NodeBuilder,
    SupportResult,
    get_builder,
    register_builder,
)


@register_builder
class GetItemBuilder(NodeBuilder):
    targets = [operator.getitem]

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        source = node.args[0]
        builder = get_builder(getattr(source, "target", None))
        if builder is None:
            return False, f"source '{getattr(source, 'name', source)}' has no builder"
        count = builder.output_count(source) if hasattr(builder, "output_count") else getattr(builder, "num_outputs", 1)
        if not 0 <= node.args[1] < count:
            return False, f"getitem index {node.args[1]} (the op's builder produces outputs 0 .. {count - 1})"
        return builder.is_supported(source)

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        if node.args[1] == 0:
            gb.alias(node, node.args[0])
