"""Convolutions beyond conv2d: conv1d (a 2-D conv on a unit height, incl. groups /
depthwise, stride, padding, dilation), transposed conv 1d / 2d (TransposeConv2d: stride,
padding, output_padding, groups), conv3d (Conv3d) and transposed conv 3d (TransposeConv3d).

Each family is one multi-output module lowered once: fp16 vs eager, 8a8w / 16a8w with
per-channel weights vs the QDQ reference (steps of each output's encoding), on the real QNN
(context binary, QNN outputs vs host-engine outputs of the same delegate), the Transpose count
of the channel-last graph (none between consecutive convolutions), and the support checks'
reasons for what stays on the CPU."""

from __future__ import annotations

from typing import List, Tuple

import numpy as np
import pytest
import torch

from backends.qualcomm import QuantDtype
from backends.qualcomm.serialization import qnn_payload_generated as gen
from backends.qualcomm.serialization.payload_reader import deserialize
from backends.qualcomm.tests.helpers.quant_tester import QuantTester, StepStats, compare_with_qdq, step_stats
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
QUANT_DTYPES = [A8W8, A16W8]
nn = torch.nn


class Conv1dFamily(nn.Module):
    """conv1d: plain -> relu -> grouped (stride, padding, dilation) -> depthwise, chained (no
    Transpose between them), and a depthwise conv with channel multiplier 2 and no bias."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.plain = nn.Conv1d(3, 6, 3, padding=1)
        self.grouped = nn.Conv1d(6, 6, 3, stride=2, padding=2, dilation=2, groups=2)
        self.depthwise = nn.Conv1d(6, 6, 3, padding=1, groups=6)
        self.multiplier = nn.Conv1d(3, 6, 5, stride=2, groups=3, bias=False)

    def forward(self, x):
        a = self.plain(x)
        b = self.grouped(torch.relu(a))
        c = self.depthwise(b) + b
        return a, c, self.multiplier(x)


class TransposedConvFamily(nn.Module):
    """conv_transpose2d (stride, padding, output_padding; groups, rectangular kernel, no bias)
    feeding a conv2d, and conv_transpose1d (padding; depthwise)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.up2 = nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1)
        self.grouped2 = nn.ConvTranspose2d(4, 4, (2, 3), stride=(2, 1), groups=2, bias=False)
        self.conv2 = nn.Conv2d(3, 3, 3, padding=1)
        self.up1 = nn.ConvTranspose1d(4, 2, 4, stride=2, padding=1)
        self.depthwise1 = nn.ConvTranspose1d(4, 4, 3, stride=3, padding=1, groups=4)

    def forward(self, x2, x1):
        return (self.conv2(torch.relu(self.up2(x2))), self.grouped2(x2), self.up1(x1), self.depthwise1(x1))


