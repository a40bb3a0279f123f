"""Token generation with a static-KV-cache program: the loop owns the cache.

    result = generate("model.pte", prompt_ids, max_new_tokens=32, engine="host",
                      temperature=0.0, top_p=1.0, on_token=print)
    result.tokens, result.stats.prefill_tok_s, result.stats.decode_tok_s, result.stats.ttft_s

The program is a .pte from export.py (methods `prefill` and `decode`, see static_decoder.py for
their inputs and outputs), run through ExecuTorch's runtime on the engine asked for
(`qnn_runtime_engine`: auto / qnn / host), or any pair of Python callables with the same
signature (ModuleProgram: the eager StaticDecoder, a PT2E-prepared or converted module).

The loop keeps one K buffer [1, kv, D, C - 1] and one V buffer [1, kv, C - 1, D] per layer
(float32; the decode method's past-cache shape). Slot s holds position s. Prefill runs the prompt
in chunks of the prefill method's N tokens (the last chunk padded, its padded rows masked out and
their outputs dropped) and gets the first C - N slots of each buffer; decode runs one token per
call over all C - 1 slots. After each call only the new entries are written into the buffers, at
their positions; the mask shows each query the slots already written and the new entries up to
its own position.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from backends.qualcomm.llm.static_decoder import DecoderShape, causal_mask


# ---- programs: something that runs `prefill` / `decode` ----------------------------------------
class ModuleProgram:
    """Methods as Python callables (StaticDecoder modules, prepared or converted GraphModules)."""

    def __init__(self, modules: Mapping[str, Callable], shape: DecoderShape, eos_ids: Sequence[int] = ()):
        from torch.fx import GraphModule

        from backends.qualcomm.llm.cache_codes import cache_dtype

        self.modules = dict(modules)
        self.shape = shape
        self.eos_ids = list(eos_ids)
        decode = self.modules.get("decode")
        dtype = cache_dtype(decode) if isinstance(decode, GraphModule) else torch.float32
        self.cache_dtype = np.uint8 if dtype == torch.uint8 else np.float32

    def tokens_per_call(self, method: str) -> int:
        return self.shape.ar_len if method == "prefill" else 1

    def has(self, method: str) -> bool:
        return method in self.modules

    def run(self, method: str, inputs: List[torch.Tensor]) -> List[np.ndarray]:
        with torch.no_grad():
            outputs = self.modules[method](*inputs)
        return [o.detach().numpy() for o in outputs]


def read_metadata(program) -> Tuple[DecoderShape, List[int]]:
    """The decoder shape and EOS ids an export_static_llm program stores in its get_* methods."""

    def constant(name: str):
        outputs = program.load_method(name).execute([])
        if name == "get_eos_ids":  # one integer output per id (older programs: one int64 tensor)
            return outputs
        value = outputs[0]
        return value.item() if isinstance(value, torch.Tensor) and value.numel() == 1 else value

    meta = {name: constant(name) for name in program.method_names if name.startswith("get_")}
    shape = DecoderShape(
        n_layers=meta["get_n_layers"],
        n_heads=-1,
        n_kv_heads=meta["get_n_kv_heads"],
        head_dim=meta["get_head_dim"],
        hidden=meta.get("get_dim", -1),
        vocab_size=meta["get_vocab_size"],
        context_len=meta["get_max_context_len"],
        ar_len=meta["get_ar_len"],
    )
    eos = meta.get("get_eos_ids")
    eos_ids = [int(e) for e in np.asarray(eos).ravel() if int(e) >= 0] if eos is not None else []
    return shape, eos_ids


class PteProgram:
    """A .pte from export.py, run by ExecuTorch's runtime on `engine` (auto / qnn / host); both
    methods are loaded at construction (`load_s`: the seconds that took)."""

    def __init__(self, path: Union[str, Path], engine: str = "auto"):
        import backends.qualcomm  # noqa: F401  (registers the QnnDelegate backend)
        from backends.qualcomm import set_runtime_option
        from executorch.runtime import Runtime

        set_runtime_option("qnn_runtime_engine", engine)
        self.engine = engine
        self.path = Path(path)
        self._program = Runtime.get().load_program(str(path))
        names = set(self._program.method_names)
        missing = {"decode"} - names
        if missing:
            raise ValueError(f"{path}: no method {sorted(missing)} (methods: {sorted(names)})")
        self.shape, self.eos_ids = read_metadata(self._program)
        self.cache_dtype = program_cache_dtype(self._program, self.shape)
        self._names = names
        # Both methods are loaded now (the delegate's init: QNN context or host-engine graph), so that
        # generate() times execution only.
        t = time.perf_counter()
        self._methods: Dict[str, object] = {
            m: self._program.load_method(m) for m in ("prefill", "decode") if m in names
        }
        self.load_s = time.perf_counter() - t

    def has(self, method: str) -> bool:
        return method in self._names

    def tokens_per_call(self, method: str) -> int:
        return self.shape.ar_len if method == "prefill" else 1

    def run(self, method: str, inputs: List[torch.Tensor]) -> List[np.ndarray]:
        if method not in self._methods:
            self._methods[method] = self._program.load_method(method)
        outputs = self._methods[method].execute(inputs)
        return [o.numpy() if isinstance(o, torch.Tensor) else np.asarray(o) for o in outputs]

    def close(self) -> None:
        self._methods.clear()
        self._program = None


Program = Union[ModuleProgram, PteProgram]

# ExecuTorch ScalarType codes of the cache inputs a program may have (export's cache_codes_io: uint8)
_CACHE_DTYPES = {0: np.uint8, 6: np.float32}


def program_cache_dtype(program, shape: DecoderShape):
    """numpy dtype of the decode method's cache inputs (float32, or uint8 codes)."""
    code = int(program.metadata("decode").input_tensor_meta(3).dtype()) if shape.n_layers else 6
    if code not in _CACHE_DTYPES:
        raise ValueError(f"decode's cache input has ScalarType {code}; a static LLM's cache is float32 or uint8")
    return _CACHE_DTYPES[code]


