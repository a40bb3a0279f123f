"""Engine kernels through `_qnn_delegate.run_payload`, on tiny hand-built payloads.

The payloads are hand-made graphs (payload_builder.GraphBuilder) written by the AOT
payload writer, so these tests check the C++ engine against numpy/torch without the
lowering passes or builders."""

from __future__ import annotations

from typing import Dict, List

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from backends.qualcomm import _qnn_delegate as qd
from backends.qualcomm.tests.helpers.payload_builder import (
    BOOL,
    F32,
    I32,
    NP_TO_QNN,
    U32,
    GraphBuilder,
    conv_params,
    randn,
    scalar,
    torch_conv_nhwc,
    u32,
)


def run_single(
    op_type: str,
    inputs: List[np.ndarray],
    out_shape,
    statics: Dict[int, np.ndarray] = {},
    out_dtype: int = F32,
    **params,
) -> np.ndarray:
    """One op; inputs[i] is a graph input unless i is in `statics` (then STATIC data)."""
    g = GraphBuilder()
    ids, feeds = [], []
    for i, arr in enumerate(inputs):
        if i in statics:
            ids.append(g.static(f"s{i}", statics[i]))
        else:
            ids.append(g.input(f"x{i}", arr))
            feeds.append(arr)
    out = g.output("y", out_shape, out_dtype)
    g.op(op_type, ids, [out], **params)
    return qd.run_payload(g.blob(), feeds)[0]


# ---- kernels ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "k,stride,pad,dil,groups,cin,cout",
    [
        (1, 1, 0, 1, 1, 16, 40),  # pointwise GEMM path
        (3, 1, 1, 1, 1, 3, 8),  # im2col path
        (3, 2, 1, 1, 1, 5, 33),  # stride 2, Cout not a multiple of the panel width
        (3, 1, 2, 2, 1, 4, 6),  # dilation
        (3, 1, 1, 1, 2, 8, 12),  # groups
    ],
)
def test_conv2d(k, stride, pad, dil, groups, cin, cout):
    x = randn(2, 9, 11, cin, seed=1)
    w = randn(k, k, cin // groups, cout, seed=2)
    b = randn(cout, seed=3)
    pads = ((pad, pad), (pad, pad))
    ref = torch_conv_nhwc(x, w, b, (stride, stride), pads, (dil, dil), groups)
    y = run_single(
        "Conv2d",
        [x, w, b],
        ref.shape,
        statics={1: w, 2: b},
        group=scalar(U32, groups),
        **conv_params((stride, stride), pads, (dil, dil)),
    )
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mult,stride", [(1, 1), (1, 2), (2, 1)])
def test_depthwise_conv2d(mult, stride):
    c = 24
    x = randn(1, 10, 10, c, seed=4)
    w = randn(3, 3, 1, c * mult, seed=5)
    b = randn(c * mult, seed=6)
    pads = ((1, 1), (1, 1))
    ref = torch_conv_nhwc(x, w, b, (stride, stride), pads, (1, 1), c)
    y = run_single("DepthWiseConv2d", [x, w, b], ref.shape, statics={1: w, 2: b}, **conv_params((stride, stride), pads))
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("keep_dims", [False, True])
def test_fully_connected(keep_dims):
    x, w, b = randn(2, 3, 20, seed=7), randn(37, 20, seed=8), randn(37, seed=9)
    ref = x @ w.T + b
    shape = ref.shape if keep_dims else (6, 37)
    y = run_single("FullyConnected", [x, w, b], shape, statics={1: w, 2: b}, keep_dims=scalar(BOOL, int(keep_dims)))
    np.testing.assert_allclose(y, ref.reshape(shape), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False)])
def test_matmul_broadcast(ta, tb):
    a, b = randn(2, 1, 5, 7, seed=10), randn(3, 7, 4, seed=11)
    ref = a @ b
    a_in = np.ascontiguousarray(np.swapaxes(a, -1, -2)) if ta else a
    b_in = np.ascontiguousarray(np.swapaxes(b, -1, -2)) if tb else b
    y = run_single(
        "MatMul", [a_in, b_in], ref.shape, transpose_in0=scalar(BOOL, int(ta)), transpose_in1=scalar(BOOL, int(tb))
    )
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


def test_softmax_middle_axis():
    x = randn(2, 5, 3, seed=12)
    y = run_single("Softmax", [x], x.shape, axis=scalar(U32, 1), beta=scalar(F32, 1.0))
    np.testing.assert_allclose(y, torch.softmax(torch.from_numpy(x), 1).numpy(), rtol=1e-5, atol=1e-6)


