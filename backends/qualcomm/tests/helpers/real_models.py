"""Helpers of the real-model and runner tests: lower once, run, compare with eager."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from backends.qualcomm.utils import pte_tools
from qnn_models import imagenet

SOC_MODEL = "SM8650"
# fp16 tolerance: max |delegate - eager| relative to the eager output range.
MAX_RELATIVE_DIFF = 0.02
MIN_COSINE = 0.999


@dataclass
class LoweredModel:
    """A model lowered once: eager outputs and delegate outputs per sample."""

    outside_ops: list[str]  # checked before to_executorch(), which rewrites the graph
    delegate_calls: int
    delegate_blobs: list[bytes]
    pte_path: Path
    samples: list[list[torch.Tensor]]
    eager: list[torch.Tensor]
    delegated: list[torch.Tensor]


def lower_and_run(model: torch.nn.Module, samples: list[list[torch.Tensor]], pte_path: Path) -> LoweredModel:
    """Lower with the fp16 spec on the first sample, save, run every sample through the runtime."""
    specs = pte_tools.build_compiler_specs(soc_model=SOC_MODEL, use_fp16=True)
    edge = pte_tools.lower_to_qnn(model, tuple(samples[0]), specs)
    outside_ops, delegate_calls = pte_tools.ops_outside_delegates(edge), pte_tools.delegate_call_count(edge)
    blobs = pte_tools.delegate_blobs(edge)
    pte_tools.save_pte(edge, pte_path)
    with torch.no_grad():
        eager = [model(*sample) for sample in samples]
    delegated = [outs[0] for outs in pte_tools.run_samples_with_runtime(pte_path, samples)]
    return LoweredModel(outside_ops, delegate_calls, blobs, pte_path, samples, eager, delegated)


def relative_max_diff(actual: torch.Tensor, expected: torch.Tensor) -> float:
    value_range = float(expected.max() - expected.min())
    return float((actual.float() - expected.float()).abs().max()) / max(value_range, 1e-12)


def cosine(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(actual.flatten().double(), expected.flatten().double(), dim=0))


def assert_close_to_eager(lowered: LoweredModel, name: str) -> None:
    for idx, (got, want) in enumerate(zip(lowered.delegated, lowered.eager)):
        assert got.shape == want.shape, f"{name} sample {idx}: shape {got.shape} != {want.shape}"
        rel, cos = relative_max_diff(got, want), cosine(got, want)
        assert rel < MAX_RELATIVE_DIFF, f"{name} sample {idx}: max diff {rel:.4%} of output range"
        assert cos > MIN_COSINE, f"{name} sample {idx}: cosine {cos:.6f}"


def assert_top1_equal(lowered: LoweredModel, name: str) -> None:
    mismatches = [
        (photo, int(want.argmax()), int(got.argmax()))
        for photo, got, want in zip(imagenet.PHOTO_NAMES, lowered.delegated, lowered.eager)
        if int(got.argmax()) != int(want.argmax())
    ]
    assert not mismatches, f"{name}: top-1 differs from eager (photo, eager, delegate): {mismatches}"


def photo_samples(mean, std) -> list[list[torch.Tensor]]:
    return [[x] for x in imagenet.load_photo_batch(mean=mean, std=std).values()]


class SmallConvNet(torch.nn.Module):
    """A small conv -> relu -> pool -> linear model for runner tests."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv(x))
        return self.fc(torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1))


@dataclass
class RunnerCase:
    pte_path: Path
    folder: Path
    samples: list[list[torch.Tensor]]
    runtime_outputs: list[torch.Tensor]
    delegate_blob: bytes


def assert_clean_failure(result: pte_tools.RunnerResult, *expected_words: str) -> None:
    """Non-zero exit (not a signal) and a message naming the problem."""
    assert result.returncode > 0, f"returncode {result.returncode}: {result.stderr[-2000:]}"
    message = (result.stderr + result.stdout).lower()
    assert any(word.lower() in message for word in expected_words), (
        f"message names none of {expected_words}: {message[-2000:]}"
    )
