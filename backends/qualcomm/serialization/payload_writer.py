"""Serialize a QnnGraph into a delegate blob (QnnContextBinary wrapping a QnnPayload)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import flatbuffers
import numpy as np

from backends.qualcomm.serialization import qnn_payload_generated as gen
from backends.qualcomm.serialization.fnv import fnv1a64
from backends.qualcomm.serialization.qnn_graph import QnnGraph, QnnOp, QnnParam, QnnTensor, QuantParams

SCHEMA_VERSION = 1
PAYLOAD_IDENTIFIER = b"QNNP"
CONTEXT_IDENTIFIER = b"QNNB"
DATA_ALIGNMENT = 64


def _aligned_bytes_vector(builder: flatbuffers.Builder, data: bytes, alignment: int = DATA_ALIGNMENT) -> int:
    """A ubyte vector whose first byte is `alignment`-aligned, copied in one slice."""
    n = len(data)
    builder.StartVector(1, n, alignment)
    builder.head = builder.head - n
    builder.Bytes[builder.head : builder.head + n] = data
    return builder.EndVector(n)


def _numpy_vector(builder: flatbuffers.Builder, values: Sequence, dtype: str) -> int:
    return builder.CreateNumpyVector(np.asarray(values, dtype=dtype).reshape(-1))


def _write_quant(builder: flatbuffers.Builder, quant: QuantParams) -> int:
    scales = _numpy_vector(builder, quant.scales, "<f4") if quant.scales is not None else None
    offsets = _numpy_vector(builder, quant.offsets, "<i4") if quant.offsets is not None else None
    block_scales = _numpy_vector(builder, quant.block_scales, "u1") if quant.block_scales is not None else None
    gen.QuantizeParamsStart(builder)
    gen.QuantizeParamsAddEncoding(builder, int(quant.encoding))
    gen.QuantizeParamsAddBitwidth(builder, int(quant.bitwidth))
    gen.QuantizeParamsAddScale(builder, float(quant.scale))
    gen.QuantizeParamsAddOffset(builder, int(quant.offset))
    gen.QuantizeParamsAddAxis(builder, int(quant.axis))
    if scales is not None:
        gen.QuantizeParamsAddScales(builder, scales)
    if offsets is not None:
        gen.QuantizeParamsAddOffsets(builder, offsets)
    gen.QuantizeParamsAddBlockAxis(builder, int(quant.block_axis))
    gen.QuantizeParamsAddBlockSize(builder, int(quant.block_size))
    gen.QuantizeParamsAddBlockScaleBitwidth(builder, int(quant.block_scale_bitwidth))
    if block_scales is not None:
        gen.QuantizeParamsAddBlockScales(builder, block_scales)
    return gen.QuantizeParamsEnd(builder)


def _tensor_data_bytes(tensor: QnnTensor) -> bytes:
    array = np.ascontiguousarray(tensor.data)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return array.tobytes()


def _static_data_vector(
    builder: flatbuffers.Builder, tensor: QnnTensor, shared: Optional[Dict[bytes, int]]
) -> Optional[int]:
    """The data vector of a STATIC tensor; with `shared`, identical bytes are written once."""
    if tensor.data is None:
        return None
    data = _tensor_data_bytes(tensor)
    if shared is None:
        return _aligned_bytes_vector(builder, data)
    if data not in shared:
        shared[data] = _aligned_bytes_vector(builder, data)
    return shared[data]


def _write_tensor(builder: flatbuffers.Builder, tensor: QnnTensor, shared: Optional[Dict[bytes, int]] = None) -> int:
    data = _static_data_vector(builder, tensor, shared)
    quant = _write_quant(builder, tensor.quant) if tensor.quant is not None else None
    dims = _numpy_vector(builder, tensor.dims, "<u4")
    dim_order = _numpy_vector(builder, tensor.dim_order, "<u1") if tensor.dim_order else None
    name = builder.CreateString(tensor.name)
    gen.TensorStart(builder)
    gen.TensorAddId(builder, tensor.id)
    gen.TensorAddName(builder, name)
    gen.TensorAddType(builder, int(tensor.type))
    gen.TensorAddDataType(builder, int(tensor.data_type))
    gen.TensorAddDims(builder, dims)
    if quant is not None:
        gen.TensorAddQuant(builder, quant)
    if data is not None:
        gen.TensorAddData(builder, data)
    if dim_order is not None:
        gen.TensorAddDimOrder(builder, dim_order)
    if tensor.bits_of_input >= 0:
        gen.TensorAddBitsOfInput(builder, tensor.bits_of_input)
    return gen.TensorEnd(builder)


def _write_param(builder: flatbuffers.Builder, param: QnnParam) -> int:
    int_data = _numpy_vector(builder, param.int_data, "<i8") if param.int_data is not None else None
    float_data = _numpy_vector(builder, param.float_data, "<f4") if param.float_data is not None else None
    dims = _numpy_vector(builder, param.dims, "<u4")
    name = builder.CreateString(param.name)
    gen.ParamStart(builder)
    gen.ParamAddName(builder, name)
    gen.ParamAddKind(builder, int(param.kind))
    gen.ParamAddDataType(builder, int(param.data_type))
    gen.ParamAddDims(builder, dims)
    if int_data is not None:
        gen.ParamAddIntData(builder, int_data)
    if float_data is not None:
        gen.ParamAddFloatData(builder, float_data)
    return gen.ParamEnd(builder)


def _offsets_vector(builder: flatbuffers.Builder, offsets: List[int]) -> int:
    builder.StartVector(4, len(offsets), 4)
    for offset in reversed(offsets):
        builder.PrependUOffsetTRelative(offset)
    return builder.EndVector(len(offsets))


def _table_bytes(table) -> bytes:
    """uint16 codes as little-endian bytes; anything else is taken as bytes (uint8 codes, or a
    table read back from a payload)."""
    array = np.asarray(table).reshape(-1)
    if array.dtype == np.uint16:
        return array.astype("<u2").tobytes()
    return array.astype(np.uint8).tobytes()


def _lookup_table_vector(builder: flatbuffers.Builder, op: QnnOp, shared: Optional[Dict[bytes, int]]) -> Optional[int]:
    """The lookup table of a host-engine op; with `shared`, identical tables are written once."""
    if op.lookup_table is None:
        return None
    data = _table_bytes(op.lookup_table)
    if shared is not None and data in shared:
        return shared[data]
    table = builder.CreateNumpyVector(np.frombuffer(data, dtype=np.uint8))
    if shared is not None:
        shared[data] = table
    return table


def _write_op(builder: flatbuffers.Builder, op: QnnOp, shared_tables: Optional[Dict[bytes, int]] = None) -> int:
    params = _offsets_vector(builder, [_write_param(builder, p) for p in op.params])
    inputs = _numpy_vector(builder, op.inputs, "<u4")
    outputs = _numpy_vector(builder, op.outputs, "<u4")
    name = builder.CreateString(op.name)
    package = builder.CreateString(op.package)
    op_type = builder.CreateString(op.type)
    table = _lookup_table_vector(builder, op, shared_tables)
    gen.OpStart(builder)
    gen.OpAddName(builder, name)
    gen.OpAddPackage(builder, package)
    gen.OpAddType(builder, op_type)
    gen.OpAddInputs(builder, inputs)
    gen.OpAddOutputs(builder, outputs)
    gen.OpAddParams(builder, params)
    gen.OpAddDebugHandle(builder, int(op.debug_handle))
    if table is not None:
        gen.OpAddLookupTable(builder, table)
    return gen.OpEnd(builder)


def _write_graph(
    builder: flatbuffers.Builder,
    graph: QnnGraph,
    shared: Optional[Dict[bytes, int]] = None,
    shared_tables: Optional[Dict[bytes, int]] = None,
) -> int:
    tensors = _offsets_vector(builder, [_write_tensor(builder, t, shared) for t in graph.tensors])
    ops = _offsets_vector(builder, [_write_op(builder, o, shared_tables) for o in graph.ops])
    inputs = _numpy_vector(builder, graph.inputs, "<u4")
    outputs = _numpy_vector(builder, graph.outputs, "<u4")
    name = builder.CreateString(graph.name)
    gen.GraphStart(builder)
    gen.GraphAddName(builder, name)
    gen.GraphAddTensors(builder, tensors)
    gen.GraphAddOps(builder, ops)
    gen.GraphAddInputs(builder, inputs)
    gen.GraphAddOutputs(builder, outputs)
    gen.GraphAddFp16Precision(builder, bool(graph.fp16_precision))
    return gen.GraphEnd(builder)


def _static_bytes(graphs: Sequence[QnnGraph]) -> int:
    return sum(t.data.nbytes for g in graphs for t in g.tensors if t.data is not None)


def serialize_payload(
    graphs: Sequence[QnnGraph],
    share_static_data: bool = False,
    context_binary_only: bool = False,
    online_prepare: Optional[Tuple[int, int]] = None,
) -> bytes:
    """QnnPayload flatbuffer bytes (identifier QNNP) holding `graphs`.

    share_static_data: STATIC tensors with identical bytes (in any graph) point
    to one data vector, so shared weights are stored once; so do identical lookup tables.
    context_binary_only: the graphs are only their inputs / outputs, run from a QNN context
    binary made elsewhere (QnnPayload.context_binary_only).
    online_prepare: (SoC model, VTCM MB) for which QNN builds the graphs at init (no binary).
    """
    builder = flatbuffers.Builder(_static_bytes(graphs) + 64 * 1024)
    shared: Optional[Dict[bytes, int]] = {} if share_static_data else None
    tables: Optional[Dict[bytes, int]] = {} if share_static_data else None
    graph_offsets = _offsets_vector(builder, [_write_graph(builder, g, shared, tables) for g in graphs])
    prepare = None
    if online_prepare is not None:
        gen.OnlinePrepareStart(builder)
        gen.OnlinePrepareAddSocModel(builder, int(online_prepare[0]))
        gen.OnlinePrepareAddVtcmMb(builder, int(online_prepare[1]))
        prepare = gen.OnlinePrepareEnd(builder)
    gen.QnnPayloadStart(builder)
    gen.QnnPayloadAddSchemaVersion(builder, SCHEMA_VERSION)
    gen.QnnPayloadAddGraphs(builder, graph_offsets)
    if context_binary_only:
        gen.QnnPayloadAddContextBinaryOnly(builder, True)
    if prepare is not None:
        gen.QnnPayloadAddOnlinePrepare(builder, prepare)
    builder.Finish(gen.QnnPayloadEnd(builder), file_identifier=PAYLOAD_IDENTIFIER)
    return bytes(builder.Output())


@dataclass
class QnnHtpSection:
    """A QNN context binary for the payload's graphs (see QnnHtpContext in qnn_payload.fbs)."""

    binary: bytes
    soc_model: int
    graphs: List[Tuple[str, List[int]]]  # (graph name, QNN tensor id per payload tensor)


