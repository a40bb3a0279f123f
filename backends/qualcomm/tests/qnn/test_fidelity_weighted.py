"""Real QNN (HTP 2.51 emulation, SM8650): the host engine's quantized FullyConnected,
Conv2d (padding, stride, groups, dilation, zero bias), DepthWiseConv2d and MatMul against
QNN's, on random encodings, weights and biases (per-tensor and per-channel int8 weights).
QNN runs each op with uint8 / uint16 graph IO (no Quantize / Dequantize next to it); the host
engine gets the same codes through float IO, which it quantizes exactly.

uint8 activations: the host follows HTP's fixed-point requantization (HtpRequant.h) and must
equal QNN on >= 99.9% of the elements, never more than 1 step apart. uint16 activations: the
host follows HTP's 16-bit path (accumulator of x - 32768 shifted by 8, bias / zero-point
constant in units of 256, htp_requant16_of); a small constant offset of HTP's is not
reproduced, so that test holds the measured share (99.8% / 98.7%), max 1 step."""

from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from backends.qualcomm.serialization import qnn_payload_generated as gen
from backends.qualcomm.serialization.payload_writer import QnnHtpSection, wrap_context_binary
from backends.qualcomm.tests.helpers.htp_requant_reference import htp_requantize
from backends.qualcomm.tests.helpers.payload_builder import U32, GraphBuilder, scalar, u32
from backends.qualcomm.tests.helpers.quant_reference import S8, S32, U8, U16, E
from backends.qualcomm.tests.helpers.runtime import needs_qnn
from backends.qualcomm.utils.qnn_context import payload_of
from backends.qualcomm.utils.runtime_options import require_extension

pytestmark = [needs_qnn, pytest.mark.usefixtures("real_qnn")]  # real_qnn: conftest.py
SM8650 = 57
T = gen.QnnTensorType
F32 = gen.QnnDataType.FLOAT_32
BOOL = gen.QnnDataType.BOOL_8


def act(bits: int, scale: float, zero_point: int) -> dict:
    return dict(encoding=E.SCALE_OFFSET, bitwidth=bits, scale=float(np.float32(scale)), offset=-int(zero_point))


def weight_enc(scales: np.ndarray, per_channel: bool, axis: int) -> dict:
    if not per_channel:
        return dict(encoding=E.SCALE_OFFSET, bitwidth=8, scale=float(scales[0]))
    return dict(
        encoding=E.AXIS_SCALE_OFFSET, bitwidth=8, axis=axis, scales=scales, offsets=np.zeros(scales.size, np.int32)
    )


def bias_enc(scales: np.ndarray, per_channel: bool) -> dict:
    if not per_channel:
        return dict(encoding=E.SCALE_OFFSET, bitwidth=32, scale=float(scales[0]), offset=0)
    return dict(
        encoding=E.AXIS_SCALE_OFFSET, bitwidth=32, axis=0, scales=scales, offsets=np.zeros(scales.size, np.int32)
    )


class OneOp(GraphBuilder):
    """One quantized op; quantized graph IO for QNN, float IO + Quantize / Dequantize for
    the host engine."""

    def __init__(self, float_io: bool):
        super().__init__()
        self.float_io = float_io

    def qin(self, name, shape, dtype, enc) -> int:
        if not self.float_io:
            return self.tensor(name, T.APP_WRITE, shape, dtype, quant=enc)
        f = self.tensor(name + "_f", T.APP_WRITE, shape, F32)
        q = self.tensor(name, T.NATIVE, shape, dtype, quant=enc)
        self.op("Quantize", [f], [q])
        return q

    def qout(self, shape, dtype, enc) -> int:
        if not self.float_io:
            return self.tensor("y", T.APP_READ, shape, dtype, quant=enc)
        q = self.tensor("y_q", T.NATIVE, shape, dtype, quant=enc)
        self.pending = (q, shape)
        return q

    def done(self) -> "OneOp":
        if self.float_io:
            q, shape = self.pending
            self.op("Dequantize", [q], [self.tensor("y", T.APP_READ, shape, F32)])
        return self


