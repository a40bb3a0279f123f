"""bitwise_and / bitwise_or / bitwise_xor of integer tensors (builders/op_bitwise.py): four
bytes split with INT_32 Mod and exact divisions, one shared 65536-entry table per op read by
Gather at 256 x + y, the top byte recombined as signed; Scalar forms as per-byte rows summed.

Each module is lowered once to one delegate, with QNN's context binary when QNN's library loads
(`qnn_binary`): outputs equal eager exactly (host engine), and QNN's outputs equal the host
engine's (hence eager) on the same blob. Operands hold -2^31, 2^31 - 1, -1, 0, 255, -256 next to
random int32 values."""

from __future__ import annotations

import numpy as np
import torch

from backends.qualcomm.serialization.payload_writer import serialize_graphs
from backends.qualcomm.serialization.qnn_graph import DataType, QnnGraph, QnnOp, QnnTensor, TensorType
from backends.qualcomm.tests.helpers.engines import qnn_vs_host, with_qnn_binary
from backends.qualcomm.tests.helpers.quant_tester import lower_to_one_delegate
from backends.qualcomm.tests.helpers.runtime import needs_qnn
from backends.qualcomm.tests.helpers.tester import INT32_BOUNDARY, QnnTester, assert_outputs_exact, random_int32
from backends.qualcomm.utils.runtime_options import require_extension


def _tables(tester: QnnTester) -> int:
    """STATIC 65536-entry tables in the delegate."""
    return sum(1 for t in tester.payload().tensors if t.kind == "STATIC" and t.dims == [65536])


class TensorForms(torch.nn.Module):
    """and / or / xor of two int32 tensors (one broadcast) and of two int64 tensors."""

    def forward(self, a, b, c, d):
        return a & b, a | b, a ^ b, torch.bitwise_and(a, b[0]), c ^ d, c | d, c & d, (a & b) ^ (a | b)


def tensor_inputs():
    a, b = random_int32((2, 3, 8), 1), random_int32((2, 3, 8), 2, INT32_BOUNDARY[::-1])
    return a, b, a.to(torch.int64), b[:, :1].to(torch.int64)


def test_tensor_forms_exact_on_both_engines(qnn_binary):
    """int32 and int64 (INT_32 on QNN), broadcasting: every output equals eager; QNN equals the
    host engine. One table per op and data type, shared by the byte positions and the nodes."""
    inputs = tensor_inputs()
    tester = lower_to_one_delegate(TensorForms(), inputs, None)
    assert_outputs_exact(tester)
    ops = tester.payload().op_types()
    assert not {"ElementWiseAnd", "ElementWiseOr", "ElementWiseXor"} & set(ops), ops
    assert ops["Gather"] == 4 * 10 and ops["ElementWiseDivide"] == 3 * 7, ops  # 7 operands split once each
    assert _tables(tester) == 3, "one 65536-entry table per op (and / or / xor), int32 and int64 alike"
    qnn_vs_host(tester, inputs)


class ScalarForms(torch.nn.Module):
    """Numbers (bitwise_*.Scalar, `5 & a` included), and constant tensors on either side."""

    def __init__(self):
        super().__init__()
        self.register_buffer("k", torch.tensor([1, -2, 300, -(2**31), 2**31 - 1, 0, -1, 255], dtype=torch.int32))

    def forward(self, a, c):
        return (
            a | 3,
            a & 0xFF,
            a ^ -7,
            5 & a,
            a & -(2**31),
            a ^ (2**31 - 1),
            c | -256,
            c & 0x7F00,
            a & self.k,
            self.k ^ a,
        )


def test_scalar_and_constant_forms_exact_on_both_engines(qnn_binary):
    """A number operand needs four lookups and three adds (no split of the number, no index):
    every output equals eager on both engines."""
    a = random_int32((3, 8), 3)
    inputs = (a, a.to(torch.int64) * -1 - 1)
    tester = lower_to_one_delegate(ScalarForms(), inputs, None)
    assert_outputs_exact(tester)
    ops = tester.payload().op_types()
    # Scalars: 4 Gathers each (8); constant tensors: 4 each (2)
    assert ops["Gather"] == 4 * 10, ops
    assert _tables(tester) == 2, "the constant-tensor forms share the and / xor tables"
    qnn_vs_host(tester, inputs)


class Uint8Forms(torch.nn.Module):
    def forward(self, u, v):
        return u & v, u | v, u ^ v, u | 3, v & 0xF0, u ^ 255


