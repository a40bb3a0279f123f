"""ExecuTorch's own devtools flow on our programs: to_edge_transform_and_lower with
QnnPartitioner and generate_etrecord=True, Runtime with ETDump and a debug buffer, then
Inspector.calculate_numeric_gap. The delegate logs each dumped tensor as the edge node it
stands for (dequantized, in PyTorch's layout; a conv's tensor also stands for the batch norm /
quantize / dequantize folded into it), and pads each handle for delegates with several outputs
(TensorDump.h, qnn_preprocess._debug_handle_map). Also our QNNIntermediateDebugger on the same
models (plain and isolated references, folded batch norms, a damaged delegate) and node-by-node
comparison of the two engines. Runs on QNN's engine when its library loads, else on the host."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Tuple

import pytest
import torch

from backends.qualcomm import (
    QcomChipset,
    QnnPartitioner,
    generate_htp_compiler_spec,
    generate_qnn_executorch_compiler_spec,
)
from backends.qualcomm.debugger import QNNIntermediateDebugger, SQNRComparator
from backends.qualcomm.debugger.dump_info import collect_dumped_tensors
from backends.qualcomm.tests.helpers.debug_run import DebugRun, quantize_8a8w
from backends.qualcomm.tests.helpers.runtime import QNN_LOADED, needs_qnn
from backends.qualcomm.utils.qnn_context import AOT_ENV

nn = torch.nn


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 16, 3, stride=2)
        self.fc = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc(self.c2(torch.relu(self.c1(x))).mean((2, 3)))


class ResBlockBN(nn.Module):
    """conv -> BN -> relu -> conv -> BN -> + skip -> relu (both BNs folded into their convs)."""

    def __init__(self):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.c2, self.b2 = nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8)
        generator = torch.Generator().manual_seed(1)
        for bn in (self.b1, self.b2):  # non-trivial statistics: folding changes the conv's output
            bn.running_mean.copy_(torch.rand(8, generator=generator) * 2 - 1)
            bn.running_var.copy_(torch.rand(8, generator=generator) * 1.5 + 0.5)
            bn.weight.data.copy_(torch.rand(8, generator=generator) * 1.5 + 0.5)
            bn.bias.data.copy_(torch.rand(8, generator=generator) * 2 - 1)

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        return torch.relu(self.b2(self.c2(y)) + y)


class BlockWithCpuSections(nn.Module):
    """A transformer block split into three delegates by two CPU ops (erf has no builder); the
    first delegate has two outputs (the residual and the attention probabilities)."""

    def __init__(self, d: int = 16):
        super().__init__()
        self.ln, self.qkv, self.o = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        q, k, v = self.qkv(self.ln(x)).chunk(3, dim=-1)
        attention = torch.erf(torch.softmax(q @ k.transpose(-1, -2) / 4.0, -1))
        y = torch.erf(self.o(attention @ v)) + x
        return self.o(y)


def _specs(fp16: bool) -> list:
    return generate_qnn_executorch_compiler_spec(
        QcomChipset.SM8650, generate_htp_compiler_spec(use_fp16=fp16), dump_intermediate_outputs=True
    )


class PlainFlow:
    """The standard devtools flow, as docs/debugging.md shows it: plain to_edge_transform_and_lower."""

    def __init__(self, module: nn.Module, sample: Tuple[torch.Tensor, ...], folder: Path, quantized: bool = False):
        from executorch.exir import to_edge_transform_and_lower
        from executorch.runtime import Runtime

        model = quantize_8a8w(module, sample) if quantized else module.eval()
        edge = to_edge_transform_and_lower(
            torch.export.export(model, sample),
            partitioner=[QnnPartitioner(_specs(fp16=not quantized))],
            generate_etrecord=True,
        )
        self.dumped = collect_dumped_tensors(edge.exported_program())
        program = edge.to_executorch()
        self.pte, self.etrecord = folder / "model.pte", folder / "model.etrecord"
        self.pte.write_bytes(program.buffer)
        etrecord = program.get_etrecord()
        etrecord.update_representative_inputs(sample)
        etrecord.save(str(self.etrecord))
        self.etdump, self.debug_buffer = folder / "run.etdp", folder / "run.debug"
        runtime_program = Runtime.get().load_program(str(self.pte), enable_etdump=True, debug_buffer_size=16 << 20)
        runtime_program.load_method("forward").execute(list(sample))
        runtime_program.write_etdump_result_to_file(str(self.etdump), str(self.debug_buffer))

    def numeric_gap(self, reference_graph: Optional[str] = None):
        from executorch.devtools import Inspector

        inspector = Inspector(
            etdump_path=str(self.etdump), etrecord=str(self.etrecord), debug_buffer_path=str(self.debug_buffer)
        )
        return inspector.calculate_numeric_gap("MSE", reference_graph=reference_graph)


def _row_errors(df) -> List[Tuple[List[str], float, float]]:
    """(aot ops, max |aot - runtime|, max |aot|) per row; shapes must agree."""
    rows = []
    for _, row in df.iterrows():
        aot, runtime = row["aot_intermediate_output"], row["runtime_intermediate_output"]
        assert isinstance(aot, torch.Tensor) and isinstance(runtime, torch.Tensor), row["aot_ops"]
        assert tuple(aot.shape) == tuple(runtime.shape), (row["aot_ops"], aot.shape, runtime.shape)
        rows.append(
            (
                list(row["aot_ops"]),
                float((aot.double() - runtime.double()).abs().max()),
                float(aot.double().abs().max()),
            )
        )
    return rows


@pytest.fixture(scope="module")
def quant_conv(tmp_path_factory):
    """Lowered with QNN's context binary when its library loads: the flow then runs on QNN's
    engine (its own intermediate tensors), else on the host engine."""
    torch.manual_seed(0)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(AOT_ENV, "1" if QNN_LOADED else "0")
        return PlainFlow(ConvNet(), (torch.randn(1, 3, 8, 8),), tmp_path_factory.mktemp("insp_q"), quantized=True)


def test_quantized_conv_model_one_row_per_delegated_node(quant_conv):
    """Defect 1 (channel-last, quantized tensors against NCHW float): every dumped node gives a
    row, its tensor in the reference's shape and within 1.5 steps of its encoding (each row
    groups the op with its quantize / dequantize; the last one is the float graph output)."""
    df = quant_conv.numeric_gap()
    assert len(df) == len(quant_conv.dumped) == 6, df["aot_ops"].tolist()
    scales = [infos[0].scale for _, infos in sorted(quant_conv.dumped.items())]
    assert all(scale is not None for scale in scales[:-1]) and scales[-1] is None, scales
    rows = _row_errors(df)
    for (ops, err, magnitude), scale in zip(rows, scales):
        assert any("quantize" in op for op in ops), ops
        assert err <= (1.5 * scale if scale is not None else 1e-2 * max(magnitude, 1.0)), (ops, err, scale)
    assert sum(any(op.startswith("conv") for op in ops) for ops, _, _ in rows) == 2


@pytest.fixture(scope="module")
def fp16_resnet(tmp_path_factory):
    torch.manual_seed(0)
    return PlainFlow(ResBlockBN(), (torch.randn(1, 3, 8, 8),), tmp_path_factory.mktemp("insp_bn"))


def test_fp16_batch_norm_folded_into_conv_maps_to_the_batch_norm(fp16_resnet):
    """Each conv row holds its folded BatchNorm too (the tensor is compared with the batch
    norm's output, not the conv's: before, conv rows showed MSE 0.45-0.76)."""
    rows = _row_errors(fp16_resnet.numeric_gap())
    assert [ops for ops, _, _ in rows] == [
        ["conv2d", "batch_norm"],
        ["relu"],
        ["conv2d_1", "batch_norm_1"],
        ["add"],
        ["relu_1"],
    ]
    for ops, err, magnitude in rows:
        assert err <= 5e-3 * max(magnitude, 1.0), (ops, err)


def test_edge_reference_graph_rows(fp16_resnet):
    """With the edge dialect program as reference, the batch norm is a 3-output node, which the
    Inspector does not compare (upstream: AOT outputs of length > 1 are skipped): the conv rows
    disappear instead of comparing the conv's pre-norm output with the folded tensor."""
    rows = _row_errors(fp16_resnet.numeric_gap("edge_dialect_exported_program"))
    assert [ops for ops, _, _ in rows] == [["aten_relu_default"], ["aten_add_tensor"], ["aten_relu_default_1"]]


class PadConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return torch.relu(self.conv(torch.nn.functional.pad(x, (1, 1, 1, 1))))


def test_pad_folded_into_conv_shares_its_row(tmp_path):
    """A zero pad folded into the conv after it: one row [pad, conv], the conv's output."""
    torch.manual_seed(0)
    rows = _row_errors(PlainFlow(PadConv(), (torch.randn(1, 3, 6, 6),), tmp_path).numeric_gap())
    assert [ops for ops, _, _ in rows] == [["pad", "conv2d"], ["relu"]], rows
    assert all(err <= 5e-3 * max(magnitude, 1.0) for _, err, magnitude in rows), rows


def test_three_delegates_with_cpu_sections(tmp_path):
    """Defect 2: the Inspector gives every event inside a delegate call the delegate's number of
    outputs and indexed past our one-handle tuples (IndexError): now one row per delegated node
    and per CPU op."""
    torch.manual_seed(0)
    flow = PlainFlow(BlockWithCpuSections(), (torch.randn(1, 6, 16),), tmp_path)
    rows = _row_errors(flow.numeric_gap())
    ops = [op for row_ops, _, _ in rows for op in row_ops]
    assert ops.count("erf") == 1 and ops.count("erf_1") == 1 and ops.count("softmax") == 1, ops
    assert len(rows) == 12, ops  # 10 delegated nodes (chunk's split has 3 outputs: no row) + 2 CPU erf
    for row_ops, err, magnitude in rows:
        assert err <= 5e-3 * max(magnitude, 1.0), (row_ops, err)


