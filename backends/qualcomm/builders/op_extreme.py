"""Max / min reductions -> ReduceMax / ReduceMin (+ Argmax / Argmin for indices).

amax / amin, any / all on bool tensors, max() / min() of every element, and max.dim / min.dim:
values by ReduceMax / ReduceMin, the indices output (getitem 1, when used) by Argmax / Argmin
INT_32 + Cast to INT_64. argmax / argmin: Argmax / Argmin + Cast.

A reduction of every element (max() / min(), any() / all(), amax / amin over every dim without
keepdim) has a 0-d output, which QNN refuses (3110 'Output[0] has incorrect Rank 0'): the
flattened input is reduced to [1], which stands for the 0-d output (utils.one_element_dims).

Quantized graphs: amax / amin / max.dim / min.dim select input values, so the values share the
input's encoding (QuantFamily.SHARED); argmax / argmin get a quantized input and an unquantized
index output (QuantFamily.COMPUTE with an integer output). Indices are taken on the codes, which
order as the values do (positive scale)."""

from __future__ import annotations

import operator
from typing import Optional

import numpy as np
import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape
from backends.qualcomm.builders.op_reduce import keep_dims, reduce_axes
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.registry import (
    is_float_dtype,
    SUPPORTED,
    LayoutPolicy,
    NodeBuilder,
    QuantFamily,
    SupportResult,
    aten_ops,
    check_float_io,
    first_failure,
    node_val,
    register_builder,
    table_quant_annotations,
    tensor_vals,
)
from backends.qualcomm.builders.utils import input_layout, normalize_axis, one_element_dims, reshape, stored_axis
from backends.qualcomm.serialization.qnn_graph import DataType, QnnTensor, bool_scalar, uint32_scalar, uint32_tensor
from backends.qualcomm.utils.constants import NCHW_TO_NHWC

_aten = exir_ops.edge.aten

# edge op -> (values op, indices op)
EXTREME_OPS = {
    _aten.amax.default: (QnnOpType.ReduceMax, QnnOpType.Argmax),
    _aten.max.dim: (QnnOpType.ReduceMax, QnnOpType.Argmax),
    _aten.any.dim: (QnnOpType.ReduceMax, QnnOpType.Argmax),
    _aten.any.dims: (QnnOpType.ReduceMax, QnnOpType.Argmax),
    _aten.amin.default: (QnnOpType.ReduceMin, QnnOpType.Argmin),
    _aten.min.dim: (QnnOpType.ReduceMin, QnnOpType.Argmin),
    _aten.all.dim: (QnnOpType.ReduceMin, QnnOpType.Argmin),
    _aten.all.dims: (QnnOpType.ReduceMin, QnnOpType.Argmin),
    _aten.any.default: (QnnOpType.ReduceMax, QnnOpType.Argmax),
    _aten.all.default: (QnnOpType.ReduceMin, QnnOpType.Argmin),
    _aten.max.default: (QnnOpType.ReduceMax, QnnOpType.Argmax),
    _aten.min.default: (QnnOpType.ReduceMin, QnnOpType.Argmin),
}
BOOL_OPS = (_aten.any.dim, _aten.any.dims, _aten.all.dim, _aten.all.dims, _aten.any.default, _aten.all.default)
TUPLE_OPS = (_aten.max.dim, _aten.min.dim)
ARG_OPS = {_aten.argmax.default: QnnOpType.Argmax, _aten.argmin.default: QnnOpType.Argmin}


def _input_dtype(node: torch.fx.Node) -> Optional[torch.dtype]:
    val = node_val(node.args[0])
    return val.dtype if isinstance(val, torch.Tensor) else None


def _check_rank(node: torch.fx.Node) -> SupportResult:
    if len(logical_shape(node.args[0])) == 0:
        return False, "0-d input is not supported"
    if any(logical_shape(node.args[0])[a] == 0 for a in reduce_axes(node)):
        return False, "reduction over an empty axis"
    return SUPPORTED


def _check_dtypes(node: torch.fx.Node) -> SupportResult:
    if node.target in BOOL_OPS:
        outputs = tensor_vals(node)
        if _input_dtype(node) != torch.bool or not outputs or outputs[0].dtype != torch.bool:
            return False, "any / all: only bool input and output are supported"
        return SUPPORTED
    return check_float_io(node)


def _indices_users(node: torch.fx.Node):
    return [u for u in node.users if u.target is operator.getitem and u.args[1] == 1]


def _int64_indices(gb: GraphBuilder, node: torch.fx.Node, indices: QnnTensor) -> QnnTensor:
    """The INT_64 indices PyTorch returns: a Cast of Argmax / Argmin's INT_32 output."""
    indices64 = gb.native_tensor(f"{node.name}_indices", indices.dims, DataType.INT_64)
    gb.add_op(node, QnnOpType.Cast, [indices], [indices64], suffix="indices_int64")
    return indices64


