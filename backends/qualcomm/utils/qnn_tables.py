"""Lookup tables measured on Qualcomm's QNN HTP for a graph's quantized unary ops.

An elementwise unary op's output code depends only on its input code, so what QNN computes for
it is a table: 256 entries for 8-bit inputs, 65536 for 16-bit ones. At lowering, when the QNN
library is present, every such op of a graph is copied (same type, params and encodings) into
ONE small QNN graph whose inputs are [n_codes] tensors, built and finalized once, executed once
on every input code; the outputs are the ops' tables. The host engine then looks outputs up in
them instead of evaluating the float function (its own table when a graph carries none).
"""

from __future__ import annotations

import copy
import logging
from typing import Dict, List, Optional, Tuple

import numpy as np

from backends.qualcomm.builders.qnn_op_types import LUT_OP_TYPES, QnnOpType
from backends.qualcomm.serialization.qnn_graph import DataType, QnnGraph, QnnOp, QnnTensor, TensorType

logger = logging.getLogger("backends.qualcomm")

# QNN op types whose quantized output is a function of one input code only (op table: lut).
TABLE_OP_TYPES = LUT_OP_TYPES
_CODES = {DataType.UFIXED_POINT_8: (256, np.uint8), DataType.UFIXED_POINT_16: (65536, np.uint16)}


def _per_tensor(tensor: QnnTensor) -> bool:
    q = tensor.quant
    return q is not None and q.scales is None and q.scale > 0 and tensor.data_type in _CODES


def _unary_codes(graph: QnnGraph, x_id: int, y_id: int) -> bool:
    x, y = graph.tensors[x_id], graph.tensors[y_id]
    return x.type != TensorType.STATIC and _per_tensor(x) and _per_tensor(y) and x.data_type == y.data_type


def _silu_gate(graph: QnnGraph, op: QnnOp) -> Optional[QnnOp]:
    """For silu as built here (x -> Sigmoid -> FLOAT_32 gate; ElementWiseMultiply(x, gate)), the
    Sigmoid op of the Multiply `op`; else None. x * sigmoid(x) is a function of x's code."""
    if op.type != QnnOpType.ElementWiseMultiply or len(op.inputs) != 2 or len(op.outputs) != 1:
        return None
    x, gate = op.inputs
    if graph.tensors[gate].data_type != DataType.FLOAT_32 or not _unary_codes(graph, x, op.outputs[0]):
        return None
    for producer in graph.ops:
        if producer.outputs == [gate]:
            return producer if producer.type == QnnOpType.Sigmoid and producer.inputs == [x] else None
    return None


# Clamps HTP folds into the op that produces their input (measured on QNN 2.51: a 16-bit Relu
# after a Multiply matches the engine's exact requantization of the Multiply's codes on every
# element, while the Relu's table measured alone is 1 step off on ~3% of codes); they get a
# table only when their input is the graph's Quantize or a graph input.
FUSED_CLAMPS = frozenset({"Relu", QnnOpType.ReluMinMax})


def _fused_into_producer(graph: QnnGraph, op: QnnOp) -> bool:
    if op.type not in FUSED_CLAMPS:
        return False
    producer = next((o for o in graph.ops if op.inputs[0] in o.outputs), None)
    return producer is not None and producer.type != QnnOpType.Quantize


def table_ops(graph: QnnGraph) -> List[int]:
    """Indices of the ops of `graph` that a measured table can stand for: a unary op of
    TABLE_OP_TYPES from a per-tensor uint8/uint16 activation to one of the same data type
    (Relu / ReluMinMax only on a Quantize's output or a graph input), and the Multiply of silu
    (x * sigmoid(x) through a FLOAT_32 gate)."""
    found = []
    for index, op in enumerate(graph.ops):
        if op.type in TABLE_OP_TYPES and len(op.inputs) == 1 and len(op.outputs) == 1:
            if _unary_codes(graph, op.inputs[0], op.outputs[0]) and not _fused_into_producer(graph, op):
                found.append(index)
        elif _silu_gate(graph, op) is not None:
            found.append(index)
    return found


