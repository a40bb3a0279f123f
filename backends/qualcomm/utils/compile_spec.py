"""Typed compile options (from qc_compiler_spec.fbs) and the CompileSpec helpers."""

from __future__ import annotations

from enum import IntEnum
from typing import Dict, List, Optional, Tuple, Type, Union

import flatbuffers
from executorch.exir.backend.compile_spec_schema import CompileSpec

from backends.qualcomm.serialization import qc_compiler_spec_generated as gen
from backends.qualcomm.utils.constants import QCOM_COMPILE_SPEC_KEY

_FILE_IDENTIFIER = b"QCOS"


def _enum_from_generated(name: str) -> IntEnum:
    members = {k: v for k, v in vars(getattr(gen, name)).items() if not k.startswith("_")}
    return IntEnum(name, members)


QcomChipset = _enum_from_generated("QcomChipset")
HtpArch = _enum_from_generated("HtpArch")
QnnExecuTorchBackendType = _enum_from_generated("QnnExecuTorchBackendType")
QnnExecuTorchHtpPerformanceMode = _enum_from_generated("QnnExecuTorchHtpPerformanceMode")
QnnExecuTorchHtpPrecision = _enum_from_generated("QnnExecuTorchHtpPrecision")
QnnExecuTorchLogLevel = _enum_from_generated("QnnExecuTorchLogLevel")
QnnExecuTorchProfileLevel = _enum_from_generated("QnnExecuTorchProfileLevel")

QnnExecuTorchOptionsT = gen.QnnExecuTorchOptionsT
QnnExecuTorchBackendOptionsT = gen.QnnExecuTorchBackendOptionsT
QnnExecuTorchHtpBackendOptionsT = gen.QnnExecuTorchHtpBackendOptionsT

# SoC -> (HTP arch, VTCM size in MB).
_SOC_TABLE: Dict[str, Tuple[str, int]] = {
    "SA8295": ("V68", 8),
    "SA8797": ("V81", 16),
    "SC8380XP": ("V73", 8),
    "SM8350": ("V68", 4),
    "SM8450": ("V69", 8),
    "SM8475": ("V69", 8),
    "SM8550": ("V73", 8),
    "SA8255": ("V73", 8),
    "SM8650": ("V75", 8),
    "SM8750": ("V79", 8),
    "SM8850": ("V81", 8),
    "SSG2115P": ("V73", 2),
    "SSG2125P": ("V73", 2),
    "SXR1230P": ("V73", 2),
    "SXR2230P": ("V69", 8),
    "SXR2330P": ("V79", 8),
    "QCS9100": ("V73", 8),
    "SAR2230P": ("V81", 4),
    "SW6100": ("V81", 4),
    "QCM6490": ("V68", 2),
    "SM8845": ("V81", 8),
}


def _valid_members(enum_cls: Type[IntEnum], names: Optional[List[str]] = None) -> str:
    return ", ".join(f"{m.name} ({int(m)})" for m in enum_cls if names is None or m.name in names)


def enum_option(option: str, enum_cls: Type[IntEnum], value: object, allowed: Optional[List[str]] = None) -> IntEnum:
    """`value` (a member of `enum_cls` or an equal-valued IntEnum, its name in any case, or its
    int value) as a member of `enum_cls`; ValueError naming `option` and the valid values."""
    member = None
    if isinstance(value, str):
        wanted = value.strip().split(".")[-1].lower()
        member = next((m for m in enum_cls if m.name.lower() == wanted), None)
    elif isinstance(value, int) and not isinstance(value, bool):
        member = next((m for m in enum_cls if int(m) == int(value)), None)
    if member is None or (allowed is not None and member.name not in allowed):
        raise ValueError(
            f"{option}={value!r} is not a valid {enum_cls.__name__}; valid values: {_valid_members(enum_cls, allowed)}"
        )
    return member


def as_chipset(soc_model: Union["QcomChipset", str, int]) -> "QcomChipset":
    """A QcomChipset from the enum, its name (case-insensitive, e.g. "sm8650") or its value."""
    return enum_option("soc_model", QcomChipset, soc_model, allowed=list(_SOC_TABLE))


