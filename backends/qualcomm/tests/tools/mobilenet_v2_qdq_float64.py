"""MobileNetV2 8a8w: the delegate against its QDQ reference run in float32 and in float64.

    python -m backends.qualcomm.tests.tools.mobilenet_v2_qdq_float64

Prints, per photo, the cosine and max logit difference of the delegate against the
converted QDQ module (float32, as PT2E runs it) and against the same graph run in float64.
The host engine follows QNN HTP's integer arithmetic, so neither reference is matched bit
for bit: the float64 run separates the reference's own float32 rounding noise from the
engine's (HTP's) rounding (quantizer/test_qdq_float64_reference: every logit within 1 step)."""

from __future__ import annotations

import pathlib
import tempfile

import torch

from backends.qualcomm import QnnQuantizer, QuantDtype, to_edge_transform_and_lower_to_qnn
from backends.qualcomm.tests.helpers.qdq_float64 import qdq_reference_float64
from backends.qualcomm.tests.helpers.quant_tester import quant_compile_specs, quantize_module
from backends.qualcomm.tests.helpers.real_models import photo_samples
from backends.qualcomm.utils import pte_tools as utils
from qnn_models import imagenet
from qnn_models.mobilenet_v2 import load_mobilenet_v2


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a.double().flatten(), b.double().flatten(), dim=0))


def main() -> None:
    model = load_mobilenet_v2().eval()
    samples = photo_samples(imagenet.IMAGENET_MEAN, imagenet.IMAGENET_STD)
    quantizer = QnnQuantizer()
    quantizer.set_default_quant_config(QuantDtype.use_8a8w, is_conv_per_channel=True, is_linear_per_channel=True)
    converted = quantize_module(model, tuple(samples[0]), quantizer, [tuple(s) for s in samples])
    edge = to_edge_transform_and_lower_to_qnn(converted, tuple(samples[0]), quant_compile_specs(QuantDtype.use_8a8w))
    pte = utils.save_pte(edge, pathlib.Path(tempfile.mkdtemp()) / "mbv2_8a8w.pte")
    outputs = [o[0] for o in utils.run_samples_with_runtime(pte, samples)]
    reference64 = qdq_reference_float64(converted)
    with torch.no_grad():
        for name, sample, got in zip(imagenet.PHOTO_NAMES, samples, outputs):
            r32, r64 = converted(*sample), reference64(*sample)
            print(
                f"{name:10s} vs QDQ float32: cosine {_cosine(got, r32):.4f} max diff "
                f"{float((got - r32).abs().max()):.3f} | vs QDQ float64: cosine {_cosine(got, r64):.4f} "
                f"max diff {float((got.double() - r64).abs().max()):.3f}"
            )


if __name__ == "__main__":
    main()
