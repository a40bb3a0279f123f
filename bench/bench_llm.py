"""Benchmark: SmolLM2-135M generation, our delegate (host engine, per recipe) vs ExecuTorch's XNNPACK.

    python bench/bench_llm.py [--recipes fp16,16a8w,16a4w_block] [--xnnpack fp32,8da4w]
        [--pp 128] [--tg 64] [--reps 3] [--context-len 512] [--artifact artifacts/bench_llm]
        [--float-cache-io]

llama-bench's conventions: pp<N> = prefill of an N-token prompt (tok/s), tg<N> = N decoded tokens
(tok/s, one token per call), each the median of --reps rounds, plus the time to first token (the
prompt's prefill and the first sampled token) and the RSS the loaded program added to this process.
Our programs are exported by `export_static_llm` (payload only, run on the host engine: the
runtime option qnn_runtime_engine=host), prefilled in chunks of the prefill method's 32 tokens;
XNNPACK's are exported by ExecuTorch's own flow (`export_llama`: `-kv --use_sdpa_with_kv_cache -X`:
the cache updated and attended by ExecuTorch's custom sdpa_with_kv_cache kernel, as its LLM
examples export; fp32, and 8da4w (8-bit dynamic activations, 4-bit weights, group 32, 4-bit
embedding) with `-qmode 8da4w -G 32 -E 4,32`), prefilled in one call. Both from the same
dequantized GGUF weights. .pte files are cached in --artifact.

Per backend it also prints the bytes of weights and KV cache one decoded token reads (weights at
their storage width; our cache is attended over all C - 1 slots whatever the position, XNNPACK's
up to the position) and the bandwidth that implies at the measured tok/s, as a share of this
machine's read bandwidth (a numpy sum over 512 MB). The timed rounds are sampled by
bench/quiet.py's LoadMonitor; ratios are printed only when no other process used the cores. Not a test.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.quiet import LoadMonitor, LoadReport, add_load_arguments, cpu_description, refuse_if_loaded  # noqa: E402

# Storage bytes per weight of a linear: (bytes of the 4-bit / 8-bit codes + their scales).
WEIGHT_BYTES = {
    "fp16": {"linear": 2.0, "head": 2.0},
    "16a8w": {"linear": 1.0, "head": 1.0},
    "16a4w_block": {"linear": 0.5 + 0.5 / 32, "down_proj": 1.0, "head": 1.0},  # codes + 4-bit block scale
    "xnn_fp32": {"linear": 4.0, "head": 4.0},
    "xnn_8da4w": {"linear": 0.5 + 4.0 / 32, "head": 0.5 + 4.0 / 32},  # codes + fp32 scale per group of 32
}
XNNPACK_CACHE_BYTES = (
    4  # export_llama's caches are float32; ours: the program's cache dtype (uint8 with an 8-bit cache)
)


@dataclass
class Round:
    prefill_s: float  # the whole prompt
    ttft_s: float  # prompt prefill + first token
    decode_s: float  # the tg decode calls


@dataclass
class BackendResult:
    name: str
    pp: int
    tg: int
    rounds: List[Round]
    rss_mb: float
    bytes_per_token: float
    load: Optional[LoadReport] = None
    notes: Dict[str, str] = field(default_factory=dict)

    @property
    def prefill_tok_s(self) -> float:
        return self.pp / statistics.median(r.prefill_s for r in self.rounds)

    @property
    def decode_tok_s(self) -> float:
        return self.tg / statistics.median(r.decode_s for r in self.rounds)

    @property
    def ttft_ms(self) -> float:
        return 1000.0 * statistics.median(r.ttft_s for r in self.rounds)


# ---- bytes per decoded token ---------------------------------------------------------------------
def linear_sizes(config) -> Dict[str, int]:
    """Weights per kind of a Llama config: "linear" (attention and MLP but down_proj), "down_proj",
    "head" (the output projection; tied or not, a decoded token reads all of it)."""
    h, i, kv = config.hidden_size, config.intermediate_size, config.num_key_value_heads
    head_dim = h // config.num_attention_heads
    attention = h * h * 2 + 2 * h * kv * head_dim  # q, o + k, v
    layers = config.num_hidden_layers
    return {"linear": layers * (attention + 2 * h * i), "down_proj": layers * i * h, "head": h * config.vocab_size}


def weight_bytes_per_token(sizes: Dict[str, int], storage: Dict[str, float]) -> float:
    return sum(n * storage.get(kind, storage["linear"]) for kind, n in sizes.items())


def cache_bytes_per_token(config, slots: int, bytes_per_value: int) -> float:
    """K and V of every layer over `slots` positions."""
    head_dim = config.hidden_size // config.num_attention_heads
    return 2.0 * config.num_hidden_layers * config.num_key_value_heads * head_dim * slots * bytes_per_value


def read_bandwidth_gb_s(megabytes: int = 512, reps: int = 3) -> float:
    """This machine's read bandwidth: median of numpy sums over a `megabytes` float32 array."""
    import numpy as np

    a = np.ones(megabytes * (1 << 20) // 4, np.float32)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        a.sum()
        times.append(time.perf_counter() - t)
    return a.nbytes / statistics.median(times) / 1e9


# ---- report ----------------------------------------------------------------------------------------
def result_rows(results: Sequence[BackendResult], bandwidth_gb_s: float) -> List[str]:
    rows = [
        f"| backend | pp{results[0].pp} tok/s | tg{results[0].tg} tok/s | TTFT ms | RSS MB | MB read / token | "
        f"implied GB/s | share of {bandwidth_gb_s:.1f} GB/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        implied = r.bytes_per_token * r.decode_tok_s / 1e9
        rows.append(
            f"| {r.name} | {r.prefill_tok_s:.1f} | {r.decode_tok_s:.1f} | {r.ttft_ms:.0f} | {r.rss_mb:.0f} | "
            f"{r.bytes_per_token / 1e6:.1f} | {implied:.2f} | {implied / bandwidth_gb_s:.0%} |"
        )
    return rows


def ratio_rows(ours: Sequence[BackendResult], peers: Sequence[BackendResult]) -> List[str]:
    rows = []
    for o in ours:
        for p in peers:
            rows.append(
                f"{o.name} / {p.name}: prefill x{o.prefill_tok_s / p.prefill_tok_s:.2f}, "
                f"decode x{o.decode_tok_s / p.decode_tok_s:.2f}"
            )
    return rows


def ratios_allowed(results: Sequence[BackendResult], allow_loaded: bool = False) -> bool:
    """True when every backend's timed rounds were quiet (each load report printed)."""
    allowed = True
    for r in results:
        print(f"{r.name}: ", end="")
        if r.load is None:
            print("no load report")
            allowed = False
        elif not refuse_if_loaded(r.load, allow_loaded):
            allowed = False
    return allowed


# ---- timing ------------------------------------------------------------------------------------------
def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def release_freed_memory() -> None:
    """Collects garbage and hands the heap's free pages back to the system (glibc's malloc_trim),
    so that the next program's RSS is measured from what this process really holds: freed
    blocks below glibc's mmap threshold otherwise stay in its arenas and the next program reuses
    them (its RSS then reads 0)."""
    import ctypes
    import ctypes.util

    gc.collect()
    libc = ctypes.util.find_library("c")
    if libc:
        trim = getattr(ctypes.CDLL(libc), "malloc_trim", None)
        if trim is not None:
            trim(0)


def time_rounds(run_round: Callable[[], Round], reps: int, max_other_cores: float) -> tuple:
    run_round()  # warm-up
    with LoadMonitor(max_other_cores) as monitor:
        rounds = [run_round() for _ in range(reps)]
    return rounds, monitor.report


def our_round(program, prompt: List[int], tg: int) -> Round:
    from backends.qualcomm.llm.generate import generate

    out = generate(program, prompt, max_new_tokens=tg + 1, eos_ids=[])
    s = out.stats
    return Round(s.prefill_s, s.ttft_s, s.decode_s)


def xnnpack_round(method, prompt: List[int], tg: int) -> Round:
    import torch

    t0 = time.perf_counter()
    logits = method.execute([torch.tensor([prompt]), torch.tensor([0])])[0]
    prefill_s = time.perf_counter() - t0
    token = int(logits.reshape(-1, logits.shape[-1])[-1].argmax())
    ttft_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    pos = len(prompt)
    for _ in range(tg):
        logits = method.execute([torch.tensor([[token]]), torch.tensor([pos])])[0]
        token = int(logits.reshape(-1, logits.shape[-1])[-1].argmax())
        pos += 1
    return Round(prefill_s, ttft_s, time.perf_counter() - t1)


def load_llm_kernels() -> None:
    """Registers ExecuTorch's LLM kernels (custom_sdpa, update_cache: what export_llama's
    --use_sdpa_with_kv_cache emits) and quantized kernels (the 4-bit embedding) with the runtime.
    Importing executorch.extension.llm.custom_ops loads libcustom_ops_aot_lib only when torch does
    not know the ops yet, which leaves the runtime without them (the program then fails to load:
    "Missing operator: llama::custom_sdpa.out"); the library is loaded here whatever torch knows."""
    import executorch.extension.llm.custom_ops as custom_ops
    import executorch.kernels.quantized  # noqa: F401
    import torch

    libraries = sorted(Path(custom_ops.__file__).parent.glob("*custom_ops_aot_lib.*"))
    if not libraries:
        raise RuntimeError(f"no custom_ops_aot_lib in {Path(custom_ops.__file__).parent}")
    torch.ops.load_library(str(libraries[0]))


# ---- the programs --------------------------------------------------------------------------------
def our_pte(model, tokenizer, recipe: str, context_len: int, artifact: Path, uint8_cache_io: bool = True) -> Path:
    import os

    from backends.qualcomm.llm.evaluate import pydoc_texts
    from backends.qualcomm.llm.export import export_static_llm
    from backends.qualcomm.utils.qnn_context import AOT_ENV

    path = artifact / f"smollm2_{recipe}_c{context_len}{'' if uint8_cache_io else '_float_cache_io'}.pte"
    if not path.exists():
        os.environ[AOT_ENV] = "0"  # payload only: the host engine runs it
        calibration = None
        if recipe != "fp16":
            ids = tokenizer(pydoc_texts()[0], add_special_tokens=False)["input_ids"]
            calibration = [ids[i * 4096 : i * 4096 + 128] for i in range(4)]
        export_static_llm(
            model, path, recipe, context_len=context_len, calibration=calibration, uint8_cache_io=uint8_cache_io
        )
    return path


def xnnpack_pte(model, mode: str, context_len: int, artifact: Path) -> Path:
    """ExecuTorch's llama export (`export_llama`) of the same weights: params.json and a Meta-format
    checkpoint written from the HF model (HF rotary layout: use_hf_rope)."""
    import torch
    from executorch.examples.models.llama.export_llama_lib import build_args_parser, export_llama
    from executorch.extension.llm.export.config.llm_config import LlmConfig

    name = f"smollm2_xnnpack_sdpa_{mode}_c{context_len}.pte"
    path = artifact / name
    if path.exists():
        return path
    c = model.config
    params = {
        "dim": c.hidden_size,
        "hidden_dim": c.intermediate_size,
        "n_heads": c.num_attention_heads,
        "n_kv_heads": c.num_key_value_heads,
        "n_layers": c.num_hidden_layers,
        "norm_eps": c.rms_norm_eps,
        "rope_theta": float(model.config.rope_parameters["rope_theta"]),
        "use_scaled_rope": False,
        "use_hf_rope": True,
        "vocab_size": c.vocab_size,
    }
    (artifact / "xnnpack_params.json").write_text(json.dumps(params))
    checkpoint = artifact / "xnnpack_checkpoint.pth"
    torch.save(meta_state_dict(model), checkpoint)
    argv = ["--model", "smollm2", "--checkpoint", str(checkpoint), "--params", str(artifact / "xnnpack_params.json")]
    argv += [
        "-kv",
        "--use_sdpa_with_kv_cache",
        "-X",
        "-d",
        "fp32",
        "--max_seq_length",
        str(context_len),
        "--max_context_length",
        str(context_len),
    ]
    argv += ["--output-dir", str(artifact), "--output_name", name]
    if mode == "8da4w":
        argv += ["-qmode", "8da4w", "-G", "32", "-E", "4,32"]
    export_llama(LlmConfig.from_args(build_args_parser().parse_args(argv)))
    if not path.exists() and Path(name).exists():  # export_llama writes a name ending in .pte to the cwd
        Path(name).replace(path)
    return path


def meta_state_dict(model) -> Dict[str, object]:
    """HF Llama names -> ExecuTorch llama_transformer's (Meta's) names."""
    names = {
        "self_attn.q_proj": "attention.wq",
        "self_attn.k_proj": "attention.wk",
        "self_attn.v_proj": "attention.wv",
        "self_attn.o_proj": "attention.wo",
        "mlp.gate_proj": "feed_forward.w1",
        "mlp.down_proj": "feed_forward.w2",
        "mlp.up_proj": "feed_forward.w3",
        "input_layernorm": "attention_norm",
        "post_attention_layernorm": "ffn_norm",
    }
    out = {}
    for key, value in model.state_dict().items():
        key = key.removeprefix("model.")
        if key == "embed_tokens.weight":
            key = "tok_embeddings.weight"
        elif key == "lm_head.weight":
            key = "output.weight"
        for hf, meta in names.items():
            key = key.replace(f".{hf}.", f".{meta}.")
        out[key] = value.contiguous()
    out.setdefault("output.weight", out["tok_embeddings.weight"])
    return out


# ---- main --------------------------------------------------------------------------------------------
def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipes", default="fp16,16a8w,16a4w_block")
    parser.add_argument("--xnnpack", default="fp32,8da4w", help="XNNPACK modes (empty: none)")
    parser.add_argument("--pp", type=int, default=128)
    parser.add_argument("--tg", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--context-len", type=int, default=512)
    parser.add_argument("--artifact", type=Path, default=Path("artifacts/bench_llm"))
    parser.add_argument(
        "--float-cache-io",
        action="store_true",
        help="also 16a4w_block with its 8-bit cache as float32 program inputs / outputs (uint8_cache_io=False)",
    )
    add_load_arguments(parser, attempts=False)
    args = parser.parse_args(argv)
    args.artifact.mkdir(parents=True, exist_ok=True)

    import numpy as np

    import backends.qualcomm  # noqa: F401  (registers the delegate)
    from backends.qualcomm import set_runtime_option
    from backends.qualcomm.llm.evaluate import pydoc_texts
    from backends.qualcomm.llm.generate import PteProgram
    from backends.qualcomm.llm.gguf_llama import load_gguf_llama, load_gguf_tokenizer, smollm2_gguf_path

    set_runtime_option("qnn_runtime_engine", "host")
    print(f"machine: {cpu_description()}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; command: {' '.join(sys.argv)}")
    model, tokenizer = load_gguf_llama(smollm2_gguf_path()), load_gguf_tokenizer(smollm2_gguf_path())
    prompt = tokenizer(pydoc_texts()[1], add_special_tokens=False)["input_ids"][: args.pp]
    sizes = linear_sizes(model.config)
    recipes = [r for r in args.recipes.split(",") if r]
    modes = [m for m in args.xnnpack.split(",") if m]
    paths = {r: our_pte(model, tokenizer, r, args.context_len, args.artifact) for r in recipes}
    if args.float_cache_io and "16a4w_block" in recipes:
        paths["16a4w_block float cache I/O"] = our_pte(
            model, tokenizer, "16a4w_block", args.context_len, args.artifact, uint8_cache_io=False
        )
    for mode in modes:
        try:
            paths[f"xnn_{mode}"] = xnnpack_pte(model, mode, args.context_len, args.artifact)
        except Exception as exc:  # noqa: BLE001  (ExecuTorch's flow failing leaves our figures)
            print(f"XNNPACK {mode}: export failed: {exc.__class__.__name__}: {exc}")
    config = model.config
    del model

    bandwidth = read_bandwidth_gb_s()
    results: List[BackendResult] = []
    for name, path in paths.items():
        release_freed_memory()  # the previous backend's program released before the baseline
        before = rss_mb()
        if name.startswith("xnn_"):
            from executorch.runtime import Runtime

            load_llm_kernels()

            program = Runtime.get().load_program(str(path))  # alive while its method runs
            method = program.load_method("forward")
            rounds, load = time_rounds(lambda: xnnpack_round(method, prompt, args.tg), args.reps, args.max_other_cores)
            slots = len(prompt) + args.tg / 2  # attended up to the position: the mean over the tg tokens
        else:
            program = PteProgram(path, "host")
            rounds, load = time_rounds(lambda: our_round(program, prompt, args.tg), args.reps, args.max_other_cores)
            slots = args.context_len - 1  # every decode call attends over all C - 1 slots
        cache_bytes = XNNPACK_CACHE_BYTES if name.startswith("xnn_") else np.dtype(program.cache_dtype).itemsize
        per_token = weight_bytes_per_token(sizes, WEIGHT_BYTES[name.split()[0]]) + cache_bytes_per_token(
            config, slots, cache_bytes
        )
        results.append(BackendResult(name, len(prompt), args.tg, rounds, rss_mb() - before, per_token, load))
        method = program = None
        print(f"{name}: pp {results[-1].prefill_tok_s:.1f} tok/s, tg {results[-1].decode_tok_s:.1f} tok/s", flush=True)

    print("\n".join(result_rows(results, bandwidth)))
    ours = [r for r in results if not r.name.startswith("xnn_")]
    peers = [r for r in results if r.name.startswith("xnn_")]
    if ratios_allowed(results, args.allow_loaded) and ours and peers:
        print("\n".join(ratio_rows(ours, peers)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
