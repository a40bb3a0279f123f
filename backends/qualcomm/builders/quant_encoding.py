"""QuantAttrs (what a Q/DQ node says about a tensor) -> QNN data type, QuantParams and
stored bytes (packed for 4/2-bit weights), per docs/ops.md "Quantized graphs"."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import numpy as np
import torch

from backends.qualcomm.serialization.qnn_graph import DataType, QuantEncoding, QuantParams

LPBQ_BLOCK_SCALE_BITWIDTH = 4


@dataclass
class QuantAttrs:
    """Encoding in torch terms: real = scale * (q - zero_point), q in [qmin, qmax].
    Per tensor: scale/zero_point are numbers, axis = -1. Per channel: arrays along `axis`.
    LPBQ: `scale` is the [C, num_blocks] effective scale, `block_size` the torch block size,
    `axis` the channel dim (0; 1 for a transposed conv's [Cin, Cout, k..], blocked along dim 0)."""

    scale: object
    zero_point: object
    qmin: int
    qmax: int
    dtype: torch.dtype
    axis: int = -1
    block_size: Optional[Tuple[int, ...]] = None

    @property
    def bitwidth(self) -> int:
        return int(math.ceil(math.log2(self.qmax - self.qmin + 1)))

    @property
    def signed(self) -> bool:
        return self.qmin < 0

    def same_encoding(self, other: "QuantAttrs") -> bool:
        return (
            self.axis == other.axis
            and self.qmin == other.qmin
            and self.qmax == other.qmax
            and self.block_size == other.block_size
            and np.array_equal(np.asarray(self.scale, np.float32), np.asarray(other.scale, np.float32))
            and np.array_equal(np.asarray(self.zero_point), np.asarray(other.zero_point))
        )


def _storage_bits(attrs: QuantAttrs) -> int:
    bits = attrs.bitwidth
    if attrs.signed:
        return 4 if bits <= 4 else (8 if bits <= 8 else (16 if bits <= 16 else 32))
    return 8 if bits <= 8 else 16


_SIGNED = {
    4: DataType.SFIXED_POINT_4,
    8: DataType.SFIXED_POINT_8,
    16: DataType.SFIXED_POINT_16,
    32: DataType.SFIXED_POINT_32,
}
_UNSIGNED = {8: DataType.UFIXED_POINT_8, 16: DataType.UFIXED_POINT_16}


def qnn_quant_dtype(attrs: QuantAttrs) -> int:
    table = _SIGNED if attrs.signed else _UNSIGNED
    return table[_storage_bits(attrs)]


def _bitwidth(attrs: QuantAttrs) -> int:
    """Bit width written to the payload: 2 / 4 for sub-byte weights, else the storage bits."""
    bits = attrs.bitwidth
    return bits if attrs.signed and bits < 8 else _storage_bits(attrs)


def lpbq_split(effective: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Effective block scales [C, B] -> (float scale per channel [C], uint block scales [C, B])."""
    levels = (1 << LPBQ_BLOCK_SCALE_BITWIDTH) - 1
    effective = np.asarray(effective, np.float32).reshape(effective.shape[0], -1)
    channel = (effective.max(axis=1) / np.float32(levels)).astype(np.float32)
    channel = np.where(channel > 0, channel, np.float32(1.0))
    ints = np.clip(np.rint(effective / channel[:, None]), 1, levels).astype(np.uint8)
    return channel, ints


def lpbq_block_axis(attrs: QuantAttrs) -> int:
    """The blocked (input channel) dim of an LPBQ weight: dim 1, or dim 0 when the channel
    axis is 1 (a transposed conv's [Cin, Cout, k..])."""
    return 0 if attrs.axis == 1 else 1


def lpbq_as_per_channel(values: np.ndarray, attrs: QuantAttrs) -> Tuple[np.ndarray, QuantAttrs]:
    """LPBQ weight codes q in [-8, 7] (logical layout) with block scales k in [1, 15] and
    channel scales S[c] -> the same weight as 8-bit per-channel codes k * q in [-120, 105]
    with scales S[c]: the same integer products, twice the bytes of 4-bit storage."""
    channel, ints = lpbq_split(np.asarray(attrs.scale))
    axis, block_axis = attrs.axis, lpbq_block_axis(attrs)
    k = np.repeat(ints.astype(np.int64), int(attrs.block_size[block_axis]), axis=1)  # [C, Cin]
    if axis == 1:
        k = k.T
    k = k.reshape(k.shape + (1,) * (values.ndim - 2))
    codes = np.asarray(values, np.int64) * k
    per_channel = QuantAttrs(channel, np.zeros(len(channel), np.int64), -128, 127, torch.int8, axis=axis)
    return codes, per_channel


def quant_params(attrs: QuantAttrs, perm: Optional[Sequence[int]] = None) -> QuantParams:
    """QuantParams in the stored layout (`perm`: stored dims = logical dims[perm])."""

    def stored(axis: int) -> int:
        return list(perm).index(axis) if perm is not None else axis

    bits = _bitwidth(attrs)
    sub_byte = attrs.signed and bits < 8
    if attrs.block_size is not None:
        channel, ints = lpbq_split(np.asarray(attrs.scale))
        block_axis = lpbq_block_axis(attrs)
        return QuantParams(
            QuantEncoding.BLOCKWISE_EXPANSION,
            bits,
            axis=stored(max(attrs.axis, 0)),
            scales=channel.tolist(),
            offsets=[0] * len(channel),
            block_axis=stored(block_axis),
            block_size=int(attrs.block_size[block_axis]),
            block_scale_bitwidth=LPBQ_BLOCK_SCALE_BITWIDTH,
            block_scales=ints.reshape(-1),
        )
    if attrs.axis >= 0:
        scales = np.asarray(attrs.scale, np.float32).reshape(-1)
        zps = (
            np.asarray(attrs.zero_point, np.int64).reshape(-1)
            if attrs.zero_point is not None
            else np.zeros(len(scales), np.int64)
        )
        encoding = QuantEncoding.BW_AXIS_SCALE_OFFSET if sub_byte else QuantEncoding.AXIS_SCALE_OFFSET
        return QuantParams(
            encoding, bits, axis=stored(attrs.axis), scales=scales.tolist(), offsets=(-zps).astype(int).tolist()
        )
    encoding = QuantEncoding.BW_SCALE_OFFSET if sub_byte else QuantEncoding.SCALE_OFFSET
    return QuantParams(encoding, bits, scale=float(attrs.scale), offset=-int(attrs.zero_point))


def _pack(values: np.ndarray, bits: int) -> np.ndarray:
    """Sub-byte signed values, lowest bits first within each byte."""
    per_byte = 8 // bits
    flat = (values.reshape(-1).astype(np.int64) & ((1 << bits) - 1)).astype(np.uint8)
    pad = (-len(flat)) % per_byte
    flat = np.concatenate([flat, np.zeros(pad, np.uint8)]).reshape(-1, per_byte)
    packed = np.zeros(len(flat), np.uint8)
    for i in range(per_byte):
        packed |= (flat[:, i] << (i * bits)).astype(np.uint8)
    return packed


_STORAGE_NUMPY = {
    DataType.UFIXED_POINT_8: np.uint8,
    DataType.UFIXED_POINT_16: np.uint16,
    DataType.SFIXED_POINT_8: np.int8,
    DataType.SFIXED_POINT_16: np.int16,
    DataType.SFIXED_POINT_32: np.int32,
}


def stored_data(values: np.ndarray, attrs: QuantAttrs) -> np.ndarray:
    """Bytes-ready array of integer values (already in stored layout)."""
    data_type = qnn_quant_dtype(attrs)
    if data_type == DataType.SFIXED_POINT_4:
        return _pack(values, _bitwidth(attrs))
    return np.ascontiguousarray(values.astype(_STORAGE_NUMPY[data_type]))


# int32 encoding of an all-zero bias / beta the builders add (a FLOAT_32 one is refused by HTP
# in a quantized op); any scale represents 0 exactly. Range as the quantizer's int32 bias.
ZERO_INT32_ATTRS = QuantAttrs(1.0, 0, -(2**31 - 128), 2**31 - 128, torch.int32)


def exact_scalar_attrs(value: float, like: Optional[QuantAttrs] = None) -> Tuple[np.ndarray, QuantAttrs]:
    """A one-element ([1]: HTP refuses rank 0) quantized constant holding `value`: q = qmax
    (or 0 with zero point qmax for a negative value), scale = |value| / qmax, in the data type
    of `like` (an unsigned activation encoding; HTP wants both operands of a 16-bit op 16-bit),
    UFIXED_POINT_8 when None. Against QNN, q = qmax measured 100% exact on 8-bit x + 2.5,
    x * -3, 2 - x (q = 1, scale = |value|: 25%, 2 steps) and 16-bit division 25 steps (553)."""
    qmin, qmax, dtype = (
        (like.qmin, like.qmax, like.dtype) if like is not None and like.qmin >= 0 else (0, 255, torch.uint8)
    )
    value = float(np.float32(value))
    if value == 0.0:
        return np.array([0], np.int64), QuantAttrs(1.0, 0, qmin, qmax, dtype)
    scale = float(np.float32(abs(value) / qmax))
    if value > 0:
        return np.array([qmax], np.int64), QuantAttrs(scale, 0, qmin, qmax, dtype)
    return np.array([0], np.int64), QuantAttrs(scale, qmax, qmin, qmax, dtype)


# ---- Q/DQ edge ops --------------------------------------------------------------------
def _edge_ops():
    from executorch.exir.dialects._ops import ops as exir_ops

    qd = exir_ops.edge.quantized_decomposed
    quantize = {qd.quantize_per_tensor.default, qd.quantize_per_tensor.tensor}
    dequantize = {qd.dequantize_per_tensor.default, qd.dequantize_per_tensor.tensor, qd.dequantize_per_channel.default}
    try:
        dequantize.add(exir_ops.edge.torchao.dequantize_affine.default)
    except (AttributeError, RuntimeError):
        pass
    return quantize, dequantize


QUANTIZE_OPS, DEQUANTIZE_OPS = _edge_ops()
QUANTIZE_OPS |= {
    torch.ops.quantized_decomposed.quantize_per_tensor.default,
    torch.ops.quantized_decomposed.quantize_per_tensor.tensor,
}
DEQUANTIZE_OPS |= {
    torch.ops.quantized_decomposed.dequantize_per_tensor.default,
    torch.ops.quantized_decomposed.dequantize_per_tensor.tensor,
    torch.ops.quantized_decomposed.dequantize_per_channel.default,
}


def is_quantize(node: object) -> bool:
    return getattr(node, "op", None) == "call_function" and node.target in QUANTIZE_OPS


def is_dequantize(node: object) -> bool:
    return getattr(node, "op", None) == "call_function" and node.target in DEQUANTIZE_OPS
