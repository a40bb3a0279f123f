"""Quantized fluent tester: export -> QnnQuantizer prepare/calibrate/convert -> lower with
the quantized spec -> .pte -> run -> compare with the converted (QDQ) module in integer
steps of each output's encoding (bounds below: MAX_STEP_DIFF / MIN_EXACT_FRACTION for
8-bit outputs, MAX_STEP_DIFF_16 for 16-bit outputs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from backends.qualcomm import QcomChipset, QnnQuantizer, QuantDtype
from backends.qualcomm.builders.quant_encoding import DEQUANTIZE_OPS
from backends.qualcomm.tests.helpers.tester import QnnTester, _to_numpy
from backends.qualcomm.utils.activation_fusion import with_fused_activations
from qnn_models.quantize import quant_compile_specs, quantize_module  # noqa: F401  (the tests import them from here)

# Bounds against the PT2E QDQ reference (float math between quantize / dequantize).
# The host engine follows QNN HTP's integer arithmetic (DESIGN.md "Numerics contract": where
# HTP and the host engine disagree, HTP is right): uint8 Quantize (x * fp16(1/scale), halves
# away from zero), fixed-point requantization of Conv / FC / MatMul (HtpRequant.h, 8- and
# 16-bit), integer Add / Sub / spatial ReduceMean, LayerNorm's beta in whole steps, and
# QNN's own lookup tables for unary ops; a relu / relu6 / hardtanh that alone reads a conv /
# linear is fused into it (one requantization), so the reference reads that conv / linear
# unrounded too (utils/activation_fusion.py with_fused_activations; without it conv -> relu
# in qat_conv_bn_folds 8a8w is 68% exact, max 2). Each is within one step of PT2E at its own output,
# not bit-exact with it; bit-exactness against HTP is tested on real QNN
# (qnn/test_fidelity_{weighted,add_sub_mean,lookup_tables}.py). Against PT2E, per output:
#
# 8-bit outputs (measured on ops/test_quantized_operators.py, engine of 8c14370):
# - at most MAX_NOT_EXACT_FRACTION not exact. Exact share per output: conv2d_linear
#   92.4-96.7%, linear_no_bias_3d / matmul 91.7%, pad_conv 88.8%, binary 95.8%, softmax
#   96.3%, others >= 97% (exception, in its test: layer_norm 80.0%, beta added in whole
#   steps). A wrong offset, multiplier, shift or rounding mode moves far more elements.
# - at most MAX_BEYOND_ONE_FRACTION more than 1 step off, none more than MAX_STEP_DIFF_8.
#   A 1-step difference before a steep op grows by its gain (slope x input scale / output
#   scale): the graph's uint8 Quantize rounds x * fp16(1/scale), so an input near a tie gets
#   the other code than PT2E's round(x / scale) (math_ops neg: 2.1% off by one, with the
#   reference kernels too); after x * x, rsqrt or an activation of 3x that is up to 4 steps
#   on ~1% of the elements (math_ops rsqrt 1.04% / 4, activations 1.04% / 4, pow_2 0.35% / 2;
#   qat_conv_bn_folds 3). 2 requantizing ops in a row (conv_cat: conv then cat) give 2.
# - tiny outputs: MIN_ELEMENTS_ALLOWED elements may break each share (pool_reduce's [1, 4]
#   mean: 1 of 4 off by one).
# 16-bit outputs: every element within MAX_STEP_DIFF_16 steps = 1/16 of an 8-bit step (a
#   16-bit step is 1/256 of an 8-bit one, so an exact share says little: binary rsub_scalar
#   is 1 step off on 96% of its elements, and QNN agrees with the engine). Measured max:
#   conv2d_linear / binary / softmax_layer_norm / pool_reduce 1-2, conv_cat / pad_conv /
#   linear_no_bias_3d 2; math_ops rsqrt 13: the 16-bit integer Add of x * x + 0.5 is 1 step
#   off PT2E on some elements (the reference kernels make it exact) and rsqrt's gain at
#   u = 0.5 is 0.5 * 0.5^-1.5 * s_u / s_out = 1.41 * 1.9e-4 / 2.16e-5 = 12.6 steps per step.
#
# Callers that pass max_step_diff / min_exact get exactly those bounds on every output.
MAX_STEP_DIFF = 1
MAX_NOT_EXACT_FRACTION = 0.15
MAX_BEYOND_ONE_FRACTION = 0.02
MAX_STEP_DIFF_8 = 4
MIN_ELEMENTS_ALLOWED = 1
MAX_STEP_DIFF_16 = 16
MIN_EXACT_FRACTION = 1.0 - MAX_NOT_EXACT_FRACTION


def output_encodings(converted: torch.fx.GraphModule) -> List[Optional[Tuple[float, int]]]:
    """(scale, zero_point) of each output that is a per-tensor dequantize, else None."""
    return [None if e is None else e[:2] for e in output_encodings_with_range(converted)]


def output_encodings_with_range(converted: torch.fx.GraphModule) -> List[Optional[Tuple[float, int, int]]]:
    """(scale, zero_point, quant_max) of each output that is a per-tensor dequantize, else None."""
    output = next(n for n in converted.graph.nodes if n.op == "output")
    outs = output.args[0]
    encodings = []
    for node in outs if isinstance(outs, (tuple, list)) else [outs]:
        if isinstance(node, torch.fx.Node) and node.target in DEQUANTIZE_OPS and "per_tensor" in str(node.target):
            encodings.append((float(node.args[1]), int(node.args[2]), int(node.args[4])))
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
        return (
            f"n={self.total} exact={self.exact / t:.4%} off-by-one={self.off_by_one / t:.4%} "
            f"worse={self.worse / t:.4%} max={self.max_diff}"
        )


def step_stats(actual: np.ndarray, reference: np.ndarray, scale: float) -> StepStats:
    """Both outputs are dequantized values of the same encoding: compare integer steps."""
    qa = np.rint(actual.astype(np.float64) / scale).astype(np.int64)
    qr = np.rint(reference.astype(np.float64) / scale).astype(np.int64)
    diff = np.abs(qa - qr).reshape(-1)
    return StepStats(
        int(diff.size),
        int((diff == 0).sum()),
        int((diff == 1).sum()),
        int((diff > 1).sum()),
        int(diff.max()) if diff.size else 0,
    )


class QuantTester(QnnTester):
    """QnnTester over the converted QDQ module (which is also the reference)."""

    def __init__(
        self,
        module: torch.nn.Module,
        inputs: Tuple,
        quant_dtype: QuantDtype = QuantDtype.use_8a8w,
        per_channel: bool = False,
        block_size_map: Optional[Dict[str, int]] = None,
        calibration: Optional[Sequence[Tuple]] = None,
        is_qat: bool = False,
        quantizer: Optional[QnnQuantizer] = None,
        soc_model: QcomChipset = QcomChipset.SM8650,
    ):
        self.float_module = module.eval()
        self.quant_dtype = quant_dtype
        if quantizer is None:
            quantizer = QnnQuantizer()
            quantizer.set_default_quant_config(
                quant_dtype, is_qat=is_qat, is_conv_per_channel=per_channel, is_linear_per_channel=per_channel
            )
            quantizer.set_block_size_map(block_size_map or {})
        self.quantizer = quantizer
        converted = quantize_module(module, inputs, quantizer, calibration, is_qat)
        super().__init__(converted, inputs, quant_compile_specs(quant_dtype, soc_model))
        self.module = converted  # the patched eval() of converted modules returns None
        self.stats: List[StepStats] = []

    def reference_outputs(self) -> List[np.ndarray]:
        """The QDQ module's outputs with activations fused as HTP fuses them."""
        with torch.no_grad():
            return _to_numpy(with_fused_activations(self.module)(*self.inputs))

    def lower_to_qnn(self, **kwargs) -> "QuantTester":
        """Lower with to_edge_transform_and_lower_to_qnn (e.g. convert_linear_to_conv2d=True)."""
        from backends.qualcomm import QnnPartitioner, to_edge_transform_and_lower_to_qnn

        self.partitioner = QnnPartitioner(self.compile_specs)  # for messages only
        self.edge = to_edge_transform_and_lower_to_qnn(self.module, self.inputs, self.compile_specs, **kwargs)
        return self

    def compare_steps(self, max_step_diff: Optional[int] = None, min_exact: Optional[float] = None) -> "QuantTester":
        """Each output against the reference in steps of its encoding: by default the bounds
        of its width (top of this file); `max_step_diff` / `min_exact` given: every element
        within `max_step_diff` steps and >= `min_exact` exact, whatever the width."""
        expected = self.reference_outputs()
        encodings = output_encodings_with_range(self.module)
        self.stats = []
        for i, (out, ref, enc) in enumerate(zip(self.outputs, expected, encodings)):
            assert out.shape == ref.shape, f"output {i}: shape {out.shape} != {ref.shape}"
            assert enc is not None, f"output {i} is not a per-tensor dequantized output"
            stats = step_stats(out, ref, enc[0])
            self.stats.append(stats)
            label = f"output {i} ({self.quant_dtype.name}, {'16' if enc[2] > 255 else '8'}-bit): {stats}"
            if max_step_diff is not None or min_exact is not None:
                limit = MAX_STEP_DIFF if max_step_diff is None else max_step_diff
                share = MIN_EXACT_FRACTION if min_exact is None else min_exact
                assert stats.max_diff <= limit and stats.exact_fraction >= share, label
            else:
                assert_pt2e_bounds(stats, enc[2], label)
        return self

    def run_and_compare_steps(self, **limits) -> "QuantTester":
        return self.lower().check_fully_delegated().to_executorch().run().compare_steps(**limits)


