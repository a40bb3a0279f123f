"""QnnQuantizer's transform for annotation: export-level ops it does not annotate, rewritten as the
ops it does, so that they are quantized rather than left in float.

torch.export keeps composite ops (einsum, divide, concat, narrow, swapaxes, unflatten, expand_as,
special_expm1, glu, linalg_vector_norm, threshold, ...) that ExecuTorch's to_edge decomposes
later; annotated by name they would be missed. Each such node whose decomposition (torch's
CompositeImplicitAutograd kernel, or ExecuTorch's to_edge decomposition table) consists of ops
QnnQuantizer annotates (and ops with no float output) is replaced by that decomposition, traced
on the node's shapes: the quantized module computes what to_edge would lower. Also:
- `mul.Scalar` / `div.Scalar` / `add.Scalar` / `sub.Scalar` -> their `.Tensor` overloads with
  the same number (export records `x * 2.0` that way too; to_edge makes the number a constant);
- in-place activations (`leaky_relu_`, `threshold_`, ...) whose input nothing reads after them
  -> the functional op (the outputs are the same; a graph input is then not written to).
A node whose decomposition holds an op that is not annotated is left as it is."""

from __future__ import annotations

import functools
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Set

import torch
from torch._ops import OpOverload
from torch.fx import GraphModule, Node
from torch.fx.experimental.proxy_tensor import make_fx

from backends.qualcomm.quantizer.decompose_sdpa import _inline

_aten = torch.ops.aten
SCALAR_TO_TENSOR = {
    _aten.mul.Scalar: _aten.mul.Tensor,
    _aten.div.Scalar: _aten.div.Tensor,
    _aten.add.Scalar: _aten.add.Tensor,
    _aten.sub.Scalar: _aten.sub.Tensor,
}


@functools.lru_cache(maxsize=1)
def _edge_decompositions() -> Dict[OpOverload, Callable]:
    from executorch.exir.tracer import _default_decomposition_table

    return dict(_default_decomposition_table())


def _is_composite(op: OpOverload) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")


def _float_tensor(val: object) -> bool:
    return isinstance(val, torch.Tensor) and val.is_floating_point()


def _functional(op: OpOverload) -> Optional[OpOverload]:
    """leaky_relu_.default -> leaky_relu.default (None: not an in-place op)."""
    packet = op.overloadpacket.__name__
    if not packet.endswith("_") or packet.startswith("_"):
        return None
    functional = getattr(_aten, packet[:-1], None)
    return getattr(functional, op._overloadname, None) if functional is not None else None


def _example(arg: object) -> object:
    if isinstance(arg, Node):
        val = arg.meta.get("val")
        return torch.zeros(val.shape, dtype=val.dtype) if isinstance(val, torch.Tensor) else val
    if isinstance(arg, (list, tuple)):
        return type(arg)(_example(a) for a in arg)
    return arg


def _tensor_inputs(node: Node) -> List[Node]:
    """The node's tensor arguments in order, those inside lists (cat, einsum) included."""
    inputs: List[Node] = []
    for arg in node.args:
        for a in arg if isinstance(arg, (list, tuple)) else [arg]:
            if isinstance(a, Node):
                inputs.append(a)
    return inputs


def _with_tensors(args: tuple, tensors: Iterator[torch.Tensor]) -> list:
    """args with each node (also inside lists) replaced by the next of `tensors`."""
    out = []
    for arg in args:
        if isinstance(arg, (list, tuple)):
            out.append(type(arg)(next(tensors) if isinstance(a, Node) else a for a in arg))
        else:
            out.append(next(tensors) if isinstance(arg, Node) else arg)
    return out


def _traced(node: Node, table: Dict[OpOverload, Callable]) -> Optional[GraphModule]:
    """The node's op traced into its decomposition; None when a keyword argument is a node or
    the trace fails."""
    if any(isinstance(v, Node) for v in node.kwargs.values()):
        return None

    def call(*tensors):
        return node.target(*_with_tensors(node.args, iter(tensors)), **node.kwargs)

    try:
        return make_fx(call, decomposition_table=table)(*[_example(a) for a in _tensor_inputs(node)])
    except Exception:  # noqa: BLE001 - a decomposition that does not trace: the node stays
        return None


def _only_annotated(traced: GraphModule, annotated: Set[OpOverload]) -> bool:
    ops = [n for n in traced.graph.nodes if n.op == "call_function"]
    return bool(ops) and all(n.target in annotated or not _float_tensor(n.meta.get("val")) for n in ops)


def _read_after(source: Node, node: Node) -> bool:
    """Whether a user of `source` other than `node` comes after it (reads the written value)."""
    order = {n: i for i, n in enumerate(node.graph.nodes)}
    return any(user is not node and order[user] > order[node] for user in source.users)


def _rewrite_simple(node: Node, annotated: Set[OpOverload]) -> bool:
    """The `.Scalar` -> `.Tensor` and in-place -> functional renames."""
    target = SCALAR_TO_TENSOR.get(node.target) or _functional(node.target)
    if target is None or target not in annotated:
        return False
    if target is not SCALAR_TO_TENSOR.get(node.target):
        source = node.args[0] if node.args else None
        if not isinstance(source, Node) or _read_after(source, node):
            return False
    node.target = target
    return True


def decompose_composites(
    model: GraphModule, annotated: Iterable[OpOverload], keep: Iterable[OpOverload] = (), keep_names: Iterable[str] = ()
) -> GraphModule:
    """Every node of `model` whose op is neither annotated nor in `keep` and whose name is not in
    `keep_names`, rewritten as ops in `annotated` where its decomposition allows (module docstring)."""
    annotated, keep, keep_names = set(annotated), set(keep), set(keep_names)
    table = {op: fn for op, fn in _edge_decompositions().items() if op not in annotated}
    changed = False
    for node in list(model.graph.nodes):
        target = node.target
        if node.op != "call_function" or not isinstance(target, OpOverload) or target in annotated | keep:
            continue
        if node.name in keep_names or not _float_tensor(node.meta.get("val")):
            continue
        if _rewrite_simple(node, annotated):
            changed = True
            continue
        if target not in table and not _is_composite(target):
            continue
        traced = _traced(node, table)
        if traced is None or not _only_annotated(traced, annotated):
            continue
        _inline(model, node, traced, _tensor_inputs(node))
        changed = True
    if changed:
        model.graph.eliminate_dead_code()
        model.recompile()
    return model
