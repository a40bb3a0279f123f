"""Pools and pads: max / avg pool 1d, 2d, 3d (ceil_mode, count_include_pad both ways,
divisor_override, with_indices when only the values are used), adaptive avg / max pool 1d, 2d, 3d
(uniform windows: one pool; global: one reduction; otherwise slices + reductions + concat), and
constant / reflection / replication pads 1d, 2d, 3d as QNN Pad.

Each family is one multi-output module lowered once: fp16 vs eager, 8a8w / 16a8w vs the QDQ
reference (steps of each output's encoding), on the real QNN (context binary, QNN outputs vs
host-engine outputs of the same delegate), the Transpose count of the channel-last graph (none
between a conv, the pool / pad after it and the conv after that), and the support checks'
reasons for what stays on the CPU."""

from __future__ import annotations

from typing import Tuple

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from backends.qualcomm import QuantDtype
from backends.qualcomm.tests.helpers.quant_tester import QuantTester, compare_with_qdq, step_stats
from backends.qualcomm.tests.helpers.runtime import (
    QNN_LOADED,
    assert_qnn_matches_host,
    delegate_output_scales,
    needs_qnn,
    one_delegate_blob,
    payload_on_both_engines,
)
from backends.qualcomm.tests.helpers.tester import QnnTester, randn

A8W8, A16W8 = QuantDtype.use_8a8w, QuantDtype.use_16a8w
nn = torch.nn


class Pool2dFamily(nn.Module):
    """conv -> max pool (ceil_mode) -> conv, and every 2-D pool variant on the first conv's
    (channel-last) output."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        y = torch.relu(self.conv1(x))
        return (
            self.conv2(F.max_pool2d(y, 3, 2, 1, ceil_mode=True)),
            F.max_pool2d(y, 2, return_indices=True)[0],
            F.avg_pool2d(y, 3, 2, 1),  # count_include_pad
            F.avg_pool2d(y, 3, 2, 1, ceil_mode=True, count_include_pad=False),
            F.avg_pool2d(y, 2, ceil_mode=True),  # pad 0: in-bounds divisor
            F.avg_pool2d(y, 3, 2, 1, divisor_override=5),
            F.adaptive_avg_pool2d(y, (3, 3)),  # 7 -> 3, 9 -> 3: one pool
            F.adaptive_avg_pool2d(y, (3, 5)),  # 9 -> 5: slices
            F.adaptive_max_pool2d(y, (2, 5)),  # both axes sliced
            F.adaptive_max_pool2d(y, 1),
        )  # global: ReduceMax


class Pool1dFamily(nn.Module):
    """conv1d -> max_pool1d (ceil_mode) -> conv1d, and the other 1-D pools on the conv's output."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = nn.Conv1d(3, 4, 3, padding=1)
        self.conv2 = nn.Conv1d(4, 4, 3, padding=1)

    def forward(self, x):
        y = self.conv1(x)
        return (
            self.conv2(F.max_pool1d(y, 3, 2, 1, ceil_mode=True)),
            F.avg_pool1d(y, 3, 2, 1, count_include_pad=False),
            F.avg_pool1d(y, 4, 3, ceil_mode=True),
            F.adaptive_avg_pool1d(y, 4),  # 10 -> 4: slices
            F.adaptive_max_pool1d(y, 5),  # 10 -> 5: one pool
            F.adaptive_avg_pool1d(y, 1),
        )  # global: ReduceMean


