"""bench/bench_llm.py's arithmetic and reporting on fake inputs: medians, bytes per decoded token,
the result table and the refusal to print ratios under load (no timing, no model)."""

from __future__ import annotations

import pytest

from bench.bench_llm import (
    WEIGHT_BYTES,
    BackendResult,
    Round,
    cache_bytes_per_token,
    linear_sizes,
    meta_state_dict,
    ratio_rows,
    ratios_allowed,
    result_rows,
    weight_bytes_per_token,
)
from bench.quiet import LoadReport

transformers = pytest.importorskip("transformers")


def smollm2_config():
    return transformers.LlamaConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
    )


def result(name: str, prefill: list, decode: list, other_cores: float = 0.0) -> BackendResult:
    rounds = [Round(p, p + 0.01, d) for p, d in zip(prefill, decode)]
    load = LoadReport(seconds=10.0, own_cores=1.9, other_cores=other_cores, max_other_cores=0.2)
    return BackendResult(name, 128, 64, rounds, rss_mb=300.0, bytes_per_token=2.0e8, load=load)


def test_medians_of_the_rounds():
    r = result("fp16", [1.0, 4.0, 2.0], [2.0, 1.0, 8.0])
    assert r.prefill_tok_s == pytest.approx(64.0)  # 128 / median 2.0 s
    assert r.decode_tok_s == pytest.approx(32.0)  # 64 / median 2.0 s
    assert r.ttft_ms == pytest.approx(2010.0)


def test_smollm2_weight_and_cache_bytes():
    sizes = linear_sizes(smollm2_config())
    # per layer: q, o 576x576; k, v 576x192; gate, up 576x1536; down 1536x576
    assert sizes == {"linear": 30 * (2 * 331776 + 2 * 110592 + 2 * 884736), "down_proj": 30 * 884736, "head": 28311552}
    assert sum(sizes.values()) == 134515008 - 576 * 61  # every linear of SmolLM2-135M (norms not counted)
    assert weight_bytes_per_token(sizes, WEIGHT_BYTES["fp16"]) == 2 * sum(sizes.values())
    lpbq = weight_bytes_per_token(sizes, WEIGHT_BYTES["16a4w_block"])
    assert lpbq == pytest.approx(sizes["linear"] * (0.5 + 0.5 / 32) + sizes["down_proj"] + sizes["head"])
    # K and V, 30 layers, 3 KV heads, head dim 64, 511 slots, float32
    assert cache_bytes_per_token(smollm2_config(), 511, 4) == 2 * 30 * 3 * 64 * 511 * 4


def test_table_and_ratios_when_quiet(capsys):
    ours, peer = result("fp16", [1.0] * 3, [2.0] * 3), result("xnn_fp32", [0.5] * 3, [1.0] * 3)
    rows = result_rows([ours, peer], bandwidth_gb_s=10.0)
    assert rows[0].startswith("| backend | pp128 tok/s | tg64 tok/s")
    # 2e8 bytes per token at 32 tok/s = 6.4 GB/s = 64% of 10 GB/s
    assert rows[2] == "| fp16 | 128.0 | 32.0 | 1010 | 300 | 200.0 | 6.40 | 64% |"
    assert ratios_allowed([ours, peer])
    assert ratio_rows([ours], [peer]) == ["fp16 / xnn_fp32: prefill x0.50, decode x0.50"]
    assert capsys.readouterr().out.count("quiet") == 2


def test_ratios_refused_when_another_process_used_the_cores(capsys):
    quiet, loaded = result("fp16", [1.0], [1.0]), result("xnn_fp32", [1.0], [1.0], other_cores=0.9)
    assert not ratios_allowed([quiet, loaded])
    assert "refusing to print ratios" in capsys.readouterr().out
    assert ratios_allowed([quiet, loaded], allow_loaded=True)
    missing = result("fp16", [1.0], [1.0])
    missing.load = None
    assert not ratios_allowed([missing])


def test_meta_state_dict_names():
    config = transformers.LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2
    )
    model = transformers.LlamaForCausalLM(config)
    names = set(meta_state_dict(model))
    assert {
        "tok_embeddings.weight",
        "output.weight",
        "norm.weight",
        "layers.0.attention.wq.weight",
        "layers.0.feed_forward.w2.weight",
        "layers.0.attention_norm.weight",
        "layers.0.ffn_norm.weight",
    } <= names
    assert not any(n.startswith("model.") or "self_attn" in n for n in names)
