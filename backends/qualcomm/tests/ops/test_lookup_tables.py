"""Unary quantized float ops as lookup tables (builders/op_lookup.py): tan, acos, sinh, cosh, asinh,
acosh, atanh, expm1, log2, log10, log1p with per-tensor uint8 / uint16 input and output lower to
Gather(table of output codes, index of the input code) (8-bit: Cast(x) to INT_32; 16-bit: exact
8-bit pieces of the code), exact against the QDQ reference (0 steps) on both engines; and the
host engine's Cast of a quantized tensor those codes rely on, against QNN HTP on hand-built
graphs.

Inputs lie on their encoding's grid (the observers give scales 2^-k), so the graph input's
Quantize gives the PT2E codes on both engines and a difference can only come from the ops."""

from __future__ import annotations

from typing import Tuple

import numpy as np
import pytest
import torch

from backends.qualcomm import QuantDtype
from backends.qualcomm.serialization.payload_writer import serialize_graphs
from backends.qualcomm.serialization.qnn_graph import (
    DataType,
    QnnGraph,
    QnnOp,
    QnnTensor,
    QuantEncoding,
    QuantParams,
    TensorType,
)
from backends.qualcomm.tests.helpers.engines import with_qnn_binary
from backends.qualcomm.tests.helpers.quant_tester import QuantTester, output_encodings, step_stats
from backends.qualcomm.tests.helpers.runtime import (
    QNN_LOADED,
    delegate_output_scales,
    needs_qnn,
    one_delegate_blob,
    payload_on_both_engines,
)
from backends.qualcomm.utils.runtime_options import require_extension

A8W8, A16W8 = QuantDtype.use_8a8w, QuantDtype.use_16a8w
TABLE_OPS = 11


class TableFamily(torch.nn.Module):
    """Every table op straight on a graph input: x in [-1, 1), w in [-0.5, 0.5), z in [1, 4)."""

    def forward(self, x, w, z):
        return (
            torch.tan(x),
            torch.acos(x),
            torch.sinh(x),
            torch.cosh(x),
            torch.asinh(x),
            torch.expm1(x),
            torch.atanh(w),
            torch.acosh(z),
            torch.log2(z),
            torch.log10(z),
            torch.log1p(z),
        )


def grid(bits: int, low_code: int, high_code: int, scale: float) -> torch.Tensor:
    """Values code * scale, codes spread evenly over [low, high] with both ends present, every
    code present: (64, 64) for 8 bits, (256, 256) for 16 bits."""
    side = 64 if bits == 8 else 256
    codes = np.linspace(low_code, high_code, side * side).round().astype(np.int64)
    rng = np.random.default_rng(bits)
    return torch.tensor(rng.permutation(codes).reshape(side, side) * scale, dtype=torch.float32)


def grid_inputs(bits: int) -> Tuple[torch.Tensor, ...]:
    """Signed x / w (zero point 2^(bits-1)) and z in [1, 4) (zero point 0: the observer's range
    starts at 0); each input's min and max make its scale a power of two."""
    half = 1 << (bits - 1)
    x = grid(bits, -half, half - 1, 1.0 / half)
    w = grid(bits, -half, half - 1, 0.5 / half)
    z = grid(bits, 1 << (bits - 2), (1 << bits) - 1, 4.0 / (1 << bits))
    return x, w, z


def _lower_table_family(quant_dtype: QuantDtype) -> QuantTester:
    inputs = grid_inputs(16 if quant_dtype == A16W8 else 8)
    return (
        QuantTester(TableFamily(), inputs, quant_dtype)
        .lower()
        .check_fully_delegated()
        .check_count(1)
        .to_executorch()
        .run()
    )


def assert_exact_on_both_engines(tester: QuantTester, blob: bytes, min_codes: int) -> None:
    """Every output 0 steps from the QDQ reference with more than `min_codes` distinct codes,
    and (QNN loaded) QNN bit-exact with the host engine."""
    for i, (out, ref, enc) in enumerate(
        zip(tester.outputs, tester.reference_outputs(), output_encodings(tester.module))
    ):
        stats = step_stats(out, ref, enc[0])
        print(f"output {i} vs QDQ: {stats}")
        assert stats.max_diff == 0, f"output {i}: {stats}"
        assert len(np.unique(out)) > min_codes, i  # many codes covered
    if not QNN_LOADED:
        return
    qnn, host = payload_on_both_engines(blob, tester.inputs, tester.module)
    for i, (q, h, scale) in enumerate(zip(qnn, host, delegate_output_scales(blob))):
        stats = step_stats(np.asarray(q), np.asarray(h), scale)
        print(f"QNN vs host, output {i}: {stats}")
        assert stats.max_diff == 0, f"QNN vs host, output {i}: {stats}"


def test_table_ops_are_exact_on_both_engines(qnn_binary):
    """8a8w, every input code: every output 0 steps from the QDQ reference (on QNN and on the
    host engine) and QNN bit-exact with the host; before the tables (fp16 float chains between
    Dequantize and Quantize) up to 2 steps, some ops ~50% exact."""
    tester = _lower_table_family(A8W8)
    blob = one_delegate_blob(tester)
    ops = tester.payload().op_types()
    assert ops.get("Gather") == TABLE_OPS and ops.get("Cast") == TABLE_OPS, ops
    # the graph inputs' Quantize and the outputs' Dequantize only: no float chain
    assert ops.get("Quantize") == 3 and ops.get("Dequantize") == TABLE_OPS, ops
    assert_exact_on_both_engines(tester, blob, min_codes=40)