# ---- the cache -----------------------------------------------------------------------------------
class KvCache:
    """Per layer a K buffer [1, kv, D, C - 1] and a V buffer [1, kv, C - 1, D] of `dtype`: float32,
    or uint8 codes for a program whose 8-bit cache is uint8 I/O (the program's `cache_dtype`)."""

    def __init__(self, shape: DecoderShape, dtype=np.float32):
        self.shape = shape
        slots = shape.context_len - 1
        self.k = [np.zeros((1, shape.n_kv_heads, shape.head_dim, slots), dtype) for _ in range(shape.n_layers)]
        self.v = [np.zeros((1, shape.n_kv_heads, slots, shape.head_dim), dtype) for _ in range(shape.n_layers)]

    def inputs(self, n_tokens: int) -> List[torch.Tensor]:
        """The past caches of a call of n_tokens: the first C - n_tokens slots (decode: all of
        them, no copy; prefill: a contiguous copy of the prefix of each buffer)."""
        past = self.shape.context_len - n_tokens
        if past == self.k[0].shape[-1]:
            return [torch.from_numpy(k) for k in self.k] + [torch.from_numpy(v) for v in self.v]
        return [torch.from_numpy(np.ascontiguousarray(k[..., :past])) for k in self.k] + [
            torch.from_numpy(np.ascontiguousarray(v[:, :, :past])) for v in self.v
        ]

    def write(self, outputs: List[np.ndarray], start: int, n_valid: int) -> None:
        """New entries of a call (outputs 1 .. 2L) written at positions start .. start + n_valid - 1."""
        n_layers = self.shape.n_layers
        stop = min(start + n_valid, self.k[0].shape[-1])  # the last position's entries are never read
        n = stop - start
        if n <= 0:
            return
        for i in range(n_layers):
            self.k[i][..., start:stop] = outputs[1 + i][..., :n]
            self.v[i][:, :, start:stop] = outputs[1 + n_layers + i][:, :, :n]


