"""Quantizing attention with -inf masks and packed weights (quantizer/inf_masks.py,
quantizer/fold_constant_views.py).

Before: nn.MultiheadAttention with a key_padding_mask, a hand-written
`scores.masked_fill(pad, -inf).softmax(-1)` and a registered -inf causal mask failed to
quantize (torchao: "min nan should be less than max": an observer saw -inf), and a
cross-attention MultiheadAttention (query != key: its packed in_proj weight is split in
forward) lowered to a delegate that refused to load (an 8-bit signed NATIVE tensor)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from backends.qualcomm import QuantDtype
from backends.qualcomm.quantizer import QnnQuantizer
from backends.qualcomm.tests.helpers.quant_tester import QuantTester, float_outputs, sqnr_db
from backends.qualcomm.tests.helpers.runtime import (
    QNN_LOADED,
    assert_qnn_matches_host,
    one_delegate_blob,
    payload_on_both_engines,
)
from backends.qualcomm.tests.helpers.tester import randn

NEG_INF = float("-inf")


def _padding(batch: int = 2, keys: int = 8) -> torch.Tensor:
    pad = torch.zeros(batch, keys, dtype=torch.bool)
    pad[0, 5:] = True
    pad[1, 7:] = True
    return pad


class PaddedSelfAttention(torch.nn.Module):
    def __init__(self, dim: int = 16):
        super().__init__()
        self.attention = torch.nn.MultiheadAttention(dim, 2, batch_first=True)

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        return self.attention(x, x, x, key_padding_mask=pad, need_weights=False)[0]


class CausalPaddedAttention(torch.nn.Module):
    """Both masks: MultiheadAttention turns each into a -inf float mask and adds them."""

    def __init__(self, dim: int = 16):
        super().__init__()
        self.attention = torch.nn.MultiheadAttention(dim, 2, batch_first=True)

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        causal = torch.triu(torch.ones(x.shape[1], x.shape[1], dtype=torch.bool), 1)
        return self.attention(x, x, x, attn_mask=causal, key_padding_mask=pad, need_weights=False)[0]


class CrossAttention(torch.nn.Module):
    def __init__(self, dim: int = 16):
        super().__init__()
        self.attention = torch.nn.MultiheadAttention(dim, 2, batch_first=True)

    def forward(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        return self.attention(x, memory, memory, need_weights=False)[0]


class HandMasked(torch.nn.Module):
    def forward(self, scores: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        return scores.masked_fill(pad[:, None, :], NEG_INF).softmax(-1) * 2


class RegisteredCausal(torch.nn.Module):
    def __init__(self, size: int = 8):
        super().__init__()
        self.register_buffer("mask", torch.triu(torch.full((size, size), NEG_INF), 1))

    def forward(self, scores: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        return (scores + self.mask).softmax(-1) * 2


class ComputedCausal(torch.nn.Module):
    def forward(self, scores: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        return (scores + torch.triu(torch.full((8, 8), NEG_INF), 1)).softmax(-1) * 2


class ChunkedWeights(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(48, 16))
        self.bias = torch.nn.Parameter(torch.randn(48))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        (wa, wb, _), (ba, bb, _) = self.weight.chunk(3), self.bias.chunk(3)
        return F.linear(x, wa, ba) + F.linear(x, wb.t().t(), bb)


class WhereNumbers(torch.nn.Module):
    """Upstream's WhereConstantInf: a softmax of a fill with two numbers, one of them -inf (at
    either position)."""

    def __init__(self, inf_first: bool = False):
        super().__init__()
        self.inf_first = inf_first

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.inf_first:
            return F.softmax(torch.where(x < 0, NEG_INF, 0.1), dim=-1)
        return F.softmax(torch.where(x >= 0, 0.1, NEG_INF), dim=-1)


MASKED = {
    "mha_key_padding": (PaddedSelfAttention, lambda: (randn(2, 8, 16), _padding())),
    "mha_causal_and_padding": (CausalPaddedAttention, lambda: (randn(2, 8, 16), _padding())),
    "hand_masked_fill": (HandMasked, lambda: (randn(2, 8, 8), _padding())),
    "registered_causal": (RegisteredCausal, lambda: (randn(2, 8, 8), _padding())),
    "computed_causal": (ComputedCausal, lambda: (randn(2, 8, 8), _padding())),
}
# also rewritten (no attention: its quantized runs are test_where_numbers_softmax_*)
FILLED = {
    **MASKED,
    "where_numbers": (WhereNumbers, lambda: (randn(30, 20),)),
    "where_numbers_inf_first": (lambda: WhereNumbers(inf_first=True), lambda: (randn(30, 20),)),
}


@pytest.mark.parametrize("name", list(FILLED))
def test_rewrite_is_exact_in_float(name):
    """QnnQuantizer's transform for annotation (SDPA decomposed, -inf masks rewritten as
    softmax * keep, renormalized) leaves no masked_fill and equals eager in float32."""
    module_type, make_inputs = FILLED[name]
    module, inputs = module_type().eval(), make_inputs()
    graph = torch.export.export(module, inputs).module()
    rewritten = QnnQuantizer().transform_for_annotation(graph)
    assert not any(
        n.op == "call_function" and ("masked_fill" in str(n.target) or "where" in str(n.target))
        for n in rewritten.graph.nodes
    )
    torch.testing.assert_close(rewritten(*inputs), module(*inputs), rtol=1e-5, atol=1e-6)


def _one_delegate_as_close_to_float_as_qdq(
    module: torch.nn.Module, inputs: tuple, dtype: QuantDtype, min_sqnr: float
) -> QuantTester:
    """One delegate, no CPU op; the engine's output as close to float (SQNR) as the QDQ
    reference's, within 3 dB (attention's MatMul / Softmax steps differ from PT2E's float
    reference: see ops/test_attention)."""
    tester = QuantTester(module, inputs, dtype).lower()
    assert len(tester.delegate_blobs()) == 1 and tester.cpu_op_names() == []
    tester.to_executorch().run()
    for i, (out, ref, want) in enumerate(
        zip(tester.outputs, tester.reference_outputs(), float_outputs(module, inputs))
    ):
        ours, qdq = sqnr_db(out, want), sqnr_db(ref, want)
        print(f"output {i}: engine {ours:.1f} dB, QDQ {qdq:.1f} dB")
        assert qdq >= min_sqnr, f"output {i}: QDQ reference {qdq:.1f} dB"
        assert ours >= qdq - 3.0, f"output {i}: engine {ours:.1f} dB vs QDQ {qdq:.1f} dB"
    return tester


@pytest.mark.parametrize(
    "dtype, min_sqnr", [(QuantDtype.use_8a8w, 25.0), (QuantDtype.use_16a8w, 40.0)], ids=["8a8w", "16a8w"]
)
@pytest.mark.parametrize("name", list(MASKED))
def test_masked_attention_quantizes_and_runs(name, dtype, min_sqnr):
    module_type, make_inputs = MASKED[name]
    _one_delegate_as_close_to_float_as_qdq(module_type().eval(), make_inputs(), dtype, min_sqnr)


@pytest.mark.parametrize(
    "module, inputs",
    [
        (CrossAttention(), (randn(2, 6, 16), randn(2, 9, 16))),
        (ChunkedWeights(), (randn(2, 8, 16),)),
    ],
    ids=["cross_attention", "chunked_weights"],
)
def test_split_parameters_are_constant_weights(module, inputs):
    tester = _one_delegate_as_close_to_float_as_qdq(module.eval(), inputs, QuantDtype.use_8a8w, 25.0)
    assert not any("split" in str(n.target) or "chunk" in str(n.target) for n in tester.module.graph.nodes)


@pytest.mark.parametrize("dtype", [QuantDtype.use_8a8w, QuantDtype.use_16a8w], ids=["8a8w", "16a8w"])
def test_where_numbers_softmax_against_qdq_on_both_engines(qnn_binary, dtype):
    """softmax(where(x >= 0, 0.1, -inf)) quantized (before: refused at lowering, the -inf gave
    its quantize node an inf scale): one delegate, within upstream's tolerance of the QDQ
    reference (atol 0.1, rtol 1) on both engines. The rewrite's softmax reads a constant, so the
    quantizer leaves it and the ops after it in float like the QDQ reference: the output is
    within float16 rounding of it (values <= 1; measured max: host engine 1.5e-8, QNN 1.6e-4)."""
    inputs = (randn(30, 20),)
    assert not (inputs[0] < 0).all(-1).any()  # every row keeps an entry (eager: NaN otherwise)
    tester = QuantTester(WhereNumbers().eval(), inputs, dtype).lower()
    tester.check_fully_delegated().check_count(1).to_executorch().run()
    reference = torch.from_numpy(tester.reference_outputs()[0])
    runs = [("host engine", tester.outputs[0])]
    if QNN_LOADED:
        qnn, _ = payload_on_both_engines(one_delegate_blob(tester), inputs, tester.module)
        runs.append(("QNN", qnn[0]))
    for what, out in runs:
        out = torch.from_numpy(out)
        err = (out - reference).abs().max().item()
        print(f"{what} vs QDQ ({dtype.name}): max abs diff {err:.3g}")
        assert torch.allclose(out, reference, atol=0.1, rtol=1) and err <= 1e-3, (what, err)


def test_padded_attention_on_qnn(real_qnn):
    """8a8w MultiheadAttention with a key_padding_mask on QNN: QNN vs the host engine."""
    torch.manual_seed(0)
    inputs = (randn(2, 8, 16), _padding())
    module = PaddedSelfAttention().eval()
    tester = QuantTester(module, inputs, QuantDtype.use_8a8w).lower()
    assert_qnn_matches_host(
        one_delegate_blob(tester), inputs, tester.module, float_rel=0.0, max_steps=2, min_exact=0.8
    )  # measured 85.9% equal, max 2 (Softmax steps)


def test_parameter_views_are_kept_for_qat():
    """QAT trains the parameters after prepare: a folded copy of `w.chunk(3)` would not follow,
    so the QAT quantizer keeps views of parameters (constants created in forward still fold)."""
    from backends.qualcomm.quantizer.fold_constant_views import fold_constant_views

    def splits(graph_module) -> int:
        return sum(1 for n in graph_module.graph.nodes if "split" in str(n.target) or "chunk" in str(n.target))

    inputs = (randn(2, 8, 16),)
    assert splits(fold_constant_views(torch.export.export(ChunkedWeights(), inputs).module())) == 0
    kept = fold_constant_views(torch.export.export(ChunkedWeights(), inputs).module(), fold_parameters=False)
    assert splits(kept) > 0
    assert QnnQuantizer().default_quant_config.is_qat is False
    qat = QnnQuantizer()
    qat.set_default_quant_config(QuantDtype.use_8a8w, is_qat=True)
    assert splits(qat.transform_for_annotation(torch.export.export(ChunkedWeights(), inputs).module())) > 0
