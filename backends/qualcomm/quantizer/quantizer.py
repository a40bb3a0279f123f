"""QnnQuantizer: a torchao PT2E Quantizer for qnn-delegate (prepare_pt2e / convert_pt2e /
prepare_qat_pt2e).

    quantizer = QnnQuantizer()
    quantizer.set_default_quant_config(QuantDtype.use_8a8w, is_conv_per_channel=True)
    prepared = prepare_pt2e(torch.export.export(model, inputs).module(), quantizer)
    prepared(*calibration_inputs)
    converted = convert_pt2e(prepared)"""
from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

import torch
from torch.fx import GraphModule, Node
from torchao.quantization.pt2e import MinMaxObserver
from torchao.quantization.pt2e.quantizer import Quantizer

from backends.qualcomm.quantizer.annotators import CONV_OPS, LINEAR_OPS, annotator_for, is_annotated
from backends.qualcomm.quantizer.qconfig import (
    DEFAULT_BLOCK_SIZE, QuantConfig, QuantDtype, make_quant_config,
)

# (module type or name, QuantDtype[, is_conv_per_channel, is_linear_per_channel])
SubmoduleRule = Tuple


def _module_matches(node: Node, key: Union[str, type]) -> bool:
    """True when the node was traced inside a module of that type / fully-qualified name."""
    stack = node.meta.get("nn_module_stack") or {}
    for path, module_type in stack.values():
        if isinstance(key, str):
            if path == key or path.startswith(key + "."):
                return True
        elif isinstance(module_type, type) and issubclass(module_type, key):
            return True
        elif isinstance(module_type, str) and module_type.endswith("." + key.__name__):
            return True
    return False


class QnnQuantizer(Quantizer):
    """Annotates conv/linear, elementwise, activation, norm, pool, reduce and shape ops."""

    def __init__(self):
        super().__init__()
        self.default_config: QuantConfig = make_quant_config(QuantDtype.use_8a8w)
        self.default_quant_dtype = QuantDtype.use_8a8w
        self.submodule_configs: List[Tuple[Union[str, type], QuantConfig]] = []
        self.block_size_map: Dict[str, int] = {}
        self.discard_nodes: Set[str] = set()
        self.discard_ops: Set[object] = set()

    # ---- configuration -------------------------------------------------------------
    def set_default_quant_config(self, quant_dtype: QuantDtype, is_qat: bool = False,
                                 is_conv_per_channel: bool = False, is_linear_per_channel: bool = False,
                                 act_observer=MinMaxObserver) -> None:
        self.default_quant_dtype = QuantDtype(quant_dtype)
        self.default_config = make_quant_config(quant_dtype, is_qat, is_conv_per_channel,
                                                is_linear_per_channel, act_observer)

    def set_submodule_qconfig_list(self, rules: Sequence[SubmoduleRule]) -> None:
        """Mixed precision: [(nn.Module type or module name, QuantDtype, [conv_pc, linear_pc]), ...];
        the first matching rule wins, other nodes use the default config."""
        self.submodule_configs = []
        for rule in rules:
            key, dtype, *flags = rule
            self.submodule_configs.append((key, make_quant_config(dtype, False, *flags)))

    def set_block_size_map(self, block_size_map: Dict[str, int]) -> None:
        """LPBQ block size (input channels per block) per conv/linear node name."""
        self.block_size_map = {str(k): int(v) for k, v in block_size_map.items()}

    def add_discard_nodes(self, names: Iterable[str]) -> None:
        """Nodes (by name) left unquantized (they stay float)."""
        self.discard_nodes.update(str(n) for n in names)

    def add_discard_ops(self, ops: Iterable[object]) -> None:
        """Ops (aten OpOverloads) left unquantized wherever they appear."""
        self.discard_ops.update(ops)

    # ---- Quantizer API ------------------------------------------------------------------
    def _config_for(self, node: Node) -> QuantConfig:
        for key, config in self.submodule_configs:
            if _module_matches(node, key):
                return config
        return self.default_config

    def _block_size(self, node: Node, config: QuantConfig) -> Optional[int]:
        if config.weight_block is None or node.target not in CONV_OPS + LINEAR_OPS:
            return None
        if node.name in self.block_size_map:
            return self.block_size_map[node.name]
        cin = int(node.args[1].meta["val"].shape[1])
        return DEFAULT_BLOCK_SIZE if cin % DEFAULT_BLOCK_SIZE == 0 else cin

    def _skipped(self, node: Node) -> bool:
        return node.name in self.discard_nodes or node.target in self.discard_ops

    def annotate(self, model: GraphModule) -> GraphModule:
        for node in model.graph.nodes:
            if node.op != "call_function" or is_annotated(node) or self._skipped(node):
                continue
            annotator: Optional[Callable] = annotator_for(node.target)
            if annotator is None:
                continue
            config = self._config_for(node)
            block = self._block_size(node, config)
            if block:
                annotator(node, config, block)
            else:
                annotator(node, config)
        return model

    def validate(self, model: GraphModule) -> None:
        for node in model.graph.nodes:
            block = self.block_size_map.get(node.name)
            if block and node.target in CONV_OPS + LINEAR_OPS:
                cin = node.args[1].meta["val"].shape[1]
                if cin % block:
                    raise ValueError(f"block size {block} of node '{node.name}' does not divide "
                                     f"its input channels {cin}")

    def transform_for_annotation(self, model: GraphModule) -> GraphModule:
        return model
