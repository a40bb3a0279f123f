"""Accuracy of an exported LLM: perplexity on a fixed text and greedy-token agreement.

    calibration, evaluation = pydoc_texts()            # disjoint halves of Python's pydoc prose
    windows = token_windows(tokenizer(evaluation), 512, 2)
    ppl = program_perplexity(program, windows)         # a PteProgram / ModuleProgram, prefill only
    ref = hf_greedy_tokens(hf_model, prompts, 64)      # eager float32 greedy continuations
    agreement = token_agreement(program, prompts, ref) # teacher-forced argmax == reference

Perplexity is exp(mean negative log-likelihood) of every token of a window but its first, given
the tokens before it (a window is one sequence starting at position 0; windows do not share a
cache). Agreement is measured teacher-forced: the program reads the prompt and the reference's
own greedy tokens, and at each of those positions its argmax is compared with the reference's
token, so one early difference does not decide the rest (a free-running generation diverges
for good at its first different token; `matched_prefix` reports that length too).

The text comes from `pydoc_data.topics` (English prose shipped with Python): the topics sorted by
name, every fourth one (starting with the first) is evaluation text, the others calibration text,
so the two never overlap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence, Tuple

import numpy as np
import torch

# Every EVALUATION_STRIDE-th pydoc topic (sorted by name) is evaluation text, the rest calibration.
EVALUATION_STRIDE = 4

# The five prompts of the agreement measurement.
AGREEMENT_PROMPTS = (
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "To sort a list of numbers in Python, you can",
    "The three primary colors are",
    "Photosynthesis is the process by which plants",
)


def pydoc_texts() -> Tuple[str, str]:
    """(calibration text, evaluation text): disjoint sets of pydoc topics, each joined by newlines."""
    from pydoc_data.topics import topics

    names = sorted(topics)
    evaluation = [topics[n] for i, n in enumerate(names) if i % EVALUATION_STRIDE == 0]
    calibration = [topics[n] for i, n in enumerate(names) if i % EVALUATION_STRIDE != 0]
    return "\n".join(calibration), "\n".join(evaluation)


def token_windows(ids: Sequence[int], length: int, count: int, stride: int = 0) -> List[List[int]]:
    """`count` windows of `length` tokens from `ids`, consecutive (stride 0: stride = length)."""
    stride = stride or length
    windows = [list(ids[i : i + length]) for i in range(0, stride * count, stride)]
    if len(windows) < count or len(windows[-1]) < length:
        raise ValueError(f"{len(ids)} tokens do not hold {count} windows of {length} (stride {stride})")
    return windows


def token_nll(logits: np.ndarray, ids: Sequence[int]) -> np.ndarray:
    """Negative log-likelihood of ids[1:] under logits[:-1] ([len(ids), vocab] -> [len(ids) - 1]),
    in float64."""
    logits = np.asarray(logits, np.float64)[: len(ids) - 1]
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_z = np.log(np.exp(shifted).sum(axis=-1))
    targets = np.asarray(ids[1:], np.int64)
    return log_z - shifted[np.arange(len(targets)), targets]


def perplexity(nll: np.ndarray) -> float:
    """exp(mean NLL)."""
    return float(np.exp(np.mean(nll)))


def program_perplexity(program, windows: Sequence[Sequence[int]]) -> float:
    """Perplexity of a static-cache program (PteProgram / ModuleProgram) over `windows`, each read
    from position 0 by prefill calls only (a window of at most the context length)."""
    from backends.qualcomm.llm.generate import teacher_forced

    nll = [token_nll(teacher_forced(program, w, prompt_len=len(w)), w) for w in windows]
    return perplexity(np.concatenate(nll))


def hf_logits(model: torch.nn.Module, ids: Sequence[int]) -> np.ndarray:
    """Logits [len, vocab] of a Hugging Face causal LM in one forward (no cache)."""
    with torch.no_grad():
        return model(input_ids=torch.tensor([list(ids)]), use_cache=False).logits[0].float().numpy()


def hf_perplexity(model: torch.nn.Module, windows: Sequence[Sequence[int]]) -> float:
    return perplexity(np.concatenate([token_nll(hf_logits(model, w), w) for w in windows]))


def hf_greedy_tokens(model: torch.nn.Module, prompts: Sequence[Sequence[int]], n: int) -> List[List[int]]:
    """n greedy tokens after each prompt (the HF model's own KV cache)."""
    out = []
    with torch.no_grad():
        for prompt in prompts:
            ids = torch.tensor([list(prompt)])
            generated = model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)
            out.append(generated[0, len(prompt) :].tolist())
    return out


