"""One-call export + edge transform passes + lowering to qnn-delegate."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Set, Tuple, Union

import torch
from executorch.exir import EdgeCompileConfig, EdgeProgramManager, to_edge_transform_and_lower
from executorch.exir.backend.compile_spec_schema import CompileSpec
from torch.export import ExportedProgram

from backends.qualcomm._passes.pass_manager import edge_transform_passes


def _export(module: torch.nn.Module, inputs: Tuple, dynamic_shapes=None) -> ExportedProgram:
    if isinstance(module, torch.nn.Module):
        module = module.eval()
    return torch.export.export(module, tuple(inputs), dynamic_shapes=dynamic_shapes, strict=False)


def _as_method_dict(module, inputs) -> Tuple[Dict[str, torch.nn.Module], Dict[str, Tuple]]:
    """Normalize the single-module form to {method: module} / {method: inputs}."""
    if isinstance(module, dict):
        if not isinstance(inputs, dict) or set(inputs) != set(module):
            raise ValueError("when module is a dict of methods, inputs must be a dict with the same keys")
        return dict(module), {k: tuple(v) for k, v in inputs.items()}
    return {"forward": module}, {"forward": tuple(inputs)}


def to_edge_transform_and_lower_to_qnn(
    module: Union[torch.nn.Module, ExportedProgram, Dict[str, torch.nn.Module]],
    inputs: Union[Tuple, Dict[str, Tuple]],
    compiler_specs: List[CompileSpec],
    dynamic_shapes: Optional[Dict] = None,
    skip_node_id_set: Optional[Set[str]] = None,
    skip_node_op_set: Optional[Set[str]] = None,
    generate_etrecord: bool = False,
) -> EdgeProgramManager:
    """torch.export -> edge transform passes -> to_edge_transform_and_lower with QnnPartitioner."""
    from backends.qualcomm.partitioner import QnnPartitioner

    modules, method_inputs = _as_method_dict(module, inputs)
    programs = {
        name: m if isinstance(m, ExportedProgram) else _export(m, method_inputs[name], dynamic_shapes)
        for name, m in modules.items()
    }
    partitioners = {
        name: [QnnPartitioner(compiler_specs, skip_node_id_set, skip_node_op_set)] for name in programs
    }
    passes = {name: edge_transform_passes() for name in programs}
    return to_edge_transform_and_lower(
        programs,
        transform_passes=passes,
        partitioner=partitioners,
        compile_config=EdgeCompileConfig(_check_ir_validity=False),
        generate_etrecord=generate_etrecord,
    )
