"""Debug handles and the debugger's pieces without a run: ResolveDebugHandle (unique handles in
topological order, getitem nodes sharing their source's), the comparators, dumped tensors
(names carrying the handle, layouts) and reports built from captured outputs."""

from __future__ import annotations

import math
import operator

import pytest
import torch

from backends.qualcomm._passes.resolve_debug_handle import ResolveDebugHandle, dumped_handle_owners, node_debug_handle
from backends.qualcomm.debugger import FAIL, CosineSimilarityComparator, MSEComparator, SQNRComparator
from backends.qualcomm.debugger.dump_info import DumpedTensor
from backends.qualcomm.utils.constants import DEBUG_HANDLE, LAYOUT_CHANNEL_LAST
from backends.qualcomm.utils.tensor_dump import dump_tensor_name, handle_from_tensor_name


class HardsigmoidTopk(torch.nn.Module):
    """hardsigmoid decomposes into several nodes that to_edge gives one shared handle."""

    def forward(self, x):
        y = torch.nn.functional.hardsigmoid(x) * 2.0
        values, indices = torch.topk(y, 2)
        return values, indices


def _edge_program(module, inputs, passes=None):
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    ep = torch.export.export(module.eval(), inputs, strict=False)
    manager = to_edge_transform_and_lower(
        ep, transform_passes=passes, compile_config=EdgeCompileConfig(_check_ir_validity=False)
    )
    return manager.exported_program()


def _edge_graph(module, inputs, passes=None):
    return _edge_program(module, inputs, passes).graph_module.graph


def _handles(graph):
    return [(n.name, node_debug_handle(n)) for n in graph.nodes if n.op == "call_function"]


class TestResolveDebugHandle:
    def test_to_edge_duplicates_handles_of_a_decomposition(self):
        handles = [h for _, h in _handles(_edge_graph(HardsigmoidTopk(), (torch.randn(2, 5),)))]
        assert len(set(handles)) < len(handles)  # what the pass is for

    def test_unique_handles_in_topological_order_getitem_shares_source(self):
        graph = _edge_graph(HardsigmoidTopk(), (torch.randn(2, 5),), passes=[ResolveDebugHandle()])
        nodes = [n for n in graph.nodes if n.op == "call_function"]
        owners = [n for n in nodes if n.target is not operator.getitem]
        assert [node_debug_handle(n) for n in owners] == list(range(1, len(owners) + 1))
        getitems = [n for n in nodes if n.target is operator.getitem]
        assert len(getitems) == 2
        for getitem in getitems:
            assert node_debug_handle(getitem) == node_debug_handle(getitem.args[0])

    def test_copied_meta_duplicates_are_renumbered(self):
        graph = _edge_graph(HardsigmoidTopk(), (torch.randn(2, 5),))
        calls = [n for n in graph.nodes if n.op == "call_function"]
        for node in calls:  # a pass that copied one node's meta onto every node
            node.meta[DEBUG_HANDLE] = 7
        calls[0].meta[DEBUG_HANDLE] = (3, 4)
        ResolveDebugHandle()(graph.owning_module)
        handles = [node_debug_handle(n) for n in calls if n.target is not operator.getitem]
        assert handles == list(range(1, len(handles) + 1))

    def test_placeholders_and_output_get_no_handle(self):
        graph = _edge_graph(HardsigmoidTopk(), (torch.randn(2, 5),), passes=[ResolveDebugHandle()])
        assert all(node_debug_handle(n) is None for n in graph.nodes if n.op in ("placeholder", "output"))

    def test_handles_survive_into_the_etrecord_edge_program(self):
        from backends.qualcomm import (
            QcomChipset,
            generate_htp_compiler_spec,
            generate_qnn_executorch_compiler_spec,
            to_edge_transform_and_lower_to_qnn,
        )

        specs = generate_qnn_executorch_compiler_spec(QcomChipset.SM8650, generate_htp_compiler_spec(use_fp16=False))
        manager = to_edge_transform_and_lower_to_qnn(
            HardsigmoidTopk(), (torch.randn(2, 5),), specs, generate_etrecord=True
        )
        graph = manager._etrecord.graph_map["edge_after_transform/forward"].graph
        owners = [n for n in graph.nodes if n.op == "call_function" and n.target is not operator.getitem]
        assert [node_debug_handle(n) for n in owners] == list(range(1, len(owners) + 1))

    def test_dumped_owner_is_the_last_node_of_a_shared_handle(self):
        graph = _edge_graph(HardsigmoidTopk(), (torch.randn(2, 5),))
        owners = dumped_handle_owners(graph.nodes)
        assert sorted(owners.values()) == sorted(set(owners.values()))
        calls = [n for n in graph.nodes if n.op == "call_function" and n.target is not operator.getitem]
        for node, handle in owners.items():
            later = [n for n in calls[calls.index(node) + 1 :] if node_debug_handle(n) == handle]
            assert later == []


