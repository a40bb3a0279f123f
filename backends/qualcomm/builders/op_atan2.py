"""Quantized atan2(y, x) with per-tensor uint16 inputs and output, in exact integer ops and
table lookups (HTP runs float ops in fp16, 2^-11 relative: the float chain between Dequantize
and Quantize was 22 steps off the QDQ reference in 16-bit).

With Y = qy - zy and X = qx - zx (INT_32, from op_lookup.code_index: exact on QNN 2.51 HTP and on
the host engine), a = |Y|, b = |X|, the tangent of the first-quadrant angle is rho = r a / b with
r = sy / sx = 2^k f (k an integer, f in [1 / sqrt 2, sqrt 2)). Two fixed-point ratios, F = 16
fraction bits, by exact INT_32 long division (each a floor of num 2^n / den with num, den < 2^16:
one Mod / Subtract / Divide for n <= 15, else two, the first quotient clamped so nothing
overflows):
- T = floor(a 2^(F + k) / b) = floor(2^F rho / f): the angle is atan(rho) while rho <= 1
  (T <= t_limit = floor(2^F / f));
- S = floor(b 2^(F - k) / a) = floor(2^F f / rho): pi / 2 - atan(1 / rho) beyond.
The division's remainder gives M = 14 more bits (floor(rest 2^M / den)), and the angle is
interpolated linearly between two entries of a STATIC INT_32 table of first-quadrant angles in
units of s_out / 2^P (P <= 12): table[i] + round((table[i + 1] - table[i]) frac / 2^M) (the
interpolation error of atan over 2^-16 is below 1e-10 rad). a = 0 takes index 0 (angle 0, which
gives atan2(0, 0) = 0 as torch), b = 0 S = 0 (pi / 2; pi / 2 and pi as the reference's float32
values, which round differently on some encodings); zero divisors are 1 (their results then
unused). The quadrant (pi - angle for X < 0, -angle for Y < 0), then the output code floor((angle
+ 2^(P-1)) / 2^P) + zo clamped to 0 .. 65535, all in INT_32; the uint16 output is a Gather of a
65536-entry identity table of codes by that code (no float op anywhere). |k| <= 13 keeps every
product below 2^31; other scale ratios keep the float chain.

Measured (tests/ops/test_atan2.py: a numpy model of these ops over 200k random code pairs per
encoding, incl. axes, |y| == |x| and small codes, k from -12 to 6; lowered graphs on QNN and the
host engine): within 1 step of the QDQ reference, 99.7-100% exact, QNN bit-exact with the host (a
table of codes at the middle of each index, without the interpolation, was 92-97% exact)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np
import torch

from backends.qualcomm.builders.graph_builder import GraphBuilder
from backends.qualcomm.builders.op_lookup import code_index, per_tensor_unsigned
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.quant_encoding import QuantAttrs, quant_params
from backends.qualcomm.builders.utils import reshape
from backends.qualcomm.serialization.qnn_graph import DataType, QnnTensor, int32_scalar
from backends.qualcomm.utils.constants import QCOM_QUANT_ATTRS

FRACTION_BITS = 16
_MAX_SHIFT = 15  # num 2^n < 2^31 for num < 2^16
_MAX_K = 13  # F + |k| <= 29: two division steps (15 + 14 bits)
_INTERP_BITS = 14  # M: the position inside an index, from the division's remainder
_POINT_BITS = 12  # P at most: angles in units of s_out / 2^P
# Inputs of one shape and rank 3 or 4 run flattened; broadcasting ones keep their shape (the
# Gathers take flattened indices, _flat); rank 5 keeps the float chain (QNN 2.51 HTP, SM8650: a
# rank-5 graph with this chain moved the inputs' own producers by up to 24 steps).
_FLAT_RANK = 3
_MAX_RANK = 4


@dataclass(frozen=True)
class Atan2Plan:
    """The scale ratio sy / sx = 2^k f, the two index ranges and the output's fixed point
    (module docstring)."""

    k: int
    f: float
    t_limit: int  # T <= t_limit: atan(rho) (rho <= 1 up to one index)
    s_limit: int  # S's largest value in its branch
    point_bits: int  # P: angles in units of s_out / 2^P

    @property
    def s_start(self) -> int:
        """The table index of S = 0 (after T = 0 .. t_limit + 1)."""
        return self.t_limit + 2

    def units(self, scale: float) -> float:
        """Fixed-point units per radian."""
        return 2.0**self.point_bits / scale


def atan2_plan(sy: float, sx: float, s_out: float) -> Optional[Atan2Plan]:
    """The plan for input scales sy / sx and output scale s_out (float32 values); None when
    |k| > 13 or the output's step is too small for a fixed point with 2 fraction bits and pi
    below 2^28 (an output range narrower than 0.003 rad)."""
    r = float(np.float32(sy)) / float(np.float32(sx))
    if not (r > 0 and math.isfinite(r) and s_out > 0):
        return None
    k = int(round(math.log2(r)))
    point_bits = min(_POINT_BITS, int(math.floor(math.log2(2.0**28 * s_out / math.pi))))
    if abs(k) > _MAX_K or point_bits < 2:
        return None
    f = r / 2.0**k
    return Atan2Plan(k, f, int(math.floor(2**FRACTION_BITS / f)), int(math.floor(2**FRACTION_BITS * f)), point_bits)


def atan2_attrs(node: torch.fx.Node) -> Optional[Tuple[QuantAttrs, QuantAttrs, QuantAttrs]]:
    """(y, x, output) encodings of an atan2 node with per-tensor uint16 inputs and output."""
    args = node.args[:2]
    if len(args) < 2 or not all(isinstance(a, torch.fx.Node) for a in args):
        return None
    attrs = (args[0].meta.get(QCOM_QUANT_ATTRS), args[1].meta.get(QCOM_QUANT_ATTRS), node.meta.get(QCOM_QUANT_ATTRS))
    if not all(per_tensor_unsigned(a) and a.bitwidth == 16 for a in attrs):
        return None
    return attrs


def angle_table(plan: Atan2Plan, s_out: float) -> np.ndarray:
    """First-quadrant angles in fixed point (INT_32): atan(f T / 2^F) for T = 0 .. t_limit + 1,
    then pi / 2 - atan(S / (f 2^F)) for S = 0 .. s_limit + 1 (one entry past each range for the
    interpolation)."""
    scale = 2.0**FRACTION_BITS
    t = np.arange(plan.t_limit + 2, dtype=np.float64)
    s = np.arange(plan.s_limit + 2, dtype=np.float64)
    angles = np.concatenate([np.arctan(plan.f * t / scale), np.pi / 2 - np.arctan(s / (plan.f * scale))])
    table = np.rint(angles * plan.units(s_out)).astype(np.int32)
    table[plan.s_start] = reference_units(plan, math.pi / 2, s_out)  # b = 0
    return table


def reference_units(plan: Atan2Plan, angle: float, s_out: float) -> int:
    """`angle` in fixed point as the QDQ reference sees it on an axis: its float32 value times
    1 / s_out in float32 (quantize_per_tensor's product; float32 pi is 0.0009 of a step above
    pi at s_out = 2 pi / 65535, enough to round the other way)."""
    product = torch.tensor([angle], dtype=torch.float32) * (1.0 / s_out)
    return int(round(float(product[0]) * 2.0**plan.point_bits))


def _identity_codes(pout: QuantAttrs) -> np.ndarray:
    return np.arange(pout.qmin, pout.qmax + 1, dtype=np.int64)


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
        out = self.gb.native_tensor(
            f"{self.node.name}_i{self._count}", dims, DataType.BOOL_8 if boolean else DataType.INT_32
        )
        self.gb.add_op(self.node, qnn_type, list(inputs), [out], suffix=f"{qnn_type[11:].lower()}{self._count}")
        return out

    def less(self, a: QnnTensor, b: QnnTensor) -> QnnTensor:
        return self.op(QnnOpType.ElementWiseLess, a, b, boolean=True)

    def select(self, condition: QnnTensor, a: QnnTensor, b: QnnTensor) -> QnnTensor:
        return self.op(QnnOpType.ElementWiseSelect, condition, a, b)

    def floor_div(self, num: QnnTensor, den: QnnTensor) -> Tuple[QnnTensor, QnnTensor]:
        """(num // den, num % den) for num >= 0, den > 0: an exact division of a multiple."""
        rest = self.op(QnnOpType.ElementWiseMod, num, den)
        return self.op(QnnOpType.ElementWiseDivide, self.op(QnnOpType.ElementWiseSubtract, num, rest), den), rest

    def shifted_ratio(self, num: QnnTensor, shift: int, den: QnnTensor, cap: int) -> Tuple[QnnTensor, QnnTensor]:
        """(floor(num 2^shift / den), the remainder) for 0 <= num < 2^16, 0 < den < 2^16, 0 <=
        shift <= 29; a quotient above `cap` may come out as any value above it (no int32
        overflow; its remainder is then unused)."""
        first = min(shift, _MAX_SHIFT)
        quotient, rest = self.floor_div(self.op(QnnOpType.ElementWiseMultiply, num, self.const(1 << first)), den)
        second = shift - first
        if second == 0:
            return quotient, rest
        low, rest = self.floor_div(self.op(QnnOpType.ElementWiseMultiply, rest, self.const(1 << second)), den)
        bound = self.const((cap >> second) + 1)
        high = self.select(self.less(quotient, bound), quotient, bound)
        scaled = self.op(QnnOpType.ElementWiseMultiply, high, self.const(1 << second))
        return self.op(QnnOpType.ElementWiseAdd, scaled, low), rest

    def fraction(self, rest: QnnTensor, den: QnnTensor) -> QnnTensor:
        """floor(rest 2^M / den) for 0 <= rest < den < 2^16: the position inside the index."""
        return self.floor_div(self.op(QnnOpType.ElementWiseMultiply, rest, self.const(1 << _INTERP_BITS)), den)[0]

    def floor_shift(self, value: QnnTensor, bits: int, low: int) -> QnnTensor:
        """floor(value / 2^bits) for value >= -low 2^bits (made non-negative first)."""
        raised = self.op(QnnOpType.ElementWiseAdd, value, self.const(low << bits))
        quotient, _ = self.floor_div(raised, self.const(1 << bits))
        return self.op(QnnOpType.ElementWiseSubtract, quotient, self.const(low))


def emit_atan2(gb: GraphBuilder, node: torch.fx.Node, y: QnnTensor, x: QnnTensor, out: QnnTensor) -> bool:
    """Lower the quantized atan2 `node` as integer ops and two tables (module docstring); False
    (nothing emitted) when its encodings are not per-tensor uint16 or atan2_plan refuses them."""
    attrs = atan2_attrs(node)
    if attrs is None:
        return False
    py, px, pout = attrs
    plan = atan2_plan(py.scale, px.scale, float(pout.scale))
    if plan is None or any(t.data_type != DataType.UFIXED_POINT_16 for t in (y, x, out)):
        return False
    if (y.quant, x.quant, out.quant) != (quant_params(py), quant_params(px), quant_params(pout)):
        return False
    if len(out.dims) > _MAX_RANK:
        return False
    if len(out.dims) >= _FLAT_RANK and list(y.dims) == list(x.dims) == list(out.dims):
        y, x = _flat(gb, node, y, "y"), _flat(gb, node, x, "x")
    e = _Ints(gb, node, len(y.dims) if len(y.dims) == 1 == len(x.dims) else len(out.dims))
    index_y, pad_y = code_index(gb, node, y, "_y")
    index_x, pad_x = code_index(gb, node, x, "_x")
    signed_y = e.op(QnnOpType.ElementWiseSubtract, index_y, e.const(pad_y - int(y.quant.offset)))
    signed_x = e.op(QnnOpType.ElementWiseSubtract, index_x, e.const(pad_x - int(x.quant.offset)))
    zero, one = e.const(0), e.const(1)
    y_negative, x_negative = e.less(signed_y, zero), e.less(signed_x, zero)
    a = e.select(y_negative, e.op(QnnOpType.ElementWiseSubtract, zero, signed_y), signed_y)
    b = e.select(x_negative, e.op(QnnOpType.ElementWiseSubtract, zero, signed_x), signed_x)
    a_zero, b_zero = e.less(a, one), e.less(b, one)
    a_den, b_den = e.select(a_zero, one, a), e.select(b_zero, one, b)
    t, t_rest = e.shifted_ratio(a, FRACTION_BITS + plan.k, b_den, plan.t_limit)
    s, s_rest = e.shifted_ratio(b, FRACTION_BITS - plan.k, a_den, plan.s_limit)
    first = e.less(t, e.const(plan.t_limit + 1))
    index = e.select(first, t, e.op(QnnOpType.ElementWiseAdd, s, e.const(plan.s_start)))
    index = e.select(a_zero, zero, e.select(b_zero, e.const(plan.s_start), index))
    fraction = e.select(first, e.fraction(t_rest, b_den), e.fraction(s_rest, a_den))
    angle = _interpolated(gb, node, e, angle_table(plan, float(pout.scale)), plan.s_start, index, fraction)
    pi_units = reference_units(plan, math.pi, float(pout.scale))
    angle = e.select(x_negative, e.op(QnnOpType.ElementWiseSubtract, e.const(pi_units), angle), angle)
    angle = e.select(y_negative, e.op(QnnOpType.ElementWiseSubtract, zero, angle), angle)
    half = e.op(
        QnnOpType.ElementWiseAdd,
        angle,
        e.const((int(pout.zero_point) << plan.point_bits) + (1 << (plan.point_bits - 1))),
    )
    code = e.floor_shift(half, plan.point_bits, (pi_units >> plan.point_bits) + 2)
    code = e.select(e.less(code, e.const(pout.qmin)), e.const(pout.qmin), code)
    code = e.select(e.less(e.const(pout.qmax), code), e.const(pout.qmax), code)
    identity = gb.quantized_static(f"{node.name}_codes", _identity_codes(pout), pout)
    flat = len(out.dims) != 1
    result = gb.like(out, f"{node.name}_flat", [int(np.prod(out.dims))]) if flat else out
    gb.add_op(node, QnnOpType.Gather, [identity, _flat(gb, node, code, "code")], [result], [int32_scalar("axis", 0)])
    if flat:
        gb.add_op(node, QnnOpType.Reshape, [result], [out], suffix="unflat")
    return True


def _flat(gb: GraphBuilder, node: torch.fx.Node, tensor: QnnTensor, label: str) -> QnnTensor:
    """`tensor` as rank 1: QNN 2.51 HTP's Gather by computed INT_32 indices of rank 3 or 4 reads
    wrong elements (measured on SM8650 with a 131076-entry INT_32 table: [2, 3, 4, 5] and [6, 20,
    1] indices from an ElementWiseAdd 92-98% wrong; rank 1 and 2, graph-input indices and a
    1001-entry table exact; the host engine right), so every Gather here takes rank-1 indices."""
    if len(tensor.dims) == 1:
        return tensor
    return reshape(gb, node, tensor, [int(np.prod(tensor.dims))], f"{label}_flat")


def _interpolated(
    gb: GraphBuilder,
    node: torch.fx.Node,
    e: _Ints,
    table: np.ndarray,
    start: int,
    index: QnnTensor,
    fraction: QnnTensor,
) -> QnnTensor:
    """table[index] + round((table[index + 1] - table[index]) fraction / 2^M), in INT_32 (S's
    entries from `start`)."""
    static = gb.static_tensor(f"{node.name}_angles", table)
    flat = _flat(gb, node, index, "index")
    one = gb.static_tensor(f"{node.name}_one", np.ones([1], np.int32))
    following = gb.native_tensor(f"{node.name}_following", flat.dims, DataType.INT_32)
    gb.add_op(node, QnnOpType.ElementWiseAdd, [flat, one], [following], suffix="following")
    values = []
    for label, at in (("angle", flat), ("next_angle", following)):
        value = gb.native_tensor(f"{node.name}_{label}", at.dims, DataType.INT_32)
        gb.add_op(node, QnnOpType.Gather, [static, at], [value], [int32_scalar("axis", 0)], suffix=label)
        values.append(value if value.dims == index.dims else reshape(gb, node, value, index.dims, f"{label}_shaped"))
    step = e.op(QnnOpType.ElementWiseMultiply, e.op(QnnOpType.ElementWiseSubtract, values[1], values[0]), fraction)
    steps = np.abs(np.diff(table.astype(np.int64)))
    steps[start - 1] = 0  # from T's last entry to S = 0: never interpolated
    steepest = int(steps.max()) + 1
    rounded = e.op(QnnOpType.ElementWiseAdd, step, e.const(1 << (_INTERP_BITS - 1)))
    return e.op(QnnOpType.ElementWiseAdd, values[0], e.floor_shift(rounded, _INTERP_BITS, steepest))
