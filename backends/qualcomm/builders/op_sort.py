"""sort -> TopK with k = the axis size (indices INT_32 + Cast to INT_64). QNN's TopK sorts the
last axis: another axis is moved last by a Transpose and the values and indices moved back.

Quantized graphs (the sort reads a per-tensor uint8 / uint16 tensor through its Dequantize):
TopK sorts exact INT_32 keys that fold the index in, key = code * n + (n - 1 - i) (descending) or
(n - 1 - i) - code * n (ascending), so equal codes keep the lower index first on both engines
(PyTorch's stable order; stable=True is accepted); the values are the input codes gathered by
those indices (GatherElements), dequantized last. QNN 2.51's HTP TopK puts the higher index
first among equal values (UFIXED_POINT_8 / 16, INT_32 and FLOAT_32 inputs alike), and
quantizing makes ties common: 8a8w sort indices were 86-88% equal to the QDQ reference on QNN;
its float path (Dequantize -> TopK) also rounded the values to float16 (0.4% equal, 1 step).

Float graphs: values FLOAT_32, descending=True is TopK itself; ascending sorts -x descending and
negates the values back. Equal values: the host engine keeps the lower index first, QNN 2.51's
HTP the higher one - both valid for stable=False (sort.default), so stable=True is rejected.
NaN sorts first in both directions (PyTorch puts it last when ascending)."""

from __future__ import annotations

import operator
from typing import List, Optional, Tuple

import numpy as np
import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape
from backends.qualcomm.builders.op_index_put import permute
from backends.qualcomm.builders.op_lookup import code_index
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.quant_encoding import is_dequantize
from backends.qualcomm.builders.registry import (
    is_float_dtype,
    SUPPORTED,
    NodeBuilder,
    SupportResult,
    first_failure,
    node_val,
    register_builder,
)
from backends.qualcomm.builders.utils import normalize_axis
from backends.qualcomm.serialization.qnn_graph import DataType, QnnTensor, uint32_scalar, uint32_tensor

_aten = exir_ops.edge.aten
SORT_OPS = [_aten.sort.default] + ([_aten.sort.stable] if hasattr(_aten.sort, "stable") else [])


def sort_args(node: torch.fx.Node) -> Tuple[int, bool]:
    """(dim, descending): sort.default(x, dim=-1, descending=False); sort.stable takes keywords."""
    args = list(node.args[1:]) if node.target is _aten.sort.default else []
    dim = args[0] if len(args) > 0 else node.kwargs.get("dim", -1)
    return int(dim), bool(args[1] if len(args) > 1 else node.kwargs.get("descending", False))


def _check_input(node: torch.fx.Node) -> SupportResult:
    val = node_val(node.args[0])
    if not isinstance(val, torch.Tensor) or not is_float_dtype(val.dtype) or val.dim() == 0:
        return False, "input must be a float32 tensor of rank >= 1"
    if val.shape[-1] == 0:
        return False, "empty sort axis"
    return SUPPORTED


def quantized_source(node: torch.fx.Node) -> Optional[torch.fx.Node]:
    """The uint8 / uint16 tensor a sort reads through its per-tensor Dequantize (quantized
    graphs; the Dequantize's own args give the range, before and after FoldQDQ) when its keys
    code * n + index fit INT_32, else None (the float path)."""
    source = node.args[0]
    if not is_dequantize(source) or "per_tensor" not in str(source.target):
        return None
    args = list(source.args) + [None] * 6
    qmin, qmax = args[3], args[4]
    if not isinstance(source.args[0], torch.fx.Node) or not isinstance(qmin, int) or not isinstance(qmax, int):
        return None
    if qmin < 0 or not 0 < qmax <= 65535:
        return None
    shape = logical_shape(node.args[0])
    n = int(shape[normalize_axis(sort_args(node)[0], len(shape))])
    return source.args[0] if (qmax + 256) * n < 2**31 else None


def _check_stable(node: torch.fx.Node) -> SupportResult:
    if node.kwargs.get("stable") and quantized_source(node) is None:
        return False, (
            "stable=True: QNN's TopK orders equal values by the higher index first "
            "(measured on QNN 2.51), not PyTorch's stable order"
        )
    return SUPPORTED


def axis_to_last(node: torch.fx.Node) -> Optional[List[int]]:
    """The permutation moving the sort axis last (_moved_back inverts it), or None when the axis is
    already last."""
    rank = len(logical_shape(node.args[0]))
    axis = normalize_axis(sort_args(node)[0], rank)
    if axis == rank - 1:
        return None
    return [d for d in range(rank) if d != axis] + [axis]


