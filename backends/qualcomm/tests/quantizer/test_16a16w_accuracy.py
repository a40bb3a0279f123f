"""16a16w against 16a8w on the real models (photos): at least as close to float."""

from __future__ import annotations

import pytest
import torch

from backends.qualcomm import QnnQuantizer, QuantDtype
from backends.qualcomm.tests.helpers.quantizer_models import run_program

# ---- real models (slow): 16a16w is the most precise dtype ------------------------------------------
SLOW_PHOTOS = ("chelsea", "coffee")


def _photo_model(name: str):
    from qnn_models import imagenet

    if name == "mobilenet_v2":
        from qnn_models.mobilenet_v2 import load_mobilenet_v2

        model, mean, std = load_mobilenet_v2(), imagenet.IMAGENET_MEAN, imagenet.IMAGENET_STD
    else:
        from qnn_models.efficientnet_lite0 import INPUT_MEAN, INPUT_STD, load_efficientnet_lite0

        model, mean, std = load_efficientnet_lite0(), INPUT_MEAN, INPUT_STD
    photos = imagenet.load_photo_batch(SLOW_PHOTOS, mean=mean, std=std)
    return model.eval(), [(x,) for x in photos.values()]


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a.flatten().double(), b.flatten().double(), dim=0))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mobilenet_v2", "efficientnet_lite0"])
def test_16a16w_at_least_as_accurate_as_16a8w(name, tmp_path):
    """16a16w had top-1 0/4 and cosine 0.02-0.34 against float (saturated biases).
    16a16w runs through the delegate; 16a8w is its QDQ reference (the delegate agrees with it
    within 1 step, tested per op), which keeps this test to one lowering per model.
    Measured (4 photos): MobileNetV2 cosine 16a16w 0.986-1.0 vs 16a8w 0.968-0.997;
    EfficientNet-Lite0 16a8w 0.958-0.998."""
    from backends.qualcomm import to_edge_transform_and_lower_to_qnn
    from backends.qualcomm.tests.helpers.quant_tester import quant_compile_specs, quantize_module

    model, samples = _photo_model(name)
    with torch.no_grad():
        floats = [model(*s) for s in samples]
    quality = {}
    for dtype in (QuantDtype.use_16a8w, QuantDtype.use_16a16w):
        quantizer = QnnQuantizer()
        quantizer.set_default_quant_config(dtype, is_conv_per_channel=True, is_linear_per_channel=True)
        converted = quantize_module(model, samples[0], quantizer, samples)
        if dtype == QuantDtype.use_16a16w:
            program = to_edge_transform_and_lower_to_qnn(
                converted, samples[0], quant_compile_specs(dtype)
            ).to_executorch()
            outputs = [torch.from_numpy(run_program(program, s)[0]) for s in samples]
        else:
            with torch.no_grad():
                outputs = [converted(*s) for s in samples]
        quality[dtype] = [(int(o.argmax()) == int(f.argmax()), _cosine(o, f)) for o, f in zip(outputs, floats)]
    print(f"{name}: {quality}")
    for (top1_8, cos_8), (top1_16, cos_16), photo in zip(
        quality[QuantDtype.use_16a8w], quality[QuantDtype.use_16a16w], SLOW_PHOTOS
    ):
        assert top1_16 >= top1_8, f"{name} {photo}: 16a16w loses the float top-1 that 16a8w keeps"
        assert cos_16 >= cos_8 - 1e-4, f"{name} {photo}: cosine 16a16w {cos_16:.5f} < 16a8w {cos_8:.5f}"
        assert top1_16 and cos_16 >= 0.98, f"{name} {photo}: 16a16w top-1 {top1_16}, cosine {cos_16:.5f}"
