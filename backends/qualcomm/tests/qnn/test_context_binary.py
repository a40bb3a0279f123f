"""Real QNN: Qualcomm's QNN 2.51 HTP library (pip onnxruntime-qnn) builds each delegate into a
context binary at lowering and runs it (x86 emulation) at run time: engine choice (auto / qnn /
host), corrupted or foreign binaries refused, weight-shared methods in one context, the
runner's --engine qnn, detailed profiles, dump_context_from_pte. Small shapes: emulation is
slow. Skipped when the library does not load here. The library and its ABI:
qnn/test_qnn_abi.py."""

from __future__ import annotations

import gc
import platform
from pathlib import Path

import numpy as np
import pytest
import torch

from backends.qualcomm import QuantDtype, to_edge_transform_and_lower_to_qnn
from backends.qualcomm.serialization import qnn_payload_generated as gen
from backends.qualcomm.tests.helpers.engines import CONTEXT_BINARY_MAGIC, rewrite_qnn_section, set_engine
from backends.qualcomm.tests.helpers.models_float import ConvAddRelu, ConvLinearSoftmax
from backends.qualcomm.tests.helpers.quant_tester import QuantTester, output_encodings, step_stats
from backends.qualcomm.tests.helpers.runtime import (
    delegate_blobs,
    delegate_events,
    fp16_specs,
    load_method,
    native,
    needs_qnn,
    parse_metadata,
    run,
    run_runner,
    shared_mlp_methods,
    write_etdump,
)
from backends.qualcomm.tests.helpers.tester import QnnTester, inputs_of
from backends.qualcomm.utils.qnn_context import AOT_ENV, qnn_binary_of

# real_qnn (conftest.py): context binaries at lowering, runtime options reset around each test.
pytestmark = [needs_qnn, pytest.mark.usefixtures("real_qnn")]

SM8650, SM8750 = 57, 69


def _inputs():
    return inputs_of((1, 3, 8, 8), (1, 8, 8, 8))


def _numpy(inputs):
    return [x.numpy() for x in inputs]


def _run_pte(path: Path, inputs, engine: str):
    """Outputs of the .pte on `engine` and how many live contexts ran on QNN meanwhile."""
    set_engine(engine)
    program, method = load_method(path)
    outputs = run(method, inputs)
    on_qnn = native().live_qnn_context_count()
    del method, program
    gc.collect()
    return outputs, on_qnn


def _fp16_pte(tmp_path: Path, module=None, inputs=None) -> Path:
    module = module or ConvLinearSoftmax().eval()
    inputs = inputs or _inputs()
    tmp_path.mkdir(parents=True, exist_ok=True)
    tester = QnnTester(module, inputs, tmp_dir=str(tmp_path)).lower().check_fully_delegated()
    return Path(tester.to_executorch().pte_path)


# ---- AOT --------------------------------------------------------------------------------
def test_lowering_stores_a_context_binary():
    tester = QnnTester(ConvLinearSoftmax(), _inputs()).lower()
    blob = tester.delegate_blobs()[0]
    binary = qnn_binary_of(blob)
    assert binary is not None and binary[:16] == CONTEXT_BINARY_MAGIC and len(binary) > 16 * 1024
    section = gen.QnnContextBinary.GetRootAs(bytearray(blob), 0).QnnContext()
    assert section.SocModel() == SM8650
    assert section.Signature() == native().fnv1a64(binary)
    assert section.GraphsLength() == 1 and section.Graphs(0).Name() == b"forward"


def test_lowering_without_context_binary_when_disabled(monkeypatch):
    monkeypatch.setenv(AOT_ENV, "0")
    tester = QnnTester(ConvAddRelu(), _inputs()).lower()
    assert qnn_binary_of(tester.delegate_blobs()[0]) is None


