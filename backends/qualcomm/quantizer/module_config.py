"""ModuleQConfig (upstream's dataclass, same fields and defaults) and the node predicates
used with QnnQuantizer.set_submodule_qconfig_list."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Type

from torch.fx import Node

from backends.qualcomm.quantizer.qconfig import QuantConfig, QuantDtype, make_quant_config


@dataclass
class ModuleQConfig:
    """One quantization setting: dtype, QAT or PTQ, per-channel weights per op family,
    activation observer / symmetry and the smallest scale (eps). act_observer None means
    PassUnionMovingAverageObserver (PTQ) or
    MovingAverageMinMaxObserver (QAT), eps None means 1e-4 /
    (2**act_bits - 1) (upstream's)."""

    quant_dtype: QuantDtype = QuantDtype.use_8a8w
    is_qat: bool = False
    is_conv_per_channel: bool = False
    is_linear_per_channel: bool = False
    is_embedding_per_channel: bool = False
    act_observer: Optional[Type] = None
    act_symmetric: bool = False
    eps: Optional[float] = None
    quant_config: QuantConfig = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.quant_dtype = QuantDtype(self.quant_dtype)
        if self.eps is not None and not float(self.eps) >= 0:  # 0 / None: the default (as upstream)
            raise ValueError(f"ModuleQConfig: eps must be >= 0, got {self.eps}")
        self.quant_config = make_quant_config(
            self.quant_dtype,
            is_qat=self.is_qat,
            is_conv_per_channel=self.is_conv_per_channel,
            is_linear_per_channel=self.is_linear_per_channel,
            act_observer=self.act_observer,
            is_embedding_per_channel=self.is_embedding_per_channel,
            act_symmetric=self.act_symmetric,
            eps=self.eps,
        )


def _module_stack(node: Node) -> dict:
    return node.meta.get("nn_module_stack") or {}


def get_submodule_type_predicate(module_type_str: str) -> Callable[[Node], bool]:
    """Nodes traced inside a module whose type name contains `module_type_str`."""

    def predicate(node: Node) -> bool:
        for _, module_type in _module_stack(node).values():
            name = (
                module_type if isinstance(module_type, str) else f"{module_type.__module__}.{module_type.__qualname__}"
            )
            if module_type_str in name:
                return True
        return False

    return predicate


def get_submodule_name_predicate(module_name_str: str) -> Callable[[Node], bool]:
    """Nodes traced inside a module whose nn_module_stack key or path contains `module_name_str`."""

    def predicate(node: Node) -> bool:
        return any(
            module_name_str in key or module_name_str in str(path) for key, (path, _) in _module_stack(node).items()
        )

    return predicate


def module_matches(node: Node, key) -> bool:
    """Our older rule keys: an nn.Module type (subclasses match) or a fully-qualified module name."""
    for path, module_type in _module_stack(node).values():
        if isinstance(key, str):
            if path == key or path.startswith(key + "."):
                return True
        elif isinstance(module_type, type) and issubclass(module_type, key):
            return True
        elif isinstance(module_type, str) and module_type.endswith("." + key.__name__):
            return True
    return False
