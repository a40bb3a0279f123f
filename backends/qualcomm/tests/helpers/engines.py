"""A delegate on both engines: QNN's context binary for a payload, the engine option, and QNN's
outputs against the host engine's (each check returns when QNN's library does not load)."""

from __future__ import annotations

from typing import List, Optional

import numpy as np

from backends.qualcomm import QuantDtype
from backends.qualcomm.serialization import qnn_payload_generated as gen
from backends.qualcomm.serialization.payload_writer import QnnHtpSection, wrap_context_binary
from backends.qualcomm.tests.helpers.quant_tester import output_encodings_with_range, step_stats
from backends.qualcomm.tests.helpers.runtime import QNN_LOADED, QNN_STATUS, native, payload_on_both_engines
from backends.qualcomm.tests.helpers.tester import QnnTester
from backends.qualcomm.utils.qnn_context import payload_of
from backends.qualcomm.utils.runtime_options import require_extension

SM8650 = 57
# First 16 bytes of a QNN context binary written by QNN 2.51 (PLATFORM.md).
CONTEXT_BINARY_MAGIC = bytes.fromhex("00000002000000030000000000000001")


def with_qnn_binary(blob: bytes) -> bytes:
    binary, graphs = require_extension().qnn_compile(blob, SM8650)
    section = QnnHtpSection(bytes(binary), SM8650, [(str(n), list(ids)) for n, ids in graphs])
    return wrap_context_binary(payload_of(blob), section)


def set_engine(engine: str) -> None:
    native().set_runtime_option("qnn_runtime_engine", engine)


def rewrite_qnn_section(blob: bytes, binary: bytes = None, soc_model: int = None) -> bytes:
    """The blob with its QNN section's binary / SoC replaced (signature recomputed)."""
    section = gen.QnnContextBinary.GetRootAs(bytearray(blob), 0).QnnContext()
    graphs = [
        (section.Graphs(i).Name().decode(), section.Graphs(i).TensorIdsAsNumpy().tolist())
        for i in range(section.GraphsLength())
    ]
    return wrap_context_binary(
        payload_of(blob),
        QnnHtpSection(
            binary=binary if binary is not None else section.BinaryAsNumpy().tobytes(),
            soc_model=soc_model if soc_model is not None else section.SocModel(),
            graphs=graphs,
        ),
    )


def qnn_vs_host(tester: QnnTester, inputs, scales: Optional[List[Optional[float]]] = None) -> List[str]:
    """QNN's outputs against the host engine's on the delegate (when QNN's library loads):
    int / bool exactly; float (fp16 graphs, or `scales` None) within 2e-3 of the output's
    magnitude; quantized outputs in steps (returned, the caller bounds them)."""
    if not QNN_LOADED:
        return []
    qnn, host = payload_on_both_engines(tester.delegate_blobs()[0], inputs, tester.module)
    report = []
    for i, (q, h) in enumerate(zip(qnn, host)):
        assert q.shape == h.shape and q.dtype == h.dtype, (i, q.shape, h.shape, q.dtype, h.dtype)
        if h.dtype == np.bool_ or np.issubdtype(h.dtype, np.integer):
            np.testing.assert_array_equal(q, h, err_msg=f"QNN vs host, output {i}")
        elif scales is None or scales[i] is None:
            err = float(np.abs(q - h).max())
            print(f"QNN vs host, output {i}: max abs diff {err:.3g}")
            assert err <= 2e-3 * max(1.0, float(np.abs(h).max())), f"QNN vs host, output {i}: {err}"
        else:
            report.append(step_stats(q, h, scales[i]))
    return report


# Share of bool outputs allowed to differ from the QDQ reference in quantized graphs: an input
# one step from the threshold, quantized by the graph's Quantize (x * fp16(1 / scale)), may get
# the neighbouring code of PT2E's round(x / scale).
MAX_BOOL_MISMATCH = 0.02


