"""Fold what only computes constants (edge transform pass, before partitioning).

A partition whose inputs are all constants (Hugging Face Llama's position ids and causal mask,
built from `arange` in forward) would become a delegate with no graph inputs: QNN refuses such a
graph (contextGetBinarySize: error 30002), and running it on every call recomputes constants. A
node left on the CPU whose inputs are all constants (the int64 `index.Tensor` of those position
ids) is the same. Both are evaluated once here and replaced by lifted constants (what they
compute, stored in the program), so the delegates downstream read static tensors instead.

Never folded: quantize / dequantize nodes (the encodings of a quantized graph stay ops), impure
nodes (random draws, mutation), nodes reading a mutable buffer, and values the graph returns
directly (a graph output cannot be a lifted constant)."""

from __future__ import annotations

import logging
from typing import Dict, Iterable, List, Set

import torch
from executorch.backends.transforms.utils import create_constant_placeholder, get_param_tensor, is_param_node
from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from torch._export.utils import is_param
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind
from torch.fx import Node
from torch.utils import _pytree as pytree

from backends.qualcomm.builders.quant_encoding import is_dequantize, is_quantize

logger = logging.getLogger(__name__)

FOLDED_PREFIX = "_qnn_folded_"


def mutated_buffer_inputs(ep: ExportedProgram) -> Set[str]:
    """Names of the placeholders of buffers the graph writes (never constants)."""
    signature = ep.graph_signature
    mutated = set(signature.buffers_to_mutate.values())
    return {name for name, fqn in signature.inputs_to_buffers.items() if fqn in mutated}


def constant_inputs(ep: ExportedProgram) -> Dict[Node, torch.Tensor]:
    """Placeholders holding parameters, constant buffers and lifted constants, with their values."""
    mutated = mutated_buffer_inputs(ep)
    values: Dict[Node, torch.Tensor] = {}
    for node in ep.graph_module.graph.nodes:
        if node.op == "placeholder" and node.name not in mutated and is_param_node(ep, node):
            value = get_param_tensor(ep, node)
            if isinstance(value, torch.Tensor) and not isinstance(value, torch._subclasses.FakeTensor):
                values[node] = value
    return values


def _is_foldable_op(node: Node) -> bool:
    if node.op != "call_function" or is_quantize(node) or is_dequantize(node) or node.is_impure():
        return False
    return not any(user.op == "output" for user in node.users)


def _evaluate(node: Node, values: Dict[Node, object]) -> object:
    args, kwargs = pytree.tree_map_only(Node, lambda n: values[n], (node.args, node.kwargs))
    with torch.no_grad():
        return node.target(*args, **kwargs)


def _foldable_nodes(nodes: Iterable[Node], values: Dict[Node, object]) -> List[Node]:
    """Of `nodes` (in graph order), those computed from constants only, evaluated into
    `values`; an evaluation that fails leaves the node (and its users) in the graph."""
    folded = []
    for node in nodes:
        if not _is_foldable_op(node) or not all(n in values for n in node.all_input_nodes):
            continue
        try:
            values[node] = _evaluate(node, values)
        except Exception as exc:  # noqa: BLE001 - folding is an optimization, never a failure
            logger.debug("not folded: %s (%s)", node.name, exc)
            continue
        folded.append(node)
    return folded


def _replace_with_constants(ep: ExportedProgram, folded: List[Node], values: Dict[Node, object]) -> int:
    """Each folded tensor read by a node that is not folded -> a lifted constant; returns how many."""
    graph = ep.graph_module.graph
    inside = set(folded)
    first_user_input = (
        next(n for n in graph.nodes if n.op == "placeholder" and n.name in ep.graph_signature.user_inputs)
        if ep.graph_signature.user_inputs
        else None
    )
    created = 0
    for node in folded:
        value = values[node]
        if not isinstance(value, torch.Tensor) or all(user in inside for user in node.users):
            continue
        insert = (
            graph.inserting_before(first_user_input)
            if first_user_input is not None
            else graph.inserting_before(next(iter(graph.nodes)))
        )
        with insert:
            constant = create_constant_placeholder(
                ep, graph, f"{FOLDED_PREFIX}{node.name}", InputKind.CONSTANT_TENSOR, value.detach().contiguous().clone()
            )
        node.replace_all_uses_with(constant)
        created += 1
    return created


def fold_constant_nodes(ep: ExportedProgram, exclude_inputs: Set[Node] = frozenset()) -> int:
    """Fold the call_function nodes that compute from constants only (not from the placeholders
    of `exclude_inputs`); returns the number of lifted constants created."""
    graph = ep.graph_module.graph
    values: Dict[Node, object] = {n: v for n, v in constant_inputs(ep).items() if n not in exclude_inputs}
    nodes = list(graph.nodes)
    folded = _foldable_nodes(nodes, values)
    if not folded:
        return 0
    created = _replace_with_constants(ep, folded, values)
    graph.eliminate_dead_code()
    ep.graph_module.recompile()
    logger.debug("folded %d constant node(s) into %d constant(s)", len(folded), created)
    return created


class FoldConstantSubgraphs(ExportedProgramPassBase):
    """Edge transform pass: every node computed only from tensors created in forward, constant
    buffers and lifted constants (not parameters: transformations of weights stay the ops their
    builders read) -> lifted constants."""

    def call(self, exported_program: ExportedProgram) -> ExportedProgramPassResult:
        parameters = {
            n
            for n in exported_program.graph_module.graph.nodes
            if n.op == "placeholder" and is_param(exported_program, n)
        }
        created = fold_constant_nodes(exported_program, exclude_inputs=parameters)
        return ExportedProgramPassResult(exported_program, created > 0)
