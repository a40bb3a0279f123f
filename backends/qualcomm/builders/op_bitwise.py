"""Integer bitwise_and / bitwise_or / bitwise_xor (Tensor and Scalar forms) from exact integer ops
and a byte table: QNN's ElementWiseAnd / Or / Xor are logical (BOOL_8), so LogicBuilder lowers
them on bool tensors only and hands int32 / int64 / uint8 tensors here (int8: see _INTEGER).

int32 / int64 (int64 runs as INT_32 on QNN, narrowed by wrapping; the host engine's INT_64 result
is the op on the low 32 bits, sign-extended, the same): each operand is split into
four bytes with INT_32 Mod (the divisor's sign, so b = Mod(a, 256) is in [0, 255] on QNN and on
the host engine) and exact divisions of multiples, a_{k+1} = (a_k - b_k) / 256; the top byte
b3 = Mod(a_3, 256) is unsigned too. Each result byte is Gather(table, 256 b_k(a) + b_k(b)) from
one STATIC 65536-entry table of op(x, y) per op and graph (UFIXED_POINT_8 codes at scale 1, 64 KB,
Cast to the integer type after the Gather), shared by the four byte positions and every node of
that op. The result is r3s * 2^24 + (r2 * 2^16 + r1 * 256 + r0) in Horner form,
r3s = Mod(r3 + 128, 256) - 128 the top byte as signed (no partial sum leaves int32). A constant
tensor operand is split at lowering (STATIC bytes). A number operand (Scalar forms) needs no
index: per byte a 256-entry row op(x, its byte) * 256^k (the top one signed), and the result is
the sum of the four lookups. uint8: one byte, Cast to INT_32 and back. A tensor that several
bitwise nodes read is split once per graph.

Measured (QNN 2.51 SM8650 emulation and the host engine, tests/ops/test_bitwise.py): equal to
eager on random int32 / int64 operands with -2^31, 2^31 - 1, -1, 0, 255, -256 among them."""

from __future__ import annotations

import functools
from typing import List, Optional

import numpy as np
import torch
from executorch.exir.dialects._ops import ops as exir_ops

from backends.qualcomm.builders.graph_builder import GraphBuilder, logical_shape
from backends.qualcomm.builders.op_cast import cast_uint8_to_int32
from backends.qualcomm.builders.op_division import Emitter
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.registry import SUPPORTED, SupportResult, node_val, tensor_vals
from backends.qualcomm.serialization.qnn_graph import (
    DataType,
    QnnTensor,
    QuantEncoding,
    QuantParams,
    TensorType,
    int32_scalar,
)

_aten = exir_ops.edge.aten

# edge op -> the numpy function the byte table holds
BITWISE_OPS = {
    _aten.bitwise_and.Tensor: np.bitwise_and,
    _aten.bitwise_and.Scalar: np.bitwise_and,
    _aten.bitwise_or.Tensor: np.bitwise_or,
    _aten.bitwise_or.Scalar: np.bitwise_or,
    _aten.bitwise_xor.Tensor: np.bitwise_xor,
    _aten.bitwise_xor.Scalar: np.bitwise_xor,
}
SCALAR_OPS = (_aten.bitwise_and.Scalar, _aten.bitwise_or.Scalar, _aten.bitwise_xor.Scalar)
# tensor dtype -> (numpy dtype of the composition, its QNN data type, bytes split); uint8 tensors
# are Cast to INT_32 and the result back. int8 stays on the CPU: QNN 2.51 HTP has no Cast between
# INT_8 and INT_32 (op validation 3110 both ways, measured on SM8650).
_INTEGER = {
    torch.int32: (np.int32, DataType.INT_32, 4),
    torch.int64: (np.int64, DataType.INT_64, 4),
    torch.uint8: (np.int32, DataType.INT_32, 1),
}
# The byte table's encoding: uint8 codes that are the values (HTP refuses a UINT_8 Gather table,
# 3110; Cast of a UFIXED_POINT_8 tensor to INT_32 gives its codes, on QNN and the host engine)
_CODES = QuantParams(QuantEncoding.SCALE_OFFSET, 8, 1.0, 0)
_VALUE_RANGES = {torch.int32: (-(2**31), 2**31 - 1), torch.int64: (-(2**31), 2**31 - 1), torch.uint8: (0, 255)}


