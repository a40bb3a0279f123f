"""QNNIntermediateDebugger: find the first op where the delegate departs from the CPU reference.

Steps (see docs/debugging.md):
  1. lower with `dump_intermediate_outputs=True` and `generate_etrecord=True`, then
     `debugger.save(edge_manager, out_dir)` -> .pte + ETRecord (with the sample input);
  2. `debugger.run(pte_path, out_dir)` -> ETDump + debug buffer holding every dumped tensor;
  3. `debugger.compare(etdump, debug_buffer, comparator)` -> DebugReport (CSV, SVG, first failure).
The reference is the edge graph after our transform passes (ETRecord graph
"edge_after_transform/forward"), run on the sample input by ExecuTorch's
IntermediateOutputCapturer; debug handles link its nodes to the dumped tensors.
"""

from __future__ import annotations

import logging
import operator
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

import torch
from executorch.devtools.inspector._intermediate_output_capturer import IntermediateOutputCapturer
from executorch.exir import EdgeProgramManager
from torch.export import ExportedProgram

from backends.qualcomm._passes.resolve_debug_handle import dumped_handle_owners, node_debug_handle
from backends.qualcomm.debugger.comparators import NumericalComparator, SQNRComparator
from backends.qualcomm.debugger.dump_info import (
    DumpedTensor,
    collect_dumped_tensors,
    delegated_debug_handles,
    dumps_by_edge_handle,
)
from backends.qualcomm.debugger.isolating_capturer import IsolatingCapturer
from backends.qualcomm.debugger.reports import (
    FAIL,
    NOT_COMPARED,
    PASS,
    ComparisonRow,
    write_csv,
    write_svg,
)
from backends.qualcomm.debugger.runtime_dump import read_delegate_dumps, run_with_etdump

logger = logging.getLogger(__name__)

REFERENCE_GRAPH_NAME = "edge_after_transform/forward"
# The edge program before transform passes: the reference for plain to_edge_transform_and_lower
# users (no ResolveDebugHandle: ExecuTorch's shared handles, the last node of a group is compared).
EDGE_DIALECT_GRAPH_NAME = "edge_dialect_exported_program"


@dataclass
class DebugReport:
    """Rows in topological order of the reference graph, and where to draw them."""

    rows: List[ComparisonRow]
    graph: torch.fx.Graph
    drawn_nodes: List[str] = field(default_factory=list)

    @property
    def compared(self) -> List[ComparisonRow]:
        return [r for r in self.rows if r.status != NOT_COMPARED]

    @property
    def failed(self) -> List[ComparisonRow]:
        return [r for r in self.rows if r.status == FAIL]

    @property
    def first_failure(self) -> Optional[ComparisonRow]:
        return self.failed[0] if self.failed else None

    def write_csv(self, path: str) -> str:
        write_csv(self.rows, path)
        return path

    def write_svg(self, path: str, title: str = "") -> str:
        write_svg(self.graph, self.drawn_nodes, self.rows, path, title)
        return path

    def summary(self) -> str:
        passed = sum(r.status == PASS for r in self.rows)
        text = f"compared {len(self.compared)} outputs: {passed} pass, {len(self.failed)} fail"
        first = self.first_failure
        if first is not None:
            text += (
                f"; first failing node: '{first.node}' ({first.target}, debug handle "
                f"{first.debug_handle}, output {first.output_index}): {first.metric}={first.value:.6g} "
                f"(threshold {first.threshold})"
            )
        return text


def _target_name(node: torch.fx.Node) -> str:
    return getattr(node.target, "__name__", str(node.target))


