"""Eval batch norm on rank 3 (BatchNorm1d after a conv1d / on [N, C, L]) and rank 5
(BatchNorm3d): channel-last Batchnorm on both engines (rank 5 as [N, D*H, W, C]: HTP's Batchnorm
takes rank 2 to 4). Before: "batch norm input must be rank 2 or 4", left on the CPU (the
Conformer convolution module split in two delegates)."""

from __future__ import annotations

import pytest
import torch

from backends.qualcomm.tests.helpers.runtime import assert_qnn_matches_host, one_delegate_blob
from backends.qualcomm.tests.helpers.tester import QnnTester, randn


def _randomize(bn: torch.nn.modules.batchnorm._BatchNorm) -> None:
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2.0)
    bn.weight.data.uniform_(0.5, 1.5)
    bn.bias.data.uniform_(-1, 1)


class BatchNorm1dAfterConv(torch.nn.Module):
    """depthwise conv1d -> BatchNorm1d (folds into the conv) -> relu, plus a BatchNorm1d on the
    input itself (a Batchnorm op)."""

    def __init__(self, channels: int = 8):
        super().__init__()
        self.conv = torch.nn.Conv1d(channels, channels, 3, padding=1, groups=channels)
        self.bn_conv, self.bn_input = torch.nn.BatchNorm1d(channels), torch.nn.BatchNorm1d(channels)
        _randomize(self.bn_conv)
        _randomize(self.bn_input)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn_conv(self.conv(x))) + self.bn_input(x)


class BatchNorm3dScaled(torch.nn.Module):
    def __init__(self, channels: int = 4):
        super().__init__()
        self.bn = torch.nn.BatchNorm3d(channels)
        _randomize(self.bn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(x) * 2.0


CASES = [("rank3", BatchNorm1dAfterConv, (2, 8, 16)), ("rank5", BatchNorm3dScaled, (1, 4, 3, 4, 5))]


@pytest.mark.parametrize("name, make, shape", CASES)
def test_eval_batch_norm_any_rank_fp16(name, make, shape):
    torch.manual_seed(0)
    tester = QnnTester(make().eval(), (randn(*shape),)).lower()
    tester.check_one_delegate_ops({"Batchnorm": 1})
    tester.to_executorch().run().compare(rtol=5e-3, atol=5e-3)


@pytest.mark.parametrize("name, make, shape", CASES)
def test_eval_batch_norm_any_rank_on_qnn(real_qnn, name, make, shape):
    torch.manual_seed(0)
    inputs = (randn(*shape),)
    blob = one_delegate_blob(QnnTester(make().eval(), inputs).lower())  # QNN's op validation accepts it
    assert_qnn_matches_host(blob, inputs, None, float_rel=2e-3, max_steps=0)
