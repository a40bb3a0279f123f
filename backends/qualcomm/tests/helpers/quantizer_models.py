"""Small models and helpers of the quantizer and upstream-API tests: PT2E prepare / convert with
one calibration run, the kinds of weight dequantize and the activation encodings of a converted
graph, running an ExecuTorch program's forward."""

from __future__ import annotations

import torch
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e, prepare_qat_pt2e

from backends.qualcomm import QnnQuantizer
from backends.qualcomm.tests.helpers.tester import _to_numpy

_aten = torch.ops.aten


class EmbedConvLinear(torch.nn.Module):
    """embedding -> linear, and conv2d (bias): every weighted op family in one module (no op
    after a weighted one: with QAT ranges a 1-step difference would double through a relu)."""

    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(12, 32)
        self.linear = torch.nn.Linear(32, 16)
        self.conv = torch.nn.Conv2d(16, 8, 3, padding=1)
        with torch.no_grad():  # rows of very different ranges: per-row scales matter
            self.embedding.weight.mul_(torch.linspace(0.05, 4.0, 12)[:, None])

    def forward(self, idx, image):
        return self.linear(self.embedding(idx)), self.conv(image)


def run_program(et_program, inputs):
    from executorch.runtime import Runtime

    from backends.qualcomm.utils.runtime_options import require_extension

    require_extension()
    program = Runtime.get().load_program(et_program.buffer)  # keep: its methods point into it
    method = program.load_method("forward")
    return _to_numpy(method.execute(list(inputs)))


def weight_kinds(converted: torch.fx.GraphModule) -> dict:
    """{op: 'per_channel' / 'affine' (LPBQ) / 'per_tensor'} of each weighted op's weight dequantize."""
    positions = {_aten.embedding.default: 0, _aten.linear.default: 1, _aten.conv2d.default: 1}
    kinds = {}
    for node in converted.graph.nodes:
        if node.target in positions:
            dq = str(node.args[positions[node.target]].target)
            kind = "per_channel" if "per_channel" in dq else "affine" if "affine" in dq else "per_tensor"
            kinds[str(node.target).split(".")[1]] = kind
    return kinds


def prepare_calibrated(
    module: torch.nn.Module, inputs, quantizer: QnnQuantizer, is_qat: bool = False
) -> torch.fx.GraphModule:
    exported = torch.export.export(module, tuple(inputs), strict=True).module()
    prepared = prepare_qat_pt2e(exported, quantizer) if is_qat else prepare_pt2e(exported, quantizer)
    prepared(*inputs)
    return prepared


def convert_calibrated(module, inputs, quantizer) -> torch.fx.GraphModule:
    return convert_pt2e(prepare_calibrated(module, inputs, quantizer))


def activation_quantize_args(converted: torch.fx.GraphModule, target_name: str) -> list:
    """(scale, zero_point, qmin, qmax) of the activation quantize nodes after each `target_name` node."""
    found = []
    for node in converted.graph.nodes:
        if node.op == "call_function" and target_name in str(node.target):
            for user in node.users:
                if user.target == torch.ops.quantized_decomposed.quantize_per_tensor.default:
                    found.append(tuple(user.args[1:5]))
    return found


def activation_observer(prepared: torch.fx.GraphModule, target, position: int = 0):
    """The observer / fake-quant module on input `position` of the first `target` node."""
    node = next(n for n in prepared.graph.nodes if n.target == target)
    return prepared.get_submodule(node.args[position].target)


class ConvThenFc(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 1)
        self.linear = torch.nn.Linear(4, 6)

    def forward(self, x):
        return self.linear(torch.relu(self.conv(x)).mean(dim=(2, 3)))