# QNN vs host engine, 16-bit outputs: 1/8 of an 8-bit step (measured max: cos(2x) 26, its
# 16-bit input x * 2 computed by QNN's integer Multiply vs the host's float one).
MAX_STEPS_16 = 32


def compare_engines(
    qnn: List[np.ndarray], host: List[np.ndarray], scales: List[float], max_steps: float, fp16: bool
) -> List[str]:
    report = []
    for i, (q, h) in enumerate(zip(qnn, host)):
        assert q.shape == h.shape, (i, q.shape, h.shape)
        if h.dtype == np.bool_ or q.dtype == np.bool_ or np.issubdtype(h.dtype, np.integer):
            wrong = int((q.astype(np.int64) != h.astype(np.int64)).sum())
            report.append(f"{i}: {wrong} of {q.size} differ")
            # Quantized: an input one step from the threshold may be quantized to the other
            # code by the graph-input Quantize (16a8w xor: measured 1 of 120).
            assert wrong <= (0 if fp16 else MAX_BOOL_MISMATCH * q.size), report[-1]
            continue
        if fp16:
            err = float(np.abs(q.astype(np.float64) - h.astype(np.float64)).max())
            report.append(f"{i}: max {err:.3g}")
            assert err <= 2e-3 * max(1.0, float(np.abs(h).max())), report[-1]
            continue
        stats = step_stats(q, h, scales[i])
        steps = np.abs(np.rint(q.astype(np.float64) / scales[i]) - np.rint(h.astype(np.float64) / scales[i]))
        report.append(f"{i}: {stats}")
        # where(x > 0, x, 0): an x whose condition flips (see above) selects the other branch.
        assert float((steps > max_steps).mean()) <= MAX_BOOL_MISMATCH, report[-1]
    return report


def check_on_qnn(tester: QnnTester, inputs, quant_dtype) -> List[str]:
    """QNN's outputs vs the host engine's on the delegate (skipped without QNN's library)."""
    if not QNN_LOADED:
        return [f"QNN not checked: {QNN_STATUS}"]
    scales = [1.0] * len(tester.outputs)
    if quant_dtype is not None:
        scales = [e[0] if e is not None else 1.0 for e in output_encodings_with_range(tester.module)]
    qnn, host = payload_on_both_engines(tester.delegate_blobs()[0], inputs, tester.module)
    max_steps = 1 if quant_dtype != QuantDtype.use_16a8w else MAX_STEPS_16
    return compare_engines(qnn, host, scales, max_steps, quant_dtype is None)


def assert_host_equals_qnn(tester) -> None:
    """When Qualcomm's QNN HTP library loads here: the delegate built into a QNN context (SM8650)
    and run on QNN and on the host engine with the tester's inputs gives the same quantized
    outputs, every element (QNN dequantizes to float16, so they are compared in steps of each
    output's encoding). Single-delegate quantized programs (QuantTester) only."""
    import numpy as np

    from backends.qualcomm.serialization.payload_writer import wrap_context_binary
    from backends.qualcomm.tests.helpers.quant_tester import output_encodings, step_stats
    from backends.qualcomm.utils.qnn_context import compile_qnn_section, payload_of, qnn_library_status
    from backends.qualcomm.utils.runtime_options import require_extension

    if not qnn_library_status()[0]:
        return
    (blob,) = tester.delegate_blobs()
    blob = wrap_context_binary(payload_of(blob), compile_qnn_section(blob, 57))  # 57 = SM8650
    arrays = [x.numpy() for x in tester.inputs]
    qnn, _ = require_extension().run_payload_qnn(blob, arrays)
    host = require_extension().run_payload(blob, arrays)
    for q, h, (scale, _) in zip(qnn, host, output_encodings(tester.module)):
        stats = step_stats(np.asarray(q), np.asarray(h), scale)
        assert stats.exact == stats.total, f"QNN vs host engine: {stats}"
