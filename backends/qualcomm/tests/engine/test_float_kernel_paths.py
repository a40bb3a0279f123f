"""The float Conv2d / DepthWiseConv2d / FullyConnected kernels give the same bits on every path:
the one the engine picks for this CPU (AVX-512 / AVX2 GEMM tiles, register-blocked depthwise,
split over the thread pool) and the narrower ones forced with QNN_HOST_ENGINE_KERNELS=avx2 /
plain, in float32 and in fp16 precision (outputs rounded to half), and with a Relu / ReluMinMax
fused into its producer or not.
Each run reads the code path the kernel picked (Kernel::path, through the test hooks), so a
silent fallback fails the test; each path is also checked against torch.
"""

from __future__ import annotations

import numpy as np
import pytest

from backends.qualcomm import _qnn_delegate as qd
from backends.qualcomm.tests.helpers.payload_builder import (
    BOOL,
    F32,
    U32,
    GraphBuilder,
    conv_params,
    randn,
    scalar,
    torch_conv_nhwc,
)
from backends.qualcomm.tests.helpers.runtime import test_hooks


def _run(op: str, x, w, b, out_shape, fp16: bool, **params):
    """One weighted op (static w, b) -> (output, the op kernel's path)."""
    g = GraphBuilder(fp16=fp16)
    ids = [g.input("x", x), g.static("w", w), g.static("b", b)]
    y = g.output("y", out_shape)
    g.op(op, ids, [y], **params)
    blob = g.blob()
    paths = [p for _, t, p in test_hooks().kernel_paths(blob) if t == op]
    return qd.run_payload(blob, [x])[0], paths[0]


def _paths(monkeypatch, run, fast: str):
    """run() once per path -> {path: output}; asserts the kernel path of each run."""
    outputs = {}
    for path in ("default", "plain"):
        if path == "default":
            monkeypatch.delenv("QNN_HOST_ENGINE_KERNELS", raising=False)
        else:
            monkeypatch.setenv("QNN_HOST_ENGINE_KERNELS", "plain")
        outputs[path], ran = run()
        want = fast if path == "default" else "plain"
        assert ran == want, f"QNN_HOST_ENGINE_KERNELS={path}: ran {ran}, expected {want}"
    return outputs


@pytest.mark.parametrize("fp16", [False, True])
@pytest.mark.parametrize("c,stride,k", [(72, 1, 3), (45, 2, 3), (96, 1, 5), (7, 1, 3)])
def test_depthwise_paths_bit_exact(monkeypatch, fp16, c, stride, k):
    """c 72 = 2 blocks of 32 + one vector of 8; 45 and 7 end in scalar channels."""
    pad = k // 2
    x, w, b = randn(1, 29, 31, c, seed=41), randn(k, k, 1, c, seed=42), randn(c, seed=43)
    pads = ((pad, pad), (pad, pad))
    h = (lambda a: a.astype(np.float16).astype(np.float32)) if fp16 else (lambda a: a)
    ref = torch_conv_nhwc(h(x), h(w), h(b), (stride, stride), pads, (1, 1), c)

    def run():
        return _run("DepthWiseConv2d", x, w, b, ref.shape, fp16, **conv_params((stride, stride), pads))

    outputs = _paths(monkeypatch, run, "blocked")
    np.testing.assert_array_equal(outputs["default"], outputs["plain"])
    tol = 1e-3 if fp16 else 1e-5  # fp16: the output's own rounding
    np.testing.assert_allclose(outputs["default"], ref, rtol=tol, atol=tol)
    if fp16:
        y = outputs["default"]
        np.testing.assert_array_equal(y, y.astype(np.float16).astype(np.float32))


