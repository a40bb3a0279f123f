"""Online prepare of the static LLM export (`export_static_llm(online_prepare=True)`, the export
command's --online-prepare): the .pte carries no QNN context binary and QNN builds the prefill and
decode graphs, weight-shared, when the program loads. Asserted on a tiny 2-layer Llama: no binary in
the context, a smaller file, and generation on QNN (x86 emulation) equal to the program with a
stored context binary (tokens and every logit); on the host engine equal to the same payload's."""

from __future__ import annotations

import numpy as np
import pytest

from backends.qualcomm.llm import generate
from backends.qualcomm.tests.helpers.tiny_llm import PROMPT, export_tiny

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("recipe", ["fp16", "16a4w_block"])
def test_online_prepare_program_has_no_binary_and_runs_on_the_host_engine(recipe, tmp_path_factory):
    _, stored = export_tiny("llama", recipe, tmp_path_factory, qnn_binaries=False)
    _, online = export_tiny("llama", recipe, tmp_path_factory, qnn_binaries=False, online_prepare=True)
    assert len(online.contexts) == 1 and online.contexts[0].qnn_binary_bytes == 0
    want = generate(stored.path, PROMPT, 4, engine="host", return_logits=True)
    got = generate(online.path, PROMPT, 4, engine="host", return_logits=True)
    assert got.tokens == want.tokens
    assert np.array_equal(np.stack(got.logits), np.stack(want.logits))


@pytest.mark.qnn
@pytest.mark.parametrize("recipe", ["fp16", "16a4w_block"])
def test_online_prepare_generates_as_the_stored_context_binary_on_qnn(recipe, tmp_path_factory, real_qnn):
    """QNN builds both methods' graphs in one context at load; 3 new tokens equal, logits equal."""
    _, stored = export_tiny("llama", recipe, tmp_path_factory)
    _, online = export_tiny("llama", recipe, tmp_path_factory, online_prepare=True)
    assert stored.contexts[0].qnn_binary_bytes > 0 and online.contexts[0].qnn_binary_bytes == 0
    assert online.path.stat().st_size < stored.path.stat().st_size
    want = generate(stored.path, PROMPT, 3, engine="qnn", return_logits=True)
    got = generate(online.path, PROMPT, 3, engine="qnn", return_logits=True)
    print(f"{recipe}: .pte {stored.path.stat().st_size} B stored, {online.path.stat().st_size} B online")
    assert got.tokens == want.tokens
    assert np.array_equal(np.stack(got.logits), np.stack(want.logits))