# ---- runtime: engines --------------------------------------------------------------------
def test_fp16_qnn_matches_host_and_eager(tmp_path):
    inputs = _inputs()
    module = ConvLinearSoftmax().eval()
    pte = _fp16_pte(tmp_path, module, inputs)
    qnn, on_qnn = _run_pte(pte, inputs, "qnn")
    host, on_host = _run_pte(pte, inputs, "host")
    assert (on_qnn, on_host) == (1, 0)
    eager = module(*inputs).detach()
    # fp16 precision: both engines within fp16 rounding of eager and of each other.
    assert float((qnn[0] - eager).abs().max()) < 2e-3
    assert float((host[0] - eager).abs().max()) < 2e-3
    assert float((qnn[0] - host[0]).abs().max()) < 2e-3
    assert not torch.equal(qnn[0], host[0])  # really two engines


# QNN vs host engine on conv -> relu -> add (measured with QNN 2.51): 8a8w 96.1% exact, max 1
# step (the conv is bit-exact with QNN since the host follows HTP's requantization; the rest
# comes from relu / add); 16a8w 30.7% exact, max 9 steps of 2^16 (0.04 of an 8-bit step): the
# 16-bit conv still follows the PT2E reference, not QNN's 16-bit requantization.
@pytest.mark.parametrize(
    "quant_dtype,max_steps,min_exact", [(QuantDtype.use_8a8w, 1, 0.95), (QuantDtype.use_16a8w, 16, 0.25)]
)
def test_quantized_conv_add_relu_qnn_matches_host(tmp_path, quant_dtype, max_steps, min_exact):
    torch.manual_seed(0)
    inputs = _inputs()
    tester = QuantTester(ConvAddRelu(), inputs, quant_dtype, per_channel=True)
    tester.tmp_dir = str(tmp_path)
    tester.lower().check_fully_delegated().to_executorch()
    qnn, on_qnn = _run_pte(Path(tester.pte_path), inputs, "qnn")
    host, _ = _run_pte(Path(tester.pte_path), inputs, "host")
    assert on_qnn == 1
    scale = output_encodings(tester.module)[0][0]
    stats = step_stats(qnn[0].numpy(), host[0].numpy(), scale)
    assert stats.max_diff <= max_steps and stats.exact_fraction >= min_exact, str(stats)
    ref = step_stats(qnn[0].numpy(), tester.reference_outputs()[0], scale)
    assert ref.max_diff <= max_steps, str(ref)


def test_auto_uses_the_host_engine_where_qnn_is_the_x86_emulator(tmp_path, monkeypatch):
    """auto: QNN where its library drives an NPU; on x86 it is the HTP emulator (~50x slower),
    so the host engine runs even a delegate that carries a context binary; `qnn` forces QNN."""
    inputs = _inputs()
    module = ConvAddRelu().eval()
    pte = _fp16_pte(tmp_path / "with", module, inputs)
    auto, on_qnn = _run_pte(pte, inputs, "auto")
    host, _ = _run_pte(pte, inputs, "host")
    qnn, forced_on_qnn = _run_pte(pte, inputs, "qnn")
    assert platform.machine() in ("x86_64", "AMD64") and on_qnn == 0 and torch.equal(auto[0], host[0])
    assert forced_on_qnn == 1
    monkeypatch.setenv(AOT_ENV, "0")
    bare = _fp16_pte(tmp_path / "without", module, inputs)
    auto_bare, on_qnn_bare = _run_pte(bare, inputs, "auto")
    assert on_qnn_bare == 0 and torch.equal(auto_bare[0], host[0])
    set_engine("qnn")  # forced QNN without a context binary: init fails
    with pytest.raises(Exception):
        load_method(bare)


