"""Benchmark: effect of the HTP performance mode on the engine's latency.

    python bench/bench_performance_mode.py [--runs 20] [--warm_up 3] [--models mlp mobilenet_v2]

For each model, lowers it with our delegate and with XNNPACK in this run, then
times ``forward`` through ``executorch.runtime`` with
``qnn_runtime_htp_performance_mode`` set to burst (all cores), balanced and
power saver (one thread), and XNNPACK's: alternately (the option is read per execute, so each
round sets it before each of our runs), while the load is sampled (bench/quiet.py). Prints the
median latency per mode, the ratio of each mode to burst, and our burst latency against
XNNPACK; the ratios are refused (exit status 3) on a loaded machine unless --allow_loaded.
Not a test.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from bench.bench_mobilenet import load_forward, lower_xnnpack  # noqa: E402
from bench.quiet import EXIT_LOADED, add_load_arguments, cpu_description, ratio_text, refuse_if_loaded  # noqa: E402
from bench.timing import Variant, time_alternating  # noqa: E402
from examples.qualcomm import utils  # noqa: E402

MODES = {"burst": 2, "balanced": 8, "power_saver": 4}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warm_up", type=int, default=3)
    parser.add_argument("--models", nargs="+", default=["mlp", "mobilenet_v2"], choices=["mlp", "mobilenet_v2"])
    parser.add_argument("--artifact", type=Path, default=Path("artifacts") / "bench_perf_mode")
    add_load_arguments(parser)
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


def bench_model(name: str, args: argparse.Namespace) -> bool:
    """Prints the table of one model; False when its ratios were refused (loaded)."""
    from backends.qualcomm import _qnn_delegate as native
    from backends.qualcomm import set_runtime_option

    model, example = load_model(name)
    folder = args.artifact.resolve() / name
    qnn_pte = lower_qnn(model, example, folder / f"{name}_qnn.pte")
    xnn_pte = lower_xnnpack(model, example, folder / f"{name}_xnnpack.pte")
    qnn_run = load_forward(qnn_pte, example)
    variants = [
        Variant(mode, qnn_run, lambda value=value: set_runtime_option("qnn_runtime_htp_performance_mode", value))
        for mode, value in MODES.items()
    ]
    variants.append(Variant("xnnpack", load_forward(xnn_pte, example)))
    utils.log_step(f"{name}: modes {', '.join(MODES)} and XNNPACK, alternately")
    timed = time_alternating(
        variants, args.runs, args.warm_up, max_other_cores=args.max_other_cores, attempts=args.attempts
    )
    set_runtime_option("qnn_runtime_htp_performance_mode", MODES["burst"])
    medians = timed.medians_ms
    print(f"\n{name}  (pool {native.thread_pool_size()} threads, torch threads {torch.get_num_threads()})")
    allowed = refuse_if_loaded(timed.load, args.allow_loaded)
    loaded = not timed.load.quiet
    print(f"{'mode':<14}{'threads':>8}{'median ms':>12}{'vs burst':>18}")
    for mode, value in MODES.items():
        ratio = ratio_text(medians[mode] / medians["burst"], allowed, loaded)
        print(f"{mode:<14}{native.threads_for_performance_mode(value):>8}{medians[mode]:>12.2f}{ratio:>18}")
    print(f"{'xnnpack':<14}{'':>8}{medians['xnnpack']:>12.2f}")
    print(
        f"ratio power_saver / burst = {ratio_text(medians['power_saver'] / medians['burst'], allowed, loaded)}; "
        f"qnn burst / xnnpack = {ratio_text(medians['burst'] / medians['xnnpack'], allowed, loaded)}"
    )
    return allowed


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(f"machine: {cpu_description()}")
    allowed = [bench_model(name, args) for name in args.models]
    return 0 if all(allowed) else EXIT_LOADED


if __name__ == "__main__":
    sys.exit(main())
