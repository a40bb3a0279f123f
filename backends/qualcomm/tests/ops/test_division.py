"""The division family: float division, fmod and remainder (float and quantized; QNN 2.51's
HTP refuses the single op, so fmod, float remainder and integer floor_divide are compositions:
builders/op_division.py), floor_divide at exact quotients, integer fmod / floor_divide /
remainder with negative operands, integer bitwise_not as -1 - x; the host engine's edge values
(zero divisors, NaN / inf operands, integer zero divisors). Integer remainder is one QNN
ElementWiseMod (HTP takes INT_32 only). Bitwise and / or / xor: ops/test_bitwise.py; isinf /
isnan: ops/test_isinf_isnan.py; float floor_divide as QNN ElementWiseFloorDiv:
ops/test_math_functions.py.

Each family is one multi-output module lowered once to one delegate, with QNN's context binary
when QNN's library loads (`qnn_binary`): fp16 against eager, int / bool exactly; 8a8w / 16a8w
against the QDQ reference in steps of each output's encoding; then QNN's outputs against the host
engine's on the same delegate blob (op validation accepts every composed graph, else the lowering
fails: the partitioner asks QNN)."""

from __future__ import annotations

from typing import List, Tuple

import numpy as np
import pytest
import torch

from backends.qualcomm import QuantDtype
from backends.qualcomm.tests.helpers.engines import check_on_qnn, qnn_vs_host
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
from backends.qualcomm.tests.helpers.tester import QnnTester

A8W8, A16W8 = QuantDtype.use_8a8w, QuantDtype.use_16a8w


# ---- the division family, float and quantized --------------------------------------------------
class FloatDivision(torch.nn.Module):
    """fmod / remainder / floor_divide of tensors and fmod / remainder of numbers (compositions:
    floor_divide is Round((a - r) / b) with r the corrected remainder; HTP's single
    ElementWiseFloorDiv gives one less at an exact integer quotient, 3 // 1.5 = 1)."""

    def forward(self, a, b):
        return (
            torch.fmod(a, b),
            torch.remainder(a, b),
            torch.fmod(a, 1.5),
            torch.remainder(a, -1.25),
            torch.floor_divide(a, b),
        )


def division_inputs() -> Tuple[torch.Tensor, torch.Tensor]:
    """a: odd multiples of 1/16 in [-8, 8]; b: +-(6..16) / 8. a / b = m / (2k) with m odd is at
    least 1/32 from an integer, far beyond fp16's rounding of the quotient (|a / b| <= 11: 0.005)
    (an exact integer quotient is a cliff: HTP's fp16 FloorDiv gives 1 less for 3 // 1.5)."""
    g = torch.Generator().manual_seed(4)
    a = (torch.randint(-64, 64, (2, 3, 4, 5), generator=g).float() * 2 + 1) / 16.0
    b = torch.randint(6, 17, (2, 3, 4, 5), generator=g).float() / 8.0
    b = b * (torch.randint(0, 2, b.shape, generator=g) * 2 - 1)
    return a, b


def test_float_division_fp16_matches_eager_and_qnn(qnn_binary):
    """fp16: a - round(a / b) * b in fp16, within 1e-2 of eager's float32 (|a| <= 8: fp16's
    rounding of a and of the product); QNN vs host within 2e-3 of the magnitude."""
    inputs = division_inputs()
    tester = lower_to_one_delegate(FloatDivision(), inputs, None).compare(atol=1e-2, rtol=0)
    ops = tester.payload().op_types()
    # floor_divide: ElementWiseFloorDiv only where its remainder is NaN (b = 0, +-inf)
    assert "ElementWiseMod" not in ops and ops.get("ElementWiseFloorDiv") == 1 and ops.get("ElementWiseRound") == 1, ops
    assert ops.get("ElementWiseFloor", 0) >= 4 and ops.get("ElementWiseCeil") == 2, ops
    qnn_vs_host(tester, inputs)


