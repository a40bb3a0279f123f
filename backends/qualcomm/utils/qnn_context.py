"""Real QNN at lowering: build a delegate blob's graphs through Qualcomm's QNN library
(libQnnHtp.so, loaded by the native extension) for the compile spec's SoC and store the
finalized context binary in the blob next to the payload.

Without the libraries lowering still works (payload only; said once). When QNN refuses
a graph, that delegate gets no context binary and a warning names the graph, op and QNN
error; lowering never fails because of QNN.
"""

from __future__ import annotations

import logging
import os
from typing import Optional, Tuple

from backends.qualcomm.serialization import qnn_payload_generated as gen
from backends.qualcomm.serialization.payload_writer import QnnHtpSection, wrap_context_binary
from backends.qualcomm.utils.runtime_options import load_extension

logger = logging.getLogger("backends.qualcomm")

# Set to "0" to skip building QNN context binaries at lowering (payload only).
AOT_ENV = "QNN_DELEGATE_CONTEXT_BINARY"

_said_unavailable = False


def qnn_library_status() -> Tuple[bool, str]:
    """(loaded, text): whether Qualcomm's QNN HTP library loads here; its versions or why not."""
    extension = load_extension()
    if extension is None:
        return False, "the native extension backends.qualcomm._qnn_delegate is not built"
    loaded, text = extension.qnn_library_status()
    return bool(loaded), str(text)


def _say_unavailable_once(reason: str) -> None:
    global _said_unavailable
    if not _said_unavailable:
        _said_unavailable = True
        logger.warning("qnn-delegate: no QNN context binaries (payload only): %s", reason)


def qnn_aot_enabled() -> bool:
    """Whether lowering builds QNN context binaries here (QNN_DELEGATE_CONTEXT_BINARY is not
    "0" and the QNN library loads); when not, says why (once per process)."""
    if os.environ.get(AOT_ENV, "1") == "0":
        _say_unavailable_once(f"disabled by {AOT_ENV}=0")
        return False
    loaded, text = qnn_library_status()
    if not loaded:
        _say_unavailable_once(text)
    return loaded


def payload_of(blob: bytes) -> bytes:
    """The nested QnnPayload bytes of a delegate blob."""
    root = gen.QnnContextBinary.GetRootAs(bytearray(blob), 0)
    return root.PayloadAsNumpy().tobytes()


def qnn_binary_of(blob: bytes) -> Optional[bytes]:
    """The QNN context binary a delegate blob carries, or None."""
    root = gen.QnnContextBinary.GetRootAs(bytearray(blob), 0)
    section = root.QnnContext()
    if section is None or section.BinaryLength() == 0:
        return None
    return section.BinaryAsNumpy().tobytes()


def compile_qnn_section(blob: bytes, soc_model: int, vtcm_mb: int = 0, optimization_level: int = 0) -> QnnHtpSection:
    """Every graph of `blob` built and finalized in one QNN context (RuntimeError when QNN
    refuses: the message names graph, op and QNN error)."""
    extension = load_extension()
    binary, graphs = extension.qnn_compile(blob, int(soc_model), int(vtcm_mb), int(optimization_level))
    return QnnHtpSection(
        binary=bytes(binary), soc_model=int(soc_model), graphs=[(str(name), list(ids)) for name, ids in graphs]
    )


def attach_qnn_context(blob: bytes, soc_model: int, vtcm_mb: int = 0, label: str = "delegate") -> bytes:
    """`blob` with a QNN context binary added, or `blob` unchanged when the libraries are
    missing, disabled by QNN_DELEGATE_CONTEXT_BINARY=0, or QNN refuses a graph (warned)."""
    if not qnn_aot_enabled():
        return blob
    try:
        section = compile_qnn_section(blob, soc_model, vtcm_mb)
    except RuntimeError as exc:
        logger.warning("qnn-delegate: %s gets no QNN context binary (it runs on the host engine only): %s", label, exc)
        return blob
    return wrap_context_binary(payload_of(blob), section)


def soc_and_vtcm(options) -> Tuple[int, int]:
    """(SoC model, VTCM MB) of QnnExecuTorchOptions (0 when not given)."""
    soc = options.socInfo
    soc_model = int(soc.socModel) if soc is not None else 0
    vtcm = int(soc.htpInfo.vtcmSizeInMb) if soc is not None and soc.htpInfo is not None else 0
    return soc_model, vtcm


def online_prepare_of(options) -> Optional[Tuple[int, int]]:
    """(SoC model, VTCM MB) QNN prepares the graphs for at init when online_prepare is set."""
    return soc_and_vtcm(options) if getattr(options, "onlinePrepare", False) else None


DEFAULT_SAVER_OUTPUT_DIR = "saver_output"


def record_with_saver(blob: bytes, output_dir: str, label: str = "delegate") -> None:
    """Build the blob's graphs through QNN's saver (libQnnSaver.so), which records the QNN calls
    into `output_dir` (saver_output.c + params.bin). RuntimeError naming the delegate when the
    saver does not load or refuses a graph."""
    extension = load_extension()
    if extension is None:
        raise RuntimeError("saver: the native extension backends.qualcomm._qnn_delegate is not built")
    try:
        extension.qnn_record_with_saver(blob, output_dir)
    except (RuntimeError, ValueError) as exc:
        raise RuntimeError(f"saver=True: {label}: {exc}") from None
    logger.warning("qnn-delegate: %s: QNN API calls recorded by QNN's saver in %s", label, os.path.abspath(output_dir))


def attach_qnn_context_for_options(blob: bytes, options, label: str = "delegate") -> bytes:
    """attach_qnn_context with the SoC model and VTCM size of QnnExecuTorchOptions; with
    online_prepare the blob stays without a binary (QNN builds it at init); with saver the
    graphs are also recorded through QNN's saver."""
    if getattr(options, "saver", False):
        folder = options.saverOutputDir
        folder = folder.decode() if isinstance(folder, bytes) else (folder or DEFAULT_SAVER_OUTPUT_DIR)
        record_with_saver(blob, folder, label)
    if getattr(options, "onlinePrepare", False):
        return blob
    soc_model, vtcm = soc_and_vtcm(options)
    return attach_qnn_context(blob, soc_model, vtcm, label)
