"""The op table (serialization/schema/ops.toml) against everything that used to keep its own list:
the generated Python module and docs/ops.md, the builders (what they can emit, what they annotate) and
the engine's self-registered kernels."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Set

import pytest
import torch

from backends.qualcomm.builders import registry
from backends.qualcomm.builders.qnn_op_types import LUT_OP_TYPES, OP_TABLE, QNN_OP_TYPES, QNN_QUANT_OP_TYPES
from backends.qualcomm.serialization import op_table
from backends.qualcomm.serialization import qnn_op_table_generated as generated
from backends.qualcomm.tests.helpers.runtime import test_hooks

BUILDERS_DIR = Path(__file__).resolve().parents[2] / "builders"


# ---- what a builder can emit, read from its source --------------------------------------
# Calls that emit an op, with the position of their op type argument: GraphBuilder.add_op and
# utils.add_weighted_op (a conv / FullyConnected, with fp16a8w's Casts).
_EMITTERS = {"add_op": 1, "add_weighted_op": 2}


class _OpTypeCollector:
    """The QNN op types one builder module can pass to GraphBuilder.add_op: string literals,
    QnnOpType constants, conditional expressions, and lookups in module-level dicts (their values
    or the first element of tuple values), directly or through a local variable; an op type a
    helper takes as a parameter (a composition's emitter) is any QnnOpType constant the module names."""

    def __init__(self, path: Path):
        self.path = path
        self.tree = ast.parse(path.read_text())
        self.dicts = {
            t.id: node.value
            for node in self.tree.body
            if isinstance(node, (ast.Assign, ast.AnnAssign))
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(t, ast.Name) and isinstance(node.value, ast.Dict)
        }

    def op_types(self) -> Set[str]:
        found: Set[str] = set()
        for func in ast.walk(self.tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for call in ast.walk(func):
                if isinstance(call, ast.Call) and self._callee(call) in _EMITTERS:
                    found |= self._resolve(self._op_type_arg(call), func, index=None)
        return found

    @staticmethod
    def _callee(call: ast.Call) -> str:
        return getattr(call.func, "attr", None) or getattr(call.func, "id", "")

    def _op_type_arg(self, call: ast.Call) -> ast.expr:
        for kw in call.keywords:
            if kw.arg == "op_type":
                return kw.value
        return call.args[_EMITTERS[self._callee(call)]]

    def _fail(self, expr: ast.expr) -> AssertionError:
        return AssertionError(
            f"{self.path.name}:{expr.lineno}: cannot tell which QNN op type "
            f"'{ast.unparse(expr)}' is (write a literal, or a lookup in a module-level dict)"
        )

    def _resolve(self, expr: ast.expr, func: ast.AST, index) -> Set[str]:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return {expr.value}
        if self._is_constant(expr):
            return {expr.attr}
        if isinstance(expr, ast.IfExp):
            return self._resolve(expr.body, func, index) | self._resolve(expr.orelse, func, index)
        if isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Name) and expr.value.id in self.dicts:
            return self._dict_values(self.dicts[expr.value.id], func, index)
        if isinstance(expr, ast.Name):
            return self._resolve_name(expr, func)
        raise self._fail(expr)

    def _dict_values(self, table: ast.Dict, func: ast.AST, index) -> Set[str]:
        found: Set[str] = set()
        for value in table.values:
            if isinstance(value, ast.Tuple):
                value = value.elts[index or 0]
            found |= self._resolve(value, func, None)
        return found

    @staticmethod
    def _is_constant(expr: ast.expr) -> bool:
        return isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "QnnOpType"

    def _resolve_name(self, name: ast.Name, func: ast.AST) -> Set[str]:
        if name.id in {a.arg for a in func.args.args + func.args.kwonlyargs}:
            return {n.attr for n in ast.walk(self.tree) if self._is_constant(n)}
        for node in ast.walk(func):
            if not isinstance(node, ast.Assign):
                continue
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id == name.id:
                    return self._resolve(node.value, func, None)
                if isinstance(target, ast.Tuple):
                    ids = [getattr(t, "id", None) for t in target.elts]
                    if name.id in ids:
                        return self._resolve(node.value, func, ids.index(name.id))
        raise self._fail(name)


def builder_op_types() -> Dict[str, Set[str]]:
    """QNN op type -> the builder modules that can emit it."""
    emitted: Dict[str, Set[str]] = {}
    for path in sorted(BUILDERS_DIR.glob("*.py")):
        for op_type in _OpTypeCollector(path).op_types():
            emitted.setdefault(op_type, set()).add(path.name)
    return emitted


# ---- generated files are current ------------------------------------------------------------
def test_generated_python_module_is_built_from_the_current_table():
    expected = op_table.render_python(op_table.load())
    assert Path(generated.__file__).read_text() == expected, (
        "qnn_op_table_generated.py is older than ops.toml: rebuild (make install)"
    )


def test_docs_op_tables_are_current():
    assert op_table.ops_md_is_current(), (
        "docs/ops.md's op-table sections are stale: python backends/qualcomm/serialization/op_table.py --write-ops-md"
    )


def test_op_type_lists_come_from_the_table():
    assert QNN_OP_TYPES | QNN_QUANT_OP_TYPES == set(OP_TABLE)
    assert QNN_QUANT_OP_TYPES == {"Quantize", "Dequantize", "Convert"}
    assert all(OP_TABLE[t].family == "elementwise_unary" for t in LUT_OP_TYPES)


def _row(**fields: str) -> str:
    base = dict(
        name='"A"',
        family='"cast"',
        semantics='"s"',
        inputs="[]",
        outputs="[]",
        layout='"any"',
        quant='"compute"',
        aten="[]",
    )
    base.update(fields)
    return "[[op]]\n" + "".join(f"{k} = {v}\n" for k, v in base.items() if v is not None)


@pytest.mark.parametrize(
    "broken, message",
    [
        (_row(family='"nope"'), "family = 'nope'"),
        (_row(quant=None), "missing fields ['quant']"),
        (_row() + _row(), "listed twice"),
        (_row(inputs='[{ name = "x", type = "tensor" }]'), "inputs[0].type = 'tensor'"),
        (_row(lut="true"), "lut = true needs one input and one output"),
        (_row(qnn='["int8"]'), "qnn = 'int8', expected one of fp16, 8a8w, 16a8w"),
        (_row(lpbq="false"), 'lpbq applies to quant = "weighted" ops only'),
    ],
)
def test_malformed_table_is_rejected_naming_op_and_field(tmp_path, broken, message):
    path = tmp_path / "ops.toml"
    path.write_text(broken)
    with pytest.raises(op_table.OpTableError, match=message.replace("[", r"\[").replace("]", r"\]")):
        op_table.load(path)


def test_coverage_table_says_lpbq_where_the_quantizer_takes_block_weights():
    """Every conv / transposed conv / linear row offers LPBQ weights (the quantizer's block
    sizes cover all three); rows of other ops say nothing about LPBQ."""
    from backends.qualcomm.quantizer.annotators import CONV_OPS, LINEAR_OPS, TRANSPOSED_CONV_OPS

    coverage = op_table.render_coverage_sections(op_table.load())["coverage"].splitlines()
    checked = set()
    for row in (r for r in OP_TABLE.values() if r.family != "quant"):
        targets = {getattr(getattr(torch.ops.aten, a.split(".")[0]), a.split(".")[1]) for a in row.aten}
        line = next(line for line in coverage if f"| `{row.name}` |" in line)
        if targets & set(CONV_OPS + LINEAR_OPS + TRANSPOSED_CONV_OPS):
            assert row.lpbq and "LPBQ weights" in line, line
            checked.add("transposed" if targets & set(TRANSPOSED_CONV_OPS) else "lpbq")
        elif row.quant != "weighted":
            assert not row.lpbq and "LPBQ" not in line, line
    assert checked == {"transposed", "lpbq"}


# ---- table vs builders ------------------------------------------------------------------------
def test_every_table_op_has_a_builder_that_emits_it():
    emitted = builder_op_types()
    assert set(OP_TABLE) - set(emitted) == set(), "table ops no builder emits"


def test_builders_emit_only_table_ops():
    emitted = builder_op_types()
    stray = {op: sorted(files) for op, files in emitted.items() if op not in OP_TABLE}
    assert stray == {}, "builders emit op types missing from ops.toml"


def test_table_aten_ops_exist_and_are_annotated_by_the_builders():
    annotated = registry.quant_annotated_ops()
    for row in OP_TABLE.values():
        for name in row.aten:
            packet, overload = name.split(".")
            op = getattr(getattr(torch.ops.aten, packet), overload)  # AttributeError: no such aten op
            if row.quant in ("float", "convert"):
                continue
            assert op in annotated, f"{row.name}: {name} is in the table but no builder annotates it"


def test_unknown_op_type_from_a_builder_raises():
    from backends.qualcomm.builders.graph_builder import GraphBuilder
    from backends.qualcomm.utils.errors import QnnLoweringError

    gb = GraphBuilder.__new__(GraphBuilder)
    with pytest.raises(QnnLoweringError, match="unknown QNN op type 'ElementWiseFoo'"):
        gb.add_op(None, "ElementWiseFoo", [], [])


# ---- composites vs builders ------------------------------------------------------------------
def _imported_builder_modules(path: Path) -> Set[Path]:
    """`path` and the builders/ modules it imports (a builder may emit through a helper module)."""
    found = {path}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "backends.qualcomm.builders":
            found |= {BUILDERS_DIR / f"{alias.name}.py" for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("backends.qualcomm.builders."):
            found.add(BUILDERS_DIR / f"{node.module.rsplit('.', 1)[1]}.py")
    return {p for p in found if p.exists()}


def _emitted_by_builder(builder: registry.NodeBuilder) -> Set[str]:
    path = BUILDERS_DIR / f"{type(builder).__module__.rsplit('.', 1)[1]}.py"
    return set().union(*(_OpTypeCollector(p).op_types() for p in _imported_builder_modules(path)))


def test_composite_rows_are_lowered_by_builders_to_table_ops():
    """Each [[composite]] aten op has a builder, and that builder's module (or a builders/ module it
    imports) can emit every QNN op the row names; the names are [[op]] rows."""
    composites = op_table.load_composites()
    assert len(composites) >= 15, [c.name for c in composites]
    for row in composites:
        assert set(row.lowers_to) <= set(OP_TABLE), (row.name, set(row.lowers_to) - set(OP_TABLE))
        for name in row.aten:
            packet, overload = name.split(".")
            op = getattr(getattr(torch.ops.aten, packet), overload)  # AttributeError: no such aten op
            builder = registry.get_builder(op)
            assert builder is not None, f"composite {row.name}: no builder lowers {name}"
            missing = set(row.lowers_to) - _emitted_by_builder(builder)
            assert not missing, f"composite {row.name}: {type(builder).__name__} cannot emit {sorted(missing)}"
            # add / sub / mul / div .Scalar appear at edge level only (QnnQuantizer annotates the
            # aten graph's .Tensor form); scaled_dot_product_attention is decomposed before annotation.
            if row.quant in ("compute", "shared") and row.name not in ("scalar_arithmetic", "sdpa"):
                assert op in registry.quant_annotated_ops(), f"composite {row.name}: {name} is not annotated"


@pytest.mark.parametrize(
    "body, message",
    [
        (
            'name = "c"\naten = ["fmod.Tensor"]\nlowers_to = ["ElementWiseFoo"]\nquant = "compute"\nhow = "h"\n',
            "which are not [[op]] rows",
        ),
        ('name = "c"\naten = ["fmod"]\nlowers_to = []\nquant = "compute"\nhow = "h"\n', "packet.overload"),
        ('name = "c"\naten = ["fmod.Tensor"]\nlowers_to = []\nquant = "compute"\n', "missing fields ['how']"),
    ],
)
def test_malformed_composite_is_rejected(tmp_path, body, message):
    path = tmp_path / "ops.toml"
    path.write_text(_row(name='"ElementWiseAdd"') + "[[composite]]\n" + body)
    with pytest.raises(op_table.OpTableError, match=message.replace("[", r"\[").replace("]", r"\]")):
        op_table.load_composites(path)


# ---- table vs engine kernels --------------------------------------------------------------------
def test_every_table_op_has_a_kernel_and_every_kernel_a_table_op():
    registered = set(test_hooks().registered_op_types())
    assert set(OP_TABLE) - registered == set(), "table ops without an engine kernel"
    assert registered - set(OP_TABLE) == set(), "kernels for ops missing from ops.toml"


def test_no_op_type_registers_two_kernels_of_one_kind():
    assert test_hooks().duplicate_kernel_registrations() == []
