"""The partitioner asks QNN's backendValidateOpConfig about every op a partition lowers to:
a node QNN refuses stays on the CPU with QNN's reason, the rest is partitioned again. Real
refusal: QNN 2.51 HTP's op validation refuses a 16a8w MatMul of two activations here
('has incorrect Value -30766, expected equal to -32768'), which our builder accepts.
Skipped when the QNN library does not load here; tiny shapes."""

from __future__ import annotations

import logging
import struct

import pytest
import torch

from backends.qualcomm import QcomChipset, QuantDtype
from backends.qualcomm.partitioner import qnn_validation
from backends.qualcomm.partitioner.qnn_validation import QNN_REFUSED, source_node
from backends.qualcomm.serialization.payload_reader import describe_payload
from backends.qualcomm.serialization.payload_writer import wrap_context_binary
from backends.qualcomm.serialization.qnn_graph import QnnOp
from backends.qualcomm.tests.helpers.quant_tester import QuantTester
from backends.qualcomm.tests.helpers.runtime import native, needs_qnn
from backends.qualcomm.tests.helpers.tester import QnnTester
from backends.qualcomm.utils.qnn_context import AOT_ENV, payload_of, qnn_binary_of

pytestmark = [needs_qnn, pytest.mark.usefixtures("real_qnn")]  # real_qnn: conftest.py

BMM = "aten.bmm.default"


# real_qnn (conftest.py): context binaries at lowering, runtime options reset.


