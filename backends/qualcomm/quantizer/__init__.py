"""QnnQuantizer (torchao PT2E), its quant dtypes and upstream's config / recipe names."""

from backends.qualcomm.quantizer.module_config import (
    ModuleQConfig,
    get_submodule_name_predicate,
    get_submodule_type_predicate,
)
from backends.qualcomm.quantizer.qconfig import QuantDtype
from backends.qualcomm.quantizer.quant_recipe import QuantGranularity, QuantRecipe
from backends.qualcomm.quantizer.quantizer import QnnQuantizer

__all__ = [
    "ModuleQConfig",
    "QnnQuantizer",
    "QuantDtype",
    "QuantGranularity",
    "QuantRecipe",
    "get_submodule_name_predicate",
    "get_submodule_type_predicate",
]
