"""3-D max pools as two PoolMax2d passes (QNN 2.51's HTP has no PoolMax3d): fp16 against eager,
exact on distinct values, 8a8w / 16a8w against the QDQ reference, full delegation with no
Transpose between a conv, the pool and the conv after it; dilation and used indices stay on the
CPU with a reason. On the real QNN: ops/test_grid_sample.py (RealVision)."""

from __future__ import annotations

from typing import Tuple

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from backends.qualcomm import QuantDtype
from backends.qualcomm.tests.helpers.quant_tester import QuantTester
from backends.qualcomm.tests.helpers.tester import QnnTester, randn

A8W8, A16W8 = QuantDtype.use_8a8w, QuantDtype.use_16a8w

nn = torch.nn


class MaxPool3dFamily(nn.Module):
    """conv3d -> max_pool3d (ceil_mode) -> conv3d, and 3-D max pools with per-axis kernel /
    stride / padding, ceil_mode with padding, return_indices (values used), and a uniform
    adaptive max pool, all on the first conv's (channel-last) output."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = nn.Conv3d(2, 3, 3, padding=1)
        self.conv2 = nn.Conv3d(3, 3, 1)

    def forward(self, x):
        y = self.conv1(x)
        return (
            self.conv2(F.max_pool3d(y, 2, ceil_mode=True)),
            F.max_pool3d(y, (3, 2, 2), (2, 1, 2), (1, 1, 0)),
            F.max_pool3d(y, 3, 2, 1, ceil_mode=True),
            F.max_pool3d(y, 2, return_indices=True)[0],
            F.adaptive_max_pool3d(y, (2, 5, 3)),
        )  # uniform: one pool


def pool_inputs() -> Tuple[torch.Tensor]:
    return (randn(1, 2, 4, 5, 6, seed=3),)


# Each 3-D max pool: PoolMax2d over (H, W), then PoolMax2d over D; Reshapes around them.
POOL_OPS = {"PoolMax2d": 10, "Conv3d": 2}

# One Transpose for the input and one per output; none between conv1, the pool and conv2.
POOL_TRANSPOSES = 1 + 5


def test_max_pool3d_fp16_matches_eager():
    tester = QnnTester(MaxPool3dFamily(), pool_inputs()).run_and_compare(atol=1e-2, rtol=1e-2)
    assert tester.cpu_nodes() == [] and len(tester.delegate_blobs()) == 1
    types = tester.payload().op_types()
    for op_type, count in POOL_OPS.items():
        assert types.get(op_type) == count, (op_type, types)
    assert types.get("Transpose") == POOL_TRANSPOSES, types


def test_max_pool3d_exact_on_distinct_values():
    """Max moves values: on distinct values exactly representable in fp16, every output equals
    eager's (padding never wins, ceil_mode's overhang is not read)."""

    class Pools(nn.Module):
        def forward(self, x):
            return (F.max_pool3d(x, (2, 3, 2), (1, 2, 2), (1, 1, 0), ceil_mode=True), F.max_pool3d(-x, 3, 2, 1))

    x = (torch.randperm(2 * 3 * 5 * 6 * 7).float() / 8.0 - 200.0).reshape(2, 3, 5, 6, 7)
    tester = QnnTester(Pools(), (x,)).lower().to_executorch().run()
    assert tester.cpu_nodes() == []
    for out, ref in zip(tester.outputs, tester.reference_outputs()):
        np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("quant_dtype", [A8W8, A16W8], ids=["8a8w", "16a8w"])
def test_max_pool3d_quantized_matches_qdq_reference(quant_dtype):
    """Every output within 1 step of the QDQ reference (max shares its input's encoding; the
    difference comes from conv1's requantized output), at least 60% exact in 8-bit."""
    tester = QuantTester(MaxPool3dFamily(), pool_inputs(), quant_dtype, per_channel=True)
    tester.lower().check_fully_delegated().to_executorch().run()
    tester.compare_steps(
        max_step_diff=1 if quant_dtype == A8W8 else None, min_exact=0.6 if quant_dtype == A8W8 else None
    )
    types = tester.payload().op_types()
    assert types.get("PoolMax2d") == POOL_OPS["PoolMax2d"], types


def test_max_pool3d_dilation_and_used_indices_stay_on_cpu_with_reason():
    class Rejected(nn.Module):
        def forward(self, x):
            values, indices = F.max_pool3d(x, 2, return_indices=True)
            return F.max_pool3d(x, 2, dilation=2), values, indices

    tester = QnnTester(Rejected(), (randn(1, 2, 5, 5, 5, seed=4),)).lower(require_cpu_kernels=False)  # no CPU kernel
    reasons = " | ".join(tester.partitioner.rejected_nodes.values())
    for expected in ("dilation [2, 2, 2] is not supported", "the indices output is used by"):
        assert expected in reasons, reasons
