"""QnnQuantizer's transform for annotation: `F.scaled_dot_product_attention` as matmul, softmax and
elementwise ops, so that every tensor inside attention gets its own encoding (an export graph keeps
SDPA as one node, which no annotator could see into).

    scores = (q @ k^T) * scale                    (GQA: k and v heads repeated, enable_gqa=True)
    float attn_mask:  p = softmax(scores + attn_mask)
    bool attn_mask and / or is_causal (keep = mask & tril):
                      p = softmax(scores) * keep;  p = p / (sum(p, -1) + 1 - min(sum(keep, -1), 1))
    out = p @ v

The bool / causal form multiplies the probabilities by the 0 / 1 mask and renormalizes instead of
filling -inf: every intermediate keeps a bounded range (a -inf or -1e9 fill would stretch the
encoding of the masked scores and cost the unmasked ones their precision). It is exact in real
arithmetic: exp(s_j)·keep_j / sum_k exp(s_k)·keep_k. A fully masked row gives 0, as PyTorch does
(its denominator gets 1 added instead of dividing 0 by 0). SDPA with dropout_p > 0 is left alone.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional

import torch
from torch.fx import GraphModule, Node
from torch.fx.experimental.proxy_tensor import make_fx

_SDPA = torch.ops.aten.scaled_dot_product_attention.default
_SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale")


def _sdpa_args(node: Node) -> Dict[str, object]:
    args = dict(zip(_SDPA_ARGS, node.args))
    for name in ("attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"):
        args.setdefault(name, node.kwargs.get(name))
    return args


def _repeat_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """[..., Hkv, S, E] -> [..., heads, S, E], each kv head repeated heads / Hkv times in a row."""
    hkv, s, e = x.shape[-3:]
    lead = x.shape[:-3]
    return x.unsqueeze(-3).expand(*lead, hkv, heads // hkv, s, e).reshape(*lead, heads, s, e)


def _attention_fn(scale: float, heads: Optional[int], causal: Optional[torch.Tensor], mask_kind: str):
    """The decomposed attention as a function of (q, k, v[, mask]) to trace."""

    def attention(q, k, v, *mask):
        if heads is not None:
            k, v = _repeat_heads(k, heads), _repeat_heads(v, heads)
        scores = torch.matmul(q, k.transpose(-2, -1)) * scale
        if mask_kind == "float":
            return torch.matmul(torch.softmax(scores + mask[0], -1), v)
        keep = causal
        if mask_kind == "bool":
            keep = mask[0].to(q.dtype) if keep is None else mask[0].to(q.dtype) * keep
        probs = torch.softmax(scores, -1)
        if keep is None:
            return torch.matmul(probs, v)
        probs = probs * keep
        total = probs.sum(-1, keepdim=True)
        if mask_kind == "bool":  # a row may have no key to attend: 0 / (0 + 1) = 0
            total = total + (1.0 - torch.clamp(keep.sum(-1, keepdim=True), max=1.0))
        return torch.matmul(probs / total, v)

    return attention


def _example(node: Node) -> torch.Tensor:
    val = node.meta["val"]
    return torch.zeros(val.shape, dtype=val.dtype)


def _traced_attention(node: Node, args: Dict[str, object]) -> Optional[GraphModule]:
    q, k = args["query"].meta["val"], args["key"].meta["val"]
    mask = args["attn_mask"]
    if args["dropout_p"] not in (None, 0, 0.0) or (mask is not None and not isinstance(mask, Node)):
        return None
    scale = args["scale"] if args["scale"] is not None else 1.0 / math.sqrt(q.shape[-1])
    heads = q.shape[-3] if args["enable_gqa"] and q.dim() >= 3 and k.shape[-3] != q.shape[-3] else None
    causal = None
    if args["is_causal"]:
        causal = torch.ones(q.shape[-2], k.shape[-2]).tril().to(q.dtype)
    mask_kind = "none" if mask is None else ("bool" if mask.meta["val"].dtype == torch.bool else "float")
    inputs = [_example(args[n]) for n in ("query", "key", "value")] + ([_example(mask)] if mask is not None else [])
    return make_fx(_attention_fn(float(scale), heads, causal, mask_kind))(*inputs)


def _inline(model: GraphModule, node: Node, traced: GraphModule, inputs: List[Node]) -> None:
    env: Dict[Node, Node] = {}
    placeholders = iter(inputs)
    with model.graph.inserting_before(node):
        for sub in traced.graph.nodes:
            if sub.op == "placeholder":
                env[sub] = next(placeholders)
            elif sub.op == "get_attr":
                name = f"{node.name}_{sub.target}"
                model.register_buffer(name, getattr(traced, sub.target).clone())
                env[sub] = model.graph.get_attr(name)
                env[sub].meta["val"] = getattr(model, name)
            elif sub.op == "call_function":
                new = model.graph.node_copy(sub, lambda n: env[n])
                new.meta = {**node.meta, "val": sub.meta.get("val")}
                env[sub] = new
            elif sub.op == "output":
                node.replace_all_uses_with(env[sub.args[0]])
                _views_to_reshapes(env[sub.args[0]])
    model.graph.erase_node(node)


def _views_to_reshapes(output: Node) -> None:
    """Views downstream of the decomposed attention become reshapes. SDPA's own output may be
    laid out [B, L, H, E] (strides of the fused kernels), so export recorded
    `out.transpose(1, 2).reshape(...)` as a view; the decomposition's output is contiguous
    [B, H, L, E], on which that view is impossible (re-tracing would fail)."""
    seen, todo = set(), [output]
    while todo:
        node = todo.pop()
        for user in node.users:
            if user in seen or user.op != "call_function":
                continue
            seen.add(user)
            if user.target == torch.ops.aten.view.default:
                user.target = torch.ops.aten.reshape.default
            todo.append(user)


def decompose_sdpa(model: GraphModule) -> GraphModule:
    """Every scaled_dot_product_attention node of `model` replaced by its decomposition."""
    changed = False
    for node in list(model.graph.nodes):
        if node.op != "call_function" or node.target != _SDPA:
            continue
        args = _sdpa_args(node)
        traced = _traced_attention(node, args)
        if traced is None:
            continue
        inputs = [args["query"], args["key"], args["value"]] + (
            [args["attn_mask"]] if args["attn_mask"] is not None else []
        )
        _inline(model, node, traced, inputs)
        changed = True
    if changed:
        model.graph.eliminate_dead_code()
        model.recompile()
    return model
