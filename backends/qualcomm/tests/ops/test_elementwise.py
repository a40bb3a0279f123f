"""Elementwise comparisons, logic and selection (eq / ne / lt / le / gt / ge, logical_* and their
bool bitwise_ forms, where, masked_fill), maximum / minimum and unary math: one multi-output
module per family, lowered once per precision.

- fp16: fully delegated (one delegate), host engine vs eager within fp16 tolerance; bool and
  int64 tensors as delegate inputs and outputs.
- 8a8w / 16a8w: QnnQuantizer + PT2E, fully delegated; float outputs within the QDQ reference's
  step bounds (quant_tester.py), bool outputs of comparisons equal to the reference's but for
  inputs one step from the threshold (the graph-input Quantize rounds ties otherwise than PT2E).
- Real QNN (context binary, x86 HTP emulation): each family in fp16, 8a8w and 16a8w, QNN's
  outputs vs the host engine's on one delegate blob.
- Host-engine kernel edge cases: NaN / inf / int64 / broadcasting."""

from __future__ import annotations

from typing import Callable, Dict, List

import numpy as np
import pytest
import torch

from backends.qualcomm import QuantDtype
from backends.qualcomm.tests.helpers.engines import MAX_BOOL_MISMATCH, assert_host_equals_qnn, check_on_qnn
from backends.qualcomm.tests.helpers.quant_tester import (
    QuantTester,
    assert_pt2e_bounds,
    output_encodings_with_range,
    step_stats,
)
from backends.qualcomm.tests.helpers.tester import QnnTester

QUANT_DTYPES = [QuantDtype.use_8a8w, QuantDtype.use_16a8w]
COMPARE_TYPES = (
    "ElementWiseEqual",
    "ElementWiseNotEqual",
    "ElementWiseLess",
    "ElementWiseLessEqual",
    "ElementWiseGreater",
    "ElementWiseGreaterEqual",
)


class Family(torch.nn.Module):
    """Outputs (op_1(*inputs), op_2(*inputs), ...) for a table of ops."""

    def __init__(self, ops: Dict[str, Callable]):
        super().__init__()
        self.names = list(ops)
        self.ops = list(ops.values())

    def forward(self, *inputs):
        return tuple(op(*inputs) for op in self.ops)


def logic_family() -> Family:
    """Comparisons (Tensor and Scalar), logic on their bool results, where / masked_fill."""
    return Family(
        {
            "eq": lambda x, y: x == y,
            "ne_scalar": lambda x, y: x != 0.5,
            "lt": lambda x, y: x < y,
            "le_scalar": lambda x, y: x <= 0.25,
            "gt": lambda x, y: x > y,
            "ge_scalar": lambda x, y: x >= -0.5,
            "and": lambda x, y: torch.logical_and(x > 0, y > 0),
            "or": lambda x, y: (x > 0) | (y < 0),
            "xor": lambda x, y: torch.logical_xor(x > 0, y > 0),
            "not": lambda x, y: torch.logical_not(x > 0),
            "where": lambda x, y: torch.where(x > y, x, y),
            "where_scalar": lambda x, y: torch.where(x > 0, x, 0.0),
            "where_scalars": lambda x, y: torch.where(y > 0, 1.0, -2.0),
            "masked_fill": lambda x, y: x.masked_fill(y > 0.5, -3.0),
            "threshold": lambda x, y: torch.nn.functional.threshold(x, 0.1, -2.0),
        }
    )


