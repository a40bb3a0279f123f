"""ImageNet labels and image preprocessing for the scikit-image sample photos.

No torchvision: resize with ``torch.nn.functional.interpolate`` (bilinear,
antialias), center crop, normalise, NCHW float32.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

LABELS_FILE = Path(__file__).with_name("imagenet_classes.txt")
NUM_CLASSES = 1000
RESIZE_SHORT_SIDE = 256
CROP_SIZE = 224

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
HALF_MEAN = (0.5, 0.5, 0.5)
HALF_STD = (0.5, 0.5, 0.5)

PHOTO_NAMES = ("chelsea", "coffee", "astronaut", "rocket")
CAT_CLASS_INDICES = range(281, 286)  # tabby, tiger cat, Persian, Siamese, Egyptian cat


@lru_cache(maxsize=1)
def load_imagenet_labels() -> tuple[str, ...]:
    """The 1000 ImageNet class names, index = class id ("idx, name" lines)."""
    labels: list[str] = []
    for line_no, line in enumerate(LABELS_FILE.read_text().splitlines()):
        idx_text, _, name = line.partition(",")
        if int(idx_text) != line_no or not name.strip():
            raise ValueError(f"{LABELS_FILE}: malformed line {line_no + 1}: {line!r}")
        labels.append(name.strip())
    if len(labels) != NUM_CLASSES:
        raise ValueError(f"{LABELS_FILE}: expected {NUM_CLASSES} labels, found {len(labels)}")
    return tuple(labels)


def load_photo(name: str) -> np.ndarray:
    """A bundled scikit-image photo as HxWx3 uint8 (e.g. 'chelsea', 'coffee')."""
    import skimage.data

    loader: Callable[[], np.ndarray] | None = getattr(skimage.data, name, None)
    if loader is None:
        raise ValueError(f"skimage.data has no photo named {name!r}")
    image = np.asarray(loader())
    if image.ndim != 3 or image.shape[2] < 3:
        raise ValueError(f"photo {name!r} is not an RGB image (shape {image.shape})")
    return image[:, :, :3]


def resize_short_side(image: torch.Tensor, size: int) -> torch.Tensor:
    """Resize a 1x3xHxW float tensor so its short side equals ``size``."""
    height, width = image.shape[-2:]
    scale = size / min(height, width)
    new_hw = (max(size, round(height * scale)), max(size, round(width * scale)))
    return F.interpolate(image, size=new_hw, mode="bilinear", antialias=True, align_corners=False)


def center_crop(image: torch.Tensor, size: int) -> torch.Tensor:
    """Center crop the last two dims of a tensor to ``size`` x ``size``."""
    height, width = image.shape[-2:]
    top = (height - size) // 2
    left = (width - size) // 2
    return image[..., top : top + size, left : left + size]


def preprocess_image(
    image: np.ndarray,
    mean: Sequence[float] = IMAGENET_MEAN,
    std: Sequence[float] = IMAGENET_STD,
) -> torch.Tensor:
    """HxWx3 uint8 -> 1x3x224x224 float32: resize 256 short side, crop 224, normalise."""
    tensor = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)[None].float() / 255.0
    tensor = center_crop(resize_short_side(tensor, RESIZE_SHORT_SIDE), CROP_SIZE).clamp(0.0, 1.0)
    mean_t = torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1)
    std_t = torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1)
    return ((tensor - mean_t) / std_t).contiguous()


def load_photo_batch(
    names: Sequence[str] = PHOTO_NAMES,
    mean: Sequence[float] = IMAGENET_MEAN,
    std: Sequence[float] = IMAGENET_STD,
) -> dict[str, torch.Tensor]:
    """Each named photo preprocessed to a 1x3x224x224 tensor, in order."""
    return {name: preprocess_image(load_photo(name), mean, std) for name in names}


def top_k(logits: torch.Tensor, k: int = 5) -> list[tuple[int, str, float]]:
    """Top-k (class id, label, softmax probability) of a 1x1000 logits tensor."""
    labels = load_imagenet_labels()
    probs = torch.softmax(logits.reshape(-1).float(), dim=0)
    values, indices = probs.topk(k)
    return [(int(i), labels[int(i)], float(p)) for p, i in zip(values, indices)]


def is_cat_class(class_id: int) -> bool:
    """True for the domestic-cat classes 281..285."""
    return class_id in CAT_CLASS_INDICES
