"""The partitioner asks QNN's backendValidateOpConfig about every op a partition lowers to:
a node QNN refuses stays on the CPU with QNN's reason, the rest is partitioned again. Real
refusal: QNN 2.51 HTP's 16-bit Tanh wants the output offset -32768 (a symmetric [-1, 1]
encoding); PT2E's observed 16a8w output encoding has another. Skipped when the QNN library
does not load here; tiny shapes."""
from __future__ import annotations

import gc
import logging

import pytest
import torch

from backends.qualcomm.partitioner import qnn_validation
from backends.qualcomm.partitioner.qnn_validation import QNN_REFUSED, source_node
from backends.qualcomm.serialization.qnn_graph import QnnOp
from backends.qualcomm import QuantDtype
from backends.qualcomm.tests.quant_tester import QuantTester
from backends.qualcomm.tests.tester import QnnTester
from backends.qualcomm.tests.utils_helpers import reset_runtime_options
from backends.qualcomm.utils.qnn_context import AOT_ENV, qnn_binary_of, qnn_library_status

LOADED, STATUS = qnn_library_status()
pytestmark = pytest.mark.skipif(not LOADED, reason=f"QNN library not available: {STATUS}")

TANH = "aten.tanh.default"


@pytest.fixture(autouse=True)
def real_qnn(monkeypatch):
    monkeypatch.setenv(AOT_ENV, "1")
    reset_runtime_options()
    yield
    reset_runtime_options()
    gc.collect()


class ConvTanhConv(torch.nn.Module):
    """conv -> tanh (QNN HTP refuses it in 16a8w) -> conv -> add."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(4, 4, 1)

    def forward(self, x):
        return self.conv2(torch.tanh(self.conv(x))) + 1.0


def _lowered() -> QuantTester:
    torch.manual_seed(0)
    return QuantTester(ConvTanhConv(), (torch.randn(1, 3, 5, 5),), QuantDtype.use_16a8w).lower()


def _count_validations(monkeypatch) -> list:
    calls = []
    real = qnn_validation.qnn_validate_op

    def counting(blob, index):
        calls.append(index)
        return real(blob, index)

    monkeypatch.setattr(qnn_validation, "qnn_validate_op", counting)
    return calls


def test_node_qnn_refuses_stays_on_cpu_with_qnn_reason(caplog):
    with caplog.at_level(logging.WARNING, logger="backends.qualcomm"):
        tester = _lowered()
    summary = tester.partitioner.summary
    assert summary.cpu_op_counts() == {TANH: 1}
    reason = tester.partitioner.rejected_nodes["aten_tanh_default"]
    assert reason.startswith(QNN_REFUSED) and "(Tanh) refused by QNN: QNN error 3110" in reason
    assert "expected equal to -32768" in reason  # QNN's own words: the output offset
    assert summary.delegated_nodes == 17 and summary.delegates == 2
    assert summary.validation.startswith("QNN op validation: ") and " s, 1 node(s) refused and left on the CPU" in summary.validation
    assert "QNN refused it (backendValidateOpConfig)" in caplog.text and "QNN op validation: " in caplog.text
    assert all(qnn_binary_of(blob) is not None for blob in tester.delegate_blobs())
    # runs on QNN (both delegates have binaries): 16-bit QNN is up to ~20 steps of 2^16 from the
    # QDQ reference (README fidelity table)
    tester.to_executorch().run().compare_steps(max_step_diff=48, min_exact=0.0)


def test_no_validation_without_context_binaries(monkeypatch):
    monkeypatch.setenv(AOT_ENV, "0")
    calls = _count_validations(monkeypatch)
    tester = _lowered()
    assert calls == [] and tester.partitioner.validation is None
    assert tester.partitioner.summary.validation == "" and "QNN op validation" not in str(tester.partitioner.summary)
    assert tester.partitioner.summary.cpu_op_counts() == {}  # the builders' answer alone
    assert all(qnn_binary_of(blob) is None for blob in tester.delegate_blobs())


def test_validation_failure_keeps_builders_answer(monkeypatch, caplog):
    """A broken validation logs and changes nothing: the builders' answer stands (tanh is
    delegated; QNN's finalize accepts this graph although validation refuses the Tanh)."""
    def broken(blob, index):
        raise RuntimeError("validation exploded")

    monkeypatch.setattr(qnn_validation, "qnn_validate_op", broken)
    with caplog.at_level(logging.WARNING, logger="backends.qualcomm"):
        tester = _lowered()
    assert tester.partitioner.summary.cpu_op_counts() == {}
    assert "QNN op validation skipped (RuntimeError: validation exploded)" in caplog.text
    assert len(tester.delegate_blobs()) == 1
    tester.check_fully_delegated()


def test_refused_op_maps_to_its_source_node():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    relu = graph.call_function(torch.relu, (x,))
    relu.name = "aten_relu_default"
    relu_1 = graph.call_function(torch.relu, (relu,))
    relu_1.name = "aten_relu_default_1"
    relu.meta["debug_handle"], relu_1.meta["debug_handle"] = 1, 2
    nodes = [relu, relu_1]
    assert source_node(QnnOp("anything", "Relu", [], [], debug_handle=2), nodes) is relu_1
    # No handle: the longest node name the op name starts with.
    assert source_node(QnnOp("aten_relu_default_1_to_nhwc", "Transpose", [], []), nodes) is relu_1
    assert source_node(QnnOp("aten_relu_default", "Relu", [], []), nodes) is relu
    assert source_node(QnnOp("quantize", "Quantize", [], []), nodes) is None


class LinearRelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.linear(x))


def test_op_kept_whole_for_the_delegate_stays_delegated(monkeypatch, caplog):
    """Monkeypatched validation that refuses every op: relu goes to the CPU, while linear (kept
    undecomposed for us: ExecuTorch refuses to leave it on the CPU) stays delegated, warned."""
    monkeypatch.setattr(qnn_validation, "qnn_validate_op", lambda blob, index: "refused for the test")
    torch.manual_seed(0)
    with caplog.at_level(logging.WARNING, logger="backends.qualcomm"):
        tester = QnnTester(LinearRelu(), (torch.randn(2, 8),)).lower()
    summary = tester.partitioner.summary
    assert summary.cpu_op_counts() == {"aten.relu.default": 1}
    assert summary.cpu_ops[0].reason == QNN_REFUSED + "refused for the test"
    assert "node 'aten_linear_default' (aten.linear.default) stays delegated although QNN refuses it" \
        in caplog.text
    assert caplog.text.count("stays delegated although QNN refuses it") == 1
    assert " 1 node(s) refused and left on the CPU" in summary.validation
