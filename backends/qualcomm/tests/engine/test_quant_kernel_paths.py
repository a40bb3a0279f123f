"""The integer Conv2d / FullyConnected / DepthWiseConv2d kernels give the same integers on
every path: the SIMD one the machine picks (AVX2, or AVX-512 VNNI for uint8) split over the
thread pool, and the plain C++ loops forced with QNN_HOST_ENGINE_KERNELS=plain. Shapes are
large enough to be split over threads; each path must also equal HTP's numpy model. Each run
also reads the code path the kernel picked (Kernel::path, "<mac>/<requant>", through the test
hooks), so a silent fallback to the plain loops or to scalar requantization fails the test.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from backends.qualcomm.tests.helpers.htp_requant_reference import htp_requantize, htp_requantize16
from backends.qualcomm.tests.helpers.payload_builder import F32, U32, randn, scalar, u32
from backends.qualcomm.tests.helpers.quant_reference import (
    U8,
    U16,
    QGraph,
    act_quant,
    conv_ref,
    dequantize,
    gen_bool,
    int_conv,
    pack_bits,
    quantize,
    weight_dtype,
    weight_quant,
)
from backends.qualcomm.tests.helpers.runtime import test_hooks

ACT = {"u8": U8, "u16": U16}
QMAX_OF = {U8: 255, U16: 65535}
# The AVX2 path of each activation type: int16-pair vpmaddwd, requantization in 8 int32 lanes
# (uint8) or with 64-bit products (uint16: 23 fractional bits).
LANES = {"u8": "avx2/lanes8", "u16": "avx2/lanes64"}


def use_kernel_path(monkeypatch, path: str) -> None:
    """Kernels created from now on take `path`: "default" (what the CPU has), "avx2" or "plain"."""
    if path == "default":
        monkeypatch.delenv("QNN_HOST_ENGINE_KERNELS", raising=False)
    else:
        monkeypatch.setenv("QNN_HOST_ENGINE_KERNELS", path)


def _run_paths(monkeypatch, build, simd_path):
    """build() -> (integer output, kernel path), once per path; asserts the kernel path:
    `simd_path` ("avx2/lanes8", ...) for the default and the avx2 runs on an AVX2 machine
    (default: "vnni/<same requantization>" instead where `vnni` applies: uint8 x int8),
    "plain/scalar" when forced."""
    features = test_hooks().kernel_features()
    outputs = {}
    for path in ("default", "avx2", "plain"):
        use_kernel_path(monkeypatch, path)
        outputs[path], ran = build()
        want = simd_path if features["avx2"] and path != "plain" else "plain/scalar"
        if path == "default" and features["vnni"] and want.startswith("avx2") and ran.startswith("vnni"):
            want = want.replace("avx2/", "vnni/")
        assert ran == want, f"QNN_HOST_ENGINE_KERNELS={path}: ran {ran}, expected {want}"
    return outputs


def _check(outputs, want):
    for path, got in outputs.items():
        np.testing.assert_array_equal(got, want, err_msg=f"path {path}")


def _want(act, acc, qx, wq, w_scale, qy, bias, unshifted=False):
    if act == "u8":
        return htp_requantize(acc, qx["scale"], w_scale, qy["scale"], -qy["offset"], bias, unshifted=unshifted)
    return htp_requantize16(acc, qx["scale"], -qx["offset"], wq_sum(wq), w_scale, qy["scale"], -qy["offset"], bias)


def _weighted(op, x, qx, wq, wparams, b, shape, qy, **params):
    """Runs one weighted op (8-bit weights wq, float bias b) on the quantized x; returns the
    integer output and the op kernel's code path."""
    qg = QGraph()
    xi = qg.act("x", x, qx)
    wi = qg.static_q("w", pack_bits(wq, 8), wq.shape, weight_dtype(8), wparams)
    out = qg.run(op, [xi, wi, qg.static_f("b", b)], qg.out(shape, qy), **params)
    return out, qg.kernel_path(op)


def wq_sum(wq):
    return wq.reshape(-1, wq.shape[-1]).sum(0) if wq.ndim == 4 else wq.sum(1)


