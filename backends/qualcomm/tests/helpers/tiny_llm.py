"""Tiny random-weight Hugging Face decoders and their static-KV-cache export, shared by the LLM
tests (tests/llm/): Llama / Qwen2 / Qwen3 configs with 2 layers, hidden 64, 4 query / 2 KV heads,
vocab 128, context 64, prefill chunks of 8 tokens (the 11-token PROMPT takes a full chunk and a
padded one). initializer_range 0.1 (HF's default 0.02 gives near-uniform logits whose greedy
tokens are ties)."""

from __future__ import annotations

from typing import List, Sequence

import numpy as np
import torch

from backends.qualcomm.utils.qnn_context import AOT_ENV, qnn_library_status

CONTEXT, AR_LEN, VOCAB = 64, 8, 128
PROMPT = torch.randint(0, VOCAB, (11,), generator=torch.Generator().manual_seed(9)).tolist()
CALIBRATION = [torch.randint(0, VOCAB, (24,), generator=torch.Generator().manual_seed(s)).tolist() for s in range(3)]
QNN_LOADED, _ = qnn_library_status()


def hf_model(
    kind: str,
    tie: bool = False,
    layers: int = 2,
    hidden: int = 64,
    initializer_range: float = 0.1,
) -> torch.nn.Module:
    """A seeded tiny `kind` (llama / qwen2 / qwen3) model with `layers` layers, `hidden` wide (MLP
    twice that), float32, eval mode."""
    import transformers

    configs = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
    }
    config_type, model_type = configs[kind]
    torch.manual_seed(0)
    config = config_type(
        vocab_size=VOCAB,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=CONTEXT,
        initializer_range=initializer_range,
        tie_word_embeddings=tie,
    )
    return model_type(config).eval()


def hf_logits(model: torch.nn.Module, ids: Sequence[int]) -> np.ndarray:
    """HF's full forward over `ids` (no cache): logits [len, vocab]."""
    with torch.no_grad():
        return model(input_ids=torch.tensor([list(ids)]), use_cache=False).logits[0].numpy()


def hf_greedy(model: torch.nn.Module, prompt: Sequence[int], n: int) -> List[int]:
    """n greedy tokens after `prompt`, each from a full forward."""
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(hf_logits(model, ids)[-1].argmax()))
    return ids[len(prompt) :]


def export_tiny(
    kind: str,
    recipe: str,
    tmp_path_factory,
    tie: bool = False,
    layers: int = 2,
    num_sharding: int = 1,
    qnn_binaries: bool = True,
    **export_options,
):
    """(model, ExportResult) of a tiny `kind` model exported in `recipe` into a fresh folder; with
    QNN context binaries when QNN's library loads (and `qnn_binaries`); `export_options` go to
    export_static_llm."""
    import pytest

    from backends.qualcomm.llm import export_static_llm

    model = hf_model(kind, tie, layers)
    path = tmp_path_factory.mktemp(f"{kind}_{recipe}_{layers}l_{num_sharding}s") / "model.pte"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(AOT_ENV, "1" if QNN_LOADED and qnn_binaries else "0")
        result = export_static_llm(
            model,
            path,
            recipe,
            context_len=CONTEXT,
            ar_len=AR_LEN,
            calibration=CALIBRATION,
            num_sharding=num_sharding,
            **export_options,
        )
    return model, result


def qnn_teacher_forced(pte, ids: Sequence[int], prompt_len: int) -> np.ndarray:
    """teacher_forced logits of `pte` on QNN (x86 HTP emulation); the program is closed and
    collected after (QNN contexts are released when their program is)."""
    import gc

    from backends.qualcomm.llm import PteProgram, teacher_forced

    program = PteProgram(pte, "qnn")
    try:
        return teacher_forced(program, ids, prompt_len=prompt_len)
    finally:
        program.close()
        gc.collect()
