"""Reshape chains folded to one Reshape (_passes/fold_reshape_chains.py).

QNN 2.51's HTP (SM8650) computes x -> Reshape [2, 10, 32, 1] -> Reshape [1, 20, 32] -> MatMul ->
Reshape [2, 10, 1, 3] wrong (26 off in fp16, host engine exact); torch.einsum("btd,cd->btc")
exports such a chain (unsqueeze -> permute of a size-1 dim -> view). After the pass the chain is
one Reshape and QNN agrees with eager and the host engine."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from backends.qualcomm import QuantDtype
from backends.qualcomm.tests.helpers.quant_tester import QuantTester
from backends.qualcomm.tests.helpers.runtime import assert_qnn_matches_host, one_delegate_blob, payload_on_both_engines
from backends.qualcomm.tests.helpers.tester import QnnTester, randn


class Einsum(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(3, 32))
        self.bias = torch.nn.Parameter(torch.randn(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.einsum("btd,cd->btc", x, self.weight) + self.bias


class ReshapeChainMatMul(torch.nn.Module):
    """Two reshapes (through a trailing size-1 dim) -> bmm -> reshape with a size-1 dim."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(2, 10, 32, 1).reshape(1, 20, 32)
        return torch.bmm(flat, y.t().unsqueeze(0)).view(2, 10, 1, 3) * 2


class UnitTranspose(torch.nn.Module):
    """unsqueeze -> transpose of a size-1 dim -> flatten -> linear: one Reshape, no Transpose."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.unsqueeze(2).transpose(2, 3).flatten(2))


def _reshapes_before_matmul(summary) -> int:
    """Reshapes between the graph input x and the first MatMul / FullyConnected / Conv2d."""
    producer = {out: op for op in summary.ops for out in op.outputs}
    first = next(op for op in summary.ops if op.type in ("MatMul", "FullyConnected", "Conv2d"))
    count, name = 0, first.inputs[0]
    while name in producer and producer[name].type in ("Reshape", "Transpose"):
        assert producer[name].type == "Reshape", f"{producer[name].name} is a Transpose of size-1 dims"
        count, name = count + 1, producer[name].inputs[0]
    return count


@pytest.mark.parametrize(
    "module, inputs",
    [
        (Einsum(), (randn(2, 10, 32),)),
        (ReshapeChainMatMul(), (randn(2, 10, 32), randn(3, 32))),
        (UnitTranspose(), (randn(2, 10, 32),)),
    ],
    ids=["einsum", "reshape_chain", "unit_transpose"],
)
def test_chain_is_one_reshape_fp16(module, inputs):
    tester = QnnTester(module.eval(), inputs).lower()
    one_delegate_blob(tester)
    assert _reshapes_before_matmul(tester.payload()) == 1
    tester.to_executorch().run().compare(rtol=1e-2, atol=1e-2)


def _seeded(*shapes) -> tuple:
    """Inputs that do not depend on the tests run before (xdist orders them differently)."""
    return tuple(torch.randn(shape, generator=torch.Generator().manual_seed(i)) for i, shape in enumerate(shapes))


@pytest.mark.parametrize(
    "module, shapes",
    [
        (Einsum(), [(2, 10, 32)]),
        (ReshapeChainMatMul(), [(2, 10, 32), (3, 32)]),
    ],
    ids=["einsum", "reshape_chain"],
)
def test_chain_on_qnn_matches_eager_fp16(real_qnn, module, shapes):
    """Before the pass QNN was 12.6 (einsum) / 26.4 (chain) off eager; the host engine 7e-3."""
    module, inputs = module.eval(), _seeded(*shapes)
    tester = QnnTester(module, inputs).lower()
    qnn, host = payload_on_both_engines(one_delegate_blob(tester), inputs, module)
    expected = module(*inputs).detach().numpy()
    for got in (qnn[0], host[0]):
        np.testing.assert_allclose(got.reshape(expected.shape), expected, rtol=1e-2, atol=2e-2)
    # fp16 on both engines: a few fp16 ulps apart (outputs up to ~16: ulp 7.8e-3)
    assert float(np.abs(qnn[0] - host[0]).max()) <= 1e-3 * max(1.0, float(np.abs(host[0]).max()))


def test_einsum_on_qnn_8a8w(real_qnn):
    """QNN (the engine of a delegate with a context binary) within the default 8-bit bound of the
    QDQ reference, and within 2 steps of the host engine: with float graph IO (QNN's own Quantize
    before the MatMul) and two requantizing ops (MatMul, then the bias Add), QNN and the host engine
    are 1 step apart on 5-20% of the outputs and 2 steps apart on one output of 60 for 5 of 70
    random weight draws (docs/numerics.md). Without the fold QNN was 12.6 off eager in fp16."""
    inputs = (randn(2, 10, 32),)
    tester = QuantTester(Einsum().eval(), inputs, QuantDtype.use_8a8w).lower()
    assert _reshapes_before_matmul(tester.payload()) == 1
    assert_qnn_matches_host(one_delegate_blob(tester), inputs, None, float_rel=1e-3, max_steps=2)
    tester.to_executorch().run().compare_steps()
