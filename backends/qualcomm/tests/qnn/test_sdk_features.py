"""Real QNN: saver (QNN's libQnnSaver.so records the QNN calls of each delegate), online prepare
(no context binary in the .pte; QNN builds and finalizes the graph at init), shared buffers
(QnnMem registration; the x86 library refuses every memory type, and the error carries QNN's)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from backends.qualcomm import (
    QcomChipset,
    generate_htp_compiler_spec,
    generate_qnn_executorch_compiler_spec,
    to_edge_transform_and_lower_to_qnn,
)
from backends.qualcomm.tests.helpers.engines import set_engine
from backends.qualcomm.tests.helpers.runtime import load_method, needs_qnn, run, run_runner
from backends.qualcomm.utils.qnn_context import qnn_binary_of

pytestmark = [needs_qnn, pytest.mark.usefixtures("real_qnn")]


def _model():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval(), (torch.randn(1, 3, 6, 6),)


def _lower(tmp_path: Path, name: str, **spec_kwargs) -> Path:
    model, sample = _model()
    specs = generate_qnn_executorch_compiler_spec(
        QcomChipset.SM8650, generate_htp_compiler_spec(use_fp16=True), **spec_kwargs
    )
    program = to_edge_transform_and_lower_to_qnn(model, sample, specs).to_executorch()
    path = tmp_path / f"{name}.pte"
    path.write_bytes(program.buffer)
    return path


def _blob(path: Path) -> bytes:
    from executorch.exir._serialize._program import deserialize_pte_binary

    return bytes(deserialize_pte_binary(path.read_bytes()).program.backend_delegate_data[0].data)


def test_online_prepare_builds_at_init_same_outputs(tmp_path):
    """No context binary in the .pte; on QNN the outputs equal the context-binary program's."""
    _, sample = _model()
    offline = _lower(tmp_path, "offline")
    online = _lower(tmp_path, "online", online_prepare=True)
    assert qnn_binary_of(_blob(offline)) is not None and qnn_binary_of(_blob(online)) is None
    assert online.stat().st_size < offline.stat().st_size
    outputs = {}
    for name, path in (("offline", offline), ("online", online)):
        set_engine("qnn")
        program, method = load_method(path)
        outputs[name] = run(method, sample)
        del method, program
    assert torch.equal(outputs["online"][0], outputs["offline"][0])
    set_engine("host")  # the host engine runs the payload as usual
    program, method = load_method(online)
    assert torch.allclose(run(method, sample)[0], outputs["offline"][0], atol=2e-2)


def test_saver_records_qnn_calls(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # saver_output/ is relative to the working folder, like upstream
    path = _lower(tmp_path, "saved", saver=True)
    record = tmp_path / "saver_output"
    source = (record / "saver_output.c").read_text()
    for call in ("backendCreate", "deviceCreate", "graphCreate", "graphAddNode", "graphFinalize"):
        assert call in source, call
    assert (record / "params.bin").stat().st_size > 0
    assert qnn_binary_of(_blob(path)) is not None  # the delegate still carries its binary


def test_shared_buffer_refused_on_x86_with_qnns_error(tmp_path):
    path = _lower(tmp_path, "shared", shared_buffer=True)
    result = run_runner(path, Path("/nonexistent"), tmp_path / "out", ["--engine", "qnn"])
    assert result.returncode == 1
    assert "shared_buffer: QNN refused to register graph 'forward' tensor" in result.stderr
    assert "DMA-BUF QNN error 1000 (not supported), ION QNN error 1000 (not supported)" in result.stderr
    assert "QnnMem API is not supported" in result.stderr
    plain = _lower(tmp_path, "plain")
    flagged = run_runner(plain, Path("/nonexistent"), tmp_path / "out2", ["--engine", "qnn", "--shared_buffer"])
    assert flagged.returncode == 1 and "QNN error 1000" in flagged.stderr
    from backends.qualcomm.utils.pte_tools import write_input_files

    inputs = write_input_files([list(_model()[1])], tmp_path / "inputs")
    host = run_runner(plain, inputs, tmp_path / "out3", ["--engine", "host", "--shared_buffer"])
    assert host.returncode == 0, host.stderr
    assert os.environ.get("QNN_DELEGATE_SHARED_BUFFER") is None
