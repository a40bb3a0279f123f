"""Flag placeholders that hold params/buffers/lifted constants (read by builder checks)."""
from __future__ import annotations

from executorch.backends.transforms.utils import is_param_node
from torch.export import ExportedProgram

from backends.qualcomm.utils.constants import QCOM_CONSTANT


def mark_constants(ep: ExportedProgram) -> ExportedProgram:
    for node in ep.graph_module.graph.nodes:
        if node.op == "placeholder":
            node.meta[QCOM_CONSTANT] = bool(is_param_node(ep, node))
    return ep
