"""Trailing output rows of a transposed conv that QNN 2.51's TransposeConv leaves unset (see
op_conv.rows_qnn_leaves_unset): no kernel tap reaches them, so they hold the bias alone, and the
builder appends them to what the TransposeConv writes as constant rows with one Concat per
spatial axis (exact in fp16; quantized, the bias quantized to the output's encoding as the QDQ
reference quantizes the conv's output there)."""

from __future__ import annotations

from typing import List

import numpy as np
import torch

from backends.qualcomm.builders.graph_builder import GraphBuilder
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.serialization.qnn_graph import QnnTensor, uint32_scalar
from backends.qualcomm.utils.constants import QCOM_QUANT_ATTRS


def bias_values(bias: QnnTensor) -> np.ndarray:
    """Real values [Cout] of a STATIC bias tensor (quantized: (code + offset) * scale, per
    channel or per tensor)."""
    if bias.data is None:
        raise ValueError(f"bias '{bias.name}' is not a constant")
    data = np.asarray(bias.data, np.float64).reshape(-1)
    q = bias.quant
    if q is None:
        return data
    scales = np.asarray(q.scales if q.scales is not None else [q.scale], np.float64)
    offsets = np.asarray(q.offsets if q.offsets is not None else [q.offset], np.float64)
    return (data + offsets) * scales


def _row_block(
    gb: GraphBuilder, node: torch.fx.Node, values: np.ndarray, dims: List[int], like: QnnTensor, name: str
) -> QnnTensor:
    """A STATIC block of `dims` (channel last) holding `values` [C] in every position, in the
    data type / encoding of `like` (the conv's output)."""
    block = np.broadcast_to(values.astype(np.float32), dims)
    attrs = node.meta.get(QCOM_QUANT_ATTRS)
    if like.quant is None or attrs is None:
        return gb.static_tensor(f"{node.name}_{name}", np.ascontiguousarray(block))
    codes = torch.ops.quantized_decomposed.quantize_per_tensor(
        torch.from_numpy(np.ascontiguousarray(block)),
        float(attrs.scale),
        int(attrs.zero_point),
        attrs.qmin,
        attrs.qmax,
        attrs.dtype,
    )
    return gb.quantized_static(f"{node.name}_{name}", codes.to(torch.int64).numpy(), attrs)


def append_bias_rows(
    gb: GraphBuilder, node: torch.fx.Node, written: QnnTensor, bias: QnnTensor, unset: List[int], target: QnnTensor
) -> None:
    """target [N, spatial.., C] = `written` (the rows the TransposeConv wrote) with `unset[i]`
    bias rows appended along spatial axis i, one Concat per axis (the last one into target)."""
    values = bias_values(bias)
    current = written
    axes = [i for i, rows in enumerate(unset) if rows]
    for i in axes:
        dim = 1 + i
        block_dims = list(current.dims)
        block_dims[dim] = unset[i]
        block = _row_block(gb, node, values, block_dims, target, f"bias_rows{i}")
        dims = list(current.dims)
        dims[dim] += unset[i]
        nxt = target if i == axes[-1] else gb.like(target, f"{node.name}_rows{i}", dims)
        gb.add_op(node, QnnOpType.Concat, [current, block], [nxt], [uint32_scalar("axis", dim)], suffix=f"bias_rows{i}")
        current = nxt
