"""The QNN op table (schema/ops.toml) and what is generated from it.

Run by CMake at build time (standard library only, no package import):
    python op_table.py --toml ops.toml --python out.py --header out.h
writes the Python op-type constants and traits (qnn_op_table_generated.py) and the C++ names and
trait table (qnn_op_table_generated.h). docs/ops.md holds the generated tables (op coverage,
compositions, the op contract and the trait summary), each between two markers:
    python op_table.py --write-ops-md     rewrites them
    python op_table.py --check-ops-md     exits 1 when they are stale (a test does the same)
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

SCHEMA_DIR = Path(__file__).resolve().parent / "schema"
OPS_TOML = SCHEMA_DIR / "ops.toml"
OPS_MD = SCHEMA_DIR.parents[3] / "docs" / "ops.md"
MD_BEGIN = "<!-- op-table:{} begin (generated from ops.toml by serialization/op_table.py; do not edit) -->"
MD_END = "<!-- op-table:{} end -->"

FAMILIES = (
    "conv",
    "linear",
    "elementwise_binary",
    "elementwise_unary",
    "norm",
    "reduce",
    "pool",
    "data_movement",
    "cast",
    "topk",
    "quant",
)
QUANT_RULES = ("compute", "shared", "weighted", "float", "convert")
LAYOUTS = ("nhwc", "any")
PORT_TYPES = ("activation", "weight", "bias", "index", "float", "static")
QNN_PRECISIONS = ("fp16", "8a8w", "16a8w", "16a4w_block")
_OP_KEYS = {
    "name",
    "family",
    "semantics",
    "inputs",
    "outputs",
    "params",
    "layout",
    "quant",
    "lut",
    "data_movement",
    "aten",
    "qnn",
    "lpbq",
}
_REQUIRED = {"name", "family", "semantics", "inputs", "outputs", "layout", "quant", "aten"}


class OpTableError(ValueError):
    """ops.toml is malformed: names the op and the field."""


@dataclass(frozen=True)
class Port:
    name: str
    type: str
    variadic: bool = False
    optional: bool = False
    doc: str = ""


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    doc: str = ""


@dataclass(frozen=True)
class OpRow:
    name: str
    family: str
    semantics: str
    inputs: Tuple[Port, ...]
    outputs: Tuple[Port, ...]
    params: Tuple[Param, ...]
    layout: str
    quant: str
    lut: bool
    data_movement: bool
    aten: Tuple[str, ...]
    qnn: Tuple[str, ...] = ()
    lpbq: bool = False

    @property
    def min_inputs(self) -> int:
        return sum(1 for p in self.inputs if not p.optional)

    @property
    def max_inputs(self) -> int:
        """-1: unbounded (a variadic last input)."""
        return -1 if any(p.variadic for p in self.inputs) else len(self.inputs)


@dataclass(frozen=True)
class CompositeRow:
    """aten ops lowered to several QNN ops (a decomposition) or to a static tensor ([[composite]])."""

    name: str
    aten: Tuple[str, ...]
    lowers_to: Tuple[str, ...]
    quant: str
    how: str
    qnn: Tuple[str, ...] = ()


_COMPOSITE_KEYS = {"name", "aten", "lowers_to", "quant", "how", "qnn"}
_COMPOSITE_QUANT = ("compute", "shared", "float", "static")


# ---- reading ----------------------------------------------------------------------------
def _choice(op: str, field: str, value: object, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise OpTableError(f"op '{op}': {field} = {value!r}, expected one of {', '.join(allowed)}")
    return str(value)


def _ports(op: str, field: str, entries: object) -> Tuple[Port, ...]:
    if not isinstance(entries, list):
        raise OpTableError(f"op '{op}': {field} must be a list of {{ name, type }}")
    ports = []
    for i, entry in enumerate(entries):
        unknown = set(entry) - {"name", "type", "variadic", "optional", "doc"}
        if unknown or "name" not in entry or "type" not in entry:
            raise OpTableError(
                f"op '{op}': {field}[{i}] = {entry!r}: needs name and type only (plus variadic / optional / doc)"
            )
        if entry.get("variadic") and i != len(entries) - 1:
            raise OpTableError(f"op '{op}': {field}[{i}] is variadic but not the last")
        ports.append(
            Port(
                entry["name"],
                _choice(op, f"{field}[{i}].type", entry["type"], PORT_TYPES),
                bool(entry.get("variadic", False)),
                bool(entry.get("optional", False)),
                str(entry.get("doc", "")),
            )
        )
    return tuple(ports)


def _row(entry: Dict[str, object]) -> OpRow:
    op = str(entry.get("name", "?"))
    unknown, missing = set(entry) - _OP_KEYS, _REQUIRED - set(entry)
    if unknown or missing:
        raise OpTableError(f"op '{op}': unknown fields {sorted(unknown)}, missing fields {sorted(missing)}")
    if not op.isidentifier():
        raise OpTableError(f"op '{op}': name must be an identifier (it is a C++ enumerator)")
    params = tuple(Param(p["name"], p["type"], p.get("doc", "")) for p in entry.get("params", []))
    aten = tuple(entry["aten"])
    if any(a.count(".") != 1 for a in aten):
        raise OpTableError(f"op '{op}': aten entries are 'packet.overload', got {list(aten)}")
    qnn = tuple(_choice(op, "qnn", p, QNN_PRECISIONS) for p in entry.get("qnn", []))
    quant = _choice(op, "quant", entry["quant"], QUANT_RULES)
    if "lpbq" in entry and quant != "weighted":
        raise OpTableError(f"op '{op}': lpbq applies to quant = \"weighted\" ops only")
    return OpRow(
        op,
        _choice(op, "family", entry["family"], FAMILIES),
        str(entry["semantics"]),
        _ports(op, "inputs", entry["inputs"]),
        _ports(op, "outputs", entry["outputs"]),
        params,
        _choice(op, "layout", entry["layout"], LAYOUTS),
        quant,
        bool(entry.get("lut", False)),
        bool(entry.get("data_movement", False)),
        aten,
        qnn,
        quant == "weighted" and bool(entry.get("lpbq", True)),
    )


def _check_rows(rows: List[OpRow]) -> None:
    seen = set()
    for row in rows:
        if row.name in seen:
            raise OpTableError(f"op '{row.name}' is listed twice")
        seen.add(row.name)
        if row.lut and (len(row.inputs) != 1 or len(row.outputs) != 1):
            raise OpTableError(f"op '{row.name}': lut = true needs one input and one output")
        if row.data_movement and row.quant != "shared":
            raise OpTableError(f"op '{row.name}': data_movement = true needs quant = \"shared\"")


def load(path: Path = OPS_TOML) -> List[OpRow]:
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise OpTableError(f"{path}: {e}") from e
    if "op" not in doc or set(doc) - {"op", "composite"}:
        raise OpTableError(f"{path}: expected only [[op]] and [[composite]] tables, got {sorted(doc)}")
    rows = [_row(entry) for entry in doc["op"]]
    _check_rows(rows)
    return rows


def _composite(entry: Dict[str, object], op_names: Sequence[str]) -> CompositeRow:
    name = str(entry.get("name", "?"))
    unknown, missing = set(entry) - _COMPOSITE_KEYS, (_COMPOSITE_KEYS - {"qnn"}) - set(entry)
    if unknown or missing:
        raise OpTableError(f"composite '{name}': unknown fields {sorted(unknown)}, missing fields {sorted(missing)}")
    aten = tuple(entry["aten"])
    if not aten or any(a.count(".") != 1 for a in aten):
        raise OpTableError(f"composite '{name}': aten entries are 'packet.overload', got {list(aten)}")
    lowers_to = tuple(entry["lowers_to"])
    stray = [t for t in lowers_to if t not in op_names]
    if stray:
        raise OpTableError(f"composite '{name}': lowers_to names {stray}, which are not [[op]] rows")
    qnn = tuple(_choice(name, "qnn", p, QNN_PRECISIONS) for p in entry.get("qnn", []))
    return CompositeRow(
        name, aten, lowers_to, _choice(name, "quant", entry["quant"], _COMPOSITE_QUANT), str(entry["how"]), qnn
    )


def load_composites(path: Path = OPS_TOML) -> List[CompositeRow]:
    """The [[composite]] rows: aten ops a builder lowers to several table ops (or a static tensor)."""
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    names = [r.name for r in load(path)]
    rows = [_composite(entry, names) for entry in doc.get("composite", [])]
    seen: set = set()
    for row in rows:
        if row.name in seen:
            raise OpTableError(f"composite '{row.name}' is listed twice")
        seen.add(row.name)
    return rows


# ---- Python -----------------------------------------------------------------------------
_PY_HEAD = '''"""Generated from schema/ops.toml by serialization/op_table.py at build time: do not edit."""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from backends.qualcomm.serialization.op_table import OpRow as OpTraits, Param, Port  # noqa: F401

'''


def render_python(rows: List[OpRow]) -> str:
    lines = [_PY_HEAD, "OP_TABLE: Mapping[str, OpTraits] = MappingProxyType({"]
    lines += [f"    {row.name!r}: {row!r},".replace("OpRow(", "OpTraits(", 1) for row in rows]
    lines.append("})\n")
    quant = [r.name for r in rows if r.family == "quant"]
    sets = {
        "QNN_OP_TYPES": [r.name for r in rows if r.family != "quant"],
        "QNN_QUANT_OP_TYPES": quant,
        "LUT_OP_TYPES": [r.name for r in rows if r.lut],
        "DATA_MOVEMENT_OP_TYPES": [r.name for r in rows if r.data_movement],
        "LAYOUT_SENSITIVE_OP_TYPES": [r.name for r in rows if r.layout == "nhwc"],
    }
    for name, members in sets.items():
        lines.append(f"{name}: frozenset = frozenset({members!r})")
    lines += ["", "", "class QnnOpType:", '    """One string constant per QNN op type."""', ""]
    lines += [f"    {row.name} = {row.name!r}" for row in rows]
    return "\n".join(lines) + "\n"


# ---- C++ --------------------------------------------------------------------------------
def _camel(word: str) -> str:
    return "".join(part.capitalize() for part in word.split("_"))


def _cpp_row(row: OpRow) -> str:
    return (
        f'    {{OpType::{row.name}, "{row.name}", OpFamily::{_camel(row.family)}, '
        f"QuantRule::{_camel(row.quant)}, {str(row.layout == 'nhwc').lower()}, {str(row.lut).lower()}, "
        f"{str(row.data_movement).lower()}, {row.min_inputs}, {row.max_inputs}, {len(row.outputs)}}},"
    )


def render_cpp(rows: List[OpRow]) -> str:
    enumerators = ", ".join(r.name for r in rows)
    families = ", ".join(_camel(f) for f in FAMILIES)
    rules = ", ".join(_camel(q) for q in QUANT_RULES)
    table = "\n".join(_cpp_row(r) for r in rows)
    return f"""// Generated from schema/ops.toml by serialization/op_table.py at build time: do not edit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace qnn_delegate {{
