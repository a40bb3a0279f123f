"""QnnQuantizer: a torchao PT2E Quantizer for qnn-delegate (prepare_pt2e / convert_pt2e /
prepare_qat_pt2e), with upstream's API (<upstream>.quantizer).

    quantizer = QnnQuantizer()
    quantizer.set_default_quant_config(QuantDtype.use_8a8w, is_conv_per_channel=True)
    prepared = prepare_pt2e(torch.export.export(model, inputs).module(), quantizer)
    prepared(*calibration_inputs)
    converted = convert_pt2e(prepared)

Config of a node, first that applies: the recipe (set_recipe); else a submodule rule
(set_submodule_qconfig_list, first match); else the default. A block_size_map entry makes
that node's conv/linear weight LPBQ with that block size."""

from __future__ import annotations

import logging
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

from torch._ops import OpOverload
from torch.fx import GraphModule, Node
from torchao.quantization.pt2e.quantizer import Quantizer

from backends.qualcomm._passes.fuse_rms_norm import fuse_rms_norm
from backends.qualcomm.quantizer import block_sizes
from backends.qualcomm.quantizer.annotators import (
    CONV_OPS,
    LINEAR_OPS,
    TRANSPOSED_CONV_OPS,
    annotate_weighted,
    annotator_for,
    is_annotated,
    is_transposed_conv,
    supported_ops,
)
from backends.qualcomm.quantizer.batch_stats_norm import rewrite_batch_stats_norms
from backends.qualcomm.quantizer.decompose_composites import decompose_composites
from backends.qualcomm.quantizer.decompose_sdpa import decompose_sdpa
from backends.qualcomm.quantizer.fold_constant_views import fold_constant_views
from backends.qualcomm.quantizer.inf_masks import rewrite_inf_masked_softmax
from backends.qualcomm.quantizer.module_config import (  # noqa: F401 (upstream's names here)
    ModuleQConfig,
    get_submodule_name_predicate,
    get_submodule_type_predicate,
    module_matches,
)
from backends.qualcomm.quantizer.qconfig import DEFAULT_BLOCK_SIZE, QuantConfig, QuantDtype
from backends.qualcomm.utils.compile_spec import QcomChipset, QnnExecuTorchBackendType, get_soc_info

log = logging.getLogger(__name__)

NodePredicate = Callable[[Node], bool]
# Upstream form: (predicate(node) -> bool, ModuleQConfig). Our older form, still accepted:
# (nn.Module type or module name, QuantDtype[, is_conv_per_channel, is_linear_per_channel]),
# which takes is_qat / act_observer / act_symmetric / eps from the default config.
SubmoduleRule = Tuple


