"""scaled_dot_product_attention (float graphs, kept whole) -> MatMul, Multiply, mask, Softmax, MatMul.

    scores = MatMul(q, k, transpose_in1) * scale     (GQA: kv heads Tiled to the query heads)
    float attn_mask: scores + attn_mask
    bool attn_mask:  scores + (keep - 1) * 60000, keep = Cast(mask)   (a large fp16-exact negative:
                     exp() of a masked score is 0); Softmax(...) * keep, so that a fully masked row
                     gives 0 as PyTorch does
    is_causal:       scores + a static [L, S] bias (0 on and below the diagonal, -60000 above)
    out = MatMul(Softmax(scores), v)

Quantized graphs never hold this node: QnnQuantizer decomposes attention before annotation
(quantizer/decompose_sdpa.py)."""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np
import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.registry import (
    SUPPORTED,
    is_float_dtype,
    NodeBuilder,
    register_builder,
    SupportResult,
    tensor_vals,
)
from backends.qualcomm.serialization.qnn_graph import QnnTensor, bool_scalar, float_scalar, uint32_scalar, uint32_tensor

_aten = exir_ops.edge.aten
_SDPA = _aten.scaled_dot_product_attention.default
_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal")
MASKED_BIAS = -60000.0  # exactly representable in fp16; exp(MASKED_BIAS - max) is 0


def sdpa_args(node: torch.fx.Node) -> Dict[str, object]:
    args = dict(zip(_ARGS, node.args))
    defaults = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None, "enable_gqa": False}
    for name, default in defaults.items():
        args.setdefault(name, node.kwargs.get(name, default))
    return args


def _float_tensor(value: object) -> bool:
    vals = tensor_vals(value) if isinstance(value, torch.fx.Node) else []
    return len(vals) == 1 and is_float_dtype(vals[0].dtype)