def _bool_option(option: str, value: object) -> bool:
    if not isinstance(value, (bool, int)) or isinstance(value, int) and value not in (0, 1):
        raise ValueError(f"{option}={value!r} must be a bool (True or False)")
    return bool(value)


def get_soc_info(soc_model: Union["QcomChipset", str, int]) -> gen.SocInfoT:
    """SocInfoT (arch and VTCM size) of a chipset; ValueError for an unknown one."""
    chipset = as_chipset(soc_model)
    arch, vtcm = _SOC_TABLE[chipset.name]
    htp_info = gen.HtpInfoT()
    htp_info.htpArch = int(HtpArch[arch])
    htp_info.vtcmSizeInMb = vtcm
    soc_info = gen.SocInfoT()
    soc_info.socModel = int(chipset)
    soc_info.htpInfo = htp_info
    return soc_info


def generate_htp_compiler_spec(
    use_fp16: bool,
    use_dlbc: bool = False,
    use_multi_contexts: bool = False,
    use_weight_sharing: bool = False,
    use_slc_allocator: bool = False,
    htp_performance_mode: "QnnExecuTorchHtpPerformanceMode" = QnnExecuTorchHtpPerformanceMode.kHtpBurst,
) -> QnnExecuTorchBackendOptionsT:
    """HTP backend options: fp16 or quantized precision, performance mode, context sharing.
    ValueError on a non-bool flag or an unknown performance mode (name or value)."""
    _bool_option("use_dlbc", use_dlbc)  # accepted for upstream compatibility; no effect here
    _bool_option("use_slc_allocator", use_slc_allocator)  # idem (a device cache allocator)
    htp = QnnExecuTorchHtpBackendOptionsT()
    htp.precision = int(
        QnnExecuTorchHtpPrecision.kHtpFp16
        if _bool_option("use_fp16", use_fp16)
        else QnnExecuTorchHtpPrecision.kHtpQuantized
    )
    htp.performanceMode = int(
        enum_option("htp_performance_mode", QnnExecuTorchHtpPerformanceMode, htp_performance_mode)
    )
    htp.useMultiContexts = _bool_option("use_multi_contexts", use_multi_contexts)
    htp.useWeightSharing = _bool_option("use_weight_sharing", use_weight_sharing)
    options = QnnExecuTorchBackendOptionsT()
    options.backendType = int(QnnExecuTorchBackendType.kHtpBackend)
    options.htpOptions = htp
    return options


def _reject_unsupported_options(**flags: bool) -> None:
    enabled = [name for name, value in flags.items() if value]
    if enabled:
        raise ValueError(
            f"qnn-delegate does not support compile option(s) {enabled}: "
            "not built yet (custom op packages need Qualcomm's op package tools; the MHA-to-SHA "
            "rewrite is not implemented). Leave them False / None."
        )


def generate_qnn_executorch_compiler_spec(
    soc_model: "QcomChipset",
    backend_options: QnnExecuTorchBackendOptionsT,
    debug: bool = False,
    saver: bool = False,
    online_prepare: bool = False,
    dump_intermediate_outputs: bool = False,
    profile_level: int = 0,
    shared_buffer: bool = False,
    is_from_context_binary: bool = False,
    op_package_options: Optional[object] = None,
    use_mha2sha: bool = False,
    graph_name: Optional[List[str]] = None,
) -> List[CompileSpec]:
    """One CompileSpec ("qnn_compile_spec") holding the QnnExecuTorchOptions flatbuffer.
    `soc_model`: QcomChipset, its name or its value. ValueError on an unknown SoC, profile
    level or a non-bool flag."""
    if not isinstance(backend_options, QnnExecuTorchBackendOptionsT):
        raise ValueError(
            f"backend_options must come from generate_htp_compiler_spec(...), got {type(backend_options).__name__}"
        )
    _reject_unsupported_options(
        op_package_options=op_package_options is not None,
        use_mha2sha=_bool_option("use_mha2sha", use_mha2sha),
    )
    options = QnnExecuTorchOptionsT()
    options.socInfo = get_soc_info(soc_model)
    options.backendOptions = backend_options
    options.graphName = list(graph_name) if graph_name else ["forward"]
    options.logLevel = int(
        QnnExecuTorchLogLevel.kLogLevelDebug if _bool_option("debug", debug) else QnnExecuTorchLogLevel.kLogLevelError
    )
    options.profileLevel = int(enum_option("profile_level", QnnExecuTorchProfileLevel, profile_level))
    options.dumpIntermediateOutputs = _bool_option("dump_intermediate_outputs", dump_intermediate_outputs)
    options.isFromContextBinary = _bool_option("is_from_context_binary", is_from_context_binary)
    options.saver = _bool_option("saver", saver)
    options.saverOutputDir = "saver_output" if saver else None
    options.onlinePrepare = _bool_option("online_prepare", online_prepare)
    options.sharedBuffer = _bool_option("shared_buffer", shared_buffer)
    return [CompileSpec(QCOM_COMPILE_SPEC_KEY, serialize_options(options))]


