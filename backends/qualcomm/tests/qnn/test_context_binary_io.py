"""Real QNN: context binaries out of and into `.pte` programs. dump_context_from_pte writes each
delegate's binary and a JSON read back through libQnnSystem; from_context_binary wraps a binary
as a program that runs on QNN (engine auto picks QNN for it, engine host refuses it); binaries
for another SoC, from a newer QNN, truncated or mutated are refused with clear errors; a seeded
slice of the context-binary fuzzer (tests/tools/fuzz_context_binary.py) finds no crash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from backends.qualcomm import to_edge_transform_and_lower_to_qnn
from backends.qualcomm.tests.helpers.engines import set_engine
from backends.qualcomm.tests.helpers.runtime import fp16_specs, load_method, native, needs_qnn, run, run_runner
from backends.qualcomm.utils.context_binary import context_binary_info, from_context_binary
from backends.qualcomm.utils.errors import ContextBinaryError
from backends.qualcomm.utils.qnn_context import AOT_ENV
from backends.qualcomm.utils.utils import dump_context_from_pte

pytestmark = [needs_qnn, pytest.mark.usefixtures("real_qnn")]

SM8650, SM8750 = 57, 69


class ConvRelu(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x, y):
        return torch.relu(self.conv(x)), x.mean(dim=(2, 3)) + y


def _sample():
    torch.manual_seed(7)
    return (torch.randn(1, 3, 6, 6), torch.randn(1, 3))


@pytest.fixture(scope="module")
def dumped(tmp_path_factory):
    """A 2-input / 2-output fp16 program, its outputs on QNN, and its dumped binary + JSON."""
    folder = tmp_path_factory.mktemp("ctx_io")
    torch.manual_seed(0)
    model = ConvRelu().eval()
    pte = folder / "model.pte"
    with pytest.MonkeyPatch.context() as patch:  # real_qnn is per test: binaries at lowering here too
        patch.setenv(AOT_ENV, "1")
        program = to_edge_transform_and_lower_to_qnn(model, _sample(), fp16_specs()).to_executorch()
    pte.write_bytes(program.buffer)
    paths = dump_context_from_pte(str(pte))
    return pte, [Path(p) for p in paths]


def _outputs(pte: Path, inputs, engine: str, method: str = "forward"):
    set_engine(engine)
    program, loaded = load_method(pte, method)
    try:
        return run(loaded, inputs)
    finally:
        del loaded, program


def test_dump_writes_binary_and_qnn_system_json(dumped):
    """The JSON comes from QnnSystem's info on the dumped bytes: graph name, inputs / outputs
    with QNN's names, ids, dtypes and shapes, the build and SoC the binary was made for."""
    pte, paths = dumped
    assert [p.name for p in paths] == ["forward_0.bin"]
    meta = json.loads(paths[0].with_suffix(".json").read_text())
    assert meta["build_id"].startswith("v2.51.0") and meta["soc_model"] == SM8650
    assert meta["core_api"].startswith("2.") and meta["backend_api"].startswith("5.")
    assert meta["context_blob_size"] > 0
    [graph] = meta["graphs"]
    assert graph["name"] == "forward"
    assert [(t["dtype"], t["shape"]) for t in graph["inputs"]] == [("FLOAT_32", [1, 3, 6, 6]), ("FLOAT_32", [1, 3])]
    assert sorted(t["shape"] for t in graph["outputs"]) == [[1, 3], [1, 4, 4, 4]]
    assert all("encoding" not in t for t in graph["inputs"] + graph["outputs"])  # float graph
    assert meta == json.loads(paths[0].with_suffix(".json").read_text())


def test_round_trip_dump_wrap_run_same_outputs(dumped, tmp_path):
    """dump -> from_context_binary -> .pte -> run on QNN: the same outputs, bit for bit, as the
    original program on QNN."""
    pte, paths = dumped
    inputs = _sample()
    expected = _outputs(pte, inputs, "qnn")
    info = context_binary_info(paths[0].read_bytes())
    graph = info["graphs"][0]
    bundle = from_context_binary(str(paths[0]), "ctx_round_trip")
    assert list(bundle["inputs"]) == [t["name"] for t in graph["inputs"]]
    wrapped = tmp_path / "wrapped.pte"
    wrapped.write_bytes(bundle["edge_program_manager"].to_executorch().buffer)
    got = _outputs(wrapped, inputs, "auto", method="forward")
    by_shape = {tuple(t.shape): t for t in expected}
    assert [list(o.shape) for o in got] == [t["dims"] for t in graph["outputs"]]
    for out in got:
        assert torch.equal(out, by_shape[tuple(out.shape)])
    assert native().live_qnn_context_count() == 0


