"""ExecuTorch's own TextLLMRunner (the executorch wheel's Python binding,
`executorch.extension.llm.runner`) on a program of `export_static_llm(..., text_llm_runner=True)`:
the tiny Llama of helpers/tiny_llm.py, fp16. Its greedy token ids against our generate() on the
prefill / decode program of the same model, on the host engine and on QNN (x86 emulation); the
program's layout; 16a8w and 16a4w_block programs against their QDQ reference (host engine and
QNN); the runner's error on a prompt longer than the context; the export's errors.

The tokenizer is a byte-level BPE with one token per ASCII byte (id = byte, no merges), so that
every token the runner streams is one character and gives back its id."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from backends.qualcomm.llm import export_static_llm, generate
from backends.qualcomm.tests.helpers.tiny_llm import CALIBRATION, CONTEXT, QNN_LOADED, VOCAB, export_tiny, hf_model
from backends.qualcomm.utils.qnn_context import AOT_ENV

runner_module = pytest.importorskip("executorch.extension.llm.runner")

PROMPT_TEXT = "Hello, tiny Llama!"
NEW_TOKENS = 8


def _bytes_to_unicode() -> dict:
    """GPT-2's byte -> printable character table (the ByteLevel pre-tokenizer's alphabet)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, chars)))


@pytest.fixture(scope="module")
def ascii_tokenizer(tmp_path_factory) -> Path:
    """tokenizer.json: byte-level BPE over the 128 ASCII bytes, id = byte value, no merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    table = _bytes_to_unicode()
    tokenizer = Tokenizer(models.BPE(vocab={table[b]: b for b in range(VOCAB)}, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    path = tmp_path_factory.mktemp("ascii_tokenizer") / "tokenizer.json"
    tokenizer.save(str(path))
    assert tokenizer.encode(PROMPT_TEXT).ids == list(PROMPT_TEXT.encode())
    return path


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    """(forward program, prefill / decode program) of the same tiny Llama, fp16; with QNN context
    binaries when QNN's library loads."""
    folder = tmp_path_factory.mktemp("text_llm_runner")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(AOT_ENV, "1" if QNN_LOADED else "0")
        forward = export_static_llm(
            hf_model("llama"), folder / "forward.pte", "fp16", context_len=CONTEXT, text_llm_runner=True
        )
    _, static = export_tiny("llama", "fp16", tmp_path_factory)
    return forward.path, static.path


def runner_tokens(
    pte: Path, tokenizer: Path, prompt: str, new_tokens: int, engine: str, runs: int = 1
) -> List[List[int]]:
    """The ids TextLLMRunner generates greedily (each streamed piece is one ASCII byte), `runs`
    times with reset() in between."""
    from backends.qualcomm.debugger.engine_comparison import runtime_engine

    results = []
    with runtime_engine(engine):  # restores "auto": the option is process-wide
        runner = runner_module.TextLLMRunner(str(pte), str(tokenizer))
        config = runner_module.GenerationConfig(max_new_tokens=new_tokens, temperature=0.0, echo=False)
        for _ in range(runs):
            pieces: List[str] = []
            runner.generate(prompt, config, pieces.append)
            assert all(len(p) == 1 for p in pieces), pieces
            results.append([ord(p) for p in pieces])
            runner.reset()
        del runner
    return results


def forward_plan_operators(pte: Path) -> tuple:
    """(CPU operator names, number of delegates) of the program's forward method."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    program = deserialize_pte_binary(pte.read_bytes())
    program = getattr(program, "program", program)
    plan = next(p for p in program.execution_plan if p.name == "forward")
    return [op.name for op in plan.operators], len(plan.delegates)


def test_forward_program_has_the_runner_layout(programs):
    """forward: 2 inputs (int64 tokens [1, 1], int64 input_pos [1]) and 1 output (logits [1, 1,
    vocab]), one delegate and on the CPU only the caches' write-back; the metadata TextLLMRunner
    reads, as integers; get_eos_ids one integer per id."""
    from executorch.runtime import Runtime

    assert forward_plan_operators(programs[0]) == (["aten::copy_"], 1)
    program = Runtime.get().load_program(str(programs[0]))
    assert "forward" in program.method_names and not {"prefill", "decode"} & set(program.method_names)
    meta = program.metadata("forward")
    assert meta.num_inputs() == 2 and meta.num_outputs() == 1
    assert [list(meta.input_tensor_meta(i).sizes()) for i in range(2)] == [[1, 1], [1]]
    assert list(meta.output_tensor_meta(0).sizes()) == [1, 1, VOCAB]
    values = {name: program.load_method(name).execute([]) for name in program.method_names if name != "forward"}
    for name in ("get_max_seq_len", "get_max_context_len"):
        assert values[name] == [CONTEXT], name
    assert values["get_vocab_size"] == [VOCAB]
    assert values["use_kv_cache"] == [True] and values["enable_dynamic_shape"] == [False]
    assert values["get_eos_ids"] == [2]  # LlamaConfig's eos_token_id, as one integer


def test_text_llm_runner_tokens_equal_generate_on_the_host_engine(programs, ascii_tokenizer):
    """8 greedy tokens of TextLLMRunner (prefill token by token through `forward`, the cache in the
    program) equal generate()'s on the prefill / decode program; a second generation after
    reset() gives them again (the stale cache is masked)."""
    forward, static = programs
    prompt = list(PROMPT_TEXT.encode())
    expected = generate(static, prompt, NEW_TOKENS, engine="host").tokens
    assert len(expected) == NEW_TOKENS
    assert runner_tokens(forward, ascii_tokenizer, PROMPT_TEXT, NEW_TOKENS, "host", runs=2) == [expected] * 2


def test_text_llm_runner_refuses_a_prompt_longer_than_the_context(programs, ascii_tokenizer, capfd):
    """A prompt of CONTEXT tokens: the runner's error (no crash), naming max_context_len."""
    from backends.qualcomm.debugger.engine_comparison import runtime_engine

    with runtime_engine("host"):
        runner = runner_module.TextLLMRunner(str(programs[0]), str(ascii_tokenizer))
        config = runner_module.GenerationConfig(max_new_tokens=4, temperature=0.0, echo=False)
        with pytest.raises(RuntimeError, match="Generation failed"):
            runner.generate("x" * CONTEXT, config)
    assert "max_context_len 64" in capfd.readouterr().err


