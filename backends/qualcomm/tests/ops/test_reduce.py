"""Reductions: amax / amin, max.dim / min.dim (values + indices), argmax / argmin, any (bool),
var / std (+ vector norms, which export decomposes), sort (values + indices, any axis).

Each family is one multi-output module lowered once: fp16 vs eager, 8a8w / 16a8w vs the QDQ
reference (float outputs in steps of their encoding, index / bool outputs exactly), on the
real QNN (context binary, QNN outputs vs host-engine outputs of the same delegate), and the
host-engine kernels' edge values (NaN, inf, ties, bool). Then max() / min() of every element
(ReduceMax / ReduceMin of the flattened input, the 0-d result stored as [1]), exactly on both
engines (`qnn_binary`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch


from backends.qualcomm import QuantDtype
from backends.qualcomm.tests.helpers.engines import qnn_vs_host
from backends.qualcomm.tests.helpers.quant_tester import (
    QuantTester,
    compare_with_qdq,
    lower_to_one_delegate,
    output_encodings,
    step_stats,
)
from backends.qualcomm.tests.helpers.runtime import (
    QNN_LOADED,
    delegate_output_scales,
    needs_qnn,
    one_delegate_blob,
    payload_on_both_engines,
)
from backends.qualcomm.tests.helpers.tester import QnnTester, randn

A8W8, A16W8 = QuantDtype.use_8a8w, QuantDtype.use_16a8w
QUANT_DTYPES = [A8W8, A16W8]


def distinct_values(*shape: int, seed: int = 0) -> torch.Tensor:
    """Distinct values (multiples of 1/8, exact in fp16): argmax / argmin have no ties."""
    generator = torch.Generator().manual_seed(seed)
    n = int(np.prod(shape))
    return (torch.randperm(n, generator=generator).float() - n / 2).reshape(shape) / 8.0


class Extremes(torch.nn.Module):
    """Float max / min reductions: one output per op (values and indices of max.dim / min.dim)."""

    def forward(self, x):
        values, indices = torch.max(x, 1)
        min_values, min_indices = torch.min(x, -1, keepdim=True)
        return (
            torch.amax(x, (1, 2)),
            torch.amin(x, -1, keepdim=True),
            x.amin((0, 1, 2, 3), keepdim=True),
            values,
            indices,
            min_values,
            min_indices,
            torch.max(x, 3)[0],
            torch.argmax(x, 1),
            torch.argmin(x, -1, keepdim=True),
            torch.argmax(x, 0),
            torch.argmax(x, keepdim=True),  # dim=None: the flattened input's index, [1, 1, 1, 1]
            torch.argmin(x, keepdim=True),
            *torch.sort(x),
            *torch.sort(x, -1, descending=True),
        )


class QuantExtremes(torch.nn.Module):
    """The quantized family: values share the input's encoding (amax / amin / max / min) or run
    in float on the dequantized input (max.dim / min.dim, argmax: indices are not quantized)."""

    def forward(self, x):
        values, indices = torch.max(x, 1)
        return (
            torch.amax(x, (1, 2)),
            torch.amin(x, -1, keepdim=True),
            x.amax((0, 1, 2, 3), keepdim=True),
            values * 2.0,
            indices,
            torch.min(x, 2)[0] * 2.0,
            torch.argmax(x, -1),
            torch.argmin(x, 1, keepdim=True),
            torch.sort(x)[0] * 2.0,
            torch.sort(x, -1, True)[1],
        )


class BoolReductions(torch.nn.Module):
    """any over a bool mask (scaled_dot_product_attention's masking uses any.dim)."""

    def forward(self, mask):
        return (
            mask.any(-1),
            mask.any(1, keepdim=True),
            torch.any(mask, dim=(1, 2)),
            torch.any(mask, dim=(0, 1, 2, 3), keepdim=True),
        )


def bool_mask(*shape: int, seed: int = 0) -> torch.Tensor:
    """Random bool mask with some all-False rows along the last axis (any = False there)."""
    mask = torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) > 0.7
    mask[0, 0] = False
    return mask


# ---- fp16 ---------------------------------------------------------------------------


