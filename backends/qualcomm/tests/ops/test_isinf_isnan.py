"""isinf / isnan of a graph input, exactly, on both engines (ClassifyBuilder).

HTP holds floats without infinities (an infinite tensor compares like NaN there; QNN's IsNan is
true for +-inf and |x| > 65504), so the exact answer comes from the input's IEEE bits: the
caller's FLOAT_32 buffer is bound a second time as an INT_32 graph input (payload
Tensor.bits_of_input; QNN passes integer inputs unconverted) and tested with INT_32 comparisons.
Each test lowers once (with QNN's context binary when QNN's library loads, `qnn_binary`) and
asserts full delegation, outputs equal to eager on the host engine through ExecuTorch, and QNN's
outputs on the same blob equal to eager too. isinf of an internal tensor stays on the CPU, isnan
of one is QNN's IsNan."""

from __future__ import annotations

import gc
from typing import List

import numpy as np
import pytest
import torch

from backends.qualcomm import QuantDtype
from backends.qualcomm.serialization.payload_reader import describe_payload
from backends.qualcomm.serialization.payload_writer import serialize_payload, wrap_context_binary
from backends.qualcomm.serialization.qnn_graph import DataType, QnnGraph, QnnOp, QnnTensor, TensorType
from backends.qualcomm.tests.helpers.quant_tester import (
    QuantTester,
    compare_with_qdq,
    lower_to_one_delegate,
    step_stats,
)
from backends.qualcomm.tests.helpers.runtime import (
    QNN_LOADED,
    delegate_output_scales,
    load_method,
    lower_to_pte,
    native,
    one_delegate_blob,
    payload_on_both_engines,
    run,
)
from backends.qualcomm.tests.helpers.tester import QnnTester

_F32_MAX = float(np.finfo(np.float32).max)


def special_values() -> np.ndarray:
    """Every kind of float32: +-0, normals, fp16 edges and beyond (65504 < |x| < FLT_MAX),
    FLT_MAX, denormals (float32 and fp16), +-inf, NaNs of both signs (quiet, signalling, payloads)."""
    finite = [
        0.0,
        -0.0,
        1.0,
        -2.5,
        65504.0,
        -65504.0,
        65520.0,
        -65536.0,
        1e5,
        -3e9,
        1e30,
        -1e38,
        _F32_MAX,
        -_F32_MAX,
        1e-40,
        -1e-40,
        1.4e-45,
        -1.4e-45,
        1.1754942e-38,
        6e-8,
        -6e-8,
        1e-30,
    ]
    values = np.array(finite + [np.inf, -np.inf], np.float32)
    nan_bits = np.array(
        [0x7FC00000, 0x7F800001, 0x7FFFFFFF, 0x7FA5A5A5, 0xFFC00000, 0xFF800001, 0xFFFFFFFF, 0xFFF00001], np.uint32
    )
    return np.concatenate([values, nan_bits.view(np.float32)])


def special_input(shape=(4, 8)) -> torch.Tensor:
    """`shape` filled with special_values() in a fixed shuffled order."""
    values = special_values()
    n = int(np.prod(shape))
    picked = np.random.default_rng(13).permutation(np.resize(values, n))
    return torch.from_numpy(picked.astype(np.float32).reshape(shape))


def _assert_exact(outputs: List[np.ndarray], refs: List[np.ndarray], what: str) -> None:
    for i, (out, ref) in enumerate(zip(outputs, refs)):
        out, ref = np.asarray(out), np.asarray(ref)
        assert out.dtype == ref.dtype and out.shape == ref.shape, (what, i, out.dtype, ref.dtype, out.shape)
        np.testing.assert_array_equal(out, ref, err_msg=f"{what}, output {i}")  # NaN == NaN here


def _assert_both_engines_exact(tester: QnnTester, inputs, stored_order=None) -> None:
    """Host engine (ExecuTorch run) and, when QNN loads, QNN's outputs equal eager exactly (the
    payload runs take and give tensors in their stored dim order `stored_order`, default
    contiguous)."""
    refs = [np.asarray(r) for r in tester.reference_outputs()]
    _assert_exact(tester.outputs, refs, "host engine vs eager")
    if QNN_LOADED:
        stored = [r.transpose(stored_order) if stored_order else r for r in refs]
        feeds = [x.permute(stored_order).contiguous() if stored_order else x for x in inputs]
        qnn, host = payload_on_both_engines(one_delegate_blob(tester), feeds, tester.module)
        _assert_exact(qnn, stored, "QNN vs eager")
        _assert_exact(host, stored, "host payload vs eager")


def _bits_views(tester: QnnTester) -> List:
    return [t for g in describe_payload(one_delegate_blob(tester)) for t in g.tensors if t.bits_of_input >= 0]


class Classify(torch.nn.Module):
    def forward(self, x, y):
        return torch.isinf(x), torch.isnan(x), torch.isinf(y) | torch.isnan(y), torch.isnan(y)


