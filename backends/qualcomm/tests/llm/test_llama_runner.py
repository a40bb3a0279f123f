"""qnn_llama_runner (backends/qualcomm/runner/llama/): its token ids against the Python loop
(generate.py) on the tiny Llama / Qwen3 configs of helpers/tiny_llm.py, fp16 and 16a4w_block, on the
host engine and on QNN (x86 emulation); its tokenizer (pytorch_tokenizers' HFTokenizer) against the
Python `tokenizers` library; its chat template; its errors. One SmolLM2-135M generation (slow)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np
import pytest

from backends.qualcomm.llm import PteProgram, generate
from backends.qualcomm.tests.helpers.tiny_llm import PROMPT, VOCAB, export_tiny

RUNNER_NAME = "qnn_llama_runner"
NEW_TOKENS = 8


def find_llama_runner() -> Path:
    on_path = shutil.which(RUNNER_NAME)
    if on_path:
        return Path(on_path)
    beside_python = Path(sys.executable).parent / RUNNER_NAME
    if not beside_python.is_file():
        pytest.fail(f"{RUNNER_NAME} not found on PATH nor in {beside_python.parent} (make install)")
    return beside_python


def run_llama_runner(flags: Sequence[str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(find_llama_runner()), *flags], capture_output=True, text=True, timeout=timeout)


def runner_tokens(pte: Path, prompt: Sequence[int], new_tokens: int, tmp_path: Path, *flags: str) -> List[int]:
    """The ids the runner generates after `prompt` (--tokenized_prompt), at most `new_tokens`."""
    prompt_file = tmp_path / "prompt.bin"
    np.asarray(prompt, np.uint64).tofile(prompt_file)
    tokens_file = tmp_path / "tokens.txt"
    result = run_llama_runner(
        [
            "--model_path",
            str(pte),
            "--tokenized_prompt",
            str(prompt_file),
            "--seq_len",
            str(len(prompt) + new_tokens),
            "--output_tokens_path",
            str(tokens_file),
            *flags,
        ]
    )
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(":", 1) for line in tokens_file.read_text().splitlines())
    assert [int(t) for t in lines["prompt"].split()] == list(prompt)
    return [int(t) for t in lines["generated"].split()]


class DecodeOnly(PteProgram):
    """The Python loop without the prefill method (the runner's --eval_mode kv)."""

    def has(self, method: str) -> bool:
        return method != "prefill" and super().has(method)


# ---- programs, exported once per module (with QNN context binaries when QNN's library loads) ----
_EXPORTS: Dict[Tuple[str, str], object] = {}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    def get(kind: str, recipe: str) -> Path:
        if (kind, recipe) not in _EXPORTS:
            _EXPORTS[(kind, recipe)] = export_tiny(kind, recipe, tmp_path_factory, tie=kind == "qwen3")[1]
        return _EXPORTS[(kind, recipe)].path

    yield get
    _EXPORTS.clear()


CASES = [
    pytest.param("llama", "fp16", id="llama-fp16"),
    pytest.param("qwen3", "16a4w_block", id="qwen3-16a4w_block"),
    pytest.param("qwen3", "fp16", id="qwen3-fp16", marks=pytest.mark.slow),
    pytest.param("llama", "16a4w_block", id="llama-16a4w_block", marks=pytest.mark.slow),
]


# ---- generation: the runner against the Python loop --------------------------------------------
@pytest.mark.parametrize("kind, recipe", CASES)
def test_runner_greedy_tokens_equal_the_python_loop_on_the_host_engine(kind, recipe, exported, tmp_path):
    """11-token prompt (a full prefill chunk of 8 and a padded one), 8 greedy tokens: the runner's
    ids equal generate()'s on the same .pte and engine."""
    pte = exported(kind, recipe)
    python = generate(pte, PROMPT, NEW_TOKENS, engine="host").tokens
    ours = runner_tokens(pte, PROMPT, NEW_TOKENS, tmp_path, "--engine", "host")
    print(f"{kind} {recipe}: {ours}")
    assert ours == python


@pytest.mark.parametrize("kind, recipe", CASES[:2])
def test_runner_kv_mode_equals_the_python_loop_without_prefill(kind, recipe, exported, tmp_path):
    """--eval_mode kv: the prompt through decode calls, one token each, as the Python loop runs a
    program without a prefill method."""
    pte = exported(kind, recipe)
    program = DecodeOnly(pte, "host")
    try:
        python = generate(program, PROMPT, NEW_TOKENS).tokens
    finally:
        program.close()
    assert runner_tokens(pte, PROMPT, NEW_TOKENS, tmp_path, "--engine", "host", "--eval_mode", "kv") == python


def test_runner_logits_equal_the_python_loop(exported, tmp_path):
    """--dump_logits_path: the float32 logits of every sampled position equal generate()'s
    (same program, same engine, same inputs: bit for bit)."""
    pte = exported("llama", "fp16")
    python = generate(pte, PROMPT, NEW_TOKENS, engine="host", return_logits=True)
    dump = tmp_path / "logits.bin"
    runner_tokens(pte, PROMPT, NEW_TOKENS, tmp_path, "--engine", "host", "--dump_logits_path", str(dump))
    ours = np.fromfile(dump, np.float32).reshape(-1, VOCAB)
    np.testing.assert_array_equal(ours, np.stack(python.logits))


def test_runner_sampling_is_seeded_and_top_p_keeps_the_top_token(exported, tmp_path):
    """Temperature 1 with a seed gives the same ids twice; top_p 1e-6 keeps only the most likely
    token, i.e. greedy."""
    pte = exported("llama", "fp16")
    sampled = [
        runner_tokens(pte, PROMPT, NEW_TOKENS, tmp_path, "--engine", "host", "--temperature", "1", "--seed", "7")
        for _ in range(2)
    ]
    assert sampled[0] == sampled[1]
    nucleus = runner_tokens(
        pte, PROMPT, NEW_TOKENS, tmp_path, "--engine", "host", "--temperature", "1", "--top_p", "1e-6", "--seed", "3"
    )
    assert nucleus == generate(pte, PROMPT, NEW_TOKENS, engine="host").tokens


def test_runner_reports_speed_and_memory(exported, tmp_path):
    """--performance_output_path: name,value lines (values not asserted: wall clock)."""
    pte = exported("llama", "fp16")
    perf = tmp_path / "perf.txt"
    runner_tokens(pte, PROMPT, 4, tmp_path, "--num_iters", "2", "--performance_output_path", str(perf))
    values = dict(line.split(",", 1) for line in perf.read_text().splitlines())
    assert {"prefill_tok_s", "decode_tok_s", "time_to_first_token_ms", "peak_rss_mb"} <= set(values)
    assert int(values["prompt_tokens"]) == len(PROMPT) and int(values["generated_tokens"]) == 4
    assert values["stop"] == "seq_len"


@pytest.mark.qnn
@pytest.mark.parametrize("kind, recipe", CASES[:2])
def test_runner_tokens_equal_the_python_loop_on_qnn(kind, recipe, exported, tmp_path):
    """The same .pte on QNN's HTP emulation (slow: 3 tokens): the runner's ids equal generate()'s
    on QNN."""
    pte = exported(kind, recipe)
    python = generate(pte, PROMPT, 3, engine="qnn").tokens
    assert runner_tokens(pte, PROMPT, 3, tmp_path, "--engine", "qnn") == python


# ---- the tokenizer and the chat template ----------------------------------------------------------
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TEXTS = [
    "The capital of France is",
    "12345 + 678 = 13023",
    "naïve café — 日本語 😀",
    "  two  spaces\n\nand\ttabs  ",
    "<|im_start|>user\nHi<|im_end|>\n",
]


@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory) -> Path:
    """A byte-level BPE tokenizer.json (400 ids, ChatML special tokens) trained with the
    `tokenizers` library on Python's pydoc prose."""
    from pydoc_data.topics import topics
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator([topics[k] for k in sorted(topics)][:40], trainer)
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    tokenizer.save(str(path))
    return path


