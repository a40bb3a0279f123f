"""Benchmark: effect of the HTP performance mode on the engine's latency.

    python bench/bench_performance_mode.py [--runs 20] [--warm_up 3] [--models mlp mobilenet_v2]

For each model, lowers it with our delegate and with XNNPACK in this run, then
times ``forward`` through ``executorch.runtime`` with
``qnn_runtime_htp_performance_mode`` set to burst (all cores), balanced and
power saver (one thread). Prints the median latency per mode, the ratio of
each mode to burst, and our burst latency against XNNPACK. Not a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from bench.bench_mobilenet import lower_xnnpack, time_runtime  # noqa: E402
from examples.qualcomm import utils  # noqa: E402

MODES = {"burst": 2, "balanced": 8, "power_saver": 4}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warm_up", type=int, default=3)
    parser.add_argument("--models", nargs="+", default=["mlp", "mobilenet_v2"], choices=["mlp", "mobilenet_v2"])
    parser.add_argument("--artifact", type=Path, default=Path("artifacts") / "bench_perf_mode")
    return parser.parse_args(argv)


def load_model(name: str) -> tuple[torch.nn.Module, torch.Tensor]:
    if name == "mobilenet_v2":
        from qnn_models import imagenet
        from qnn_models.mobilenet_v2 import load_mobilenet_v2

        return load_mobilenet_v2(), imagenet.load_photo_batch(["chelsea"])["chelsea"]
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(1024, 1024), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers).eval(), torch.randn(64, 1024)


def lower_qnn(model: torch.nn.Module, example: torch.Tensor, pte_path: Path) -> Path:
    specs = utils.build_compiler_specs(use_fp16=True)
    return utils.save_pte(utils.lower_to_qnn(model, (example,), specs), pte_path)


def bench_model(name: str, args: argparse.Namespace) -> None:
    from backends.qualcomm import _qnn_delegate as native
    from backends.qualcomm import set_runtime_option

    model, example = load_model(name)
    folder = args.artifact.resolve() / name
    qnn_pte = lower_qnn(model, example, folder / f"{name}_qnn.pte")
    xnn_pte = lower_xnnpack(model, example, folder / f"{name}_xnnpack.pte")
    medians = {}
    for mode, value in MODES.items():
        set_runtime_option("qnn_runtime_htp_performance_mode", value)
        utils.log_step(f"{name}: {mode} ({native.threads_for_performance_mode(value)} threads)")
        medians[mode] = statistics.median(time_runtime(qnn_pte, example, args.runs, args.warm_up))
    xnn = statistics.median(time_runtime(xnn_pte, example, args.runs, args.warm_up))
    print(f"\n{name}  (pool {native.thread_pool_size()} threads, torch threads {torch.get_num_threads()})")
    print(f"{'mode':<14}{'threads':>8}{'median ms':>12}{'vs burst':>10}")
    for mode, value in MODES.items():
        print(
            f"{mode:<14}{native.threads_for_performance_mode(value):>8}{medians[mode]:>12.2f}"
            f"{medians[mode] / medians['burst']:>9.2f}x"
        )
    print(f"{'xnnpack':<14}{'':>8}{xnn:>12.2f}")
    print(
        f"ratio power_saver / burst = {medians['power_saver'] / medians['burst']:.2f}x; "
        f"qnn burst / xnnpack = {medians['burst'] / xnn:.2f}x"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for name in args.models:
        bench_model(name, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
