"""Upstream drop-in API of the quantizer and its recipe fixes (issues 10 and 17).

TestUpstreamScript: a quantize-and-lower script written against upstream's API
(the Qualcomm package inside the executorch wheel) runs unchanged after replacing the import prefix, for each
of the 8 dtypes and QAT, and its delegate agrees with the QDQ reference within 1 step.
TestQuantizerApi: upstream's names, signatures, defaults and enum values; custom
annotations, discard, predicates, recipes, act_symmetric / eps / act_observer.
TestQuantizerFixes: 16a16w bias vs float, submodule configs under QAT, block size checks,
per-channel embedding."""
from __future__ import annotations

import inspect
import textwrap
import unittest

import numpy as np
import pytest
import torch
from parameterized import parameterized
from torchao.quantization.pt2e import FakeQuantize, MinMaxObserver, MovingAverageMinMaxObserver
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e, prepare_qat_pt2e

from backends.qualcomm import ModuleQConfig, QnnQuantizer, QuantDtype
from backends.qualcomm.quantizer.observers import PassUnionMovingAverageObserver
from backends.qualcomm.tests.helpers.quant_tester import (
    QuantTester, assert_pt2e_bounds, output_encodings, output_encodings_with_range, step_stats)
from backends.qualcomm.tests.helpers.tester import _to_numpy, inputs_of, randn

_aten = torch.ops.aten


class EmbedConvLinear(torch.nn.Module):
    """embedding -> linear, and conv2d (bias): every weighted op family in one module (no op
    after a weighted one: with QAT ranges a 1-step difference would double through a relu)."""

    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(12, 32)
        self.linear = torch.nn.Linear(32, 16)
        self.conv = torch.nn.Conv2d(16, 8, 3, padding=1)
        with torch.no_grad():  # rows of very different ranges: per-row scales matter
            self.embedding.weight.mul_(torch.linspace(0.05, 4.0, 12)[:, None])

    def forward(self, idx, image):
        return self.linear(self.embedding(idx)), self.conv(image)


# Written against upstream's API. UPSTREAM_QUALCOMM stands for the import prefix of upstream's
# package in the executorch wheel; the test replaces it with ours, as a user switching would.
UPSTREAM_SCRIPT = textwrap.dedent('''
    import torch
    from torchao.quantization.pt2e import MovingAverageMinMaxObserver
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e, prepare_qat_pt2e

    from UPSTREAM_QUALCOMM.quantizer.quantizer import QnnQuantizer, QuantDtype
    from UPSTREAM_QUALCOMM.serialization.qc_schema import QcomChipset, QnnExecuTorchBackendType
    from UPSTREAM_QUALCOMM.utils.utils import (
        generate_htp_compiler_spec, generate_qnn_executorch_compiler_spec, to_edge_transform_and_lower_to_qnn,
    )

    def quantize_and_lower(model, sample_input, calibration, quant_dtype, is_qat):
        quantizer = QnnQuantizer(backend=QnnExecuTorchBackendType.kHtpBackend, soc_model=QcomChipset.SM8650)
        quantizer.set_default_quant_config(
            quant_dtype, is_qat=is_qat, is_conv_per_channel=True, is_linear_per_channel=True,
            is_embedding_per_channel=True, act_observer=MovingAverageMinMaxObserver, act_symmetric=False,
            eps=None,
        )
        if quant_dtype == QuantDtype.use_16a4w_block:
            quantizer.set_block_size_map({"conv2d": (1, 16, 3, 3), "linear": (1, 16)})
        exported = torch.export.export(model, sample_input, strict=True).module()
        prepared = prepare_qat_pt2e(exported, quantizer) if is_qat else prepare_pt2e(exported, quantizer)
        for sample in calibration:
            prepared(*sample)
        converted = convert_pt2e(prepared)
        backend_options = generate_htp_compiler_spec(use_fp16=quant_dtype == QuantDtype.use_fp16a8w)
        compiler_specs = generate_qnn_executorch_compiler_spec(
            soc_model=QcomChipset.SM8650, backend_options=backend_options)
        edge_prog_mgr = to_edge_transform_and_lower_to_qnn(converted, sample_input, compiler_specs)
        return converted, edge_prog_mgr.to_executorch()
''')


