"""Shared test helpers: whether QNN's library loads (and needs_qnn, the `qnn` marker), lowering
small models to .pte files, loading them with ETDump, the Inspector's delegate events, the
runner, one delegate on both engines, delegate blobs and output scales."""

from __future__ import annotations

import gc
import inspect
import subprocess
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import pytest
import torch
from executorch.exir._serialize._program import deserialize_pte_binary

from backends.qualcomm import (
    QcomChipset,
    generate_htp_compiler_spec,
    generate_qnn_executorch_compiler_spec,
    to_edge_transform_and_lower_to_qnn,
)
from backends.qualcomm.utils.pte_tools import delegate_blobs  # noqa: F401  (the tests import it from here)
from backends.qualcomm.utils.qnn_context import qnn_library_status
from backends.qualcomm.utils.runtime_options import require_extension

BACKEND = "QnnDelegate"
# Whether Qualcomm's QNN libraries load here (tests of the real QNN engine skip otherwise);
# the fixtures `real_qnn` / `qnn_binary` are in conftest.py.
QNN_LOADED, QNN_STATUS = qnn_library_status()
# A test that needs the QNN library: marked `qnn`, skipped by conftest.py where the library does not load.
needs_qnn = pytest.mark.qnn

RUNTIME_KEYS = (
    "qnn_runtime_log_level",
    "qnn_runtime_profile_level",
    "qnn_runtime_htp_performance_mode",
    "qnn_runtime_heap_profiling_path",
)


class _Native:
    """The product extension (backends.qualcomm._qnn_delegate); a name it lacks is looked up in
    the test hooks, which hold the introspection the product does not expose (live contexts
    and handles, engine allocator bytes, kernel registrations)."""

    def __init__(self, extension):
        self._extension = extension

    def __getattr__(self, name: str):
        try:
            return getattr(self._extension, name)
        except AttributeError:
            return getattr(test_hooks(), name)


def native():
    return _Native(require_extension())


def test_hooks():
    """The test-only extension backends.qualcomm.tests._qnn_test_hooks (built with
    -DQNN_BUILD_TEST_HOOKS=ON, as `make install` / `make test` do; not in a wheel)."""
    from backends.qualcomm.tests import _qnn_test_hooks  # type: ignore[attr-defined]

    return _qnn_test_hooks


def fp16_specs(profile_level: int = 0, **htp_kwargs) -> list:
    return generate_qnn_executorch_compiler_spec(
        QcomChipset.SM8650, generate_htp_compiler_spec(use_fp16=True, **htp_kwargs), profile_level=profile_level
    )


def lower_to_pte(module, inputs, path: Path, specs: Optional[list] = None, **kwargs) -> Path:
    """Lower (a module or a dict of methods) with the fp16 spec and write the .pte."""
    edge = to_edge_transform_and_lower_to_qnn(module, inputs, specs or fp16_specs(), **kwargs)
    path.parent.mkdir(parents=True, exist_ok=True)
    edge.to_executorch().write_to_file(open(path, "wb"))
    return path


def pte_delegate_data_count(path: Path) -> int:
    """Delegate blobs stored in a .pte (identical blobs are stored once)."""
    program = deserialize_pte_binary(path.read_bytes()).program
    return len(program.backend_delegate_data)


def pte_method_names(path: Path) -> List[str]:
    return [plan.name for plan in deserialize_pte_binary(path.read_bytes()).program.execution_plan]


def load_method(path: Path, method: str = "forward", etdump: bool = False):
    """(program, method) loaded through executorch.runtime."""
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(str(path), enable_etdump=etdump, debug_buffer_size=0)
    return program, program.load_method(method)