def lower_to_one_delegate(module: torch.nn.Module, inputs, quant_dtype: Optional[QuantDtype] = None) -> QnnTester:
    """Lowered whole to one delegate (fp16 when quant_dtype is None, else quantized with
    QnnQuantizer), written as a .pte and run on the host engine."""
    tester = QnnTester(module, inputs) if quant_dtype is None else QuantTester(module, inputs, quant_dtype)
    return tester.lower().check_fully_delegated().check_count(1).to_executorch().run()


def assert_pt2e_bounds(stats: "StepStats", quant_max: int, label: str) -> None:
    """The default bounds of an output of width `quant_max` against the PT2E reference (top of
    this file): 16-bit within MAX_STEP_DIFF_16 steps; 8-bit within MAX_STEP_DIFF_8, at most
    MAX_BEYOND_ONE_FRACTION beyond 1 step and MAX_NOT_EXACT_FRACTION not exact."""
    if quant_max > 255:
        assert stats.max_diff <= MAX_STEP_DIFF_16, label
        return

    def allowed(fraction: float) -> int:
        return max(MIN_ELEMENTS_ALLOWED, int(fraction * stats.total))

    assert stats.max_diff <= MAX_STEP_DIFF_8, label
    assert stats.worse <= allowed(MAX_BEYOND_ONE_FRACTION), (
        f"{label}: more than {allowed(MAX_BEYOND_ONE_FRACTION)} elements beyond 1 step"
    )
    assert stats.total - stats.exact <= allowed(MAX_NOT_EXACT_FRACTION), (
        f"{label}: more than {allowed(MAX_NOT_EXACT_FRACTION)} elements not exact"
    )