def run_both(build, codes: List[np.ndarray], encs: List[dict], out_enc: dict) -> Tuple[np.ndarray, np.ndarray]:
    """(QNN's output codes, the host engine's) of build(float_io)."""
    ext = require_extension()
    blob = build(False).done().blob()
    binary, graphs = ext.qnn_compile(blob, SM8650)
    section = QnnHtpSection(bytes(binary), SM8650, [(str(n), list(ids)) for n, ids in graphs])
    (qnn,), _ = ext.run_payload_qnn(wrap_context_binary(payload_of(blob), section), codes)
    floats = [
        ((c.astype(np.float64) + e["offset"]) * np.float32(e["scale"])).astype(np.float32) for c, e in zip(codes, encs)
    ]
    host = ext.run_payload(build(True).done().blob(), floats)[0]
    host = np.rint(np.asarray(host, np.float64) / np.float32(out_enc["scale"])) - out_enc["offset"]
    return np.asarray(qnn).astype(np.int64), host.astype(np.int64)


class Tally:
    def __init__(self):
        self.equal = self.total = self.worst = 0

    def add(self, qnn: np.ndarray, host: np.ndarray) -> None:
        qnn = qnn.reshape(host.shape)
        self.equal += int((qnn == host).sum())
        self.total += qnn.size
        self.worst = max(self.worst, int(np.abs(qnn - host).max()))

    @property
    def exact(self) -> float:
        return self.equal / self.total


