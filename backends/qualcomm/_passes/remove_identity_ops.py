"""Edge pass: drop ops that do not change data (clone, alias, eval dropout)."""

from __future__ import annotations

import torch
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.pass_base import PassResult

from backends.qualcomm.builders.op_shape import is_contiguous_dim_order

_aten = exir_ops.edge.aten


def identity_targets() -> set:
    """clone / alias_copy / _clone_dim_order: ops that copy data unchanged (when contiguous)."""
    targets = {_aten.clone.default, _aten.alias_copy.default}
    clone_dim_order = getattr(exir_ops.edge.dim_order_ops, "_clone_dim_order", None)
    if clone_dim_order is not None:
        targets.add(clone_dim_order.default)
    return targets


def _removable(node: torch.fx.Node, targets: set) -> bool:
    if node.op != "call_function" or not isinstance(node.args[0], torch.fx.Node):
        return False
    if node.target == _aten.dropout.default:
        return not (len(node.args) > 2 and node.args[2])
    if node.target not in targets or not is_contiguous_dim_order(node):
        return False
    feeds_output = any(u.op == "output" for u in node.users)
    return not (feeds_output and node.args[0].op == "placeholder")


class RemoveIdentityOps:
    """Graph-module pass usable as an ExecuTorch transform pass."""

    def __call__(self, graph_module: torch.fx.GraphModule) -> PassResult:
        targets = identity_targets()
        modified = False
        for node in list(graph_module.graph.nodes):
            if _removable(node, targets):
                node.replace_all_uses_with(node.args[0])
                graph_module.graph.erase_node(node)
                modified = True
        if modified:
            graph_module.recompile()
        return PassResult(graph_module, modified)
