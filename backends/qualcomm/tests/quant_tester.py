"""Quantized fluent tester: export -> QnnQuantizer prepare/calibrate/convert -> lower with
the quantized spec -> .pte -> run -> compare with the converted (QDQ) module in integer
steps of each output's encoding (the numerics contract: |diff| <= 1 step, >= 99% exact)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torchao.quantization.pt2e import allow_exported_model_train_eval
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e, prepare_qat_pt2e

from backends.qualcomm import (
    QcomChipset, QnnQuantizer, QuantDtype, generate_htp_compiler_spec, generate_qnn_executorch_compiler_spec,
)
from backends.qualcomm.builders.quant_encoding import DEQUANTIZE_OPS
from backends.qualcomm.tests.tester import QnnTester, _to_numpy

MAX_STEP_DIFF = 1
MIN_EXACT_FRACTION = 0.99


def quant_compile_specs(quant_dtype: QuantDtype = QuantDtype.use_8a8w, **kwargs) -> list:
    """Quantized HTP precision; fp16 for weight-only fp16a8w."""
    return generate_qnn_executorch_compiler_spec(
        QcomChipset.SM8650, generate_htp_compiler_spec(use_fp16=quant_dtype == QuantDtype.use_fp16a8w),
        **kwargs)


def quantize_module(module: torch.nn.Module, inputs: Tuple, quantizer: QnnQuantizer,
                    calibration: Optional[Sequence[Tuple]] = None, is_qat: bool = False) -> torch.fx.GraphModule:
    """export -> prepare_pt2e (or prepare_qat_pt2e) -> run calibration samples -> convert_pt2e."""
    exported = torch.export.export(module.eval() if not is_qat else module, tuple(inputs), strict=False).module()
    prepared = prepare_qat_pt2e(exported, quantizer) if is_qat else prepare_pt2e(exported, quantizer)
    with torch.no_grad():
        for sample in calibration or [inputs]:
            prepared(*sample)
    converted = convert_pt2e(prepared)
    allow_exported_model_train_eval(converted)
    return converted


def output_encodings(converted: torch.fx.GraphModule) -> List[Optional[Tuple[float, int]]]:
    """(scale, zero_point) of each output that is a per-tensor dequantize, else None."""
    output = next(n for n in converted.graph.nodes if n.op == "output")
    outs = output.args[0]
    encodings = []
    for node in (outs if isinstance(outs, (tuple, list)) else [outs]):
        if isinstance(node, torch.fx.Node) and node.target in DEQUANTIZE_OPS and "per_tensor" in str(node.target):
            encodings.append((float(node.args[1]), int(node.args[2])))
        else:
            encodings.append(None)
    return encodings


@dataclass
class StepStats:
    """Distribution of |delegate - reference| in quantization steps."""

    total: int
    exact: int
    off_by_one: int
    worse: int
    max_diff: int

    @property
    def exact_fraction(self) -> float:
        return self.exact / max(self.total, 1)

    def __str__(self) -> str:
        t = max(self.total, 1)
        return (f"n={self.total} exact={self.exact / t:.4%} off-by-one={self.off_by_one / t:.4%} "
                f"worse={self.worse / t:.4%} max={self.max_diff}")


def step_stats(actual: np.ndarray, reference: np.ndarray, scale: float) -> StepStats:
    """Both outputs are dequantized values of the same encoding: compare integer steps."""
    qa = np.rint(actual.astype(np.float64) / scale).astype(np.int64)
    qr = np.rint(reference.astype(np.float64) / scale).astype(np.int64)
    diff = np.abs(qa - qr).reshape(-1)
    return StepStats(int(diff.size), int((diff == 0).sum()), int((diff == 1).sum()),
                     int((diff > 1).sum()), int(diff.max()) if diff.size else 0)


class QuantTester(QnnTester):
    """QnnTester over the converted QDQ module (which is also the reference)."""

    def __init__(self, module: torch.nn.Module, inputs: Tuple, quant_dtype: QuantDtype = QuantDtype.use_8a8w,
                 per_channel: bool = False, block_size_map: Optional[Dict[str, int]] = None,
                 calibration: Optional[Sequence[Tuple]] = None, is_qat: bool = False,
                 quantizer: Optional[QnnQuantizer] = None):
        self.float_module = module.eval()
        self.quant_dtype = quant_dtype
        if quantizer is None:
            quantizer = QnnQuantizer()
            quantizer.set_default_quant_config(quant_dtype, is_qat=is_qat, is_conv_per_channel=per_channel,
                                               is_linear_per_channel=per_channel)
            quantizer.set_block_size_map(block_size_map or {})
        self.quantizer = quantizer
        converted = quantize_module(module, inputs, quantizer, calibration, is_qat)
        super().__init__(converted, inputs, quant_compile_specs(quant_dtype))
        self.module = converted  # the patched eval() of converted modules returns None
        self.stats: List[StepStats] = []

    def lower_to_qnn(self, **kwargs) -> "QuantTester":
        """Lower with to_edge_transform_and_lower_to_qnn (e.g. convert_linear_to_conv2d=True)."""
        from backends.qualcomm import QnnPartitioner, to_edge_transform_and_lower_to_qnn

        self.partitioner = QnnPartitioner(self.compile_specs)  # for messages only
        self.edge = to_edge_transform_and_lower_to_qnn(self.module, self.inputs, self.compile_specs, **kwargs)
        return self

    def compare_steps(self, max_step_diff: int = MAX_STEP_DIFF,
                      min_exact: float = MIN_EXACT_FRACTION) -> "QuantTester":
        """Per output: every element within `max_step_diff` steps, >= `min_exact` exact."""
        expected = self.reference_outputs()
        encodings = output_encodings(self.module)
        self.stats = []
        for i, (out, ref, enc) in enumerate(zip(self.outputs, expected, encodings)):
            assert out.shape == ref.shape, f"output {i}: shape {out.shape} != {ref.shape}"
            assert enc is not None, f"output {i} is not a per-tensor dequantized output"
            stats = step_stats(out, ref, enc[0])
            self.stats.append(stats)
            assert stats.max_diff <= max_step_diff and stats.exact_fraction >= min_exact, \
                f"output {i} ({self.quant_dtype.name}): {stats}"
        return self

    def run_and_compare_steps(self, **limits) -> "QuantTester":
        return self.lower().check_fully_delegated().to_executorch().run().compare_steps(**limits)


def float_outputs(module: torch.nn.Module, inputs: Tuple) -> List[np.ndarray]:
    with torch.no_grad():
        return _to_numpy(module(*inputs))


def sqnr_db(actual: np.ndarray, reference: np.ndarray) -> float:
    """Signal-to-quantization-noise ratio of `actual` against `reference`, in dB."""
    noise = float(np.sum((actual.astype(np.float64) - reference.astype(np.float64)) ** 2))
    signal = float(np.sum(reference.astype(np.float64) ** 2))
    return float("inf") if noise == 0 else 10.0 * np.log10(signal / noise)
