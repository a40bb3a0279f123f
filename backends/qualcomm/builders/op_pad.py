"""constant_pad_nd: supported only as zero padding of H/W that feeds convolutions; the
FoldPadIntoConv preprocess pass merges it into the conv's pad_amount (no QNN Pad op)."""
from __future__ import annotations

from typing import List

import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape
from backends.qualcomm.builders.registry import (
    NodeBuilder, QuantFamily, SUPPORTED, SupportResult, aten_ops, check_float_io, register_builder,
)
from backends.qualcomm.builders.quant_encoding import is_dequantize, is_quantize
from backends.qualcomm.utils.errors import QnnLoweringError

_aten = exir_ops.edge.aten
_CONV = _aten.convolution.default


def foldable_pad(node: torch.fx.Node) -> SupportResult:
    """Zero, non-negative padding of the last two dims of a rank-4 tensor read only by convs."""
    pad = list(node.args[1])
    value = node.args[2] if len(node.args) > 2 else node.kwargs.get("value", 0.0)
    if len(logical_shape(node.args[0])) != 4 or len(pad) > 4:
        return False, "only H/W padding of a rank-4 tensor is supported"
    if value != 0 or any(int(p) < 0 for p in pad):
        return False, "only non-negative zero padding is supported"
    for user, source in consumers(node):
        if user.target not in (_CONV,) or user.args[0] is not source or user.args[6]:
            return False, f"pad is used by '{user.name}', not as the input of a convolution"
    return SUPPORTED


def consumers(node: torch.fx.Node):
    """(consumer, the node it reads) pairs, looking through quantize -> dequantize pairs
    (a quantized pad shares its input's encoding, so FoldQDQ removes them) and through a lone
    dequantize (what FoldQDQ leaves before a convolution that computes in float)."""
    for user in node.users:
        if is_quantize(user):
            for dq in user.users:
                yield from ((c, dq) for c in dq.users) if is_dequantize(dq) else [(dq, user)]
        elif is_dequantize(user):
            yield from ((c, user) for c in user.users)
        else:
            yield user, node


@register_builder
class ConstantPadBuilder(NodeBuilder):
    targets = [_aten.constant_pad_nd.default]
    quant_annotations = dict.fromkeys(aten_ops("constant_pad_nd.default", "pad.default"),
                                      QuantFamily.SHARED)

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        ok, reason = check_float_io(node)
        return foldable_pad(node) if ok else (ok, reason)

    def lowered_only_with(self, node: torch.fx.Node) -> List[torch.fx.Node]:
        """The convolutions it is folded into (there is no QNN Pad op in the payload)."""
        return [conv for conv, _ in consumers(node)]

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        raise QnnLoweringError("zero padding should have been folded into the following convolution "
                               "(the partitioner only delegates a pad together with its convolutions)", node)
