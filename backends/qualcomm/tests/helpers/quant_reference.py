"""Numpy reference of the quantized-graph semantics of docs/ops.md, and hand-built
quantized payloads for the engine kernel tests (engine/test_quant_kernels.py).

real = scale * (q + offset); quantize: q = clamp(rne(x * (1/scale)) - offset)
(float32, like the PT2E QDQ reference); integer ops are compared against
f(dequantized inputs) computed in float64 and requantized.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from backends.qualcomm import _qnn_delegate as qd
from backends.qualcomm.serialization import qnn_payload_generated as gen
from backends.qualcomm.tests.helpers.payload_builder import GraphBuilder

E = gen.QnnQuantEncoding
DT = gen.QnnDataType
U8, U16 = DT.UFIXED_POINT_8, DT.UFIXED_POINT_16
S8, S4, S16, S32 = DT.SFIXED_POINT_8, DT.SFIXED_POINT_4, DT.SFIXED_POINT_16, DT.SFIXED_POINT_32
QMAX = {U8: 255, U16: 65535}
STORAGE = {U8: np.uint8, U16: np.uint16}
APP_WRITE, APP_READ, NATIVE, STATIC = (
    gen.QnnTensorType.APP_WRITE,
    gen.QnnTensorType.APP_READ,
    gen.QnnTensorType.NATIVE,
    gen.QnnTensorType.STATIC,
)


# ---- encodings -----------------------------------------------------------------------------
def act_quant(x: np.ndarray, dtype: int = U8) -> dict:
    """Asymmetric per-tensor encoding covering x (and 0)."""
    lo, hi = min(float(x.min()), 0.0), max(float(x.max()), 0.0)
    scale = (hi - lo) / QMAX[dtype] or 1.0
    zero_point = int(np.clip(np.rint(-lo / scale), 0, QMAX[dtype]))
    return dict(
        encoding=E.SCALE_OFFSET, bitwidth=8 if dtype == U8 else 16, scale=scale, offset=-zero_point, dtype=dtype
    )


def quantize(x: np.ndarray, q: dict, htp: bool = True) -> np.ndarray:
    """float32 -> codes as the Quantize op: uint8 as QNN HTP (x * (1/scale) rounded to float16,
    halves away from zero; the engine does the same); otherwise (or htp=False) to the nearest even."""
    inv = np.float32(1.0 / np.float64(np.float32(q["scale"])))
    v = x.astype(np.float32) * inv
    if q["dtype"] == U8 and htp:
        v = v.astype(np.float16).astype(np.float64)
        r = np.sign(v) * np.floor(np.abs(v) + 0.5) - q["offset"]
    else:
        r = np.rint(v) - q["offset"]
    return np.clip(r, 0, QMAX[q["dtype"]]).astype(np.int64)


def dequantize(qv: np.ndarray, q: dict) -> np.ndarray:
    return (qv.astype(np.float32) + np.float32(q["offset"])) * np.float32(q["scale"])


def requantize(real: np.ndarray, q: dict) -> np.ndarray:
    """docs/ops.md: clamp(rne(real / out_scale) - out_offset) (float64 real)."""
    r = np.rint(real / np.float64(np.float32(q["scale"]))) - q["offset"]
    return np.clip(r, 0, QMAX[q["dtype"]]).astype(np.int64)


def weight_quant(w: np.ndarray, axis: Optional[int], bits: int) -> Tuple[np.ndarray, dict, np.ndarray]:
    """Symmetric weight quantization (per tensor when axis is None): (q, params, scale array)."""
    qmax = 2 ** (bits - 1) - 1
    reduce_axes = tuple(i for i in range(w.ndim) if i != axis) if axis is not None else None
    amax = np.abs(w).max(axis=reduce_axes, keepdims=axis is not None)
    scale = (np.maximum(amax, 1e-8) / qmax).astype(np.float32)
    qv = np.clip(np.rint(w / scale), -qmax - 1, qmax).astype(np.int64)
    bw = bits < 8
    if axis is None:
        params = dict(encoding=E.BW_SCALE_OFFSET if bw else E.SCALE_OFFSET, bitwidth=bits, scale=float(scale))
    else:
        params = dict(
            encoding=E.BW_AXIS_SCALE_OFFSET if bw else E.AXIS_SCALE_OFFSET,
            bitwidth=bits,
            axis=axis,
            scales=scale.reshape(-1),
            offsets=np.zeros(scale.size, np.int32),
        )
    return qv, params, np.broadcast_to(scale, w.shape)


def lpbq_quant(w: np.ndarray, axis: int, block_axis: int, block_size: int) -> Tuple[np.ndarray, dict, np.ndarray]:
    """4-bit weights, float scale per channel x 4-bit integer scale per block."""
    wm = np.moveaxis(w, (axis, block_axis), (0, 1))  # [C, D, ...rest]
    c, d = wm.shape[:2]
    blocks = wm.reshape(c, d // block_size, block_size, -1)
    bmax = np.abs(blocks).max(axis=(2, 3))  # [C, nb]
    ch_scale = (np.maximum(bmax.max(axis=1), 1e-8) / (7 * 15)).astype(np.float32)
    bs = np.clip(np.ceil(bmax / (7 * ch_scale[:, None])), 1, 15).astype(np.int64)
    eff = ch_scale[:, None] * bs  # [C, nb]
    eff_full = np.repeat(eff, block_size, axis=1).reshape(c, d, *([1] * (wm.ndim - 2)))
    eff_full = np.broadcast_to(eff_full, wm.shape)
    qv = np.clip(np.rint(wm / eff_full), -8, 7).astype(np.int64)
    params = dict(
        encoding=E.BLOCKWISE_EXPANSION,
        bitwidth=4,
        axis=axis,
        block_axis=block_axis,
        block_size=block_size,
        block_scale_bitwidth=4,
        scales=ch_scale,
        offsets=np.zeros(c, np.int32),
        block_scales=bs.reshape(-1).astype(np.uint8),
    )
    back = lambda a: np.moveaxis(a, (0, 1), (axis, block_axis))  # noqa: E731
    return back(qv), params, back(np.asarray(eff_full, np.float32))


def lpbq_codes(qv: np.ndarray, params: dict) -> Tuple[np.ndarray, np.ndarray]:
    """LPBQ codes q and block scales k -> (8-bit per-channel codes k * q, channel scale
    broadcast to the weight shape): the weight HTP computes an LPBQ op with."""
    axis, block_axis, size = params["axis"], params["block_axis"], params["block_size"]
    qm = np.moveaxis(qv, (axis, block_axis), (0, 1))
    k = params["block_scales"].astype(np.int64).reshape(qm.shape[0], -1)
    k = np.repeat(k, size, axis=1).reshape(k.shape[0], -1, *([1] * (qm.ndim - 2)))
    scale = np.broadcast_to(np.asarray(params["scales"], np.float32).reshape(-1, *([1] * (qm.ndim - 1))), qm.shape)
    back = lambda a: np.moveaxis(a, (0, 1), (axis, block_axis))  # noqa: E731
    return back(qm * k), back(scale)


def pack_bits(qv: np.ndarray, bits: int) -> np.ndarray:
    """docs/ops.md packing: 8 -> int8 bytes; 4 / 2 -> low bits first."""
    flat = qv.reshape(-1).astype(np.int64)
    if bits == 8:
        return flat.astype(np.int8)
    if bits == 16:
        return flat.astype(np.int16)
    per = 8 // bits
    flat = np.concatenate([flat, np.zeros((-flat.size) % per, np.int64)]) & ((1 << bits) - 1)
    return (flat.reshape(-1, per) << (np.arange(per) * bits)).sum(axis=1).astype(np.uint8)


def weight_dtype(bits: int) -> int:
    return {8: S8, 4: S4, 2: S4, 16: S16}[bits]


def int32_bias(b: np.ndarray, scale: np.ndarray) -> Tuple[np.ndarray, dict]:
    """SFIXED_POINT_32 bias with scale = in_scale * w_scale (per channel, axis 0)."""
    scale = np.asarray(scale, np.float32).reshape(-1)
    qv = np.rint(b / scale).astype(np.int32)
    return qv, dict(
        encoding=E.AXIS_SCALE_OFFSET, bitwidth=32, axis=0, scales=scale, offsets=np.zeros(scale.size, np.int32)
    )


# ---- payloads ----------------------------------------------------------------------------------
class QGraph:
    """One op on quantized activations; float graph inputs/outputs through Quantize/Dequantize."""

    def __init__(self) -> None:
        self.g = GraphBuilder()
        self.feeds: List[np.ndarray] = []

    def act(self, name: str, x: np.ndarray, q: dict) -> int:
        xi = self.g.input(name, x.astype(np.float32))
        self.feeds.append(x.astype(np.float32))
        qi = self.g.tensor(name + "_q", NATIVE, x.shape, q["dtype"], quant=q)
        self.g.op("Quantize", [xi], [qi])
        return qi

    def static_q(self, name: str, data: np.ndarray, dims: Sequence[int], dtype: int, q: dict) -> int:
        return self.g.tensor(name, STATIC, dims, dtype, data=np.ascontiguousarray(data), quant=q)

    def static_f(self, name: str, data: np.ndarray) -> int:
        return self.g.static(name, data.astype(np.float32))

    def out(self, shape: Sequence[int], q: dict) -> int:
        self.out_q = q
        return self.g.tensor("y_q", NATIVE, shape, q["dtype"], quant=q)

    def run(self, op_type: str, inputs: List[int], out: int, **params) -> np.ndarray:
        """Runs the op; returns the integer output (recovered exactly from its Dequantize)."""
        self.g.op(op_type, inputs, [out], **params)
        shape = self.g.tensors[out]["dims"]
        y = self.g.output("y", shape)
        self.g.op("Dequantize", [out], [y])
        self.blob = self.g.blob()
        real = qd.run_payload(self.blob, self.feeds)[0]
        return (
            np.rint(real.astype(np.float64) / np.float32(self.out_q["scale"])).astype(np.int64) - self.out_q["offset"]
        )

    def kernel_path(self, op_type: str) -> str:
        """The code path the engine's kernel for the (one) op of `op_type` picked in the last run."""
        from backends.qualcomm.tests.helpers.runtime import test_hooks

        paths = [p for _, t, p in test_hooks().kernel_paths(self.blob) if t == op_type]
        assert len(paths) == 1, paths
        return paths[0]


