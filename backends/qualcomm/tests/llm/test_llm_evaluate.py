"""Accuracy measurement of static-cache LLMs (backends/qualcomm/llm/evaluate.py): perplexity against
hand computations, the evaluation / calibration split, token agreement, and the weight-only fake
quantization the per-layer analysis uses (LPBQ as the QDQ reference computes it)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from backends.qualcomm.llm import ModuleProgram, static_modules
from backends.qualcomm.llm.evaluate import (
    argmax_agreement,
    fake_quantize_linears,
    fake_quantize_weight,
    hf_greedy_tokens,
    hf_perplexity,
    perplexity,
    program_perplexity,
    pydoc_texts,
    token_agreement,
    token_nll,
    token_windows,
)
from backends.qualcomm.quantizer.observers import LpbqObserver, lpbq_mse_block_ints, lpbq_scales

transformers = pytest.importorskip("transformers")


def test_token_nll_and_perplexity_by_hand():
    # row 0: uniform over 3 -> p = 1/3; row 1: logits (0, ln 3, 0) -> p = (1/5, 3/5, 1/5)
    logits = np.array([[0.0, 0.0, 0.0], [0.0, math.log(3.0), 0.0], [5.0, 5.0, 5.0]])
    ids = [2, 0, 1]
    nll = token_nll(logits, ids)
    np.testing.assert_allclose(nll, [math.log(3.0), math.log(5.0 / 3.0)], rtol=1e-12)
    assert perplexity(nll) == pytest.approx(math.sqrt(5.0), rel=1e-12)  # exp((ln 3 + ln 5/3) / 2)


def test_uniform_logits_have_the_vocabulary_size_as_perplexity():
    assert perplexity(token_nll(np.zeros((9, 7)), [i % 7 for i in range(9)])) == pytest.approx(7.0)


def test_evaluation_and_calibration_text_are_disjoint_prose():
    from pydoc_data.topics import topics

    calibration, evaluation = pydoc_texts()
    assert len(evaluation) > 50_000 and len(calibration) > 3 * 50_000
    for name in sorted(topics)[:8]:
        text = topics[name]
        assert (text in evaluation) != (text in calibration)


def test_token_windows():
    assert token_windows(list(range(10)), 4, 2) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert token_windows(list(range(10)), 4, 3, stride=3) == [[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9]]
    with pytest.raises(ValueError):
        token_windows(list(range(10)), 4, 3)


def test_argmax_agreement_counts_and_prefixes():
    eye = np.eye(4)
    rows = [eye[[0, 1, 2, 3]], eye[[0, 2, 2, 3]]]  # second prompt differs at position 1
    agreement = argmax_agreement(rows, [[0, 1, 2, 3], [0, 1, 2, 3]])
    assert (agreement.equal, agreement.total, agreement.matched_prefix) == (7, 8, [4, 1])
    assert agreement.fraction == pytest.approx(7 / 8)


def _tiny_llama():
    config = transformers.LlamaConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        initializer_range=0.1,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def test_static_program_perplexity_and_agreement_equal_hf_eager():
    """The float32 StaticDecoder through the generation loop (prefill chunks; decode for the
    agreement) against HF eager: same perplexity, 100% agreement with HF's greedy tokens."""
    model = _tiny_llama()
    modules = static_modules(model, 64, 8)
    program = ModuleProgram(modules, modules["prefill"].shape)
    ids = torch.randint(0, 96, (80,), generator=torch.Generator().manual_seed(3)).tolist()
    windows = token_windows(ids, 40, 2)
    assert program_perplexity(program, windows) == pytest.approx(hf_perplexity(model, windows), rel=1e-5)
    prompts = [ids[:5], ids[10:17]]
    references = hf_greedy_tokens(model, prompts, 6)
    agreement = token_agreement(program, prompts, references)
    assert (agreement.equal, agreement.total, agreement.matched_prefix) == (12, 12, [6, 6])


def test_lpbq_fake_quantization_equals_the_observer_qdq():
    weight = torch.randn(8, 64, generator=torch.Generator().manual_seed(1))
    observer = LpbqObserver((1, 32))
    observer(weight)
    scale, _ = observer.calculate_qparams()
    expected = torch.clamp(torch.round(weight / scale.repeat_interleave(32, 1)), -8, 7) * scale.repeat_interleave(32, 1)
    torch.testing.assert_close(fake_quantize_weight(weight, 4, 32), expected, rtol=0, atol=0)


def test_mse_block_scales_never_lose_to_max_scales():
    generator = torch.Generator().manual_seed(2)
    weight = torch.randn(16, 128, generator=generator) * torch.rand(16, 128, generator=generator).pow(4)
    channel, ints = lpbq_scales(weight, (1, 32), -8, 7, 4)
    best = lpbq_mse_block_ints(weight, (1, 32), channel, -8, 7, 15)
    assert ((best >= 1) & (best <= 15)).all()

    def block_error(w_hat):
        return ((w_hat - weight) ** 2).reshape(16, 4, 32).sum(-1)

    max_error = block_error(fake_quantize_weight(weight, 4, 32))
    mse_error = block_error(fake_quantize_weight(weight, 4, 32, mse_search=True))
    assert (mse_error <= max_error + 1e-7).all() and mse_error.sum() < max_error.sum()
    observer = LpbqObserver((1, 32))
    observer.mse_search = True
    observer(weight)
    assert torch.equal(observer.block_ints, best)


def test_fake_quantize_linears_unties_the_head():
    model = _tiny_llama()
    model.lm_head.weight = model.model.embed_tokens.weight
    embedding = model.model.embed_tokens.weight.detach().clone()
    done = fake_quantize_linears(model, r"lm_head|q_proj", 8)
    assert done == ["model.layers.0.self_attn.q_proj", "model.layers.1.self_attn.q_proj", "lm_head"]
    assert torch.equal(model.model.embed_tokens.weight, embedding)
    codes = model.lm_head.weight / (embedding.abs().amax(1, keepdim=True) / 127.5)
    torch.testing.assert_close(codes, codes.round(), rtol=0, atol=1e-4)
