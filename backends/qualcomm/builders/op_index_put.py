"""index_put / index_put_ (and index_copy, which export writes as index_put) -> QNN ScatterNd.

`out = self.clone(); out[indices] = values` (accumulate=False) or `+= values` (accumulate=True),
with one or several index tensors and None entries (full slices) anywhere in `indices`:

    B        = broadcast shape of the index tensors, k = their number, on axes A (in order)
    data'    = Transpose(self, A first)                      [*self[A], *self[rest]]
    indices' = Concat(Reshape(Tile(index_i), B + [1]))       [*B, k]
    updates' = Transpose(Tile(values), B first)              [*B, *self[rest]]
    out      = Transpose back (ScatterNd(data', indices', updates', reduction = accumulate))

The Transposes are Reshapes when they only move unit dims and vanish when nothing moves; the
Tiles broadcast (index tensors to B, values to the indexed result's shape) and vanish when
nothing is broadcast. torch puts B where the indexed axes were when they are adjacent
(`x[:, i, j]` is [x0, *B, x3]) and first otherwise (`x[i, :, j]` is [*B, x1]): the values'
Transpose follows that rule. int64 indices stay INT_64 in the payload (QNN runs them as INT_32).
A position out of range is an execute error on the host engine; negative positions are not
wrapped (they cannot be checked at lowering) and count as out of range. Duplicate positions:
the last write wins (accumulate=False; torch leaves the order undefined), or all are summed
(accumulate=True)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence

import torch

from backends.qualcomm.builders.graph_builder import (
    GraphBuilder,
    inverse_perm,
    logical_shape,
    moves_only_unit_dims,
    permute_dims,
)
from backends.qualcomm.builders.op_shape import edge_ops
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.registry import (
    SUPPORTED,
    NodeBuilder,
    SupportResult,
    check_static_shapes,
    first_failure,
    node_val,
    register_builder,
    table_quant_annotations,
)
from backends.qualcomm.builders.utils import reshape
from backends.qualcomm.serialization.qnn_graph import QnnTensor, uint32_scalar, uint32_tensor

_INDEX_DTYPES = (torch.int32, torch.int64)
_DATA_DTYPES = (torch.float32, torch.float16)


@dataclass(frozen=True)
class IndexPlan:
    """Where index_put writes: the indexed axes of self, their index nodes, the broadcast shape
    B of the index tensors and the axes left whole."""

    data_shape: List[int]
    axes: List[int]
    index_nodes: List[torch.fx.Node]
    batch: List[int]

    @property
    def rest(self) -> List[int]:
        return [d for d in range(len(self.data_shape)) if d not in self.axes]

    @property
    def adjacent(self) -> bool:
        return self.axes == list(range(self.axes[0], self.axes[0] + len(self.axes)))

    @property
    def data_perm(self) -> List[int]:
        """self's axes with the indexed ones first."""
        return self.axes + self.rest

    def result_shape(self) -> List[int]:
        """The shape of self[indices] (what values broadcast to), torch's advanced-indexing rule."""
        shape = self.data_shape
        if self.adjacent:
            first, last = self.axes[0], self.axes[-1]
            return shape[:first] + self.batch + shape[last + 1 :]
        return self.batch + [shape[d] for d in self.rest]

    def updates_perm(self) -> List[int]:
        """Permutation of result_shape() that puts B first (ScatterNd's updates layout)."""
        n = len(self.batch)
        if not self.adjacent:
            return list(range(n + len(self.rest)))
        first = self.axes[0]
        return list(range(first, first + n)) + list(range(first)) + list(range(first + n, n + len(self.rest)))

    def updates_shape(self) -> List[int]:
        return self.batch + [self.data_shape[d] for d in self.rest]


def _entries(node: torch.fx.Node) -> List[object]:
    return list(node.args[1])


def accumulates(node: torch.fx.Node) -> bool:
    return bool(node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False))


def index_plan(node: torch.fx.Node) -> Optional[IndexPlan]:
    """The plan of an index_put node; None when its indices are not tensors / None entries or do
    not broadcast."""
    axes, index_nodes = [], []
    for axis, entry in enumerate(_entries(node)):
        if entry is None:
            continue
        if not isinstance(entry, torch.fx.Node) or not isinstance(node_val(entry), torch.Tensor):
            return None
        axes.append(axis)
        index_nodes.append(entry)
    if not axes:
        return None
    try:
        batch = list(torch.broadcast_shapes(*(tuple(node_val(n).shape) for n in index_nodes)))
    except RuntimeError:
        return None
    return IndexPlan(logical_shape(node.args[0]), axes, index_nodes, [int(d) for d in batch])


def _broadcasts_to(shape: Sequence[int], target: Sequence[int]) -> bool:
    trimmed = list(shape)
    while len(trimmed) > len(target) and trimmed[0] == 1:
        trimmed.pop(0)
    if len(trimmed) > len(target):
        return False
    padded = [1] * (len(target) - len(trimmed)) + trimmed
    return all(s in (1, t) for s, t in zip(padded, target))


def _check_data(node: torch.fx.Node) -> SupportResult:
    data, values = node_val(node.args[0]), node_val(node.args[2])
    if not isinstance(data, torch.Tensor) or data.dtype not in _DATA_DTYPES or data.dim() == 0:
        return False, "self must be a float32 tensor of rank >= 1"
    if not isinstance(values, torch.Tensor) or values.dtype != data.dtype:
        return False, f"values must be a tensor of self's dtype {data.dtype}"
    return SUPPORTED