def assert_within_one_step(got: np.ndarray, want: np.ndarray, min_exact: float = 0.99) -> Dict[str, float]:
    assert got.shape == want.shape, (got.shape, want.shape)
    diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
    exact = float((diff == 0).mean())
    assert diff.max() <= 1, f"max diff {diff.max()} steps"
    assert exact >= min_exact, f"exact fraction {exact:.4f} < {min_exact}"
    stats = dict(exact=exact, off_by_one=float((diff == 1).mean()))
    return stats


def conv_ref(x, w_hwio, b, stride, pad, groups):
    """float64 NHWC conv2d with HWIO weights."""
    xt = torch.from_numpy(x.astype(np.float64)).permute(0, 3, 1, 2)
    wt = torch.from_numpy(np.ascontiguousarray(w_hwio, np.float64)).permute(3, 2, 0, 1)
    y = F.conv2d(xt, wt, torch.from_numpy(b.astype(np.float64)), stride=stride, padding=pad, groups=groups)
    return y.permute(0, 2, 3, 1).numpy()


def int_conv(xq, wq, stride, pad, groups):
    """Exact integer NHWC conv of (zero-point-free) integer inputs, HWIO weights."""
    return np.rint(
        conv_ref(xq.astype(np.float64), wq.astype(np.float64), np.zeros(wq.shape[-1]), stride, pad, groups)
    ).astype(np.int64)


def gen_bool() -> int:
    from backends.qualcomm.tests.helpers.payload_builder import BOOL

    return BOOL
