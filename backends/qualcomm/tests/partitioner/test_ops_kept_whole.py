"""The ops the partitioner keeps whole (not decomposed by to_edge): exactly the builders' own
keep-whole targets."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from backends.qualcomm.builders.registry import get_builder, registered_targets
from backends.qualcomm.tests.helpers.tester import QnnTester, randn


# ---- ops kept whole (builders' keep_whole) ------------------------------------------------------
class KeptWhole(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear, self.norm = torch.nn.Linear(8, 8), torch.nn.LayerNorm(8)

    def forward(self, x, y):
        h = F.gelu(self.norm(self.linear(x)))
        return torch.matmul(F.silu(h) + F.hardswish(h), y)


class TestOpsKeptWhole:
    def test_partitioner_list_is_every_builders_keep_whole(self):
        tester = QnnTester(KeptWhole(), (randn(2, 3, 8), randn(8, 5))).lower()
        ops, _ = tester.partitioner.ops_to_not_decompose(None)
        by_builder = {
            getattr(t, "_op", t): type(get_builder(t)).__name__
            for t in registered_targets()
            if t in get_builder(t).keep_whole
        }
        assert set(ops) == set(by_builder) and len(ops) == len(by_builder)
        assert {str(op): by_builder[op] for op in ops} == {
            "aten.linear.default": "LinearBuilder",
            "aten.matmul.default": "MatMulBuilder",
            "aten.layer_norm.default": "LayerNormBuilder",
            "aten.gelu.default": "UnaryActivationBuilder",
            "aten.silu.default": "UnaryActivationBuilder",
            "aten.hardswish.default": "UnaryActivationBuilder",
            "aten.hardsigmoid.default": "UnaryActivationBuilder",
            "aten.scaled_dot_product_attention.default": "ScaledDotProductAttentionBuilder",
            "aten.where.ScalarOther": "WhereBuilder",
            "aten.where.ScalarSelf": "WhereBuilder",
            "aten.where.Scalar": "WhereBuilder",
            "aten.masked_fill.Scalar": "WhereBuilder",
            "aten.threshold.default": "WhereBuilder",
            "aten.roll.default": "RollBuilder",
            "aten.stack.default": "StackBuilder",
            "aten.select_scatter.default": "SliceScatterBuilder",
            "aten.prelu.default": "DecomposedMathBuilder",
            "aten.triu.default": "TriangleBuilder",
            "aten.tril.default": "TriangleBuilder",
            "aten.instance_norm.default": "InstanceNormBuilder",
            "aten.rms_norm.default": "RmsNormBuilder",
            "aten.upsample_bicubic2d.vec": "ResizeBuilder",
            "aten.upsample_bicubic2d.default": "ResizeBuilder",
            "aten.upsample_nearest1d.vec": "ResizeBuilder",
            "aten.upsample_nearest1d.default": "ResizeBuilder",
            "aten.pixel_shuffle.default": "ShuffleBuilder",
            "aten.pixel_unshuffle.default": "ShuffleBuilder",
            "aten.channel_shuffle.default": "ShuffleBuilder",
            "aten.max_pool1d.default": "MaxPoolBuilder",
            "aten.avg_pool1d.default": "AvgPoolBuilder",
            "aten.adaptive_avg_pool1d.default": "AdaptivePoolBuilder",
            "aten.pad.default": "PadBuilder",
            "aten.cdist.default": "DistanceBuilder",
            "aten.im2col.default": "Im2ColBuilder",
            "aten.col2im.default": "Col2ImBuilder",
        }
        # Kept whole, each lowers to its own QNN op instead of its decomposition's primitives.
        tester.check_fully_delegated()
        types = tester.payload().op_types()
        for qnn_type in ("FullyConnected", "LayerNorm", "Gelu", "HardSwish", "MatMul"):
            assert types[qnn_type] >= 1, (qnn_type, types)
        tester.run_and_compare()  # fp16 tolerance

    def test_keep_whole_must_name_the_builders_own_targets(self):
        from executorch.exir.dialects._ops import ops as exir_ops

        from backends.qualcomm.builders.registry import NodeBuilder, register_builder

        class Stray(NodeBuilder):
            targets = [exir_ops.edge.aten.erf.default]
            keep_whole = [exir_ops.edge.aten.gelu.default]

        with pytest.raises(TypeError, match="Stray.keep_whole names ops it does not lower"):
            register_builder(Stray)
        assert get_builder(exir_ops.edge.aten.erf.default) is None
