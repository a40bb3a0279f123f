"""Unary quantized float ops as a lookup table: output code = table[input code].

A unary elementwise op f with per-tensor uint8 / uint16 input and output has one output code per
input code, so it lowers exactly as Gather(table, index of x's code): the STATIC table holds
Q_out(f(DQ_in(code))) for every input code, computed at lowering with the QDQ reference's own
functions (quantized_decomposed dequantize / quantize, f in float32), so QNN and the host engine
give the PT2E reference's codes (0 steps).

8-bit input: the index is Cast(x) to INT_32 (QNN 2.51 HTP's Cast of a uint8 quantized tensor
gives its codes, measured on SM8650).

16-bit input: HTP refuses every direct route (op validation 3110: Cast of UFIXED_POINT_16 to
INT_32 / UINT_32 / INT_16 / UINT_16, Gather with UFIXED_POINT_16 indices; Dequantize runs in
fp16, 8 steps off at full range), so the code is split into 8-bit pieces with exact integer
ops (all measured exact on QNN 2.51 SM8650 and on the host engine over all 65536 codes, for ten
encodings): h = Convert(x) to uint8 with scale 256 s (x / 256 rounded, whichever way HTP rounds
ties); r = x - Convert(h) to x's grid (an exact 16-bit Subtract, scale s), in [-255, 255] when
h's offset is ceil(x's offset / 256); r's two 8-bit pieces Convert(r) with offset -255 (r
clamped to [-255, 0]) and offset 0 (r clamped to [0, 255]); Cast each to INT_32 (codes), then
index = 256 h + a + b = code + 255 - (256 ceil(o / 256) - o), the table padded in front by that
constant. The index does not depend on how h's ties round, so both engines agree."""

from __future__ import annotations

from typing import Callable, Optional, Tuple

import numpy as np
import torch

from backends.qualcomm.builders.graph_builder import GraphBuilder
from backends.qualcomm.builders.qnn_op_types import QnnOpType
from backends.qualcomm.builders.quant_encoding import QuantAttrs, quant_params
from backends.qualcomm.serialization.qnn_graph import DataType, QnnTensor, QuantEncoding, QuantParams, int32_scalar
from backends.qualcomm.utils.constants import QCOM_QUANT_ATTRS

_TABLE_DTYPES = {8: DataType.UFIXED_POINT_8, 16: DataType.UFIXED_POINT_16}


def per_tensor_unsigned(attrs: Optional[QuantAttrs]) -> bool:
    """A per-tensor uint8 / uint16 activation encoding over the full code range."""
    return (
        attrs is not None
        and attrs.axis == -1
        and attrs.block_size is None
        and not attrs.signed
        and attrs.qmin == 0
        and attrs.qmax == (1 << attrs.bitwidth) - 1
        and attrs.bitwidth in _TABLE_DTYPES
        and np.ndim(attrs.scale) == 0
    )


def lookup_attrs(node: torch.fx.Node) -> Optional[tuple]:
    """(input, output) QuantAttrs of a unary node that lowers as a table (per-tensor uint8 or
    uint16 input and output), else None."""
    x = node.args[0] if node.args else None
    if not isinstance(x, torch.fx.Node):
        return None
    pin, pout = x.meta.get(QCOM_QUANT_ATTRS), node.meta.get(QCOM_QUANT_ATTRS)
    if not (per_tensor_unsigned(pin) and per_tensor_unsigned(pout)):
        return None
    return pin, pout


def _dequantize(codes: torch.Tensor, attrs: QuantAttrs) -> torch.Tensor:
    return torch.ops.quantized_decomposed.dequantize_per_tensor(
        codes.to(attrs.dtype), float(attrs.scale), int(attrs.zero_point), attrs.qmin, attrs.qmax, attrs.dtype
    )


def _quantize(values: torch.Tensor, attrs: QuantAttrs) -> torch.Tensor:
    return torch.ops.quantized_decomposed.quantize_per_tensor(
        values, float(attrs.scale), int(attrs.zero_point), attrs.qmin, attrs.qmax, attrs.dtype
    )


def table_codes(f: Callable[[torch.Tensor], torch.Tensor], pin: QuantAttrs, pout: QuantAttrs) -> np.ndarray:
    """Output codes of f for every input code 0 .. 2^bits - 1 of `pin` (codes outside [qmin, qmax]
    never occur; they get f at the clamped code), as the QDQ reference computes them (an input
    outside f's domain, NaN, gives what quantize_per_tensor makes of it)."""
    size = 1 << pin.bitwidth
    codes = torch.arange(size, dtype=torch.int64).clamp(pin.qmin, pin.qmax)
    with torch.no_grad():
        y = f(_dequantize(codes, pin).float())
    out = _quantize(y, pout).to(torch.int64).clamp(pout.qmin, pout.qmax)
    return out.numpy()


