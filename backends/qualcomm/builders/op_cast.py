"""_to_copy / _to_dim_order_copy: dtype change -> Cast; same dtype (any dim order), or float16 <->
float32 (both FLOAT_32 inside a delegate: GraphBuilder) -> identity Reshape. copy
(self.copy_(src)): src broadcast (Tile) to self's shape and dtype.

Two casts QNN 2.51's HTP computes wrong (measured on SM8650 over every uint8 value and
fractional floats) are lowered another way, on both engines:
- uint8 -> float: HTP's Cast UINT_8 -> FLOAT_32 gives 0 / 1 (as if the input were bool);
  UINT_8 -> INT_32 -> FLOAT_32 is exact.
- float -> bool: HTP's Cast gives False for 0 < |x| < 1 (truncation); torch gives True for
  every non-zero value (NaN included): ElementWiseNotEqual(x, 0)."""

from __future__ import annotations

import numpy as np
import torch

from backends.qualcomm.builders.graph_builder import GraphBuilder
from backends.qualcomm.builders.op_shape import dim_order_ops, edge_ops
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.registry import SUPPORTED, NodeBuilder, SupportResult, register_builder, tensor_vals
from backends.qualcomm.builders.utils import reshape
from backends.qualcomm.serialization.qnn_graph import DataType, QnnTensor, uint32_tensor

CAST_DTYPES = (torch.float32, torch.float16, torch.int32, torch.int64, torch.bool, torch.uint8)


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
        return SUPPORTED

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x = gb.tensor(node.args[0])
        source, target = tensor_vals(node.args[0])[0].dtype, tensor_vals(node)[0].dtype
        # Elementwise: the output keeps the input's dims (a lifted scalar constant may be
        # stored as [1] while the node's meta says []).
        out = gb.define_output(node, dims=x.dims)
        if source == target or (x.data_type == out.data_type == DataType.FLOAT_32 and x.quant is None):
            gb.add_op(node, QnnOpType.Reshape, [x], [out])
        elif x.data_type == DataType.UINT_8 and target.is_floating_point:
            gb.add_op(node, QnnOpType.Cast, [cast_uint8_to_int32(node, gb, x)], [out])
        elif target == torch.bool and source.is_floating_point and x.quant is None:
            zero = gb.static_tensor(f"{node.name}_zero", np.zeros([1], np.float32))
            gb.add_op(node, QnnOpType.ElementWiseNotEqual, [x, zero], [out])
        else:
            gb.add_op(node, QnnOpType.Cast, [x], [out])


def cast_uint8_to_int32(node: torch.fx.Node, gb: GraphBuilder, x: QnnTensor) -> QnnTensor:
    """x (UINT_8) as INT_32: the exact first half of uint8 -> float on QNN."""
    wide = gb.native_tensor(f"{node.name}_int32", x.dims, DataType.INT_32)
    gb.add_op(node, QnnOpType.Cast, [x], [wide], suffix="int32")
    return wide


@register_builder
class CopyBuilder(NodeBuilder):
    """copy(self, src) (functional `self.copy_(src)`): src broadcast to self's shape, in self's
    dtype; self's values are not read. Reshape (+ Tile to broadcast, + Cast to change dtype)."""

    targets = edge_ops("copy.default")

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        target, source = tensor_vals(node.args[0]), tensor_vals(node.args[1])
        if not target or not source:
            return False, "self and src must be tensors"
        for val, what in ((target[0], "self"), (source[0], "src")):
            if val.dtype not in CAST_DTYPES:
                return False, f"{what} dtype {val.dtype} is not supported"
        shape, src_shape = list(target[0].shape), list(source[0].shape)
        try:
            broadcast = list(torch.broadcast_shapes(tuple(src_shape), tuple(shape)))
        except RuntimeError:
            broadcast = None
        if broadcast != shape:
            return False, f"src shape {src_shape} does not broadcast to self's {shape}"
        return SUPPORTED

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        src = gb.tensor(node.args[1])
        shape = [int(d) for d in tensor_vals(node.args[0])[0].shape] or [1]
        dims = [1] * (len(shape) - len(src.dims)) + list(src.dims)
        if dims != list(src.dims):
            src = reshape(gb, node, src, dims, "rank")
        if dims != shape:
            tiled = gb.like(src, f"{node.name}_tile", shape)
            multiples = [t // d for d, t in zip(dims, shape)]
            gb.add_op(node, QnnOpType.Tile, [src], [tiled], [uint32_tensor("multiples", multiples)], suffix="tile")
            src = tiled
        out = gb.define_output(node, dims=shape)
        same = tensor_vals(node.args[0])[0].dtype == tensor_vals(node.args[1])[0].dtype or (
            src.data_type == out.data_type == DataType.FLOAT_32 and src.quant is None
        )
        gb.add_op(node, QnnOpType.Reshape if same else QnnOpType.Cast, [src], [out])
