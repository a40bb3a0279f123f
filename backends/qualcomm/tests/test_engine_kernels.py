"""Engine kernels through `_qnn_delegate.run_payload`, on tiny hand-built payloads.

The payloads are written with a minimal local builder (not the AOT writer) so
these tests check the C++ engine against numpy/torch on their own.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import flatbuffers
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from backends.qualcomm import _qnn_delegate as qd
from backends.qualcomm.serialization import qnn_payload_generated as gen

F32, I32, I64, U32, BOOL = gen.QnnDataType.FLOAT_32, gen.QnnDataType.INT_32, gen.QnnDataType.INT_64, gen.QnnDataType.UINT_32, gen.QnnDataType.BOOL_8
NP_TO_QNN = {np.dtype("float32"): F32, np.dtype("int32"): I32, np.dtype("int64"): I64}
OPS_MD = Path(__file__).resolve().parents[1] / "serialization" / "schema" / "OPS.md"


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


class GraphBuilder:
    """Tiny payload builder: tensors, ops with params, one graph."""

    def __init__(self, fp16: bool = False) -> None:
        self.tensors: List[dict] = []
        self.ops: List[dict] = []
        self.inputs: List[int] = []
        self.outputs: List[int] = []
        self.fp16 = fp16

    def tensor(self, name: str, kind: int, dims: Sequence[int], dtype: int = F32,
               data: Optional[np.ndarray] = None, tid: Optional[int] = None,
               quant: Optional[dict] = None) -> int:
        """quant: QuantizeParams fields (encoding, bitwidth, scale, offset, axis, scales, ...)."""
        index = len(self.tensors)
        self.tensors.append(dict(id=index if tid is None else tid, name=name, kind=kind,
                                 dims=list(dims), dtype=dtype, data=data, quant=quant))
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

    def op(self, op_type: str, inputs: List[int], outputs: List[int], **params) -> None:
        self.ops.append(dict(name=f"op{len(self.ops)}_{op_type}", type=op_type, inputs=inputs,
                             outputs=outputs, params=params))

    # -- serialization -----------------------------------------------------------------
    @staticmethod
    def _param(b: flatbuffers.Builder, name: str, spec) -> int:
        """spec: ('scalar'|'tensor', dtype, values[, dims])."""
        kind, dtype, values = spec[0], spec[1], np.asarray(spec[2])
        dims = spec[3] if len(spec) > 3 else ([] if kind == "scalar" else list(values.shape))
        flat = values.reshape(-1)
        int_vec = float_vec = None
        if dtype == F32:
            float_vec = b.CreateNumpyVector(flat.astype("<f4"))
        else:
            int_vec = b.CreateNumpyVector(flat.astype("<i8"))
        dims_vec = b.CreateNumpyVector(np.asarray(dims, dtype="<u4"))
        name_off = b.CreateString(name)
        gen.ParamStart(b)
        gen.ParamAddName(b, name_off)
        gen.ParamAddKind(b, gen.QnnParamKind.SCALAR if kind == "scalar" else gen.QnnParamKind.TENSOR)
        gen.ParamAddDataType(b, dtype)
        gen.ParamAddDims(b, dims_vec)
        if int_vec is not None:
            gen.ParamAddIntData(b, int_vec)
        if float_vec is not None:
            gen.ParamAddFloatData(b, float_vec)
        return gen.ParamEnd(b)

    @staticmethod
    def _aligned_bytes(b: flatbuffers.Builder, data: bytes) -> int:
        b.StartVector(1, len(data), 64)
        b.head -= len(data)
        b.Bytes[b.head:b.head + len(data)] = data
        return b.EndVector(len(data))

    @staticmethod
    def _offsets(b: flatbuffers.Builder, offsets: List[int]) -> int:
        b.StartVector(4, len(offsets), 4)
        for off in reversed(offsets):
            b.PrependUOffsetTRelative(off)
        return b.EndVector(len(offsets))

    @staticmethod
    def _quant(b: flatbuffers.Builder, q: dict) -> int:
        vectors = {key: b.CreateNumpyVector(np.asarray(q[key], dtype=dt))
                   for key, dt in (("scales", "<f4"), ("offsets", "<i4"), ("block_scales", "u1"))
                   if q.get(key) is not None}
        gen.QuantizeParamsStart(b)
        gen.QuantizeParamsAddEncoding(b, q["encoding"])
        gen.QuantizeParamsAddBitwidth(b, q.get("bitwidth", 8))
        gen.QuantizeParamsAddScale(b, q.get("scale", 0.0))
        gen.QuantizeParamsAddOffset(b, q.get("offset", 0))
        gen.QuantizeParamsAddAxis(b, q.get("axis", -1))
        gen.QuantizeParamsAddBlockAxis(b, q.get("block_axis", -1))
        gen.QuantizeParamsAddBlockSize(b, q.get("block_size", 0))
        gen.QuantizeParamsAddBlockScaleBitwidth(b, q.get("block_scale_bitwidth", 4))
        for key, add in (("scales", gen.QuantizeParamsAddScales), ("offsets", gen.QuantizeParamsAddOffsets),
                         ("block_scales", gen.QuantizeParamsAddBlockScales)):
            if key in vectors:
                add(b, vectors[key])
        return gen.QuantizeParamsEnd(b)

    def _tensor(self, b: flatbuffers.Builder, t: dict) -> int:
        data = self._aligned_bytes(b, t["data"].tobytes()) if t["data"] is not None else None
        quant = self._quant(b, t["quant"]) if t.get("quant") else None
        dims = b.CreateNumpyVector(np.asarray(t["dims"], dtype="<u4"))
        name = b.CreateString(t["name"])
        gen.TensorStart(b)
        gen.TensorAddId(b, t["id"])
        gen.TensorAddName(b, name)
        gen.TensorAddType(b, t["kind"])
        gen.TensorAddDataType(b, t["dtype"])
        gen.TensorAddDims(b, dims)
        if data is not None:
            gen.TensorAddData(b, data)
        if quant is not None:
            gen.TensorAddQuant(b, quant)
        return gen.TensorEnd(b)

    def _op(self, b: flatbuffers.Builder, o: dict) -> int:
        params = self._offsets(b, [self._param(b, k, v) for k, v in o["params"].items()])
        ins = b.CreateNumpyVector(np.asarray(o["inputs"], dtype="<u4"))
        outs = b.CreateNumpyVector(np.asarray(o["outputs"], dtype="<u4"))
        name, typ = b.CreateString(o["name"]), b.CreateString(o["type"])
        gen.OpStart(b)
        gen.OpAddName(b, name)
        gen.OpAddType(b, typ)
        gen.OpAddInputs(b, ins)
        gen.OpAddOutputs(b, outs)
        gen.OpAddParams(b, params)
        return gen.OpEnd(b)

    def payload(self) -> bytes:
        b = flatbuffers.Builder(1024)
        tensors = self._offsets(b, [self._tensor(b, t) for t in self.tensors])
        ops = self._offsets(b, [self._op(b, o) for o in self.ops])
        ins = b.CreateNumpyVector(np.asarray(self.inputs, dtype="<u4"))
        outs = b.CreateNumpyVector(np.asarray(self.outputs, dtype="<u4"))
        name = b.CreateString("test_graph")
        gen.GraphStart(b)
        gen.GraphAddName(b, name)
        gen.GraphAddTensors(b, tensors)
        gen.GraphAddOps(b, ops)
        gen.GraphAddInputs(b, ins)
        gen.GraphAddOutputs(b, outs)
        gen.GraphAddFp16Precision(b, self.fp16)
        graph = gen.GraphEnd(b)
        graphs = self._offsets(b, [graph])
        gen.QnnPayloadStart(b)
        gen.QnnPayloadAddSchemaVersion(b, 1)
        gen.QnnPayloadAddGraphs(b, graphs)
        b.Finish(gen.QnnPayloadEnd(b), file_identifier=b"QNNP")
        return bytes(b.Output())

    def blob(self, payload: Optional[bytes] = None, signature: Optional[int] = None) -> bytes:
        payload = self.payload() if payload is None else payload
        b = flatbuffers.Builder(len(payload) + 256)
        vec = self._aligned_bytes(b, payload)
        gen.QnnContextBinaryStart(b)
        gen.QnnContextBinaryAddSchemaVersion(b, 1)
        gen.QnnContextBinaryAddSignature(b, fnv1a64(payload) if signature is None else signature)
        gen.QnnContextBinaryAddPayload(b, vec)
        b.Finish(gen.QnnContextBinaryEnd(b), file_identifier=b"QNNB")
        return bytes(b.Output())


def u32(values) -> tuple:
    return ("tensor", U32, np.asarray(values))


def scalar(dtype: int, value) -> tuple:
    return ("scalar", dtype, np.asarray([value]))


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def randn(*shape, seed: int = 0) -> np.ndarray:
    return rng(seed).standard_normal(shape).astype(np.float32)


def run_single(op_type: str, inputs: List[np.ndarray], out_shape, statics: Dict[int, np.ndarray] = {},
               out_dtype: int = F32, **params) -> np.ndarray:
    """One op; inputs[i] is a graph input unless i is in `statics` (then STATIC data)."""
    g = GraphBuilder()
    ids, feeds = [], []
    for i, arr in enumerate(inputs):
        if i in statics:
            ids.append(g.static(f"s{i}", statics[i]))
        else:
            ids.append(g.input(f"x{i}", arr))
            feeds.append(arr)
    out = g.output("y", out_shape, out_dtype)
    g.op(op_type, ids, [out], **params)
    return qd.run_payload(g.blob(), feeds)[0]


def conv_params(stride=(1, 1), pad=((0, 0), (0, 0)), dilation=(1, 1)) -> dict:
    return dict(stride=u32(stride), pad_amount=("tensor", U32, np.asarray(pad), [2, 2]),
                dilation=u32(dilation))


def torch_conv_nhwc(x, w_hwio, b, stride, pad, dilation, groups) -> np.ndarray:
    xt = torch.from_numpy(x).permute(0, 3, 1, 2)
    wt = torch.from_numpy(w_hwio).permute(3, 2, 0, 1)  # [Cout, Cin/g, KH, KW]
    xt = F.pad(xt, (pad[1][0], pad[1][1], pad[0][0], pad[0][1]))
    y = F.conv2d(xt, wt, torch.from_numpy(b), stride=stride, dilation=dilation, groups=groups)
    return y.permute(0, 2, 3, 1).numpy()


# ---- kernels ---------------------------------------------------------------------------
@pytest.mark.parametrize("k,stride,pad,dil,groups,cin,cout", [
    (1, 1, 0, 1, 1, 16, 40),    # pointwise GEMM path
    (3, 1, 1, 1, 1, 3, 8),      # im2col path
    (3, 2, 1, 1, 1, 5, 33),     # stride 2, Cout not a multiple of the panel width
    (3, 1, 2, 2, 1, 4, 6),      # dilation
    (3, 1, 1, 1, 2, 8, 12),     # groups
])
def test_conv2d(k, stride, pad, dil, groups, cin, cout):
    x = randn(2, 9, 11, cin, seed=1)
    w = randn(k, k, cin // groups, cout, seed=2)
    b = randn(cout, seed=3)
    pads = ((pad, pad), (pad, pad))
    ref = torch_conv_nhwc(x, w, b, (stride, stride), pads, (dil, dil), groups)
    y = run_single("Conv2d", [x, w, b], ref.shape, statics={1: w, 2: b},
                   group=scalar(U32, groups), **conv_params((stride, stride), pads, (dil, dil)))
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mult,stride", [(1, 1), (1, 2), (2, 1)])
def test_depthwise_conv2d(mult, stride):
    c = 24
    x = randn(1, 10, 10, c, seed=4)
    w = randn(3, 3, 1, c * mult, seed=5)
    b = randn(c * mult, seed=6)
    pads = ((1, 1), (1, 1))
    ref = torch_conv_nhwc(x, w, b, (stride, stride), pads, (1, 1), c)
    y = run_single("DepthWiseConv2d", [x, w, b], ref.shape, statics={1: w, 2: b},
                   **conv_params((stride, stride), pads))
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("keep_dims", [False, True])
def test_fully_connected(keep_dims):
    x, w, b = randn(2, 3, 20, seed=7), randn(37, 20, seed=8), randn(37, seed=9)
    ref = x @ w.T + b
    shape = ref.shape if keep_dims else (6, 37)
    y = run_single("FullyConnected", [x, w, b], shape, statics={1: w, 2: b},
                   keep_dims=scalar(BOOL, int(keep_dims)))
    np.testing.assert_allclose(y, ref.reshape(shape), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False)])
def test_matmul_broadcast(ta, tb):
    a, b = randn(2, 1, 5, 7, seed=10), randn(3, 7, 4, seed=11)
    ref = a @ b
    a_in = np.ascontiguousarray(np.swapaxes(a, -1, -2)) if ta else a
    b_in = np.ascontiguousarray(np.swapaxes(b, -1, -2)) if tb else b
    y = run_single("MatMul", [a_in, b_in], ref.shape, transpose_in0=scalar(BOOL, int(ta)),
                   transpose_in1=scalar(BOOL, int(tb)))
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


def test_softmax_middle_axis():
    x = randn(2, 5, 3, seed=12)
    y = run_single("Softmax", [x], x.shape, axis=scalar(U32, 1), beta=scalar(F32, 1.0))
    np.testing.assert_allclose(y, torch.softmax(torch.from_numpy(x), 1).numpy(), rtol=1e-5, atol=1e-6)


def test_layer_norm():
    x, gamma, beta = randn(2, 4, 16, seed=13), randn(16, seed=14), randn(16, seed=15)
    ref = F.layer_norm(torch.from_numpy(x), (16,), torch.from_numpy(gamma), torch.from_numpy(beta), 1e-5)
    y = run_single("LayerNorm", [x, gamma, beta], x.shape, statics={1: gamma, 2: beta},
                   epsilon=scalar(F32, 1e-5), axes=u32([2]))
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op,fn", [("ElementWiseAdd", np.add), ("ElementWiseSubtract", np.subtract),
                                   ("ElementWiseMultiply", np.multiply), ("ElementWiseDivide", np.divide)])
def test_binary_broadcast(op, fn):
    a, b = randn(2, 1, 4, 5, seed=16), randn(3, 1, 5, seed=17) + 3.0
    y = run_single(op, [a, b], (2, 3, 4, 5))
    np.testing.assert_allclose(y, fn(a, b), rtol=1e-6)


@pytest.mark.parametrize("count_pad", [False, True])
def test_pool_avg(count_pad):
    x = randn(1, 7, 8, 6, seed=18)
    xt = torch.from_numpy(x).permute(0, 3, 1, 2)
    ref = F.avg_pool2d(xt, 3, 2, 1, count_include_pad=count_pad).permute(0, 2, 3, 1).numpy()
    y = run_single("PoolAvg2d", [x], ref.shape, filter_size=u32([3, 3]), stride=u32([2, 2]),
                   pad_amount=("tensor", U32, np.asarray([[1, 1], [1, 1]]), [2, 2]),
                   count_pad_for_edges=scalar(BOOL, int(count_pad)))
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


def test_pool_max():
    x = randn(2, 9, 9, 5, seed=19)
    xt = torch.from_numpy(x).permute(0, 3, 1, 2)
    ref = F.max_pool2d(xt, 3, 2, 1).permute(0, 2, 3, 1).numpy()
    y = run_single("PoolMax2d", [x], ref.shape, filter_size=u32([3, 3]), stride=u32([2, 2]),
                   pad_amount=("tensor", U32, np.asarray([[1, 1], [1, 1]]), [2, 2]))
    np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_transpose(dtype):
    x = (randn(2, 3, 4, 5, seed=20) * 10).astype(dtype)
    y = run_single("Transpose", [x], (4, 2, 5, 3), out_dtype=NP_TO_QNN[np.dtype(dtype)], perm=u32([2, 0, 3, 1]))
    np.testing.assert_array_equal(y, x.transpose(2, 0, 3, 1))


def test_strided_slice():
    x = randn(4, 10, 6, seed=21)
    ranges = ("tensor", I32, np.asarray([[1, 4, 1], [0, 10, 3], [2, 5, 2]]), [3, 3])
    y = run_single("StridedSlice", [x], (3, 4, 2), ranges=ranges)
    np.testing.assert_array_equal(y, x[1:4, 0:10:3, 2:5:2])


@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64])
def test_gather(idx_dtype):
    table, idx = randn(5, 7, 3, seed=22), np.asarray([[4, 0], [2, 2]], dtype=idx_dtype)
    y = run_single("Gather", [table, idx], (5, 2, 2, 3), axis=scalar(I32, 1))
    np.testing.assert_array_equal(y, np.take(table, idx, axis=1))


def test_gather_index_out_of_range_is_an_error():
    table, idx = randn(5, 3, seed=23), np.asarray([1, 5], dtype=np.int64)
    with pytest.raises(ValueError, match="out of range"):
        run_single("Gather", [table, idx], (2, 3), axis=scalar(I32, 0))


def test_fp16_precision_rounds_outputs():
    x = randn(3, 17, seed=24)
    g = GraphBuilder(fp16=True)
    xi, yo = g.input("x", x), g.output("y", x.shape)
    g.op("Relu", [xi], [yo])
    y = qd.run_payload(g.blob(), [x])[0]
    np.testing.assert_array_equal(y, np.maximum(x.astype(np.float16).astype(np.float32), 0))


def test_every_qnn_op_type_has_a_kernel():
    text = OPS_MD.read_text()
    listed = re.search(r"QNN_OP_TYPES\s*=\s*(.*?)\n\n", text, re.S).group(1)
    op_types = {t.strip() for t in listed.replace("\n", " ").split(",") if t.strip()}
    assert op_types - set(qd.registered_op_types()) == set()


# ---- malformed payloads ------------------------------------------------------------------
def relu_graph() -> GraphBuilder:
    g = GraphBuilder()
    x, y = g.input("x", np.zeros((2, 3), np.float32)), g.output("y", (2, 3))
    g.op("Relu", [x], [y])
    return g


def test_valid_payload_verifies():
    qd.verify_payload(relu_graph().blob())


def test_truncated_blob():
    blob = relu_graph().blob()
    with pytest.raises(ValueError, match="verifier|truncated"):
        qd.verify_payload(blob[: len(blob) // 2])


def test_flipped_payload_byte_is_a_signature_mismatch():
    g = relu_graph()
    blob = bytearray(g.blob())
    payload = g.payload()
    pos = bytes(blob).find(payload)
    blob[pos + len(payload) // 2] ^= 0x40
    with pytest.raises(ValueError, match="signature mismatch"):
        qd.verify_payload(bytes(blob))


def test_tensor_id_out_of_range():
    g = relu_graph()
    g.ops[0]["inputs"] = [7]
    with pytest.raises(ValueError, match="tensor id 7, out of range"):
        qd.verify_payload(g.blob())


def test_tensor_id_not_equal_to_index():
    g = relu_graph()
    g.tensors[1]["id"] = 5
    with pytest.raises(ValueError, match="ids must equal their index"):
        qd.verify_payload(g.blob())


def test_wrong_static_data_size():
    g = GraphBuilder()
    x = g.input("x", np.zeros((4,), np.float32))
    w = g.tensor("w_bad", gen.QnnTensorType.STATIC, [4], F32, data=np.zeros(3, np.float32))
    y = g.output("y", (4,))
    g.op("ElementWiseAdd", [x, w], [y])
    with pytest.raises(ValueError, match="STATIC tensor 'w_bad' has 12 data bytes, expected 16"):
        qd.verify_payload(g.blob())


def test_unknown_op_type():
    g = relu_graph()
    g.ops[0]["type"] = "FancyOp"
    with pytest.raises(ValueError, match="unknown op type 'FancyOp'"):
        qd.verify_payload(g.blob())


def test_output_dims_mismatch_names_the_tensor():
    g = GraphBuilder()
    x, y = g.input("x", np.zeros((2, 3), np.float32)), g.output("y_bad", (3, 2))
    g.op("Relu", [x], [y])
    with pytest.raises(ValueError, match="output tensor 'y_bad' has dims"):
        qd.verify_payload(g.blob())


def test_missing_param():
    g = GraphBuilder()
    x, y = g.input("x", np.zeros((2, 3), np.float32)), g.output("y", (2, 3))
    g.op("Softmax", [x], [y])
    with pytest.raises(ValueError, match="required param 'axis' is missing"):
        qd.verify_payload(g.blob())


def test_wrong_input_dtype_in_run_payload():
    with pytest.raises(ValueError, match="input 0 .*'x'"):
        qd.run_payload(relu_graph().blob(), [np.zeros((2, 3), np.int64)])


def test_fp16_input_is_rounded_without_touching_the_callers_buffer():
    x = randn(4, 9, seed=25) * 100
    keep = x.copy()
    g = GraphBuilder(fp16=True)
    xi, yo = g.input("x", x), g.output("y", x.shape)
    g.op("ReluMinMax", [xi], [yo], min_value=scalar(F32, -1e9), max_value=scalar(F32, 1e9))
    y = qd.run_payload(g.blob(), [x])[0]
    np.testing.assert_array_equal(x, keep)
    np.testing.assert_array_equal(y, x.astype(np.float16).astype(np.float32))


def test_runtime_option_errors():
    with pytest.raises(KeyError, match="unknown runtime option"):
        qd.set_runtime_option("qnn_runtime_no_such_key", 1)
    with pytest.raises(TypeError, match="qnn_runtime_heap_profiling_path"):
        qd.set_runtime_option("qnn_runtime_heap_profiling_path", 3)
    with pytest.raises(KeyError):
        qd.get_runtime_option("qnn_runtime_no_such_key")
    assert qd.backend_name() == "QnnDelegate"
