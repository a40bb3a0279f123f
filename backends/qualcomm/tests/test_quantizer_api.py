"""Upstream drop-in API of the quantizer and its recipe fixes (issues 10 and 17).

TestUpstreamScript: a quantize-and-lower script written against upstream's API
(executorch.backends.qualcomm) runs unchanged after replacing the import prefix, for each
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
import torch
from parameterized import parameterized
from torchao.quantization.pt2e import FakeQuantize, MinMaxObserver, MovingAverageMinMaxObserver
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e, prepare_qat_pt2e

from backends.qualcomm import ModuleQConfig, QnnQuantizer, QuantDtype
from backends.qualcomm.tests import models_float as m
from backends.qualcomm.tests.quant_tester import QuantTester, output_encodings, step_stats
from backends.qualcomm.tests.tester import _to_numpy, inputs_of, randn

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


# Written against upstream's API; only the import prefix is replaced before it runs.
UPSTREAM_SCRIPT = textwrap.dedent('''
    import torch
    from torchao.quantization.pt2e import MovingAverageMinMaxObserver
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e, prepare_qat_pt2e

    from executorch.backends.qualcomm.quantizer.quantizer import QnnQuantizer, QuantDtype
    from executorch.backends.qualcomm.serialization.qc_schema import QcomChipset, QnnExecuTorchBackendType
    from executorch.backends.qualcomm.utils.utils import (
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


def _upstream_script():
    namespace = {}
    exec(compile(UPSTREAM_SCRIPT.replace("executorch.backends.qualcomm", "backends.qualcomm"),
                 "upstream_script", "exec"), namespace)
    return namespace["quantize_and_lower"]


def _run_program(et_program, inputs):
    from executorch.runtime import Runtime

    from backends.qualcomm.utils.runtime_options import require_extension

    require_extension()
    method = Runtime.get().load_program(et_program.buffer).load_method("forward")
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
        for i, (out, ref, enc) in enumerate(zip(outputs, reference, output_encodings(converted))):
            stats = step_stats(out, ref, enc[0])
            self.assertLessEqual(stats.max_diff, 1, f"output {i}: {stats}")
            self.assertGreaterEqual(stats.exact_fraction, 0.99, f"output {i}: {stats}")
        kinds = _weight_kinds(converted)
        if dtype == QuantDtype.use_16a4w_block:  # conv + linear blocked, embedding per row
            self.assertEqual(kinds, {"embedding": "per_channel", "linear": "affine", "conv2d": "affine"})
        else:
            self.assertEqual(kinds, {"embedding": "per_channel", "linear": "per_channel", "conv2d": "per_channel"})


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