# The other upstream style: every keyword at upstream's defaults, a submodule rule, the
# partitioner passed to ExecuTorch's own to_edge_transform_and_lower.
UPSTREAM_SCRIPT_PARTITIONER = textwrap.dedent('''
    import torch
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower
    from torchao.quantization.pt2e import MinMaxObserver
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from UPSTREAM_QUALCOMM.partition.qnn_partitioner import QnnPartitioner
    from UPSTREAM_QUALCOMM.quantizer.quantizer import (
        ModuleQConfig, QnnQuantizer, QuantDtype, get_submodule_type_predicate,
    )
    from UPSTREAM_QUALCOMM.serialization.qc_schema import (
        QcomChipset, QnnExecuTorchHtpPerformanceMode,
    )
    from UPSTREAM_QUALCOMM.utils.utils import (
        generate_htp_compiler_spec, generate_qnn_executorch_compiler_spec,
    )

    def quantize_and_lower(model, sample_input):
        quantizer = QnnQuantizer()
        quantizer.set_default_quant_config(QuantDtype.use_8a8w, is_conv_per_channel=True, act_observer=MinMaxObserver)
        quantizer.set_submodule_qconfig_list([
            (get_submodule_type_predicate("Linear"),
             ModuleQConfig(quant_dtype=QuantDtype.use_16a8w, is_linear_per_channel=True, act_observer=MinMaxObserver)),
        ])
        quantizer.add_custom_quant_annotations([])
        quantizer.add_discard_nodes([])
        exported = torch.export.export(model, sample_input, strict=True).module()
        prepared = prepare_pt2e(exported, quantizer)
        prepared(*sample_input)
        converted = convert_pt2e(prepared)
        backend_options = generate_htp_compiler_spec(
            use_fp16=False, use_dlbc=False, use_multi_contexts=False, use_weight_sharing=False,
            use_slc_allocator=False, htp_performance_mode=QnnExecuTorchHtpPerformanceMode.kHtpBurst)
        compiler_specs = generate_qnn_executorch_compiler_spec(
            soc_model=QcomChipset.SM8650, backend_options=backend_options, debug=False, saver=False,
            online_prepare=False, dump_intermediate_outputs=False, profile_level=0, shared_buffer=False,
            is_from_context_binary=False, op_package_options=None, use_mha2sha=False)
        partitioner = QnnPartitioner(compiler_specs, skip_node_id_set=set(), skip_node_op_set=set(),
                                     skip_mutable_buffer=False)
        edge_prog_mgr = to_edge_transform_and_lower(
            torch.export.export(converted, sample_input, strict=True), partitioner=[partitioner],
            compile_config=EdgeCompileConfig(_check_ir_validity=False))
        return converted, edge_prog_mgr.to_executorch()
''')


def _upstream_script(script: str = UPSTREAM_SCRIPT):
    namespace = {}
    exec(compile(script.replace("UPSTREAM_QUALCOMM", "backends.qualcomm"),
                 "upstream_script", "exec"), namespace)
    return namespace["quantize_and_lower"]


def _run_program(et_program, inputs):
    from executorch.runtime import Runtime

    from backends.qualcomm.utils.runtime_options import require_extension

    require_extension()
    program = Runtime.get().load_program(et_program.buffer)  # keep: its methods point into it
    method = program.load_method("forward")
    return _to_numpy(method.execute(list(inputs)))


def _embed_conv_inputs(seed: int):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 12, (2, 5), generator=generator), randn(1, 16, 6, 6, seed=seed))


ALL_DTYPES = [(d.name, d, False) for d in QuantDtype] + [
    (f"{d.name}_qat", d, True) for d in (QuantDtype.use_8a8w, QuantDtype.use_16a8w, QuantDtype.use_16a4w,
                                         QuantDtype.use_16a4w_block)]


