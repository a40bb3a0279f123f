"""Compositions of the division family for the cases QNN 2.51's HTP refuses as one op (measured
with its op validation; BinaryElementwiseBuilder keeps the single op wherever HTP takes it):

- fmod (float, quantized): HTP has no ElementWiseFmod (3110 'OpValidator not found'):
  a - trunc(a / b) * b, trunc(q) = Select(q < 0, Ceil(q), Floor(q));
- remainder of float / quantized tensors (HTP's ElementWiseMod takes INT_32 only):
  a - Floor(a / b) * b;
- integer fmod: r = Mod(a, b) (INT_32, which HTP takes) has the divisor's sign; fmod has the
  dividend's: Select(r != 0 and (a < 0) xor (b < 0), r - b, r);
- integer floor_divide (HTP refuses an INT_32 ElementWiseFloorDiv): (a - Mod(a, b)) / b, an
  exact INT_32 division;
- float / quantized floor_divide (HTP's fp16 ElementWiseFloorDiv gives one less at an exact
  integer quotient: 3 // 1.5 = 1): Round((a - r) / b), r the remainder below;
- div(rounding_mode="trunc") of float / quantized tensors: Round((a - r) / b) with r the fmod
  remainder.

Quantized graphs: the float composition runs between a Dequantize of each operand and a Quantize
to the output's encoding, as the PT2E reference computes it (HTP refuses a FLOAT_32 operand of a
quantized op). HTP computes float tensors in fp16 and its a / b may land just below an integer
quotient (6 / 3 -> 1.9995): the float forms then take |b| off a result of magnitude >= |b| (1 -
2^-8), which gives the exact quotient's 0. A quotient just below an integer that fp16 rounds up
to it gives a remainder of the wrong sign: the divisor (remainder) or the dividend's sign times
|b| (fmod) is added back."""

from __future__ import annotations

from typing import List

import numpy as np
import torch

from backends.qualcomm.builders.graph_builder import GraphBuilder
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.utils import dequantized as _dequantized
from backends.qualcomm.serialization.qnn_graph import DataType, QnnTensor

# |r| >= |b| * (1 - 2^-8): r is a whole |b| (see float_remainder)
_WHOLE_DIVISOR = 1.0 - 2.0**-8


class Emitter:
    """Adds the composition's ops; intermediates take `data_type` (BOOL_8 for conditions)."""

    def __init__(self, gb: GraphBuilder, node: torch.fx.Node, data_type: int):
        self.gb, self.node, self.data_type, self._count = gb, node, data_type, 0

    def op(self, qnn_type: str, inputs: List[QnnTensor], boolean: bool = False) -> QnnTensor:
        self._count += 1
        dims = list(np.broadcast_shapes(*(tuple(t.dims) for t in inputs)))
        out = self.gb.native_tensor(
            f"{self.node.name}_d{self._count}", dims, DataType.BOOL_8 if boolean else self.data_type
        )
        self.gb.add_op(self.node, qnn_type, inputs, [out], suffix=f"{qnn_type[11:].lower()}{self._count}")
        return out

    def last(self, qnn_type: str, inputs: List[QnnTensor], out: QnnTensor) -> None:
        self.gb.add_op(self.node, qnn_type, inputs, [out])

    def constant(self, value: float, rank: int) -> QnnTensor:
        self._count += 1
        return self.gb.static_tensor(f"{self.node.name}_c{self._count}", np.full([1] * rank, value, np.float32))

    def zero(self, rank: int) -> QnnTensor:
        self._count += 1
        dtype = (
            np.int32
            if self.data_type == DataType.INT_32
            else (np.int64 if self.data_type == DataType.INT_64 else np.float32)
        )
        return self.gb.static_tensor(f"{self.node.name}_zero{self._count}", np.zeros([1] * rank, dtype))


