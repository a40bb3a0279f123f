"""The partitioner asks QNN's backendValidateOpConfig about every op a partition lowers to:
a node QNN refuses stays on the CPU with QNN's reason, the rest is partitioned again. Real
refusal: QNN 2.51 HTP's Softmax takes only the last axis, our builder emits any axis (here
axis 1 of a rank-3 tensor). Skipped when the QNN library does not load here; tiny shapes."""
from __future__ import annotations

import gc
import logging

import pytest
import torch

from backends.qualcomm.partitioner import qnn_validation
from backends.qualcomm.partitioner.qnn_validation import QNN_REFUSED, source_node
from backends.qualcomm.serialization.qnn_graph import QnnOp
from backends.qualcomm.tests.tester import QnnTester
from backends.qualcomm.tests.utils_helpers import reset_runtime_options
from backends.qualcomm.utils.qnn_context import AOT_ENV, qnn_binary_of, qnn_library_status

LOADED, STATUS = qnn_library_status()
pytestmark = pytest.mark.skipif(not LOADED, reason=f"QNN library not available: {STATUS}")

SOFTMAX = "aten._softmax.default"


@pytest.fixture(autouse=True)
def real_qnn(monkeypatch):
    monkeypatch.setenv(AOT_ENV, "1")
    reset_runtime_options()
    yield
    reset_runtime_options()
    gc.collect()


class ConvSoftmaxConv(torch.nn.Module):
    """conv -> relu -> softmax over axis 1 of a rank-3 view (QNN HTP refuses) -> conv -> add."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(4, 4, 1)

    def forward(self, x):
        y = torch.relu(self.conv(x)).reshape(1, 4, 25)
        return self.conv2(torch.softmax(y, 1).reshape(1, 4, 5, 5)) + 1.0


def _lowered() -> QnnTester:
    torch.manual_seed(0)
    return QnnTester(ConvSoftmaxConv(), (torch.randn(1, 3, 5, 5),)).lower()


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
    assert summary.cpu_op_counts() == {SOFTMAX: 1}
    reason = tester.partitioner.rejected_nodes[tester.cpu_nodes()[0].name]
    assert reason.startswith(QNN_REFUSED) and "(Softmax) refused by QNN: QNN error 3110" in reason
    assert "expected equal to 2" in reason  # QNN's own words: the axis must be the last one
    assert summary.delegated_nodes == 6 and summary.delegates == 2
    assert summary.validation.startswith("QNN op validation: ") and " s, 1 node(s) refused and left on the CPU" in summary.validation
    assert "QNN refused it (backendValidateOpConfig)" in caplog.text and "QNN op validation: " in caplog.text
    assert all(qnn_binary_of(blob) is not None for blob in tester.delegate_blobs())
    tester.to_executorch().run().compare(rtol=1e-2, atol=1e-2)


def test_no_validation_without_context_binaries(monkeypatch):
    monkeypatch.setenv(AOT_ENV, "0")
    calls = _count_validations(monkeypatch)
    tester = _lowered()
    assert calls == [] and tester.partitioner.validation is None
    assert tester.partitioner.summary.validation == "" and "QNN op validation" not in str(tester.partitioner.summary)
    assert tester.partitioner.summary.cpu_op_counts() == {}  # the builders' answer alone
    assert all(qnn_binary_of(blob) is None for blob in tester.delegate_blobs())


def test_validation_failure_keeps_builders_answer(monkeypatch, caplog):
    """A broken validation logs and changes nothing; lowering still falls back at finalize
    (the delegate QNN refuses gets no context binary and runs on the host engine)."""
    def broken(blob, index):
        raise RuntimeError("validation exploded")

    monkeypatch.setattr(qnn_validation, "qnn_validate_op", broken)
    with caplog.at_level(logging.WARNING, logger="backends.qualcomm"):
        tester = _lowered()
    assert tester.partitioner.summary.cpu_op_counts() == {}
    assert "QNN op validation skipped (RuntimeError: validation exploded)" in caplog.text
    assert "gets no QNN context binary" in caplog.text
    assert [qnn_binary_of(blob) is None for blob in tester.delegate_blobs()] == [True]
    tester.to_executorch().run().compare(rtol=1e-2, atol=1e-2)


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
