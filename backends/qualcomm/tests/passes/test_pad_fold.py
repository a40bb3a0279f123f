"""A pad folded into the conv that reads it: kept with its conv when the conv stays on the CPU
(float and 8a8w), folded when the conv is delegated, and under QAT 16a4w_block with the
depthwise conv left in float."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from backends.qualcomm.tests.helpers import models_float as m
from backends.qualcomm.tests.helpers.engines import assert_host_equals_qnn
from backends.qualcomm.tests.helpers.tester import QnnTester, inputs_of

L = m.Lambda

# ---- a pad whose convolution stays on the CPU ----------------------------------------------------
_PAD_SKIPS = [
    ("op_set", dict(skip_node_op_set={"aten.conv2d.default"})),
    ("id_set", dict(skip_node_id_set={"aten_convolution_default"})),
]

_PAD_REASON = (
    "lowered only together with 'aten_convolution_default' (aten.convolution.default), which stays on the CPU: "
)


class TestPadBeforeCpuConv:
    @pytest.mark.parametrize("how, skip", _PAD_SKIPS, ids=[s[0] for s in _PAD_SKIPS])
    def test_float_pad_stays_with_its_conv(self, how, skip):
        tester = QnnTester(m.PadConv(), inputs_of((1, 3, 9, 9))).lower(**skip)
        assert tester.cpu_op_names() == ["aten.constant_pad_nd.default", "aten.convolution.default"]
        reason = tester.partitioner.rejected_nodes["aten_constant_pad_nd_default"]
        assert reason.startswith(_PAD_REASON) and "skipped by skip_node_" in reason
        tester.to_executorch().run().compare(rtol=1e-5, atol=1e-5)  # nothing delegated: exact

    def test_float_pad_conv_relu_partly_delegated(self):
        pad_conv = m.PadConv()
        module = L(lambda x: torch.relu(pad_conv(torch.sigmoid(x))) * 2.0)
        module.pad_conv = pad_conv
        tester = QnnTester(module, inputs_of((1, 3, 9, 9))).lower(skip_node_op_set={"aten.convolution.default"})
        assert sorted(tester.cpu_op_names()) == ["aten.constant_pad_nd.default", "aten.convolution.default"]
        tester.check_count(2).to_executorch().run().compare()

    @pytest.mark.parametrize("how, skip", _PAD_SKIPS, ids=[s[0] for s in _PAD_SKIPS])
    def test_quantized_8a8w_pad_stays_with_its_conv(self, how, skip):
        """The conv's dequantized weight is produced by a delegate as a float constant (the CPU has
        no dequantize kernel); outputs match the QDQ reference within one step."""
        from backends.qualcomm.tests.helpers.quant_tester import QuantTester

        torch.manual_seed(0)  # the measured numbers below are for these weights
        tester = QuantTester(m.PadConv(), inputs_of((1, 3, 9, 9)))
        tester.lower(**skip)
        assert tester.cpu_op_names() == ["aten.constant_pad_nd.default", "aten.convolution.default"]
        # pad and conv run in float on the CPU; the delegates only quantize / dequantize, and a
        # uint8 Quantize rounds x / scale to float16 first as HTP does (1 step from PT2E near
        # halves): measured 91.25% of 80 exact, max 1
        tester.to_executorch().run().compare_steps(max_step_diff=1, min_exact=0.88)

    def test_quantized_pad_folded_when_conv_delegated(self):
        from backends.qualcomm.tests.helpers.quant_tester import QuantTester

        torch.manual_seed(0)  # the measured numbers below are for these weights
        tester = QuantTester(m.PadConv(), inputs_of((1, 3, 9, 9)))
        # Quantize (HTP's float16 rounding) -> conv with HTP's requantization: measured 92.5% of
        # 80 exact against PT2E, max 1; bit-identical with QNN
        tester.run_and_compare_steps(max_step_diff=1, min_exact=0.88)
        conv = [op for op in tester.payload().ops if op.type == "Conv2d"][0]
        assert conv.params["pad_amount"] == [0, 1, 1, 2]
        assert_host_equals_qnn(tester)


class PadDepthwiseBn(torch.nn.Module):
    """EfficientNet-Lite's stride-2 block: conv, relu6, TF-style pad, depthwise conv (no bias), BN."""

    def __init__(self):
        super().__init__()
        self.c0 = torch.nn.Conv2d(3, 8, 1)
        self.dw = torch.nn.Conv2d(8, 8, 3, stride=2, groups=8, bias=False)
        self.bn = torch.nn.BatchNorm2d(8)

    def forward(self, x):
        return F.relu6(self.bn(self.dw(F.pad(F.relu6(self.c0(x)), [0, 1, 0, 1]))))


class TestPadFoldQat:
    @pytest.mark.slow  # torchao's QAT conv-bn pattern search: ~60 s on 2 cores
    def test_qat_16a4w_block_pad_before_float_conv(self):
        """QAT 16a4w_block leaves the depthwise conv in float (its BN stays unfolded), so FoldQDQ
        keeps a Dequantize between the pad and the conv: the pad still folds into the conv."""
        from backends.qualcomm import QuantDtype
        from backends.qualcomm.tests.helpers.quant_tester import QuantTester

        torch.manual_seed(0)
        tester = QuantTester(PadDepthwiseBn().train(), inputs_of((1, 3, 9, 9)), QuantDtype.use_16a4w_block, is_qat=True)
        tester.run_and_compare_steps()
        convs = [op for op in tester.payload().ops if op.type in ("Conv2d", "DepthWiseConv2d")]
        assert [op.params["pad_amount"] for op in convs][-1] == [0, 1, 0, 1]
        assert "Pad" not in tester.payload().op_types()
