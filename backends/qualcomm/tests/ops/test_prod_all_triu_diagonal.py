"""Reductions, shape and indexing ops: prod (a tree of multiplies, QNN has
no ReduceProd), all / any (of every element too: 0-d results stored as [1]; all of a float
tensor: logical_not(x) = x == 0), triu / tril (kept whole: Select with a constant mask),
diagonal / unfold / as_strided (Gather at constant flat positions).

Each family is one multi-output module lowered once, with QNN's context binary when QNN's
library loads (`qnn_binary`): fp16 against eager, int / bool exactly; 8a8w / 16a8w against the
QDQ reference in steps of each output's encoding; then QNN's outputs against the host engine's
on the same delegate blob. Host-engine edge values (NaN / inf / zeros) last."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from backends.qualcomm import QuantDtype
from backends.qualcomm.tests.helpers.engines import qnn_vs_host
from backends.qualcomm.tests.helpers.quant_tester import (
    assert_pt2e_bounds,
    lower_to_one_delegate,
    output_encodings,
    step_stats,
)
from backends.qualcomm.tests.helpers.runtime import delegate_output_scales
from backends.qualcomm.tests.helpers.tester import QnnTester

A8W8, A16W8 = QuantDtype.use_8a8w, QuantDtype.use_16a8w


def views(x: torch.Tensor) -> tuple:
    """triu / tril (diagonal offsets, a transposed input), diagonal (offset, dims), unfold,
    as_strided, of a rank-4 x."""
    return (
        torch.triu(x),
        torch.tril(x, -1),
        torch.triu(x, 2),
        torch.tril(x.transpose(2, 3), 1),
        torch.diagonal(x),
        torch.diagonal(x, 1, 2, 3),
        torch.diagonal(x, -1, -1, 1),
        x.unfold(3, 2, 1),
        x.unfold(1, 2, 2),
        x.as_strided((2, 3), (1, 4), 3),
    )


class FloatFamily(torch.nn.Module):
    """prod (dim, keepdim, every element), all of a float tensor (dim, keepdim, every
    element), and the views."""

    def forward(self, x):
        return (
            torch.prod(x, 1),
            torch.prod(x, -1, keepdim=True),
            torch.prod(x),
            torch.prod(x, 0),
            x.all(-1),
            torch.all(x, 1, keepdim=True),
            x.all(),
            (x == x).all(),
            *views(x),
        )


class IntBoolFamily(torch.nn.Module):
    """all / any of a bool mask (dims, every element) and the int32 views."""

    def forward(self, mask, i):
        return (
            mask.all(-1),
            torch.all(mask, dim=(1, 2)),
            mask.all(),
            mask.any(),
            (i > -100).all(),
            torch.triu(i, 1),
            torch.tril(i),
            torch.diagonal(i, 0, 0, 1),
            torch.diagonal(i, -1),
            i.unfold(0, 2, 1),
            i.as_strided((2, 2), (4, 1), 1),
        )


def float_chains(x: torch.Tensor) -> tuple:
    """op_math.py's float decompositions, of x in [0.5, 1.5] and u = x - 1 in [-0.5, 0.5]."""
    u = x - 1.0
    return (
        torch.tan(u * 2),
        torch.acos(u),
        torch.sinh(u * 4),
        torch.cosh(u * 4),
        torch.asinh(u * 6),
        torch.acosh(x + 1.0),
        torch.atanh(u * 1.8),
        torch.atan2(u, x - 1.2),
        torch.log2(x),
        torch.log10(x),
        torch.expm1(u * 2),
        torch.log1p(x),
    )


class QuantFamily(torch.nn.Module):
    """The quantized family: prod and the float decompositions (tan, acos, sinh, cosh, asinh,
    acosh, atanh, atan2, log2, log10, expm1, log1p) run in float between Dequantize and
    Quantize; views share the input's encoding; all(x) compares the quantized x with 0."""

    def forward(self, x):
        return (
            torch.prod(x, 1),
            torch.prod(x, -1, keepdim=True),
            torch.prod(x),
            *views(x),
            x.all(-1),
            x.all(),
            *float_chains(x),
        )


