"""prod.dim_int (keepdim either way) / prod.default (every element, 0-d output) -> a tree of
ElementWiseMultiply over StridedSlice halves.

QNN 2.51's HTP has no ReduceProd (op validation: 3110 'OpValidator not found'). Each step
multiplies the first half of the reduced axis by the second half (log2(n) steps); an odd
length leaves its last element aside, and the leftovers are multiplied into the final
length-1 result. Zeros give 0, NaN / inf propagate as in PyTorch (the order of the products
differs from PyTorch's, so float results may differ in the last bit). prod.default reshapes
the input to [numel] first; its 0-d output is stored as [1] (QNN refuses rank 0: its Reshape to
[] fails op validation with 3110 'incorrect Rank 0').

float32 only (integer prod, which PyTorch computes in int64, stays on the CPU). Quantized
graphs: the output gets its own encoding (QuantFamily.COMPUTE); the products run in float
between a Dequantize of the input and a Quantize to the node's encoding, which is what the
PT2E reference computes (a product of requantized partial products would not be)."""

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
    check_static_shapes,
    first_failure,
    register_builder,
)
from backends.qualcomm.builders.utils import (
    dequantized,
    is_quantized,
    normalize_axis,
    one_element_dims,
    reshape,
    slice_axis,
)
from backends.qualcomm.serialization.qnn_graph import QnnTensor

_aten = exir_ops.edge.aten
PROD_OPS = (_aten.prod.dim_int, _aten.prod.default)


def _prod_axis(node: torch.fx.Node) -> int:
    """The reduced axis of prod.dim_int; 0 for prod.default (of the flattened input)."""
    if node.target == _aten.prod.default:
        return 0
    return normalize_axis(int(node.args[1]), max(len(logical_shape(node.args[0])), 1))


def _check_prod(node: torch.fx.Node) -> SupportResult:
    if node.kwargs.get("dtype") not in (None, torch.float32):
        return False, f"dtype={node.kwargs['dtype']} is not supported (float32 only)"
    shape = logical_shape(node.args[0])
    if not shape:
        return False, "0-d input is not supported (QNN refuses rank-0 tensors)"
    axis = _prod_axis(node)
    length = int(np.prod(shape)) if node.target == _aten.prod.default else shape[axis]
    if length == 0:
        return False, "prod over an empty axis (the result 1 is a constant) is not supported"
    return SUPPORTED


def _multiply(gb: GraphBuilder, node: torch.fx.Node, a: QnnTensor, b: QnnTensor, suffix: str) -> QnnTensor:
    out = gb.like(a, f"{node.name}_{suffix}")
    gb.add_op(node, QnnOpType.ElementWiseMultiply, [a, b], [out], suffix=suffix)
    return out


def product_tree(gb: GraphBuilder, node: torch.fx.Node, x: QnnTensor, axis: int) -> QnnTensor:
    """The product of `x` along `axis` (kept, length 1): halves multiplied pairwise, odd
    leftovers multiplied in at the end."""
    leftovers: List[QnnTensor] = []
    step = 0
    while x.dims[axis] > 1:
        n, half = x.dims[axis], x.dims[axis] // 2
        if n % 2:
            leftovers.append(slice_axis(gb, node, x, axis, n - 1, n, f"rest{step}"))
        low = slice_axis(gb, node, x, axis, 0, half, f"low{step}")
        high = slice_axis(gb, node, x, axis, half, 2 * half, f"high{step}")
        x = _multiply(gb, node, low, high, f"mul{step}")
        step += 1
    for k, rest in enumerate(leftovers):
        x = _multiply(gb, node, x, rest, f"mul_rest{k}")
    return x


def _float_input(gb: GraphBuilder, node: torch.fx.Node) -> QnnTensor:
    """The input, Dequantized to FLOAT_32 when quantized."""
    return dequantized(gb, node, gb.tensor(node.args[0]), "in")


@register_builder
class ProdBuilder(NodeBuilder):
    targets = list(PROD_OPS)
    quant_annotations = dict.fromkeys(aten_ops("prod.dim_int", "prod.default"), QuantFamily.COMPUTE)

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return first_failure(lambda: check_float_io(node), lambda: check_static_shapes(node), lambda: _check_prod(node))

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x = _float_input(gb, node)
        axis = _prod_axis(node)
        if node.target == _aten.prod.default and len(x.dims) != 1:
            x = reshape(gb, node, x, [int(np.prod(x.dims))], "flat")
        product = product_tree(gb, node, x, axis)
        out = gb.define_output(node, dims=one_element_dims(node))
        if is_quantized(node):  # Quantize to the output's encoding, then into its shape
            quantized = (
                out if list(product.dims) == list(out.dims) else gb.like(out, f"{node.name}_quantized", product.dims)
            )
            gb.add_op(node, QnnOpType.Quantize, [product], [quantized], suffix="quantize")
            if quantized is out:
                return
            product = quantized
        gb.add_op(node, QnnOpType.Reshape, [product], [out], suffix="out")