def test_fp16_extremes_match_eager():
    tester = QnnTester(Extremes(), (distinct_values(2, 3, 4, 5),)).run_and_compare(atol=1e-3, rtol=1e-3)
    assert tester.cpu_nodes() == [] and len(tester.delegate_blobs()) == 1
    types = tester.payload().op_types()
    assert types.get("ReduceMax") == 3 and types.get("ReduceMin") == 3 and types.get("Argmax") == 4, types
    assert types.get("Argmin") == 3, types  # min.dim, argmin, argmin(keepdim=True)


def test_fp16_any_matches_eager():
    tester = QnnTester(BoolReductions(), (bool_mask(2, 3, 4, 5),)).run_and_compare(atol=0, rtol=0)
    assert tester.cpu_nodes() == [] and len(tester.delegate_blobs()) == 1
    assert not tester.outputs[0].all() and tester.outputs[0].any()  # both values occur


# ---- quantized ------------------------------------------------------------------------


@pytest.mark.parametrize("quant_dtype", QUANT_DTYPES, ids=["8a8w", "16a8w"])
def test_quantized_extremes_match_qdq_reference(quant_dtype):
    tester = QuantTester(QuantExtremes(), (randn(2, 3, 4, 5, seed=3),), quant_dtype)
    tester.lower().check_fully_delegated().to_executorch().run()
    stats = compare_with_qdq(tester)
    # amax / amin select an input code (shared encoding): the only differences come from the
    # graph input's Quantize at near-ties (measured over 6 seeds: 8-bit 90-100% exact, max 1
    # step; 16-bit exact)
    if quant_dtype == A16W8:
        assert all(s.max_diff == 0 for s in stats[:3]), [str(s) for s in stats[:3]]


# ---- real QNN --------------------------------------------------------------------------


class RealFamily(torch.nn.Module):
    """One small model with every op of this file that QNN runs (float input)."""

    def forward(self, x):
        y = x * 1.5
        values, indices = torch.max(y, 1)
        return (
            torch.amax(y, (1, 2)),
            torch.amin(y, -1, keepdim=True),
            values * 2.0,
            indices,
            torch.min(y, 2)[0] * 2.0,
            torch.argmax(y, -1),
            torch.argmin(y, 1, keepdim=True),
            torch.argmax(y),  # 0-d: the flattened input's index, stored as [1]
            torch.argmin(y, keepdim=True),
            torch.var(x, 1),
            torch.std(x, (1, 2), correction=0, keepdim=True),
            *torch.sort(y),
            torch.sort(y, -1, True)[0],
        )


@needs_qnn
@pytest.mark.parametrize("quant_dtype", [None, A8W8, A16W8], ids=["fp16", "8a8w", "16a8w"])
def test_real_qnn_matches_host(real_qnn, quant_dtype):
    """Measured (QNN 2.51 HTP emulation vs host engine): indices equal; fp16 values within
    fp16 precision (var: 0.0625 on values up to 49); 8a8w within 1 step (62-100% exact);
    16a8w extremes within 2 steps, var / std within 32 16-bit steps (their float chain runs
    in fp16 on HTP, in fp32 on the host: 2^-11 of the range)."""
    inputs = (distinct_values(2, 3, 4, 5),)
    module = RealFamily()
    tester = (QnnTester(module, inputs) if quant_dtype is None else QuantTester(module, inputs, quant_dtype)).lower()
    blob = one_delegate_blob(tester)
    qnn, host = payload_on_both_engines(blob, inputs)
    scales = delegate_output_scales(blob)
    for i, (q, h) in enumerate(zip(qnn, host)):
        assert q.shape == h.shape and q.dtype == h.dtype, (i, q.shape, h.shape, q.dtype, h.dtype)
        if np.issubdtype(h.dtype, np.integer) or h.dtype == np.bool_:
            np.testing.assert_array_equal(q, h, err_msg=f"output {i}")
        elif quant_dtype is None or scales[i] is None:  # float graph, or a float op's output (sort)
            # sort's float values of the dequantized y: at most one 8-bit step of y apart in 8a8w
            share = 2.0 / 255 if quant_dtype == A8W8 else 2e-3
            assert float(np.abs(q - h).max()) <= share * max(1.0, float(np.abs(h).max())), f"output {i}"
        else:
            stats = step_stats(q, h, scales[i])
            assert stats.max_diff <= (2 if quant_dtype == A8W8 else 64), f"output {i}: {stats}"