def test_layer_norm():
    x, gamma, beta = randn(2, 4, 16, seed=13), randn(16, seed=14), randn(16, seed=15)
    ref = F.layer_norm(torch.from_numpy(x), (16,), torch.from_numpy(gamma), torch.from_numpy(beta), 1e-5)
    y = run_single(
        "LayerNorm", [x, gamma, beta], x.shape, statics={1: gamma, 2: beta}, epsilon=scalar(F32, 1e-5), axes=u32([2])
    )
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "op,fn",
    [
        ("ElementWiseAdd", np.add),
        ("ElementWiseSubtract", np.subtract),
        ("ElementWiseMultiply", np.multiply),
        ("ElementWiseDivide", np.divide),
    ],
)
def test_binary_broadcast(op, fn):
    a, b = randn(2, 1, 4, 5, seed=16), randn(3, 1, 5, seed=17) + 3.0
    y = run_single(op, [a, b], (2, 3, 4, 5))
    np.testing.assert_allclose(y, fn(a, b), rtol=1e-6)


@pytest.mark.parametrize("count_pad", [False, True])
def test_pool_avg(count_pad):
    x = randn(1, 7, 8, 6, seed=18)
    xt = torch.from_numpy(x).permute(0, 3, 1, 2)
    ref = F.avg_pool2d(xt, 3, 2, 1, count_include_pad=count_pad).permute(0, 2, 3, 1).numpy()
    y = run_single(
        "PoolAvg2d",
        [x],
        ref.shape,
        filter_size=u32([3, 3]),
        stride=u32([2, 2]),
        pad_amount=("tensor", U32, np.asarray([[1, 1], [1, 1]]), [2, 2]),
        count_pad_for_edges=scalar(BOOL, int(count_pad)),
    )
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


def test_pool_max():
    x = randn(2, 9, 9, 5, seed=19)
    xt = torch.from_numpy(x).permute(0, 3, 1, 2)
    ref = F.max_pool2d(xt, 3, 2, 1).permute(0, 2, 3, 1).numpy()
    y = run_single(
        "PoolMax2d",
        [x],
        ref.shape,
        filter_size=u32([3, 3]),
        stride=u32([2, 2]),
        pad_amount=("tensor", U32, np.asarray([[1, 1], [1, 1]]), [2, 2]),
    )
    np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_transpose(dtype):
    x = (randn(2, 3, 4, 5, seed=20) * 10).astype(dtype)
    y = run_single("Transpose", [x], (4, 2, 5, 3), out_dtype=NP_TO_QNN[np.dtype(dtype)], perm=u32([2, 0, 3, 1]))
    np.testing.assert_array_equal(y, x.transpose(2, 0, 3, 1))


def test_strided_slice():
    x = randn(4, 10, 6, seed=21)
    ranges = ("tensor", I32, np.asarray([[1, 4, 1], [0, 10, 3], [2, 5, 2]]), [3, 3])
    y = run_single("StridedSlice", [x], (3, 4, 2), ranges=ranges)
    np.testing.assert_array_equal(y, x[1:4, 0:10:3, 2:5:2])


@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64])
def test_gather(idx_dtype):
    table, idx = randn(5, 7, 3, seed=22), np.asarray([[4, 0], [2, 2]], dtype=idx_dtype)
    y = run_single("Gather", [table, idx], (5, 2, 2, 3), axis=scalar(I32, 1))
    np.testing.assert_array_equal(y, np.take(table, idx, axis=1))


def test_gather_index_out_of_range_is_an_error():
    table, idx = randn(5, 3, seed=23), np.asarray([1, 5], dtype=np.int64)
    with pytest.raises(ValueError, match="out of range"):
        run_single("Gather", [table, idx], (2, 3), axis=scalar(I32, 0))


# Rsqrt / SquareRoot at the edges of their domain: zeros of both signs, negatives, infinities,
# NaN, subnormals (the engine must not flush them to zero), the largest float.
EDGE_VALUES = np.asarray(
    [0.0, -0.0, -1.0, -1e-30, np.inf, -np.inf, np.nan, 1e-40, 1.4e-45, 1.17549435e-38, 1.0, 4.0, 2.0, 3.4e38],
    np.float32,
)


