"""The 8-bit KV cache as uint8 program inputs and outputs (export_static_llm's uint8_cache_io,
llm/cache_codes.py): the caches and new entries of both methods are uint8 codes with no
conversion in the delegate, and the logits equal those of the same recipe with float32 cache I/O
(same encodings, same codes) on the host engine and on QNN; both runners drive it."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from backends.qualcomm.llm import ModuleProgram, PteProgram, teacher_forced
from backends.qualcomm.llm.cache_codes import CacheCodesError, cache_codes_io
from backends.qualcomm.tests.helpers.tiny_llm import CALIBRATION, PROMPT, export_tiny

pytest.importorskip("transformers")

IDS = PROMPT + CALIBRATION[0][:8]  # 11 prompt tokens (2 prefill chunks), then 8 decode calls
UINT8, FLOAT = 0, 6  # ExecuTorch ScalarType codes


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    """{uint8 I/O: ExportResult} of one tiny Llama in 16a4w_block + 8-bit KV, both ways."""
    exports = {io: export_tiny("llama", "16a4w_block", tmp_path_factory, uint8_cache_io=io)[1] for io in (True, False)}
    yield exports
    gc.collect()


def _io_dtypes(path, method: str):
    program = PteProgram(path, "host")
    try:
        meta = program._program.metadata(method)
        inputs = [int(meta.input_tensor_meta(i).dtype()) for i in range(meta.num_inputs())]
        outputs = [int(meta.output_tensor_meta(i).dtype()) for i in range(meta.num_outputs())]
        sizes = [meta.input_tensor_meta(i).nbytes() for i in range(3, meta.num_inputs())]
    finally:
        program.close()
    return inputs, outputs, sizes


def test_cache_inputs_and_new_entries_are_uint8(programs):
    """Both methods: 4 cache inputs (2 layers x K / V) and 4 new-entry outputs uint8, a quarter
    of the float32 program's bytes; tokens / positions / mask / logits unchanged."""
    for method in ("prefill", "decode"):
        inputs, outputs, sizes = _io_dtypes(programs[True].path, method)
        f_inputs, f_outputs, f_sizes = _io_dtypes(programs[False].path, method)
        assert inputs[3:] == [UINT8] * 4 and outputs[1:] == [UINT8] * 4, (method, inputs, outputs)
        assert f_inputs[3:] == [FLOAT] * 4 and f_outputs[1:] == [FLOAT] * 4
        assert inputs[:3] == f_inputs[:3] and outputs[0] == f_outputs[0] == FLOAT
        assert [4 * s for s in sizes] == f_sizes


def test_host_engine_logits_equal_float_cache_io(programs):
    """Teacher-forced logits of the uint8-I/O program equal the float32-I/O program's bit for bit
    on the host engine, and the QDQ reference (the rewritten modules) equals its float version."""
    logits = {io: teacher_forced(PteProgram(r.path, "host"), IDS, prompt_len=len(PROMPT)) for io, r in programs.items()}
    np.testing.assert_array_equal(logits[True], logits[False])
    qdq = {
        io: teacher_forced(ModuleProgram(r.modules, r.shape), IDS, prompt_len=len(PROMPT)) for io, r in programs.items()
    }
    assert ModuleProgram(programs[True].modules, programs[True].shape).cache_dtype == np.uint8
    np.testing.assert_array_equal(qdq[True], qdq[False])


def test_qnn_logits_equal_float_cache_io(programs, real_qnn):
    """The same on QNN's HTP emulation (the UFIXED_POINT_8 graph inputs / outputs bound to the
    uint8 tensors as they are): measured bit-equal to the float32-I/O program, and within 2e-2 of
    the host engine (1.7e-2 measured on logits up to 2.8)."""
    results = {}
    for io, r in programs.items():
        program = PteProgram(r.path, "qnn")
        try:
            results[io] = teacher_forced(program, IDS, prompt_len=len(PROMPT))
        finally:
            program.close()
            gc.collect()
    np.testing.assert_array_equal(results[True], results[False])
    host = teacher_forced(PteProgram(programs[True].path, "host"), IDS, prompt_len=len(PROMPT))
    assert float(np.abs(results[True] - host).max()) < 5e-2 * max(1.0, float(np.abs(host).max()))


def test_rewrite_refuses_a_float_cache():
    """A converted graph whose cache is 16-bit (or float) is not rewritten: the error names the
    cache input."""
    from backends.qualcomm.llm.export import quantize_static_modules, static_modules
    from backends.qualcomm.tests.helpers.tiny_llm import AR_LEN, CONTEXT, hf_model

    modules = static_modules(hf_model("llama"), CONTEXT, AR_LEN)
    converted = quantize_static_modules(modules, "16a8w", CALIBRATION[:1], kv_bits=None)
    with pytest.raises(CacheCodesError, match="caches_0"):
        cache_codes_io(converted["decode"])
    traced = torch.fx.symbolic_trace(torch.nn.Identity())
    with pytest.raises(CacheCodesError, match="outputs"):
        cache_codes_io(traced)