# ---- one call ------------------------------------------------------------------------------------
def _call(program: Program, cache: KvCache, method: str, tokens: Sequence[int], start: int) -> np.ndarray:
    """Runs `method` on `tokens` at positions start.. (padded to the method's N), writes the new
    entries into `cache` and returns the logits of the valid rows [len(tokens), vocab]."""
    shape = cache.shape
    n = program.tokens_per_call(method)
    n_valid = len(tokens)
    ids = np.zeros((1, n), np.int32)
    ids[0, :n_valid] = tokens
    positions = np.minimum(np.arange(start, start + n, dtype=np.int32), shape.context_len - 1).reshape(1, n)
    mask = causal_mask(start, n_valid, n, shape.context_len)
    inputs = [torch.from_numpy(ids), torch.from_numpy(positions), torch.from_numpy(mask)] + cache.inputs(n)
    outputs = program.run(method, inputs)
    cache.write(outputs, start, n_valid)
    return outputs[0][0, :n_valid]


def prefill(
    program: Program, cache: KvCache, prompt: Sequence[int], start: int = 0, all_logits: bool = False
) -> np.ndarray:
    """Runs `prompt` (positions start..) through prefill chunks, then decode for a remainder
    a chunk cannot hold (a chunk's cache slots must start at or before C - N). Returns the
    logits of the last prompt token [vocab], or of every prompt token [len, vocab]."""
    context = cache.shape.context_len
    if start + len(prompt) > context:
        raise ValueError(f"prompt of {len(prompt)} tokens at position {start} exceeds the context of {context}")
    chunks: List[np.ndarray] = []
    pos = start
    n = program.tokens_per_call("prefill") if program.has("prefill") else 0
    while pos < start + len(prompt):
        todo = prompt[pos - start :]
        if n and pos <= context - n:
            take = list(todo[:n])
            chunks.append(_call(program, cache, "prefill", take, pos))
        else:
            take = list(todo[:1])
            chunks.append(_call(program, cache, "decode", take, pos))
        pos += len(take)
    logits = np.concatenate(chunks, axis=0)
    return logits if all_logits else logits[-1]