def _check_indices(node: torch.fx.Node) -> SupportResult:
    entries = _entries(node)
    plan = index_plan(node)
    if plan is None:
        return False, f"indices {entries}: index tensors (or None) that broadcast together are supported"
    dtypes = {node_val(n).dtype for n in plan.index_nodes}
    if any(dt == torch.bool for dt in dtypes):
        return False, "a bool mask index is not supported (its number of positions is data-dependent)"
    if not dtypes <= set(_INDEX_DTYPES) or len(dtypes) != 1:
        return False, f"index tensors of one dtype, int32 or int64, are supported (got {sorted(map(str, dtypes))})"
    if len(entries) > len(plan.data_shape):
        return False, f"{len(entries)} indices for a rank-{len(plan.data_shape)} self"
    return SUPPORTED


def _check_values_shape(node: torch.fx.Node) -> SupportResult:
    target = index_plan(node).result_shape()
    shape = logical_shape(node.args[2])
    if not _broadcasts_to(shape, target):
        return False, f"values shape {shape} does not broadcast to the indexed shape {target}"
    return SUPPORTED


def permute(gb: GraphBuilder, node: torch.fx.Node, x: QnnTensor, perm: List[int], suffix: str) -> QnnTensor:
    if perm == sorted(perm):
        return x
    dims = permute_dims(x.dims, perm)
    if moves_only_unit_dims(x.dims, perm):
        return reshape(gb, node, x, dims, suffix)
    out = gb.like(x, f"{node.name}_{suffix}", dims)
    gb.add_op(node, QnnOpType.Transpose, [x], [out], [uint32_tensor("perm", perm)], suffix=suffix)
    return out


def _broadcast(gb: GraphBuilder, node: torch.fx.Node, x: QnnTensor, target: List[int], suffix: str) -> QnnTensor:
    """x Reshaped to target's rank (leading 1s added or dropped) and Tiled to target."""
    dims = [d for d in x.dims]
    while len(dims) > len(target) and dims[0] == 1:
        dims.pop(0)
    dims = [1] * (len(target) - len(dims)) + dims
    if dims != list(x.dims):
        x = reshape(gb, node, x, dims or [1], f"{suffix}_rank")
    if dims == target:
        return x
    multiples = [t // d for d, t in zip(dims, target)]
    out = gb.like(x, f"{node.name}_{suffix}_tile", target)
    gb.add_op(node, QnnOpType.Tile, [x], [out], [uint32_tensor("multiples", multiples)], suffix=f"{suffix}_tile")
    return out


def _scatter_indices(gb: GraphBuilder, node: torch.fx.Node, plan: IndexPlan) -> QnnTensor:
    """The index tensors broadcast to B and stacked on a last axis: [*B, k]."""
    batch = plan.batch or [1]
    columns = []
    for i, index in enumerate(plan.index_nodes):
        column = _broadcast(gb, node, gb.tensor(index), batch, f"index{i}")
        columns.append(reshape(gb, node, column, batch + [1], f"index{i}_column"))
    if len(columns) == 1:
        return columns[0]
    stacked = gb.like(columns[0], f"{node.name}_indices", batch + [len(columns)])
    gb.add_op(node, QnnOpType.Concat, columns, [stacked], [uint32_scalar("axis", len(batch))], suffix="indices")
    return stacked


def _scatter_updates(gb: GraphBuilder, node: torch.fx.Node, plan: IndexPlan) -> QnnTensor:
    """values broadcast to the indexed shape, B moved first: [*B, *self[rest]] ([1, ...] for a
    0-d B)."""
    values = _broadcast(gb, node, gb.tensor(node.args[2]), plan.result_shape(), "values")
    values = permute(gb, node, values, plan.updates_perm(), "values_t")
    if not plan.batch:
        values = reshape(gb, node, values, [1] + plan.updates_shape(), "values_batch")
    return values


@register_builder
class IndexPutBuilder(NodeBuilder):
    targets = edge_ops("index_put.default")
    quant_annotations = table_quant_annotations([QnnOpType.ScatterNd])

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return first_failure(
            lambda: _check_data(node),
            lambda: _check_indices(node),
            lambda: check_static_shapes(node),
            lambda: _check_values_shape(node),
        )

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        plan = index_plan(node)
        indices, updates = _scatter_indices(gb, node, plan), _scatter_updates(gb, node, plan)
        scatter_on_axes(gb, node, gb.tensor(node.args[0]), plan.data_perm, indices, updates, int(accumulates(node)))


def scatter_on_axes(
    gb: GraphBuilder,
    node: torch.fx.Node,
    data: QnnTensor,
    data_perm: List[int],
    indices: QnnTensor,
    updates: QnnTensor,
    reduction: int,
) -> None:
    """node's output = ScatterNd(data with its axes in data_perm's order, indices, updates,
    reduction), its axes moved back: the indices address data_perm's first axes, updates hold
    the batch first."""
    data_t = permute(gb, node, data, data_perm, "data")
    params = [uint32_scalar("reduction", reduction)]
    if data_t is data:
        gb.add_op(node, QnnOpType.ScatterNd, [data_t, indices, updates], [gb.define_output(node)], params)
        return
    scattered = gb.like(data_t, f"{node.name}_scattered")
    gb.add_op(node, QnnOpType.ScatterNd, [data_t, indices, updates], [scattered], params)
    back = inverse_perm(data_perm)
    output = gb.define_output(node)
    if moves_only_unit_dims(scattered.dims, back):
        gb.add_op(node, QnnOpType.Reshape, [scattered], [output], suffix="back")
    else:
        gb.add_op(node, QnnOpType.Transpose, [scattered], [output], [uint32_tensor("perm", back)], suffix="back")
