"""Quantization configs of QnnQuantizer: one table row per QuantDtype.

Activations are unsigned (uint8, or uint16 stored in int32 like upstream), asymmetric by
default, symmetric with `act_symmetric` (zero point 128 / 32768); weights are signed
symmetric with the quant range of their bit width (int8 storage for 8/4/2 bits, int16 for
16 bits). Bias: int32 with scale = input_scale x weight_scale for 8/4/2-bit weights; with
16-bit weights that scale is so small (about 1e-9) that a bias above ~2 saturates, so the
bias gets its own int32 scale (max|bias| / 2**31, what upstream's per-tensor 16a16w config
does); float32 with LPBQ weights."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple, Type

import torch
from torchao.quantization.pt2e import (
    FakeQuantize,
    MinMaxObserver,
    MovingAverageMinMaxObserver,
    MovingAveragePerChannelMinMaxObserver,
    PerChannelMinMaxObserver,
)
from torchao.quantization.pt2e.quantizer import DerivedQuantizationSpec, QuantizationSpec

from backends.qualcomm.quantizer.observers import (
    LpbqFakeQuantize,
    LpbqObserver,
    PassUnionMovingAverageObserver,
    effective_scales,
)


class QuantDtype(enum.IntEnum):
    """<activation bits>a<weight bits>w; fp16a8w = float activations, int8 weights only.
    Values are upstream's (<upstream>.quantizer.quantizer.QuantDtype)."""

    use_16a16w = 0
    use_16a8w = 1
    use_16a4w = 2
    use_16a4w_block = 3
    use_8a8w = 4
    use_8a4w = 5
    use_fp16a8w = 6
    use_16a2w = 7


@dataclass(frozen=True)
class DtypeRow:
    act_bits: Optional[int]  # None: activations stay float
    weight_bits: int
    block: bool = False  # LPBQ weights for conv/linear


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
# Smallest scale an observer may produce (upstream's DEFAULT_EPS_8BIT / DEFAULT_EPS_16BIT).
DEFAULT_EPS_8BIT = 0.0001 / 255
DEFAULT_EPS_16BIT = 0.0001 / 65535
# Default activation observers. PTQ: upstream's moving average across calibration samples, of
# the union of all tensors an encoding covers within a sample (observers.py). Upstream's own
# MovingAverageMinMaxObserver kept the first tensor's range in a shared encoding (cat, stack,
# index_put, views): a cat of [0.5, 1.4] and [-0.5, 2.4] got [0, 1.4] in 8a8w (error 0.43).
# QAT keeps the moving average its FakeQuantize trains with.
DEFAULT_ACT_OBSERVER = PassUnionMovingAverageObserver
DEFAULT_QAT_ACT_OBSERVER = MovingAverageMinMaxObserver


@dataclass
class QuantConfig:
    """Specs one node is annotated with. `weight_block` builds the LPBQ weight spec for a
    block size (None when the dtype has no block weights)."""

    input_activation: Optional[QuantizationSpec]
    output_activation: Optional[QuantizationSpec]
    weight: Optional[QuantizationSpec]  # per tensor
    weight_per_channel: Optional[QuantizationSpec]
    weight_block: Optional[Callable[[Tuple[int, ...]], QuantizationSpec]]
    is_conv_per_channel: bool = False
    is_linear_per_channel: bool = False
    is_qat: bool = False
    is_embedding_per_channel: bool = False
    bias: Optional[QuantizationSpec] = None  # own-range int32 bias; None: derived
    block_size: Optional[Tuple[int, ...]] = None  # LPBQ block size of a recipe strategy
    norm_weight: Optional[QuantizationSpec] = None  # layer_norm gamma (HTP has no float gamma)
    norm_bias: Optional[QuantizationSpec] = None  # layer_norm beta (int32, own range)
    # per output channel of a transposed conv's weight [Cin, Cout/group, k..] (axis 1)
    weight_per_channel_axis1: Optional[QuantizationSpec] = None
    # instance_norm gamma with 16-bit activations: uint8 symmetric (zero point 128; QNN's HTP
    # InstanceNorm refuses a 16-bit or a signed gamma); None: norm_weight
    instance_norm_weight: Optional[QuantizationSpec] = None


def act_range(bits: int) -> Tuple[torch.dtype, int, int]:
    if bits == 8:
        return torch.uint8, 0, 255
    return torch.int32, 0, 65535  # uint16 values in int32 storage (CPU Q/DQ kernels have no uint16)


def weight_range(bits: int) -> Tuple[torch.dtype, int, int]:
    if bits == 16:
        return torch.int16, -32768, 32767
    return torch.int8, -(1 << (bits - 1)), (1 << (bits - 1)) - 1


_MIDPOINT_OBSERVERS: Dict[type, type] = {}


