"""skip_node_op_set: every spelling of an op name (aten / torch.ops / edge op objects), a
linear skipped through its decomposition, bad entries refused at construction."""

from __future__ import annotations

import pytest
import torch

from backends.qualcomm.tests.helpers import models_float as m
from backends.qualcomm.tests.helpers.quant_tester import quant_compile_specs
from backends.qualcomm.tests.helpers.tester import QnnTester, inputs_of


class TestSkipNodeOpSet:
    @pytest.mark.parametrize(
        "entry",
        [
            "aten.conv2d.default",
            "torch.ops.aten.conv2d.default",
            "aten::conv2d",
            "conv2d",
            torch.ops.aten.conv2d.default,
            torch.ops.aten.conv2d,
            "aten.convolution.default",
        ],
        ids=str,
    )
    def test_conv_names_keep_both_convs_on_cpu(self, entry):
        tester = QnnTester(m.ConvReluConvLinear(), inputs_of((1, 3, 8, 8))).lower(skip_node_op_set={entry})
        assert tester.cpu_op_names() == ["aten.convolution.default"] * 2
        assert tester.partitioner.summary.cpu_op_counts() == {"aten.convolution.default": 2}
        tester.check_count(2).to_executorch().run().compare()

    def test_edge_op_object(self):
        from executorch.exir.dialects._ops import ops as exir_ops

        tester = QnnTester(m.ReluSigmoid(), inputs_of((2, 8))).lower(
            skip_node_op_set={exir_ops.edge.aten.sigmoid.default}
        )
        assert tester.cpu_op_names() == ["aten.sigmoid.default"]

    def test_linear_skipped_through_its_decomposition(self):
        tester = QnnTester(m.ConvReluConvLinear(), inputs_of((1, 3, 8, 8))).lower(
            skip_node_op_set={"aten.linear.default"}
        )
        assert sorted(tester.cpu_op_names()) == ["aten.addmm.default", "aten.permute_copy.default"]
        reasons = {g.op: g.reason for g in tester.partitioner.summary.cpu_ops}
        assert reasons["aten.addmm.default"] == "skipped by skip_node_op_set (aten.linear.default)"
        tester.check_count(1).to_executorch().run().compare()

    @pytest.mark.parametrize(
        "entry, message",
        [
            (
                "aten.conv2.default",
                "skip_node_op_set entry 'aten.conv2.default' names no op; did you mean 'aten.conv2d.default'",
            ),
            (
                "aten.conv2d.tensor",
                "skip_node_op_set entry 'aten.conv2d.tensor' names no op; aten.conv2d has "
                "overloads 'aten.conv2d.default', 'aten.conv2d.padding'",
            ),
            ("relux", "skip_node_op_set entry 'relux' names no op; did you mean 'aten.relu'"),
            (42, "skip_node_op_set entry 42 names no op (entries are op names or OpOverload objects, not int)"),
        ],
    )
    def test_bad_entry_raises_at_construction(self, entry, message):
        from backends.qualcomm import QnnPartitioner

        with pytest.raises(ValueError) as info:
            QnnPartitioner(quant_compile_specs(), skip_node_op_set={"aten.relu.default", entry})
        assert str(info.value).startswith(message)

    def test_bad_entry_raises_from_one_call_lowering(self):
        from backends.qualcomm import to_edge_transform_and_lower_to_qnn
        from backends.qualcomm.tests.helpers.tester import fp16_compile_specs

        with pytest.raises(
            ValueError, match="'aten.sigmoidd.default' names no op; did you mean 'aten.sigmoid.default'"
        ):
            to_edge_transform_and_lower_to_qnn(
                m.ReluSigmoid(), inputs_of((2, 8)), fp16_compile_specs(), skip_node_op_set={"aten.sigmoidd.default"}
            )
