"""Helpers shared by builders: axis remapping, operand layout, static scalars."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from backends.qualcomm.builders.graph_builder import (
    GraphBuilder,
    logical_shape,
    moves_only_unit_dims,
    node_layout,
    permute_dims,
)
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.quant_encoding import QuantAttrs, exact_scalar_attrs
from backends.qualcomm.serialization.qnn_graph import DataType, QnnTensor, TensorType, int32_tensor, uint32_tensor
from backends.qualcomm.utils.constants import (
    CHANNEL_LAST_RANKS,
    LAYOUT_CHANNEL_FIRST,
    LAYOUT_CHANNEL_LAST,
    QCOM_CONSTANT,
    QCOM_INPUT_LAYOUT,
    QCOM_QUANT_ATTRS,
    channel_last_perm,
)


def input_layout(node: torch.fx.Node) -> str:
    return node.meta.get(QCOM_INPUT_LAYOUT, LAYOUT_CHANNEL_FIRST)


def normalize_axis(axis: int, rank: int) -> int:
    axis = int(axis)
    if not -max(rank, 1) <= axis < max(rank, 1):
        raise ValueError(f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def stored_axis(axis: int, rank: int, layout: str) -> int:
    """Position in stored dims of logical `axis` (remapped for channel-last tensors)."""
    axis = normalize_axis(axis, rank)
    if layout == LAYOUT_CHANNEL_LAST and rank in CHANNEL_LAST_RANKS:
        return channel_last_perm(rank).index(axis)
    return axis


def is_constant(node: object) -> bool:
    """Placeholder holding a param/buffer/constant (flag set by the partitioner/preprocess)."""
    return isinstance(node, torch.fx.Node) and bool(node.meta.get(QCOM_CONSTANT, False))


def scalar_tensor(
    gb: GraphBuilder,
    name: str,
    value: Union[int, float],
    dtype=np.float32,
    quantized: bool = False,
    like: Optional[QuantAttrs] = None,
) -> QnnTensor:
    """A STATIC scalar; `quantized`: a quantized scalar that holds the value exactly, in the
    data type of `like` (UFIXED_POINT_8 when None)."""
    if quantized:
        q, attrs = exact_scalar_attrs(float(value), like)
        return gb.quantized_static(name, q, attrs)
    return gb.static_tensor(name, np.array(value, dtype=dtype))


def is_quantized(node: torch.fx.Node) -> bool:
    """The node's output carries an encoding (set by the FoldQDQ pass)."""
    return node.meta.get(QCOM_QUANT_ATTRS) is not None


def operand(gb: GraphBuilder, node: torch.fx.Node, arg: object, layout: str, out_rank: int, name: str) -> QnnTensor:
    """A binary-op operand in `layout`: scalars become STATIC scalars; in channel-last,
    lower-rank operands are broadcast to the output rank and permuted so they line up."""
    if not isinstance(arg, torch.fx.Node):
        return scalar_tensor(gb, f"{node.name}_{name}", float(arg))
    shape = logical_shape(arg)
    if node_layout(node) != LAYOUT_CHANNEL_LAST:  # e.g. a rank-4 channel-last input broadcast to rank 5
        layout = LAYOUT_CHANNEL_FIRST
    if layout != LAYOUT_CHANNEL_LAST or out_rank not in CHANNEL_LAST_RANKS or len(shape) == out_rank:
        return gb.tensor(arg, layout if len(shape) == out_rank else LAYOUT_CHANNEL_FIRST)
    perm = channel_last_perm(out_rank)
    shape_n = [1] * (out_rank - len(shape)) + shape
    data = gb.constant_data(arg)
    if data is not None:
        array = data.detach().contiguous().numpy().reshape(shape_n).transpose(perm)
        attrs = arg.meta.get(QCOM_QUANT_ATTRS)
        if attrs is not None and attrs.axis < 0:
            return gb.quantized_static(f"{arg.name}_channel_last", np.ascontiguousarray(array), attrs)
        return gb.static_tensor(f"{arg.name}_channel_last", array)
    source = gb.tensor(arg, LAYOUT_CHANNEL_FIRST)
    stored = permute_dims(shape_n, perm)
    if moves_only_unit_dims(shape_n, perm):
        out = gb.like(source, f"{arg.name}_rank{out_rank}_channel_last", stored)
        gb.add_op(node, QnnOpType.Reshape, [source], [out], suffix=f"{name}_reshape")
        return out
    ranked = gb.like(source, f"{arg.name}_rank{out_rank}", shape_n)
    gb.add_op(node, QnnOpType.Reshape, [source], [ranked], suffix=f"{name}_reshape")
    out = gb.like(source, f"{arg.name}_rank{out_rank}_channel_last", stored)
    gb.add_op(
        node, QnnOpType.Transpose, [ranked], [out], [uint32_tensor("perm", list(perm))], suffix=f"{name}_transpose"
    )
    return out


def int_list(value: Optional[Sequence[int]], length: int, default: int) -> List[int]:
    """Expand an int or short list (torch pooling/conv args) to `length` ints."""
    if value is None or (isinstance(value, (list, tuple)) and len(value) == 0):
        return [default] * length
    if isinstance(value, int):
        return [value] * length
    values = [int(v) for v in value]
    return values * length if len(values) == 1 else values


