"""Ops that needed work to finalize or to match on QNN 2.51's HTP (x86 emulation, SM8650): a
broadcast add before a layer norm (tiled, exact per batch row), a quantized layer norm, a
quantized embedding as a quantized Gather, a bias-free conv and a middle-axis softmax. Skipped
when the library does not load here."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from backends.qualcomm import QuantDtype
from backends.qualcomm.serialization.payload_reader import describe_payload
from backends.qualcomm.tests.helpers.quant_tester import QuantTester, output_encodings, step_stats
from backends.qualcomm.tests.helpers.runtime import needs_qnn, payload_on_both_engines
from backends.qualcomm.tests.helpers.tester import QnnTester, inputs_of

# real_qnn (conftest.py): context binaries at lowering, runtime options reset around each test.
pytestmark = [needs_qnn, pytest.mark.usefixtures("real_qnn")]


class BroadcastAddLayerNorm(torch.nn.Module):
    """x [4, 32, 32] + a [1, 32, 32] constant (broadcast over the batch), then LayerNorm: the
    shape of BERT's embeddings (token + position embedding, LayerNorm)."""

    def __init__(self, affine: bool = True):
        super().__init__()
        self.register_buffer("position", torch.randn(1, 32, 32))
        self.norm = torch.nn.LayerNorm(32, elementwise_affine=affine)

    def forward(self, x):
        return self.norm(x + self.position)


def test_broadcast_add_before_layer_norm_is_tiled_and_exact_per_batch_row():
    """QNN 2.51 fuses a broadcasting add into the LayerNorm after it and then gets every batch
    row but the first wrong (measured: errors of 2.7 on outputs of magnitude 3.4 in fp16). The
    builder repeats the broadcast operand (one Tile), after which each row agrees."""
    torch.manual_seed(0)
    inputs = inputs_of((4, 32, 32))
    tester = QnnTester(BroadcastAddLayerNorm(), inputs).lower()
    blob = tester.delegate_blobs()[0]
    ops = [op.type for graph in describe_payload(blob) for op in graph.ops]
    assert ops.count("Tile") == 1, ops
    qnn, host = payload_on_both_engines(blob, inputs)
    for row in range(4):
        assert float(np.abs(qnn[0][row] - host[0][row]).max()) < 1e-2, f"batch row {row}"


@pytest.mark.parametrize("quant_dtype", [QuantDtype.use_8a8w, QuantDtype.use_16a8w])
@pytest.mark.parametrize("affine", [True, False])
def test_quantized_layer_norm_finalizes_and_matches_host(quant_dtype, affine):
    """A quantized LayerNorm needs quantized gamma / beta on HTP (float ones fail graphFinalize
    with error 1002): the quantizer annotates them, and the builder writes exact integer ones
    / zeros when the module has no affine parameters."""
    torch.manual_seed(0)
    inputs = inputs_of((4, 32, 32))
    tester = QuantTester(BroadcastAddLayerNorm(affine), inputs, quant_dtype).lower()
    blob = tester.delegate_blobs()[0]
    qnn, host = payload_on_both_engines(blob, inputs)
    scale = output_encodings(tester.module)[0][0]
    stats = step_stats(qnn[0], host[0], scale)
    max_steps = 2 if quant_dtype == QuantDtype.use_8a8w else 16
    assert stats.max_diff <= max_steps, str(stats)


class TokenEmbedding(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Embedding(40, 16)

    def forward(self, ids):
        return self.table(ids) * 2.0


@pytest.mark.parametrize("quant_dtype", [QuantDtype.use_8a8w, QuantDtype.use_16a8w])
def test_quantized_embedding_is_a_quantized_gather_on_qnn(quant_dtype):
    """int64 token ids in, a Gather over the quantized table with the table's encoding out (a
    float Gather in a quantized graph fails graphFinalize on HTP); both engines agree."""
    ids = torch.tensor([[1, 5, 9, 39], [0, 2, 2, 7]])
    tester = QuantTester(TokenEmbedding(), (ids,), quant_dtype).lower()
    blob = tester.delegate_blobs()[0]
    gather = next(op for graph in describe_payload(blob) for op in graph.ops if op.type == "Gather")
    tensors = {t.name: t for graph in describe_payload(blob) for t in graph.tensors}
    assert tensors[gather.outputs[0]].quant, "Gather output is not quantized"
    qnn, host = payload_on_both_engines(blob, (ids,))
    scale = output_encodings(tester.module)[0][0]
    assert step_stats(qnn[0], host[0], scale).max_diff <= 1


class ConvNoBiasSoftmaxMiddle(torch.nn.Module):
    """A conv without bias, then softmax over axis 1 of a rank-3 view (HTP's Softmax takes
    only the last axis: the builder moves the axis last with two Transposes)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1, bias=False)

    def forward(self, x):
        return torch.softmax(self.conv(x).reshape(1, 4, 25), 1)


@pytest.mark.parametrize("quant_dtype", [None, QuantDtype.use_8a8w, QuantDtype.use_16a8w])
def test_bias_free_conv_and_middle_axis_softmax_are_delegated_on_qnn(quant_dtype):
    """Both passed our builders' checks but QNN's op validation refused them (FLOAT_32 zero
    bias in a quantized conv: error 3110 'incorrect Value', bias scale must be input x weight
    scale; Softmax axis not last: 'expected equal to 2'): now one delegate with a context
    binary, QNN agreeing with the host engine."""
    torch.manual_seed(0)
    inputs = (torch.randn(1, 3, 5, 5),)
    tester = (
        QnnTester(ConvNoBiasSoftmaxMiddle(), inputs)
        if quant_dtype is None
        else QuantTester(ConvNoBiasSoftmaxMiddle(), inputs, quant_dtype)
    ).lower()
    assert tester.partitioner.summary.cpu_op_counts() == {}
    blobs = tester.delegate_blobs()
    assert len(blobs) == 1
    qnn, host = payload_on_both_engines(blobs[0], inputs)
    if quant_dtype is None:
        assert float(np.abs(qnn[0] - host[0]).max()) < 2e-3
    else:
        scale = output_encodings(tester.module)[0][0]
        assert step_stats(qnn[0], host[0], scale).max_diff <= (2 if quant_dtype == QuantDtype.use_8a8w else 32)
