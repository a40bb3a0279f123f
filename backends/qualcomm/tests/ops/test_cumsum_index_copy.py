"""cumsum (QNN CumulativeSum) and index_copy (export: index_put -> ScatterNd).

One multi-output module per family: fp16 lowered fully and compared with eager (int inputs
exactly); 8a8w and 16a8w against the QDQ reference in steps; on real QNN (context binary) QNN's
outputs against the host engine's of the same blob; host-engine edge values (NaN / inf, int
wrap-around)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from backends.qualcomm import QuantDtype
from backends.qualcomm.tests.helpers.quant_tester import QuantTester, step_stats
from backends.qualcomm.tests.helpers.runtime import delegate_output_scales, payload_on_both_engines
from backends.qualcomm.tests.helpers.tester import QnnTester, randn

A8W8, A16W8 = QuantDtype.use_8a8w, QuantDtype.use_16a8w


class Cumsums(torch.nn.Module):
    """Float cumsum along every kind of axis (first, middle, last, negative), and index_copy
    along a middle and the leading axis (export makes it an index_put: ScatterNd)."""

    def forward(self, x):
        idx = torch.tensor([2, 0])
        return (
            torch.cumsum(x, 0),
            torch.cumsum(x, 1),
            torch.cumsum(x, -1),
            torch.cumsum(x * 0.5, 2),
            x.index_copy(1, idx, x[:, :2] * -2.0),
            x.index_copy(0, torch.tensor([1]), x[:1] + 1.0),
        )


class IntCumsums(torch.nn.Module):
    """int64 / int32 (summed in int64: a Cast first) / bool (counts) inputs."""

    def forward(self, a, b, mask):
        return torch.cumsum(a, 1), torch.cumsum(b, -1), torch.cumsum(mask, 0), torch.cumsum(a, 0, dtype=torch.int32)


def _x() -> torch.Tensor:
    return randn(2, 3, 4, 5, seed=11)


def _int_inputs():
    g = torch.Generator().manual_seed(12)
    return (
        torch.randint(-50, 50, (2, 3, 4), generator=g),
        torch.randint(-9, 9, (3, 5), generator=g, dtype=torch.int32),
        torch.rand(4, 3, generator=g) > 0.5,
    )


# ---- fp16 ---------------------------------------------------------------------------------
def test_fp16_cumsum_and_index_copy_match_eager():
    tester = QnnTester(Cumsums(), (_x(),)).run_and_compare(atol=2e-3, rtol=2e-3)
    tester.check_count(1)
    ops = tester.payload().op_types()
    assert ops.get("CumulativeSum") == 4 and ops.get("ScatterNd") == 2, ops


def test_int_cumsums_are_exact():
    tester = QnnTester(IntCumsums(), _int_inputs()).lower().check_fully_delegated().check_count(1)
    tester.to_executorch().run()
    for i, (out, ref) in enumerate(zip(tester.outputs, tester.reference_outputs())):
        assert out.dtype == ref.dtype, (i, out.dtype, ref.dtype)
        np.testing.assert_array_equal(out, ref, err_msg=f"output {i}")


# ---- quantized ----------------------------------------------------------------------------
@pytest.mark.parametrize("quant_dtype", [A8W8, A16W8], ids=["8a8w", "16a8w"])
def test_quantized_cumsum_and_index_copy_match_qdq_reference(quant_dtype):
    """Within quant_tester's PT2E bounds (8-bit: 1 step on <= 15%, 16-bit: <= 16 steps)."""
    QuantTester(Cumsums(), (_x(),), quant_dtype).run_and_compare_steps()


# ---- host engine edge values ----------------------------------------------------------------
def test_engine_cumsum_nan_inf_and_int64_wrap():
    x = torch.tensor([[1.0, float("nan"), 2.0], [float("inf"), -float("inf"), 1.0], [0.5, -0.0, 0.25]])
    big = torch.tensor([[2**62, 2**62, 1]])

    class Edge(torch.nn.Module):
        def forward(self, x, big):
            return torch.cumsum(x, 1), torch.cumsum(x, 0), torch.cumsum(big, 1)

    tester = QnnTester(Edge(), (x, big)).lower().check_fully_delegated().to_executorch().run()
    for i, (out, ref) in enumerate(zip(tester.outputs, tester.reference_outputs())):
        np.testing.assert_array_equal(out, ref, err_msg=f"output {i}")  # values exact in fp16


# ---- real QNN -------------------------------------------------------------------------------
@pytest.mark.parametrize("quant_dtype", [None, A8W8, A16W8], ids=["fp16", "8a8w", "16a8w"])
def test_cumsum_family_on_real_qnn(real_qnn, quant_dtype):
    """Measured (QNN 2.51 HTP emulation vs host engine): fp16 max abs diff 2.0e-3 (values up to
    ~8); 8a8w cumsums within 2 steps (54-98% exact), 16a8w cumsums within 17-24 steps (13-22%
    exact), index_copy bit-exact."""
    inputs = (_x(),)
    module = Cumsums()
    tester = (QnnTester(module, inputs) if quant_dtype is None else QuantTester(module, inputs, quant_dtype)).lower()
    tester.check_fully_delegated().check_count(1)
    qnn, host = payload_on_both_engines(tester.delegate_blobs()[0], inputs, tester.module)
    if quant_dtype is None:
        for i, (q, h) in enumerate(zip(qnn, host)):
            err = float(np.abs(q - h).max())
            print(f"fp16 output {i}: max abs diff {err:.3g}")
            assert err <= 1e-2 * max(1.0, float(np.abs(h).max())), f"output {i}: {err}"
        return
    # the quantized cumsum runs in float between Dequantize and Quantize: in fp16 on HTP, in fp32
    # on the host engine, so outputs differ by up to 2^-11 of their range (8-bit: 2 steps on a few
    # %; 16-bit: 32 steps), as ops/test_reduce's var / std
    stats = [
        step_stats(q, h, scale) for scale, q, h in zip(delegate_output_scales(tester.delegate_blobs()[0]), qnn, host)
    ]
    print("\n".join(f"{quant_dtype.name} delegate output {i}: {st}" for i, st in enumerate(stats)))
    limit = 2 if quant_dtype == A8W8 else 32
    assert all(st.max_diff <= limit for st in stats), [str(st) for st in stats]


def test_int_cumsum_on_real_qnn(real_qnn):
    inputs = _int_inputs()
    tester = QnnTester(IntCumsums(), inputs).lower().check_fully_delegated().check_count(1)
    qnn, host = payload_on_both_engines(tester.delegate_blobs()[0], inputs, tester.module)
    for i, (q, h) in enumerate(zip(qnn, host)):
        np.testing.assert_array_equal(q, h, err_msg=f"output {i}")