@register_builder
class ScaledDotProductAttentionBuilder(NodeBuilder):
    targets = [_SDPA]
    keep_whole = [_SDPA]

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        args = sdpa_args(node)
        if not all(_float_tensor(args[n]) for n in ("query", "key", "value")) or not _float_tensor(node):
            return False, "query, key, value and output must be float32"
        if args["dropout_p"] not in (0, 0.0):
            return False, f"dropout_p={args['dropout_p']} is not supported (inference only)"
        if not tensor_vals(node)[0].is_contiguous():
            # Export recorded the fused kernel's [B, L, H, E] strides, and user code after it
            # (`out.transpose(1, 2).reshape(...)`) as a view that ExecuTorch's re-trace of a
            # preserved SDPA (contiguous) cannot redo: such a node is decomposed instead.
            return False, "output strides are not contiguous (decomposed instead)"
        mask = args["attn_mask"]
        if mask is not None and not (
            isinstance(mask, torch.fx.Node) and tensor_vals(mask)[0].dtype in (torch.bool, torch.float32, torch.float16)
        ):
            return False, "attn_mask must be a bool or float32 tensor"
        q, k, v = (logical_shape(args[n]) for n in ("query", "key", "value"))
        if len(q) < 3 or len(k) != len(q) or len(v) != len(q):
            return False, f"query / key / value must have one rank >= 3, got {q}, {k}, {v}"
        if k[-3] != q[-3] and (not args["enable_gqa"] or q[-3] % k[-3]):
            return False, f"{q[-3]} query heads on {k[-3]} key heads need enable_gqa and a whole ratio"
        return SUPPORTED

    def define_ops(self, node: torch.fx.Node, gb: GraphBuilder) -> None:
        args = sdpa_args(node)
        q, k, v = (gb.tensor(args[n]) for n in ("query", "key", "value"))
        heads = q.dims[-3]
        k, v = self._repeat_heads(node, gb, k, heads, "k"), self._repeat_heads(node, gb, v, heads, "v")
        scores_dims = list(q.dims[:-1]) + [k.dims[-2]]
        scores = gb.native_tensor(f"{node.name}_scores", scores_dims)
        gb.add_op(
            node,
            QnnOpType.MatMul,
            [q, k],
            [scores],
            [bool_scalar("transpose_in0", False), bool_scalar("transpose_in1", True)],
            suffix="qk",
        )
        scale = args["scale"] if args["scale"] is not None else 1.0 / float(np.sqrt(q.dims[-1]))
        scaled = gb.native_tensor(f"{node.name}_scaled", scores_dims)
        gb.add_op(
            node,
            QnnOpType.ElementWiseMultiply,
            [scores, gb.static_tensor(f"{node.name}_scale", np.array([scale], np.float32))],
            [scaled],
            suffix="scale",
        )
        bias, keep = self._mask_bias(node, gb, args, q.dims[-2], k.dims[-2])
        if bias is not None:
            masked = gb.native_tensor(f"{node.name}_masked", scores_dims)
            gb.add_op(node, QnnOpType.ElementWiseAdd, [scaled, bias], [masked], suffix="mask")
            scaled = masked
        probs = gb.native_tensor(f"{node.name}_probs", scores_dims)
        gb.add_op(
            node,
            QnnOpType.Softmax,
            [scaled],
            [probs],
            [uint32_scalar("axis", len(scores_dims) - 1), float_scalar("beta", 1.0)],
        )
        if keep is not None:
            kept = gb.native_tensor(f"{node.name}_probs_kept", scores_dims)
            gb.add_op(node, QnnOpType.ElementWiseMultiply, [probs, keep], [kept], suffix="zero_masked_rows")
            probs = kept
        gb.add_op(
            node,
            QnnOpType.MatMul,
            [probs, v],
            [gb.define_output(node)],
            [bool_scalar("transpose_in0", False), bool_scalar("transpose_in1", False)],
            suffix="pv",
        )

    def _repeat_heads(self, node: torch.fx.Node, gb: GraphBuilder, x: QnnTensor, heads: int, which: str) -> QnnTensor:
        """[..., Hkv, S, E] -> [..., heads, S, E]: each kv head repeated heads / Hkv times in a row."""
        hkv = x.dims[-3]
        if hkv == heads:
            return x
        lead, (s, e) = list(x.dims[:-3]), x.dims[-2:]
        split = gb.like(x, f"{node.name}_{which}_heads", lead + [hkv, 1, s, e])
        gb.add_op(node, QnnOpType.Reshape, [x], [split], suffix=f"{which}_split_heads")
        tiled = gb.like(x, f"{node.name}_{which}_tiled", lead + [hkv, heads // hkv, s, e])
        multiples = [1] * len(lead) + [1, heads // hkv, 1, 1]
        gb.add_op(
            node, QnnOpType.Tile, [split], [tiled], [uint32_tensor("multiples", multiples)], suffix=f"{which}_repeat"
        )
        out = gb.like(x, f"{node.name}_{which}_repeated", lead + [heads, s, e])
        gb.add_op(node, QnnOpType.Reshape, [tiled], [out], suffix=f"{which}_merge_heads")
        return out

    def _mask_bias(
        self, node: torch.fx.Node, gb: GraphBuilder, args: Dict[str, object], rows: int, cols: int
    ) -> Tuple[Optional[QnnTensor], Optional[QnnTensor]]:
        """(the additive bias of the mask, the 0 / 1 float mask of a bool mask); None when absent."""
        mask = args["attn_mask"]
        if mask is None:
            if not args["is_causal"]:
                return None, None
            causal = np.where(np.tril(np.ones((rows, cols), bool)), 0.0, MASKED_BIAS).astype(np.float32)
            return gb.static_tensor(f"{node.name}_causal_bias", causal), None
        m = gb.tensor(mask)
        if is_float_dtype(tensor_vals(mask)[0].dtype):
            return m, None
        keep = gb.native_tensor(f"{node.name}_keep", m.dims)
        gb.add_op(node, QnnOpType.Cast, [m], [keep], suffix="mask_to_float")
        shifted = gb.native_tensor(f"{node.name}_keep_minus_one", m.dims)
        gb.add_op(
            node,
            QnnOpType.ElementWiseSubtract,
            [keep, gb.static_tensor(f"{node.name}_one", np.ones([1], np.float32))],
            [shifted],
            suffix="mask_shift",
        )
        bias = gb.native_tensor(f"{node.name}_mask_bias", m.dims)
        gb.add_op(
            node,
            QnnOpType.ElementWiseMultiply,
            [shifted, gb.static_tensor(f"{node.name}_big", np.array([-MASKED_BIAS], np.float32))],
            [bias],
            suffix="mask_scale",
        )
        return bias, keep