def _corrected_remainder(e: Emitter, a: QnnTensor, b: QnnTensor, truncate: bool) -> List[QnnTensor]:
    """Inputs of the Select that gives a - round(a / b) * b in FLOAT_32, round = trunc (fmod) or
    floor (remainder), with |b| taken off a remainder of a whole |b|."""
    q = e.op(QnnOpType.ElementWiseDivide, [a, b])
    if truncate:
        negative = e.op(QnnOpType.ElementWiseLess, [q, e.zero(len(q.dims))], boolean=True)
        whole = e.op(
            QnnOpType.ElementWiseSelect,
            [negative, e.op(QnnOpType.ElementWiseCeil, [q]), e.op(QnnOpType.ElementWiseFloor, [q])],
        )
    else:
        whole = e.op(QnnOpType.ElementWiseFloor, [q])
    r = e.op(QnnOpType.ElementWiseSubtract, [a, e.op(QnnOpType.ElementWiseMultiply, [whole, b])])
    # HTP's fp16 a / b may land just below an integer quotient (6 / 3 -> 1.9995): r is then a
    # whole |b| where the result is 0; take |b| off such an r (|r| < |b| otherwise).
    abs_b = e.op(QnnOpType.ElementWiseAbs, [b])
    abs_r = e.op(QnnOpType.ElementWiseAbs, [r])
    near_b = e.op(QnnOpType.ElementWiseMultiply, [abs_b, e.constant(_WHOLE_DIVISOR, len(abs_b.dims))])
    whole_divisor = e.op(QnnOpType.ElementWiseGreaterEqual, [abs_r, near_b], boolean=True)
    signed_b = e.op(QnnOpType.ElementWiseMultiply, [e.op(QnnOpType.ElementWiseSign, [r]), abs_b])
    reduced = e.op(QnnOpType.ElementWiseSubtract, [r, signed_b])
    return [whole_divisor, reduced, r]


def _signed_remainder(e: Emitter, a: QnnTensor, b: QnnTensor, truncate: bool) -> List[QnnTensor]:
    """Inputs of the Select that gives the corrected remainder with its sign fixed: HTP's fp16
    a / b may land on an integer k while the quotient is just below it (2.9999 -> 3.0), and
    Floor / trunc then give k: r = a - k * b has the sign opposite to the divisor's (remainder)
    or the dividend's (fmod); the result is r + b (remainder) or r + sign(a) * |b| (fmod)
    (measured on the host engine: fmod |b| off on 1 of 128 random fp16 operands)."""
    r = e.op(QnnOpType.ElementWiseSelect, _corrected_remainder(e, a, b, truncate))
    sign_of = a if truncate else b
    step = (
        e.op(QnnOpType.ElementWiseMultiply, [e.op(QnnOpType.ElementWiseSign, [a]), e.op(QnnOpType.ElementWiseAbs, [b])])
        if truncate
        else b
    )
    wrong_sign = e.op(
        QnnOpType.ElementWiseLess,
        [e.op(QnnOpType.ElementWiseMultiply, [r, sign_of]), e.zero(len(r.dims))],
        boolean=True,
    )
    return [wrong_sign, e.op(QnnOpType.ElementWiseAdd, [r, step]), r]


def _write(e: Emitter, qnn_type: str, inputs: List[QnnTensor], out: QnnTensor) -> None:
    """The last op of a float composition: into `out`, or (quantized `out`) into a FLOAT_32
    intermediate Quantized to out's encoding."""
    if out.quant is None:
        e.last(qnn_type, inputs, out)
        return
    e.gb.add_op(e.node, QnnOpType.Quantize, [e.op(qnn_type, inputs)], [out], suffix="quantize")


def float_remainder(
    gb: GraphBuilder, node: torch.fx.Node, a: QnnTensor, b: QnnTensor, out: QnnTensor, truncate: bool
) -> None:
    """fmod (truncate) or remainder: the corrected remainder; quantized operands are Dequantized
    and the result Quantized to `out`'s encoding."""
    e = Emitter(gb, node, DataType.FLOAT_32)
    a, b = _dequantized(gb, node, a, "a"), _dequantized(gb, node, b, "b")
    _write(e, QnnOpType.ElementWiseSelect, _signed_remainder(e, a, b, truncate), out)


