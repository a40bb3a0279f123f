"""Real QNN runtime: log noise, intermediate tensor dumps, heap checkpoints and profiling on the
QNN engine (Qualcomm's QNN 2.51 HTP library from pip onnxruntime-qnn, x86 emulation). Tiny
shapes: emulation is slow. Skipped when the library does not load here."""
from __future__ import annotations

import gc
from pathlib import Path

import pytest
import torch

from backends.qualcomm.tests.tester import QnnTester, inputs_of
from backends.qualcomm.tests.utils_helpers import (
    load_method, native, reset_runtime_options, run)
from backends.qualcomm.utils.qnn_context import AOT_ENV, qnn_library_status

LOADED, STATUS = qnn_library_status()
pytestmark = pytest.mark.skipif(not LOADED, reason=f"QNN library not available: {STATUS}")


@pytest.fixture(autouse=True)
def real_qnn(monkeypatch):
    """Context binaries at lowering (the suite's default is payload only, for speed)."""
    monkeypatch.setenv(AOT_ENV, "1")
    reset_runtime_options()
    yield
    reset_runtime_options()
    gc.collect()


class TinyConv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x)) * 0.5


def _inputs():
    torch.manual_seed(0)
    return inputs_of((1, 3, 4, 4))


def _set_engine(engine: str) -> None:
    native().set_runtime_option("qnn_runtime_engine", engine)


@pytest.fixture(scope="module")
def aot_env():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(AOT_ENV, "1")
        yield


@pytest.fixture(scope="module")
def fp16_pte(tmp_path_factory, aot_env):
    torch.manual_seed(0)
    tmp = tmp_path_factory.mktemp("fp16")
    tester = QnnTester(TinyConv().eval(), _inputs(), tmp_dir=str(tmp)).lower().check_fully_delegated()
    return Path(tester.to_executorch().pte_path)


# ---- log noise --------------------------------------------------------------------------
def test_loading_a_context_binary_logs_no_error_line(fp16_pte, capfd):
    """QNN 2.51 on x86 cannot validate a context binary (1000) and logs two error lines for it;
    the runtime asks once, quietly, and never again. QNN's finalize logs a bogus 'option 66' error
    with no graph config at all: demoted to debug."""
    _set_engine("qnn")
    native().set_runtime_option("qnn_runtime_log_level", 2)  # warnings and errors forwarded
    for _ in range(2):
        program, method = load_method(fp16_pte)
        run(method, _inputs())
        assert native().live_qnn_context_count() == 1
        del method, program
        gc.collect()
    err = capfd.readouterr().err
    assert "validateBinary" not in err and "validate context binary" not in err
    assert "<E>" not in err, err[-2000:]
