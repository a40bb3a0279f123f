"""Real QNN runtime: log noise, intermediate tensor dumps, heap checkpoints and profiling on the
QNN engine (Qualcomm's QNN 2.51 HTP library from pip onnxruntime-qnn, x86 emulation). Tiny
shapes: emulation is slow. Skipped when the library does not load here."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
import torch

from backends.qualcomm.tests.helpers.debug_run import debug_specs, quantize_8a8w
from backends.qualcomm.tests.helpers.engines import set_engine
from backends.qualcomm.tests.helpers.runtime import load_method, native, needs_qnn, run
from backends.qualcomm.tests.helpers.tester import QnnTester, inputs_of
from backends.qualcomm.utils.qnn_context import AOT_ENV

pytestmark = [needs_qnn, pytest.mark.usefixtures("real_qnn")]  # real_qnn: conftest.py


# real_qnn: context binaries at lowering, runtime options reset around each test.


class TinyConv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.mix = torch.nn.Conv2d(4, 4, 1)

    def forward(self, x):
        return self.mix(torch.relu(self.conv(x)))


def _inputs():
    torch.manual_seed(0)
    return inputs_of((1, 3, 4, 4))


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
    set_engine("qnn")
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


# ---- intermediate tensor dumps -------------------------------------------------------------
def _dumps(pte: Path, inputs, engine: str, out_dir: Path):
    """{debug handle: dumped tensors} of one run on `engine`, and whether it ran on QNN."""
    from executorch.runtime import Runtime

    from backends.qualcomm.debugger.runtime_dump import read_delegate_dumps

    set_engine(engine)
    out_dir.mkdir(parents=True, exist_ok=True)
    program = Runtime.get().load_program(str(pte), enable_etdump=True, debug_buffer_size=1 << 20)
    method = program.load_method("forward")
    method.execute(list(inputs))
    on_qnn = native().live_qnn_context_count() == 1  # one delegate, on QNN
    etdump, buffer = out_dir / "run.etdp", out_dir / "debug.bin"
    program.write_etdump_result_to_file(str(etdump), str(buffer))
    del method, program
    gc.collect()
    return read_delegate_dumps(str(etdump), str(buffer)), on_qnn


@pytest.mark.parametrize("quantized", [False, True])
def test_qnn_engine_dumps_the_same_rows_as_the_host_engine(tmp_path, aot_env, quantized):
    from backends.qualcomm import to_edge_transform_and_lower_to_qnn

    inputs = _inputs()
    module = quantize_8a8w(TinyConv(), inputs) if quantized else TinyConv().eval()
    edge = to_edge_transform_and_lower_to_qnn(module, inputs, debug_specs(fp16=not quantized, dump=True))
    pte = tmp_path / "dump.pte"
    edge.to_executorch().write_to_file(open(pte, "wb"))
    qnn, on_qnn = _dumps(pte, inputs, "qnn", tmp_path / "qnn")
    host, on_host = _dumps(pte, inputs, "host", tmp_path / "host")
    assert (on_qnn, on_host) == (True, False)
    assert len(host) >= 2 and sorted(qnn) == sorted(host)  # conv, relu / mul ... by debug handle
    for handle in host:
        assert len(qnn[handle]) == len(host[handle]), handle
        for q, h in zip(qnn[handle], host[handle]):
            # both engines log the edge node's tensor: float, in PyTorch's layout (TensorDump.h)
            assert q.dtype == h.dtype == torch.float32 and q.shape == h.shape, (handle, q.dtype, h.dtype)
            if quantized:  # dequantized 8-bit tensors: values on a grid of their scale, within 2 steps
                levels = h.unique()
                step = float((levels[1:] - levels[:-1]).min())
                assert len(levels) <= 256 and float((q - h).abs().max()) <= 2.01 * step, handle
            else:  # fp16 precision
                scale = max(1e-6, float(h.abs().max()))
                assert float((q - h).abs().max()) / scale < 1e-2, handle


# ---- heap checkpoints -----------------------------------------------------------------------
def _checkpoints(path: Path):
    lines = path.read_text().splitlines()
    return [(line.split(",")[0], int(line.split(",")[1])) for line in lines]


def test_heap_checkpoints_on_the_qnn_engine(fp16_pte, tmp_path):
    """One session per first-to-last context: two lines, the process heap (QNN's allocations
    included) before contextCreateFromBinary and after contextFree."""
    path = tmp_path / "heap.csv"
    set_engine("qnn")
    native().set_runtime_option("qnn_runtime_heap_profiling_path", str(path))
    native().set_runtime_option("qnn_runtime_profile_level", 1)
    for _ in range(2):  # the second session truncates the file again
        assert native().live_context_count() == 0
        program, method = load_method(fp16_pte)
        run(method, _inputs())
        assert native().live_qnn_context_count() == 1
        assert [name for name, _ in _checkpoints(path)] == ["before_context_created(bytes)"]
        del method, program
        gc.collect()
        checkpoints = _checkpoints(path)
        assert [name for name, _ in checkpoints] == ["before_context_created(bytes)", "after_context_freed(bytes)"]
        assert all(value > 0 for _, value in checkpoints)  # process heap, not the engine's 0


def test_runner_heap_checkpoints_on_the_qnn_engine(fp16_pte, tmp_path):
    from backends.qualcomm.tests.helpers.runtime import run_runner

    raw = tmp_path / "in0.raw"
    _inputs()[0].numpy().tofile(raw)
    input_list = tmp_path / "inputs.txt"
    input_list.write_text(f"{raw}\n")
    path = tmp_path / "heap.csv"
    result = run_runner(
        fp16_pte,
        input_list,
        tmp_path / "out",
        ["--engine", "qnn", "--profile_level", "1", "--heap_profiling_path", str(path)],
    )
    assert result.returncode == 0, result.stderr[-2000:]
    checkpoints = _checkpoints(path)
    assert [name for name, _ in checkpoints] == ["before_context_created(bytes)", "after_context_freed(bytes)"]
    before, after = checkpoints[0][1], checkpoints[1][1]
    assert before > 0 and after > 0


# ---- error texts ------------------------------------------------------------------------------
@pytest.mark.parametrize("span", [(8, 64), (0, 16)])
def test_refused_context_binary_names_qnn_system_error(span):
    """A context binary with a zeroed header or body is refused before it reaches QNN's loader:
    libQnnSystem cannot read it, and the error carries its size and QNN's error code and name."""
    from backends.qualcomm.tests.helpers.engines import rewrite_qnn_section
    from backends.qualcomm.utils.qnn_context import qnn_binary_of

    blob = QnnTester(TinyConv(), _inputs()).lower().delegate_blobs()[0]
    binary = bytearray(qnn_binary_of(blob))
    binary[span[0] : span[1]] = bytes(span[1] - span[0])
    expected = (
        rf"refused before loading: QnnSystem could not read the context binary \({len(binary)} bytes\): "
        r"QNN error 30010 \(system context: malformed context binary\)"
    )
    with pytest.raises(ValueError, match=expected):
        native().run_payload_qnn(rewrite_qnn_section(blob, binary=bytes(binary)), [x.numpy() for x in _inputs()])


