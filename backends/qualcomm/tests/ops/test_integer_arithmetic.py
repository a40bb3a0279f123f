"""Integer add / sub / mul (Tensor and Scalar forms, alpha, rsub) of int32 / int64 tensors
inside a delegate: ElementWiseAdd / Subtract / Multiply on INT_32 (int64: INT_64 in the payload,
INT_32 on QNN). QNN 2.51's HTP saturates them on overflow (measured); the host engine does the
same, so both engines agree everywhere, and equal eager while results fit int32 (eager wraps).

Each module is lowered once to one delegate, with QNN's context binary when QNN's library loads
(`qnn_binary`); QNN's outputs are compared with the host engine's on the same blob."""

from __future__ import annotations

import numpy as np
import torch

from backends.qualcomm import QuantDtype
from backends.qualcomm.tests.helpers.engines import qnn_vs_host
from backends.qualcomm.tests.helpers.quant_tester import QuantTester, lower_to_one_delegate
from backends.qualcomm.tests.helpers.tester import INT32_BOUNDARY, QnnTester, assert_outputs_exact, random_int32

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


class PositionIds(torch.nn.Module):
    """Position-id style arithmetic (int64, as transformers computes it) and int32 products."""

    def forward(self, ids, offset, mask, a, b):
        positions = (mask.cumsum(-1) - 1) * mask  # left-padded batch: 0.. from the first token
        return (
            ids + offset,
            ids * 2 - 1,
            1 - ids,
            torch.sub(ids, offset, alpha=3),
            ids.add(4, alpha=2),
            ids * mask,
            positions + offset,
            a * b,
            a - b,
            a + 7,
            torch.rsub(a, b),
        )


def position_inputs():
    ids = torch.arange(16).reshape(2, 8)
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 1]])
    g = torch.Generator().manual_seed(3)
    a = torch.randint(-40000, 40000, (2, 8), generator=g, dtype=torch.int32)
    b = torch.randint(-40000, 40000, (2, 8), generator=g, dtype=torch.int32)
    return ids, torch.tensor([[5], [-3]]), mask, a, b


def test_position_id_arithmetic_equals_eager_on_both_engines(qnn_binary):
    """Results within int32: every output equals eager exactly (dtype int64 / int32 kept), on
    the host engine and on QNN (equal to the host engine on the same blob); one delegate."""
    inputs = position_inputs()
    tester = lower_to_one_delegate(PositionIds(), inputs, None)
    assert_outputs_exact(tester)
    ops = tester.payload().op_types()
    assert ops["ElementWiseAdd"] >= 4 and ops["ElementWiseSubtract"] >= 5 and ops["ElementWiseMultiply"] >= 5, ops
    qnn_vs_host(tester, inputs)


class Overflowing(torch.nn.Module):
    def forward(self, a, b, c, d):
        return a + b, a - b, a * b, a * 3, a + INT32_MAX, a - INT32_MAX, 5 - a, c + d, c * d, c - d


def overflow_inputs():
    a, b = random_int32((2, 12), 11), random_int32((2, 12), 12, INT32_BOUNDARY[::-1])
    g = torch.Generator().manual_seed(13)
    c = torch.randint(-(2**40), 2**40, (2, 12), generator=g)
    c[0] = a[0].to(torch.int64)  # row 0 fits int32 (only the results overflow), row 1 beyond int32
    d = torch.cat([b[:1].to(torch.int64), torch.randint(-(2**40), 2**40, (1, 12), generator=g)])
    return a, b, c, d


def _saturated(exact: torch.Tensor) -> np.ndarray:
    return exact.clamp(INT32_MIN, INT32_MAX).numpy()


def test_overflow_saturates_on_both_engines(qnn_binary):
    """int32 results beyond int32 are saturated to [-2^31, 2^31 - 1] (eager wraps); int64 tensors
    the same on each operand's low 32 bits (QNN narrows INT_64 by wrapping), sign-extended. QNN
    equals the host engine on every element."""
    inputs = overflow_inputs()
    a, b, c, d = (x.to(torch.int64) for x in inputs)
    tester = lower_to_one_delegate(Overflowing(), inputs, None)
    c32, d32 = c.to(torch.int32).to(torch.int64), d.to(torch.int32).to(torch.int64)  # wraps
    want = [a + b, a - b, a * b, a * 3, a + INT32_MAX, a - INT32_MAX, 5 - a, c32 + d32, c32 * d32, c32 - d32]
    for i, (out, ref, exact) in enumerate(zip(tester.outputs, tester.reference_outputs(), want)):
        assert out.dtype == ref.dtype, (i, out.dtype, ref.dtype)
        np.testing.assert_array_equal(out, _saturated(exact), err_msg=f"output {i}")
        assert (exact != exact.clamp(INT32_MIN, INT32_MAX)).any(), f"output {i}: no overflow tested"
    # where nothing overflows (and int64 operands fit int32), eager's value
    fits = (c.abs() < 2**31) & (d.abs() < 2**31) & ((c + d).abs() < 2**31)
    assert fits.sum() >= 4
    np.testing.assert_array_equal(tester.outputs[7][fits.numpy()], tester.reference_outputs()[7][fits.numpy()])
    qnn_vs_host(tester, inputs)


def test_int64_constant_beyond_int32_refused_with_a_reason():
    """A constant int64 operand holding a value outside int32 (QNN would narrow it by wrapping)
    stays on the CPU with the reason, and so does the integer sum (ReduceSum: float only);
    int32 * int64 (export casts the int32 operand) and the rest are delegated; the program
    equals eager."""

    class Rejected(torch.nn.Module):
        def forward(self, a, c):
            return c + 2**31, a * c, a + 1, (c * c).sum(-1)

    a = torch.tensor([5, -3, 12], dtype=torch.int32)
    tester = QnnTester(Rejected(), (a, torch.tensor([3, 6, -1]))).lower()
    reasons = list(tester.partitioner.rejected_nodes.values())
    assert len(reasons) == 2, reasons
    assert any("holds values that do not fit INT_32" in r for r in reasons), reasons
    assert any("only float32 / float16 are supported" in r for r in reasons), (
        "the integer sum (ReduceSum): not delegated yet"
    )
    tester.to_executorch().run().compare()


class QuantizedWithPositions(torch.nn.Module):
    """A quantized graph reading int arithmetic: embedding(ids + offset) plus positions, linear."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.tok = torch.nn.Embedding(32, 16)
        self.pos = torch.nn.Embedding(16, 16)
        self.proj = torch.nn.Linear(16, 8)

    def forward(self, ids, mask):
        positions = (mask.cumsum(-1) - 1) * mask
        return self.proj(self.tok(ids * 2 + 1) + self.pos(positions - mask + 1))


def test_quantized_graph_with_integer_arithmetic():
    """8a8w: the integer ops stay integer (not annotated), delegated with the rest; the output
    equals the QDQ reference within quant_tester's bounds."""
    ids = torch.tensor([[1, 4, 9, 2, 3, 15, 0, 7]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1]])
    tester = QuantTester(QuantizedWithPositions(), (ids, mask), QuantDtype.use_8a8w)
    tester.run_and_compare_steps()
    tester.check_fully_delegated()
    ops = tester.payload().op_types()
    assert ops["ElementWiseMultiply"] >= 2 and ops["ElementWiseAdd"] >= 2 and ops["ElementWiseSubtract"] >= 2, ops
