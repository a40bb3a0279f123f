"""Quantized atan2(y, x) with per-tensor uint16 inputs and output, in exact integer ops and one
table of output codes (HTP runs float ops in fp16, 2^-11 relative: the float chain between
Dequantize and Quantize was 22 steps off the QDQ reference in 16-bit).

With Y = qy - zy and X = qx - zx (INT_32, from op_lookup.code_index: exact on QNN 2.51 HTP and on
the host engine), a = |Y|, b = |X|, the tangent of the first-quadrant angle is rho = r a / b with
r = sy / sx = 2^k f (k an integer, f in [1 / sqrt 2, sqrt 2)). Two fixed-point ratios, F = 16
fraction bits, by exact INT_32 long division (each a floor of num 2^n / den with num, den < 2^16:
one division for n <= 15, else two, the first quotient clamped so nothing overflows):
- T = floor(a 2^(F + k) / b) = floor(2^F rho / f): the angle is atan(rho) while rho <= 1
  (T <= t_limit = floor(2^F / f));
- S = floor(b 2^(F - k) / a) = floor(2^F f / rho): pi / 2 - atan(1 / rho) beyond.
Either index resolves the angle to within sqrt 2 2^-F rad (0.23 of a step over [-pi, pi]).
The table holds, for each quadrant (Y < 0, X < 0) and each index, the output code of the angle
at the middle of the index's interval, as the QDQ reference quantizes it, and two entries for
the axes (a = 0: 0, which covers atan2(0, 0) = 0 as torch; b = 0: pi / 2); the Gather of that
code is the output. The divisions' zero denominators are 1 (their results then unused). |k| <= 13 keeps every product below 2^31; other scale ratios keep the float chain.

Measured over 400k random code pairs per encoding (incl. axes, |y| == |x| and small codes; eight
encodings, k from -6 to 4): within 1 step of the QDQ reference, 95.1-97.4% exact (F = 17 would
give 97.5-98.7% for a table twice as large)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np
import torch

from backends.qualcomm.builders.graph_builder import GraphBuilder
from backends.qualcomm.builders.op_lookup import code_index, per_tensor_unsigned
from backends.qualcomm.builders.quant_encoding import QuantAttrs, quant_params
from backends.qualcomm.serialization.qnn_graph import DataType, QnnTensor, int32_scalar
from backends.qualcomm.utils.constants import QCOM_QUANT_ATTRS

FRACTION_BITS = 16
_MAX_SHIFT = 15  # num 2^n < 2^31 for num < 2^16
_MAX_K = 13  # F + |k| <= 29: two division steps (15 + 14 bits)

# The op types the composition emits (a literal table: test_op_table reads the types builders emit).
_OPS = {
    "ElementWiseSubtract": "ElementWiseSubtract",
    "ElementWiseAdd": "ElementWiseAdd",
    "ElementWiseMultiply": "ElementWiseMultiply",
    "ElementWiseDivide": "ElementWiseDivide",
    "ElementWiseMod": "ElementWiseMod",
    "ElementWiseLess": "ElementWiseLess",
    "ElementWiseSelect": "ElementWiseSelect",
}


@dataclass(frozen=True)
class Atan2Plan:
    """The scale ratio sy / sx = 2^k f and the two index ranges (module docstring)."""
    k: int
    f: float
    t_limit: int  # T <= t_limit: atan(rho) (rho <= 1 up to one index)
    s_limit: int  # S's largest value in its branch

    @property
    def axis_zero(self) -> int:
        """The index of the angle 0 (a = 0), after the T and S indices; pi / 2 (b = 0) next."""
        return self.t_limit + self.s_limit + 2

    @property
    def block(self) -> int:
        """Table entries per quadrant: the T indices, the S ones, the two axes."""
        return self.axis_zero + 2


def atan2_plan(sy: float, sx: float) -> Optional[Atan2Plan]:
    """The plan for input scales sy / sx (float32 values), None when |k| > 13."""
    r = float(np.float32(sy)) / float(np.float32(sx))
    if not (r > 0 and math.isfinite(r)):
        return None
    k = int(round(math.log2(r)))
    if abs(k) > _MAX_K:
        return None
    f = r / 2.0 ** k
    return Atan2Plan(k, f, int(math.floor(2 ** FRACTION_BITS / f)), int(math.floor(2 ** FRACTION_BITS * f)))


def atan2_attrs(node: torch.fx.Node) -> Optional[Tuple[QuantAttrs, QuantAttrs, QuantAttrs]]:
    """(y, x, output) encodings of an atan2 node with per-tensor uint16 inputs and output."""
    args = node.args[:2]
    if len(args) < 2 or not all(isinstance(a, torch.fx.Node) for a in args):
        return None
    attrs = (args[0].meta.get(QCOM_QUANT_ATTRS), args[1].meta.get(QCOM_QUANT_ATTRS), node.meta.get(QCOM_QUANT_ATTRS))
    if not all(per_tensor_unsigned(a) and a.bitwidth == 16 for a in attrs):
        return None
    return attrs


def first_quadrant_angles(plan: Atan2Plan) -> np.ndarray:
    """The angle in [0, pi / 2] of every index of one block (float64): the middle of each T / S
    index's interval, then the axes exactly."""
    scale = 2.0 ** FRACTION_BITS
    t = np.arange(plan.t_limit + 1, dtype=np.float64)
    s = np.arange(plan.s_limit + 1, dtype=np.float64)
    return np.concatenate([np.arctan(plan.f * (t + 0.5) / scale), np.pi / 2 - np.arctan((s + 0.5) / (plan.f * scale)),
                           [0.0, np.pi / 2]])


