"""qnn_executor_runner: outputs of every iteration on partly delegated programs, option
ranges, error names, output folder, log noise, crafted corrupt programs, intermediate
dumps with a full debug buffer, and the heap-checkpoint file in its edge cases.

TestRunnerIterations: runner outputs after warm-up + timed iterations equal the Python
runtime's bit for bit on programs with CPU sections between delegates.
TestRunnerMessages: option ranges, error names, output folder creation, no cpuinfo noise,
non-tensor inputs and absurd planned sizes rejected with clear messages.
TestDebugBufferFull: dumps into a too-small debug buffer: one warning, exit 0, outputs exact.
TestHeapCheckpointCases: failed first load; path and profile level set after a load.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Callable, List

import pytest
import torch

from backends.qualcomm import (
    QcomChipset,
    generate_htp_compiler_spec,
    generate_qnn_executorch_compiler_spec,
    get_runtime_option,
    set_runtime_option,
)
from backends.qualcomm.tests.helpers import runtime as h
from backends.qualcomm.tests.helpers.real_models import SmallConvNet
from backends.qualcomm.utils import pte_tools

pytestmark = pytest.mark.usefixtures("fresh_runtime_options")  # conftest.py

HEAP = "qnn_runtime_heap_profiling_path"
PROFILE = "qnn_runtime_profile_level"
REPO_ROOT = Path(__file__).resolve().parents[4]


class EmbeddingSplit(torch.nn.Module):
    """Embedding -> sigmoid (kept on the CPU) -> linear: an int64 input and two delegates."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(64, 16)
        self.fc = torch.nn.Linear(16, 8)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.sigmoid(self.emb(ids)))


