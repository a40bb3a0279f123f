"""ExecuTorch's own Qualcomm test cases, read as source (never imported): the test methods of
upstream's operator and model classes, each made a callable over a stand-in `self`.

The executorch wheel ships upstream's tests as `backends/qualcomm/tests/test_qnn_delegate.py`
(test classes) and `models.py` (the modules they lower). Both are parsed with `ast`; every
import from upstream's backend package (UPSTREAM_PACKAGE) in them is rewritten to look X up in a table of
stand-ins (`stubs`: ours, or a `Missing` that raises `Unsupported` when used), so nothing of
upstream's backend is imported. models.py runs in a namespace of its own; each test method is
compiled alone (decorators evaluated apart: upstream's skips) and called with the stand-in
`self` that `replay_upstream_cases.py` provides.
"""

from __future__ import annotations

import ast
import copy
import importlib.util
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import backends.qualcomm as _ours

# Upstream's backend lives at our package's path inside the executorch package (our module paths
# mirror upstream's: tests/upstream/test_upstream_module_paths.py).
UPSTREAM_PACKAGE = f"executorch.{_ours.__name__}"
# The classes replayed: upstream's per-op and per-model cases (the utility and script classes
# drive devices, scripts and datasets).
CLASSES = (
    "TestQNNFloatingPointOperator",
    "TestQNNQuantizedOperator",
    "TestQNNFloatingPointModel",
    "TestQNNQuantizedModel",
)
# The QNN SDK version upstream's skipIf(is_qnn_sdk_version_*) decorators are evaluated against:
# the library we run (QNN 2.51).
QNN_VERSION = (2, 51)


class Unsupported(Exception):
    """A case uses something of upstream's harness that has no counterpart here (a device, a
    profiler trace, a package that is not installed)."""


class Missing:
    """Stand-in for an upstream name with no counterpart: any use raises Unsupported."""

    def __init__(self, name: str) -> None:
        self._name = name

    def _fail(self, *args, **kwargs):
        raise Unsupported(f"upstream's {self._name} has no counterpart here")

    __call__ = _fail

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        self._fail()

    def __getitem__(self, key):
        self._fail()


def upstream_tests_dir() -> Path:
    """The folder of upstream's Qualcomm tests in the installed executorch wheel (found by path,
    not imported)."""
    spec = importlib.util.find_spec("executorch")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the executorch wheel is not installed")
    folder = Path(list(spec.submodule_search_locations)[0]) / "backends" / "qualcomm" / "tests"
    if not (folder / "test_qnn_delegate.py").is_file():
        raise FileNotFoundError(f"no test_qnn_delegate.py under {folder}")
    return folder


class _StubImports(ast.NodeTransformer):
    """`from <UPSTREAM_PACKAGE>.x import a as b` -> `b = __stub__("a")`; other imports
    stay (torch, executorch.examples, torchao)."""

    def visit_ImportFrom(self, node: ast.ImportFrom):
        if not (node.module or "").startswith(UPSTREAM_PACKAGE):
            return node
        assigns = [
            ast.Assign(
                targets=[ast.Name(id=alias.asname or alias.name, ctx=ast.Store())],
                value=ast.Call(
                    func=ast.Name(id="__stub__", ctx=ast.Load()), args=[ast.Constant(alias.name)], keywords=[]
                ),
            )
            for alias in node.names
        ]
        return [ast.copy_location(a, node) for a in assigns]

    def visit_Import(self, node: ast.Import):
        if any(alias.name.startswith(UPSTREAM_PACKAGE) for alias in node.names):
            raise Unsupported(f"line {node.lineno}: `import {UPSTREAM_PACKAGE}...` cannot be stubbed")
        return node


def stub_lookup(stubs: Dict[str, object]) -> Callable[[str], object]:
    return lambda name: stubs.get(name, Missing(name))