def atan2_table(plan: Atan2Plan, pout: QuantAttrs) -> np.ndarray:
    """Output codes of every index: blocks for quadrants 2 (Y < 0) + (X < 0), quantized as the
    QDQ reference quantizes its float32 atan2."""
    first = first_quadrant_angles(plan)
    angles = np.concatenate([first, np.pi - first, -first, first - np.pi]).astype(np.float32)
    codes = torch.ops.quantized_decomposed.quantize_per_tensor(
        torch.from_numpy(angles), float(pout.scale), int(pout.zero_point), pout.qmin, pout.qmax, pout.dtype)
    return codes.to(torch.int64).clamp(pout.qmin, pout.qmax).numpy()


class _Ints:
    """Adds INT_32 (or BOOL_8) ops and constants of one node."""

    def __init__(self, gb: GraphBuilder, node: torch.fx.Node, rank: int):
        self.gb, self.node, self.rank, self._count = gb, node, rank, 0

    def const(self, value: int) -> QnnTensor:
        self._count += 1
        return self.gb.static_tensor(f"{self.node.name}_k{self._count}", np.full([1] * self.rank, value, np.int32))

    def op(self, qnn_type: str, *inputs: QnnTensor, boolean: bool = False) -> QnnTensor:
        self._count += 1
        dims = list(np.broadcast_shapes(*(tuple(t.dims) for t in inputs)))
        out = self.gb.native_tensor(f"{self.node.name}_i{self._count}", dims,
                                    DataType.BOOL_8 if boolean else DataType.INT_32)
        self.gb.add_op(self.node, _OPS[qnn_type], list(inputs), [out], suffix=f"{qnn_type[11:].lower()}{self._count}")
        return out

    def less(self, a: QnnTensor, b: QnnTensor) -> QnnTensor:
        return self.op("ElementWiseLess", a, b, boolean=True)

    def floor_div(self, num: QnnTensor, den: QnnTensor) -> Tuple[QnnTensor, QnnTensor]:
        """(num // den, num % den) for num >= 0, den > 0: an exact division of a multiple."""
        rest = self.op("ElementWiseMod", num, den)
        return self.op("ElementWiseDivide", self.op("ElementWiseSubtract", num, rest), den), rest

    def shifted_ratio(self, num: QnnTensor, shift: int, den: QnnTensor, cap: int) -> QnnTensor:
        """floor(num 2^shift / den) for 0 <= num < 2^16, 0 < den < 2^16, 0 <= shift <= 29; a
        result above `cap` may come out as any value above it (no int32 overflow)."""
        first = min(shift, _MAX_SHIFT)
        quotient, rest = self.floor_div(self.op("ElementWiseMultiply", num, self.const(1 << first)), den)
        second = shift - first
        if second == 0:
            return quotient
        low, _ = self.floor_div(self.op("ElementWiseMultiply", rest, self.const(1 << second)), den)
        bound = self.const((cap >> second) + 1)
        high = self.op("ElementWiseSelect", self.less(quotient, bound), quotient, bound)
        return self.op("ElementWiseAdd", self.op("ElementWiseMultiply", high, self.const(1 << second)), low)