def run(method, inputs: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    return [torch.as_tensor(o).clone() for o in method.execute(list(inputs))]


def delegate_events(etdump_path: Path) -> List[Tuple[str, str, int]]:
    """(name, raw metadata of the first run, number of runs) of every delegate
    event the Inspector shows, in order (without an ETRecord the Inspector
    does not know the backend name, so every delegated event is ours)."""
    from executorch.devtools import Inspector

    inspector = Inspector(etdump_path=str(etdump_path))
    events = []
    for block in inspector.event_blocks:
        for event in block.events:
            if event.is_delegated_op:
                metadata = event.raw_delegate_debug_metadatas or [""]
                events.append((event.name, _as_text(metadata[0]), len(event.perf_data.raw)))
    return events


def _as_text(value) -> str:
    return value.decode(errors="replace") if isinstance(value, (bytes, bytearray)) else str(value)


def parse_metadata(text: str) -> Dict[str, str]:
    """'type=Conv2d;us=1.2;cycles=3' -> dict."""
    return dict(part.split("=", 1) for part in text.strip("\x00").split(";") if "=" in part)


def write_etdump(program, path: Path) -> Path:
    program.write_etdump_result_to_file(str(path), str(path) + ".debug")
    return path


def release(*objects) -> None:
    """Drop runtime objects and collect, so that their delegate handles are destroyed."""
    del objects
    gc.collect()


def run_runner(pte: Path, input_list: Path, out_dir: Path, flags: Sequence[str] = ()):
    """qnn_executor_runner with extra flags; returns the CompletedProcess (text)."""
    from backends.qualcomm.utils.pte_tools import find_runner

    out_dir.mkdir(parents=True, exist_ok=True)
    command = [
        str(find_runner()),
        "--model_path",
        str(pte),
        "--input_list_path",
        str(input_list),
        "--output_folder_path",
        str(out_dir),
        *flags,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def reset_runtime_options() -> None:
    native().reset_runtime_options()


class SharedMlp(torch.nn.Module):
    """Linear layers whose weights two methods share (prefill [4, 64] / decode [1, 64])."""

    def __init__(self, layers: torch.nn.ModuleList):
        super().__init__()
        self.layers = layers

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def shared_mlp_methods(width: int = 64, depth: int = 3) -> Tuple[dict, dict]:
    torch.manual_seed(0)
    layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))
    modules = {"prefill": SharedMlp(layers).eval(), "decode": SharedMlp(layers).eval()}
    inputs = {"prefill": (torch.randn(4, width),), "decode": (torch.randn(1, width),)}
    return modules, inputs


class SplitNet(torch.nn.Module):
    """conv -> relu -> (sigmoid kept on CPU) -> conv: two delegate partitions."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(torch.sigmoid(torch.relu(self.conv1(x))))


def quantize(module: torch.nn.Module, example: Tuple, calibration: Sequence[Tuple]) -> torch.nn.Module:
    """PT2E with QnnQuantizer (default config): prepare, calibrate, convert."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from backends.qualcomm.quantizer import QnnQuantizer

    prepared = prepare_pt2e(torch.export.export(module, example, strict=False).module(), QnnQuantizer())
    for sample in calibration:
        prepared(*sample)
    return convert_pt2e(prepared)


def quantized_specs(**htp_kwargs) -> list:
    return generate_qnn_executorch_compiler_spec(
        QcomChipset.SM8650, generate_htp_compiler_spec(use_fp16=False, **htp_kwargs)
    )


def feeds_in_payload_order(
    blob: bytes, inputs: Sequence[torch.Tensor], module: Optional[torch.nn.Module] = None
) -> List[np.ndarray]:
    """`inputs` (in `module.forward`'s argument order) as the payload's graph takes them: a
    delegate orders its inputs by first use, which need not be the model's order. A payload
    input is matched by name with `module.forward`'s argument of that name."""
    from backends.qualcomm.serialization.payload_reader import describe_payload

    arrays = [x.detach().numpy() for x in inputs]
    names = describe_payload(blob)[0].inputs
    if len(arrays) == 1 and len(names) == 1:
        return arrays
    assert module is not None, f"pass the module to map inputs to the payload's inputs {names}"
    params = _argument_names(module, len(arrays))
    missing = [n for n in names if n not in params]
    assert not missing, f"payload inputs {missing} are not parameters of forward{tuple(params)}"
    return [arrays[params.index(n)] for n in names]


def _argument_names(module: torch.nn.Module, count: int) -> List[str]:
    """The names export gives `count` positional inputs of `module.forward`: its parameter
    names, and `<name>_<i>` for the i-th input of a `*<name>` parameter."""
    names: List[str] = []
    for param in inspect.signature(module.forward).parameters.values():
        if param.kind == param.VAR_POSITIONAL:
            names += [f"{param.name}_{i}" for i in range(count - len(names))]
        else:
            names.append(param.name)
    return names[:count]


