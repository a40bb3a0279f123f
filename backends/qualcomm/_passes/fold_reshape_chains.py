"""Chains of reshapes as one Reshape.

QNN 2.51's HTP computes some graphs with chained Reshapes around a MatMul wrong (measured on
SM8650, fp16: x [2, 10, 32] -> Reshape [2, 10, 32, 1] -> Reshape [1, 20, 32] -> MatMul ->
Reshape [2, 10, 1, 3] is 26 off where the host engine and eager agree; with a single Reshape
[1, 20, 32] it is exact). torch.einsum("btd,cd->btc", ...) exports exactly such a chain
(unsqueeze -> permute of a size-1 dim -> view). So before lowering:

- a permute / transpose that moves size-1 dims only (the other dims keep their order) is a view;
- a reshape-like node (view, unsqueeze, squeeze, a contiguous clone, such a permute) whose input
  is reshape-like too reads the chain's source directly: view(source, its own shape).

Exact: a reshape chain moves no data. Chain links left without users are erased."""

from __future__ import annotations

from typing import Set

import torch
from executorch.exir.dialects._ops import ops as exir_ops
from torch.export import ExportedProgram

from backends.qualcomm._passes.fold_high_rank_shapes import merged_permutation, new_shape_node
from backends.qualcomm._passes.remove_identity_ops import identity_targets
from backends.qualcomm.builders.op_shape import ReshapeBuilder, TransposeBuilder, is_contiguous_dim_order, permutation

_VIEW = exir_ops.edge.aten.view_copy.default


def _moves_unit_dims_only(node: torch.fx.Node) -> bool:
    shape = [int(d) for d in node.args[0].meta["val"].shape]
    _, perm = merged_permutation(shape, permutation(node))
    return perm == sorted(perm)


def _is_reshape_like(node: object, reshapes: Set, clones: Set) -> bool:
    if (
        not isinstance(node, torch.fx.Node)
        or node.op != "call_function"
        or not isinstance(node.args[0], torch.fx.Node)
        or not isinstance(node.meta.get("val"), torch.Tensor)
    ):
        return False
    if node.target in reshapes:
        return True
    if node.target in clones:
        return is_contiguous_dim_order(node)
    return node.target in TransposeBuilder.targets and _moves_unit_dims_only(node)


def fold_reshape_chains(ep: ExportedProgram) -> ExportedProgram:
    graph = ep.graph_module.graph
    reshapes, clones = set(ReshapeBuilder.targets), identity_targets()
    replaced: Set[torch.fx.Node] = set()
    for node in list(graph.nodes):
        if not _is_reshape_like(node, reshapes, clones):
            continue
        source = node.args[0]
        if _is_reshape_like(source, reshapes, clones):
            replaced.add(source)
            source = source.args[0]  # already folded: reads its chain's source
        elif node.target in reshapes or node.target in clones:
            continue  # a lone reshape stays as it is
        shape = [int(d) for d in node.meta["val"].shape]
        with graph.inserting_before(node):
            view = new_shape_node(graph, _VIEW, (source, shape), node, shape, node)
        node.replace_all_uses_with(view)
        graph.erase_node(node)
        replaced.add(view)
    for node in reversed(list(graph.nodes)):  # chain links left without users
        if node in replaced and not node.users:
            graph.erase_node(node)
    if replaced:
        ep.graph_module.recompile()
    return ep
