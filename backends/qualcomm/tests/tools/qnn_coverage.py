"""Which QNN op types Qualcomm's QNN library finalizes, in which precision, during the real-QNN
tests: the "real QNN (tested)" column of docs/ops.md's op coverage table (ops.toml's `qnn` field).

    python -m backends.qualcomm.tests.tools.qnn_coverage            # run the real-QNN tests, report
    python -m backends.qualcomm.tests.tools.qnn_coverage --write    # ... and write ops.toml's qnn fields

While the tests run (QNN_DELEGATE_RECORD_QNN_OPS=<file>, set by this script), conftest wraps the
extension's `qnn_compile`: every graph QNN builds and finalizes adds one line per op to the file,
"<QNN op type> <precision>", the precision read from the op's tensors (8a8w / 16a8w by the first
uint8 / uint16 fixed-point tensor, fp16 for float ops of an fp16 graph).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, Iterable, Set, Tuple

RECORD_ENV = "QNN_DELEGATE_RECORD_QNN_OPS"
TESTS_DIR = Path(__file__).resolve().parents[1]
# The tests that run graphs on QNN: the real-QNN tests (qnn/) and the op tests (ops/: each family
# also runs on QNN when the library loads).
REAL_QNN_TESTS = [str(TESTS_DIR / "qnn"), str(TESTS_DIR / "ops")]
_PRECISION_BY_DTYPE = {"UFIXED_POINT_8": "8a8w", "UFIXED_POINT_16": "16a8w"}


def compiled_op_precisions(blob: bytes) -> Set[Tuple[str, str]]:
    """(QNN op type, precision) of every op of the payload in `blob`."""
    from backends.qualcomm.serialization.payload_reader import describe_payload

    found = set()
    for graph in describe_payload(blob):
        dtypes = {t.name: t.data_type for t in graph.tensors}
        for op in graph.ops:
            fixed = [
                _PRECISION_BY_DTYPE[dtypes[n]] for n in op.inputs + op.outputs if dtypes.get(n) in _PRECISION_BY_DTYPE
            ]
            if fixed:
                found.add((op.type, fixed[0]))
            elif graph.fp16_precision:
                found.add((op.type, "fp16"))
    return found


def install_recorder(extension, path: str) -> None:
    """Wrap `extension.qnn_compile` so that each graph QNN finalizes is recorded in `path`."""
    compile_graph = extension.qnn_compile
    if getattr(compile_graph, "_records_coverage", False):
        return

    def recording_compile(blob, *args, **kwargs):
        result = compile_graph(blob, *args, **kwargs)
        with open(path, "a") as f:
            f.writelines(f"{op} {precision}\n" for op, precision in sorted(compiled_op_precisions(bytes(blob))))
        return result

    recording_compile._records_coverage = True
    extension.qnn_compile = recording_compile


def read_record(path: Path) -> Dict[str, Set[str]]:
    found: Dict[str, Set[str]] = {}
    for line in path.read_text().splitlines():
        op, precision = line.split()
        found.setdefault(op, set()).add(precision)
    return found


def write_qnn_fields(toml: Path, found: Dict[str, Set[str]], order: Iterable[str]) -> None:
    """Set (or drop) the `qnn = [...]` line of every [[op]] of ops.toml, after its `aten` line."""
    blocks = re.split(r"(?m)^(?=\[\[op\]\]\n)", toml.read_text())
    out = []
    for block in blocks:
        name = re.search(r'(?m)^name = "(\w+)"', block)
        block = re.sub(r"(?m)^qnn = \[.*\]\n", "", block)
        if name and found.get(name.group(1)):
            precisions = ", ".join(f'"{p}"' for p in order if p in found[name.group(1)])
            block = re.sub(
                r"(?m)^(aten = .*\n(?:[ \t]+.*\n)*)", lambda m: m.group(1) + f"qnn = [{precisions}]\n", block, count=1
            )
        out.append(block)
    toml.write_text("".join(out))


def main(argv=None) -> int:
    from backends.qualcomm.serialization import op_table

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="write ops.toml's qnn fields and the docs")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        record = Path(tmp) / "qnn_ops.txt"
        record.touch()
        env = dict(os.environ, **{RECORD_ENV: str(record)})
        code = subprocess.call(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *REAL_QNN_TESTS, *args.pytest_args],
            env=env,
        )
        found = read_record(record)
    names = [row.name for row in op_table.load()]
    for name in names:
        print(f"{name:24s} {', '.join(p for p in op_table.QNN_PRECISIONS if p in found.get(name, ())) or '-'}")
    if args.write and code == 0:
        write_qnn_fields(op_table.OPS_TOML, found, op_table.QNN_PRECISIONS)
        op_table.main(["--write-ops-md"])
    return code


if __name__ == "__main__":
    sys.exit(main())
