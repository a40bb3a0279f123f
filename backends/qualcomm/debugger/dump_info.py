"""What the delegate dumps, per debug handle: tensor name, layout and quantization.

Read from the lowered program: the payloads give each dumped tensor's name
(`<node>_debugID_<handle>`), dims and encoding; re-running the preprocess passes
on each delegated subgraph gives the layout the builders chose for the node and
the edge nodes folded into it (folded_handle_groups). The runtime logs each
tensor as the edge node it stands for: dequantized to float and in PyTorch's
layout (TensorDump.h)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Set, Tuple

import torch
from executorch.exir.lowered_backend_module import LoweredBackendModule
from torch.export import ExportedProgram

from backends.qualcomm._passes.pass_manager import run_preprocess_passes
from backends.qualcomm.builders.quant_encoding import DEQUANTIZE_OPS, QUANTIZE_OPS
from backends.qualcomm._passes.resolve_debug_handle import (
    dumped_handle_owners,
    folded_handle_groups,
    node_debug_handle,
)
from backends.qualcomm.serialization import qnn_payload_generated as gen
from backends.qualcomm.serialization.payload_reader import deserialize
from backends.qualcomm.utils.constants import LAYOUT_CHANNEL_FIRST, QCOM_LAYOUT, QNN_BACKEND_ID
from backends.qualcomm.utils.tensor_dump import handle_from_tensor_name

_DATA_TYPE_NAMES = {v: k for k, v in vars(gen.QnnDataType).items() if not k.startswith("_")}
_PER_TENSOR_ENCODINGS = (gen.QnnQuantEncoding.SCALE_OFFSET, gen.QnnQuantEncoding.BW_SCALE_OFFSET)
_QUANT_RANGES = {
    "UFIXED_POINT_8": (0, 255),
    "UFIXED_POINT_16": (0, 65535),
    "SFIXED_POINT_8": (-128, 127),
    "SFIXED_POINT_16": (-32768, 32767),
}


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
    # the edge handles the tensor stands for (the node's own and those folded into it); the
    # last one's output is what it holds
    group: Tuple[int, ...] = ()

    @property
    def stands_for(self) -> int:
        """Handle of the edge node whose output this tensor holds."""
        return self.group[-1] if self.group else self.handle

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
        """A logged tensor (already dequantized and in PyTorch's layout: TensorDump.h) as float64;
        with `dequantize` False (e.g. against a quantize node) the integer codes of its encoding."""
        values = data.detach().to(torch.float64)
        if not dequantize and self.scale is not None and self.data_type in _QUANT_RANGES:
            values = torch.round(values / self.scale) + float(self.zero_point or 0)
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


def _node_layouts_and_groups(lowered: LoweredBackendModule) -> Tuple[Dict[int, str], Dict[int, Tuple[int, ...]]]:
    """({handle: layout of the node whose output is dumped} as the builders saw it,
    {handle: the edge handles its tensor stands for})."""
    original = lowered.original_module.graph_module.graph
    ep = run_preprocess_passes(copy.deepcopy(lowered.original_module))
    owners = dumped_handle_owners(ep.graph_module.graph.nodes)
    layouts = {handle: node.meta.get(QCOM_LAYOUT, LAYOUT_CHANNEL_FIRST) for node, handle in owners.items()}
    # quantize / dequantize members are left out: the row of a quantized conv is the conv's,
    # its reference rounded to the tensor's encoding (DumpedTensor.in_own_encoding)
    quant_handles = {
        node_debug_handle(n)
        for n in original.nodes
        if n.op == "call_function" and (n.target in QUANTIZE_OPS or n.target in DEQUANTIZE_OPS)
    }
    groups = {
        handle: tuple(h for h in group if h not in quant_handles) or (handle,)
        for handle, group in folded_handle_groups(original, ep.graph_module.graph).items()
    }
    return layouts, groups


def _dumped_tensors_of(lowered: LoweredBackendModule) -> List[DumpedTensor]:
    payload = deserialize(bytes(lowered.processed_bytes))
    layouts: Optional[Dict[int, str]] = None
    groups: Dict[int, Tuple[int, ...]] = {}
    found = []
    for graph in payload.graphs or []:
        for tensor in graph.tensors or []:
            name = tensor.name.decode() if isinstance(tensor.name, bytes) else str(tensor.name)
            handle = handle_from_tensor_name(name)
            if handle is None:
                continue
            if layouts is None:
                layouts, groups = _node_layouts_and_groups(lowered)
            scale, zero_point = _quant_of(tensor)
            dims = [int(d) for d in (tensor.dims if tensor.dims is not None else [])]
            found.append(
                DumpedTensor(
                    handle,
                    name,
                    _DATA_TYPE_NAMES.get(tensor.dataType, "?"),
                    dims,
                    layouts.get(handle, LAYOUT_CHANNEL_FIRST),
                    scale,
                    zero_point,
                    groups.get(handle, (handle,)),
                )
            )
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


def dumps_by_edge_handle(dumped: Dict[int, List[DumpedTensor]]) -> Dict[int, int]:
    """{handle of the edge node a dump holds the output of: the dump's own handle} (a conv's
    tensor holds its folded batch norm's output: {bn: conv})."""
    return {infos[0].stands_for: handle for handle, infos in dumped.items() if infos}
