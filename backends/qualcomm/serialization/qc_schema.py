"""Upstream's module path <upstream>.serialization.qc_schema (the enums of
the compile options)."""
from backends.qualcomm.utils.compile_spec import (
    HtpArch, QcomChipset, QnnExecuTorchBackendType, QnnExecuTorchHtpPerformanceMode,
    QnnExecuTorchHtpPrecision, QnnExecuTorchLogLevel, QnnExecuTorchProfileLevel,
)

__all__ = ["HtpArch", "QcomChipset", "QnnExecuTorchBackendType", "QnnExecuTorchHtpPerformanceMode",
           "QnnExecuTorchHtpPrecision", "QnnExecuTorchLogLevel", "QnnExecuTorchProfileLevel"]