def table_graph(graph: QnnGraph, op_indices: List[int]) -> QnnGraph:
    """One QNN graph holding a copy of each op in `op_indices` applied to all its input codes
    (silu: its Sigmoid and Multiply)."""
    probe = QnnGraph(name="qnn_tables")

    def tensor(name: str, kind: int, like: QnnTensor, n: int) -> int:
        probe.tensors.append(
            QnnTensor(len(probe.tensors), name, kind, like.data_type, [1, n], copy.deepcopy(like.quant))
        )
        return probe.tensors[-1].id

    def add(name: str, op: QnnOp, inputs: List[int], outputs: List[int]) -> None:
        probe.ops.append(QnnOp(name, op.type, inputs, outputs, copy.deepcopy(op.params), package=op.package))

    for k, index in enumerate(op_indices):
        op = graph.ops[index]
        x, y = graph.tensors[op.inputs[0]], graph.tensors[op.outputs[0]]
        n = _CODES[x.data_type][0]
        xi = tensor(f"t{k}_in", TensorType.APP_WRITE, x, n)
        yi = tensor(f"t{k}_out", TensorType.APP_READ, y, n)
        gate = _silu_gate(graph, op)
        if gate is not None:
            gi = tensor(f"t{k}_gate", TensorType.NATIVE, graph.tensors[gate.outputs[0]], n)
            add(f"t{k}_{gate.type}", gate, [xi], [gi])
            add(f"t{k}_{op.type}", op, [xi, gi], [yi])
        else:
            add(f"t{k}_{op.type}", op, [xi], [yi])
        probe.inputs.append(xi)
        probe.outputs.append(yi)
    return probe


def _run_probe(graph: QnnGraph, indices: List[int], soc_model: int, vtcm_mb: int) -> Dict[int, np.ndarray]:
    from backends.qualcomm.serialization.payload_writer import QnnHtpSection, serialize_graphs, wrap_context_binary
    from backends.qualcomm.utils.qnn_context import payload_of
    from backends.qualcomm.utils.runtime_options import load_extension

    blob = serialize_graphs([table_graph(graph, indices)])
    extension = load_extension()
    binary, graphs = extension.qnn_compile(blob, int(soc_model), int(vtcm_mb))
    section = QnnHtpSection(bytes(binary), int(soc_model), [(str(n), list(ids)) for n, ids in graphs])
    blob = wrap_context_binary(payload_of(blob), section)
    inputs = []
    for index in indices:
        n, dtype = _CODES[graph.tensors[graph.ops[index].inputs[0]].data_type]
        inputs.append(np.arange(n, dtype=dtype).reshape(1, n))
    outputs, _ = extension.run_payload_qnn(blob, inputs)
    return {index: np.asarray(out).reshape(-1).copy() for index, out in zip(indices, outputs)}


def measure_tables(graph: QnnGraph, soc_model: int, vtcm_mb: int = 0) -> Tuple[Dict[int, np.ndarray], List[str]]:
    """({op index: table (uint8 / uint16, one entry per input code)} measured on QNN for the
    table ops of `graph`, [why QNN refused an op]). All ops go into one probe graph; when QNN
    refuses it, each op is probed on its own and the ones QNN refuses get no table."""
    indices = table_ops(graph)
    if not indices:
        return {}, []
    try:
        return _run_probe(graph, indices, soc_model, vtcm_mb), []
    except RuntimeError:
        if len(indices) == 1:
            raise
    tables: Dict[int, np.ndarray] = {}
    refused: List[str] = []
    for index in indices:
        try:
            tables.update(_run_probe(graph, [index], soc_model, vtcm_mb))
        except RuntimeError as exc:
            refused.append(f"op '{graph.ops[index].name}' ({graph.ops[index].type}): {str(exc)[:200]}")
    return tables, refused


def attach_tables(graph: QnnGraph, soc_model: int, vtcm_mb: int = 0) -> Optional[str]:
    """Store QNN-measured tables on the table ops of `graph` (QnnOp.lookup_table); None when
    every table op got one, else why not for the others (they keep the engine's own tables)."""
    try:
        tables, refused = measure_tables(graph, soc_model, vtcm_mb)
    except RuntimeError as exc:
        return str(exc)
    for index, table in tables.items():
        graph.ops[index].lookup_table = table
    return "; ".join(refused) if refused else None


def attach_tables_for_options(graph: QnnGraph, options, label: str = "delegate") -> None:
    """attach_tables with the compile spec's SoC and VTCM size, when lowering builds QNN context
    binaries (qnn_aot_enabled); a QNN refusal is warned about and leaves the engine's own tables."""
    from backends.qualcomm.utils.qnn_context import qnn_aot_enabled

    if not table_ops(graph) or not qnn_aot_enabled():
        return
    soc = options.socInfo
    soc_model = int(soc.socModel) if soc is not None else 0
    vtcm = int(soc.htpInfo.vtcmSizeInMb) if soc is not None and soc.htpInfo is not None else 0
    error = attach_tables(graph, soc_model, vtcm)
    if error is not None:
        logger.warning(
            "qnn-delegate: %s: ops without a QNN lookup table (the host engine computes its own): %s", label, error
        )
