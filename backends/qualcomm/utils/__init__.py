from backends.qualcomm.utils.compile_spec import (
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
from backends.qualcomm.utils.errors import QnnLoweringError

__all__ = [
    "HtpArch",
    "QcomChipset",
    "QnnExecuTorchBackendType",
    "QnnExecuTorchHtpPerformanceMode",
    "QnnExecuTorchHtpPrecision",
    "QnnExecuTorchLogLevel",
    "QnnExecuTorchProfileLevel",
    "QnnLoweringError",
    "generate_htp_compiler_spec",
    "generate_qnn_executorch_compiler_spec",
]
