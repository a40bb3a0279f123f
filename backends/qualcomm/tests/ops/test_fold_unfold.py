"""col2im (nn.Fold / F.fold; kept whole) lowered as one grouped TransposeConv2d with one-hot
weights (builders/op_im2col.py): fp16 against eager, 8a8w / 16a8w against the QDQ reference,
full delegation with the Transpose count of the channel-last graph, and the real QNN (HTP
emulation) against the host engine in each precision. Then im2col (F.unfold): fp16 exactly,
8a8w / 16a8w against the QDQ reference."""

from __future__ import annotations

from typing import Tuple

import pytest
import torch
import torch.nn.functional as F

from backends.qualcomm import QuantDtype
from backends.qualcomm.builders.op_im2col import one_hot_fold_weight
from backends.qualcomm.tests.helpers.quant_tester import QuantTester, compare_with_qdq
from backends.qualcomm.tests.helpers.runtime import assert_qnn_matches_host, needs_qnn, one_delegate_blob
from backends.qualcomm.tests.helpers.tester import QnnTester, randn

A8W8, A16W8 = QuantDtype.use_8a8w, QuantDtype.use_16a8w
nn = torch.nn


class FoldFamily(nn.Module):
    """F.fold of a graph input (overlapping 2x2 windows; per-axis kernel with dilation, padding
    and stride), of a conv1d's channel-last output (read as [N, L, C*kh*kw]: no Transpose) into
    a conv2d (NHWC: no Transpose), and with a stride larger than the reach of the last window
    (a row / column no window writes: output_padding)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv1d = nn.Conv1d(12, 8, 1)
        self.conv2d = nn.Conv2d(2, 3, 3, padding=1)

    def forward(self, c, d, e):
        return (
            F.fold(c, (4, 5), 2),
            F.fold(c, (5, 6), (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
            self.conv2d(F.fold(self.conv1d(c), (4, 5), 2)),
            F.fold(d, (5, 6), 2, stride=2),
            F.fold(e, (4, 5), 2, padding=(2, 1)),
        )


def fold_inputs() -> Tuple[torch.Tensor, ...]:
    return randn(2, 12, 12, seed=1), randn(2, 8, 6, seed=2), randn(2, 8, 42, seed=4)


# One Transpose for c (read channel-last by the first two folds and the conv1d), one each for d
# and e, one per output; none between the conv1d, its fold and the conv2d.
FOLD_TRANSPOSES = 3 + 5


def _assert_one_delegate(tester: QnnTester) -> None:
    types = tester.check_one_delegate_ops({"TransposeConv2d": 5, "Transpose": FOLD_TRANSPOSES, "Pad": 1})
    assert "ScatterNd" not in types and "Gather" not in types, types


def test_one_hot_weight_places_each_column_once():
    w = one_hot_fold_weight(2, [2, 3], [1, 2])
    assert w.shape == (2, 5, 12, 1) and int(w.sum()) == 12
    # input channel c*6 + i*3 + j -> kernel offset (i, 2j)
    assert w[1, 4, 6 + 5, 0] == 1 and w[0, 1, :, 0].sum() == 0


def test_fold_fp16_matches_eager():
    """Sums of at most 4 overlapping inputs x 1.0: eager within fp16's rounding."""
    tester = QnnTester(FoldFamily(), fold_inputs()).run_and_compare(atol=2e-3, rtol=2e-3)
    _assert_one_delegate(tester)


@pytest.mark.parametrize("quant_dtype", [A8W8, A16W8], ids=["8a8w", "16a8w"])
def test_fold_quantized_matches_qdq_reference(quant_dtype):
    """A requantizing conv of one-hot weights (code 127, scale 1/127). Measured: 8a8w max 1 step
    (96.7%, 100%, 100% exact on the folds of graph inputs; 79.2% through conv1d -> fold -> conv2d);
    16a8w max 2, 2, 3 steps (HTP's 16-bit conv path keeps the top bits of x * w), 5 through the
    convs."""
    tester = QuantTester(FoldFamily(), fold_inputs(), quant_dtype)
    tester.lower().to_executorch().run()
    _assert_one_delegate(tester)
    stats = compare_with_qdq(tester, {0: (1, 0.9), 1: (1, 0.95), 2: (1, 0.7), 3: (1, 0.95), 4: (1, 0.9)})
    print([str(s) for s in stats])
    if quant_dtype == A16W8:
        assert all(stats[i].max_diff <= 3 for i in (0, 1, 3, 4)), [str(s) for s in stats]