class TestUpstreamScript(unittest.TestCase):
    @parameterized.expand(ALL_DTYPES)
    def test_script_runs_unchanged(self, _, dtype, is_qat):
        torch.manual_seed(0)
        model = EmbedConvLinear()
        model = model.train() if is_qat else model.eval()
        sample = _embed_conv_inputs(0)
        converted, program = _upstream_script()(model, sample, [sample, _embed_conv_inputs(1)], dtype, is_qat)
        outputs = _run_program(program, sample)
        with torch.no_grad():
            reference = _to_numpy(converted(*sample))
        if dtype == QuantDtype.use_fp16a8w:  # float activations: fp16 precision against the QDQ graph
            for out, ref in zip(outputs, reference):
                np.testing.assert_allclose(out, ref, atol=2e-2 * max(1.0, float(np.abs(ref).max())), rtol=1e-2)
            return
        for i, (out, ref, enc) in enumerate(zip(outputs, reference, output_encodings_with_range(converted))):
            assert_pt2e_bounds(step_stats(out, ref, enc[0]), enc[2], f"output {i}")
        kinds = _weight_kinds(converted)
        if dtype == QuantDtype.use_16a4w_block:  # conv + linear blocked, embedding per row
            self.assertEqual(kinds, {"embedding": "per_channel", "linear": "affine", "conv2d": "affine"})
        else:
            self.assertEqual(kinds, {"embedding": "per_channel", "linear": "per_channel", "conv2d": "per_channel"})

    def test_partitioner_script_runs_unchanged(self):
        """Mixed precision (16a8w linear in an 8a8w model) through QnnPartitioner and ExecuTorch's
        to_edge_transform_and_lower: one delegate, within 1 step of the QDQ reference."""
        torch.manual_seed(0)
        module, inputs = ConvThenFc().eval(), inputs_of((1, 3, 4, 4))
        converted, program = _upstream_script(UPSTREAM_SCRIPT_PARTITIONER)(module, inputs)
        self.assertEqual([q[3] for q in _quantize_args(converted, "aten.linear")], [65535])
        self.assertEqual([q[3] for q in _quantize_args(converted, "aten.conv2d")], [255])
        out, = _run_program(program, inputs)
        with torch.no_grad():
            ref = converted(*inputs).numpy()
        # The 16-bit Linear after the Convert follows QNN HTP's 16-bit requantization (its
        # accumulator drops 8 bits): measured 41 steps of the uint16 output from the QDQ
        # reference (0.16 of an 8-bit step); test_qnn_quantized's mixed-precision test shows the
        # host engine equal to QNN on such a graph.
        stats = step_stats(out, ref, output_encodings(converted)[0][0])
        self.assertLessEqual(stats.max_diff, 96, stats)
        plan = program.executorch_program.execution_plan[0]
        self.assertEqual(len(plan.delegates), 1)
        self.assertEqual({op.name for op in plan.operators}, set())  # nothing on the CPU


def _weight_kinds(converted: torch.fx.GraphModule) -> dict:
    """{op: 'per_channel' / 'affine' (LPBQ) / 'per_tensor'} of each weighted op's weight dequantize."""
    positions = {_aten.embedding.default: 0, _aten.linear.default: 1, _aten.conv2d.default: 1}
    kinds = {}
    for node in converted.graph.nodes:
        if node.target in positions:
            dq = str(node.args[positions[node.target]].target)
            kind = "per_channel" if "per_channel" in dq else "affine" if "affine" in dq else "per_tensor"
            kinds[str(node.target).split(".")[1]] = kind
    return kinds


# ---- upstream's names, signatures, defaults --------------------------------------------------
UPSTREAM_QUANT_DTYPE = {"use_16a16w": 0, "use_16a8w": 1, "use_16a4w": 2, "use_16a4w_block": 3, "use_8a8w": 4,
                        "use_8a4w": 5, "use_fp16a8w": 6, "use_16a2w": 7}
UPSTREAM_SET_DEFAULT = [("quant_dtype", inspect.Parameter.empty), ("is_qat", False), ("is_conv_per_channel", False),
                        ("is_linear_per_channel", False), ("is_embedding_per_channel", False),
                        ("act_observer", None), ("act_symmetric", False), ("eps", None)]
UPSTREAM_MODULE_QCONFIG = [("quant_dtype", QuantDtype.use_8a8w), ("is_qat", False), ("is_conv_per_channel", False),
                           ("is_linear_per_channel", False), ("is_embedding_per_channel", False),
                           ("act_observer", None), ("act_symmetric", False), ("eps", None)]


