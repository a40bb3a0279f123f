"""Command line: export a Hugging Face decoder folder, or generate with an exported .pte.

    python -m backends.qualcomm.llm export --model FOLDER --recipe 16a4w_block --output model.pte
    python -m backends.qualcomm.llm generate --pte model.pte --prompt "Hello" --tokenizer FOLDER

`export` loads FOLDER with transformers (config + weights, float32). Calibration text: --calibration-
text FILE, else English prose from Python's standard library (the calibration half of
pydoc_data.topics, evaluate.pydoc_texts: the accuracy tables evaluate on the other), tokenized with
the folder's tokenizer; without a tokenizer, random token ids (with a warning: fine for a smoke
test, not for accuracy). `generate` takes --prompt-ids "1,2,3" or --prompt TEXT with --tokenizer
FOLDER, streams the tokens (decoded when there is a tokenizer) and prints the statistics.
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional, Sequence


def _tokenizer(folder: Optional[str]):
    if not folder:
        return None
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(folder)
    except Exception as exc:  # noqa: BLE001  (a folder without tokenizer files)
        print(f"no tokenizer in {folder}: {exc.__class__.__name__}", file=sys.stderr)
        return None


def calibration_ids(tokenizer, vocab_size: int, samples: int, length: int, text_file: Optional[str]) -> List[List[int]]:
    if tokenizer is None:
        import torch

        print("warning: no tokenizer: calibrating on random token ids", file=sys.stderr)
        return [
            torch.randint(0, vocab_size, (length,), generator=torch.Generator().manual_seed(s)).tolist()
            for s in range(samples)
        ]
    if text_file:
        with open(text_file, encoding="utf-8") as f:
            text = f.read()
    else:
        from backends.qualcomm.llm.evaluate import pydoc_texts

        text = pydoc_texts()[0]  # the calibration half: the accuracy tables evaluate on the other
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) < length:
        raise SystemExit(f"calibration text has {len(ids)} tokens, fewer than --calibration-len {length}")
    stride = max(length, (len(ids) - length) // max(1, samples))
    return [ids[i : i + length] for i in range(0, stride * samples, stride) if i + length <= len(ids)][:samples]


def _export(args) -> int:
    import torch
    from transformers import AutoModelForCausalLM

    from backends.qualcomm.llm.export import export_static_llm

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    calibration = None
    if args.recipe != "fp16":
        tokenizer = _tokenizer(args.tokenizer or args.model)
        length = min(args.calibration_len, args.context_len)
        calibration = calibration_ids(
            tokenizer, model.config.vocab_size, args.calibration_samples, length, args.calibration_text
        )
    export_static_llm(
        model,
        args.output,
        args.recipe,
        context_len=args.context_len,
        ar_len=args.ar_len,
        calibration=calibration,
        block_size=args.block_size,
        kv_bits=None if args.kv_bits == 16 else args.kv_bits,
        num_sharding=args.num_sharding,
        online_prepare=args.online_prepare,
        text_llm_runner=args.text_llm_runner,
        uint8_cache_io=not args.float_cache_io,
        split_heads=args.split_heads,
        convert_linear_to_conv2d=args.convert_linear_to_conv2d,
        float_mlp_down=args.float_mlp_down,
    )
    return 0


def _generate(args) -> int:
    from backends.qualcomm.llm.generate import generate

    tokenizer = _tokenizer(args.tokenizer)
    if args.prompt_ids:
        prompt = [int(t) for t in args.prompt_ids.split(",") if t.strip()]
    elif args.prompt is not None and tokenizer is not None:
        prompt = tokenizer(args.prompt)["input_ids"]
    else:
        raise SystemExit("give --prompt-ids, or --prompt with --tokenizer")

    def stream(token: int) -> None:
        text = tokenizer.decode([token]) if tokenizer is not None else f"{token} "
        print(text, end="", flush=True)

    result = generate(
        args.pte,
        prompt,
        args.max_new_tokens,
        engine=args.engine,
        temperature=args.temperature,
        top_p=args.top_p,
        on_token=stream,
        seed=args.seed,
    )
    print()
    print(result.stats.summary())
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m backends.qualcomm.llm", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    e = sub.add_parser("export", help="export a HF decoder folder as a prefill + decode .pte")
    e.add_argument("--model", required=True, help="HF folder (config.json + weights)")
    e.add_argument("--output", required=True)
    e.add_argument("--recipe", default="16a4w_block", choices=["fp16", "16a8w", "16a4w_block"])
    e.add_argument("--context-len", type=int, default=512)
    e.add_argument("--ar-len", type=int, default=32)
    e.add_argument("--block-size", type=int, default=32)
    e.add_argument("--kv-bits", type=int, default=8, choices=[8, 16])
    e.add_argument("--tokenizer", help="tokenizer folder (default: --model)")
    e.add_argument("--calibration-text")
    e.add_argument("--calibration-samples", type=int, default=4)
    e.add_argument("--calibration-len", type=int, default=128)
    e.add_argument(
        "--num-sharding",
        "--num_sharding",
        dest="num_sharding",
        type=int,
        default=1,
        help="split the layers into N shards, one QNN context each (prefill + decode weight-shared)",
    )
    e.add_argument(
        "--online-prepare",
        "--online_prepare",
        dest="online_prepare",
        action="store_true",
        help="store no QNN context binary: QNN builds the graphs when the program loads on its engine",
    )
    e.add_argument(
        "--float-cache-io",
        action="store_true",
        help="with the 8-bit cache, pass the caches and new entries as float32 instead of their uint8 codes",
    )
    e.add_argument(
        "--split-heads",
        action="store_true",
        help="one attention per query head: q / k / v projected per head (same inputs and outputs)",
    )
    e.add_argument(
        "--convert-linear-to-conv2d",
        action="store_true",
        help="every linear as a 1x1 Conv2d (HTP's layout for LPBQ on a device; same numerics)",
    )
    e.add_argument(
        "--float-mlp-down",
        action="store_true",
        help="quantized recipes: every MLP's SiLU x up product and down projection in float16 on HTP, "
        "its weights int8 (the product carries the massive activations)",
    )
    e.add_argument(
        "--text-llm-runner",
        action="store_true",
        help="export for ExecuTorch's TextLLMRunner instead: one forward(tokens, input_pos) method with "
        "the KV cache in mutable buffers",
    )
    g = sub.add_parser("generate", help="generate with an exported .pte")
    g.add_argument("--pte", required=True)
    g.add_argument("--prompt")
    g.add_argument("--prompt-ids", help="comma-separated token ids")
    g.add_argument("--tokenizer")
    g.add_argument("--engine", default="auto", choices=["auto", "host", "qnn"])
    g.add_argument("--max-new-tokens", type=int, default=64)
    g.add_argument("--temperature", type=float, default=0.0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--seed", type=int)
    args = parser.parse_args(argv)
    return _export(args) if args.command == "export" else _generate(args)


if __name__ == "__main__":
    sys.exit(main())
