"""Real-model tests of the QNN delegate (fp16) and tests of ``qnn_executor_runner``.

Each model is exported and lowered once (module-scoped fixtures), then run
through ``executorch.runtime`` and compared with eager PyTorch.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[3]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from examples.qualcomm import utils  # noqa: E402
from examples.qualcomm.models import imagenet  # noqa: E402

SOC_MODEL = "SM8650"
# fp16 tolerance: max |delegate - eager| relative to the eager output range.
MAX_RELATIVE_DIFF = 0.02
MIN_COSINE = 0.999


@dataclass
class LoweredModel:
    """A model lowered once: eager outputs and delegate outputs per sample."""

    outside_ops: list[str]  # checked before to_executorch(), which rewrites the graph
    delegate_calls: int
    pte_path: Path
    samples: list[list[torch.Tensor]]
    eager: list[torch.Tensor]
    delegated: list[torch.Tensor]


def lower_and_run(model: torch.nn.Module, samples: list[list[torch.Tensor]], pte_path: Path) -> LoweredModel:
    """Lower with the fp16 spec on the first sample, save, run every sample through the runtime."""
    specs = utils.build_compiler_specs(soc_model=SOC_MODEL, use_fp16=True)
    edge = utils.lower_to_qnn(model, tuple(samples[0]), specs)
    outside_ops, delegate_calls = utils.ops_outside_delegates(edge), utils.delegate_call_count(edge)
    utils.save_pte(edge, pte_path)
    with torch.no_grad():
        eager = [model(*sample) for sample in samples]
    delegated = [outs[0] for outs in utils.run_samples_with_runtime(pte_path, samples)]
    return LoweredModel(outside_ops, delegate_calls, pte_path, samples, eager, delegated)


def relative_max_diff(actual: torch.Tensor, expected: torch.Tensor) -> float:
    value_range = float(expected.max() - expected.min())
    return float((actual.float() - expected.float()).abs().max()) / max(value_range, 1e-12)


def cosine(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(
        actual.flatten().double(), expected.flatten().double(), dim=0))


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


@pytest.fixture(scope="module")
def mobilenet_v2(tmp_path_factory) -> LoweredModel:
    from examples.qualcomm.models.mobilenet_v2 import load_mobilenet_v2

    samples = photo_samples(imagenet.IMAGENET_MEAN, imagenet.IMAGENET_STD)
    return lower_and_run(load_mobilenet_v2(), samples,
                         tmp_path_factory.mktemp("mbv2") / "mobilenet_v2.pte")


@pytest.fixture(scope="module")
def efficientnet_lite0(tmp_path_factory) -> LoweredModel:
    from examples.qualcomm.models.efficientnet_lite0 import (
        INPUT_MEAN, INPUT_STD, load_efficientnet_lite0)

    samples = photo_samples(INPUT_MEAN, INPUT_STD)
    return lower_and_run(load_efficientnet_lite0(), samples,
                         tmp_path_factory.mktemp("lite0") / "efficientnet_lite0.pte")


@pytest.fixture(scope="module")
def minilm(tmp_path_factory) -> LoweredModel:
    from examples.qualcomm.models.minilm import SAMPLE_SENTENCES, load_minilm, tokenize

    encoder, tokenizer = load_minilm()
    ids, mask = tokenize(tokenizer, SAMPLE_SENTENCES)
    return lower_and_run(encoder, [[ids, mask]], tmp_path_factory.mktemp("minilm") / "minilm.pte")


@pytest.mark.slow
class TestQNNFloatingPointModel:
    def test_mobilenet_v2_fully_delegated(self, mobilenet_v2):
        assert mobilenet_v2.outside_ops == []
        assert mobilenet_v2.delegate_calls >= 1

    def test_mobilenet_v2_matches_eager(self, mobilenet_v2):
        assert_close_to_eager(mobilenet_v2, "mobilenet_v2")

    def test_mobilenet_v2_top1(self, mobilenet_v2):
        assert imagenet.is_cat_class(int(mobilenet_v2.delegated[0].argmax()))
        assert_top1_equal(mobilenet_v2, "mobilenet_v2")

    def test_efficientnet_lite0_fully_delegated(self, efficientnet_lite0):
        assert efficientnet_lite0.outside_ops == []
        assert efficientnet_lite0.delegate_calls >= 1

    def test_efficientnet_lite0_matches_eager(self, efficientnet_lite0):
        assert_close_to_eager(efficientnet_lite0, "efficientnet_lite0")

    def test_efficientnet_lite0_top1(self, efficientnet_lite0):
        assert imagenet.is_cat_class(int(efficientnet_lite0.delegated[0].argmax()))
        assert_top1_equal(efficientnet_lite0, "efficientnet_lite0")

    def test_minilm_fully_delegated(self, minilm):
        assert minilm.outside_ops == []
        assert minilm.delegate_calls >= 1

    def test_minilm_matches_eager(self, minilm):
        assert_close_to_eager(minilm, "minilm")

    def test_minilm_sentence_embeddings(self, minilm):
        from examples.qualcomm.models.minilm import sentence_embeddings

        mask = minilm.samples[0][1]
        got = sentence_embeddings(minilm.delegated[0], mask)
        want = sentence_embeddings(minilm.eager[0], mask)
        cosines = torch.nn.functional.cosine_similarity(got, want, dim=1)
        assert float(cosines.min()) >= MIN_COSINE, f"sentence cosines {cosines.tolist()}"


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


@pytest.fixture(scope="module")
def small_model(tmp_path_factory) -> RunnerCase:
    torch.manual_seed(0)
    model = SmallConvNet().eval()
    samples = [[torch.randn(1, 3, 16, 16)] for _ in range(3)]
    folder = tmp_path_factory.mktemp("runner")
    lowered = lower_and_run(model, samples, folder / "small.pte")
    assert lowered.outside_ops == []
    return RunnerCase(lowered.pte_path, folder, samples, lowered.delegated)


def assert_clean_failure(result: utils.RunnerResult, *expected_words: str) -> None:
    """Non-zero exit (not a signal) and a message naming the problem."""
    assert result.returncode > 0, f"returncode {result.returncode}: {result.stderr[-2000:]}"
    message = (result.stderr + result.stdout).lower()
    assert any(word.lower() in message for word in expected_words), (
        f"message names none of {expected_words}: {message[-2000:]}")


class TestQNNRunner:
    def test_runner_outputs_equal_runtime(self, small_model):
        input_list = utils.write_input_files(small_model.samples, small_model.folder / "inputs")
        out_dir = small_model.folder / "outputs"
        perf = small_model.folder / "perf.txt"
        result = utils.run_runner(small_model.pte_path, input_list, out_dir,
                                  iterations=3, warm_up=1, perf_path=perf)
        assert result.returncode == 0, result.stderr
        for idx, expected in enumerate(small_model.runtime_outputs):
            got = utils.read_raw_output(out_dir, idx, 0, expected)
            assert torch.equal(got, expected), f"sample {idx}: runner != runtime"
        assert result.avg_latency_ms is not None and result.avg_latency_ms > 0

    def test_missing_model_file(self, small_model):
        input_list = utils.write_input_files(small_model.samples[:1], small_model.folder / "in_missing")
        missing = small_model.folder / "does_not_exist.pte"
        result = utils.run_runner(missing, input_list, small_model.folder / "out_missing")
        assert_clean_failure(result, missing.name)

    def test_missing_input_list(self, small_model):
        missing = small_model.folder / "no_input_list.txt"
        result = utils.run_runner(small_model.pte_path, missing, small_model.folder / "out_nolist")
        assert_clean_failure(result, missing.name)

    def test_wrong_input_size(self, small_model):
        folder = small_model.folder / "in_wrong_size"
        input_list = utils.write_input_files([[torch.randn(1, 3, 8, 8)]], folder)
        result = utils.run_runner(small_model.pte_path, input_list, small_model.folder / "out_wrong")
        assert_clean_failure(result, "input_0_0.raw", "size", "bytes")