def _moved_back(perm: List[int]) -> List[int]:
    return [perm.index(d) for d in range(len(perm))]


def _negated(gb: GraphBuilder, node: torch.fx.Node, x: QnnTensor, what: str) -> QnnTensor:
    out = gb.native_tensor(f"{node.name}_{what}", x.dims, DataType.FLOAT_32)
    gb.add_op(node, QnnOpType.ElementWiseNeg, [x], [out], suffix=what)
    return out


def _sort_codes(
    gb: GraphBuilder, node: torch.fx.Node, q: QnnTensor, indices: QnnTensor, k, values_out: QnnTensor
) -> None:
    """Stable sort of the codes of q (module docstring): TopK of the INT_32 keys gives
    `indices`; `values_out` is q gathered by them, dequantized."""
    n = int(q.dims[-1])
    codes, _pad = code_index(gb, node, q, "_sort")
    int32 = lambda label: gb.native_tensor(f"{node.name}_{label}", q.dims, DataType.INT_32)  # noqa: E731
    scaled = int32("codes_scaled")
    gb.add_op(
        node,
        QnnOpType.ElementWiseMultiply,
        [codes, gb.static_tensor(f"{node.name}_n", np.array([n], np.int32))],
        [scaled],
        suffix="codes_scaled",
    )
    ramp = gb.static_tensor(f"{node.name}_ramp", (n - 1 - np.arange(n)).astype(np.int32))
    keys = int32("keys")
    if sort_args(node)[1]:
        gb.add_op(node, QnnOpType.ElementWiseAdd, [scaled, ramp], [keys], suffix="keys")
    else:
        gb.add_op(node, QnnOpType.ElementWiseSubtract, [ramp, scaled], [keys], suffix="keys")
    gb.add_op(node, QnnOpType.TopK, [keys], [int32("sorted_keys"), indices], [k])
    values = gb.like(q, f"{node.name}_codes_sorted")
    gb.add_op(
        node,
        QnnOpType.GatherElements,
        [q, indices],
        [values],
        [uint32_scalar("axis", len(q.dims) - 1)],
        suffix="values",
    )
    gb.add_op(node, QnnOpType.Dequantize, [values], [values_out], suffix="dequantize")


@register_builder
class SortBuilder(NodeBuilder):
    targets = SORT_OPS
    num_outputs = 2

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return first_failure(lambda: _check_input(node), lambda: _check_stable(node))

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        perm = axis_to_last(node)
        x = gb.tensor(node.args[0])
        source = quantized_source(node)
        q = gb.tensor(source) if source is not None else None
        if q is not None and q.data_type not in (DataType.UFIXED_POINT_8, DataType.UFIXED_POINT_16):
            q = None
        if perm is not None:
            x = permute(gb, node, x, perm, "axis_last")
            q = permute(gb, node, q, perm, "codes_axis_last") if q is not None else None
        k = uint32_scalar("k", int(x.dims[-1]))
        indices = gb.native_tensor(f"{node.name}_indices_int32", x.dims, DataType.INT_32)
        out = gb.define_output(node, dtype=torch.float32)
        values = out if perm is None else gb.native_tensor(f"{node.name}_sorted", x.dims, DataType.FLOAT_32)
        if q is not None:
            _sort_codes(gb, node, q, indices, k, values)
        elif sort_args(node)[1]:
            gb.add_op(node, QnnOpType.TopK, [x], [values, indices], [k])
        else:
            top = gb.native_tensor(f"{node.name}_negated_sorted", x.dims, DataType.FLOAT_32)
            gb.add_op(node, QnnOpType.TopK, [_negated(gb, node, x, "negated")], [top, indices], [k])
            gb.add_op(node, QnnOpType.ElementWiseNeg, [top], [values], suffix="values")
        if perm is not None:
            gb.add_op(
                node, QnnOpType.Transpose, [values], [out], [uint32_tensor("perm", _moved_back(perm))], suffix="back"
            )
        users = [u for u in node.users if u.target is operator.getitem and u.args[1] == 1]
        if users:
            indices64 = gb.native_tensor(f"{node.name}_indices", x.dims, DataType.INT_64)
            gb.add_op(node, QnnOpType.Cast, [indices], [indices64], suffix="indices")
            if perm is not None:
                indices64 = permute(gb, node, indices64, _moved_back(perm), "indices_back")
            for user in users:
                gb.bind(user, indices64)
