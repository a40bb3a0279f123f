"""Export a Hugging Face decoder as one .pte with a `prefill` and a `decode` method sharing weights.

    result = export_static_llm(hf_model, "model.pte", recipe="16a4w_block", context_len=512,
                               ar_len=32, calibration=[ids_1, ids_2, ...])

Both methods are the StaticDecoder (static_decoder.py) of the same HF model: `prefill` takes
`ar_len` tokens per call, `decode` one. They are lowered together with
`to_edge_transform_and_lower_to_qnn({"prefill": ..., "decode": ...})` and HTP weight sharing, so
the program holds one delegate blob: one QNN context with a graph per method whose identical
weights are stored once. `num_sharding=N` (upstream's name) splits the decoder's layers into N
runs of consecutive layers (sizes differing by at most one; the embedding goes with the first, the
final norm and head with the last): each method then has N delegates, and with
`use_multi_contexts` the program holds N contexts, context k holding shard k of both methods
(weight-shared). The outputs are those of the unsharded program. The .pte also carries constant methods with the shape facts a runner
needs (upstream's names: get_max_seq_len, get_ar_len, get_n_layers, ...).

Recipes (RECIPES):
- fp16         float16 compute on HTP, no quantization.
- 16a8w        uint16 activations, int8 per-channel weights.
- 16a4w_block  uint16 activations, int4 LPBQ weights (block 32 by default, block_size=64 also),
               the output head and every MLP down projection 16a8w (upstream's overrides), and
               an 8-bit KV cache: the past K / V inputs, the new K / V outputs and the attention's
               concatenations of the two share one uint8 encoding per layer and tensor kind.
Quantized recipes calibrate both methods on `calibration` (token sequences): each sequence runs
through the float generation loop of the prepared modules (prefill in chunks, then decode
token by token with the sequence's own next tokens), so both graphs see real caches. The
encodings of the two methods are then made equal (the union of their ranges; unify_encodings):
one method's new cache entries are the other's past entries, and equal encodings carry them with
no requantization; equal encodings elsewhere make a token's numbers independent of the method
that computes it and let the weight-shared payload store the 16-bit lookup tables once.
"""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Union

import torch
from torch.fx import GraphModule, Node

from backends.qualcomm.llm.static_decoder import DecoderShape, StaticDecoder
from backends.qualcomm.utils.context_sizes import ContextSize, context_sizes

RECIPES = ("fp16", "16a8w", "16a4w_block")
METHODS = ("prefill", "decode")
# 16a4w_block's 16a8w overrides (regexes on the linear's module path; upstream's choice).
DEFAULT_8BIT_LAYERS = ("lm_head", "down_proj")
# float_mlp_down: the MLP's down projection (module path) and the ops of its input.
MLP_DOWN_REGEX = r"mlp\.down_proj$"


@dataclass
class ExportResult:
    path: Path
    recipe: str
    shape: DecoderShape
    seconds: float  # wall time of the whole export (quantization and lowering included)
    peak_rss_mb: float  # peak resident set size of this process so far
    stage_seconds: Dict[str, float] = field(default_factory=dict)
    modules: Dict[str, torch.nn.Module] = field(default_factory=dict)  # the (converted) modules lowered
    num_sharding: int = 1
    contexts: List[ContextSize] = field(default_factory=list)  # one per delegate blob (context)

    def summary(self) -> str:
        stages = ", ".join(f"{k} {v:.1f} s" for k, v in self.stage_seconds.items())
        shards = f", {self.num_sharding} shards" if self.num_sharding > 1 else ""
        lines = [
            f"exported {self.path.name} ({self.recipe}, context {self.shape.context_len}, AR {self.shape.ar_len}"
            f"{shards}) in {self.seconds:.1f} s ({stages}); peak RSS {self.peak_rss_mb:.0f} MB"
        ]
        lines += [f"  {c}" for c in self.contexts]
        return "\n".join(lines)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def static_modules(
    hf_model: torch.nn.Module, context_len: int, ar_len: int, split_heads: bool = False
) -> Dict[str, StaticDecoder]:
    """{"prefill": StaticDecoder(N=ar_len), "decode": StaticDecoder(N=1)} over the same weights
    (with `split_heads`, the same per-head Linears)."""
    hf_model = hf_model.eval()
    return {
        "prefill": StaticDecoder(hf_model, context_len, ar_len, split_heads).eval(),
        "decode": StaticDecoder(hf_model, context_len, 1, split_heads).eval(),
    }


