"""The two engines node by node: run one .pte on QNN's engine and on the host engine (runtime
option `qnn_runtime_engine`) with every intermediate tensor dumped, and compare the dumps of
each node. Quantized tensors are compared in steps of their encoding, float ones by their
largest difference relative to the magnitude; the report's first failure is the first node,
in handle (topological) order, where the engines disagree."""

from __future__ import annotations

import contextlib
import math
import os
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from backends.qualcomm.debugger.dump_info import DumpedTensor
from backends.qualcomm.debugger.reports import FAIL, PASS, ComparisonRow
from backends.qualcomm.debugger.runtime_dump import DEFAULT_DEBUG_BUFFER_SIZE, read_delegate_dumps, run_with_etdump
from backends.qualcomm.utils.tensor_dump import DEBUG_ID_MARKER

ENGINE_OPTION = "qnn_runtime_engine"


@contextlib.contextmanager
def runtime_engine(engine: str) -> Iterator[None]:
    """Delegates loaded inside run on `engine` ("qnn", "host" or "auto")."""
    from backends.qualcomm.utils.runtime_options import set_runtime_option

    set_runtime_option(ENGINE_OPTION, engine)
    try:
        yield
    finally:
        set_runtime_option(ENGINE_OPTION, "auto")


def debug_buffer_bytes(dumped: Dict[int, List[DumpedTensor]]) -> int:
    """A debug buffer that holds every dumped tensor of one execute (4 bytes an element, a quarter
    more for the records, at least the default): a 30-layer decoder dumps about 85 MB, more than
    the default 64 MiB, and a full buffer stops the logging."""
    elements = sum(int(math.prod(info.dims)) for infos in dumped.values() for info in infos)
    return max(DEFAULT_DEBUG_BUFFER_SIZE, elements * 5 + (16 << 20))


def dumps_on_engine(
    pte_path: str,
    sample_input: Sequence[torch.Tensor],
    out_dir: str,
    engine: str,
    debug_buffer_size: int = DEFAULT_DEBUG_BUFFER_SIZE,
) -> Dict[int, List[torch.Tensor]]:
    """{debug handle: logged tensors} of one run of `pte_path` on `engine`."""
    with runtime_engine(engine):
        _, etdump, debug_buffer = run_with_etdump(pte_path, sample_input, out_dir, debug_buffer_size)
    return read_delegate_dumps(etdump, debug_buffer)


def _difference(info: DumpedTensor, first: torch.Tensor, second: torch.Tensor) -> Tuple[str, float]:
    """('max_steps', steps of the encoding) for a quantized tensor, else ('max_rel_diff', ...)."""
    a, b = first.detach().to(torch.float64), second.detach().to(torch.float64)
    if info.scale is not None:
        return "max_steps", float(torch.round((a - b).abs() / info.scale).max()) if a.numel() else 0.0
    diff = float((a - b).abs().max()) if a.numel() else 0.0
    return "max_rel_diff", diff / max(1.0, float(a.abs().max()) if a.numel() else 0.0)


def _row(
    handle: int,
    index: int,
    info: DumpedTensor,
    first: Optional[List[torch.Tensor]],
    second: Optional[List[torch.Tensor]],
    max_steps: int,
    max_rel_diff: float,
) -> ComparisonRow:
    node = info.tensor_name.split(DEBUG_ID_MARKER)[0]
    row = ComparisonRow(
        node, "call_function", info.data_type, handle, index, info.tensor_name, info.scale, info.zero_point
    )
    if first is None or second is None or index >= min(len(first), len(second)):
        row.reason = "not dumped on both engines"
        return row
    if tuple(first[index].shape) != tuple(second[index].shape):
        row.reason = f"shapes differ: {tuple(first[index].shape)} vs {tuple(second[index].shape)}"
        return row
    row.metric, row.value = _difference(info, first[index], second[index])
    row.threshold = float(max_steps) if row.metric == "max_steps" else max_rel_diff
    row.status = PASS if row.value <= row.threshold else FAIL
    return row


def compare_engine_dumps(
    dumped: Dict[int, List[DumpedTensor]],
    first: Dict[int, List[torch.Tensor]],
    second: Dict[int, List[torch.Tensor]],
    max_steps: int = 1,
    max_rel_diff: float = 1e-2,
) -> List[ComparisonRow]:
    """One row per dumped tensor, in handle order."""
    return [
        _row(handle, i, info, first.get(handle), second.get(handle), max_steps, max_rel_diff)
        for handle in sorted(dumped)
        for i, info in enumerate(dumped[handle])
    ]


def compare_engines(
    pte_path: str,
    sample_input: Sequence[torch.Tensor],
    dumped: Dict[int, List[DumpedTensor]],
    out_dir: str,
    engines: Tuple[str, str] = ("host", "qnn"),
    max_steps: int = 1,
    max_rel_diff: float = 1e-2,
) -> List[ComparisonRow]:
    """Rows of `engines[1]` against `engines[0]` on one run each of `pte_path`."""
    size = debug_buffer_bytes(dumped)
    runs = [
        dumps_on_engine(pte_path, sample_input, os.path.join(out_dir, f"{i}_{engine}"), engine, size)
        for i, engine in enumerate(engines)
    ]
    return compare_engine_dumps(dumped, runs[0], runs[1], max_steps, max_rel_diff)
