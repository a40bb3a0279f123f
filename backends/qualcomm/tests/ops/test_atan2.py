"""16a8w atan2 (builders/op_atan2.py): exact integer ops on the uint16 codes (Y = qy - zy, X =
qx - zx, fixed-point ratios by long division, an interpolated table of angles, the quadrant and
the rounding in fixed point), within 1 step of
the QDQ reference (dequantize both inputs, float32 atan2, quantize) on the host engine and on QNN
HTP, QNN bit-exact with the host; the float chain it replaces (fp16 on HTP) was 22 steps off.

The first test checks the plan and the table over many encodings with a numpy model of the
emitted integer ops (no lowering); the others lower real graphs: atan2 of two graph inputs on
their encodings' grids (the graph input's Quantize gives the PT2E codes on both engines, so a
difference comes from atan2 alone) and of computed tensors."""

from __future__ import annotations

from typing import Tuple

import numpy as np
import pytest
import torch

from backends.qualcomm import QuantDtype
from backends.qualcomm.builders.op_atan2 import FRACTION_BITS, Atan2Plan, angle_table, atan2_plan, reference_units
from backends.qualcomm.builders.quant_encoding import QuantAttrs
from backends.qualcomm.tests.helpers.quant_tester import (
    QuantTester,
    lower_to_one_delegate,
    output_encodings,
    step_stats,
)
from backends.qualcomm.tests.helpers.runtime import (
    QNN_LOADED,
    delegate_output_scales,
    one_delegate_blob,
    payload_on_both_engines,
)

A16W8 = QuantDtype.use_16a8w
# exact fraction vs QDQ: off only where the reference's own float32 rounding (of atan2, of angle /
# s_out: 0.004 step at 2^15) decides a value within ~0.002 step of a half; measured 99.72-99.97%
# over random encodings, 99.85-100% on the lowered graphs (table of codes without interpolation:
# 92-97%)
MIN_EXACT = 0.99


def _uint16(scale: float, zero_point: int) -> QuantAttrs:
    return QuantAttrs(scale=scale, zero_point=zero_point, qmin=0, qmax=65535, dtype=torch.uint16)


