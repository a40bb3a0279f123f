"""cdist / pdist (QNN has no distance op): _cdist_forward(x1 [B, P, M], x2 [B, R, M], p) ->
Reshapes to [B, P, 1, M] and [B, 1, R, M], ElementWiseSubtract (broadcast), then per p: 2 ->
ElementWiseMultiply (square), ReduceSum over M, ElementWiseSquareRoot; 1 -> ElementWiseAbs,
ReduceSum; inf -> ElementWiseAbs, ReduceMax. _pdist_forward(x [N, M], p): the pairs i < j of the
rows are Gathered (static indices) into [K, M] twice and reduced the same way, K = N(N-1)/2.

The differences are computed directly (torch's compute_mode "donot_use_mm"); torch's default
uses the matrix-product form |a|^2 + |b|^2 - 2ab for more than 25 rows, which differs only by
its rounding. A p = 2 cdist whose difference tensor would exceed MAX_DIFFERENCE_ELEMENTS takes
that form (MatMul with the second input transposed, the squared norms by ReduceSum, the sum
clamped at 0 by Relu, then ElementWiseSquareRoot), as torch computes it by default there. In quantized graphs the chain runs in float between a Dequantize of each input and
a Quantize to the node's own encoding (QuantFamily.COMPUTE), as the PT2E reference computes it."""

from __future__ import annotations

import math
from typing import List, Tuple

import numpy as np
import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.registry import (
    NodeBuilder,
    QuantFamily,
    SUPPORTED,
    SupportResult,
    aten_ops,
    check_float_io,
    first_failure,
    register_builder,
)
from backends.qualcomm.builders.utils import dequantized, is_quantized
from backends.qualcomm.serialization.qnn_graph import DataType, QnnTensor, bool_scalar, int32_scalar, uint32_tensor

_aten = exir_ops.edge.aten
_CDIST, _PDIST = _aten._cdist_forward.default, _aten._pdist_forward.default
_CDISTS = (_aten.cdist.default, _CDIST)  # cdist: kept whole (torch's own decomposition picks matmuls)
# Largest broadcast difference tensor ([B, P, R, M] or [K, M] elements) built.
MAX_DIFFERENCE_ELEMENTS = 1 << 22
SUPPORTED_P = (1.0, 2.0, math.inf)


def _is_cdist(node: torch.fx.Node) -> bool:
    return any(node.target is op or node.target is op._op for op in _CDISTS)  # edge or export-level op


def _p(node: torch.fx.Node) -> float:
    default = 2.0
    index = 2 if _is_cdist(node) else 1
    return float(node.args[index]) if len(node.args) > index and node.args[index] is not None else default


def _difference_elements(node: torch.fx.Node) -> int:
    if not _is_cdist(node):
        n, m = logical_shape(node.args[0])
        return n * (n - 1) // 2 * m
    return int(np.prod(logical_shape(node), dtype=np.int64)) * logical_shape(node.args[0])[-1]


def _by_matmul(node: torch.fx.Node) -> bool:
    """A p = 2 cdist too large for the difference tensor: |a|^2 + |b|^2 - 2ab."""
    return _is_cdist(node) and _p(node) == 2.0 and _difference_elements(node) > MAX_DIFFERENCE_ELEMENTS


def _check(node: torch.fx.Node) -> SupportResult:
    op = "cdist" if _is_cdist(node) else "pdist"
    if _p(node) not in SUPPORTED_P:
        return False, f"{op}: p={_p(node)} is not supported (p = 1, 2 or inf)"
    shapes = [logical_shape(a) for a in node.args[: 2 if _is_cdist(node) else 1]]
    if _is_cdist(node) and (len(shapes[0]) not in (2, 3) or shapes[0][:-2] != shapes[1][:-2]):
        return False, f"cdist: inputs {shapes} must be [P, M] / [R, M] or [B, P, M] / [B, R, M] (same B)"
    if not _is_cdist(node) and (len(shapes[0]) != 2 or shapes[0][0] < 2):
        return False, f"pdist: input {shapes[0]} must be [N, M] with N >= 2"
    if _difference_elements(node) > MAX_DIFFERENCE_ELEMENTS and not _by_matmul(node):
        return False, (
            f"{op}: the difference tensor would have {_difference_elements(node)} elements "
            f"(limit {MAX_DIFFERENCE_ELEMENTS})"
        )
    return SUPPORTED