def test_text_llm_runner_refuses_a_prefill_decode_program(programs, ascii_tokenizer, tmp_path):
    """The prefill / decode program (caches as inputs) given to TextLLMRunner: its IOManager's
    error, raised as RuntimeError; the process does not abort (get_eos_ids is read as integers).
    Run in a subprocess so that an abort fails this test only."""
    script = tmp_path / "run.py"
    script.write_text(
        "import backends.qualcomm\n"
        "from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner\n"
        f"runner = TextLLMRunner({str(programs[1])!r}, {str(ascii_tokenizer)!r})\n"
        "try:\n"
        "    runner.generate('Hi', GenerationConfig(max_new_tokens=2, temperature=0.0, echo=False))\n"
        "except RuntimeError as error:\n"
        "    print('raised', error)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[4]))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "raised Generation failed" in run.stdout
    assert "Expected 2 inputs for decode method, got 7" in run.stderr


@pytest.mark.qnn
def test_text_llm_runner_tokens_equal_generate_on_qnn(programs, ascii_tokenizer):
    """The same on QNN's HTP emulation (3 tokens): TextLLMRunner's ids equal generate()'s on QNN."""
    forward, static = programs
    prompt = list(PROMPT_TEXT.encode())
    expected = generate(static, prompt, 3, engine="qnn").tokens
    assert runner_tokens(forward, ascii_tokenizer, PROMPT_TEXT, 3, "qnn") == [expected]


def qdq_greedy(module, prompt: List[int], new_tokens: int) -> List[int]:
    """Greedy ids of a forward module (the converted QDQ reference) fed one token per call."""
    import torch

    with torch.no_grad():
        for position, token in enumerate(prompt):
            logits = module(torch.tensor([[token]]), torch.tensor([position]))
        ids = [int(logits[0, -1].argmax())]
        for i in range(new_tokens - 1):
            logits = module(torch.tensor([[ids[-1]]]), torch.tensor([len(prompt) + i]))
            ids.append(int(logits[0, -1].argmax()))
    return ids


@pytest.mark.parametrize("recipe", ["16a8w", "16a4w_block"])
def test_text_llm_runner_quantized_program_tokens_equal_the_qdq_reference(recipe, ascii_tokenizer, tmp_path):
    """Quantized forward programs: TextLLMRunner's 8 greedy ids on the host engine equal the QDQ
    reference's (the converted forward module fed the same way), and its first 3 on QNN (when it
    loads) too."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(AOT_ENV, "1" if QNN_LOADED else "0")
        result = export_static_llm(
            hf_model("llama"), tmp_path / "q.pte", recipe, CONTEXT, calibration=CALIBRATION, text_llm_runner=True
        )
    assert forward_plan_operators(result.path) == (["aten::copy_"], 1)
    expected = qdq_greedy(result.modules["forward"], list(PROMPT_TEXT.encode()), NEW_TOKENS)
    assert runner_tokens(result.path, ascii_tokenizer, PROMPT_TEXT, NEW_TOKENS, "host") == [expected]
    if QNN_LOADED:
        assert runner_tokens(result.path, ascii_tokenizer, PROMPT_TEXT, 3, "qnn") == [expected[:3]]


@pytest.mark.parametrize(
    "options, message",
    [
        ({"recipe": "16a8w"}, "calibration needs at least one token sequence"),
        ({"recipe": "fp16", "num_sharding": 2}, "num_sharding must be 1"),
        ({"recipe": "fp16", "online_prepare": True}, "online_prepare is not supported"),
    ],
)
def test_text_llm_runner_export_refuses_unsupported_options(options, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        export_static_llm(hf_model("llama"), tmp_path / "m.pte", context_len=CONTEXT, text_llm_runner=True, **options)


def test_command_line_exports_a_text_llm_runner_program(tmp_path, capsys):
    """`export --recipe fp16 --text-llm-runner` on a saved HF folder writes the forward program."""
    from backends.qualcomm.llm.__main__ import main

    hf_model("llama").save_pretrained(tmp_path / "hf")
    pte = tmp_path / "cli.pte"
    flags = ["--output", str(pte), "--recipe", "fp16", "--context-len", str(CONTEXT), "--text-llm-runner"]
    assert main(["export", "--model", str(tmp_path / "hf"), *flags]) == 0
    assert "exported cli.pte (fp16, context 64, AR 1)" in capsys.readouterr().out
    assert forward_plan_operators(pte) == (["aten::copy_"], 1)