@needs_qnn
def test_real_qnn_any_matches_host(real_qnn):
    inputs = (bool_mask(2, 3, 4, 5),)
    tester = QnnTester(BoolReductions(), inputs).lower()
    qnn, host = payload_on_both_engines(one_delegate_blob(tester), inputs)
    for i, (q, h) in enumerate(zip(qnn, host)):
        np.testing.assert_array_equal(q, h, err_msg=f"output {i}")


# ---- host-engine kernels: edge values -------------------------------------------------


def test_kernels_nan_inf_and_ties_follow_pytorch():
    x = torch.tensor(
        [
            [1.0, float("nan"), 3.0, 3.0],
            [-float("inf"), 2.0, 2.0, -1.0],
            [float("inf"), float("inf"), 0.0, float("nan")],
        ]
    )

    class Edge(torch.nn.Module):
        def forward(self, x):
            values, indices = torch.max(x, 1)
            return (
                torch.amax(x, 1),
                torch.amin(x, 1),
                values,
                indices,
                torch.argmax(x, 1),
                torch.argmin(x, 1),
                torch.argmax(x, 0),
                torch.argmin(x, 0),
            )

    tester = QnnTester(Edge(), (x,)).lower().check_fully_delegated().to_executorch().run()
    for i, (out, ref) in enumerate(zip(tester.outputs, tester.reference_outputs())):
        np.testing.assert_array_equal(out, ref, err_msg=f"output {i}")


def test_every_element_extremes_and_rank0_argmax_delegate():
    """amax over every dim, max(), argmax of a 1-d input and argmin / argmax without dim (upstream's
    Argmax(), Argmin()) reduce the flattened input to [1] (the 0-d result, QNN refusing rank 0:
    ops/test_division.py); QNN validates and finalizes them."""

    class AllDims(torch.nn.Module):
        def forward(self, x):
            return torch.amax(x, (0, 1, 2, 3)), torch.argmax(x[0, 0, 0], 0), x.max(), x * 2.0, torch.argmin(x)

    tester = QnnTester(AllDims(), (distinct_values(2, 3, 4, 5),)).lower()
    assert tester.cpu_op_names() == [], tester.partitioner.rejected_nodes
    tester.to_executorch().run().compare(atol=0, rtol=0)
    assert [o.shape for o in tester.outputs] == [(), (), (), (2, 3, 4, 5), ()]


class MeanSumOfEverything(torch.nn.Module):
    """mean / sum over every dim (upstream's Mean() and Mean(dim=[])): a 0-d result."""

    def forward(self, x):
        return x.mean(), torch.mean(x, dim=[]), x.sum() * 0.5


@pytest.mark.parametrize("quant_dtype", [None, A8W8, A16W8], ids=["fp16", "8a8w", "16a8w"])
def test_mean_sum_of_every_element(quant_dtype):
    """The flattened input reduced to [1] (QNN refuses a rank-0 ReduceMean output: 3110)."""
    inputs = (randn(4, 6, 8, seed=5),)
    if quant_dtype is None:
        tester = QnnTester(MeanSumOfEverything(), inputs).run_and_compare(atol=1e-3, rtol=1e-3)
    else:
        tester = QuantTester(MeanSumOfEverything(), inputs, quant_dtype).run_and_compare_steps()
    assert tester.cpu_nodes() == [] and len(tester.delegate_blobs()) == 1
    assert [o.shape for o in tester.outputs] == [(), (), ()]


# ---- variance / std / vector norms -------------------------------------------------------


