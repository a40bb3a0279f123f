"""One-call export + edge transform passes + lowering to qnn-delegate."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Set, Tuple, Union

import torch
from executorch.exir import EdgeCompileConfig, EdgeProgramManager, to_edge_transform_and_lower
from executorch.exir.backend.compile_spec_schema import CompileSpec
from torch.export import ExportedProgram

from backends.qualcomm._passes.fuse_rms_norm import fuse_rms_norm
from backends.qualcomm._passes.pass_manager import edge_transform_passes
from backends.qualcomm.quantizer.quantization_checks import check_converted_module
from backends.qualcomm.utils.compile_spec import options_from_compile_specs
from backends.qualcomm.utils.constants import DEFAULT_SHARD_PATTERN
from backends.qualcomm.utils.weight_sharing import share_weights_across_methods, with_graph_name


def _export(module: torch.nn.Module, inputs: Tuple, dynamic_shapes=None) -> ExportedProgram:
    if isinstance(module, torch.nn.Module) and not isinstance(module, torch.fx.GraphModule):
        module = module.eval()  # exported/converted (PT2E) GraphModules refuse eval()
    program = torch.export.export(module, tuple(inputs), dynamic_shapes=dynamic_shapes, strict=False)
    fuse_rms_norm(program.graph_module)  # before to_edge: eps is still a scalar there
    return program


def _as_method_dict(module, inputs) -> Tuple[Dict[str, torch.nn.Module], Dict[str, Tuple]]:
    """Normalize the single-module form to {method: module} / {method: inputs}."""
    if isinstance(module, dict):
        if not isinstance(inputs, dict) or set(inputs) != set(module):
            raise ValueError("when module is a dict of methods, inputs must be a dict with the same keys")
        return dict(module), {k: tuple(v) for k, v in inputs.items()}
    return {"forward": module}, {"forward": tuple(inputs)}


def _per_method(value, methods: Sequence[str]) -> Dict[str, object]:
    """Upstream's rule: a dict keyed by exactly the method names is per method; anything else
    (None included) applies to every method."""
    if isinstance(value, dict) and set(value) == set(methods):
        return dict(value)
    return {name: value for name in methods}


def _reject_pass_customization(dep_table: Optional[Dict], passes_job: Optional[Dict]) -> None:
    given = [name for name, value in (("dep_table", dep_table), ("passes_job", passes_job)) if value]
    if given:
        raise ValueError(
            f"{', '.join(given)}: qnn-delegate's edge passes are fixed (see "
            "backends/qualcomm/_passes/pass_manager.py); upstream's pass-job tables do not "
            "apply. Leave them None."
        )


def to_edge_transform_and_lower_to_qnn(
    module: Union[torch.nn.Module, ExportedProgram, Dict[str, torch.nn.Module]],
    inputs: Union[Tuple, Dict[str, Tuple]],
    compiler_specs: Union[List[CompileSpec], Dict[str, List[CompileSpec]]],
    constant_methods: Optional[Dict[str, Any]] = None,
    dynamic_shapes: Optional[Dict] = None,
    dep_table: Optional[Dict] = None,
    passes_job: Optional[Dict] = None,
    skip_node_id_set: Optional[Set[str]] = None,
    skip_node_op_set: Optional[Set[object]] = None,
    skip_mutable_buffer: bool = False,
    generate_etrecord: bool = False,
    convert_linear_to_conv2d: bool = False,
    shard_layers: Optional[List[int]] = None,
    shard_pattern: str = DEFAULT_SHARD_PATTERN,
) -> EdgeProgramManager:
    """torch.export -> edge transform passes -> to_edge_transform_and_lower with QnnPartitioner.

    Arguments follow upstream's function of the same name. `module` may be a dict {method name:
    module} (with `inputs` a dict of the same keys): every method is lowered, its graphs named
    after the method. `compiler_specs` and `dynamic_shapes` may be dicts keyed by the method
    names (else they apply to every method). With use_weight_sharing in the HTP options, all
    methods then share one context (one delegate blob) whose identical weights are stored once.
    `constant_methods` are added to the program as upstream does. `dep_table` / `passes_job`
    (upstream's pass tables) must stay None. `skip_mutable_buffer`: mutable buffers are never
    delegated here (as upstream with True).
    `convert_linear_to_conv2d=True` lowers linear layers as 1x1 Conv2d (HWIO weights, faster
    on HTP); quantized weights keep their per-channel / LPBQ per-block encodings.
    `shard_layers` (ours; upstream's SplitGraph argument): the layers where a new shard starts
    (layer numbers from `shard_pattern` on the nodes' module paths; see
    partitioner/sharding.py): each method's delegates are cut there. With use_multi_contexts and
    use_weight_sharing, shard k of every method then shares context k.
    """
    from backends.qualcomm.partitioner import QnnPartitioner

    _reject_pass_customization(dep_table, passes_job)
    modules, method_inputs = _as_method_dict(module, inputs)
    for m in modules.values():
        if isinstance(m, torch.nn.Module):
            check_converted_module(m)
    method_specs = _per_method(compiler_specs, list(modules))
    shapes = _per_method(dynamic_shapes, list(modules))
    specs = {
        name: method_specs[name] if len(modules) == 1 else with_graph_name(method_specs[name], name) for name in modules
    }
    programs = {
        name: m if isinstance(m, ExportedProgram) else _export(m, method_inputs[name], shapes[name])
        for name, m in modules.items()
    }
    partitioners = {
        name: [
            QnnPartitioner(
                specs[name],
                skip_node_id_set,
                skip_node_op_set,
                skip_mutable_buffer=skip_mutable_buffer,
                shard_layers=shard_layers,
                shard_pattern=shard_pattern,
            )
        ]
        for name in programs
    }
    passes = {name: edge_transform_passes(convert_linear_to_conv2d) for name in programs}
    manager = to_edge_transform_and_lower(
        programs,
        transform_passes=passes,
        partitioner=partitioners,
        constant_methods=constant_methods,
        compile_config=EdgeCompileConfig(_check_ir_validity=False),
        generate_etrecord=generate_etrecord,
    )
    if any(_htp_flag(method_specs[name], "useWeightSharing") for name in modules):
        per_shard = any(_htp_flag(method_specs[name], "useMultiContexts") for name in modules)
        share_weights_across_methods(manager, per_shard=per_shard)
    return manager


def _htp_flag(compiler_specs: List[CompileSpec], flag: str) -> bool:
    backend = options_from_compile_specs(compiler_specs).backendOptions
    htp = backend.htpOptions if backend is not None else None
    return bool(htp is not None and getattr(htp, flag))