def _as_list(value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _compare_output(
    row: ComparisonRow,
    reference,
    actual: Optional[torch.Tensor],
    dumped: Optional[DumpedTensor],
    comparator: NumericalComparator,
) -> ComparisonRow:
    if actual is None or dumped is None:
        row.reason = "no dumped tensor for this output"
        return row
    row.tensor_name, row.scale, row.zero_point = dumped.tensor_name, dumped.scale, dumped.zero_point
    if not isinstance(reference, torch.Tensor):
        row.reason = f"reference output is {type(reference).__name__}, not a tensor"
        return row
    try:
        restored = dumped.to_reference_layout(actual, dequantize=reference.is_floating_point())
        value = comparator.compare(dumped.in_own_encoding(reference), restored)
    except ValueError as exc:
        row.reason = str(exc)
        return row
    row.metric, row.value, row.threshold = comparator.name, value, comparator.threshold
    row.status = PASS if comparator.passes(value) else FAIL
    return row


class QNNIntermediateDebugger:
    """Compares every tensor the delegate dumped with the CPU reference of its edge node."""

    def __init__(self, sample_input: Tuple[torch.Tensor, ...], reference_graph_name: str = REFERENCE_GRAPH_NAME):
        self.sample_input = tuple(sample_input)
        self.reference_graph_name = reference_graph_name
        self.etrecord_path: Optional[str] = None
        self.dumped: Dict[int, List[DumpedTensor]] = {}
        self.delegated_handles: Set[int] = set()

    # ---- step 1: record what the lowered program dumps, save .pte + ETRecord -------------
    def attach(self, lowered_program: ExportedProgram) -> None:
        """Read which tensors the delegate payloads dump (names, layouts, encodings)."""
        self.dumped = collect_dumped_tensors(lowered_program)
        self.delegated_handles = delegated_debug_handles(lowered_program)
        if not self.dumped:
            logger.warning(
                "QNNIntermediateDebugger: the lowered program dumps no tensor; "
                "lower with dump_intermediate_outputs=True in the compile spec"
            )

    def save(self, edge_manager: EdgeProgramManager, out_dir: str, name: str = "model") -> str:
        """attach + to_executorch; writes <name>.pte and <name>.etrecord in out_dir; returns the .pte path."""
        if edge_manager._etrecord is None:
            raise ValueError("lower with generate_etrecord=True so that the debugger has a reference graph")
        self.attach(edge_manager.exported_program())
        os.makedirs(out_dir, exist_ok=True)
        et_program = edge_manager.to_executorch()
        pte_path = os.path.join(out_dir, f"{name}.pte")
        with open(pte_path, "wb") as f:
            f.write(et_program.buffer)
        etrecord = et_program.get_etrecord()
        etrecord.update_representative_inputs(self.sample_input)
        self.etrecord_path = os.path.join(out_dir, f"{name}.etrecord")
        etrecord.save(self.etrecord_path)
        return pte_path

    # ---- step 2: run with dumping ---------------------------------------------------------
    def run(self, pte_path: str, out_dir: str, debug_buffer_size: int = 64 << 20) -> Tuple[str, str]:
        """Run the .pte on the sample input with ETDump; returns (etdump path, debug buffer path)."""
        _, etdump_path, buffer_path = run_with_etdump(pte_path, self.sample_input, out_dir, debug_buffer_size)
        return etdump_path, buffer_path

    # ---- step 3: compare ------------------------------------------------------------------
    def reference_program(self) -> ExportedProgram:
        """The reference edge program, read back from the saved ETRecord."""
        from executorch.devtools.etrecord import parse_etrecord

        if self.etrecord_path is None:
            raise ValueError("no ETRecord: call save() first (or set etrecord_path)")
        etrecord = parse_etrecord(self.etrecord_path)
        if self.reference_graph_name == EDGE_DIALECT_GRAPH_NAME:
            return etrecord.edge_dialect_program
        graph_map = etrecord.graph_map or {}
        if self.reference_graph_name not in graph_map:
            raise ValueError(
                f"ETRecord has no graph '{self.reference_graph_name}' (has {sorted(graph_map)}); "
                "lower with to_edge_transform_and_lower_to_qnn(..., generate_etrecord=True)"
            )
        return graph_map[self.reference_graph_name]

    def compare(
        self,
        etdump_path: str,
        debug_buffer_path: str,
        comparator: Optional[NumericalComparator] = None,
        isolate: bool = False,
    ) -> DebugReport:
        """Rows per edge node output; prints the summary and the first failing node.
        `isolate`: each op's reference is computed from the delegate's inputs (IsolatingCapturer),
        so accumulated drift does not hide or fake the op that departs."""
        comparator = comparator or SQNRComparator()
        module = self.reference_program().module()
        runtime = read_delegate_dumps(etdump_path, debug_buffer_path)
        capturer = IsolatingCapturer(module, runtime, self.dumped) if isolate else IntermediateOutputCapturer(module)
        reference = capturer.run_and_capture(*self.sample_input)
        report = self._report(module.graph, reference, runtime, comparator)
        print(f"[QNNIntermediateDebugger] {report.summary()}")
        return report

    def compare_engines(
        self,
        pte_path: str,
        out_dir: str,
        sample_input: Optional[Tuple[torch.Tensor, ...]] = None,
        engines: Tuple[str, str] = ("host", "qnn"),
        max_steps: int = 1,
        max_rel_diff: float = 1e-2,
    ) -> DebugReport:
        """QNN's engine against the host engine (or any two of "qnn" / "host"), node by node,
        on one run each of `pte_path` (save() or attach() first: the dumped tensors' encodings);
        prints the summary and the first node where they disagree."""
        from backends.qualcomm.debugger.engine_comparison import compare_engines

        if not self.dumped:
            raise ValueError(
                "no dumped tensors known: call save() / attach() with a program lowered "
                "with dump_intermediate_outputs=True"
            )
        rows = compare_engines(
            pte_path,
            sample_input if sample_input is not None else self.sample_input,
            self.dumped,
            out_dir,
            engines,
            max_steps,
            max_rel_diff,
        )
        report = DebugReport(rows, torch.fx.Graph())
        print(f"[QNNIntermediateDebugger] {engines[1]} vs {engines[0]}: {report.summary()}")
        return report

    def _report(
        self,
        graph: torch.fx.Graph,
        reference: Dict[tuple, object],
        runtime: Dict[int, List[torch.Tensor]],
        comparator: NumericalComparator,
    ) -> DebugReport:
        owners = dumped_handle_owners(graph.nodes)
        dump_of = dumps_by_edge_handle(self.dumped)  # {edge handle: dump holding its output}
        rows: List[ComparisonRow] = []
        drawn: List[str] = []
        for node in graph.nodes:
            if node.op == "placeholder" and node.users:
                drawn.append(node.name)
            if node.op != "call_function" or node.target is operator.getitem:
                continue
            drawn.append(node.name)
            rows += self._rows_for(node, owners, dump_of, reference, runtime, comparator)
        return DebugReport(rows, graph, drawn)

    def _rows_for(
        self,
        node: torch.fx.Node,
        owners: Dict[torch.fx.Node, int],
        dump_of: Dict[int, int],
        reference: Dict[tuple, object],
        runtime: Dict[int, List[torch.Tensor]],
        comparator: NumericalComparator,
    ) -> List[ComparisonRow]:
        handle = node_debug_handle(node)
        base = ComparisonRow(node.name, node.op, _target_name(node), handle, 0)
        if handle is None or node not in owners:
            base.reason = "no debug handle" if handle is None else "handle shared with a later node"
            return [base]
        dump_handle = dump_of.get(handle)
        if dump_handle is None or dump_handle not in runtime:
            folded_into = self._folded_into(handle)
            if folded_into is not None:
                base.reason = f"folded: the delegate's tensor of debug handle {folded_into} holds its value"
            elif handle in self.dumped:
                base.reason = (
                    f"its tensor holds the output of the node of debug handle "
                    f"{self.dumped[handle][0].stands_for} (folded into it), compared there"
                )
            else:
                base.reason = (
                    "folded into the delegate (no tensor of its own)"
                    if handle in self.delegated_handles
                    else "not delegated (runs on CPU) or not dumped"
                )
            return [base]
        outputs = _as_list(reference.get((handle,)))
        actual, dumped = runtime[dump_handle], self.dumped.get(dump_handle, [])
        rows = []
        for i, ref in enumerate(outputs):
            row = ComparisonRow(node.name, node.op, _target_name(node), handle, i)
            rows.append(
                _compare_output(
                    row, ref, actual[i] if i < len(actual) else None, dumped[i] if i < len(dumped) else None, comparator
                )
            )
        return rows

    def _folded_into(self, handle: int) -> Optional[int]:
        """The dump handle whose tensor stands for a group that `handle` is in (not its last)."""
        for dump_handle, infos in self.dumped.items():
            if infos and handle in infos[0].group[:-1] and dump_handle != handle:
                return dump_handle
        return None