class RemainderFamily(torch.nn.Module):
    def forward(self, a, b):
        return torch.remainder(a, b), torch.fmod(a, b), torch.floor_divide(a, b)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_float_division_of_random_operands_on_both_engines(qnn_binary, seed):
    """Operands as a user gives them: a = k * b + noise, so quotients fall near integers. fp16's
    a / b may round up to the integer k while the quotient is below it; Floor / trunc then gave
    r = a - k * b of the wrong sign, |b| off eager (fmod, seed 0, on both engines) until the
    sign fix. Reference: eager on a rounded to fp16 (a delegate input becomes fp16: 4.50007 is
    4.5, an exact multiple of -1.5, whose remainder is 0 where float32's is -1.4999)."""
    g = torch.Generator().manual_seed(seed)
    b = torch.randint(1, 8, (8, 16), generator=g) * 0.5 * torch.where(torch.rand(8, 16, generator=g) > 0.5, 1.0, -1.0)
    a = torch.randint(-6, 7, (8, 16), generator=g).float() * b + torch.randn(8, 16, generator=g) * 0.3
    module = RemainderFamily()
    tester = QnnTester(module, (a, b)).lower()
    tester.check_one_delegate_ops({})
    with torch.no_grad():
        want = [w.numpy() for w in module(a.half().float(), b)]
    if QNN_LOADED:
        engines = dict(zip(("qnn", "host"), payload_on_both_engines(one_delegate_blob(tester), (a, b), module)))
    else:
        engines = {"host": tester.to_executorch().run().outputs}
    for engine, outputs in engines.items():
        for name, out, ref in zip(("remainder", "fmod", "floor_divide"), outputs, want):
            np.testing.assert_allclose(out, ref, atol=1e-2, rtol=0, err_msg=f"{engine} {name}")


class FloorDivide(torch.nn.Module):
    def forward(self, a, b):
        return torch.floor_divide(a, b), a // 1.5


def test_float_floor_divide_at_exact_quotients_on_both_engines(qnn_binary):
    """a = k * b (k in [-8, 8], b = +-(6..16) / 8, all exact in fp16), so every quotient is an
    exact integer, the cliff of floor: fp16 results equal eager's on the host engine, and on QNN
    within its fp32 output error (HTP's single ElementWiseFloorDiv gave k - 1 for some,
    3 // 1.5 = 1)."""
    g = torch.Generator().manual_seed(7)
    b = torch.randint(6, 17, (4, 16), generator=g).float() / 8.0 * (torch.randint(0, 2, (4, 16), generator=g) * 2 - 1)
    a = torch.randint(-8, 9, (4, 16), generator=g).float() * b
    a[0, :4] = torch.tensor([3.0, -3.0, 4.5, -6.0])
    inputs = (a, b)
    tester = lower_to_one_delegate(FloorDivide(), inputs, None)
    # QNN's fp16 graph outputs carry an fp32 error of ~2^-22 relative (3.0000002); a floor error is 1
    for i, (out, ref) in enumerate(zip(tester.outputs, tester.reference_outputs())):
        np.testing.assert_allclose(out, ref, rtol=1e-6, atol=0, err_msg=f"output {i}")
    if QNN_LOADED:
        qnn, host = payload_on_both_engines(one_delegate_blob(tester), inputs, tester.module)
        for i, (q, h, ref) in enumerate(zip(qnn, host, tester.reference_outputs())):
            np.testing.assert_array_equal(h, ref, err_msg=f"host, output {i}")
            np.testing.assert_allclose(q, h, rtol=1e-6, atol=0, err_msg=f"QNN vs host, output {i}")


def grid_division_inputs() -> Tuple[torch.Tensor, torch.Tensor]:
    """Quantized graphs: a and b on the 8-bit grid of their own encodings (a: (code - 128) / 16,
    b: (code - 128) / 64 with |b| >= 0.75; each tensor's min and max present, so calibration
    gives exactly these encodings), so that the graph inputs' Quantize (which rounds x / scale
    through fp16 on HTP) gives the PT2E codes: a one-code difference of a would move fmod by
    4 output steps. Several quotients a / b are exact integers (the cliff of the composition)."""
    g = torch.Generator().manual_seed(6)
    a = torch.randint(0, 256, (2, 3, 4, 5), generator=g)
    a.view(-1)[:2] = torch.tensor([0, 255])
    offsets = torch.randint(48, 128, (2, 3, 4, 5), generator=g) * (
        torch.randint(0, 2, (2, 3, 4, 5), generator=g) * 2 - 1
    )
    b = offsets.clamp(-128, 127) + 128
    b.view(-1)[:2] = torch.tensor([0, 255])
    return (a.float() - 128) / 16.0, (b.float() - 128) / 64.0


def _dequantized_inputs(tester: QuantTester) -> List[np.ndarray]:
    """The graph inputs as the QDQ reference reads them (each placeholder's first quantize)."""
    graph = tester.module.graph
    values = []
    for placeholder, x in zip([n for n in graph.nodes if n.op == "placeholder"], tester.inputs):
        quantize = next(u for u in placeholder.users if "quantize_per_tensor" in str(u.target))
        scale, zero, qmin, qmax = (
            float(quantize.args[1]),
            int(quantize.args[2]),
            int(quantize.args[3]),
            int(quantize.args[4]),
        )
        codes = np.clip(np.rint(x.numpy().astype(np.float64) / scale) + zero, qmin, qmax)
        values.append((codes - zero) * scale)
    return values


