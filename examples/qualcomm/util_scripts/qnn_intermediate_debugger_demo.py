"""Find the first op where the delegate departs from the CPU reference: MobileNetV2.

    python examples/qualcomm/util_scripts/qnn_intermediate_debugger_demo.py --artifact artifacts/debugger

Steps: quantize MobileNetV2 (real ImageNet weights) with QnnQuantizer (8-bit
activations and weights, calibrated on the sample photos), lower it with
`dump_intermediate_outputs=True` and an ETRecord, run the .pte once with ETDump
and a debug buffer, compare every dumped tensor with the CPU reference of its
edge node, then write `<artifact>/debug_report.csv` and `<artifact>/debug_graph.svg`.
`--damage_node <conv node name>` lowers that conv with 2-bit weights in the
delegate only (the reference keeps 8 bits): the report names it as the first
failing node. `--float` skips quantization (fp16 HTP precision).

Measured here: undamaged, all 112 dumped outputs pass (lowest SQNR 59 dB); with
`--damage_node aten_convolution_default_10` exactly that conv fails (7.7 dB).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from backends.qualcomm import (  # noqa: E402
    QcomChipset,
    generate_htp_compiler_spec,
    generate_qnn_executorch_compiler_spec,
    to_edge_transform_and_lower_to_qnn,
)
from backends.qualcomm.debugger import (  # noqa: E402
    CosineSimilarityComparator,
    MSEComparator,
    QNNIntermediateDebugger,
    SQNRComparator,
)
from qnn_models import imagenet  # noqa: E402
from qnn_models.mobilenet_v2 import load_mobilenet_v2  # noqa: E402

COMPARATORS = {"sqnr": SQNRComparator, "cosine": CosineSimilarityComparator, "mse": MSEComparator}
DEFAULT_THRESHOLDS = {"sqnr": 15.0, "cosine": 0.98, "mse": 1e-2}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifact", type=Path, default=Path("artifacts") / "debugger")
    parser.add_argument("--float", action="store_true", help="no quantization (fp16 precision)")
    parser.add_argument("--metric", choices=sorted(COMPARATORS), default="sqnr")
    parser.add_argument("--threshold", type=float, default=None, help="pass threshold of the metric")
    parser.add_argument(
        "--whole_graph_reference",
        action="store_true",
        help="reference = the whole edge graph run on the sample input (1-step differences "
        "then accumulate through the layers); default: each op's reference is computed "
        "from the delegate's inputs, so only an op's own error counts",
    )
    parser.add_argument(
        "--damage_node", default=None, help="edge node name of a conv whose delegate weights are forced to 2 bits"
    )
    return parser.parse_args(argv)


def quantize(model: torch.nn.Module, calibration: list) -> torch.fx.GraphModule:
    from torchao.quantization.pt2e import allow_exported_model_train_eval
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from backends.qualcomm import QnnQuantizer, QuantDtype

    quantizer = QnnQuantizer()
    quantizer.set_default_quant_config(QuantDtype.use_8a8w, is_conv_per_channel=True)
    prepared = prepare_pt2e(torch.export.export(model, (calibration[0],), strict=False).module(), quantizer)
    with torch.no_grad():
        for sample in calibration:
            prepared(sample)
    converted = convert_pt2e(prepared)
    allow_exported_model_train_eval(converted)
    return converted


def compiler_specs(use_fp16: bool) -> list:
    return generate_qnn_executorch_compiler_spec(
        QcomChipset.SM8650, generate_htp_compiler_spec(use_fp16=use_fp16), dump_intermediate_outputs=True
    )


def main(argv=None) -> int:
    args = parse_args(argv)
    artifact = args.artifact.resolve()
    photos = list(imagenet.load_photo_batch().values())
    model = load_mobilenet_v2().eval()
    module = model if args.float else quantize(model, photos)
    sample = (photos[0],)
    print(f"[debugger] lowering MobileNetV2 ({'fp16' if args.float else '8a8w'}) with intermediate dumps")
    if args.damage_node:
        from qnn_models.damage import damage_conv_weights_in_delegate

        with damage_conv_weights_in_delegate(args.damage_node, bits=2):
            edge = to_edge_transform_and_lower_to_qnn(
                module, sample, compiler_specs(args.float), generate_etrecord=True
            )
    else:
        edge = to_edge_transform_and_lower_to_qnn(module, sample, compiler_specs(args.float), generate_etrecord=True)
    debugger = QNNIntermediateDebugger(sample)
    pte_path = debugger.save(edge, str(artifact), "mobilenet_v2")
    print(f"[debugger] wrote {pte_path} and {debugger.etrecord_path}")
    etdump, debug_buffer = debugger.run(pte_path, str(artifact))
    print(f"[debugger] wrote {etdump} and {debug_buffer}")
    threshold = args.threshold if args.threshold is not None else DEFAULT_THRESHOLDS[args.metric]
    report = debugger.compare(
        etdump, debug_buffer, COMPARATORS[args.metric](threshold), isolate=not args.whole_graph_reference
    )
    csv_path = report.write_csv(str(artifact / "debug_report.csv"))
    svg_path = report.write_svg(str(artifact / "debug_graph.svg"), "MobileNetV2: delegate vs CPU reference")
    print(f"[debugger] wrote {csv_path} and {svg_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
