"""Per-op time of a .pte on our host engine (runtime profile level 2, ETDump).

    python bench/profile_host_engine.py artifacts/bench/mobilenet_v2_8a8w.pte [--runs 5] [--top 15]
    python bench/profile_host_engine.py smollm2_16a4w_block_c512.pte --method decode [--position 160]

Inputs are those bench_host_engine.py uses for the model the file name starts with
(mobilenet_v2, minilm_s<seq>, decoder_s<seq>); for a static-LLM program (export_static_llm: a
`decode` method) --method picks prefill or decode, called at --position with a zero cache, the
causal mask of that position and token ids 1..N (timing does not depend on the values). Prints the time per QNN op type
(median over runs of the summed per-op microseconds), the slowest single ops and the kernel
path each took, with the CPU and the load sampled while it ran (bench/quiet.py): a profile of a
loaded run is refused (exit status 3) unless --allow_loaded, which marks it. Not a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.bench_host_engine import build_model  # noqa: E402
from bench.quiet import EXIT_LOADED, LoadMonitor, add_load_arguments, cpu_description, refuse_if_loaded  # noqa: E402


def model_of(pte: Path) -> tuple[str, int]:
    stem = pte.stem
    for name in ("mobilenet_v2", "minilm", "decoder"):
        if stem.startswith(name):
            rest = stem[len(name) :]
            seq = int(rest.split("_")[1][1:]) if rest.startswith("_s") else 128
            return name, seq
    raise SystemExit(f"cannot tell the model of {pte.name}")


def llm_inputs(program, method: str, position: int) -> list:
    """Inputs of a static-LLM method call at `position` (export_static_llm's layout)."""
    import numpy as np
    import torch

    from backends.qualcomm.llm.generate import KvCache, program_cache_dtype, read_metadata
    from backends.qualcomm.llm.static_decoder import causal_mask

    shape, _ = read_metadata(program)
    n = shape.ar_len if method == "prefill" else 1
    if not 0 <= position <= shape.context_len - n:
        raise SystemExit(f"--position {position}: a {method} call of {n} tokens fits at 0..{shape.context_len - n}")
    ids = torch.arange(1, n + 1, dtype=torch.int32).reshape(1, n)
    positions = torch.from_numpy(np.arange(position, position + n, dtype=np.int32).reshape(1, n))
    mask = torch.from_numpy(causal_mask(position, n, n, shape.context_len))
    return [ids, positions, mask] + KvCache(shape, program_cache_dtype(program, shape)).inputs(n)


def _metadata(event) -> dict:
    """The delegate event's 'type=Conv2d;us=1.2;...' metadata as a dict."""
    raw = (event.raw_delegate_debug_metadatas or [""])[0]
    text = raw.decode(errors="replace") if isinstance(raw, (bytes, bytearray)) else str(raw)
    return dict(part.split("=", 1) for part in text.strip("\x00").split(";") if "=" in part)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pte", type=Path)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--method", default=None, help="static-LLM program: prefill or decode")
    parser.add_argument("--position", type=int, default=160, help="static-LLM program: the call's first position")
    add_load_arguments(parser, attempts=False)
    args = parser.parse_args(argv)

    from executorch.runtime import Runtime

    from backends.qualcomm import set_runtime_option

    set_runtime_option("qnn_runtime_engine", "host")
    set_runtime_option("qnn_runtime_profile_level", 2)
    program = Runtime.get().load_program(str(args.pte), enable_etdump=True, debug_buffer_size=0)
    if args.method:
        method = program.load_method(args.method)
        inputs = llm_inputs(program, args.method, args.position)
    else:
        name, seq = model_of(args.pte)
        method = program.load_method("forward")
        inputs = list(build_model(name, seq).example)
    method.execute(inputs)  # warm-up
    with LoadMonitor(args.max_other_cores) as monitor:
        for _ in range(args.runs):
            method.execute(inputs)
    assert monitor.report is not None
    print(f"machine: {cpu_description()}")
    if not refuse_if_loaded(monitor.report, args.allow_loaded):
        return EXIT_LOADED
    marker = "" if monitor.report.quiet else " (LOADED: not evidence)"
    with tempfile.TemporaryDirectory() as tmp:
        etdump = Path(tmp) / "run.etdp"
        program.write_etdump_result_to_file(str(etdump), str(etdump) + ".debug")
        from executorch.devtools import Inspector

        inspector = Inspector(etdump_path=str(etdump))
        per_type: dict[str, list[float]] = defaultdict(list)
        per_op: dict[str, tuple[str, float, str]] = {}
        graph_us = 0.0
        for block in inspector.event_blocks:
            for event in block.events:
                if not event.is_delegated_op:
                    continue
                meta = _metadata(event)
                kind = meta.get("type", "?")
                if kind == "Graph":
                    graph_us = statistics.median(event.perf_data.raw[1:]) * 1e3
                    continue
                # perf_data.raw: ms per run (first is the warm-up)
                us = statistics.median(event.perf_data.raw[1:]) * 1e3
                per_type[kind].append(us)
                per_op[event.name] = (kind, us, meta.get("path", ""))
    total = sum(sum(v) for v in per_type.values())
    print(f"{args.pte.name}: graph {graph_us / 1e3:.2f} ms, ops sum {total / 1e3:.2f} ms{marker}")
    print("\n| op type | count | ms | share |\n|---|---:|---:|---:|")
    for kind, values in sorted(per_type.items(), key=lambda kv: -sum(kv[1])):
        print(f"| {kind} | {len(values)} | {sum(values) / 1e3:.2f} | {100 * sum(values) / total:.1f}% |")
    print("\nslowest ops:")
    for op, (kind, us, path) in sorted(per_op.items(), key=lambda kv: -kv[1][1])[: args.top]:
        print(f"  {us / 1e3:8.3f} ms  {kind:<22} {path:<16} {op}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
