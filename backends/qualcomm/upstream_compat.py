"""Compatibility with ExecuTorch's own Qualcomm backend ("upstream", in the executorch wheel): a
script written for it runs here after replacing that package's import prefix with
`backends.qualcomm`. This module is the only place that
exists for that reason, and our own code does not import from it:

- upstream's module paths that have no module of ours (`partition.qnn_partitioner`, `utils.utils`,
  `serialization.qc_schema`: _upstream_modules) are registered as aliases of what they hold when
  `backends.qualcomm` is imported (`register_upstream_modules`); e.g.
  `from backends.qualcomm.partition.qnn_partitioner import QnnPartitioner` is our
  `backends.qualcomm.partitioner.QnnPartitioner`;
- upstream's helpers: skip_annotation here; dump_context_from_pte and from_context_binary live in
  utils/context_binary.py and are re-exported.
Upstream paths that are also ours (`quantizer.quantizer`, `quantizer.quant_recipe`) are the real
modules."""

from __future__ import annotations

import sys
import types
from typing import Callable, Dict, Optional, Set, Tuple

import torch

from backends.qualcomm.utils.context_binary import dump_context_from_pte, from_context_binary
from backends.qualcomm.utils.errors import ContextBinaryError, ContextBinaryNotSupportedError  # noqa: F401


def skip_annotation(
    nn_module: torch.nn.Module,
    quantizer,
    compiler_specs,
    sample_input: Tuple[torch.Tensor, ...],
    calibration_cb: Callable[[torch.fx.GraphModule], None],
    fp_node_id_set: Optional[Set[str]] = None,
    fp_node_op_set: Optional[Set[object]] = None,
    fallback_to_cpu: bool = True,
):
    """Quantize `nn_module` leaving the named nodes / ops unannotated (float), and lower it.

    With fallback_to_cpu (default) the skipped nodes stay on ExecuTorch's CPU kernels;
    otherwise they are delegated in float inside the quantized delegate. Returns
    (graph module of the lowered program, [EdgeProgramManager]) like upstream; re-export the
    graph module with torch.export + to_edge, or call .to_executorch() on the manager.
    Upstream lowers each quantized region as its own program (several managers); here the
    whole model is one program and one manager."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from backends.qualcomm.utils.lowering import to_edge_transform_and_lower_to_qnn

    fp_node_id_set = set(fp_node_id_set or ())
    fp_node_op_set = set(fp_node_op_set or ())
    quantizer.add_discard_nodes(fp_node_id_set)
    quantizer.add_discard_ops(fp_node_op_set)
    graph_module = torch.export.export(nn_module, tuple(sample_input), strict=True).module()
    prepared = prepare_pt2e(graph_module, quantizer)
    calibration_cb(prepared)
    converted = convert_pt2e(prepared)
    program = torch.export.export(converted, tuple(sample_input), strict=False)
    skip_ids = _edge_names(program, fp_node_id_set) if fallback_to_cpu else None
    skip_ops = fp_node_op_set if fallback_to_cpu else None
    manager = to_edge_transform_and_lower_to_qnn(
        program, tuple(sample_input), compiler_specs, skip_node_id_set=skip_ids, skip_node_op_set=skip_ops
    )
    return manager.exported_program().module(), [manager]


def _edge_names(program, names: Set[str]) -> Set[str]:
    """The edge-dialect node names of the exported nodes `names` (to_edge renames them, e.g.
    conv2d -> aten_convolution_default; the provenance chain keeps the original name)."""
    from executorch.exir import to_edge

    found = set(names)
    for node in to_edge(program).exported_program().graph.nodes:
        source = node.meta.get("from_node")
        while source:
            if source[-1].name in names:
                found.add(node.name)
                break
            source = source[-1].from_node
    return found


# ---- upstream's module paths ---------------------------------------------------------------------
def _upstream_modules() -> Dict[str, Dict[str, object]]:
    """Path below backends.qualcomm -> the names that module exports."""
    from backends.qualcomm.partitioner.qnn_partitioner import QnnPartitioner
    from backends.qualcomm.utils import compile_spec
    from backends.qualcomm.utils.lowering import to_edge_transform_and_lower_to_qnn

    enums = (
        "HtpArch",
        "QcomChipset",
        "QnnExecuTorchBackendType",
        "QnnExecuTorchHtpPerformanceMode",
        "QnnExecuTorchHtpPrecision",
        "QnnExecuTorchLogLevel",
        "QnnExecuTorchProfileLevel",
    )
    return {
        "partition": {},
        "partition.qnn_partitioner": {"QnnPartitioner": QnnPartitioner},
        "utils.utils": {
            "dump_context_from_pte": dump_context_from_pte,
            "from_context_binary": from_context_binary,
            "generate_htp_compiler_spec": compile_spec.generate_htp_compiler_spec,
            "generate_qnn_executorch_compiler_spec": compile_spec.generate_qnn_executorch_compiler_spec,
            "skip_annotation": skip_annotation,
            "to_edge_transform_and_lower_to_qnn": to_edge_transform_and_lower_to_qnn,
        },
        "serialization.qc_schema": {name: getattr(compile_spec, name) for name in enums},
    }


def register_upstream_modules(package: str = "backends.qualcomm") -> None:
    """Make each module of _upstream_modules importable below `package` (sys.modules entries, and an
    attribute of the parent package), holding the names upstream's module of that path exports."""
    for relative, names in _upstream_modules().items():
        name = f"{package}.{relative}"
        if name in sys.modules:
            continue
        module = types.ModuleType(name, f"Upstream's module path <upstream>.{relative} (see {__name__}).")
        module.__dict__.update(names)
        module.__all__ = sorted(names)
        if not names:  # a package: its submodules are registered too
            module.__path__ = []
        sys.modules[name] = module
        parent, _, leaf = name.rpartition(".")
        setattr(sys.modules[parent], leaf, module)
