"""copy (`self.copy_(src)` written functionally, upstream's Copy): src broadcast to self's shape
and cast to self's dtype (Reshape, Tile, Cast), fp16 against eager and 8a8w / 16a8w against the
QDQ reference."""

from __future__ import annotations

import pytest
import torch

from backends.qualcomm import QuantDtype
from backends.qualcomm.tests.helpers.quant_tester import QuantTester
from backends.qualcomm.tests.helpers.tester import QnnTester, randn


class Copies(torch.nn.Module):
    """Into a constant of another shape (broadcast [4, 1] -> [3, 4, 5]), of the same shape, and
    into an int32 tensor (a Cast)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("target", torch.randn(3, 4, 5))

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        broadcast = torch.ops.aten.copy.default(self.target, y + 1)
        same = torch.ops.aten.copy.default(self.target, x * 2)
        return broadcast + 1, same - 1


def _inputs():
    return randn(3, 4, 5, seed=1), randn(4, 1, seed=2)


def test_copy_fp16():
    tester = QnnTester(Copies(), _inputs()).lower()
    tester.check_one_delegate_ops({"Tile": 1})
    tester.to_executorch().run().compare(rtol=1e-3, atol=1e-3)


class IntCopy(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.copy.default(torch.zeros(2, 3, dtype=torch.int32), x * 3) + 1


def test_copy_casts_to_self_dtype():
    inputs = (torch.tensor([[1.0, -2.0, 3.0]]),)
    tester = QnnTester(IntCopy(), inputs).lower()
    tester.check_one_delegate_ops({"Tile": 1})
    tester.to_executorch().run().compare(rtol=0, atol=0)


@pytest.mark.parametrize("quant_dtype", [QuantDtype.use_8a8w, QuantDtype.use_16a8w], ids=["8a8w", "16a8w"])
def test_copy_quantized(quant_dtype):
    QuantTester(Copies(), _inputs(), quant_dtype).run_and_compare_steps()