def test_fold_unbatched_is_delegated_as_its_decomposition():
    """An unbatched fold is not kept whole: its decomposition (index_put with accumulate=True,
    a ScatterNd add) is delegated and matches eager."""

    class Fold(nn.Module):
        def forward(self, c):
            return F.fold(c, (4, 5), 2)

    tester = QnnTester(Fold(), (randn(12, 12, seed=3),)).lower()
    assert tester.check_one_delegate_ops({"ScatterNd": 1})
    tester.to_executorch().run().compare(rtol=1e-3, atol=1e-3)


# ---- real QNN ---------------------------------------------------------------------------------


@needs_qnn
@pytest.mark.parametrize("quant_dtype", [None, A8W8, A16W8], ids=["fp16", "8a8w", "16a8w"])
def test_real_qnn_matches_host(real_qnn, quant_dtype):
    """QNN 2.51 HTP emulation vs the host engine, one delegate (QNN validated and finalized the
    grouped one-hot TransposeConv2d in each precision). Measured: fp16 max |qnn - host| 4.8e-7;
    8a8w 100% equal; 16a8w max 13 of 65535 steps (as the 16-bit data movement ops of
    ops/test_resize_norm: the graph inputs' 16-bit Quantize differs)."""
    inputs, module = fold_inputs(), FoldFamily()
    tester = (QnnTester(module, inputs) if quant_dtype is None else QuantTester(module, inputs, quant_dtype)).lower()
    blob = one_delegate_blob(tester)
    if quant_dtype == A8W8:
        assert_qnn_matches_host(blob, inputs, module, 0.0, 1, 0.95)
    else:
        assert_qnn_matches_host(blob, inputs, module, 2e-3, 16)


# ---- unfold (im2col) ------------------------------------------------------------------------
class UnfoldFamily(nn.Module):
    """F.unfold of a graph input (no padding; padding, dilation, per-axis stride) and of a conv's
    channel-last output (read as NHWC: no Transpose back)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return (
            F.unfold(x, 2),
            F.unfold(x, (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
            F.unfold(self.conv(x), 3, padding=1),
        )


def unfold_inputs() -> Tuple[torch.Tensor]:
    return (randn(2, 3, 4, 6, seed=1),)


def test_unfold_fp16_exact():
    """A Gather moves values: equal to eager (fp16 storage of the values aside: 1e-3)."""
    tester = QnnTester(UnfoldFamily(), unfold_inputs()).run_and_compare(atol=1e-3, rtol=1e-3)
    assert tester.cpu_nodes() == [] and len(tester.delegate_blobs()) == 1
    types = tester.payload().op_types()
    # one Transpose into the conv; the conv output is unfolded channel-last
    assert types.get("Gather") == 3 and types.get("Pad") == 2 and types.get("Transpose") == 1, types


@pytest.mark.parametrize("quant_dtype", [A8W8, A16W8], ids=["8a8w", "16a8w"])
def test_unfold_quantized_matches_qdq_reference(quant_dtype):
    """Codes are moved, not requantized: the unfolds of the graph input are exact; that of the
    conv output carries the conv's own difference (8a8w max 1 step; 16a8w max 2, 62.6% exact)."""
    tester = QuantTester(UnfoldFamily(), unfold_inputs(), quant_dtype)
    tester.lower().check_fully_delegated().to_executorch().run()
    tester.compare_steps(max_step_diff=1 if quant_dtype == A8W8 else 2, min_exact=0.6)
    assert tester.stats[0].max_diff <= 1 and tester.stats[1].max_diff <= 1
