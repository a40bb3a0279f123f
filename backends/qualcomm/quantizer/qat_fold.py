"""Fold the QAT conv -> batch norm pattern for LPBQ weights.

torchao's convert_pt2e folds QAT conv-bn only for per-tensor / per-channel weights. With
LPBQ the fused QAT graph keeps conv(x, fq(w * s)) / s + b -> batch_norm, where
s = gamma / sqrt(var + eps). In eval the tail equals y + (b - mean) * s + beta, so the
conv takes that bias and the div / add / batch_norm nodes go away."""

from __future__ import annotations

from typing import Optional

import torch
from torch.fx import GraphModule, Node
from torchao.quantization.pt2e.utils import create_getattr_from_value

_aten = torch.ops.aten
_BATCH_NORMS = (_aten.batch_norm.default, _aten._native_batch_norm_legit_no_training.default)


def _single_user(node: Node, target: object) -> Optional[Node]:
    users = list(node.users)
    return users[0] if len(users) == 1 and users[0].target == target else None


def _attr(model: GraphModule, node: object) -> Optional[torch.Tensor]:
    if isinstance(node, Node) and node.op == "get_attr":
        value = model
        for part in str(node.target).split("."):
            value = getattr(value, part)
        return value.detach()
    return None


def fold_qat_conv_bn(model: GraphModule, conv: Node) -> bool:
    """Rewrite conv -> div -> add -> batch_norm after `conv`; False when it does not match."""
    div = _single_user(conv, _aten.div.Tensor)
    add = _single_user(div, _aten.add.Tensor) if div is not None else None
    users = list(add.users) if add is not None else []
    if len(users) != 1 or users[0].target not in _BATCH_NORMS:
        return False
    bn = users[0]
    gamma, beta, mean, var = (_attr(model, a) for a in bn.args[1:5])
    conv_bias = _attr(model, add.args[1].args[0]) if isinstance(add.args[1], Node) else None
    if any(t is None for t in (gamma, beta, mean, var)):
        return False
    eps = float(bn.args[7]) if len(bn.args) > 7 else 1e-5
    scale = gamma / torch.sqrt(var + eps)
    bias = ((conv_bias if conv_bias is not None else torch.zeros_like(mean)) - mean) * scale + beta
    args = list(conv.args) + [None] * (3 - len(conv.args))
    observer = args[2]
    first_use = observer if isinstance(observer, Node) and observer.op == "call_module" else conv
    with model.graph.inserting_before(first_use):
        bias_node = create_getattr_from_value(model, model.graph, "_qat_folded_bias", bias.float())
    if isinstance(observer, Node) and observer.op == "call_module":
        # the conv's bias is observed (LPBQ: int32, scale input x channel scale): observe the folded one
        observer.args = (bias_node,) + tuple(observer.args[1:])
    else:
        args[2] = bias_node
        conv.args = tuple(args)
    bn.replace_all_uses_with(conv)
    for node in (bn, add, div):
        model.graph.erase_node(node)
    model.graph.eliminate_dead_code()
    model.recompile()
    return True
