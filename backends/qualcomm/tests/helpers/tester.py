"""A small fluent tester: export -> lower -> check delegation -> .pte -> run -> compare."""

from __future__ import annotations

import operator
import os
import shutil
import tempfile
import weakref
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch
from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

from backends.qualcomm import (
    QcomChipset,
    QnnPartitioner,
    describe_payload,
    generate_htp_compiler_spec,
    generate_qnn_executorch_compiler_spec,
)
from backends.qualcomm.serialization.payload_reader import GraphSummary
from backends.qualcomm.utils.pte_tools import delegate_blobs
from backends.qualcomm.utils.runtime_options import require_extension

_ALLOWED_OUTSIDE = {operator.getitem, torch.ops.higher_order.executorch_call_delegate}
_ALLOWED_NAMES = ("alloc", "getitem", "executorch_call_delegate")


def fp16_compile_specs(**kwargs) -> list:
    return generate_qnn_executorch_compiler_spec(
        QcomChipset.SM8650, generate_htp_compiler_spec(use_fp16=True), **kwargs
    )


def _to_numpy(values) -> List[np.ndarray]:
    if isinstance(values, torch.Tensor):
        values = [values]
    return [v.detach().numpy() if isinstance(v, torch.Tensor) else np.asarray(v) for v in values]


class QnnTester:
    def __init__(
        self,
        module: torch.nn.Module,
        inputs: Tuple,
        compile_specs: Optional[list] = None,
        tmp_dir: Optional[str] = None,
    ):
        self.module = module.eval()
        self.inputs = tuple(inputs)
        self.compile_specs = compile_specs or fp16_compile_specs()
        self.tmp_dir = tmp_dir or self._own_tmp_dir()
        self.partitioner: Optional[QnnPartitioner] = None
        self.edge = None
        self.et_program = None
        self.pte_path: Optional[str] = None
        self.outputs: Optional[List[np.ndarray]] = None

    def _own_tmp_dir(self) -> str:
        """A temporary folder removed with the tester (each test made one that was never removed)."""
        path = tempfile.mkdtemp(prefix="qnn_test_")
        weakref.finalize(self, shutil.rmtree, path, ignore_errors=True)
        return path

    # ---- lowering --------------------------------------------------------------
    def lower(self, **partitioner_kwargs) -> "QnnTester":
        exported = torch.export.export(self.module, self.inputs, strict=False)
        self.partitioner = QnnPartitioner(self.compile_specs, **partitioner_kwargs)
        self.edge = to_edge_transform_and_lower(
            exported, partitioner=[self.partitioner], compile_config=EdgeCompileConfig(_check_ir_validity=False)
        )
        return self

    def graph_module(self) -> torch.fx.GraphModule:
        return self.edge.exported_program().graph_module

    def cpu_nodes(self) -> List[torch.fx.Node]:
        """Compute nodes left outside delegates."""
        return [
            n
            for n in self.graph_module().graph.nodes
            if n.op == "call_function"
            and n.target not in _ALLOWED_OUTSIDE
            and not any(s in str(n.target) for s in _ALLOWED_NAMES)
        ]

    def cpu_op_names(self) -> List[str]:
        """Op names (e.g. 'aten.cumsum.default') of the compute nodes left on CPU."""
        return [getattr(n.target, "__name__", str(n.target)) for n in self.cpu_nodes()]

    def delegate_blobs(self) -> List[bytes]:
        return delegate_blobs(self.graph_module())

    def check_fully_delegated(self) -> "QnnTester":
        left = self.cpu_nodes()
        assert not left, (
            f"not delegated: {[(n.name, str(n.target)) for n in left]}; rejected: {self.partitioner.rejected_nodes}"
        )
        assert self.delegate_blobs(), "no delegate was created"
        return self

    def check_count(self, expected: int) -> "QnnTester":
        """Number of delegates in the lowered program."""
        assert len(self.delegate_blobs()) == expected, (len(self.delegate_blobs()), expected)
        return self

    def payload(self, index: int = 0) -> GraphSummary:
        return describe_payload(self.delegate_blobs()[index])[0]

    def check_one_delegate_ops(self, expected: dict) -> dict:
        """All compute in one delegate whose payload has exactly `expected` {QNN op type: count}
        (types not named may appear); returns every op type's count."""
        self.check_fully_delegated().check_count(1)
        types = self.payload().op_types()
        wrong = {op: (types.get(op), count) for op, count in expected.items() if types.get(op) != count}
        assert not wrong, f"op counts (got, want): {wrong}; payload: {types}"
        return types

    # ---- serialization and run ---------------------------------------------------
    def to_executorch(self) -> "QnnTester":
        self.et_program = self.edge.to_executorch()
        self.pte_path = os.path.join(self.tmp_dir, "model.pte")
        with open(self.pte_path, "wb") as f:
            self.et_program.write_to_file(f)
        return self

    def run(self) -> "QnnTester":
        """Run the .pte with executorch.runtime (the QnnDelegate backend is registered by the extension)."""
        from executorch.runtime import Runtime

        require_extension()
        program = Runtime.get().load_program(self.pte_path)  # keep: its methods point into it
        method = program.load_method("forward")
        self.outputs = _to_numpy(method.execute(list(self.inputs)))
        return self

    def reference_outputs(self) -> List[np.ndarray]:
        with torch.no_grad():
            return _to_numpy(self.module(*self.inputs))

    def compare(self, rtol: float = 1e-2, atol: float = 1e-2) -> "QnnTester":
        """fp16 tolerance: |out - ref| <= atol * max(1, max|ref|) + rtol * |ref|."""
        expected = self.reference_outputs()
        assert len(self.outputs) == len(expected), (len(self.outputs), len(expected))
        for i, (out, ref) in enumerate(zip(self.outputs, expected)):
            assert out.shape == ref.shape, f"output {i}: shape {out.shape} != {ref.shape}"
            scale = max(1.0, float(np.abs(ref).max()) if ref.size else 1.0)
            err = np.abs(out.astype(np.float64) - ref.astype(np.float64))
            bound = atol * scale + rtol * np.abs(ref)
            worst = float((err - bound).max()) if err.size else 0.0
            assert worst <= 0, (
                f"output {i}: max abs err {float(err.max()):.3g} exceeds tolerance "
                f"(atol {atol * scale:.3g}, rtol {rtol})"
            )
        return self

    def run_and_compare(self, **tolerance) -> "QnnTester":
        return self.lower().check_fully_delegated().to_executorch().run().compare(**tolerance)


