"""Fuse a hand-written RMSNorm (Llama's `x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) *
weight`, with or without its float() / to(dtype) / type_as casts) into one aten.rms_norm, which
the RmsNorm builder lowers to a single QNN RmsNorm.

It runs on the exported (aten) graph, before to_edge (to_edge_transform_and_lower_to_qnn) and
before annotation (QnnQuantizer.transform_for_annotation): there `eps` is still a scalar argument
(to_edge lifts it into a constant tensor) and the pieces are not decomposed yet; the quantizer then
annotates one rms_norm (input, weight, output encodings) instead of five ops with an encoding each.
A graph that is already quantized has Quantize / Dequantize nodes between the pieces and is left as
it is; so is any chain whose intermediate results are read elsewhere, whose casts change the dtype,
whose mean is not over trailing axes, or whose weight does not have the normalized shape."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import torch

_aten = torch.ops.aten
# Ops that leave a float32 tensor unchanged when their output dtype is the input's.
_CASTS = (_aten.to.dtype, _aten._to_copy.default, _aten.type_as.default, _aten.clone.default, _aten.alias.default)
_ASSERTS = (_aten._assert_tensor_metadata.default,)


def _target(node: torch.fx.Node) -> object:
    """aten overload of a node (edge ops carry it as `_op`)."""
    if isinstance(node.target, torch._ops.OpOverload):
        return node.target
    return getattr(node.target, "_op", node.target)


def _dtype(node: object) -> Optional[torch.dtype]:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return val.dtype if isinstance(val, torch.Tensor) else None


def _is_identity_cast(node: torch.fx.Node) -> bool:
    return (
        node.op == "call_function"
        and _target(node) in _CASTS
        and isinstance(node.args[0], torch.fx.Node)
        and _dtype(node) == _dtype(node.args[0]) == torch.float32
    )


def _source(node: object) -> object:
    """node with the identity casts before it skipped."""
    while isinstance(node, torch.fx.Node) and _is_identity_cast(node):
        node = node.args[0]
    return node


def _only_user(node: torch.fx.Node) -> Optional[torch.fx.Node]:
    """The one user of node (runtime metadata asserts do not count)."""
    users = [u for u in node.users if _target(u) not in _ASSERTS]
    return users[0] if len(users) == 1 else None


def _through_casts(node: torch.fx.Node) -> torch.fx.Node:
    """The last identity cast of a single-user chain after node (node itself when none)."""
    user = _only_user(node)
    while user is not None and _is_identity_cast(user):
        node, user = user, _only_user(user)
    return node


@dataclass
class RmsNormMatch:
    x: torch.fx.Node
    normalized_shape: List[int]
    eps: float
    weight: Optional[torch.fx.Node]
    last: torch.fx.Node  # its uses become the rms_norm's
    chain: List[torch.fx.Node]  # nodes that die with the fusion


def _square_of(node: object) -> Optional[torch.fx.Node]:
    """x for pow(x, 2) or mul(x, x) (x with its casts skipped)."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return None
    if _target(node) == _aten.pow.Tensor_Scalar and node.args[1] == 2:
        return _source(node.args[0])
    if _target(node) == _aten.mul.Tensor and _source(node.args[0]) is _source(node.args[1]):
        return _source(node.args[0])
    return None


def _trailing_shape(mean: torch.fx.Node, x: torch.fx.Node) -> Optional[List[int]]:
    """normalized_shape of a keepdim mean over the trailing axes of x, else None."""
    shape = list(x.meta["val"].shape)
    if len(mean.args) < 3 or not mean.args[2] or mean.kwargs.get("dtype") is not None:
        return None
    dims = sorted(int(d) % len(shape) for d in mean.args[1])
    if not dims or dims != list(range(len(shape) - len(dims), len(shape))):
        return None
    return shape[len(shape) - len(dims) :]


def _weight_of(node: torch.fx.Node, normed: torch.fx.Node, shape: List[int]) -> Optional[torch.fx.Node]:
    """The other operand of mul(normed, weight) when it is a parameter of the normalized shape."""
    if _target(node) != _aten.mul.Tensor or len(node.args) != 2:
        return None
    other = node.args[1] if node.args[0] is normed else node.args[0]
    if not isinstance(other, torch.fx.Node) or other.op not in ("placeholder", "get_attr"):
        return None
    val = other.meta.get("val")
    if not isinstance(val, torch.Tensor) and other.op == "get_attr":
        val = getattr(other.graph.owning_module, str(other.target), None)
    ok = isinstance(val, torch.Tensor) and list(val.shape) == shape and val.dtype == torch.float32
    return other if ok else None