def load_models(source: str, stubs: Dict[str, object], name: str = "upstream_models") -> Dict[str, object]:
    """models.py's source executed in a fresh namespace, its upstream imports stubbed."""
    tree = ast.fix_missing_locations(_StubImports().visit(ast.parse(source)))
    module = types.ModuleType(name)  # registered: strict torch.export imports a class's module
    sys.modules[name] = module
    namespace: Dict[str, object] = module.__dict__
    namespace["__stub__"] = stub_lookup(stubs)
    exec(compile(tree, f"<{name}>", "exec"), namespace)
    return namespace


@dataclass
class TestMethod:
    cls: str
    name: str
    node: ast.FunctionDef
    decorators: List[ast.expr] = field(default_factory=list)


@dataclass
class ClassSetup:
    """What a class's setUp decides: fp16 or quantized HTP, and the tolerances (TestQNN.atol /
    rtol, or self.atol / rtol)."""

    use_fp16: bool
    atol: float
    rtol: float


def test_methods(source: str, classes: Tuple[str, ...] = CLASSES) -> List[TestMethod]:
    """The `test*` methods of `classes`, in source order."""
    found = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name in classes:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name.startswith("test"):
                    found.append(TestMethod(node.name, item.name, item, list(item.decorator_list)))
    return found


def class_setups(source: str, classes: Tuple[str, ...] = CLASSES) -> Dict[str, ClassSetup]:
    """Each class's setUp read from its source: `use_fp16=<bool>` of generate_htp_compiler_spec,
    `TestQNN.atol = <number>` / `rtol`."""
    setups = {}
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.ClassDef) and node.name in classes):
            continue
        setup = next(i for i in node.body if isinstance(i, ast.FunctionDef) and i.name == "setUp")
        values: Dict[str, object] = {}
        for sub in ast.walk(setup):
            target = sub.targets[0] if isinstance(sub, ast.Assign) else None
            if isinstance(target, ast.Attribute) and target.attr in ("atol", "rtol"):
                values[target.attr] = ast.literal_eval(sub.value)
            if isinstance(sub, ast.Call) and getattr(sub.func, "id", None) == "generate_htp_compiler_spec":
                values.setdefault("use_fp16", ast.literal_eval(sub.keywords[0].value))
        setups[node.name] = ClassSetup(bool(values["use_fp16"]), float(values["atol"]), float(values["rtol"]))
    return setups


def _version_tuple(text: str) -> Tuple[int, int]:
    major, minor = text.split(".")[:2]
    return int(major), int(minor)


def decorator_skip(method: TestMethod) -> Optional[str]:
    """Upstream's reason to skip the method on QNN 2.51 (unittest.skip / skipIf over the SDK
    version), or None. expectedFailure is not a skip: such a case runs like the others."""
    namespace = {
        "unittest": _UnittestDecorators,
        "is_qnn_sdk_version_less_than": lambda v: QNN_VERSION < _version_tuple(v),
        "is_qnn_sdk_version_greater_than": lambda v: QNN_VERSION > _version_tuple(v),
    }
    for deco in method.decorators:
        verdict = eval(compile(ast.Expression(deco), "<decorator>", "eval"), namespace)
        if isinstance(verdict, str):
            return verdict
    return None


class _UnittestDecorators:
    """unittest's decorators evaluated to a skip reason (str) or None."""

    @staticmethod
    def skip(reason: str) -> str:
        return f"upstream skips it: {reason}"

    @staticmethod
    def skipIf(condition: bool, reason: str) -> Optional[str]:
        return f"upstream skips it on QNN 2.51: {reason}" if condition else None

    @staticmethod
    def skipUnless(condition: bool, reason: str) -> Optional[str]:
        return None if condition else f"upstream skips it on QNN 2.51: {reason}"

    expectedFailure = None


def compile_method(method: TestMethod, namespace: Dict[str, object]) -> Callable:
    """The method as a plain function f(self), decorators dropped, upstream imports stubbed,
    defined in `namespace` (models, helpers, stand-ins)."""
    node = copy.copy(method.node)
    node.decorator_list = []
    module = ast.Module(body=[_StubImports().visit(node)], type_ignores=[])
    code = compile(ast.fix_missing_locations(module), f"<{method.cls}.{method.name}>", "exec")
    local: Dict[str, object] = {}
    exec(code, namespace, local)
    return local[method.name]
