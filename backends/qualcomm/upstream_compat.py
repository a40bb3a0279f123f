"""Compatibility with ExecuTorch's own Qualcomm backend (`executorch.backends.qualcomm`,
"upstream"): a script written for it runs here after replacing the import prefix
`executorch.backends.qualcomm` with `backends.qualcomm`. This module is the only place that
exists for that reason, and our own code does not import from it:

- upstream's module paths that have no module of ours (`partition.qnn_partitioner`, `utils.utils`,
  `serialization.qc_schema`: _upstream_modules) are registered as aliases of what they hold when
  `backends.qualcomm` is imported (`register_upstream_modules`); e.g.
  `from backends.qualcomm.partition.qnn_partitioner import QnnPartitioner` is our
  `backends.qualcomm.partitioner.QnnPartitioner`;
- upstream's helpers that no other module of ours has: skip_annotation, dump_context_from_pte (the
  QNN context binaries our delegates carry, written next to the .pte), and from_context_binary
  (not built yet: it raises a clear error).
Upstream paths that are also ours (`quantizer.quantizer`, `quantizer.quant_recipe`) are the real
modules."""

from __future__ import annotations

import sys
import types
from typing import Callable, Dict, List, Optional, Set, Tuple

import torch

from backends.qualcomm.utils.compile_spec import QcomChipset

_FROM_CONTEXT_BINARY = (
    "from_context_binary: qnn-delegate does not wrap a prebuilt QNN context binary as a program "
    "yet (our delegates carry QNN context binaries built from our own payload, which the host "
    "engine also runs). Lower the model with to_edge_transform_and_lower_to_qnn instead."
)
_NO_BINARY_IN_PTE = (
    "dump_context_from_pte: {path} has no QNN context binary to dump (its {count} qnn-delegate "
    "delegate(s) were lowered without the QNN libraries, with QNN_DELEGATE_CONTEXT_BINARY=0, or "
    "QNN refused their graphs at lowering)"
)


class ContextBinaryNotSupportedError(NotImplementedError):
    """from_context_binary (not built yet); dump_context_from_pte of a .pte without binaries."""


def from_context_binary(
    ctx_path, op_name: str, soc_model: QcomChipset = QcomChipset.SM8650, custom_info: Optional[Dict] = None
):
    """Upstream: wrap a prebuilt QNN context binary as a custom op and a program. Not built yet."""
    raise ContextBinaryNotSupportedError(_FROM_CONTEXT_BINARY)


def dump_context_from_pte(pte_path) -> List[str]:
    """Write the QNN context binary of each qnn-delegate delegate of the .pte next to it, as
    upstream does: `<dir>/<method>_<delegate index>.bin` (the raw binary QNN's
    contextCreateFromBinary takes). Delegates without one are skipped with a warning; a .pte
    with none raises ContextBinaryNotSupportedError. Returns the written paths."""
    import logging
    from pathlib import Path

    from executorch.exir._serialize._program import deserialize_pte_binary

    from backends.qualcomm.utils.constants import QNN_BACKEND_ID
    from backends.qualcomm.utils.qnn_context import qnn_binary_of

    path = Path(pte_path)
    program = deserialize_pte_binary(path.read_bytes()).program
    written, skipped = [], []
    for plan in program.execution_plan:
        for index, delegate in enumerate(plan.delegates):
            if delegate.id != QNN_BACKEND_ID:
                continue
            blob = program.backend_delegate_data[delegate.processed.index].data
            binary = qnn_binary_of(bytes(blob))
            if binary is None:
                skipped.append(f"{plan.name}_{index}")
                continue
            target = path.parent / f"{plan.name}_{index}.bin"
            target.write_bytes(binary)
            written.append(str(target))
    if skipped:
        logging.getLogger("backends.qualcomm").warning(
            "dump_context_from_pte: no QNN context binary in delegate(s) %s", ", ".join(skipped)
        )
    if not written:
        raise ContextBinaryNotSupportedError(_NO_BINARY_IN_PTE.format(path=path, count=len(skipped)))
    return written


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
