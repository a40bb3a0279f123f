"""Flag placeholders that hold params/buffers/lifted constants (read by builder checks), and int64
constants holding values outside int32 (QNN narrows INT_64 to INT_32: integer arithmetic refuses them)."""

from __future__ import annotations

import torch
from executorch.backends.transforms.utils import get_param_tensor, is_param_node
from torch._subclasses.fake_tensor import FakeTensor
from torch.export import ExportedProgram

from backends.qualcomm.utils.constants import QCOM_BEYOND_INT32, QCOM_CONSTANT


def _beyond_int32(ep: ExportedProgram, node: torch.fx.Node) -> bool:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dtype != torch.int64:
        return False
    data = get_param_tensor(ep, node)
    if isinstance(data, FakeTensor):  # while partitioning: its real value when tracing kept it
        data = data.constant
    if not isinstance(data, torch.Tensor) or isinstance(data, FakeTensor) or data.numel() == 0:
        return False  # nothing to read (a fake constant without its value)
    return bool(((data < -(2**31)) | (data >= 2**31)).any())


def mark_constants(ep: ExportedProgram) -> ExportedProgram:
    for node in ep.graph_module.graph.nodes:
        if node.op == "placeholder":
            node.meta[QCOM_CONSTANT] = bool(is_param_node(ep, node))
            node.meta[QCOM_BEYOND_INT32] = node.meta[QCOM_CONSTANT] and _beyond_int32(ep, node)
    return ep
