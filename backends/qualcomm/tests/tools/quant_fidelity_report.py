"""Quantized fidelity report: per op and quant dtype, how the delegate's outputs compare
with the converted PT2E (QDQ) reference, in integer steps of the output encoding.

    python -m backends.qualcomm.tests.tools.quant_fidelity_report [--dtypes 8a8w 16a8w] [--families ...]

Every op family is one multi-output module (tests/helpers/models_quant.py), so
each row is one op: the share of elements that are exact, off by one step, or worse."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[4]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from backends.qualcomm import QuantDtype  # noqa: E402
from backends.qualcomm.tests.helpers import models_float as m  # noqa: E402
from backends.qualcomm.tests.helpers import models_quant as mq  # noqa: E402
from backends.qualcomm.tests.helpers.quant_tester import QuantTester, output_encodings, step_stats  # noqa: E402
from backends.qualcomm.tests.helpers.tester import inputs_of  # noqa: E402

# family -> (module factory, input shapes or inputs, per-channel weights)
FAMILIES = {
    "weighted": (mq.weighted, [(1, 16, 8, 8), (4, 16, 32)], True),
    "conv_variants": (mq.conv_variants, [(1, 8, 9, 9)], True),
    "matmul": (mq.matmuls, [(3, 4, 8), (3, 8, 5)], False),
    "binary": (mq.binary, [(2, 3, 4), (2, 3, 4), (4,)], False),
    "activations": (mq.activations, [(2, 4, 6, 6)], False),
    "norms": (mq.norms, [(2, 5, 16)], False),
    "spatial": (mq.spatial, [(1, 4, 9, 9)], False),
    "shapes": (mq.shapes, [(2, 3, 4)], False),
    "embedding": (m.Embedding, (torch.tensor([[1, 5, 9], [0, 2, 2]]),), False),
    "batch_norm": (lambda: m.BatchNorm(4), [(1, 4, 5, 5)], False),
}
WEIGHT_ONLY_FAMILIES = {"weighted", "conv_variants"}
DTYPES = {
    name.replace("use_", ""): dtype for name, dtype in QuantDtype.__members__.items() if dtype != QuantDtype.use_fp16a8w
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", nargs="+", default=["8a8w", "16a8w"], choices=sorted(DTYPES))
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    return parser.parse_args(argv)


def family_rows(family: str, dtype_name: str):
    """[(op name, StepStats)] of one family lowered in one dtype."""
    factory, shapes, per_channel = FAMILIES[family]
    module = factory()
    inputs = shapes if isinstance(shapes, tuple) else inputs_of(*shapes)
    tester = QuantTester(module, inputs, DTYPES[dtype_name], per_channel=per_channel)
    tester.lower().check_fully_delegated().to_executorch().run()
    names = getattr(module, "names", [family])
    rows = []
    for name, out, ref, enc in zip(names, tester.outputs, tester.reference_outputs(), output_encodings(tester.module)):
        rows.append((name, step_stats(out, ref, enc[0])))
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    print(
        f"{'family':<14} {'op':<18} {'dtype':<12} {'elements':>9} {'exact':>9} {'off-by-1':>9} {'worse':>8} {'max':>4}"
    )
    failures = 0
    for family in args.families:
        for dtype_name in args.dtypes:
            if dtype_name not in ("8a8w", "16a8w") and family not in WEIGHT_ONLY_FAMILIES:
                continue  # weight bit widths only matter for ops with weights
            for op, s in family_rows(family, dtype_name):
                total = max(s.total, 1)
                ok = s.max_diff <= 1 and s.exact_fraction >= 0.99
                failures += not ok
                print(
                    f"{family:<14} {op:<18} {dtype_name:<12} {s.total:>9} {s.exact / total:>9.3%} "
                    f"{s.off_by_one / total:>9.3%} {s.worse / total:>8.3%} {s.max_diff:>4}"
                    f"{'' if ok else '  <-- outside the contract'}",
                    flush=True,
                )
    print(f"\n{failures} op/dtype row(s) outside the contract (|diff| <= 1 step, >= 99% exact)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