def _dtype(arg: object) -> Optional[torch.dtype]:
    val = node_val(arg)
    return val.dtype if isinstance(val, torch.Tensor) else None


def is_integer_bitwise(node: torch.fx.Node) -> bool:
    """A bitwise and / or / xor node whose operands are not bool (bool: ElementWiseAnd / Or / Xor)."""
    return node.target in BITWISE_OPS and _dtype(node.args[0]) != torch.bool


def check_integer_bitwise(node: torch.fx.Node) -> SupportResult:
    outputs = tensor_vals(node)
    dtype = outputs[0].dtype if outputs else None
    if dtype == torch.int8:
        return False, "int8 tensors: QNN 2.51 HTP has no Cast between INT_8 and INT_32 (op validation 3110, measured)"
    if dtype not in _INTEGER:
        return False, f"output dtype {dtype} is not supported (int32, int64, uint8; bool: ElementWiseAnd / Or / Xor)"
    if not logical_shape(node):
        return False, "a 0-d integer bitwise op is not supported"
    for i, arg in enumerate(node.args[:2]):
        if isinstance(arg, torch.fx.Node):
            if _dtype(arg) != dtype:
                return False, f"operand {i} has dtype {_dtype(arg)}, the output {dtype}; cast it first"
            continue
        if node.target not in SCALAR_OPS or i != 1 or isinstance(arg, bool) or not isinstance(arg, int):
            return False, f"operand {i} ({arg!r}) is not an integer tensor or number"
        low, high = _VALUE_RANGES[dtype]
        if not low <= arg <= high:
            return False, f"number {arg} does not fit {dtype} as QNN computes it ([{low}, {high}])"
    return SUPPORTED


@functools.lru_cache(maxsize=None)
def byte_table(op: np.ufunc) -> np.ndarray:
    """op(x, y) at index 256 x + y for the bytes x, y in [0, 255] (int64; 65536 entries)."""
    x = np.arange(256, dtype=np.int64)
    return op(x[:, None], x[None, :]).reshape(-1)


def _number_bytes(values: np.ndarray, count: int) -> List[np.ndarray]:
    """The `count` low bytes of int values (two's complement), each in [0, 255]."""
    values = values.astype(np.int64)
    return [(values >> (8 * k)) & 255 for k in range(count)]


class _Bytes:
    """Emits the split of operands and the table lookups of one node."""

    def __init__(self, gb: GraphBuilder, node: torch.fx.Node):
        dtype = tensor_vals(node)[0].dtype
        self.np_dtype, data_type, self.count = _INTEGER[dtype]
        self.gb, self.node = gb, node
        self.uint8 = dtype == torch.uint8
        self.e = Emitter(gb, node, data_type)
        self.rank = len(logical_shape(node))

    @functools.cached_property
    def c256(self) -> QnnTensor:
        return self.static("c256", np.full([1] * self.rank, 256))

    @functools.cached_property
    def c128(self) -> QnnTensor:
        return self.static("c128", np.full([1] * self.rank, 128))

    def static(self, name: str, values: np.ndarray) -> QnnTensor:
        return self.gb.static_tensor(f"{self.node.name}_{name}", values.astype(self.np_dtype))

    def split(self, arg: torch.fx.Node, name: str) -> List[QnnTensor]:
        """The operand's bytes, low first, each in [0, 255] (STATIC for a constant tensor)."""
        data = self.gb.constant_data(arg)
        if data is not None:
            return [self.static(f"{name}_b{k}", b) for k, b in enumerate(_number_bytes(data.numpy(), self.count))]
        # every bitwise node of a graph that reads `arg` shares its split
        return self.gb.shared(("bitwise_bytes", arg), lambda: self._emit_split(arg))

    def _emit_split(self, arg: torch.fx.Node) -> List[QnnTensor]:
        rest = self.gb.tensor(arg)
        if self.uint8:
            return [cast_uint8_to_int32(self.node, self.gb, rest)]
        pieces = []
        for k in range(self.count):
            pieces.append(self.e.op(QnnOpType.ElementWiseMod, [rest, self.c256]))
            if k + 1 < self.count:  # (a_k - b_k) / 256: an exact division
                rest = self.e.op(
                    QnnOpType.ElementWiseDivide,
                    [self.e.op(QnnOpType.ElementWiseSubtract, [rest, pieces[-1]]), self.c256],
                )
        return pieces

    def lookup(self, table: QnnTensor, x: QnnTensor, y: QnnTensor) -> QnnTensor:
        """table[256 x + y]."""
        high = self.e.op(QnnOpType.ElementWiseMultiply, [x, self.c256])
        return self.gather(table, self.e.op(QnnOpType.ElementWiseAdd, [high, y]))

    def gather(self, table: QnnTensor, index: QnnTensor) -> QnnTensor:
        out = self.gb.native_tensor(f"{index.name}_byte", index.dims, table.data_type, table.quant)
        self.gb.add_op(self.node, QnnOpType.Gather, [table, index], [out], [int32_scalar("axis", 0)], suffix="gather")
        if table.data_type == self.e.data_type:
            return out
        wide = self.gb.native_tensor(f"{index.name}_wide", index.dims, self.e.data_type)
        self.gb.add_op(self.node, QnnOpType.Cast, [out], [wide], suffix="wide")
        return wide

    def signed_byte(self, byte: QnnTensor) -> QnnTensor:
        """byte in [0, 255] as signed: Mod(byte + 128, 256) - 128."""
        shifted = self.e.op(
            QnnOpType.ElementWiseMod, [self.e.op(QnnOpType.ElementWiseAdd, [byte, self.c128]), self.c256]
        )
        return self.e.op(QnnOpType.ElementWiseSubtract, [shifted, self.c128])


