"""Integer and bool tensors through a delegate: token ids (int64), positions and masks (bool) go
in, move (view / transpose / slice / select / expand / cat / clone) and come out without a CPU
cast, on the host engine and on QNN (INT_64 is INT_32 there), in fp16 and quantized graphs."""

from __future__ import annotations

import numpy as np
import torch

from backends.qualcomm import QuantDtype
from backends.qualcomm.tests.helpers.quant_tester import QuantTester
from backends.qualcomm.tests.helpers.tester import QnnTester


class MovesIdsAndMasks(torch.nn.Module):
    """Every data movement op on int64 ids and a bool mask, plus one float op (x * 2).
    `bool_slice`: also slice the bool mask (QNN's HTP StridedSlice refuses BOOL_8)."""

    def __init__(self, bool_slice: bool = True):
        super().__init__()
        self.bool_slice = bool_slice

    def forward(self, ids, mask, x):
        moved = (
            ids.view(3, 4),
            ids.t(),
            ids[:, 1:4],
            ids.unsqueeze(1).expand(2, 3, 6),
            torch.cat([ids, ids], 0),
            ids.select(1, 2),
            mask.transpose(0, 1),
            mask.unsqueeze(0),
        )
        return moved + ((mask[:, 2:],) if self.bool_slice else ()) + (x * 2.0,)


def _inputs():
    torch.manual_seed(0)
    return (torch.randint(-5, 30000, (2, 6)), torch.rand(2, 6) > 0.5, torch.randn(2, 6))


def _assert_exact(outputs, expected):
    for i, (got, want) in enumerate(zip(outputs, expected)):
        got = np.asarray(got).reshape(want.shape)
        if want.dtype == np.float32:
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3, err_msg=f"output {i}")
        else:
            assert got.dtype == want.dtype, f"output {i}: {got.dtype} != {want.dtype}"
            np.testing.assert_array_equal(got, want, err_msg=f"output {i}")


def _expected(module, inputs):
    return [o.numpy() for o in module(*inputs)]


def test_int_and_bool_tensors_stay_in_one_fp16_delegate():
    module, inputs = MovesIdsAndMasks().eval(), _inputs()
    tester = QnnTester(module, inputs).lower()
    assert tester.cpu_op_names() == [] and len(tester.delegate_blobs()) == 1
    tester.to_executorch().run()
    _assert_exact(tester.outputs, _expected(module, inputs))


def test_int_and_bool_tensors_in_a_quantized_graph():
    module, inputs = MovesIdsAndMasks().eval(), _inputs()
    tester = QuantTester(module, inputs, QuantDtype.use_8a8w).lower()
    assert tester.cpu_op_names() == []
    tester.to_executorch().run()
    _assert_exact(tester.outputs[:-1], _expected(module, inputs)[:-1])


def test_mixed_dtypes_are_refused_with_a_reason():
    from backends.qualcomm.builders.registry import check_data_io

    class Cat(torch.nn.Module):
        def forward(self, a, b):
            return torch.cat([a, b.to(torch.int32)])

    graph = torch.export.export(Cat(), (torch.zeros(2, dtype=torch.int64), torch.zeros(2))).graph
    cat = next(n for n in graph.nodes if n.target == torch.ops.aten.cat.default)
    assert check_data_io(cat) == (False, "mixed dtypes ['torch.int32', 'torch.int64']")


def test_int_and_bool_tensors_on_qnn_equal_the_host_engine(real_qnn):
    from backends.qualcomm.tests.helpers.runtime import payload_on_both_engines

    module, inputs = MovesIdsAndMasks().eval(), _inputs()
    # QNN's validation keeps the bool slice on the CPU ("Unsupported input/output datatypes
    # requested for the HTP Op 'StridedSlice'": in[0] BOOL_8); the rest is one delegate
    assert QnnTester(module, inputs).lower().cpu_op_names() == ["aten.slice_copy.Tensor"]
    module = MovesIdsAndMasks(bool_slice=False).eval()
    tester = QnnTester(module, inputs).lower()
    assert tester.cpu_op_names() == [] and len(tester.delegate_blobs()) == 1
    qnn, host = payload_on_both_engines(tester.delegate_blobs()[0], inputs, module)
    expected = _expected(module, inputs)
    _assert_exact(host, expected)
    _assert_exact(qnn, expected)


