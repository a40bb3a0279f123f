"""cdist / pdist: fp16 against eager, 8a8w / 16a8w against the QDQ reference; cdist with an
unsupported p stays on the CPU with a reason. On the real QNN: ops/test_grid_sample.py
(RealVision)."""

from __future__ import annotations

from typing import Tuple

import pytest
import torch

from backends.qualcomm import QuantDtype
from backends.qualcomm.builders.op_distance import MAX_DIFFERENCE_ELEMENTS
from backends.qualcomm.tests.helpers.quant_tester import QuantTester
from backends.qualcomm.tests.helpers.runtime import QNN_LOADED, assert_qnn_matches_host, one_delegate_blob
from backends.qualcomm.tests.helpers.tester import QnnTester, randn

A8W8, A16W8 = QuantDtype.use_8a8w, QuantDtype.use_16a8w

nn = torch.nn


class Distances(nn.Module):
    """cdist p = 2 (30 rows: torch's default would use matmuls; kept whole here), p = 1, p = inf,
    unbatched, and pdist p = 2 / p = 1."""

    def forward(self, a, b, c, x):
        return (
            torch.cdist(a, b),
            torch.cdist(a, b, p=1.0),
            torch.cdist(c, c, p=float("inf")),
            torch.cdist(a[0], b[0]),
            torch.pdist(x),
            torch.pdist(x, p=1.0),
        )


def distance_inputs() -> Tuple[torch.Tensor, ...]:
    return randn(2, 5, 4, seed=1), randn(2, 30, 4, seed=2), randn(3, 6, 3, seed=3), randn(7, 5, seed=4)


def test_cdist_pdist_fp16_match_eager():
    tester = QnnTester(Distances(), distance_inputs()).run_and_compare(atol=1e-2, rtol=1e-2)
    assert tester.cpu_nodes() == [] and len(tester.delegate_blobs()) == 1
    types = tester.payload().op_types()
    assert types.get("ElementWiseSubtract") == 6 and types.get("Gather") == 4 and "MatMul" not in types, types


# Quantized: the distance chain is a float island (Dequantize -> ... -> Quantize), run in fp16 as
# HTP runs float ops of a quantized graph: measured max 2 steps of 8-bit outputs (40.7% exact at
# worst, cdist p = inf), and up to 38 steps of 16-bit ones (fp16's 2^-11 relative resolution at
# distances up to ~8 is ~30 steps of a 16-bit encoding over that range).
DISTANCE_BOUNDS = {A8W8: (2, 0.35), A16W8: (64, 0.0)}


@pytest.mark.parametrize("quant_dtype", [A8W8, A16W8], ids=["8a8w", "16a8w"])
def test_cdist_pdist_quantized_match_qdq_reference(quant_dtype):
    tester = QuantTester(Distances(), distance_inputs(), quant_dtype)
    tester.lower().check_fully_delegated().to_executorch().run()
    tester.compare_steps(max_step_diff=DISTANCE_BOUNDS[quant_dtype][0], min_exact=DISTANCE_BOUNDS[quant_dtype][1])


def test_cdist_unsupported_p_stays_on_cpu_with_reason():
    class Rejected(nn.Module):
        def forward(self, a, b):
            return torch.cdist(a, b, p=3.0), torch.pdist(a[0], p=0.5)

    tester = QnnTester(Rejected(), (randn(1, 4, 3, seed=1), randn(1, 5, 3, seed=2))).lower()
    reasons = " | ".join(tester.partitioner.rejected_nodes.values())
    for expected in ("cdist: p=3.0 is not supported", "pdist: p=0.5 is not supported"):
        assert expected in reasons, reasons


class LargeCdist(nn.Module):
    """cdist p = 2 of 64 x 64 points of 1,100 dims: a difference tensor of 4.5 M elements, above
    MAX_DIFFERENCE_ELEMENTS, so the matrix-product form (torch's own default beyond 25 rows)."""

    def forward(self, a, b):
        return torch.cdist(a, b)


# 8a8w against the QDQ reference: measured max 1 step, 86% exact; QNN vs host fp16 max 3.1e-2
# on distances of ~47 (0.07%).
LARGE_CDIST_BOUNDS_8BIT = (2, 0.8)


@pytest.mark.parametrize("quant_dtype", [None, A8W8], ids=["fp16", "8a8w"])
def test_cdist_above_the_difference_limit_by_matmul_on_both_engines(qnn_binary, quant_dtype):
    """fp16 against eager (distances ~47: fp16's squared norms of ~1,100 are within 1 of the exact
    ones), 8a8w against the QDQ reference, QNN (x86 HTP emulation) against the host engine."""
    module, inputs = LargeCdist(), (randn(1, 64, 1100, seed=5), randn(1, 64, 1100, seed=6))
    assert 64 * 64 * 1100 > MAX_DIFFERENCE_ELEMENTS
    if quant_dtype is None:
        tester = QnnTester(module, inputs).lower().check_fully_delegated().to_executorch().run()
        tester.compare(atol=0.1, rtol=1e-2)
        steps = 0
    else:
        tester = QuantTester(module, inputs, quant_dtype).lower().check_fully_delegated().to_executorch().run()
        tester.compare_steps(max_step_diff=LARGE_CDIST_BOUNDS_8BIT[0], min_exact=LARGE_CDIST_BOUNDS_8BIT[1])
        steps = 1
    types = tester.payload().op_types()
    assert types.get("MatMul") == 1 and "ElementWiseSubtract" not in types, types
    if QNN_LOADED:
        assert_qnn_matches_host(one_delegate_blob(tester), inputs, module, 1e-2, steps)
