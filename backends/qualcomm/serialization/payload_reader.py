"""Read a delegate blob back: object-API tree, and a readable summary for tests and users."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List

import numpy as np

from backends.qualcomm.serialization import qnn_payload_generated as gen
from backends.qualcomm.serialization.fnv import fnv1a64

_DATA_TYPE_NAMES = {v: k for k, v in vars(gen.QnnDataType).items() if not k.startswith("_")}
_TENSOR_TYPE_NAMES = {v: k for k, v in vars(gen.QnnTensorType).items() if not k.startswith("_")}
_ENCODING_NAMES = {v: k for k, v in vars(gen.QnnQuantEncoding).items() if not k.startswith("_")}


def describe_quant(quant) -> str:
    """One-line summary of a tensor's QuantizeParamsT ("" when it has none)."""
    if quant is None or quant.encoding == gen.QnnQuantEncoding.UNDEFINED:
        return ""
    name = _ENCODING_NAMES.get(quant.encoding, str(quant.encoding))
    if quant.scales is None:
        return f"{name}(bw={quant.bitwidth}, scale={quant.scale:.6g}, offset={quant.offset})"
    text = f"{name}(bw={quant.bitwidth}, axis={quant.axis}, channels={len(quant.scales)}"
    if quant.encoding == gen.QnnQuantEncoding.BLOCKWISE_EXPANSION:
        text += f", block_axis={quant.blockAxis}, block_size={quant.blockSize}"
    return text + ")"


@dataclass
class TensorSummary:
    id: int
    name: str
    kind: str
    data_type: str
    dims: List[int]
    nbytes: int
    quant: str = ""  # e.g. "SCALE_OFFSET(bw=8, scale=0.0203, offset=-117)"; "" when not quantized
    dim_order: List[int] = field(default_factory=list)  # graph IO: ExecuTorch dim order; [] = contiguous
    bits_of_input: int = -1  # APP_WRITE view of graph input k's buffer (its bits as INT_32); -1 = none


@dataclass
class OpSummary:
    name: str
    type: str
    inputs: List[str]
    outputs: List[str]
    params: Dict[str, List]
    debug_handle: int
    table_bytes: int = 0  # size of the op's QNN-measured lookup table (0 = none)


@dataclass
class GraphSummary:
    name: str
    fp16_precision: bool
    tensors: List[TensorSummary] = field(default_factory=list)
    ops: List[OpSummary] = field(default_factory=list)
    inputs: List[str] = field(default_factory=list)
    outputs: List[str] = field(default_factory=list)

    def op_types(self) -> Counter:
        """How many ops of each QNN type the graph holds."""
        return Counter(op.type for op in self.ops)

    def __str__(self) -> str:
        lines = [f"graph '{self.name}' fp16={self.fp16_precision} inputs={self.inputs} outputs={self.outputs}"]
        for op in self.ops:
            params = ", ".join(f"{k}={v}" for k, v in op.params.items())
            table = f" table={op.table_bytes}B" if op.table_bytes else ""
            lines.append(f"  {op.type:<22} {op.name}: {op.inputs} -> {op.outputs} {params}{table}")
        return "\n".join(lines)


def _context_of(blob: bytes) -> gen.QnnContextBinary:
    buf = bytearray(blob)
    if not gen.QnnContextBinary.QnnContextBinaryBufferHasIdentifier(buf, 0):
        raise ValueError("not a qnn-delegate blob: file identifier is not 'QNNB'")
    return gen.QnnContextBinary.GetRootAs(buf, 0)


def payload_bytes(blob: bytes, check_signature: bool = True) -> bytes:
    """The nested QnnPayload bytes of a blob; ValueError when the signature does not match."""
    context = _context_of(blob)
    payload = context.PayloadAsNumpy().tobytes()
    if check_signature and fnv1a64(payload) != context.Signature():
        raise ValueError("qnn-delegate blob signature mismatch: payload was altered")
    return payload


def deserialize(blob: bytes) -> gen.QnnPayloadT:
    """The QnnPayload of a blob as generated object-API classes (QnnPayloadT)."""
    payload = payload_bytes(blob)
    root = gen.QnnPayload.GetRootAs(bytearray(payload), 0)
    return gen.QnnPayloadT.InitFromObj(root)


def _decode(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _param_values(param: gen.ParamT) -> List:
    values = param.floatData if param.floatData is not None else param.intData
    return list(np.asarray(values).tolist()) if values is not None else []


def _summarize_tensor(tensor: gen.TensorT) -> TensorSummary:
    nbytes = 0 if tensor.data is None else len(tensor.data)
    dims = [] if tensor.dims is None else [int(d) for d in tensor.dims]
    return TensorSummary(
        int(tensor.id),
        _decode(tensor.name),
        _TENSOR_TYPE_NAMES.get(tensor.type, str(tensor.type)),
        _DATA_TYPE_NAMES.get(tensor.dataType, str(tensor.dataType)),
        dims,
        nbytes,
        describe_quant(tensor.quant),
        [] if tensor.dimOrder is None else [int(d) for d in tensor.dimOrder],
        int(tensor.bitsOfInput),
    )


def _ids(values) -> List[int]:
    return [] if values is None else [int(v) for v in values]


def _summarize_graph(graph: gen.GraphT) -> GraphSummary:
    tensors = [_summarize_tensor(t) for t in (graph.tensors or [])]
    names = {t.id: t.name for t in tensors}
    summary = GraphSummary(_decode(graph.name), bool(graph.fp16Precision), tensors)
    summary.inputs = [names[i] for i in _ids(graph.inputs)]
    summary.outputs = [names[i] for i in _ids(graph.outputs)]
    for op in graph.ops or []:
        params = {_decode(p.name): _param_values(p) for p in (op.params or [])}
        summary.ops.append(
            OpSummary(
                _decode(op.name),
                _decode(op.type),
                [names[i] for i in _ids(op.inputs)],
                [names[i] for i in _ids(op.outputs)],
                params,
                int(op.debugHandle),
                0 if op.lookupTable is None else len(op.lookupTable),
            )
        )
    return summary


def describe_payload(blob: bytes) -> List[GraphSummary]:
    """Readable summary (ops, tensors, params) of every graph in a delegate blob."""
    return [_summarize_graph(g) for g in (deserialize(blob).graphs or [])]