class CastsQnnComputesWrong(torch.nn.Module):
    """uint8 pixels -> float (QNN 2.51's HTP Cast UINT_8 -> FLOAT_32 gives 0 / 1) and
    float -> bool of fractional values (its Cast FLOAT_32 -> BOOL_8 truncates: 0.25 -> False)."""

    def forward(self, pixels, x):
        return pixels.to(torch.float32) * 0.5 - 3.0, x.bool(), (x * 4.0).to(torch.bool)


def _cast_inputs():
    pixels = torch.arange(256, dtype=torch.int32).to(torch.uint8).reshape(2, 128)
    x = torch.tensor([[0.0, 0.25, -0.25, 0.5, -0.75, 1.5, -2.0, 0.0, 1e-3, -1e-3, 7.0, 0.1]])
    return pixels, x


def test_casts_qnn_computes_wrong_are_lowered_exactly():
    module, inputs = CastsQnnComputesWrong().eval(), _cast_inputs()
    tester = QnnTester(module, inputs).lower()
    # uint8 -> INT_32 -> FLOAT_32; the bool casts are NotEqual(x, 0)
    tester.check_one_delegate_ops({"Cast": 2, "ElementWiseNotEqual": 2})
    tester.to_executorch().run()
    _assert_exact(tester.outputs, _expected(module, inputs))


def test_casts_qnn_computes_wrong_on_qnn_equal_eager(real_qnn):
    from backends.qualcomm.tests.helpers.runtime import payload_on_both_engines

    module, inputs = CastsQnnComputesWrong().eval(), _cast_inputs()
    tester = QnnTester(module, inputs).lower()
    qnn, host = payload_on_both_engines(tester.delegate_blobs()[0], inputs, module)
    expected = _expected(module, inputs)
    _assert_exact(host, expected)
    _assert_exact(qnn, expected)  # a single Cast gave 0 / 1 for every pixel, False for 0.25


class BoolConstants(torch.nn.Module):
    """bool constants created in forward (a causal mask `torch.ones(T, T, dtype=torch.bool)`):
    STATIC BOOL_8 tensors (they stayed on the CPU: 'only float32, int32 and int64 constants')."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keep = torch.ones(x.shape[-2], x.shape[-1], dtype=torch.bool)
        return torch.where((x > 0) & keep & torch.ones_like(x, dtype=torch.bool), x, -x)


def test_bool_constants_are_delegated():
    x = torch.randn(2, 4, 8)
    tester = QnnTester(BoolConstants().eval(), (x,)).lower()
    assert tester.cpu_op_names() == [], tester.partitioner.rejected_nodes
    tester.to_executorch().run().compare(rtol=1e-3, atol=1e-3)  # fp16


class TruncatesInput(torch.nn.Module):
    """upstream's Cast case: a float32 graph input cast to int32 (truncation)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.type(torch.IntTensor), (x * 1.0).to(torch.int32)


def test_cast_of_a_graph_input_reads_its_float32_values(qnn_binary):
    """fp16: a Cast to int of a FLOAT_32 graph input truncates the caller's float32 values (QNN
    2.51's HTP does: trunc(2.9995) = 2, where float16 gives 3.0 and 3; measured 12 of 12 such
    values), while other ops read the input rounded to float16 (x * 1.0 here: 3)."""
    from backends.qualcomm.tests.helpers.runtime import QNN_LOADED, payload_on_both_engines

    torch.manual_seed(0)
    x = 10 * torch.rand(6, 20)
    below = torch.tensor([2.9995, 3.9996, 0.9999, 7.999, 5.9985, 1.9996, 8.998, 9.999, 4.9992, 6.9985])
    x.view(-1)[: below.numel()] = below
    module = TruncatesInput().eval()
    tester = QnnTester(module, (x,)).lower().check_fully_delegated().check_count(1).to_executorch().run()
    truncated = x.to(torch.int32).numpy()
    through_half = x.half().float().to(torch.int32).numpy()
    assert (truncated != through_half).sum() >= below.numel()  # the input holds such values
    runs = [("host engine", tester.outputs)]
    if QNN_LOADED:
        runs.append(("QNN", payload_on_both_engines(tester.delegate_blobs()[0], (x,), module)[0]))
    for what, (direct, rounded) in runs:
        np.testing.assert_array_equal(direct, truncated, err_msg=what)
        np.testing.assert_array_equal(rounded, through_half, err_msg=what)
