"""Program helpers shared by the examples, tests and benchmarks.

Lower a module with the QNN delegate, read its delegate blobs, check it is fully
delegated, save the ``.pte``, run it through ``executorch.runtime`` or
``qnn_executor_runner`` (raw files + ``input_list.txt``), and read the runner's
outputs back.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Sequence

import numpy as np
import torch

RUNNER_NAME = "qnn_executor_runner"
DELEGATE_CALL = "executorch_call_delegate"
ALLOWED_OUTSIDE_DELEGATE = ("getitem", DELEGATE_CALL)


class PteToolError(RuntimeError):
    """A step (lowering check, runner, output file) failed; the message says which and why."""


def build_compiler_specs(soc_model: str = "SM8650", use_fp16: bool = True) -> list:
    """Compile specs of the QNN delegate for an HTP backend on ``soc_model``."""
    from backends.qualcomm import (
        QcomChipset,
        generate_htp_compiler_spec,
        generate_qnn_executorch_compiler_spec,
    )

    chipset = getattr(QcomChipset, soc_model.upper(), None)
    if chipset is None:
        raise PteToolError(f"unknown --soc_model {soc_model!r} (e.g. SM8650, SM8750)")
    backend_options = generate_htp_compiler_spec(use_fp16=use_fp16)
    return generate_qnn_executorch_compiler_spec(soc_model=chipset, backend_options=backend_options)


def lower_to_qnn(module: torch.nn.Module, example_inputs: tuple, compiler_specs: list):
    """Export and lower ``module`` with the QNN delegate; returns the EdgeProgramManager."""
    from backends.qualcomm import to_edge_transform_and_lower_to_qnn

    with torch.no_grad():
        return to_edge_transform_and_lower_to_qnn(module.eval(), example_inputs, compiler_specs)


def delegate_blobs(program: Any, method: str = "forward") -> List[bytes]:
    """The processed bytes (payloads) of the delegates of one method, in graph order.

    ``program``: an EdgeProgramManager (``method`` picks the method), an
    ExportedProgram or a GraphModule."""
    from executorch.exir.lowered_backend_module import get_lowered_submodules

    if hasattr(program, "exported_program"):
        program = program.exported_program(method)
    graph_module = getattr(program, "graph_module", program)
    return [bytes(lowered.processed_bytes) for _, lowered, _ in get_lowered_submodules(graph_module)]


def ops_outside_delegates(edge_manager, method: str = "forward") -> list[str]:
    """Targets of call_function nodes left outside any delegate (getitem excluded)."""
    graph = edge_manager.exported_program(method).graph_module.graph
    leftovers = []
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        name = getattr(node.target, "__name__", str(node.target))
        if not any(allowed in name for allowed in ALLOWED_OUTSIDE_DELEGATE):
            leftovers.append(name)
    return leftovers


def delegate_call_count(edge_manager, method: str = "forward") -> int:
    """Number of delegate calls in the lowered graph."""
    graph = edge_manager.exported_program(method).graph_module.graph
    return sum(
        1
        for node in graph.nodes
        if node.op == "call_function" and DELEGATE_CALL in getattr(node.target, "__name__", "")
    )


def assert_fully_delegated(edge_manager, model_name: str) -> None:
    """Raise PteToolError unless the whole graph runs inside QNN delegate calls."""
    leftovers = ops_outside_delegates(edge_manager)
    if leftovers or delegate_call_count(edge_manager) == 0:
        raise PteToolError(
            f"{model_name} is not fully delegated: {len(leftovers)} op(s) outside the delegate: "
            f"{sorted(set(leftovers))}"
        )


def save_pte(edge_manager, path: Path) -> Path:
    """``to_executorch()`` and write the program to ``path``; returns the path."""
    program = edge_manager.to_executorch()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(program.buffer)
    return path


def run_samples_with_runtime(pte_path: Path, samples: Sequence[Sequence[torch.Tensor]]) -> list[list[torch.Tensor]]:
    """Load a ``.pte`` once through ``executorch.runtime`` and run ``forward`` per sample."""
    import backends.qualcomm  # noqa: F401  registers the QnnDelegate backend
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(str(pte_path))  # keep: its methods point into it
    method = program.load_method("forward")
    return [[torch.as_tensor(out).clone() for out in method.execute(list(sample))] for sample in samples]


def run_with_runtime(pte_path: Path, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Run the ``forward`` method of a ``.pte`` once through ``executorch.runtime``."""
    return run_samples_with_runtime(pte_path, [inputs])[0]


