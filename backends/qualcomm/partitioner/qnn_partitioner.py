"""QnnPartitioner: tags the nodes our builders support; never raises on unknown ops."""

from __future__ import annotations

import logging
import warnings
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Set, Tuple

import torch
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from executorch.exir.backend.utils import tag_constant_data
from torch.export import ExportedProgram
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner, Partition
from torch.fx.passes.operator_support import OperatorSupportBase

import backends.qualcomm.builders  # noqa: F401  (registers builders)
import backends.qualcomm.qnn_preprocess  # noqa: F401  (makes the QnnDelegate backend known)
from backends.qualcomm._passes.mark_constants import mark_constants
from backends.qualcomm.builders.quant_encoding import is_dequantize, is_quantize
from backends.qualcomm.builders.registry import get_builder, ops_to_not_decompose
from backends.qualcomm.partitioner.constant_partitions import CONSTANT_ONLY_REASON, constant_only_partitions
from backends.qualcomm.partitioner.cpu_kernels import check_cpu_kernels
from backends.qualcomm.partitioner.op_names import node_op_keys, resolve_skip_ops
from backends.qualcomm.partitioner.qnn_validation import PartitionValidator, ValidationReport
from backends.qualcomm.partitioner.quant_boundaries import keep_quantize_with_consumers
from backends.qualcomm.partitioner.sharding import (
    DEFAULT_SHARD_PATTERN,
    check_shard_layers,
    shard_of_nodes,
    split_by_shard,
)
from backends.qualcomm.quantizer.quantization_checks import (
    check_calibrated,
    check_converted_program,
    check_finite_encodings,
)
from backends.qualcomm.partitioner.summary import PartitionSummary, summarize
from backends.qualcomm.utils.compile_spec import check_compile_specs, is_fp16, options_from_compile_specs
from backends.qualcomm.utils.constants import QCOM_COMPILE_SPEC_KEY, QCOM_SHARD_SPEC_KEY, QNN_BACKEND_ID
from backends.qualcomm.utils.qnn_context import qnn_aot_enabled

logger = logging.getLogger(__name__)

# Rounds of (propose partitions, ask QNN, leave refused nodes on the CPU). Partitions proposed
# after the last round are not asked again: a graph QNN still refuses is caught at finalize
# (that delegate gets no context binary and runs on the host engine).
MAX_VALIDATION_ROUNDS = 3

FLOAT_GRAPH_QUANTIZED_PRECISION_WARNING = (
    "QnnPartitioner: the compile spec asks for quantized precision "
    "(generate_htp_compiler_spec(use_fp16=False)) but the graph has no quantize/dequantize nodes: "
    "nothing is quantized and the delegated ops run in float32. Quantize the model with QnnQuantizer "
    "(prepare_pt2e, calibrate, convert_pt2e) before lowering, or lower with use_fp16=True for HTP fp16 "
    "precision."
)


class FloatGraphQuantizedPrecisionWarning(UserWarning):
    """A float (unquantized) graph lowered with quantized precision (use_fp16=False)."""


def _op_name(node: torch.fx.Node) -> str:
    return getattr(node.target, "__name__", str(node.target))


def check_node(node: torch.fx.Node) -> Tuple[bool, str]:
    """(supported, reason) from the node's builder; any exception means not supported."""
    builder = get_builder(node.target)
    if builder is None:
        return False, f"no QNN builder for {_op_name(node)}"
    try:
        return builder.is_supported(node)
    except Exception as exc:  # noqa: BLE001 - a failing check must never break partitioning
        return False, f"support check raised {type(exc).__name__}: {exc}"


