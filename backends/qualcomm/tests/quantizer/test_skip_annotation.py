"""skip_annotation (upstream's utils.utils helper): the named nodes / ops stay float, on the
CPU or delegated in float inside the quantized delegate."""

from __future__ import annotations

import unittest

import numpy as np
import torch
from parameterized import parameterized

from backends.qualcomm import QnnQuantizer, QuantDtype
from backends.qualcomm.tests.helpers.quantizer_models import run_program
from backends.qualcomm.tests.helpers.tester import inputs_of

_aten = torch.ops.aten


class TwoConvAdd(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_a = torch.nn.Conv2d(3, 4, 3)
        self.conv_b = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x, y):
        return self.conv_a(x) + self.conv_b(y)


class TestSkipAnnotation(unittest.TestCase):
    """skip_annotation with upstream's arguments (upstream's tests re-export the returned module)."""

    @parameterized.expand(
        [
            ("node_id_cpu", {"fp_node_id_set": {"conv2d"}}, ["aten.convolution.default"]),
            ("node_op_cpu", {"fp_node_op_set": {_aten.add.Tensor}}, ["aten.add.Tensor"]),
            ("node_id_delegated_float", {"fp_node_id_set": {"conv2d"}, "fallback_to_cpu": False}, []),
        ]
    )
    def test_skip_annotation(self, _, kwargs, cpu_ops):
        from executorch.exir import to_edge

        from backends.qualcomm.tests.helpers.quant_tester import quant_compile_specs
        from backends.qualcomm.utils.utils import skip_annotation

        torch.manual_seed(0)
        module, inputs = TwoConvAdd().eval(), inputs_of((1, 3, 6, 6), (1, 3, 6, 6))
        quantizer = QnnQuantizer()
        quantizer.set_default_quant_config(QuantDtype.use_8a8w)
        graph_module, edge_prog_mgrs = skip_annotation(
            module, quantizer, quant_compile_specs(), inputs, lambda gm: gm(*inputs), **kwargs
        )
        self.assertEqual(len(edge_prog_mgrs), 1)
        on_cpu = [
            n.target.__name__
            for n in edge_prog_mgrs[0].exported_program().graph.nodes
            if n.op == "call_function" and "delegate" not in str(n.target) and "getitem" not in str(n.target)
        ]
        self.assertEqual(on_cpu, cpu_ops)
        program = to_edge(torch.export.export(graph_module, inputs, strict=True)).to_executorch()
        with torch.no_grad():
            expected = module(*inputs).numpy()
        out_reexported = run_program(program, inputs)[0]
        out_manager = run_program(edge_prog_mgrs[0].to_executorch(), inputs)[0]
        np.testing.assert_array_equal(out_reexported, out_manager)
        self.assertLess(float(np.abs(out_manager - expected).max()), 0.05)  # 8-bit steps of a ~3-wide range
