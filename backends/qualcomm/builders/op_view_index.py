"""Ops that read elements at positions fixed at lowering:

- diagonal / unfold / as_strided (edge: diagonal_copy, unfold_copy, as_strided_copy) -> a
  Reshape of the input to [numel], one Gather at constant 1-d indices and a Reshape to the
  output's shape: the op applied to arange(numel) in the input's shape gives each output
  element's flat input position (QNN 2.51's HTP fails graphFinalize, error 1002, on a Gather
  with rank-2 indices into a rank-1 table giving a rank-5 output: unfold of a rank-4 input);
- triu / tril (kept whole: export makes an int64 arange / sub / compare / where chain of them)
  -> ElementWiseSelect(constant mask over the last two dims, x, 0).

Quantized graphs: both only move or zero values, so the output shares the input's encoding
(QuantFamily.SHARED); triu / tril's 0 is the encoding's zero point (affine encodings hold 0
exactly). Data types: float32, int32, int64 (int64 is INT_32 on QNN)."""

from __future__ import annotations

import numpy as np
import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape
from backends.qualcomm.builders.op_logic import padded_rank
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
    tensor_vals,
)
from backends.qualcomm.builders.utils import reshape
from backends.qualcomm.serialization.qnn_graph import QnnTensor, int32_scalar
from backends.qualcomm.utils.constants import QCOM_QUANT_ATTRS

_aten = exir_ops.edge.aten
_DTYPES = (torch.float32, torch.float16, torch.int32, torch.int64)
_NUMPY = {torch.float32: np.float32, torch.float16: np.float32, torch.int32: np.int32, torch.int64: np.int64}


def _same_dtype_io(node: torch.fx.Node) -> SupportResult:
    source, outputs = node_val(node.args[0]), tensor_vals(node)
    if not isinstance(source, torch.Tensor) or not outputs:
        return False, "input or output has no tensor meta"
    if source.dtype not in _DTYPES or outputs[0].dtype != source.dtype:
        return False, f"dtype {source.dtype} -> {outputs[0].dtype}: float32, int32 or int64 in and out"
    return SUPPORTED


# ---- diagonal / unfold / as_strided -> Gather at constant flat positions ---------------------
def flat_positions(node: torch.fx.Node) -> torch.Tensor:
    """Each output element's position in the flattened (contiguous) input."""
    shape = logical_shape(node.args[0])
    positions = torch.arange(int(np.prod(shape)), dtype=torch.int64)
    args = list(node.args[1:])
    if node.target == _aten.as_strided_copy.default:
        offset = args[2] if len(args) > 2 else node.kwargs.get("storage_offset")
        return torch.as_strided(positions, [int(s) for s in args[0]], [int(s) for s in args[1]], int(offset or 0))
    positions = positions.reshape(shape)
    if node.target == _aten.diagonal_copy.default:
        names = ("offset", "dim1", "dim2")
        values = [args[i] if len(args) > i else node.kwargs.get(n, d) for i, (n, d) in enumerate(zip(names, (0, 0, 1)))]
        return torch.diagonal(positions, *[int(v) for v in values])
    return positions.unfold(*[int(a) for a in args[:3]])


def _check_positions(node: torch.fx.Node) -> SupportResult:
    source = node_val(node.args[0])
    if not logical_shape(node.args[0]):
        return False, "0-d input is not supported (QNN refuses rank-0 tensors)"
    if node.target == _aten.as_strided_copy.default:
        if not source.is_contiguous() or source.storage_offset() != 0:
            return False, "as_strided of a non-contiguous input (strides of another storage) is not supported"
        try:
            positions = flat_positions(node)
        except RuntimeError as error:
            return False, f"as_strided outside the input: {error}"
        if positions.numel() and int(positions.max()) >= source.numel():
            return False, f"as_strided reads position {int(positions.max())} of a {source.numel()}-element input"
    if not logical_shape(node) or int(np.prod(logical_shape(node))) == 0:
        return False, "empty or 0-d output is not supported"
    return SUPPORTED


@register_builder
class PositionGatherBuilder(NodeBuilder):
    targets = [_aten.diagonal_copy.default, _aten.unfold_copy.default, _aten.as_strided_copy.default]
    quant_annotations = dict.fromkeys(
        aten_ops("diagonal.default", "unfold.default", "as_strided.default"), QuantFamily.SHARED
    )

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return first_failure(
            lambda: _same_dtype_io(node), lambda: check_static_shapes(node), lambda: _check_positions(node)
        )

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x = gb.tensor(node.args[0])
        flat = reshape(gb, node, x, [int(np.prod(x.dims))], "flat")
        positions = flat_positions(node).contiguous().numpy().astype(np.int32).reshape(-1)
        indices = gb.static_tensor(f"{node.name}_positions", positions)
        gathered = gb.like(flat, f"{node.name}_gathered", [positions.size])
        gb.add_op(node, QnnOpType.Gather, [flat, indices], [gathered], [int32_scalar("axis", 0)])
        gb.add_op(node, QnnOpType.Reshape, [gathered], [gb.define_output(node)], suffix="shape")


# ---- triu / tril -> Select(constant mask, x, 0) ------------------------------------------------
def triangle_mask(node: torch.fx.Node) -> np.ndarray:
    """Bool [1, .., 1, rows, cols] (the input's rank): True where the element is kept."""
    shape = logical_shape(node.args[0])
    diagonal = int(node.args[1] if len(node.args) > 1 else node.kwargs.get("diagonal", 0))
    ones = np.ones(shape[-2:], dtype=np.bool_)
    mask = np.triu(ones, diagonal) if node.target == _aten.triu.default else np.tril(ones, diagonal)
    return mask.reshape([1] * (len(shape) - 2) + list(shape[-2:]))


def _check_triangle(node: torch.fx.Node) -> SupportResult:
    if len(logical_shape(node.args[0])) < 2:
        return False, "triu / tril need an input of rank >= 2"
    return SUPPORTED


@register_builder
class TriangleBuilder(NodeBuilder):
    targets = [_aten.triu.default, _aten.tril.default]
    keep_whole = [_aten.triu.default, _aten.tril.default]
    quant_annotations = dict.fromkeys(aten_ops("triu.default", "tril.default"), QuantFamily.SHARED)

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return first_failure(
            lambda: _same_dtype_io(node), lambda: check_static_shapes(node), lambda: _check_triangle(node)
        )

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x = gb.tensor(node.args[0])
        mask = gb.static_tensor(f"{node.name}_mask", triangle_mask(node))
        zero = padded_rank(gb, node, _zero(gb, node), len(x.dims), "zero")
        gb.add_op(node, QnnOpType.ElementWiseSelect, [mask, x, zero], [gb.define_output(node)])


def _zero(gb: GraphBuilder, node: torch.fx.Node) -> QnnTensor:
    """0 in the output's data type: its zero point's code when quantized."""
    attrs = node.meta.get(QCOM_QUANT_ATTRS)
    if attrs is not None:
        code = int(np.clip(int(attrs.zero_point), attrs.qmin, attrs.qmax))
        return gb.quantized_static(f"{node.name}_zero", np.array([code], np.int64), attrs)
    return gb.static_tensor(f"{node.name}_zero", np.zeros([1], _NUMPY[tensor_vals(node)[0].dtype]))
