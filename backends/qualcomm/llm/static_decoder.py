"""A Hugging Face decoder (Llama / Qwen2 / Qwen3) as a static-KV-cache module for QNN.

`StaticDecoder(hf_model, context_len, ar_len)` reuses the HF model's own submodules (embedding,
q / k / v / o projections with their biases, Qwen3's q_norm / k_norm, RMSNorms, MLPs, the output
head, tied or not): the weights are the ones given, no copy and no conversion. What it replaces is
the attention's cache handling and the causal mask, so that one forward has static shapes:

    forward(tokens, positions, mask, *caches) -> (logits, *new_k, *new_v)

    tokens     int32 [1, N]                  token ids of the N positions of this call
    positions  int32 [1, N]                  their absolute positions (indexes the rotary tables)
    mask       float [1, N, C]               additive: 0 = attend, MASK_VALUE = do not
    caches     L past-K then L past-V tensors:
               K float [1, kv_heads, head_dim, C - N]   (stored transposed: keys along the last axis)
               V float [1, kv_heads, C - N, head_dim]
    logits     float [1, N, vocab]
    new_k      L tensors [1, kv_heads, head_dim, N]     (the N new keys, same layout as the cache)
    new_v      L tensors [1, kv_heads, N, head_dim]

C is the context length (the number of positions a sequence can have), N the number of tokens per
call (AR length: 32 for prefill, 1 for decode). Each call attends over C columns: the C - N cache
slots then its own N new entries (`cat(past, new)`). Slot s of the cache holds the key / value of
position s; the runner writes a call's new entries at their positions (only they move: the "smart
mask" of Qualcomm's flows) and masks the slots not written yet. K is stored transposed so that
`q @ K` needs no transpose of the cache in the graph and new keys are appended along the last axis.
The rotary cos / sin tables (HF's rotary module, so any HF rope scaling; `rotate_half` convention)
are constants of the graph indexed by `positions`: the runner only passes integers.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import List, Sequence, Tuple

import torch
from torch import nn

# Additive mask value of a position a query may not see. Not -inf: a quantized mask cannot hold it
# (and -255 already gives exp(-255) = 0 in float16 and float32 softmax).
MASK_VALUE = -255.0

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3")


@dataclass(frozen=True)
class DecoderShape:
    """The shape facts a runner needs (also stored in the .pte as constant methods)."""

    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    hidden: int
    vocab_size: int
    context_len: int
    ar_len: int

    def cache_shapes(self, n_tokens: int) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
        """(K shape, V shape) of one layer's past cache for a call of n_tokens."""
        past = self.context_len - n_tokens
        return (1, self.n_kv_heads, self.head_dim, past), (1, self.n_kv_heads, past, self.head_dim)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class StaticAttention(nn.Module):
    def __init__(self, attn: nn.Module, shape: DecoderShape):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj
        self.q_norm = getattr(attn, "q_norm", None)  # Qwen3: RMSNorm over head_dim
        self.k_norm = getattr(attn, "k_norm", None)
        self.n_heads, self.n_kv_heads, self.head_dim = shape.n_heads, shape.n_kv_heads, shape.head_dim
        self.scaling = float(getattr(attn, "scaling", self.head_dim**-0.5))

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor,
        k_past: torch.Tensor,
        v_past: torch.Tensor,
    ):
        n = x.shape[1]
        q = self.q_proj(x).view(1, n, self.n_heads, self.head_dim)
        k = self.k_proj(x).view(1, n, self.n_kv_heads, self.head_dim)
        v = self.v_proj(x).view(1, n, self.n_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [1, heads, N, D]
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        new_k = k.transpose(2, 3)  # [1, kv, D, N]
        keys = torch.cat([k_past, new_k], dim=-1)  # [1, kv, D, C]
        values = torch.cat([v_past, v], dim=2)  # [1, kv, C, D]
        # GQA without repeating the cache: the query heads of one KV head are stacked along rows
        # ([1, heads, N, D] -> [1, kv, rep * N, D]); the mask was stacked the same way.
        rep = self.n_heads // self.n_kv_heads
        q = q.reshape(1, self.n_kv_heads, rep * n, self.head_dim)
        scores = torch.matmul(q, keys) * self.scaling + mask  # [1, kv, rep * N, C]
        probs = torch.softmax(scores, dim=-1)
        out = torch.matmul(probs, values)  # [1, kv, rep * N, D]
        out = out.reshape(1, self.n_heads, n, self.head_dim).transpose(1, 2).reshape(1, n, -1)
        return self.o_proj(out), new_k, v


# Per-head projections of each HF projection, made once per weight (prefill and decode share them).
_HEAD_SPLITS: "weakref.WeakKeyDictionary[nn.Module, nn.ModuleList]" = weakref.WeakKeyDictionary()


def per_head_linears(proj: nn.Linear, n_heads: int, head_dim: int) -> nn.ModuleList:
    """`proj` ([n_heads * head_dim, in] weight) as n_heads Linears of head_dim outputs each: head
    h's rows h * head_dim .. (h + 1) * head_dim - 1 of the weight (and bias), copied once."""
    if proj in _HEAD_SPLITS:
        return _HEAD_SPLITS[proj]
    if not isinstance(proj, nn.Linear) or proj.out_features != n_heads * head_dim:
        raise ValueError(f"split_heads: expected a Linear with {n_heads} x {head_dim} outputs, got {proj}")
    heads = nn.ModuleList()
    for h in range(n_heads):
        rows = slice(h * head_dim, (h + 1) * head_dim)
        linear = nn.Linear(proj.in_features, head_dim, bias=proj.bias is not None)
        with torch.no_grad():
            linear.weight.copy_(proj.weight[rows])
            if proj.bias is not None:
                linear.bias.copy_(proj.bias[rows])
        heads.append(linear.requires_grad_(False))
    _HEAD_SPLITS[proj] = heads
    return heads


class SplitHeadAttention(nn.Module):
    """StaticAttention with one attention per query head (`split_heads=True`, what Qualcomm's
    flows call single-head attention): q / k / v projected per head by their own Linears
    (`per_head_linears`), rotary embedding, scores, softmax and the value product on [1, N, D] /
    [1, N, C] tensors, no 4-D head reshapes or transposes; the heads' outputs concatenated before
    o_proj. The cache inputs and new-entry outputs keep StaticAttention's layout (the runners do
    not change): the new keys / values of the KV heads are stacked into it, and each head reads
    its KV head's keys / values as a slice of the concatenated cache."""

    def __init__(self, attn: nn.Module, shape: DecoderShape):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = shape.n_heads, shape.n_kv_heads, shape.head_dim
        self.q_proj = per_head_linears(attn.q_proj, self.n_heads, self.head_dim)
        self.k_proj = per_head_linears(attn.k_proj, self.n_kv_heads, self.head_dim)
        self.v_proj = per_head_linears(attn.v_proj, self.n_kv_heads, self.head_dim)
        self.o_proj = attn.o_proj
        self.q_norm = getattr(attn, "q_norm", None)
        self.k_norm = getattr(attn, "k_norm", None)
        self.scaling = float(getattr(attn, "scaling", self.head_dim**-0.5))

    def _rotated(self, x: torch.Tensor, proj: nn.Module, norm, cos: torch.Tensor, sin: torch.Tensor):
        y = proj(x)  # [1, N, D]
        if norm is not None:
            y = norm(y)
        return y * cos + _rotate_half(y) * sin

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor,
        k_past: torch.Tensor,
        v_past: torch.Tensor,
    ):
        # cos / sin [1, N, D]; mask [1, N, C]
        k = [self._rotated(x, proj, self.k_norm, cos, sin).unsqueeze(1) for proj in self.k_proj]
        v = [proj(x).unsqueeze(2) for proj in self.v_proj]
        new_k = torch.cat(k, dim=1).transpose(2, 3)  # [1, kv, D, N]: StaticAttention's layout
        new_v = torch.cat(v, dim=2).transpose(1, 2)  # [1, kv, N, D]
        keys = torch.cat([k_past, new_k], dim=-1)  # [1, kv, D, C]
        values = torch.cat([v_past, new_v], dim=2)  # [1, kv, C, D]
        rep = self.n_heads // self.n_kv_heads
        heads = []
        for h, proj in enumerate(self.q_proj):
            q = self._rotated(x, proj, self.q_norm, cos, sin)
            scores = torch.matmul(q, keys[:, h // rep]) * self.scaling + mask  # [1, N, C]
            heads.append(torch.matmul(torch.softmax(scores, dim=-1), values[:, h // rep]))  # [1, N, D]
        return self.o_proj(torch.cat(heads, dim=-1)), new_k, new_v


class StaticLayer(nn.Module):
    def __init__(self, layer: nn.Module, shape: DecoderShape, split_heads: bool = False):
        super().__init__()
        self.input_layernorm = layer.input_layernorm
        attention = SplitHeadAttention if split_heads else StaticAttention
        self.self_attn = attention(layer.self_attn, shape)
        self.post_attention_layernorm = layer.post_attention_layernorm
        self.mlp = layer.mlp

    def forward(self, h, cos, sin, mask, k_past, v_past):
        attn, new_k, new_v = self.self_attn(self.input_layernorm(h), cos, sin, mask, k_past, v_past)
        h = h + attn
        h = h + self.mlp(self.post_attention_layernorm(h))
        return h, new_k, new_v


def decoder_shape(config, context_len: int, ar_len: int) -> DecoderShape:
    n_heads = int(config.num_attention_heads)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // n_heads
    return DecoderShape(
        n_layers=int(config.num_hidden_layers),
        n_heads=n_heads,
        n_kv_heads=int(getattr(config, "num_key_value_heads", None) or n_heads),
        head_dim=int(head_dim),
        hidden=int(config.hidden_size),
        vocab_size=int(config.vocab_size),
        context_len=int(context_len),
        ar_len=int(ar_len),
    )


def _check_supported(hf_model: nn.Module, context_len: int, ar_len: int) -> None:
    config = hf_model.config
    model_type = getattr(config, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(
            f"StaticDecoder: model_type {model_type!r} is not supported (supported: {', '.join(SUPPORTED_MODEL_TYPES)})"
        )
    if not 1 <= ar_len < context_len:
        raise ValueError(
            f"StaticDecoder: ar_len must be in [1, context_len), got ar_len={ar_len}, context_len={context_len}"
        )
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if isinstance(rope, dict) and rope.get("rope_type") == "dynamic":
        raise ValueError("StaticDecoder: dynamic rope scaling changes with the sequence length; not supported")
    for i, layer in enumerate(hf_model.model.layers):
        window = getattr(layer.self_attn, "sliding_window", None)
        if window is not None and window < context_len:
            raise ValueError(
                f"StaticDecoder: layer {i} uses sliding-window attention ({window} < "
                f"context {context_len}); not supported"
            )


class StaticDecoder(nn.Module):
    """See the module docstring. `hf_model`: LlamaForCausalLM / Qwen2ForCausalLM /
    Qwen3ForCausalLM (eval mode, float32 weights as given). `split_heads`: one attention per
    query head (SplitHeadAttention); the inputs and outputs are the same."""

    def __init__(self, hf_model: nn.Module, context_len: int, ar_len: int, split_heads: bool = False):
        super().__init__()
        _check_supported(hf_model, context_len, ar_len)
        config = hf_model.config
        self.shape = decoder_shape(config, context_len, ar_len)
        self.split_heads = split_heads
        base = hf_model.model
        self.embed_tokens = base.embed_tokens
        self.layers = nn.ModuleList(StaticLayer(layer, self.shape, split_heads) for layer in base.layers)
        self.norm = base.norm
        self.lm_head = hf_model.lm_head
        cos, sin = rotary_tables(hf_model, context_len)
        self.register_buffer("rope_cos", cos, persistent=False)  # [C, head_dim]
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, *caches: torch.Tensor):
        n_layers = self.shape.n_layers
        if len(caches) != 2 * n_layers:
            raise ValueError(
                f"StaticDecoder: expected {2 * n_layers} cache tensors (K of every layer then V), got {len(caches)}"
            )
        h = self.embed_tokens(tokens)
        cos = nn.functional.embedding(positions, self.rope_cos)  # [1, N, D]
        sin = nn.functional.embedding(positions, self.rope_sin)
        if not self.split_heads:  # [1, 1, N, D] for [1, heads, N, D]; the mask as the heads stack
            cos, sin, mask = cos.unsqueeze(1), sin.unsqueeze(1), _stacked_mask(mask, self.shape)
        new_k: List[torch.Tensor] = []
        new_v: List[torch.Tensor] = []
        for i, layer in enumerate(self.layers):
            h, k, v = layer(h, cos, sin, mask, caches[i], caches[n_layers + i])
            new_k.append(k)
            new_v.append(v)
        logits = self.lm_head(self.norm(h))
        return (logits, *new_k, *new_v)

    # ---- example inputs ---------------------------------------------------------------------
    def example_inputs(self, n_tokens: int) -> Tuple[torch.Tensor, ...]:
        """Inputs of a first call with n_tokens (positions 0..n-1, empty cache, causal mask)."""
        positions = torch.arange(n_tokens, dtype=torch.int32).reshape(1, -1)
        tokens = torch.zeros(1, n_tokens, dtype=torch.int32)
        mask = causal_mask(0, n_tokens, n_tokens, self.shape.context_len)
        k_shape, v_shape = self.shape.cache_shapes(n_tokens)
        caches = [torch.zeros(k_shape) for _ in range(self.shape.n_layers)] + [
            torch.zeros(v_shape) for _ in range(self.shape.n_layers)
        ]
        return (tokens, positions, torch.from_numpy(mask), *caches)


def _stacked_mask(mask: torch.Tensor, shape: DecoderShape) -> torch.Tensor:
    """[1, N, C] -> [1, 1, rep * N, C]: rows = (query head within its KV group, position), as
    StaticAttention stacks a KV group's query heads."""
    n = mask.shape[1]
    mask = mask.reshape(1, 1, n, -1)
    rep = shape.n_heads // shape.n_kv_heads
    return torch.cat([mask] * rep, dim=2) if rep > 1 else mask


def rotary_tables(hf_model: nn.Module, context_len: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """HF's own cos / sin for positions 0..context_len-1 ([C, head_dim] each, float32)."""
    rotary = hf_model.model.rotary_emb
    positions = torch.arange(context_len).reshape(1, -1)
    probe = torch.zeros(1, dtype=torch.float32)
    with torch.no_grad():
        cos, sin = rotary(probe, positions)
    return cos[0].float().contiguous(), sin[0].float().contiguous()


def causal_mask(start: int, n_valid: int, n_tokens: int, context_len: int):
    """The mask of a call writing positions start .. start + n_valid - 1 (rows n_valid .. n_tokens-1
    are padding): cache columns 0 .. start-1 and the new columns up to each row's own are visible.
    numpy float32 [1, n_tokens, context_len]."""
    import numpy as np

    past = context_len - n_tokens
    mask = np.full((1, n_tokens, context_len), MASK_VALUE, dtype=np.float32)
    mask[0, :, :start] = 0.0
    for row in range(n_tokens):  # padding rows see what the rows before them see (their output is unused)
        mask[0, row, past : past + row + 1] = 0.0
    return mask


def check_layout(shape: DecoderShape, caches: Sequence[torch.Tensor], n_tokens: int) -> None:
    k_shape, v_shape = shape.cache_shapes(n_tokens)
    for i, c in enumerate(caches):
        want = k_shape if i < shape.n_layers else v_shape
        if tuple(c.shape) != want:
            raise ValueError(f"cache {i}: shape {tuple(c.shape)}, expected {want}")
