"""Pluggable numerical comparators: one metric and one pass/fail threshold each.

A comparator turns (reference, actual) into one float and says whether it
passes. Subclass `NumericalComparator` for a new metric; the debugger calls
`compare` once per compared output."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import torch


def _as_float64(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().to(torch.float64).reshape(-1)


class NumericalComparator(ABC):
    """A metric over two tensors of one shape, and its pass threshold."""

    name: str = "metric"

    def __init__(self, threshold: float):
        self.threshold = float(threshold)

    @abstractmethod
    def metric(self, reference: torch.Tensor, actual: torch.Tensor) -> float:
        """The metric value (tensors are flattened float64)."""

    @abstractmethod
    def passes(self, value: float) -> bool:
        """True when `value` meets the threshold."""

    def compare(self, reference: torch.Tensor, actual: torch.Tensor) -> float:
        if tuple(reference.shape) != tuple(actual.shape):
            raise ValueError(
                f"{self.name}: shape {tuple(actual.shape)} of the delegate tensor differs "
                f"from the reference shape {tuple(reference.shape)}"
            )
        return float(self.metric(_as_float64(reference), _as_float64(actual)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(threshold={self.threshold})"


class MSEComparator(NumericalComparator):
    """Mean squared error; passes when <= threshold."""

    name = "MSE"

    def metric(self, reference: torch.Tensor, actual: torch.Tensor) -> float:
        return float(torch.mean((reference - actual) ** 2)) if reference.numel() else 0.0

    def passes(self, value: float) -> bool:
        return value <= self.threshold


class CosineSimilarityComparator(NumericalComparator):
    """Cosine similarity in [-1, 1] (1 when both are all zero); passes when >= threshold."""

    name = "CosineSimilarity"

    def __init__(self, threshold: float = 0.99):
        super().__init__(threshold)

    def metric(self, reference: torch.Tensor, actual: torch.Tensor) -> float:
        ref_norm, act_norm = float(reference.norm()), float(actual.norm())
        if ref_norm == 0.0 and act_norm == 0.0:
            return 1.0
        if ref_norm == 0.0 or act_norm == 0.0:
            return 0.0
        return float(torch.dot(reference, actual)) / (ref_norm * act_norm)

    def passes(self, value: float) -> bool:
        return value >= self.threshold


class SQNRComparator(NumericalComparator):
    """Signal-to-quantization-noise ratio in dB (inf when exact); passes when >= threshold."""

    name = "SQNR"

    def __init__(self, threshold: float = 20.0):
        super().__init__(threshold)

    def metric(self, reference: torch.Tensor, actual: torch.Tensor) -> float:
        noise = float(torch.sum((reference - actual) ** 2))
        signal = float(torch.sum(reference**2))
        if noise == 0.0:
            return math.inf
        if signal == 0.0:
            return -math.inf
        return 10.0 * math.log10(signal / noise)

    def passes(self, value: float) -> bool:
        return value >= self.threshold