def upper_pairs(n: int) -> Tuple[np.ndarray, np.ndarray]:
    """Row indices (i, j), i < j, in torch's pdist order."""
    rows, cols = np.triu_indices(n, k=1)
    return rows.astype(np.int32), cols.astype(np.int32)


@register_builder
class DistanceBuilder(NodeBuilder):
    targets = [*_CDISTS, _PDIST]
    keep_whole = [_aten.cdist.default]  # else torch's own decomposition (matmuls beyond 25 rows)
    quant_annotations = dict.fromkeys(
        aten_ops("cdist.default", "_cdist_forward.default", "pdist.default", "_pdist_forward.default"),
        QuantFamily.COMPUTE,
    )

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return first_failure(lambda: check_float_io(node), lambda: _check(node))

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        if _by_matmul(node):
            self._write_output(gb, node, self._cdist_by_matmul(gb, node))
            return
        if _is_cdist(node):
            diff = self._cdist_difference(gb, node)
        else:
            diff = self._pdist_difference(gb, node)
        self._reduce(gb, node, diff, _p(node))

    def _float_input(self, gb: GraphBuilder, node: torch.fx.Node, index: int) -> QnnTensor:
        return dequantized(gb, node, gb.tensor(node.args[index]), f"in{index}")

    def _cdist_difference(self, gb: GraphBuilder, node: torch.fx.Node) -> QnnTensor:
        a, b = self._float_input(gb, node, 0), self._float_input(gb, node, 1)
        batch = list(a.dims[:-2]) or [1]
        (p, m), r = a.dims[-2:], b.dims[-2]
        a4 = self._float(gb, node, "a4", batch + [p, 1, m])
        gb.add_op(node, QnnOpType.Reshape, [a], [a4], suffix="a_rows")
        b4 = self._float(gb, node, "b4", batch + [1, r, m])
        gb.add_op(node, QnnOpType.Reshape, [b], [b4], suffix="b_columns")
        diff = self._float(gb, node, "diff", batch + [p, r, m])
        gb.add_op(node, QnnOpType.ElementWiseSubtract, [a4, b4], [diff], suffix="difference")
        return diff

    def _cdist_by_matmul(self, gb: GraphBuilder, node: torch.fx.Node) -> QnnTensor:
        """sqrt(max(|a|^2 + |b|^2 - 2 a b^T, 0)) [.., P, R] for a [.., P, M], b [.., R, M]."""
        a, b = self._float_input(gb, node, 0), self._float_input(gb, node, 1)
        lead, p, r = list(a.dims[:-2]), a.dims[-2], b.dims[-2]
        norms = []
        for name, x, rows in (("a", a, p), ("b", b, r)):
            square = self._float(gb, node, f"{name}_square", x.dims)
            gb.add_op(node, QnnOpType.ElementWiseMultiply, [x, x], [square], suffix=f"{name}_square")
            norm = self._float(gb, node, f"{name}_norm", lead + [rows, 1])
            params = [uint32_tensor("axes", [len(x.dims) - 1]), bool_scalar("keep_dims", True)]
            gb.add_op(node, QnnOpType.ReduceSum, [square], [norm], params, suffix=f"{name}_norm")
            norms.append(norm)
        b_row = self._float(gb, node, "b_norm_row", lead + [1, r])
        gb.add_op(node, QnnOpType.Reshape, [norms[1]], [b_row], suffix="b_norm_row")
        product = self._float(gb, node, "product", lead + [p, r])
        transposes = [bool_scalar("transpose_in0", False), bool_scalar("transpose_in1", True)]
        gb.add_op(node, QnnOpType.MatMul, [a, b], [product], transposes, suffix="product")
        twice = self._float(gb, node, "twice", lead + [p, r])
        minus_two = gb.static_tensor(f"{node.name}_minus_two", np.array([-2.0], np.float32))
        gb.add_op(node, QnnOpType.ElementWiseMultiply, [product, minus_two], [twice], suffix="twice")
        partial = self._float(gb, node, "partial", lead + [p, r])
        gb.add_op(node, QnnOpType.ElementWiseAdd, [twice, norms[0]], [partial], suffix="add_a")
        squared = self._float(gb, node, "squared", lead + [p, r])
        gb.add_op(node, QnnOpType.ElementWiseAdd, [partial, b_row], [squared], suffix="add_b")
        clamped = self._float(gb, node, "clamped", lead + [p, r])
        gb.add_op(node, QnnOpType.Relu, [squared], [clamped], suffix="clamp")
        root = self._float(gb, node, "root", lead + [p, r])
        gb.add_op(node, QnnOpType.ElementWiseSquareRoot, [clamped], [root], suffix="sqrt")
        return root

    def _pdist_difference(self, gb: GraphBuilder, node: torch.fx.Node) -> QnnTensor:
        x = self._float_input(gb, node, 0)
        n, m = x.dims
        rows, cols = upper_pairs(n)
        picked = []
        for what, indices in (("rows", rows), ("columns", cols)):
            index = gb.static_tensor(f"{node.name}_{what}", indices)
            out = self._float(gb, node, what, [indices.size, m])
            gb.add_op(node, QnnOpType.Gather, [x, index], [out], [int32_scalar("axis", 0)], suffix=f"gather_{what}")
            picked.append(out)
        diff = self._float(gb, node, "diff", [rows.size, m])
        gb.add_op(node, QnnOpType.ElementWiseSubtract, picked, [diff], suffix="difference")
        return diff

    def _reduce(self, gb: GraphBuilder, node: torch.fx.Node, diff: QnnTensor, p: float) -> None:
        """|diff| reduced over its last axis (then the square root for p = 2) into the node's
        output: in float, then a Reshape to the output dims and, in quantized graphs, a Quantize."""
        magnitude = self._float(gb, node, "magnitude", diff.dims)
        if p == 2.0:
            gb.add_op(node, QnnOpType.ElementWiseMultiply, [diff, diff], [magnitude], suffix="square")
        else:
            gb.add_op(node, QnnOpType.ElementWiseAbs, [diff], [magnitude], suffix="abs")
        dims = list(diff.dims[:-1])
        reduced = self._float(gb, node, "reduced", dims)
        params = [uint32_tensor("axes", [len(diff.dims) - 1]), bool_scalar("keep_dims", False)]
        if p == math.inf:
            gb.add_op(node, QnnOpType.ReduceMax, [magnitude], [reduced], params, suffix="reduce")
        else:
            gb.add_op(node, QnnOpType.ReduceSum, [magnitude], [reduced], params, suffix="reduce")
        if p == 2.0:
            root = self._float(gb, node, "root", dims)
            gb.add_op(node, QnnOpType.ElementWiseSquareRoot, [reduced], [root], suffix="sqrt")
            reduced = root
        self._write_output(gb, node, reduced)

    def _write_output(self, gb: GraphBuilder, node: torch.fx.Node, reduced: QnnTensor) -> None:
        """The float result Reshaped to the node's dims and, in quantized graphs, Quantized."""
        out_dims = list(logical_shape(node)) or [1]
        if not is_quantized(node):
            gb.add_op(node, QnnOpType.Reshape, [reduced], [gb.define_output(node, dims=out_dims)], suffix="view_back")
            return
        flat = self._float(gb, node, "float", out_dims)
        gb.add_op(node, QnnOpType.Reshape, [reduced], [flat], suffix="view_back")
        gb.add_op(node, QnnOpType.Quantize, [flat], [gb.define_output(node, dims=out_dims)], suffix="quantize")

    @staticmethod
    def _float(gb: GraphBuilder, node: torch.fx.Node, what: str, dims: List[int]) -> QnnTensor:
        return gb.native_tensor(f"{node.name}_{what}", dims, DataType.FLOAT_32)