def math_family(quantized: bool = False, drop: tuple = ()) -> Family:
    """maximum / minimum, clamp with tensor bounds, QNN's unary math ops and the decomposed ones
    on x, y in (-1, 1) and z in [0.5, 2] (a graph input: logs and reciprocal read no rounded
    intermediate, whose 1-step differences their slope would multiply). Rounding ops read
    x * 3 + 0.1: on the fp16 input grid no value is near an integer or a half."""
    ops = (
        {
            "maximum": lambda x, y, z: torch.maximum(x, y),
            "minimum": lambda x, y, z: torch.minimum(x, y),
            "clamp_tensor": lambda x, y, z: torch.clamp(x, y - 0.5, y + 0.5),
            "exp": lambda x, y, z: torch.exp(x),
            "log": lambda x, y, z: torch.log(z),
            "sin": lambda x, y, z: torch.sin(x * 2),
            "cos": lambda x, y, z: torch.cos(x),
            "atan": lambda x, y, z: torch.atan(x * 2),
            "ceil": lambda x, y, z: torch.ceil(x * 3 + 0.1),
            "floor": lambda x, y, z: torch.floor(x * 3 + 0.1),
            "round": lambda x, y, z: torch.round(x * 3 + 0.1),
            "sign": lambda x, y, z: torch.sign(x),
            "reciprocal": lambda x, y, z: torch.reciprocal(z),
            "log2": lambda x, y, z: torch.log2(z),
            "log10": lambda x, y, z: torch.log10(z),
            "expm1": lambda x, y, z: torch.expm1(x),
            "log1p": lambda x, y, z: torch.log1p(z),
            "leaky_relu": lambda x, y, z: torch.nn.functional.leaky_relu(x, 0.1),
            "elu": lambda x, y, z: torch.nn.functional.elu(x, 0.5),
        }
        if not quantized
        else {  # asin: HTP takes it quantized only; the decompositions float only
            "maximum": lambda x, y, z: torch.maximum(x, y),
            "minimum": lambda x, y, z: torch.minimum(x, y),
            "clamp_tensor": lambda x, y, z: torch.clamp(x, y - 0.5, y + 0.5),
            "exp": lambda x, y, z: torch.exp(x),
            "log": lambda x, y, z: torch.log(z),
            "sin": lambda x, y, z: torch.sin(x * 2),
            "cos": lambda x, y, z: torch.cos(x),
            "asin": lambda x, y, z: torch.asin(x * 0.9),
            "atan": lambda x, y, z: torch.atan(x * 2),
            "ceil": lambda x, y, z: torch.ceil(x * 3 + 0.1),
            "floor": lambda x, y, z: torch.floor(x * 3 + 0.1),
            "round": lambda x, y, z: torch.round(x * 3 + 0.1),
            "sign": lambda x, y, z: torch.sign(x),
            "reciprocal": lambda x, y, z: torch.reciprocal(z),
            "leaky_relu": lambda x, y, z: torch.nn.functional.leaky_relu(x, 0.1),
            "elu": lambda x, y, z: torch.nn.functional.elu(x, 0.5),
        }
    )
    return Family({name: op for name, op in ops.items() if name not in drop})


def _math_inputs(grid: bool):
    """(x, y, z): x, y on the fp16 grid (`grid`) or random in (-1, 1); z in [0.5, 2]."""
    x, y = _grid_inputs() if grid else tuple(torch.tanh(v) for v in _random_inputs())
    z = (torch.rand(2, 3, 4, 5, generator=torch.Generator().manual_seed(3)) * 6).round() / 4 + 0.5
    return x, y, z if grid else torch.rand(2, 3, 4, 5, generator=torch.Generator().manual_seed(3)) * 1.5 + 0.5


class IntBoolIO(torch.nn.Module):
    """int64 and bool delegate inputs, int64 / bool intermediates and outputs."""

    def forward(self, ids, mask, x):
        big = ids >= 2
        return (
            ids == 3,
            ids < 2,
            torch.where(mask, ids, 0),
            torch.where(big & mask, x, -x),
            torch.logical_not(mask),
            x.masked_fill(torch.logical_xor(mask, big), 7.0),
            ids != 1,
        )


def _grid_inputs(seed: int = 0):
    """Multiples of 0.25 in [-1, 1] (exact in fp16; ties with the scalars and between x and y)."""
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randint(-4, 5, (2, 3, 4, 5), generator=g).float() / 4 for _ in range(2))


def _random_inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(2, 3, 4, 5, generator=g) for _ in range(2))


def _int_bool_inputs():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 5, (2, 3, 4), generator=g)
    mask = torch.rand(2, 3, 4, generator=g) > 0.5
    return ids, mask, torch.randn(3, 4, generator=g)


# ---- helpers ------------------------------------------------------------------------------
# Outputs whose bounds against PT2E differ from quant_tester's defaults, with QNN's tables (the
# host engine runs QNN-measured lookup tables when QNN's library is present), measured:
# - ceil 8a8w: 49% exact, max 1 (QNN's table rounds integer outputs to the other neighbouring code);
# - cos / reciprocal 16a8w: max 25 / 30 steps (QNN's 16-bit Cos table; 16-bit Divide, as binary
#   division by an exact scalar in quant_encoding.exact_scalar_attrs).
# (max step diff, minimum exact share) per (output, bits)
OUTPUT_BOUNDS = {("ceil", 8): (1, 0.45), ("cos", 16): (32, 0.0), ("reciprocal", 16): (32, 0.0)}