namespace ops {{

enum class OpType : uint16_t {{ {enumerators}, kCount }};
enum class OpFamily : uint8_t {{ {families} }};
enum class QuantRule : uint8_t {{ {rules} }};

struct OpTraits {{
  OpType type;
  const char* name;
  OpFamily family;
  QuantRule quant;
  bool layout_nhwc;     // takes and produces channel-last
  bool unary_lut;       // 8/16-bit: output is a function of one input code (lookup table)
  bool data_movement;   // moves bytes only: runs on codes when all tensors share one encoding
  uint8_t min_inputs;
  int8_t max_inputs;    // -1: unbounded (variadic)
  uint8_t num_outputs;
}};

inline constexpr size_t kNumOpTypes = {len(rows)};
inline constexpr OpTraits kOpTable[] = {{
{table}
}};
static_assert(sizeof(kOpTable) / sizeof(kOpTable[0]) == kNumOpTypes, "op table row count");
static_assert(size_t(OpType::kCount) == kNumOpTypes, "OpType enumerators vs op table rows");

constexpr bool op_table_in_enum_order() {{
  for (size_t i = 0; i < kNumOpTypes; ++i) {{
    if (size_t(kOpTable[i].type) != i) return false;
  }}
  return true;
}}
static_assert(op_table_in_enum_order(), "kOpTable[i].type must be OpType(i)");

constexpr const OpTraits& op_traits(OpType type) {{ return kOpTable[size_t(type)]; }}
constexpr const char* op_name(OpType type) {{ return op_traits(type).name; }}

// The traits of QNN op type `name`; nullptr when the table has no such op.
constexpr const OpTraits* find_op(std::string_view name) {{
  for (const OpTraits& t : kOpTable) {{
    if (name == t.name) return &t;
  }}
  return nullptr;
}}

}} // namespace ops
}} // namespace qnn_delegate
"""


# ---- docs/ops.md: the op contract ---------------------------------------------------------
def _wrapped_list(label: str, names: List[str], width: int = 80) -> List[str]:
    lines, line = [], f"{label} ="
    for i, name in enumerate(names):
        item = f" {name}" + ("," if i < len(names) - 1 else "")
        if len(line) + len(item) > width:
            lines.append(line)
            line = item.lstrip()
        else:
            line += item
    return lines + [line]


def _md_port(port: Port) -> str:
    name = f"{port.name}0, {port.name}1, ..." if port.variadic else port.name
    return f"{name} {port.doc}" if port.doc else name


def _md_param(param: Param) -> str:
    kind, _, shape = param.type.partition("[")
    typed = f"TENSOR {kind} [{shape}" if shape else f"SCALAR {kind}"
    return f"`{param.name}` {typed}" + (f" {param.doc}" if param.doc else "")


def _md_contract_row(row: OpRow) -> str:
    ins = ", ".join(_md_port(p) for p in row.inputs)
    params = "; ".join(_md_param(p) for p in row.params) or "-"
    return f"| `{row.name}` | {ins} | {params} | {row.semantics} |"


def _md_contract_table(rows: List[OpRow]) -> List[str]:
    return ["| QNN type | inputs | params | semantics |", "|---|---|---|---|"] + [_md_contract_row(r) for r in rows]


def _md_traits_row(row: OpRow) -> str:
    flags = [
        f
        for f, on in (
            ("LUT", row.lut),
            ("data movement", row.data_movement),
            ("no LPBQ", row.quant == "weighted" and not row.lpbq),
        )
        if on
    ]
    aten = ", ".join(f"`{a}`" for a in row.aten) or "-"
    return f"| `{row.name}` | {row.family} | {row.layout} | {row.quant} | {', '.join(flags) or '-'} | {aten} |"


def render_ops_md_sections(rows: List[OpRow]) -> Dict[str, str]:
    """docs/ops.md's op contract sections by marker name: the op contract tables ("ops", "quant")
    and the trait summary with the op-type lists ("traits")."""
    ops = [r for r in rows if r.family != "quant"]
    quant = [r for r in rows if r.family == "quant"]
    traits = ["| QNN type | family | layout | quantization | traits | aten ops |", "|---|---|---|---|---|---|"]
    traits += [_md_traits_row(r) for r in rows]
    traits += [""] + _wrapped_list("QNN_OP_TYPES", [r.name for r in ops])
    traits += [""] + _wrapped_list("QNN_QUANT_OP_TYPES", [r.name for r in quant])
    return {
        "ops": "\n".join(_md_contract_table(ops)),
        "quant": "\n".join(_md_contract_table(quant)),
        "traits": "\n".join(traits),
    }


def splice_ops_md(text: str, sections: Dict[str, str]) -> str:
    for name, body in sections.items():
        begin_marker, end_marker = MD_BEGIN.format(name), MD_END.format(name)
        begin, end = text.find(begin_marker), text.find(end_marker)
        if begin < 0 or end < begin:
            raise OpTableError(f"the document has no '{begin_marker}' ... '{end_marker}' markers")
        text = text[:begin] + begin_marker + "\n" + body + "\n" + text[end:]
    return text


# ---- docs/ops.md: the op coverage tables ---------------------------------------------------
_QUANTIZED = {
    "weighted": "8a8w, 16a8w, 16a4w",
    "compute": "8-bit, 16-bit",
    "shared": "8-bit, 16-bit (input's encoding)",
    "float": "no (float island)",
}


def _coverage_row(row: OpRow) -> str:
    aten = ", ".join(f"`{a}`" for a in row.aten) or "(chosen by a builder: see the op contract)"
    quantized = _QUANTIZED[row.quant] + (" (lookup table)" if row.lut else "")
    if row.quant == "weighted":
        quantized += ", LPBQ weights" if row.lpbq else " (per-channel weights; LPBQ rejected)"
    qnn = ", ".join(row.qnn) if row.qnn else "not tested"
    return f"| {aten} | `{row.name}` | yes | {quantized} | yes | {qnn} |"


_COMPOSITE_QUANTIZED = {
    "compute": "8-bit, 16-bit",
    "shared": "8-bit, 16-bit (input's encoding)",
    "float": "no (float island)",
    "static": "8-bit, 16-bit (static tensor)",
}


def _composite_row(row: CompositeRow) -> str:
    aten = ", ".join(f"`{a}`" for a in row.aten)
    ops = ", ".join(f"`{t}`" for t in row.lowers_to) or "(static tensor)"
    qnn = ", ".join(row.qnn) if row.qnn else "not tested"
    how = row.how.replace("|", "\\|")
    return f"| {aten} | {ops} | {how} | yes | {_COMPOSITE_QUANTIZED[row.quant]} | yes | {qnn} |"


def render_coverage_sections(rows: List[OpRow], composites: Optional[List[CompositeRow]] = None) -> Dict[str, str]:
    """docs/ops.md's op coverage sections: one row per QNN op type (aten ops -> QNN op, fp16, quantized
    precisions, host engine, precisions a real-QNN test in `make test` runs it in), and one per
    composite (aten ops -> the QNN ops they lower to, how)."""
    table = ["| aten ops | QNN op | fp16 | quantized | host engine | real QNN (tested) |", "|---|---|---|---|---|---|"]
    table += [_coverage_row(r) for r in rows if r.family != "quant"]
    composite = [
        "| aten ops | QNN ops | how | fp16 | quantized | host engine | real QNN (tested) |",
        "|---|---|---|---|---|---|---|",
    ]
    composite += [_composite_row(r) for r in (load_composites() if composites is None else composites)]
    return {"coverage": "\n".join(table), "composites": "\n".join(composite)}


def render_docs_sections(rows: List[OpRow], composites: Optional[List[CompositeRow]] = None) -> Dict[str, str]:
    """Every generated section of docs/ops.md, by marker name."""
    return {**render_coverage_sections(rows, composites), **render_ops_md_sections(rows)}


def ops_md_is_current(rows: Optional[List[OpRow]] = None, path: Path = OPS_MD) -> bool:
    text = path.read_text()
    return splice_ops_md(text, render_docs_sections(rows or load())) == text


# ---- command line -----------------------------------------------------------------------
def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--toml", type=Path, default=OPS_TOML)
    parser.add_argument("--python", type=Path, help="write the generated Python module here")
    parser.add_argument("--header", type=Path, help="write the generated C++ header here")
    parser.add_argument("--ops-md", type=Path, default=OPS_MD)
    parser.add_argument("--write-ops-md", action="store_true", help="rewrite the generated sections of docs/ops.md")
    parser.add_argument("--check-ops-md", action="store_true", help="exit 1 when docs/ops.md is stale")
    args = parser.parse_args(argv)
    rows = load(args.toml)
    if args.python:
        _write_if_changed(args.python, render_python(rows))
    if args.header:
        _write_if_changed(args.header, render_cpp(rows))
    if args.write_ops_md:
        _write_if_changed(
            args.ops_md, splice_ops_md(args.ops_md.read_text(), render_docs_sections(rows, load_composites(args.toml)))
        )
    if args.check_ops_md and not ops_md_is_current(rows, args.ops_md):
        print(f"{args.ops_md} is stale: run python {Path(__file__).name} --write-ops-md", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
