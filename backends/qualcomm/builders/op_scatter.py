"""index_put (accumulate=False, one index tensor: a KV-cache write `cache[:, :, pos] = v`)
-> QNN ScatterNd on the indexed axis moved first:

    Transpose(data, axis first) ; Reshape(pos, [T, 1]) ; Transpose(values, axis first)
    ScatterNd(data', pos', values') ; Transpose back

(the Transposes are Reshapes when they only move unit dims, and vanish for axis 0). int64
positions stay INT_64 in the payload (QNN narrows them to INT_32); a position out of range
is an execute error on the host engine. Negative positions are not wrapped (they cannot be
checked at lowering): the host engine reports them as out of range.

scatter (src / value) / scatter_add / scatter_reduce (sum, prod; include_self) -> ScatterElements
(reduction none / add / mul)."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch

from backends.qualcomm.builders.graph_builder import (
    GraphBuilder,
    inverse_perm,
    logical_shape,
    moves_only_unit_dims,
    permute_dims,
)
from backends.qualcomm.builders.op_constant import quantized_codes
from backends.qualcomm.builders.op_shape import edge_ops
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.registry import (
    SUPPORTED,
    NodeBuilder,
    QuantFamily,
    SupportResult,
    aten_ops,
    check_static_shapes,
    first_failure,
    node_val,
    register_builder,
    table_quant_annotations,
)
from backends.qualcomm.builders.utils import reshape
from backends.qualcomm.serialization.qnn_graph import QnnTensor, uint32_scalar, uint32_tensor
from backends.qualcomm.utils.constants import QCOM_QUANT_ATTRS

_INDEX_DTYPES = (torch.int32, torch.int64)


def _index_entries(node: torch.fx.Node) -> Sequence[object]:
    return list(node.args[1])


def indexed_axis(node: torch.fx.Node) -> Tuple[int, Optional[torch.fx.Node]]:
    """(axis, index node) of the one non-None entry of index_put's indices; (-1, None) if not one."""
    found = [(i, e) for i, e in enumerate(_index_entries(node)) if e is not None]
    if len(found) != 1 or not isinstance(found[0][1], torch.fx.Node):
        return -1, None
    return found[0]


def updates_shape(node: torch.fx.Node) -> List[int]:
    """The values' shape index_put writes: self's shape with the indexed axis = len(index)."""
    axis, index = indexed_axis(node)
    shape = logical_shape(node.args[0])
    shape[axis] = int(node_val(index).numel())
    return shape


def _check_data(node: torch.fx.Node) -> SupportResult:
    data, values = node_val(node.args[0]), node_val(node.args[2])
    for name, val in (("self", data), ("values", values)):
        if not isinstance(val, torch.Tensor) or val.dtype != torch.float32:
            return False, f"{name} must be a float32 tensor"
    if data.dim() == 0:
        return False, "self must have rank >= 1"
    accumulate = node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False)
    if accumulate:
        return False, "accumulate=True is not supported (ScatterNd with reduction none only)"
    return SUPPORTED


def _check_indices(node: torch.fx.Node) -> SupportResult:
    axis, index = indexed_axis(node)
    if index is None:
        return False, f"indices {_index_entries(node)}: exactly one index tensor (the others None) is supported"
    val = node_val(index)
    if not isinstance(val, torch.Tensor) or val.dtype not in _INDEX_DTYPES or val.dim() != 1:
        return False, "the index tensor must be a rank-1 int32 / int64 tensor (bool masks are not supported)"
    return SUPPORTED


def _check_values_shape(node: torch.fx.Node) -> SupportResult:
    expected = updates_shape(node)
    shape = logical_shape(node.args[2])
    trimmed = list(shape)
    while len(trimmed) > len(expected) and trimmed[0] == 1:
        trimmed.pop(0)
    padded = [1] * (len(expected) - len(trimmed)) + trimmed
    if padded != expected:
        return False, f"values shape {shape} needs broadcasting to {expected}: not supported"
    return SUPPORTED


