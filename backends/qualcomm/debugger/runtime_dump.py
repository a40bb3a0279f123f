"""Run a .pte with intermediate dumping and read the delegate's dumped tensors back."""

from __future__ import annotations

import os
from typing import Dict, List, Sequence, Tuple

import torch

DEFAULT_DEBUG_BUFFER_SIZE = 64 << 20


def run_with_etdump(
    pte_path: str,
    inputs: Sequence[torch.Tensor],
    out_dir: str,
    debug_buffer_size: int = DEFAULT_DEBUG_BUFFER_SIZE,
    method: str = "forward",
) -> Tuple[List[torch.Tensor], str, str]:
    """Run `pte_path` once with ETDump and a debug buffer; returns (outputs, etdump path,
    debug buffer path). The event tracer then asks the delegate for intermediate outputs."""
    from executorch.runtime import Runtime

    import backends.qualcomm  # noqa: F401  (registers the QnnDelegate runtime backend)

    os.makedirs(out_dir, exist_ok=True)
    program = Runtime.get().load_program(pte_path, enable_etdump=True, debug_buffer_size=debug_buffer_size)
    outputs = list(program.load_method(method).execute(list(inputs)))
    etdump_path = os.path.join(out_dir, "etdump.etdp")
    debug_buffer_path = os.path.join(out_dir, "debug_buffer.bin")
    program.write_etdump_result_to_file(etdump_path, debug_buffer_path)
    return outputs, etdump_path, debug_buffer_path


def read_delegate_dumps(etdump_path: str, debug_buffer_path: str) -> Dict[int, List[torch.Tensor]]:
    """{delegate debug handle: dumped tensors in logged order} from an ETDump + debug buffer
    (the last run in the ETDump wins when several were recorded)."""
    from executorch.devtools import Inspector

    inspector = Inspector(etdump_path=etdump_path, debug_buffer_path=debug_buffer_path)
    dumps: Dict[int, List[torch.Tensor]] = {}
    for block in inspector.event_blocks:
        for event in block.events:
            handle = event.delegate_debug_identifier
            if not event.is_delegated_op or not isinstance(handle, int) or not event.debug_data:
                continue
            dumps[handle] = [t for t in event.debug_data if isinstance(t, torch.Tensor)]
    return dumps