class Pool3dFamily(nn.Module):
    """conv3d -> avg_pool3d (ceil_mode) -> conv3d, and the other 3-D pools QNN 2.51 runs on the
    conv's output (no PoolMax3d on HTP: adaptive max by slices + ReduceMax only)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = nn.Conv3d(2, 3, 3, padding=1)
        self.conv2 = nn.Conv3d(3, 3, 1)

    def forward(self, x):
        y = self.conv1(x)
        return (
            self.conv2(F.avg_pool3d(y, 2, ceil_mode=True)),
            F.avg_pool3d(y, 3, 2),
            F.avg_pool3d(y, 2, 1, 1, count_include_pad=False),
            F.adaptive_avg_pool3d(y, (2, 1, 3)),  # 4 -> 2, 6 -> 3: one pool
            F.adaptive_max_pool3d(y, (2, 3, 3)),
        )  # 5 -> 3: slices


class PadFamily(nn.Module):
    """conv -> reflection pad -> conv (channel-last), and constant (zero) / reflection /
    replication pads of rank 3, 4 and 5 inputs (reflect / replicate of rank 5: QNN refuses;
    replicate in float graphs: QNN's fp16 EDGE is wrong, reflect instead)."""

    def __init__(self, replicate: bool = True):
        super().__init__()
        torch.manual_seed(0)
        self.mode = "replicate" if replicate else "reflect"
        self.conv1 = nn.Conv2d(3, 4, 3)
        self.conv2 = nn.Conv2d(4, 2, 3)

    def forward(self, x4, x3, x5):
        return (
            self.conv2(F.pad(self.conv1(x4), (1, 1, 2, 1), mode="reflect")),
            F.pad(x3, (1, 2)),
            F.pad(x4, (1, 2, 0, 1)) * 2.0,
            F.pad(x5, (1, 0, 0, 2, 1, 1)),
            F.pad(x3, (2, 1), mode="reflect"),
            F.pad(x5[0], (1, 1, 0, 2, 1, 0), mode="reflect"),
            F.pad(x3, (0, 3), mode=self.mode),
            F.pad(x4, (2, 1, 1, 0), mode=self.mode),
            F.pad(x5[0], (1, 1, 1, 0, 0, 2), mode=self.mode),
        )  # 3-D pads of unbatched input


FAMILIES = {
    "pool2d": (Pool2dFamily, lambda: (randn(2, 3, 7, 9, seed=1),)),
    "pool1d": (Pool1dFamily, lambda: (randn(2, 3, 10, seed=2),)),
    "pool3d": (Pool3dFamily, lambda: (randn(1, 2, 4, 5, 6, seed=3),)),
    "pad": (PadFamily, lambda: (randn(2, 3, 5, 6, seed=4), randn(2, 3, 6, seed=5), randn(1, 2, 3, 4, 5, seed=6))),
}
# QNN op types each family lowers to.
FAMILY_OPS = {
    "pool2d": {
        "PoolMax2d": 2,
        "PoolAvg2d": 5,
        "ReduceMax": 8,
        "ReduceMean": 8,
        "StridedSlice": 15,
        "Concat": 4,
        "ElementWiseMultiply": 1,
    },
    "pool1d": {"PoolMax2d": 2, "PoolAvg2d": 2, "ReduceMean": 5, "StridedSlice": 4, "Concat": 1},
    "pool3d": {"PoolAvg3d": 4, "ReduceMax": 8, "StridedSlice": 8, "Concat": 3},
    "pad": {"Pad": 9},
}
# Transposes of the channel-last graph: one per graph input read channel-last, one per output
# (a global pool's [N,1,1,C] output needs a Reshape only); none between a conv, the pool / pad
# reading it and the conv after that. pool1d: adaptive_max_pool1d cannot be kept whole (torchgen
# reads its (values, indices) as aliasing): unsqueeze + adaptive_max_pool2d + squeeze, one
# Transpose pair more.
FAMILY_TRANSPOSES = {"pool2d": 1 + 9, "pool1d": 1 + 5 + 2, "pool3d": 1 + 5, "pad": 1 + 1}


# ---- fp16 ---------------------------------------------------------------------------------


@pytest.mark.parametrize("family", list(FAMILIES))
def test_fp16_family_matches_eager(family):
    make, inputs = FAMILIES[family]
    module = make(replicate=False) if family == "pad" else make()  # fp16 EDGE: rejected
    tester = QnnTester(module, inputs()).run_and_compare(atol=1e-2, rtol=1e-2)
    tester.check_one_delegate_ops({**FAMILY_OPS[family], "Transpose": FAMILY_TRANSPOSES[family]})


# ---- quantized ------------------------------------------------------------------------------

# 8-bit outputs, (max steps, min exact share) vs the QDQ reference: every pool / pad runs on
# HTP-style requantized inputs (conv -> pool -> conv chains, pools of a requantized conv
# output), so a 1-step difference of the conv output reaches the pool: measured max 1 step
# everywhere, 62.5% exact at worst (pool2d output 7: adaptive avg by slices + ReduceMean).
BOUNDS_8BIT = (1, 0.60)
# pool3d: its convs are Conv3d, which the host engine runs in integers with HTP's requantization
# (kernels/conv_nd_quant.cpp), 1 step from the PT2E reference on a few % of elements; an average
# of such inputs can round 2 steps away: output 2 (avg_pool3d(conv3d), count_include_pad=False)
# measured 95.2% exact, 1 element of 630 at 2 steps.
FAMILY_BOUNDS_8BIT = {"pool3d": (2, 0.60)}


@pytest.mark.parametrize("quant_dtype", [A8W8, A16W8], ids=["8a8w", "16a8w"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_quantized_family_matches_qdq_reference(family, quant_dtype):
    make, inputs = FAMILIES[family]
    tester = QuantTester(make(), inputs(), quant_dtype, per_channel=True)
    tester.lower().check_fully_delegated().to_executorch().run()
    compare_with_qdq(tester, FAMILY_BOUNDS_8BIT.get(family, BOUNDS_8BIT))
    tester.check_one_delegate_ops(FAMILY_OPS[family])


# ---- support checks -------------------------------------------------------------------------


class Rejected(nn.Module):
    def forward(self, x):
        values, indices = F.max_pool2d(x, 2, return_indices=True)
        return (
            F.max_pool2d(x, 2, dilation=2),
            values,
            indices,
            F.avg_pool2d(x, 3, 2, 1, ceil_mode=True),
            F.pad(x, (1, 1, 1, 0), mode="replicate"),
        )  # float: decomposed (fp16 EDGE rejected)


def test_unsupported_pools_and_pads_stay_on_cpu_with_reason():
    tester = QnnTester(Rejected(), (randn(1, 2, 6, 7, seed=7),)).lower()
    reasons = " | ".join(tester.partitioner.rejected_nodes.values())
    for expected in (
        "dilation [2, 2] is not supported (QNN's PoolMax has no dilation parameter)",
        "the indices output is used by",
        "ceil_mode with count_include_pad and padding > 0",
    ):
        assert expected in reasons, reasons
    tester.to_executorch().run().compare(atol=1e-2, rtol=1e-2)  # the delegated pads run in fp16


class AvgPool3dCountingPadding(nn.Module):
    """3-D average pools whose divisor counts the padding: count_include_pad (with ceil_mode that
    leaves no overhang, as upstream's operator test), divisor_override, per-axis kernels."""

    def forward(self, x):
        return (
            F.avg_pool3d(x, 3, 2, 1),
            F.avg_pool3d(x, 4, 2, 1, ceil_mode=True),
            F.avg_pool3d(x, (2, 3, 3), 1, (1, 1, 0), divisor_override=5),
        )


@pytest.mark.parametrize("quant_dtype", [None, A8W8], ids=["fp16", "8a8w"])
def test_avg_pool3d_counting_padding_on_both_engines(qnn_binary, quant_dtype):
    """QNN 2.51's PoolAvg3d counts padding wrong (0.37 off measured), so these pools pad with zeros
    first (Pad) and pool without padding: fp16 against eager, 8a8w against the QDQ reference, QNN
    (x86 HTP emulation) against the host engine."""
    module, inputs = AvgPool3dCountingPadding(), (randn(1, 3, 6, 8, 6, seed=12),)
    if quant_dtype is None:
        tester = QnnTester(module, inputs).lower().check_fully_delegated().to_executorch().run()
        tester.compare(atol=1e-2, rtol=1e-2)
    else:
        tester = QuantTester(module, inputs, quant_dtype).lower().check_fully_delegated().to_executorch().run()
        tester.compare_steps()
    types = tester.payload().op_types()
    assert types.get("Pad") == 3 and types.get("PoolAvg3d") == 3, types
    if QNN_LOADED:
        assert_qnn_matches_host(one_delegate_blob(tester), inputs, module, 2e-3, 1)


def test_quantized_pad_value_must_be_zero():
    class ConstantPad(nn.Module):
        def forward(self, x):
            return F.pad(x, (1, 1), value=0.5) + 1.0

    tester = QuantTester(ConstantPad(), (randn(2, 3, 4, seed=9),), A8W8).lower()
    reasons = list(tester.partitioner.rejected_nodes.values())
    assert any("pad value 0.5 in a quantized graph" in r for r in reasons), reasons
    float_tester = QnnTester(ConstantPad(), (randn(2, 3, 4, seed=9),)).run_and_compare(atol=1e-2, rtol=1e-2)
    assert float_tester.cpu_nodes() == [] and float_tester.payload().op_types().get("Pad") == 1


def test_nan_and_inf_through_max_pool_and_pad():
    """Max pool propagates NaN and inf as torch does; pads copy them."""

    class Edge(nn.Module):
        def forward(self, x):
            return F.max_pool2d(x, 2), F.pad(x, (1, 1, 1, 1), mode="reflect"), F.avg_pool2d(x, 2)

    x = torch.arange(32, dtype=torch.float32).reshape(1, 2, 4, 4) / 7.0
    x[0, 0, 0, 0], x[0, 1, 2, 3], x[0, 1, 0, 0] = float("nan"), float("inf"), float("-inf")
    tester = QnnTester(Edge(), (x,)).lower().to_executorch().run()
    assert tester.cpu_nodes() == []
    for out, ref in zip(tester.outputs, tester.reference_outputs()):
        np.testing.assert_allclose(out, ref, rtol=1e-2, atol=1e-2, equal_nan=True)


# ---- real QNN -------------------------------------------------------------------------------


class RealPoolPadFamily(nn.Module):
    """One small model with every QNN op kind of this file: PoolMax2d / PoolAvg2d (incl. 1-D,
    ceil_mode, count_include_pad both ways, divisor_override), PoolAvg3d, adaptive pools by
    slices, and Pad in each scheme (EDGE quantized only)."""

    def __init__(self, replicate: bool):
        super().__init__()
        self.mode = "replicate" if replicate else "reflect"

    def forward(self, x4, x3, x5):
        return (
            F.max_pool2d(x4, 3, 2, 1, ceil_mode=True),
            F.avg_pool2d(x4, 3, 2, 1),
            F.avg_pool2d(x4, 3, 2, 1, ceil_mode=True, count_include_pad=False),
            F.avg_pool2d(x4, 2, divisor_override=3),
            F.adaptive_avg_pool2d(x4, (2, 3)),
            F.max_pool1d(x3, 3, 2),
            F.adaptive_max_pool1d(x3, 3),
            F.adaptive_max_pool3d(x5, (2, 3, 3)),
            F.avg_pool3d(x5, 2, 1, 1, count_include_pad=False),
            F.pad(x4, (1, 2, 0, 1)) * 2.0,
            F.pad(x3, (2, 1), mode="reflect"),
            F.pad(x5[0], (1, 1, 0, 1, 1, 0), mode=self.mode),
        )


def real_inputs() -> Tuple[torch.Tensor, ...]:
    return randn(1, 3, 5, 7, seed=10), randn(1, 3, 8, seed=11), randn(1, 2, 3, 5, 4, seed=12)


@needs_qnn
@pytest.mark.parametrize("quant_dtype", [None, A8W8, A16W8], ids=["fp16", "8a8w", "16a8w"])
def test_real_qnn_matches_host(real_qnn, quant_dtype):
    """QNN 2.51 HTP emulation vs the host engine, one delegate (so QNN validated and finalized
    every pool and Pad op above in each precision)."""
    inputs = real_inputs()
    module = RealPoolPadFamily(replicate=quant_dtype is not None)  # fp16 EDGE: rejected
    tester = (
        QnnTester(module, inputs) if quant_dtype is None else QuantTester(module, inputs, quant_dtype, per_channel=True)
    ).lower()
    assert tester.cpu_nodes() == [], tester.partitioner.rejected_nodes
    blobs = tester.delegate_blobs()
    assert len(blobs) == 1
    qnn, host = payload_on_both_engines(blobs[0], inputs, module)
    scales = delegate_output_scales(blobs[0])
    for i, (q, h) in enumerate(zip(qnn, host)):
        assert q.shape == h.shape and q.dtype == h.dtype, (i, q.shape, h.shape)
        if quant_dtype is None:
            err = float(np.abs(q - h).max())
            assert err <= 2e-2 * max(1.0, float(np.abs(h).max())), f"output {i}: max |qnn - host| = {err}"
        else:
            stats = step_stats(q, h, scales[i])
            assert stats.max_diff <= (1 if quant_dtype == A8W8 else 64), f"output {i}: {stats}"
