"""Shape chains through rank-6 tensors (Swin's window partition / merge): HTP refuses rank 6
("incorrect Rank 6"), so _passes/fold_high_rank_shapes.py lowers view -> permute -> view of
rank <= 5. The window model is one delegate in fp16 / 8a8w / 16a8w on the host engine and,
with QNN's op validation, on QNN (before the pass: 8 nodes and 3 delegates on the CPU side)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from backends.qualcomm import QuantDtype
from backends.qualcomm._passes.fold_high_rank_shapes import merged_permutation
from backends.qualcomm.tests.helpers.quant_tester import QuantTester
from backends.qualcomm.tests.helpers.runtime import assert_qnn_matches_host, one_delegate_blob
from backends.qualcomm.tests.helpers.tester import QnnTester, randn


class WindowLinear(torch.nn.Module):
    """Window partition (rank 6) -> linear per window -> window merge (rank 6)."""

    def __init__(self, channels: int = 16, window: int = 4):
        super().__init__()
        self.fc = torch.nn.Linear(channels, channels)
        self.window = window

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, c = x.shape
        s = self.window
        windows = x.view(b, h // s, s, w // s, s, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, s * s, c)
        windows = self.fc(windows)
        return windows.view(b, h // s, w // s, s, s, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)


@pytest.mark.parametrize(
    "shape, perm, merged, merged_perm",
    [
        ((1, 2, 4, 2, 4, 32), (0, 1, 3, 2, 4, 5), [2, 4, 2, 128], [0, 2, 1, 3]),  # Swin window partition
        ((2, 3, 4, 5, 6, 7), (0, 1, 2, 3, 4, 5), [5040], [0]),
        ((2, 3, 4, 5, 6, 7), (5, 4, 3, 2, 1, 0), [2, 3, 4, 5, 6, 7], [5, 4, 3, 2, 1, 0]),
        ((2, 1, 4, 1, 6, 7), (2, 3, 0, 1, 4, 5), [2, 4, 42], [1, 0, 2]),
    ],
)
def test_merged_permutation_moves_data_the_same_way(shape, perm, merged, merged_perm):
    got, got_perm = merged_permutation(shape, perm)
    assert (got, got_perm) == (merged, merged_perm)
    data = np.arange(int(np.prod(shape)))
    np.testing.assert_array_equal(
        data.reshape(shape).transpose(perm).ravel(), data.reshape(got).transpose(got_perm).ravel()
    )


def _max_rank(blob_summary) -> int:
    return max(len(t.dims) for t in blob_summary.tensors)


def test_window_partition_fp16_one_delegate_no_rank6_tensor():
    tester = QnnTester(WindowLinear().eval(), (randn(1, 8, 8, 16),)).lower()
    one_delegate_blob(tester)
    assert _max_rank(tester.payload()) <= 5
    tester.to_executorch().run().compare(rtol=5e-3, atol=5e-3)


@pytest.mark.parametrize("dtype", [QuantDtype.use_8a8w, QuantDtype.use_16a8w], ids=["8a8w", "16a8w"])
def test_window_partition_quantized_one_delegate(dtype):
    tester = QuantTester(WindowLinear().eval(), (randn(1, 8, 8, 16),), dtype).lower()
    one_delegate_blob(tester)
    assert _max_rank(tester.payload()) <= 5
    tester.to_executorch().run().compare_steps()  # the default bounds of each width


@pytest.mark.parametrize("dtype", [None, QuantDtype.use_8a8w], ids=["fp16", "8a8w"])
def test_window_partition_on_qnn(real_qnn, dtype):
    """With QNN's op validation (real_qnn): one delegate (it refused the rank-6 view, permute
    and clone before); QNN vs the host engine: fp16 within 2e-3, 8a8w 99.9% equal, max 1 step."""
    inputs = (randn(1, 8, 8, 16),)
    module = WindowLinear().eval()
    tester = QnnTester(module, inputs) if dtype is None else QuantTester(module, inputs, dtype)
    blob = one_delegate_blob(tester.lower())
    assert_qnn_matches_host(blob, inputs, None, float_rel=2e-3, max_steps=1, min_exact=0.99)
