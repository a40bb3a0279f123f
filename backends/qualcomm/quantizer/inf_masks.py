"""Softmax inputs masked with -inf, rewritten for quantization.

A quantized tensor cannot hold -inf: an observer that sees one computes a NaN scale (torchao
fails at convert with "min nan should be less than max"). Yet -inf masks are everywhere in
attention: nn.MultiheadAttention turns every key_padding_mask and bool attn_mask into
`zeros_like(mask, float).masked_fill_(mask, -inf)` (adding the two when both are given), and
hand-written attention fills scores with -inf (or finfo.min) before the softmax; transformers
builds `where(keep, 0, finfo.min)`, and `where(x >= 0, 0.1, -inf)` fills with two numbers. The masked
entries only reach a softmax, where they weigh exp(-inf) = 0, so with keep = ~pad (a bool
tensor, never quantized):

    softmax(masked_fill(x, pad, -inf), d)  ==  p / (sum(p, d) + 1 - min(sum(keep, d), 1)),
                                               p = softmax(x, d) * keep

exact in real arithmetic; a row with nothing to keep gives 0, as SDPA does. The masked
operand is followed through shape ops (view, expand, unsqueeze, ...) and adds to the
masked_fill nodes and to constants holding -inf (a registered causal mask), so SDPA's float
attn_mask (after decompose_sdpa: softmax(scores + mask)) and MultiheadAttention's merged masks
are covered. A -inf mask that reaches anything but a softmax is left as it is."""

from __future__ import annotations

import math
import operator
from typing import Optional, Tuple

import torch
from torch.fx import GraphModule, Node

_aten = torch.ops.aten
SHAPE_OPS = {
    _aten.view.default,
    _aten.reshape.default,
    _aten._unsafe_view.default,
    _aten.expand.default,
    _aten.unsqueeze.default,
    _aten.squeeze.dim,
    _aten.clone.default,
    _aten.contiguous.default,
}
MASKED_FILL = {_aten.masked_fill.Scalar, _aten.masked_fill_.Scalar}
WHERE_FILL = {_aten.where.ScalarOther: 2, _aten.where.ScalarSelf: 1}  # the number's position
WHERE_NUMBERS = _aten.where.Scalar  # where(cond, a, b), both numbers: one of them -inf
ZEROS = {_aten.zeros_like.default, _aten.zeros.default, _aten.new_zeros.default}
SOFTMAX = {_aten.softmax.int, _aten._softmax.default}
_FLOAT_MIN = torch.finfo(torch.float32).min


def fills_minus_inf(value: object) -> bool:
    """-inf, or float32's lowest value (HuggingFace's mask fill), as a masked_fill value."""
    return isinstance(value, (int, float)) and (value == -math.inf or value <= _FLOAT_MIN)


def _constant(node: Node) -> Optional[torch.Tensor]:
    if node.op != "get_attr":
        return None
    value = operator.attrgetter(node.target)(node.graph.owning_module)
    return value if isinstance(value, torch.Tensor) and value.is_floating_point() else None


def has_inf_fill(node: object) -> bool:
    """Whether `node` is, through shape ops and adds, a masked_fill with -inf or a constant
    holding -inf (a registered causal mask)."""
    if not isinstance(node, Node):
        return False
    constant = _constant(node)
    if constant is not None:
        return bool(torch.isneginf(constant).any() or (constant <= _FLOAT_MIN).any())
    if node.op != "call_function":
        return False
    if node.target in SHAPE_OPS:
        return has_inf_fill(node.args[0])
    if node.target in MASKED_FILL:
        return fills_minus_inf(node.args[2])
    if node.target in WHERE_FILL:
        return fills_minus_inf(node.args[WHERE_FILL[node.target]])
    if node.target == WHERE_NUMBERS:
        return fills_minus_inf(node.args[1]) != fills_minus_inf(node.args[2])
    if node.target == _aten.add.Tensor and len(node.args) == 2 and not node.kwargs:
        return has_inf_fill(node.args[0]) or has_inf_fill(node.args[1])
    return False


class _Nodes:
    """Creates nodes before `anchor`, each with a `val` computed on zero tensors of its inputs'
    shapes and dtypes and the anchor's module stack (module-specific quant configs apply)."""

    def __init__(self, anchor: Node):
        self.graph, self.anchor = anchor.graph, anchor

    def call(self, target, args: tuple, kwargs: Optional[dict] = None) -> Node:
        kwargs = kwargs or {}
        with self.graph.inserting_before(self.anchor):
            node = self.graph.call_function(target, args, kwargs)
        examples = [
            torch.zeros(a.meta["val"].shape, dtype=a.meta["val"].dtype) if isinstance(a, Node) else a for a in args
        ]
        node.meta["val"] = target(*examples, **kwargs)
        for key in ("nn_module_stack", "stack_trace"):
            if key in self.anchor.meta:
                node.meta[key] = self.anchor.meta[key]
        return node

    def constant(self, name: str, value: torch.Tensor) -> Node:
        model = self.graph.owning_module
        model.register_buffer(name, value)
        with self.graph.inserting_before(self.anchor):
            node = self.graph.get_attr(name)
        node.meta["val"] = value
        return node

    def expanded(self, node: Node, shape: list) -> Node:
        return node if _shape(node) == shape else self.call(_aten.expand.default, (node, shape))


