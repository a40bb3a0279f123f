"""Hand-made payloads for the engine tests, written by the AOT writer (payload_writer.py).

`GraphBuilder` records tensors and ops as plain dicts, so a test can break them on
purpose (a wrong tensor id, an unknown op type, data of the wrong size) before
`payload()` / `blob()` turn them into a QnnGraph and serialize it with
`serialize_payload` / `wrap_context_binary`. A blob with a wrong signature is made by
rewriting the signature bytes of a correct one (`blob(signature=...)`).
"""

from __future__ import annotations

import dataclasses
import struct
from typing import List, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from backends.qualcomm.serialization import qnn_payload_generated as gen
from backends.qualcomm.serialization.fnv import fnv1a64
from backends.qualcomm.serialization.payload_writer import serialize_payload, wrap_context_binary
from backends.qualcomm.serialization.qnn_graph import QnnGraph, QnnOp, QnnParam, QnnTensor, QuantParams

F32, I32, I64, U32, BOOL = (
    gen.QnnDataType.FLOAT_32,
    gen.QnnDataType.INT_32,
    gen.QnnDataType.INT_64,
    gen.QnnDataType.UINT_32,
    gen.QnnDataType.BOOL_8,
)
NP_TO_QNN = {np.dtype("float32"): F32, np.dtype("int32"): I32, np.dtype("int64"): I64}
GRAPH_NAME = "test_graph"


def u32(values) -> tuple:
    """A UINT_32 tensor param."""
    return ("tensor", U32, np.asarray(values))


def scalar(dtype: int, value) -> tuple:
    """A scalar param of QNN data type `dtype`."""
    return ("scalar", dtype, np.asarray([value]))


def randn(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


_QUANT_FIELDS = {f.name for f in dataclasses.fields(QuantParams)}


def _quant(q: Optional[dict]) -> Optional[QuantParams]:
    """QuantParams of a quant dict; other keys (e.g. a test's own 'dtype') are ignored."""
    return QuantParams(**{k: v for k, v in q.items() if k in _QUANT_FIELDS}) if q else None


def _param(name: str, spec: tuple) -> QnnParam:
    """spec: ('scalar'|'tensor', dtype, values[, dims])."""
    kind, dtype, values = spec[0], spec[1], np.asarray(spec[2])
    dims = list(spec[3]) if len(spec) > 3 else ([] if kind == "scalar" else list(values.shape))
    flat = values.reshape(-1)
    param = QnnParam(name, gen.QnnParamKind.SCALAR if kind == "scalar" else gen.QnnParamKind.TENSOR, dtype, dims)
    if dtype == F32:
        param.float_data = flat.astype(np.float32)
    else:
        param.int_data = flat.astype(np.int64)
    return param


class GraphBuilder:
    """Tensors, ops with params, one graph; serialized by payload_writer."""

    def __init__(self, fp16: bool = False) -> None:
        self.tensors: List[dict] = []
        self.ops: List[dict] = []
        self.inputs: List[int] = []
        self.outputs: List[int] = []
        self.fp16 = fp16

    def tensor(
        self,
        name: str,
        kind: int,
        dims: Sequence[int],
        dtype: int = F32,
        data: Optional[np.ndarray] = None,
        tid: Optional[int] = None,
        quant: Optional[dict] = None,
    ) -> int:
        """quant: QuantParams fields (encoding, bitwidth, scale, offset, axis, scales, ...)."""
        index = len(self.tensors)
        self.tensors.append(
            dict(
                id=index if tid is None else tid,
                name=name,
                kind=kind,
                dims=list(dims),
                dtype=dtype,
                data=data,
                quant=quant,
            )
        )
        if kind == gen.QnnTensorType.APP_WRITE:
            self.inputs.append(index)
        if kind == gen.QnnTensorType.APP_READ:
            self.outputs.append(index)
        return index

    def input(self, name: str, arr: np.ndarray) -> int:
        return self.tensor(name, gen.QnnTensorType.APP_WRITE, arr.shape, NP_TO_QNN[arr.dtype])

    def static(self, name: str, arr: np.ndarray) -> int:
        arr = np.ascontiguousarray(arr)
        return self.tensor(name, gen.QnnTensorType.STATIC, arr.shape, NP_TO_QNN[arr.dtype], data=arr)

    def output(self, name: str, dims: Sequence[int], dtype: int = F32) -> int:
        return self.tensor(name, gen.QnnTensorType.APP_READ, dims, dtype)

    def native(self, name: str, dims: Sequence[int], dtype: int = F32) -> int:
        return self.tensor(name, gen.QnnTensorType.NATIVE, dims, dtype)

    def op(self, op_type: str, inputs: List[int], outputs: List[int], **params: tuple) -> None:
        self.ops.append(
            dict(name=f"op{len(self.ops)}_{op_type}", type=op_type, inputs=inputs, outputs=outputs, params=params)
        )

    def graph(self) -> QnnGraph:
        """The recorded tensors and ops as the writer's QnnGraph (as recorded, even if malformed)."""
        tensors = [
            QnnTensor(
                t["id"], t["name"], t["kind"], t["dtype"], list(t["dims"]), quant=_quant(t.get("quant")), data=t["data"]
            )
            for t in self.tensors
        ]
        ops = [
            QnnOp(
                o["name"],
                o["type"],
                list(o["inputs"]),
                list(o["outputs"]),
                [_param(name, spec) for name, spec in o["params"].items()],
            )
            for o in self.ops
        ]
        return QnnGraph(GRAPH_NAME, tensors, ops, list(self.inputs), list(self.outputs), self.fp16)

    def payload(self) -> bytes:
        return serialize_payload([self.graph()])

    def blob(self, payload: Optional[bytes] = None, signature: Optional[int] = None) -> bytes:
        """The delegate blob of `payload` (default: this graph's); `signature` replaces the
        correct FNV-1a signature (a deliberately wrong one)."""
        payload = self.payload() if payload is None else payload
        blob = wrap_context_binary(payload)
        return blob if signature is None else with_signature(blob, payload, signature)


def with_signature(blob: bytes, payload: bytes, signature: int) -> bytes:
    """`blob` (a QnnContextBinary of `payload`) with its signature field set to `signature`."""
    correct = struct.pack("<Q", fnv1a64(payload))
    at = blob.find(correct)
    assert at >= 0 and blob.find(correct, at + 1) < 0, "signature bytes not found exactly once"
    return blob[:at] + struct.pack("<Q", signature & 0xFFFFFFFFFFFFFFFF) + blob[at + 8 :]


def conv_params(stride=(1, 1), pad=((0, 0), (0, 0)), dilation=(1, 1)) -> dict:
    return dict(stride=u32(stride), pad_amount=("tensor", U32, np.asarray(pad), [2, 2]), dilation=u32(dilation))


def torch_conv_nhwc(x, w_hwio, b, stride, pad, dilation, groups) -> np.ndarray:
    xt = torch.from_numpy(x).permute(0, 3, 1, 2)
    wt = torch.from_numpy(w_hwio).permute(3, 2, 0, 1)  # [Cout, Cin/g, KH, KW]
    xt = F.pad(xt, (pad[1][0], pad[1][1], pad[0][0], pad[0][1]))
    y = F.conv2d(xt, wt, torch.from_numpy(b), stride=stride, dilation=dilation, groups=groups)
    return y.permute(0, 2, 3, 1).numpy()