def match_rms_norm(rsqrt: torch.fx.Node) -> Optional[RmsNormMatch]:
    """The RMSNorm around an rsqrt node: rsqrt(mean(x^2) + eps) * x [* weight]."""
    add = rsqrt.args[0]
    if (
        not isinstance(add, torch.fx.Node)
        or _target(add) != _aten.add.Tensor
        or len(add.args) != 2
        or not isinstance(add.args[1], (int, float))
        or add.kwargs.get("alpha", 1) != 1
    ):
        return None
    mean = add.args[0]
    if not isinstance(mean, torch.fx.Node) or _target(mean) != _aten.mean.dim:
        return None
    square = mean.args[0]
    x = _square_of(square)
    if x is None or _dtype(x) != torch.float32 or not all(_only_user(n) is not None for n in (square, mean, add)):
        return None
    shape = _trailing_shape(mean, x)
    scale = _only_user(rsqrt)
    if shape is None or scale is None or _target(scale) != _aten.mul.Tensor:
        return None
    other = scale.args[1] if scale.args[0] is rsqrt else scale.args[0]
    if _source(other) is not x:
        return None
    normed = _through_casts(scale)
    user = _only_user(normed)
    weight = _weight_of(user, normed, shape) if user is not None else None
    last = user if weight is not None else normed
    if _dtype(last) != torch.float32 or list(last.meta["val"].shape) != list(x.meta["val"].shape):
        return None
    chain = [square, mean, add, rsqrt, scale]
    return RmsNormMatch(x, shape, float(add.args[1]), weight, last, chain)


def _erase_dead(graph: torch.fx.Graph, nodes: List[torch.fx.Node]) -> None:
    """Erase the fused nodes (and casts / metadata asserts that only they read), users first."""
    pending = list(nodes)
    while pending:
        progressed = False
        for node in list(pending):
            for user in [u for u in node.users if _target(u) in _ASSERTS]:
                graph.erase_node(user)
            if not node.users:
                graph.erase_node(node)
                pending.remove(node)
                progressed = True
        if not progressed:
            return


def _erase_dead_casts(graph: torch.fx.Graph) -> None:
    """Identity casts the fusion left unread (e.g. x.float() before the square)."""
    dead = [n for n in graph.nodes if _is_identity_cast(n) and all(_target(u) in _ASSERTS for u in n.users)]
    while dead:
        _erase_dead(graph, dead)
        dead = [n for n in graph.nodes if _is_identity_cast(n) and all(_target(u) in _ASSERTS for u in n.users)]


def _cast_nodes_after(scale: torch.fx.Node, last: torch.fx.Node) -> List[torch.fx.Node]:
    nodes, node = [], scale
    while node is not last:
        node = _only_user(node)
        if node is None:
            break
        nodes.append(node)
    return nodes


def fuse_rms_norm(graph_module: torch.fx.GraphModule) -> bool:
    """Replace every matched RMSNorm chain by aten.rms_norm (in place); True when one was fused."""
    graph = graph_module.graph
    fused = False
    for node in list(graph.nodes):
        if node.op != "call_function" or _target(node) != _aten.rsqrt.default or node.graph is not graph:
            continue
        match = match_rms_norm(node)
        if match is None:
            continue
        with graph.inserting_after(match.last):
            rms = graph.call_function(
                _aten.rms_norm.default, (match.x, match.normalized_shape, match.weight, match.eps)
            )
        rms.meta.update({k: v for k, v in match.last.meta.items() if k != "source_fn_stack"})
        match.last.replace_all_uses_with(rms)
        _erase_dead(graph, list(reversed(match.chain + _cast_nodes_after(match.chain[-1], match.last))))
        fused = True
    if fused:
        _erase_dead_casts(graph)
        graph.lint()
        graph_module.recompile()
    return fused


class FuseRmsNorm:
    """The fusion as a graph-module pass (returns torch.fx's PassResult)."""

    def __call__(self, graph_module: torch.fx.GraphModule):
        from torch.fx.passes.infra.pass_base import PassResult

        return PassResult(graph_module, fuse_rms_norm(graph_module))


__all__ = ["FuseRmsNorm", "RmsNormMatch", "fuse_rms_norm", "match_rms_norm"]
