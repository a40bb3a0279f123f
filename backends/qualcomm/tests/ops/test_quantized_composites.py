"""Quantized forms of ops that torch.export keeps whole and QnnQuantizer does not annotate by
name: composites rewritten before annotation (quantizer/decompose_composites.py: einsum, glu,
divide, linalg_vector_norm, special_expm1, narrow, swapaxes, unflatten, concat, expand_as,
min.other, mul.Scalar, in-place leaky_relu_ / threshold_), clamp, and argmax / argmin / max.dim
whose index outputs stay unquantized. Each is quantized (the QDQ module holds no op of the
composite and every float op output is quantized), lowered to one delegate with no CPU op,
and run: values within the PT2E bounds of the QDQ reference, indices equal to it, on the host
engine and on QNN (when its library loads: QNN's outputs vs the host engine's)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from backends.qualcomm import QuantDtype
from backends.qualcomm.tests.helpers.quant_tester import QuantTester
from backends.qualcomm.tests.helpers.runtime import QNN_LOADED, assert_qnn_matches_host, one_delegate_blob
from backends.qualcomm.tests.helpers.tester import randn

_aten = torch.ops.aten
Q_AND_DQ = ("quantize_per_tensor", "dequantize_per_tensor", "quantize_per_channel", "dequantize_per_channel")


class Lambda(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def _leaky_relu_inplace(x):
    return torch.nn.functional.leaky_relu(x * 1.0, 0.2, inplace=True)


# name: (module, input shapes, the composite op that must not remain in the QDQ module)
COMPOSITES = {
    "einsum_bilinear": (lambda a, b, c: torch.einsum("bn,anm,bm->ba", a, b, c), [(3, 4), (2, 4, 5), (3, 5)], "einsum"),
    "einsum_outer": (lambda a, b: torch.einsum("i,j->ij", a, b), [(5,), (4,)], "einsum"),
    "glu": (lambda x: torch.nn.functional.glu(x, -1), [(2, 4, 6)], "glu"),
    "divide": (lambda x, y: torch.divide(x, y.abs() + 0.5), [(2, 3, 4), (2, 3, 4)], "divide"),
    "mul_scalar": (lambda x: _aten.mul.Scalar(x, 3.14), [(2, 5, 3)], "mul.Scalar"),
    "vector_norm": (lambda x: torch.linalg.vector_norm(x, 2, dim=-1, keepdim=True), [(3, 8)], "linalg_vector_norm"),
    "expm1": (lambda x: torch.special.expm1(x), [(3, 4, 5)], "special_expm1"),
    "narrow": (lambda x: torch.narrow(x, 1, 2, 5), [(1, 12, 4)], "narrow"),
    "swapaxes": (lambda x: torch.swapaxes(x, 0, 2) * 2.0, [(2, 3, 4)], "swapaxes"),
    "unflatten": (lambda x: torch.unflatten(x, 1, (2, 3)) + 1.0, [(2, 6, 4)], "unflatten"),
    "concat": (lambda x, y: torch.concat([x, y * 2.0], 1), [(2, 3), (2, 4)], "concat"),
    "expand_as": (lambda x, y: x.expand_as(y) * y, [(3, 1), (3, 4)], "expand_as"),
    "min_full": (lambda x: torch.min(x, torch.full((1, 2, 3, 4), 0.5)), [(1, 2, 3, 4)], "min.other"),
    "clamp_max": (lambda x: torch.clamp(x, max=0.2), [(4, 5, 3)], None),
    "leaky_relu_": (_leaky_relu_inplace, [(2, 3, 4)], "leaky_relu_"),
    "threshold_": (
        lambda x: torch.nn.functional.threshold(x * 1.0, 0.1, 20.0, inplace=True),
        [(2, 3, 4)],
        "threshold_",
    ),
}


def _inputs(shapes) -> tuple:
    return tuple(randn(*s, seed=i) for i, s in enumerate(shapes))


def _check_quantized(tester: QuantTester, composite) -> None:
    """No op of the composite left, every float op output quantized (its one user a Quantize)."""
    nodes = [n for n in tester.module.graph.nodes if n.op == "call_function"]
    names = [str(n.target) for n in nodes]
    if composite is not None:
        assert not any(name.endswith(composite) or f".{composite}." in name for name in names), names
    for n in nodes:
        val = n.meta.get("val")
        if any(q in str(n.target) for q in Q_AND_DQ) or not isinstance(val, torch.Tensor):
            continue
        if val.is_floating_point():
            assert any("quantize_per" in str(u.target) for u in n.users), f"{n.name} ({n.target}) is not quantized"


@pytest.mark.parametrize("name", list(COMPOSITES))
def test_composite_is_quantized_and_delegated(qnn_binary, name):
    fn, shapes, composite = COMPOSITES[name]
    inputs = _inputs(shapes)
    tester = QuantTester(Lambda(fn), inputs, QuantDtype.use_8a8w)
    _check_quantized(tester, composite)
    tester.lower().check_fully_delegated().to_executorch().run().compare_steps()
    if QNN_LOADED:
        blob = one_delegate_blob(tester)
        assert_qnn_matches_host(blob, inputs, tester.float_module, float_rel=1e-3, max_steps=1, min_exact=0.9)


def _as_tuple(fn):
    return lambda x: tuple(fn(x))  # torch.return_types -> a plain (values, indices)


INDEX_OPS = {
    "argmax": (lambda x: torch.argmax(x, 1, keepdim=True), (4, 3, 4, 4)),
    "argmax_flat": (lambda x: torch.argmax(x), (8, 5)),
    "argmin": (lambda x: torch.argmin(x, 0), (8, 5)),
    "max_dim": (_as_tuple(lambda x: torch.max(x, 1)), (4, 6)),
    "min_dim": (_as_tuple(lambda x: torch.min(x, -1, keepdim=True)), (2, 3, 5)),
}


def _distinct_codes(shape) -> torch.Tensor:
    """Values spaced more than one 8-bit step apart (at most 255 of them over [-2, 2)): no two
    share a code, so the index of the extreme is the same whichever of equal codes an engine
    would pick (QNN's Argmax does not always pick the first)."""
    n = int(np.prod(shape))
    assert n <= 255
    torch.manual_seed(5)
    return (torch.randperm(n).float() / n * 4 - 2).reshape(shape)


@pytest.mark.parametrize("quant_dtype", [QuantDtype.use_8a8w, QuantDtype.use_16a8w], ids=["8a8w", "16a8w"])
@pytest.mark.parametrize("name", list(INDEX_OPS))
def test_index_outputs_of_a_quantized_input(qnn_binary, name, quant_dtype):
    """The input is quantized (the QDQ module holds a Quantize), indices are not: the delegate
    takes them on the codes, equal to the QDQ reference's; max.dim's values share the input's
    encoding (equal to the reference)."""
    fn, shape = INDEX_OPS[name]
    x = (_distinct_codes(shape),)
    tester = QuantTester(Lambda(fn), x, quant_dtype)
    targets = [str(n.target) for n in tester.module.graph.nodes]
    assert any("quantize_per_tensor" in t for t in targets), targets
    tester.lower().check_fully_delegated().to_executorch().run()
    for i, (got, want) in enumerate(zip(tester.outputs, tester.reference_outputs())):
        if want.dtype == np.int64:
            np.testing.assert_array_equal(got, want, err_msg=f"output {i}")
        else:
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-6, err_msg=f"output {i}")
    if QNN_LOADED:
        assert_qnn_matches_host(one_delegate_blob(tester), x, None, float_rel=0.0, max_steps=0)
