"""In-memory QNN graph (tensors, params, ops) that the payload writer serializes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Sequence

import numpy as np

from backends.qualcomm.serialization import qnn_payload_generated as gen

DataType = gen.QnnDataType
TensorType = gen.QnnTensorType
QuantEncoding = gen.QnnQuantEncoding
ParamKind = gen.QnnParamKind


@dataclass
class QuantParams:
    """Quantization encoding of a tensor (real = scale * (q + offset))."""

    encoding: int = QuantEncoding.UNDEFINED
    bitwidth: int = 8
    scale: float = 0.0
    offset: int = 0
    axis: int = -1
    scales: Optional[Sequence[float]] = None
    offsets: Optional[Sequence[int]] = None
    block_axis: int = -1
    block_size: int = 0
    block_scale_bitwidth: int = 4
    block_scales: Optional[np.ndarray] = None


@dataclass
class QnnTensor:
    id: int
    name: str
    type: int
    data_type: int
    dims: List[int]
    quant: Optional[QuantParams] = None
    data: Optional[np.ndarray] = None  # STATIC only
    dim_order: List[int] = field(default_factory=list)  # graph IO: ExecuTorch dim order; [] = contiguous
    # APP_WRITE outside QnnGraph.inputs: bound to the caller's buffer of inputs[k], read in this
    # tensor's data type (the exact bits of a FLOAT_32 input as INT_32); -1 = none
    bits_of_input: int = -1


@dataclass
class QnnParam:
    name: str
    kind: int
    data_type: int
    dims: List[int] = field(default_factory=list)
    int_data: Optional[List[int]] = None
    float_data: Optional[List[float]] = None


@dataclass
class QnnOp:
    name: str
    type: str
    inputs: List[int]
    outputs: List[int]
    params: List[QnnParam] = field(default_factory=list)
    debug_handle: int = 0
    package: str = "qti.aisw"
    # Unary quantized ops: QNN's output code per input code, see qnn_tables.py (a uint16 array
    # for uint16 ops; uint8 values otherwise, or the raw little-endian bytes of either).
    lookup_table: Optional[np.ndarray] = None
    # Measured: QNN's op validation refuses this op, its graph finalize accepts it and computes
    # it right (the partitioner does not leave the node on the CPU for that refusal).
    finalize_accepts: bool = False


@dataclass
class QnnGraph:
    name: str
    tensors: List[QnnTensor] = field(default_factory=list)
    ops: List[QnnOp] = field(default_factory=list)
    inputs: List[int] = field(default_factory=list)
    outputs: List[int] = field(default_factory=list)
    fp16_precision: bool = False


def _flat(values: Sequence) -> List:
    return [v for v in np.asarray(values).reshape(-1).tolist()]


def scalar_param(name: str, value: object, data_type: int) -> QnnParam:
    """A SCALAR param; FLOAT_32 goes to float_data, everything else to int_data."""
    if data_type == DataType.FLOAT_32:
        return QnnParam(name, ParamKind.SCALAR, data_type, [], float_data=[float(value)])
    return QnnParam(name, ParamKind.SCALAR, data_type, [], int_data=[int(value)])


def tensor_param(name: str, values: Sequence, data_type: int, dims: Optional[List[int]] = None) -> QnnParam:
    """A TENSOR param with row-major values; dims default to [len(values)]."""
    flat = _flat(values)
    shape = list(dims) if dims is not None else list(np.asarray(values).shape)
    if data_type == DataType.FLOAT_32:
        return QnnParam(name, ParamKind.TENSOR, data_type, shape, float_data=[float(v) for v in flat])
    return QnnParam(name, ParamKind.TENSOR, data_type, shape, int_data=[int(v) for v in flat])


def uint32_scalar(name: str, value: int) -> QnnParam:
    return scalar_param(name, value, DataType.UINT_32)


def int32_scalar(name: str, value: int) -> QnnParam:
    return scalar_param(name, value, DataType.INT_32)


def bool_scalar(name: str, value: bool) -> QnnParam:
    return scalar_param(name, int(bool(value)), DataType.BOOL_8)


def float_scalar(name: str, value: float) -> QnnParam:
    return scalar_param(name, value, DataType.FLOAT_32)


def uint32_tensor(name: str, values: Sequence[int], dims: Optional[List[int]] = None) -> QnnParam:
    return tensor_param(name, values, DataType.UINT_32, dims)


def int32_tensor(name: str, values: Sequence[int], dims: Optional[List[int]] = None) -> QnnParam:
    return tensor_param(name, values, DataType.INT_32, dims)