def one_element_dims(node: torch.fx.Node) -> Optional[List[int]]:
    """[1] for a 0-d node, else None (its dims from meta): QNN refuses rank-0 tensors (op
    validation 3110 'incorrect Rank 0'), so a 0-d result is stored as [1]; the delegate's
    output checks only the element count."""
    return [1] if not logical_shape(node) else None


def dequantized(gb: GraphBuilder, node: torch.fx.Node, tensor: QnnTensor, name: str) -> QnnTensor:
    """`tensor` in FLOAT_32 for a float composition: a Dequantize of a quantized tensor (named
    after `name`), the tensor itself otherwise. QNN 2.51's HTP drops a Quantize -> Dequantize
    pair (the float value passes unrounded, measured on SM8650; a Convert or Reshape between
    them is dropped too), unlike the PT2E reference, so a tensor a Quantize wrote goes through
    ElementWiseMaximum(t, t) first (exact, and QNN keeps it)."""
    if tensor.quant is None:
        return tensor
    if _written_by(gb, tensor) == QnnOpType.Quantize:
        kept = gb.like(tensor, f"{node.name}_{name}_rounded")
        gb.add_op(node, QnnOpType.ElementWiseMaximum, [tensor, tensor], [kept], suffix=f"rounded_{name}")
        tensor = kept
    result = gb.native_tensor(f"{node.name}_{name}_float", tensor.dims)
    gb.add_op(node, QnnOpType.Dequantize, [tensor], [result], suffix=f"dequantize_{name}")
    return result


def _written_by(gb: GraphBuilder, tensor: QnnTensor) -> Optional[str]:
    """QNN op type of the op that writes `tensor` (None for a graph input or a static)."""
    return next((op.type for op in reversed(gb.graph.ops) if tensor.id in op.outputs), None)


def reshape(gb: GraphBuilder, node: torch.fx.Node, source: QnnTensor, dims: Sequence[int], suffix: str) -> QnnTensor:
    out = gb.like(source, f"{node.name}_{suffix}", dims)
    gb.add_op(node, QnnOpType.Reshape, [source], [out], suffix=suffix)
    return out


def slice_axis(
    gb: GraphBuilder, node: torch.fx.Node, x: QnnTensor, axis: int, begin: int, end: int, suffix: str
) -> QnnTensor:
    """x[..., begin:end, ...] along `axis` (a StridedSlice, output `<node>_<suffix>`)."""
    ranges = [[0, d, 1] for d in x.dims]
    ranges[axis] = [begin, end, 1]
    dims = list(x.dims)
    dims[axis] = end - begin
    out = gb.like(x, f"{node.name}_{suffix}", dims)
    gb.add_op(
        node, QnnOpType.StridedSlice, [x], [out], [int32_tensor("ranges", ranges, [len(ranges), 3])], suffix=suffix
    )
    return out


def view_as(
    gb: GraphBuilder, node: torch.fx.Node, x: QnnTensor, dims: Sequence[int], out_dims: Optional[Sequence[int]] = None
) -> Tuple[QnnTensor, QnnTensor, QnnTensor]:
    """(input, output, node output) of an op lowering `node` on a view of x: x as `dims` (a
    Reshape unless x has those dims; named `<node>_view`), the op's output in `out_dims`
    (default: dims; `<node>_view_out`), and the node's own output, into which view_back
    reshapes the op's output."""
    out = gb.define_output(node)
    if list(x.dims) == list(dims):
        return x, out, out
    viewed = reshape(gb, node, x, dims, "view")
    return viewed, gb.like(out, f"{node.name}_view_out", list(out_dims or dims)), out


def view_back(gb: GraphBuilder, node: torch.fx.Node, out_view: QnnTensor, out: QnnTensor) -> None:
    """Reshape the op's output into the node's output (nothing when they are one)."""
    if out_view is not out:
        gb.add_op(node, QnnOpType.Reshape, [out_view], [out], suffix="view_back")


def add_weighted_op(
    gb: GraphBuilder,
    node: torch.fx.Node,
    op_type: str,
    inputs: Sequence[QnnTensor],
    output: QnnTensor,
    params: Sequence = (),
) -> None:
    """A conv / FullyConnected [x, weight, bias] -> output. With float activations and a
    quantized weight (fp16a8w), QNN 2.51's HTP takes FLOAT_16 activations and bias only (FLOAT_32
    ones: op validation error 3110): x is Cast to FLOAT_16, a static bias stored FLOAT_16 (another
    one Cast), and the FLOAT_16 result Cast to `output` (upstream inserts the same casts)."""
    x, weight, bias = inputs
    if x.data_type != DataType.FLOAT_32 or weight.quant is None:
        gb.add_op(node, op_type, list(inputs), [output], list(params))
        return
    x16 = gb.cast(node, x, DataType.FLOAT_16, "fp16_in")
    if bias.type == TensorType.STATIC and bias.data is not None and bias.data_type == DataType.FLOAT_32:
        bias16 = gb.add_tensor(
            f"{bias.name}_fp16", TensorType.STATIC, DataType.FLOAT_16, bias.dims, bias.data.astype(np.float16)
        )
    else:
        bias16 = gb.cast(node, bias, DataType.FLOAT_16, "fp16_bias")
    out16 = gb.native_tensor(f"{output.name}_fp16", output.dims, DataType.FLOAT_16)
    gb.add_op(node, op_type, [x16, weight, bias16], [out16], list(params))
    gb.add_op(node, QnnOpType.Cast, [out16], [output], suffix="fp16_out")