def _prepare(module: torch.nn.Module, inputs, quantizer: QnnQuantizer, is_qat: bool = False) -> torch.fx.GraphModule:
    exported = torch.export.export(module, tuple(inputs), strict=True).module()
    prepared = prepare_qat_pt2e(exported, quantizer) if is_qat else prepare_pt2e(exported, quantizer)
    prepared(*inputs)
    return prepared


def _convert(module, inputs, quantizer) -> torch.fx.GraphModule:
    return convert_pt2e(_prepare(module, inputs, quantizer))


def _quantize_args(converted: torch.fx.GraphModule, target_name: str) -> list:
    """(scale, zero_point, qmin, qmax) of the activation quantize nodes after each `target_name` node."""
    found = []
    for node in converted.graph.nodes:
        if node.op == "call_function" and target_name in str(node.target):
            for user in node.users:
                if user.target == torch.ops.quantized_decomposed.quantize_per_tensor.default:
                    found.append(tuple(user.args[1:5]))
    return found


def _activation_observer(prepared: torch.fx.GraphModule, target, position: int = 0):
    """The observer / fake-quant module on input `position` of the first `target` node."""
    node = next(n for n in prepared.graph.nodes if n.target == target)
    return prepared.get_submodule(node.args[position].target)


class ConvThenFc(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 1)
        self.linear = torch.nn.Linear(4, 6)

    def forward(self, x):
        return self.linear(torch.relu(self.conv(x)).mean(dim=(2, 3)))


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
        for name in ("set_block_size_map", "set_submodule_qconfig_list", "add_custom_quant_annotations",
                     "add_discard_nodes", "add_discard_ops", "get_supported_ops", "set_recipe"):
            self.assertTrue(callable(getattr(QnnQuantizer, name)), name)

    def test_constructor_arguments(self):
        from backends.qualcomm.serialization.qc_schema import QcomChipset, QnnExecuTorchBackendType

        quantizer = QnnQuantizer(backend=QnnExecuTorchBackendType.kHtpBackend, soc_model=QcomChipset.SM8650,
                                 strict=False)
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
        converted = _convert(module.eval(), inputs_of((1, 3, 4, 4)), quantizer)
        self.assertEqual(_quantize_args(converted, "aten.relu"), [])  # float output
        self.assertEqual(len(_quantize_args(converted, "aten.conv2d")), 1)
        self.assertIn(_aten.relu.default, quantizer.get_supported_ops())  # discard does not shrink support

    def test_annotated_ops_and_annotators_come_from_the_builders(self):
        from backends.qualcomm.builders.registry import (
            NodeBuilder, QuantFamily, quant_annotated_ops, register_builder)
        from backends.qualcomm.quantizer import annotators

        families = quant_annotated_ops()
        self.assertEqual(QnnQuantizer().get_supported_ops(), set(families))
        # Derived, not counted by hand: every aten op the op table maps to a quantized QNN op.
        from backends.qualcomm.builders.qnn_op_types import OP_TABLE
        table_ops = {getattr(getattr(torch.ops.aten, name.split(".")[0]), name.split(".")[1])
                     for row in OP_TABLE.values() if row.quant not in ("float", "convert") for name in row.aten}
        self.assertLessEqual(table_ops, set(families))
        expected = {QuantFamily.WEIGHTED: annotators.annotate_weighted,
                    QuantFamily.COMPUTE: annotators.annotate_compute,
                    QuantFamily.LAYER_NORM: annotators.annotate_layer_norm,
                    QuantFamily.SHARED: annotators.annotate_shared,
                    QuantFamily.EMBEDDING: annotators.annotate_embedding}
        for op, family in families.items():
            self.assertIs(annotators.annotator_for(op), expected[family], op)
        spot = {_aten.conv2d.default: QuantFamily.WEIGHTED, _aten.linear.default: QuantFamily.WEIGHTED,
                _aten.add_.Tensor: QuantFamily.COMPUTE, _aten.rsqrt.default: QuantFamily.COMPUTE,
                _aten.layer_norm.default: QuantFamily.LAYER_NORM, _aten.view.default: QuantFamily.SHARED,
                _aten.max_pool2d.default: QuantFamily.SHARED, _aten.embedding.default: QuantFamily.EMBEDDING}
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
            spec = QuantizationSpec(dtype=torch.int32, quant_min=0, quant_max=65535, qscheme=torch.per_tensor_affine,
                                    observer_or_fake_quant_ctr=MinMaxObserver.with_args(eps=1e-9))
            relu.meta["quantization_annotation"] = QuantizationAnnotation(
                input_qspec_map={conv: spec}, output_qspec=spec, _annotated=True)

        quantizer = QnnQuantizer()
        quantizer.set_default_quant_config(QuantDtype.use_8a8w)
        quantizer.add_discard_ops([_aten.relu.default])
        quantizer.add_custom_quant_annotations((annotate_relu_16bit,))
        converted = _convert(ConvThenFc().eval(), inputs_of((1, 3, 4, 4)), quantizer)
        self.assertEqual(seen, [torch.uint8])
        (_, _, qmin, qmax), = _quantize_args(converted, "aten.relu")
        self.assertEqual((qmin, qmax), (0, 65535))

    def test_submodule_predicates(self):
        from backends.qualcomm.quantizer.quantizer import get_submodule_name_predicate, get_submodule_type_predicate

        for predicate in (get_submodule_type_predicate("Linear"), get_submodule_name_predicate("linear")):
            quantizer = QnnQuantizer()
            quantizer.set_default_quant_config(QuantDtype.use_8a8w)
            quantizer.set_submodule_qconfig_list([(predicate, ModuleQConfig(QuantDtype.use_16a8w))])
            converted = _convert(ConvThenFc().eval(), inputs_of((1, 3, 4, 4)), quantizer)
            self.assertEqual([q[3] for q in _quantize_args(converted, "aten.linear")], [65535])
            self.assertEqual([q[3] for q in _quantize_args(converted, "aten.conv2d")], [255])

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
        self.assertIs(type(_activation_observer(_prepare(module, inputs, quantizer), _aten.conv2d.default)),
                      PassUnionMovingAverageObserver)
        quantizer.set_default_quant_config(QuantDtype.use_8a8w, act_observer=MinMaxObserver)
        self.assertIs(type(_activation_observer(_prepare(module, inputs, quantizer), _aten.conv2d.default)),
                      MinMaxObserver)
        quantizer.set_default_quant_config(QuantDtype.use_8a8w, is_qat=True)
        fake_quant = _activation_observer(_prepare(module.train(), inputs, quantizer, is_qat=True),
                                          _aten.conv2d.default)
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
            ranges.append([_quantize_args(convert_pt2e(prepared), "aten.linear")])
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
        converted = _convert(TwoRangesCat(), (a, b), quantizer)
        (scale, zero_point, qmin, qmax), = _quantize_args(converted, "aten.cat")
        self.assertAlmostEqual((qmin - zero_point) * scale, -0.5, delta=scale)
        self.assertAlmostEqual((qmax - zero_point) * scale, 2.2, delta=scale)
        error = (converted(a, b) - TwoRangesCat()(a, b)).abs().max().item()
        self.assertLessEqual(error, 2 * scale)  # its inputs were quantized too; measured 1.3 steps

    def test_eps_is_the_smallest_scale(self):
        module, inputs = torch.nn.ReLU(), (1e-4 * randn(2, 8),)
        for eps, expected in ((None, 1e-4 / 255), (1e-3, 1e-3)):
            quantizer = QnnQuantizer()
            quantizer.set_default_quant_config(QuantDtype.use_8a8w, eps=eps)
            (scale, _, _, _), = _quantize_args(_convert(module, inputs, quantizer), "aten.relu")
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
        args = [n.args[1:5] for n in tester.module.graph.nodes
                if n.target == torch.ops.quantized_decomposed.quantize_per_tensor.default]
        self.assertEqual(len(args), 3)
        self.assertEqual({(zp, qmax_) for _, zp, _, qmax_ in args}, {(zero_point, qmax)})
        tester.run_and_compare_steps()  # the delegate honours the midpoint zero points

    def test_recipe(self):
        from backends.qualcomm.quantizer.quant_recipe import QuantGranularity, QuantRecipe

        recipe = QuantRecipe(QuantDtype.use_8a8w, False, act_observer=MinMaxObserver,
                             granularity=QuantGranularity.PER_TENSOR).add_node_target(
            {_aten.linear.default}, QuantDtype.use_16a8w, False, act_observer=MinMaxObserver,
            granularity=QuantGranularity.PER_CHANNEL, note="linear in 16 bits", priority=2)
        quantizer = QnnQuantizer()
        quantizer.set_recipe(recipe)
        self.assertIs(quantizer.recipe, recipe)
        converted = _convert(ConvThenFc().eval(), inputs_of((1, 3, 4, 4)), quantizer)
        self.assertEqual([q[3] for q in _quantize_args(converted, "aten.linear")], [65535])
        self.assertEqual([q[3] for q in _quantize_args(converted, "aten.conv2d")], [255])
        kinds = _weight_kinds(converted)
        self.assertEqual((kinds["linear"], kinds["conv2d"]), ("per_channel", "per_tensor"))
        self.assertIn("use_16a8w/PTQ | MinMaxObserver | PER_CHANNEL | linear in 16 bits", recipe.summary())

    def test_recipe_per_block(self):
        from backends.qualcomm.quantizer.quant_recipe import QuantGranularity, QuantRecipe

        recipe = QuantRecipe(QuantDtype.use_16a4w_block, False, MinMaxObserver, QuantGranularity.PER_BLOCK,
                             extra_kwargs={"block_size": (1, 8)})
        quantizer = QnnQuantizer()
        quantizer.set_recipe(recipe)
        converted = _convert(torch.nn.Linear(32, 4).eval(), inputs_of((2, 32)), quantizer)
        dq = next(n for n in converted.graph.nodes if "dequantize_affine" in str(n.target))
        self.assertEqual(tuple(dq.args[1]), (1, 8))
        with self.assertRaisesRegex(ValueError, "PER_BLOCK needs QuantDtype.use_16a4w_block"):
            QuantRecipe(QuantDtype.use_8a8w, False, MinMaxObserver, QuantGranularity.PER_BLOCK) \
                .initialize_default_strategy_ops(set())

    def test_context_binary_helpers_say_what_is_missing(self):
        """from_context_binary is not built; dump_context_from_pte of a .pte lowered without
        context binaries (this suite's default) says why (the real dump: test_qnn_real.py)."""
        import tempfile
        from pathlib import Path

        from backends.qualcomm.tests.helpers.tester import QnnTester
        from backends.qualcomm.upstream_compat import ContextBinaryNotSupportedError
        from backends.qualcomm.utils.utils import dump_context_from_pte, from_context_binary

        with self.assertRaisesRegex(ContextBinaryNotSupportedError, "from_context_binary: qnn-delegate does not "
                                                                     "wrap a prebuilt QNN context binary"):
            from_context_binary("model.bin", "ctx_op")
        with tempfile.TemporaryDirectory() as folder:
            tester = QnnTester(torch.nn.Linear(4, 4), inputs_of((2, 4)))
            tester.tmp_dir = folder
            tester.lower().to_executorch()
            with self.assertRaisesRegex(ContextBinaryNotSupportedError, "dump_context_from_pte: .* has no QNN "
                                                                         r"context binary to dump \(its 1 qnn-delegate"):
                dump_context_from_pte(tester.pte_path)
            self.assertEqual(sorted(p.name for p in Path(folder).iterdir()), [Path(tester.pte_path).name])


