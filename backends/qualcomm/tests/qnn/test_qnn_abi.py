"""Our declarations of Qualcomm's QNN C ABI (runtime/qnn/QnnAbi.h) against the real library (QNN
2.51, pip onnxruntime-qnn): it loads with checked versions (a missing library is a clear message
and lowering still works, on the host engine); every struct kind we build (tensor v1 / v2, op
configs, scalar and tensor params, per-tensor / per-axis / bit-width / LPBQ encodings) is
validated and finalized; op validation reports QNN's reason. Skipped when the library does not
load here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from backends.qualcomm import QuantDtype
from backends.qualcomm.serialization.payload_reader import describe_payload
from backends.qualcomm.tests.helpers.engines import CONTEXT_BINARY_MAGIC
from backends.qualcomm.tests.helpers.models_float import ConvAddRelu, ConvLinearSoftmax
from backends.qualcomm.tests.helpers.quant_tester import QuantTester
from backends.qualcomm.tests.helpers.runtime import QNN_LOADED, QNN_STATUS, native, needs_qnn
from backends.qualcomm.tests.helpers.tester import QnnTester, inputs_of
from backends.qualcomm.utils.qnn_context import AOT_ENV, payload_of, qnn_binary_of

# real_qnn (conftest.py): context binaries at lowering, runtime options reset around each test.
pytestmark = [needs_qnn, pytest.mark.usefixtures("real_qnn")]

SM8650, SM8750 = 57, 69


def _inputs():
    return inputs_of((1, 3, 8, 8), (1, 8, 8, 8))


# ---- ABI --------------------------------------------------------------------------------
def test_library_loads_with_checked_versions():
    assert QNN_LOADED
    assert "QNN core API 2." in QNN_STATUS and "HTP API 5." in QNN_STATUS and "libQnnHtp.so" in QNN_STATUS


def test_missing_library_is_a_clear_message_and_lowering_still_works(tmp_path):
    code = (
        "import torch\n"
        "from backends.qualcomm.utils.qnn_context import qnn_library_status\n"
        "from backends.qualcomm.tests.helpers.tester import QnnTester\n"
        "ok, text = qnn_library_status(); print('STATUS', ok, text)\n"
        "t = QnnTester(torch.nn.ReLU(), (torch.randn(1, 4),)).lower().check_fully_delegated()\n"
        "from backends.qualcomm.utils.qnn_context import qnn_binary_of\n"
        "print('BINARY', qnn_binary_of(t.delegate_blobs()[0]))\n"
        "out = t.to_executorch().run().outputs[0]\n"
        "print('RAN', float(abs(out - torch.relu(t.inputs[0]).numpy()).max()))\n"
    )
    env = dict(os.environ, QNN_LIB_DIR=str(tmp_path / "nowhere"), **{AOT_ENV: "1"})
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(Path(__file__).resolve().parents[4]),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"STATUS False QNN_LIB_DIR={tmp_path / 'nowhere'} is not a folder" in result.stdout
    assert "BINARY None" in result.stdout
    ran = [line for line in result.stdout.splitlines() if line.startswith("RAN ")]
    assert ran and float(ran[0].split()[1]) < 1e-3  # host engine, fp16 rounding of relu
    assert "no QNN context binaries (payload only)" in result.stderr


@pytest.fixture(scope="module")
def struct_cases():
    """Lowered once for both tensor versions: fp16 (tensor params, scalars), 8a8w per-tensor
    (SCALE_OFFSET), 8a8w per-channel (AXIS_SCALE_OFFSET), 16a4w (BW_AXIS_SCALE_OFFSET)."""
    os.environ[AOT_ENV] = "0"  # compiled by the test itself
    torch.manual_seed(0)
    return [
        QnnTester(ConvLinearSoftmax(), _inputs()).lower(),
        QuantTester(ConvLinearSoftmax(), _inputs(), QuantDtype.use_8a8w).lower(),
        QuantTester(ConvLinearSoftmax(), _inputs(), QuantDtype.use_8a8w, per_channel=True).lower(),
        QuantTester(ConvLinearSoftmax(), _inputs(), QuantDtype.use_16a4w, per_channel=True).lower(),
    ]


@pytest.mark.parametrize("tensor_version", [1, 2])
def test_each_struct_kind_is_accepted(struct_cases, tensor_version):
    """Tensor v1 / v2, op configs, scalar and tensor params, per-tensor / per-axis / bit-width
    quantization encodings: QNN validates every op and finalizes the graph."""
    encodings = set()
    for tester in struct_cases:
        blob = tester.delegate_blobs()[0]
        graph = tester.payload()
        encodings |= {t.quant.split("(")[0] for t in graph.tensors if t.quant}
        for index in range(len(graph.ops)):
            assert native().qnn_validate_op(blob, 0, index) is None, graph.ops[index]
        binary, graphs = native().qnn_compile(blob, SM8650, 8, 0, tensor_version)
        assert binary[:16] == CONTEXT_BINARY_MAGIC
        assert graphs[0][0] == "forward" and len(graphs[0][1]) == len(graph.tensors)
        assert len(set(graphs[0][1])) == len(graph.tensors)  # every tensor got its own id
    assert {"SCALE_OFFSET", "AXIS_SCALE_OFFSET", "BW_AXIS_SCALE_OFFSET"} <= encodings


class LpbqLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(32, 16, bias=False)

    def forward(self, x):
        return self.linear(x)


def test_lpbq_graph_finalizes_and_a_refusal_is_a_clear_warning(caplog, monkeypatch):
    """A bias-free LPBQ linear gets an int32 zero bias (scale input x channel scale) and QNN
    finalizes it; with the FLOAT_32 zero bias it had before, QNN 2.51's finalize fails (error
    1002): the delegate then carries no context binary, the warning names the graph and QNN's
    error, and the host engine runs it."""
    from backends.qualcomm.builders import op_matmul

    inputs = (torch.randn(1, 4, 32),)
    tester = QuantTester(LpbqLinear(), inputs, QuantDtype.use_16a4w_block, block_size_map={"linear": 16})
    blob = tester.lower().delegate_blobs()[0]
    tensors = describe_payload(blob)[0].tensors
    assert any(t.quant.startswith("BLOCKWISE_EXPANSION") for t in tensors)
    assert any(t.name.endswith("_bias") and t.quant.startswith("AXIS_SCALE_OFFSET(bw=32") for t in tensors)
    assert qnn_binary_of(blob) is not None
    monkeypatch.setattr(op_matmul, "zero_bias_attrs", lambda *args: None)
    with caplog.at_level("WARNING", logger="backends.qualcomm"):
        refused = tester.lower().delegate_blobs()[0]
    assert qnn_binary_of(refused) is None
    assert "graph 'forward' (the delegate of nodes " in caplog.text and "gets no QNN context binary" in caplog.text
    assert "QNN graphFinalize failed: QNN error 1002" in caplog.text
    with pytest.raises(RuntimeError, match=r"graph 'forward': QNN graphFinalize failed: QNN error 1002"):
        native().qnn_compile(refused, SM8650)
    tester.to_executorch().run().compare_steps()


def test_op_validation_reports_qnn_reason():
    tester = QnnTester(ConvAddRelu(), _inputs()).lower()
    blob = bytearray(tester.delegate_blobs()[0])
    graph = tester.payload()
    conv = next(i for i, op in enumerate(graph.ops) if op.type == "Conv2d")
    # Rename the op type in place (same length) into one QNN does not know.
    at = blob.find(b"Conv2d")
    blob[at : at + 6] = b"Conv9d"
    from backends.qualcomm.serialization.payload_writer import wrap_context_binary as wrap

    fixed = wrap(payload_of(bytes(blob)))
    reason = native().qnn_validate_op(fixed, 0, conv)
    assert reason is not None and "(Conv9d) refused by QNN: QNN error" in reason
