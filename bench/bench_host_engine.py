"""Benchmark: our host engine (fp16 / 8a8w / 16a8w / 16a4w-LPBQ) vs ExecuTorch's XNNPACK.

    python bench/bench_host_engine.py [--models mobilenet_v2,minilm,decoder]
        [--variants fp16,8a8w,16a8w,16a4w_lpbq,xnn_fp32,xnn_int8] [--runs 20] [--warm_up 3]
        [--threads 2] [--rebuild]

Every (model, variant) is lowered once and cached under artifacts/bench/<model>_<variant>.pte
(--rebuild relowers). All programs of a model are loaded in this process, warmed up, then timed
alternately (one execute of each per round), so a ratio compares runs made under the same load.
The timed rounds are sampled for load (bench/quiet.py): when other processes used more than
--max_other_cores cores the ratios are refused (exit status 3) unless --allow_loaded marks them.
Per model and variant it prints the median ms, the ratio to XNNPACK int8 and fp32, GOPS
(2 x MACs counted once on the float model / median), the RSS the loaded program added, the
cosine of its output against the float model (MiniLM: of the mean-pooled sentence embeddings)
and the SHA-256 of its output bytes (equal hashes: the same output bit for bit). Our delegate
runs on the host engine (runtime option qnn_runtime_engine=host; lowering makes no QNN context
binary). Not a test.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import resource
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from bench.quiet import (  # noqa: E402
    EXIT_LOADED,
    LoadReport,
    add_load_arguments,
    cpu_description,
    ratio_text,
    refuse_if_loaded,
)
from bench.timing import Variant, time_alternating  # noqa: E402
from examples.qualcomm import utils  # noqa: E402

QNN_VARIANTS = ("fp16", "8a8w", "16a8w", "16a4w_lpbq")
XNN_VARIANTS = ("xnn_fp32", "xnn_int8")
ALL_VARIANTS = QNN_VARIANTS + XNN_VARIANTS
ALL_MODELS = ("mobilenet_v2", "minilm", "decoder")
LINEAR_HEAVY = ("minilm", "decoder")


# ---- a tiny Llama / Qwen-style decoder ----------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class DecoderLayer(nn.Module):
    """RMSNorm -> causal multi-head attention (plain, no rotary) -> RMSNorm -> SwiGLU MLP."""

    def __init__(self, dim: int, heads: int, hidden: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.attn_norm, self.mlp_norm = RMSNorm(dim), RMSNorm(dim)
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.gate, self.up = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.attn_norm(x)
        q = self.q(h).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(h).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        v = self.v(h).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(2, 3)) * (1.0 / math.sqrt(self.head_dim)) + mask
        attn = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2).reshape(b, s, d)
        x = x + self.o(attn)
        h = self.mlp_norm(x)
        return x + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))


class TinyDecoder(nn.Module):
    """forward(input_ids [1, S] int64) -> logits [1, S, vocab]."""

    def __init__(
        self, vocab: int = 2048, dim: int = 256, heads: int = 4, hidden: int = 688, layers: int = 4, seq_len: int = 128
    ):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(DecoderLayer(dim, heads, hidden) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        causal = torch.full((seq_len, seq_len), -10000.0).triu(1)
        self.register_buffer("mask", causal[None, None])

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x, self.mask)
        return self.lm_head(self.norm(x))


# ---- models ---------------------------------------------------------------------------------
@dataclass
class BenchModel:
    name: str
    module: nn.Module
    example: tuple
    calibration: list[tuple]
    # output -> vector compared by cosine against the float model's
    embed: Callable[[torch.Tensor], torch.Tensor]


def build_model(name: str, seq_len: int) -> BenchModel:
    torch.manual_seed(0)
    if name == "mobilenet_v2":
        from qnn_models import imagenet
        from qnn_models.mobilenet_v2 import load_mobilenet_v2

        photos = list(imagenet.load_photo_batch().values())
        return BenchModel(
            name, load_mobilenet_v2().eval(), (photos[0],), [(p,) for p in photos], lambda out: out.flatten()
        )
    if name == "minilm":
        from qnn_models.minilm import SAMPLE_SENTENCES, load_minilm, sentence_embeddings, tokenize

        encoder, tokenizer = load_minilm(seq_len)
        ids, mask = tokenize(tokenizer, SAMPLE_SENTENCES, seq_len)
        samples = [(ids[i : i + 1], mask[i : i + 1]) for i in range(ids.shape[0])]
        return BenchModel(
            name, encoder, samples[0], samples, lambda out: sentence_embeddings(out, samples[0][1]).flatten()
        )
    if name == "decoder":
        module = TinyDecoder(seq_len=seq_len).eval()
        samples = [(torch.randint(0, 2048, (1, seq_len)),) for _ in range(4)]
        return BenchModel(name, module, samples[0], samples, lambda out: out.flatten())
    raise ValueError(f"unknown model {name!r} (choose from {ALL_MODELS})")


def count_macs(model: BenchModel) -> float:
    """Multiply-accumulates of one forward (torch's flop counter / 2)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model.module(*model.example)
    return counter.get_total_flops() / 2.0


# ---- lowering -------------------------------------------------------------------------------
def lower_ours(model: BenchModel, variant: str, pte: Path) -> Path:
    from backends.qualcomm import QnnQuantizer, QuantDtype
    from qnn_models.quantize import quant_compile_specs, quantize_module
    from backends.qualcomm.utils.lowering import to_edge_transform_and_lower_to_qnn

    if variant == "fp16":
        specs = utils.build_compiler_specs(soc_model="SM8650", use_fp16=True)
        edge = utils.lower_to_qnn(model.module, model.example, specs)
    else:
        dtype = {"8a8w": QuantDtype.use_8a8w, "16a8w": QuantDtype.use_16a8w, "16a4w_lpbq": QuantDtype.use_16a4w_block}[
            variant
        ]
        quantizer = QnnQuantizer()
        quantizer.set_default_quant_config(dtype, is_conv_per_channel=True, is_linear_per_channel=True)
        if variant == "16a4w_lpbq":
            quantizer.set_block_size_map(lpbq_blocks(model))
        converted = quantize_module(model.module, model.example, quantizer, model.calibration)
        edge = to_edge_transform_and_lower_to_qnn(converted, model.example, quant_compile_specs(dtype))
    utils.assert_fully_delegated(edge, f"{model.name}_{variant}")
    return utils.save_pte(edge, pte)


def lpbq_blocks(model: BenchModel, block: int = 64) -> dict[str, int]:
    """Block size map (input features per block) for every linear node of the exported graph."""
    graph = torch.export.export(model.module, model.example, strict=False).module().graph
    return {
        node.name: block
        for node in graph.nodes
        if node.op == "call_function"
        and node.target == torch.ops.aten.linear.default
        and node.args[1].meta["val"].shape[1] % block == 0
    }


def lower_xnnpack(model: BenchModel, variant: str, pte: Path) -> Path:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    module = model.module
    if variant == "xnn_int8":
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
            XNNPACKQuantizer,
            get_symmetric_quantization_config,
        )
        from qnn_models.quantize import quantize_module

        quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
        module = quantize_module(module, model.example, quantizer, model.calibration)
    with torch.no_grad():
        exported = torch.export.export(module, model.example, strict=False)
        edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
    return utils.save_pte(edge, pte)


