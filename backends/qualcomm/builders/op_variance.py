"""var.correction (torch.var; torch.std is var + sqrt) -> ReduceMean, ElementWiseSubtract,
ElementWiseMultiply, ReduceSum, ElementWiseMultiply by 1 / (N - correction).

QNN has no variance op. In quantized graphs the chain runs in float between a Dequantize of
the input and a Quantize to the node's own encoding (QuantFamily.COMPUTE), which is what the
PT2E reference computes (float var of the dequantized input, then quantized)."""

from __future__ import annotations

from typing import List

import numpy as np
import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.registry import (
    SUPPORTED,
    NodeBuilder,
    QuantFamily,
    SupportResult,
    aten_ops,
    check_float_io,
    first_failure,
    register_builder,
)
from backends.qualcomm.builders.utils import dequantized, is_quantized, normalize_axis
from backends.qualcomm.serialization.qnn_graph import DataType, QnnTensor, bool_scalar, uint32_tensor

_aten = exir_ops.edge.aten


def variance_axes(node: torch.fx.Node) -> List[int]:
    rank = len(logical_shape(node.args[0]))
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(rank))
    dims = [dims] if isinstance(dims, int) else dims
    return sorted({normalize_axis(d, rank) for d in dims})


def correction(node: torch.fx.Node) -> float:
    value = node.kwargs.get("correction")
    return 1.0 if value is None else float(value)


def reduced_count(node: torch.fx.Node) -> int:
    shape = logical_shape(node.args[0])
    return int(np.prod([shape[a] for a in variance_axes(node)], dtype=np.int64))


def _check_args(node: torch.fx.Node) -> SupportResult:
    if len(logical_shape(node.args[0])) == 0:
        return False, "0-d input is not supported"
    if len(logical_shape(node)) == 0:
        return False, "0-d output (every dim reduced, keepdim=False): QNN refuses rank-0 tensors (error 3110)"
    if reduced_count(node) - correction(node) <= 0:
        return False, (
            f"correction={correction(node)} >= the number of reduced elements (inf / nan result): QNN 2.51's "
            "HTP makes a static inf fp16's max 65504 (measured: sum x inf gave finite values, 0 x inf gave 0)"
        )
    return SUPPORTED


@register_builder
class VarianceBuilder(NodeBuilder):
    targets = [_aten.var.correction]
    quant_annotations = dict.fromkeys(
        aten_ops("var.correction", "var.dim", "std.correction", "std.dim"), QuantFamily.COMPUTE
    )

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return first_failure(lambda: check_float_io(node), lambda: _check_args(node))

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x = dequantized(gb, node, gb.tensor(node.args[0]), "in")
        axes = variance_axes(node)
        keep = bool(node.kwargs.get("keepdim", False))
        kept_dims = [1 if d in axes else n for d, n in enumerate(x.dims)]
        mean = self._float(gb, node, "mean", kept_dims)
        gb.add_op(
            node,
            QnnOpType.ReduceMean,
            [x],
            [mean],
            [uint32_tensor("axes", axes), bool_scalar("keep_dims", True)],
            suffix="mean",
        )
        centered = self._float(gb, node, "centered", x.dims)
        gb.add_op(node, QnnOpType.ElementWiseSubtract, [x, mean], [centered], suffix="center")
        squared = self._float(gb, node, "squared", x.dims)
        gb.add_op(node, QnnOpType.ElementWiseMultiply, [centered, centered], [squared], suffix="square")
        out_dims = kept_dims if keep else [n for d, n in enumerate(x.dims) if d not in axes]
        total = self._float(gb, node, "sum", out_dims)
        gb.add_op(
            node,
            QnnOpType.ReduceSum,
            [squared],
            [total],
            [uint32_tensor("axes", axes), bool_scalar("keep_dims", keep)],
            suffix="sum",
        )
        divisor = gb.static_tensor(
            f"{node.name}_inv_count", np.array([1.0 / (reduced_count(node) - correction(node))], dtype=np.float32)
        )
        if not is_quantized(node):
            gb.add_op(node, QnnOpType.ElementWiseMultiply, [total, divisor], [gb.define_output(node, dims=out_dims)])
            return
        var = self._float(gb, node, "float", out_dims)
        gb.add_op(node, QnnOpType.ElementWiseMultiply, [total, divisor], [var], suffix="scale")
        gb.add_op(node, QnnOpType.Quantize, [var], [gb.define_output(node, dims=out_dims)], suffix="quantize")

    @staticmethod
    def _float(gb: GraphBuilder, node: torch.fx.Node, what: str, dims) -> QnnTensor:
        return gb.native_tensor(f"{node.name}_{what}", dims, DataType.FLOAT_32)