def float_input() -> torch.Tensor:
    """(2, 3, 4, 5), |x| in [0.5, 1.5] with both signs, multiples of 1/64 (exact in fp16), and
    zeros (a whole [4, 5] block and one element) for prod / all."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(32, 97, (2, 3, 4, 5), generator=g).float() / 64.0
    x = x * (torch.randint(0, 2, x.shape, generator=g) * 2 - 1)
    x[1, 2] = 0.0
    x[0, 1, 2, 3] = 0.0
    return x


def grid_input() -> torch.Tensor:
    """Quantized graphs: x in [0.5, 1.5] on the 8-bit grid of its own encoding (codes 85..255 of
    scale 1.5 / 255, max 1.5 present), so the graph input's Quantize gives the PT2E codes (it
    rounds x / scale through fp16 as HTP does, which moves ~5% of random inputs by one code; a
    product of five inputs then moves by a step in ~20% of outputs)."""
    g = torch.Generator().manual_seed(1)
    codes = torch.randint(85, 256, (2, 3, 4, 5), generator=g)
    codes[0, 0, 0, 0] = 255
    return codes.float() * (1.5 / 255)


def int_bool_inputs():
    g = torch.Generator().manual_seed(2)
    mask = torch.rand(2, 3, 4, 5, generator=g) > 0.15
    mask[0, 0] = True  # an all-True row
    return mask, torch.randint(-50, 50, (3, 4), generator=g, dtype=torch.int32)


# ---- fp16 and int / bool ----------------------------------------------------------------------
def test_float_family_fp16_matches_eager_and_qnn(qnn_binary):
    """Measured: host vs eager within 1e-3 (products of 60-120 factors in another order);
    QNN vs host (HTP emulation) max abs diff 4.8e-7."""
    inputs = (float_input(),)
    tester = lower_to_one_delegate(FloatFamily(), inputs, None).compare(atol=1e-3, rtol=1e-3)
    ops = tester.payload().op_types()
    assert ops.get("ReduceMax") == 4 and ops.get("ElementWiseSelect") == 4 and ops.get("Gather") == 6, ops
    assert "ReduceProd" not in ops and ops.get("ElementWiseMultiply", 0) >= 10, ops
    outputs = tester.outputs
    assert outputs[2].shape == () and outputs[2] == 0.0 and outputs[6].shape == () and not outputs[6]
    assert outputs[7].shape == () and outputs[7] and outputs[4].any() and not outputs[4].all()
    qnn_vs_host(tester, inputs)


def test_int_bool_family_is_exact_on_both_engines(qnn_binary):
    inputs = int_bool_inputs()
    tester = lower_to_one_delegate(IntBoolFamily(), inputs, None)
    expected = tester.reference_outputs()
    for i, (out, ref) in enumerate(zip(tester.outputs, expected)):
        assert out.dtype == ref.dtype and out.shape == ref.shape, (i, out.dtype, ref.dtype, out.shape, ref.shape)
        np.testing.assert_array_equal(out, ref, err_msg=f"output {i}")
    assert expected[0].any() and not expected[0].all() and not expected[2] and expected[3] and expected[4]
    qnn_vs_host(tester, inputs)


# ---- quantized ------------------------------------------------------------------------------
PROD_OUTPUTS = 3  # QuantFamily's first outputs
FIRST_CHAIN = 15  # QuantFamily's float_chains outputs: from here on
ATAN2 = FIRST_CHAIN + 7  # 8-bit: the binary chain; 16-bit: integer ops and a table (op_atan2.py)
TABLE_CHAINS = 11  # the unary chains: lookup tables (8- and 16-bit)
# prod / float chains on QNN (fp16) vs PT2E or vs the host engine, 8-bit / 16-bit (quant_tester's
# MAX_STEP_DIFF_8; 16-bit: 0.15% of the range)
QUANT_STEPS = {False: 4, True: 96}
# 16-bit tables of a quantized u * k on QNN vs PT2E: exact for their input codes, but QNN's 16-bit
# u * k is off PT2E's by a few steps, times the slope (measured max 28: cosh(u * 4); 0 on the
# tables of x); the fp16 chains were 22-61.
TABLE_STEPS_16 = 32
# QNN vs the host engine, 8-bit: the 8-bit tables are exact on both, but the quantized u * 4 they
# read differs by up to 2 steps between the engines (QNN's 8-bit Multiply, not decoded), times
# cosh's slope (measured max 7).
QNN_VS_HOST_STEPS = {False: 7, True: 96}


@pytest.mark.parametrize("quant_dtype", [A8W8, A16W8], ids=["8a8w", "16a8w"])
def test_quant_family_matches_qdq_reference_and_qnn(qnn_binary, quant_dtype):
    """prod and 8-bit atan2 run in float between Dequantize and Quantize; 16-bit atan2 is integer
    ops and a table of codes (op_atan2.py: ops/test_atan2.py); the unary chains are lookup
    tables (op_lookup.py, exact for their input codes: ops/test_lookup_tables.py). The program runs on QNN when its library loads (context
    binary), else on the host engine. Measured on QNN against PT2E (float32): views and all
    exact; prod / atan2 8-bit within 1 step; atan2 16-bit within 1 step (69% exact: QNN's u and
    x - 1.2 it reads are a step off PT2E's on some elements; the fp16 chain was 22 steps off);
    the 8-bit tables within 4 steps (tan / sinh / cosh /
    asinh / expm1 of a quantized u * k: QNN's requantized u * k differs from PT2E's by up to 2
    steps, times the slope; acos / atanh within 1; acosh / log2 / log10 / log1p of x, 0 steps
    with x + 1 on acosh); 16-bit tables within TABLE_STEPS_16 (0 steps on the tables of x),
    the prod 16-bit chain within 22-61 steps (0.1% of the range: fp16's 2^-11 relative
    precision). QNN vs the payload run on the host engine by the extension (run_payload):
    8-bit within 7 steps (QNN_VS_HOST_STEPS), 16-bit within 96."""
    inputs = (grid_input(),)
    tester = lower_to_one_delegate(QuantFamily(), inputs, quant_dtype)
    encodings = output_encodings(tester.module)
    limit = QUANT_STEPS[quant_dtype == A16W8]
    for i, (out, ref, enc) in enumerate(zip(tester.outputs, tester.reference_outputs(), encodings)):
        assert out.shape == ref.shape, (i, out.shape, ref.shape)
        if enc is None:
            np.testing.assert_array_equal(out, ref, err_msg=f"output {i}")
            continue
        stats = step_stats(out, ref, enc[0])
        label = f"output {i} ({quant_dtype.name}): {stats}"
        print(label)
        if i == ATAN2:
            assert stats.max_diff <= 1, label
        elif i >= FIRST_CHAIN and quant_dtype == A16W8:
            assert stats.max_diff <= TABLE_STEPS_16, label
        elif i < PROD_OUTPUTS or i >= FIRST_CHAIN:
            assert stats.max_diff <= limit, label
        else:
            assert_pt2e_bounds(stats, 65535 if quant_dtype == A16W8 else 255, label)
    ops = tester.payload().op_types()
    wide = quant_dtype == A16W8  # 16-bit atan2: three Gathers (two angles, the code) by its two inputs' codes
    assert ops.get("Dequantize", 0) >= PROD_OUTPUTS + 12 and ops.get("Gather") == 6 + TABLE_CHAINS + 3 * wide, ops
    # 9: all() and the bool outputs; a 16-bit table's index takes 3 Casts per input (op_lookup.py)
    assert ops.get("Cast", 0) == 9 + ((TABLE_CHAINS + 2) * 3 if wide else TABLE_CHAINS), ops
    scales = delegate_output_scales(tester.delegate_blobs()[0])
    assert sum(s is not None for s in scales) == 25, scales
    for i, stats in enumerate(qnn_vs_host(tester, inputs, scales)):
        print(f"QNN vs host, delegate output {i}: {stats}")
        assert stats.max_diff <= QNN_VS_HOST_STEPS[quant_dtype == A16W8], f"QNN vs host, delegate output {i}: {stats}"


# ---- rejected cases and host-engine edge values --------------------------------------------------
def test_prod_nan_inf_and_zero_follow_pytorch_on_the_host_engine():
    x = torch.tensor(
        [[1.0, float("nan"), 2.0], [float("inf"), 0.0, 1.0], [float("inf"), -1.0, 2.0], [-0.5, 0.25, -4.0]]
    )

    class Edge(torch.nn.Module):
        def forward(self, x):
            return torch.prod(x, 1), torch.prod(x[2:], 0, keepdim=True), torch.prod(x[3]), torch.logical_not(x)

    tester = lower_to_one_delegate(Edge(), (x,), None)
    for i, (out, ref) in enumerate(zip(tester.outputs, tester.reference_outputs())):
        np.testing.assert_array_equal(out, ref, err_msg=f"output {i}")


def test_unsupported_cases_stay_on_cpu_with_a_reason():
    class Unsupported(torch.nn.Module):
        def forward(self, x, i):
            return torch.prod(i, 1), torch.prod(x, 1, dtype=torch.float64).float() * 2.0

    tester = QnnTester(Unsupported(), (torch.randn(3, 4), torch.ones(3, 4, dtype=torch.int32))).lower()
    reasons = tester.partitioner.rejected_nodes
    assert "float32" in reasons["aten_prod_dim_int"] and "dtype" in reasons["aten_prod_dim_int_1"], reasons
    tester.to_executorch().run().compare()