def constant_methods(shape: DecoderShape, eos_ids: Sequence[int], bos_id: Optional[int]) -> Dict[str, object]:
    """Metadata methods (upstream's names where they exist)."""
    eos = list(eos_ids) or [-1]
    return {
        "get_max_seq_len": shape.context_len,
        "get_max_context_len": shape.context_len,
        "get_ar_len": shape.ar_len,
        "get_n_layers": shape.n_layers,
        "get_n_kv_heads": shape.n_kv_heads,
        "get_head_dim": shape.head_dim,
        "get_vocab_size": shape.vocab_size,
        "get_dim": shape.hidden,
        "get_eos_id": int(eos[0]),
        "get_eos_ids": [int(e) for e in eos],  # one integer output per id, as TextLLMRunner reads it
        "get_bos_id": -1 if bos_id is None else int(bos_id),
        "get_use_kv_cache": True,
    }


def text_llm_runner_constant_methods(
    shape: DecoderShape, eos_ids: Sequence[int], bos_id: Optional[int]
) -> Dict[str, object]:
    """Metadata of a `forward` program (text_llm_runner=True), with the names and types ExecuTorch's
    TextLLMRunner reads (extension/llm/runner/constants.h), integers read with `toScalar()`;
    `get_ar_len` is 1 (one token per call); the shape facts of constant_methods are kept."""
    methods = constant_methods(shape, eos_ids, bos_id)
    methods.pop("get_use_kv_cache")
    methods.update(
        {
            "get_ar_len": 1,
            "use_kv_cache": True,
            "use_sdpa_with_kv_cache": False,
            "enable_dynamic_shape": False,
        }
    )
    return methods


def _eos_and_bos(hf_model) -> tuple:
    config = getattr(hf_model, "generation_config", None) or hf_model.config
    eos = getattr(config, "eos_token_id", None)
    if eos is None:
        eos = getattr(hf_model.config, "eos_token_id", None)
    eos_ids = [] if eos is None else ([int(eos)] if isinstance(eos, int) else [int(e) for e in eos])
    return eos_ids, getattr(hf_model.config, "bos_token_id", None)


# ---- quantization -------------------------------------------------------------------------------
def make_quantizer(
    recipe: str,
    block_size: int = 32,
    kv_bits: Optional[int] = 8,
    layers_8bit: Sequence[str] = DEFAULT_8BIT_LAYERS,
    float_mlp_down: bool = False,
):
    """QnnQuantizer for a quantized recipe (QuantRecipe with a MinMax activation observer: the
    union of everything calibration showed, as upstream's LLM recipes do). `layers_8bit`:
    16a4w_block's linears (regexes on their module path) kept 16a8w per channel.
    `float_mlp_down`: every MLP down projection fp16a8w (float activations, int8 per-channel
    weights); its input, the SiLU x up product, is left float by quantize_static_modules."""
    from torchao.quantization.pt2e import MinMaxObserver

    from backends.qualcomm.quantizer import QnnQuantizer, QuantDtype, QuantGranularity, QuantRecipe

    if recipe == "16a8w":
        plan = QuantRecipe(QuantDtype.use_16a8w, False, MinMaxObserver, QuantGranularity.PER_CHANNEL, note="16a8w")
    elif recipe == "16a4w_block":
        plan = QuantRecipe(
            QuantDtype.use_16a4w_block,
            False,
            MinMaxObserver,
            QuantGranularity.PER_BLOCK,
            note="16a4w LPBQ",
            extra_kwargs={"block_size": (1, int(block_size))},
        )
        if layers_8bit:
            plan.add_regex(
                set(layers_8bit),
                QuantDtype.use_16a8w,
                False,
                MinMaxObserver,
                QuantGranularity.PER_CHANNEL,
                note="16a8w overrides (head, down projection)",
                priority=2,
            )
        if kv_bits == 8:
            plan.custom_quant_annotations.append(annotate_kv_cache_8bit)
    else:
        raise ValueError(f"recipe {recipe!r} is not a quantized recipe (quantized: 16a8w, 16a4w_block)")
    if float_mlp_down:
        plan.add_regex(
            {MLP_DOWN_REGEX},
            QuantDtype.use_fp16a8w,
            False,
            MinMaxObserver,
            QuantGranularity.PER_CHANNEL,
            note="float MLP down projection (fp16a8w)",
            priority=3,
        )
    quantizer = QnnQuantizer()
    quantizer.set_recipe(plan)
    return quantizer