@dataclass
class Agreement:
    equal: int  # teacher-forced positions whose argmax equals the reference token
    total: int
    matched_prefix: List[int]  # per prompt: reference tokens matched before the first difference

    @property
    def fraction(self) -> float:
        return self.equal / self.total if self.total else 0.0

    def describe(self) -> str:
        return (
            f"{self.fraction:.1%} ({self.equal}/{self.total}) teacher-forced argmax equal; "
            f"free-running prefix {self.matched_prefix}"
        )


def argmax_agreement(logits: Sequence[np.ndarray], references: Sequence[Sequence[int]]) -> Agreement:
    """Per prompt the logits of its reference positions [n, vocab] against the reference tokens."""
    equal, total, prefixes = 0, 0, []
    for rows, ref in zip(logits, references):
        hits = np.argmax(np.asarray(rows), axis=-1)[: len(ref)] == np.asarray(ref)
        equal += int(hits.sum())
        total += len(ref)
        misses = np.flatnonzero(~hits)
        prefixes.append(int(misses[0]) if misses.size else len(ref))
    return Agreement(equal, total, prefixes)


def token_agreement(program, prompts: Sequence[Sequence[int]], references: Sequence[Sequence[int]]) -> Agreement:
    """Teacher-forced: each prompt by prefill, then its reference tokens one decode call each;
    the argmax at every reference position compared with the reference token."""
    from backends.qualcomm.llm.generate import teacher_forced

    rows = []
    for prompt, ref in zip(prompts, references):
        ids = list(prompt) + list(ref)
        logits = teacher_forced(program, ids[:-1], prompt_len=len(prompt))
        rows.append(logits[len(prompt) - 1 :])
    return argmax_agreement(rows, references)


# ---- weight-only analysis: which weights lose the accuracy -------------------------------------------
def fake_quantize_weight(
    weight: torch.Tensor, bits: int, block_size: int = 0, mse_search: bool = False
) -> torch.Tensor:
    """The weight as the QDQ reference sees it: `bits` 4 with block_size > 0 is LPBQ (4-bit
    symmetric codes, per block an integer multiple 1..15 of a per-channel scale: the recipe's
    LpbqObserver numerics, `mse_search` picking each block's multiple by squared error), else
    symmetric per output channel (int8 for 16a8w)."""
    from backends.qualcomm.quantizer.observers import effective_scales, lpbq_mse_block_ints, lpbq_scales

    qmin, qmax = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    w = weight.detach().float()
    if block_size:
        block = (1, int(block_size))
        channel, ints = lpbq_scales(w, block, qmin, qmax, 4)
        if mse_search:
            ints = lpbq_mse_block_ints(w, block, channel, qmin, qmax, 15)
        scale = effective_scales(channel, ints).repeat_interleave(int(block_size), dim=1)
    else:
        scale = (w.abs().amax(dim=1, keepdim=True) / ((qmax - qmin) / 2)).clamp(min=2**-24)
    return torch.clamp(torch.round(w / scale), qmin, qmax) * scale


def fake_quantize_linears(
    model: torch.nn.Module, pattern: str, bits: int, block_size: int = 0, mse_search: bool = False
) -> List[str]:
    """Replaces (in place) the weight of every nn.Linear whose qualified name matches the regex
    `pattern` by fake_quantize_weight(...) (a new parameter: a tied output head is untied, the
    embedding keeps its float table); returns the names."""
    import re

    done = []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and re.search(pattern, name):
            fake = fake_quantize_weight(module.weight, bits, block_size, mse_search)
            module.weight = torch.nn.Parameter(fake, requires_grad=False)
            done.append(name)
    return done
