"""LPBQ (low-power blockwise quantization) observers.

Per (output channel c, block b) of the weight: raw scale s[c,b] = max|w| / ((qmax-qmin)/2);
per channel a float scale S[c] = max_b s[c,b] / (2**block_scale_bitwidth - 1); per block an
unsigned integer scale k[c,b] = clamp(ceil(s[c,b] / S[c]), 1, 2**bw - 1). The effective
scale S[c] * k[c,b] (float32) is what the QDQ reference uses (torchao quantize_affine /
dequantize_affine) and exactly what the payload's BLOCKWISE_EXPANSION encoding carries."""
from __future__ import annotations

from typing import Tuple

import torch
from torchao.quantization.pt2e import AffineQuantizedObserverBase, MappingType, PerBlock


def lpbq_scales(weight: torch.Tensor, block_size: Tuple[int, ...], qmin: int, qmax: int,
                block_scale_bitwidth: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """(per-channel float scale [C], integer block scales [C, num_blocks]) of a weight whose
    dim 0 is the output channel and dim 1 the blocked input channel."""
    cout, cin = weight.shape[0], weight.shape[1]
    bs = int(block_size[1])
    if cin % bs:
        raise ValueError(f"LPBQ block size {bs} does not divide input channels {cin}")
    blocks = weight.detach().float().reshape(cout, cin // bs, -1) if weight.dim() == 2 else \
        weight.detach().float().reshape(cout, cin // bs, bs, -1)
    max_abs = blocks.abs().reshape(cout, cin // bs, -1).amax(dim=-1)
    raw = max_abs / ((qmax - qmin) / 2)
    levels = (1 << block_scale_bitwidth) - 1
    channel = (raw.amax(dim=1) / levels).clamp(min=2**-24)
    ints = torch.ceil(raw / channel[:, None] - 1e-6).clamp(1, levels)
    return channel.to(torch.float32), ints.to(torch.int32)


def effective_scales(channel: torch.Tensor, ints: torch.Tensor) -> torch.Tensor:
    return (channel[:, None] * ints.to(torch.float32)).to(torch.float32)


class LpbqObserver(AffineQuantizedObserverBase):
    """Weight observer producing per-block effective scales; converts to quantize_affine /
    dequantize_affine nodes with block_size (1, block, ...)."""

    def __init__(self, block_size: Tuple[int, ...], target_dtype: torch.dtype = torch.int8,
                 quant_min: int = -8, quant_max: int = 7, block_scale_bitwidth: int = 4, **kwargs):
        super().__init__(MappingType.SYMMETRIC, target_dtype, PerBlock(tuple(block_size)),
                         quant_min=quant_min, quant_max=quant_max, eps=2**-24,
                         scale_dtype=torch.float32, zero_point_dtype=torch.int32)
        self.requested_block_size = tuple(int(b) for b in block_size)
        self.block_scale_bitwidth = int(block_scale_bitwidth)
        self.register_buffer("channel_scale", torch.tensor([]), persistent=False)
        self.register_buffer("block_ints", torch.tensor([]), persistent=False)

    def _observe(self, weight: torch.Tensor) -> None:
        self.block_size = self.requested_block_size
        self.original_dtype = weight.dtype
        self.channel_scale, self.block_ints = lpbq_scales(
            weight, self.block_size, self.quant_min, self.quant_max, self.block_scale_bitwidth)
        self.weight_shape = tuple(weight.shape)

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        self._observe(weight)
        return weight

    def calculate_qparams(self) -> Tuple[torch.Tensor, torch.Tensor]:
        scale = effective_scales(self.channel_scale, self.block_ints)
        shape = [s // b for s, b in zip(self.weight_shape, self.block_size)]
        scale = scale.reshape(shape)
        return scale, torch.zeros_like(scale, dtype=torch.int32)


class LpbqFakeQuantize(LpbqObserver):
    """QAT: observes like LpbqObserver and returns the fake-quantized weight (straight-through).
    On convert it also folds a following QAT batch norm (torchao does not for affine weights)."""

    def convert(self, model, observer_node) -> None:
        from backends.qualcomm.quantizer.qat_fold import fold_qat_conv_bn

        consumers = [u for u in observer_node.users if "conv" in str(u.target)]
        super().convert(model, observer_node)
        for conv in consumers:
            fold_qat_conv_bn(model, conv)

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            self._observe(weight)
            scale, _ = self.calculate_qparams()
            expanded = scale
            for dim, b in enumerate(self.block_size):
                expanded = expanded.repeat_interleave(b, dim=dim)
            fake = torch.clamp(torch.round(weight / expanded), self.quant_min, self.quant_max) * expanded
        return weight + (fake - weight).detach()