class QnnOperatorSupport(OperatorSupportBase):
    """Asks the builder registry; records rejected nodes with the reason."""

    def __init__(self, skip_node_id_set: Optional[Set[str]] = None, skip_op_keys: Optional[Set[str]] = None):
        self.skip_node_id_set = set(skip_node_id_set or ())
        self.skip_op_keys = set(skip_op_keys or ())  # resolved by resolve_skip_ops
        self.rejected_nodes: Dict[str, str] = {}
        self.refused_by_qnn: Dict[str, str] = {}  # node name -> QNN's reason

    def skipped_by_op(self, node: torch.fx.Node) -> Optional[str]:
        """The skipped op key that names `node` (its own op or one it was decomposed from)."""
        if not self.skip_op_keys:
            return None
        matched = node_op_keys(node) & self.skip_op_keys
        return min(matched) if matched else None

    def _skipped(self, node: torch.fx.Node) -> Optional[str]:
        if node.name in self.refused_by_qnn:
            return self.refused_by_qnn[node.name]
        if node.name in self.skip_node_id_set:
            return "skipped by skip_node_id_set"
        matched = self.skipped_by_op(node)
        if matched:
            return f"skipped by skip_node_op_set ({matched})"
        return None

    def _reject(self, node: torch.fx.Node, reason: str) -> bool:
        self.rejected_nodes[node.name] = reason
        logger.debug("QnnPartitioner: node '%s' (%s) not delegated: %s", node.name, _op_name(node), reason)
        return False

    def is_node_supported(self, submodules: Mapping[str, torch.nn.Module], node: torch.fx.Node) -> bool:
        if node.op != "call_function":
            return False
        skipped = self._skipped(node)
        if skipped:
            return self._reject(node, skipped)
        ok, reason = check_node(node)
        if ok:
            ok, reason = self._partners_delegated(node)
        return True if ok else self._reject(node, reason)

    def _partners_delegated(self, node: torch.fx.Node) -> Tuple[bool, str]:
        """A node that only lowers together with others (a pad folded into its convs) is
        supported only when they are too; else it stays on the CPU with them."""
        builder = get_builder(node.target)
        try:
            partners = builder.lowered_only_with(node) if builder is not None else []
        except Exception as exc:  # noqa: BLE001
            return False, f"support check raised {type(exc).__name__}: {exc}"
        for partner in partners:
            why = self._skipped(partner)
            if why is None:
                ok, reason = check_node(partner)
                why = None if ok else reason
            if why is not None:
                return False, (
                    f"lowered only together with '{partner.name}' ({_op_name(partner)}), which stays on the CPU: {why}"
                )
        return True, ""


def _kept_whole_for_qnn(node: torch.fx.Node) -> bool:
    """An op ExecuTorch kept undecomposed because our builder takes it (a builder's keep_whole):
    it must be delegated, ExecuTorch refuses to leave it on the CPU."""
    return getattr(node.target, "_op", node.target) in ops_to_not_decompose()


def _cpu_runnable(graph: torch.fx.Graph, refused: Dict[str, str]) -> Dict[str, str]:
    """The QNN-refused nodes that can stay on the CPU; the others stay delegated (warned), and
    QNN's refusal then shows at finalize (that delegate runs on the host engine)."""
    kept = {n.name: n for n in graph.nodes if n.name in refused and _kept_whole_for_qnn(n)}
    by_op: Dict[str, List[str]] = {}
    for name, node in kept.items():
        by_op.setdefault(_op_name(node), []).append(name)
    for op, names in by_op.items():  # one warning per op, not per node
        logger.warning(
            "QnnPartitioner: %d %s node(s) stay delegated although QNN refuses them (ExecuTorch "
            "kept them undecomposed for this delegate; a refusal at finalize too would run the "
            "delegate on the host engine): %s. First: %s",
            len(names),
            op,
            ", ".join(names[:4]) + (", ..." if len(names) > 4 else ""),
            refused[names[0]],
        )
    return {name: reason for name, reason in refused.items() if name not in kept}


def _as_set(values: Optional[Iterable[object]]) -> Set[object]:
    if values is None:
        return set()
    return {values} if isinstance(values, str) else set(values)