def test_isinf_isnan_of_graph_inputs_exact_on_both_engines(qnn_binary):
    """Both inputs' bits: +-inf, NaNs of both signs and payloads, |x| > 65504, denormals, +-0 and
    FLT_MAX classified exactly; one INT_32 view per input (bits_of_input 0 and 1), no IsNan."""
    x = special_input((4, 8))
    y = special_input((3, 5, 2)).flip(0).contiguous()
    tester = lower_to_one_delegate(Classify(), (x, y))
    views = _bits_views(tester)
    assert sorted(v.bits_of_input for v in views) == [0, 1], views
    assert all(v.kind == "APP_WRITE" and v.data_type == "INT_32" for v in views), views
    ops = tester.payload().op_types()
    assert "IsNan" not in ops and ops["ElementWiseEqual"] == 4, ops
    assert np.isinf(x.numpy()).sum() >= 2 and np.isnan(x.numpy()).sum() >= 8  # the input holds them
    _assert_both_engines_exact(tester, (x, y))


class Cleanup(torch.nn.Module):
    """The typical use: non-finite inputs to 0 at the model's start, then float ops."""

    def forward(self, x):
        x = torch.where(torch.isinf(x) | torch.isnan(x), torch.zeros_like(x), x)
        return x, x * 0.5 + 1.0, torch.relu(x - 2.0)


def test_nonfinite_cleanup_fully_delegated_on_both_engines(qnn_binary):
    """where(isinf | isnan, 0, x) then ops, one delegate: every non-finite input becomes exactly 0
    on both engines; the float values within one float32 ulp of eager (values exact in fp16, but
    HTP's fp16 path reads a FLOAT_32 tensor 1 ulp off, e.g. -2 as -2.0000002: measured on QNN, and
    the host engine follows it)."""
    x = special_input((2, 3, 8))
    nonfinite = ~torch.isfinite(x)
    x[~nonfinite] = torch.arange(int((~nonfinite).sum()), dtype=torch.float32) / 4.0 - 3.0
    assert nonfinite.sum() >= 10
    tester = lower_to_one_delegate(Cleanup(), (x,))
    runs = [("host engine", tester.outputs)]
    if QNN_LOADED:
        runs.append(("QNN", payload_on_both_engines(one_delegate_blob(tester), (x,), tester.module)[0]))
    refs = tester.reference_outputs()
    for what, outputs in runs:
        assert (outputs[0][nonfinite.numpy()] == 0).all(), what
        for i, (out, ref) in enumerate(zip(outputs, refs)):
            print(f"{what} output {i}: max |out - eager| {np.abs(out - ref).max():.3g}")
            np.testing.assert_allclose(out, ref, rtol=2.4e-7, atol=2.4e-7 * np.abs(ref).max(), err_msg=f"{what} {i}")


class ChannelsLast(torch.nn.Module):
    def forward(self, x):
        return torch.isinf(x), torch.isnan(x)


def test_channels_last_input_bits_are_transposed(qnn_binary):
    """A channels_last input: the INT_32 view keeps its dim order and one Transpose gives the
    logical dims; exact on both engines."""
    x = special_input((2, 3, 4, 5)).to(memory_format=torch.channels_last)
    tester = lower_to_one_delegate(ChannelsLast(), (x,))
    views = _bits_views(tester)
    assert len(views) == 1 and views[0].dim_order == [0, 2, 3, 1], views
    transposes = [op for op in tester.payload().ops if op.type == "Transpose" and op.inputs == ["x_bits"]]
    assert len(transposes) == 1 and transposes[0].params["perm"] == [0, 3, 1, 2], tester.payload()
    _assert_both_engines_exact(tester, (x,), stored_order=(0, 2, 3, 1))


class Internal(torch.nn.Module):
    def forward(self, x):
        h = x * 2.0
        return torch.isinf(h), torch.isnan(h), torch.isnan(x)


def test_internal_tensor_isinf_on_cpu_isnan_is_qnn_isnan():
    """isinf of an internal tensor stays on the CPU with the reason; isnan of one is IsNan (on
    QNN also true for +-inf and |x| > 65504: documented), isnan of the input the bits path."""
    x = torch.tensor([1.0, float("inf"), float("nan"), -3.0])
    tester = QnnTester(Internal(), (x,)).lower()
    reasons = tester.partitioner.rejected_nodes
    assert list(reasons) == ["aten_isinf_default"] and "not a graph input" in reasons["aten_isinf_default"], reasons
    ops = tester.payload().op_types()
    assert ops["IsNan"] == 1 and ops["ElementWiseLess"] == 1, ops
    tester.to_executorch().run().compare()


# ---- payload checks: a view must match its input ------------------------------------------------
def _view_blob(view_dims, bits_of_input: int, view_dtype: int = DataType.INT_32) -> bytes:
    """x FLOAT_32 [2, 3] input, its view as `view_dtype` `view_dims`, y = (view == 0)."""
    tensors = [
        QnnTensor(0, "x", TensorType.APP_WRITE, DataType.FLOAT_32, [2, 3]),
        QnnTensor(1, "x_bits", TensorType.APP_WRITE, view_dtype, list(view_dims), bits_of_input=bits_of_input),
        QnnTensor(2, "zero", TensorType.STATIC, DataType.INT_32, [1], data=np.zeros(1, np.int32)),
        QnnTensor(3, "y", TensorType.APP_READ, DataType.BOOL_8, list(view_dims)),
    ]
    graph = QnnGraph("g", tensors, [QnnOp("eq", "ElementWiseEqual", [1, 2], [3])], [0], [3])
    return wrap_context_binary(serialize_payload([graph]))