def weighted_case(rng, kind: str, bits: int, per_channel: bool):
    """(build, codes, encodings, out encoding, acc, in scale, w scales, bias_real) of one
    random FullyConnected / Conv2d / DepthWiseConv2d."""
    qmax = 255 if bits == 8 else 65535
    dtype = U8 if bits == 8 else U16
    cin, cout, k, stride, pad, dil, group = 8, 8, 1, 1, 0, 1, 1
    if kind == "fc":
        xshape, wshape = (6, 24), (cout, 24)
    else:
        k, stride, pad, dil, group = {
            "conv3x3": (3, 1, 1, 1, 1),
            "stride_pad": (3, 2, 1, 1, 1),
            "groups": (3, 1, 1, 1, 2),
            "dilation": (3, 1, 2, 2, 1),
            "no_bias": (1, 1, 0, 1, 1),
            "depthwise": (3, 1, 1, 1, cin),
            "depthwise_s2": (3, 2, 1, 1, cin),
        }[kind]
        xshape = (1, 7, 7, cin)
        wshape = (k, k, 1 if kind.startswith("depthwise") else cin // group, cout)
    x = rng.integers(0, qmax + 1, size=xshape).astype(np.uint8 if bits == 8 else np.uint16)
    w = rng.integers(-127, 128, size=wshape).astype(np.int8)
    in_scale = float(np.float32(10 ** rng.uniform(-3, -1) / (1 if bits == 8 else 256)))
    zp = int(rng.integers(0, qmax + 1))
    axis = 0 if kind == "fc" else 3
    ws = (10 ** rng.uniform(-3, -1.5, size=cout) if per_channel else np.full(cout, 10 ** rng.uniform(-3, -1.5))).astype(
        np.float32
    )
    bscale = (np.float32(in_scale) * ws).astype(np.float32)
    b = np.zeros(cout, np.int32) if kind == "no_bias" else rng.integers(-20000, 20000, size=cout).astype(np.int32)
    if kind == "fc":
        acc = (x.astype(np.int64) - zp) @ w.T.astype(np.int64)
    else:
        xt = torch.from_numpy(x.astype(np.float64) - zp).permute(0, 3, 1, 2)
        wt = torch.from_numpy(w.astype(np.float64)).permute(3, 2, 0, 1)
        acc = np.rint(
            F.conv2d(xt, wt, stride=stride, padding=pad, dilation=dil, groups=group).permute(0, 2, 3, 1).numpy()
        ).astype(np.int64)
    real = (acc + b) * (np.float64(in_scale) * ws.astype(np.float64))
    lo, hi = min(real.min(), 0.0), max(real.max(), 0.0)
    out_scale = float(np.float32((hi - lo) / qmax * rng.uniform(0.6, 1.0)))
    out_enc = act(bits, out_scale, int(np.clip(np.rint(-lo / out_scale), 0, qmax)))
    x_enc = act(bits, in_scale, zp)

    def build(float_io: bool, graph: Optional[OneOp] = None) -> OneOp:
        g = OneOp(float_io) if graph is None else graph
        xi = g.qin("x", x.shape, dtype, x_enc)
        wi = g.tensor("w", T.STATIC, w.shape, S8, data=np.ascontiguousarray(w), quant=weight_enc(ws, per_channel, axis))
        bi = g.tensor("b", T.STATIC, b.shape, S32, data=b, quant=bias_enc(bscale, per_channel))
        yi = g.qout(acc.shape, dtype, out_enc)
        if kind == "fc":
            g.op("FullyConnected", [xi, wi, bi], [yi])
        else:
            params = dict(
                stride=u32([stride, stride]), pad_amount=u32([[pad, pad], [pad, pad]]), dilation=u32([dil, dil])
            )
            if not kind.startswith("depthwise"):
                params["group"] = scalar(U32, group)
            g.op("DepthWiseConv2d" if kind.startswith("depthwise") else "Conv2d", [xi, wi, bi], [yi], **params)
        return g

    return build, [x], [x_enc], out_enc, acc, in_scale, ws, b.astype(np.float32) * bscale


KINDS = ["fc", "conv3x3", "stride_pad", "groups", "dilation", "no_bias", "depthwise", "depthwise_s2"]
KINDS_16 = KINDS[:-1]  # the strided depthwise path is measured for uint8 only


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
def test_weighted_8a8w_bit_exact_with_qnn(per_channel):
    rng = np.random.default_rng(7 + per_channel)
    tally = Tally()
    for _seed in range(3):
        for kind in KINDS:
            build, codes, encs, out_enc, acc, in_scale, ws, bias_real = weighted_case(rng, kind, 8, per_channel)
            qnn, host = run_both(build, codes, encs, out_enc)
            tally.add(qnn, host)
            # the host's arithmetic is the numpy model of HtpRequant.h
            model = htp_requantize(
                acc, in_scale, ws, out_enc["scale"], -out_enc["offset"], bias_real, unshifted=kind == "depthwise_s2"
            )
            np.testing.assert_array_equal(host.reshape(model.shape), model)
    assert tally.worst <= 1
    assert tally.exact >= 0.999, f"{tally.exact:.5f} of {tally.total} elements equal to QNN's"


def test_matmul_8a8w_bit_exact_with_qnn():
    """uint8 x uint8 MatMul with the second input's zero point 128 (QNN treats other zero
    points of the second input in a way not reproduced yet: ~96% exact, up to ~13 steps)."""
    rng = np.random.default_rng(11)
    tally = Tally()
    for _ in range(8):
        m, k, n = (int(v) for v in rng.integers(2, 24, size=3))
        a = rng.integers(0, 256, size=(2, m, k)).astype(np.uint8)
        b = rng.integers(0, 256, size=(2, k, n)).astype(np.uint8)
        ae = act(8, 10 ** rng.uniform(-3, -1), int(rng.integers(0, 256)))
        be = act(8, 10 ** rng.uniform(-3, -1), 128)
        ye = act(8, ae["scale"] * be["scale"] / 10 ** rng.uniform(-4, -1.3), int(rng.integers(0, 256)))

        def build(float_io: bool, a=a, b=b, ae=ae, be=be, ye=ye, shape=(2, m, n)) -> OneOp:
            g = OneOp(float_io)
            ai, bi = g.qin("a", a.shape, U8, ae), g.qin("b", b.shape, U8, be)
            g.op(
                "MatMul",
                [ai, bi],
                [g.qout(shape, U8, ye)],
                transpose_in0=scalar(BOOL, 0),
                transpose_in1=scalar(BOOL, 0),
            )
            return g

        qnn, host = run_both(build, [a, b], [ae, be], ye)
        tally.add(qnn, host)
    assert tally.worst <= 1
    assert tally.exact >= 0.999, f"{tally.exact:.5f} of {tally.total} elements equal to QNN's"


# (min share equal to QNN, max steps of 2^-16 range) measured with these seeds: per tensor
# 99.77% / 1, per channel 98.74% / 1 (the PT2E double requantization was 77% / 2, 83% / 3).
MEASURED_16 = {False: (0.995, 1), True: (0.985, 1)}


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
def test_weighted_16a8w_measured_distance_to_qnn(per_channel):
    """Not fully bit-exact yet (see the module docstring): holds the measured share."""
    rng = np.random.default_rng(17 + per_channel)
    tally = Tally()
    for kind in KINDS_16:
        build, codes, encs, out_enc, *_ = weighted_case(rng, kind, 16, per_channel)
        tally.add(*run_both(build, codes, encs, out_enc))
    print(f"16a8w {'per_channel' if per_channel else 'per_tensor'}: {tally.exact:.4f} exact, max {tally.worst}")
    assert tally.exact >= MEASURED_16[per_channel][0]
    assert tally.worst <= MEASURED_16[per_channel][1]


class FusedActivation(OneOp):
    """A weighted op whose output (its own encoding, NATIVE or dumped: APP_READ) feeds a Relu or
    ReluMinMax(0, clamp) with its own encoding, as PT2E quantizes conv -> relu6."""

    def __init__(self, float_io: bool, act: str, clamp: float, act_enc: dict, mid_kind: int):
        super().__init__(float_io)
        self.act, self.clamp, self.act_enc, self.mid_kind = act, clamp, act_enc, mid_kind

    def qout(self, shape, dtype, enc) -> int:
        self.mid = self.tensor("mid", self.mid_kind, shape, dtype, quant=enc)
        if self.mid_kind == T.APP_READ:  # a dumped intermediate: readable, not a graph output
            self.outputs.remove(self.mid)
        self.shape, self.dtype = shape, dtype
        return self.mid

    def done(self) -> "FusedActivation":
        y = super().qout(self.shape, self.dtype, self.act_enc)
        params = {} if self.act == "Relu" else dict(min_value=scalar(F32, 0.0), max_value=scalar(F32, self.clamp))
        self.op(self.act, [self.mid], [y], **params)
        return super().done()


@pytest.mark.parametrize("mid_kind", [T.NATIVE, T.APP_READ], ids=["native", "dumped"])
@pytest.mark.parametrize("activation", ["ReluMinMax", "Relu"])
def test_activation_fused_into_weighted_op_bit_exact_with_qnn(activation, mid_kind):
    """HTP requantizes a conv / depthwise / FC accumulator straight into the following
    Relu / ReluMinMax's encoding (one rounding; the two-rounding path was 76.9% equal on
    conv -> relu6), also when the intermediate is read as a graph output (dumps): QNN's
    final outputs are the same with and without it, and the intermediate is the op's own."""
    rng = np.random.default_rng(23)
    tally = Tally()
    ext = require_extension()
    for kind in ["fc", "conv3x3", "depthwise", "depthwise_s2"] * 2:
        build, codes, encs, out_enc, *_ = weighted_case(rng, kind, 8, True)
        lo = out_enc["scale"] * (0 + out_enc["offset"])
        hi = out_enc["scale"] * (255 + out_enc["offset"])
        if not lo < 0 < hi - 16 * out_enc["scale"]:
            continue  # all outputs of one sign: nothing to fuse
        clamp = float(np.float32(0.7 * hi))
        act_enc = act(8, (clamp if activation == "ReluMinMax" else hi) / 255, 0)

        def fused(float_io: bool, build=build, clamp=clamp, act_enc=act_enc) -> OneOp:
            return build(float_io, FusedActivation(float_io, activation, clamp, act_enc, mid_kind))

        blob = fused(False).done().blob()
        binary, graphs = ext.qnn_compile(blob, SM8650)
        section = QnnHtpSection(bytes(binary), SM8650, [(str(n), list(ids)) for n, ids in graphs])
        qnn = ext.run_payload_qnn(wrap_context_binary(payload_of(blob), section), codes)[0]
        floats = [
            ((c.astype(np.float64) + e["offset"]) * np.float32(e["scale"])).astype(np.float32)
            for c, e in zip(codes, encs)
        ]
        host = ext.run_payload(fused(True).done().blob(), floats)

        def as_codes(y, e):
            return (np.rint(np.asarray(y, np.float64) / np.float32(e["scale"])) - e["offset"]).astype(np.int64)

        tally.add(np.asarray(qnn[-1]).astype(np.int64), as_codes(host[-1], act_enc))
    assert tally.total >= 1000, "too few cases with outputs of both signs"
    assert tally.worst <= 1
    assert tally.exact >= 0.999, f"{tally.exact:.5f} of {tally.total} elements equal to QNN's"
