"""Export MobileNetV2 (real ImageNet weights) through the QNN delegate and run it.

    python examples/qualcomm/mobilenet_v2.py --artifact artifacts/mobilenet_v2
    python examples/qualcomm/mobilenet_v2.py --quantize   # 8a8w (QnnQuantizer, PT2E)

Steps: lower with an fp16 HTP spec, check the graph is fully delegated, write
the ``.pte``, write four scikit-image photos as raw float32 inputs plus
``input_list.txt``, run ``qnn_executor_runner`` on them, then print per photo
the top-5 labels, whether top-1 matches eager PyTorch, the max abs logit
difference, and the runner's average latency.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from examples.qualcomm import utils  # noqa: E402
from qnn_models import imagenet  # noqa: E402
from qnn_models.mobilenet_v2 import load_mobilenet_v2  # noqa: E402

MODEL_NAME = "mobilenet_v2"
# fp16 sanity bound on |logits - eager| relative to the eager logit range.
MAX_RELATIVE_LOGIT_DIFF = 0.05
# 8a8w sanity bound (8-bit logits, per-channel weights, calibrated on the four photos).
MAX_RELATIVE_LOGIT_DIFF_8A8W = 0.25


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--artifact",
        type=Path,
        default=Path("artifacts") / MODEL_NAME,
        help="output folder for the .pte, inputs and runner outputs",
    )
    parser.add_argument("--soc_model", default="SM8650", help="target SoC (QcomChipset name)")
    parser.add_argument("--iterations", type=int, default=10, help="timed runner iterations")
    parser.add_argument("--warm_up", type=int, default=2, help="untimed runner warm-up runs")
    parser.add_argument(
        "--quantize",
        action="store_true",
        help="quantize 8a8w with QnnQuantizer (calibrated on the photos) instead of fp16",
    )
    parser.add_argument(
        "--skip_qnn", action="store_true", help="do not run the QNN engine (Qualcomm's library) after the host engine"
    )
    return parser.parse_args(argv)


def eager_logits(model: torch.nn.Module, photos: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        return {name: model(x) for name, x in photos.items()}


def quantize_8a8w(model: torch.nn.Module, photos: dict[str, torch.Tensor]) -> torch.nn.Module:
    """PT2E: export -> prepare with QnnQuantizer (8a8w, per-channel weights) -> calibrate -> convert."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from backends.qualcomm import QnnQuantizer, QuantDtype

    utils.log_step(f"quantizing {MODEL_NAME} 8a8w (calibration: {len(photos)} photos)")
    quantizer = QnnQuantizer()
    quantizer.set_default_quant_config(QuantDtype.use_8a8w, is_conv_per_channel=True, is_linear_per_channel=True)
    example = (next(iter(photos.values())),)
    prepared = prepare_pt2e(torch.export.export(model.eval(), example, strict=False).module(), quantizer)
    with torch.no_grad():
        for x in photos.values():
            prepared(x)
    return convert_pt2e(prepared)


def export_pte(
    model: torch.nn.Module, example: torch.Tensor, soc_model: str, pte_path: Path, quantized: bool = False
) -> Path:
    precision = "8a8w" if quantized else "fp16"
    start = utils.log_step(f"lowering {MODEL_NAME} to the QNN delegate ({precision}, {soc_model})")
    specs = utils.build_compiler_specs(soc_model=soc_model, use_fp16=not quantized)
    if quantized:  # a converted PT2E GraphModule: lowered as is (no eval())
        from backends.qualcomm import to_edge_transform_and_lower_to_qnn

        with torch.no_grad():
            edge = to_edge_transform_and_lower_to_qnn(model, (example,), specs)
    else:
        edge = utils.lower_to_qnn(model, (example,), specs)
    utils.assert_fully_delegated(edge, MODEL_NAME)
    print(
        f"      fully delegated ({utils.delegate_call_count(edge)} delegate call(s)) "
        f"in {time.perf_counter() - start:.1f} s",
        flush=True,
    )
    utils.save_pte(edge, pte_path)
    print(f"      wrote {pte_path} ({pte_path.stat().st_size / 1e6:.1f} MB)", flush=True)
    return pte_path


def run_on_runner(
    pte_path: Path, photos: dict[str, torch.Tensor], artifact: Path, iterations: int, warm_up: int, engine: str = "host"
) -> utils.RunnerResult:
    input_list = utils.write_input_files([[x] for x in photos.values()], artifact / "inputs")
    runner = utils.find_runner()
    utils.log_step(
        f"running {runner.name} --engine {engine} ({len(photos)} photo(s), {warm_up} "
        f"warm-up + {iterations} iteration(s) each)"
    )
    suffix = "" if engine == "host" else f"_{engine}"
    result = utils.run_runner(
        pte_path,
        input_list,
        artifact / f"outputs{suffix}",
        iterations=iterations,
        warm_up=warm_up,
        perf_path=artifact / f"performance{suffix}.txt",
        runner=runner,
        extra_flags=["--engine", engine],
    )
    if result.returncode != 0:
        raise utils.ExampleError(f"{runner.name} failed with exit code {result.returncode}:\n{result.stderr.strip()}")
    return result


