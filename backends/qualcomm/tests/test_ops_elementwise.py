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

import gc
from typing import Callable, Dict, List

import numpy as np
import pytest
import torch

from backends.qualcomm import QuantDtype
from backends.qualcomm.tests.quant_tester import (
    QuantTester, assert_pt2e_bounds, output_encodings_with_range, step_stats,
)
from backends.qualcomm.tests.tester import QnnTester
from backends.qualcomm.tests.utils_helpers import native, reset_runtime_options
from backends.qualcomm.utils.qnn_context import AOT_ENV, qnn_binary_of, qnn_library_status

QNN_LOADED, QNN_STATUS = qnn_library_status()
QUANT_DTYPES = [QuantDtype.use_8a8w, QuantDtype.use_16a8w]
# Share of bool outputs allowed to differ from the QDQ reference in quantized graphs: an input
# one step from the threshold, quantized by the graph's Quantize (x * fp16(1 / scale)), may get
# the neighbouring code of PT2E's round(x / scale).
MAX_BOOL_MISMATCH = 0.02
COMPARE_TYPES = ("ElementWiseEqual", "ElementWiseNotEqual", "ElementWiseLess", "ElementWiseLessEqual",
                 "ElementWiseGreater", "ElementWiseGreaterEqual")


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
    return Family({
        "eq": lambda x, y: x == y, "ne_scalar": lambda x, y: x != 0.5, "lt": lambda x, y: x < y,
        "le_scalar": lambda x, y: x <= 0.25, "gt": lambda x, y: x > y, "ge_scalar": lambda x, y: x >= -0.5,
        "and": lambda x, y: torch.logical_and(x > 0, y > 0), "or": lambda x, y: (x > 0) | (y < 0),
        "xor": lambda x, y: torch.logical_xor(x > 0, y > 0), "not": lambda x, y: torch.logical_not(x > 0),
        "where": lambda x, y: torch.where(x > y, x, y), "where_scalar": lambda x, y: torch.where(x > 0, x, 0.0),
        "where_scalars": lambda x, y: torch.where(y > 0, 1.0, -2.0),
        "masked_fill": lambda x, y: x.masked_fill(y > 0.5, -3.0),
    })


class IntBoolIO(torch.nn.Module):
    """int64 and bool delegate inputs, int64 / bool intermediates and outputs."""

    def forward(self, ids, mask, x):
        big = ids >= 2
        return (ids == 3, ids < 2, torch.where(mask, ids, 0), torch.where(big & mask, x, -x),
                torch.logical_not(mask), x.masked_fill(torch.logical_xor(mask, big), 7.0), ids != 1)


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


# ---- fp16 ---------------------------------------------------------------------------------
def test_logic_family_fp16_matches_eager():
    tester = QnnTester(logic_family(), _grid_inputs()).run_and_compare()
    tester.check_count(1)
    assert [o.dtype for o in tester.outputs[:10]] == [np.bool_] * 10
    ops = tester.payload().op_types()
    for op in COMPARE_TYPES + ("ElementWiseAnd", "ElementWiseOr", "ElementWiseXor", "ElementWiseNot",
                               "ElementWiseSelect"):
        assert ops.get(op, 0) >= 1, (op, ops)


def test_int64_and_bool_delegate_inputs_and_outputs():
    tester = QnnTester(IntBoolIO(), _int_bool_inputs()).run_and_compare()  # int / bool: off by 1 fails
    tester.check_count(1)
    assert [o.dtype for o in tester.outputs] == [np.bool_, np.bool_, np.int64, np.float32, np.bool_,
                                                np.float32, np.bool_]


# ---- quantized ----------------------------------------------------------------------------
def check_quantized_outputs(tester: QuantTester) -> List[str]:
    """Float outputs within the PT2E step bounds, bool outputs equal but for MAX_BOOL_MISMATCH."""
    report = []
    expected = tester.reference_outputs()
    encodings = output_encodings_with_range(tester.module)
    for i, (out, ref, enc) in enumerate(zip(tester.outputs, expected, encodings)):
        assert out.shape == ref.shape and out.dtype == ref.dtype, (i, out.shape, ref.shape, out.dtype, ref.dtype)
        if out.dtype == np.bool_:
            wrong = float((out != ref).mean())
            report.append(f"{i}: bool {wrong:.2%} differ")
            assert wrong <= MAX_BOOL_MISMATCH, report[-1]
            continue
        assert enc is not None, f"output {i} is not a dequantized output"
        stats = step_stats(out, ref, enc[0])
        report.append(f"{i}: {stats}")
        assert_pt2e_bounds(stats, enc[2], f"output {i} ({tester.quant_dtype.name}): {stats}")
    return report


