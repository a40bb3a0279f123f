"""The quantizer's upstream API: upstream's names, signatures, defaults and enum values; custom
annotations, discard, predicates, recipes, act_symmetric / eps / act_observer; the context
binary helpers' messages."""

from __future__ import annotations

import inspect
import unittest

import torch
from parameterized import parameterized
from torchao.quantization.pt2e import MinMaxObserver, MovingAverageMinMaxObserver
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

from backends.qualcomm import ModuleQConfig, QnnQuantizer, QuantDtype
from backends.qualcomm.quantizer.observers import PassUnionMovingAverageObserver
from backends.qualcomm.tests.helpers.quant_tester import QuantTester
from backends.qualcomm.tests.helpers.quantizer_models import (
    ConvThenFc,
    activation_observer,
    activation_quantize_args,
    convert_calibrated,
    prepare_calibrated,
    weight_kinds,
)
from backends.qualcomm.tests.helpers.tester import inputs_of, randn

_aten = torch.ops.aten


# ---- upstream's names, signatures, defaults --------------------------------------------------
UPSTREAM_QUANT_DTYPE = {
    "use_16a16w": 0,
    "use_16a8w": 1,
    "use_16a4w": 2,
    "use_16a4w_block": 3,
    "use_8a8w": 4,
    "use_8a4w": 5,
    "use_fp16a8w": 6,
    "use_16a2w": 7,
}

UPSTREAM_SET_DEFAULT = [
    ("quant_dtype", inspect.Parameter.empty),
    ("is_qat", False),
    ("is_conv_per_channel", False),
    ("is_linear_per_channel", False),
    ("is_embedding_per_channel", False),
    ("act_observer", None),
    ("act_symmetric", False),
    ("eps", None),
]

UPSTREAM_MODULE_QCONFIG = [
    ("quant_dtype", QuantDtype.use_8a8w),
    ("is_qat", False),
    ("is_conv_per_channel", False),
    ("is_linear_per_channel", False),
    ("is_embedding_per_channel", False),
    ("act_observer", None),
    ("act_symmetric", False),
    ("eps", None),
]


