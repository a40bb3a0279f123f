"""fp16 real models (slow): MobileNetV2, EfficientNet-Lite0 and MiniLM with real weights, fully
delegated, against eager (fp16 tolerance, same top-1; MiniLM's sentence embeddings)."""

from __future__ import annotations

import pytest
import torch

from backends.qualcomm.tests.helpers.real_models import MIN_COSINE, assert_close_to_eager, assert_top1_equal
from qnn_models import imagenet


@pytest.mark.slow
class TestQNNFloatingPointModel:
    def test_mobilenet_v2_fully_delegated(self, mobilenet_v2):
        assert mobilenet_v2.outside_ops == []
        assert mobilenet_v2.delegate_calls == 1

    def test_mobilenet_v2_matches_eager(self, mobilenet_v2):
        assert_close_to_eager(mobilenet_v2, "mobilenet_v2")

    def test_mobilenet_v2_top1(self, mobilenet_v2):
        assert imagenet.is_cat_class(int(mobilenet_v2.delegated[0].argmax()))
        assert_top1_equal(mobilenet_v2, "mobilenet_v2")

    def test_efficientnet_lite0_fully_delegated(self, efficientnet_lite0):
        assert efficientnet_lite0.outside_ops == []
        assert efficientnet_lite0.delegate_calls == 1

    def test_efficientnet_lite0_matches_eager(self, efficientnet_lite0):
        assert_close_to_eager(efficientnet_lite0, "efficientnet_lite0")

    def test_efficientnet_lite0_top1(self, efficientnet_lite0):
        assert imagenet.is_cat_class(int(efficientnet_lite0.delegated[0].argmax()))
        assert_top1_equal(efficientnet_lite0, "efficientnet_lite0")

    def test_minilm_fully_delegated(self, minilm):
        assert minilm.outside_ops == []
        assert minilm.delegate_calls == 1

    def test_minilm_matches_eager(self, minilm):
        assert_close_to_eager(minilm, "minilm")

    def test_minilm_sentence_embeddings(self, minilm):
        from qnn_models.minilm import sentence_embeddings

        mask = minilm.samples[0][1]
        got = sentence_embeddings(minilm.delegated[0], mask)
        want = sentence_embeddings(minilm.eager[0], mask)
        cosines = torch.nn.functional.cosine_similarity(got, want, dim=1)
        assert float(cosines.min()) >= MIN_COSINE, f"sentence cosines {cosines.tolist()}"