def serialize_options(options: QnnExecuTorchOptionsT) -> bytes:
    """QnnExecuTorchOptions flatbuffer bytes (file identifier QCOS)."""
    builder = flatbuffers.Builder(256)
    builder.Finish(options.Pack(builder), file_identifier=_FILE_IDENTIFIER)
    return bytes(builder.Output())


def deserialize_options(blob: bytes) -> QnnExecuTorchOptionsT:
    """QnnExecuTorchOptionsT read back from flatbuffer bytes."""
    root = gen.QnnExecuTorchOptions.GetRootAs(bytearray(blob), 0)
    return QnnExecuTorchOptionsT.InitFromObj(root)


def check_compile_specs(compile_specs: object, argument: str = "compiler_specs") -> List[CompileSpec]:
    """`compile_specs` as a list of CompileSpec; ValueError naming `argument` and what it needs
    otherwise (None, HTP backend options passed where compile specs belong, other objects)."""
    how = "make them with generate_qnn_executorch_compiler_spec(soc_model, backend_options)"
    if isinstance(compile_specs, QnnExecuTorchBackendOptionsT):
        raise ValueError(
            f"{argument}: got HTP backend options (generate_htp_compiler_spec's result), which go "
            f"inside the compile specs: {how}"
        )
    if not isinstance(compile_specs, (list, tuple)) or not all(isinstance(s, CompileSpec) for s in compile_specs):
        raise ValueError(f"{argument}: needs a list of CompileSpec, got {type(compile_specs).__name__}: {how}")
    return list(compile_specs)


def options_from_compile_specs(compile_specs: List[CompileSpec]) -> QnnExecuTorchOptionsT:
    """The QnnExecuTorchOptions carried by a compile-spec list; ValueError if missing or unreadable."""
    for spec in check_compile_specs(compile_specs):
        if spec.key == QCOM_COMPILE_SPEC_KEY:
            return _readable_options(spec.value)
    raise ValueError(
        f"compile specs have no '{QCOM_COMPILE_SPEC_KEY}' entry: make them with "
        "generate_qnn_executorch_compiler_spec(soc_model, backend_options)"
    )


def _readable_options(blob: object) -> QnnExecuTorchOptionsT:
    if isinstance(blob, (bytes, bytearray)) and len(blob) >= 8 and bytes(blob[4:8]) == _FILE_IDENTIFIER:
        try:
            return deserialize_options(blob)
        except Exception:  # noqa: BLE001 - any decoding failure is the same user error
            pass
    size = len(blob) if isinstance(blob, (bytes, bytearray)) else type(blob).__name__
    raise ValueError(
        f"compile spec '{QCOM_COMPILE_SPEC_KEY}' does not hold QnnExecuTorchOptions (a '"
        f"{_FILE_IDENTIFIER.decode()}' flatbuffer; got {size} bytes): make it with "
        "generate_qnn_executorch_compiler_spec(soc_model, backend_options)"
    )


def is_fp16(options: QnnExecuTorchOptionsT) -> bool:
    """True when the HTP precision is fp16 (float graphs run in float16)."""
    backend = options.backendOptions
    htp = backend.htpOptions if backend is not None else None
    return htp is not None and htp.precision == int(QnnExecuTorchHtpPrecision.kHtpFp16)


def graph_names(options: QnnExecuTorchOptionsT) -> List[str]:
    """Graph names of the options as str (defaults to ["forward"])."""
    names = options.graphName or []
    decoded = [n.decode() if isinstance(n, bytes) else str(n) for n in names]
    return decoded or ["forward"]