def symmetric_activation_observer(observer: type) -> type:
    """`observer` whose symmetric zero point is the middle of an unsigned range stored in a
    wider dtype (uint16 in int32: 32768). torchao only does that for uint8 / uint16 dtypes
    and would give zero point 0, which clips every negative value."""
    if observer not in _MIDPOINT_OBSERVERS:

        def _calculate_qparams(self, min_val, max_val):
            scale, zero_point = observer._calculate_qparams(self, min_val, max_val)
            if self.dtype == torch.int32 and self.quant_min == 0:
                zero_point = torch.full_like(zero_point, (self.quant_max + 1) // 2)
            return scale, zero_point

        _MIDPOINT_OBSERVERS[observer] = type(
            observer.__name__,
            (observer,),
            {"_calculate_qparams": _calculate_qparams, "__module__": observer.__module__},
        )
    return _MIDPOINT_OBSERVERS[observer]


def _act_spec(bits: int, observer: type, is_qat: bool, symmetric: bool, eps: float) -> QuantizationSpec:
    dtype, qmin, qmax = act_range(bits)
    if symmetric:
        qscheme = torch.per_tensor_symmetric
        observer = symmetric_activation_observer(observer) if bits == 16 else observer
        # uint8 without an explicit range: torchao's symmetric zero point is 128 (HTP's choice)
        range_args = {} if bits == 8 else {"quant_min": qmin, "quant_max": qmax}
    else:
        qscheme = torch.per_tensor_affine
        range_args = {"quant_min": qmin, "quant_max": qmax}
    ctr = observer.with_args(eps=eps)
    if is_qat:
        ctr = FakeQuantize.with_args(observer=observer, eps=eps, dtype=dtype, qscheme=qscheme, **range_args)
    return QuantizationSpec(dtype=dtype, qscheme=qscheme, observer_or_fake_quant_ctr=ctr, **range_args)


def symmetric_16bit_activation(spec: QuantizationSpec) -> QuantizationSpec:
    """The 16-bit activation `spec` made symmetric (zero point 32768), same observer kind and
    eps: what QNN's HTP MatMul requires of its second input in 16-bit graphs (validation: 'has
    incorrect Value -33059, expected equal to -32768'; an asymmetric one stays on the CPU)."""
    partial = spec.observer_or_fake_quant_ctr.p
    kwargs = dict(partial.keywords)
    kwargs.pop("qscheme", None)
    factory = partial.func
    if "observer" in kwargs:  # QAT: FakeQuantize.with_args(observer=...)
        kwargs["observer"] = symmetric_activation_observer(kwargs["observer"])
        kwargs["qscheme"] = torch.per_tensor_symmetric
    else:
        factory = symmetric_activation_observer(factory)
    return QuantizationSpec(
        dtype=spec.dtype,
        qscheme=torch.per_tensor_symmetric,
        quant_min=spec.quant_min,
        quant_max=spec.quant_max,
        observer_or_fake_quant_ctr=factory.with_args(**kwargs),
    )


def _weight_spec(bits: int, per_channel: bool, is_qat: bool, eps: float, ch_axis: int = 0) -> QuantizationSpec:
    dtype, qmin, qmax = weight_range(bits)
    qscheme = torch.per_channel_symmetric if per_channel else torch.per_tensor_symmetric
    observer = PerChannelMinMaxObserver if per_channel else MinMaxObserver
    axis_args = {"ch_axis": ch_axis} if per_channel else {}
    ctr = observer.with_args(eps=eps, **axis_args)
    if is_qat:
        observer = MovingAveragePerChannelMinMaxObserver if per_channel else MovingAverageMinMaxObserver
        ctr = FakeQuantize.with_args(
            observer=observer, eps=eps, quant_min=qmin, quant_max=qmax, dtype=dtype, qscheme=qscheme, **axis_args
        )
    return QuantizationSpec(
        dtype=dtype,
        quant_min=qmin,
        quant_max=qmax,
        qscheme=qscheme,
        ch_axis=ch_axis if per_channel else None,
        observer_or_fake_quant_ctr=ctr,
    )


# int32 bias range: 2**31 - 1 is not a float32, so torch's quantize would clamp to 2**31 and
# wrap to -2**31 on the cast; 2**31 - 128 is the largest float32 below 2**31.
BIAS_QMAX = 2**31 - 128


def _own_range_bias_spec(is_qat: bool, eps: float) -> QuantizationSpec:
    """int32 symmetric bias observed from its own values: scale = max|bias| / BIAS_QMAX."""
    qmin, qmax = -BIAS_QMAX, BIAS_QMAX
    ctr = MinMaxObserver.with_args(eps=eps)
    if is_qat:
        ctr = FakeQuantize.with_args(
            observer=MinMaxObserver,
            eps=eps,
            quant_min=qmin,
            quant_max=qmax,
            dtype=torch.int32,
            qscheme=torch.per_tensor_symmetric,
        )
    return QuantizationSpec(
        dtype=torch.int32,
        quant_min=qmin,
        quant_max=qmax,
        qscheme=torch.per_tensor_symmetric,
        observer_or_fake_quant_ctr=ctr,
    )


def _block_spec_factory(bits: int, is_qat: bool) -> Callable[[Tuple[int, ...]], QuantizationSpec]:
    dtype, qmin, qmax = weight_range(bits)
    observer = LpbqFakeQuantize if is_qat else LpbqObserver

    def make(block_size: Tuple[int, ...]) -> QuantizationSpec:
        ctr = observer.with_args(
            block_size=tuple(block_size),
            target_dtype=dtype,
            quant_min=qmin,
            quant_max=qmax,
            block_scale_bitwidth=BLOCK_SCALE_BITWIDTH,
        )
        return QuantizationSpec(
            dtype=dtype,
            quant_min=qmin,
            quant_max=qmax,
            qscheme=torch.per_channel_symmetric,
            ch_axis=0,
            observer_or_fake_quant_ctr=ctr,
        )

    return make


def default_eps(row: DtypeRow) -> float:
    return DEFAULT_EPS_8BIT if row.act_bits == 8 else DEFAULT_EPS_16BIT


def make_quant_config(
    quant_dtype: QuantDtype,
    is_qat: bool = False,
    is_conv_per_channel: bool = False,
    is_linear_per_channel: bool = False,
    act_observer: Optional[Type] = None,
    is_embedding_per_channel: bool = False,
    act_symmetric: bool = False,
    eps: Optional[float] = None,
) -> QuantConfig:
    """The QuantConfig of one table row (argument meanings as upstream's ModuleQConfig;
    act_observer None = PassUnionMovingAverageObserver (PTQ) / MovingAverageMinMaxObserver (QAT), eps None =
    1e-4 / (2**act_bits - 1))."""
    row = DTYPE_TABLE[QuantDtype(quant_dtype)]
    eps = float(eps) if eps else default_eps(row)
    observer = act_observer or (DEFAULT_QAT_ACT_OBSERVER if is_qat else DEFAULT_ACT_OBSERVER)
    act = _act_spec(row.act_bits, observer, is_qat, act_symmetric, eps) if row.act_bits is not None else None
    return QuantConfig(
        input_activation=act,
        output_activation=act,
        weight=_weight_spec(row.weight_bits, False, is_qat, eps),
        weight_per_channel=_weight_spec(row.weight_bits, True, is_qat, eps),
        weight_per_channel_axis1=_weight_spec(row.weight_bits, True, is_qat, eps, ch_axis=1),
        weight_block=_block_spec_factory(row.weight_bits, is_qat) if row.block else None,
        is_conv_per_channel=is_conv_per_channel or row.block,
        is_linear_per_channel=is_linear_per_channel or row.block,
        is_qat=is_qat,
        is_embedding_per_channel=is_embedding_per_channel,
        bias=_own_range_bias_spec(is_qat, eps) if row.weight_bits == 16 else None,
        norm_weight=_norm_weight_spec(row.act_bits, act, is_qat, eps) if act is not None else None,
        norm_bias=_own_range_bias_spec(is_qat, eps) if act is not None else None,
        instance_norm_weight=_act_spec(8, MinMaxObserver, is_qat, True, eps) if row.act_bits == 16 else None,
    )


def _norm_weight_spec(act_bits: int, act: QuantizationSpec, is_qat: bool, eps: float) -> QuantizationSpec:
    """layer_norm gamma: the activation encoding with 8-bit activations, 16-bit symmetric with
    16-bit activations (the encodings QNN's HTP LayerNorm accepts; a float gamma fails finalize)."""
    return act if act_bits == 8 else _weight_spec(16, False, is_qat, eps)


def _bias_weight_scale(weight_obs) -> torch.Tensor:
    """The weight scale(s) of a bias encoding. LPBQ: the float channel scale the lowering gives
    QNN (lpbq_split: max effective block scale / (2**bits - 1)); HTP wants the bias of LPBQ
    weights int32 with scale input scale x that channel scale."""
    if isinstance(weight_obs, LpbqObserver):
        effective = effective_scales(weight_obs.channel_scale, weight_obs.block_ints)
        return effective.amax(dim=1) / float((1 << weight_obs.block_scale_bitwidth) - 1)
    weight_scale, _ = weight_obs.calculate_qparams()
    return weight_scale


def _derive_bias_qparams(observers) -> Tuple[torch.Tensor, torch.Tensor]:
    act_obs, weight_obs = observers
    act_scale, _ = act_obs.calculate_qparams()
    weight_scale = _bias_weight_scale(weight_obs)
    scale = (act_scale * weight_scale).to(torch.float32).reshape(-1)
    return scale, torch.zeros_like(scale, dtype=torch.int32)


def bias_spec(input_edge, weight_edge, per_channel: bool) -> DerivedQuantizationSpec:
    """int32 bias with scale = input_scale * weight_scale (per channel when the weight is)."""
    return DerivedQuantizationSpec(
        derived_from=[input_edge, weight_edge],
        derive_qparams_fn=_derive_bias_qparams,
        dtype=torch.int32,
        quant_min=-BIAS_QMAX,
        quant_max=BIAS_QMAX,
        qscheme=torch.per_channel_symmetric if per_channel else torch.per_tensor_symmetric,
        ch_axis=0 if per_channel else None,
    )
