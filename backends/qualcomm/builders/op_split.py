"""split / split_with_sizes / chunk / unbind (edge: split_with_sizes_copy, split_copy + getitem,
unbind's squeezes) -> one multi-output QNN Split; stack -> a Reshape per input + Concat.

Output 0 is the node's own tensor (getitem 0 aliases it); output i > 0 is the tensor of the
getitem(node, i) user (an unused output gets a tensor of its own: QNN's Split has them all)."""

from __future__ import annotations

import operator
from typing import Dict, List

import numpy as np
import torch

from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape
from backends.qualcomm.builders.op_shape import edge_ops
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.registry import (
    is_float_dtype,
    SUPPORTED,
    NodeBuilder,
    QuantFamily,
    SupportResult,
    aten_ops,
    check_float_io,
    check_static_shapes,
    first_failure,
    node_val,
    register_builder,
    table_quant_annotations,
)
from backends.qualcomm.builders.utils import normalize_axis, reshape
from backends.qualcomm.serialization.qnn_graph import QnnTensor, uint32_scalar, uint32_tensor

_SPLIT_OPS = edge_ops("split_with_sizes_copy.default", "split_copy.Tensor")


def _split_dim(node: torch.fx.Node) -> int:
    rank = len(logical_shape(node.args[0]))
    dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
    return normalize_axis(dim, rank)


def split_sizes(node: torch.fx.Node) -> List[int]:
    """The sizes of the outputs along the split dim (from the output meta)."""
    dim = _split_dim(node)
    return [int(v.shape[dim]) for v in node_val(node)]


def _check_io(node: torch.fx.Node) -> SupportResult:
    source, outputs = node_val(node.args[0]), node_val(node)
    if not isinstance(source, torch.Tensor) or not is_float_dtype(source.dtype) or source.dim() == 0:
        return False, "input must be a float32 tensor of rank >= 1"
    if not isinstance(outputs, (list, tuple)) or not outputs:
        return False, "output has no tensor list meta"
    return SUPPORTED


def _check_sizes(node: torch.fx.Node) -> SupportResult:
    sizes = split_sizes(node)
    if any(s < 1 for s in sizes):
        return False, f"split_sizes {sizes}: an empty output is not supported (QNN split_index must increase)"
    return SUPPORTED


@register_builder
class SplitBuilder(NodeBuilder):
    targets = _SPLIT_OPS
    quant_annotations = table_quant_annotations([QnnOpType.Split])

    def output_count(self, node: torch.fx.Node) -> int:
        """Number of outputs of `node` (getitem indices below it are valid)."""
        val = node_val(node)
        return len(val) if isinstance(val, (list, tuple)) else 1

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return first_failure(
            lambda: _check_io(node), lambda: check_static_shapes(node.args[0]), lambda: _check_sizes(node)
        )

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        x = gb.tensor(node.args[0])
        sizes = split_sizes(node)
        outputs = self._output_tensors(node, gb, x)
        if len(sizes) == 1:
            gb.add_op(node, QnnOpType.Reshape, [x], outputs)
            return
        starts = np.cumsum(sizes[:-1]).astype(np.uint32).tolist()
        gb.add_op(
            node,
            QnnOpType.Split,
            [x],
            outputs,
            [uint32_scalar("axis", _split_dim(node)), uint32_tensor("split_index", starts)],
        )

    @staticmethod
    def _output_tensors(node: torch.fx.Node, gb: GraphBuilder, x: QnnTensor) -> List[QnnTensor]:
        users: Dict[int, torch.fx.Node] = {u.args[1]: u for u in node.users if u.target is operator.getitem}
        outputs = [gb.define_output(node)]
        for i, val in enumerate(node_val(node)[1:], start=1):
            user = users.get(i)
            if user is not None:
                outputs.append(gb.define_output(user))
            else:
                outputs.append(gb.like(outputs[0], f"{node.name}_unused_{i}", [int(d) for d in val.shape]))
        return outputs


# ---- stack -> Reshape (unsqueeze) per input + Concat -------------------------------------------
def _stack_dim(node: torch.fx.Node) -> int:
    rank = len(logical_shape(node))
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    return normalize_axis(dim, rank)


def _check_stack_inputs(node: torch.fx.Node) -> SupportResult:
    if not all(isinstance(t, torch.fx.Node) for t in node.args[0]):
        return False, "stack inputs must be tensors"
    return SUPPORTED


@register_builder
class StackBuilder(NodeBuilder):
    targets = edge_ops("stack.default")
    keep_whole = edge_ops("stack.default")
    quant_annotations = dict.fromkeys(aten_ops("stack.default"), QuantFamily.SHARED)

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        return first_failure(
            lambda: _check_stack_inputs(node), lambda: check_float_io(node), lambda: check_static_shapes(node)
        )

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        dim = _stack_dim(node)
        output = gb.define_output(node)
        parts = []
        for i, source in enumerate(node.args[0]):
            x = gb.tensor(source)
            dims = list(x.dims)
            dims.insert(dim, 1)
            parts.append(reshape(gb, node, x, dims, f"unsqueeze_{i}"))
        if len(parts) == 1:
            gb.add_op(node, QnnOpType.Reshape, parts, [output])
            return
        gb.add_op(node, QnnOpType.Concat, parts, [output], [uint32_scalar("axis", dim)])