def find_runner() -> Path:
    """``qnn_executor_runner`` from PATH or next to the Python interpreter."""
    on_path = shutil.which(RUNNER_NAME)
    if on_path:
        return Path(on_path)
    beside_python = Path(sys.executable).parent / RUNNER_NAME
    if beside_python.is_file():
        return beside_python
    raise PteToolError(
        f"{RUNNER_NAME} not found on PATH nor in {beside_python.parent}; "
        "build and install the package first (make install)"
    )


def write_input_files(samples: Sequence[Sequence[torch.Tensor]], folder: Path) -> Path:
    """Write each sample's inputs as raw files and an ``input_list.txt`` (one line per sample)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for sample_idx, sample in enumerate(samples):
        paths = []
        for input_idx, tensor in enumerate(sample):
            path = folder / f"input_{sample_idx}_{input_idx}.raw"
            tensor.detach().contiguous().numpy().tofile(path)
            paths.append(str(path.resolve()))
        lines.append(" ".join(paths))
    input_list = folder / "input_list.txt"
    input_list.write_text("\n".join(lines) + "\n")
    return input_list


@dataclass
class RunnerResult:
    """What one ``qnn_executor_runner`` invocation returned."""

    returncode: int
    stdout: str
    stderr: str
    avg_latency_ms: float | None


def run_runner(
    pte_path: Path,
    input_list: Path,
    output_dir: Path,
    iterations: int = 1,
    warm_up: int = 0,
    perf_path: Path | None = None,
    runner: Path | None = None,
    timeout_s: float = 600.0,
    extra_flags: list[str] | None = None,
) -> RunnerResult:
    """Invoke ``qnn_executor_runner``; never raises on a failing exit code."""
    output_dir.mkdir(parents=True, exist_ok=True)
    command = [
        str(runner or find_runner()),
        "--model_path",
        str(pte_path),
        "--input_list_path",
        str(input_list),
        "--output_folder_path",
        str(output_dir),
        "--iteration",
        str(iterations),
        "--warm_up",
        str(warm_up),
    ]
    if perf_path is not None:
        command += ["--performance_output_path", str(perf_path)]
    command += list(extra_flags or [])
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    latency = read_latency_ms(perf_path) if perf_path is not None and done.returncode == 0 else None
    return RunnerResult(done.returncode, done.stdout, done.stderr, latency)


def read_latency_ms(perf_path: Path) -> float | None:
    """The average latency (ms) the runner wrote: the first number in the file."""
    if not perf_path.is_file():
        return None
    for token in perf_path.read_text().replace(",", " ").split():
        try:
            return float(token)
        except ValueError:
            continue
    return None


def read_raw_output(output_dir: Path, sample_idx: int, output_idx: int, like: torch.Tensor) -> torch.Tensor:
    """``output_<sample>_<output>.raw`` as a tensor with the dtype and shape of ``like``."""
    path = output_dir / f"output_{sample_idx}_{output_idx}.raw"
    if not path.is_file():
        raise PteToolError(f"runner output missing: {path}")
    dtype = torch.empty(0, dtype=like.dtype).numpy().dtype
    data = np.fromfile(path, dtype=dtype)
    if data.size != like.numel():
        raise PteToolError(
            f"{path}: {data.size} elements of {dtype}, expected {like.numel()} (shape {tuple(like.shape)})"
        )
    return torch.from_numpy(data.reshape(like.shape))