@pytest.mark.parametrize("act,k", [("u8", 99), ("u16", 99), ("u16", 700)])
def test_fully_connected_paths_bit_exact(monkeypatch, act, k):
    """k 700: the uint16 vector requantization sums three 256-k int32 blocks as hi / lo."""
    x, w, b = randn(67, k, seed=21), randn(83, k, seed=22) * 0.2, randn(83, seed=23)
    qx = act_quant(x, ACT[act])
    wq, wparams, wscale = weight_quant(w, 0, 8)
    real = dequantize(quantize(x, qx), qx).astype(np.float64) @ (wq * wscale).T.astype(np.float64) + b
    qy = act_quant(real, ACT[act])

    def build():
        return _weighted("FullyConnected", x, qx, wq, wparams, b, real.shape, qy, keep_dims=scalar(gen_bool(), 0))

    outputs = _run_paths(monkeypatch, build, LANES[act])
    acc = (quantize(x, qx) + qx["offset"]) @ wq.T
    _check(outputs, _want(act, acc, qx, wq, wscale[:, 0], qy, b.astype(np.float32)))


@pytest.mark.parametrize("act,k,stride", [("u8", 3, 2), ("u8", 1, 1), ("u16", 3, 1), ("u16", 1, 1)])
def test_conv2d_paths_bit_exact(monkeypatch, act, k, stride):
    cin, cout, pad = 19, 37, k // 2
    x, w, b = randn(1, 23, 21, cin, seed=24), randn(k, k, cin, cout, seed=25) * 0.2, randn(cout, seed=26)
    qx = act_quant(x, ACT[act])
    wq, wparams, wscale = weight_quant(w, 3, 8)
    real = conv_ref(dequantize(quantize(x, qx), qx), wq * wscale, b, stride, pad, 1)
    qy = act_quant(real, ACT[act])

    def build():
        return _weighted(
            "Conv2d",
            x,
            qx,
            wq,
            wparams,
            b,
            real.shape,
            qy,
            stride=u32([stride, stride]),
            pad_amount=u32([[pad, pad], [pad, pad]]),
            dilation=u32([1, 1]),
            group=scalar(U32, 1),
        )

    outputs = _run_paths(monkeypatch, build, LANES[act])
    acc = int_conv(quantize(x, qx) + qx["offset"], wq, stride, pad, 1)
    _check(outputs, _want(act, acc, qx, wq, wscale[0, 0, 0], qy, b.astype(np.float32)))


@pytest.mark.parametrize("c", [40, 56])
@pytest.mark.parametrize("act,stride", [("u8", 1), ("u16", 1), ("u8", 2), ("u16", 2)])
def test_depthwise_threaded_bit_exact(monkeypatch, act, stride, c):
    """uint16 and strided uint8 (HTP's unshifted multiplier) requantize in 64-bit lanes.
    Channels: 40 = one 32-channel block (AVX-512 VNNI) + an 8-channel scalar tail; 56 adds a
    16-channel AVX2 block between them (on AVX2 alone: 16-channel blocks + tail)."""
    x, w, b = randn(1, 30, 28, c, seed=27), randn(3, 3, 1, c, seed=28) * 0.3, randn(c, seed=29)
    qx = act_quant(x, ACT[act])
    wq, wparams, wscale = weight_quant(w, 3, 8)
    real = conv_ref(dequantize(quantize(x, qx), qx), wq * wscale, b, stride, 1, c)
    qy = act_quant(real, ACT[act])

    def build():
        return _weighted(
            "DepthWiseConv2d",
            x,
            qx,
            wq,
            wparams,
            b,
            real.shape,
            qy,
            stride=u32([stride, stride]),
            pad_amount=u32([[1, 1], [1, 1]]),
            dilation=u32([1, 1]),
        )

    # strided uint8: HTP's unshifted multiplier needs the 64-bit-product lanes
    outputs = _run_paths(monkeypatch, build, LANES["u16" if stride > 1 else act])
    acc = int_conv(quantize(x, qx) + qx["offset"], wq, stride, 1, c)
    _check(outputs, _want(act, acc, qx, wq, wscale[0, 0, 0], qy, b.astype(np.float32), unshifted=stride > 1))