@pytest.mark.parametrize("quant_dtype", [A8W8, A16W8], ids=["8a8w", "16a8w"])
def test_float_division_quantized_matches_qdq_reference(qnn_binary, quant_dtype):
    """Quantized: fmod / remainder / floor_divide in float between Dequantize and Quantize
    (floor_divide, exact integer quotients included: 0 steps, QNN == host); every element within
    1 step of the QDQ reference, exact integer quotients included (HTP's fp16 a / b lands just
    below some of them, e.g. -7.0625 / -1.765625: without the whole-|b| correction those results
    were off by |b|, 124 steps). Measured on QNN and the host engine: 8-bit 94-100% exact, 16-bit
    97.5-100% exact (these grid inputs are exact in the 16-bit input encodings too); QNN vs host
    within 1 step (16-bit 2.5% off by one)."""
    inputs = grid_division_inputs()
    tester = lower_to_one_delegate(FloatDivision(), inputs, quant_dtype)
    a, b = _dequantized_inputs(tester)
    quotient = a / b
    assert (np.abs(quotient - np.rint(quotient)) < 1e-9).sum() >= 4, "no exact integer quotient among the inputs"
    for i, (out, ref, enc) in enumerate(
        zip(tester.outputs, tester.reference_outputs(), output_encodings(tester.module))
    ):
        stats = step_stats(out, ref, enc[0])
        print(f"output {i} ({quant_dtype.name}): {stats}")
        assert stats.max_diff <= 1, (i, stats)
    ops = tester.payload().op_types()
    # 5 outputs + the 2 graph inputs; Selects: each remainder's whole-|b| and sign fixes (4 x 2), fmod's
    # trunc (2), floor_divide's remainder (2) and NaN fallback (1)
    assert ops.get("Quantize") == 7 and ops.get("ElementWiseSelect") == 13 and "ElementWiseMod" not in ops, ops
    for i, stats in enumerate(qnn_vs_host(tester, inputs, delegate_output_scales(one_delegate_blob(tester)))):
        print(f"QNN vs host, output {i}: {stats}")
        assert stats.max_diff <= 1, (i, stats)


# ---- integer division, bitwise_not, isinf -------------------------------------------------------
class IntegerFamily(torch.nn.Module):
    """int32 / int64 fmod and floor_divide (compositions on HTP's INT_32 Mod), remainder (one
    Mod), bitwise_not (-1 - x)."""

    def forward(self, a, b, c, d):
        return (
            torch.fmod(a, b),
            torch.floor_divide(a, b),
            torch.fmod(c, d),
            c // d,
            torch.fmod(c, -3),
            c // 4,
            torch.remainder(c, d),
            ~c,
            ~a,
        )


def integer_inputs(seed: int = 5, divisor_max: int = 6, dividend_max: int = 40):
    """(a, b) int64 and the same as int32: dividends in [-dividend_max, dividend_max], divisors
    +-[1, divisor_max] (no zero)."""
    g = torch.Generator().manual_seed(seed)
    b = torch.randint(1, divisor_max + 1, (2, 3, 4), generator=g)
    b = b * (torch.randint(0, 2, (2, 3, 4), generator=g) * 2 - 1)
    a = torch.randint(-dividend_max, dividend_max + 1, (2, 3, 4), generator=g)
    return a, b, a.to(torch.int32), b.to(torch.int32)


def test_integer_family_exact_on_both_engines(qnn_binary):
    """Every output equals eager exactly (negative dividends and divisors; int64 runs as INT_32
    on QNN), QNN equal to the host engine."""
    inputs = integer_inputs()
    tester = lower_to_one_delegate(IntegerFamily(), inputs, None)
    for i, (out, ref) in enumerate(zip(tester.outputs, tester.reference_outputs())):
        assert out.dtype == ref.dtype and out.shape == ref.shape, (i, out.dtype, ref.dtype)
        np.testing.assert_array_equal(out, ref, err_msg=f"output {i}")
    ops = tester.payload().op_types()
    assert ops.get("ElementWiseMod") == 7 and "ElementWiseFloorDiv" not in ops and "ElementWiseNot" not in ops, ops
    qnn_vs_host(tester, inputs)


