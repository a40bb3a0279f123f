"""Numpy model of QNN HTP's requantization of an integer accumulator (uint8
activations in and out, int8 weights), the arithmetic the host engine's integer
Conv2d / DepthWiseConv2d / FullyConnected / MatMul kernels reproduce
(backends/qualcomm/runtime/engine/HtpRequant.h; measured against QNN 2.51 HTP in
qnn/test_fidelity_weighted.py):

    m = in_scale * w_scale / out_scale; e = floor(-log2 m); s = max(0, e - 3)
    M = round(m * 2^(s + 15)); a = acc + floor(f32(bias_real) / f32(in_scale * w_scale))
    y = s > 0 ? floor(((2 floor(a / 2^s) + 1) M + 2^15) / 2^16) : floor((a M + 2^14) / 2^15)
    q = clamp(y + zero_point, 0, 255)
"""

from __future__ import annotations

from typing import Optional

import numpy as np

F32 = np.float32


def htp_shift_mult(m: np.ndarray):
    """(s, M) per multiplier m > 0."""
    m = np.asarray(m, np.float64)
    frac, k = np.frexp(m)
    e = np.where(frac == 0.5, 1 - k, -k)
    s = np.maximum(0, e - 3).astype(np.int64)
    mult = np.floor(np.ldexp(m, (s + 15).astype(np.int32)) + 0.5).astype(np.int64)
    return s, mult


def htp_bias_acc(bias_real: np.ndarray, in_scale: float, w_scale: np.ndarray) -> np.ndarray:
    """The bias in accumulator units as HTP folds it (float32 division, floor)."""
    unit = F32(in_scale) * np.asarray(w_scale, F32)
    return np.floor((np.asarray(bias_real, F32) / unit).astype(np.float64)).astype(np.int64)


def htp_requantize(
    acc: np.ndarray,
    in_scale: float,
    w_scale,
    out_scale: float,
    out_zero_point: int,
    bias_real: Optional[np.ndarray] = None,
    qmax: int = 255,
    unshifted: bool = False,
) -> np.ndarray:
    """acc: exact integer accumulator sum (q_in - zp_in) * w, last axis = output channel;
    w_scale: per-tensor scalar or per-channel array; bias_real: float32 bias per channel.
    unshifted: HTP's strided DepthWiseConv2d path (no pre-shift, M = round(m * 2^(e + 15)),
    y = (a M + 2^(e + 14)) >> (e + 15))."""
    acc = np.asarray(acc, np.int64)
    w_scale = np.broadcast_to(np.asarray(w_scale, F32), acc.shape[-1:])
    m = np.float64(F32(in_scale)) * w_scale.astype(np.float64) / np.float64(F32(out_scale))
    a = acc + (htp_bias_acc(bias_real, in_scale, w_scale) if bias_real is not None else 0)
    if unshifted:
        frac, k = np.frexp(m)
        sh = (np.where(frac == 0.5, 1 - k, -k) + 15).astype(np.int64)
        mult = np.floor(np.ldexp(m, sh.astype(np.int32)) + 0.5).astype(np.int64)
        return np.clip(((a * mult + (np.int64(1) << (sh - 1))) >> sh) + out_zero_point, 0, qmax)
    s, mult = htp_shift_mult(m)
    u = a >> s
    y = np.where(s > 0, ((2 * u + 1) * mult + (1 << 15)) >> 16, (a * mult + (1 << 14)) >> 15)
    return np.clip(y + out_zero_point, 0, qmax)


def htp_requantize16(
    acc: np.ndarray,
    in_scale: float,
    in_zero_point: int,
    wsum: np.ndarray,
    w_scale,
    out_scale: float,
    out_zero_point: int,
    bias_real: Optional[np.ndarray] = None,
) -> np.ndarray:
    """uint16 activations in and out, int8 weights (HtpRequant.h htp_requant16_of): the
    accumulator of x - 32768 shifted right by 8, plus round((32768 - zp) * wsum / 256) and
    trunc(f32(bias) / f32(in_scale * w_scale) / 256), times round(m * 2^31) >> 23, half up."""
    acc = np.asarray(acc, np.int64)
    w_scale = np.broadcast_to(np.asarray(w_scale, F32), acc.shape[-1:])
    m = np.float64(F32(in_scale)) * w_scale.astype(np.float64) / np.float64(F32(out_scale))
    pre = (in_zero_point - 32768) * np.asarray(wsum, np.int64)
    post = (-pre + 128) >> 8
    if bias_real is not None:
        unit = F32(in_scale) * w_scale
        post = post + np.trunc((np.asarray(bias_real, F32) / unit).astype(np.float64) / 256).astype(np.int64)
    mult = np.floor(np.ldexp(m, 31) + 0.5).astype(np.int64)
    y = ((((acc + pre) >> 8) + post) * mult + (1 << 22)) >> 23
    return np.clip(y + out_zero_point, 0, 65535)
