"""Runs qnn_executor_runner (e.g. the ASan + UBSan build of `make sanitize`) over
small .pte files: one graph, several methods sharing one context (each method
index), several contexts (partitions), profiling + heap checkpoints, every
performance mode, repeated executes with warm-up on a partly delegated program,
intermediate dumps into a debug buffer that fills up, KV-cache writes and ScatterNd adds, 8a8w / 16a8w programs on each integer
kernel path (QNN_HOST_ENGINE_KERNELS plain / avx2 / default: GEMM, depthwise, MatMul split
over the thread pool), and corrupted programs
(an absurd planned size, seeded byte mutations) that must fail cleanly (exit 1
or 0, no sanitizer report). With --llama-runner, also qnn_llama_runner on a tiny static-KV-cache
Llama (prefill + decode, kv mode, sampling with top-p, logits dump, several iterations) and on bad
input. Exits non-zero when any run fails.

    python backends/qualcomm/tests/tools/sanitize_cases.py --runner build/sanitize/qnn_executor_runner \
        --llama-runner build/sanitize/qnn_llama_runner
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[4]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from backends.qualcomm import QcomChipset, generate_htp_compiler_spec, generate_qnn_executorch_compiler_spec  # noqa: E402
from backends.qualcomm.tests.helpers import runtime as h  # noqa: E402
from backends.qualcomm.tests.helpers.real_models import SmallConvNet  # noqa: E402
from backends.qualcomm.utils.pte_tools import write_input_files  # noqa: E402

Case = tuple  # (name, .pte, inputs or None, extra runner flags, expected exit codes[, env])
KERNEL_PATHS = ("plain", "avx2", "default")
MUTATIONS = 24


def _with_planned_size(src: Path, dst: Path, size: int) -> Path:
    from executorch.exir._serialize._program import deserialize_pte_binary, serialize_pte_binary

    pte = deserialize_pte_binary(src.read_bytes())
    pte.program.execution_plan[0].non_const_buffer_sizes[1] = size
    dst.write_bytes(bytes(serialize_pte_binary(pte)))
    return dst


def _mutated(src: Path, folder: Path, count: int, seed: int) -> list[Path]:
    rng, data, out = random.Random(seed), src.read_bytes(), []
    for i in range(count):
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            mutated[rng.randrange(min(4096, len(data)))] = rng.randrange(256)
        out.append(folder / f"mutated_{i}.pte")
        out[-1].write_bytes(bytes(mutated))
    return out


def corrupted_cases(small: Path, split: Path, folder: Path) -> list[Case]:
    huge = _with_planned_size(small, folder / "huge_plan.pte", 1 << 50)
    cases = [("corrupted planned size", huge, None, [], {1})]
    for index, pte in enumerate(_mutated(split, folder, MUTATIONS, seed=7)):
        cases.append((f"mutated {index}", pte, None, [], {0, 1}))
    return cases


def dump_case(x, folder: Path) -> Case:
    specs = generate_qnn_executorch_compiler_spec(
        QcomChipset.SM8650, generate_htp_compiler_spec(use_fp16=True), dump_intermediate_outputs=True
    )
    dump = h.lower_to_pte(SmallConvNet().eval(), (x,), folder / "dump.pte", specs)
    return (
        "dumps, debug buffer full",
        dump,
        [x],
        [
            "--iteration",
            "5",
            "--dump_intermediate_outputs",
            "--etdump_path",
            str(folder / "dump.etdp"),
            "--debug_buffer_size",
            "20000",
        ],
        {0},
    )


class QuantKernels(torch.nn.Module):
    """Every integer host kernel with a fast path: conv (GEMM), depthwise stride 1 and 2,
    linear, MatMul of two activations, softmax; rows enough to split over the thread pool."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.dw1 = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.dw2 = torch.nn.Conv2d(16, 16, 3, stride=2, padding=1, groups=16)
        self.fc = torch.nn.Linear(16, 24)

    def forward(self, x):
        y = self.dw2(torch.relu(self.dw1(torch.relu(self.conv(x)))))
        t = self.fc(y.flatten(2).transpose(1, 2))  # [1, 64, 24]
        return torch.softmax(t @ t.transpose(1, 2), dim=-1) @ t


def quantized_cases(x, folder: Path) -> list[Case]:
    from backends.qualcomm import QnnQuantizer, QuantDtype
    from backends.qualcomm.tests.helpers.quant_tester import quant_compile_specs, quantize_module

    cases = []
    for dtype in (QuantDtype.use_8a8w, QuantDtype.use_16a8w):
        quantizer = QnnQuantizer()
        quantizer.set_default_quant_config(dtype, is_conv_per_channel=True, is_linear_per_channel=True)
        module = quantize_module(QuantKernels().eval(), (x,), quantizer)
        pte = h.lower_to_pte(module, (x,), folder / f"quant_{dtype.name}.pte", quant_compile_specs(dtype))
        for path in KERNEL_PATHS:
            env = {} if path == "default" else {"QNN_HOST_ENGINE_KERNELS": path}
            cases.append(
                (f"{dtype.name[4:]} kernels {path}", pte, [x], ["--iteration", "3", "--engine", "host"], {0}, env)
            )
    return cases