def _shape(node: Node) -> list:
    return list(node.meta["val"].shape)


def split_inf_mask(nodes: _Nodes, node: Node) -> Tuple[Optional[Node], Optional[Node]]:
    """(keep, finite) with `node` == where(keep, finite, -inf): keep a bool node (None: all kept),
    finite a float node (None: zeros)."""
    if not has_inf_fill(node):
        return None, (None if node.op == "call_function" and node.target in ZEROS else node)
    constant = _constant(node)
    if constant is not None:
        kept = constant > _FLOAT_MIN
        finite = torch.where(kept, constant, torch.zeros_like(constant))
        keep = nodes.constant(f"{node.name}_keep", kept)
        return keep, (nodes.constant(f"{node.name}_finite", finite) if bool(finite.any()) else None)
    if node.target in SHAPE_OPS:
        keep, finite = split_inf_mask(nodes, node.args[0])
        rest, kwargs = tuple(node.args[1:]), dict(node.kwargs)
        return (
            nodes.call(node.target, (keep, *rest), kwargs) if keep is not None else None,
            nodes.call(node.target, (finite, *rest), kwargs) if finite is not None else None,
        )
    if node.target in MASKED_FILL:
        keep, finite = split_inf_mask(nodes, node.args[0])
        kept = nodes.expanded(nodes.call(_aten.logical_not.default, (node.args[1],)), _shape(node))
        return (kept if keep is None else nodes.call(_aten.logical_and.default, (keep, kept))), finite
    if node.target in WHERE_FILL:  # transformers: where(keep, zeros, finfo.min)
        cond, tensor = node.args[0], node.args[3 - WHERE_FILL[node.target]]
        if node.target == _aten.where.ScalarSelf:
            cond = nodes.call(_aten.logical_not.default, (cond,))
        _, finite = split_inf_mask(nodes, tensor)
        finite = nodes.expanded(finite, _shape(node)) if finite is not None else None
        return nodes.expanded(cond, _shape(node)), finite
    if node.target == WHERE_NUMBERS:  # where(x >= 0, 0.1, -inf): keep = cond, finite = full(0.1)
        cond, (a, b) = node.args[0], node.args[1:3]
        if fills_minus_inf(a):
            cond, a = nodes.call(_aten.logical_not.default, (cond,)), b
        finite = nodes.call(_aten.full.default, (_shape(node), float(a)), {"dtype": node.meta["val"].dtype})
        return nodes.expanded(cond, _shape(node)), finite
    (keep_a, finite_a), (keep_b, finite_b) = (split_inf_mask(nodes, a) for a in node.args)  # add
    keeps = [nodes.expanded(k, _shape(node)) for k in (keep_a, keep_b) if k is not None]
    keep = keeps[0] if len(keeps) == 1 else nodes.call(_aten.logical_and.default, tuple(keeps))
    finites = [f for f in (finite_a, finite_b) if f is not None]
    finite = nodes.call(_aten.add.Tensor, tuple(finites)) if len(finites) == 2 else (finites or [None])[0]
    return keep, finite


def _masked_softmax(nodes: _Nodes, softmax: Node, keep: Node, finite: Node) -> Node:
    """p / (sum(p, d) + 1 - min(sum(keep, d), 1)), p = softmax(finite, d) * keep."""
    dim = softmax.args[1]
    probs = nodes.call(softmax.target, (finite, *softmax.args[1:]), dict(softmax.kwargs))
    weights = nodes.call(_aten._to_copy.default, (keep,), {"dtype": softmax.meta["val"].dtype})
    kept = nodes.call(_aten.mul.Tensor, (probs, weights))
    total = nodes.call(_aten.sum.dim_IntList, (kept, [dim], True))
    count = nodes.call(_aten.clamp.default, (nodes.call(_aten.sum.dim_IntList, (weights, [dim], True)), None, 1.0))
    empty = nodes.call(_aten.rsub.Scalar, (count, 1.0))
    return nodes.call(_aten.div.Tensor, (kept, nodes.call(_aten.add.Tensor, (total, empty))))


def rewrite_inf_masked_softmax(model: GraphModule) -> GraphModule:
    """Every softmax of a -inf masked tensor as the masked softmax above."""
    graph, changed = model.graph, False
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in SOFTMAX or not has_inf_fill(node.args[0]):
            continue
        nodes = _Nodes(node)
        keep, finite = split_inf_mask(nodes, node.args[0])
        if finite is None:
            finite = nodes.call(_aten.zeros_like.default, (node.args[0],))
        node.replace_all_uses_with(_masked_softmax(nodes, node, keep, finite))
        graph.erase_node(node)
        changed = True
    if changed:
        _erase_unused(graph)
        model.recompile()
    return model


def _erase_unused(graph: torch.fx.Graph) -> None:
    """Dead code, including an unused in-place masked_fill_ of a tensor nothing else reads
    (MultiheadAttention's `zeros_like(mask).masked_fill_(mask, -inf)`: fx keeps in-place ops)."""
    graph.eliminate_dead_code()
    for node in list(graph.nodes):
        if (
            node.op == "call_function"
            and node.target == _aten.masked_fill_.Scalar
            and not node.users
            and len(node.args[0].users) == 1
        ):
            graph.erase_node(node)
    graph.eliminate_dead_code()
