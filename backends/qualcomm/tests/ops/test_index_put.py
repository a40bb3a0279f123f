"""index_put / index_put_ (QNN ScatterNd, op_index_put.py): KV-cache writes on a registered
buffer with the index on dim 0, 1 or 2 or two index tensors (upstream's IndexPut modes), general
index_put with several index tensors, None slices, broadcast values and accumulate True / False
(upstream's IndexPutSuite), fp16 against eager and 8a8w / 16a8w against the QDQ reference; a
static-cache attention block whose cache (mutable buffers) persists across calls as eager's
does; the host engine's ScatterNd add reduction; QNN against the host engine."""

from __future__ import annotations

import functools
from typing import List, Tuple

import numpy as np
import pytest
import torch

from backends.qualcomm import QuantDtype
from backends.qualcomm import _qnn_delegate as qd
from backends.qualcomm.tests.helpers.payload_builder import NP_TO_QNN, U32, GraphBuilder, scalar
from backends.qualcomm.tests.helpers.payload_builder import randn as np_randn
from backends.qualcomm.tests.helpers.quant_tester import QuantTester
from backends.qualcomm.tests.helpers.runtime import assert_engines_match_reference
from backends.qualcomm.tests.helpers.tester import QnnTester, randn

A8W8, A16W8 = QuantDtype.use_8a8w, QuantDtype.use_16a8w
_index_put = torch.ops.aten.index_put.default  # takes None entries (torch.index_put does not)


def _idx(*values: int, dtype: torch.dtype = torch.int32) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


# ---- upstream's KV-cache modes: index_put_ on a registered buffer ----------------------------
class KvCacheWrite(torch.nn.Module):
    """upstream's IndexPut (its cache [2, 1024, 12, 64] made [2, 8, 4, 4]): `index_put_` on the
    buffer with the positions on dim 0 (mode 0), 1, 2, two index tensors (3), two after a None (4)
    or around one (5)."""

    def __init__(self, mode: int):
        super().__init__()
        self.mode = mode
        self.register_buffer("k_cache", torch.zeros(2, 8, 4, 4), persistent=True)

    def forward(self, pos: torch.Tensor, pos2: torch.Tensor, k_val: torch.Tensor) -> torch.Tensor:
        indices = {
            0: [pos],
            1: [None, pos],
            2: [None, None, pos],
            3: [pos, pos2],
            4: [None, pos, pos2],
            5: [pos, None, pos2],
        }[self.mode]
        return torch.ops.aten.index_put_(self.k_cache, indices, k_val) + 0


KV_CASES = [  # (mode, pos, pos2, value shape): upstream's shapes scaled to the small cache
    (0, (0,), (0,), (1, 1, 4, 4)),
    (0, (0,), (0,), (1, 4)),
    (0, (0, 1), (0,), (2, 1, 4, 4)),
    (1, (2,), (0,), (1, 1, 4, 4)),
    (1, (2, 3), (0,), (1, 2, 4, 4)),
    (1, (2, 3), (0,), (1, 4)),
    (2, (2,), (0,), (1, 1, 1, 4)),
    (2, (0, 1), (0,), (1, 1, 2, 4)),
    (2, (2, 3), (0,), (1, 4)),
    (3, (0, 1), (2, 3), (2, 4, 4)),
    (3, (0, 1), (2, 3), (1, 4)),
    (4, (0, 1), (2, 3), (2, 4)),
    (5, (0, 1), (2, 3), (4,)),
    (5, (0, 1), (2, 3), (1,)),
]


