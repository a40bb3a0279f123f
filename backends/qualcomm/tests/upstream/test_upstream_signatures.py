"""Upstream's signatures (read with ast from the executorch wheel's Qualcomm sources, never
imported) are prefixes of ours; upstream-only options are refused by name; per-method
compile specs and constant methods."""

from __future__ import annotations

from typing import List, Tuple

import pytest
import torch
from executorch.exir.lowered_backend_module import get_lowered_submodules

from backends.qualcomm.tests.helpers.tester import randn


# ---- upstream signatures (read from the wheel's source with ast; never imported) ----------------
def _upstream_signature(relative: str, name: str, cls: str = "") -> List[Tuple[str, str]]:
    import ast
    from pathlib import Path

    import executorch

    source = Path(list(executorch.__path__)[0]) / "backends" / "qualcomm" / relative
    tree = ast.parse(source.read_text())
    scope = tree.body
    if cls:
        scope = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    fn = next(n for n in scope if isinstance(n, ast.FunctionDef) and n.name == name)
    args = fn.args.args
    defaults = [None] * (len(args) - len(fn.args.defaults)) + [ast.unparse(d) for d in fn.args.defaults]
    return [(a.arg, d) for a, d in zip(args, defaults) if a.arg != "self"]


def _our_signature(fn) -> List[Tuple[str, str]]:
    import inspect

    out = []
    for p in inspect.signature(fn).parameters.values():
        default = None if p.default is inspect.Parameter.empty else p.default
        if default is not None and hasattr(default, "name") and hasattr(type(default), "__members__"):
            default = f"{type(default).__name__}.{default.name}"
        out.append((p.name, None if default is None and p.default is inspect.Parameter.empty else str(default)))
    return out


class TestUpstreamSignatures:
    @pytest.mark.parametrize(
        "relative, name, cls, ours",
        [
            ("utils/utils.py", "generate_htp_compiler_spec", "", "generate_htp_compiler_spec"),
            ("utils/utils.py", "generate_qnn_executorch_compiler_spec", "", "generate_qnn_executorch_compiler_spec"),
            ("utils/utils.py", "to_edge_transform_and_lower_to_qnn", "", "to_edge_transform_and_lower_to_qnn"),
            ("partition/qnn_partitioner.py", "__init__", "QnnPartitioner", "QnnPartitioner"),
        ],
    )
    def test_upstream_arguments_are_a_prefix_of_ours(self, relative, name, cls, ours):
        import backends.qualcomm as api

        upstream = _upstream_signature(relative, name, cls)
        target = getattr(api, ours)
        mine = _our_signature(target.__init__ if cls else target)
        mine = [m for m in mine if m[0] != "self"]
        assert [n for n, _ in mine[: len(upstream)]] == [n for n, _ in upstream]
        assert [str(d) for _, d in mine[: len(upstream)]] == [str(d) for _, d in upstream]

    def test_upstream_only_options_are_explicit(self):
        from backends.qualcomm import (
            QcomChipset,
            generate_htp_compiler_spec,
            generate_qnn_executorch_compiler_spec,
            to_edge_transform_and_lower_to_qnn,
        )

        htp = generate_htp_compiler_spec(True, use_slc_allocator=True)  # accepted, no effect
        with pytest.raises(ValueError, match=r"\['use_mha2sha'\]"):
            generate_qnn_executorch_compiler_spec(QcomChipset.SM8650, htp, use_mha2sha=True)
        with pytest.raises(ValueError, match=r"\['op_package_options'\]"):
            generate_qnn_executorch_compiler_spec(QcomChipset.SM8650, htp, op_package_options=object())
        specs = generate_qnn_executorch_compiler_spec(QcomChipset.SM8650, htp)
        with pytest.raises(ValueError, match="passes_job: qnn-delegate's edge passes are fixed"):
            to_edge_transform_and_lower_to_qnn(torch.nn.ReLU(), (randn(2, 3),), specs, passes_job={"x": 1})

    def test_per_method_specs_and_constant_methods(self, tmp_path):
        from executorch.runtime import Runtime

        from backends.qualcomm import (
            QcomChipset,
            describe_payload,
            generate_htp_compiler_spec,
            generate_qnn_executorch_compiler_spec,
            to_edge_transform_and_lower_to_qnn,
        )
        from backends.qualcomm.tests.helpers.tester import fp16_compile_specs

        modules = {"a": torch.nn.ReLU(), "b": torch.nn.Sigmoid()}
        inputs = {"a": (randn(2, 3),), "b": (randn(2, 3, seed=1),)}
        quant = generate_qnn_executorch_compiler_spec(QcomChipset.SM8650, generate_htp_compiler_spec(False))
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            edge = to_edge_transform_and_lower_to_qnn(
                modules, inputs, {"a": fp16_compile_specs(), "b": quant}, constant_methods={"vocab_size": 7}
            )
        precisions = {}
        for method in ("a", "b"):
            blob = [lw for _, lw, _ in get_lowered_submodules(edge.exported_program(method).graph_module)][0]
            precisions[method] = describe_payload(blob.processed_bytes)[0].fp16_precision
        assert precisions == {"a": True, "b": False}
        pte = tmp_path / "two.pte"
        edge.to_executorch().write_to_file(open(pte, "wb"))
        program = Runtime.get().load_program(str(pte))
        assert program.load_method("vocab_size").execute([])[0] == 7
        torch.testing.assert_close(
            program.load_method("b").execute(list(inputs["b"]))[0], torch.sigmoid(inputs["b"][0]), atol=1e-5, rtol=1e-5
        )