# ---- issue 17: recipe defects -------------------------------------------------------------------
class TestQuantizerFixes(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)

    @parameterized.expand([("conv_bias3_per_tensor", "conv", 3.0, False), ("conv_bias20_per_channel", "conv", 20.0, True),
                           ("linear_bias20_per_tensor", "linear", 20.0, False),
                           ("linear_bias3_per_channel", "linear", 3.0, True)])
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
        bias_tensor = next(t for t in deserialize(tester.delegate_blobs()[0]).graphs[0].tensors
                           if t.name.decode() == op.inputs[2])
        expected_scale = max(bias / BIAS_QMAX, DEFAULT_EPS_16BIT)  # its own range (eps bounds it below)
        self.assertAlmostEqual(bias_tensor.quant.scale / expected_scale, 1.0, places=6)

    def test_qat_submodule_rules_get_fake_quant_and_the_observer(self):
        """Was: a submodule rule under a QAT default got PTQ observers (never fake-quantized)."""
        from backends.qualcomm.quantizer.quantizer import get_submodule_type_predicate

        inputs = inputs_of((1, 3, 4, 4))
        for rules in ([(torch.nn.Linear, QuantDtype.use_16a8w)],  # our older form: inherits QAT / observer
                      [(get_submodule_type_predicate("Linear"),
                        ModuleQConfig(QuantDtype.use_16a8w, is_qat=True, act_observer=MinMaxObserver))]):
            quantizer = QnnQuantizer()
            quantizer.set_default_quant_config(QuantDtype.use_8a8w, is_qat=True, act_observer=MinMaxObserver)
            quantizer.set_submodule_qconfig_list(rules)
            prepared = _prepare(ConvThenFc().train(), inputs, quantizer, is_qat=True)
            for target, qmax in ((_aten.linear.default, 65535), (_aten.conv2d.default, 255)):
                fake = _activation_observer(prepared, target)
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
        return _convert(module.eval(), inputs_of((1, 32, 4, 4)), quantizer)

    def test_block_size_map_rejects_unknown_names_at_annotation(self):
        with self.assertRaisesRegex(ValueError, r"no node named 'linaer' \(did you mean 'linear'\?\) in the "
                                                r"graph; conv/linear nodes: conv2d, linear"):
            self._block_prepare({"linaer": (1, 16)})
        with self.assertRaisesRegex(ValueError, r"node\(s\) 'flatten' are not conv/linear"):
            self._block_prepare({"flatten": 16})

    def test_block_size_map_checks_the_weight(self):
        with self.assertRaisesRegex(ValueError, r"block size \(1, 16\) of node 'conv2d' needs one entry per "
                                                r"weight dim, weight shape \(16, 32, 3, 3\)"):
            self._block_prepare({"conv2d": (1, 16)})
        with self.assertRaisesRegex(ValueError, r"must be \(1, b, 3, 3\)"):
            self._block_prepare({"conv2d": (2, 16, 3, 3)})
        with self.assertRaisesRegex(ValueError, "block size 24 of node 'conv2d' does not divide its input "
                                                "channels 32"):
            self._block_prepare({"conv2d": (1, 24, 3, 3)})
        with self.assertRaisesRegex(ValueError, "node 'linear' has a block size but its config has no block "
                                                "weights"):
            self._block_prepare({"linear": 16}, QuantDtype.use_16a4w)

    def test_block_size_tuple_equals_int_form(self):
        def block_scales(converted):
            return [getattr(converted, n.args[2].target) for n in converted.graph.nodes if "dequantize_affine" in str(n.target)]

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


