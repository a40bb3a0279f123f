"""qnn-delegate: ExecuTorch delegate for Qualcomm QNN-style NPUs (public API)."""

from backends.qualcomm._quiet_imports import silence_third_party_noise as _silence

_silence()  # before torchao / ExecuTorch are imported: drops their known start-up noise only
from backends.qualcomm.utils.runtime_options import load_extension as _load_extension  # noqa: E402

_load_extension()  # registers the QnnDelegate runtime backend when the extension is built

# The out variants of quantize / dequantize: a partly delegated quantized program keeps some
# of them on the CPU, and to_executorch() needs them registered ("Missing out variants").
import executorch.kernels.quantized  # noqa: E402,F401

from backends.qualcomm.partitioner import QnnPartitioner  # noqa: E402
from backends.qualcomm.qnn_preprocess import QnnBackend, QnnDelegate  # noqa: E402
from backends.qualcomm.serialization.payload_reader import deserialize, describe_payload  # noqa: E402
from backends.qualcomm.utils.compile_spec import (  # noqa: E402
    HtpArch,
    QcomChipset,
    QnnExecuTorchBackendType,
    QnnExecuTorchHtpPerformanceMode,
    QnnExecuTorchHtpPrecision,
    QnnExecuTorchLogLevel,
    QnnExecuTorchProfileLevel,
    generate_htp_compiler_spec,
    generate_qnn_executorch_compiler_spec,
)
from backends.qualcomm.utils.errors import QnnLoweringError  # noqa: E402
from backends.qualcomm.utils.lowering import to_edge_transform_and_lower_to_qnn  # noqa: E402
from backends.qualcomm.utils.runtime_options import get_runtime_option, set_runtime_option  # noqa: E402

from backends.qualcomm.quantizer import (  # noqa: E402
    ModuleQConfig,
    QnnQuantizer,
    QuantDtype,
    QuantGranularity,
    QuantRecipe,
    get_submodule_name_predicate,
    get_submodule_type_predicate,
)
from backends.qualcomm.upstream_compat import (  # noqa: E402
    dump_context_from_pte,
    from_context_binary,
    register_upstream_modules,
    skip_annotation,
)

register_upstream_modules()  # upstream's module paths (partition.qnn_partitioner, utils.utils, ...)

__all__ = [
    "HtpArch",
    "QcomChipset",
    "QnnBackend",
    "QnnDelegate",
    "QnnExecuTorchBackendType",
    "QnnExecuTorchHtpPerformanceMode",
    "QnnExecuTorchHtpPrecision",
    "QnnExecuTorchLogLevel",
    "QnnExecuTorchProfileLevel",
    "QnnLoweringError",
    "QnnPartitioner",
    "QnnQuantizer",
    "QuantDtype",
    "deserialize",
    "describe_payload",
    "generate_htp_compiler_spec",
    "generate_qnn_executorch_compiler_spec",
    "get_runtime_option",
    "set_runtime_option",
    "to_edge_transform_and_lower_to_qnn",
    "ModuleQConfig",
    "QuantGranularity",
    "QuantRecipe",
    "get_submodule_name_predicate",
    "get_submodule_type_predicate",
    "dump_context_from_pte",
    "from_context_binary",
    "skip_annotation",
]
