"""Linear as 1x1 Conv2d in the static-LLM export, measured (the table of docs/llm.md).

    python bench/bench_linear_as_conv.py [--recipes fp16 16a4w_block] [--decode-steps 4] [--out DIR]

For each recipe, the tiny random-weight Llama of the LLM tests (helpers/tiny_llm.py: 2 layers,
hidden 64, context 64, AR 8) exported twice with QNN context binaries, with and without
`convert_linear_to_conv2d=True`; then per export: the QNN op types of each graph (our payload,
the graph QNN is given), the QNN context binary's size, the greedy tokens and teacher-forced
logits on the host engine and on QNN (x86 HTP emulation), and the emulator's seconds per decode
call (a proxy only: emulation on a loaded 2-core machine, not a device). Prints one JSON line per
export and a comparison line per recipe.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np


def _blob_of(pte: Path) -> bytes:
    """The delegate blob of a weight-shared .pte (one blob, shared by both methods)."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    loaded = deserialize_pte_binary(pte.read_bytes())
    program = getattr(loaded, "program", loaded)
    blobs = {bytes(d.data) for d in program.backend_delegate_data}
    if len(blobs) != 1:
        raise RuntimeError(f"{pte}: expected one shared delegate blob, found {len(blobs)}")
    return blobs.pop()


def op_counts(blob: bytes) -> Dict[str, Dict[str, int]]:
    """{graph name: {QNN op type: count}} of the payload."""
    from backends.qualcomm.serialization.payload_reader import describe_payload

    return {g.name: dict(Counter(op.type for op in g.ops)) for g in describe_payload(blob)}


def _decode_seconds(program, prompt: Sequence[int], steps: int) -> float:
    from backends.qualcomm.llm import generate

    out = generate(program, prompt, steps + 1, eos_ids=[])
    return out.stats.decode_s / max(1, out.stats.generated_tokens - 1)


def measure(recipe: str, conv: bool, folder: Path, decode_steps: int) -> dict:
    from backends.qualcomm.llm import PteProgram, export_static_llm, generate, teacher_forced
    from backends.qualcomm.tests.helpers.tiny_llm import AR_LEN, CALIBRATION, CONTEXT, PROMPT, hf_model
    from backends.qualcomm.utils.qnn_context import qnn_binary_of

    path = folder / f"tiny_{recipe}{'_conv' if conv else ''}.pte"
    result = export_static_llm(
        hf_model("llama"),
        path,
        recipe,
        context_len=CONTEXT,
        ar_len=AR_LEN,
        calibration=CALIBRATION,
        convert_linear_to_conv2d=conv,
        verbose=False,
    )
    blob = _blob_of(path)
    binary = qnn_binary_of(blob)
    if binary is None:
        raise RuntimeError(f"{path}: no QNN context binary (is QNN's library loadable?)")
    figures: dict = {"recipe": recipe, "conv2d": conv, "export_s": round(result.seconds, 1)}
    figures["ops"] = op_counts(blob)
    figures["context_binary_kb"] = round(len(binary) / 1024, 1)
    figures["pte_kb"] = round(path.stat().st_size / 1024, 1)
    ids = PROMPT + [1, 2, 3, 4][:decode_steps]
    for engine in ("host", "qnn"):
        program = PteProgram(path, engine)
        figures[f"{engine}_tokens"] = generate(program, PROMPT, decode_steps + 1, eos_ids=[]).tokens
        figures[f"{engine}_logits"] = teacher_forced(program, ids, prompt_len=len(PROMPT))
        if engine == "qnn":
            figures["qnn_s_per_decode"] = round(_decode_seconds(program, PROMPT, decode_steps), 3)
        program.close()
    return figures


def compare(plain: dict, conv: dict) -> dict:
    out = {"recipe": plain["recipe"]}
    for engine in ("host", "qnn"):
        out[f"{engine}_tokens_equal"] = plain[f"{engine}_tokens"] == conv[f"{engine}_tokens"]
        out[f"{engine}_max_abs_diff"] = float(np.abs(plain[f"{engine}_logits"] - conv[f"{engine}_logits"]).max())
    out["conv_qnn_vs_host_max_abs_diff"] = float(np.abs(conv["qnn_logits"] - conv["host_logits"]).max())
    out["logit_span"] = float(np.abs(plain["host_logits"]).max())
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipes", nargs="*", default=["fp16", "16a4w_block"])
    parser.add_argument("--decode-steps", type=int, default=4)
    parser.add_argument("--out", type=Path, help="folder for the .pte files (default: a temporary one)")
    args = parser.parse_args(argv)
    os.environ.setdefault("QNN_DELEGATE_CONTEXT_BINARY", "1")
    folder = args.out or Path(tempfile.mkdtemp(prefix="linear_as_conv_"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; .pte files in {folder}")
    for recipe in args.recipes:
        runs: List[dict] = [measure(recipe, conv, folder, args.decode_steps) for conv in (False, True)]
        for run in runs:
            print(json.dumps({k: v for k, v in run.items() if not k.endswith("_logits")}))
        print(json.dumps(compare(*runs)))


if __name__ == "__main__":
    main()