@pytest.mark.parametrize("fp16", [False, True])
@pytest.mark.parametrize("op,k,cin", [("Conv2d", 3, 13), ("Conv2d", 1, 40), ("FullyConnected", 0, 61)])
def test_gemm_paths_bit_exact(monkeypatch, fp16, op, k, cin):
    """Float Conv2d (im2col and pointwise) and FullyConnected run the packed GEMM on the widest
    path this CPU has ("avx512": 32-column panels, "avx2": 16, "plain": one output at a time);
    QNN_HOST_ENGINE_KERNELS=avx2 / plain force the narrower ones. 37 output channels leave a
    partial panel on each path; every path gives the same bits."""
    features = test_hooks().kernel_features()
    best = "avx512" if features["avx512"] else ("avx2" if features["avx2"] else "plain")
    if op == "FullyConnected":
        x, w, b = randn(45, cin, seed=61), randn(37, cin, seed=62), randn(37, seed=63)
        shape, params = (45, 37), dict(keep_dims=scalar(BOOL, 0))
    else:
        x, w, b = randn(1, 17, 19, cin, seed=61), randn(k, k, cin, 37, seed=62), randn(37, seed=63)
        pad = k // 2
        shape, params = (1, 17, 19, 37), dict(group=scalar(U32, 1), **conv_params((1, 1), ((pad, pad), (pad, pad))))
    outputs = {}
    for env, want in (("", best), ("avx2", "avx2" if best != "plain" else "plain"), ("plain", "plain")):
        if env:
            monkeypatch.setenv("QNN_HOST_ENGINE_KERNELS", env)
        else:
            monkeypatch.delenv("QNN_HOST_ENGINE_KERNELS", raising=False)
        outputs[env], ran = _run(op, x, w, b, shape, fp16, **params)
        assert ran == want, f"QNN_HOST_ENGINE_KERNELS={env}: ran {ran}, expected {want}"
    for env in ("avx2", "plain"):
        np.testing.assert_array_equal(outputs[env].view(np.uint32), outputs[""].view(np.uint32), err_msg=env)


def _producer(op: str, x: np.ndarray):
    """(w, b, out shape, params) of a float producer op on x."""
    c = x.shape[-1]
    if op == "FullyConnected":
        w, b = randn(37, c, seed=52), randn(37, seed=53)
        return w, b, (x.shape[0], 37), dict(keep_dims=scalar(BOOL, 0))
    pads = ((1, 1), (1, 1))
    if op == "DepthWiseConv2d":
        w, b = randn(3, 3, 1, c, seed=52), randn(c, seed=53)
        return w, b, x.shape, conv_params((1, 1), pads)
    w, b = randn(3, 3, c, 21, seed=52), randn(21, seed=53)
    return w, b, x.shape[:3] + (21,), dict(group=scalar(U32, 1), **conv_params((1, 1), pads))


def _act_graph(op: str, act: str, x: np.ndarray, fp16: bool, dump: bool):
    """op -> act; dump: the op's output is also a graph output (APP_READ: not fused)."""
    w, b, shape, params = _producer(op, x)
    g = GraphBuilder(fp16=fp16)
    ids = [g.input("x", x), g.static("w", w), g.static("b", b)]
    mid = g.output("mid", shape) if dump else g.native("mid", shape)
    y = g.output("y", shape)
    g.op(op, ids, [mid], **params)
    act_params = dict(min_value=scalar(F32, 0.25), max_value=scalar(F32, 1.7)) if act == "ReluMinMax" else {}
    g.op(act, [mid], [y], **act_params)
    blob = g.blob()
    paths = {t: p for _, t, p in test_hooks().kernel_paths(blob)}
    return qd.run_payload(blob, [x])[-1], paths[act]


@pytest.mark.parametrize("fp16", [False, True])
@pytest.mark.parametrize("act", ["Relu", "ReluMinMax"])
@pytest.mark.parametrize("op", ["Conv2d", "DepthWiseConv2d", "FullyConnected"])
def test_fused_float_activation_bit_exact(fp16, act, op):
    """A float producer whose output feeds only a Relu / ReluMinMax applies it as it stores
    (the activation op's step runs nothing: path "fused"); the output equals the unfused pair
    bit for bit, NaN included (ReluMinMax keeps it, Relu gives 0)."""
    x = randn(19, 40, seed=51) if op == "FullyConnected" else randn(1, 9, 11, 40, seed=51)
    x.reshape(-1)[[3, 77, 301]] = np.nan
    fused, ran = _act_graph(op, act, x, fp16, dump=False)
    assert ran == "fused"
    unfused, ran = _act_graph(op, act, x, fp16, dump=True)
    assert ran == "plain"
    assert np.isnan(unfused).any() == (act == "ReluMinMax")
    np.testing.assert_array_equal(fused.view(np.uint32), unfused.view(np.uint32))
