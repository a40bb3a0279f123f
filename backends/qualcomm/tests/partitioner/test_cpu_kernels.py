"""A node left on the CPU without an ExecuTorch kernel is refused at lowering (the program
would serialize, then fail at load); with require_cpu_kernels=False it lowers and fails at
load, as the error says; nodes that have a kernel stay on the CPU without complaint."""

from __future__ import annotations

import pytest
import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.runtime import Runtime

from backends.qualcomm import QcomChipset, QnnPartitioner, generate_htp_compiler_spec
from backends.qualcomm import generate_qnn_executorch_compiler_spec
from backends.qualcomm.partitioner.cpu_kernels import has_cpu_kernel, missing_cpu_kernels
from backends.qualcomm.utils.errors import QnnLoweringError


class PoolWithoutCpuKernel(torch.nn.Module):
    """avg_pool3d whose last window's divisor counts the padding but not its ceil_mode overhang:
    not delegated (QNN's PoolAvg cannot express it), and ExecuTorch 1.5.1 has no avg_pool3d CPU
    kernel."""

    def forward(self, x):
        return torch.nn.functional.avg_pool3d(x, 3, 2, 1, ceil_mode=True) + 1.0  # 6 -> 4 windows, the last overhangs


class SkippedAdd(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) + 1.0


def _specs():
    return generate_qnn_executorch_compiler_spec(
        soc_model=QcomChipset.SM8650, backend_options=generate_htp_compiler_spec(use_fp16=True)
    )


def _lower(model: torch.nn.Module, x: torch.Tensor, **kwargs):
    return to_edge_transform_and_lower(
        torch.export.export(model, (x,)), partitioner=[QnnPartitioner(_specs(), **kwargs)]
    )


def test_op_without_cpu_kernel_is_refused_at_lowering():
    x = torch.randn(1, 2, 6, 6, 6)
    with pytest.raises(QnnLoweringError) as info:
        _lower(PoolWithoutCpuKernel(), x)
    message = str(info.value)
    assert "1 node(s) would stay on the CPU" in message
    assert "aten_avg_pool3d_default (aten.avg_pool3d.default): no CPU kernel aten::avg_pool3d.out" in message
    assert "ceil_mode with count_include_pad" in message  # why the delegate did not take it
    assert "require_cpu_kernels=False" in message


def test_without_the_check_the_program_fails_at_load():
    """What the check prevents: the same model lowered with require_cpu_kernels=False."""
    x = torch.randn(1, 2, 6, 6, 6)
    program = Runtime.get().load_program(
        _lower(PoolWithoutCpuKernel(), x, require_cpu_kernels=False).to_executorch().buffer
    )
    with pytest.raises(RuntimeError, match="Failed to load method forward"):
        program.load_method("forward")


def test_cpu_nodes_with_kernels_lower_and_run():
    """relu forced to the CPU (it has a kernel): lowers, loads, matches eager."""
    x = torch.randn(2, 8)
    edge = _lower(SkippedAdd(), x, skip_node_op_set={"aten.relu.default"})
    graph = edge.exported_program().graph
    cpu_ops = [n for n in graph.nodes if n.op == "call_function" and "relu" in str(n.target)]
    assert len(cpu_ops) == 1 and has_cpu_kernel(cpu_ops[0])
    assert missing_cpu_kernels(graph, {}) == {}
    program = Runtime.get().load_program(edge.to_executorch().buffer)  # alive while its method runs
    got = program.load_method("forward").execute([x])[0]
    torch.testing.assert_close(got, SkippedAdd()(x), rtol=0, atol=2e-3)


class DilatedTransposedConv3dWeightInput(torch.nn.Module):
    """A dilated transposed conv3d whose weight is an input: not delegated (no constant kernel to
    dilate), and ExecuTorch 1.5.1's portable convolution kernel refuses a transposed 3-D one at
    execute (InvalidArgument)."""

    def forward(self, x, w):
        return torch.nn.functional.conv_transpose3d(x, w, dilation=2)


def test_kernel_that_refuses_the_form_is_refused_at_lowering():
    x, w = torch.randn(1, 1, 3, 3, 3), torch.randn(1, 2, 2, 2, 2)
    module = DilatedTransposedConv3dWeightInput()
    with pytest.raises(QnnLoweringError) as info:
        to_edge_transform_and_lower(torch.export.export(module, (x, w)), partitioner=[QnnPartitioner(_specs())])
    message = str(info.value)
    assert "aten::convolution.out for a transposed 3-D convolution" in message, message
    assert "weight that is not a constant" in message, message
    edge = to_edge_transform_and_lower(
        torch.export.export(module, (x, w)), partitioner=[QnnPartitioner(_specs(), require_cpu_kernels=False)]
    )
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    with pytest.raises(RuntimeError, match="execute"):  # what the check prevents
        method.execute([x, w])