def count_op_types(summary: GraphSummary, op_type: str) -> int:
    return summary.op_types().get(op_type, 0)


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator)


def inputs_of(*shapes: Sequence[int]) -> Tuple[torch.Tensor, ...]:
    return tuple(randn(*s, seed=i) for i, s in enumerate(shapes))


INT32_BOUNDARY = [-(2**31), 2**31 - 1, -1, 0, 255, -256, 256, 128, -128, 65535, -65536, 2**24 - 1]


def random_int32(shape, seed: int, boundary=INT32_BOUNDARY) -> torch.Tensor:
    """Random int32 over the whole range, the boundary values first."""
    g = torch.Generator().manual_seed(seed)
    count = int(np.prod(shape))
    rand = torch.randint(-(2**31), 2**31 - 1, (count,), generator=g, dtype=torch.int64)
    values = torch.cat([torch.tensor(boundary[:count], dtype=torch.int64), rand[len(boundary) :]])
    return values[torch.randperm(count, generator=g)].to(torch.int32).reshape(shape)


def assert_outputs_exact(tester: QnnTester) -> None:
    """Every output equals eager exactly, dtype and shape included."""
    for i, (out, ref) in enumerate(zip(tester.outputs, tester.reference_outputs())):
        assert out.dtype == ref.dtype and out.shape == ref.shape, (i, out.dtype, ref.dtype, out.shape, ref.shape)
        np.testing.assert_array_equal(out, ref, err_msg=f"output {i}")