def _cache_placeholders(graph_module: GraphModule) -> List[Node]:
    """The past-cache placeholders, in forward's order (K of every layer, then V)."""
    inputs = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
    return [n for n in inputs if n.name.startswith("caches")]


def _cat_of(placeholder: Node) -> Node:
    cats = [u for u in placeholder.users if u.target == torch.ops.aten.cat.default]
    if len(cats) != 1:
        raise RuntimeError(f"cache input {placeholder.name}: expected one cat user, got {list(placeholder.users)}")
    return cats[0]


def annotate_kv_cache_8bit(graph_module: GraphModule) -> None:
    """Per layer and per K / V: the past cache input, the new entries (the graph output) and
    their concatenation share one uint8 encoding. The new entries are 16-bit where they are
    computed (the rotary add, the v projection) and converted to 8 bits once (QNN Convert), at
    the K transpose / V transpose that produces the returned tensor."""
    from torchao.quantization.pt2e import MinMaxObserver
    from torchao.quantization.pt2e.quantizer import QuantizationAnnotation, QuantizationSpec, SharedQuantizationSpec

    key = "quantization_annotation"
    spec8 = QuantizationSpec(
        dtype=torch.uint8,
        quant_min=0,
        quant_max=255,
        qscheme=torch.per_tensor_affine,
        observer_or_fake_quant_ctr=MinMaxObserver.with_args(eps=0.0001 / 255),
    )
    for placeholder in _cache_placeholders(graph_module):
        cat = _cat_of(placeholder)
        new = cat.args[0][1]  # the transpose producing the returned new entries
        if not isinstance(new, Node) or new.target != torch.ops.aten.transpose.int:
            raise RuntimeError(f"cache {placeholder.name}: new entries come from {new}, expected a transpose")
        source = new.args[0]
        new.meta[key] = QuantizationAnnotation(
            input_qspec_map={source: spec8}, output_qspec=SharedQuantizationSpec((source, new)), _annotated=True
        )
        shared = SharedQuantizationSpec((source, new))
        cat.meta[key] = QuantizationAnnotation(
            input_qspec_map={placeholder: shared, new: shared}, output_qspec=shared, _annotated=True
        )


def module_path(node: Node) -> str:
    """The path of the innermost module an exported node was traced in ("" for none), e.g.
    "model.layers.0.mlp.down_proj"."""
    stack = list((node.meta.get("nn_module_stack") or {}).values())
    return stack[-1][0] if stack else ""


def mlp_product_node(node: Node) -> bool:
    """True for an MLP's SiLU and its product with the up projection (the down projection's
    input; HF Llama / Qwen MLPs: down_proj(act_fn(gate_proj(x)) * up_proj(x)))."""
    path = module_path(node)
    if path.endswith("mlp.act_fn"):
        return True
    return path.endswith("mlp") and node.target in (torch.ops.aten.mul.Tensor, torch.ops.aten.mul_.Tensor)


def _observer_of(graph_module: GraphModule, node: Node):
    """The observer module that observes `node`'s output in a prepared graph (None if none)."""
    for user in node.users:
        if user.op == "call_module" and "activation_post_process" in str(user.target):
            return getattr(graph_module, user.target)
    return None


