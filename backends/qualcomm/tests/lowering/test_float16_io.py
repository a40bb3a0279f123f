"""float16 graph inputs and outputs (a model run in half), on both engines.

Inside a delegate a float16 tensor is FLOAT_32 (HTP computes float tensors in fp16 precision
either way); its graph inputs / outputs of dtype float16 are FLOAT_16 tensors with a Cast at the
boundary (GraphBuilder), and isinf / isnan read a float16 input's bits as INT_16. Each test lowers
once (with QNN's context binary when QNN's library loads: the `qnn_binary` fixture), checks the
delegation and the payload's I/O data types, and runs the .pte through ExecuTorch on the host
engine and, when QNN loads, on QNN (`qnn_runtime_engine`), against eager or the QDQ module."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np
import pytest
import torch

from backends.qualcomm import QuantDtype
from backends.qualcomm.tests.helpers.quant_tester import QuantTester
from backends.qualcomm.tests.helpers.runtime import QNN_LOADED, load_method, native, run
from backends.qualcomm.tests.helpers.tester import QnnTester


def _engines() -> List[str]:
    return ["host", "qnn"] if QNN_LOADED else ["host"]


def _run_on_engines(tester: QnnTester, engines: Sequence[str] = ()) -> Dict[str, List[torch.Tensor]]:
    """The tester's .pte run through ExecuTorch on each engine (default: both when QNN loads):
    {engine: outputs}."""
    results = {}
    for engine in engines or _engines():
        native().set_runtime_option("qnn_runtime_engine", engine)
        program, method = load_method(Path(tester.pte_path))
        results[engine] = run(method, tester.inputs)
        assert (native().live_qnn_context_count() > 0) == (engine == "qnn"), engine
        del method, program
        gc.collect()
    return results


def _io_types(tester: QnnTester) -> tuple:
    """(input data types, output data types) of the one delegate's graph."""
    graph = tester.payload()
    types = {t.name: t.data_type for t in graph.tensors}
    return [types[n] for n in graph.inputs], [types[n] for n in graph.outputs]


def _lowered(module: torch.nn.Module, inputs: Sequence[torch.Tensor]) -> QnnTester:
    return QnnTester(module, tuple(inputs)).lower().check_fully_delegated().check_count(1).to_executorch()


def _assert_close(outputs: List[torch.Tensor], refs: List[torch.Tensor], atol: float, what: str) -> None:
    assert len(outputs) == len(refs), (what, len(outputs), len(refs))
    for i, (out, ref) in enumerate(zip(outputs, refs)):
        assert out.dtype == ref.dtype and out.shape == ref.shape, (what, i, out.dtype, ref.dtype)
        err = (out.double() - ref.double()).abs().max().item()
        print(f"{what} output {i} ({out.dtype}): max |out - eager| {err:.3g}")
        assert err <= atol, (what, i, err)


class ConvLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.linear = torch.nn.Linear(6, 5)

    def forward(self, x):
        return self.linear(torch.relu(self.conv(x)))


def test_float16_conv_linear_on_both_engines(qnn_binary):
    """A half model: one delegate with a FLOAT_16 input and output, float16 results within
    float16 rounding of eager float16 (outputs of magnitude ~1: 2 ulp = 2e-3)."""
    module = ConvLinear().half()
    x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(1)).half()
    tester = _lowered(module, (x,))
    assert _io_types(tester) == (["FLOAT_16"], ["FLOAT_16"])
    assert tester.payload().op_types()["Cast"] == 2
    with torch.no_grad():
        ref = [module(x)]
    for engine, outputs in _run_on_engines(tester).items():
        _assert_close(outputs, ref, 2e-3, engine)


class Classify(torch.nn.Module):
    def forward(self, x):
        return torch.isinf(x), torch.isnan(x)