def test_wrapped_program_refused_by_host_engine(dumped, tmp_path):
    pte, paths = dumped
    bundle = from_context_binary(paths[0].read_bytes(), "ctx_host_refusal")
    wrapped = tmp_path / "wrapped.pte"
    wrapped.write_bytes(bundle["edge_program_manager"].to_executorch().buffer)
    set_engine("host")
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(str(wrapped))
    with pytest.raises(RuntimeError):
        program.load_method("forward")
    result = run_runner(wrapped, Path("/nonexistent"), tmp_path / "out", ["--engine", "host"])
    assert result.returncode == 1
    assert "the host engine cannot run graph 'forward': the delegate wraps a QNN context binary" in result.stderr


def test_custom_info_names_shapes_and_order(dumped, tmp_path):
    """Upstream's custom_info: new names and shapes (same element count and dtype as QNN's),
    ExecuTorch's input order, output order."""
    _, paths = dumped
    graph = context_binary_info(paths[0].read_bytes())["graphs"][0]
    ins = [{"name": f"in{i}", "shape": [int(torch.Size(t["dims"]).numel())]} for i, t in enumerate(graph["inputs"])]
    outs = [{"name": f"out{i}", "shape": t["dims"]} for i, t in enumerate(graph["outputs"])]
    bundle = from_context_binary(
        paths[0].read_bytes(),
        "ctx_custom_info",
        custom_info={
            "graph_name": "forward",
            "graph_inputs": ins,
            "graph_outputs": outs,
            "executorch_out_order": [1, 0],
        },
    )
    assert list(bundle["inputs"]) == ["in0", "in1"] and bundle["inputs"]["in0"].shape == (108,)
    wrong = [dict(ins[0], shape=[5]), ins[1]]
    with pytest.raises(ContextBinaryError, match="does not have the 108 elements"):
        from_context_binary(paths[0].read_bytes(), "ctx_bad_shape", custom_info={"graph_inputs": wrong})
    with pytest.raises(ContextBinaryError, match="no graph 'decode'"):
        from_context_binary(paths[0].read_bytes(), "ctx_bad_graph", custom_info={"graph_name": "decode"})


def test_other_soc_and_newer_qnn_refused(dumped):
    _, paths = dumped
    data = paths[0].read_bytes()
    with pytest.raises(ContextBinaryError, match=r"built for SoC model 57 \(SM8650\), not SM8750 \(69\)"):
        from_context_binary(data, "ctx_other_soc", soc_model=SM8750)
    from backends.qualcomm.utils import context_binary

    info = context_binary_info(data)
    info["backend_api"] = dict(info["backend_api"], minor=info["backend_api"]["minor"] + 9)
    with pytest.raises(ContextBinaryError, match="must come from the same or an older QNN release"):
        context_binary.check_context_binary(info, SM8650, "newer.bin")


@pytest.mark.parametrize("size", [0, 16, 31, 4096])
def test_truncated_binaries_refused_before_qnn_loads_them(dumped, size):
    """Below 32 bytes nothing reaches QNN; longer truncations are refused by QnnSystem's parse."""
    _, paths = dumped
    with pytest.raises(ContextBinaryError) as info:
        from_context_binary(paths[0].read_bytes()[:size], "ctx_truncated")
    text = str(info.value)
    assert ("fewer than the 32 of the smallest one" in text) if size < 32 else ("QnnSystem could not read" in text)


def test_fuzz_slice_no_crash(dumped, tmp_path):
    """300 seeded mutations (parse + load, each in a worker that a crash would cost one case)."""
    from backends.qualcomm.tests.tools.fuzz_context_binary import fuzz

    _, paths = dumped
    report = fuzz(paths[0], seed=1, start=0, cases=300, timeout_s=60.0, crash_dir=tmp_path / "crashes")
    assert report["cases"] == 300
    assert report["crashes"] == 0 and report["hangs"] == 0, report["failures"]
    assert report["counts"]["info_refused"] > 100  # most mutations are caught by the parse


def test_fuzz_worker_memory_is_capped():
    """The fuzzer's workers run under a data-memory cap: an allocation past it fails in the worker
    (one case lost) instead of taking the machine's memory."""
    import subprocess
    import sys

    from backends.qualcomm.tests.tools.fuzz_context_binary import _limit_memory

    grab = [sys.executable, "-c", "bytearray(1 << 30)"]
    capped = subprocess.run(grab, preexec_fn=_limit_memory(256), capture_output=True, text=True)
    assert capped.returncode != 0 and "MemoryError" in capped.stderr
    assert subprocess.run(grab, preexec_fn=_limit_memory(2048)).returncode == 0