class TestQuantizerApi(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)

    def test_quant_dtype_values_are_upstreams(self):
        self.assertEqual({d.name: int(d) for d in QuantDtype}, UPSTREAM_QUANT_DTYPE)

    def test_signatures_and_defaults_are_upstreams(self):
        params = list(inspect.signature(QnnQuantizer.set_default_quant_config).parameters.values())[1:]
        self.assertEqual([(p.name, p.default) for p in params], UPSTREAM_SET_DEFAULT)
        params = inspect.signature(ModuleQConfig).parameters.values()
        self.assertEqual([(p.name, p.default) for p in params], UPSTREAM_MODULE_QCONFIG)
        params = inspect.signature(QnnQuantizer).parameters
        self.assertEqual(list(params), ["backend", "soc_model", "strict"])
        for name in (
            "set_block_size_map",
            "set_submodule_qconfig_list",
            "add_custom_quant_annotations",
            "add_discard_nodes",
            "add_discard_ops",
            "get_supported_ops",
            "set_recipe",
        ):
            self.assertTrue(callable(getattr(QnnQuantizer, name)), name)

    def test_constructor_arguments(self):
        from backends.qualcomm.serialization.qc_schema import QcomChipset, QnnExecuTorchBackendType

        quantizer = QnnQuantizer(
            backend=QnnExecuTorchBackendType.kHtpBackend, soc_model=QcomChipset.SM8650, strict=False
        )
        self.assertEqual(quantizer.soc_info.socModel, int(QcomChipset.SM8650))
        with self.assertRaisesRegex(ValueError, "backend kGpuBackend is not supported"):
            QnnQuantizer(backend=QnnExecuTorchBackendType.kGpuBackend)

    def test_supported_and_discarded_ops(self):
        quantizer = QnnQuantizer()
        ops = quantizer.get_supported_ops()
        for op in (_aten.conv2d.default, _aten.linear.default, _aten.embedding.default, _aten.add.Tensor):
            self.assertIn(op, ops)
        quantizer.set_default_quant_config(QuantDtype.use_8a8w)
        quantizer.add_discard_ops([_aten.relu.default])
        module = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.ReLU())
        converted = convert_calibrated(module.eval(), inputs_of((1, 3, 4, 4)), quantizer)
        self.assertEqual(activation_quantize_args(converted, "aten.relu"), [])  # float output
        self.assertEqual(len(activation_quantize_args(converted, "aten.conv2d")), 1)
        self.assertIn(_aten.relu.default, quantizer.get_supported_ops())  # discard does not shrink support

    def test_annotated_ops_and_annotators_come_from_the_builders(self):
        from backends.qualcomm.builders.registry import NodeBuilder, QuantFamily, quant_annotated_ops, register_builder
        from backends.qualcomm.quantizer import annotators

        families = quant_annotated_ops()
        self.assertEqual(QnnQuantizer().get_supported_ops(), set(families))
        # Derived, not counted by hand: every aten op the op table maps to a quantized QNN op.
        from backends.qualcomm.builders.qnn_op_types import OP_TABLE

        table_ops = {
            getattr(getattr(torch.ops.aten, name.split(".")[0]), name.split(".")[1])
            for row in OP_TABLE.values()
            if row.quant not in ("float", "convert")
            for name in row.aten
        }
        self.assertLessEqual(table_ops, set(families))
        expected = {
            QuantFamily.WEIGHTED: annotators.annotate_weighted,
            QuantFamily.COMPUTE: annotators.annotate_compute,
            QuantFamily.LAYER_NORM: annotators.annotate_layer_norm,
            QuantFamily.SHARED: annotators.annotate_shared,
            QuantFamily.EMBEDDING: annotators.annotate_embedding,
        }
        for op, family in families.items():
            self.assertIs(annotators.annotator_for(op), expected[family], op)
        spot = {
            _aten.conv2d.default: QuantFamily.WEIGHTED,
            _aten.linear.default: QuantFamily.WEIGHTED,
            _aten.add_.Tensor: QuantFamily.COMPUTE,
            _aten.rsqrt.default: QuantFamily.COMPUTE,
            _aten.layer_norm.default: QuantFamily.LAYER_NORM,
            _aten.view.default: QuantFamily.SHARED,
            _aten.max_pool2d.default: QuantFamily.SHARED,
            _aten.embedding.default: QuantFamily.EMBEDDING,
        }
        self.assertEqual({op: families[op] for op in spot}, spot)
        self.assertIsNone(annotators.annotator_for(_aten.erf.default))  # no builder: stays float

        class SecondAdd(NodeBuilder):
            targets = []
            quant_annotations = {_aten.add.Tensor: QuantFamily.SHARED}

        with self.assertRaisesRegex(TypeError, "SecondAdd and BinaryElementwiseBuilder both annotate"):
            register_builder(SecondAdd)
        self.assertIs(annotators.annotator_for(_aten.add.Tensor), annotators.annotate_compute)

    def test_custom_quant_annotations_run_after_the_builtin_ones(self):
        from torchao.quantization.pt2e.quantizer import QuantizationAnnotation, QuantizationSpec

        seen = []

        def annotate_relu_16bit(gm: torch.fx.GraphModule) -> None:
            relu = next(n for n in gm.graph.nodes if n.target == _aten.relu.default)
            conv = relu.args[0]
            seen.append(conv.meta["quantization_annotation"].output_qspec.dtype)
            spec = QuantizationSpec(
                dtype=torch.int32,
                quant_min=0,
                quant_max=65535,
                qscheme=torch.per_tensor_affine,
                observer_or_fake_quant_ctr=MinMaxObserver.with_args(eps=1e-9),
            )
            relu.meta["quantization_annotation"] = QuantizationAnnotation(
                input_qspec_map={conv: spec}, output_qspec=spec, _annotated=True
            )

        quantizer = QnnQuantizer()
        quantizer.set_default_quant_config(QuantDtype.use_8a8w)
        quantizer.add_discard_ops([_aten.relu.default])
        quantizer.add_custom_quant_annotations((annotate_relu_16bit,))
        converted = convert_calibrated(ConvThenFc().eval(), inputs_of((1, 3, 4, 4)), quantizer)
        self.assertEqual(seen, [torch.uint8])
        ((_, _, qmin, qmax),) = activation_quantize_args(converted, "aten.relu")
        self.assertEqual((qmin, qmax), (0, 65535))

    def test_submodule_predicates(self):
        from backends.qualcomm.quantizer.quantizer import get_submodule_name_predicate, get_submodule_type_predicate

        for predicate in (get_submodule_type_predicate("Linear"), get_submodule_name_predicate("linear")):
            quantizer = QnnQuantizer()
            quantizer.set_default_quant_config(QuantDtype.use_8a8w)
            quantizer.set_submodule_qconfig_list([(predicate, ModuleQConfig(QuantDtype.use_16a8w))])
            converted = convert_calibrated(ConvThenFc().eval(), inputs_of((1, 3, 4, 4)), quantizer)
            self.assertEqual([q[3] for q in activation_quantize_args(converted, "aten.linear")], [65535])
            self.assertEqual([q[3] for q in activation_quantize_args(converted, "aten.conv2d")], [255])

    def test_submodule_rule_errors(self):
        quantizer = QnnQuantizer()
        with self.assertRaisesRegex(ValueError, "rule 0: with a ModuleQConfig the key must be a predicate"):
            quantizer.set_submodule_qconfig_list([(torch.nn.Linear, ModuleQConfig(QuantDtype.use_16a8w))])
        with self.assertRaisesRegex(ValueError, "rule 1: second item must be a ModuleQConfig"):
            quantizer.set_submodule_qconfig_list([(torch.nn.Linear, QuantDtype.use_16a8w), (torch.nn.Conv2d, "8a8w")])

    def test_act_observer_default_and_chosen(self):
        module, inputs = ConvThenFc().eval(), inputs_of((1, 3, 4, 4))
        quantizer = QnnQuantizer()
        quantizer.set_default_quant_config(QuantDtype.use_8a8w)
        self.assertIs(
            type(activation_observer(prepare_calibrated(module, inputs, quantizer), _aten.conv2d.default)),
            PassUnionMovingAverageObserver,
        )
        quantizer.set_default_quant_config(QuantDtype.use_8a8w, act_observer=MinMaxObserver)
        self.assertIs(
            type(activation_observer(prepare_calibrated(module, inputs, quantizer), _aten.conv2d.default)),
            MinMaxObserver,
        )
        quantizer.set_default_quant_config(QuantDtype.use_8a8w, is_qat=True)
        fake_quant = activation_observer(
            prepare_calibrated(module.train(), inputs, quantizer, is_qat=True), _aten.conv2d.default
        )
        self.assertIs(type(fake_quant.activation_post_process), MovingAverageMinMaxObserver)

    def test_default_observer_is_upstreams_moving_average_across_samples(self):
        """One tensor per sample: the same ranges as MovingAverageMinMaxObserver, to the bit."""
        samples, linear = [(randn(2, 4) * (1 + i),) for i in range(3)], ConvThenFc().linear
        ranges = []
        for observer in (None, MovingAverageMinMaxObserver):
            quantizer = QnnQuantizer()
            quantizer.set_default_quant_config(QuantDtype.use_8a8w, act_observer=observer)
            exported = torch.export.export(linear, samples[0], strict=True).module()
            prepared = prepare_pt2e(exported, quantizer)
            for sample in samples:
                prepared(*sample)
            ranges.append([activation_quantize_args(convert_pt2e(prepared), "aten.linear")])
        self.assertEqual(ranges[0], ranges[1])

    def test_shared_encoding_covers_every_input_of_a_cat(self):
        """cat's inputs and output share one encoding: its range must be the union of them all.
        Upstream's MovingAverageMinMaxObserver gave [0, 1.396] here (the first input's), and the
        second input's values above 1.4 and below 0 clipped: error 0.43 (60 steps)."""

        class TwoRangesCat(torch.nn.Module):
            def forward(self, a, b):
                return torch.cat([a + 0.5, b * 3.0 - 0.5], dim=1)

        a, b = torch.linspace(0.0, 0.9, 8)[None], torch.linspace(0.0, 0.9, 8)[None]
        quantizer = QnnQuantizer()
        quantizer.set_default_quant_config(QuantDtype.use_8a8w)
        converted = convert_calibrated(TwoRangesCat(), (a, b), quantizer)
        ((scale, zero_point, qmin, qmax),) = activation_quantize_args(converted, "aten.cat")
        self.assertAlmostEqual((qmin - zero_point) * scale, -0.5, delta=scale)
        self.assertAlmostEqual((qmax - zero_point) * scale, 2.2, delta=scale)
        error = (converted(a, b) - TwoRangesCat()(a, b)).abs().max().item()
        self.assertLessEqual(error, 2 * scale)  # its inputs were quantized too; measured 1.3 steps

    def test_eps_is_the_smallest_scale(self):
        module, inputs = torch.nn.ReLU(), (1e-4 * randn(2, 8),)
        for eps, expected in ((None, 1e-4 / 255), (1e-3, 1e-3)):
            quantizer = QnnQuantizer()
            quantizer.set_default_quant_config(QuantDtype.use_8a8w, eps=eps)
            ((scale, _, _, _),) = activation_quantize_args(convert_calibrated(module, inputs, quantizer), "aten.relu")
            if eps is None:
                self.assertGreater(scale, expected)  # the data's range: eps does not bind
            else:
                self.assertAlmostEqual(scale, expected, places=9)
        with self.assertRaisesRegex(ValueError, "ModuleQConfig: eps must be >= 0, got -1.0"):
            QnnQuantizer().set_default_quant_config(QuantDtype.use_8a8w, eps=-1.0)

    @parameterized.expand([("8a8w", QuantDtype.use_8a8w, 128, 255), ("16a8w", QuantDtype.use_16a8w, 32768, 65535)])
    def test_act_symmetric(self, _, dtype, zero_point, qmax):
        quantizer = QnnQuantizer()
        quantizer.set_default_quant_config(dtype, act_symmetric=True, is_conv_per_channel=True)
        module = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Tanh())
        tester = QuantTester(module, inputs_of((1, 3, 6, 6)), dtype, quantizer=quantizer)
        args = [
            n.args[1:5]
            for n in tester.module.graph.nodes
            if n.target == torch.ops.quantized_decomposed.quantize_per_tensor.default
        ]
        self.assertEqual(len(args), 3)
        self.assertEqual({(zp, qmax_) for _, zp, _, qmax_ in args}, {(zero_point, qmax)})
        tester.run_and_compare_steps()  # the delegate honours the midpoint zero points

    def test_recipe(self):
        from backends.qualcomm.quantizer.quant_recipe import QuantGranularity, QuantRecipe

        recipe = QuantRecipe(
            QuantDtype.use_8a8w, False, act_observer=MinMaxObserver, granularity=QuantGranularity.PER_TENSOR
        ).add_node_target(
            {_aten.linear.default},
            QuantDtype.use_16a8w,
            False,
            act_observer=MinMaxObserver,
            granularity=QuantGranularity.PER_CHANNEL,
            note="linear in 16 bits",
            priority=2,
        )
        quantizer = QnnQuantizer()
        quantizer.set_recipe(recipe)
        self.assertIs(quantizer.recipe, recipe)
        converted = convert_calibrated(ConvThenFc().eval(), inputs_of((1, 3, 4, 4)), quantizer)
        self.assertEqual([q[3] for q in activation_quantize_args(converted, "aten.linear")], [65535])
        self.assertEqual([q[3] for q in activation_quantize_args(converted, "aten.conv2d")], [255])
        kinds = weight_kinds(converted)
        self.assertEqual((kinds["linear"], kinds["conv2d"]), ("per_channel", "per_tensor"))
        self.assertIn("use_16a8w/PTQ | MinMaxObserver | PER_CHANNEL | linear in 16 bits", recipe.summary())

    def test_recipe_per_block(self):
        from backends.qualcomm.quantizer.quant_recipe import QuantGranularity, QuantRecipe

        recipe = QuantRecipe(
            QuantDtype.use_16a4w_block,
            False,
            MinMaxObserver,
            QuantGranularity.PER_BLOCK,
            extra_kwargs={"block_size": (1, 8)},
        )
        quantizer = QnnQuantizer()
        quantizer.set_recipe(recipe)
        converted = convert_calibrated(torch.nn.Linear(32, 4).eval(), inputs_of((2, 32)), quantizer)
        dq = next(n for n in converted.graph.nodes if "dequantize_affine" in str(n.target))
        self.assertEqual(tuple(dq.args[1]), (1, 8))
        with self.assertRaisesRegex(ValueError, "PER_BLOCK needs QuantDtype.use_16a4w_block"):
            QuantRecipe(
                QuantDtype.use_8a8w, False, MinMaxObserver, QuantGranularity.PER_BLOCK
            ).initialize_default_strategy_ops(set())

    def test_context_binary_helpers_say_what_is_missing(self):
        """from_context_binary of a missing file names it; dump_context_from_pte of a .pte lowered
        without context binaries (this suite's default) says why (the real round trip:
        qnn/test_context_binary_io.py)."""
        import tempfile
        from pathlib import Path

        from backends.qualcomm.tests.helpers.tester import QnnTester
        from backends.qualcomm.upstream_compat import ContextBinaryError, ContextBinaryNotSupportedError
        from backends.qualcomm.utils.utils import dump_context_from_pte, from_context_binary

        with self.assertRaisesRegex(ContextBinaryError, "from_context_binary: missing_model.bin: No such file"):
            from_context_binary("missing_model.bin", "ctx_op")
        with tempfile.TemporaryDirectory() as folder:
            tester = QnnTester(torch.nn.Linear(4, 4), inputs_of((2, 4)))
            tester.tmp_dir = folder
            tester.lower().to_executorch()
            with self.assertRaisesRegex(
                ContextBinaryNotSupportedError,
                "dump_context_from_pte: .* has no QNN "
                r"context binary to dump \(its 1 qnn-delegate",
            ):
                dump_context_from_pte(tester.pte_path)
            self.assertEqual(sorted(p.name for p in Path(folder).iterdir()), [Path(tester.pte_path).name])