def test_engine_option_values():
    set_engine("host")
    assert native().get_runtime_option("qnn_runtime_engine") == "host"
    native().set_runtime_option("qnn_runtime_engine", 1)
    assert native().get_runtime_option("qnn_runtime_engine") == "qnn"
    with pytest.raises(ValueError, match="qnn_runtime_engine' value 'npu' is not allowed"):
        native().set_runtime_option("qnn_runtime_engine", "npu")
    with pytest.raises(TypeError, match="qnn_runtime_engine"):
        native().set_runtime_option("qnn_runtime_engine", 1.5)


def _blob_pte(tmp_path: Path, blob_edit) -> Path:
    """An fp16 .pte whose delegate blob went through `blob_edit`."""
    inputs = _inputs()
    edge = to_edge_transform_and_lower_to_qnn(ConvAddRelu().eval(), inputs, fp16_specs())
    from executorch.exir.lowered_backend_module import get_lowered_submodules

    for _, lowered, _ in get_lowered_submodules(edge.exported_program().graph_module):
        lowered._processed_bytes = blob_edit(lowered.processed_bytes)
    path = tmp_path / "edited.pte"
    edge.to_executorch().write_to_file(open(path, "wb"))
    return path


def test_corrupted_context_binary_is_refused_and_auto_falls_back(tmp_path):
    def corrupt(blob: bytes) -> bytes:
        binary = bytearray(qnn_binary_of(blob))
        binary[8:64] = bytes(56)  # header damaged; signature recomputed so QNN sees it
        return rewrite_qnn_section(blob, binary=bytes(binary))

    pte = _blob_pte(tmp_path, corrupt)
    set_engine("qnn")
    with pytest.raises(Exception):
        load_method(pte)
    inputs = _inputs()
    auto, on_qnn = _run_pte(pte, inputs, "auto")
    host, _ = _run_pte(pte, inputs, "host")
    assert on_qnn == 0 and torch.equal(auto[0], host[0])


def test_altered_binary_fails_the_signature_check(tmp_path):
    blob = QnnTester(ConvAddRelu(), _inputs()).lower().delegate_blobs()[0]
    root = gen.QnnContextBinary.GetRootAs(bytearray(blob), 0).QnnContext()
    # Flip one byte of the stored binary without fixing the signature.
    binary = root.BinaryAsNumpy().tobytes()
    at = bytes(blob).find(binary)
    altered = bytearray(blob)
    altered[at + 100] ^= 0xFF
    with pytest.raises(ValueError, match="QNN context binary signature mismatch"):
        native().run_payload_qnn(bytes(altered), _numpy(_inputs()))


def test_context_binary_of_another_soc(tmp_path):
    """A binary prepared for SM8650 (v75) loaded on a device configured as SM8750 (v79):
    a clear error naming QNN's code when QNN refuses it, else correct outputs."""
    blob = QnnTester(ConvAddRelu(), _inputs()).lower().delegate_blobs()[0]
    other = rewrite_qnn_section(blob, soc_model=SM8750)
    try:
        outputs, _ = native().run_payload_qnn(other, _numpy(_inputs()))
    except ValueError as exc:
        assert "contextCreateFromBinary" in str(exc) and "SoC model 69" in str(exc)
        assert "QNN error" in str(exc)
    else:
        expected, _ = native().run_payload_qnn(blob, _numpy(_inputs()))
        np.testing.assert_array_equal(outputs[0], expected[0])


