"""Shape chains through tensors of rank > 5 as rank <= 5 ops.

HTP refuses tensors of rank 6 and more (QNN 2.51: "incorrect Rank 6"), yet window attention
(Swin: x.view(B, H/w, w, W/w, w, C).permute(0, 1, 3, 2, 4, 5).reshape(-1, w*w, C)) moves data
through one. A chain of view / clone / permute nodes whose intermediate tensors have rank > 5,
from a tensor of rank <= 5 to one of rank <= 5, with at most one permute, is the same data
movement as

    view(source, merged) -> permute(merged_perm) -> view(end shape)

where `merged` drops the permute's size-1 dims and merges the dims it keeps adjacent and in
order (window partition: 6 dims -> 4). Exact: only the data order matters, and it is the same."""

from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

import torch
from executorch.exir.dialects._ops import ops as exir_ops
from torch.export import ExportedProgram

from backends.qualcomm._passes.remove_identity_ops import identity_targets
from backends.qualcomm.builders.op_shape import is_contiguous_dim_order
from backends.qualcomm.utils.constants import DEBUG_HANDLE, QCOM_QUANT_ATTRS

MAX_RANK = 5
_aten = exir_ops.edge.aten
_VIEW = _aten.view_copy.default
_PERMUTE = _aten.permute_copy.default


def merged_permutation(shape: Sequence[int], perm: Sequence[int]) -> Tuple[List[int], List[int]]:
    """(input shape, permutation) of the smallest-rank permute moving data as `perm` does on
    `shape`: size-1 dims dropped, runs of dims kept adjacent and in order merged."""
    kept = [d for d in range(len(shape)) if shape[d] != 1]
    renumber = {d: i for i, d in enumerate(kept)}
    sizes = [int(shape[d]) for d in kept]
    groups: List[List[int]] = []
    for d in (renumber[d] for d in perm if shape[d] != 1):
        if groups and groups[-1][-1] + 1 == d:
            groups[-1].append(d)
        else:
            groups.append([d])
    by_input = sorted(range(len(groups)), key=lambda g: groups[g][0])
    position = {g: i for i, g in enumerate(by_input)}
    merged = [math.prod(sizes[d] for d in groups[g]) for g in by_input]
    return (merged or [1]), ([position[g] for g in range(len(groups))] or [0])


def _rank(node: torch.fx.Node) -> int:
    val = node.meta.get("val")
    return val.dim() if isinstance(val, torch.Tensor) else -1


def _is_shape_op(node: torch.fx.Node, clones: set) -> bool:
    return node.op == "call_function" and node.target in {_VIEW, _PERMUTE} | clones and is_contiguous_dim_order(node)


def _chain_from(first: torch.fx.Node, clones: set) -> Optional[List[torch.fx.Node]]:
    """Shape ops from `first` (rank > 5 output) through single-user rank > 5 tensors to a node of
    rank <= 5, or None when the high-rank tensor goes anywhere else."""
    chain, node = [first], first
    while _rank(node) > MAX_RANK:
        users = list(node.users)
        if len(users) != 1 or not _is_shape_op(users[0], clones):
            return None
        node = users[0]
        chain.append(node)
    return chain


def new_shape_node(
    graph: torch.fx.Graph, target, args: tuple, like: torch.fx.Node, shape: Sequence[int], template: torch.fx.Node
) -> torch.fx.Node:
    node = graph.call_function(target, args)
    node.meta["val"] = like.meta["val"].new_empty(list(shape))
    for key in (QCOM_QUANT_ATTRS, DEBUG_HANDLE, "stack_trace", "nn_module_stack"):
        if key in template.meta:
            node.meta[key] = template.meta[key]
    return node


def _fold(graph: torch.fx.Graph, chain: List[torch.fx.Node]) -> bool:
    """Replace `chain` by view -> permute -> view of rank <= 5 (False: left as it is)."""
    permutes = [n for n in chain if n.target == _PERMUTE]
    if len(permutes) > 1:
        return False
    source, end = chain[0].args[0], chain[-1]
    end_shape = list(end.meta["val"].shape)
    with graph.inserting_before(end):
        if not permutes:
            folded = new_shape_node(graph, _VIEW, (source, end_shape), source, end_shape, end)
        else:
            permute = permutes[0]
            in_shape = list(permute.args[0].meta["val"].shape)
            merged, perm = merged_permutation(in_shape, [int(d) % len(in_shape) for d in permute.args[1]])
            if len(merged) > MAX_RANK:
                return False
            flat = new_shape_node(graph, _VIEW, (source, merged), source, merged, permute)
            moved = new_shape_node(graph, _PERMUTE, (flat, perm), source, [merged[d] for d in perm], permute)
            folded = new_shape_node(graph, _VIEW, (moved, end_shape), source, end_shape, end)
    end.replace_all_uses_with(folded)
    for node in reversed(chain):
        graph.erase_node(node)
    return True


def fold_high_rank_shapes(ep: ExportedProgram) -> ExportedProgram:
    graph, clones = ep.graph_module.graph, identity_targets()
    changed, erased = False, set()
    for node in list(graph.nodes):
        if node in erased or not _is_shape_op(node, clones) or _rank(node) <= MAX_RANK:
            continue
        source = node.args[0]
        if not isinstance(source, torch.fx.Node) or _rank(source) > MAX_RANK:
            continue  # not the first high-rank node of its chain
        chain = _chain_from(node, clones)
        if chain is not None and _fold(graph, chain):
            erased.update(chain)
            changed = True
    if changed:
        ep.graph_module.recompile()
    return ep
