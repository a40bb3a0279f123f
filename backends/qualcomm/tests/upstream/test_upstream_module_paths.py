"""Upstream's module paths (backends/qualcomm/upstream_compat.py): in a fresh process, the first
import of backends.qualcomm being one of them, each resolves to our own object."""

import os
import subprocess
import sys
from pathlib import Path

_IMPORTS = """
from backends.qualcomm.partition.qnn_partitioner import QnnPartitioner
from backends.qualcomm.utils.utils import (
    dump_context_from_pte, from_context_binary, generate_htp_compiler_spec, generate_qnn_executorch_compiler_spec,
    skip_annotation, to_edge_transform_and_lower_to_qnn,
)
from backends.qualcomm.serialization.qc_schema import QcomChipset, QnnExecuTorchHtpPerformanceMode
import backends.qualcomm as ours
import backends.qualcomm.partition.qnn_partitioner as module
assert QnnPartitioner is ours.QnnPartitioner and module.QnnPartitioner is QnnPartitioner
assert ours.partition.qnn_partitioner is module
assert skip_annotation is ours.skip_annotation and dump_context_from_pte is ours.dump_context_from_pte
assert from_context_binary is ours.from_context_binary
assert generate_htp_compiler_spec is ours.generate_htp_compiler_spec
assert generate_qnn_executorch_compiler_spec is ours.generate_qnn_executorch_compiler_spec
assert to_edge_transform_and_lower_to_qnn is ours.to_edge_transform_and_lower_to_qnn
assert QcomChipset is ours.QcomChipset and QnnExecuTorchHtpPerformanceMode is ours.QnnExecuTorchHtpPerformanceMode
print("ok")
"""


def test_upstream_paths_import_first_and_are_ours(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[4]))
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORTS], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "ok"