def test_host_engine_float_division_edges():
    """Host engine: a zero divisor gives NaN (fmod, remainder) as torch; inf / NaN operands give
    NaN; a zero result keeps its place."""
    nan, inf = float("nan"), float("inf")
    a = torch.tensor([5.5, -5.5, 1.0, nan, inf, 3.0, 0.0, 4.5])
    b = torch.tensor([2.0, 2.0, 0.0, 1.0, 2.0, 1.5, 3.0, -1.5])
    tester = QnnTester(FloatDivision(), (a, b)).lower().check_fully_delegated().to_executorch().run()
    for i, (out, ref) in enumerate(zip(tester.outputs[:4], tester.reference_outputs()[:4])):
        np.testing.assert_allclose(out, ref, atol=1e-6, equal_nan=True, err_msg=f"output {i}")


# ---- integer remainder (one QNN ElementWiseMod) -----------------------------------------------
class IntegerDivision(torch.nn.Module):
    def forward(self, a, b, c, d):
        return torch.remainder(a, b), a % -3, torch.remainder(c, d), c % 4


def test_integer_remainder(qnn_binary):
    """int64 and int32 remainder, negative dividends and divisors: exactly torch's (QNN: exact
    too). Integer floor_divide and fmod (compositions): test_integer_family_exact_on_both_engines."""
    inputs = integer_inputs(seed=2, divisor_max=5, dividend_max=20)
    tester = lower_to_one_delegate(IntegerDivision(), inputs, None)
    for i, (out, ref) in enumerate(zip(tester.outputs, tester.reference_outputs())):
        assert out.dtype == ref.dtype, (i, out.dtype, ref.dtype)
        np.testing.assert_array_equal(out, ref, err_msg=f"output {i}")
    print(check_on_qnn(tester, inputs, None))


class IntegerZeroDivisor(torch.nn.Module):
    def forward(self, a, b):
        return torch.remainder(a, b), torch.remainder(b, a)


def test_host_engine_integer_zero_divisor_gives_zero():
    """torch raises on an integer zero divisor; the host engine's remainder gives 0 (no UB), and
    int32's minimum % -1 is 0 instead of trapping."""
    a = torch.tensor([7, -7, 5, -(2**31), -(2**31)], dtype=torch.int32)
    b = torch.tensor([0, 0, -1, -1, 2], dtype=torch.int32)  # a[4] % 2 == 0, a[4] % -2 == 0
    tester = QnnTester(IntegerZeroDivisor(), (a, torch.tensor([1, 1, -1, -1, 2], dtype=torch.int32)))
    tester.lower().check_fully_delegated().to_executorch()
    from backends.qualcomm.tests.helpers.runtime import feeds_in_payload_order, native  # host engine

    blob = tester.delegate_blobs()[0]
    outs = [np.asarray(o) for o in native().run_payload(blob, feeds_in_payload_order(blob, (a, b), tester.module))]
    np.testing.assert_array_equal(outs[0], [0, 0, 0, 0, 0])
    np.testing.assert_array_equal(outs[1], [0, 0, 4, -1, -(2**31) + 2])


# ---- div(rounding_mode="trunc") --------------------------------------------------------------------
class TruncDivision(torch.nn.Module):
    """div(rounding_mode="trunc") (upstream's div rounding-mode case): Round((a - fmod(a, b)) / b)."""

    def forward(self, a, b):
        return torch.div(a, b, rounding_mode="trunc"), torch.div(a, 1.5, rounding_mode="trunc")


def test_trunc_division_fp16_on_both_engines(qnn_binary):
    """Eager's trunc on every element (exact integer quotients included: 3 / 1.5, -6 / 3), the
    odd-multiple grid of division_inputs elsewhere; QNN vs host within 2e-3 of the magnitude."""
    a, b = division_inputs()
    a.view(-1)[:4], b.view(-1)[:4] = torch.tensor([3.0, -6.0, 4.5, -0.5]), torch.tensor([1.5, 3.0, -1.5, 0.25])
    tester = lower_to_one_delegate(TruncDivision(), (a, b), None).compare(atol=0, rtol=0)
    assert "ElementWiseFloorDiv" not in tester.payload().op_types()
    print(qnn_vs_host(tester, (a, b)))


@pytest.mark.parametrize("quant_dtype", [A8W8, A16W8], ids=["8a8w", "16a8w"])
def test_trunc_division_quantized_matches_qdq_reference(qnn_binary, quant_dtype):
    inputs = grid_division_inputs()
    tester = lower_to_one_delegate(TruncDivision(), inputs, quant_dtype)
    for i, (out, ref, enc) in enumerate(
        zip(tester.outputs, tester.reference_outputs(), output_encodings(tester.module))
    ):
        assert step_stats(out, ref, enc[0]).max_diff <= 1, (i, step_stats(out, ref, enc[0]))
    for i, stats in enumerate(qnn_vs_host(tester, inputs, delegate_output_scales(one_delegate_blob(tester)))):
        assert stats.max_diff <= 1, (i, stats)
