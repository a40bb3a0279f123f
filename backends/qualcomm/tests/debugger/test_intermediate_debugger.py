"""The intermediate-output debugger end to end: lower with dumping on, run with ETDump, compare
each delegated node with the CPU reference (float and 8a8w, a damaged conv named first);
the plain lowering flow; no dumps when dumping is off."""

from __future__ import annotations

import math

import pytest
import torch

from backends.qualcomm.debugger import PASS, SQNRComparator
from backends.qualcomm.tests.helpers.debug_run import DebugRun, debug_specs
from backends.qualcomm.utils.constants import LAYOUT_CHANNEL_LAST
from backends.qualcomm.utils.pte_tools import delegate_blobs


class SimpleModel(torch.nn.Module):
    """conv -> relu -> depthwise conv -> relu -> mean -> linear: channel-last dumps included."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, groups=8)
        self.linear = torch.nn.Linear(8, 6)

    def forward(self, x):
        y = torch.relu(self.conv2(torch.relu(self.conv(x))))
        return self.linear(y.mean((2, 3)))


class TopKModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 10)

    def forward(self, x):
        values, indices = torch.topk(self.linear(x), 4)
        return values * 2.0, indices


@pytest.fixture(scope="module")
def float_run(tmp_path_factory):
    torch.manual_seed(0)
    return DebugRun(SimpleModel(), (torch.randn(1, 3, 12, 12),), tmp_path_factory.mktemp("dbg_float"))


@pytest.fixture(scope="module")
def quant_run(tmp_path_factory):
    torch.manual_seed(0)
    return DebugRun(SimpleModel(), (torch.randn(1, 3, 12, 12),), tmp_path_factory.mktemp("dbg_quant"), quantized=True)


class TestQNNIntermediateDebugger:
    def test_qnn_backend_dump_intermediate_outputs_simple_model(self, float_run):
        report = float_run.report
        assert len(float_run.payload_handles()) == 6  # conv, relu, depthwise conv, relu, mean, linear
        assert {r.debug_handle for r in report.compared} == float_run.payload_handles()
        assert len(report.compared) == 6 and report.failed == []
        assert all(r.value > 60.0 for r in report.compared)  # fp16 vs float32: SQNR in dB

    def test_qnn_backend_dump_intermediate_outputs_simple_model_quantized(self, quant_run):
        report = quant_run.report
        compared = {r.debug_handle for r in report.compared}
        assert compared == quant_run.payload_handles()  # Quantize, 6 ops, Dequantize
        assert len(report.compared) == 8 and report.failed == []
        quantized_rows = [r for r in report.compared if r.scale is not None]
        assert len(quantized_rows) == 7 and all(r.value > 30.0 for r in quantized_rows)
        channel_last = [d for ds in quant_run.debugger.dumped.values() for d in ds if d.layout == LAYOUT_CHANNEL_LAST]
        assert len(channel_last) == 4  # both convs and both relus were dumped NHWC

    def test_qnn_backend_dump_intermediate_outputs_topk(self, tmp_path):
        torch.manual_seed(0)
        run = DebugRun(TopKModel(), (torch.randn(3, 8),), tmp_path)
        topk = [r for r in run.report.rows if r.target == "aten.topk.default"]
        assert [(r.output_index, r.status) for r in topk] == [(0, PASS), (1, PASS)]
        assert topk[1].value == math.inf  # indices are exact
        assert run.report.failed == []

    def test_damaged_quantization_is_the_first_failing_node(self, tmp_path):
        torch.manual_seed(0)
        run = DebugRun(
            SimpleModel(),
            (torch.randn(1, 3, 12, 12),),
            tmp_path,
            quantized=True,
            damage_node="aten_convolution_default_1",
        )
        first = run.report.first_failure
        assert first is not None and first.node == "aten_convolution_default_1"
        assert first.value < 10.0  # 2-bit weights: SQNR collapses
        earlier = [r for r in run.report.compared if r.debug_handle < first.debug_handle]
        assert earlier and all(r.status == PASS for r in earlier)

    def test_isolated_reference_fails_only_the_damaged_node(self, tmp_path):
        """The damaged conv and the relu fused into it (HTP computes the relu from the conv's
        accumulator, so its isolated reference is relu(conv) from the conv's inputs); nothing else."""
        torch.manual_seed(0)
        run = DebugRun(
            SimpleModel(),
            (torch.randn(1, 3, 12, 12),),
            tmp_path,
            quantized=True,
            damage_node="aten_convolution_default_1",
        )
        isolated = run.debugger.compare(run.etdump, run.debug_buffer, SQNRComparator(20.0), isolate=True)
        assert [r.node for r in isolated.failed] == ["aten_convolution_default_1", "aten_relu_default_1"]
        assert len(isolated.compared) == len(run.report.compared)

    def test_isolated_reference_of_a_correct_delegate_is_exact_or_close(self, quant_run):
        isolated = quant_run.debugger.compare(
            quant_run.etdump, quant_run.debug_buffer, SQNRComparator(40.0), isolate=True
        )
        assert len(isolated.compared) == 8 and isolated.failed == []

    def test_outputs_written(self, quant_run, tmp_path):
        import csv

        rows = list(csv.DictReader(open(quant_run.report.write_csv(str(tmp_path / "r.csv")))))
        conv = next(r for r in rows if r["node"] == "aten_convolution_default")
        assert conv["status"] == PASS and float(conv["scale"]) > 0 and conv["zero_point"] != ""
        svg = open(quant_run.report.write_svg(str(tmp_path / "g.svg"))).read()
        assert svg.count('fill="#8fd694"') == 8 + 1  # the compared nodes, green (+ the legend)

    def test_inspector_numeric_gap_rows_per_delegated_op(self, quant_run):
        from executorch.devtools import Inspector

        from backends.qualcomm.debugger import REFERENCE_GRAPH_NAME, InspectorComparator

        inspector = Inspector(
            etdump_path=quant_run.etdump,
            etrecord=quant_run.debugger.etrecord_path,
            debug_buffer_path=quant_run.debug_buffer,
            reference_graph_name=REFERENCE_GRAPH_NAME,
        )
        gap = inspector.calculate_numeric_gap(
            InspectorComparator(SQNRComparator(), quant_run.debugger.dumped), reference_graph=REFERENCE_GRAPH_NAME
        )
        assert len(gap) == len(quant_run.payload_handles())
        assert all(g[0] > 30.0 for g in gap["gap"])

    def test_runner_dump_matches_python_run(self, float_run, tmp_path):
        import shutil
        import subprocess

        from backends.qualcomm.debugger.runtime_dump import read_delegate_dumps

        runner = shutil.which("qnn_executor_runner")
        assert runner is not None
        etdump, buffer = tmp_path / "r.etdp", tmp_path / "r.bin"
        sample = float_run.debugger.sample_input[0]
        (tmp_path / "in.raw").write_bytes(sample.numpy().tobytes())
        (tmp_path / "list.txt").write_text(str(tmp_path / "in.raw") + "\n")
        subprocess.run(
            [
                runner,
                "--model_path",
                float_run.pte,
                "--input_list_path",
                str(tmp_path / "list.txt"),
                "--etdump_path",
                str(etdump),
                "--dump_intermediate_outputs",
                "--debug_output_path",
                str(buffer),
                "--debug_buffer_size",
                str(1 << 20),
            ],
            check=True,
            capture_output=True,
        )
        from_runner = read_delegate_dumps(str(etdump), str(buffer))
        from_python = read_delegate_dumps(float_run.etdump, float_run.debug_buffer)
        assert sorted(from_runner) == sorted(from_python) == sorted(float_run.payload_handles())
        for handle, tensors in from_python.items():
            assert all(torch.equal(a, b) for a, b in zip(tensors, from_runner[handle]))


class GluModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(6, 8)

    def forward(self, x):
        return torch.relu(torch.nn.functional.glu(self.linear(x)))


class TestPlainLoweringFlow:
    def test_shared_executorch_handles_dump_the_last_node_of_each_group(self, tmp_path):
        """to_edge_transform_and_lower without our edge passes: glu's decomposition (slice, slice,
        sigmoid, mul) shares one handle; only the last node of the group is dumped and compared."""
        from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

        from backends.qualcomm import QnnPartitioner
        from backends.qualcomm.debugger import EDGE_DIALECT_GRAPH_NAME, QNNIntermediateDebugger

        torch.manual_seed(0)
        sample = (torch.randn(2, 6),)
        ep = torch.export.export(GluModel().eval(), sample, strict=False)
        edge = to_edge_transform_and_lower(
            ep,
            partitioner=[QnnPartitioner(debug_specs(True, True))],
            compile_config=EdgeCompileConfig(_check_ir_validity=False),
            generate_etrecord=True,
        )
        debugger = QNNIntermediateDebugger(sample, reference_graph_name=EDGE_DIALECT_GRAPH_NAME)
        pte = debugger.save(edge, str(tmp_path))
        report = debugger.compare(*debugger.run(pte, str(tmp_path)), SQNRComparator(40.0))
        names = [d.tensor_name for ds in debugger.dumped.values() for d in ds]
        assert len(names) == len(set(names)) == len(report.compared)
        assert report.failed == [] and len(report.compared) >= 3
        shared = [r for r in report.rows if r.reason == "handle shared with a later node"]
        assert len(shared) == 3  # slice, slice, sigmoid of the glu group


class TestDumpOff:
    def test_dump_off_costs_nothing(self, float_run, tmp_path):
        from backends.qualcomm import deserialize, to_edge_transform_and_lower_to_qnn
        from backends.qualcomm.debugger.runtime_dump import read_delegate_dumps, run_with_etdump
        from backends.qualcomm.serialization import qnn_payload_generated as gen

        sample = float_run.debugger.sample_input
        torch.manual_seed(0)
        edge = to_edge_transform_and_lower_to_qnn(SimpleModel().eval(), sample, debug_specs(True, False))
        blob = delegate_blobs(edge)[0]
        graph = deserialize(blob).graphs[0]
        names = [t.name.decode() for t in graph.tensors]
        assert not any("_debugID_" in n for n in names)
        app_read = [t.id for t in graph.tensors if t.type == gen.QnnTensorType.APP_READ]
        assert app_read == list(graph.outputs)  # no dumped tensor
        assert len(blob) < len(float_run.blobs[0])
        pte = tmp_path / "off.pte"
        pte.write_bytes(edge.to_executorch().buffer)
        outputs, etdump, buffer = run_with_etdump(str(pte), sample, str(tmp_path), debug_buffer_size=1 << 20)
        assert read_delegate_dumps(etdump, buffer) == {}  # asked for, but nothing to log
        on_outputs, _, _ = run_with_etdump(float_run.pte, sample, str(tmp_path / "on"), debug_buffer_size=1 << 20)
        assert torch.equal(outputs[0], on_outputs[0])  # dumping does not change results