@pytest.mark.parametrize("act", ["u8", "u16"])
def test_softmax_fused_equals_wrapper(monkeypatch, act):
    """Quantized Softmax over the last axis, fused per row and split over the pool, gives the
    codes of the dequantize -> float Softmax -> requantize wrapper (QNN_DELEGATE_REFERENCE_KERNELS=1),
    with exp in vector lanes and with std::exp (QNN_HOST_ENGINE_KERNELS=plain)."""
    x = randn(2, 6, 50, 77, seed=33) * 3
    qx = act_quant(x, ACT[act])
    xr = dequantize(quantize(x, qx), qx).astype(np.float64)
    e = np.exp(xr - xr.max(-1, keepdims=True))
    real = e / e.sum(-1, keepdims=True)
    qy = act_quant(real, ACT[act])

    def build():
        qg = QGraph()
        xi = qg.act("x", x, qx)
        out = qg.run("Softmax", [xi], qg.out(real.shape, qy), axis=scalar(U32, 3), beta=scalar(F32, 1.0))
        return out, qg.kernel_path("Softmax")

    lanes = "avx2/exp-lanes" if test_hooks().kernel_features()["avx2"] else "plain/exp-scalar"
    monkeypatch.delenv("QNN_DELEGATE_REFERENCE_KERNELS", raising=False)
    monkeypatch.delenv("QNN_HOST_ENGINE_KERNELS", raising=False)
    fused, ran = build()
    assert ran == lanes
    monkeypatch.setenv("QNN_HOST_ENGINE_KERNELS", "plain")  # std::exp per element
    fused_plain, ran = build()
    assert ran == "plain/exp-scalar"
    monkeypatch.delenv("QNN_HOST_ENGINE_KERNELS")
    monkeypatch.setenv("QNN_DELEGATE_REFERENCE_KERNELS", "1")
    wrapped, ran = build()
    assert ran == "dequant+" + lanes
    np.testing.assert_array_equal(fused, wrapped)
    np.testing.assert_array_equal(fused_plain, wrapped)
    want = np.clip(np.rint(real / np.float64(np.float32(qy["scale"]))) - qy["offset"], 0, 255 if act == "u8" else 65535)
    assert np.abs(fused.astype(np.int64) - want).max() <= 1


@pytest.mark.parametrize("act,tb", [("u8", True), ("u16", True), ("u16", False)])
@pytest.mark.parametrize("path", ["default", "avx2", "plain"])
def test_matmul_batched_threaded_exact(monkeypatch, act, tb, path):
    """Batched MatMul split over the pool: uint8 equals HTP's model, uint16 the exact
    accumulator times s_a s_b / s_out rounded half even (the double accumulation is exact),
    with 4 x 8 register tiles (path "blocked"; 41 rows and 50 columns leave tails), with the
    AVX-512 4 x 16 tiles and lane requantization where the CPU has AVX-512 ("blocked-avx512",
    the 50 % 16 columns masked) and with the plain row loop (QNN_HOST_ENGINE_KERNELS=plain)."""
    use_kernel_path(monkeypatch, path)
    blocked = "blocked-avx512" if path == "default" and test_hooks().kernel_features()["avx512"] else "blocked"
    a, b = randn(2, 3, 41, 24, seed=31), randn(2, 3, 24, 50, seed=32)
    qa, qb = act_quant(a, ACT[act]), act_quant(b, ACT[act])
    real = dequantize(quantize(a, qa), qa).astype(np.float64) @ dequantize(quantize(b, qb), qb).astype(np.float64)
    qy = act_quant(real, ACT[act])
    qg = QGraph()
    ai = qg.act("a", a, qa)
    bi = qg.act("b", np.swapaxes(b, -1, -2).copy() if tb else b, qb)
    got = qg.run("MatMul", [ai, bi], qg.out(real.shape, qy), transpose_in1=scalar(gen_bool(), int(tb)))
    assert qg.kernel_path("MatMul") == ("plain" if path == "plain" else blocked)
    np.testing.assert_array_equal(got, _matmul_want(a, b, qa, qb, qy))


def _matmul_want(a, b, qa, qb, qy):
    """uint8 x uint8 -> uint8: HTP's integer requantization; otherwise the exact accumulator times
    s_a s_b / s_out rounded half even."""
    acc = (quantize(a, qa).astype(np.int64) + qa["offset"]) @ (quantize(b, qb).astype(np.int64) + qb["offset"])
    if qa["dtype"] == qb["dtype"] == qy["dtype"] == U8:
        return htp_requantize(acc, qa["scale"], np.float32(qb["scale"]), qy["scale"], -qy["offset"])
    m = np.float64(np.float32(qa["scale"])) * np.float64(np.float32(qb["scale"])) / np.float64(np.float32(qy["scale"]))
    return np.clip(np.rint(acc * m) - qy["offset"], 0, QMAX_OF[qy["dtype"]])


