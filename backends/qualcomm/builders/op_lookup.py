"""Unary quantized float ops as a lookup table: output code = table[input code].

A unary elementwise op f with per-tensor uint8 input and output has one output code per input
code, so it lowers exactly as Gather(table, Cast(x) to INT_32): the 256-entry STATIC table holds
Q_out(f(DQ_in(code))) for every input code, computed at lowering with the QDQ reference's own
functions (quantized_decomposed dequantize / quantize, f in float32), so QNN and the host engine
give the PT2E reference's codes (0 steps). QNN 2.51 HTP's Cast of a uint8 quantized tensor to
INT_32 gives its codes (measured, SM8650).

Not 16-bit: HTP's op validation refuses a Cast from UFIXED_POINT_16 to INT_32 (3110
'Unsupported input/output datatypes'; compiled without validation it gives the real value
rounded half to even, not the code), and a Reshape between two encodings does not keep the codes
(measured: Quantize -> Reshape to scale 1 / offset 0 -> Dequantize gives the input's value,
clamped to the new range), so no op sequence found gives 16-bit codes as an index."""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import torch

from backends.qualcomm.builders.graph_builder import GraphBuilder
from backends.qualcomm.builders.quant_encoding import QuantAttrs, quant_params
from backends.qualcomm.serialization.qnn_graph import DataType, QnnTensor, int32_scalar
from backends.qualcomm.utils.constants import QCOM_QUANT_ATTRS


def _per_tensor_uint8(attrs: Optional[QuantAttrs]) -> bool:
    return (attrs is not None and attrs.axis == -1 and attrs.block_size is None and not attrs.signed
            and attrs.bitwidth == 8 and np.ndim(attrs.scale) == 0)


def lookup_attrs(node: torch.fx.Node) -> Optional[tuple]:
    """(input, output) QuantAttrs of a unary node that lowers as a table (per-tensor uint8), else
    None."""
    x = node.args[0] if node.args else None
    if not isinstance(x, torch.fx.Node):
        return None
    pin, pout = x.meta.get(QCOM_QUANT_ATTRS), node.meta.get(QCOM_QUANT_ATTRS)
    if not (_per_tensor_uint8(pin) and _per_tensor_uint8(pout)):
        return None
    return pin, pout


def _dequantize(codes: torch.Tensor, attrs: QuantAttrs) -> torch.Tensor:
    return torch.ops.quantized_decomposed.dequantize_per_tensor(
        codes.to(attrs.dtype), float(attrs.scale), int(attrs.zero_point), attrs.qmin, attrs.qmax, attrs.dtype)


def _quantize(values: torch.Tensor, attrs: QuantAttrs) -> torch.Tensor:
    return torch.ops.quantized_decomposed.quantize_per_tensor(
        values, float(attrs.scale), int(attrs.zero_point), attrs.qmin, attrs.qmax, attrs.dtype)


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


def emit_lookup(gb: GraphBuilder, node: torch.fx.Node, f: Callable[[torch.Tensor], torch.Tensor],
                x: QnnTensor, out: QnnTensor) -> bool:
    """Lower `node` = f(x) as Gather(table, Cast(x) to INT_32) into `out`; False (nothing emitted)
    when its input / output are not per-tensor uint8 activations."""
    attrs = lookup_attrs(node)
    if attrs is None or x.data_type != DataType.UFIXED_POINT_8 or out.data_type != DataType.UFIXED_POINT_8:
        return False
    pin, pout = attrs
    if x.quant != quant_params(pin) or out.quant != quant_params(pout):
        return False
    table = gb.quantized_static(f"{node.name}_table", table_codes(f, pin, pout), pout)
    codes = gb.native_tensor(f"{node.name}_codes", x.dims, DataType.INT_32)
    gb.add_op(node, "Cast", [x], [codes], suffix="codes")
    gb.add_op(node, "Gather", [table, codes], [out], [int32_scalar("axis", 0)])
    return True