class Spreads(torch.nn.Module):
    """var / std (correction 0 and 1, dims, keepdim) and vector norms (export decomposes them:
    pow / abs -> sum or amax -> pow)."""

    def forward(self, x):
        return (
            torch.var(x, 1),
            torch.std(x, (1, 2), correction=0, keepdim=True),
            torch.var(x, -1, keepdim=True),
            torch.std(x, 3),
            torch.linalg.vector_norm(x, 2, dim=-1),
            torch.linalg.vector_norm(x, 1, dim=(1,)),
            torch.linalg.vector_norm(x, float("inf"), dim=-1, keepdim=True),
        )


def test_fp16_spreads_match_eager():
    tester = QnnTester(Spreads(), (randn(2, 3, 4, 5, seed=1),)).run_and_compare()
    assert tester.cpu_nodes() == [] and len(tester.delegate_blobs()) == 1


class QuantSpreads(torch.nn.Module):
    def forward(self, x):
        return torch.var(x, 1), torch.std(x, (1, 2), correction=0, keepdim=True), torch.var(x, -1, keepdim=True)


@pytest.mark.parametrize("quant_dtype", QUANT_DTYPES, ids=["8a8w", "16a8w"])
def test_quantized_spreads_match_qdq_reference(quant_dtype):
    """8-bit: the graph input's Quantize rounds x / scale through fp16 as HTP does (PT2E rounds
    exactly), which moves ~5% of the input codes by 1; a variance of 3-5 such codes then moves
    by up to 3 output steps (measured over 4 seeds: 70-97.5% exact, max 1-3 steps). 16-bit:
    exact (4 seeds)."""
    tester = QuantTester(QuantSpreads(), (randn(2, 3, 4, 5, seed=1),), quant_dtype)
    tester.lower().check_fully_delegated().to_executorch().run()
    compare_with_qdq(tester, (3, 0.7))


def test_sort_ties_keep_the_lower_index_first_on_the_host_engine():
    """(QNN 2.51's TopK puts the higher index first among equal values - also a valid
    stable=False sort; sort.stable with stable=True stays on the CPU.)"""
    x = torch.tensor([[3.0, 1.0, 3.0, 2.0, 1.0, 3.0], [0.0, -0.0, 5.0, 5.0, -1.0, 0.0]])

    class Sorts(torch.nn.Module):
        def forward(self, x):
            return (*torch.sort(x), *torch.sort(x, descending=True))

    tester = QnnTester(Sorts(), (x,)).lower().check_fully_delegated().to_executorch().run()
    expected = (*torch.sort(x, stable=True), *torch.sort(x, descending=True, stable=True))
    for i, (out, ref) in enumerate(zip(tester.outputs, expected)):
        np.testing.assert_array_equal(out, ref.numpy(), err_msg=f"output {i}")