def model_codes(plan: Atan2Plan, out: QuantAttrs, signed_y: np.ndarray, signed_x: np.ndarray) -> np.ndarray:
    """The output codes the emitted integer ops compute (op_atan2.emit_atan2), in numpy int64."""
    a, b = np.abs(signed_y), np.abs(signed_x)
    a_den, b_den = np.maximum(a, 1), np.maximum(b, 1)
    t, t_rest = np.divmod(a << (FRACTION_BITS + plan.k), b_den)
    s, s_rest = np.divmod(b << (FRACTION_BITS - plan.k), a_den)
    first = t <= plan.t_limit
    index = np.where(a == 0, 0, np.where(b == 0, plan.s_start, np.where(first, t, s + plan.s_start)))
    fraction = np.where(first, (t_rest << 14) // b_den, (s_rest << 14) // a_den)
    table = angle_table(plan, out.scale).astype(np.int64)
    angle = table[index] + (((table[index + 1] - table[index]) * fraction + (1 << 13)) >> 14)
    pi_units = reference_units(plan, np.pi, out.scale)
    angle = np.where(signed_x < 0, pi_units - angle, angle)
    angle = np.where(signed_y < 0, -angle, angle)
    point = plan.point_bits
    return np.clip((angle + (out.zero_point << point) + (1 << (point - 1))) >> point, 0, 65535)


def qdq_codes(signed_y: np.ndarray, signed_x: np.ndarray, sy: float, sx: float, out: QuantAttrs) -> np.ndarray:
    """The QDQ reference: float32 atan2 of the dequantized inputs, quantized to `out`."""
    y = torch.from_numpy(signed_y.astype(np.float32)) * np.float32(sy)
    x = torch.from_numpy(signed_x.astype(np.float32)) * np.float32(sx)
    codes = torch.ops.quantized_decomposed.quantize_per_tensor(
        torch.atan2(y, x), out.scale, out.zero_point, 0, 65535, torch.uint16
    )
    return codes.to(torch.int64).numpy()


def special_pairs(rng: np.random.Generator, zy: int, zx: int, n: int) -> Tuple[np.ndarray, np.ndarray]:
    """n code pairs: random, then axes (y or x or both at the zero point), |Y| == |X| and
    small codes around both zero points."""
    qy, qx = rng.integers(0, 65536, n), rng.integers(0, 65536, n)
    qy[: n // 16] = zy
    qx[n // 16 : n // 8] = zx
    qy[n // 8 : n // 8 + 8], qx[n // 8 : n // 8 + 8] = zy, zx
    part = slice(n // 8, n // 4)
    qx[part] = np.clip(zx + (qy[part] - zy) * rng.choice([-1, 1], qy[part].size), 0, 65535)
    small = slice(n // 4, n // 2)
    qy[small] = np.clip(zy + rng.integers(-20, 21, n // 4), 0, 65535)
    qx[small] = np.clip(zx + rng.integers(-20, 21, n // 4), 0, 65535)
    return qy, qx


@pytest.mark.parametrize("seed", range(6))
def test_integer_plan_is_within_one_step_of_qdq(seed):
    """The emitted ops' arithmetic (numpy model) over 200k code pairs of a random encoding, the
    scale ratio from 2^-13 to 2^13 (|k| <= 13, the widest a plan takes): within 1 step of QDQ,
    mostly exact."""
    rng = np.random.default_rng(seed)
    sy = float(np.float32(rng.uniform(1e-5, 1e-3)))
    sx = float(np.float32(sy * 2.0 ** rng.uniform(-13.4, 13.4) if seed < 3 else sy * 2.0 ** rng.uniform(-3, 3)))
    zy, zx = int(rng.integers(0, 65536)), int(rng.integers(0, 65536))
    out = _uint16(float(np.float32(2 * np.pi / 65535)), 32768 if seed % 2 else int(rng.integers(20000, 45000)))
    plan = atan2_plan(sy, sx, out.scale)
    assert plan is not None and abs(plan.k) <= 13 and 2**-0.5 <= plan.f <= 2**0.5, plan
    qy, qx = special_pairs(rng, zy, zx, 200_000)
    got = model_codes(plan, out, qy - zy, qx - zx)
    want = qdq_codes(qy - zy, qx - zx, sy, sx, out)
    diff = np.abs(got - want)
    print(f"k={plan.k} f={plan.f:.3f}: max {diff.max()} exact {(diff == 0).mean():.4%}")
    assert diff.max() <= 1 and (diff == 0).mean() >= MIN_EXACT
    # the axes and the origin exactly
    axes = (qy == zy) | (qx == zx)
    np.testing.assert_array_equal(got[axes], want[axes])


def test_plan_refuses_far_apart_scales():
    step = 2 * np.pi / 65535
    assert atan2_plan(1.0, 2.0**-14, step) is None and atan2_plan(2.0**-14, 1.0, step) is None
    assert atan2_plan(1.0, 2.0**-13, step).k == 13 and atan2_plan(1.0, 1.0, step).point_bits == 12
    assert atan2_plan(1.0, 1.0, 1e-9) is None  # an output range of 7e-5 rad: no room for the fixed point


# ---- lowered graphs ------------------------------------------------------------------------
class Atan2(torch.nn.Module):
    def forward(self, y, x):
        return torch.atan2(y, x)


class Atan2OfComputed(torch.nn.Module):
    """atan2 of computed tensors, which are outputs too (QNN's 16-bit a * 2 and b - 1 are up to
    16 steps off PT2E's: atan2 on QNN is checked against the QDQ atan2 of QNN's own inputs)."""

    def forward(self, a, b):
        y, x = a * 2, b - 1
        return torch.atan2(y, x), y, x


def grid_inputs(y_scale: float, x_scale: float, shape=(64, 128)) -> Tuple[torch.Tensor, torch.Tensor]:
    """y = (qy - 16384) y_scale, x = (qx - 40000) x_scale (each input's codes reach 0 and 65535,
    so the observers give these encodings), with the special pairs of special_pairs."""
    rng = np.random.default_rng(16)
    qy, qx = special_pairs(rng, 16384, 40000, int(np.prod(shape)))
    qy[-1], qx[-1], qy[-2], qx[-2] = 0, 0, 65535, 65535
    y = (qy - 16384) * y_scale
    x = (qx - 40000) * x_scale
    return (torch.tensor(y, dtype=torch.float32).reshape(shape), torch.tensor(x, dtype=torch.float32).reshape(shape))


def _check(tester: QuantTester, min_exact: float) -> None:
    """The delegate's output within 1 step of QDQ (min_exact of them exact), its graph the
    integer path (one table Gather, no float Atan); QNN (when loaded) bit-exact with the host."""
    blob = one_delegate_blob(tester)
    ops = tester.payload().op_types()
    assert ops.get("Gather") == 3 and "ElementWiseAtan" not in ops and ops.get("ElementWiseMod", 0) >= 2, ops
    [out], [ref] = tester.outputs, tester.reference_outputs()
    [(scale, _)] = output_encodings(tester.module)
    stats = step_stats(out, ref, scale)
    print(f"vs QDQ: {stats}")
    assert stats.max_diff <= 1 and stats.exact_fraction >= min_exact, stats
    if not QNN_LOADED:
        return
    [qnn], [host] = payload_on_both_engines(blob, tester.inputs, tester.module)
    qnn_stats = step_stats(np.asarray(qnn), np.asarray(host), delegate_output_scales(blob)[0])
    print(f"QNN vs host: {qnn_stats}")
    assert qnn_stats.max_diff == 0, qnn_stats


@pytest.mark.parametrize(
    "y_exp, x_exp, shape",
    [(-14, -12, (64, 128)), (-16, -16, (2, 4, 16, 64)), (-2, -15, (64, 128)), (-15, -2, (16, 512, 1))],
    ids=["k-2", "k0-rank4", "k13", "k-13-rank3"],
)
def test_atan2_of_graph_inputs_within_one_step(qnn_binary, y_exp, x_exp, shape):
    """Graph inputs on their grids, every quadrant, axes, the origin, |y| == |x|, small codes;
    scale ratios 2^-2, 1 and the widest a plan takes, 2^+-13 (the longest divisions: 15 + 14
    bits); ranks 3 and 4 (QNN's Gather by computed indices of those ranks reads wrong elements:
    the Gathers take flattened indices)."""
    tester = lower_to_one_delegate(Atan2(), grid_inputs(2.0**y_exp, 2.0**x_exp, shape), A16W8)
    assert atan2_plan(2.0**y_exp, 2.0**x_exp, 1e-4).k == y_exp - x_exp
    _check(tester, MIN_EXACT)


def test_atan2_of_far_apart_scales_keeps_the_float_chain():
    """sy / sx = 2^-14 (beyond 2^+-13): the float chain between Dequantize and Quantize (host
    engine: within 1 step of QDQ, but for atan2(0, 0), NaN in the chain's y / x)."""
    y, x = grid_inputs(2.0**-16, 2.0**-2, (8, 16))
    tester = lower_to_one_delegate(Atan2(), (y, x), A16W8)
    ops = tester.payload().op_types()
    assert ops.get("ElementWiseAtan") == 1 and "Gather" not in ops, ops
    [(scale, _)] = output_encodings(tester.module)
    origin = ((y == 0) & (x == 0)).numpy()
    stats = step_stats(tester.outputs[0][~origin], tester.reference_outputs()[0][~origin], scale)
    print(f"float chain vs QDQ: {stats}")
    assert origin.any() and stats.max_diff <= 1, stats


def qdq_atan2(y: np.ndarray, x: np.ndarray, encoding: Tuple[float, int]) -> np.ndarray:
    """The QDQ reference's atan2 of dequantized inputs y, x, dequantized from `encoding`."""
    scale, zero_point = encoding
    codes = torch.ops.quantized_decomposed.quantize_per_tensor(
        torch.atan2(torch.from_numpy(y), torch.from_numpy(x)), scale, zero_point, 0, 65535, torch.uint16
    )
    return (codes.to(torch.int64).numpy() - zero_point).astype(np.float32) * np.float32(scale)


def test_atan2_of_computed_tensors_within_one_step(qnn_binary):
    """atan2(a * 2, b - 1), encodings from the observers (a scale ratio that is no power of two):
    within 1 step of the QDQ atan2 of the inputs each engine computed (the host engine's are
    PT2E's: then also of the QDQ module's output)."""
    torch.manual_seed(0)
    inputs = (torch.randn(32, 64), torch.rand(32, 64) * 2)
    tester = lower_to_one_delegate(Atan2OfComputed(), inputs, A16W8)
    blob = one_delegate_blob(tester)
    assert tester.payload().op_types().get("Gather") == 3
    encodings = output_encodings(tester.module)
    encoding = encodings[0]
    engines = {"run": tester.outputs}
    if QNN_LOADED:
        # the delegate's outputs in the module's order (told apart by their scales)
        scales = delegate_output_scales(blob)
        order = [int(np.argmin([abs(s - e[0]) for s in scales])) for e in encodings]
        assert sorted(order) == [0, 1, 2], (scales, encodings)
        qnn, host = payload_on_both_engines(blob, tester.inputs, tester.module)
        engines = {"QNN": [np.asarray(qnn[i]) for i in order], "host": [np.asarray(host[i]) for i in order]}
    for name, (out, y, x) in engines.items():
        stats = step_stats(out, qdq_atan2(y, x, encoding), encoding[0])
        print(f"{name} vs QDQ atan2 of its inputs: {stats}")
        assert stats.max_diff <= 1 and stats.exact_fraction >= MIN_EXACT, (name, stats)
    host_out = engines.get("host", tester.outputs)[0]
    stats = step_stats(host_out, tester.reference_outputs()[0], encoding[0])
    print(f"host vs the QDQ module: {stats}")
    assert stats.max_diff <= 1 and stats.exact_fraction >= MIN_EXACT, stats


class Atan2OfConstantAndItself(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("w", torch.linspace(-2, 2, 128).reshape(1, 128))

    def forward(self, y):
        return torch.atan2(y, self.w), torch.atan2(y, y)


def test_atan2_of_a_constant_and_of_itself(qnn_binary):
    """A STATIC (constant) x broadcast along rows, and y with itself (+-pi / 4, 0 at the origin,
    one code split per use): within 1 step of QDQ on the engine that runs it (QNN when loaded)."""
    y, _ = grid_inputs(2.0**-14, 2.0**-12)
    tester = lower_to_one_delegate(Atan2OfConstantAndItself(), (y,), A16W8)
    assert tester.payload().op_types().get("Gather") == 6
    for i, (out, ref, (scale, _)) in enumerate(
        zip(tester.outputs, tester.reference_outputs(), output_encodings(tester.module))
    ):
        stats = step_stats(out, ref, scale)
        print(f"output {i} vs QDQ: {stats}")
        assert stats.max_diff <= 1 and stats.exact_fraction >= MIN_EXACT, (i, stats)


def test_atan2_broadcast_at_rank_4(qnn_binary):
    """y [2, 4, 16, 64] against x [64] (every x code from 0 to 65535 in 64 steps): the integer ops
    broadcast at rank 4, the Gathers on flattened indices (QNN's Gather by computed rank-3 / 4
    indices reads wrong elements of a large table); within 1 step of QDQ, QNN == host."""
    y, _ = grid_inputs(2.0**-14, 2.0**-12, (2, 4, 16, 64))
    x = torch.tensor((np.linspace(0, 65535, 64).round() - 40000) * 2.0**-12, dtype=torch.float32)
    _check(lower_to_one_delegate(Atan2(), (y, x), A16W8), MIN_EXACT)
