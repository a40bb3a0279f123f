"""LPBQ (low-power blockwise quantization) observers.

Per (output channel c, block b) of the weight: raw scale s[c,b] = max|w| / ((qmax-qmin)/2);
per channel a float scale S[c] = max_b s[c,b] / (2**block_scale_bitwidth - 1); per block an
unsigned integer scale k[c,b] = clamp(ceil(s[c,b] / S[c]), 1, 2**bw - 1). The effective
scale S[c] * k[c,b] (float32) is what the QDQ reference uses (torchao quantize_affine /
dequantize_affine) and exactly what the payload's BLOCKWISE_EXPANSION encoding carries."""

from __future__ import annotations

import sys
from typing import Optional, Tuple

import torch
from torchao.quantization.pt2e import AffineQuantizedObserverBase, MappingType, MovingAverageMinMaxObserver, PerBlock


def lpbq_channel_axis(block_size: Tuple[int, ...]) -> int:
    """Output channel dim of an LPBQ weight: 0 ([Cout, Cin, ..] blocked along dim 1, block
    (1, b, ..)), or 1 for a transposed conv's [Cin, Cout, ..] blocked along dim 0 (block (b, 1, ..))."""
    return 1 if len(block_size) > 2 and block_size[0] > 1 and block_size[1] == 1 else 0