class TestComparators:
    def test_metrics_on_known_values(self):
        ref = torch.tensor([1.0, 2.0, 3.0, 4.0])
        act = ref + torch.tensor([0.1, -0.1, 0.1, -0.1])
        assert MSEComparator(0.02).compare(ref, act) == pytest.approx(0.01)
        assert SQNRComparator().compare(ref, act) == pytest.approx(10 * math.log10(30.0 / 0.04))
        assert SQNRComparator().compare(ref, ref) == math.inf
        assert CosineSimilarityComparator().compare(ref, 2 * ref) == pytest.approx(1.0)
        assert CosineSimilarityComparator().compare(ref, -ref) == pytest.approx(-1.0)

    def test_thresholds(self):
        assert MSEComparator(0.01).passes(0.01) and not MSEComparator(0.01).passes(0.02)
        assert SQNRComparator(20).passes(25) and not SQNRComparator(20).passes(19.9)
        assert CosineSimilarityComparator(0.99).passes(0.995) and not CosineSimilarityComparator(0.99).passes(0.9)

    def test_shape_mismatch_is_an_error_naming_both_shapes(self):
        with pytest.raises(ValueError, match=r"\(2, 3\).*\(3, 2\)"):
            MSEComparator(1).compare(torch.zeros(3, 2), torch.zeros(2, 3))


class TestDumpedTensor:
    def test_names_carry_the_handle(self):
        assert dump_tensor_name("aten_conv2d_default", 12) == "aten_conv2d_default_debugID_12"
        assert handle_from_tensor_name("aten_conv2d_default_debugID_12") == 12
        assert handle_from_tensor_name("aten_conv2d_default") is None

    def test_logged_values_and_codes_against_a_quantize_node(self):
        """The runtime logs a dumped tensor dequantized, in PyTorch's layout (TensorDump.h);
        against a quantize node the debugger recovers the exact integer codes."""
        scale, zero_point = 0.5, 10
        codes = torch.randint(0, 256, (2, 3, 4, 5), generator=torch.Generator().manual_seed(0))
        logged = ((codes - zero_point) * scale).to(torch.float32)
        dumped = DumpedTensor(1, "x_debugID_1", "UFIXED_POINT_8", [2, 4, 5, 3], LAYOUT_CHANNEL_LAST, scale, zero_point)
        assert torch.equal(dumped.to_reference_layout(logged), logged.to(torch.float64))
        assert torch.equal(dumped.to_reference_layout(logged, dequantize=False), codes.to(torch.float64))


class TestReportFromCapturedOutputs:
    """The comparison and its outputs, with delegate dumps faked from the reference."""

    def _report(self, tmp_path, perturb_index=None):
        from executorch.devtools.inspector._intermediate_output_capturer import IntermediateOutputCapturer

        from backends.qualcomm.debugger import QNNIntermediateDebugger

        torch.manual_seed(0)
        sample = (torch.randn(2, 5),)
        module = _edge_program(HardsigmoidTopk(), sample, passes=[ResolveDebugHandle()]).module()
        graph = module.graph
        reference = IntermediateOutputCapturer(module).run_and_capture(*sample)
        runtime = {key[0]: [t.clone() for t in (v if isinstance(v, list) else [v])] for key, v in reference.items()}
        handles = sorted(runtime)
        if perturb_index is not None:
            runtime[handles[perturb_index]][0] += 1.0
        debugger = QNNIntermediateDebugger(sample)
        debugger.dumped = {
            h: [DumpedTensor(h, f"t_debugID_{h}", "FLOAT_32", list(t.shape)) for t in runtime[h]] for h in handles
        }
        return debugger._report(graph, reference, runtime, SQNRComparator(30.0)), handles

    def test_all_pass_and_multi_output_rows(self, tmp_path):
        report, handles = self._report(tmp_path)
        assert report.failed == [] and report.first_failure is None
        topk_rows = [r for r in report.rows if "topk" in r.target]
        assert [r.output_index for r in topk_rows] == [0, 1]
        assert len(report.compared) == len(handles) + 1  # topk: values and indices

    def test_first_failing_node_and_outputs(self, tmp_path):
        report, handles = self._report(tmp_path, perturb_index=1)
        first = report.first_failure
        assert first is not None and first.debug_handle == handles[1]
        assert first.status == FAIL and first.value < 30.0
        csv_path = report.write_csv(str(tmp_path / "report.csv"))
        lines = open(csv_path).read().splitlines()
        assert lines[0].startswith("node,op,target,debug_handle,output_index,tensor_name,scale,zero_point,metric")
        assert len(lines) == 1 + len(report.rows)
        svg = open(report.write_svg(str(tmp_path / "graph.svg"), "t")).read()
        assert svg.startswith("<svg") and svg.count("<rect") == len(report.drawn_nodes) + 3
        assert "#f28b82" in svg and "#8fd694" in svg
