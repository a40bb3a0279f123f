"""Ask Qualcomm's QNN about the ops each partition lowers to (backendValidateOpConfig).

A node's QNN ops depend on the encodings and layouts the preprocess passes assign, so each
proposed partition is cut out of a copy of the program the way ExecuTorch cuts it at lowering
and built exactly as QnnDelegate.preprocess builds it (same passes, same builders); then every
op goes to QNN's op validation. A refused op is traced back to its fx node (debug handle, else
op name), which the partitioner leaves on the CPU with QNN's reason.

Only when lowering builds context binaries (qnn_aot_enabled). Never raises: any failure here
is logged and the builders' answer stands; finalize-time refusals are still handled at
lowering (that delegate gets no context binary and runs on the host engine).
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import dataclass
from typing import Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

import torch
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.backend.utils import _maybe_duplicate_constant_nodes, tag_constant_data
from executorch.exir.lowered_backend_module import create_exported_program_from_submodule, create_submodule_from_nodes
from torch.export import ExportedProgram
from torch.fx.passes.infra.partitioner import Partition

from backends.qualcomm._passes.pass_manager import run_preprocess_passes
from backends.qualcomm.qnn_preprocess import build_qnn_graph
from backends.qualcomm.serialization.payload_writer import serialize_graphs
from backends.qualcomm.serialization.qnn_graph import QnnGraph, QnnOp
from backends.qualcomm.utils.compile_spec import graph_names, is_fp16, options_from_compile_specs
from backends.qualcomm.utils.constants import DEBUG_HANDLE
from backends.qualcomm.utils.runtime_options import load_extension

logger = logging.getLogger(__name__)

QNN_REFUSED = "QNN refused it (backendValidateOpConfig): "
VALIDATION_TAG = "qnn_validate_"


def qnn_validate_op(blob: bytes, op_index: int, soc_model: int = 0) -> Optional[str]:
    """None when QNN accepts op `op_index` of the blob's first graph on the HTP of SoC
    `soc_model` (0: QNN's default architecture), else QNN's reason."""
    return load_extension().qnn_validate_op(blob, 0, int(op_index), int(soc_model))


def qnn_validate_ops(blob: bytes, num_ops: int, soc_model: int = 0) -> List[Optional[str]]:
    """Per op of the blob's first graph, None when QNN accepts it, else QNN's reason: one
    call (blob verified and tensors described once, not once per op)."""
    verdicts = load_extension().qnn_validate_ops(blob, 0, int(soc_model))
    if len(verdicts) != num_ops or any(i != k for k, (i, _) in enumerate(verdicts)):
        raise RuntimeError(f"qnn_validate_ops answered for {len(verdicts)} op(s), the graph has {num_ops}")
    return [reason for _, reason in verdicts]


_NATIVE_VALIDATE_OP = qnn_validate_op


def _op_reasons(blob: bytes, num_ops: int, soc_model: int) -> List[Optional[str]]:
    """QNN's answer per op: the batch call, unless `qnn_validate_op` was replaced (tests
    monkeypatch it), then that one op by op."""
    if qnn_validate_op is not _NATIVE_VALIDATE_OP:
        return [qnn_validate_op(blob, index) for index in range(num_ops)]
    return qnn_validate_ops(blob, num_ops, soc_model)


def _soc_model(options) -> int:
    soc = options.socInfo
    return int(soc.socModel) if soc is not None else 0


@dataclass
class ValidationReport:
    """What QNN's op validation did during one partitioning."""

    ops: int = 0
    partitions: int = 0
    left_on_cpu: int = 0  # nodes QNN refuses, left on the CPU
    seconds: float = 0.0

    def __str__(self) -> str:
        return (
            f"QNN op validation: {self.ops} op(s) of {self.partitions} partition(s) checked in "
            f"{self.seconds:.2f} s, {self.left_on_cpu} node(s) refused and left on the CPU"
        )


