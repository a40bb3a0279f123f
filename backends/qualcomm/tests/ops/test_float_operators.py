"""fp16 operators.

TestQNNFloatingPointOperator: one test per op family, parameterized over shapes and
params; each lowers with QnnPartitioner (fp16 spec), checks full delegation, writes a
.pte, runs it with executorch.runtime and compares with eager PyTorch; plus partitioner
and layout tests that read the payload back with describe_payload."""

from __future__ import annotations

import unittest

import torch
from parameterized import parameterized

from backends.qualcomm.tests.helpers import models_float as m
from backends.qualcomm.tests.helpers.tester import QnnTester, count_op_types, inputs_of, randn


def _run(module: torch.nn.Module, *shapes, **tolerance) -> QnnTester:
    return QnnTester(module, inputs_of(*shapes)).run_and_compare(**tolerance)


def _with_cpu_op() -> torch.nn.Module:
    """sigmoid -> erf (no builder: stays on the CPU, ExecuTorch's portable kernels run it; cumsum,
    trunc and prod were this op until each got one: pick another op without a builder when erf
    gets one) -> relu, * 2."""
    return m.Lambda(lambda x: torch.relu(torch.erf(torch.sigmoid(x) * 1.5)) * 2.0)


class TestQNNFloatingPointOperator(unittest.TestCase):
    # ---- convolution / linear / matmul --------------------------------------------
    @parameterized.expand(
        [
            ("plain", dict(cin=3, cout=8, k=3)),
            ("stride_pad", dict(cin=4, cout=8, k=3, stride=2, padding=1)),
            ("dilation", dict(cin=4, cout=4, k=3, dilation=2, padding=2)),
            ("groups", dict(cin=8, cout=8, k=3, groups=2, padding=1)),
            ("depthwise", dict(cin=8, cout=8, k=3, groups=8, padding=1)),
            ("depthwise_mult", dict(cin=4, cout=8, k=3, groups=4)),
            ("no_bias", dict(cin=3, cout=6, k=1, bias=False)),
            ("rect_kernel", dict(cin=3, cout=5, k=(1, 3), stride=(1, 2), padding=(0, 1))),
        ]
    )
    def test_conv2d(self, _, cfg):
        _run(m.Conv2d(**cfg), (1, cfg["cin"], 12, 12))

    @parameterized.expand([("2d", (4, 16)), ("3d", (2, 5, 16)), ("no_bias", (3, 16), False)])
    def test_linear(self, _, shape, bias=True):
        _run(torch.nn.Linear(16, 8, bias=bias), shape)

    @parameterized.expand(
        [("2d", (4, 8), (8, 5)), ("batched", (2, 4, 8), (2, 8, 3)), ("broadcast", (2, 3, 4, 8), (8, 6))]
    )
    def test_matmul(self, _, a, b):
        _run(m.MatMul(), a, b)

    def test_bmm(self):
        _run(m.Bmm(), (3, 4, 5), (3, 5, 2))

    def test_addmm(self):
        _run(m.AddMm(), (4, 8))

    def test_addmm_beta_alpha(self):
        tester = _run(m.AddMmScaled(), (4, 8))
        self.assertEqual(tester.cpu_nodes(), [])

    # ---- elementwise ----------------------------------------------------------------
    @parameterized.expand(
        [
            (op, shapes)
            for op in ("add", "sub", "mul", "div")
            for shapes in (((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((1, 3, 1, 5), (2, 1, 4, 1)))
        ]
    )
    def test_binary(self, op, shapes):
        _run(m.Binary(op), *shapes)

    @parameterized.expand([("add", 2.5), ("sub", 1.5), ("mul", -3.0), ("div", 4.0), ("rsub", 2.0)])
    def test_binary_scalar(self, op, scalar):
        _run(m.BinaryScalar(op, scalar), (2, 3, 4))

    def test_add_alpha(self):
        _run(m.AddAlpha(), (2, 8), (2, 8))

    # ---- activations ------------------------------------------------------------------
    @parameterized.expand([(name,) for name in m.ACTIVATIONS])
    def test_activation(self, name):
        _run(m.Activation(name), (2, 4, 6, 6))

    @parameterized.expand([(name,) for name in m.MATH_OPS])
    def test_math_op(self, name):
        tester = _run(m.Lambda(m.MATH_OPS[name]), (2, 4, 6, 6))
        self.assertEqual(len(tester.delegate_blobs()), 1)
        self.assertEqual(tester.cpu_nodes(), [])

    def test_qwen3_block_one_delegate(self):
        from backends.qualcomm.tests.helpers.models_quant import TinyQwen3Block

        tester = _run(TinyQwen3Block().eval(), (1, 8, 64))  # RMSNorm pow/rsqrt, rotary neg
        self.assertEqual(len(tester.delegate_blobs()), 1)
        self.assertEqual(tester.cpu_op_names(), [])

    @parameterized.expand(
        [
            ("clamp_both", lambda x: torch.clamp(x, -0.5, 0.75)),
            ("clamp_min", lambda x: torch.clamp(x, min=0.25)),
            ("clamp_max", lambda x: torch.clamp(x, max=-0.1)),
            # decomposes into add + clamp + div with lifted scalar constants (Cast of a 0-d constant)
            ("hardsigmoid_times_two", lambda x: torch.nn.functional.hardsigmoid(x * 3.0) * 2.0),
        ]
    )
    def test_clamp_and_decomposed_activation(self, _, fn):
        tester = _run(m.Lambda(fn), (2, 4, 6, 6))
        self.assertEqual(len(tester.delegate_blobs()), 1)

    def test_gelu_tanh_falls_back(self):
        tester = QnnTester(m.Activation("gelu_tanh"), inputs_of((2, 8))).lower()
        self.assertTrue(
            tester.cpu_nodes() or not tester.delegate_blobs() or count_op_types(tester.payload(), "Gelu") == 0
        )

    # ---- softmax / norms ----------------------------------------------------------------
    @parameterized.expand([("last", -1), ("first", 0), ("middle", 1)])
    def test_softmax(self, _, dim):
        _run(m.Softmax(dim), (3, 4, 5))

    @parameterized.expand(
        [("last", (2, 5, 16), [16]), ("last2", (2, 5, 16), [5, 16]), ("no_affine", (3, 16), [16], False)]
    )
    def test_layer_norm(self, _, shape, normalized, affine=True):
        _run(m.LayerNorm(normalized, affine), shape)

    @parameterized.expand([("4d", (2, 6, 5, 5)), ("2d", (4, 6))])
    def test_batch_norm(self, _, shape):
        _run(m.BatchNorm(6, rank=len(shape)), shape)

    def test_conv_batch_norm_folded(self):
        tester = _run(m.ConvBatchNorm(), (1, 3, 10, 10))
        self.assertEqual(count_op_types(tester.payload(), "Batchnorm"), 0)
        self.assertEqual(count_op_types(tester.payload(), "Conv2d"), 1)

    # ---- reductions / pooling -----------------------------------------------------------
    @parameterized.expand([("hw_keep", [2, 3], True), ("hw", [-1, -2], False), ("c", [1], False), ("last", [-1], True)])
    def test_mean(self, _, dims, keepdim):
        _run(m.Mean(dims, keepdim), (2, 4, 5, 6))

    def test_mean_after_conv(self):
        tester = _run(m.ConvMean(), (1, 3, 8, 8))
        self.assertEqual(count_op_types(tester.payload(), "Transpose"), 1)

    @parameterized.expand([("keep", [1], True), ("all_but_first", [1, 2], False)])
    def test_sum(self, _, dims, keepdim):
        _run(m.Sum(dims, keepdim), (2, 4, 5))

    @parameterized.expand([("k2", 2, None, 0, True), ("k3s2p1", 3, 2, 1, True), ("exclude_pad", 3, 2, 1, False)])
    def test_avg_pool2d(self, _, k, s, p, count_include_pad):
        _run(m.AvgPool(k, s, p, count_include_pad), (1, 4, 9, 9))

    @parameterized.expand([("k2", 2, None, 0), ("k3s2p1", 3, 2, 1)])
    def test_max_pool2d(self, _, k, s, p):
        _run(m.MaxPool(k, s, p), (1, 4, 9, 9))

    @parameterized.expand([("global", (1, 1)), ("half", (2, 3))])
    def test_adaptive_avg_pool2d(self, _, out):
        _run(m.AdaptiveAvgPool(out), (1, 4, 8, 9))

    # ---- shape / indexing -----------------------------------------------------------------
    @parameterized.expand(
        [
            ("view", m.Shape("view"), (2, 3, 4)),
            ("reshape", m.Shape("reshape"), (2, 3, 4)),
            ("permute", m.Shape("permute"), (2, 3, 4)),
            ("transpose", m.Shape("transpose"), (2, 3, 4)),
            ("t", m.Shape("t"), (3, 4)),
            ("unsqueeze", m.Shape("unsqueeze"), (2, 3, 4)),
            ("squeeze", m.Shape("squeeze"), (2, 1, 4)),
            ("expand", m.Shape("expand"), (3, 1)),
            ("expand_rank", m.Shape("expand_rank"), (3, 1)),
            ("flatten", m.Shape("flatten"), (2, 3, 4)),
            ("select", m.Shape("select"), (2, 3, 4)),
            ("select_neg", m.Shape("select_neg"), (2, 3, 4)),
        ]
    )
    def test_shape_op(self, _, module, shape):
        _run(module, shape)

    @parameterized.expand([("dim0", 0), ("dim1", 1), ("neg", -1)])
    def test_cat(self, _, dim):
        _run(m.Cat(dim), (2, 3, 4), (2, 3, 4))

    def test_cat_after_conv(self):
        _run(m.ConvCat(), (1, 3, 6, 6))

    @parameterized.expand([("basic", 1, 1, 3, 1), ("step", 2, 0, None, 2), ("neg", -1, -3, -1, 1)])
    def test_slice(self, _, dim, start, end, step):
        _run(m.Slice(dim, start, end, step), (4, 5, 6))

    def test_embedding(self):
        module = m.Embedding()
        QnnTester(module, (torch.tensor([[1, 5, 9], [0, 2, 2]]),)).run_and_compare()

    def test_zero_pad_folded_into_conv(self):
        tester = _run(m.PadConv(), (1, 3, 9, 9))
        conv = [op for op in tester.payload().ops if op.type == "Conv2d"][0]
        self.assertEqual(conv.params["pad_amount"], [0, 1, 1, 2])

    def test_cast(self):
        x = (torch.arange(24, dtype=torch.float32).reshape(2, 3, 4) - 10.0) * 0.75
        tester = QnnTester(m.CastRoundTrip(), (x,)).run_and_compare()
        self.assertEqual(count_op_types(tester.payload(), "Cast"), 2)

    def test_residual_broadcast_channel_last(self):
        _run(m.ConvBias(), (1, 4, 6, 6))

    # ---- partitioner ------------------------------------------------------------------------
    def test_unsupported_op_falls_back_to_cpu(self):
        tester = QnnTester(_with_cpu_op(), inputs_of((2, 8))).lower()
        self.assertEqual(tester.cpu_op_names(), ["aten.erf.default"])
        self.assertIn("no QNN builder", tester.partitioner.rejected_nodes["aten_erf_default"])
        tester.check_count(2).to_executorch().run().compare()

    def test_skip_node_op_set(self):
        tester = QnnTester(m.ReluSigmoid(), inputs_of((2, 8))).lower(skip_node_op_set={"aten.sigmoid.default"})
        self.assertEqual(tester.cpu_op_names(), ["aten.sigmoid.default"])
        tester.to_executorch().run().compare()

    def test_skip_node_id_set(self):
        tester = QnnTester(m.ReluSigmoid(), inputs_of((2, 8))).lower(skip_node_id_set={"aten_relu_default"})
        self.assertEqual(tester.cpu_op_names(), ["aten.relu.default"])
        tester.to_executorch().run().compare()

    def test_transpose_count_conv_flatten_linear(self):
        tester = _run(m.ConvReluConvLinear(), (1, 3, 8, 8))
        self.assertEqual(count_op_types(tester.payload(), "Transpose"), 2)

    def test_lowering_error_names_node(self):
        from executorch.exir import to_edge

        from backends.qualcomm import QnnDelegate, QnnLoweringError
        from backends.qualcomm.tests.helpers.tester import fp16_compile_specs

        edge = to_edge(torch.export.export(_with_cpu_op(), inputs_of((2, 8)), strict=False))
        with self.assertRaisesRegex(QnnLoweringError, "aten_erf_default"):
            QnnDelegate.preprocess(edge.exported_program(), fp16_compile_specs())

    def test_compile_spec_options(self):
        from backends.qualcomm import QnnExecuTorchLogLevel
        from backends.qualcomm.tests.helpers.tester import fp16_compile_specs
        from backends.qualcomm.utils.compile_spec import graph_names, options_from_compile_specs

        options = options_from_compile_specs(fp16_compile_specs(debug=True, graph_name=["g0"]))
        self.assertEqual(options.logLevel, QnnExecuTorchLogLevel.kLogLevelDebug)
        self.assertEqual(graph_names(options), ["g0"])
        self.assertEqual(options.socInfo.htpInfo.vtcmSizeInMb, 8)
        for flag, field in (
            ("saver", "saver"),
            ("online_prepare", "onlinePrepare"),
            ("shared_buffer", "sharedBuffer"),
            ("is_from_context_binary", "isFromContextBinary"),
        ):
            self.assertTrue(getattr(options_from_compile_specs(fp16_compile_specs(**{flag: True})), field))
            with self.assertRaisesRegex(ValueError, flag):
                fp16_compile_specs(**{flag: "yes"})
        with self.assertRaisesRegex(ValueError, "op_package_options"):
            fp16_compile_specs(op_package_options=object())

    def test_payload_metadata(self):
        tester = QnnTester(torch.nn.ReLU(), (randn(2, 3),)).lower()
        summary = tester.payload()
        self.assertTrue(summary.fp16_precision)
        self.assertEqual(summary.name, "forward")
        self.assertEqual([t.kind for t in summary.tensors], ["APP_WRITE", "APP_READ"])


if __name__ == "__main__":
    unittest.main()