def lpbq_scales(
    weight: torch.Tensor, block_size: Tuple[int, ...], qmin: int, qmax: int, block_scale_bitwidth: int
) -> Tuple[torch.Tensor, torch.Tensor]:
    """(per-channel float scale [C], integer block scales [C, num_blocks]) of a weight whose
    output channel and blocked input channel are dims 0 and 1 (1 and 0: lpbq_channel_axis)."""
    axis = lpbq_channel_axis(block_size)
    if axis == 1:
        weight = weight.transpose(0, 1)
    cout, cin = weight.shape[0], weight.shape[1]
    bs = int(block_size[1 - axis])
    if cin % bs:
        raise ValueError(f"LPBQ block size {bs} does not divide input channels {cin}")
    blocks = (
        weight.detach().float().reshape(cout, cin // bs, -1)
        if weight.dim() == 2
        else weight.detach().float().reshape(cout, cin // bs, bs, -1)
    )
    max_abs = blocks.abs().reshape(cout, cin // bs, -1).amax(dim=-1)
    raw = max_abs / ((qmax - qmin) / 2)
    levels = (1 << block_scale_bitwidth) - 1
    channel = (raw.amax(dim=1) / levels).clamp(min=2**-24)
    ints = torch.ceil(raw / channel[:, None] - 1e-6).clamp(1, levels)
    return channel.to(torch.float32), ints.to(torch.int32)


def lpbq_mse_block_ints(
    weight: torch.Tensor, block_size: Tuple[int, ...], channel: torch.Tensor, qmin: int, qmax: int, levels: int
) -> torch.Tensor:
    """Integer block scales [C, num_blocks] that minimize each block's squared quantization error
    for the given per-channel scale (every k in 1..levels tried), instead of the max-abs ones of
    lpbq_scales (which round up: a block with a small range gets a scale up to one channel step
    too coarse). A 2-D weight [C, Cin] blocked along dim 1."""
    if weight.dim() != 2 or lpbq_channel_axis(block_size) != 0:
        raise ValueError("lpbq_mse_block_ints: a 2-D weight blocked along its input channels")
    cout, cin = weight.shape
    bs = int(block_size[1])
    blocks = weight.detach().float().reshape(cout, cin // bs, bs)
    best_err = torch.full(blocks.shape[:2], float("inf"))
    best = torch.ones(blocks.shape[:2], dtype=torch.int32)
    for k in range(1, levels + 1):
        scale = (channel[:, None] * k)[..., None]
        err = ((torch.clamp(torch.round(blocks / scale), qmin, qmax) * scale - blocks) ** 2).sum(dim=-1)
        better = err < best_err
        best_err = torch.where(better, err, best_err)
        best = torch.where(better, torch.full_like(best, k), best)
    return best


def effective_scales(channel: torch.Tensor, ints: torch.Tensor) -> torch.Tensor:
    return (channel[:, None] * ints.to(torch.float32)).to(torch.float32)


class LpbqObserver(AffineQuantizedObserverBase):
    """Weight observer producing per-block effective scales; converts to quantize_affine /
    dequantize_affine nodes with block_size (1, block, ...)."""

    def __init__(
        self,
        block_size: Tuple[int, ...],
        target_dtype: torch.dtype = torch.int8,
        quant_min: int = -8,
        quant_max: int = 7,
        block_scale_bitwidth: int = 4,
        **kwargs,
    ):
        super().__init__(
            MappingType.SYMMETRIC,
            target_dtype,
            PerBlock(tuple(block_size)),
            quant_min=quant_min,
            quant_max=quant_max,
            eps=2**-24,
            scale_dtype=torch.float32,
            zero_point_dtype=torch.int32,
        )
        self.requested_block_size = tuple(int(b) for b in block_size)
        self.block_scale_bitwidth = int(block_scale_bitwidth)
        # True: each block's integer scale minimizes its squared error (lpbq_mse_block_ints)
        # instead of covering its max |w|.
        self.mse_search = False
        self.register_buffer("channel_scale", torch.tensor([]), persistent=False)
        self.register_buffer("block_ints", torch.tensor([]), persistent=False)

    def _observe(self, weight: torch.Tensor) -> None:
        self.block_size = self.requested_block_size
        self.original_dtype = weight.dtype
        self.channel_scale, self.block_ints = lpbq_scales(
            weight, self.block_size, self.quant_min, self.quant_max, self.block_scale_bitwidth
        )
        if self.mse_search:
            levels = (1 << self.block_scale_bitwidth) - 1
            self.block_ints = lpbq_mse_block_ints(
                weight, self.block_size, self.channel_scale, self.quant_min, self.quant_max, levels
            )
        self.weight_shape = tuple(weight.shape)

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        self._observe(weight)
        return weight

    def calculate_qparams(self) -> Tuple[torch.Tensor, torch.Tensor]:
        scale = effective_scales(self.channel_scale, self.block_ints)  # [C, blocks]
        if lpbq_channel_axis(self.block_size) == 1:
            scale = scale.t()
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


def _fx_call_site() -> Optional[Tuple[int, int]]:
    """(frame id, bytecode offset) of the nearest torch.fx generated forward on the stack: where
    a prepared GraphModule calls an observer. None when not called from fx code."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<eval_with_key"):
            return id(frame), frame.f_lasti
        frame = frame.f_back
    return None


class PassUnionMovingAverageObserver(MovingAverageMinMaxObserver):
    """Upstream's moving average across calibration samples, of the union of every tensor the
    observer sees within one sample. A shared encoding (cat, stack, index_put, where, views)
    has one observer that sees several tensors per forward; the plain moving average treated
    each as a new sample and kept the first one's range, clipping the others (a cat of
    [0.5, 1.4] and [-0.5, 2.4] got [0, 1.4] in 8a8w). One forward of the prepared GraphModule
    calls the observer at increasing offsets of its generated code: a call at the same or an
    earlier offset, or from another frame, starts a new sample. With one tensor per sample
    this is exactly MovingAverageMinMaxObserver. NaN elements are left out of the range (an
    all-NaN tensor leaves it unset: the default encoding)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._site: Optional[Tuple[int, int]] = None
        self._average: Optional[Tuple[torch.Tensor, torch.Tensor]] = None  # before this sample
        self._sample: Optional[Tuple[torch.Tensor, torch.Tensor]] = None  # union in this sample

    def _same_sample(self, site: Optional[Tuple[int, int]]) -> bool:
        previous, self._site = self._site, site
        return site is not None and previous is not None and site[0] == previous[0] and site[1] > previous[1]

    def forward(self, x_orig: torch.Tensor) -> torch.Tensor:
        x = x_orig.detach().to(self.min_val.dtype)
        if x.is_floating_point() and not torch.compiler.is_compiling():
            # NaN carries no range (var over one element with correction 1). Not while exported:
            # the mask's data-dependent size would fail torch.export of a prepared model.
            x = x[~torch.isnan(x)]
        if x.numel() == 0:
            return x_orig
        low, high = torch.aminmax(x)
        if self._sample is not None and self._same_sample(_fx_call_site()):
            low, high = torch.minimum(low, self._sample[0]), torch.maximum(high, self._sample[1])
        elif self._sample is not None:
            self._average = (self.min_val.clone(), self.max_val.clone())
        else:
            self._same_sample(_fx_call_site())
        self._sample = (low, high)
        if self._average is None:
            self.min_val.copy_(low)
            self.max_val.copy_(high)
        else:
            average_low, average_high = self._average
            self.min_val.copy_(average_low + self.averaging_constant * (low - average_low))
            self.max_val.copy_(average_high + self.averaging_constant * (high - average_high))
        return x_orig