class QnnPartitioner(Partitioner):
    """Tags the nodes our builders support. Never raises for unsupported nodes (they stay on
    the CPU; `rejected_nodes` and `summary` say why). A bad argument raises at construction:
    a skip_node_op_set entry that names no op gives ValueError. Arguments follow upstream's
    QnnPartitioner; mutable buffers always stay outside the delegate (skip_mutable_buffer).
    `require_cpu_kernels` (ours, default True): a node left on the CPU for which ExecuTorch has no
    kernel raises QnnLoweringError (the program would not load); False leaves that to a runtime
    that registers more kernels.
    `shard_layers` (ours; upstream's SplitGraph argument): the layers where a new shard starts
    (layer numbers from `shard_pattern` on the nodes' module paths); every partition is cut at
    those boundaries and each delegate's compile specs carry its shard index
    (QCOM_SHARD_SPEC_KEY; partitioner/sharding.py)."""

    def __init__(
        self,
        compiler_specs: List[CompileSpec],
        skip_node_id_set: Optional[Set[str]] = None,
        skip_node_op_set: Optional[Set[object]] = None,
        skip_mutable_buffer: bool = False,
        require_cpu_kernels: bool = True,
        shard_layers: Optional[List[int]] = None,
        shard_pattern: str = DEFAULT_SHARD_PATTERN,
    ):
        super().__init__()
        self.shard_layers = None if shard_layers is None else check_shard_layers(shard_layers)
        self.shard_pattern = shard_pattern
        # Upstream's argument: mutable buffers are never delegated here (as with True).
        self.skip_mutable_buffer = bool(skip_mutable_buffer)
        self.require_cpu_kernels = bool(require_cpu_kernels)
        self.compiler_specs = check_compile_specs(compiler_specs)
        if any(spec.key == QCOM_COMPILE_SPEC_KEY for spec in self.compiler_specs):
            options_from_compile_specs(self.compiler_specs)  # unreadable: ValueError now, not at lowering
        self.delegation_spec = DelegationSpec(QNN_BACKEND_ID, self.compiler_specs)
        self.skip_node_id_set = _as_set(skip_node_id_set)
        self.skip_node_op_set = _as_set(skip_node_op_set)
        self.skip_op_keys = resolve_skip_ops(self.skip_node_op_set)
        self.rejected_nodes: Dict[str, str] = {}
        self.summary: Optional[PartitionSummary] = None
        self.validation: Optional[ValidationReport] = None  # set when QNN's op validation ran

    def _operator_support(self) -> QnnOperatorSupport:
        return QnnOperatorSupport(self.skip_node_id_set, self.skip_op_keys)

    def _quantized_precision(self) -> bool:
        try:
            return not is_fp16(options_from_compile_specs(self.compiler_specs))
        except ValueError:
            return False

    def _report(self, exported_program: ExportedProgram, support: QnnOperatorSupport) -> None:
        graph = exported_program.graph_module.graph
        tags = {
            n: n.meta["delegation_tag"] for n in graph.nodes if n.op == "call_function" and n.meta.get("delegation_tag")
        }
        self.summary = summarize(graph, tags, support.rejected_nodes)
        self.summary.validation = str(self.validation) if self.validation is not None else ""
        logger.log(self.summary.log_level, "%s", self.summary)
        if tags and self._quantized_precision() and not any(is_quantize(n) or is_dequantize(n) for n in graph.nodes):
            warnings.warn(FLOAT_GRAPH_QUANTIZED_PRECISION_WARNING, FloatGraphQuantizedPrecisionWarning, stacklevel=2)

    def _propose(self, exported_program: ExportedProgram, support: QnnOperatorSupport) -> List[Partition]:
        partitioner = CapabilityBasedPartitioner(
            exported_program.graph_module, support, allows_single_node_partition=True
        )
        partitions = partitioner.propose_partitions()
        keep_quantize_with_consumers(exported_program.graph_module.graph, partitions)
        return partitions

    def _propose_validated(self, exported_program: ExportedProgram, support: QnnOperatorSupport) -> List[Partition]:
        """Partitions whose ops QNN's op validation accepts, when lowering uses QNN: nodes QNN
        refuses stay on the CPU with its reason, and the rest is partitioned again."""
        partitions = self._propose(exported_program, support)
        self.validation = None
        if not partitions or not qnn_aot_enabled():
            return partitions
        validator = PartitionValidator(self.compiler_specs)
        self.validation = validator.report
        kept: Set[str] = set()  # refused, but must stay delegated (warned once)
        for _ in range(MAX_VALIDATION_ROUNDS):
            refused = {
                name: reason
                for name, reason in validator.refused_nodes(exported_program, partitions).items()
                if name not in kept
            }
            to_cpu = _cpu_runnable(exported_program.graph_module.graph, refused)
            kept |= set(refused) - set(to_cpu)
            if not to_cpu:
                break
            support.refused_by_qnn.update(to_cpu)
            support.rejected_nodes.clear()  # filled again by the next proposal
            partitions = self._propose(exported_program, support)
        validator.report.left_on_cpu = len(support.refused_by_qnn)
        return partitions

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        check_converted_program(exported_program)
        check_calibrated(exported_program.graph_module.graph)
        check_finite_encodings(exported_program.graph_module.graph)
        mark_constants(exported_program)
        support = self._operator_support()
        partitions = self._propose_validated(exported_program, support)
        shard_of_partition = self._shard(exported_program, partitions)
        partitions = list(shard_of_partition)
        for index, partition in constant_only_partitions(exported_program, partitions).items():
            partitions[index] = None
            support.rejected_nodes.update({n.name: CONSTANT_ONLY_REASON for n in partition.nodes})
        partition_tags: Dict[str, DelegationSpec] = {}
        for number, partition in enumerate(partitions):
            if partition is None:
                continue
            tag = f"qnn_{number}"
            for node in partition.nodes:
                node.meta["delegation_tag"] = tag
            partition_tags[tag] = self._delegation_spec(shard_of_partition[partition])
        tag_constant_data(exported_program)
        self.rejected_nodes = dict(support.rejected_nodes)
        self._report(exported_program, support)
        if self.require_cpu_kernels:
            delegated = {
                n: n.meta["delegation_tag"] for n in exported_program.graph.nodes if n.meta.get("delegation_tag")
            }
            check_cpu_kernels(exported_program.graph, delegated, self.rejected_nodes)
        return PartitionResult(tagged_exported_program=exported_program, partition_tags=partition_tags)

    def _shard(self, exported_program: ExportedProgram, partitions: List[Partition]) -> Dict[Partition, Optional[int]]:
        """{partition: its shard} in graph order (shard None when not sharding)."""
        if self.shard_layers is None:
            return {p: None for p in partitions}
        graph = exported_program.graph_module.graph
        pieces = split_by_shard(partitions, shard_of_nodes(graph, self.shard_layers, self.shard_pattern))
        return {p: k for k in sorted(pieces) for p in pieces[k]}

    def _delegation_spec(self, shard: Optional[int]) -> DelegationSpec:
        if shard is None:
            return self.delegation_spec
        return DelegationSpec(
            QNN_BACKEND_ID, [*self.compiler_specs, CompileSpec(QCOM_SHARD_SPEC_KEY, str(shard).encode())]
        )

    def transform_for_pre_decomposition(self, ep: ExportedProgram) -> ExportedProgram:
        """Only checks: a prepared, unconverted model fails here with a clear error instead of
        inside ExecuTorch's decompositions."""
        check_converted_program(ep)
        return ep

    def ops_to_not_decompose(
        self, ep: ExportedProgram
    ) -> Tuple[List[torch._ops.OpOverload], Optional[Callable[[torch.fx.Node], bool]]]:
        if ep is not None:
            mark_constants(ep)  # support checks that need constant weights read the flag
        support = self._operator_support()

        def keep_whole(node: torch.fx.Node) -> bool:
            # A skipped op decomposes; its parts are skipped through their provenance.
            return support.is_node_supported({}, node)

        return ops_to_not_decompose(), keep_whole