def test_uint8_forms_exact_on_both_engines(qnn_binary):
    """uint8 tensors (graph inputs and outputs): one byte, Cast to INT_32, one lookup, Cast back."""
    g = torch.Generator().manual_seed(4)
    u = torch.randint(0, 256, (4, 8), generator=g, dtype=torch.uint8)
    u[0, :4] = torch.tensor([0, 255, 128, 127], dtype=torch.uint8)
    inputs = (u, torch.randint(0, 256, (8,), generator=g, dtype=torch.uint8))
    tester = lower_to_one_delegate(Uint8Forms(), inputs, None)
    assert_outputs_exact(tester)
    assert tester.payload().op_types()["Gather"] == 6
    qnn_vs_host(tester, inputs)


class TokenMask(torch.nn.Module):
    """Bit tricks on token ids next to the integer ops a delegate takes (floor_divide, remainder,
    comparisons, where, bitwise_not; int add / mul stay on the CPU): a low byte with flag bits,
    a bucket hash, a parity mask."""

    def forward(self, ids, flags):
        low = (ids & 0xFF) | flags
        bucket = torch.remainder(ids, 1000) ^ (ids // 256)
        picked = torch.where(ids > 0, ids & flags, ids | flags)
        return low, bucket, (low & 1) == 0, ~(bucket ^ flags), picked


def test_model_mixing_bitwise_with_integer_ops_on_both_engines(qnn_binary):
    """One delegate with remainder / floor_divide / gt / eq / where / bitwise_not around the
    bitwise ops (negative ids included): every output equals eager on both engines."""
    g = torch.Generator().manual_seed(6)
    ids = torch.randint(-50000, 50000, (2, 16), generator=g, dtype=torch.int32)
    ids[0, :4] = torch.tensor([0, -1, 2**31 - 1, -(2**31)], dtype=torch.int32)
    flags = torch.randint(-(2**20), 2**20, (1, 16), generator=g, dtype=torch.int32)
    inputs = (ids, flags)
    tester = lower_to_one_delegate(TokenMask(), inputs, None)
    assert_outputs_exact(tester)
    qnn_vs_host(tester, inputs)


class Int64Pair(torch.nn.Module):
    def forward(self, c, d):
        return c & d, c ^ d, c | 0x7F


def test_int64_beyond_int32_is_the_op_on_the_low_32_bits(qnn_binary):
    """int64 values must fit int32 in a delegate (QNN narrows them by wrapping); beyond it both
    engines give the op on the low 32 bits, sign-extended (documented, not eager's)."""
    g = torch.Generator().manual_seed(7)
    c = torch.randint(-(2**40), 2**40, (2, 8), generator=g)
    d = torch.randint(-(2**40), 2**40, (2, 8), generator=g)
    tester = lower_to_one_delegate(Int64Pair(), (c, d), None)
    low = [x.to(torch.int32) for x in (c, d)]  # wraps
    want = [(low[0] & low[1]), (low[0] ^ low[1]), (low[0] | 0x7F)]
    for i, (out, ref) in enumerate(zip(tester.outputs, want)):
        np.testing.assert_array_equal(out, ref.to(torch.int64).numpy(), err_msg=f"output {i}")
    assert not np.array_equal(tester.outputs[0], tester.reference_outputs()[0]), "inputs beyond int32 expected"
    qnn_vs_host(tester, (c, d))


def test_refused_with_a_reason():
    """Mixed int32 / int64 operands, int8 (HTP has no Cast between INT_8 and INT_32) and int16
    tensors, a number outside uint8 next to a uint8 tensor and a bool tensor next to a number
    stay on the CPU, each with its reason; the rest of the program still runs."""

    class Rejected(torch.nn.Module):
        def forward(self, a, b, s, h, u, m):
            return a & b, s ^ s, h | h, u & 256, m & True

    a = torch.tensor([5, -3, 12], dtype=torch.int32)
    inputs = (
        a,
        torch.tensor([3, 6, -1]),
        torch.tensor([1, -2, 3], dtype=torch.int8),
        torch.tensor([1, -2, 3], dtype=torch.int16),
        torch.tensor([1, 2, 3], dtype=torch.uint8),
        a > 0,
    )
    tester = QnnTester(Rejected(), inputs).lower()
    reasons = list(tester.partitioner.rejected_nodes.values())
    assert len(reasons) == 5, reasons
    assert any("cast it first" in r for r in reasons), reasons
    assert any("no Cast between INT_8 and INT_32" in r for r in reasons), reasons
    assert any("torch.int16 is not supported" in r for r in reasons), reasons
    assert any("256 does not fit torch.uint8" in r for r in reasons), reasons
    assert any("next to a bool tensor" in r for r in reasons), reasons
    tester.to_executorch().run().compare()


# ---- the INT_32 ops the composition uses, at the int32 boundaries, QNN against the host engine --
def _int32_graph(ops, n: int) -> bytes:
    """x, y (INT_32 [n]) and a STATIC 256 -> one APP_READ output per (QNN type, input ids)."""
    g = QnnGraph("forward")
    g.tensors += [
        QnnTensor(0, "x", TensorType.APP_WRITE, DataType.INT_32, [n]),
        QnnTensor(1, "y", TensorType.APP_WRITE, DataType.INT_32, [n]),
        QnnTensor(2, "c256", TensorType.STATIC, DataType.INT_32, [1], None, np.array([256], np.int32)),
    ]
    for k, (qnn_type, inputs) in enumerate(ops):
        g.tensors.append(QnnTensor(3 + k, f"out{k}", TensorType.APP_READ, DataType.INT_32, [n]))
        g.ops.append(QnnOp(f"op{k}", qnn_type, inputs, [3 + k]))
    g.inputs, g.outputs = [0, 1], [3 + k for k in range(len(ops))]
    return with_qnn_binary(serialize_graphs([g]))


@needs_qnn
def test_int32_split_ops_at_the_boundaries_qnn_equals_host():
    """What the split relies on, measured on QNN 2.51 SM8650 and the host engine at -2^31,
    2^31 - 1, -1, 0, 255, -256, ...: Mod(x, 256) in [0, 255] (the divisor's sign), Mod by
    tensors of both signs, x - Mod(x, 256) and its exact division by 256. What it avoids
    (QNN differs from torch there, measured): Add / Subtract / Multiply saturate on overflow
    (torch wraps; the host engine saturates as QNN, ops/test_integer_arithmetic.py), and Divide by the
    STATIC 256 floors (-1 / 256 = -1) while Divide by a tensor truncates (-7 / 2 = -3)."""
    x = np.array(INT32_BOUNDARY + [-255, 2**31 - 256, -(2**31) + 255, 1000, -1000, 7, -7, -7], np.int32)
    y = np.array([-1000, 1000, 3, -3, 2, -2, 7, -7, 1, -1, 256, -256, 255, -255, 9, 2, -2, 2, 5, 2], np.int32)
    ops = [
        ("ElementWiseMod", [0, 2]),
        ("ElementWiseMod", [0, 1]),
        ("ElementWiseSubtract", [0, 3]),
        ("ElementWiseDivide", [5, 2]),
        ("ElementWiseAdd", [0, 1]),
        ("ElementWiseMultiply", [0, 2]),
        ("ElementWiseDivide", [0, 2]),
        ("ElementWiseDivide", [0, 1]),
        ("ElementWiseSubtract", [0, 2]),
    ]
    ext = require_extension()
    blob = _int32_graph(ops, x.size)
    host = [np.asarray(o).reshape(-1) for o in ext.run_payload(blob, [x, y])]
    qnn = [np.asarray(o).reshape(-1) for o in ext.run_payload_qnn(blob, [x, y])[0]]
    wide = x.astype(np.int64)
    expected = [wide % 256, wide % y, wide - wide % 256, (wide - wide % 256) // 256]
    for i, want in enumerate(expected):
        np.testing.assert_array_equal(host[i], want, err_msg=f"host, {ops[i]}")
        np.testing.assert_array_equal(qnn[i], want, err_msg=f"QNN, {ops[i]}")
    for i, exact in ((4, wide + y), (5, wide * 256), (8, wide - 256)):
        saturated = np.clip(exact, -(2**31), 2**31 - 1)
        assert (saturated != exact).any(), ops[i]
        np.testing.assert_array_equal(qnn[i], saturated, err_msg=f"QNN's INT_32 {ops[i]} saturates")
        np.testing.assert_array_equal(host[i], saturated, err_msg=f"the host engine's INT_32 {ops[i]} saturates")
    np.testing.assert_array_equal(qnn[6], wide // 256, err_msg="QNN's Divide by a STATIC 256 floors")
    np.testing.assert_array_equal(qnn[7], np.trunc(wide / y), err_msg="QNN's Divide by a tensor truncates")