@pytest.mark.parametrize("quant_dtype", QUANT_DTYPES)
def test_logic_family_quantized_matches_qdq_reference(quant_dtype):
    tester = QuantTester(logic_family(), _random_inputs(), quant_dtype)
    tester.lower().check_fully_delegated().check_count(1).to_executorch().run()
    print(check_quantized_outputs(tester))
    # Comparisons read the quantized tensors: no Dequantize in front of them (the graph's
    # Dequantizes are those of the float outputs).
    graph = tester.payload()
    dequantized = {name for op in graph.ops if op.type == "Dequantize" for name in op.outputs}
    compares = [op for op in graph.ops if op.type in COMPARE_TYPES]
    assert len(compares) == 17 and not any(set(op.inputs) & dequantized for op in compares)
    assert graph.op_types()["Dequantize"] == 4  # where, where_scalar, where_scalars, masked_fill


# ---- real QNN -----------------------------------------------------------------------------
@pytest.fixture
def real_qnn(monkeypatch):
    """Context binaries at lowering (as test_qnn_real.py's fixture)."""
    if not QNN_LOADED:
        pytest.skip(f"QNN library not available: {QNN_STATUS}")
    monkeypatch.setenv(AOT_ENV, "1")
    reset_runtime_options()
    yield
    reset_runtime_options()
    gc.collect()


def payload_on_both_engines(blob: bytes, inputs):
    """(QNN outputs, host outputs) of one delegate blob that carries a context binary."""
    assert qnn_binary_of(blob) is not None, "the delegate has no QNN context binary"
    arrays = [x.numpy() for x in inputs]
    qnn, _ = native().run_payload_qnn(blob, arrays)
    host = native().run_payload(blob, arrays)
    return [np.asarray(q) for q in qnn], [np.asarray(h) for h in host]


def compare_engines(qnn: List[np.ndarray], host: List[np.ndarray], scales: List[float], max_steps: float,
                    fp16: bool) -> List[str]:
    report = []
    for i, (q, h) in enumerate(zip(qnn, host)):
        assert q.shape == h.shape, (i, q.shape, h.shape)
        if h.dtype == np.bool_ or q.dtype == np.bool_ or np.issubdtype(h.dtype, np.integer):
            wrong = int((q.astype(np.int64) != h.astype(np.int64)).sum())
            report.append(f"{i}: {wrong} of {q.size} differ")
            # Quantized: an input one step from the threshold may be quantized to the other
            # code by the graph-input Quantize (16a8w xor: measured 1 of 120).
            assert wrong <= (0 if fp16 else MAX_BOOL_MISMATCH * q.size), report[-1]
            continue
        if fp16:
            err = float(np.abs(q.astype(np.float64) - h.astype(np.float64)).max())
            report.append(f"{i}: max {err:.3g}")
            assert err <= 2e-3 * max(1.0, float(np.abs(h).max())), report[-1]
            continue
        stats = step_stats(q, h, scales[i])
        steps = np.abs(np.rint(q.astype(np.float64) / scales[i]) - np.rint(h.astype(np.float64) / scales[i]))
        report.append(f"{i}: {stats}")
        # where(x > 0, x, 0): an x whose condition flips (see above) selects the other branch.
        assert float((steps > max_steps).mean()) <= MAX_BOOL_MISMATCH, report[-1]
    return report


@pytest.mark.parametrize("quant_dtype", [None] + QUANT_DTYPES)
def test_logic_family_on_real_qnn(real_qnn, quant_dtype):
    inputs = _grid_inputs() if quant_dtype is None else _random_inputs()
    tester = (QnnTester(logic_family(), inputs) if quant_dtype is None else
              QuantTester(logic_family(), inputs, quant_dtype)).lower().check_fully_delegated().check_count(1)
    scales = [1.0] * len(tester.module.names if quant_dtype is None else logic_family().names)
    if quant_dtype is not None:
        scales = [e[0] if e is not None else 1.0 for e in output_encodings_with_range(tester.module)]
    qnn, host = payload_on_both_engines(tester.delegate_blobs()[0], inputs)
    print(compare_engines(qnn, host, scales, 1 if quant_dtype != QuantDtype.use_16a8w else 16, quant_dtype is None))


def test_int_bool_io_on_real_qnn(real_qnn):
    inputs = _int_bool_inputs()
    tester = QnnTester(IntBoolIO(), inputs).lower().check_fully_delegated().check_count(1)
    qnn, host = payload_on_both_engines(tester.delegate_blobs()[0], inputs)
    print(compare_engines(qnn, host, [1.0] * len(qnn), 0, True))
