"""_to_copy / _to_dim_order_copy: dtype change -> Cast; same dtype -> identity Reshape."""
from __future__ import annotations

import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder
from backends.qualcomm.builders.op_shape import dim_order_ops, edge_ops, is_contiguous_dim_order
from backends.qualcomm.builders.registry import (
    NodeBuilder, SupportResult, SUPPORTED, register_builder, tensor_vals,
)

CAST_DTYPES = (torch.float32, torch.int32, torch.int64, torch.bool, torch.uint8)


@register_builder
class CastBuilder(NodeBuilder):
    targets = edge_ops("_to_copy.default") + dim_order_ops("_to_dim_order_copy")

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        source, out = tensor_vals(node.args[0]), tensor_vals(node)
        if not source or not out:
            return False, "missing tensor meta"
        for val, what in ((source[0], "input"), (out[0], "output")):
            if val.dtype not in CAST_DTYPES:
                return False, f"{what} dtype {val.dtype} is not supported by Cast"
        if not is_contiguous_dim_order(node):
            return False, "memory-format change (non-contiguous dim order) is not supported"
        return SUPPORTED

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x = gb.tensor(node.args[0])
        same = tensor_vals(node.args[0])[0].dtype == tensor_vals(node)[0].dtype
        # Elementwise: the output keeps the input's dims (a lifted scalar constant may be
        # stored as [1] while the node's meta says []).
        gb.add_op(node, "Reshape" if same else "Cast", [x], [gb.define_output(node, dims=x.dims)])
