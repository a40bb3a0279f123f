"""Runs qnn_executor_runner (e.g. the ASan + UBSan build of `make sanitize`) over
small .pte files: one graph, several methods sharing one context (each method
index), several contexts (partitions), profiling + heap checkpoints, every
performance mode, and repeated executes. Exits non-zero when any run fails.

    python backends/qualcomm/tests/sanitize_cases.py --runner build/sanitize/qnn_executor_runner
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from backends.qualcomm.tests import utils_helpers as h  # noqa: E402
from backends.qualcomm.tests.model_helpers import SmallConvNet  # noqa: E402
from examples.qualcomm.utils import write_input_files  # noqa: E402


def build_cases(folder: Path) -> list[tuple[str, Path, list, list[str]]]:
    """(case name, .pte, inputs, extra runner flags)."""
    torch.manual_seed(0)
    x = torch.randn(1, 3, 16, 16)
    small = h.lower_to_pte(SmallConvNet().eval(), (x,), folder / "small.pte")
    modules, inputs = h.shared_mlp_methods()
    shared = h.lower_to_pte(modules, inputs, folder / "shared.pte", h.fp16_specs(use_weight_sharing=True))
    y = torch.randn(1, 3, 12, 12)
    split = h.lower_to_pte(h.SplitNet().eval(), (y,), folder / "split.pte",
                           h.fp16_specs(use_multi_contexts=True), skip_node_op_set={"aten.sigmoid.default"})
    cases = [("small", small, [x], ["--iteration", "5"])]
    for mode in range(9):
        cases.append((f"small perf mode {mode}", small, [x], ["--htp_performance_mode", str(mode)]))
    cases.append(("small profile + heap", small, [x],
                  ["--profile_level", "2", "--etdump_path", str(folder / "small.etdp"),
                   "--heap_profiling_path", str(folder / "heap.csv"), "--log_level", "5"]))
    for index, name in enumerate(h.pte_method_names(shared)):
        cases.append((f"shared method {name}", shared, list(inputs[name]), ["--method_index", str(index)]))
    cases.append(("multi contexts", split, [y], ["--iteration", "3", "--profile_level", "1"]))
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runner", type=Path, required=True)
    parser.add_argument("--folder", type=Path, default=Path("build") / "sanitize" / "cases")
    args = parser.parse_args(argv)
    folder = args.folder.resolve()
    failures = 0
    for name, pte, inputs, flags in build_cases(folder):
        input_list = write_input_files([inputs], folder / "inputs" / name.replace(" ", "_"))
        out_dir = folder / "out" / name.replace(" ", "_")
        out_dir.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        done = subprocess.run([str(args.runner), "--model_path", str(pte), "--input_list_path",
                               str(input_list), "--output_folder_path", str(out_dir), *flags],
                              capture_output=True, text=True)
        status = "ok" if done.returncode == 0 and "Sanitizer" not in done.stderr else "FAILED"
        failures += status != "ok"
        print(f"{status:<7}{name:<28}{time.perf_counter() - start:6.2f}s")
        if status != "ok":
            print(done.stderr[-4000:])
    print(f"{failures} failing case(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