class Rank6Between(torch.nn.Module):
    """linear -> rank-6 view -> mul -> view -> linear: QNN's validation refuses rank-6 tensors
    (a view / clone / permute chain would be folded to rank <= 5, a mul is not), so the rank-6
    ops and the quantize / dequantize nodes around them stay on the CPU."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b((self.a(x).view(1, 2, 2, 2, 2, 8) * 2.0).reshape(1, 16, 8))


def _quantized_split(path: Path, samples: List[List[torch.Tensor]]) -> Path:
    """Rank6Between in 8a8w through plain to_edge_transform_and_lower: quantize / dequantize
    ops stay on the CPU (they need ExecuTorch's quantized kernels in the runner, and their out
    variants registered at to_executorch)."""
    from executorch.exir import to_edge_transform_and_lower

    from backends.qualcomm import QnnPartitioner

    quantized = h.quantize(Rank6Between().eval(), tuple(samples[0]), samples)
    edge = to_edge_transform_and_lower(
        torch.export.export(quantized, tuple(samples[0])), partitioner=[QnnPartitioner(h.quantized_specs())]
    )
    cpu = [
        getattr(n.target, "__name__", str(n.target))
        for n in edge.exported_program().graph.nodes
        if n.op == "call_function"
    ]
    assert "quantized_decomposed.quantize_per_tensor.default" in cpu, cpu
    path.write_bytes(edge.to_executorch().buffer)
    return path


def _runner(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(pte_tools.find_runner()), *args], capture_output=True, text=True, timeout=timeout)


def _rewrite_pte(src: Path, dst: Path, edit: Callable) -> Path:
    """A copy of `src` whose program was changed by `edit(program)` and serialized again."""
    from executorch.exir._serialize._program import deserialize_pte_binary, serialize_pte_binary

    pte = deserialize_pte_binary(src.read_bytes())
    edit(pte.program)
    dst.write_bytes(bytes(serialize_pte_binary(pte)))
    return dst


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> dict:
    """Two partly delegated programs (float and int64 input) and a fully delegated one."""
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("runner_programs")
    skip = {"aten.sigmoid.default"}
    split_samples = [[torch.randn(1, 3, 12, 12)] for _ in range(2)]
    split = h.lower_to_pte(h.SplitNet().eval(), tuple(split_samples[0]), folder / "split.pte", skip_node_op_set=skip)
    ids_samples = [[torch.randint(0, 64, (1, 6))] for _ in range(2)]
    embedding = h.lower_to_pte(
        EmbeddingSplit().eval(), tuple(ids_samples[0]), folder / "embedding.pte", skip_node_op_set=skip
    )
    small_samples = [[torch.randn(1, 3, 16, 16)]]
    small = h.lower_to_pte(SmallConvNet().eval(), tuple(small_samples[0]), folder / "small.pte")
    return {
        "folder": folder,
        "split": (split, split_samples),
        "embedding": (embedding, ids_samples),
        "small": (small, small_samples),
    }


def _delegate_count(pte: Path) -> int:
    from executorch.exir._serialize._program import deserialize_pte_binary

    plan = deserialize_pte_binary(pte.read_bytes()).program.execution_plan[0]
    return sum(
        1 for instruction in plan.chains[0].instructions if type(instruction.instr_args).__name__ == "DelegateCall"
    )


class TestRunnerIterations:
    @pytest.mark.parametrize("name", ["split", "embedding"])
    def test_partly_delegated_iterations_equal_runtime(self, programs, name, tmp_path):
        pte, samples = programs[name]
        assert _delegate_count(pte) == 2  # a CPU section between two delegates
        expected = pte_tools.run_samples_with_runtime(pte, samples)
        input_list = pte_tools.write_input_files(samples, tmp_path / "in")
        result = h.run_runner(pte, input_list, tmp_path / "out", ["--iteration", "3", "--warm_up", "2"])
        assert result.returncode == 0, result.stderr[-2000:]
        assert "(6 executes)" in result.stdout  # 2 inferences x 3 timed; warm-ups untimed
        for idx, outs in enumerate(expected):
            got = pte_tools.read_raw_output(tmp_path / "out", idx, 0, outs[0])
            assert torch.equal(got, outs[0]), f"{name} inference {idx}: max diff {(got - outs[0]).abs().max()}"

    def test_quantized_program_with_cpu_quantize_ops(self, real_qnn, tmp_path):
        """Quantize / dequantize kernels on the CPU: the runner links ExecuTorch's quantized
        kernels (it failed with "Missing operator: quantized_decomposed::quantize_per_tensor.out")."""
        torch.manual_seed(0)
        samples = [[torch.randn(1, 16, 8)] for _ in range(2)]
        pte = _quantized_split(tmp_path / "quantized_split.pte", samples)
        expected = pte_tools.run_samples_with_runtime(pte, samples)
        result = h.run_runner(pte, pte_tools.write_input_files(samples, tmp_path / "in"), tmp_path / "out")
        assert result.returncode == 0, result.stderr[-2000:]
        for idx, outs in enumerate(expected):
            got = pte_tools.read_raw_output(tmp_path / "out", idx, 0, outs[0])
            assert torch.equal(got, outs[0]), f"inference {idx}: max diff {(got - outs[0]).abs().max()}"


class TestRunnerMessages:
    @pytest.mark.parametrize(
        "flag, value, valid",
        [("--htp_performance_mode", "42", "0..8"), ("--log_level", "99", "0..5"), ("--profile_level", "7", "0..2")],
    )
    def test_option_out_of_range(self, programs, flag, value, valid):
        result = _runner("--model_path", str(programs["small"][0]), flag, value)
        assert result.returncode == 1
        assert f"error: {flag} {value} is out of range: valid values are {valid} (0 " in result.stderr

    def test_option_at_range_ends_accepted(self, programs, tmp_path):
        flags = ["--htp_performance_mode", "8", "--log_level", "0", "--profile_level", "2"]
        result = _runner("--model_path", str(programs["small"][0]), *flags)
        assert result.returncode == 0, result.stderr[-2000:]

    def test_backend_rejects_out_of_range_option(self):
        with pytest.raises(ValueError, match=r"'qnn_runtime_log_level' value 99 is out of range 0\.\.5"):
            set_runtime_option("qnn_runtime_log_level", 99)
        with pytest.raises(ValueError, match=r"'qnn_runtime_htp_performance_mode' value 42 is out of range 0\.\.8"):
            set_runtime_option("qnn_runtime_htp_performance_mode", 42)
        with pytest.raises(ValueError, match=r"'qnn_runtime_profile_level' value -1 is out of range 0\.\.2"):
            set_runtime_option("qnn_runtime_profile_level", -1)
        for key in ("qnn_runtime_log_level", "qnn_runtime_htp_performance_mode", "qnn_runtime_profile_level"):
            with pytest.raises(KeyError, match="never set"):  # the backend did not apply it
                get_runtime_option(key)
        set_runtime_option("qnn_runtime_htp_performance_mode", 8)
        assert get_runtime_option("qnn_runtime_htp_performance_mode") == 8

    def test_output_folder_created(self, programs, tmp_path):
        pte, samples = programs["small"]
        input_list = pte_tools.write_input_files(samples, tmp_path / "in")
        out_dir = tmp_path / "a" / "b" / "c"
        result = _runner(
            "--model_path", str(pte), "--input_list_path", str(input_list), "--output_folder_path", str(out_dir)
        )
        assert result.returncode == 0, result.stderr[-2000:]
        expected = pte_tools.run_samples_with_runtime(pte, samples)[0][0]
        assert torch.equal(pte_tools.read_raw_output(out_dir, 0, 0, expected), expected)

    def test_output_folder_that_is_a_file(self, programs, tmp_path):
        blocker = tmp_path / "file"
        blocker.write_text("x")
        result = _runner("--model_path", str(programs["small"][0]), "--output_folder_path", str(blocker / "sub"))
        assert result.returncode == 1
        assert f"error: cannot create output folder '{blocker / 'sub'}'" in result.stderr

    def test_error_names(self, tmp_path):
        missing = _runner("--model_path", str(tmp_path / "missing.pte"))
        assert missing.returncode == 1
        assert f"error: cannot open model '{tmp_path / 'missing.pte'}' (AccessFailed)" in missing.stderr
        garbage = tmp_path / "garbage.pte"
        garbage.write_bytes(bytes(range(256)) * 8)
        result = _runner("--model_path", str(garbage))
        assert result.returncode == 1
        assert f"error: '{garbage}' is not a valid program (InvalidProgram)" in result.stderr
        assert "(error " not in missing.stderr + result.stderr

    def test_no_cpuinfo_lines(self, programs, tmp_path):
        pte, samples = programs["split"]  # its CPU kernel starts ExecuTorch's thread pool
        input_list = pte_tools.write_input_files(samples, tmp_path / "in")
        quiet = h.run_runner(pte, input_list, tmp_path / "out")
        assert quiet.returncode == 0, quiet.stderr[-2000:]
        assert "cpuinfo_utils" not in quiet.stdout + quiet.stderr
        verbose = h.run_runner(pte, input_list, tmp_path / "out", ["--log_level", "4"])
        assert verbose.returncode == 0 and "cpuinfo_utils" in verbose.stderr  # shown when asked for

    def test_non_tensor_input_rejected(self, programs, tmp_path):
        from executorch.exir.schema import Int

        def make_first_input_an_int(program) -> None:
            plan = program.execution_plan[0]
            plan.values[plan.inputs[0]].val = Int(int_val=5)

        bad = _rewrite_pte(programs["small"][0], tmp_path / "int_input.pte", make_first_input_an_int)
        result = _runner("--model_path", str(bad))
        assert result.returncode == 1
        assert "error: method input 0 is a Int, not a tensor: the runner feeds tensors only" in result.stderr

    @pytest.mark.parametrize(
        "field, message",
        [
            ("id", "has no backend id"),
            ("processed", "has no processed data reference"),
            ("key", "has compile spec 0 without a key or value"),
            ("index", "refers to data 7 of 1"),
        ],
    )
    def test_delegate_field_missing_rejected(self, programs, tmp_path, field, message):
        """Fields ExecuTorch's loader dereferences unchecked (found by fuzzing: SIGSEGV, in the
        Python runtime too): the runner checks them after loading the program."""

        def drop(program) -> None:
            delegate = program.execution_plan[0].delegates[0]
            if field == "key":
                delegate.compile_specs[0].key = None
            elif field == "index":
                delegate.processed.index = 7
            else:
                setattr(delegate, field, None)

        bad = _rewrite_pte(programs["small"][0], tmp_path / f"no_{field}.pte", drop)
        result = _runner("--model_path", str(bad))
        assert result.returncode == 1, result.stderr[-2000:]
        assert (
            f"error: '{bad}' is not a valid program (InvalidProgram): execution plan 'forward' delegate 0 {message}"
        ) in result.stderr

    def test_delegate_without_compile_spec_list_runs(self, programs, tmp_path):
        """A missing compile-spec list is legal (ExecuTorch accepts it; the compiled defaults hold)."""

        def drop_specs(program) -> None:
            program.execution_plan[0].delegates[0].compile_specs = None

        pte, samples = programs["small"]
        bare = _rewrite_pte(pte, tmp_path / "no_specs.pte", drop_specs)
        input_list = pte_tools.write_input_files(samples, tmp_path / "in")
        result = h.run_runner(bare, input_list, tmp_path / "out")
        assert result.returncode == 0, result.stderr[-2000:]
        expected = pte_tools.run_samples_with_runtime(pte, samples)[0][0]
        assert torch.equal(pte_tools.read_raw_output(tmp_path / "out", 0, 0, expected), expected)

    def test_absurd_planned_size_rejected(self, programs, tmp_path):
        def plan_a_petabyte(program) -> None:
            program.execution_plan[0].non_const_buffer_sizes[1] = 1 << 50

        bad = _rewrite_pte(programs["small"][0], tmp_path / "huge.pte", plan_a_petabyte)
        result = _runner("--model_path", str(bad), timeout=30)
        assert result.returncode == 1
        assert (
            f"error: method 'forward' memory-planned buffer 0 has an invalid size ({1 << 50} bytes; " in result.stderr
        ), result.stderr


# ---- intermediate dumps into a debug buffer that fills up -----------------------------


def _dump_specs() -> list:
    return generate_qnn_executorch_compiler_spec(
        QcomChipset.SM8650, generate_htp_compiler_spec(use_fp16=True), dump_intermediate_outputs=True
    )


DUMP_SCRIPT = """
import sys, torch
sys.path.insert(0, {root!r})
import backends.qualcomm
from executorch.runtime import Runtime
x = torch.load({x!r})
program = Runtime.get().load_program({pte!r}, enable_etdump=True, debug_buffer_size={size})
method = program.load_method("forward")
outs = [method.execute([x])[0].clone() for _ in range(5)]
torch.save(outs, {outs!r})
program.write_etdump_result_to_file({etdump!r}, {debug!r})
print("done")
"""


@pytest.fixture(scope="module")
def dump_program(tmp_path_factory):
    torch.manual_seed(1)
    folder = tmp_path_factory.mktemp("dump_full")
    x = torch.randn(1, 3, 16, 16)
    pte = h.lower_to_pte(SmallConvNet().eval(), (x,), folder / "dump.pte", _dump_specs())
    expected = pte_tools.run_samples_with_runtime(pte, [[x]])[0][0]
    return pte, x, expected


# One execute dumps conv (8x16x16 fp32 = 8 KiB) and more: 20 KB holds the first execute only.
SMALL_DEBUG_BUFFER = 20000
FULL_WARNING = "the ETDump debug buffer is full"


class TestDebugBufferFull:
    def test_python_runtime_small_debug_buffer(self, dump_program, tmp_path):
        pte, x, expected = dump_program
        torch.save(x, tmp_path / "x.pt")
        script = DUMP_SCRIPT.format(
            root=str(REPO_ROOT),
            x=str(tmp_path / "x.pt"),
            pte=str(pte),
            size=SMALL_DEBUG_BUFFER,
            outs=str(tmp_path / "outs.pt"),
            etdump=str(tmp_path / "run.etdp"),
            debug=str(tmp_path / "run.debug"),
        )
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "done" in done.stdout
        assert done.stderr.count(FULL_WARNING) == 1, done.stderr[-3000:]
        for out in torch.load(tmp_path / "outs.pt"):
            assert torch.equal(out, expected)
        assert (tmp_path / "run.etdp").stat().st_size > 0

    def test_runner_small_debug_buffer(self, dump_program, tmp_path):
        pte, x, expected = dump_program
        input_list = pte_tools.write_input_files([[x]], tmp_path / "in")
        etdump, debug = tmp_path / "run.etdp", tmp_path / "run.debug"
        flags = [
            "--dump_intermediate_outputs",
            "--etdump_path",
            str(etdump),
            "--debug_output_path",
            str(debug),
            "--debug_buffer_size",
            str(SMALL_DEBUG_BUFFER),
            "--iteration",
            "5",
        ]
        result = h.run_runner(pte, input_list, tmp_path / "out", flags)
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stderr.count(FULL_WARNING) == 1, result.stderr[-3000:]
        assert torch.equal(pte_tools.read_raw_output(tmp_path / "out", 0, 0, expected), expected)
        assert debug.stat().st_size == SMALL_DEBUG_BUFFER and etdump.stat().st_size > 0

    def test_first_execute_dump_still_readable(self, dump_program, tmp_path):
        """The execute that fitted is in the ETDump with its tensors; the skipped ones have none."""
        from executorch.devtools import Inspector

        pte, x, _ = dump_program
        input_list = pte_tools.write_input_files([[x]], tmp_path / "in")
        etdump, debug = tmp_path / "run.etdp", tmp_path / "run.debug"
        flags = [
            "--dump_intermediate_outputs",
            "--etdump_path",
            str(etdump),
            "--debug_output_path",
            str(debug),
            "--debug_buffer_size",
            str(SMALL_DEBUG_BUFFER),
            "--iteration",
            "3",
        ]
        assert h.run_runner(pte, input_list, tmp_path / "out", flags).returncode == 0
        inspector = Inspector(etdump_path=str(etdump), debug_buffer_path=str(debug))
        dumped = [
            event
            for block in inspector.event_blocks
            for event in block.events
            if event.debug_data and event.is_delegated_op
        ]
        assert dumped, "no dumped tensors in the ETDump"
        assert all(len(event.debug_data) >= 1 for event in dumped)


# ---- heap checkpoints -----------------------------------------------------------------


def _flip_middle_of_delegate_blob(pte: Path, dst: Path) -> Path:
    from executorch.exir._serialize._program import deserialize_pte_binary

    program = deserialize_pte_binary(pte.read_bytes()).program
    blob = bytes(program.backend_delegate_data[0].data)
    data = bytearray(pte.read_bytes())
    start = data.find(blob)
    assert start >= 0
    data[start + len(blob) // 2] ^= 0xFF
    dst.write_bytes(bytes(data))
    return dst


class TestHeapCheckpointCases:
    def test_failed_first_load_leaves_file_untouched(self, programs, tmp_path):
        from executorch.runtime import Runtime

        assert h.native().live_context_count() == 0
        path = tmp_path / "heap.csv"
        path.write_text("previous run\n")
        set_runtime_option(HEAP, str(path))
        set_runtime_option(PROFILE, 1)
        altered = _flip_middle_of_delegate_blob(programs["small"][0], tmp_path / "altered.pte")
        with pytest.raises(RuntimeError):
            program = Runtime.get().load_program(str(altered))
            program.load_method("forward")
        assert h.native().live_context_count() == 0
        assert path.read_text() == "previous run\n"
        base = h.native().engine_bytes_in_use()
        program, method = h.load_method(programs["small"][0])
        h.release(program, method)
        del program, method
        h.release()
        assert path.read_text() == (f"before_context_created(bytes),{base}\nafter_context_freed(bytes),{base}\n")

    def test_options_set_after_load(self, programs, tmp_path):
        assert h.native().live_context_count() == 0
        base = h.native().engine_bytes_in_use()
        path = tmp_path / "late.csv"
        program, method = h.load_method(programs["small"][0])
        loaded = h.native().engine_bytes_in_use()
        assert loaded > base
        set_runtime_option(HEAP, str(path))
        assert not path.exists()  # profile level still off: no session yet
        set_runtime_option(PROFILE, 1)
        assert path.read_text() == f"before_context_created(bytes),{base}\n"
        h.run(method, programs["small"][1][0])
        h.release(program, method)
        del program, method
        h.release()
        assert h.native().live_context_count() == 0
        assert path.read_text() == (f"before_context_created(bytes),{base}\nafter_context_freed(bytes),{base}\n")