# ---- profiling -------------------------------------------------------------------------------
def test_detailed_profile_every_execute_gives_the_same_node_events(tmp_path):
    """Profile handle created at init (compiled level 2); the event buffer is reused across
    executes: each execute logs one graph event and the same per-node events."""
    from backends.qualcomm.tests.helpers.runtime import delegate_events, fp16_specs, parse_metadata, write_etdump

    tester = QnnTester(
        TinyConv().eval(), _inputs(), compile_specs=fp16_specs(profile_level=2), tmp_dir=str(tmp_path)
    ).lower()
    op_names = {op.name for op in tester.payload().ops}
    set_engine("qnn")
    program, method = load_method(Path(tester.to_executorch().pte_path), etdump=True)
    for _ in range(3):
        run(method, _inputs())
    etdump = write_etdump(program, tmp_path / "run.etdump")
    del method, program
    gc.collect()
    events = [(name, parse_metadata(meta), runs) for name, meta, runs in delegate_events(etdump)]
    graphs = [runs for name, meta, runs in events if meta.get("engine") == "qnn"]
    nodes = {name: runs for name, meta, runs in events if meta.get("type") == "QnnNode"}
    assert graphs == [3]  # the Inspector folds the runs of one event together
    assert set(nodes) >= op_names and set(nodes.values()) == {3}, nodes
