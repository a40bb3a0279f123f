"""Per-context sizes of a lowered program: one row per distinct qnn-delegate blob (a blob is one
context at run time: identical blobs share one loaded context)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Tuple

from executorch.exir import EdgeProgramManager
from executorch.exir.lowered_backend_module import get_lowered_submodules

from backends.qualcomm.utils.compile_spec import graph_names, options_from_compile_specs
from backends.qualcomm.utils.constants import QCOM_COMPILE_SPEC_KEY, QNN_BACKEND_ID
from backends.qualcomm.utils.qnn_context import payload_of, qnn_binary_of


@dataclass(frozen=True)
class ContextSize:
    index: int  # in the order the methods' delegates first use it
    graphs: Tuple[str, ...]  # "<method>:<graph>" of every delegate that runs a graph of it
    blob_bytes: int  # the delegate blob the .pte stores (payload + QNN context binary)
    payload_bytes: int  # our payload (the host engine's graphs and weights)
    qnn_binary_bytes: int  # Qualcomm's context binary inside it (0 when none was built)

    def __str__(self) -> str:
        qnn = f", QNN context binary {self.qnn_binary_bytes / 1024:.1f} KiB" if self.qnn_binary_bytes else ""
        return (
            f"context {self.index}: {self.blob_bytes / 1024:.1f} KiB (payload {self.payload_bytes / 1024:.1f} KiB"
            f"{qnn}); graphs {', '.join(self.graphs)}"
        )


def context_sizes(manager: EdgeProgramManager) -> List[ContextSize]:
    """The distinct qnn-delegate blobs of `manager`'s methods with their sizes and graphs."""
    blobs: Dict[bytes, List[str]] = {}
    for method in manager.methods:
        graph_module = manager.exported_program(method).graph_module
        for _, lowered, _ in get_lowered_submodules(graph_module):
            if lowered.backend_id != QNN_BACKEND_ID:
                continue
            specs = [s for s in lowered.compile_specs if s.key == QCOM_COMPILE_SPEC_KEY]
            graph = graph_names(options_from_compile_specs(specs))[0] if specs else "?"
            blobs.setdefault(bytes(lowered.processed_bytes), []).append(f"{method}:{graph}")
    rows = []
    for index, (blob, graphs) in enumerate(blobs.items()):
        binary = qnn_binary_of(blob)
        rows.append(ContextSize(index, tuple(graphs), len(blob), len(payload_of(blob)), len(binary or b"")))
    return rows