class Conv3dFamily(nn.Module):
    """conv3d (padding, dilation; grouped with stride) feeding a conv_transpose3d."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv3d(3, 4, 3, padding=(1, 2, 1), dilation=(1, 2, 1))
        self.grouped = nn.Conv3d(4, 4, (1, 3, 3), stride=(1, 2, 1), padding=(0, 1, 1), groups=2)
        self.up = nn.ConvTranspose3d(4, 2, 2, stride=2, padding=(0, 1, 0))

    def forward(self, x):
        a = self.grouped(torch.relu(self.conv(x)))
        return a, self.up(a)


def conv1d_inputs() -> Tuple[torch.Tensor, ...]:
    return (randn(2, 3, 12, seed=1),)


def transposed_inputs() -> Tuple[torch.Tensor, ...]:
    return randn(1, 4, 4, 5, seed=2), randn(2, 4, 6, seed=3)


def conv3d_inputs() -> Tuple[torch.Tensor, ...]:
    return (randn(1, 3, 3, 5, 4, seed=4),)


FAMILIES = {
    "conv1d": (Conv1dFamily, conv1d_inputs),
    "transposed": (TransposedConvFamily, transposed_inputs),
    "conv3d": (Conv3dFamily, conv3d_inputs),
}
# QNN op types each family lowers to (Transpose / Reshape: layout changes at the boundaries)
FAMILY_OPS = {
    "conv1d": {"Conv2d": 2, "DepthWiseConv2d": 2},
    "transposed": {"TransposeConv2d": 4, "Conv2d": 1},
    "conv3d": {"Conv3d": 2, "TransposeConv3d": 1},
}
# Transposes of the channel-last graph: one per graph input read by a conv, one per output;
# none between consecutive convolutions (and the elementwise ops between them).
FAMILY_TRANSPOSES = {"conv1d": 1 + 3, "transposed": 2 + 4, "conv3d": 1 + 2}


# ---- fp16 ---------------------------------------------------------------------------


@pytest.mark.parametrize("family", list(FAMILIES))
def test_fp16_family_matches_eager(family):
    make, inputs = FAMILIES[family]
    tester = QnnTester(make(), inputs()).run_and_compare(atol=1e-2, rtol=1e-2)
    tester.check_one_delegate_ops({**FAMILY_OPS[family], "Transpose": FAMILY_TRANSPOSES[family]})


# ---- quantized ------------------------------------------------------------------------

# 8-bit outputs of chains of requantizing ops, (max steps, min exact share) vs the QDQ reference:
# conv1d output 1 is plain -> relu -> grouped -> depthwise -> add, each requantized (integer
# Conv2d / DepthWiseConv2d with HTP's requantization, integer add), and a 1-step difference at
# an intermediate output moves the next conv's output by its gain: measured 75.0% exact, 1.4% at
# 2 steps (the single convs of the same family: 90.3% and 95.8% exact, max 1).
CHAIN_BOUNDS_8BIT = {"conv1d": {1: (2, 0.70)}}


@pytest.mark.parametrize("quant_dtype", QUANT_DTYPES, ids=["8a8w", "16a8w"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_quantized_family_matches_qdq_reference(family, quant_dtype):
    make, inputs = FAMILIES[family]
    tester = QuantTester(make(), inputs(), quant_dtype, per_channel=True)
    tester.lower().check_fully_delegated().to_executorch().run()
    compare_with_qdq(tester, CHAIN_BOUNDS_8BIT.get(family))
    tester.check_one_delegate_ops(FAMILY_OPS[family])


def test_transposed_conv_weights_are_per_output_channel():
    """conv_transpose's weight [Cin, Cout/group, k..] is quantized along axis 1 (one scale per
    output channel); grouped, per tensor (axis 1 holds Cout/group channels only)."""
    tester = QuantTester(TransposedConvFamily(), transposed_inputs(), A8W8, per_channel=True).lower()
    summary = tester.payload()
    tensors = {t.name: t for t in summary.tensors}
    encodings = [tensors[op.inputs[1]].quant for op in summary.ops if op.type == "TransposeConv2d"]
    per_axis = [q for q in encodings if "axis=3" in q]
    # up2 and up1 along axis 3 of [KH, KW, Cin, Cout]; the grouped ones per tensor
    assert len(per_axis) == 2 and len(encodings) == 4, encodings


# ---- support checks -------------------------------------------------------------------


def test_unsupported_convolutions_stay_on_cpu_with_reason():
    """A dilated transposed conv whose weight is a graph input (no constant kernel to dilate)."""

    class Rejected(nn.Module):
        def forward(self, x, weight):
            return nn.functional.conv_transpose2d(x, weight, dilation=2)

    tester = QnnTester(Rejected(), (randn(1, 2, 5, 5), randn(2, 2, 3, 3, seed=1))).lower()
    assert tester.cpu_op_names() == ["aten.convolution.default"]
    reason = next(iter(tester.partitioner.rejected_nodes.values()))
    assert "dilation [2, 2]" in reason and "not a constant" in reason, reason
    tester.to_executorch().run().compare(atol=1e-5, rtol=1e-5)


# Dilated transposed convs: a constant kernel with d - 1 zero taps between taps (k -> (k-1)d + 1).
DILATED_TRANSPOSED = [
    (lambda: nn.ConvTranspose1d(2, 3, 3, stride=2, padding=1, dilation=2), (1, 2, 6)),
    (lambda: nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1, dilation=(3, 2)), (1, 2, 4, 5)),
    (lambda: nn.ConvTranspose2d(2, 2, 2, dilation=2, groups=2, bias=False), (1, 2, 3, 3)),
    (lambda: nn.ConvTranspose3d(1, 3, 3, stride=2, padding=1, dilation=(3, 2, 3)), (1, 1, 3, 3, 3)),
]
DILATED_IDS = ["1d", "2d_asymmetric", "2d_depthwise", "3d"]


@pytest.mark.parametrize("make, shape", DILATED_TRANSPOSED, ids=DILATED_IDS)
def test_dilated_transposed_conv_on_both_engines(qnn_binary, make, shape):
    """Delegated with the zero-dilated kernel (QNN's TransposeConv has no dilation): the kernel's
    spatial dims grow to (k - 1) * d + 1; fp16 within 1e-3 of eager, 8a8w within one step of the
    QDQ reference, and QNN's outputs match the host engine's."""
    torch.manual_seed(0)
    module = make().eval()
    x = (randn(*shape, seed=3),)
    tester = QnnTester(module, x).lower().check_fully_delegated()
    summary = tester.payload()
    tensors = {t.name: t for t in summary.tensors}
    kernel = [tensors[op.inputs[1]].dims for op in summary.ops if op.type.startswith("TransposeConv")][0]
    dilation = list(module.dilation)
    k = list(module.kernel_size)
    expected = [(kk - 1) * d + 1 for kk, d in zip(k, dilation)]
    assert list(kernel[-len(expected) - 2 : -2]) == expected, kernel
    tester.to_executorch().run().compare(atol=1e-3, rtol=1e-3)
    quant = QuantTester(make().eval(), x, A8W8, per_channel=True).lower().check_fully_delegated()
    quant.to_executorch().run().compare_steps(max_step_diff=1, min_exact=0.9)
    if QNN_LOADED:
        assert_qnn_matches_host(one_delegate_blob(tester), x, None, float_rel=2e-3, max_steps=0)
        assert_qnn_matches_host(one_delegate_blob(quant), x, None, float_rel=2e-3, max_steps=1, min_exact=0.95)


DEPTHWISE_OP_CONVS = [
    (lambda: nn.ConvTranspose1d(2, 2, 3, stride=3, padding=1, groups=2, output_padding=1), 0),
    (lambda: nn.ConvTranspose2d(2, 2, 3, stride=2, padding=1, output_padding=1, groups=2), 0),
    (lambda: nn.ConvTranspose2d(2, 2, 2, stride=2, output_padding=1, groups=2), 2),
    (lambda: nn.ConvTranspose1d(2, 2, 3, stride=3, padding=1, output_padding=2, groups=2), 1),
    (lambda: nn.ConvTranspose2d(3, 3, (3, 2), stride=(2, 3), padding=(1, 0), output_padding=(1, 2), groups=3), 1),
    # not depthwise, or no output_padding: QNN's own output_padding
    (lambda: nn.ConvTranspose2d(2, 2, 3, stride=2, padding=1, output_padding=1), 0),
    (lambda: nn.ConvTranspose2d(2, 4, 3, stride=2, padding=1, output_padding=1, groups=2), 0),
    (lambda: nn.ConvTranspose1d(2, 2, 1, stride=2, output_padding=1), 0),
    (lambda: nn.ConvTranspose1d(2, 2, 3, stride=3, padding=1, groups=2), 0),
]
DEPTHWISE_OP_IDS = [
    "dw_1d_p1op1",
    "dw_p1op1",
    "dw_k2s2op1",
    "dw_1d_p1op2",
    "dw_asymmetric",
    "k3s2p1op1",
    "grouped_2_out_op1",
    "1d_k1s2op1",
    "1d_depthwise",
]


@pytest.mark.parametrize("make, concats", DEPTHWISE_OP_CONVS, ids=DEPTHWISE_OP_IDS)
def test_transposed_conv_output_padding_on_both_engines(qnn_binary, make, concats):
    """QNN 2.51's TransposeConv computes a depthwise transposed conv's (one input and one output
    channel per group) output_padding wrong on every row (measured fp16 up to 1.5 off, 8a8w 0%
    exact): the builder passes output_padding 0 and crops op fewer rows at the end (pad_amount
    [p, p - op]); rows beyond (op > p) are bias rows (Concat). Measured on SM8650: QNN vs host
    6e-8 (fp16) and 100% equal (8a8w; the grouped non-depthwise one 97.9%, max 1)."""
    torch.manual_seed(0)
    module = make().eval()
    x = (
        randn(1, module.in_channels, 3, 4, seed=3)
        if isinstance(module, nn.ConvTranspose2d)
        else randn(1, module.in_channels, 5, seed=3)
    )
    tester = QnnTester(module, (x,)).lower()
    blob = one_delegate_blob(tester)
    assert tester.payload().op_types().get("Concat", 0) == concats
    tester.to_executorch().run().compare(atol=1e-3, rtol=1e-3)
    quant = QuantTester(make().eval(), (x,), QuantDtype.use_8a8w).lower()
    quant_blob = one_delegate_blob(quant)
    quant.to_executorch().run().compare_steps(max_step_diff=1, min_exact=0.9)
    if QNN_LOADED:
        assert_qnn_matches_host(blob, (x,), None, float_rel=2e-3, max_steps=0)
        assert_qnn_matches_host(quant_blob, (x,), None, float_rel=2e-3, max_steps=1, min_exact=0.95)


UNSET_ROWS_CONVS = [
    (lambda: nn.ConvTranspose2d(2, 2, 2, stride=2, output_padding=1), 2),
    (lambda: nn.ConvTranspose2d(2, 2, 3, stride=3, padding=1, output_padding=2), 2),
    (lambda: nn.ConvTranspose1d(2, 4, 3, stride=3, groups=2, output_padding=2), 1),
]
UNSET_IDS = ["k2s2op1", "k3s3p1op2", "1d_k3s3op2"]


def _unset_rows_input(module: nn.Module) -> torch.Tensor:
    return randn(1, 2, 3, 4, seed=3) if isinstance(module, nn.ConvTranspose2d) else randn(1, 2, 5, seed=3)


@pytest.mark.parametrize("make, concats", UNSET_ROWS_CONVS, ids=UNSET_IDS)
def test_transposed_conv_rows_qnn_leaves_unset_fp16(qnn_binary, make, concats):
    """QNN 2.51's TransposeConv writes output rows only up to position max((in-1)*stride + k,
    in*stride) (rows past it held 0 or garbage where torch has the bias: fp16 up to 1.3e5 off,
    8a8w 6-81% exact, measured on SM8650); those rows are the bias alone, so the TransposeConv
    is lowered on the rows QNN writes and a Concat per axis appends constant bias rows.
    Measured: within 1e-3 of eager on QNN, QNN vs host 6e-8."""
    torch.manual_seed(0)
    module = make().eval()
    x = _unset_rows_input(module)
    tester = QnnTester(module, (x,)).lower().check_fully_delegated().to_executorch().run().compare(atol=1e-3, rtol=1e-3)
    assert tester.payload().op_types().get("Concat") == concats
    if QNN_LOADED:
        assert_qnn_matches_host(one_delegate_blob(tester), (x,), module, 1e-5, 0)


# QNN vs host (max steps, min exact share): 8a8w measured max 1, 98.5-100% exact; 16a8w max 6-16
# (the graph input's 16-bit Quantize differs between the engines, as for the other convs here).
UNSET_ROWS_QNN_VS_HOST = {A8W8: (1, 0.95), A16W8: (16, 0.0)}


@pytest.mark.parametrize("quant_dtype", QUANT_DTYPES, ids=["8a8w", "16a8w"])
@pytest.mark.parametrize("make, concats", UNSET_ROWS_CONVS, ids=UNSET_IDS)
def test_transposed_conv_rows_qnn_leaves_unset_quantized(qnn_binary, make, concats, quant_dtype):
    """The bias rows quantized to the output's encoding as the QDQ reference quantizes the conv
    there: within the default PT2E bounds of the QDQ reference (8a8w max 1, 95-100% exact)."""
    torch.manual_seed(0)
    module = make().eval()
    x = _unset_rows_input(module)
    tester = QuantTester(module, (x,), quant_dtype).lower().check_fully_delegated().to_executorch().run()
    tester.compare_steps()
    assert tester.payload().op_types().get("Concat") == concats
    if QNN_LOADED:
        steps, exact = UNSET_ROWS_QNN_VS_HOST[quant_dtype]
        assert_qnn_matches_host(one_delegate_blob(tester), (x,), module, 0.0, steps, exact)


def test_skip_names_separate_conv_kinds():
    """skip_node_op_set 'aten.conv_transpose1d.default' keeps only the 1-D transposed convs on
    the CPU (every conv is an aten.convolution node after to_edge)."""
    tester = QnnTester(TransposedConvFamily(), transposed_inputs()).lower(
        skip_node_op_set={"aten.conv_transpose1d.default"}
    )
    assert tester.cpu_op_names() == ["aten.convolution.default"] * 2
    assert tester.payload().op_types().get("TransposeConv2d") == 2
    tester.to_executorch().run().compare(atol=1e-2, rtol=1e-2)


# ---- real QNN --------------------------------------------------------------------------


class RealConvFamily(nn.Module):
    """One small model with every convolution kind of this file."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = nn.Conv1d(3, 4, 3, padding=1)
        self.depthwise1 = nn.Conv1d(4, 4, 3, stride=2, groups=4)
        self.up1 = nn.ConvTranspose1d(4, 3, 4, stride=2, padding=1)
        self.up2 = nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1)
        self.grouped2 = nn.ConvTranspose2d(4, 4, 2, stride=2, groups=2)
        self.conv3 = nn.Conv3d(3, 4, 3, padding=1)
        self.up3 = nn.ConvTranspose3d(4, 2, 2, stride=2)

    def forward(self, x1, x2, x3):
        a = self.depthwise1(torch.relu(self.conv1(x1)))
        b = self.up2(x2)
        return a, self.up1(a), b, self.grouped2(torch.relu(b)), self.up3(torch.relu(self.conv3(x3)))