@pytest.mark.parametrize("mode, pos, pos2, shape", KV_CASES)
def test_kv_cache_write_modes_fp16(mode, pos, pos2, shape):
    inputs = (_idx(*pos), _idx(*pos2), randn(*shape, seed=mode))
    tester = QnnTester(KvCacheWrite(mode), inputs).lower().check_fully_delegated().check_count(1)
    assert tester.payload().op_types().get("ScatterNd") == 1
    tester.to_executorch().run().compare(rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("mode, pos, pos2, shape", [KV_CASES[4], KV_CASES[12]], ids=["dim1", "around_none"])
@pytest.mark.parametrize("quant_dtype", [A8W8, A16W8], ids=["8a8w", "16a8w"])
def test_kv_cache_write_modes_quantized(quant_dtype, mode, pos, pos2, shape):
    """The buffer write quantized (upstream's QDQ IndexPut): the cache, the values and the output
    share one encoding; measured 100% exact against the QDQ reference."""
    inputs = (_idx(*pos), _idx(*pos2), randn(*shape, seed=mode))
    tester = QuantTester(KvCacheWrite(mode), inputs, quant_dtype).run_and_compare_steps()
    assert len(tester.delegate_blobs()) == 1 and all(s.max_diff == 0 for s in tester.stats), tester.stats


# ---- upstream's IndexPutSuite, as one module per accumulate flag ----------------------------
def _suite_cases() -> List[Tuple[torch.Tensor, Tuple[torch.Tensor, ...], torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    rand = lambda *shape: torch.rand(*shape, generator=g)  # noqa: E731
    t = torch.tensor
    return [
        (rand(5, 2) * 100, (t([0, 2]),), t([10.0, 20.0])),
        (rand(5), (t([0, 2]),), t([10.0, 20.0])),
        (rand(5, 2), (t([0, 2]), t([1, 1])), t([10.0, 20.0])),
        (rand(5, 3, 2), (t([0, 2]), t([1, 1]), t([0, 1])), t([10.0, 20.0])),
        (rand(5, 2), (t([2]),), t([10.0])),
        (rand(5, 3), (t([0, 2, 4]),), t([10.0, 20.0, 30.0])),
        (rand(5), (t([1, 1, 3, 3]),), t([10.0, 20.0, 30.0, 40.0])),  # duplicates
        (rand(5, 3), (t([0, 2, 4]),), t([42.0])),  # broadcast values
        (rand(3, 4), (t([0, 1]), t([1, 2])), t([10.0, 20.0])),
        (rand(3, 2, 2), (t([0, 1]),), t([[1.0, 2.0], [3.0, 4.0]])),
        (rand(4, 2), (t([1, 1, 1]),), t([5.0])),  # duplicates, one value
        (rand(4, 3), (t([0, 1, 2]), t([1, 0, 2])), t([10.0, 20.0, 30.0])),
        (rand(3, 2), (t([1, 1, 2]), t([0, 0, 1])), t([5.0, 10.0, 15.0])),
        (rand(3, 2), (t([1]), t([0, 0, 1])), t([5.0, 10.0, 15.0])),  # broadcast indices
    ]


class IndexPutSuite(torch.nn.Module):
    """Every case of upstream's IndexPutSuite in one graph: index_put on an input (even cases)
    and index_put_ on its clone (odd), flat inputs (x, index tensors..., values) per case."""

    def __init__(self, arity: List[int], accumulate: bool):
        super().__init__()
        self.arity, self.accumulate = arity, accumulate

    def forward(self, *flat: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        outs, at = [], 0
        for case, n in enumerate(self.arity):
            x, indices, values = flat[at], flat[at + 1 : at + 1 + n], flat[at + 1 + n]
            at += n + 2
            if case % 2:
                result = x.clone()
                result.index_put_(indices, values, self.accumulate)
                outs.append(result)
            else:
                outs.append(torch.index_put(x, indices, values, self.accumulate))
        return tuple(outs)


def _suite() -> Tuple[List[int], Tuple[torch.Tensor, ...]]:
    arity, flat = [], []
    for x, indices, values in _suite_cases():
        arity.append(len(indices))
        flat += [x, *indices, values]
    return arity, tuple(flat)


@pytest.mark.parametrize("accumulate", [False, True], ids=["assign", "accumulate"])
def test_index_put_suite_fp16(accumulate):
    """Duplicate positions: the last write wins (as torch's CPU kernel) or all are summed."""
    arity, inputs = _suite()
    tester = QnnTester(IndexPutSuite(arity, accumulate), inputs).lower().check_fully_delegated().check_count(1)
    assert tester.payload().op_types().get("ScatterNd") == len(arity)
    tester.to_executorch().run().compare(rtol=1e-3, atol=1e-3)


# ---- the forms together: float and quantized --------------------------------------------------
class IndexPutForms(torch.nn.Module):
    """cache [2, 8, 4, 4], v [1, 2, 4, 4], pos [2] (< 4), i0 [2] (< 2), i1 [2] (< 4), x [5, 3],
    dup [4] (< 5, with duplicates), vals [4, 3]."""

    def __init__(self, accumulate: bool):
        super().__init__()
        self.accumulate = accumulate

    def forward(self, cache, v, pos, i0, i1, x, dup, vals):
        acc = self.accumulate
        return (
            _index_put(cache, [None, pos], v, acc),  # dim 1, values broadcast on dim 0
            _index_put(cache, [None, None, pos], v[:, :1, :2], acc),  # dim 2, broadcast
            _index_put(cache, [i0, i1], v[0, 0], acc),  # two adjacent index tensors
            _index_put(cache, [i0, None, i1], v[0, 0, :, 0], acc),  # around a None: B first
            _index_put(x, [dup], vals, acc),  # duplicate rows
            _index_put(x, [dup, i1[:1] - 1], vals[:, 0], acc),  # broadcast index tensors
        )


def _forms_inputs(index_dtype: torch.dtype = torch.int32) -> Tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(1)
    return (
        torch.randn(2, 8, 4, 4, generator=g),
        torch.randn(1, 2, 4, 4, generator=g),
        _idx(2, 3, dtype=index_dtype),
        _idx(0, 1, dtype=index_dtype),
        _idx(3, 1, dtype=index_dtype),
        torch.randn(5, 3, generator=g),
        _idx(1, 4, 1, 0, dtype=index_dtype),
        torch.randn(4, 3, generator=g),
    )


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("accumulate", [False, True], ids=["assign", "accumulate"])
def test_index_put_forms_fp16(accumulate, index_dtype):
    tester = QnnTester(IndexPutForms(accumulate), _forms_inputs(index_dtype)).lower()
    types = tester.check_one_delegate_ops({"ScatterNd": 6})
    # the two Concats of the two-index forms; the values' Transpose for B first
    assert types.get("Concat") == 3 and types.get("Transpose", 0) >= 1, types
    tester.to_executorch().run().compare(rtol=1e-3, atol=1e-3)


@functools.lru_cache(maxsize=None)
def _quantized(quant_dtype: QuantDtype, accumulate: bool) -> QuantTester:
    return QuantTester(IndexPutForms(accumulate), _forms_inputs(), quant_dtype)


@pytest.mark.parametrize("accumulate", [False, True], ids=["assign", "accumulate"])
@pytest.mark.parametrize("quant_dtype", [A8W8, A16W8], ids=["8a8w", "16a8w"])
def test_index_put_forms_quantized(quant_dtype, accumulate):
    _quantized(quant_dtype, accumulate).run_and_compare_steps()


# ---- the host engine's ScatterNd --------------------------------------------------------------
def _scatter_add_graph(data, idx, updates) -> GraphBuilder:
    g = GraphBuilder()
    ids = [g.input("data", data), g.input("idx", idx), g.input("upd", updates)]
    out = g.output("y", data.shape, NP_TO_QNN[data.dtype])
    g.op("ScatterNd", ids, [out], reduction=scalar(U32, 1))
    return g


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
def test_engine_scatter_nd_add_sums_duplicates(dtype):
    data = (np_randn(4, 3, seed=11) * 10).astype(dtype)
    updates = (np_randn(3, 3, seed=12) * 10).astype(dtype)
    idx = np.asarray([[2], [0], [2]], np.int64)
    expected = data.copy()
    np.add.at(expected, idx[:, 0], updates)
    y = qd.run_payload(_scatter_add_graph(data, idx, updates).blob(), [data, idx, updates])[0]
    np.testing.assert_allclose(y, expected, rtol=1e-6)


def test_engine_scatter_nd_mul_multiplies_duplicates():
    data, updates = np_randn(4, 3, seed=13), np_randn(3, 3, seed=14)
    idx = np.asarray([[1], [3], [1]], np.int32)
    g = GraphBuilder()
    ids = [g.input("data", data), g.input("idx", idx), g.input("upd", updates)]
    g.op("ScatterNd", ids, [g.output("y", data.shape)], reduction=scalar(U32, 2))
    expected = data.copy()
    np.multiply.at(expected, idx[:, 0], updates)
    np.testing.assert_allclose(qd.run_payload(g.blob(), [data, idx, updates])[0], expected, rtol=1e-6)


def test_engine_scatter_nd_refuses_other_reductions():
    data, updates, idx = np_randn(4, 3, seed=1), np_randn(1, 3, seed=2), np.asarray([[1]], np.int64)
    g = GraphBuilder()
    ids = [g.input("data", data), g.input("idx", idx), g.input("upd", updates)]
    g.op("ScatterNd", ids, [g.output("y", data.shape)], reduction=scalar(U32, 3))
    with pytest.raises(Exception, match="reduction 3 is not supported"):
        qd.run_payload(g.blob(), [data, idx, updates])


# ---- real QNN ---------------------------------------------------------------------------------
@pytest.mark.parametrize("accumulate", [False, True], ids=["assign", "accumulate"])
@pytest.mark.parametrize("quant_dtype", [None, A8W8, A16W8], ids=["fp16", "8a8w", "16a8w"])
def test_index_put_forms_on_real_qnn(real_qnn, quant_dtype, accumulate):
    """QNN's outputs against the host engine's of the same blob (int64 indices: QNN runs them as
    INT_32) and, fp16, against eager: duplicates summed with accumulate, and the last write wins
    without it, on both engines."""
    inputs = _forms_inputs(torch.int64)
    if quant_dtype is None:
        tester = QnnTester(IndexPutForms(accumulate), inputs).lower()
    else:
        tester = _quantized(quant_dtype, accumulate).lower()
        inputs = tester.inputs
    assert_engines_match_reference(tester, inputs, None if quant_dtype is None else 1)