def payload_on_both_engines(
    blob: bytes, inputs: Sequence[torch.Tensor], module: Optional[torch.nn.Module] = None
) -> Tuple[List[np.ndarray], List[np.ndarray]]:
    """(QNN outputs, host-engine outputs) of one delegate blob that carries a QNN context
    binary; `module` maps several inputs to the payload's order (feeds_in_payload_order)."""
    from backends.qualcomm.utils.qnn_context import qnn_binary_of

    assert qnn_binary_of(blob) is not None, "the delegate has no QNN context binary"
    feeds = feeds_in_payload_order(blob, inputs, module)
    qnn, _ = native().run_payload_qnn(blob, feeds)
    host = native().run_payload(blob, feeds)
    return [np.asarray(q) for q in qnn], [np.asarray(h) for h in host]


def assert_qnn_matches_host(
    blob: bytes,
    inputs: Sequence[torch.Tensor],
    module: Optional[torch.nn.Module],
    float_rel: float,
    max_steps: int,
    min_exact: float = 0.0,
) -> None:
    """Runs one delegate on QNN and on the host engine and checks every output: float outputs
    within float_rel x max(1, |host|), quantized outputs (in steps of their Dequantize's scale)
    within max_steps and at least min_exact equal. Prints each output's difference."""
    from backends.qualcomm.tests.helpers.quant_tester import step_stats

    qnn, host = payload_on_both_engines(blob, inputs, module)
    scales = delegate_output_scales(blob)
    for i, (q, h) in enumerate(zip(qnn, host)):
        assert q.shape == h.shape and q.dtype == h.dtype, (i, q.shape, h.shape)
        if scales[i] is None:
            err = float(np.abs(q - h).max())
            print(f"output {i}: max |qnn - host| = {err:.2e}")
            assert err <= float_rel * max(1.0, float(np.abs(h).max())), f"output {i}: max |qnn - host| = {err}"
        else:
            stats = step_stats(q, h, scales[i])
            print(f"output {i}: {stats}")
            assert stats.max_diff <= max_steps and stats.exact_fraction >= min_exact, f"output {i}: {stats}"


def assert_engines_match_reference(tester, inputs: Sequence[torch.Tensor], max_steps: Optional[int], tol: float = 5e-3):
    """The lowered tester's one delegate (fully delegated) on QNN and on the host engine. Float
    programs (max_steps None): both engines' outputs against eager within tol (atol and rtol).
    Quantized programs: QNN against the host engine within max_steps of each output's scale."""
    from backends.qualcomm.tests.helpers.quant_tester import step_stats

    tester.check_fully_delegated().check_count(1)
    blob = tester.delegate_blobs()[0]
    qnn, host = payload_on_both_engines(blob, inputs, tester.module)
    if max_steps is None:
        with torch.no_grad():
            expected = [e.numpy() for e in tester.module(*inputs)]
        for i, (q, h, e) in enumerate(zip(qnn, host, expected)):
            np.testing.assert_allclose(q, e, atol=tol, rtol=tol, err_msg=f"output {i}: QNN vs eager")
            np.testing.assert_allclose(h, e, atol=tol, rtol=tol, err_msg=f"output {i}: host vs eager")
        return
    for i, (scale, q, h) in enumerate(zip(delegate_output_scales(blob), qnn, host)):
        stats = step_stats(q, h, scale)
        assert stats.max_diff <= max_steps, f"output {i}: {stats}"


def one_delegate_blob(tester) -> bytes:
    """The payload of a program lowered to exactly one delegate with no CPU op."""
    assert tester.cpu_nodes() == [], tester.partitioner.rejected_nodes
    blobs = tester.delegate_blobs()
    assert len(blobs) == 1, f"{len(blobs)} delegates"
    return blobs[0]


def delegate_output_scales(blob: bytes) -> List[Optional[float]]:
    """Scale of each delegate output, in the delegate's output order: the encoding of the
    Dequantize it comes from, through the layout changes (Transpose / Reshape) after it; None
    for an output no Dequantize produces (float graphs, int / bool outputs)."""
    import re

    from backends.qualcomm.serialization.payload_reader import describe_payload

    graph = describe_payload(blob)[0]
    tensors = {t.name: t for t in graph.tensors}
    producers = {out: op for op in graph.ops for out in op.outputs}
    scales: List[Optional[float]] = []
    for name in graph.outputs:
        op = producers.get(name)
        while op is not None and op.type in ("Transpose", "Reshape"):
            op = producers.get(op.inputs[0])
        quant = tensors[op.inputs[0]].quant if op is not None and op.type == "Dequantize" else ""
        scales.append(float(re.search(r"scale=([0-9.e+-]+)", quant).group(1)) if quant else None)
    return scales
