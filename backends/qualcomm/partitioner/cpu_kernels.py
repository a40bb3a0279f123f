"""Which ops ExecuTorch's CPU kernels implement, and the check that no node left on the CPU lacks one.

A node the partitioner leaves on the CPU needs an ExecuTorch kernel (the out variant of its op:
`aten::avg_pool3d.out`), else the program lowers and serializes but fails at load
(`Failed to load method forward, error: 0x14`, OperatorMissing). The kernels known are those
registered in this process (portable, optimized and quantized kernels: what `qnn_executor_runner`
and ExecuTorch's Python runtime link); a runtime that registers more can pass
`QnnPartitioner(..., require_cpu_kernels=False)`."""

from __future__ import annotations

import functools
from typing import Dict, List, Mapping

import torch
from executorch.exir.operator.convert import to_out_variant

from backends.qualcomm.utils.errors import QnnLoweringError

MAX_LISTED = 6


@functools.lru_cache(maxsize=1)
def _cpu_operator_names() -> frozenset:
    try:
        from executorch.extension.pybindings.portable_lib import _get_operator_names
    except ImportError:
        return frozenset()
    return frozenset(_get_operator_names())


def _kernel_names(op: torch._ops.OpOverload) -> List[str]:
    """The names ExecuTorch's kernel for `op` may have: its out variant's (`aten::add.out`); when
    torch cannot say (to_out_variant fails on some ops, e.g. `pow.Tensor_Scalar`), the two
    conventional spellings (`aten::pow.Tensor_Scalar_out`, `aten::pow.out`)."""
    schema = op._schema
    try:
        out_schema = to_out_variant(op)[0]._schema
        return [f"{out_schema.name}.{out_schema.overload_name}" if out_schema.overload_name else out_schema.name]
    except Exception:  # noqa: BLE001 - torch cannot derive it: the conventional names
        overload = schema.overload_name
        return [f"{schema.name}.{overload}_out" if overload and overload != "default" else f"{schema.name}.out"] + [
            f"{schema.name}.out"
        ]


def _aten_op(node: torch.fx.Node):
    op = getattr(node.target, "_op", node.target)
    return op if isinstance(op, torch._ops.OpOverload) else None


def has_cpu_kernel(node: torch.fx.Node) -> bool:
    """ExecuTorch's CPU kernels (those this process registered) implement the node's op."""
    op = _aten_op(node)
    return op is not None and any(name in _cpu_operator_names() for name in _kernel_names(op))


def _kernel_refuses(node: torch.fx.Node) -> bool:
    """Forms of an op whose ExecuTorch kernel exists but refuses them at execute (the program
    loads, execute returns InvalidArgument): a transposed 3-D convolution (measured: the
    portable aten::convolution.out kernel, ExecuTorch 1.5.1)."""
    if _aten_op(node) != torch.ops.aten.convolution.default or len(node.args) < 7 or not node.args[6]:
        return False
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and val.dim() == 5


def missing_cpu_kernels(graph: torch.fx.Graph, delegated: Mapping[torch.fx.Node, str]) -> Dict[torch.fx.Node, str]:
    """{node: kernel name} of the op nodes left on the CPU that no registered kernel implements.
    Empty when the registered kernels cannot be read (nothing to check against)."""
    known = _cpu_operator_names()
    if not known:
        return {}
    missing = {}
    for node in graph.nodes:
        op = _aten_op(node) if node.op == "call_function" and node not in delegated else None
        if op is not None and not any(name in known for name in _kernel_names(op)):
            missing[node] = _kernel_names(op)[0]
        elif op is not None and _kernel_refuses(node):
            missing[node] = f"{_kernel_names(op)[0]} for a transposed 3-D convolution"
    return missing


def check_cpu_kernels(
    graph: torch.fx.Graph, delegated: Mapping[torch.fx.Node, str], reasons: Mapping[str, str]
) -> None:
    """QnnLoweringError naming each op left on the CPU without an ExecuTorch kernel (and why
    the delegate did not take it): such a program would lower but not load."""
    missing = missing_cpu_kernels(graph, delegated)
    if not missing:
        return
    lines: List[str] = []
    for node, kernel in list(missing.items())[:MAX_LISTED]:
        why = reasons.get(node.name, "not delegated")
        op = getattr(node.target, "__name__", str(node.target))
        lines.append(f"  {node.name} ({op}): no CPU kernel {kernel}; not delegated: {why}")
    more = f"\n  ... ({len(missing)} in all)" if len(missing) > MAX_LISTED else ""
    raise QnnLoweringError(
        f"QnnPartitioner: {len(missing)} node(s) would stay on the CPU, where ExecuTorch has no kernel for "
        f"them: the program would lower but fail at load (OperatorMissing) or execute.\n"
        + "\n".join(lines)
        + more
        + "\nChange these ops in the model (another form of the op the delegate takes, see docs/ops.md), or "
        "pass QnnPartitioner(..., require_cpu_kernels=False) if your runtime registers these kernels."
    )
