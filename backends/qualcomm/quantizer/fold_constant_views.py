"""QnnQuantizer's transform for annotation: data movement on constants (parameters, buffers),
and constants created in forward, folded into new constants.

nn.MultiheadAttention with distinct query / key tensors (cross-attention) splits its packed
in_proj weight and bias (`in_proj_weight.chunk(3)` -> linear); a hand-written `w.t()`,
`w[:, :k]` or `torch.cat([w1, w2])` does the same. Left in the graph, the annotators quantize the
parameter as an activation before the split and again as a weight after it (uint8 -> int8
requantization of a constant), and the lowered graph computed an 8-bit signed NATIVE tensor
that HTP cannot hold (the delegate refused to load). Folded, each linear reads its own constant
weight and gets the ordinary weight encoding (per-channel int8), exactly as if the user had
declared three linears."""

from __future__ import annotations

import operator
from typing import Dict, List, Set

import torch
from torch.fx import GraphModule, Node

_aten = torch.ops.aten
DATA_MOVEMENT = {
    _aten.split.Tensor,
    _aten.split_with_sizes.default,
    _aten.chunk.default,
    _aten.unbind.int,
    _aten.slice.Tensor,
    _aten.select.int,
    _aten.narrow.default,
    _aten.t.default,
    _aten.transpose.int,
    _aten.permute.default,
    _aten.view.default,
    _aten.reshape.default,
    _aten._unsafe_view.default,
    _aten.unsqueeze.default,
    _aten.squeeze.dim,
    _aten.squeeze.dims,
    _aten.flatten.using_ints,
    _aten.contiguous.default,
    _aten.clone.default,
    _aten.cat.default,
    _aten.stack.default,
    operator.getitem,
}
# Constants computed in forward: a causal mask `torch.triu(torch.full((T, T), -inf), 1)` (a -inf
# buffer is then split by inf_masks.py) or `torch.ones(T, T, dtype=torch.bool).tril()`.
CREATION = {
    _aten.full.default,
    _aten.ones.default,
    _aten.zeros.default,
    _aten.arange.default,
    _aten.arange.start,
    _aten.arange.start_step,
    _aten.scalar_tensor.default,
}
MASK_OPS = {_aten.triu.default, _aten.tril.default, _aten.logical_not.default}
FOLDABLE = DATA_MOVEMENT | CREATION | MASK_OPS
MAX_CREATED_ELEMENTS = 1 << 20  # larger created constants stay ops (their bytes would be stored)


def _constant_value(model: GraphModule, node: object, folded: Dict[Node, object]) -> object:
    if isinstance(node, Node):
        return folded[node] if node in folded else operator.attrgetter(node.target)(model)
    if isinstance(node, (list, tuple)):
        return type(node)(_constant_value(model, n, folded) for n in node)
    return node


def _is_parameter(model: GraphModule, node: Node) -> bool:
    return node.op == "get_attr" and isinstance(operator.attrgetter(node.target)(model), torch.nn.Parameter)


def _aliases_input(node: Node) -> bool:
    """A view or an in-place op: its output is (part of) its first input's storage."""
    schema = getattr(node.target, "_schema", None)
    return schema is not None and bool(schema.returns) and schema.returns[0].alias_info is not None


def _writes(node: Node) -> List[Node]:
    """The tensors an in-place op (index_put_, copy_, add_, ...) writes."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return []
    return [
        arg
        for arg, spec in zip(node.args, schema.arguments)
        if isinstance(arg, Node) and spec.alias_info is not None and spec.alias_info.is_write
    ]


def written_nodes(graph: torch.fx.Graph) -> Set[Node]:
    """Every node whose storage the graph writes: the written tensors and everything sharing
    their storage through views (`kc = cache.clone(); kc[:, pos] = k` writes the clone, its
    slices and the views read after the write). A written tensor is never a constant."""
    root: Dict[Node, Node] = {}

    def find(node: Node) -> Node:
        while root.get(node, node) is not node:
            node = root[node]
        return node

    for node in graph.nodes:
        if node.op == "call_function" and node.args and isinstance(node.args[0], Node) and _aliases_input(node):
            root[find(node)] = find(node.args[0])
    written_roots = {find(target) for node in graph.nodes if node.op == "call_function" for target in _writes(node)}
    return {node for node in graph.nodes if find(node) in written_roots}


def _foldable(
    model: GraphModule, node: Node, folded: Dict[Node, object], fold_parameters: bool, written: Set[Node]
) -> bool:
    if node.op != "call_function" or node.target not in FOLDABLE or node in written:
        return False
    inputs: List[Node] = node.all_input_nodes
    if not inputs:
        val = node.meta.get("val")
        return node.target in CREATION and isinstance(val, torch.Tensor) and val.numel() <= MAX_CREATED_ELEMENTS
    if not fold_parameters and any(_is_parameter(model, n) for n in inputs):
        return False  # QAT trains them: a folded copy would not follow
    return all(n in folded or n.op == "get_attr" for n in inputs)


def fold_constant_views(model: GraphModule, fold_parameters: bool = True) -> GraphModule:
    """Every data-movement / mask node whose inputs are all constants, and small constants
    created in forward -> a get_attr of its value; never a tensor the graph writes in place. `fold_parameters=False` (QAT: parameters
    are trained after prepare) leaves views of parameters as they are."""
    folded: Dict[Node, object] = {}
    written = written_nodes(model.graph)
    for node in list(model.graph.nodes):
        if not _foldable(model, node, folded, fold_parameters, written):
            continue
        args = _constant_value(model, node.args, folded)
        kwargs = {k: _constant_value(model, v, folded) for k, v in node.kwargs.items()}
        with torch.no_grad():
            value = node.target(*args, **kwargs)
        folded[node] = value
        if isinstance(value, torch.Tensor):
            name = f"_folded_{node.name}"
            model.register_buffer(name, value.detach().clone().contiguous())
            with model.graph.inserting_before(node):
                constant = model.graph.get_attr(name)
            constant.meta = {**node.meta, "val": node.meta.get("val")}
            node.replace_all_uses_with(constant)
            folded[constant] = value
    if folded:
        model.graph.eliminate_dead_code()
        model.recompile()
    return model
