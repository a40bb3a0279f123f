"""Importing the package prints nothing from known third-party noise, and hides nothing else."""

import logging
import os
import subprocess
import sys
from pathlib import Path

from backends.qualcomm._quiet_imports import silence_third_party_noise

_LOWER_AND_RUN = """
import torch
from backends.qualcomm import (
    QcomChipset, generate_htp_compiler_spec, generate_qnn_executorch_compiler_spec, to_edge_transform_and_lower_to_qnn,
)
from executorch.runtime import Runtime
specs = generate_qnn_executorch_compiler_spec(QcomChipset.SM8650, generate_htp_compiler_spec(use_fp16=True))
edge = to_edge_transform_and_lower_to_qnn(torch.nn.ReLU(), (torch.randn(1, 4),), specs)
program = Runtime.get().load_program(edge.to_executorch().buffer)  # must outlive its methods
method = program.load_method("forward")
print("out", method.execute([torch.ones(1, 4)])[0].sum().item())
"""


def test_import_lower_and_run_print_no_third_party_noise(tmp_path):
    # A user's script file, run from its own folder.
    script = tmp_path / "lower_and_run.py"
    script.write_text(_LOWER_AND_RUN)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[4]))
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "out 4.0"
    for noise in ("Failed to load", "_C_mxfp8", "Enum subclass", "LeafSpec"):
        assert noise not in proc.stderr, proc.stderr


def _passes(logger_name: str, message: str) -> bool:
    record = logging.LogRecord(logger_name, logging.WARNING, __file__, 1, message, None, None)
    return all(f.filter(record) for f in logging.getLogger(logger_name).filters)


def test_only_the_known_messages_are_dropped():
    silence_third_party_noise()
    assert not _passes("torchao", "Failed to load /v/site-packages/torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so: x")
    assert not _passes("torchao", "Failed to load /v/site-packages/torchao/_C_cutlass_90a.abi3.so: x")
    # Any other torchao library that fails to load is a real problem and still shows.
    assert _passes("torchao", "Failed to load /v/site-packages/torchao/_C.abi3.so: undefined symbol")
    assert _passes("torchao", "Skipping import of cpp extensions due to incompatible torch version.")
    assert not _passes(
        "torch.utils._pytree",
        "<enum 'K'> is an Enum subclass and is now natively supported by torch.compile as an opaque value type.",
    )
    assert _passes("torch.utils._pytree", "some other pytree warning")
