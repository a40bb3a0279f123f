"""pytest set-up for qnn-delegate tests: repo root on sys.path, offline HF, quiet logs, the
real-QNN fixtures and marker, and the real models shared by the session."""

import gc
import os
import random
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Lowering builds QNN context binaries only in the real-QNN tests (the real_qnn and qnn_binary fixtures turn it
# on); elsewhere delegates carry the payload only and run on the host engine (fast).
os.environ.setdefault("QNN_DELEGATE_CONTEXT_BINARY", "0")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from backends.qualcomm.tests.helpers.real_models import (  # noqa: E402
    LoweredModel,
    RunnerCase,
    SmallConvNet,
    lower_and_run,
    photo_samples,
)
from backends.qualcomm.tests.helpers.runtime import QNN_LOADED, QNN_STATUS, reset_runtime_options  # noqa: E402
from backends.qualcomm.utils.qnn_context import AOT_ENV  # noqa: E402
from qnn_models import imagenet  # noqa: E402


def _cache_torchao_pattern_exports() -> None:
    """torchao's convert_pt2e (any graph with a batch norm) and QAT prepare re-export the same
    conv-bn match / replacement patterns on every call (114 torch.export runs, ~40 s here); the
    suite converts many small models, so each pattern is exported once per session and the tests
    get a copy (the key: the pattern's code and closure values, input shapes / dtypes; the
    patterns' literal values do not change their graphs, which are matched ignoring literals)."""
    import copy

    from torchao.quantization.pt2e import qat_utils

    export_pattern = qat_utils._get_aten_graph_module_for_pattern
    exported = {}

    def key_of(value):
        if isinstance(value, torch.Tensor):
            return ("tensor", tuple(value.shape), value.dtype)
        return value

    def cached(pattern, example_inputs, is_cuda=False, **kwargs):
        fn = getattr(pattern, "fn", pattern)  # torchao wraps pattern functions in a WrapperModule
        if not hasattr(fn, "__code__"):
            return export_pattern(pattern, example_inputs, is_cuda, **kwargs)
        key = (
            fn.__code__,
            tuple(c.cell_contents for c in fn.__closure__ or ()),
            tuple(key_of(x) for x in example_inputs),
            is_cuda,
            tuple(sorted((k, key_of(v)) for k, v in kwargs.items())),
        )
        try:
            hash(key)
        except TypeError:
            return export_pattern(pattern, example_inputs, is_cuda, **kwargs)
        if key not in exported:
            exported[key] = export_pattern(pattern, example_inputs, is_cuda, **kwargs)
        return copy.deepcopy(exported[key])

    qat_utils._get_aten_graph_module_for_pattern = cached


_cache_torchao_pattern_exports()


def _context_binaries_at_lowering(monkeypatch, on: bool):
    monkeypatch.setenv(AOT_ENV, "1" if on else "0")
    reset_runtime_options()
    yield
    reset_runtime_options()
    gc.collect()


@pytest.fixture(autouse=True)
def _seeded_random_state():
    """Every test starts from the same random state (torch, numpy, random): pytest-xdist's
    loadscope hands test groups to workers in a different order on each run, and a model built
    with unseeded weights would otherwise get different weights from run to run."""
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


@pytest.fixture
def fresh_runtime_options():
    """The runtime options at their defaults before and after the test."""
    reset_runtime_options()
    yield
    reset_runtime_options()


@pytest.fixture
def real_qnn(monkeypatch):
    """Context binaries at lowering (the suite's default is payload only, for speed): each
    delegate also carries QNN's context binary and can run on QNN's HTP emulation. Skips the
    test when QNN's libraries do not load."""
    if not QNN_LOADED:
        pytest.skip(f"QNN library not available: {QNN_STATUS}")
    yield from _context_binaries_at_lowering(monkeypatch, True)


@pytest.fixture
def qnn_binary(monkeypatch):
    """Context binaries at lowering when QNN's library loads (so that the test also runs its
    delegate on QNN); host engine only, without skipping, otherwise."""
    yield from _context_binaries_at_lowering(monkeypatch, QNN_LOADED)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    """The `qnn` marker, in one place: a test needs Qualcomm's QNN library when it uses the
    real_qnn fixture or is marked qnn (helpers.runtime.needs_qnn); such a test is marked qnn
    here and skipped where the library does not load. `pytest -m "not qnn"` leaves them out
    (tests using `qnn_binary` stay: they run on the host engine, and on QNN too when it loads)."""
    skip = pytest.mark.skip(reason=f"QNN library not available: {QNN_STATUS}")
    for item in items:
        if "real_qnn" in getattr(item, "fixturenames", ()) and item.get_closest_marker("qnn") is None:
            item.add_marker(pytest.mark.qnn)
        if not QNN_LOADED and item.get_closest_marker("qnn") is not None:
            item.add_marker(skip)


# Real models are exported and lowered once per session, then shared by the tests.
@pytest.fixture(scope="session")
def mobilenet_v2(tmp_path_factory) -> LoweredModel:
    from qnn_models.mobilenet_v2 import load_mobilenet_v2

    samples = photo_samples(imagenet.IMAGENET_MEAN, imagenet.IMAGENET_STD)
    return lower_and_run(load_mobilenet_v2(), samples, tmp_path_factory.mktemp("mbv2") / "mobilenet_v2.pte")


@pytest.fixture(scope="session")
def efficientnet_lite0(tmp_path_factory) -> LoweredModel:
    from qnn_models.efficientnet_lite0 import INPUT_MEAN, INPUT_STD, load_efficientnet_lite0

    samples = photo_samples(INPUT_MEAN, INPUT_STD)
    return lower_and_run(
        load_efficientnet_lite0(), samples, tmp_path_factory.mktemp("lite0") / "efficientnet_lite0.pte"
    )


@pytest.fixture(scope="session")
def minilm(tmp_path_factory) -> LoweredModel:
    from qnn_models.minilm import SAMPLE_SENTENCES, load_minilm, tokenize

    encoder, tokenizer = load_minilm()
    ids, mask = tokenize(tokenizer, SAMPLE_SENTENCES)
    return lower_and_run(encoder, [[ids, mask]], tmp_path_factory.mktemp("minilm") / "minilm.pte")


@pytest.fixture(scope="session")
def small_model(tmp_path_factory) -> RunnerCase:
    torch.manual_seed(0)
    model = SmallConvNet().eval()
    samples = [[torch.randn(1, 3, 16, 16)] for _ in range(3)]
    folder = tmp_path_factory.mktemp("runner")
    lowered = lower_and_run(model, samples, folder / "small.pte")
    assert lowered.outside_ops == []
    assert len(lowered.delegate_blobs) == 1
    return RunnerCase(lowered.pte_path, folder, samples, lowered.delegated, lowered.delegate_blobs[0])


# `python -m backends.qualcomm.tests.tools.qnn_coverage`: record the op types QNN finalizes.
if os.environ.get("QNN_DELEGATE_RECORD_QNN_OPS"):
    from backends.qualcomm.tests.tools.qnn_coverage import RECORD_ENV, install_recorder  # noqa: E402
    from backends.qualcomm.utils.runtime_options import require_extension  # noqa: E402

    install_recorder(require_extension(), os.environ[RECORD_ENV])