# ---- multi-method, runner, profiling -------------------------------------------------------
def test_weight_shared_methods_run_on_one_qnn_context(tmp_path):
    from backends.qualcomm import QcomChipset, generate_htp_compiler_spec, generate_qnn_executorch_compiler_spec

    modules, inputs = shared_mlp_methods(width=32, depth=2)
    specs = generate_qnn_executorch_compiler_spec(
        QcomChipset.SM8650, generate_htp_compiler_spec(use_fp16=True, use_weight_sharing=True)
    )
    edge = to_edge_transform_and_lower_to_qnn(modules, inputs, specs)
    blobs = delegate_blobs(edge, "prefill") + delegate_blobs(edge, "decode")
    assert len(set(blobs)) == 1
    section = gen.QnnContextBinary.GetRootAs(bytearray(blobs[0]), 0).QnnContext()
    names = sorted(section.Graphs(i).Name().decode() for i in range(section.GraphsLength()))
    assert names == ["decode", "prefill"]
    path = tmp_path / "shared.pte"
    edge.to_executorch().write_to_file(open(path, "wb"))
    for method_name in ("prefill", "decode"):
        set_engine("qnn")
        program, method = load_method(path, method_name)
        qnn = run(method, inputs[method_name])
        assert native().live_qnn_context_count() == 1
        del method, program
        gc.collect()
        eager = modules[method_name](*inputs[method_name])
        assert float((qnn[0] - eager).abs().max()) < 5e-3 * max(1.0, float(eager.abs().max()))


def test_runner_engine_qnn_equals_python(tmp_path):
    inputs = _inputs()
    pte = _fp16_pte(tmp_path, ConvAddRelu().eval(), inputs)
    raw = []
    for i, x in enumerate(inputs):
        raw.append(tmp_path / f"in{i}.raw")
        x.numpy().tofile(raw[-1])
    input_list = tmp_path / "inputs.txt"
    input_list.write_text(" ".join(str(p) for p in raw) + "\n")
    result = run_runner(pte, input_list, tmp_path / "out", ["--engine", "qnn"])
    assert result.returncode == 0, result.stderr[-2000:]
    runner_out = np.fromfile(tmp_path / "out" / "output_0_0.raw", dtype=np.float32)
    python_out, _ = _run_pte(pte, inputs, "qnn")
    np.testing.assert_array_equal(runner_out, python_out[0].numpy().reshape(-1))
    bad = run_runner(pte, input_list, tmp_path / "out2", ["--engine", "npu"])
    assert bad.returncode == 1


def test_detailed_profile_gives_per_op_events(tmp_path):
    inputs = _inputs()
    tester = QnnTester(
        ConvAddRelu().eval(), inputs, compile_specs=fp16_specs(profile_level=2), tmp_dir=str(tmp_path)
    ).lower()
    op_names = {op.name for op in tester.payload().ops}
    pte = Path(tester.to_executorch().pte_path)
    set_engine("qnn")
    program, method = load_method(pte, etdump=True)
    run(method, inputs)
    etdump = write_etdump(program, tmp_path / "run.etdump")
    del method, program
    gc.collect()
    events = delegate_events(etdump)
    nodes = [(name, parse_metadata(meta)) for name, meta, _ in events if parse_metadata(meta).get("type") == "QnnNode"]
    assert {name for name, _ in nodes} >= op_names
    assert all(int(meta["cycles"]) >= 0 for _, meta in nodes)
    assert any(parse_metadata(meta).get("engine") == "qnn" for _, meta, _ in events)
    # basic level: the execute total only, no per-node events
    _, basic = native().run_payload_qnn(tester.delegate_blobs()[0], _numpy(inputs), 0, 1)
    assert any(e[0] == "QNN (execute) time" for e in basic) and not any(e[3] for e in basic)


def test_dump_context_from_pte_writes_each_delegates_binary(tmp_path):
    """Upstream's dump_context_from_pte: `<method>_<delegate index>.bin` next to the .pte, the
    bytes of the delegate's QNN context binary (QNN 2.51's magic first)."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    from backends.qualcomm.utils.utils import dump_context_from_pte

    pte = _fp16_pte(tmp_path)
    paths = dump_context_from_pte(str(pte))
    program = deserialize_pte_binary(pte.read_bytes()).program
    assert len(program.backend_delegate_data) == 1
    blob = bytes(program.backend_delegate_data[0].data)
    assert [Path(p).name for p in paths] == ["forward_0.bin"]
    data = Path(paths[0]).read_bytes()
    assert data == qnn_binary_of(blob) and data[:16] == CONTEXT_BINARY_MAGIC