def teacher_forced(program: Program, ids: Sequence[int], prompt_len: Optional[int] = None) -> np.ndarray:
    """Logits of every position of `ids` [len, vocab]: the first prompt_len tokens (default
    half, at least 1) by prefill, the rest one decode call each (calibration; perplexity)."""
    ids = list(ids)
    cache = KvCache(program.shape, program.cache_dtype)
    prompt_len = max(1, len(ids) // 2) if prompt_len is None else prompt_len
    logits = [prefill(program, cache, ids[:prompt_len], all_logits=True)]
    for pos in range(prompt_len, len(ids)):
        logits.append(_call(program, cache, "decode", [ids[pos]], pos))
    return np.concatenate(logits, axis=0)


# ---- sampling and the loop -------------------------------------------------------------------------
def sample(
    logits: np.ndarray, temperature: float = 0.0, top_p: float = 1.0, rng: Optional[np.random.Generator] = None
) -> int:
    """Greedy when temperature == 0; else softmax(logits / temperature) restricted to the
    smallest set of tokens whose probability reaches top_p."""
    if temperature <= 0:
        return int(np.argmax(logits))
    rng = rng or np.random.default_rng()
    z = logits.astype(np.float64) / temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    if top_p < 1.0:
        order = np.argsort(-p)
        keep = order[: int(np.searchsorted(np.cumsum(p[order]), top_p) + 1)]
        q = np.zeros_like(p)
        q[keep] = p[keep]
        p = q / q.sum()
    return int(rng.choice(len(p), p=p))


@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    generated_tokens: int = 0
    prefill_s: float = 0.0  # all prefill calls (the prompt)
    decode_s: float = 0.0  # all decode calls after the first token
    ttft_s: float = 0.0  # from the start to the first generated token
    load_s: float = 0.0  # loading the program's methods (PteProgram), before the start
    stop_reason: str = ""

    @property
    def prefill_tok_s(self) -> float:
        return self.prompt_tokens / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def decode_tok_s(self) -> float:
        calls = max(0, self.generated_tokens - 1)
        return calls / self.decode_s if self.decode_s > 0 else 0.0

    def summary(self) -> str:
        return (
            f"load {self.load_s:.2f} s; prompt {self.prompt_tokens} tokens: prefill {self.prefill_tok_s:.1f} tok/s, time to first token "
            f"{self.ttft_s * 1000:.1f} ms; {self.generated_tokens} generated: decode {self.decode_tok_s:.1f} "
            f"tok/s; stop: {self.stop_reason}"
        )


@dataclass
class GenerationResult:
    tokens: List[int]  # the generated tokens (EOS included when hit)
    stats: GenerationStats
    logits: List[np.ndarray] = field(default_factory=list)  # per generated token (return_logits=True)


def generate(
    program: Union[str, Path, Program],
    prompt_ids: Sequence[int],
    max_new_tokens: int = 32,
    engine: str = "auto",
    temperature: float = 0.0,
    top_p: float = 1.0,
    on_token: Optional[Callable[[int], None]] = None,
    eos_ids: Optional[Sequence[int]] = None,
    seed: Optional[int] = None,
    return_logits: bool = False,
) -> GenerationResult:
    """Prefill `prompt_ids` then decode until an EOS token, max_new_tokens or the end of the
    context. `program`: a .pte path (run on `engine`) or a ModuleProgram / PteProgram.
    `on_token(token)` is called on every generated token as soon as it is sampled. `eos_ids`:
    default the program's (the HF model's generation config at export)."""
    owned = not isinstance(program, (ModuleProgram, PteProgram))
    if owned:
        program = PteProgram(program, engine)
    try:
        return _generate(
            program,
            list(prompt_ids),
            max_new_tokens,
            temperature,
            top_p,
            on_token,
            program.eos_ids if eos_ids is None else list(eos_ids),
            seed,
            return_logits,
        )
    finally:
        if owned:
            program.close()


def _generate(
    program: Program,
    prompt: List[int],
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    on_token,
    eos_ids: List[int],
    seed,
    return_logits: bool,
) -> GenerationResult:
    if not prompt:
        raise ValueError("generate: the prompt needs at least one token")
    shape = program.shape
    rng = np.random.default_rng(seed)
    stats = GenerationStats(prompt_tokens=len(prompt), load_s=float(getattr(program, "load_s", 0.0)))
    cache = KvCache(shape, program.cache_dtype)
    tokens: List[int] = []
    kept: List[np.ndarray] = []
    t0 = time.perf_counter()
    logits = prefill(program, cache, prompt)
    stats.prefill_s = time.perf_counter() - t0
    pos = len(prompt)
    decode_start = None
    while True:
        token = sample(logits, temperature, top_p, rng)
        if not tokens:
            stats.ttft_s = time.perf_counter() - t0
            decode_start = time.perf_counter()
        tokens.append(token)
        if return_logits:
            kept.append(logits.copy())
        if on_token is not None:
            on_token(token)
        if token in eos_ids:
            stats.stop_reason = "eos"
            break
        if len(tokens) >= max_new_tokens:
            stats.stop_reason = "max_new_tokens"
            break
        if pos >= shape.context_len:
            stats.stop_reason = "context"
            break
        logits = _call(program, cache, "decode", [token], pos)[0]
        pos += 1
    stats.decode_s = time.perf_counter() - decode_start if decode_start is not None else 0.0
    stats.generated_tokens = len(tokens)
    return GenerationResult(tokens, stats, kept)