class CacheScatters(torch.nn.Module):
    """index_put_ on a mutable buffer (a KV-cache write, the buffer read and written back around
    the delegate), accumulating index_put with duplicate positions (ScatterNd add), scatter_add."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, 2, 8, 4))

    def forward(self, x, pos):
        torch.ops.aten.index_put_(self.cache, [None, None, pos], x)
        summed = torch.ops.aten.index_put.default(
            self.cache, [None, None, torch.cat([pos, pos])], torch.cat([x, x], 2), True
        )
        index = pos.view(1, 1, 2, 1).expand(1, 2, 2, 4)
        return self.cache + 0.0, summed, torch.scatter_add(self.cache, 2, index, x)


def scatter_case(folder: Path) -> Case:
    x, pos = torch.randn(1, 2, 2, 4), torch.tensor([5, 2])
    pte = h.lower_to_pte(CacheScatters().eval(), (x, pos), folder / "scatters.pte")
    return ("cache scatters", pte, [x, pos], ["--iteration", "3"], {0})


def build_cases(folder: Path) -> list[Case]:
    torch.manual_seed(0)
    x = torch.randn(1, 3, 16, 16)
    small = h.lower_to_pte(SmallConvNet().eval(), (x,), folder / "small.pte")
    modules, inputs = h.shared_mlp_methods()
    shared = h.lower_to_pte(modules, inputs, folder / "shared.pte", h.fp16_specs(use_weight_sharing=True))
    y = torch.randn(1, 3, 12, 12)
    split = h.lower_to_pte(
        h.SplitNet().eval(), (y,), folder / "split.pte", h.fp16_specs(), skip_node_op_set={"aten.sigmoid.default"}
    )
    cases = [("small", small, [x], ["--iteration", "5"], {0})]
    for mode in range(9):
        cases.append((f"small perf mode {mode}", small, [x], ["--htp_performance_mode", str(mode)], {0}))
    cases.append(
        (
            "small profile + heap",
            small,
            [x],
            [
                "--profile_level",
                "2",
                "--etdump_path",
                str(folder / "small.etdp"),
                "--heap_profiling_path",
                str(folder / "heap.csv"),
                "--log_level",
                "5",
            ],
            {0},
        )
    )
    for index, name in enumerate(h.pte_method_names(shared)):
        cases.append((f"shared method {name}", shared, list(inputs[name]), ["--method_index", str(index)], {0}))
    cases.append(("multi contexts", split, [y], ["--iteration", "3", "--warm_up", "2", "--profile_level", "1"], {0}))
    cases.append(dump_case(x, folder))
    cases.append(scatter_case(folder))
    return cases + quantized_cases(x, folder) + corrupted_cases(small, split, folder)


def llama_cases(folder: Path) -> list[tuple]:
    """(name, runner flags, expected exit codes) of qnn_llama_runner on a tiny Llama (fp16, payload only)."""
    import numpy as np

    from backends.qualcomm.llm import export_static_llm
    from backends.qualcomm.tests.helpers.tiny_llm import AR_LEN, CONTEXT, PROMPT, hf_model

    folder.mkdir(parents=True, exist_ok=True)
    pte = folder / "tiny_llama_fp16.pte"
    export_static_llm(hf_model("llama"), pte, "fp16", context_len=CONTEXT, ar_len=AR_LEN)
    prompt = folder / "prompt.bin"
    np.asarray(PROMPT, np.uint64).tofile(prompt)
    odd = folder / "odd.bin"
    odd.write_bytes(b"1234567")
    base = ["--model_path", str(pte), "--tokenized_prompt", str(prompt), "--seq_len", str(CONTEXT)]
    return [
        ("llama hybrid greedy", base + ["--dump_logits_path", str(folder / "logits.bin")], {0}),
        ("llama kv mode", base + ["--eval_mode", "kv", "--seq_len", "24"], {0}),
        ("llama top-p, 2 iterations", base + ["--temperature", "0.8", "--top_p", "0.9", "--num_iters", "2"], {0}),
        ("llama bad prompt file", ["--model_path", str(pte), "--tokenized_prompt", str(odd)], {1}),
        ("llama missing model", ["--model_path", str(folder / "none.pte"), "--tokenized_prompt", str(prompt)], {1}),
        (
            "llama not an LLM",
            ["--model_path", str(folder / ".." / "small.pte"), "--tokenized_prompt", str(prompt)],
            {1},
        ),
    ]


def run_case(command: list[str], env: dict) -> tuple:
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, errors="replace", timeout=300, env={**os.environ, **env}
        )
        return done.returncode, done.stderr
    except subprocess.TimeoutExpired:
        return "hang", "no exit within 300 s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runner", type=Path, required=True)
    parser.add_argument("--folder", type=Path, default=Path("build") / "sanitize" / "cases")
    parser.add_argument("--llama-runner", type=Path, help="qnn_llama_runner to run on a tiny LLM too")
    args = parser.parse_args(argv)
    folder = args.folder.resolve()
    failures = 0
    for name, pte, inputs, flags, expected, *env in build_cases(folder):
        slug = name.replace(" ", "_").replace(",", "")
        out_dir = folder / "out" / slug  # the runner creates it
        command = [str(args.runner), "--model_path", str(pte), "--output_folder_path", str(out_dir), *flags]
        if inputs is not None:
            command += ["--input_list_path", str(write_input_files([inputs], folder / "inputs" / slug))]
        start = time.perf_counter()
        code, stderr = run_case(command, env[0] if env else {})
        status = "ok" if code in expected and "Sanitizer" not in stderr else "FAILED"
        failures += status != "ok"
        print(f"{status:<7}{name:<28}{time.perf_counter() - start:6.2f}s  exit {code}")
        if status != "ok":
            print(stderr[-4000:])
    if args.llama_runner is not None:
        for name, flags, expected in llama_cases(folder / "llama"):
            start = time.perf_counter()
            code, stderr = run_case([str(args.llama_runner), *flags], {})
            status = "ok" if code in expected and "Sanitizer" not in stderr else "FAILED"
            failures += status != "ok"
            print(f"{status:<7}{name:<28}{time.perf_counter() - start:6.2f}s  exit {code}")
            if status != "ok":
                print(stderr[-4000:])
    print(f"{failures} failing case(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
