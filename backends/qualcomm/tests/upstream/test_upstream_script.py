"""A quantize-and-lower script written against upstream's API (the Qualcomm package inside the
executorch wheel) runs unchanged after replacing the import prefix, for each of the 8 dtypes and
QAT, and its delegate agrees with the QDQ reference within 1 step; likewise a script that
builds upstream's partitioner itself."""

from __future__ import annotations

import textwrap
import unittest

import numpy as np
import torch
from parameterized import parameterized

from backends.qualcomm import QuantDtype
from backends.qualcomm.tests.helpers.quant_tester import (
    assert_pt2e_bounds,
    output_encodings,
    output_encodings_with_range,
    step_stats,
)
from backends.qualcomm.tests.helpers.quantizer_models import (
    ConvThenFc,
    EmbedConvLinear,
    activation_quantize_args,
    run_program,
    weight_kinds,
)
from backends.qualcomm.tests.helpers.tester import _to_numpy, inputs_of, randn

_aten = torch.ops.aten

# Written against upstream's API. UPSTREAM_QUALCOMM stands for the import prefix of upstream's
# package in the executorch wheel; the test replaces it with ours, as a user switching would.
UPSTREAM_SCRIPT = textwrap.dedent("""
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
""")

# The other upstream style: every keyword at upstream's defaults, a submodule rule, the
# partitioner passed to ExecuTorch's own to_edge_transform_and_lower.
UPSTREAM_SCRIPT_PARTITIONER = textwrap.dedent("""
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
""")


def _upstream_script(script: str = UPSTREAM_SCRIPT):
    namespace = {}
    exec(compile(script.replace("UPSTREAM_QUALCOMM", "backends.qualcomm"), "upstream_script", "exec"), namespace)
    return namespace["quantize_and_lower"]


def _embed_conv_inputs(seed: int):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 12, (2, 5), generator=generator), randn(1, 16, 6, 6, seed=seed))


ALL_DTYPES = [(d.name, d, False) for d in QuantDtype] + [
    (f"{d.name}_qat", d, True)
    for d in (QuantDtype.use_8a8w, QuantDtype.use_16a8w, QuantDtype.use_16a4w, QuantDtype.use_16a4w_block)
]


class TestUpstreamScript(unittest.TestCase):
    @parameterized.expand(ALL_DTYPES)
    def test_script_runs_unchanged(self, _, dtype, is_qat):
        torch.manual_seed(0)
        model = EmbedConvLinear()
        model = model.train() if is_qat else model.eval()
        sample = _embed_conv_inputs(0)
        converted, program = _upstream_script()(model, sample, [sample, _embed_conv_inputs(1)], dtype, is_qat)
        outputs = run_program(program, sample)
        with torch.no_grad():
            reference = _to_numpy(converted(*sample))
        if dtype == QuantDtype.use_fp16a8w:  # float activations: fp16 precision against the QDQ graph
            for out, ref in zip(outputs, reference):
                np.testing.assert_allclose(out, ref, atol=2e-2 * max(1.0, float(np.abs(ref).max())), rtol=1e-2)
            return
        for i, (out, ref, enc) in enumerate(zip(outputs, reference, output_encodings_with_range(converted))):
            assert_pt2e_bounds(step_stats(out, ref, enc[0]), enc[2], f"output {i}")
        kinds = weight_kinds(converted)
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
        self.assertEqual([q[3] for q in activation_quantize_args(converted, "aten.linear")], [65535])
        self.assertEqual([q[3] for q in activation_quantize_args(converted, "aten.conv2d")], [255])
        (out,) = run_program(program, inputs)
        with torch.no_grad():
            ref = converted(*inputs).numpy()
        # The 16-bit Linear after the Convert follows QNN HTP's 16-bit requantization (its
        # accumulator drops 8 bits): measured 41 steps of the uint16 output from the QDQ
        # reference (0.16 of an 8-bit step); ops/test_quantized_operators's mixed-precision test shows the
        # host engine equal to QNN on such a graph.
        stats = step_stats(out, ref, output_encodings(converted)[0][0])
        self.assertLessEqual(stats.max_diff, 96, stats)
        plan = program.executorch_program.execution_plan[0]
        self.assertEqual(len(plan.delegates), 1)
        self.assertEqual({op.name for op in plan.operators}, set())  # nothing on the CPU