# ---- real weights ------------------------------------------------------------------------------
def _real_tensors_by_fake(fakes: Iterable[torch.Tensor]) -> Dict[int, torch.Tensor]:
    """{id(fake): real tensor} from the fake modes' converter memos (ExecuTorch hands the
    partitioner a program whose state dict holds FakeTensors made from the real ones)."""
    found: Dict[int, torch.Tensor] = {}
    modes = {id(f.fake_mode): f.fake_mode for f in fakes if hasattr(f, "fake_mode")}
    for mode in modes.values():
        converter = mode.fake_tensor_converter
        memo = converter.tensor_memo
        for real, tid in list(converter.meta_converter.describer.lookup_tensor.items()):
            fake = memo.get(tid)
            if fake is not None:
                found[id(fake)] = real
    return found


def _stand_in(fake: torch.Tensor) -> torch.Tensor:
    """Data of the right shape and dtype when the real tensor cannot be found (op
    validation looks at types, shapes and encodings, not at weight values)."""
    return torch.ones(tuple(fake.shape), dtype=fake.dtype)


def _real_state_dict(ep: ExportedProgram) -> Dict[str, torch.Tensor]:
    fakes = [v for v in ep.state_dict.values() if isinstance(v, torch._subclasses.FakeTensor)]
    if not fakes:
        return dict(ep.state_dict)
    reals = _real_tensors_by_fake(fakes)
    out: Dict[str, torch.Tensor] = {}
    for key, value in ep.state_dict.items():
        if isinstance(value, torch._subclasses.FakeTensor):
            value = reals.get(id(value)) if id(value) in reals else _stand_in(value)
        out[key] = value
    return out


def _validation_copy(ep: ExportedProgram) -> ExportedProgram:
    """A copy of `ep` whose graph can be cut into partitions (the original stays untouched)."""
    gm = copy.deepcopy(ep.graph_module)
    return ExportedProgram(
        root=gm,
        graph=gm.graph,
        graph_signature=copy.deepcopy(ep.graph_signature),
        state_dict=_real_state_dict(ep),
        range_constraints=copy.deepcopy(ep.range_constraints),
        module_call_graph=copy.deepcopy(ep.module_call_graph),
        constants=dict(ep.constants),
        verifiers=[ep.verifier],
    )


# ---- cutting partitions as ExecuTorch does ------------------------------------------------------
def _partition_programs(ep: ExportedProgram, partitions: List[Partition]) -> List[ExportedProgram]:
    """One delegated program per partition, made like to_backend makes them."""
    program = _validation_copy(ep)
    by_name = {n.name: n for n in program.graph_module.graph.nodes}
    for node in by_name.values():
        node.meta.pop("delegation_tag", None)
    tags = [f"{VALIDATION_TAG}{i}" for i in range(len(partitions))]
    for tag, partition in zip(tags, partitions):
        for node in partition.nodes:
            by_name[node.name].meta["delegation_tag"] = tag
    tag_constant_data(program)
    for tag in tags:
        _maybe_duplicate_constant_nodes(program, tag)
    return [_cut(program, tag) for tag in tags]


def _cut(program: ExportedProgram, tag: str) -> ExportedProgram:
    gm = program.graph_module
    nodes = [n for n in gm.graph.nodes if n.meta.get("delegation_tag") == tag]
    with gm._set_replace_hook(program.graph_signature.get_replace_hook()):
        submodule, call_node = create_submodule_from_nodes(gm, nodes, tag)
    submodule.graph.output_node().meta = gm.graph.output_node().meta
    return create_exported_program_from_submodule(submodule, program, tag, call_node, False)[0]


def _payload_graph(program: ExportedProgram, options) -> Tuple[bytes, QnnGraph]:
    """The delegate blob and graph QnnDelegate.preprocess builds for `program`."""
    ep = run_preprocess_passes(copy.deepcopy(program))
    graph = build_qnn_graph(ep, graph_names(options)[0], is_fp16(options), bool(options.dumpIntermediateOutputs))
    return serialize_graphs([graph]), graph