def real_inputs() -> Tuple[torch.Tensor, ...]:
    return randn(1, 3, 8, seed=5), randn(1, 3, 3, 4, seed=6), randn(1, 3, 2, 3, 3, seed=7)


@needs_qnn
@pytest.mark.parametrize("quant_dtype", [None, A8W8, A16W8], ids=["fp16", "8a8w", "16a8w"])
def test_real_qnn_matches_host(real_qnn, quant_dtype):
    """QNN 2.51 HTP emulation vs the host engine, one delegate (so QNN validated and finalized
    Conv2d / DepthWiseConv2d on a unit height, TransposeConv2d incl. grouped, Conv3d and
    TransposeConv3d in each precision). Measured: fp16 max |qnn - host| 6e-8 on outputs up to
    0.78; 8a8w max 1 step (55-98% exact) except conv3d -> relu -> conv_transpose3d, 2 steps on
    2.8% (64.6% exact); 16a8w max 17 of 65535 steps (integer kernels on both: see
    test_real_qnn_integer_convs_match_host)."""
    inputs = real_inputs()
    module = RealConvFamily()
    tester = (
        QnnTester(module, inputs) if quant_dtype is None else QuantTester(module, inputs, quant_dtype, per_channel=True)
    ).lower()
    blob = one_delegate_blob(tester)
    qnn, host = payload_on_both_engines(blob, inputs, module)
    scales = delegate_output_scales(blob)
    stats: List[StepStats] = []
    for i, (q, h) in enumerate(zip(qnn, host)):
        assert q.shape == h.shape and q.dtype == h.dtype, (i, q.shape, h.shape)
        if quant_dtype is None:
            err = float(np.abs(q - h).max())
            assert err <= 2e-2 * max(1.0, float(np.abs(h).max())), f"output {i}: max |qnn - host| = {err}"
        else:
            assert scales[i] is not None, f"output {i} has no Dequantize"
            stats.append(step_stats(q, h, scales[i]))
    for i, s in enumerate(stats):
        assert s.max_diff <= (2 if quant_dtype == A8W8 else 64), f"output {i}: {s}"