def runner_prompt_ids(tokenizer_json: Path, text: str, *flags: str) -> List[int]:
    result = run_llama_runner(["--tokenize_only", "--tokenizer_path", str(tokenizer_json), "--prompt", text, *flags])
    assert result.returncode == 0, result.stderr
    return [int(t) for t in result.stdout.split()]


@pytest.mark.parametrize("text", TEXTS)
def test_runner_tokenizer_ids_equal_the_tokenizers_library(text, tiny_tokenizer):
    from tokenizers import Tokenizer

    python = Tokenizer.from_file(str(tiny_tokenizer)).encode(text).ids
    assert runner_prompt_ids(tiny_tokenizer, text, "--decoder_model_version", "none") == python


def test_runner_applies_chatml_when_the_tokenizer_has_im_start(tiny_tokenizer):
    from tokenizers import Tokenizer

    text = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    python = Tokenizer.from_file(str(tiny_tokenizer)).encode(text).ids
    assert runner_prompt_ids(tiny_tokenizer, "Hi", "--system_prompt", "Be brief.") == python
    assert python[0] == SPECIAL.index("<|im_start|>")


@pytest.fixture(scope="module")
def smollm2_tokenizer(tmp_path_factory):
    """(tokenizer.json path, transformers tokenizer) of SmolLM2's GGUF; skips without the package."""
    pytest.importorskip("gguf")
    from backends.qualcomm.llm.gguf_llama import load_gguf_tokenizer, smollm2_gguf_path, write_tokenizer_json

    try:
        gguf = smollm2_gguf_path()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    return write_tokenizer_json(gguf, tmp_path_factory.mktemp("smollm2_tokenizer")), load_gguf_tokenizer(gguf)


