"""Benchmark: MobileNetV2 (real weights) 8a8w vs fp16 on our QNN delegate.

    python bench/bench_quant_mobilenet.py [--runs 20] [--warm_up 3]

Both programs are lowered in this run and timed alternately through ``executorch.runtime``
while the load is sampled (bench/quiet.py); prints the median latency of each and the ratio
quantized / float (refused, exit status 3, on a loaded machine unless --allow_loaded). Not a
test.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from backends.qualcomm import QnnQuantizer, QuantDtype  # noqa: E402
from qnn_models.quantize import quant_compile_specs, quantize_module  # noqa: E402
from backends.qualcomm.utils.lowering import to_edge_transform_and_lower_to_qnn  # noqa: E402
from bench.bench_mobilenet import load_forward, lower_qnn  # noqa: E402
from bench.quiet import EXIT_LOADED, add_load_arguments, cpu_description, ratio_text, refuse_if_loaded  # noqa: E402
from bench.timing import Variant, time_alternating  # noqa: E402
from examples.qualcomm import utils  # noqa: E402
from qnn_models.mobilenet_v2 import load_mobilenet_v2  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warm_up", type=int, default=3)
    parser.add_argument("--artifact", type=Path, default=Path("artifacts") / "bench")
    add_load_arguments(parser)
    args = parser.parse_args(argv)
    args.artifact.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = load_mobilenet_v2().eval()
    example = torch.randn(1, 3, 224, 224)
    quantizer = QnnQuantizer()
    quantizer.set_default_quant_config(QuantDtype.use_8a8w, is_conv_per_channel=True, is_linear_per_channel=True)
    calibration = [(torch.randn(1, 3, 224, 224),) for _ in range(4)]
    converted = quantize_module(model, (example,), quantizer, calibration)
    edge = to_edge_transform_and_lower_to_qnn(converted, (example,), quant_compile_specs(QuantDtype.use_8a8w))
    utils.assert_fully_delegated(edge, "mobilenet_v2_8a8w")
    q_pte = utils.save_pte(edge, args.artifact / "mobilenet_v2_8a8w.pte")
    f_pte = lower_qnn(model, example, "SM8650", args.artifact / "mobilenet_v2_fp16.pte")
    print(f"machine: {cpu_description()}")
    timed = time_alternating(
        [Variant("8a8w", load_forward(q_pte, example)), Variant("fp16", load_forward(f_pte, example))],
        runs=args.runs,
        warm_up=args.warm_up,
        max_other_cores=args.max_other_cores,
        attempts=args.attempts,
    )
    allowed = refuse_if_loaded(timed.load, args.allow_loaded)
    tq, tf = timed.medians_ms["8a8w"], timed.medians_ms["fp16"]
    ratio = ratio_text(tq / tf, allowed, not timed.load.quiet)
    print(f"MobileNetV2 8a8w: {tq:.2f} ms   fp16: {tf:.2f} ms   ratio 8a8w / fp16: {ratio}")
    return 0 if allowed else EXIT_LOADED


if __name__ == "__main__":
    sys.exit(main())