# (max steps, min exact share) of an 8-bit output against the QDQ reference
Bounds8 = Tuple[int, float]


def compare_with_qdq(
    tester: "QuantTester", bounds_8bit: Union[None, Bounds8, Dict[int, Bounds8]] = None
) -> List[Optional[StepStats]]:
    """Every output of `tester` against the QDQ reference, in steps of its encoding: 8-bit
    outputs within `bounds_8bit` (one pair for all outputs, or per output index) where given,
    else, like 16-bit outputs, within the default PT2E bounds (assert_pt2e_bounds); an output
    without an encoding (int / bool) equal. Returns the step statistics (None: exact outputs)."""
    stats: List[Optional[StepStats]] = []
    for i, (out, ref, enc) in enumerate(
        zip(tester.outputs, tester.reference_outputs(), output_encodings_with_range(tester.module))
    ):
        assert out.shape == ref.shape, f"output {i}: shape {out.shape} != {ref.shape}"
        if enc is None:
            assert out.dtype == ref.dtype and out.dtype.kind in "biu", f"output {i}: unquantized {out.dtype}"
            np.testing.assert_array_equal(out, ref, err_msg=f"output {i}")
            stats.append(None)
            continue
        stats.append(step_stats(out, ref, enc[0]))
        label = f"output {i} ({tester.quant_dtype.name}): {stats[-1]}"
        bounds = bounds_8bit.get(i) if isinstance(bounds_8bit, dict) else bounds_8bit
        if bounds is not None and enc[2] <= 255:
            assert stats[-1].max_diff <= bounds[0] and stats[-1].exact_fraction >= bounds[1], label
        else:
            assert_pt2e_bounds(stats[-1], enc[2], label)
    return stats


def float_outputs(module: torch.nn.Module, inputs: Tuple) -> List[np.ndarray]:
    with torch.no_grad():
        return _to_numpy(module(*inputs))


def sqnr_db(actual: np.ndarray, reference: np.ndarray) -> float:
    """Signal-to-quantization-noise ratio of `actual` against `reference`, in dB."""
    noise = float(np.sum((actual.astype(np.float64) - reference.astype(np.float64)) ** 2))
    signal = float(np.sum(reference.astype(np.float64) ** 2))
    return float("inf") if noise == 0 else 10.0 * np.log10(signal / noise)