@pytest.mark.parametrize("text", TEXTS)
def test_runner_tokenizer_ids_equal_transformers_on_smollm2(text, smollm2_tokenizer):
    path, tokenizer = smollm2_tokenizer
    python = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert runner_prompt_ids(path, text, "--decoder_model_version", "none") == python


def test_runner_chat_template_equals_transformers_on_smollm2(smollm2_tokenizer):
    """The auto template (ChatML) of a system and a user turn: the ids of transformers'
    apply_chat_template with the generation prompt."""
    path, tokenizer = smollm2_tokenizer
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2?"}]
    python = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    python = list(python["input_ids"] if isinstance(python, dict) or hasattr(python, "keys") else python)
    assert runner_prompt_ids(path, "What is 2 + 2?", "--system_prompt", "Be brief.") == python


# ---- errors: a message naming the flag / file, exit code 1 --------------------------------------------
def _error_cases(tmp_path: Path, pte: Path) -> List[Tuple[List[str], str]]:
    prompt = tmp_path / "prompt.bin"
    np.asarray(PROMPT, np.uint64).tofile(prompt)
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"1234567")
    outside = tmp_path / "outside.bin"
    np.asarray([VOCAB + 5], np.uint64).tofile(outside)
    not_json = tmp_path / "tokenizer.txt"
    not_json.write_text("not a tokenizer")
    not_pte = tmp_path / "model.pte"
    not_pte.write_bytes(b"\x00" * 64)
    missing = str(tmp_path / "missing.pte")
    model = ["--model_path", str(pte)]
    return [
        (["--model_path", missing, "--tokenized_prompt", str(prompt)], f"--model_path '{missing}' cannot be opened"),
        (["--model_path", str(not_pte), "--tokenized_prompt", str(prompt)], "is not a valid program"),
        ([*model, "--tokenized_prompt", str(odd)], "has 7 bytes"),
        ([*model, "--tokenized_prompt", str(tmp_path / "none.bin")], "--tokenized_prompt"),
        ([*model, "--tokenized_prompt", str(outside)], "outside the model's vocabulary of 128"),
        ([*model, "--prompt", "Hi"], "--prompt needs --tokenizer_path"),
        ([*model, "--prompt", "Hi", "--tokenizer_path", str(not_json)], f"--tokenizer_path '{not_json}'"),
        ([*model, "--prompt", "Hi", "--tokenizer_path", str(tmp_path)], "is not a file"),
        ([*model, "--tokenized_prompt", str(prompt), "--temperature", "-1"], "--temperature '-1' is invalid"),
        ([*model, "--tokenized_prompt", str(prompt), "--top_p", "0"], "--top_p '0' is invalid"),
        ([*model, "--tokenized_prompt", str(prompt), "--eval_mode", "lookahead"], "--eval_mode 'lookahead'"),
        ([*model, "--tokenized_prompt", str(prompt), "--engine", "gpu"], "--engine 'gpu' is invalid"),
        ([*model, "--tokenized_prompt", str(prompt), "--seq_len", "x"], "--seq_len 'x' is invalid"),
        ([*model, "--tokenized_prompt", str(prompt), "--decoder_model_version", "gemma"], "--decoder_model_version"),
        ([*model, "--tokenized_prompt", str(prompt), "--bogus", "1"], "unknown flag --bogus"),
        ([*model, "--tokenized_prompt"], "--tokenized_prompt needs a value"),
        (["--tokenized_prompt", str(prompt)], "--model_path is required"),
        (model, "give --prompt"),
    ]


