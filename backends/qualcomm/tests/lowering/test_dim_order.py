"""Delegate inputs and outputs in dim orders other than contiguous.

A model exported with a channels_last example input gets channels_last input (and, for
convs, output) tensors in the program. The delegate stores every graph input / output in
the caller's dim order (the payload says which): a channels_last rank-4 input is read as
the channel-last (NHWC) tensor the engine uses anyway, so a conv model needs no Transpose at
all; any other order gets one Transpose. The backend checks that the caller's tensor has the
dim order the delegate was lowered for and refuses (InvalidArgument) instead of reading the
memory in the wrong order. (ExecuTorch's Python runtime copies an input's bytes into the
program's input tensor without comparing memory formats: feed inputs in the memory format
of the example input.)"""

from __future__ import annotations

import unittest

import numpy as np
import pytest
import torch

from backends.qualcomm import QuantDtype
from backends.qualcomm.tests.helpers.quant_tester import QuantTester
from backends.qualcomm.tests.helpers.runtime import QNN_LOADED, assert_qnn_matches_host
from backends.qualcomm.tests.helpers.tester import QnnTester, count_op_types, randn

CHANNELS_LAST = [0, 2, 3, 1]


class ConvRelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


class ToChannelsLastConv(torch.nn.Module):
    """A memory-format change inside the model (`_to_dim_order_copy` with dim order [0, 2, 3, 1])
    before two convs, as upstream's Conv2dSequential(channel_last=True)."""

    def __init__(self):
        super().__init__()
        self.first, self.second = torch.nn.Conv2d(1, 3, 3, padding=1), torch.nn.Conv2d(3, 2, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x.to(memory_format=torch.channels_last)))