# ---- integer Conv3d / TransposeConv host kernels vs real QNN ----------------------------------


class SingleConvs(nn.Module):
    """Conv3d, TransposeConv2d (stride, padding, output_padding; grouped) and TransposeConv3d,
    each reading the graph's input Quantize (so each is compared alone)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.c3 = nn.Conv3d(3, 8, 3, padding=1)
        self.t2 = nn.ConvTranspose2d(3, 8, 3, stride=2, padding=1, output_padding=1)
        self.t2g = nn.ConvTranspose2d(4, 8, 2, stride=2, groups=2)
        self.t3 = nn.ConvTranspose3d(3, 4, 2, stride=2)

    def forward(self, x3, x2):
        return self.c3(x3), self.t2(x2[:, :3]), self.t2g(x2), self.t3(x3)


# (max steps, min exact share) QNN vs host per output (c3, t2, t2g, t3). The host engine runs
# them in integers with Conv2d's HTP requantization (conv_nd_quant.cpp). Measured on QNN 2.51
# (SM8650), before (float on dequantized inputs) -> after: 8a8w Conv3d 74.5% max 2 -> 75.8% max
# 1, TransposeConv2d 98.1% -> 99.85%, grouped 97.5% -> 100%, TransposeConv3d 74.7% max 2 ->
# 75.5% max 2 (HTP's 3-D kernels requantize in a way not reproduced yet: 1 step on ~24%);
# 16a8w max 9-13 -> 8-12 steps of 65535.
INTEGER_CONV_BOUNDS = {A8W8: [(1, 0.7), (1, 0.995), (0, 1.0), (2, 0.7)], A16W8: [(16, 0.0)] * 4}


@needs_qnn
@pytest.mark.parametrize("quant_dtype", QUANT_DTYPES, ids=["8a8w", "16a8w"])
def test_real_qnn_integer_convs_match_host(real_qnn, quant_dtype):
    inputs = (randn(1, 3, 4, 5, 6, seed=11), randn(1, 4, 6, 7, seed=12))
    module = SingleConvs()
    tester = QuantTester(module, inputs, quant_dtype, per_channel=True).lower()
    blob = one_delegate_blob(tester)
    qnn, host = payload_on_both_engines(blob, inputs, module)
    scales = delegate_output_scales(blob)
    for i, (q, h, bounds) in enumerate(zip(qnn, host, INTEGER_CONV_BOUNDS[quant_dtype])):
        stats = step_stats(q, h, scales[i])
        print(i, stats)
        assert stats.max_diff <= bounds[0] and stats.exact_fraction >= bounds[1], f"output {i}: {stats}"


# ---- LPBQ weights and transposed convs ----------------------------------------------------------


class LpbqConvs(nn.Module):
    """16a4w_block weights (one output each): a linear with more outputs than inputs and
    blocks of 8, a 1x1 and a 3x3 conv, a transposed conv (blocked along its input channels).
    QNN's own BLOCKWISE_EXPANSION gets the linear's channels >= 32 zero (block 16; blocks of 8
    on a 64x64 weight crash graphExecute) and the 3x3 conv from its first kernel tap only:
    every LPBQ weight goes to QNN as 8-bit per-channel codes k * q."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(32, 64)
        self.pointwise = nn.Conv2d(32, 8, 1, bias=False)
        self.conv = nn.Conv2d(32, 8, 3, padding=1)
        self.up = nn.ConvTranspose2d(32, 8, 3, stride=2, padding=1, output_padding=1)

    def forward(self, x, y):
        return self.linear(x), self.pointwise(y), self.conv(y), self.up(y)


