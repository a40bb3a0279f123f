"""scatter (src / value) -> QNN ScatterElements; scatter_add / scatter_reduce sum / prod
(include_self) -> ScatterNd add / mul at each element's full coordinates (QNN refuses
ScatterElements' reductions). index_put is op_index_put.py (ScatterNd)."""

from __future__ import annotations


import numpy as np
import torch

from backends.qualcomm.builders.graph_builder import (
    GraphBuilder,
)
from backends.qualcomm.builders.op_constant import quantized_codes
from backends.qualcomm.builders.op_shape import edge_ops
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.registry import (
    is_float_dtype,
    SUPPORTED,
    NodeBuilder,
    QuantFamily,
    SupportResult,
    aten_ops,
    check_static_shapes,
    first_failure,
    node_val,
    register_builder,
)
from backends.qualcomm.builders.utils import reshape
from backends.qualcomm.serialization.qnn_graph import DataType, QnnTensor, uint32_scalar
from backends.qualcomm.utils.constants import QCOM_QUANT_ATTRS

_INDEX_DTYPES = (torch.int32, torch.int64)


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
    if not isinstance(data, torch.Tensor) or not is_float_dtype(data.dtype) or data.dim() == 0:
        return False, "self must be a float32 tensor of rank >= 1"
    if not isinstance(index, torch.Tensor) or index.dtype not in _INDEX_DTYPES or index.dim() != data.dim():
        return False, "index must be an int32 / int64 tensor of self's rank"
    src = node_val(node.args[3]) if isinstance(node.args[3], torch.fx.Node) else None
    if src is not None and (not is_float_dtype(src.dtype) or tuple(src.shape) != tuple(index.shape)):
        return False, f"src {tuple(src.shape)} {src.dtype}: only a float32 src of the index's shape is supported"
    reduction = _scatter_reduction(node)
    if reduction < 0:
        return False, "reduce: only none, scatter_add and scatter_reduce sum / prod with include_self=True"
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
        if _scatter_reduction(node) > 0:
            self._reduce_as_scatter_nd(node, gb, data, indices, updates, axis, _scatter_reduction(node))
            return
        gb.add_op(
            node,
            QnnOpType.ScatterElements,
            [data, indices, updates],
            [gb.define_output(node)],
            [uint32_scalar("axis", axis), uint32_scalar("reduction", _scatter_reduction(node))],
        )

    @staticmethod
    def _reduce_as_scatter_nd(
        node: torch.fx.Node,
        gb: GraphBuilder,
        data: QnnTensor,
        indices: QnnTensor,
        updates: QnnTensor,
        axis: int,
        reduction: int,
    ) -> None:
        """scatter_add / scatter_reduce: ScatterNd add (1) or mul (2) of every element of updates
        at its full coordinates, the index on `axis` and its own position on the other axes (QNN
        refuses ScatterElements' reductions): coordinates [*index.dims, rank] = Concat of static
        grids and the index."""
        shape = list(indices.dims)
        grids = np.indices(shape)
        dtype = np.int64 if indices.data_type == DataType.INT_64 else np.int32
        columns = []
        for d in range(len(shape)):
            if d == axis:
                columns.append(reshape(gb, node, indices, shape + [1], "index_column"))
            else:
                grid = grids[d].astype(dtype).reshape(shape + [1])
                columns.append(gb.static_tensor(f"{node.name}_coords{d}", grid))
        coords = gb.like(columns[axis], f"{node.name}_coords", shape + [len(shape)])
        gb.add_op(node, QnnOpType.Concat, columns, [coords], [uint32_scalar("axis", len(shape))], suffix="coords")
        params = [uint32_scalar("reduction", reduction)]
        gb.add_op(node, QnnOpType.ScatterNd, [data, coords, updates], [gb.define_output(node)], params)

    @staticmethod
    def _updates(node: torch.fx.Node, gb: GraphBuilder, data: QnnTensor, indices: QnnTensor) -> QnnTensor:
        if isinstance(node.args[3], torch.fx.Node):
            return gb.tensor(node.args[3])
        values = np.full(indices.dims, float(node.args[3]), np.float32)  # scatter.value
        attrs = node.meta.get(QCOM_QUANT_ATTRS)
        if attrs is not None and attrs.axis < 0:
            return gb.quantized_static(f"{node.name}_value", quantized_codes(values, attrs), attrs)
        return gb.static_tensor(f"{node.name}_value", values)
