"""Payload verification at init, on hand-built payloads: a valid payload verifies; a truncated
blob, a flipped byte (signature mismatch), tensor ids out of range or not equal to their index,
a wrong static data size, an unknown op type, mismatched output dims, a missing param, a wrong
input dtype are clear errors naming what is wrong; fp16 inputs are rounded without touching the
caller's buffer; runtime option errors."""

from __future__ import annotations

import numpy as np
import pytest

from backends.qualcomm import _qnn_delegate as qd
from backends.qualcomm.serialization import qnn_payload_generated as gen
from backends.qualcomm.serialization.fnv import fnv1a64
from backends.qualcomm.serialization.payload_reader import describe_payload
from backends.qualcomm.tests.helpers.payload_builder import F32, GraphBuilder, randn, scalar


# ---- malformed payloads ------------------------------------------------------------------
def relu_graph() -> GraphBuilder:
    g = GraphBuilder()
    x, y = g.input("x", np.zeros((2, 3), np.float32)), g.output("y", (2, 3))
    g.op("Relu", [x], [y])
    return g


def test_valid_payload_verifies():
    g = relu_graph()
    payload, blob = g.payload(), g.blob()
    assert qd.verify_payload(blob) is None
    # The Python writer's signature is the C++ loader's FNV-1a of the same bytes...
    assert qd.fnv1a64(payload) == fnv1a64(payload)
    graph = describe_payload(blob)[0]
    assert (graph.name, [(op.type, op.inputs, op.outputs) for op in graph.ops]) == (
        "test_graph",
        [("Relu", ["x"], ["y"])],
    )
    assert (graph.inputs, graph.outputs) == (["x"], ["y"])
    x = np.asarray([[-1.5, 0.0, 2.0], [3.0, -4.0, 5.25]], np.float32)
    np.testing.assert_array_equal(qd.run_payload(blob, [x])[0], np.maximum(x, 0))
    # ...and the only thing that differs from a blob with one signature bit flipped.
    with pytest.raises(ValueError, match="signature mismatch"):
        qd.verify_payload(g.blob(signature=fnv1a64(payload) ^ 1))


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