@pytest.mark.parametrize("op,fn", [("ElementWiseRsqrt", torch.rsqrt), ("ElementWiseSquareRoot", torch.sqrt)])
def test_rsqrt_sqrt_edge_values(op, fn):
    x = EDGE_VALUES.reshape(2, 7)
    y = run_single(op, [x], x.shape)
    ref = fn(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(y, ref)  # NaN where torch has NaN, infinities of the same sign
    signed = ~np.isnan(ref)
    np.testing.assert_array_equal(np.signbit(y[signed]), np.signbit(ref[signed]))  # sqrt(-0) = -0


def test_abs_edge_values():
    x = np.concatenate([EDGE_VALUES, -EDGE_VALUES]).reshape(4, 7)
    y = run_single("ElementWiseAbs", [x], x.shape)
    ref = torch.abs(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(y, ref)
    assert not np.signbit(y[~np.isnan(y)]).any()  # abs(-0) = +0


def run_topk(x: np.ndarray, k: int):
    g = GraphBuilder()
    xi = g.input("x", x)
    dims = list(x.shape[:-1]) + [k]
    values, indices = g.output("values", dims), g.output("indices", dims, I32)
    g.op("TopK", [xi], [values, indices], k=scalar(U32, k))
    return qd.run_payload(g.blob(), [x])


@pytest.mark.parametrize("k", [1, 3, 6])
def test_topk_ties_and_nan(k):
    nan, inf = np.nan, np.inf
    x = np.asarray(
        [
            [1, 3, 3, 2, 3, 0],  # ties: lower index first
            [nan, 5, nan, 5, -inf, inf],  # NaN ranks above +inf (as in torch)
            [2, 2, 2, 2, 2, 2],  # all equal
            [-0.0, 0.0, -1, -0.0, 1e-40, -1e-40],
        ],
        np.float32,
    )  # signed zeros, subnormals
    values, indices = run_topk(x, k)
    ref_values, ref_indices = torch.sort(torch.from_numpy(x), dim=-1, descending=True, stable=True)
    np.testing.assert_array_equal(values, ref_values[:, :k].numpy())
    np.testing.assert_array_equal(indices, ref_indices[:, :k].numpy().astype(np.int32))
    np.testing.assert_array_equal(values, torch.topk(torch.from_numpy(x), k).values.numpy())
    np.testing.assert_array_equal(np.take_along_axis(x, indices.astype(np.int64), -1), values)


def test_topk_random_rows_match_torch():
    x = randn(5, 7, 33, seed=26)
    values, indices = run_topk(x, 9)
    ref = torch.topk(torch.from_numpy(x), 9)
    np.testing.assert_array_equal(values, ref.values.numpy())
    np.testing.assert_array_equal(indices, ref.indices.numpy().astype(np.int32))


def test_fp16_precision_rounds_outputs():
    x = randn(3, 17, seed=24)
    g = GraphBuilder(fp16=True)
    xi, yo = g.input("x", x), g.output("y", x.shape)
    g.op("Relu", [xi], [yo])
    y = qd.run_payload(g.blob(), [x])[0]
    np.testing.assert_array_equal(y, np.maximum(x.astype(np.float16).astype(np.float32), 0))


def run_gelu(x: np.ndarray, fp16: bool) -> np.ndarray:
    g = GraphBuilder(fp16=fp16)
    xi, yo = g.input("x", x), g.output("y", x.shape)
    g.op("Gelu", [xi], [yo])
    return qd.run_payload(g.blob(), [x])[0]


@pytest.mark.parametrize("fp16", [False, True])
def test_unary_split_over_the_pool_equals_serial(fp16):
    """A unary op large enough to be split over the pool (chunks of 512 per thread, the last
    one partial) computes every element alone: each row equals the same row run by itself
    (small: one thread), bit for bit, and Gelu's erf form matches torch's."""
    x = randn(37, 1031, seed=25) * 3
    y = run_gelu(x, fp16)
    for r in (0, 17, 36):
        np.testing.assert_array_equal(y[r : r + 1], run_gelu(x[r : r + 1].copy(), fp16))
    # fp16: the graph input is rounded to half too
    t = torch.from_numpy(x.astype(np.float16).astype(np.float32) if fp16 else x)
    ref = (0.5 * t * (1.0 + torch.erf(t * np.float32(0.70710678118654752)))).numpy()
    if fp16:
        ref = ref.astype(np.float16).astype(np.float32)
    np.testing.assert_allclose(y, ref, rtol=1e-3 if fp16 else 2e-6, atol=1e-6)
