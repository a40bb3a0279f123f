"""Quantizer fixes: 16a16w bias against float, submodule configs under QAT (fake quant and the
chosen observer), block size map checks, per-channel embedding tables."""

from __future__ import annotations

import unittest

import numpy as np
import torch
from parameterized import parameterized
from torchao.quantization.pt2e import FakeQuantize, MinMaxObserver

from backends.qualcomm import ModuleQConfig, QnnQuantizer, QuantDtype
from backends.qualcomm.tests.helpers.quant_tester import QuantTester
from backends.qualcomm.tests.helpers.quantizer_models import (
    ConvThenFc,
    EmbedConvLinear,
    activation_observer,
    convert_calibrated,
    prepare_calibrated,
)
from backends.qualcomm.tests.helpers.tester import inputs_of

_aten = torch.ops.aten


# ---- recipe defects -------------------------------------------------------------------
class TestQuantizerFixes(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)

    @parameterized.expand(
        [
            ("conv_bias3_per_tensor", "conv", 3.0, False),
            ("conv_bias20_per_channel", "conv", 20.0, True),
            ("linear_bias20_per_tensor", "linear", 20.0, False),
            ("linear_bias3_per_channel", "linear", 3.0, True),
        ]
    )
    def test_16a16w_large_bias_against_float(self, _, kind, bias, per_channel):
        """Was: int32 bias scale = act_scale x weight_scale (~1e-9) saturated any bias above ~2
        (max error 3.6 with bias 3, 20.8 with bias 20). 16a8w on the same layer: 0.006-0.008."""
        from backends.qualcomm import deserialize
        from backends.qualcomm.quantizer.qconfig import BIAS_QMAX, DEFAULT_EPS_16BIT

        module = torch.nn.Conv2d(4, 8, 3) if kind == "conv" else torch.nn.Linear(16, 8)
        with torch.no_grad():
            module.bias.fill_(bias)
        inputs = inputs_of((1, 4, 6, 6) if kind == "conv" else (3, 16))
        tester = QuantTester(module, inputs, QuantDtype.use_16a16w, per_channel=per_channel).lower()
        tester.check_fully_delegated().to_executorch().run()
        with torch.no_grad():
            expected = module(*inputs).numpy()
        self.assertLess(float(np.abs(tester.outputs[0] - expected).max()), 1e-3)
        summary = tester.payload()
        op = next(o for o in summary.ops if o.type in ("Conv2d", "FullyConnected"))
        self.assertEqual({t.name: t.data_type for t in summary.tensors}[op.inputs[2]], "SFIXED_POINT_32")
        bias_tensor = next(
            t for t in deserialize(tester.delegate_blobs()[0]).graphs[0].tensors if t.name.decode() == op.inputs[2]
        )
        expected_scale = max(bias / BIAS_QMAX, DEFAULT_EPS_16BIT)  # its own range (eps bounds it below)
        self.assertAlmostEqual(bias_tensor.quant.scale / expected_scale, 1.0, places=6)

    def test_qat_submodule_rules_get_fake_quant_and_the_observer(self):
        """Was: a submodule rule under a QAT default got PTQ observers (never fake-quantized)."""
        from backends.qualcomm.quantizer.quantizer import get_submodule_type_predicate

        inputs = inputs_of((1, 3, 4, 4))
        for rules in (
            [(torch.nn.Linear, QuantDtype.use_16a8w)],  # our older form: inherits QAT / observer
            [
                (
                    get_submodule_type_predicate("Linear"),
                    ModuleQConfig(QuantDtype.use_16a8w, is_qat=True, act_observer=MinMaxObserver),
                )
            ],
        ):
            quantizer = QnnQuantizer()
            quantizer.set_default_quant_config(QuantDtype.use_8a8w, is_qat=True, act_observer=MinMaxObserver)
            quantizer.set_submodule_qconfig_list(rules)
            prepared = prepare_calibrated(ConvThenFc().train(), inputs, quantizer, is_qat=True)
            for target, qmax in ((_aten.linear.default, 65535), (_aten.conv2d.default, 255)):
                fake = activation_observer(prepared, target)
                self.assertIsInstance(fake, FakeQuantize)
                self.assertIs(type(fake.activation_post_process), MinMaxObserver)
                self.assertEqual(fake.quant_max, qmax)

    def test_block_size_map_rejects_zero_and_bad_values(self):
        quantizer = QnnQuantizer()
        with self.assertRaisesRegex(ValueError, "block size of node 'linear' must be > 0, got 0"):
            quantizer.set_block_size_map({"linear": 0})
        with self.assertRaisesRegex(ValueError, r"must be > 0 in every dim, got \(1, 0\)"):
            quantizer.set_block_size_map({"linear": (1, 0)})
        with self.assertRaisesRegex(ValueError, "must be an int or a tuple of ints, got '16'"):
            quantizer.set_block_size_map({"linear": "16"})

    def _block_prepare(self, block_size_map, dtype=QuantDtype.use_16a4w_block):
        quantizer = QnnQuantizer()
        quantizer.set_default_quant_config(dtype)
        quantizer.set_block_size_map(block_size_map)
        torch.manual_seed(0)
        module = torch.nn.Sequential(torch.nn.Conv2d(32, 16, 3), torch.nn.Flatten(1), torch.nn.Linear(16 * 4, 8))
        return convert_calibrated(module.eval(), inputs_of((1, 32, 4, 4)), quantizer)

    def test_block_size_map_rejects_unknown_names_at_annotation(self):
        with self.assertRaisesRegex(
            ValueError,
            r"no node named 'linaer' \(did you mean 'linear'\?\) in the "
            r"graph; conv/linear nodes: conv2d, linear",
        ):
            self._block_prepare({"linaer": (1, 16)})
        with self.assertRaisesRegex(ValueError, r"node\(s\) 'flatten' are not conv/linear"):
            self._block_prepare({"flatten": 16})

    def test_block_size_map_checks_the_weight(self):
        with self.assertRaisesRegex(
            ValueError,
            r"block size \(1, 16\) of node 'conv2d' needs one entry per "
            r"weight dim, weight shape \(16, 32, 3, 3\)",
        ):
            self._block_prepare({"conv2d": (1, 16)})
        with self.assertRaisesRegex(ValueError, r"must be \(1, b, 3, 3\)"):
            self._block_prepare({"conv2d": (2, 16, 3, 3)})
        with self.assertRaisesRegex(ValueError, "block size 24 of node 'conv2d' does not divide its input channels 32"):
            self._block_prepare({"conv2d": (1, 24, 3, 3)})
        with self.assertRaisesRegex(ValueError, "node 'linear' has a block size but its config has no block weights"):
            self._block_prepare({"linear": 16}, QuantDtype.use_16a4w)

    def test_block_size_tuple_equals_int_form(self):
        def block_scales(converted):
            return [
                getattr(converted, n.args[2].target)
                for n in converted.graph.nodes
                if "dequantize_affine" in str(n.target)
            ]

        by_tuple = block_scales(self._block_prepare({"conv2d": (1, 8, 3, 3), "linear": (1, 32)}))
        by_int = block_scales(self._block_prepare({"conv2d": 8, "linear": 32}))
        self.assertEqual([tuple(s.shape) for s in by_tuple], [(16, 4, 1, 1), (8, 2)])
        for a, b in zip(by_tuple, by_int):
            self.assertTrue(torch.equal(a, b))

    @parameterized.expand([("8a8w", QuantDtype.use_8a8w), ("16a8w", QuantDtype.use_16a8w)])
    def test_embedding_per_channel_gather_table(self, _, dtype):
        """is_embedding_per_channel: the table is int8 with one scale per row (AXIS_SCALE_OFFSET,
        axis 0) and the delegate's Gather agrees with the QDQ reference within 1 step."""
        from backends.qualcomm import deserialize
        from backends.qualcomm.serialization.qnn_graph import QuantEncoding

        embedding = EmbedConvLinear().embedding.eval()
        idx = (torch.tensor([[0, 1, 2, 11], [3, 0, 10, 1]]),)
        quantizer = QnnQuantizer()
        quantizer.set_default_quant_config(dtype, is_embedding_per_channel=True)
        tester = QuantTester(embedding, idx, dtype, quantizer=quantizer).run_and_compare_steps()
        graph = deserialize(tester.delegate_blobs()[0]).graphs[0]
        table = next(t for t in graph.tensors if t.quant is not None and t.quant.axis == 0)
        self.assertEqual(table.quant.encoding, QuantEncoding.AXIS_SCALE_OFFSET)
        self.assertEqual(list(table.dims), [12, 32])
        row_max = embedding.weight.detach().abs().amax(dim=1)
        np.testing.assert_allclose(np.asarray(table.quant.scales), (row_max / 127.5).numpy(), rtol=1e-6)
        self.assertEqual(len(table.data), 12 * 32)  # one byte per weight
