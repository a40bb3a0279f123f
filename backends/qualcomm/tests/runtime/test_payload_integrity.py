"""Altered payloads and wrong inputs give clear errors, not crashes: the FNV signature (native
equals the reference), a truncated payload, an altered delegate blob in a .pte, a
wrongly shaped input."""

from __future__ import annotations

import pytest
import torch

from backends.qualcomm import _qnn_delegate
from backends.qualcomm.tests.helpers.real_models import assert_clean_failure
from backends.qualcomm.utils import pte_tools


def _flip_byte_of_delegate_blob(pte: bytes, blob: bytes) -> bytes:
    """A copy of the .pte with one byte flipped in the middle of its delegate blob."""
    start = pte.find(blob)
    assert start >= 0, "delegate blob not found in the .pte"
    altered = bytearray(pte)
    altered[start + len(blob) // 2] ^= 0xFF
    return bytes(altered)


class TestQNNRobustness:
    def test_fnv_signature_native_matches_reference(self):
        from backends.qualcomm.serialization.fnv import fnv1a64, fnv1a64_python

        data = bytes(range(256)) * 64  # 16 KiB: takes the native path
        assert fnv1a64(data) == fnv1a64_python(data)
        assert fnv1a64_python(b"") == 0xCBF29CE484222325
        assert fnv1a64_python(b"a") == 0xAF63DC4C8601EC8C

    def test_truncated_payload_is_rejected(self, small_model):
        blob = small_model.delegate_blob
        _qnn_delegate.verify_payload(blob)
        for size in (0, 7, len(blob) // 2, len(blob) - 1):
            with pytest.raises(ValueError):
                _qnn_delegate.verify_payload(blob[:size])

    def test_altered_delegate_blob_in_pte_fails_to_load(self, small_model, tmp_path):
        from executorch.runtime import Runtime

        altered = tmp_path / "altered.pte"
        altered.write_bytes(_flip_byte_of_delegate_blob(small_model.pte_path.read_bytes(), small_model.delegate_blob))
        program = Runtime.get().load_program(altered)
        with pytest.raises(RuntimeError):
            program.load_method("forward")
        result = pte_tools.run_runner(
            altered, pte_tools.write_input_files(small_model.samples[:1], tmp_path / "in"), tmp_path / "out"
        )
        assert_clean_failure(result, "signature")

    def test_wrong_shaped_input_gives_an_error(self, small_model):
        from executorch.runtime import Runtime

        program = Runtime.get().load_program(small_model.pte_path)  # keep: its methods point into it
        method = program.load_method("forward")
        for bad in (torch.randn(1, 3, 8, 8), torch.randn(1, 3, 16, 16).to(torch.float64)):
            with pytest.raises(Exception) as info:
                method.execute([bad])
            assert not isinstance(info.value, (SystemExit, KeyboardInterrupt))
        good = method.execute([small_model.samples[0][0]])[0]
        assert torch.equal(good, small_model.runtime_outputs[0])
