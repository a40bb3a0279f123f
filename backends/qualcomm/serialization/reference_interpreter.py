"""A slow reference interpreter of the payload (torch ops, OPS.md semantics).

For tests and debugging of the AOT side without the C++ engine; not a runtime."""
from __future__ import annotations

from typing import Callable, Dict, List, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from backends.qualcomm.serialization import qnn_payload_generated as gen
from backends.qualcomm.serialization.payload_reader import deserialize

_NUMPY_DTYPES = {
    gen.QnnDataType.FLOAT_32: np.float32, gen.QnnDataType.INT_32: np.int32,
    gen.QnnDataType.INT_64: np.int64, gen.QnnDataType.BOOL_8: np.bool_,
    gen.QnnDataType.UINT_8: np.uint8, gen.QnnDataType.INT_8: np.int8,
}


def _params(op: gen.OpT) -> Dict[str, np.ndarray]:
    out = {}
    for p in op.params or []:
        values = p.floatData if p.floatData is not None else p.intData
        dims = [int(d) for d in p.dims] if p.dims is not None else []
        out[p.name.decode()] = np.asarray(values).reshape(dims) if dims else np.asarray(values).reshape(-1)[0]
    return out


def _nchw(x: torch.Tensor) -> torch.Tensor:
    return x.permute(0, 3, 1, 2)


def _nhwc(x: torch.Tensor) -> torch.Tensor:
    return x.permute(0, 2, 3, 1)


def _pad(x: torch.Tensor, pad: np.ndarray, value: float) -> torch.Tensor:
    return F.pad(x, [int(pad[1][0]), int(pad[1][1]), int(pad[0][0]), int(pad[0][1])], value=value)


def _conv(x, w, b, p, depthwise):
    weight = w.permute(3, 2, 0, 1)  # HWIO -> OIHW
    groups = x.shape[3] if depthwise else int(p.get("group", 1))
    y = F.conv2d(_pad(_nchw(x), p["pad_amount"], 0.0), weight, b, stride=list(p["stride"]),
                 dilation=list(p["dilation"]), groups=groups)
    return _nhwc(y)


def _pool_avg(x, p):
    x = _nchw(x)
    k, s = list(p["filter_size"]), list(p["stride"])
    ones = torch.ones_like(x[:, :1])
    padded = _pad(x, p["pad_amount"], 0.0)
    total = F.avg_pool2d(padded, k, s) * k[0] * k[1]
    if bool(p["count_pad_for_edges"]):
        return _nhwc(total / (k[0] * k[1]))
    count = F.avg_pool2d(_pad(ones, p["pad_amount"], 0.0), k, s) * k[0] * k[1]
    return _nhwc(total / count)


def _pool_max(x, p):
    y = F.max_pool2d(_pad(_nchw(x), p["pad_amount"], float("-inf")), list(p["filter_size"]), list(p["stride"]))
    return _nhwc(y)


def _strided_slice(x, p):
    index = tuple(slice(int(b), int(e), int(s)) for b, e, s in p["ranges"])
    return x[index]


def _matmul(a, b, p):
    a = a.transpose(-1, -2) if bool(p.get("transpose_in0", 0)) else a
    b = b.transpose(-1, -2) if bool(p.get("transpose_in1", 0)) else b
    return a @ b


def _layer_norm(x, gamma, beta, p):
    axes = [int(a) for a in np.atleast_1d(p["axes"])]
    mean = x.mean(dim=axes, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=axes, keepdim=True)
    return (x - mean) / torch.sqrt(var + float(p["epsilon"])) * gamma + beta


def _axes(p) -> List[int]:
    return [int(a) for a in np.atleast_1d(p["axes"])]


