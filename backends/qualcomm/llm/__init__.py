"""LLMs with a static KV cache: a Hugging Face decoder (Llama / Qwen2 / Qwen3) exported as one .pte
with `prefill` and `decode` methods sharing weights (export.py), and the generation loop that
owns the cache (generate.py). The module and the cache layout: static_decoder.py; docs/llm.md."""

from backends.qualcomm.llm.export import RECIPES, ExportResult, export_static_llm, static_modules
from backends.qualcomm.llm.generate import (
    GenerationResult,
    GenerationStats,
    KvCache,
    ModuleProgram,
    PteProgram,
    generate,
    prefill,
    sample,
    teacher_forced,
)
from backends.qualcomm.llm.static_decoder import MASK_VALUE, DecoderShape, StaticDecoder, causal_mask

__all__ = [
    "RECIPES",
    "ExportResult",
    "export_static_llm",
    "static_modules",
    "GenerationResult",
    "GenerationStats",
    "KvCache",
    "ModuleProgram",
    "PteProgram",
    "generate",
    "prefill",
    "sample",
    "teacher_forced",
    "MASK_VALUE",
    "DecoderShape",
    "StaticDecoder",
    "causal_mask",
]