LPBQ_BLOCKS = {"linear": 8, "conv2d": 16, "conv2d_1": 8, "conv_transpose2d": 16}


def lpbq_tester() -> QuantTester:
    inputs = (randn(1, 6, 32, seed=21), randn(1, 32, 4, 4, seed=22))
    return QuantTester(LpbqConvs(), inputs, QuantDtype.use_16a4w_block, block_size_map=LPBQ_BLOCKS).lower()


def lpbq_weight_encodings(tester: QuantTester) -> dict:
    graph = tester.payload()
    tensors = {t.name: t for t in graph.tensors}
    weighted = ("FullyConnected", "Conv2d", "TransposeConv2d")
    return {
        f"{op.type}{tensors[op.inputs[1]].dims}": tensors[op.inputs[1]].quant for op in graph.ops if op.type in weighted
    }


def test_lpbq_weights_per_route_match_qdq():
    """16a4w_block on the host engine, every output within the 16-bit bounds of the QDQ
    reference; the payload keeps BLOCKWISE_EXPANSION where the host kernel takes block scales
    (linear, Conv2d) and has 8-bit per-channel codes k * q in [-120, 105] for the transposed
    conv (blocked along Cin)."""
    tester = lpbq_tester()
    encodings = lpbq_weight_encodings(tester)
    assert encodings["FullyConnected[64, 32]"].startswith("BLOCKWISE_EXPANSION(bw=4, axis=0"), encodings
    assert encodings["Conv2d[1, 1, 32, 8]"].startswith("BLOCKWISE_EXPANSION(bw=4, axis=3"), encodings
    assert encodings["Conv2d[3, 3, 32, 8]"].startswith("BLOCKWISE_EXPANSION(bw=4, axis=3"), encodings
    assert encodings["TransposeConv2d[3, 3, 32, 8]"].startswith("AXIS_SCALE_OFFSET(bw=8, axis=3"), encodings
    graph = deserialize(tester.delegate_blobs()[0]).graphs[0]
    codes = [
        np.asarray(t.data, np.uint8).view(np.int8)
        for t in graph.tensors
        if t.quant is not None and t.quant.encoding == gen.QnnQuantEncoding.AXIS_SCALE_OFFSET and t.quant.bitwidth == 8
    ]
    assert len(codes) == 1 and codes[0].min() >= -120 and codes[0].max() <= 105
    assert np.any(codes[0] % 2) and np.abs(codes[0]).max() > 8  # k * q with k > 1
    tester.to_executorch().run()
    for stats in compare_with_qdq(tester):
        print(stats)