class ChannelSorts(torch.nn.Module):
    """A conv's output sorted over its channels (dim 1, as upstream's Conv2dSort) both ways, and
    over dim 0 of a 2-D tensor: values and indices."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 6, 3)

    def forward(self, x, y):
        z = self.conv(x)
        return (*torch.sort(z, 1, descending=True), torch.sort(z, 1)[0], *torch.sort(y, 0))


@pytest.mark.parametrize("quant_dtype", [None, A8W8], ids=["fp16", "8a8w"])
def test_sort_over_any_axis_on_both_engines(qnn_binary, quant_dtype):
    """QNN's TopK sorts the last axis: the sort axis is moved last (Transpose) and the values and
    indices moved back. fp16: values and indices equal to eager (no ties in these inputs);
    8a8w: values against the QDQ reference; QNN (x86 emulation) against the host engine."""
    model, inputs = ChannelSorts(), (randn(1, 3, 6, 7, seed=4), randn(5, 4, seed=5))
    if quant_dtype is None:
        tester = QnnTester(model, inputs).lower().check_fully_delegated().to_executorch().run()
        tester.compare(atol=1e-2, rtol=1e-2)
        for i in (1, 4):  # the indices
            np.testing.assert_array_equal(tester.outputs[i], tester.reference_outputs()[i])
    else:
        tester = QuantTester(model, inputs, quant_dtype).lower().check_fully_delegated().to_executorch().run()
        for i in (0, 2, 3):  # the values, in the conv output's / y's encoding
            np.testing.assert_allclose(tester.outputs[i], tester.reference_outputs()[i], atol=0.05)
    assert tester.payload().op_types().get("TopK") == 3
    if QNN_LOADED:
        qnn, host = payload_on_both_engines(one_delegate_blob(tester), inputs, model)
        for i, (q, h) in enumerate(zip(qnn, host)):
            np.testing.assert_allclose(q, h, atol=2e-3, err_msg=f"output {i}")


# ---- max() / min() of every element ------------------------------------------------------------
class EveryElementExtremes(torch.nn.Module):
    """max() / min() of every element (of a rank-4 and of a rank-1 tensor), amax over every dim."""

    def forward(self, x):
        return x.max(), x.min(), torch.amax(x, (0, 1, 2, 3)), x[0, 1, 2].min(), x.max() - x.min()


def extreme_input() -> torch.Tensor:
    """(2, 3, 4, 5) of multiples of 1/64 in [-2, 2] (exact in fp16), one extreme of each sign."""
    g = torch.Generator().manual_seed(3)
    x = torch.randint(-100, 101, (2, 3, 4, 5), generator=g).float() / 64.0
    x[1, 2, 3, 4], x[0, 0, 1, 2] = 2.0, -1.984375
    return x


def test_max_min_of_every_element_fp16_exact_on_both_engines(qnn_binary):
    """Selections of one input value: eager's (0-d outputs) within 1e-6 relative (QNN returns
    2 - 2^-22 for a 2.0 read through HTP's fp16 path; the host engine exactly 2.0), QNN vs host
    within 2e-3 of the magnitude."""
    inputs = (extreme_input(),)
    tester = lower_to_one_delegate(EveryElementExtremes(), inputs, None)
    for i, (out, ref) in enumerate(zip(tester.outputs, tester.reference_outputs())):
        assert out.shape == ref.shape == (), (i, out.shape)
        np.testing.assert_allclose(out, ref, rtol=1e-6, atol=0, err_msg=f"output {i}")
    ops = tester.payload().op_types()
    assert ops.get("ReduceMax") == 3 and ops.get("ReduceMin") == 3, ops
    qnn_vs_host(tester, inputs)


@pytest.mark.parametrize("quant_dtype", [A8W8, A16W8], ids=["8a8w", "16a8w"])
def test_max_min_of_every_element_quantized_exact(qnn_binary, quant_dtype):
    """The output shares the input's encoding (QuantFamily.SHARED): the selected code itself,
    exactly the QDQ reference's; x.max() - x.min() (its own encoding) within 1 step. QNN equal to
    the host engine."""
    inputs = (extreme_input(),)
    tester = lower_to_one_delegate(EveryElementExtremes(), inputs, quant_dtype)
    for i, (out, ref, enc) in enumerate(
        zip(tester.outputs, tester.reference_outputs(), output_encodings(tester.module))
    ):
        stats = step_stats(out, ref, enc[0])
        print(f"output {i} ({quant_dtype.name}): {stats}")
        assert stats.max_diff <= (1 if i == 4 else 0), (i, stats)
    for i, stats in enumerate(qnn_vs_host(tester, inputs, delegate_output_scales(one_delegate_blob(tester)))):
        assert stats.max_diff == 0, (i, stats)


def test_quantized_var_over_one_element_calibrates():
    """var over a single-element dim with correction 1 is NaN (upstream's edge case): calibration
    failed ('min nan should be less than max nan'); the observer now leaves NaN out, the var stays
    on the CPU with its reason, the rest is delegated and matches the QDQ reference."""

    class OneElementVar(torch.nn.Module):
        def forward(self, x):
            return torch.var(x, dim=[1], correction=1), x * 2.0

    tester = QuantTester(OneElementVar(), (randn(3, 1, 5, seed=4),), A8W8).lower()
    assert tester.cpu_op_names() == ["aten.var.correction"], tester.partitioner.rejected_nodes
    assert "inf / nan result" in tester.partitioner.rejected_nodes["aten_var_correction"]
    tester.to_executorch().run()
    np.testing.assert_array_equal(tester.outputs[1], tester.reference_outputs()[1])