class TwoConvAdd(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_a = torch.nn.Conv2d(3, 4, 3)
        self.conv_b = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x, y):
        return self.conv_a(x) + self.conv_b(y)


class TestSkipAnnotation(unittest.TestCase):
    """skip_annotation with upstream's arguments (upstream's tests re-export the returned module)."""

    @parameterized.expand([("node_id_cpu", {"fp_node_id_set": {"conv2d"}}, ["aten.convolution.default"]),
                           ("node_op_cpu", {"fp_node_op_set": {_aten.add.Tensor}}, ["aten.add.Tensor"]),
                           ("node_id_delegated_float", {"fp_node_id_set": {"conv2d"}, "fallback_to_cpu": False}, [])])
    def test_skip_annotation(self, _, kwargs, cpu_ops):
        from executorch.exir import to_edge

        from backends.qualcomm.tests.helpers.quant_tester import quant_compile_specs
        from backends.qualcomm.utils.utils import skip_annotation

        torch.manual_seed(0)
        module, inputs = TwoConvAdd().eval(), inputs_of((1, 3, 6, 6), (1, 3, 6, 6))
        quantizer = QnnQuantizer()
        quantizer.set_default_quant_config(QuantDtype.use_8a8w)
        graph_module, edge_prog_mgrs = skip_annotation(module, quantizer, quant_compile_specs(), inputs,
                                                       lambda gm: gm(*inputs), **kwargs)
        self.assertEqual(len(edge_prog_mgrs), 1)
        on_cpu = [n.target.__name__ for n in edge_prog_mgrs[0].exported_program().graph.nodes
                  if n.op == "call_function" and "delegate" not in str(n.target) and "getitem" not in str(n.target)]
        self.assertEqual(on_cpu, cpu_ops)
        program = to_edge(torch.export.export(graph_module, inputs, strict=True)).to_executorch()
        with torch.no_grad():
            expected = module(*inputs).numpy()
        out_reexported = _run_program(program, inputs)[0]
        out_manager = _run_program(edge_prog_mgrs[0].to_executorch(), inputs)[0]
        np.testing.assert_array_equal(out_reexported, out_manager)
        self.assertLess(float(np.abs(out_manager - expected).max()), 0.05)  # 8-bit steps of a ~3-wide range