def check_quantized_outputs(tester: QuantTester, by_condition: bool = False) -> List[str]:
    """Float outputs within the PT2E step bounds (OUTPUT_BOUNDS: per-op exceptions), bool outputs
    equal but for MAX_BOOL_MISMATCH. `by_condition`: float outputs selected by a comparison may
    differ beyond the bounds on the MAX_BOOL_MISMATCH share whose condition flipped."""
    report, failures = [], []
    expected = tester.reference_outputs()
    encodings = output_encodings_with_range(tester.module)
    names = tester.float_module.names
    for i, (out, ref, enc) in enumerate(zip(tester.outputs, expected, encodings)):
        assert out.shape == ref.shape and out.dtype == ref.dtype, (i, out.shape, ref.shape, out.dtype, ref.dtype)
        if out.dtype == np.bool_:
            wrong = float((out != ref).mean())
            report.append(f"{names[i]}: bool {wrong:.2%} differ")
            if wrong > MAX_BOOL_MISMATCH:
                failures.append(report[-1])
            continue
        assert enc is not None, f"output {i} is not a dequantized output"
        stats = step_stats(out, ref, enc[0])
        report.append(f"{names[i]}: {stats}")
        bits = 16 if enc[2] > 255 else 8
        if (names[i], bits) in OUTPUT_BOUNDS:
            max_steps, min_exact = OUTPUT_BOUNDS[(names[i], bits)]
            if stats.max_diff > max_steps or stats.exact_fraction < min_exact:
                failures.append(f"{report[-1]} beyond {max_steps} steps / {min_exact:.0%} exact")
            continue
        if by_condition:
            steps = np.abs(np.rint(out.astype(np.float64) / enc[0]) - np.rint(ref.astype(np.float64) / enc[0]))
            if float((steps > (16 if bits == 16 else 1)).mean()) > MAX_BOOL_MISMATCH:
                failures.append(report[-1])
            continue
        try:
            assert_pt2e_bounds(stats, enc[2], f"{names[i]} ({tester.quant_dtype.name}): {stats}")
        except AssertionError as error:
            failures.append(str(error))
    assert not failures, failures
    return report


def lower_and_run(family: Family, inputs, quant_dtype, by_condition: bool = False) -> QnnTester:
    """fp16 (quant_dtype None) or quantized: lowered, fully delegated in one delegate, run on
    the host engine and compared with eager (fp16) or the QDQ reference (quantized)."""
    tester = QnnTester(family, inputs) if quant_dtype is None else QuantTester(family, inputs, quant_dtype)
    tester.lower().check_fully_delegated().check_count(1).to_executorch().run()
    if quant_dtype is None:
        tester.compare()
    else:
        print(check_quantized_outputs(tester, by_condition))
    return tester


# ---- families: fp16 vs eager, quantized vs QDQ reference, QNN vs host --------------------
@pytest.mark.parametrize("quant_dtype", [None] + QUANT_DTYPES)
def test_logic_family(qnn_binary, quant_dtype):
    inputs = _grid_inputs() if quant_dtype is None else _random_inputs()
    tester = lower_and_run(logic_family(), inputs, quant_dtype, by_condition=True)
    assert [o.dtype for o in tester.outputs[:10]] == [np.bool_] * 10
    graph = tester.payload()
    for op in COMPARE_TYPES + (
        "ElementWiseAnd",
        "ElementWiseOr",
        "ElementWiseXor",
        "ElementWiseNot",
        "ElementWiseSelect",
    ):
        assert graph.op_types().get(op, 0) >= 1, (op, graph.op_types())
    if quant_dtype is not None:
        # Comparisons read the quantized tensors: no Dequantize in front of them (the graph's
        # Dequantizes are those of the float outputs).
        dequantized = {name for op in graph.ops if op.type == "Dequantize" for name in op.outputs}
        compares = [op for op in graph.ops if op.type in COMPARE_TYPES]
        assert len(compares) == 18 and not any(set(op.inputs) & dequantized for op in compares)
        assert graph.op_types()["Dequantize"] == 5  # where, where_scalar, where_scalars, masked_fill, threshold
    print(check_on_qnn(tester, inputs, quant_dtype))


@pytest.mark.parametrize("quant_dtype", [None] + QUANT_DTYPES)
def test_math_family(qnn_binary, quant_dtype):
    inputs = _math_inputs(grid=quant_dtype is None)
    sixteen = quant_dtype == QuantDtype.use_16a8w  # 16-bit log stays on the CPU (QNN's is wrong)
    family = math_family(quantized=quant_dtype is not None, drop=("log",) if sixteen else ())
    tester = lower_and_run(family, inputs, quant_dtype)
    ops = tester.payload().op_types()
    for op in (
        ("ElementWiseLog",) * (not sixteen)
        + (
            "ElementWiseMaximum",
            "ElementWiseMinimum",
            "ElementWiseExp",
            "ElementWiseSin",
            "ElementWiseCos",
            "ElementWiseAtan",
            "ElementWiseCeil",
            "ElementWiseFloor",
            "ElementWiseRound",
            "ElementWiseSign",
            "ElementWiseDivide",
            "Prelu",
            "Elu",
        )
        + (("ElementWiseAsin",) if quant_dtype else ())
    ):
        assert ops.get(op, 0) >= 1, (op, ops)
    print(check_on_qnn(tester, inputs, quant_dtype))