# ---- our debugger on the same models ----------------------------------------------------------


def test_debugger_fp16_batch_norm_no_false_failures(tmp_path):
    """Defect 3: convs with a folded BatchNorm were reported failing (SQNR -7..3 dB), worse
    isolated; now they are compared with the batch norm's output, in both modes."""
    torch.manual_seed(0)
    run = DebugRun(ResBlockBN(), (torch.randn(1, 3, 8, 8),), tmp_path, comparator=SQNRComparator(40.0))
    assert run.report.failed == [] and len(run.report.compared) == 5, run.report.summary()
    isolated = run.debugger.compare(run.etdump, run.debug_buffer, SQNRComparator(40.0), isolate=True)
    assert isolated.failed == [] and len(isolated.compared) == 5, isolated.summary()
    convs = [r for r in run.report.rows if r.target == "aten.convolution.default"]
    assert len(convs) == 2 and all("holds the output" in r.reason for r in convs), [r.reason for r in convs]


def test_debugger_fp16_batch_norm_damaged_conv(tmp_path):
    """The second conv's weights coarsened to 2 bits in the delegate: the first (and, isolated,
    the only) failing row is its folded batch norm's, which holds the conv's tensor."""
    torch.manual_seed(0)
    run = DebugRun(
        ResBlockBN(),
        (torch.randn(1, 3, 8, 8),),
        tmp_path,
        comparator=SQNRComparator(40.0),
        damage_node="aten_convolution_default_1",
    )
    first = run.report.first_failure
    assert first is not None and first.target == "aten._native_batch_norm_legit_no_training.default", (
        run.report.summary()
    )
    isolated = run.debugger.compare(run.etdump, run.debug_buffer, SQNRComparator(40.0), isolate=True)
    assert [r.debug_handle for r in isolated.failed] == [first.debug_handle], isolated.summary()


def test_debugger_three_delegates_correct_and_damaged(tmp_path):
    """No failure on the correct three-delegate block; with the attention output projection's
    weights coarsened in its delegate (the second one), that linear is the first failing node."""
    torch.manual_seed(0)
    sample = (torch.randn(1, 6, 16),)
    run = DebugRun(BlockWithCpuSections(), sample, tmp_path / "block", comparator=SQNRComparator(40.0))
    assert run.report.failed == [] and len(run.report.compared) >= 10, run.report.summary()
    torch.manual_seed(0)
    damaged = DebugRun(
        BlockWithCpuSections(),
        sample,
        tmp_path / "damaged",
        comparator=SQNRComparator(40.0),
        damage_node="aten_linear_default_1",
    )
    first = damaged.report.first_failure
    assert first is not None and first.node == "aten_linear_default_1", damaged.report.summary()


def test_debugger_quantized_damaged_conv(tmp_path):
    torch.manual_seed(0)
    damaged = DebugRun(
        ConvNet(),
        (torch.randn(1, 3, 8, 8),),
        tmp_path,
        quantized=True,
        comparator=SQNRComparator(20.0),
        damage_node="aten_convolution_default_1",
    )
    assert damaged.report.first_failure is not None
    assert damaged.report.first_failure.node == "aten_convolution_default_1", damaged.report.summary()


# ---- the two engines, node by node ---------------------------------------------------------------


@needs_qnn
def test_compare_engines_node_by_node(quant_conv, tmp_path):
    """QNN's engine against the host engine on every dumped node (QNN's own intermediate
    tensors, read through the same dumper): every node within 1 step; the report names the
    first node where they differ by more."""
    torch.manual_seed(0)
    debugger = QNNIntermediateDebugger((torch.randn(1, 3, 8, 8),))
    debugger.dumped = quant_conv.dumped
    report = debugger.compare_engines(str(quant_conv.pte), str(tmp_path))
    assert len(report.compared) == 6 and report.failed == [], report.summary()
    steps = [r.value for r in report.compared if r.metric == "max_steps"]
    assert len(steps) == 5 and max(steps) <= 1, [(r.metric, r.value) for r in report.compared]
    same = debugger.compare_engines(str(quant_conv.pte), str(tmp_path / "same"), engines=("host", "host"))
    assert len(same.compared) == 6 and all(r.value == 0 for r in same.compared)


@needs_qnn
def test_compare_engines_really_runs_qnn(fp16_resnet, tmp_path):
    """The engine option reaches the runtime: QNN's engine refuses a program lowered without its
    context binary (fp16_resnet is lowered payload-only), so the comparison cannot silently run
    the host engine twice."""
    debugger = QNNIntermediateDebugger((torch.randn(1, 3, 8, 8),))
    debugger.dumped = fp16_resnet.dumped
    with pytest.raises(RuntimeError, match="load method"):
        debugger.compare_engines(str(fp16_resnet.pte), str(tmp_path))
