"""Benchmark: MobileNetV2 (real weights) on our QNN delegate vs ExecuTorch's XNNPACK.

    python bench/bench_mobilenet.py [--runs 30] [--warm_up 3] [--with_runner]

Both programs are lowered in this run, loaded through ``executorch.runtime`` in this
process and timed alternately (one run of each per round) while the load is sampled
(bench/quiet.py); prints the median latency of each, the ratio ours / XNNPACK (refused, exit
status 3, when other processes used more than --max_other_cores cores, unless
--allow_loaded marks it) and the .pte sizes. Not a test.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from bench.quiet import EXIT_LOADED, add_load_arguments, cpu_description, ratio_text, refuse_if_loaded  # noqa: E402
from bench.timing import Variant, time_alternating  # noqa: E402
from examples.qualcomm import utils  # noqa: E402
from qnn_models import imagenet  # noqa: E402
from qnn_models.mobilenet_v2 import load_mobilenet_v2  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="timed runs per backend")
    parser.add_argument("--warm_up", type=int, default=3, help="untimed runs per backend")
    parser.add_argument("--soc_model", default="SM8650")
    parser.add_argument("--artifact", type=Path, default=Path("artifacts") / "bench")
    parser.add_argument("--with_runner", action="store_true", help="also time our .pte with qnn_executor_runner")
    add_load_arguments(parser)
    return parser.parse_args(argv)


def lower_xnnpack(model: torch.nn.Module, example: torch.Tensor, pte_path: Path) -> Path:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    with torch.no_grad():
        exported = torch.export.export(model, (example,))
        edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
    return utils.save_pte(edge, pte_path)


def lower_qnn(model: torch.nn.Module, example: torch.Tensor, soc_model: str, pte_path: Path) -> Path:
    specs = utils.build_compiler_specs(soc_model=soc_model, use_fp16=True)
    edge = utils.lower_to_qnn(model, (example,), specs)
    utils.assert_fully_delegated(edge, "mobilenet_v2")
    return utils.save_pte(edge, pte_path)


def load_forward(pte_path: Path, example: torch.Tensor) -> Callable[[], object]:
    """A callable running ``forward`` of the program through executorch.runtime on `example`."""
    import backends.qualcomm  # noqa: F401  registers the QnnDelegate backend
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(str(pte_path))
    method = program.load_method("forward")

    def run() -> object:
        return method.execute([example]), program  # keep the program: its methods point into it

    return run


def time_runner(pte_path: Path, example: torch.Tensor, artifact: Path, runs: int, warm_up: int) -> float | None:
    input_list = utils.write_input_files([[example]], artifact / "runner_inputs")
    result = utils.run_runner(
        pte_path,
        input_list,
        artifact / "runner_outputs",
        iterations=runs,
        warm_up=warm_up,
        perf_path=artifact / "runner_perf.txt",
    )
    if result.returncode != 0:
        print(f"qnn_executor_runner failed ({result.returncode}): {result.stderr.strip()}")
        return None
    return result.avg_latency_ms


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    artifact = args.artifact.resolve()
    model = load_mobilenet_v2()
    example = imagenet.load_photo_batch(["chelsea"])["chelsea"]

    utils.log_step("lowering with XNNPACK")
    xnn_pte = lower_xnnpack(model, example, artifact / "mobilenet_v2_xnnpack.pte")
    utils.log_step(f"lowering with the QNN delegate (fp16, {args.soc_model})")
    qnn_pte = lower_qnn(model, example, args.soc_model, artifact / "mobilenet_v2_qnn.pte")

    print(f"machine: {cpu_description()}")
    utils.log_step(f"timing alternately: {args.warm_up} warm-up + {args.runs} rounds")
    timed = time_alternating(
        [Variant("xnnpack", load_forward(xnn_pte, example)), Variant("qnn", load_forward(qnn_pte, example))],
        runs=args.runs,
        warm_up=args.warm_up,
        max_other_cores=args.max_other_cores,
        attempts=args.attempts,
    )
    medians = timed.medians_ms
    allowed = refuse_if_loaded(timed.load, args.allow_loaded)

    print(f"\n{'backend':<10}{'median ms':>12}{'pte MB':>10}")
    for name, pte in (("xnnpack", xnn_pte), ("qnn", qnn_pte)):
        print(f"{name:<10}{medians[name]:>12.2f}{pte.stat().st_size / 1e6:>10.2f}")
    ratio = ratio_text(medians["qnn"] / medians["xnnpack"], allowed, not timed.load.quiet)
    print(f"ratio qnn / xnnpack = {ratio} (torch threads {torch.get_num_threads()})")
    if args.with_runner:
        avg = time_runner(qnn_pte, example, artifact, args.runs, args.warm_up)
        print(f"qnn_executor_runner average: {'n/a' if avg is None else f'{avg:.2f} ms'} (not load-sampled)")
    return 0 if allowed else EXIT_LOADED


if __name__ == "__main__":
    try:
        sys.exit(main())
    except utils.ExampleError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