def unify_cache_encodings(prepared: Dict[str, GraphModule]) -> int:
    """Give each cache input (and what shares its observer) the union of its ranges over the
    methods; returns the number of cache tensors unified."""
    per_method = {name: _cache_placeholders(gm) for name, gm in prepared.items()}
    counts = {len(v) for v in per_method.values()}
    if len(counts) != 1:
        raise RuntimeError(f"methods have different cache inputs: { {k: len(v) for k, v in per_method.items()} }")
    unified = 0
    for i in range(counts.pop()):
        observers = [_observer_of(gm, per_method[name][i]) for name, gm in prepared.items()]
        observers = [o for o in observers if o is not None and hasattr(o, "min_val")]
        if len(observers) < 2:
            continue
        low = torch.stack([o.min_val for o in observers]).min()
        high = torch.stack([o.max_val for o in observers]).max()
        for o in observers:
            o.min_val.copy_(low)
            o.max_val.copy_(high)
        unified += 1
    return unified


def _observer_sites(graph_module: GraphModule) -> List[tuple]:
    """(observer module name, name of the node it observes) in graph order."""
    sites = []
    for node in graph_module.graph.nodes:
        if node.op == "call_module" and "activation_post_process" in str(node.target):
            source = node.args[0]
            sites.append((str(node.target), source.name if isinstance(source, Node) else str(source)))
    return sites


def unify_encodings(prepared: Dict[str, GraphModule]) -> str:
    """Every activation encoding the same in all methods (the union of their ranges) when the
    methods' prepared graphs have the same observers on the same nodes (they are traced from
    the same code; only N differs): a token then gets the same encodings whichever method
    computes it, and the host engine's 16-bit lookup tables are equal, so the weight-shared
    payload stores them once. Otherwise only the caches are unified. Returns "all" or "caches"."""
    graphs = list(prepared.values())
    sites = [_observer_sites(gm) for gm in graphs]
    if any(s != sites[0] for s in sites[1:]):
        unify_cache_encodings(prepared)
        return "caches"
    for module_name, _ in sites[0]:
        observers = [getattr(gm, module_name) for gm in graphs]
        if not all(hasattr(o, "min_val") and hasattr(o, "max_val") for o in observers):
            continue
        if any(o.min_val.shape != observers[0].min_val.shape or o.min_val.numel() == 0 for o in observers):
            continue
        low = torch.stack([o.min_val for o in observers]).amin(dim=0)
        high = torch.stack([o.max_val for o in observers]).amax(dim=0)
        for o in observers:
            o.min_val.copy_(low)
            o.max_val.copy_(high)
    return "all"