def _bool_reduce(gb: GraphBuilder, node: torch.fx.Node, x: QnnTensor, out: QnnTensor, params: list) -> None:
    """any / all: HTP's ReduceMax / ReduceMin refuse BOOL_8 (3110, 'Unsupported input/output
    datatypes'; FLOAT_16 / FLOAT_32 / fixed point only): Cast to FLOAT_32, reduce, Cast back."""
    op_type, _ = EXTREME_OPS[node.target]
    x_float = gb.native_tensor(f"{node.name}_in_float", x.dims, DataType.FLOAT_32)
    gb.add_op(node, QnnOpType.Cast, [x], [x_float], suffix="to_float")
    y_float = gb.native_tensor(f"{node.name}_float", out.dims, DataType.FLOAT_32)
    gb.add_op(node, op_type, [x_float], [y_float], params)
    gb.add_op(node, QnnOpType.Cast, [y_float], [out], suffix="to_bool")


@register_builder
class ExtremeBuilder(NodeBuilder):
    targets = list(EXTREME_OPS)
    quant_annotations = dict.fromkeys(
        aten_ops("amax.default", "amin.default", "max.default", "min.default", "max.dim", "min.dim"),
        QuantFamily.SHARED,
    )
    layout_policy = LayoutPolicy.AGNOSTIC
    num_outputs = 2  # max.dim / min.dim: values, indices

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return first_failure(lambda: _check_dtypes(node), lambda: _check_rank(node))

    def supports_channel_last(self, node: torch.fx.Node) -> bool:
        """Channel-last input works when the kept dims stay in logical order (one-output ops)."""
        if node.target in TUPLE_OPS:
            return False
        if len(logical_shape(node.args[0])) != 4 or keep_dims(node):
            return True
        kept = [p for p in NCHW_TO_NHWC if p not in reduce_axes(node)]
        return kept == sorted(kept)

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        values_op, indices_op = EXTREME_OPS[node.target]
        layout = input_layout(node)
        x = gb.tensor(node.args[0], layout)
        rank = len(logical_shape(node.args[0]))
        axes = sorted(stored_axis(a, rank, layout) for a in reduce_axes(node))
        keep = keep_dims(node)
        if not logical_shape(node):  # every element: the flat input, output [1]
            x = reshape(gb, node, x, [int(np.prod(x.dims))], "flat")
            axes, keep = [0], True
        params = [uint32_tensor("axes", axes), bool_scalar("keep_dims", keep)]
        values = gb.define_output(node, dims=one_element_dims(node))
        if node.target in BOOL_OPS:
            _bool_reduce(gb, node, x, values, params)
            return
        gb.add_op(node, values_op, [x], [values], params)
        users = _indices_users(node) if node.target in TUPLE_OPS else []
        if users:
            indices = gb.native_tensor(f"{node.name}_indices_int32", values.dims, DataType.INT_32)
            gb.add_op(
                node,
                indices_op,
                [x],
                [indices],
                [uint32_scalar("axis", axes[0]), bool_scalar("keep_dims", keep)],
                suffix="indices",
            )
            indices64 = _int64_indices(gb, node, indices)
            for user in users:
                gb.bind(user, indices64)


def _arg_dim(node: torch.fx.Node) -> Optional[int]:
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    return None if dim is None else int(dim)


def _check_arg(node: torch.fx.Node) -> SupportResult:
    if not is_float_dtype(_input_dtype(node)):
        return False, f"input dtype {_input_dtype(node)}; only float32 / float16 are supported"
    rank = len(logical_shape(node.args[0]))
    if _arg_dim(node) is None:
        if rank == 0 or 0 in logical_shape(node.args[0]):
            return False, "0-d or empty input is not supported"
        return SUPPORTED
    if rank == 0 or logical_shape(node.args[0])[normalize_axis(_arg_dim(node), rank)] == 0:
        return False, "0-d input or empty reduced axis is not supported"
    return SUPPORTED


@register_builder
class ArgExtremeBuilder(NodeBuilder):
    """argmax / argmax(dim, keepdim): a quantized input, indices not quantized."""

    targets = list(ARG_OPS)
    quant_annotations = table_quant_annotations([QnnOpType.Argmax, QnnOpType.Argmin])

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return _check_arg(node)

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x = gb.tensor(node.args[0])
        rank = len(logical_shape(node.args[0]))
        keep = bool(node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False))
        # dim=None: the index into the flattened input ([1] * rank with keepdim); a 0-d result is
        # stored as [1] (QNN refuses rank 0), as max() / amax over every dim
        flat = _arg_dim(node) is None or not logical_shape(node)
        if flat:
            x = reshape(gb, node, x, [int(np.prod(x.dims))], "flat") if len(x.dims) != 1 else x
            keep = True
        indices = gb.native_tensor(f"{node.name}_int32", [1] if flat else logical_shape(node), DataType.INT_32)
        gb.add_op(
            node,
            ARG_OPS[node.target],
            [x],
            [indices],
            [
                uint32_scalar("axis", 0 if flat else normalize_axis(_arg_dim(node), rank)),
                bool_scalar("keep_dims", keep),
            ],
        )
        indices64 = _int64_indices(gb, node, indices)
        if flat and logical_shape(node):
            indices64 = reshape(gb, node, indices64, logical_shape(node), "keep_dims")
        gb.bind(node, indices64)