def lower_cached(model: BenchModel, variant: str, artifact: Path, rebuild: bool) -> Path:
    seq = f"_s{model.example[0].shape[-1]}" if model.name in LINEAR_HEAVY else ""
    pte = artifact / f"{model.name}{seq}_{variant}.pte"
    if pte.is_file() and not rebuild:
        return pte
    utils.log_step(f"lowering {model.name} {variant}")
    lower = lower_xnnpack if variant in XNN_VARIANTS else lower_ours
    return lower(model, variant, pte)


# ---- timing ---------------------------------------------------------------------------------
def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@dataclass
class Loaded:
    variant: str
    program: object  # keep: its methods point into it
    method: object
    rss_added: int


def load(pte: Path, variant: str) -> Loaded:
    from executorch.runtime import Runtime  # main() imported backends.qualcomm: QnnDelegate is registered

    before = rss_bytes()
    program = Runtime.get().load_program(str(pte))
    method = program.load_method("forward")
    return Loaded(variant, program, method, rss_bytes() - before)


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a.double().flatten(), b.double().flatten(), dim=0))


def output_hash(outputs: list) -> str:
    """SHA-256 (first 16 hex digits) of the bytes of every tensor output, in order."""
    digest = hashlib.sha256()
    for out in outputs:
        if isinstance(out, torch.Tensor):
            digest.update(out.detach().contiguous().cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


def bench_model(model: BenchModel, variants: list[str], args: argparse.Namespace) -> tuple[list[dict], LoadReport]:
    macs = count_macs(model)
    with torch.no_grad():
        want = model.embed(model.module(*model.example))
    loaded: list[Loaded] = []
    for variant in variants:
        if variant == "16a4w_lpbq" and model.name not in LINEAR_HEAVY:
            continue
        try:
            pte = lower_cached(model, variant, args.artifact, args.rebuild)
            loaded.append(load(pte, variant))
        except Exception as error:  # report and go on with the other variants
            print(f"{model.name} {variant}: {type(error).__name__}: {str(error)[:300]}")
    cosines, hashes = {}, {}
    for item in loaded:
        outputs = item.method.execute(list(model.example))
        cosines[item.variant] = cosine(model.embed(outputs[0]), want)
        hashes[item.variant] = output_hash(outputs)
    timed = time_alternating(
        [Variant(item.variant, lambda m=item.method: m.execute(list(model.example))) for item in loaded],
        runs=args.runs,
        warm_up=args.warm_up,
        max_other_cores=args.max_other_cores,
        attempts=args.attempts,
    )
    medians = timed.medians_ms
    rows = []
    for item in loaded:
        ms = medians[item.variant]
        rows.append(
            {
                "model": model.name,
                "variant": item.variant,
                "ms": ms,
                "vs_int8": ms / medians["xnn_int8"] if "xnn_int8" in medians else float("nan"),
                "vs_fp32": ms / medians["xnn_fp32"] if "xnn_fp32" in medians else float("nan"),
                "gops": 2 * macs / ms / 1e6,
                "gmacs": macs / 1e9,
                "rss_mb": item.rss_added / 2**20,
                "cos": cosines[item.variant],
                "hash": hashes[item.variant],
                "other_cores": timed.load.other_cores,
            }
        )
    return rows, timed.load


def print_table(rows: list[dict], allowed: dict[str, bool], loaded: dict[str, bool]) -> None:
    """Ratios per model only where that model's timed rounds may be quoted (allowed[model])."""
    print(
        "\n| model | variant | median ms | vs XNN int8 | vs XNN fp32 | GOPS | GMAC | +RSS MB | cos vs fp32 "
        "| output sha256 | other cores |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    for r in rows:
        ok, hot = allowed[r["model"]], loaded[r["model"]]
        print(
            f"| {r['model']} | {r['variant']} | {r['ms']:.2f} | {ratio_text(r['vs_int8'], ok, hot)} "
            f"| {ratio_text(r['vs_fp32'], ok, hot)} | {r['gops']:.1f} | {r['gmacs']:.3f} "
            f"| {r['rss_mb']:.1f} | {r['cos']:.4f} | {r['hash']} | {r['other_cores']:.2f} |"
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak RSS of this process: {peak:.0f} MB; torch threads {torch.get_num_threads()}, cores {os.cpu_count()}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(ALL_MODELS))
    parser.add_argument("--variants", default=",".join(ALL_VARIANTS))
    parser.add_argument("--runs", type=int, default=20, help="timed rounds (one execute per variant each)")
    parser.add_argument("--warm_up", type=int, default=3, help="untimed executes per variant")
    parser.add_argument(
        "--threads", type=int, default=2, help="torch intra-op threads (our engine and XNNPACK use the machine's cores)"
    )
    parser.add_argument("--seq_len", type=int, default=128, help="MiniLM / decoder sequence length")
    parser.add_argument("--artifact", type=Path, default=Path("artifacts") / "bench")
    parser.add_argument("--rebuild", action="store_true", help="relower even when a cached .pte exists")
    add_load_arguments(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # The host engine is what is measured: no QNN context binary at lowering (slow, large),
    # and the host engine even for a cached .pte that holds one.
    os.environ.setdefault("QNN_DELEGATE_CONTEXT_BINARY", "0")
    from backends.qualcomm import set_runtime_option

    set_runtime_option("qnn_runtime_engine", "host")
    args.artifact = args.artifact.resolve()
    args.artifact.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)
    variants = [v for v in args.variants.split(",") if v]
    for v in variants:
        if v not in ALL_VARIANTS:
            raise SystemExit(f"unknown variant {v!r} (choose from {ALL_VARIANTS})")
    print(f"machine: {cpu_description()}")
    rows: list[dict] = []
    allowed: dict[str, bool] = {}
    loaded: dict[str, bool] = {}
    for name in [m for m in args.models.split(",") if m]:
        model_rows, report = bench_model(build_model(name, args.seq_len), variants, args)
        print(f"{name}: ", end="")
        # Each model's variants were timed together: its load decides for its ratios.
        allowed[name] = refuse_if_loaded(report, args.allow_loaded)
        loaded[name] = not report.quiet
        rows += model_rows
    print_table(rows, allowed, loaded)
    return 0 if all(allowed.values()) else EXIT_LOADED


if __name__ == "__main__":
    sys.exit(main())
