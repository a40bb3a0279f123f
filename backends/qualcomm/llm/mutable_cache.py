"""The decoder in the conventions of ExecuTorch's `TextLLMRunner`: one `forward` method whose KV
cache lives in the program (mutable buffers), not in the runner.

    forward(tokens, input_pos) -> logits

    tokens     int64 [1, 1]       the token of this call (the runner's `tokens`, ScalarType::Long)
    input_pos  int64 [1]          its position (the runner's `start_pos`)
    logits     float [1, 1, vocab]

It is `StaticDecoder` with N = 1 (the `decode` graph, the same HF submodules and weights), plus
what `TextLLMRunner` leaves to the program:
- per layer a K buffer [1, kv_heads, head_dim, C - 1] and a V buffer [1, kv_heads, C - 1,
  head_dim] (registered buffers named `k_cache_<i>` / `v_cache_<i>`, the layout of
  static_decoder.py: slot s holds position s), read as the past cache and written at `input_pos`
  with `index_put_` (ExecuTorch mutable buffers: the delegate reads them and returns their new
  value, ExecuTorch writes it back after the call);
- the additive mask, computed from `input_pos` in the graph: slots below the position visible,
  the others `MASK_VALUE`, the call's own new column visible.

Positions 0 .. C - 2 can be written (C - 1 slots): `TextLLMRunner` never feeds position C - 1
(it requires prompt + position < C and generates up to position C - 2 given the context C)."""

from __future__ import annotations

from typing import List, Tuple

import torch
from torch import nn

from backends.qualcomm.llm.static_decoder import MASK_VALUE, StaticDecoder


class MutableCacheDecoder(nn.Module):
    """See the module docstring. `hf_model`: as StaticDecoder's; `context_len`: C."""

    def __init__(self, hf_model: nn.Module, context_len: int):
        super().__init__()
        self.decoder = StaticDecoder(hf_model, context_len, 1)
        self.shape = self.decoder.shape
        k_shape, v_shape = self.shape.cache_shapes(1)
        for i in range(self.shape.n_layers):
            self.register_buffer(f"k_cache_{i}", torch.zeros(k_shape))
            self.register_buffer(f"v_cache_{i}", torch.zeros(v_shape))
        slots = torch.arange(context_len - 1, dtype=torch.int32).reshape(1, -1)
        self.register_buffer("slots", slots, persistent=False)  # [1, C - 1]: a constant of the graph

    def caches(self) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
        n = self.shape.n_layers
        return [getattr(self, f"k_cache_{i}") for i in range(n)], [getattr(self, f"v_cache_{i}") for i in range(n)]

    def mask(self, position: torch.Tensor) -> torch.Tensor:
        """[1, 1, C]: 0 on the slots below `position` ([1, 1] int32) and on the last column (the
        call's own entry), MASK_VALUE elsewhere."""
        past = torch.where(self.slots < position, 0.0, MASK_VALUE)  # [1, C - 1]
        own = torch.zeros(1, 1, dtype=past.dtype)
        return torch.cat([past, own], dim=-1).reshape(1, 1, -1)

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        position = input_pos.to(torch.int32).reshape(1, 1)
        k_caches, v_caches = self.caches()
        logits, *new = self.decoder(tokens.to(torch.int32), position, self.mask(position), *k_caches, *v_caches)
        index = position.reshape(1)
        n = self.shape.n_layers
        for i in range(n):
            torch.ops.aten.index_put_(k_caches[i], [None, None, None, index], new[i])  # K: slots on the last axis
            torch.ops.aten.index_put_(v_caches[i], [None, None, index], new[n + i])
        return logits

    def example_inputs(self) -> Tuple[torch.Tensor, torch.Tensor]:
        return torch.zeros(1, 1, dtype=torch.int64), torch.zeros(1, dtype=torch.int64)
