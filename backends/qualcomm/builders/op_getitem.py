"""operator.getitem of output 0 of a tuple-returning op: same tensor, no op."""
from __future__ import annotations

import operator

import torch

from backends.qualcomm.builders.graph_builder import GraphBuilder
from backends.qualcomm.builders.registry import (
    NodeBuilder, SupportResult, SUPPORTED, get_builder, register_builder,
)


@register_builder
class GetItemBuilder(NodeBuilder):
    targets = [operator.getitem]

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        source = node.args[0]
        if node.args[1] != 0:
            return False, f"getitem index {node.args[1]} (only output 0 is produced)"
        builder = get_builder(getattr(source, "target", None))
        if builder is None:
            return False, f"source '{getattr(source, 'name', source)}' has no builder"
        return builder.is_supported(source)

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        gb.alias(node, node.args[0])
