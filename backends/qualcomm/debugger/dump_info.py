"""What the delegate dumps, per debug handle: tensor name, layout and quantization.

Read from the lowered program: the payloads give each dumped tensor's name
(`<node>_debugID_<handle>`), dims and encoding; re-running the preprocess passes
on each delegated subgraph gives the layout the builders chose for the node."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Set

import torch
from executorch.exir.lowered_backend_module import LoweredBackendModule
from torch.export import ExportedProgram

from backends.qualcomm._passes.pass_manager import run_preprocess_passes
from backends.qualcomm._passes.resolve_debug_handle import dumped_handle_owners, node_debug_handle
from backends.qualcomm.serialization import qnn_payload_generated as gen
from backends.qualcomm.serialization.payload_reader import deserialize
from backends.qualcomm.utils.constants import (
    CHANNEL_LAST_RANKS, LAYOUT_CHANNEL_FIRST, LAYOUT_CHANNEL_LAST, QCOM_LAYOUT, QNN_BACKEND_ID,
    channel_first_perm,
)
from backends.qualcomm.utils.tensor_dump import handle_from_tensor_name

_DATA_TYPE_NAMES = {v: k for k, v in vars(gen.QnnDataType).items() if not k.startswith("_")}
_PER_TENSOR_ENCODINGS = (gen.QnnQuantEncoding.SCALE_OFFSET, gen.QnnQuantEncoding.BW_SCALE_OFFSET)
_QUANT_RANGES = {"UFIXED_POINT_8": (0, 255), "UFIXED_POINT_16": (0, 65535),
                 "SFIXED_POINT_8": (-128, 127), "SFIXED_POINT_16": (-32768, 32767)}


@dataclass
class DumpedTensor:
    """One tensor the delegate dumps for a debug handle."""

    handle: int
    tensor_name: str
    data_type: str
    dims: List[int]
    layout: str = LAYOUT_CHANNEL_FIRST
    scale: Optional[float] = None
    zero_point: Optional[int] = None

    def in_own_encoding(self, reference: torch.Tensor) -> torch.Tensor:
        """A float reference rounded to this tensor's encoding (what the QDQ reference
        graph hands to the next op), so that only the delegate's own deviation is measured."""
        if self.scale is None or self.data_type not in _QUANT_RANGES or not reference.is_floating_point():
            return reference
        qmin, qmax = _QUANT_RANGES[self.data_type]
        zero_point = float(self.zero_point or 0)
        q = torch.clamp(torch.round(reference.to(torch.float64) / self.scale) + zero_point, qmin, qmax)
        return (q - zero_point) * self.scale

    def to_reference_layout(self, data: torch.Tensor, dequantize: bool = True) -> torch.Tensor:
        """Dequantized (real = scale * (q - zero_point); kept integer when `dequantize` is
        False, e.g. against a quantize node) and permuted back to PyTorch's channel-first layout."""
        values = data.detach().to(torch.float64)
        if self.scale is not None and dequantize:
            values = (values - float(self.zero_point or 0)) * float(self.scale)
        if self.layout == LAYOUT_CHANNEL_LAST and values.dim() in CHANNEL_LAST_RANKS:
            values = values.permute(*channel_first_perm(values.dim())).contiguous()
        return values


def lowered_qnn_modules(program: ExportedProgram) -> Iterator[LoweredBackendModule]:
    """The qnn-delegate lowered modules of a program (top-level graph)."""
    for _, child in program.graph_module.named_children():
        if isinstance(child, LoweredBackendModule) and child.backend_id == QNN_BACKEND_ID:
            yield child


def _quant_of(tensor: gen.TensorT) -> tuple:
    quant = tensor.quant
    if quant is None or quant.encoding not in _PER_TENSOR_ENCODINGS:
        return None, None
    return float(quant.scale), int(-quant.offset)


def _node_layouts(lowered: LoweredBackendModule) -> Dict[int, str]:
    """{handle: layout of the node whose output is dumped} as the builders saw it."""
    ep = run_preprocess_passes(copy.deepcopy(lowered.original_module))
    owners = dumped_handle_owners(ep.graph_module.graph.nodes)
    return {handle: node.meta.get(QCOM_LAYOUT, LAYOUT_CHANNEL_FIRST) for node, handle in owners.items()}


def _dumped_tensors_of(lowered: LoweredBackendModule) -> List[DumpedTensor]:
    payload = deserialize(bytes(lowered.processed_bytes))
    layouts: Optional[Dict[int, str]] = None
    found = []
    for graph in payload.graphs or []:
        for tensor in graph.tensors or []:
            name = tensor.name.decode() if isinstance(tensor.name, bytes) else str(tensor.name)
            handle = handle_from_tensor_name(name)
            if handle is None:
                continue
            if layouts is None:
                layouts = _node_layouts(lowered)
            scale, zero_point = _quant_of(tensor)
            dims = [int(d) for d in (tensor.dims if tensor.dims is not None else [])]
            found.append(DumpedTensor(handle, name, _DATA_TYPE_NAMES.get(tensor.dataType, "?"), dims,
                                      layouts.get(handle, LAYOUT_CHANNEL_FIRST), scale, zero_point))
    return found


def collect_dumped_tensors(program: ExportedProgram) -> Dict[int, List[DumpedTensor]]:
    """{debug handle: dumped tensors in output order} over every qnn-delegate payload."""
    by_handle: Dict[int, List[DumpedTensor]] = {}
    for lowered in lowered_qnn_modules(program):
        for dumped in _dumped_tensors_of(lowered):
            by_handle.setdefault(dumped.handle, []).append(dumped)
    return by_handle


def delegated_debug_handles(program: ExportedProgram) -> Set[int]:
    """Debug handles of the edge nodes the qnn-delegate payloads were built from."""
    handles: Set[int] = set()
    for lowered in lowered_qnn_modules(program):
        for node in lowered.original_module.graph.nodes:
            handle = node_debug_handle(node) if node.op == "call_function" else None
            if handle is not None:
                handles.add(handle)
    return handles