def _scaled_rows(op: np.ufunc, number: int, count: int) -> List[np.ndarray]:
    """Per byte k of `number`: op(x, its byte k) * 256^k for the 256 bytes x (the top byte of a
    four-byte split as signed), so the result is the sum of one lookup per byte."""
    x = np.arange(256, dtype=np.int64)
    rows = [op(x, byte) << (8 * k) for k, byte in enumerate(_number_bytes(np.array(number), count))]
    if count == 4:
        rows[3] = np.where(rows[3] >= 2**31, rows[3] - 2**32, rows[3])
    return rows


def emit_integer_bitwise(gb: GraphBuilder, node: torch.fx.Node) -> None:
    """The node as byte-table lookups (module docstring) into its output."""
    op = BITWISE_OPS[node.target]
    b = _Bytes(gb, node)
    xs = b.split(node.args[0], "a")
    out = gb.define_output(node)
    if node.target in SCALAR_OPS:
        _emit_number(b, op, xs, int(node.args[1]), out)
        return
    table = gb.shared(
        ("bitwise_table", op),
        lambda: gb.add_tensor(
            f"bitwise_{op.__name__}_table",
            TensorType.STATIC,
            DataType.UFIXED_POINT_8,
            [1 << 16],
            byte_table(op).astype(np.uint8),
            _CODES,
        ),
    )
    ys = b.split(node.args[1], "b")
    r = [b.lookup(table, x, y) for x, y in zip(xs, ys)]
    if b.uint8:  # the byte itself
        gb.add_op(node, QnnOpType.Cast, [r[0]], [out], suffix="uint8")
        return
    acc = b.signed_byte(r[3])  # the top byte as signed, then Horner: acc * 256 + r_k
    for k in (2, 1):
        acc = b.e.op(QnnOpType.ElementWiseAdd, [b.e.op(QnnOpType.ElementWiseMultiply, [acc, b.c256]), r[k]])
    b.e.last(QnnOpType.ElementWiseAdd, [b.e.op(QnnOpType.ElementWiseMultiply, [acc, b.c256]), r[0]], out)


def _emit_number(b: _Bytes, op: np.ufunc, xs: List[QnnTensor], number: int, out: QnnTensor) -> None:
    """A number operand: per byte a 256-entry row of its byte's results, already scaled by
    256^k (the top one signed): the result is the sum of the lookups (no index, no recombination)."""
    rows = [b.static(f"row{k}", row) for k, row in enumerate(_scaled_rows(op, number, b.count))]
    parts = [b.gather(row, x) for row, x in zip(rows, xs)]
    if b.uint8:
        b.gb.add_op(b.node, QnnOpType.Cast, [parts[0]], [out], suffix="uint8")
        return
    acc = parts[0]
    for part in parts[1:-1]:
        acc = b.e.op(QnnOpType.ElementWiseAdd, [acc, part])
    b.e.last(QnnOpType.ElementWiseAdd, [acc, parts[-1]], out)