@pytest.mark.parametrize(
    "act_a,act_b,tb,rows",
    [
        ("u16", "u8", False, 3),
        ("u16", "u8", False, 1),
        ("u8", "u8", False, 4),
        ("u16", "u16", False, 2),
        ("u16", "u8", True, 3),
    ],
)
@pytest.mark.parametrize("path", ["default", "avx2", "plain"])
def test_matmul_few_rows_exact(monkeypatch, act_a, act_b, tb, rows, path):
    """Decode attention's shape (3 query heads per KV head: 3 rows against a 16-bit query and an
    8-bit cache): with M <= 4 rows and B's rows contiguous the AVX-512 tile reads B in place
    ("direct-avx512"); the same integers as the other paths and the model. 70 columns: a masked
    tail of 6."""
    use_kernel_path(monkeypatch, path)
    avx512 = path == "default" and test_hooks().kernel_features()["avx512"]
    want_path = (
        "plain" if path == "plain" else ("blocked" if not avx512 else ("blocked-avx512" if tb else "direct-avx512"))
    )
    a, b = randn(3, rows, 64, seed=33), randn(3, 64, 70, seed=34)
    qa, qb = act_quant(a, ACT[act_a]), act_quant(b, ACT[act_b])
    real = dequantize(quantize(a, qa), qa).astype(np.float64) @ dequantize(quantize(b, qb), qb).astype(np.float64)
    qy = act_quant(real, ACT[act_a])
    qg = QGraph()
    ai = qg.act("a", a, qa)
    bi = qg.act("b", np.swapaxes(b, -1, -2).copy() if tb else b, qb)
    got = qg.run("MatMul", [ai, bi], qg.out(real.shape, qy), transpose_in1=scalar(gen_bool(), int(tb)))
    assert qg.kernel_path("MatMul") == want_path
    np.testing.assert_array_equal(got, _matmul_want(a, b, qa, qb, qy))


@pytest.mark.parametrize("op", ["Gelu", "Sigmoid", "Tanh"])
def test_uint16_unary_table_equals_wrapper(monkeypatch, op):
    """A uint16 unary op without a stored QNN table runs as a 65536-code table built at init
    from the float kernel (path "lut"), with the codes of the dequantize -> float op ->
    quantize wrapper (QNN_DELEGATE_REFERENCE_KERNELS=1) on every input code."""
    x = np.linspace(-6, 6, 65536 * 2, dtype=np.float32).reshape(2, 256, 256)
    qx = act_quant(x, U16)
    xt = torch.from_numpy(x.astype(np.float64))
    ref = {"Gelu": torch.nn.functional.gelu, "Sigmoid": torch.sigmoid, "Tanh": torch.tanh}[op](xt).numpy()
    qy = act_quant(ref, U16)

    def build():
        qg = QGraph()
        out = qg.run(op, [qg.act("x", x, qx)], qg.out(x.shape, qy))
        return out, qg.kernel_path(op)

    monkeypatch.delenv("QNN_DELEGATE_REFERENCE_KERNELS", raising=False)
    table, ran = build()
    assert ran == "lut"
    monkeypatch.setenv("QNN_DELEGATE_REFERENCE_KERNELS", "1")
    wrapped, ran = build()
    assert ran.startswith("dequant+")
    np.testing.assert_array_equal(table, wrapped)
    assert len(np.unique(quantize(x, qx))) > 60000  # (nearly) every input code is looked up
    # vs float64 on the dequantized input: the input's own step moves the output too
    xr = torch.from_numpy(dequantize(quantize(x, qx), qx).astype(np.float64))
    want = {"Gelu": torch.nn.functional.gelu, "Sigmoid": torch.sigmoid, "Tanh": torch.tanh}[op](xr).numpy()
    want = np.clip(np.rint(want / np.float64(np.float32(qy["scale"]))) - qy["offset"], 0, 65535)
    assert np.abs(table - want).max() <= 1


def _quantize_inputs(n: int = 1003) -> np.ndarray:
    """Random values, exact halves of a step (ties), NaN, +-inf and values far outside the range;
    n % 8 = 3 so that the vector loops' scalar tails run too."""
    rng = np.random.default_rng(31)
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    x[::7] = (np.rint(x[::7] / 0.05) + 0.5) * 0.05
    x[5], x[11], x[17], x[23], x[29] = np.nan, np.inf, -np.inf, 1e30, -1e30
    return x


def _codes_reference(x: np.ndarray, q: dict, htp: bool) -> np.ndarray:
    """quantize() with the engine's answers for NaN (qmin) and +-inf (the range's ends)."""
    with np.errstate(over="ignore"):  # 1e30 / scale is inf in float16, as in the engine
        codes = quantize(np.nan_to_num(x, nan=0.0, posinf=1e30, neginf=-1e30), q, htp=htp)
    codes[np.isnan(x)] = 0
    return codes


