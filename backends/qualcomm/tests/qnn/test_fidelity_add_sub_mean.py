"""Real QNN (HTP 2.51 emulation, SM8650): the host engine's quantized ElementWiseAdd /
ElementWiseSubtract against QNN's, 8-bit and 16-bit, random encodings, full, broadcast and
static-scalar operands. QNN runs the ops with uint8 / uint16 graph IO (no Quantize /
Dequantize next to the op: QNN folds such pairs into a float16 path); the host engine gets
the same codes through float IO, which it quantizes exactly."""

from __future__ import annotations

import numpy as np
import pytest

from backends.qualcomm.serialization.payload_writer import QnnHtpSection, wrap_context_binary
from backends.qualcomm.tests.helpers.htp_add_sub_mean import expected, graph, random_cases, run_host
from backends.qualcomm.tests.helpers.runtime import needs_qnn
from backends.qualcomm.utils.qnn_context import payload_of
from backends.qualcomm.utils.runtime_options import require_extension

pytestmark = [needs_qnn, pytest.mark.usefixtures("real_qnn")]  # real_qnn: conftest.py
SM8650 = 57


def run_qnn(cases, codes):
    ext = require_extension()
    blob = graph(cases, quantized_io=True)
    binary, graphs = ext.qnn_compile(blob, SM8650)
    section = QnnHtpSection(bytes(binary), SM8650, [(str(n), list(ids)) for n, ids in graphs])
    blob = wrap_context_binary(payload_of(blob), section)
    arrays, i = [], 0
    for case in cases:
        for spec in case.ins:
            if len(spec) == 2:
                arrays.append(
                    np.ascontiguousarray(codes[i], np.uint8 if case.bits == 8 else np.uint16).reshape(spec[0])
                )
                i += 1
    outs, _ = ext.run_payload_qnn(blob, arrays)
    return [np.asarray(o).astype(np.int64) for o in outs]


@pytest.mark.parametrize("bits", [8, 16])
def test_add_sub_bit_exact_with_qnn(bits):
    cases, codes = random_cases(np.random.default_rng(100 + bits), bits, 18, shape=(1, 16, 64))
    qnn = run_qnn(cases, codes)
    host = run_host(cases, list(codes))
    rest = list(codes)
    equal, total, worst = 0, 0, 0
    for case, q, h in zip(cases, qnn, host):
        q = q.reshape(h.shape)
        equal += int((q == h).sum())
        total += q.size
        worst = max(worst, int(np.abs(q - h).max()))
        # the numpy model is the host's arithmetic
        np.testing.assert_array_equal(h, expected(case, rest))
    assert worst <= 1
    assert equal / total >= 0.999, f"{equal / total:.5f} of elements equal to QNN's"


@pytest.mark.parametrize("bits", [8, 16])
def test_spatial_mean_bit_exact_with_qnn(bits):
    from backends.qualcomm.tests.helpers.htp_add_sub_mean import mean_cases, mean_graph, run_host_mean

    ext = require_extension()
    equal, total, worst = 0, 0, 0
    for x, axes, ei, eo in mean_cases(np.random.default_rng(200 + bits), bits, 4):
        blob = mean_graph(x.shape, axes, ei, eo, bits, True)
        binary, graphs = ext.qnn_compile(blob, SM8650)
        section = QnnHtpSection(bytes(binary), SM8650, [(str(n), list(ids)) for n, ids in graphs])
        (q,), _ = ext.run_payload_qnn(
            wrap_context_binary(payload_of(blob), section),
            [np.ascontiguousarray(x, np.uint8 if bits == 8 else np.uint16)],
        )
        q = np.asarray(q).astype(np.int64)
        h = run_host_mean(x, axes, ei, eo, bits).reshape(q.shape)
        equal += int((q == h).sum())
        total += q.size
        worst = max(worst, int(np.abs(q - h).max()))
    assert worst <= 1
    assert equal / total >= 0.999, f"{equal / total:.5f} of elements equal to QNN's"