def test_16bit_tables_are_exact_on_both_engines(qnn_binary):
    """16a8w, every input code of x and w (z: 49152 of 65536 codes, z >= 1): every output 0 steps
    from the QDQ reference on QNN and on the host engine, QNN bit-exact with the host; the index
    from exact integer ops (HTP refuses a Cast of UFIXED_POINT_16 to INT_32); before (fp16 float
    chains) 22-61 steps."""
    tester = _lower_table_family(A16W8)
    blob = one_delegate_blob(tester)
    ops = tester.payload().op_types()
    assert ops.get("Gather") == TABLE_OPS and ops.get("Convert") == 4 * TABLE_OPS, ops
    assert ops.get("Cast") == 3 * TABLE_OPS and ops.get("ElementWiseSubtract") == TABLE_OPS, ops
    assert ops.get("Quantize") == 3 and ops.get("Dequantize") == TABLE_OPS, ops
    assert_exact_on_both_engines(tester, blob, min_codes=1000)


def test_inputs_are_on_their_grid():
    """The observers give the power-of-two scales grid_inputs relies on."""
    for quant_dtype, bits in ((A8W8, 8), (A16W8, 16)):
        tester = QuantTester(TableFamily(), grid_inputs(bits), quant_dtype)
        quantizes = [
            n
            for n in tester.module.graph.nodes
            if "quantize_per_tensor" in str(n.target) and n.args[0].op == "placeholder"
        ]
        scales = sorted({float(n.args[1]) for n in quantizes})
        assert scales == sorted({2.0 ** (1 - bits), 2.0**-bits, 4.0 / (1 << bits)}), scales


def cast_graph(dtype: int, n: int, quant: QuantParams) -> bytes:
    """x -> Quantize -> Cast to INT_32 -> codes (compiled without QNN's op validation)."""
    g = QnnGraph("forward")
    g.tensors += [
        QnnTensor(0, "x", TensorType.APP_WRITE, DataType.FLOAT_32, [1, n]),
        QnnTensor(1, "x_q", TensorType.NATIVE, dtype, [1, n], quant),
        QnnTensor(2, "codes", TensorType.APP_READ, DataType.INT_32, [1, n]),
    ]
    g.ops += [QnnOp("quantize", "Quantize", [0], [1]), QnnOp("cast", "Cast", [1], [2])]
    g.inputs, g.outputs = [0], [2]
    return serialize_graphs([g])


@needs_qnn
@pytest.mark.parametrize("bits", [8, 16])
def test_quantized_cast_to_int32_follows_qnn(bits):
    """Cast to INT_32 of a uint8 tensor gives its codes; of a uint16 tensor (which HTP's op
    validation refuses, so lowering never emits it) its real value rounded half to even:
    measured on QNN 2.51 HTP (512 codes, 16-bit in steps of 1/4 so that halves of both signs
    occur), and the host engine now does the same (it truncated the dequantized value)."""
    dtype = DataType.UFIXED_POINT_8 if bits == 8 else DataType.UFIXED_POINT_16
    top = (1 << bits) - 1
    quant = QuantParams(QuantEncoding.SCALE_OFFSET, bits, 8.0 / top if bits == 8 else 0.25, -(1 << (bits - 1)))
    codes = np.random.default_rng(bits).integers(0, top + 1, 512)
    codes[:2] = (0, top)
    real = (codes + quant.offset) * np.float64(quant.scale)
    x = real.astype(np.float32).reshape(1, -1)
    blob = with_qnn_binary(cast_graph(dtype, codes.size, quant))
    ext = require_extension()
    [host] = ext.run_payload(blob, [x])
    [qnn] = ext.run_payload_qnn(blob, [x])[0]
    expected = codes if bits == 8 else np.rint(real)
    assert bits == 8 or (np.abs(real - np.trunc(real)) == 0.5).sum() > 50  # ties of both signs
    np.testing.assert_array_equal(np.asarray(host).reshape(-1), expected)
    np.testing.assert_array_equal(np.asarray(qnn), np.asarray(host))


def _sigmoid_graph(name: str, table: np.ndarray) -> QnnGraph:
    quant = QuantParams(QuantEncoding.SCALE_OFFSET, scale=1.0 / 256, offset=-128)
    g = QnnGraph(name)
    g.tensors += [
        QnnTensor(0, "x", TensorType.APP_WRITE, DataType.UFIXED_POINT_8, [1, 4], quant),
        QnnTensor(1, "y", TensorType.APP_READ, DataType.UFIXED_POINT_8, [1, 4], quant),
    ]
    g.ops += [QnnOp("sigmoid", "Sigmoid", [0], [1], lookup_table=table)]
    g.inputs, g.outputs = [0], [1]
    return g


@pytest.mark.parametrize("share", [True, False])
def test_equal_tables_of_weight_shared_graphs_are_stored_once(share):
    """A weight-shared payload (prefill and decode of an LLM) writes an op's lookup table once for
    every graph that has the same table, as it does static tensor data."""
    from backends.qualcomm.serialization.payload_writer import serialize_payload

    table = np.random.default_rng(3).integers(0, 256, 256).astype(np.uint8)
    other = table[::-1].copy()
    graphs = [_sigmoid_graph("prefill", table), _sigmoid_graph("decode", table), _sigmoid_graph("third", other)]
    payload = serialize_payload(graphs, share_static_data=share)
    assert payload.count(table.tobytes()) == (1 if share else 2)
    assert payload.count(other.tobytes()) == 1