def quantize_static_modules(
    modules: Dict[str, StaticDecoder],
    recipe: str,
    calibration: Sequence[Sequence[int]],
    block_size: int = 32,
    kv_bits: Optional[int] = 8,
    layers_8bit: Sequence[str] = DEFAULT_8BIT_LAYERS,
    block_scale_search: str = "max",
    keep_float: Optional[Callable[[Node], bool]] = None,
    float_mlp_down: bool = False,
) -> Dict[str, GraphModule]:
    """PT2E prepare of both methods, calibration through the generation loop, cache encodings
    unified, convert. Returns {method: converted GraphModule}. `block_scale_search`: "max" (LPBQ
    block scales from each block's max |w|) or "mse" (the integer block scale with the least
    squared error per block; LpbqObserver.mse_search). `keep_float`: nodes of the exported graph
    left unquantized (accuracy analysis: QnnQuantizer.add_discard_nodes). `float_mlp_down`: every
    MLP's SiLU, its product with the up projection and the down projection in float (fp16 on HTP),
    the down projection's weights int8 per channel (make_quantizer): the product carries the
    model's massive activations, whose 16-bit encoding leaves typical values a few codes."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from backends.qualcomm.llm.generate import ModuleProgram, teacher_forced
    from backends.qualcomm.quantizer.observers import LpbqObserver

    if not calibration:
        raise ValueError(f"recipe {recipe}: calibration needs at least one token sequence")
    prepared = {}
    for name, module in modules.items():
        inputs = module.example_inputs(module.shape.ar_len)
        exported = torch.export.export(module, inputs, strict=False).module()
        quantizer = make_quantizer(recipe, block_size, kv_bits, layers_8bit, float_mlp_down)
        if keep_float is not None:
            quantizer.add_discard_nodes(n.name for n in exported.graph.nodes if keep_float(n))
        if float_mlp_down:
            quantizer.add_discard_nodes(n.name for n in exported.graph.nodes if mlp_product_node(n))
        prepared[name] = prepare_pt2e(exported, quantizer)
        if block_scale_search not in ("max", "mse"):
            raise ValueError(f"block_scale_search must be 'max' or 'mse', got {block_scale_search!r}")
        for observer in prepared[name].modules():
            if isinstance(observer, LpbqObserver):
                observer.mse_search = block_scale_search == "mse"
    program = ModuleProgram(prepared, modules["prefill"].shape)
    with torch.no_grad():
        for ids in calibration:
            teacher_forced(program, list(ids))
    unify_encodings(prepared)
    return {name: convert_pt2e(gm) for name, gm in prepared.items()}


def compile_specs(
    recipe: str, soc=None, weight_sharing: bool = True, multi_contexts: bool = False, online_prepare: bool = False
):
    from backends.qualcomm import QcomChipset, generate_htp_compiler_spec, generate_qnn_executorch_compiler_spec

    return generate_qnn_executorch_compiler_spec(
        soc or QcomChipset.SM8650,
        generate_htp_compiler_spec(
            use_fp16=(recipe == "fp16"), use_weight_sharing=weight_sharing, use_multi_contexts=multi_contexts
        ),
        online_prepare=online_prepare,
    )


def backend_config():
    """ExecuTorch's serialization config for the LLM methods: graph inputs are not memory-planned
    (alloc_graph_input=False), so a call reads the caller's tensors in place instead of copying
    every input into the method's planned memory first: a decode call of SmolLM2-135M at context
    512 passes 23.5 MB of cache, copied once per token otherwise. The runners own the buffers."""
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass

    return ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False))


def export_static_llm(
    hf_model: torch.nn.Module,
    path: Union[str, Path],
    recipe: str = "fp16",
    context_len: int = 512,
    ar_len: int = 32,
    calibration: Optional[Sequence[Sequence[int]]] = None,
    block_size: int = 32,
    kv_bits: Optional[int] = 8,
    soc=None,
    convert_linear_to_conv2d: bool = False,
    weight_sharing: bool = True,
    verbose: bool = True,
    layers_8bit: Sequence[str] = DEFAULT_8BIT_LAYERS,
    block_scale_search: str = "max",
    num_sharding: int = 1,
    online_prepare: bool = False,
    text_llm_runner: bool = False,
    uint8_cache_io: bool = True,
    split_heads: bool = False,
    float_mlp_down: bool = False,
) -> ExportResult:
    """Export `hf_model` (LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM) as a .pte with
    `prefill` (ar_len tokens) and `decode` (1 token) methods sharing weights in one QNN context.
    `calibration`: token sequences for the quantized recipes. `kv_bits`: 8 (16a4w_block's 8-bit
    cache) or None (16-bit like every activation). `weight_sharing=False`: one context per method
    (for comparison). `layers_8bit`, `block_scale_search`: 16a4w_block's 16a8w linears and LPBQ
    block-scale choice (quantize_static_modules). `num_sharding`: split the layers into that many
    shards, one context each (see the module docstring; ShardingError unless 1 <= N <= layers).
    `online_prepare`: store no QNN context binary; QNN builds and finalizes the graphs when the
    program loads on its engine (docs/real-qnn.md#online-prepare). `text_llm_runner=True`: the
    program ExecuTorch's TextLLMRunner runs instead, one `forward` method (tokens, input_pos) ->
    logits with the KV cache in mutable buffers (mutable_cache.py; `ar_len` and `kv_bits` unused:
    the cache is 16-bit in quantized recipes; not with `online_prepare` or `num_sharding` > 1).
    `uint8_cache_io`: an 8-bit cache (16a4w_block, kv_bits=8) crosses the program boundary as its
    uint8 codes, so the runner's cache buffers are uint8 (cache_codes.py); False: float32 buffers.
    `split_heads`: one attention per query head, q / k / v projected per head
    (static_decoder.SplitHeadAttention); same inputs and outputs (not with `text_llm_runner`).
    `float_mlp_down` (quantized recipes): every MLP's SiLU x up product and down projection in
    float16 on HTP, the down projection's weights int8 per channel (quantize_static_modules).
    Prints the export time, peak RSS and the size of every context."""
    from backends.qualcomm import to_edge_transform_and_lower_to_qnn
    from backends.qualcomm.partitioner.sharding import even_shard_layers

    if recipe not in RECIPES:
        raise ValueError(f"unknown recipe {recipe!r}; recipes: {', '.join(RECIPES)}")
    if kv_bits not in (8, None):
        raise ValueError(f"kv_bits must be 8 or None, got {kv_bits!r}")
    if float_mlp_down and (recipe == "fp16" or text_llm_runner):
        raise ValueError(
            f"float_mlp_down=True needs a quantized recipe (16a8w, 16a4w_block) and the prefill / decode "
            f"program, got recipe {recipe!r}, text_llm_runner={text_llm_runner}"
        )
    path = Path(path)
    if text_llm_runner:
        _check_text_llm_runner_options(recipe, num_sharding, calibration, online_prepare, split_heads)
        quantization = (calibration, block_size, layers_8bit)
        return _export_forward_program(
            hf_model, path, recipe, context_len, quantization, soc, convert_linear_to_conv2d, verbose
        )
    shard_layers = even_shard_layers(int(hf_model.config.num_hidden_layers), num_sharding)
    start = time.perf_counter()
    stages: Dict[str, float] = {}
    modules = static_modules(hf_model, context_len, ar_len, split_heads)
    shape = modules["prefill"].shape
    inputs = {"prefill": modules["prefill"].example_inputs(ar_len), "decode": modules["decode"].example_inputs(1)}
    lowered_modules: Dict[str, torch.nn.Module] = dict(modules)
    if recipe != "fp16":
        t = time.perf_counter()
        lowered_modules = quantize_static_modules(
            modules,
            recipe,
            calibration or [],
            block_size,
            kv_bits if recipe == "16a4w_block" else None,
            layers_8bit,
            block_scale_search,
            float_mlp_down=float_mlp_down,
        )
        if uint8_cache_io and recipe == "16a4w_block" and kv_bits == 8:
            inputs = _uint8_cache_inputs(lowered_modules, inputs)
        stages["quantize"] = time.perf_counter() - t
    t = time.perf_counter()
    eos_ids, bos_id = _eos_and_bos(hf_model)
    edge = to_edge_transform_and_lower_to_qnn(
        lowered_modules,
        inputs,
        compile_specs(recipe, soc, weight_sharing, multi_contexts=num_sharding > 1, online_prepare=online_prepare),
        constant_methods=constant_methods(shape, eos_ids, bos_id),
        convert_linear_to_conv2d=convert_linear_to_conv2d,
        shard_layers=shard_layers if num_sharding > 1 else None,
    )
    contexts = context_sizes(edge)
    stages["lower"] = time.perf_counter() - t
    t = time.perf_counter()
    program = edge.to_executorch(backend_config())
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        program.write_to_file(f)
    stages["serialize"] = time.perf_counter() - t
    result = ExportResult(
        path,
        recipe,
        shape,
        time.perf_counter() - start,
        peak_rss_mb(),
        stages,
        lowered_modules,
        num_sharding,
        contexts,
    )
    if verbose:
        print(result.summary())
    return result


def _uint8_cache_inputs(modules: Dict[str, GraphModule], inputs: Dict[str, tuple]) -> Dict[str, tuple]:
    """Rewrites each converted method to uint8 cache I/O (cache_codes_io); returns the example
    inputs with uint8 caches."""
    from backends.qualcomm.llm.cache_codes import cache_codes_io

    rewritten = {}
    for name, module in modules.items():
        n_caches = cache_codes_io(module)
        fixed = len(inputs[name]) - n_caches
        rewritten[name] = inputs[name][:fixed] + tuple(
            torch.zeros_like(c, dtype=torch.uint8) for c in inputs[name][fixed:]
        )
    return rewritten


# ---- the program of ExecuTorch's TextLLMRunner ----------------------------------------------------
def _check_text_llm_runner_options(
    recipe: str, num_sharding: int, calibration, online_prepare: bool, split_heads: bool
) -> None:
    if recipe != "fp16" and not calibration:
        raise ValueError(f"text_llm_runner=True, recipe {recipe}: calibration needs at least one token sequence")
    if num_sharding != 1:
        raise ValueError(f"text_llm_runner=True: num_sharding must be 1, got {num_sharding}")
    if online_prepare:
        raise ValueError("text_llm_runner=True: online_prepare is not supported")
    if split_heads:
        raise ValueError(
            "text_llm_runner=True: split_heads is not supported (the forward program's attention is not split)"
        )


def quantize_forward_module(
    module: torch.nn.Module,
    recipe: str,
    calibration: Sequence[Sequence[int]],
    block_size: int = 32,
    layers_8bit: Sequence[str] = DEFAULT_8BIT_LAYERS,
) -> GraphModule:
    """PT2E prepare of the forward module (MutableCacheDecoder), calibration one token per call
    over each sequence (positions 0 .. C - 2, the cache in the module's buffers), convert. The
    cache stays 16-bit (annotate_kv_cache_8bit is for the prefill / decode layout)."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    exported = torch.export.export(module, module.example_inputs(), strict=False).module()
    prepared = prepare_pt2e(exported, make_quantizer(recipe, block_size, None, layers_8bit))
    last = module.shape.context_len - 1
    for ids in calibration:
        for position, token in enumerate(list(ids)[:last]):
            prepared(torch.tensor([[int(token)]]), torch.tensor([position]))
    return convert_pt2e(prepared)


def _export_forward_program(
    hf_model: torch.nn.Module,
    path: Path,
    recipe: str,
    context_len: int,
    quantization: tuple,
    soc,
    convert_linear_to_conv2d: bool,
    verbose: bool,
) -> ExportResult:
    """One `forward` method (MutableCacheDecoder, quantized unless fp16) and TextLLMRunner's
    metadata; the caches' initial value (zeros) serialized, as ExecuTorch's llama export does.
    `quantization`: (calibration, block_size, layers_8bit)."""
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

    from backends.qualcomm import to_edge_transform_and_lower_to_qnn
    from backends.qualcomm.llm.mutable_cache import MutableCacheDecoder

    start = time.perf_counter()
    stages: Dict[str, float] = {}
    module = MutableCacheDecoder(hf_model.eval(), context_len).eval()
    lowered_module: torch.nn.Module = module
    eos_ids, bos_id = _eos_and_bos(hf_model)
    with torch.no_grad():
        if recipe != "fp16":
            lowered_module = quantize_forward_module(module, recipe, *quantization)
            stages["quantize"] = time.perf_counter() - start
        t = time.perf_counter()
        edge = to_edge_transform_and_lower_to_qnn(
            {"forward": lowered_module},
            {"forward": module.example_inputs()},
            compile_specs(recipe, soc, weight_sharing=False),
            constant_methods=text_llm_runner_constant_methods(module.shape, eos_ids, bos_id),
            convert_linear_to_conv2d=convert_linear_to_conv2d,
        )
    contexts = context_sizes(edge)
    lowered = time.perf_counter()
    stages["lower"] = lowered - t
    program = edge.to_executorch(ExecutorchBackendConfig(passes=[InitializedMutableBufferPass(["cache"])]))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        program.write_to_file(f)
    end = time.perf_counter()
    stages["serialize"] = end - lowered
    result = ExportResult(
        path, recipe, module.shape, end - start, peak_rss_mb(), stages, {"forward": lowered_module}, 1, contexts
    )
    if verbose:
        print(result.summary())
    return result
