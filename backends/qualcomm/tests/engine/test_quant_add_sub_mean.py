"""Integer ElementWiseAdd / ElementWiseSubtract of the host engine (elementwise_quant.cpp)
against a numpy model of QNN HTP's arithmetic (no QNN needed): every 8-bit input pair,
random 16-bit pairs, saturation, extreme scale ratios, broadcast and static scalars, and
the PT2E-style reference (QNN_DELEGATE_REFERENCE_KERNELS=1) within one step."""

from __future__ import annotations

import numpy as np
import pytest

from backends.qualcomm.tests.helpers.htp_add_sub_mean import (
    Case,
    expected,
    htp_mean,
    mean_cases,
    random_cases,
    run_host,
    run_host_mean,
)


@pytest.mark.parametrize("op", ["ElementWiseAdd", "ElementWiseSubtract"])
def test_every_uint8_pair_matches_htp_model(op):
    rng = np.random.default_rng(0)
    a = np.repeat(np.arange(256), 256)
    b = np.tile(np.arange(256), 256)
    cases = []
    for _ in range(3):
        s = np.exp(rng.uniform(np.log(2e-3), np.log(1e-1), 3)).astype(np.float32)
        o = [int(v) for v in rng.integers(-255, 1, 3)]
        shape = (1, 256, 256)
        cases.append(Case(op, (shape, (s[0], o[0])), (shape, (s[1], o[1])), (shape, (s[2], o[2])), 8))
    outs = run_host(cases, [a, b] * len(cases))
    for case, out in zip(cases, outs):
        np.testing.assert_array_equal(out.ravel(), expected(case, [a, b]).ravel())


@pytest.mark.parametrize("bits", [8, 16])
def test_random_encodings_broadcast_and_scalars_match_htp_model(bits):
    cases, codes = random_cases(np.random.default_rng(bits), bits, 12)
    outs = run_host(cases, list(codes))
    rest = list(codes)
    for case, out in zip(cases, outs):
        want = expected(case, rest)
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("bits", [8, 16])
def test_saturation_and_extreme_scale_ratios(bits):
    qmax = 2**bits - 1
    shape = (1, 1, 64)
    x = np.concatenate([[0, qmax, 1, qmax - 1], np.random.default_rng(3).integers(0, qmax + 1, 60)])
    y = x[::-1].copy()
    encs = [
        ((1.0, 0), (1.0, 0), (1e-3, 0)),  # ratio 1000: saturates, smallest shift
        ((1e-4, -qmax), (1e-4, 0), (1.0, 0)),  # ratio 1e-4: largest shift (cap), output ~ 0
        ((0.05, -(qmax // 2)), (0.05, -(qmax // 2)), (0.05, -(qmax // 2))),  # equal encodings
        ((0.02, 0), (0.3, -qmax), (0.01, -qmax)),  # negative results clamp to 0
    ]
    for op in ("ElementWiseAdd", "ElementWiseSubtract"):
        cases = [Case(op, (shape, ea), (shape, eb), (shape, eo), bits) for ea, eb, eo in encs]
        outs = run_host(cases, [x, y] * len(cases))
        for case, out in zip(cases, outs):
            np.testing.assert_array_equal(out, expected(case, [x, y]))
            assert out.min() >= 0 and out.max() <= qmax


def test_reference_kernels_stay_pt2e_within_one_step(monkeypatch):
    """QNN_DELEGATE_REFERENCE_KERNELS=1 keeps the float reference (dequantize, add, quantize):
    it differs from the HTP arithmetic by at most one step, on a few percent of elements."""
    cases, codes = random_cases(np.random.default_rng(5), 8, 6, shape=(1, 64, 64))
    fast = run_host(cases, list(codes))
    monkeypatch.setenv("QNN_DELEGATE_REFERENCE_KERNELS", "1")
    ref = run_host(cases, list(codes))
    diff = np.concatenate([np.abs(f - r).ravel() for f, r in zip(fast, ref)])
    assert diff.max() <= 1
    assert 0.9 <= (diff == 0).mean() < 1.0


@pytest.mark.parametrize("bits", [8, 16])
def test_spatial_mean_matches_htp_model(bits):
    for x, axes, ei, eo in mean_cases(np.random.default_rng(20 + bits), bits, 6):
        np.testing.assert_array_equal(run_host_mean(x, axes, ei, eo, bits), htp_mean(x, axes, ei, eo, bits))


def test_mean_edges_saturation_and_depth_axis():
    x = np.full((1, 7, 7, 4), 255)
    x[..., 1] = 0
    # all-max / all-min inputs saturate the output range; tiny ratio: largest shift
    for ei, eo in [((0.1, 0), (1e-3, 0)), ((1e-4, -255), (1.0, -3)), ((0.02, -128), (0.02, -128))]:
        np.testing.assert_array_equal(run_host_mean(x, (1, 2), ei, eo, 8), htp_mean(x, (1, 2), ei, eo, 8))
    # a mean over the last (depth) axis is declined: the float reference, within 1 step of the model
    x = np.random.default_rng(1).integers(0, 256, (1, 4, 4, 16))
    host = run_host_mean(x, (3,), (0.02, -100), (0.01, -120), 8)
    ref = np.clip(np.floor((x.sum(3, keepdims=True) - 16 * 100) * (0.02 / (16 * 0.01)) + 120 + 0.5), 0, 255)
    assert np.abs(host - ref).max() <= 1