def test_int64_and_bool_delegate_inputs_and_outputs(qnn_binary):
    inputs = _int_bool_inputs()
    tester = lower_and_run(IntBoolIO(), inputs, None)  # int / bool: off by 1 fails the fp16 tolerance
    assert [o.dtype for o in tester.outputs] == [
        np.bool_,
        np.bool_,
        np.int64,
        np.float32,
        np.bool_,
        np.float32,
        np.bool_,
    ]
    print(check_on_qnn(tester, inputs, None))


class EdgeValues(torch.nn.Module):
    def forward(self, x, y):
        return (
            x != x,
            x == y,
            x < y,
            x >= y,
            torch.maximum(x, y),
            torch.minimum(x, y),
            torch.sign(x),
            torch.where(x > 0, x, y),
            torch.floor(x),
            torch.round(x),
            torch.clamp(x, y, y + 1),
        )


def test_host_engine_nan_inf_and_zero_edges():
    """NaN compares unequal (!= true), maximum / minimum / clamp propagate NaN, sign(-0) = -0,
    round halves to even; host engine only (exact in fp16), equal to eager bit for bit."""
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([nan, inf, -inf, 0.0, -0.0, 1.5, -2.5, 3.0, 0.5, 2.5])
    y = torch.tensor([1.0, nan, 0.0, -inf, 2.0, 1.5, 7.0, 2.0, -1.0, nan])
    tester = QnnTester(EdgeValues(), (x, y)).lower().check_fully_delegated().to_executorch().run()
    for i, (out, ref) in enumerate(zip(tester.outputs, tester.reference_outputs())):
        np.testing.assert_array_equal(out, ref, err_msg=f"output {i}")
        assert np.array_equal(np.signbit(out), np.signbit(ref)) or out.dtype == np.bool_, f"output {i} sign of zero"


class AddSubAlpha(torch.nn.Module):
    """add / sub with alpha (upstream's alpha=2): alpha * b is b's codes in an encoding of alpha
    times b's scale (a Multiply by alpha held exactly)."""

    def forward(self, a: torch.Tensor, b: torch.Tensor):
        return torch.add(a, b, alpha=2), torch.sub(a, b, alpha=2), torch.sub(a, b[:1], alpha=0.5)


@pytest.mark.parametrize("quant_dtype", QUANT_DTYPES)
def test_quantized_add_sub_alpha_on_both_engines(qnn_binary, quant_dtype):
    inputs = (torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(7)), torch.rand(2, 3, 4))
    tester = QuantTester(AddSubAlpha(), inputs, quant_dtype).run_and_compare_steps()
    assert_host_equals_qnn(tester)


class AddSubAlphaConstant(torch.nn.Module):
    """add / sub with alpha on a number (upstream's `torch.add(x, 5.0, alpha=2)`): export lifts the
    number to an unannotated constant; alpha * the number is quantized as one scalar."""

    def forward(self, x: torch.Tensor):
        return torch.add(x, 5.0, alpha=2), torch.sub(x, 0.75, alpha=2), torch.add(5.0, x, alpha=2)


@pytest.mark.parametrize("quant_dtype", QUANT_DTYPES)
def test_quantized_add_sub_alpha_on_a_constant_on_both_engines(qnn_binary, quant_dtype):
    inputs = (torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(7)),)
    tester = QuantTester(AddSubAlphaConstant(), inputs, quant_dtype).run_and_compare_steps()
    assert_host_equals_qnn(tester)


class BoolAgainstBits(torch.nn.Module):
    """A bool mask compared with 0 / 1 (upstream's `logical_and(x != 0, y != 0).float()` of bool
    inputs): the mask itself or its Not (HTP compares no BOOL_8)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        return torch.logical_and(x != 0, y != 0).float(), x == 0, y == 1, x != True  # noqa: E712


def test_bool_compared_with_zero_or_one_on_both_engines(qnn_binary):
    inputs = (torch.tensor([True, False, True, False]), torch.tensor([True, True, False, False]))
    tester = QnnTester(BoolAgainstBits(), inputs).lower()
    types = tester.check_one_delegate_ops({"ElementWiseNot": 2})
    assert "ElementWiseNotEqual" not in types and "ElementWiseEqual" not in types, types
    tester.to_executorch().run().compare(atol=0, rtol=0)
    print(check_on_qnn(tester, inputs, None))
