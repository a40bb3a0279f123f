"""qnn_executor_runner on corrupted programs: a seeded set of single- and multi-byte
mutations (mostly in the first few KB: program header, flatbuffer tables, memory plan)
of two small .pte files (fully and partly delegated), each run in its own process with
a timeout. Every run must end with an exit code (0 or a clean 1): no signal, no hang."""

from __future__ import annotations

import random
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import List, Tuple

import pytest
import torch

from backends.qualcomm.tests.helpers import runtime as h
from backends.qualcomm.tests.helpers.real_models import SmallConvNet
from backends.qualcomm.utils import pte_tools

SEED = 20261122
RUNS = 300
HEAD_BYTES = 4096  # where most mutations land
HEAD_SHARE = 0.85
TIMEOUT_S = 10.0


@dataclass
class Mutation:
    source: str
    edits: List[Tuple[int, int]]  # (offset, new byte value)


def _mutations(sizes: dict, runs: int, seed: int) -> List[Mutation]:
    rng = random.Random(seed)
    names = sorted(sizes)
    out = []
    for i in range(runs):
        name = names[i % len(names)]
        count = 1 if rng.random() < 0.6 else rng.randint(2, 8)
        edits = []
        for _ in range(count):
            head = rng.random() < HEAD_SHARE
            offset = rng.randrange(min(HEAD_BYTES, sizes[name]) if head else sizes[name])
            edits.append((offset, rng.randrange(256)))
        out.append(Mutation(name, edits))
    return out


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict:
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("fuzz")
    small = h.lower_to_pte(SmallConvNet().eval(), (torch.randn(1, 3, 16, 16),), folder / "small.pte")
    split = h.lower_to_pte(
        h.SplitNet().eval(),
        (torch.randn(1, 3, 12, 12),),
        folder / "split.pte",
        skip_node_op_set={"aten.sigmoid.default"},
    )
    return {"folder": folder, "small": small.read_bytes(), "split": split.read_bytes()}


def _run(runner: Path, pte: Path) -> int | str:
    try:
        done = subprocess.run(
            [str(runner), "--model_path", str(pte), "--iteration", "1"], capture_output=True, timeout=TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return "hang"
    return done.returncode


def test_corrupted_programs_never_crash_the_runner(sources):
    runner = pte_tools.find_runner()
    folder: Path = sources["folder"]
    for name in ("small", "split"):  # the unmutated programs run
        (folder / f"{name}_clean.pte").write_bytes(sources[name])
        assert _run(runner, folder / f"{name}_clean.pte") == 0
    sizes = {name: len(sources[name]) for name in ("small", "split")}
    outcomes, bad = {}, []
    for index, mutation in enumerate(_mutations(sizes, RUNS, SEED)):
        data = bytearray(sources[mutation.source])
        for offset, value in mutation.edits:
            data[offset] = value
        pte = folder / "mutated.pte"
        pte.write_bytes(bytes(data))
        code = _run(runner, pte)
        outcomes[code] = outcomes.get(code, 0) + 1
        if code == "hang" or code < 0 or code > 1:
            kept = folder / f"crash_{index}.pte"
            kept.write_bytes(bytes(data))
            bad.append((index, mutation.source, mutation.edits, code, str(kept)))
    assert not bad, f"{len(bad)} of {RUNS} runs crashed or hung (outcomes {outcomes}): {bad[:10]}"
    assert outcomes.get(1, 0) >= RUNS // 2, f"too few mutations were rejected: {outcomes}"
