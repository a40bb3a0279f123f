"""Fuzz what a QNN context binary made elsewhere goes through: QnnSystem's parse
(`context_binary_info`, the first thing `from_context_binary` does with the bytes) and loading
(the wrapped delegate blob, signature recomputed so the bytes reach Qualcomm's loader:
size / QnnSystem prechecks, contextCreateFromBinary, graphRetrieve, one execute).

Each case is a deterministic mutation of a seed binary (truncation, bit flips, byte runs set to
0x00 / 0xFF / 0x7F / 0x80, a 32- or 64-bit field set to a boundary value, a chunk deleted or
repeated, the 16-byte header altered). Cases run in a worker process; when a case kills the
worker (signal) or hangs it (timeout), that case is recorded and a new worker takes the next
case, so a crash costs one case. Each crash is then re-run alone in a fresh worker to confirm it.

    python -m backends.qualcomm.tests.tools.fuzz_context_binary --cases 1000 --start 0 --seed 1
    (run it under `flock /work/heavy.lock`; slices with --start add up: the JSON report of each
    slice has cases run, crashes, hangs, crashes per 1,000)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

BOUNDARY_32 = (0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFF, 0x10000)
BOUNDARY_64 = (0, 1, 2**63 - 1, 2**63, 2**64 - 1, 2**32, 2**40)


def mutate(seed_binary: bytes, seed: int, index: int) -> Tuple[str, bytes]:
    """(kind, bytes) of case `index` (deterministic in seed and index)."""
    rng = random.Random(seed * 1_000_003 + index)
    data = bytearray(seed_binary)
    n = len(data)
    kind = rng.choice(("truncate", "flip", "run", "field32", "field64", "delete", "repeat", "header"))
    if kind == "truncate":
        data = data[: rng.randrange(0, n)]
    elif kind == "flip":
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(n)] ^= 1 << rng.randrange(8)
    elif kind == "run":
        start = rng.randrange(n)
        length = rng.choice((1, 2, 4, 8, 16, 64))
        data[start : start + length] = bytes([rng.choice((0x00, 0xFF, 0x7F, 0x80))]) * len(data[start : start + length])
    elif kind == "field32":
        at = rng.randrange(0, n - 4) & ~3 if rng.random() < 0.7 else rng.randrange(0, n - 4)
        data[at : at + 4] = rng.choice(BOUNDARY_32).to_bytes(4, rng.choice(("little", "big")))
    elif kind == "field64":
        at = rng.randrange(0, n - 8) & ~7
        data[at : at + 8] = rng.choice(BOUNDARY_64).to_bytes(8, rng.choice(("little", "big")))
    elif kind == "delete":
        start = rng.randrange(n)
        del data[start : start + rng.choice((1, 4, 16, 256, 4096))]
    elif kind == "repeat":
        start = rng.randrange(n)
        chunk = data[start : start + rng.choice((4, 16, 256))]
        data[start:start] = chunk
    else:  # header
        at = rng.randrange(0, 32)
        data[at] = rng.randrange(256)
    return kind, bytes(data)


# ---- worker -------------------------------------------------------------------------------------
def _worker(seed_path: Path, seed: int) -> None:
    """Reads case indices on stdin, answers one JSON line per case on stdout. Whatever the
    libraries print goes to stderr: fd 1 is pointed there and the answers take a copy of it."""
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    import torch

    import backends.qualcomm  # noqa: F401  loads the extension
    from backends.qualcomm.utils.context_binary import QNN_TO_TORCH, wrap_foreign_context_binary
    from backends.qualcomm.utils.runtime_options import load_extension

    ext = load_extension()
    seed_binary = seed_path.read_bytes()
    info = ext.qnn_context_binary_info(seed_binary)
    graph = info["graphs"][0]
    soc = int(info["soc_model"])
    inputs = [torch.zeros(t["dims"], dtype=QNN_TO_TORCH[t["dtype"]]).numpy() for t in graph["inputs"]]
    out = answers
    for line in sys.stdin:
        index = int(line)
        kind, data = mutate(seed_binary, seed, index)
        result = {"index": index, "kind": kind, "bytes": len(data)}
        try:
            ext.qnn_context_binary_info(data)
            result["info"] = "ok"
        except (ValueError, RuntimeError) as exc:
            result["info"] = "refused"
            result["info_error"] = str(exc)[:160]
        try:
            ext.run_payload_qnn(wrap_foreign_context_binary(data, graph, soc), inputs)
            result["load"] = "ok"
        except (ValueError, RuntimeError) as exc:
            result["load"] = "refused"
            result["load_error"] = str(exc)[:160]
        out.write(json.dumps(result) + "\n")
        out.flush()


# ---- driver -------------------------------------------------------------------------------------
DEFAULT_MEMORY_MB = 4096


def _limit_memory(megabytes: int) -> Callable[[], None]:
    """preexec_fn: caps the worker's data memory (RLIMIT_DATA: heap and private mappings), so
    that a binary making Qualcomm's loader allocate without bound (one case reached 17 GB of a
    24 GB machine) fails that case instead of starving the machine."""

    def limit() -> None:
        import resource

        cap = megabytes << 20
        resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))

    return limit


class Worker:
    def __init__(self, seed_path: Path, seed: int, memory_mb: int = DEFAULT_MEMORY_MB) -> None:
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                __spec__.name if __spec__ else "backends.qualcomm.tests.tools.fuzz_context_binary",
                "--worker",
                "--seed-binary",
                str(seed_path),
                "--seed",
                str(seed),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
            preexec_fn=_limit_memory(memory_mb),
        )
        self.timed_out = False

    def run(self, index: int, timeout_s: float) -> Optional[Dict]:
        """The case's result, or None when the worker died or hung (then it is killed)."""
        import select

        try:
            self.process.stdin.write(f"{index}\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            return None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout_s)
        line = self.process.stdout.readline() if ready else ""
        if not line:
            self.timed_out = not ready
            self.kill()
            return None
        return json.loads(line)

    def outcome(self) -> str:
        """ "hang" (no answer within the timeout: killed here), "signal N" or "exit N"."""
        code = self.process.poll()
        if code is None or self.timed_out:
            return "hang"
        return f"signal {-code}" if code < 0 else f"exit {code}"

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def make_seed_binary(folder: Path) -> Path:
    """A small SM8650 fp16 conv + relu context binary made by our lowering (QNN required)."""
    import torch

    from backends.qualcomm import (
        QcomChipset,
        generate_htp_compiler_spec,
        generate_qnn_executorch_compiler_spec,
        to_edge_transform_and_lower_to_qnn,
    )
    from backends.qualcomm.utils.context_binary import dump_context_from_pte

    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()
    specs = generate_qnn_executorch_compiler_spec(QcomChipset.SM8650, generate_htp_compiler_spec(use_fp16=True))
    program = to_edge_transform_and_lower_to_qnn(model, (torch.randn(1, 3, 8, 8),), specs).to_executorch()
    pte = folder / "fuzz_seed.pte"
    pte.write_bytes(program.buffer)
    return Path(dump_context_from_pte(pte)[0])


def fuzz(
    seed_path: Path,
    seed: int,
    start: int,
    cases: int,
    timeout_s: float,
    crash_dir: Optional[Path],
    memory_mb: int = DEFAULT_MEMORY_MB,
) -> Dict:
    worker = Worker(seed_path, seed, memory_mb)
    counts: Counter = Counter()
    crashes: List[Dict] = []
    began = time.monotonic()
    for index in range(start, start + cases):
        result = worker.run(index, timeout_s)
        if result is None:
            outcome = worker.outcome()
            kind, data = mutate(seed_path.read_bytes(), seed, index)
            crashes.append({"index": index, "kind": kind, "outcome": outcome})
            counts["hang" if outcome == "hang" else "crash"] += 1
            if crash_dir is not None:
                crash_dir.mkdir(parents=True, exist_ok=True)
                (crash_dir / f"case_{seed}_{index}.bin").write_bytes(data)
            worker = Worker(seed_path, seed, memory_mb)
            continue
        counts[f"info_{result['info']}"] += 1
        counts[f"load_{result['load']}"] += 1
    worker.close()
    confirmed = 0
    for crash in crashes:  # re-run alone in a fresh worker: a crash, or an earlier case's damage?
        alone = Worker(seed_path, seed, memory_mb)  # a hang gets 6x the time: a busy machine can starve a case
        answer = alone.run(crash["index"], timeout_s * (6 if crash["outcome"] == "hang" else 1))
        crash["alone"] = "survived" if answer is not None else alone.outcome()
        confirmed += crash["alone"] != "survived"
        alone.kill()
    run = cases
    failures = counts["crash"] + counts["hang"]
    return {
        "seed": seed,
        "start": start,
        "cases": run,
        "seconds": round(time.monotonic() - began, 1),
        "counts": dict(counts),
        "crashes": counts["crash"],
        "hangs": counts["hang"],
        "crashes_per_1000": round(1000.0 * failures / run, 3) if run else 0.0,
        "confirmed_alone": confirmed,
        "failures": crashes,
    }


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--start", type=int, default=0, help="index of the first case (slices add up)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seed-binary", type=Path, default=None, help="context binary to mutate (default: made)")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds before a case counts as a hang")
    parser.add_argument("--crash-dir", type=Path, default=None, help="where crashing inputs are written")
    parser.add_argument("--report", type=Path, default=None, help="JSON report file (default: stdout only)")
    parser.add_argument(
        "--max-memory-mb",
        type=int,
        default=DEFAULT_MEMORY_MB,
        help="data memory cap of each worker process (RLIMIT_DATA)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args.seed_binary, args.seed)
        return 0
    seed_path = args.seed_binary or make_seed_binary(Path(os.environ.get("TMPDIR", "/tmp")) / "qnn_fuzz_seed")
    report = fuzz(seed_path, args.seed, args.start, args.cases, args.timeout, args.crash_dir, args.max_memory_mb)
    text = json.dumps(report, indent=1)
    if args.report is not None:
        args.report.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
