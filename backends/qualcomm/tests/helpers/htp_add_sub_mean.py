"""A numpy model of QNN HTP's integer ElementWiseAdd / ElementWiseSubtract and spatial
ReduceMean (measured on QNN 2.51, SM8650), and the one-op graphs that run them on the host
engine (float IO, Quantize / Dequantize around the op) or on QNN (quantized graph IO)."""

from __future__ import annotations

import math
from typing import List, Sequence, Tuple

import numpy as np

from backends.qualcomm.serialization.payload_writer import serialize_graphs
from backends.qualcomm.serialization.qnn_graph import (
    DataType,
    QnnGraph,
    QnnOp,
    QnnTensor,
    QuantEncoding,
    QuantParams,
    TensorType,
)
from backends.qualcomm.utils.runtime_options import require_extension

Enc = Tuple[float, int]  # (scale, QNN offset): real = scale * (q + offset)


def htp_add_sub(a: np.ndarray, b: np.ndarray, ea: Enc, eb: Enc, eo: Enc, subtract: bool, bits: int) -> np.ndarray:
    """QNN HTP's quantized add / subtract (measured on QNN 2.51, SM8650)."""
    (sa, oa), (sb, ob), (so, oo) = ea, eb, eo
    ia = float(np.float32(sa)) / float(np.float32(so))
    ib = (-1.0 if subtract else 1.0) * float(np.float32(sb)) / float(np.float32(so))
    if bits == 8:
        big = max(max(ia, 0) + max(ib, 0), -(min(ia, 0) + min(ib, 0)))
        shift = min(15, 14 - math.frexp(big)[1])
    else:
        shift = min(16, 15 - math.frexp(max(abs(ia), abs(ib)))[1])
    ka, kb = math.floor(ia * 2**shift + 0.5), math.floor(ib * 2**shift + 0.5)
    c = ka * oa + kb * ob - oo * 2**shift + 2 ** (shift - 1)
    if bits == 8:
        c = ((c + 128) // 256) * 256
    acc = (ka * a.astype(np.int64) + kb * b.astype(np.int64) + c) >> shift
    return np.clip(acc, 0, 2**bits - 1)


def _qdt(bits: int) -> int:
    return DataType.UFIXED_POINT_8 if bits == 8 else DataType.UFIXED_POINT_16


def _quant(enc: Enc, bits: int) -> QuantParams:
    return QuantParams(encoding=QuantEncoding.SCALE_OFFSET, bitwidth=bits, scale=float(enc[0]), offset=int(enc[1]))


class Case:
    """One binary op: inputs are (dims, enc) graph inputs or (dims, enc, static codes)."""

    def __init__(self, op: str, a, b, out: Tuple[Sequence[int], Enc], bits: int):
        self.op, self.ins, self.out, self.bits = op, [a, b], out, bits


def graph(cases: List[Case], quantized_io: bool) -> bytes:
    """One graph holding every case. quantized_io: uint8 / uint16 graph IO (QNN);
    else float IO with Quantize / Dequantize around each op (host engine)."""
    tensors, ops, gin, gout = [], [], [], []

    def add(name, kind, dt, dims, quant=None, data=None):
        tensors.append(QnnTensor(len(tensors), name, kind, dt, list(dims), quant, data))
        return len(tensors) - 1

    for c, case in enumerate(cases):
        ids = []
        for i, spec in enumerate(case.ins):
            dims, enc = spec[0], spec[1]
            q = _quant(enc, case.bits)
            if len(spec) == 3:
                data = np.asarray(spec[2], dtype=np.uint8 if case.bits == 8 else np.uint16).reshape(dims)
                ids.append(add(f"c{c}_{i}", TensorType.STATIC, _qdt(case.bits), dims, q, data))
            elif quantized_io:
                ids.append(add(f"in{c}_{i}", TensorType.APP_WRITE, _qdt(case.bits), dims, q))
                gin.append(ids[-1])
            else:
                f = add(f"in{c}_{i}", TensorType.APP_WRITE, DataType.FLOAT_32, dims)
                gin.append(f)
                ids.append(add(f"q{c}_{i}", TensorType.NATIVE, _qdt(case.bits), dims, q))
                ops.append(QnnOp(f"quant{c}_{i}", "Quantize", [f], [ids[-1]]))
        dims, enc = case.out
        if quantized_io:
            y = add(f"out{c}", TensorType.APP_READ, _qdt(case.bits), dims, _quant(enc, case.bits))
            ops.append(QnnOp(f"op{c}", case.op, ids, [y]))
            gout.append(y)
        else:
            y = add(f"y{c}", TensorType.NATIVE, _qdt(case.bits), dims, _quant(enc, case.bits))
            ops.append(QnnOp(f"op{c}", case.op, ids, [y]))
            f = add(f"out{c}", TensorType.APP_READ, DataType.FLOAT_32, dims)
            ops.append(QnnOp(f"deq{c}", "Dequantize", [y], [f]))
            gout.append(f)
    return serialize_graphs([QnnGraph("g", tensors, ops, gin, gout)])


def live_inputs(cases: List[Case]):
    return [(case, spec) for case in cases for spec in case.ins if len(spec) == 2]


def run_host(cases: List[Case], codes: List[np.ndarray]) -> List[np.ndarray]:
    """Host engine outputs (integer codes) for integer input codes, through float IO."""
    arrays = [
        (np.float32(spec[1][0]) * (x.astype(np.float32) + np.float32(spec[1][1]))).astype(np.float32).reshape(spec[0])
        for (case, spec), x in zip(live_inputs(cases), codes)
    ]
    outs = require_extension().run_payload(graph(cases, quantized_io=False), arrays)
    return [
        (np.rint(np.asarray(y, np.float64) / np.float32(case.out[1][0])) - case.out[1][1]).astype(np.int64)
        for case, y in zip(cases, outs)
    ]


def expected(case: Case, codes: List[np.ndarray]) -> np.ndarray:
    vals = []
    for spec in case.ins:
        vals.append(np.asarray(spec[2]).reshape(spec[0]) if len(spec) == 3 else codes.pop(0).reshape(spec[0]))
    return htp_add_sub(
        vals[0], vals[1], case.ins[0][1], case.ins[1][1], case.out[1], case.op == "ElementWiseSubtract", case.bits
    )


def random_cases(rng: np.random.Generator, bits: int, n: int, shape=(1, 8, 32)) -> Tuple[List[Case], List[np.ndarray]]:
    """Random encodings (scale ratios 1/50..50, any offsets), full, broadcast and scalar operands."""
    qmax = 2**bits - 1
    lo, hi = (2e-3, 1e-1) if bits == 8 else (2e-5, 1e-3)
    cases, codes = [], []
    for i in range(n):
        s = np.exp(rng.uniform(np.log(lo), np.log(hi), 3)).astype(np.float32)
        o = [int(v) for v in rng.integers(-qmax, 1, 3)]
        op = "ElementWiseSubtract" if i % 2 else "ElementWiseAdd"
        a = (shape, (s[0], o[0]))
        kind = i % 3
        if kind == 0:
            b = (shape, (s[1], o[1]))
        elif kind == 1:
            b = ((1, 1, shape[-1]), (s[1], o[1]))
        else:  # static scalar constant, as the builders encode it (q = qmax)
            b = ((1,), (s[1], o[1]), [qmax])
        cases.append(Case(op, a, b, (shape, (s[2], o[2])), bits))
        for spec in (a, b):
            if len(spec) == 2:
                codes.append(rng.integers(0, qmax + 1, int(np.prod(spec[0]))))
    return cases, codes


# ---- ReduceMean (reduce_mean_quant.cpp) -----------------------------------------------------------
def htp_mean(x: np.ndarray, axes: Sequence[int], ei: Enc, eo: Enc, bits: int) -> np.ndarray:
    """QNN HTP's quantized mean over non-depth axes (measured on QNN 2.51, SM8650)."""
    (si, oi), (so, oo) = ei, eo
    count = int(np.prod([x.shape[a] for a in axes]))
    m = float(np.float32(si)) / (count * float(np.float32(so)))
    shift = 15 - math.frexp(m)[1]
    mult = math.floor(m * 2**shift + 0.5)
    c = mult * count * oi - oo * 2**shift + 2 ** (shift - 1)
    if bits == 16 and shift >= 22:
        c += 2 ** (shift - 1)
    s = x.astype(np.int64).sum(axis=tuple(axes), keepdims=True)
    return np.clip((mult * s + c) >> shift, 0, 2**bits - 1)


def mean_graph(dims, axes, ei: Enc, eo: Enc, bits: int, quantized_io: bool) -> bytes:
    from backends.qualcomm.serialization.qnn_graph import bool_scalar, uint32_tensor

    out_dims = [1 if d in axes else n for d, n in enumerate(dims)]
    params = [uint32_tensor("axes", list(axes)), bool_scalar("keep_dims", True)]
    tensors = []
    if quantized_io:
        tensors = [
            QnnTensor(0, "x", TensorType.APP_WRITE, _qdt(bits), list(dims), _quant(ei, bits)),
            QnnTensor(1, "y", TensorType.APP_READ, _qdt(bits), out_dims, _quant(eo, bits)),
        ]
        ops = [QnnOp("mean", "ReduceMean", [0], [1], params)]
        return serialize_graphs([QnnGraph("g", tensors, ops, [0], [1])])
    tensors = [
        QnnTensor(0, "xf", TensorType.APP_WRITE, DataType.FLOAT_32, list(dims)),
        QnnTensor(1, "x", TensorType.NATIVE, _qdt(bits), list(dims), _quant(ei, bits)),
        QnnTensor(2, "y", TensorType.NATIVE, _qdt(bits), out_dims, _quant(eo, bits)),
        QnnTensor(3, "yf", TensorType.APP_READ, DataType.FLOAT_32, out_dims),
    ]
    ops = [
        QnnOp("q", "Quantize", [0], [1]),
        QnnOp("mean", "ReduceMean", [1], [2], params),
        QnnOp("dq", "Dequantize", [2], [3]),
    ]
    return serialize_graphs([QnnGraph("g", tensors, ops, [0], [3])])


def run_host_mean(x, axes, ei: Enc, eo: Enc, bits: int) -> np.ndarray:
    xf = (np.float32(ei[0]) * (x.astype(np.float32) + np.float32(ei[1]))).astype(np.float32)
    (y,) = require_extension().run_payload(mean_graph(x.shape, axes, ei, eo, bits, False), [xf])
    return (np.rint(np.asarray(y, np.float64) / np.float32(eo[0])) - eo[1]).astype(np.int64)


def mean_cases(rng: np.random.Generator, bits: int, n: int):
    """(x codes NHWC, axes, input enc, output enc): spatial means, scale ratios 0.3..60."""
    qmax = 2**bits - 1
    lo, hi = (2e-3, 1e-1) if bits == 8 else (2e-5, 1e-3)
    out = []
    for i in range(n):
        hw = (4, 7, 3)[i % 3]
        si = float(np.exp(rng.uniform(np.log(lo), np.log(hi))))
        so = si / float(np.exp(rng.uniform(np.log(0.3), np.log(60))))
        oi, oo = (int(v) for v in rng.integers(-qmax, 1, 2))
        base = rng.integers(0, qmax + 1, (1, 1, 1, 64))
        x = np.clip(base + rng.integers(-qmax // 8, qmax // 8 + 1, (1, hw, hw, 64)), 0, qmax)
        out.append((x, (1, 2), (si, oi), (so, oo)))
    return out
