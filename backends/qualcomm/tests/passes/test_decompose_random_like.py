"""rand_like / randn_like (kept whole by torch.export, not core ATen, no ExecuTorch CPU kernel)
become rand / randn of the input's shape: the program loads and draws on the CPU at every call,
the rest is delegated (upstream's rand_like / randn_like cases failed at edge verification or at
load, error 0x14)."""

from __future__ import annotations

import torch
from executorch.runtime import Runtime

from backends.qualcomm import to_edge_transform_and_lower_to_qnn
from backends.qualcomm.tests.helpers.tester import fp16_compile_specs
from backends.qualcomm.utils.pte_tools import delegate_blobs


class Noise(torch.nn.Module):
    def forward(self, x: torch.Tensor):
        return x * 2.0 + torch.rand_like(x), torch.randn_like(x) - x


def test_random_like_draws_on_the_cpu_at_every_call():
    x = torch.zeros(64, 32)
    edge = to_edge_transform_and_lower_to_qnn(Noise(), (x,), fp16_compile_specs())
    graph = edge.exported_program().graph_module
    cpu = sorted(str(getattr(n.target, "__name__", n.target)) for n in graph.graph.nodes if n.op == "call_function")
    assert "aten.rand.default" in cpu and "aten.randn.default" in cpu, cpu
    assert not any("_like" in t for t in cpu), cpu
    assert len(delegate_blobs(graph)) == 1  # the arithmetic
    program = Runtime.get().load_program(edge.to_executorch().buffer)  # alive while its method runs
    method = program.load_method("forward")
    first, second = method.execute([x]), method.execute([x])
    assert not torch.equal(first[0], second[0]) and not torch.equal(first[1], second[1])
    assert 0.0 <= float(first[0].min()) and float(first[0].max()) <= 1.0  # fp16 rounds up to 1.0
    assert abs(float(first[1].mean())) < 0.1 and abs(float(first[1].std()) - 1.0) < 0.1