def emit_atan2(gb: GraphBuilder, node: torch.fx.Node, y: QnnTensor, x: QnnTensor, out: QnnTensor) -> bool:
    """Lower the quantized atan2 `node` as integer ops and a table of codes (module docstring);
    False (nothing emitted) when its encodings are not per-tensor uint16 or sy / sx is beyond
    2^+-13."""
    attrs = atan2_attrs(node)
    if attrs is None:
        return False
    py, px, pout = attrs
    plan = atan2_plan(py.scale, px.scale)
    if plan is None or any(t.data_type != DataType.UFIXED_POINT_16 for t in (y, x, out)):
        return False
    if (y.quant, x.quant, out.quant) != (quant_params(py), quant_params(px), quant_params(pout)):
        return False
    e = _Ints(gb, node, len(out.dims))
    index_y, pad_y = code_index(gb, node, y, "_y")
    index_x, pad_x = code_index(gb, node, x, "_x")
    signed_y = e.op("ElementWiseSubtract", index_y, e.const(pad_y - int(y.quant.offset)))
    signed_x = e.op("ElementWiseSubtract", index_x, e.const(pad_x - int(x.quant.offset)))
    zero, one = e.const(0), e.const(1)
    y_negative, x_negative = e.less(signed_y, zero), e.less(signed_x, zero)
    a = e.op("ElementWiseSelect", y_negative, e.op("ElementWiseSubtract", zero, signed_y), signed_y)
    b = e.op("ElementWiseSelect", x_negative, e.op("ElementWiseSubtract", zero, signed_x), signed_x)
    a_zero, b_zero = e.less(a, one), e.less(b, one)
    t = e.shifted_ratio(a, FRACTION_BITS + plan.k, e.op("ElementWiseSelect", b_zero, one, b), plan.t_limit)
    s = e.shifted_ratio(b, FRACTION_BITS - plan.k, e.op("ElementWiseSelect", a_zero, one, a), plan.s_limit)
    index = e.op("ElementWiseSelect", e.less(t, e.const(plan.t_limit + 1)), t,
                 e.op("ElementWiseAdd", s, e.const(plan.t_limit + 1)))
    index = e.op("ElementWiseSelect", b_zero, e.const(plan.axis_zero + 1), index)
    index = e.op("ElementWiseSelect", a_zero, e.const(plan.axis_zero), index)
    quadrant = e.op("ElementWiseAdd", e.op("ElementWiseSelect", y_negative, e.const(2 * plan.block), zero),
                    e.op("ElementWiseSelect", x_negative, e.const(plan.block), zero))
    table = gb.quantized_static(f"{node.name}_table", atan2_table(plan, pout), pout)
    gb.add_op(node, "Gather", [table, e.op("ElementWiseAdd", index, quadrant)], [out], [int32_scalar("axis", 0)])
    return True