def _axis_first(gb: GraphBuilder, node: torch.fx.Node, x: QnnTensor, perm: List[int], suffix: str) -> QnnTensor:
    if perm == sorted(perm):
        return x
    dims = permute_dims(x.dims, perm)
    if moves_only_unit_dims(x.dims, perm):
        return reshape(gb, node, x, dims, suffix)
    out = gb.like(x, f"{node.name}_{suffix}", dims)
    gb.add_op(node, QnnOpType.Transpose, [x], [out], [uint32_tensor("perm", perm)], suffix=suffix)
    return out


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
        axis, index = indexed_axis(node)
        data = gb.tensor(node.args[0])
        rank = len(data.dims)
        perm = [axis] + [d for d in range(rank) if d != axis]
        values = gb.tensor(node.args[2])
        expected = updates_shape(node)
        if list(values.dims) != expected:
            values = reshape(gb, node, values, expected, "values")
        positions = gb.tensor(index)
        positions = reshape(gb, node, positions, [positions.dims[0] if positions.dims else 1, 1], "positions")
        data_t = _axis_first(gb, node, data, perm, "data")
        values_t = _axis_first(gb, node, values, perm, "values_t")
        params = [uint32_scalar("reduction", 0)]
        if data_t is data:
            gb.add_op(node, QnnOpType.ScatterNd, [data_t, positions, values_t], [gb.define_output(node)], params)
            return
        scattered = gb.like(data_t, f"{node.name}_scattered")
        gb.add_op(node, QnnOpType.ScatterNd, [data_t, positions, values_t], [scattered], params)
        back = inverse_perm(perm)
        output = gb.define_output(node)
        if moves_only_unit_dims(scattered.dims, back):
            gb.add_op(node, QnnOpType.Reshape, [scattered], [output], suffix="back")
        else:
            gb.add_op(node, QnnOpType.Transpose, [scattered], [output], [uint32_tensor("perm", back)], suffix="back")


# ---- scatter / scatter_add / scatter_reduce -> ScatterElements ---------------------------------
_REDUCTIONS = {"sum": 1, "prod": 2}


def _scatter_reduction(node: torch.fx.Node) -> int:
    """QNN reduction code of the node: 0 none, 1 add, 2 mul; -1 when not supported."""
    if node.target in edge_ops("scatter_add.default"):
        return 1
    if node.target in edge_ops("scatter_reduce.two"):
        include_self = node.args[5] if len(node.args) > 5 else node.kwargs.get("include_self", True)
        return _REDUCTIONS.get(node.args[4], -1) if include_self else -1
    reduce = node.kwargs.get("reduce")
    return 0 if reduce is None else -1


def _check_scatter_elements(node: torch.fx.Node) -> SupportResult:
    data, index = node_val(node.args[0]), node_val(node.args[2])
    if not isinstance(data, torch.Tensor) or data.dtype != torch.float32 or data.dim() == 0:
        return False, "self must be a float32 tensor of rank >= 1"
    if not isinstance(index, torch.Tensor) or index.dtype not in _INDEX_DTYPES or index.dim() != data.dim():
        return False, "index must be an int32 / int64 tensor of self's rank"
    src = node_val(node.args[3]) if isinstance(node.args[3], torch.fx.Node) else None
    if src is not None and (src.dtype != torch.float32 or tuple(src.shape) != tuple(index.shape)):
        return False, f"src {tuple(src.shape)} {src.dtype}: only a float32 src of the index's shape is supported"
    reduction = _scatter_reduction(node)
    if reduction < 0:
        return False, "reduce: only none, scatter_add and scatter_reduce sum / prod with include_self=True"
    if reduction > 0:
        # the host engine has them; QNN 2.51's HTP refuses them at op validation (error 3110)
        return False, (
            f"scatter reduction {'add' if reduction == 1 else 'mul'}: QNN refuses ScatterElements "
            f"reduction {reduction} ('incorrect Value {reduction}, expected < 1')"
        )
    return SUPPORTED


@register_builder
class ScatterElementsBuilder(NodeBuilder):
    targets = edge_ops("scatter.src", "scatter.value", "scatter_add.default", "scatter_reduce.two")
    # scatter moves values (the output shares self's encoding); scatter_add / scatter_reduce make
    # new ones (sums, products): own output encoding
    quant_annotations = {
        **dict.fromkeys(aten_ops("scatter.src", "scatter.value"), QuantFamily.SHARED),
        **dict.fromkeys(aten_ops("scatter_add.default", "scatter_reduce.two"), QuantFamily.COMPUTE),
    }

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return first_failure(lambda: _check_scatter_elements(node), lambda: check_static_shapes(node))

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        data, indices = gb.tensor(node.args[0]), gb.tensor(node.args[2])
        updates = self._updates(node, gb, data, indices)
        axis = len(data.dims) + int(node.args[1]) if int(node.args[1]) < 0 else int(node.args[1])
        gb.add_op(
            node,
            QnnOpType.ScatterElements,
            [data, indices, updates],
            [gb.define_output(node)],
            [uint32_scalar("axis", axis), uint32_scalar("reduction", _scatter_reduction(node))],
        )

    @staticmethod
    def _updates(node: torch.fx.Node, gb: GraphBuilder, data: QnnTensor, indices: QnnTensor) -> QnnTensor:
        if isinstance(node.args[3], torch.fx.Node):
            return gb.tensor(node.args[3])
        values = np.full(indices.dims, float(node.args[3]), np.float32)  # scatter.value
        attrs = node.meta.get(QCOM_QUANT_ATTRS)
        if attrs is not None and attrs.axis < 0:
            return gb.quantized_static(f"{node.name}_value", quantized_codes(values, attrs), attrs)
        return gb.static_tensor(f"{node.name}_value", values)