# ---- real models (slow): 16a16w is the most precise dtype ------------------------------------------
SLOW_PHOTOS = ("chelsea", "coffee")


def _photo_model(name: str):
    from qnn_models import imagenet

    if name == "mobilenet_v2":
        from qnn_models.mobilenet_v2 import load_mobilenet_v2

        model, mean, std = load_mobilenet_v2(), imagenet.IMAGENET_MEAN, imagenet.IMAGENET_STD
    else:
        from qnn_models.efficientnet_lite0 import INPUT_MEAN, INPUT_STD, load_efficientnet_lite0

        model, mean, std = load_efficientnet_lite0(), INPUT_MEAN, INPUT_STD
    photos = imagenet.load_photo_batch(SLOW_PHOTOS, mean=mean, std=std)
    return model.eval(), [(x,) for x in photos.values()]


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a.flatten().double(), b.flatten().double(), dim=0))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mobilenet_v2", "efficientnet_lite0"])
def test_16a16w_at_least_as_accurate_as_16a8w(name, tmp_path):
    """Issue 17: 16a16w had top-1 0/4 and cosine 0.02-0.34 against float (saturated biases).
    16a16w runs through the delegate; 16a8w is its QDQ reference (the delegate agrees with it
    within 1 step, tested per op), which keeps this test to one lowering per model.
    Measured (4 photos): MobileNetV2 cosine 16a16w 0.986-1.0 vs 16a8w 0.968-0.997;
    EfficientNet-Lite0 16a8w 0.958-0.998."""
    from backends.qualcomm import to_edge_transform_and_lower_to_qnn
    from backends.qualcomm.tests.helpers.quant_tester import quant_compile_specs, quantize_module

    model, samples = _photo_model(name)
    with torch.no_grad():
        floats = [model(*s) for s in samples]
    quality = {}
    for dtype in (QuantDtype.use_16a8w, QuantDtype.use_16a16w):
        quantizer = QnnQuantizer()
        quantizer.set_default_quant_config(dtype, is_conv_per_channel=True, is_linear_per_channel=True)
        converted = quantize_module(model, samples[0], quantizer, samples)
        if dtype == QuantDtype.use_16a16w:
            program = to_edge_transform_and_lower_to_qnn(converted, samples[0], quant_compile_specs(dtype)).to_executorch()
            outputs = [torch.from_numpy(_run_program(program, s)[0]) for s in samples]
        else:
            with torch.no_grad():
                outputs = [converted(*s) for s in samples]
        quality[dtype] = [(int(o.argmax()) == int(f.argmax()), _cosine(o, f)) for o, f in zip(outputs, floats)]
    print(f"{name}: {quality}")
    for (top1_8, cos_8), (top1_16, cos_16), photo in zip(quality[QuantDtype.use_16a8w],
                                                         quality[QuantDtype.use_16a16w], SLOW_PHOTOS):
        assert top1_16 >= top1_8, f"{name} {photo}: 16a16w loses the float top-1 that 16a8w keeps"
        assert cos_16 >= cos_8 - 1e-4, f"{name} {photo}: cosine 16a16w {cos_16:.5f} < 16a8w {cos_8:.5f}"
        assert top1_16 and cos_16 >= 0.98, f"{name} {photo}: 16a16w top-1 {top1_16}, cosine {cos_16:.5f}"