# ---- mapping refused ops back to nodes ----------------------------------------------------------
def _handle_of(node: torch.fx.Node) -> int:
    handle = node.meta.get(DEBUG_HANDLE, 0)
    if isinstance(handle, (tuple, list)):
        handle = handle[0] if handle else 0
    return handle if isinstance(handle, int) else 0


def source_node(op: QnnOp, nodes: Iterable[torch.fx.Node]) -> Optional[torch.fx.Node]:
    """The partition node `op` was emitted for: the one node with its debug handle, else the
    node whose name is the longest prefix of the op name (ops are named after their node)."""
    nodes = [n for n in nodes if n.op == "call_function"]
    by_handle = [n for n in nodes if op.debug_handle and _handle_of(n) == op.debug_handle]
    if len(by_handle) == 1:
        return by_handle[0]
    named = [n for n in nodes if op.name == n.name or op.name.startswith(n.name + "_")]
    return max(named, key=lambda n: len(n.name)) if named else None


class PartitionValidator:
    """Validates proposed partitions with QNN; remembers partitions already found clean."""

    def __init__(self, compiler_specs: List[CompileSpec]) -> None:
        self.compiler_specs = compiler_specs
        self.report = ValidationReport()
        self._clean: Set[FrozenSet[str]] = set()

    def refused_nodes(self, ep: ExportedProgram, partitions: List[Partition]) -> Dict[str, str]:
        """{node name: QNN's reason} for the nodes whose ops QNN refuses; {} on any failure."""
        start = time.perf_counter()
        try:
            return self._refused_nodes(ep, partitions)
        except Exception as exc:  # noqa: BLE001 - validation must never break partitioning
            logger.warning(
                "QnnPartitioner: QNN op validation skipped (%s: %s); the builders' support checks decide",
                type(exc).__name__,
                exc,
            )
            return {}
        finally:
            self.report.seconds += time.perf_counter() - start

    def _refused_nodes(self, ep: ExportedProgram, partitions: List[Partition]) -> Dict[str, str]:
        options = options_from_compile_specs(self.compiler_specs)
        fresh = [p for p in partitions if self._key(p) not in self._clean]
        if not fresh:
            return {}
        refused: Dict[str, str] = {}
        for partition, program in zip(fresh, _partition_programs(ep, fresh)):
            found = self._check_partition(partition, program, options)
            if not found:
                self._clean.add(self._key(partition))
            refused.update(found)
        return refused

    def _check_partition(self, partition: Partition, program: ExportedProgram, options) -> Dict[str, str]:
        try:
            blob, graph = _payload_graph(program, options)
        except Exception as exc:  # noqa: BLE001 - lowering will report it with the node named
            logger.info("QnnPartitioner: partition %s not validated (building it failed: %s)", partition.id, exc)
            return {}
        self.report.partitions += 1
        refused: Dict[str, str] = {}
        reasons = _op_reasons(blob, len(graph.ops), _soc_model(options))
        self.report.ops += len(graph.ops)
        for op, reason in zip(graph.ops, reasons):
            if reason is None or op.finalize_accepts:
                continue
            node = source_node(op, partition.nodes)
            if node is None:
                logger.warning(
                    "QnnPartitioner: QNN refuses op '%s' (%s), which maps to no node of "
                    "its partition; kept (lowering falls back if QNN refuses the graph): %s",
                    op.name,
                    op.type,
                    reason,
                )
                continue
            refused.setdefault(node.name, QNN_REFUSED + _one_line(reason))
        return refused

    @staticmethod
    def _key(partition: Partition) -> FrozenSet[str]:
        return frozenset(n.name for n in partition.nodes)


def _one_line(text: str) -> str:
    """QNN's reason on one line, each log message once."""
    parts = [p.strip() for line in str(text).splitlines() for p in line.split(";")]
    return "; ".join(dict.fromkeys(p for p in parts if p))