class QnnQuantizer(Quantizer):
    """Annotates conv/linear, embedding, elementwise, activation, norm, pool, reduce and
    shape ops. `backend` / `soc_model` / `strict` are upstream's arguments: only the HTP
    backend exists here, the SoC must be a known one (no per-SoC quant constraints are
    checked), and `strict` is kept for reference."""

    def __init__(
        self,
        backend: QnnExecuTorchBackendType = QnnExecuTorchBackendType.kHtpBackend,
        soc_model: QcomChipset = QcomChipset.SM8750,
        strict: bool = True,
    ):
        super().__init__()
        if int(backend) != int(QnnExecuTorchBackendType.kHtpBackend):
            raise ValueError(
                f"QnnQuantizer: backend {QnnExecuTorchBackendType(int(backend)).name} is not "
                f"supported by qnn-delegate; only kHtpBackend"
            )
        self.backend = QnnExecuTorchBackendType(int(backend))
        self.soc_info = get_soc_info(soc_model)
        self.strict = strict
        self.default_quant_config = ModuleQConfig()
        self.submodule_qconfig_list: List[SubmoduleRule] = []
        self.block_size_map: Dict[str, block_sizes.BlockSize] = {}
        self.custom_quant_annotations: Sequence[Callable[[GraphModule], None]] = []
        self.discard_nodes: Set[str] = set()
        self.supported_ops: Set[OpOverload] = supported_ops()
        self.quant_ops: Set[OpOverload] = set(self.supported_ops)
        self._recipe = None

    # ---- configuration (upstream's names and arguments) ------------------------------------
    @property
    def default_quant_dtype(self) -> QuantDtype:
        return self.default_quant_config.quant_dtype

    @property
    def default_config(self) -> QuantConfig:
        return self.default_quant_config.quant_config

    @property
    def recipe(self):
        return self._recipe

    def set_default_quant_config(
        self,
        quant_dtype: QuantDtype,
        is_qat: bool = False,
        is_conv_per_channel: bool = False,
        is_linear_per_channel: bool = False,
        is_embedding_per_channel: bool = False,
        act_observer=None,
        act_symmetric: bool = False,
        eps: Optional[float] = None,
    ) -> None:
        """act_observer None: PassUnionMovingAverageObserver (PTQ), MovingAverageMinMaxObserver (QAT); eps None: 1e-4 / (2**act_bits - 1)."""
        self.default_quant_config = ModuleQConfig(
            quant_dtype,
            is_qat=is_qat,
            is_conv_per_channel=is_conv_per_channel,
            is_linear_per_channel=is_linear_per_channel,
            is_embedding_per_channel=is_embedding_per_channel,
            act_observer=act_observer,
            act_symmetric=act_symmetric,
            eps=eps,
        )

    def set_submodule_qconfig_list(self, submodule_qconfig_list: Sequence[SubmoduleRule]) -> None:
        """[(predicate(node) -> bool, ModuleQConfig), ...] (upstream), or our older
        [(nn.Module type or module name, QuantDtype[, conv_pc, linear_pc]), ...]; the first
        matching rule wins, other nodes use the default config."""
        rules = []
        for i, rule in enumerate(submodule_qconfig_list):
            if not isinstance(rule, (tuple, list)) or len(rule) < 2:
                raise ValueError(
                    f"set_submodule_qconfig_list: rule {i} must be (predicate, ModuleQConfig), got {rule!r}"
                )
            key, config = rule[0], rule[1]
            if isinstance(config, ModuleQConfig):
                if len(rule) != 2 or not callable(key) or isinstance(key, type):
                    raise ValueError(
                        f"set_submodule_qconfig_list: rule {i}: with a ModuleQConfig the key "
                        f"must be a predicate function of a node, got {key!r}"
                    )
            elif isinstance(config, (QuantDtype, int)) and not isinstance(config, bool):
                if not isinstance(key, (str, type)) or len(rule) > 4:
                    raise ValueError(
                        f"set_submodule_qconfig_list: rule {i}: with a QuantDtype the key must "
                        f"be an nn.Module type or a module name, got {key!r}"
                    )
                QuantDtype(config)
            else:
                raise ValueError(
                    f"set_submodule_qconfig_list: rule {i}: second item must be a "
                    f"ModuleQConfig (or a QuantDtype), got {config!r}"
                )
            rules.append(tuple(rule))
        self.submodule_qconfig_list = rules

    def set_block_size_map(self, block_size_map: Dict[str, Union[int, Tuple[int, ...]]]) -> None:
        """LPBQ block size per conv/linear node name: upstream's tuple, one entry per weight
        dim ({"conv2d": (1, 16, 1, 1)}, {"linear": (1, 16)}), or an int (input channels per
        block). Checked here (> 0) and at annotation (node exists, shape fits)."""
        self.block_size_map = {
            str(k): block_sizes.normalize_block_size(str(k), v) for k, v in dict(block_size_map).items()
        }

    def add_custom_quant_annotations(self, custom_quant_annotations: Sequence[Callable]) -> None:
        """Functions fn(graph_module) run after the built-in annotation (they may annotate
        or re-annotate nodes themselves)."""
        self.custom_quant_annotations = list(custom_quant_annotations)

    def add_discard_nodes(self, nodes: Iterable[str]) -> None:
        """Nodes (by name) left unquantized (they stay float)."""
        self.discard_nodes.update(str(n) for n in nodes)

    def add_discard_ops(self, ops: Iterable[OpOverload]) -> None:
        """Ops (aten OpOverloads) left unquantized wherever they appear."""
        for op in ops:
            self.quant_ops.discard(op)

    @property
    def discard_ops(self) -> Set[OpOverload]:
        return self.supported_ops - self.quant_ops

    def get_supported_ops(self) -> Set[OpOverload]:
        """The OpOverloads this quantizer annotates."""
        return set(self.supported_ops)

    def set_recipe(self, recipe) -> None:
        """A QuantRecipe decides every node's config (the default / submodule configs are unused)."""
        self._recipe = recipe
        recipe.initialize_default_strategy_ops(self.supported_ops)

    # ---- node -> config ---------------------------------------------------------------------
    def _inherit_default(self, dtype: QuantDtype, flags: Sequence[bool]) -> ModuleQConfig:
        d = self.default_quant_config
        conv_pc, linear_pc = (list(flags) + [False, False])[:2]
        return ModuleQConfig(
            QuantDtype(dtype),
            is_qat=d.is_qat,
            is_conv_per_channel=bool(conv_pc),
            is_linear_per_channel=bool(linear_pc),
            is_embedding_per_channel=d.is_embedding_per_channel,
            act_observer=d.act_observer,
            act_symmetric=d.act_symmetric,
            eps=d.eps,
        )

    def _resolved_rules(self) -> List[Tuple[NodePredicate, ModuleQConfig]]:
        rules = []
        for rule in self.submodule_qconfig_list:
            key, config = rule[0], rule[1]
            if isinstance(config, ModuleQConfig):
                if config.is_qat != self.default_quant_config.is_qat:
                    log.warning(
                        "set_submodule_qconfig_list: a rule has is_qat=%s but the default config "
                        "has is_qat=%s; its modules get %s observers",
                        config.is_qat,
                        self.default_quant_config.is_qat,
                        "QAT" if config.is_qat else "PTQ",
                    )
                rules.append((key, config))
            else:
                rules.append(((lambda node, k=key: module_matches(node, k)), self._inherit_default(config, rule[2:])))
        return rules

    def _config_for(self, node: Node, rules) -> Optional[QuantConfig]:
        if self._recipe is not None:
            return self._recipe.quant_config_for(node)
        for predicate, config in rules:
            if predicate(node):
                return config.quant_config
        return self.default_config

    def _block_size(self, node: Node, config: QuantConfig) -> Optional[Tuple[int, ...]]:
        if node.target not in CONV_OPS + LINEAR_OPS + TRANSPOSED_CONV_OPS:
            return None
        transposed = is_transposed_conv(node)
        if node.name in self.block_size_map:
            if config.weight_block is None:
                raise ValueError(
                    f"set_block_size_map: node '{node.name}' has a block size but its config "
                    f"has no block weights; LPBQ needs QuantDtype.use_16a4w_block"
                )
            return block_sizes.weight_block_size(node, self.block_size_map[node.name], transposed)
        if config.weight_block is None or (transposed and not block_sizes.transposed_takes_lpbq(node)):
            return None
        if config.block_size is not None:
            return block_sizes.weight_block_size(node, config.block_size, transposed)
        cin = int(node.args[1].meta["val"].shape[0 if transposed else 1])
        default = DEFAULT_BLOCK_SIZE if cin % DEFAULT_BLOCK_SIZE == 0 else cin
        return block_sizes.weight_block_size(node, default, transposed)

    def _skipped(self, node: Node) -> bool:
        return node.name in self.discard_nodes or node.target not in self.quant_ops

    # ---- Quantizer API ------------------------------------------------------------------
    def annotate(self, model: GraphModule) -> GraphModule:
        nodes = {n.name: n for n in model.graph.nodes}
        block_sizes.check_names(self.block_size_map, nodes, CONV_OPS + LINEAR_OPS + TRANSPOSED_CONV_OPS)
        rules = self._resolved_rules()
        for node in model.graph.nodes:
            if node.op != "call_function" or is_annotated(node) or self._skipped(node):
                continue
            annotator = annotator_for(node.target)
            config = self._config_for(node, rules) if annotator is not None else None
            if config is None:
                continue
            block = self._block_size(node, config)
            if block:
                annotate_weighted(node, config, block)
            else:
                annotator(node, config)
        customs = list(self.custom_quant_annotations)
        if self._recipe is not None:
            customs += list(self._recipe.custom_quant_annotations)
            if self._recipe.verbose:
                print(self._recipe.summary())
        for annotation in customs:
            annotation(model)
        return model

    def validate(self, model: GraphModule) -> None:
        return None

    def transform_for_annotation(self, model: GraphModule) -> GraphModule:
        """scaled_dot_product_attention -> matmul / softmax / elementwise ops (decompose_sdpa.py);
        a hand-written RMSNorm -> one rms_norm (annotated as a whole, _passes/fuse_rms_norm.py);
        batch norms with batch statistics -> _native_batch_norm_legit.no_stats (batch_stats_norm.py);
        softmax of a -inf masked tensor (MultiheadAttention's masks) -> softmax * keep, renormalized
        (inf_masks.py: a quantized tensor cannot hold -inf); splits / views / concatenations of
        parameters -> constants (fold_constant_views.py: MultiheadAttention's packed weights; not
        under QAT, which trains the parameters after prepare); composite ops it does not annotate
        (einsum, glu, divide, linalg_vector_norm, mul.Scalar, in-place activations, ...) -> the
        ops it does (decompose_composites.py)."""
        fuse_rms_norm(model)
        model = fold_constant_views(model, fold_parameters=not self.default_quant_config.is_qat)
        model = rewrite_inf_masked_softmax(decompose_sdpa(model))
        model = rewrite_batch_stats_norms(model)
        return decompose_composites(model, self.quant_ops, keep=self.supported_ops, keep_names=self.discard_nodes)