class ScaleShift(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2.0 + 1.0


def _channels_last(*shape: int) -> torch.Tensor:
    return randn(*shape).contiguous(memory_format=torch.channels_last)


def _io_dim_orders(tester: QnnTester) -> tuple:
    summary = tester.payload()
    by_name = {t.name: t for t in summary.tensors}
    return (
        [by_name[n].dim_order for n in summary.inputs],
        [by_name[n].dim_order for n in summary.outputs],
        [by_name[n].dims for n in summary.inputs],
    )


class TestQNNDimOrder(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)

    def test_channels_last_conv_fp16(self):
        x = _channels_last(1, 3, 8, 8)
        tester = QnnTester(ConvRelu(), (x,)).lower().check_fully_delegated()
        inputs, outputs, input_dims = _io_dim_orders(tester)
        self.assertEqual((inputs, outputs, input_dims), ([CHANNELS_LAST], [CHANNELS_LAST], [[1, 8, 8, 3]]))
        self.assertEqual(count_op_types(tester.payload(), "Transpose"), 0)  # NHWC in, NHWC out
        tester.to_executorch().run()
        self.assertTrue(tester.outputs[0].strides[1] == tester.outputs[0].itemsize)  # channels_last out
        tester.compare(rtol=1e-2, atol=1e-2)

    def test_channels_last_conv_runner(self):
        """qnn_executor_runner copies each raw input file into the program's input tensor and
        writes each output tensor's memory as is: for a channels_last program both are NHWC,
        and the outputs equal the Python runtime's."""
        from pathlib import Path

        from backends.qualcomm.utils import pte_tools

        x = _channels_last(1, 3, 8, 8)
        tester = QnnTester(ConvRelu(), (x,)).lower().to_executorch().run()
        folder = Path(tester.tmp_dir)
        input_list = pte_tools.write_input_files([[x.permute(0, 2, 3, 1)]], folder / "inputs")  # NHWC bytes
        result = pte_tools.run_runner(Path(tester.pte_path), input_list, folder / "outputs")
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        got = np.fromfile(folder / "outputs" / "output_0_0.raw", dtype=np.float32).reshape(1, 8, 8, 4)
        np.testing.assert_array_equal(got, tester.outputs[0].transpose(0, 2, 3, 1))
        want = tester.reference_outputs()[0].transpose(0, 2, 3, 1)  # eager, in NHWC memory order
        np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2 * max(1.0, float(np.abs(want).max())))

    def test_contiguous_conv_has_two_transposes(self):
        tester = QnnTester(ConvRelu(), (randn(1, 3, 8, 8),)).lower()
        inputs, outputs, _ = _io_dim_orders(tester)
        self.assertEqual((inputs, outputs), ([[]], [[]]))
        self.assertEqual(count_op_types(tester.payload(), "Transpose"), 2)
        tester.to_executorch().run().compare(rtol=1e-2, atol=1e-2)

    def test_permuted_rank3_input(self):
        """Any other dim order: the input tensor holds the caller's memory (dims in memory
        order) and one Transpose makes it logical; the output is written back in its dim
        order. (ExecuTorch's runtime only passes contiguous / channels_last inputs, so the
        payload runs directly on the engine with the tensors in memory order.)"""
        from backends.qualcomm import _qnn_delegate

        x = randn(6, 4, 2).permute(2, 1, 0)  # logical [2, 4, 6], dim order (2, 1, 0)
        tester = QnnTester(ScaleShift(), (x,)).lower().check_fully_delegated()
        inputs, outputs, input_dims = _io_dim_orders(tester)
        self.assertEqual((inputs, outputs, input_dims), ([[2, 1, 0]], [[2, 1, 0]], [[6, 4, 2]]))
        self.assertEqual(count_op_types(tester.payload(), "Transpose"), 2)
        memory_order = x.permute(2, 1, 0).contiguous().numpy()
        got = _qnn_delegate.run_payload(tester.delegate_blobs()[0], [memory_order])[0]
        want = (x * 2.0 + 1.0).permute(2, 1, 0).numpy()
        np.testing.assert_allclose(np.asarray(got).reshape(want.shape), want, rtol=1e-2, atol=1e-2)

    def test_channels_last_conv_8a8w(self):
        x = _channels_last(1, 3, 8, 8)
        module = ConvRelu()
        tester = QuantTester(module, (x,), QuantDtype.use_8a8w).lower().check_fully_delegated()
        inputs, outputs, _ = _io_dim_orders(tester)
        self.assertEqual((inputs, outputs), ([CHANNELS_LAST], [CHANNELS_LAST]))
        self.assertEqual(count_op_types(tester.payload(), "Transpose"), 0)
        tester.to_executorch().run()
        # the same module lowered for a contiguous input (same encodings, two Transposes): the
        # dim order changes nothing but the memory layout, so the outputs are bit-identical
        contiguous = QuantTester(module, (x.contiguous(),), QuantDtype.use_8a8w).lower()
        self.assertEqual(_io_dim_orders(contiguous)[:2], ([[]], [[]]))
        self.assertEqual(count_op_types(contiguous.payload(), "Transpose"), 2)
        contiguous.to_executorch().run()
        np.testing.assert_array_equal(tester.outputs[0], contiguous.outputs[0])
        # against the PT2E module with the relu fused into the conv as HTP does (one
        # requantization, into the relu's step, about half the conv's): measured 89.1% of 256
        # exact, 10.5% at 1 step, 1 element at 2
        tester.compare_steps(max_step_diff=2, min_exact=0.85)

    def test_dim_order_mismatch_is_refused(self):
        """A delegate lowered for a channels_last input, in a program whose input is contiguous
        (made here by patching the lowering): the backend refuses the contiguous tensor
        (InvalidArgument) instead of reading NCHW memory as NHWC."""
        from unittest import mock

        from executorch.runtime import Runtime

        from backends.qualcomm._passes import layout_transform
        from backends.qualcomm.builders import graph_builder

        def channels_last_inputs(val):
            return tuple(CHANNELS_LAST) if isinstance(val, torch.Tensor) and val.dim() == 4 else ()

        tester = QnnTester(ConvRelu(), (randn(1, 3, 8, 8),))
        with (
            mock.patch.object(graph_builder, "io_dim_order", channels_last_inputs),
            mock.patch.object(layout_transform, "io_dim_order", channels_last_inputs),
        ):
            tester.lower()
        inputs, outputs, _ = _io_dim_orders(tester)
        self.assertEqual((inputs, outputs), ([CHANNELS_LAST], [[]]))
        tester.to_executorch()
        program = Runtime.get().load_program(tester.pte_path)  # keep: its methods point into it
        method = program.load_method("forward")
        with self.assertRaises(RuntimeError):
            method.execute([randn(1, 3, 8, 8)])


if __name__ == "__main__":
    unittest.main()


@pytest.mark.parametrize("quantized", [False, True], ids=["fp16", "8a8w"])
def test_memory_format_change_inside_the_model_is_delegated(qnn_binary, quantized):
    """The dim-order copy is delegated as an identity (inside a delegate a tensor has no memory
    format; only graph inputs / outputs carry a dim order): one delegate, a contiguous input, a
    channels_last output, values vs eager (fp16) / the QDQ reference (8a8w), QNN vs host."""
    torch.manual_seed(0)
    x = (randn(1, 1, 3, 3),)
    tester = (
        QuantTester(ToChannelsLastConv(), x, QuantDtype.use_8a8w) if quantized else QnnTester(ToChannelsLastConv(), x)
    )
    tester.lower().check_fully_delegated()
    assert tester.cpu_op_names() == []
    inputs, outputs, _ = _io_dim_orders(tester)
    assert (inputs, outputs) == ([[]], [CHANNELS_LAST])
    tester.to_executorch().run()
    if quantized:
        tester.compare_steps(max_step_diff=1, min_exact=0.9)
    else:
        tester.compare(rtol=1e-2, atol=1e-2)
    if QNN_LOADED:
        assert_qnn_matches_host(tester.delegate_blobs()[0], x, None, float_rel=2e-3, max_steps=1, min_exact=0.9)
