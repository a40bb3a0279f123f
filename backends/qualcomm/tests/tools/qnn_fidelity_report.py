"""QNN fidelity report: per op and dtype, how our host engine compares with Qualcomm's QNN HTP
library (x86 emulation of the same delegate, built from the same payload).

    python -m backends.qualcomm.tests.tools.qnn_fidelity_report [--dtypes fp16 8a8w 16a8w] [--families ...]

Each op family is one multi-output module (tests/helpers/models_quant.py); each row
is one op output. Quantized rows: share of bit-exact elements and the largest difference in
steps of the output encoding. fp16 rows: share of equal elements and the largest difference
relative to the largest |output| (fp16 rounding is about 1e-3). Families QNN refuses at
finalize are listed with QNN's error."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import List, Optional, Tuple

REPO_ROOT = Path(__file__).resolve().parents[4]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from backends.qualcomm.serialization.payload_writer import QnnHtpSection, wrap_context_binary  # noqa: E402
from backends.qualcomm.tests.helpers.quant_tester import QuantTester, output_encodings  # noqa: E402
from backends.qualcomm.tests.helpers.tester import QnnTester, inputs_of  # noqa: E402
from backends.qualcomm.tests.tools.quant_fidelity_report import DTYPES, FAMILIES, WEIGHT_ONLY_FAMILIES  # noqa: E402
from backends.qualcomm.utils.qnn_context import payload_of, qnn_library_status  # noqa: E402
from backends.qualcomm.utils.runtime_options import require_extension  # noqa: E402

SM8650 = 57


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", nargs="+", default=["fp16", "8a8w", "16a8w"], choices=["fp16", *sorted(DTYPES)])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    return parser.parse_args(argv)


def with_qnn_binary(blob: bytes) -> Tuple[Optional[bytes], str]:
    """The blob with a QNN context binary for SM8650, or (None, QNN's error)."""
    try:
        binary, graphs = require_extension().qnn_compile(blob, SM8650)
    except RuntimeError as exc:
        return None, str(exc)
    section = QnnHtpSection(bytes(binary), SM8650, [(str(n), list(ids)) for n, ids in graphs])
    return wrap_context_binary(payload_of(blob), section), ""


def lowered(family: str, dtype_name: str):
    """(tester, inputs, per-output quant scale or None) of one family in one dtype."""
    factory, shapes, per_channel = FAMILIES[family]
    module = factory()
    inputs = shapes if isinstance(shapes, tuple) else inputs_of(*shapes)
    if dtype_name == "fp16":
        tester = QnnTester(module, inputs).lower()
        return tester, inputs, [None] * len(getattr(module, "names", [family]))
    tester = QuantTester(module, inputs, DTYPES[dtype_name], per_channel=per_channel).lower()
    return tester, inputs, [enc[0] if enc else None for enc in output_encodings(tester.module)]


def compare(qnn: np.ndarray, host: np.ndarray, scale: Optional[float]) -> Tuple[float, float]:
    """(share of equal elements, max difference in steps or relative to max |host|)."""
    if scale is None:
        diff = np.abs(qnn.astype(np.float64) - host.astype(np.float64))
        top = max(float(np.abs(host).max()) if host.size else 0.0, 1e-12)
        return float((diff == 0).mean()) if diff.size else 1.0, float(diff.max() / top) if diff.size else 0.0
    steps = np.abs(np.rint(qnn.astype(np.float64) / scale) - np.rint(host.astype(np.float64) / scale))
    return float((steps == 0).mean()) if steps.size else 1.0, float(steps.max()) if steps.size else 0.0


def family_rows(family: str, dtype_name: str) -> List[Tuple[str, str]]:
    tester, inputs, scales = lowered(family, dtype_name)
    blobs = tester.delegate_blobs()
    if len(blobs) != 1:
        return [(family, f"{len(blobs)} delegates: skipped")]
    blob, error = with_qnn_binary(blobs[0])
    if blob is None:
        return [(family, "does not finalize on QNN: " + error.split(":  <W>")[0][:160])]
    ext = require_extension()
    arrays = [x.numpy() for x in inputs]
    qnn, _ = ext.run_payload_qnn(blob, arrays)
    host = ext.run_payload(blob, arrays)
    names = getattr(tester.module, "names", None) or getattr(FAMILIES[family][0](), "names", [family])
    rows = []
    for i, (q, h) in enumerate(zip(qnn, host)):
        scale = scales[i] if i < len(scales) else None
        exact, worst = compare(np.asarray(q), np.asarray(h), scale)
        unit = "steps" if scale is not None else "rel"
        name = names[i] if i < len(names) else f"out{i}"
        rows.append((name, f"{q.size:>7} {exact:>9.3%} {worst:>10.4g} {unit}"))
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    loaded, status = qnn_library_status()
    if not loaded:
        print(f"QNN library not available: {status}")
        return 1
    torch.manual_seed(0)
    print(f"# {status}\n{'family':<14} {'op':<18} {'dtype':<6} {'elements':>7} {'exact':>9} {'max diff':>10}")
    for family in args.families:
        for dtype_name in args.dtypes:
            if dtype_name not in ("fp16", "8a8w", "16a8w") and family not in WEIGHT_ONLY_FAMILIES:
                continue
            try:
                rows = family_rows(family, dtype_name)
            except Exception as exc:  # noqa: BLE001 - one family's failure must not end the report
                rows = [(family, f"error: {type(exc).__name__}: {str(exc)[:120]}")]
            for op, text in rows:
                print(f"{family:<14} {op:<18} {dtype_name:<6} {text}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