def _special_half() -> torch.Tensor:
    """Every kind of float16: +-0, normals, 65504, denormals, +-inf and NaNs of both signs with
    payloads (from their bits)."""
    finite = torch.tensor([0.0, -0.0, 1.1, -5.0, 65504.0, -65504.0, 6e-8, -6e-5, 0.6], dtype=torch.half)
    special = torch.tensor([0x7C00, 0xFC00, 0x7E00, 0x7C01, 0x7FFF, 0xFE00, 0xFC01, 0xFFFF], dtype=torch.int32)
    bits = special.to(torch.int16).view(torch.half)
    return torch.cat([finite, bits]).reshape(1, 17)


def test_float16_isinf_isnan_exact_on_both_engines(qnn_binary):
    """isinf / isnan of a float16 input from its bits (an INT_16 view of the input, Cast to
    INT_32): exactly eager's on both engines."""
    x = _special_half()
    tester = _lowered(Classify(), (x,))
    views = [t for t in tester.payload().tensors if t.bits_of_input >= 0]
    assert [(v.data_type, v.bits_of_input) for v in views] == [("INT_16", 0)], views
    refs = list(Classify()(x))
    assert refs[0].sum() == 2 and refs[1].sum() == 6
    for engine, outputs in _run_on_engines(tester).items():
        for i, (out, ref) in enumerate(zip(outputs, refs)):
            assert torch.equal(out, ref), (engine, i, out, ref)


class ScatterSrc(torch.nn.Module):
    def forward(self, x, index, src):
        return torch.scatter(x, 1, index, src)


def test_float16_scatter_src_exact_on_both_engines(qnn_binary):
    """scatter.src of float16 tensors moves values: exactly eager's on both engines."""
    x = torch.zeros(3, 5, dtype=torch.half)
    index = torch.tensor([[0, 1, 2, 3, 4], [4, 3, 2, 1, 0], [1, 0, 3, 4, 2]])
    src = torch.randn(3, 5, generator=torch.Generator().manual_seed(2)).half()
    tester = _lowered(ScatterSrc(), (x, index, src))
    assert _io_types(tester)[1] == ["FLOAT_16"]
    ref = ScatterSrc()(x, index, src)
    for engine, outputs in _run_on_engines(tester).items():
        assert torch.equal(outputs[0], ref), engine


class Mixed(torch.nn.Module):
    """float16 input, a float32 output and a float16 one; a float32 input, a float16 output."""

    def forward(self, x, y):
        h = torch.relu(x) * 0.5
        return h.float() + y, h, (y * 2.0).half()


def test_mixed_float16_and_float32_io(qnn_binary):
    """Each graph input / output keeps its own dtype: FLOAT_16 / FLOAT_32 as the program's."""
    gen = torch.Generator().manual_seed(3)
    x, y = torch.randn(2, 8, generator=gen).half(), torch.randn(2, 8, generator=gen)
    tester = _lowered(Mixed(), (x, y))
    inputs, outputs = _io_types(tester)
    assert sorted(inputs) == ["FLOAT_16", "FLOAT_32"], inputs
    assert sorted(outputs) == ["FLOAT_16", "FLOAT_16", "FLOAT_32"], outputs  # a delegate orders its outputs
    refs = list(Mixed()(x, y))
    for engine, results in _run_on_engines(tester).items():
        _assert_close(results, refs, 4e-3, engine)


