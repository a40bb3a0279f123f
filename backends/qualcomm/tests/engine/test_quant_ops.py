"""Quantized activations through the non-integer ops (f on the dequantized
inputs, requantized to the output encoding), weight-only graphs, and the
init-time validation of malformed quantization params."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from backends.qualcomm import _qnn_delegate as qd
from backends.qualcomm.tests.helpers.payload_builder import BOOL, F32, I32, U32, GraphBuilder, randn, scalar, u32
from backends.qualcomm.tests.helpers.quant_reference import (
    APP_READ,
    NATIVE,
    S4,
    S8,
    STATIC,
    U8,
    U16,
    E,
    QGraph,
    act_quant,
    assert_within_one_step,
    dequantize,
    pack_bits,
    quantize,
    requantize,
    weight_quant,
)

ACT = {"u8": U8, "u16": U16}


def deq(x, q):
    return dequantize(quantize(x, q), q).astype(np.float64)


def run_wrapped(op_type, arrays, fn, out_shape=None, act="u8", same_encoding=False, min_exact=0.99, **params):
    """One op on quantized inputs; fn(*dequantized float64 inputs) -> reference real output."""
    qs = [act_quant(a, ACT[act]) for a in arrays]
    real = np.asarray(fn(*[deq(a, q) for a, q in zip(arrays, qs)]), np.float64)
    qy = qs[0] if same_encoding else act_quant(real, ACT[act])
    qg = QGraph()
    ids = [qg.act(f"x{i}", a, q) for i, (a, q) in enumerate(zip(arrays, qs))]
    got = qg.run(op_type, ids, qg.out(real.shape if out_shape is None else out_shape, qy), **params)
    return assert_within_one_step(got, requantize(real, qy), min_exact)


def t(fn):
    """numpy float64 -> torch -> numpy."""
    return lambda *xs: fn(*[torch.from_numpy(x) for x in xs]).numpy()


BINARY = {
    "ElementWiseAdd": np.add,
    "ElementWiseSubtract": np.subtract,
    "ElementWiseMultiply": np.multiply,
    "ElementWiseDivide": np.divide,
}


@pytest.mark.parametrize("act", ["u8", "u16"])
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_broadcast_quantized(op, act):
    a, b = randn(2, 3, 8, seed=1), randn(3, 1, seed=2)
    if op == "ElementWiseDivide":
        b = np.sign(b) * (np.abs(b) + 0.5)
    # 16-bit add / subtract run QNN HTP's arithmetic (15-bit multipliers, elementwise_quant.cpp):
    # within one step of the float reference, exact on 60% of this case's elements (measured)
    min_exact = 0.55 if act == "u16" and op in ("ElementWiseAdd", "ElementWiseSubtract") else 0.99
    run_wrapped(op, [a, b], BINARY[op], act=act, min_exact=min_exact)


UNARY = {
    "Relu": t(torch.relu),
    "Sigmoid": t(torch.sigmoid),
    "Tanh": t(torch.tanh),
    "Gelu": t(torch.nn.functional.gelu),
    "HardSwish": t(torch.nn.functional.hardswish),
    "ElementWiseAbs": t(torch.abs),
}


@pytest.mark.parametrize("act", ["u8", "u16"])
@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_quantized(op, act):
    run_wrapped(op, [randn(4, 64, seed=3) * 3], UNARY[op], act=act)


def test_relu_min_max_softmax_reduce_quantized():
    x = randn(2, 6, 10, seed=4) * 2
    run_wrapped("ReluMinMax", [x], lambda v: np.clip(v, 0, 1.5), min_value=scalar(F32, 0.0), max_value=scalar(F32, 1.5))
    run_wrapped(
        "Softmax", [x], t(lambda v: torch.softmax(v, -1)), axis=scalar(U32, 2), beta=scalar(F32, 1.0), act="u16"
    )
    run_wrapped("ReduceMean", [x], lambda v: v.mean(axis=1, keepdims=True), axes=u32([1]), keep_dims=scalar(BOOL, 1))


def test_layer_norm_with_float_gamma_quantized():
    x, gamma, beta = randn(3, 16, seed=5), randn(16, seed=6), randn(16, seed=7)
    qx = act_quant(x, U16)
    real = torch.nn.functional.layer_norm(
        torch.from_numpy(deq(x, qx)),
        (16,),
        torch.from_numpy(gamma.astype(np.float64)),
        torch.from_numpy(beta.astype(np.float64)),
        1e-5,
    ).numpy()
    qy = act_quant(real, U16)
    qg = QGraph()
    xi = qg.act("x", x, qx)
    got = qg.run(
        "LayerNorm",
        [xi, qg.static_f("g", gamma), qg.static_f("b", beta)],
        qg.out(x.shape, qy),
        epsilon=scalar(F32, 1e-5),
        axes=u32([1]),
    )
    # QNN HTP adds beta in whole output steps: round(norm * gamma / s) + round(beta / s) - offset
    # (measured on QNN 2.51); within 1 step of the PT2E reference, which rounds once.
    scale = np.float64(np.float32(qy["scale"]))
    htp = np.rint((real - beta.astype(np.float64)) / scale) + np.rint(beta.astype(np.float64) / scale) - qy["offset"]
    assert_within_one_step(got, np.clip(htp, 0, 65535).astype(np.int64), min_exact=0.999)
    assert_within_one_step(got, requantize(real, qy), min_exact=0.5)


@pytest.mark.parametrize("op", ["PoolAvg2d", "PoolMax2d"])
def test_pools_quantized(op):
    x = randn(1, 6, 6, 4, seed=8)
    pool = torch.nn.functional.avg_pool2d if op == "PoolAvg2d" else torch.nn.functional.max_pool2d
    fn = lambda v: pool(torch.from_numpy(v).permute(0, 3, 1, 2), 2, 2).permute(0, 2, 3, 1).numpy()  # noqa: E731
    extra = {"count_pad_for_edges": scalar(BOOL, 0)} if op == "PoolAvg2d" else {}
    run_wrapped(
        op,
        [x],
        fn,
        filter_size=u32([2, 2]),
        stride=u32([2, 2]),
        pad_amount=u32([[0, 0], [0, 0]]),
        same_encoding=op == "PoolMax2d",
        **extra,
    )


def test_reshape_transpose_keep_encoding_exactly():
    x = randn(2, 3, 4, seed=9)
    stats = run_wrapped("Transpose", [x], lambda v: v.transpose(2, 0, 1), same_encoding=True, perm=u32([2, 0, 1]))
    assert stats["exact"] == 1.0
    stats = run_wrapped("Reshape", [x], lambda v: v.reshape(6, 4), same_encoding=True, act="u16")
    assert stats["exact"] == 1.0


def test_concat_requantizes_inputs_with_different_encodings():
    a, b = randn(2, 3, seed=10), randn(2, 5, seed=11) * 4
    run_wrapped("Concat", [a, b], lambda x, y: np.concatenate([x, y], axis=1), axis=scalar(U32, 1))


def test_gather_from_quantized_static_table():
    table = randn(10, 6, seed=12)
    qt = act_quant(table, U16)
    idx = np.array([[3, 0], [9, 3]], np.int32)
    qg = QGraph()
    ti = qg.static_q("table", quantize(table, qt).astype(np.uint16), table.shape, U16, qt)
    ii = qg.g.input("idx", idx)
    qg.feeds.append(idx)
    got = qg.run("Gather", [ti, ii], qg.out((2, 2, 6), qt), axis=scalar(I32, 0))
    np.testing.assert_array_equal(got, quantize(table, qt)[idx])


def test_weight_only_fully_connected_dequantizes_weights_at_init():
    x, w, b = randn(4, 32, seed=13), randn(8, 32, seed=14), randn(8, seed=15)
    wq, wparams, wscale = weight_quant(w, 0, 8)
    g = GraphBuilder()
    xi = g.input("x", x)
    wi = g.tensor("w", STATIC, w.shape, S8, data=pack_bits(wq, 8), quant=wparams)
    y = g.output("y", (4, 8))
    g.op("FullyConnected", [xi, wi, g.static("b", b)], [y])
    got = qd.run_payload(g.blob(), [x])[0]
    np.testing.assert_allclose(got, x @ (wq * wscale).T.astype(np.float32) + b, rtol=1e-5, atol=1e-5)


# ---- malformed quantization params -------------------------------------------------------------
def fc_graph_with_weight(wdtype, wdims, wdata, wquant):
    """x u8 -> FullyConnected with a custom weight tensor."""
    g = GraphBuilder()
    q = dict(encoding=E.SCALE_OFFSET, bitwidth=8, scale=0.1, offset=-128)
    x = g.input("x", np.zeros((2, 8), np.float32))
    xq = g.tensor("x_q", NATIVE, (2, 8), U8, quant=q)
    g.op("Quantize", [x], [xq])
    w = g.tensor("w_bad", STATIC, wdims, wdtype, data=wdata, quant=wquant)
    yq = g.tensor("y_q", NATIVE, (2, 4), U8, quant=q)
    g.op("FullyConnected", [xq, w, g.static("b", np.zeros(4, np.float32))], [yq])
    g.op("Dequantize", [yq], [g.output("y", (2, 4))])
    return g


W8 = np.zeros(32, np.int8)
PER_CH = dict(encoding=E.AXIS_SCALE_OFFSET, bitwidth=8, axis=0, scales=[0.1] * 4, offsets=[0] * 4)
LPBQ = dict(
    encoding=E.BLOCKWISE_EXPANSION,
    bitwidth=4,
    axis=0,
    block_axis=1,
    block_size=4,
    scales=[0.1] * 4,
    block_scales=[1] * 8,
)
BAD_QUANT = {
    "no_encoding": (S8, W8, None, "has data type SFIXED_POINT_8 but no quantization encoding"),
    "scales_count": (S8, W8, {**PER_CH, "scales": [0.1] * 3}, "has 3 scales, expected 4"),
    "offsets_count": (S8, W8, {**PER_CH, "offsets": [0] * 5}, "has 5 offsets, expected 4"),
    "zero_scale": (S8, W8, {**PER_CH, "scales": [0.1, 0.0, 0.1, 0.1]}, r"scales\[1\] = 0 must be finite and > 0"),
    "axis_range": (S8, W8, {**PER_CH, "axis": 2}, "axis 2 is out of range"),
    "bitwidth": (S8, W8, {**PER_CH, "bitwidth": 4}, "bitwidth 4 does not match the data type"),
    "packed_size": (S4, np.zeros(32, np.uint8), {**LPBQ}, "has 32 data bytes, expected 16"),
    "block_divides": (S4, np.zeros(16, np.uint8), {**LPBQ, "block_size": 3}, "block_size 3 does not divide dim 8"),
    "block_scales_count": (
        S4,
        np.zeros(16, np.uint8),
        {**LPBQ, "block_scales": [1] * 7},
        "has 7 block_scales, expected 8",
    ),
    "block_scale_bits": (
        S4,
        np.zeros(16, np.uint8),
        {**LPBQ, "block_scales": [1] * 7 + [16]},
        r"block_scales\[7\] = 16 does not fit 4 bits",
    ),
    "zero_point_range": (
        S8,
        W8,
        dict(encoding=E.SCALE_OFFSET, bitwidth=8, scale=0.1, offset=-300),
        "puts the zero point outside",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_QUANT))
def test_malformed_weight_quant_is_rejected_at_init(case):
    dtype, data, quant, message = BAD_QUANT[case]
    g = fc_graph_with_weight(dtype, (4, 8), data, quant)
    with pytest.raises(ValueError, match="tensor 'w_bad'.*" + message if quant else message):
        qd.verify_payload(g.blob())


def test_quantized_activation_needs_per_tensor_uint_encoding():
    g = GraphBuilder()
    x = g.input("x", np.zeros((2, 4), np.float32))
    xq = g.tensor("x_q", NATIVE, (2, 4), S8, quant=dict(encoding=E.SCALE_OFFSET, scale=0.1))
    g.op("Quantize", [x], [xq])
    g.op("Dequantize", [xq], [g.output("y", (2, 4))])
    with pytest.raises(ValueError, match="tensor 'x_q'.*must be UFIXED_POINT_8 or UFIXED_POINT_16"):
        qd.verify_payload(g.blob())


def test_float_tensor_with_encoding_is_rejected():
    g = GraphBuilder()
    x = g.input("x", np.zeros((2,), np.float32))
    y = g.tensor("y_f", APP_READ, (2,), F32, quant=dict(encoding=E.SCALE_OFFSET, scale=0.1))
    g.op("Relu", [x], [y])
    with pytest.raises(ValueError, match="tensor 'y_f'.*needs a fixed-point data type"):
        qd.verify_payload(g.blob())


def test_float_intermediate_between_quantized_ops():
    """silu as Sigmoid -> FLOAT_32 NATIVE -> Multiply(x_q, sig): one quantization, like the QDQ reference."""
    x = randn(4, 72, seed=16) * 3
    qx = act_quant(x, U16)
    xd = deq(x, qx)
    real = xd / (1 + np.exp(-xd))
    qy = act_quant(real, U16)
    qg = QGraph()
    xi = qg.act("x", x, qx)
    sig = qg.g.native("sig_f", x.shape)
    qg.g.op("Sigmoid", [xi], [sig])
    got = qg.run("ElementWiseMultiply", [xi, sig], qg.out(x.shape, qy))
    assert_within_one_step(got, requantize(real, qy), min_exact=0.995)