_OPS: Dict[str, Callable] = {
    "Conv2d": lambda i, p, o: _conv(i[0], i[1], i[2], p, False),
    "DepthWiseConv2d": lambda i, p, o: _conv(i[0], i[1], i[2], p, True),
    "FullyConnected": lambda i, p, o: i[0].reshape(-1, i[1].shape[1]) @ i[1].T + i[2],
    "MatMul": lambda i, p, o: _matmul(i[0], i[1], p),
    "ElementWiseAdd": lambda i, p, o: i[0] + i[1],
    "ElementWiseSubtract": lambda i, p, o: i[0] - i[1],
    "ElementWiseMultiply": lambda i, p, o: i[0] * i[1],
    "ElementWiseDivide": lambda i, p, o: i[0] / i[1],
    "Relu": lambda i, p, o: torch.relu(i[0]),
    "ReluMinMax": lambda i, p, o: torch.clamp(i[0], float(p["min_value"]), float(p["max_value"])),
    "Sigmoid": lambda i, p, o: torch.sigmoid(i[0]),
    "Tanh": lambda i, p, o: torch.tanh(i[0]),
    "Gelu": lambda i, p, o: F.gelu(i[0]),
    "HardSwish": lambda i, p, o: F.hardswish(i[0]),
    "Softmax": lambda i, p, o: torch.softmax(i[0] * float(p["beta"]), int(p["axis"])),
    "LayerNorm": lambda i, p, o: _layer_norm(i[0], i[1], i[2], p),
    "Batchnorm": lambda i, p, o: i[0] * i[1] + i[2],
    "ReduceMean": lambda i, p, o: i[0].mean(dim=_axes(p), keepdim=bool(p["keep_dims"])),
    "ReduceSum": lambda i, p, o: i[0].sum(dim=_axes(p), keepdim=bool(p["keep_dims"])),
    "PoolAvg2d": lambda i, p, o: _pool_avg(i[0], p),
    "PoolMax2d": lambda i, p, o: _pool_max(i[0], p),
    "Reshape": lambda i, p, o: i[0].reshape(o),
    "Transpose": lambda i, p, o: i[0].permute(*[int(v) for v in p["perm"]]),
    "Concat": lambda i, p, o: torch.cat(i, int(p["axis"])),
    "StridedSlice": lambda i, p, o: _strided_slice(i[0], p),
    "Gather": lambda i, p, o: torch.index_select(i[0], int(p["axis"]), i[1].reshape(-1).long()).reshape(o),
    "Tile": lambda i, p, o: i[0].repeat(*[int(v) for v in p["multiples"]]),
    "Cast": lambda i, p, o: i[0],
}


def _static(tensor: gen.TensorT) -> torch.Tensor:
    dtype = _NUMPY_DTYPES[tensor.dataType]
    dims = [int(d) for d in tensor.dims] if tensor.dims is not None else []
    return torch.from_numpy(np.frombuffer(bytes(tensor.data), dtype=dtype).reshape(dims).copy())


def run_reference(blob: bytes, inputs: Sequence[np.ndarray], fp16: bool = True) -> List[np.ndarray]:
    """Execute the first graph of a blob; with fp16 (and the graph's flag) round like HTP."""
    graph = deserialize(blob).graphs[0]
    round16 = fp16 and bool(graph.fp16Precision)
    values: Dict[int, torch.Tensor] = {}
    for tensor in graph.tensors:
        if tensor.type == gen.QnnTensorType.STATIC:
            values[tensor.id] = _static(tensor)
    for tid, array in zip(graph.inputs, inputs):
        values[int(tid)] = torch.from_numpy(np.ascontiguousarray(array))
    for op in graph.ops:
        out_t = graph.tensors[int(op.outputs[0])]
        out_dims = [int(d) for d in out_t.dims] if out_t.dims is not None else []
        args = [values[int(i)] for i in op.inputs]
        if round16:
            args = [a.half().float() if a.dtype == torch.float32 else a for a in args]
        result = _OPS[op.type.decode()](args, _params(op), out_dims)
        result = result.to(torch.from_numpy(np.zeros(0, _NUMPY_DTYPES[out_t.dataType])).dtype)
        if list(result.shape) != out_dims:
            raise ValueError(f"op {op.name.decode()}: shape {list(result.shape)} != declared {out_dims}")
        values[int(op.outputs[0])] = result
    return [values[int(t)].numpy() for t in graph.outputs]
