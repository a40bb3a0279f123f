"""QnnDelegate.preprocess: preprocess passes -> builders -> one flatbuffer payload."""

from __future__ import annotations

import copy
import sys
from typing import Dict, List, Tuple, final

import torch
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec
from torch.export import ExportedProgram

import backends.qualcomm.builders  # noqa: F401  (registers builders)
from backends.qualcomm._passes.pass_manager import run_preprocess_passes
from backends.qualcomm._passes.resolve_debug_handle import dumped_handle_owners, folded_handle_groups
from backends.qualcomm.builders.graph_builder import GraphBuilder
from backends.qualcomm.builders.registry import get_builder
from backends.qualcomm.serialization.payload_writer import serialize_graphs
from backends.qualcomm.serialization.qnn_graph import QnnGraph
from backends.qualcomm.utils.compile_spec import graph_names, is_fp16, options_from_compile_specs
from backends.qualcomm.utils.constants import QCOM_OUTPUT_DIM_ORDERS
from backends.qualcomm.utils.errors import QnnLoweringError
from backends.qualcomm.utils.qnn_context import attach_qnn_context_for_options, online_prepare_of
from backends.qualcomm.utils.qnn_tables import attach_tables_for_options

PROGRESS_BAR_MIN_NODES = 200


def _progress(nodes: List[torch.fx.Node]):
    if len(nodes) <= PROGRESS_BAR_MIN_NODES or not sys.stderr.isatty():
        return nodes
    try:
        from tqdm import tqdm
    except ImportError:
        return nodes
    return tqdm(nodes, desc="qnn-delegate: building ops", unit="node")


def _define_inputs(ep: ExportedProgram, gb: GraphBuilder) -> None:
    user_inputs = set(ep.graph_signature.user_inputs)
    for node in ep.graph_module.graph.nodes:
        if node.op == "placeholder" and node.name in user_inputs:
            gb.define_graph_input(node)


def _build_node(node: torch.fx.Node, gb: GraphBuilder) -> None:
    builder = get_builder(node.target)
    if builder is None:
        raise QnnLoweringError("no QNN builder for this op", node)
    try:
        builder.define_ops(node, gb)
    except QnnLoweringError:
        raise
    except Exception as exc:  # noqa: BLE001 - re-raised with the node named
        raise QnnLoweringError(f"{type(exc).__name__}: {exc}", node) from exc


def _debug_handle_map(edge_program: ExportedProgram, ep: ExportedProgram) -> Dict[int, Tuple[int, ...]]:
    """{delegate debug index (the handle in a dumped tensor's name): the edge handles its tensor
    stands for (folded_handle_groups: a conv's tensor is also its folded batch norm's and
    quantize / dequantize's, the last one's value)}. ExecuTorch's Inspector reads, for each of
    a delegate's k outputs, the i-th handle from the end of this tuple (and the i-th logged
    tensor from the end, see TensorDump.h): each tuple ends with its last handle repeated k
    times so that every read lands on it."""
    output = next(n for n in ep.graph_module.graph.nodes if n.op == "output")
    outputs = output.args[0]
    delegate_outputs = max(len(outputs) if isinstance(outputs, (list, tuple)) else 1, 1)
    groups = folded_handle_groups(edge_program.graph_module.graph, ep.graph_module.graph)
    return {handle: group + (group[-1],) * (delegate_outputs - 1) for handle, group in groups.items()}


def build_qnn_graph(ep: ExportedProgram, graph_name: str, fp16: bool, dump: bool = False) -> QnnGraph:
    """Walk a (preprocessed) delegated program and emit its QNN graph (`dump`: every
    intermediate tensor readable, named after its node's debug handle)."""
    gb = GraphBuilder(ep, graph_name, fp16)
    _define_inputs(ep, gb)
    nodes = [n for n in ep.graph_module.graph.nodes if n.op == "call_function"]
    for node in _progress(nodes):
        _build_node(node, gb)
    output = next(n for n in ep.graph_module.graph.nodes if n.op == "output")
    outputs = output.args[0]
    gb.define_graph_outputs(
        list(outputs) if isinstance(outputs, (tuple, list)) else [outputs], output.meta.get(QCOM_OUTPUT_DIM_ORDERS)
    )
    if dump:
        gb.promote_for_dump(dumped_handle_owners(nodes))
    return gb.graph


def delegate_label(edge_program: ExportedProgram, graph_name: str) -> str:
    """Names one delegate among the several of a method (all graphs are named after the method):
    its first and last compute nodes, its op count and its runtime inputs."""
    graph = edge_program.graph_module.graph
    nodes = [n.name for n in graph.nodes if n.op == "call_function"]
    inputs = [
        n.name for n in graph.nodes if n.op == "placeholder" and n.name in edge_program.graph_signature.user_inputs
    ]
    span = f"'{nodes[0]}' .. '{nodes[-1]}'" if len(nodes) > 1 else f"'{nodes[0]}'" if nodes else "no node"
    reads = f"inputs {', '.join(inputs[:4])}{', ...' if len(inputs) > 4 else ''}" if inputs else "no runtime input"
    return f"graph '{graph_name}' (the delegate of nodes {span}: {len(nodes)} nodes, {reads})"


def _wrapped_context_binary(edge_program: ExportedProgram) -> PreprocessResult:
    """The delegate blob from_context_binary made (QNN context binary + I/O-only payload)."""
    from backends.qualcomm.utils.context_binary import wrapped_blob_of

    blob = wrapped_blob_of(edge_program)
    if blob is None:
        raise QnnLoweringError(
            "is_from_context_binary=True: the program has no context-binary node; build it with "
            "from_context_binary(...), not by lowering a model with this compile spec"
        )
    return PreprocessResult(processed_bytes=blob)


@final
class QnnDelegate(BackendDetails):
    @staticmethod
    def preprocess(edge_program: ExportedProgram, compile_specs: List[CompileSpec]) -> PreprocessResult:
        options = options_from_compile_specs(compile_specs)
        if options.isFromContextBinary:
            return _wrapped_context_binary(edge_program)
        ep = run_preprocess_passes(copy.deepcopy(edge_program))
        graph = build_qnn_graph(ep, graph_names(options)[0], is_fp16(options), bool(options.dumpIntermediateOutputs))
        label = delegate_label(edge_program, graph.name)
        attach_tables_for_options(graph, options, label)
        blob = attach_qnn_context_for_options(
            serialize_graphs([graph], online_prepare=online_prepare_of(options)), options, label
        )
        return PreprocessResult(processed_bytes=blob, debug_handle_map=_debug_handle_map(edge_program, ep))


QnnBackend = QnnDelegate
