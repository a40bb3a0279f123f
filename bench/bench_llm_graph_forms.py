"""The static-LLM export's graph forms on QNN, measured (the table of docs/llm.md): linears as
FullyConnected or as 1x1 Conv2d (`convert_linear_to_conv2d`), attention batched over the heads
or one per head (`split_heads`).

    python bench/bench_llm_graph_forms.py [--recipes fp16 16a4w_block] [--decode-steps 4] [--out DIR]
    python bench/bench_llm_graph_forms.py --model smollm2 --recipes fp16 --decode-steps 2 --forms fc heads

`--model tiny` (default): the tiny random-weight Llama of the LLM tests (helpers/tiny_llm.py: 2
layers, hidden 64, 4 / 2 heads, context 64, AR 8); `--model smollm2`: SmolLM2-135M from its GGUF
(`make install`), context 512, AR 32, fp16 only (no calibration here). Each form is exported
with QNN context binaries; then per export: the QNN op types of each graph (our payload, the
graph QNN is given), the QNN context binary's size, the greedy tokens and teacher-forced logits
on the host engine and on QNN (x86 HTP emulation), and the seconds per decode call of each
engine (the emulator's a proxy only: an x86 emulation, not a device; the host engine's on a
shared machine). Prints one JSON line per export and one comparison line per form against the
first (FullyConnected, batched).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np

# name: (convert_linear_to_conv2d, split_heads); the first measured is the reference form
FORMS: Dict[str, Tuple[bool, bool]] = {
    "fc": (False, False),
    "conv": (True, False),
    "heads": (False, True),
    "conv-heads": (True, True),
}


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


def load_model(name: str):
    """(HF model, prompt ids, calibration, context, AR length) of `--model`."""
    if name == "tiny":
        from backends.qualcomm.tests.helpers.tiny_llm import AR_LEN, CALIBRATION, CONTEXT, PROMPT, hf_model

        return hf_model("llama"), list(PROMPT), CALIBRATION, CONTEXT, AR_LEN
    from backends.qualcomm.llm.gguf_llama import load_gguf_llama, load_gguf_tokenizer, smollm2_gguf_path

    path = smollm2_gguf_path()
    tokenizer = load_gguf_tokenizer(path)
    prompt = tokenizer("The capital of France is")["input_ids"]
    return load_gguf_llama(path), prompt, None, 512, 32


def form_name(conv: bool, split: bool) -> str:
    return f"{'Conv2d' if conv else 'FullyConnected'}, {'per head' if split else 'batched'}"


def measure(model_spec: tuple, recipe: str, conv: bool, split: bool, folder: Path, decode_steps: int) -> dict:
    from backends.qualcomm.llm import PteProgram, export_static_llm, generate, teacher_forced
    from backends.qualcomm.utils.qnn_context import qnn_binary_of

    model, prompt, calibration, context, ar_len = model_spec
    path = folder / f"{recipe}{'_conv' if conv else ''}{'_split' if split else ''}.pte"
    result = export_static_llm(
        model,
        path,
        recipe,
        context_len=context,
        ar_len=ar_len,
        calibration=calibration,
        convert_linear_to_conv2d=conv,
        split_heads=split,
        verbose=False,
    )
    blob = _blob_of(path)
    binary = qnn_binary_of(blob)
    if binary is None:
        raise RuntimeError(f"{path}: no QNN context binary (is QNN's library loadable?)")
    figures: dict = {"recipe": recipe, "form": form_name(conv, split), "export_s": round(result.seconds, 1)}
    figures["ops"] = op_counts(blob)
    figures["context_binary_kb"] = round(len(binary) / 1024, 1)
    figures["pte_kb"] = round(path.stat().st_size / 1024, 1)
    ids = prompt + [1, 2, 3, 4][:decode_steps]
    for engine in ("host", "qnn"):
        program = PteProgram(path, engine)
        figures[f"{engine}_tokens"] = generate(program, prompt, decode_steps + 1, eos_ids=[]).tokens
        figures[f"{engine}_logits"] = teacher_forced(program, ids, prompt_len=len(prompt))
        figures[f"{engine}_s_per_decode"] = round(_decode_seconds(program, prompt, decode_steps), 6)
        program.close()
    figures["qnn_vs_host_max_abs_diff"] = float(np.abs(figures["qnn_logits"] - figures["host_logits"]).max())
    return figures


def compare(reference: dict, other: dict) -> dict:
    out = {"recipe": reference["recipe"], "form": other["form"], "against": reference["form"]}
    for engine in ("host", "qnn"):
        out[f"{engine}_tokens_equal"] = reference[f"{engine}_tokens"] == other[f"{engine}_tokens"]
        diff = np.abs(reference[f"{engine}_logits"] - other[f"{engine}_logits"]).max()
        out[f"{engine}_max_abs_diff"] = float(diff)
    out["logit_span"] = float(np.abs(reference["host_logits"]).max())
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny", choices=["tiny", "smollm2"])
    parser.add_argument("--recipes", nargs="*", default=["fp16", "16a4w_block"])
    parser.add_argument("--decode-steps", type=int, default=4)
    parser.add_argument(
        "--forms", nargs="*", default=list(FORMS), choices=list(FORMS), help="the first is the reference"
    )
    parser.add_argument("--out", type=Path, help="folder for the .pte files (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.model == "smollm2" and args.recipes != ["fp16"]:
        parser.error("--model smollm2 measures --recipes fp16 only (the quantized recipes need calibration)")
    os.environ.setdefault("QNN_DELEGATE_CONTEXT_BINARY", "1")
    folder = args.out or Path(tempfile.mkdtemp(prefix="llm_graph_forms_"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; .pte files in {folder}", flush=True)
    model_spec = load_model(args.model)
    for recipe in args.recipes:
        runs: List[dict] = []
        for conv, split in (FORMS[name] for name in args.forms):
            runs.append(measure(model_spec, recipe, conv, split, folder, args.decode_steps))
            print(json.dumps({k: v for k, v in runs[-1].items() if not k.endswith("_logits")}), flush=True)
            if len(runs) > 1:
                print(json.dumps(compare(runs[0], runs[-1])), flush=True)
            for path in folder.glob("*.pte"):  # SmolLM2's are 1.2 GB each
                if args.model == "smollm2":
                    path.unlink()


if __name__ == "__main__":
    main()