def test_transposed_conv_lpbq_block_sizes():
    """A transposed conv's block size blocks its input channels (dim 0): an int b is
    (b, 1, *kernel); (1, b, ..), a block of 1 channel and grouped transposed convs raise."""

    class Grouped(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.ConvTranspose2d(16, 8, 2, stride=2, groups=2)

        def forward(self, x):
            return self.up(x)

    inputs = (randn(1, 16, 3, 3, seed=13),)
    with pytest.raises(ValueError, match="one group"):
        QuantTester(Grouped(), inputs, QuantDtype.use_16a4w_block, block_size_map={"conv_transpose2d": 8})
    up = nn.ConvTranspose2d(16, 8, 2, stride=2)
    for bad in [(1, 8, 2, 2), (1, 1, 2, 2)]:
        with pytest.raises(ValueError, match=r"must be \(b, 1, 2, 2\)"):
            QuantTester(up, inputs, QuantDtype.use_16a4w_block, block_size_map={"conv_transpose2d": bad})
    tester = QuantTester(up, inputs, QuantDtype.use_16a4w_block, block_size_map={"conv_transpose2d": (8, 1, 2, 2)})
    tester.run_and_compare_steps()
    grouped = QuantTester(Grouped(), inputs, QuantDtype.use_16a4w_block).lower()  # no LPBQ by default
    assert not any("BLOCKWISE" in t.quant for t in grouped.payload().tensors)


@needs_qnn
def test_real_qnn_lpbq_matches_host_and_qdq(real_qnn):
    """LPBQ on QNN's engine (SM8650 context binary, x86 emulation): one delegate, each output
    against the host engine and the QDQ reference in 16-bit steps. Measured: linear 100% equal
    to the host engine; the convs 30-34% (max 9-10 steps; vs QDQ 27-28%, max 8-10), as 16a8w
    convs of this size (32% / max 10: the host engine's 16-bit conv is not QNN's arithmetic).
    QNN's own LPBQ encoding gave the linear's channels >= 32 and the 3x3 conv wrong."""
    tester = lpbq_tester()
    blob = one_delegate_blob(tester)
    qnn, host = payload_on_both_engines(blob, tester.inputs, tester.module)
    scales = delegate_output_scales(blob)
    reference = tester.reference_outputs()
    for i, (q, h, ref, bounds) in enumerate(zip(qnn, host, reference, LPBQ_QNN_BOUNDS)):
        vs_host, vs_qdq = step_stats(q, h, scales[i]), step_stats(q, ref, scales[i])
        print(i, "qnn vs host", vs_host, "| qnn vs qdq", vs_qdq)
        assert vs_host.max_diff <= bounds[0] and vs_host.exact_fraction >= bounds[1], f"output {i}: {vs_host}"
        assert vs_qdq.max_diff <= bounds[0] and vs_qdq.exact_fraction >= bounds[1] / 2, f"output {i}: {vs_qdq}"


# (max steps, min equal share) of QNN vs the host engine per LpbqConvs output (16-bit)
LPBQ_QNN_BOUNDS = [(1, 0.9), (16, 0.15), (16, 0.15), (16, 0.15)]