def _whole_quotient(
    gb: GraphBuilder, node: torch.fx.Node, a: QnnTensor, b: QnnTensor, out: QnnTensor, truncate: bool, single_op: str
) -> None:
    """Round((a - r) / b) with r the corrected remainder (fmod's when truncating, else the floor
    remainder's): (a - r) is a whole multiple of b, so its quotient is an integer up to rounding.
    Where r is NaN (b = 0 or +-inf, a infinite) the result is `single_op`'s a op b."""
    e = Emitter(gb, node, DataType.FLOAT_32)
    a, b = _dequantized(gb, node, a, "a"), _dequantized(gb, node, b, "b")
    r = e.op(QnnOpType.ElementWiseSelect, _signed_remainder(e, a, b, truncate))
    whole = e.op(
        QnnOpType.ElementWiseRound,
        [e.op(QnnOpType.ElementWiseDivide, [e.op(QnnOpType.ElementWiseSubtract, [a, r]), b])],
    )
    _write(
        e,
        QnnOpType.ElementWiseSelect,
        [e.op(QnnOpType.ElementWiseEqual, [r, r], boolean=True), whole, e.op(single_op, [a, b])],
        out,
    )


def float_floor_divide(gb: GraphBuilder, node: torch.fx.Node, a: QnnTensor, b: QnnTensor, out: QnnTensor) -> None:
    """floor_divide of float / quantized tensors (HTP's single ElementWiseFloorDiv gives one less at
    an exact integer quotient, 3 // 1.5 = 1, measured on QNN 2.51; it gives torch's +-inf / NaN,
    0 or -1 for an infinite b, where the remainder is NaN)."""
    _whole_quotient(gb, node, a, b, out, truncate=False, single_op=QnnOpType.ElementWiseFloorDiv)


def trunc_divide(gb: GraphBuilder, node: torch.fx.Node, a: QnnTensor, b: QnnTensor, out: QnnTensor) -> None:
    """div(rounding_mode="trunc") of float / quantized tensors; a / b where the fmod remainder is
    NaN (b = 0, an infinite a: +-inf / NaN as torch; an infinite b: 0)."""
    _whole_quotient(gb, node, a, b, out, truncate=True, single_op=QnnOpType.ElementWiseDivide)


def integer_fmod(gb: GraphBuilder, node: torch.fx.Node, a: QnnTensor, b: QnnTensor, out: QnnTensor) -> None:
    """Select(r != 0 and (a < 0) != (b < 0), r - b, r) with r = Mod(a, b) (the divisor's sign)."""
    e = Emitter(gb, node, out.data_type)
    r = e.op(QnnOpType.ElementWiseMod, [a, b])
    rank = len(r.dims)
    nonzero = e.op(QnnOpType.ElementWiseNotEqual, [r, e.zero(rank)], boolean=True)
    # Xor of the sign tests (HTP's NotEqual refuses BOOL_8: 3110 'Unsupported input/output datatypes')
    signs_differ = e.op(
        QnnOpType.ElementWiseXor,
        [
            e.op(QnnOpType.ElementWiseLess, [a, e.zero(len(a.dims))], boolean=True),
            e.op(QnnOpType.ElementWiseLess, [b, e.zero(len(b.dims))], boolean=True),
        ],
        boolean=True,
    )
    fix = e.op(QnnOpType.ElementWiseAnd, [nonzero, signs_differ], boolean=True)
    e.last(QnnOpType.ElementWiseSelect, [fix, e.op(QnnOpType.ElementWiseSubtract, [r, b]), r], out)


def integer_floor_divide(gb: GraphBuilder, node: torch.fx.Node, a: QnnTensor, b: QnnTensor, out: QnnTensor) -> None:
    """(a - Mod(a, b)) / b: a multiple of b divided by b, exact whatever the division rounds."""
    e = Emitter(gb, node, out.data_type)
    multiple = e.op(QnnOpType.ElementWiseSubtract, [a, e.op(QnnOpType.ElementWiseMod, [a, b])])
    e.last(QnnOpType.ElementWiseDivide, [multiple, b], out)
