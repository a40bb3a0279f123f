"""Multi-output modules for the quantized operator tests: one module per op family, one
output per op, so that a family is quantized and lowered once and every op's fidelity is
still measured on its own output."""

from __future__ import annotations

from typing import Callable, Dict

import torch
import torch.nn.functional as F

from backends.qualcomm.tests.helpers import models_float as m


class Family(torch.nn.Module):
    """Outputs (op_1(x), op_2(x), ...) for a table of ops; `names` lists them in order."""

    def __init__(self, ops: Dict[str, Callable], modules: Dict[str, torch.nn.Module] = None):
        super().__init__()
        self.names = list(ops)
        self.ops = list(ops.values())
        self.mods = torch.nn.ModuleDict(modules or {})

    def forward(self, *inputs):
        return tuple(op(self, *inputs) for op in self.ops)


def activations() -> Family:
    return Family({name: (lambda self, x, f=f: f(x * 3.0)) for name, f in m.ACTIVATIONS.items()})


def math_ops() -> Family:
    return Family({name: (lambda self, x, f=f: f(x)) for name, f in m.MATH_OPS.items()})


def binary() -> Family:
    return Family(
        {
            "add": lambda self, a, b, c: a + b,
            "sub": lambda self, a, b, c: a - b,
            "mul": lambda self, a, b, c: a * b,
            "div": lambda self, a, b, c: a / (b * b + 0.5),
            "add_broadcast": lambda self, a, b, c: a + c,
            "mul_broadcast": lambda self, a, b, c: a * c,
            "add_scalar": lambda self, a, b, c: a + 2.5,
            "mul_scalar": lambda self, a, b, c: a * -3.0,
            "rsub_scalar": lambda self, a, b, c: 2.0 - a,
            "add_alpha": lambda self, a, b, c: torch.add(a, b, alpha=2),  # b's codes, alpha x its scale
            "sub_alpha_broadcast": lambda self, a, b, c: torch.sub(a, c, alpha=3),
        }
    )


def norms() -> Family:
    return Family(
        {
            "softmax_last": lambda self, x: torch.softmax(x, -1),
            "softmax_middle": lambda self, x: torch.softmax(x, 1),
            "layer_norm": lambda self, x: self.mods["ln"](x),
        },
        {"ln": m.LayerNorm([16]).norm},
    )


def spatial() -> Family:
    """Ops on an N,C,H,W input: pools and reductions (batch norm is tested on its own:
    any batch norm makes convert_pt2e run torchao's slow QAT conv-bn pattern search)."""
    return Family(
        {
            "avg_pool": lambda self, x: F.avg_pool2d(x, 3, 2, 1),
            "max_pool": lambda self, x: F.max_pool2d(x, 3, 2, 1),
            "adaptive_avg_pool": lambda self, x: F.adaptive_avg_pool2d(x, 1),
            "mean_hw": lambda self, x: x.mean([2, 3], keepdim=True),
            "mean_c": lambda self, x: x.mean([1]),
            "sum_c": lambda self, x: x.sum([1], keepdim=True),
        }
    )


def shapes() -> Family:
    return Family(
        {
            "view": lambda self, x: (x * 1.5).view(6, 4),
            "permute": lambda self, x: (x * 1.5).permute(2, 0, 1),
            "transpose": lambda self, x: (x * 1.5).transpose(0, 2),
            "expand": lambda self, x: (x * 1.5)[:, :1].expand(2, 3, 4),
            "select": lambda self, x: (x * 1.5)[:, 1],
            "flatten": lambda self, x: (x * 1.5).flatten(1),
            "slice": lambda self, x: (x * 1.5)[:, 1:3, ::2],
            "cat": lambda self, x: torch.cat([x * 1.5, x * -0.5], 1),
        }
    )


def matmuls() -> Family:
    return Family({"matmul": lambda self, a, b: torch.matmul(a, b), "bmm": lambda self, a, b: torch.bmm(a, b)})


def conv_variants() -> Family:
    convs = {
        "stride_pad": torch.nn.Conv2d(8, 8, 3, 2, 1),
        "groups": torch.nn.Conv2d(8, 8, 3, 1, 1, groups=2),
        "depthwise": torch.nn.Conv2d(8, 8, 3, 1, 1, groups=8),
        "no_bias": torch.nn.Conv2d(8, 6, 1, bias=False),
        "dilation": torch.nn.Conv2d(8, 4, 3, padding=2, dilation=2),
    }
    return Family({name: (lambda self, x, n=name: self.mods[n](x)) for name in convs}, convs)


def weighted() -> Family:
    """conv2d and linear (the ops with quantized weights) on their own inputs."""
    mods = {"conv2d": torch.nn.Conv2d(16, 8, 3, padding=1), "linear": torch.nn.Linear(32, 8)}
    return Family(
        {"conv2d": lambda self, x, y: self.mods["conv2d"](x), "linear": lambda self, x, y: self.mods["linear"](y)}, mods
    )


class DiscardedTail(torch.nn.Module):
    """relu -> add -> sigmoid; the sigmoid is discarded (stays float, at the output)."""

    def forward(self, x):
        return torch.sigmoid(torch.relu(x) + 1.0)


class TinyQwen3Block(torch.nn.Module):
    """One Qwen3 decoder layer from a small transformers config (random weights), with its
    rotary embeddings and causal mask precomputed: forward(hidden [1, seq, hidden])."""

    def __init__(self, seq_len: int = 8, hidden: int = 64, seed: int = 0):
        super().__init__()
        from transformers import Qwen3Config
        from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer, Qwen3RotaryEmbedding

        config = Qwen3Config(
            hidden_size=hidden,
            intermediate_size=2 * hidden,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=hidden // 4,
            num_hidden_layers=1,
            vocab_size=128,
        )
        config._attn_implementation = "eager"
        torch.manual_seed(seed)
        self.layer = Qwen3DecoderLayer(config, 0).eval()
        cos, sin = Qwen3RotaryEmbedding(config)(torch.zeros(1, seq_len, hidden), torch.arange(seq_len)[None])
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)
        self.register_buffer("mask", torch.triu(torch.full((seq_len, seq_len), -1e4), 1)[None, None])

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        out = self.layer(hidden, attention_mask=self.mask, position_embeddings=(self.cos, self.sin))
        return out[0] if isinstance(out, tuple) else out