def test_host_engine_reads_the_input_bits():
    x = np.array([[0.0, -0.0, 1.0], [np.inf, np.nan, 2.0]], np.float32)
    y = native().run_payload(_view_blob([2, 3], 0), [x])[0]
    np.testing.assert_array_equal(y, x.view(np.int32) == 0)  # +0 only: -0 has the sign bit


@pytest.mark.parametrize(
    "dims, k, dtype, message",
    [
        ([2, 3], 1, DataType.INT_32, "not listed in the graph inputs"),
        ([2, 3], -1, DataType.INT_32, "not listed in the graph inputs"),
        ([3, 2], 0, DataType.INT_32, "cannot view graph input 0"),
        ([2, 3], 0, DataType.INT_64, "cannot view graph input 0"),
    ],
    ids=["index", "none", "dims", "size"],
)
def test_host_engine_rejects_a_view_that_does_not_match(dims, k, dtype, message):
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(Exception, match=message):
        native().run_payload(_view_blob(dims, k, dtype), [x])


def test_payload_round_trip_keeps_bits_of_input():
    graphs = describe_payload(_view_blob([2, 3], 0))
    assert [t.bits_of_input for t in graphs[0].tensors] == [-1, 0, -1, -1]


# ---- quantized graphs -------------------------------------------------------------------------
class CleanupLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x):
        x = torch.where(torch.isinf(x) | torch.isnan(x), torch.zeros_like(x), x)
        return self.linear(x)


@pytest.mark.parametrize("quant_dtype", [QuantDtype.use_8a8w, QuantDtype.use_16a8w], ids=["8a8w", "16a8w"])
def test_nonfinite_cleanup_quantized_fully_delegated(qnn_binary, quant_dtype):
    """The float input's bits are tested before its Quantize (which clamps inf and NaN): one
    delegate, within 1 step of the QDQ reference (calibrated on finite data; measured 8a8w 10 of
    12 exact, 16a8w 9 of 12), QNN equal to the host engine (measured)."""
    x = special_input((3, 8))
    finite = torch.isfinite(x)
    x[finite] = torch.linspace(-2.0, 2.0, int(finite.sum()))
    calibration = [(torch.linspace(-2.0, 2.0, 24).reshape(3, 8),)]
    tester = QuantTester(CleanupLinear(), (x,), quant_dtype, calibration=calibration)
    tester.lower().check_fully_delegated().check_count(1).to_executorch().run()
    assert _bits_views(tester) and "IsNan" not in tester.payload().op_types()
    print(compare_with_qdq(tester, bounds_8bit=(1, 0.75)))
    if QNN_LOADED:
        qnn, host = payload_on_both_engines(one_delegate_blob(tester), (x,), tester.module)
        scale = delegate_output_scales(one_delegate_blob(tester))[0]
        stats = step_stats(qnn[0], host[0], scale)
        print(f"QNN vs host ({quant_dtype.name}): {stats}")
        assert stats.max_diff == 0, stats


def test_pte_on_qnn_through_executorch(real_qnn, tmp_path):
    """The .pte run by ExecuTorch with qnn_runtime_engine = qnn (the backend's QNN runner binds
    each input's buffer to its bits view): on QNN, equal to eager; then the host engine too."""
    x, y = special_input((4, 8)), special_input((3, 5, 2))
    path = lower_to_pte(Classify(), (x, y), tmp_path / "classify.pte")
    refs = [r.numpy() for r in Classify()(x, y)]
    for engine in ("qnn", "host"):
        native().set_runtime_option("qnn_runtime_engine", engine)
        program, method = load_method(path)
        outputs = [o.numpy() for o in run(method, (x, y))]
        assert (native().live_qnn_context_count() > 0) == (engine == "qnn")
        _assert_exact(outputs, refs, f"{engine} through ExecuTorch")
        del method, program
        gc.collect()


# ---- isinf of an internal tensor -----------------------------------------------------------
def test_isinf_stays_on_cpu_with_a_reason():
    class Rejected(torch.nn.Module):
        def forward(self, a, b, x):
            return a & b, a | b, a ^ b, (a > 0) & (b > 0), torch.isinf(x * 2.0), torch.isnan(x)

    a, b = torch.tensor([5, -3, 12], dtype=torch.int32), torch.tensor([3, 6, -1], dtype=torch.int32)
    x = torch.tensor([1.0, float("inf"), float("nan")])
    tester = QnnTester(Rejected(), (a, b, x)).lower()
    reasons = tester.partitioner.rejected_nodes
    assert list(reasons) == ["aten_isinf_default"] and "like NaN" in reasons["aten_isinf_default"], reasons
    tester.to_executorch().run().compare()