def _write_qnn_section(builder: flatbuffers.Builder, section: QnnHtpSection) -> int:
    binary = _aligned_bytes_vector(builder, section.binary)
    graph_offsets = []
    for name, ids in section.graphs:
        id_vector = _numpy_vector(builder, ids, "<u4")
        name_offset = builder.CreateString(name)
        gen.QnnHtpGraphStart(builder)
        gen.QnnHtpGraphAddName(builder, name_offset)
        gen.QnnHtpGraphAddTensorIds(builder, id_vector)
        graph_offsets.append(gen.QnnHtpGraphEnd(builder))
    graphs = _offsets_vector(builder, graph_offsets)
    gen.QnnHtpContextStart(builder)
    gen.QnnHtpContextAddSignature(builder, fnv1a64(section.binary))
    gen.QnnHtpContextAddSocModel(builder, int(section.soc_model))
    gen.QnnHtpContextAddGraphs(builder, graphs)
    gen.QnnHtpContextAddBinary(builder, binary)
    return gen.QnnHtpContextEnd(builder)


def wrap_context_binary(payload: bytes, qnn_section: Optional[QnnHtpSection] = None) -> bytes:
    """QnnContextBinary bytes (identifier QNNB): version, FNV-1a signature, 64-aligned payload,
    and optionally a QNN context binary built from it."""
    extra = len(qnn_section.binary) if qnn_section is not None else 0
    builder = flatbuffers.Builder(len(payload) + extra + 4096)
    qnn = _write_qnn_section(builder, qnn_section) if qnn_section is not None else None
    payload_vector = _aligned_bytes_vector(builder, payload)
    gen.QnnContextBinaryStart(builder)
    gen.QnnContextBinaryAddSchemaVersion(builder, SCHEMA_VERSION)
    gen.QnnContextBinaryAddSignature(builder, fnv1a64(payload))
    gen.QnnContextBinaryAddPayload(builder, payload_vector)
    if qnn is not None:
        gen.QnnContextBinaryAddQnnContext(builder, qnn)
    builder.Finish(gen.QnnContextBinaryEnd(builder), file_identifier=CONTEXT_IDENTIFIER)
    return bytes(builder.Output())


def serialize_graphs(
    graphs: Sequence[QnnGraph], share_static_data: bool = False, online_prepare: Optional[Tuple[int, int]] = None
) -> bytes:
    """The full delegate blob for `graphs` (see serialize_payload for online_prepare)."""
    return wrap_context_binary(serialize_payload(graphs, share_static_data, online_prepare=online_prepare))