def test_runner_bad_input_gives_a_clear_error(exported, tmp_path):
    """Each case exits 1 with a message naming the flag, the file or the limit."""
    pte = exported("llama", "fp16")
    for flags, message in _error_cases(tmp_path, pte):
        result = run_llama_runner(flags, timeout=60)
        assert result.returncode == 1, (flags, result.stdout, result.stderr)
        assert message in result.stderr, (flags, result.stderr)


def test_runner_refuses_a_program_that_is_not_a_static_llm(tmp_path):
    """A .pte without the decode method / metadata: InvalidProgram naming the method."""
    import torch

    from executorch.exir import to_edge

    class Add(torch.nn.Module):
        def forward(self, x):
            return x + 1

    program = to_edge(torch.export.export(Add(), (torch.ones(2),))).to_executorch()
    pte = tmp_path / "add.pte"
    pte.write_bytes(program.buffer)
    prompt = tmp_path / "prompt.bin"
    np.asarray(PROMPT, np.uint64).tofile(prompt)
    result = run_llama_runner(["--model_path", str(pte), "--tokenized_prompt", str(prompt)], timeout=60)
    assert result.returncode == 1
    assert "has no method 'decode'" in result.stderr and "InvalidProgram" in result.stderr


# ---- SmolLM2-135M ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_runner_generates_smollm2_text_like_the_python_loop(smollm2_tokenizer, tmp_path):
    """SmolLM2-135M fp16 (context 128, AR 32, payload only, host engine), ChatML prompt through the
    runner's tokenizer and template: 16 greedy tokens equal to generate()'s on the same ids, and the
    streamed text is their decoding."""
    from backends.qualcomm.llm import export_static_llm
    from backends.qualcomm.llm.gguf_llama import load_gguf_llama, smollm2_gguf_path
    from backends.qualcomm.utils.qnn_context import AOT_ENV

    path, tokenizer = smollm2_tokenizer
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(AOT_ENV, "0")
        result = export_static_llm(load_gguf_llama(smollm2_gguf_path()), tmp_path / "smollm2.pte", "fp16", 128, 32)
    tokens_file, perf = tmp_path / "tokens.txt", tmp_path / "perf.txt"
    question = "What is the capital of France?"
    run = run_llama_runner(
        [
            "--model_path",
            str(result.path),
            "--tokenizer_path",
            str(path),
            "--prompt",
            question,
            "--seq_len",
            "128",
            "--engine",
            "host",
            "--output_tokens_path",
            str(tokens_file),
            "--performance_output_path",
            str(perf),
        ]
    )
    assert run.returncode == 0, run.stderr
    lines = dict(line.split(":", 1) for line in tokens_file.read_text().splitlines())
    prompt = [int(t) for t in lines["prompt"].split()]
    generated = [int(t) for t in lines["generated"].split()]
    print(run.stdout, perf.read_text(), json.dumps(tokenizer.decode(generated)))
    python = generate(result.path, prompt, len(generated), engine="host").tokens
    assert generated == python
    chatml = f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
    assert prompt == tokenizer(chatml, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(generated, skip_special_tokens=True).strip() in run.stdout