@pytest.mark.parametrize("src,dst", [("u8", "u8"), ("u8", "u16"), ("u16", "u8"), ("u16", "u16")])
def test_quantize_convert_paths_bit_exact(monkeypatch, src, dst):
    """Quantize (uint8: HTP's float16 rounding, halves away from zero; uint16: nearest even) and
    Convert give the same codes on the AVX2 path and the plain loops, equal to the numpy model."""
    x = _quantize_inputs()
    finite = x[np.abs(x) < 100]
    qin, qout = act_quant(finite, ACT[src]), act_quant(finite * 0.7 + 0.2, ACT[dst])
    outputs, quantized = {}, {}
    for path in ("default", "avx2", "plain"):
        use_kernel_path(monkeypatch, path)
        qg = QGraph()
        outputs[path] = qg.run("Convert", [qg.act("x", x, qin)], qg.out(x.shape, qout))
        want = "avx2" if test_hooks().kernel_features()["avx2"] and path != "plain" else "plain"
        assert (qg.kernel_path("Quantize"), qg.kernel_path("Convert")) == (want, want), path
        same = QGraph()  # Convert to the input's own encoding: the Quantize codes unchanged
        quantized[path] = same.run("Convert", [same.act("x", x, qin)], same.out(x.shape, qin))
    codes_in = _codes_reference(x, qin, htp=ACT[src] == U8)
    _check(quantized, codes_in)
    _check(outputs, quantize(dequantize(codes_in, qin), qout, htp=False))


@pytest.mark.parametrize("op", ["ElementWiseAdd", "ElementWiseSubtract"])
@pytest.mark.parametrize("b_shape", [(3, 5, 70), (1, 5, 70), (3, 5, 1), (1, 1, 1)])
def test_add_sub_16bit_paths_bit_exact(monkeypatch, op, b_shape):
    """16-bit add / subtract (HTP's integer scheme) on the AVX-512 rows ("avx512", 8 values per
    step in exact doubles) and the int64 loop ("plain", also QNN_HOST_ENGINE_KERNELS=avx2):
    equal to the numpy model of QNN HTP, full-size, broadcast rows (the attention mask's
    [1, N, C] against [heads, N, C]), broadcast columns and a scalar; 70 = 8 * 8 + 6 tail."""
    from backends.qualcomm.tests.helpers.htp_add_sub_mean import htp_add_sub

    a, b = randn(3, 5, 70, seed=41) * 4, randn(*b_shape, seed=42) * 2
    qa, qb = act_quant(a, U16), act_quant(b, U16)
    real = dequantize(quantize(a, qa), qa) + (-1 if op == "ElementWiseSubtract" else 1) * dequantize(
        quantize(b, qb), qb
    )
    qy = act_quant(real, U16)
    outputs = {}
    for path in ("default", "avx2", "plain"):
        use_kernel_path(monkeypatch, path)
        qg = QGraph()
        outputs[path] = qg.run(op, [qg.act("a", a, qa), qg.act("b", b, qb)], qg.out(real.shape, qy))
        avx512 = path == "default" and test_hooks().kernel_features()["avx512"]
        assert qg.kernel_path(op) == ("avx512" if avx512 else "plain"), path
    enc = [(q["scale"], q["offset"]) for q in (qa, qb, qy)]
    want = htp_add_sub(quantize(a, qa), quantize(b, qb), *enc, subtract=op == "ElementWiseSubtract", bits=16)
    _check(outputs, want)


@pytest.mark.parametrize("act", ["u8", "u16"])
def test_dequantize_wrapped_multiply_paths_bit_exact(monkeypatch, act):
    """A quantized op run by its float kernel between dequantize_any and quantize_any (Multiply):
    the AVX2 (de)quantization loops give the plain loops' bits and the float32 model's;
    1003 values leave a tail of 3."""
    a, b = randn(1003, seed=43) * 3, randn(1003, seed=44)
    qa, qb = act_quant(a, ACT[act]), act_quant(b, ACT[act])
    real = dequantize(quantize(a, qa), qa) * dequantize(quantize(b, qb), qb)
    qy = act_quant(real, ACT[act])
    outputs = {}
    for path in ("default", "plain"):
        use_kernel_path(monkeypatch, path)
        qg = QGraph()
        outputs[path] = qg.run("ElementWiseMultiply", [qg.act("a", a, qa), qg.act("b", b, qb)], qg.out(real.shape, qy))
        assert qg.kernel_path("ElementWiseMultiply").startswith("dequant+"), path
    _check(outputs, quantize(real.astype(np.float32), qy, htp=False))