class Fp16a8wModel(torch.nn.Module):
    """Upstream's SimpleModel shape (convs with kernel 1, batch norm, relu, add, permute, mean,
    linear), smaller."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv1, self.conv2 = torch.nn.Conv2d(8, 8, 1), torch.nn.Conv2d(8, 8, 1, bias=False)
        self.norm = torch.nn.BatchNorm2d(8)
        self.linear = torch.nn.Linear(4, 10)

    def forward(self, x, y):
        z = torch.relu(self.norm(self.conv1(x))) + torch.relu(self.conv2(y))
        z = torch.mean(z.permute(0, 3, 2, 1), [1, 2], True)
        return self.linear(z.reshape(2, -1))


def test_float16_fp16a8w_model_against_qdq(qnn_binary):
    """The float16 model quantized fp16a8w (float16 activations, int8 per-channel weights): one
    delegate with FLOAT_16 I/O, its Conv2d / FullyConnected on FLOAT_16 activations (what QNN
    2.51 takes next to int8 weights), within upstream's tolerance of the QDQ module (atol 0.1,
    rtol 1; measured much closer, printed) on both engines."""
    gen = torch.Generator().manual_seed(4)
    inputs = tuple(torch.rand(1, 8, 4, 4, generator=gen).half() for _ in range(2))
    tester = QuantTester(Fp16a8wModel().half().eval(), inputs, QuantDtype.use_fp16a8w, per_channel=True)
    tester.lower().check_fully_delegated().check_count(1).to_executorch()
    assert _io_types(tester) == (["FLOAT_16", "FLOAT_16"], ["FLOAT_16"])
    graph = tester.payload()
    types = {t.name: t.data_type for t in graph.tensors}
    weighted = [op for op in graph.ops if op.type in ("Conv2d", "FullyConnected")]
    assert len(weighted) == 3 and all(types[op.inputs[0]] == "FLOAT_16" for op in weighted), weighted
    with torch.no_grad():
        ref = tester.module(*inputs)
    for engine, outputs in _run_on_engines(tester).items():
        out = outputs[0]
        err = (out.double() - ref.double()).abs().max().item()
        print(f"{engine}: max |out - QDQ| {err:.3g} (|QDQ| max {ref.abs().max().item():.3g})")
        assert out.dtype == torch.half and torch.allclose(out.float(), ref.float(), atol=0.1, rtol=1), engine
        assert err <= 0.02, (engine, err)


def test_wrong_input_dtype_is_a_clear_error(qnn_binary):
    """A float32 tensor for the float16 input: ExecuTorch refuses it by name, on both engines;
    the payload run (host engine) names the tensor and FLOAT_16."""
    module = ConvLinear().half()
    x = torch.randn(1, 3, 8, 8).half()
    tester = _lowered(module, (x,))
    for engine in _engines():
        native().set_runtime_option("qnn_runtime_engine", engine)
        program, method = load_method(Path(tester.pte_path))
        with pytest.raises(RuntimeError):
            method.execute([x.float()])
        assert torch.equal(run(method, (x,))[0], run(method, (x,))[0])  # still runs afterwards
        del method, program
        gc.collect()
    blob = tester.delegate_blobs()[0]
    with pytest.raises(ValueError, match=r"input 0 \(tensor 'x'\) has dtype float32, expected float16 \(FLOAT_16\)"):
        native().run_payload(blob, [np.zeros((1, 3, 8, 8), np.float32)])
    out = native().run_payload(blob, [x.numpy()])[0]
    with torch.no_grad():
        ref = module(x).float().numpy()
    assert out.dtype == np.float16 and np.abs(out.astype(np.float32) - ref).max() <= 2e-3


def test_fp16a8w_with_dumped_intermediates():
    """dump_intermediate_outputs makes the FLOAT_16 tensors around an fp16a8w conv readable
    (APP_READ): the host engine still holds them as FLOAT_32 and the output equals the run
    without dumps."""
    from backends.qualcomm import QcomChipset, generate_htp_compiler_spec, generate_qnn_executorch_compiler_spec

    module = torch.nn.Sequential(torch.nn.Conv2d(8, 4, 1), torch.nn.ReLU()).eval()
    inputs = (torch.randn(1, 8, 3, 3, generator=torch.Generator().manual_seed(5)),)
    outputs = []
    for dump in (False, True):
        tester = QuantTester(module, inputs, QuantDtype.use_fp16a8w, per_channel=True)
        tester.compile_specs = generate_qnn_executorch_compiler_spec(
            QcomChipset.SM8650, generate_htp_compiler_spec(use_fp16=True), dump_intermediate_outputs=dump
        )
        tester.lower().check_count(1).to_executorch().run()
        dumped = [t for t in tester.payload().tensors if t.data_type == "FLOAT_16" and t.kind == "APP_READ"]
        assert bool(dumped) == dump, dumped
        outputs.append(tester.outputs[0])
    np.testing.assert_array_equal(outputs[0], outputs[1])
