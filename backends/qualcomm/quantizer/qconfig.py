"""Quantization configs of QnnQuantizer: one table row per QuantDtype.

Activations are unsigned asymmetric (uint8, or uint16 stored in int32 like upstream);
weights are signed symmetric with the quant range of their bit width (int8 storage for
8/4/2 bits, int16 for 16 bits); bias is int32 derived from input and weight scales."""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

import torch
from torchao.quantization.pt2e import (
    FakeQuantize, MinMaxObserver, MovingAverageMinMaxObserver, MovingAveragePerChannelMinMaxObserver,
    PerChannelMinMaxObserver,
)
from torchao.quantization.pt2e.quantizer import DerivedQuantizationSpec, QuantizationSpec

from backends.qualcomm.quantizer.observers import LpbqFakeQuantize, LpbqObserver


class QuantDtype(enum.IntEnum):
    """<activation bits>a<weight bits>w; fp16a8w = float activations, int8 weights only."""

    use_16a16w = 0
    use_16a8w = 1
    use_16a4w = 2
    use_16a4w_block = 3
    use_8a8w = 4
    use_8a4w = 5
    use_16a2w = 6
    use_fp16a8w = 7


@dataclass(frozen=True)
class DtypeRow:
    act_bits: Optional[int]  # None: activations stay float
    weight_bits: int
    block: bool = False      # LPBQ weights for conv/linear


DTYPE_TABLE: Dict[QuantDtype, DtypeRow] = {
    QuantDtype.use_16a16w: DtypeRow(16, 16),
    QuantDtype.use_16a8w: DtypeRow(16, 8),
    QuantDtype.use_16a4w: DtypeRow(16, 4),
    QuantDtype.use_16a4w_block: DtypeRow(16, 4, block=True),
    QuantDtype.use_8a8w: DtypeRow(8, 8),
    QuantDtype.use_8a4w: DtypeRow(8, 4),
    QuantDtype.use_16a2w: DtypeRow(16, 2),
    QuantDtype.use_fp16a8w: DtypeRow(None, 8),
}

DEFAULT_BLOCK_SIZE = 16
BLOCK_SCALE_BITWIDTH = 4


@dataclass
class QuantConfig:
    """Specs one node is annotated with. `weight_block` builds the LPBQ weight spec for a
    block size (None when the dtype has no block weights)."""

    input_activation: Optional[QuantizationSpec]
    output_activation: Optional[QuantizationSpec]
    weight: Optional[QuantizationSpec]                 # per tensor
    weight_per_channel: Optional[QuantizationSpec]
    weight_block: Optional[Callable[[Tuple[int, ...]], QuantizationSpec]]
    is_conv_per_channel: bool = False
    is_linear_per_channel: bool = False
    is_qat: bool = False


def act_range(bits: int) -> Tuple[torch.dtype, int, int]:
    if bits == 8:
        return torch.uint8, 0, 255
    return torch.int32, 0, 65535  # uint16 values in int32 storage (CPU Q/DQ kernels have no uint16)


def weight_range(bits: int) -> Tuple[torch.dtype, int, int]:
    if bits == 16:
        return torch.int16, -32768, 32767
    return torch.int8, -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def _act_spec(bits: int, observer, is_qat: bool) -> QuantizationSpec:
    dtype, qmin, qmax = act_range(bits)
    ctr = observer.with_args(eps=2**-20)
    if is_qat:
        ctr = FakeQuantize.with_args(observer=MovingAverageMinMaxObserver, eps=2**-20,
                                     quant_min=qmin, quant_max=qmax, dtype=dtype)
    return QuantizationSpec(dtype=dtype, quant_min=qmin, quant_max=qmax,
                            qscheme=torch.per_tensor_affine, observer_or_fake_quant_ctr=ctr)


def _weight_spec(bits: int, per_channel: bool, is_qat: bool) -> QuantizationSpec:
    dtype, qmin, qmax = weight_range(bits)
    qscheme = torch.per_channel_symmetric if per_channel else torch.per_tensor_symmetric
    observer = PerChannelMinMaxObserver if per_channel else MinMaxObserver
    ctr = observer.with_args(eps=2**-20)
    if is_qat:
        observer = MovingAveragePerChannelMinMaxObserver if per_channel else MovingAverageMinMaxObserver
        ctr = FakeQuantize.with_args(observer=observer, eps=2**-20, quant_min=qmin, quant_max=qmax,
                                     dtype=dtype, qscheme=qscheme, **({"ch_axis": 0} if per_channel else {}))
    return QuantizationSpec(dtype=dtype, quant_min=qmin, quant_max=qmax, qscheme=qscheme,
                            ch_axis=0 if per_channel else None, observer_or_fake_quant_ctr=ctr)


def _block_spec_factory(bits: int, is_qat: bool) -> Callable[[Tuple[int, ...]], QuantizationSpec]:
    dtype, qmin, qmax = weight_range(bits)
    observer = LpbqFakeQuantize if is_qat else LpbqObserver

    def make(block_size: Tuple[int, ...]) -> QuantizationSpec:
        ctr = observer.with_args(block_size=tuple(block_size), target_dtype=dtype, quant_min=qmin,
                                 quant_max=qmax, block_scale_bitwidth=BLOCK_SCALE_BITWIDTH)
        return QuantizationSpec(dtype=dtype, quant_min=qmin, quant_max=qmax,
                                qscheme=torch.per_channel_symmetric, ch_axis=0,
                                observer_or_fake_quant_ctr=ctr)
    return make


def make_quant_config(quant_dtype: QuantDtype, is_qat: bool = False, is_conv_per_channel: bool = False,
                      is_linear_per_channel: bool = False, act_observer=MinMaxObserver) -> QuantConfig:
    """The QuantConfig of one table row."""
    row = DTYPE_TABLE[QuantDtype(quant_dtype)]
    act = _act_spec(row.act_bits, act_observer, is_qat) if row.act_bits is not None else None
    return QuantConfig(
        input_activation=act, output_activation=act,
        weight=_weight_spec(row.weight_bits, False, is_qat),
        weight_per_channel=_weight_spec(row.weight_bits, True, is_qat),
        weight_block=_block_spec_factory(row.weight_bits, is_qat) if row.block else None,
        is_conv_per_channel=is_conv_per_channel or row.block,
        is_linear_per_channel=is_linear_per_channel or row.block,
        is_qat=is_qat,
    )


def _derive_bias_qparams(observers) -> Tuple[torch.Tensor, torch.Tensor]:
    act_obs, weight_obs = observers
    act_scale, _ = act_obs.calculate_qparams()
    weight_scale, _ = weight_obs.calculate_qparams()
    scale = (act_scale * weight_scale).to(torch.float32).reshape(-1)
    return scale, torch.zeros_like(scale, dtype=torch.int32)


def bias_spec(input_edge, weight_edge, per_channel: bool) -> DerivedQuantizationSpec:
    """int32 bias with scale = input_scale * weight_scale (per channel when the weight is)."""
    return DerivedQuantizationSpec(
        derived_from=[input_edge, weight_edge], derive_qparams_fn=_derive_bias_qparams,
        dtype=torch.int32, quant_min=-(2**31), quant_max=2**31 - 1,
        qscheme=torch.per_channel_symmetric if per_channel else torch.per_tensor_symmetric,
        ch_axis=0 if per_channel else None,
    )
