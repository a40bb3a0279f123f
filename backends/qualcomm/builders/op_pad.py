"""constant_pad_nd and pad.default (reflect / replicate) -> QNN Pad (scheme CONSTANT /
MIRROR_REFLECT / EDGE), layout-agnostic (a channel-last tensor is padded channel-last: the pad
amounts are permuted). A zero pad of H/W read only by convolutions is not a Pad: the
FoldPadIntoConv preprocess pass merges it into the conv's pad_amount, so it lowers only with them."""

from __future__ import annotations

from typing import List

import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape, node_layout
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.quant_encoding import is_dequantize, is_quantize
from backends.qualcomm.builders.registry import (
    SUPPORTED,
    LayoutPolicy,
    NodeBuilder,
    QuantFamily,
    SupportResult,
    aten_ops,
    check_float_io,
    register_builder,
)
from backends.qualcomm.serialization.qnn_graph import float_scalar, uint32_scalar, uint32_tensor
from backends.qualcomm.utils.constants import (
    CHANNEL_LAST_RANKS,
    LAYOUT_CHANNEL_LAST,
    QCOM_QUANT_ATTRS,
    channel_last_perm,
)

_aten = exir_ops.edge.aten
_CONV = _aten.convolution.default
_PAD_ND = _aten.constant_pad_nd.default
_PAD = _aten.pad.default
# pad.default's modes QNN's Pad scheme expresses (constant decomposes to constant_pad_nd).
SCHEMES = {"constant": 0, "reflect": 2, "replicate": 3}


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


def pad_mode(node: torch.fx.Node) -> str:
    if _is(node, _PAD):
        return str(node.args[2]) if len(node.args) > 2 else str(node.kwargs.get("mode", "constant"))
    return "constant"


def pad_value(node: torch.fx.Node) -> float:
    index = 3 if _is(node, _PAD) else 2
    value = node.args[index] if len(node.args) > index else node.kwargs.get("value", 0.0)
    return float(value or 0.0)


def _is(node: torch.fx.Node, edge_op) -> bool:
    return node.target is edge_op or node.target is getattr(edge_op, "_op", None)


def pad_amounts(node: torch.fx.Node) -> List[List[int]]:
    """[[before, after]] per logical axis (torch lists the last axis first)."""
    rank = len(logical_shape(node.args[0]))
    flat = [int(p) for p in node.args[1]]
    pairs = [[0, 0] for _ in range(rank)]
    for i in range(len(flat) // 2):
        pairs[rank - 1 - i] = flat[2 * i : 2 * i + 2]
    return pairs


def standalone_pad(node: torch.fx.Node) -> SupportResult:
    """A Pad op: non-negative amounts, a mirror no longer than its axis allows, in quantized
    graphs a constant of 0 (exactly representable: an affine encoding's range holds 0)."""
    mode = pad_mode(node)
    if mode not in SCHEMES:
        return False, f"pad mode '{mode}' is not supported (QNN's Pad: constant, reflect, replicate)"
    if mode == "constant" and _is(node, _PAD):
        return False, "constant pad.default decomposes to constant_pad_nd"
    shape = logical_shape(node.args[0])
    pads = pad_amounts(node)
    if any(p < 0 for pair in pads for p in pair):
        return False, f"negative padding {list(node.args[1])} (cropping) is not supported"
    limit = {"reflect": -1, "replicate": 0}.get(mode)
    if limit is not None and any(max(pair) > n + limit or n == 0 for pair, n in zip(pads, shape) if max(pair)):
        return False, f"{mode} padding {list(node.args[1])} does not fit input {shape}"
    if mode != "constant" and len(shape) > 4:
        return False, (
            f"{mode} padding of a rank-{len(shape)} tensor: QNN 2.51's Pad refuses rank 5 in "
            "MIRROR_REFLECT / EDGE (3110 'incorrect Rank 5')"
        )
    if mode == "replicate" and not _reads_quantized(node):
        return False, (
            "replicate padding in a float graph: QNN 2.51's Pad EDGE returns garbage in fp16 on HTP "
            "(|qnn - torch| up to 131007 measured; quantized EDGE is correct)"
        )
    if pad_value(node) != 0.0 and _reads_quantized(node):
        return False, (
            f"pad value {pad_value(node)} in a quantized graph: only 0 (exactly representable "
            "in the shared encoding) is supported"
        )
    return SUPPORTED


def _reads_quantized(node: torch.fx.Node) -> bool:
    source = node.args[0]
    return is_dequantize(source) or QCOM_QUANT_ATTRS in source.meta or QCOM_QUANT_ATTRS in node.meta


@register_builder
class PadBuilder(NodeBuilder):
    targets = [_PAD_ND, _PAD]
    keep_whole = [_PAD]
    quant_annotations = dict.fromkeys(aten_ops("constant_pad_nd.default", "pad.default"), QuantFamily.SHARED)
    layout_policy = LayoutPolicy.AGNOSTIC
    channel_last_any_rank = True

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        ok, reason = check_float_io(node)
        if not ok:
            return ok, reason
        if _is(node, _PAD_ND) and foldable_pad(node)[0]:
            return SUPPORTED
        return standalone_pad(node)

    def lowered_only_with(self, node: torch.fx.Node) -> List[torch.fx.Node]:
        """A zero pad read only by convolutions: they (it is folded into their pad_amount)."""
        if _is(node, _PAD_ND) and foldable_pad(node)[0]:
            return [conv for conv, _ in consumers(node)]
        return []

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        layout = node_layout(node)
        x = gb.tensor(node.args[0], layout)
        pads = pad_amounts(node)
        if layout == LAYOUT_CHANNEL_LAST and len(pads) in CHANNEL_LAST_RANKS:
            pads = [pads[axis] for axis in channel_last_perm(len(pads))]
        mode = pad_mode(node)
        params = [uint32_scalar("scheme", SCHEMES[mode]), uint32_tensor("pad_amount", pads, [len(pads), 2])]
        if mode == "constant":
            params.append(float_scalar("pad_constant_value", pad_value(node)))
        gb.add_op(node, QnnOpType.Pad, [x], [gb.define_output(node)], params)
