"""The 8-bit KV cache as uint8 graph inputs and outputs (what Qualcomm's flows call quantized I/O).

After `convert_pt2e`, an 8-bit cache input reads `placeholder (float32) -> quantize (uint8) ->
dequantize` and a new-entries output `quantize (uint8) -> dequantize -> output`. Every cache input
and output of a layer's K (V) shares one encoding in both methods (export.annotate_kv_cache_8bit,
unify_cache_encodings), so the codes can cross the program boundary as they are:
`cache_codes_io(graph_module)` removes the input quantize (the placeholder then holds the uint8
codes) and returns the codes in place of the dequantized outputs. The runner's cache becomes
uint8 (4x less memory, and a decode call no longer quantizes the whole cache: 1.6 of SmolLM2's
17.2 ms per token on the host engine), and the delegate reads and writes it with no conversion.
Values are unchanged: the float32 cache held dequantized codes that were quantized again to the
same codes.

Only 8-bit caches (kv_bits=8): 16-bit codes are int32 tensors in PyTorch (CPU quantize kernels
have no uint16), which would save nothing over float32.
"""

from __future__ import annotations

from typing import List

import torch
from torch.fx import GraphModule, Node

from backends.qualcomm.builders.quant_encoding import is_dequantize, is_quantize


class CacheCodesError(RuntimeError):
    """The converted graph's cache inputs / outputs are not the 8-bit pattern this rewrite expects."""


def _cache_inputs(graph_module: GraphModule) -> List[Node]:
    return [n for n in graph_module.graph.nodes if n.op == "placeholder" and n.name.startswith("caches")]


def _input_quantize(placeholder: Node) -> Node:
    # torch.export's module() adds a `_guards_fn` call reading every input (shape guards)
    users = [u for u in placeholder.users if u.op == "call_function"]
    if len(users) != 1 or not is_quantize(users[0]) or users[0].args[5] != torch.uint8:
        raise CacheCodesError(
            f"cache input {placeholder.name}: expected one uint8 quantize user, got "
            f"{[f'{u.name} ({u.target})' for u in users]}"
        )
    return users[0]


def _output_codes(output: Node, index: int) -> Node:
    dequantize = output.args[0][index]
    codes = dequantize.args[0] if is_dequantize(dequantize) else None
    if codes is None or not is_quantize(codes) or codes.args[5] != torch.uint8:
        raise CacheCodesError(f"output {index} ({dequantize}): expected dequantize(uint8 quantize(...))")
    return codes


def cache_codes_io(graph_module: GraphModule) -> int:
    """Rewrites a converted static-decoder graph (forward(tokens, positions, mask, *caches) ->
    (logits, *new_k, *new_v)) so that its caches and new entries are uint8 codes. Returns the
    number of cache inputs rewritten. Raises CacheCodesError if a cache is not 8-bit."""
    graph = graph_module.graph
    caches = _cache_inputs(graph_module)
    output = next(n for n in graph.nodes if n.op == "output")
    outputs = list(output.args[0]) if isinstance(output.args[0], (tuple, list)) else [output.args[0]]
    if not caches or len(outputs) != 1 + len(caches):
        raise CacheCodesError(f"expected 1 + {len(caches)} outputs (logits, new K / V), got {len(outputs)}")
    quantizes = [_input_quantize(p) for p in caches]  # every check before the first change
    for i in range(1, len(outputs)):
        outputs[i] = _output_codes(output, i)
    for placeholder, quantize in zip(caches, quantizes):
        quantize.replace_all_uses_with(placeholder)
        graph.erase_node(quantize)
        if "val" in placeholder.meta:
            placeholder.meta["val"] = placeholder.meta["val"].to(torch.uint8)
    output.args = (tuple(outputs),)
    graph.eliminate_dead_code()
    graph_module.recompile()
    return len(caches)


def cache_dtype(graph_module: GraphModule) -> torch.dtype:
    """The dtype of a static-decoder graph's cache inputs (float32 unless cache_codes_io ran)."""
    caches = _cache_inputs(graph_module)
    val = caches[0].meta.get("val") if caches else None
    return val.dtype if val is not None else torch.float32