class LinearBmm(torch.nn.Module):
    """linear, linear -> bmm (a 16a8w MatMul of two activations, which QNN refuses for SM8350's
    v68 HTP: it needs v73) -> add."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)

    def forward(self, x, y):
        return torch.bmm(self.a(x), self.b(y).transpose(1, 2)) + 1.0


def _lowered() -> QuantTester:
    torch.manual_seed(0)
    inputs = (torch.randn(2, 4, 8), torch.randn(2, 4, 8))
    return QuantTester(LinearBmm(), inputs, QuantDtype.use_16a8w, soc_model=QcomChipset.SM8350).lower()


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
    assert summary.cpu_op_counts() == {BMM: 1}
    reason = tester.partitioner.rejected_nodes[tester.cpu_nodes()[0].name]
    assert reason.startswith(QNN_REFUSED) and "(MatMul) refused by QNN: QNN error 3110" in reason
    assert "has incorrect Value 68, expected >= 73" in reason  # QNN's own words: the HTP arch
    assert summary.delegates == 2
    assert (
        summary.validation.startswith("QNN op validation: ")
        and " s, 1 node(s) refused and left on the CPU" in summary.validation
    )
    assert "QNN refused it (backendValidateOpConfig)" in caplog.text and "QNN op validation: " in caplog.text
    assert all(qnn_binary_of(blob) is not None for blob in tester.delegate_blobs())
    # runs on QNN (both delegates have binaries): 16-bit QNN is up to ~20 steps of 2^16 from
    # the QDQ reference (docs/numerics.md)
    tester.to_executorch().run().compare_steps(max_step_diff=48, min_exact=0.0)


def test_no_validation_without_context_binaries(monkeypatch):
    monkeypatch.setenv(AOT_ENV, "0")
    calls = _count_validations(monkeypatch)
    tester = _lowered()
    assert calls == [] and tester.partitioner.validation is None
    assert tester.partitioner.summary.validation == "" and "QNN op validation" not in str(tester.partitioner.summary)
    assert tester.partitioner.summary.cpu_op_counts() == {}  # the builders' answer alone
    assert all(qnn_binary_of(blob) is None for blob in tester.delegate_blobs())


def _record_batches(monkeypatch) -> list:
    """Each batch validation call as (blob, QNN's reasons); the partitioner gets the real answer."""
    batches = []
    real = qnn_validation.qnn_validate_ops

    def recording(blob, num_ops, soc_model=0):
        reasons = real(blob, num_ops, soc_model)
        batches.append((blob, reasons))
        return reasons

    monkeypatch.setattr(qnn_validation, "qnn_validate_ops", recording)
    return batches


def test_one_batch_call_per_partition_same_answers_as_op_by_op(monkeypatch):
    """The partitioner validates each partition in one call (qnn_validate_ops), whose answers
    are, op by op, those of qnn_validate_op: QNN's one real refusal, every other op accepted."""
    batches = _record_batches(monkeypatch)
    tester = _lowered()
    report = tester.partitioner.validation
    assert len(batches) == report.partitions >= 2  # the whole graph, then around the refused node
    assert report.ops == sum(len(reasons) for _, reasons in batches) and report.left_on_cpu == 1
    blob, reasons = batches[0]
    refused = [r for r in reasons if r is not None]
    assert len(refused) == 1 and "refused by QNN: QNN error 3110" in refused[0]
    assert [native().qnn_validate_op(blob, 0, i) for i in range(len(reasons))] == reasons
    assert native().qnn_validate_ops(blob) == list(enumerate(reasons))  # graph_index 0 by default
    assert all(r is None for _, later in batches[1:] for r in later)


def test_batch_validation_of_malformed_blobs_is_a_clear_error(monkeypatch):
    """A malformed blob is a ValueError saying what is wrong, never a crash (in the
    partitioner it only skips validation); an op QNN does not know is refused alone."""
    batches = _record_batches(monkeypatch)
    _lowered()
    blob, reasons = batches[0]
    ops = describe_payload(blob)[0].ops
    # an op type renamed in place in the payload (a flatbuffers string: length, bytes, NUL)
    old_type = ops[0].type.encode()
    new_type = b"Zz" + old_type[2:]
    renamed = bytearray(blob)
    at = renamed.find(struct.pack("<I", len(old_type)) + old_type + b"\0") + 4
    assert at >= 4
    renamed[at : at + len(old_type)] = new_type
    cases = {
        b"": "blob is empty",
        b"not a qnn-delegate blob at all": "file identifier 'QNNB'",
        blob[:12]: "failed the flatbuffers verifier",
        blob[: len(blob) // 2]: "failed the flatbuffers verifier",
        bytes(renamed): "payload signature mismatch",  # altered without signing it again
    }
    for bad, message in cases.items():
        with pytest.raises(ValueError, match=message):
            native().qnn_validate_ops(bad, 0)
        with pytest.raises(ValueError, match=message):
            native().qnn_validate_op(bad, 0, 0)
    with pytest.raises(ValueError, match=r"graph_index 1 out of range \(the blob has 1 graph\(s\)\)"):
        native().qnn_validate_ops(blob, 1)
    with pytest.raises(TypeError):
        native().qnn_validate_ops(bytearray(blob), 0)
    # signed again: QNN refuses the renamed op(s), by name and type, and nothing else changes
    answers = native().qnn_validate_ops(wrap_context_binary(payload_of(bytes(renamed))), 0)
    assert [i for i, _ in answers] == list(range(len(ops)))
    refusal = f"({new_type.decode()}) refused by QNN: QNN error"
    renamed_ops = [i for i, (_, r) in enumerate(answers) if r and refusal in r]
    assert renamed_ops and all(ops[i].type == old_type.decode() for i in renamed_ops)
    assert f"op '{ops[renamed_ops[0]].name}' {refusal}" in answers[renamed_ops[0]][1]
    assert [r for i, (_, r) in enumerate(answers) if i not in renamed_ops] == [
        r for i, r in enumerate(reasons) if i not in renamed_ops
    ]


@pytest.mark.parametrize(
    "binding,error",
    [("qnn_validate_ops", ValueError("batch exploded")), ("qnn_validate_op", RuntimeError("validation exploded"))],
)
def test_validation_failure_keeps_builders_answer(monkeypatch, caplog, binding, error):
    """A broken validation (the batch call or, when it is patched, the op by op one) logs and
    changes nothing: the builders' answer stands (the bmm is delegated). QNN's finalize
    accepts that graph, but its MatMul output is then far from the reference (measured: 1265
    steps of 2^16), which is why validation decides; the host engine runs the delegate here
    and matches the reference."""

    def broken(*args):
        raise error

    monkeypatch.setattr(qnn_validation, binding, broken)
    with caplog.at_level(logging.WARNING, logger="backends.qualcomm"):
        tester = _lowered()
    assert tester.partitioner.summary.cpu_op_counts() == {}
    assert f"QNN op validation skipped ({type(error).__name__}: {error})" in caplog.text
    monkeypatch.setenv("QNN_DELEGATE_ENGINE", "host")
    tester.check_fully_delegated().to_executorch().run().compare_steps()


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
    assert "1 aten.linear.default node(s) stay delegated although QNN refuses them" in caplog.text
    assert "aten_linear_default. First: " + QNN_REFUSED + "refused for the test" in caplog.text
    assert caplog.text.count("stay delegated although QNN refuses them") == 1
    assert " 1 node(s) refused and left on the CPU" in summary.validation


def test_sixteen_bit_matmul_is_validated_for_the_compile_specs_soc():
    """QNN checks an op against the HTP architecture of the SoC: a 16-bit MatMul of two
    activations needs v73 or later ('incorrect Value 68, expected >= 73' for SM8350's v68), so the
    partitioner validates for the compile spec's SoC (it used to check QNN's default v68 and
    left every 16a8w attention MatMul on the CPU for SM8650)."""

    class MatMul(torch.nn.Module):
        def forward(self, a, b):
            return torch.matmul(a, b)

    torch.manual_seed(0)
    tester = QuantTester(
        MatMul().eval(), (torch.randn(1, 2, 4, 8), torch.randn(1, 2, 8, 6)), QuantDtype.use_16a8w
    ).lower()
    assert tester.cpu_op_names() == []
    blob = tester.delegate_blobs()[0]
    index = next(i for i, op in enumerate(describe_payload(blob)[0].ops) if op.type == "MatMul")
    assert native().qnn_validate_op(blob, 0, index, int(QcomChipset.SM8650)) is None
    assert "expected >= 73" in native().qnn_validate_op(blob, 0, index, int(QcomChipset.SM8350))


def test_refusals_are_not_forwarded_to_the_log(capfd, caplog):
    """QNN's log lines while it validates an op become the refusal's reason; with QNN's errors
    forwarded to the log (a delegate loaded at log level error), they were also printed, every
    line of every refused op (340 lines lowering three small models)."""
    tester = QnnTester(LinearRelu(), (torch.randn(2, 8),)).lower().to_executorch().run()  # log level set
    capfd.readouterr()
    with caplog.at_level(logging.WARNING, logger="backends.qualcomm"):
        # a quantized batch norm that folds into no conv: QNN's op validation refuses it
        refused = QuantTester(torch.nn.BatchNorm2d(4).eval(), (torch.randn(1, 4, 3, 3),)).lower()
    assert "QNN refused it" in str(refused.partitioner.rejected_nodes)
    err = capfd.readouterr().err
    assert "QNN[1]" not in err and "validateNativeOps" not in err, err[-2000:]
    del tester


@pytest.mark.parametrize("dtype", [QuantDtype.use_8a8w, QuantDtype.use_16a8w], ids=["8a8w", "16a8w"])
def test_quantized_silu_is_not_reported_as_refused(real_qnn, caplog, dtype):
    """Quantized SiLU's FLOAT_32 inner Sigmoid and its Multiply: QNN's op validation refuses
    them, its finalize accepts them (finalize_accepts): no 'stay delegated although QNN refuses'
    warning on every quantized model with a SiLU; QNN and the host engine agree."""
    from backends.qualcomm.tests.helpers.runtime import assert_qnn_matches_host, one_delegate_blob

    torch.manual_seed(0)
    inputs = (torch.randn(1, 64) * 4,)
    with caplog.at_level(logging.WARNING, logger="backends.qualcomm"):
        tester = QuantTester(torch.nn.SiLU(), inputs, dtype).lower()
    assert "refuses" not in caplog.text, caplog.text
    assert_qnn_matches_host(one_delegate_blob(tester), inputs, None, float_rel=0.0, max_steps=1, min_exact=0.9)
