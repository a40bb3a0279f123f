"""QuantRecipe: upstream's rule-based alternative to default + submodule configs
(QnnQuantizer.set_recipe). Strategies match nodes by op target or by a regex over the
nn_module_stack paths; the highest priority wins (ties: the one added first), and the
recipe's own default strategy (every supported op) comes last."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field, replace
from typing import Dict, Iterable, List, Optional, Set

from torch.fx import Node

from backends.qualcomm.quantizer.module_config import ModuleQConfig
from backends.qualcomm.quantizer.qconfig import QuantConfig, QuantDtype


class QuantGranularity(enum.IntEnum):
    """Weight granularity of a strategy (upstream's values)."""

    PER_TENSOR = 0
    PER_CHANNEL = 1
    PER_BLOCK = 2


@dataclass
class QuantizationStrategy:
    quant_dtype: QuantDtype
    is_qat: bool
    granularity: QuantGranularity
    act_observer: Optional[type]
    act_symmetric: bool = False
    extra_kwargs: Dict = field(default_factory=dict)
    note: str = ""
    priority: int = 1
    targets: Optional[Set[object]] = None  # by node target
    patterns: Optional[Set[str]] = None  # by module-stack regex
    quant_config: QuantConfig = field(init=False, repr=False)

    def __post_init__(self) -> None:
        granularity = QuantGranularity(self.granularity)
        per_channel = granularity != QuantGranularity.PER_TENSOR
        config = ModuleQConfig(
            QuantDtype(self.quant_dtype),
            is_qat=self.is_qat,
            is_conv_per_channel=per_channel,
            is_linear_per_channel=per_channel,
            act_observer=self.act_observer,
            act_symmetric=self.act_symmetric,
        ).quant_config
        if granularity == QuantGranularity.PER_BLOCK:
            block = self.extra_kwargs.get("block_size")
            if config.weight_block is None or block is None:
                raise ValueError(
                    f"QuantRecipe: PER_BLOCK needs QuantDtype.use_16a4w_block and "
                    f"extra_kwargs={{'block_size': (1, b, ...)}}, got {QuantDtype(self.quant_dtype).name} "
                    f"and {self.extra_kwargs}"
                )
            config = replace(config, block_size=tuple(block))
        elif config.weight_block is not None and granularity != QuantGranularity.PER_BLOCK:
            config = replace(config, weight_block=None)  # 16a4w_block asked per tensor / channel
        self.quant_config = config

    def matches(self, node: Node) -> bool:
        if self.targets is not None:
            return node.target in self.targets
        for path, _ in reversed(list((node.meta.get("nn_module_stack") or {}).values())):
            if path and any(re.search(p, path) for p in self.patterns or ()):
                return True
        return False


class QuantRecipe:
    """Builder: QuantRecipe(dtype, is_qat, act_observer, granularity).add_node_target(...).add_regex(...)."""

    def __init__(
        self,
        quant_dtype: QuantDtype,
        is_qat: bool,
        act_observer,
        granularity: QuantGranularity,
        act_symmetric: bool = False,
        note: str = "",
        extra_kwargs: Optional[dict] = None,
        verbose: bool = False,
    ):
        self.verbose = verbose
        self.custom_quant_annotations: List = []
        self._strategies: List[QuantizationStrategy] = []
        self._default_args = dict(
            quant_dtype=quant_dtype,
            is_qat=is_qat,
            granularity=granularity,
            act_observer=act_observer,
            act_symmetric=act_symmetric,
            extra_kwargs=dict(extra_kwargs or {}),
            note=note,
        )
        self._default_strategy: Optional[QuantizationStrategy] = None
        self._chosen: Dict[str, QuantizationStrategy] = {}

    def add_node_target(
        self,
        targets: Iterable[object],
        quant_dtype: QuantDtype,
        is_qat: bool,
        act_observer,
        granularity: QuantGranularity,
        act_symmetric: bool = False,
        note: str = "",
        priority: int = 1,
        extra_kwargs: Optional[dict] = None,
    ) -> "QuantRecipe":
        """Nodes whose target is one of `targets` get this quantization."""
        args = (quant_dtype, is_qat, granularity, act_observer, act_symmetric, dict(extra_kwargs or {}), note, priority)
        self._strategies.append(QuantizationStrategy(*args, targets=set(targets)))
        return self

    def add_regex(
        self,
        regex: Iterable[str],
        quant_dtype: QuantDtype,
        is_qat: bool,
        act_observer,
        granularity: QuantGranularity,
        act_symmetric: bool = False,
        note: str = "",
        priority: int = 1,
        extra_kwargs: Optional[dict] = None,
    ) -> "QuantRecipe":
        """Nodes whose name (or module path) matches one of the `regex` patterns get this
        quantization."""
        args = (quant_dtype, is_qat, granularity, act_observer, act_symmetric, dict(extra_kwargs or {}), note, priority)
        self._strategies.append(QuantizationStrategy(*args, patterns=set(regex)))
        return self

    def initialize_default_strategy_ops(self, supported_ops: Iterable[object]) -> None:
        self._default_strategy = QuantizationStrategy(**self._default_args, priority=1, targets=set(supported_ops))

    def _ordered(self) -> List[QuantizationStrategy]:
        ranked = sorted(enumerate(self._strategies), key=lambda s: (-s[1].priority, s[0]))
        return [s for _, s in ranked] + ([self._default_strategy] if self._default_strategy else [])

    def quant_config_for(self, node: Node) -> Optional[QuantConfig]:
        for strategy in self._ordered():
            if strategy.matches(node):
                self._chosen[node.name] = strategy
                return strategy.quant_config
        return None

    def summary(self, max_rows: int = -1) -> Optional[str]:
        """One line per annotated node: module path, target, dtype/QAT, observer, granularity, note."""
        if not self._chosen:
            return None
        rows = []
        for name, s in list(self._chosen.items())[: max_rows if max_rows > 0 else None]:
            observer = s.act_observer.__name__ if s.act_observer else "default"
            rows.append(
                f"{name} | {QuantDtype(s.quant_dtype).name}/{'QAT' if s.is_qat else 'PTQ'} | {observer} | "
                f"{QuantGranularity(s.granularity).name} | {s.note} | {s.extra_kwargs or ''}"
            )
        return "\n".join(rows)