def emit_lookup(
    gb: GraphBuilder, node: torch.fx.Node, f: Callable[[torch.Tensor], torch.Tensor], x: QnnTensor, out: QnnTensor
) -> bool:
    """Lower `node` = f(x) as Gather(table, index of x's code) into `out`; False (nothing
    emitted) when its input / output are not per-tensor uint8 / uint16 activations."""
    attrs = lookup_attrs(node)
    if attrs is None:
        return False
    pin, pout = attrs
    if x.data_type != _TABLE_DTYPES[pin.bitwidth] or out.data_type != _TABLE_DTYPES[pout.bitwidth]:
        return False
    if x.quant != quant_params(pin) or out.quant != quant_params(pout):
        return False
    codes = table_codes(f, pin, pout)
    index, pad = code_index(gb, node, x)
    table = np.concatenate([np.full(pad, codes[0], codes.dtype), codes])
    gb.add_op(
        node,
        QnnOpType.Gather,
        [gb.quantized_static(f"{node.name}_table", table, pout), index],
        [out],
        [int32_scalar("axis", 0)],
    )
    return True


def _encoded(gb: GraphBuilder, name: str, like: QnnTensor, bits: int, scale: float, offset: int) -> QnnTensor:
    quant = QuantParams(QuantEncoding.SCALE_OFFSET, bits, scale, offset)
    return gb.native_tensor(name, like.dims, _TABLE_DTYPES[bits], quant)


def code_index(gb: GraphBuilder, node: torch.fx.Node, x: QnnTensor, label: str = "") -> Tuple[QnnTensor, int]:
    """(INT_32 tensor = the code of x + pad, pad) for a per-tensor uint8 (its Cast, pad 0) or
    uint16 (exact 8-bit pieces, module docstring) tensor x; `label` tells apart the indices of
    one node's inputs."""
    name = f"{node.name}{label}"
    if x.data_type == DataType.UFIXED_POINT_8:
        index = gb.native_tensor(f"{name}_codes", x.dims, DataType.INT_32)
        gb.add_op(node, QnnOpType.Cast, [x], [index], suffix=f"{label.lstrip('_')}codes")
        return index, 0
    return _uint16_index(gb, node, x, name)


def _uint16_index(gb: GraphBuilder, node: torch.fx.Node, x: QnnTensor, name: str) -> Tuple[QnnTensor, int]:
    """(INT_32 tensor = x's code + pad, pad) from exact integer ops (module docstring): high piece
    h (scale 256 s), residual r = x - h on x's grid in [-255, 255], r's two clamped 8-bit pieces,
    index = 256 h + a + b."""
    scale, offset = np.float32(x.quant.scale), int(x.quant.offset)
    high_offset = -((-offset) // 256)  # ceil(offset / 256): r in [-255, 255]
    high = _encoded(gb, f"{name}_high", x, 8, float(scale * np.float32(256)), high_offset)
    gb.add_op(node, QnnOpType.Convert, [x], [high], suffix="high")
    high16 = _encoded(gb, f"{name}_high16", x, 16, float(scale), 256 * high_offset)
    gb.add_op(node, QnnOpType.Convert, [high], [high16], suffix="high16")
    rest = _encoded(gb, f"{name}_rest", x, 16, float(scale), -(1 << 15))
    gb.add_op(node, QnnOpType.ElementWiseSubtract, [x, high16], [rest], suffix="rest")
    low = _encoded(gb, f"{name}_low", x, 8, float(scale), -255)
    top = _encoded(gb, f"{name}_top", x, 8, float(scale), 0)
    gb.add_op(node, QnnOpType.Convert, [rest], [low], suffix="low")
    gb.add_op(node, QnnOpType.Convert, [rest], [top], suffix="top")
    ints = []
    for label, piece in (("high", high), ("low", low), ("top", top)):
        ints.append(gb.native_tensor(f"{name}_{label}_codes", x.dims, DataType.INT_32))
        gb.add_op(node, QnnOpType.Cast, [piece], [ints[-1]], suffix=f"{label}_codes")
    factor = gb.static_tensor(f"{name}_256", np.array([256], np.int32))
    scaled = gb.native_tensor(f"{name}_high_scaled", x.dims, DataType.INT_32)
    gb.add_op(node, QnnOpType.ElementWiseMultiply, [ints[0], factor], [scaled], suffix="high_scaled")
    partial = gb.native_tensor(f"{name}_partial", x.dims, DataType.INT_32)
    gb.add_op(node, QnnOpType.ElementWiseAdd, [scaled, ints[1]], [partial], suffix="partial")
    index = gb.native_tensor(f"{name}_index", x.dims, DataType.INT_32)
    gb.add_op(node, QnnOpType.ElementWiseAdd, [partial, ints[2]], [index], suffix="index")
    return index, 255 - (256 * high_offset - offset)