def report_photo(name: str, logits: torch.Tensor, eager: torch.Tensor) -> tuple[bool, float]:
    """Print one photo's top-5 and comparison; return (top-1 matches, relative diff)."""
    top5 = imagenet.top_k(logits, 5)
    eager_top1 = int(eager.argmax())
    matches = top5[0][0] == eager_top1
    max_diff = float((logits - eager).abs().max())
    rel_diff = max_diff / float(eager.max() - eager.min())
    print(
        f"\n{name}: top-1 {'==' if matches else '!='} eager "
        f"({imagenet.load_imagenet_labels()[eager_top1]}), max |logit - eager| = {max_diff:.4f}"
    )
    for class_id, label, prob in top5:
        print(f"    {prob:7.2%}  {class_id:4d} {label}")
    return matches, rel_diff


def check_results(
    outcomes: dict[str, tuple[bool, float]], chelsea_top1: int, max_relative_diff: float = MAX_RELATIVE_LOGIT_DIFF
) -> None:
    if not imagenet.is_cat_class(chelsea_top1):
        raise utils.ExampleError(f"chelsea (a cat) classified as class {chelsea_top1}")
    for name, (_, rel_diff) in outcomes.items():
        if rel_diff > max_relative_diff:
            raise utils.ExampleError(
                f"{name}: logits differ from eager by {rel_diff:.2%} of their range (bound {max_relative_diff:.0%})"
            )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    artifact: Path = args.artifact.resolve()
    utils.log_step("loading MobileNetV2 with ImageNet weights and the sample photos")
    model = load_mobilenet_v2()
    photos = imagenet.load_photo_batch()
    eager = eager_logits(model, photos)

    lowered = quantize_8a8w(model, photos) if args.quantize else model
    pte_path = export_pte(
        lowered, next(iter(photos.values())), args.soc_model, artifact / f"{MODEL_NAME}.pte", quantized=args.quantize
    )
    result = run_on_runner(pte_path, photos, artifact, args.iterations, args.warm_up)

    outcomes = {}
    delegated_top1 = {}
    for idx, name in enumerate(photos):
        logits = utils.read_raw_output(artifact / "outputs", idx, 0, eager[name])
        outcomes[name] = report_photo(name, logits, eager[name])
        delegated_top1[name] = int(logits.argmax())
    matched = sum(match for match, _ in outcomes.values())
    latency = "n/a" if result.avg_latency_ms is None else f"{result.avg_latency_ms:.2f} ms"
    print(f"\ntop-1 equal to eager on {matched}/{len(outcomes)} photos; runner average latency {latency}")
    check_results(
        outcomes, delegated_top1["chelsea"], MAX_RELATIVE_LOGIT_DIFF_8A8W if args.quantize else MAX_RELATIVE_LOGIT_DIFF
    )
    if not args.skip_qnn:
        compare_with_qnn(pte_path, photos, artifact, eager, result)
    return 0


def compare_with_qnn(
    pte_path: Path,
    photos: dict[str, torch.Tensor],
    artifact: Path,
    eager: dict[str, torch.Tensor],
    host: utils.RunnerResult,
) -> None:
    """One photo, one iteration on Qualcomm's QNN library (x86 emulation of the HTP: seconds)."""
    from backends.qualcomm.utils.qnn_context import qnn_library_status

    loaded, status = qnn_library_status()
    if not loaded:
        print(f"\nQNN engine: skipped ({status})")
        return
    name = "chelsea" if "chelsea" in photos else next(iter(photos))
    try:
        qnn = run_on_runner(pte_path, {name: photos[name]}, artifact, 1, 0, engine="qnn")
    except utils.ExampleError as error:  # e.g. QNN refused the graph at lowering: no context binary
        print(f"\nQNN engine: could not run ({str(error).strip().splitlines()[-1]})")
        return
    qnn_logits = utils.read_raw_output(artifact / "outputs_qnn", 0, 0, eager[name])
    host_logits = utils.read_raw_output(artifact / "outputs", list(photos).index(name), 0, eager[name])
    span = float(eager[name].max() - eager[name].min())
    print(
        f"\nQNN engine ({name}): top-1 {int(qnn_logits.argmax())} vs host {int(host_logits.argmax())} "
        f"vs eager {int(eager[name].argmax())}; max |QNN - host| = "
        f"{float((qnn_logits - host_logits).abs().max()) / span:.3%} of the logit range"
    )
    qnn_ms = "n/a" if qnn.avg_latency_ms is None else f"{qnn.avg_latency_ms:.0f} ms"
    host_ms = "n/a" if host.avg_latency_ms is None else f"{host.avg_latency_ms:.2f} ms"
    print(f"latency: host engine {host_ms}, QNN (x86 emulation) {qnn_ms}")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except utils.ExampleError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
