"""Weight sharing across methods: one context (one delegate blob) holding one
graph per method, with identical static data stored once.

After each method is lowered on its own, every qnn-delegate blob is read back,
its graphs renamed after their method (`<method>`, then `<method>_1`, ... for
further partitions, skipping names another method or graph already has: a method
`dec_1` next to a two-partition `dec` gives graphs `dec`, `dec_1_2` and `dec_1`;
uniqueness is checked before writing), and all graphs are written into one blob
whose STATIC tensors with identical bytes share one data vector. Every lowered
module then carries that same blob (ExecuTorch stores identical delegate blobs
once) and a compile spec naming its own graph, which the runtime picks from the
shared context.

With `use_multi_contexts` the delegates are grouped by their shard (the QCOM_SHARD_SPEC_KEY
compile spec the partitioner gives each delegate of a sharded program; 0 when absent): shard k of
every method goes into blob k, so a program sharded in N gives N contexts, each weight-shared
between the methods.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Set, Tuple

import numpy as np
from executorch.exir import EdgeProgramManager
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.lowered_backend_module import LoweredBackendModule, get_lowered_submodules

from backends.qualcomm.serialization.payload_reader import deserialize
from backends.qualcomm.serialization.payload_writer import serialize_graphs
from backends.qualcomm.serialization.qnn_graph import QnnGraph, QnnOp, QnnParam, QnnTensor, QuantParams
from backends.qualcomm.utils.compile_spec import options_from_compile_specs, serialize_options
from backends.qualcomm.utils.constants import QCOM_COMPILE_SPEC_KEY, QCOM_SHARD_SPEC_KEY
from backends.qualcomm.utils.errors import QnnLoweringError
from backends.qualcomm.utils.qnn_context import attach_qnn_context_for_options, online_prepare_of

BACKEND_ID = "QnnDelegate"

# Dataclass -> how its nested fields are converted from the object-API value.
_NESTED = {"quant": QuantParams, "params": QnnParam, "tensors": QnnTensor, "ops": QnnOp}
_ARRAY_FIELDS = {"data", "block_scales", "lookup_table"}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _plain(name: str, value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    if name in _ARRAY_FIELDS:
        return None if value is None else np.asarray(value, dtype=np.uint8)
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def _from_object(cls, obj) -> Any:
    """A serialization dataclass built from its generated object-API counterpart."""
    kwargs = {}
    for f in dataclasses.fields(cls):
        value = getattr(obj, _camel(f.name), None)
        nested = _NESTED.get(f.name)
        if nested is not None and value is not None:
            value = [_from_object(nested, v) for v in value] if isinstance(value, list) else _from_object(nested, value)
        elif value is None and f.default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            value = f.default_factory()  # type: ignore[misc]
        else:
            value = _plain(f.name, value)
        if value is None and f.default is not dataclasses.MISSING:
            value = f.default
        kwargs[f.name] = value
    return cls(**kwargs)


def graphs_of_blob(blob: bytes) -> List[QnnGraph]:
    """The graphs of a delegate blob as QnnGraph objects (ready to serialize again)."""
    return [_from_object(QnnGraph, g) for g in (deserialize(blob).graphs or [])]


def _qnn_lowered_modules(manager: EdgeProgramManager) -> List[Tuple[str, LoweredBackendModule]]:
    found = []
    for method in manager.methods:
        graph_module = manager.exported_program(method).graph_module
        for _, lowered, _ in get_lowered_submodules(graph_module):
            if lowered.backend_id in (BACKEND_ID, "QnnBackend"):
                found.append((method, lowered))
    return found


def with_graph_name(compile_specs: List[CompileSpec], graph_name: str) -> List[CompileSpec]:
    """Compile specs whose qnn options name `graph_name` as the graph to run."""
    options = options_from_compile_specs(compile_specs)
    options.graphName = [graph_name]
    return [
        CompileSpec(QCOM_COMPILE_SPEC_KEY, serialize_options(options)) if s.key == QCOM_COMPILE_SPEC_KEY else s
        for s in compile_specs
    ]


def _free_name(base: str, taken: Set[str]) -> str:
    """`base`, or `base_2`, `base_3`, ... when a method or an earlier graph has that name."""
    name, k = base, 2
    while name in taken:
        name = f"{base}_{k}"
        k += 1
    taken.add(name)
    return name


def check_unique_graph_names(graphs: List[QnnGraph]) -> None:
    """QnnLoweringError when two graphs of one shared context have the same name (the runtime
    picks a method's graph by name, so a clash would run another method's graph)."""
    seen: Dict[str, int] = {}
    for graph in graphs:
        seen[graph.name] = seen.get(graph.name, 0) + 1
    clashes = sorted(name for name, count in seen.items() if count > 1)
    if clashes:
        raise QnnLoweringError(
            f"weight sharing: graph name(s) {clashes} are used by more than one graph of the shared context"
        )


def shard_index(compile_specs: List[CompileSpec]) -> int:
    """The shard a delegate belongs to (its QCOM_SHARD_SPEC_KEY compile spec; 0 without one)."""
    for spec in compile_specs:
        if spec.key == QCOM_SHARD_SPEC_KEY:
            return int(bytes(spec.value).decode())
    return 0


def share_weights_across_methods(manager: EdgeProgramManager, per_shard: bool = False) -> List[bytes]:
    """Give the qnn-delegate modules of `manager` merged blobs (returned): one for all of them,
    or with `per_shard` one per shard index, holding that shard's graphs of every method."""
    modules = _qnn_lowered_modules(manager)
    if not modules:
        raise ValueError("weight sharing: no method has a qnn-delegate partition")
    groups: Dict[int, List[Tuple[str, LoweredBackendModule]]] = {}
    for method, lowered in modules:
        groups.setdefault(shard_index(lowered.compile_specs) if per_shard else 0, []).append((method, lowered))
    taken: Set[str] = set(manager.methods)  # a method's first graph is named after it
    return [_merge(groups[k], taken, k if per_shard else None) for k in sorted(groups)]


def _merge(modules: List[Tuple[str, LoweredBackendModule]], taken: Set[str], shard: "int | None") -> bytes:
    """One blob holding the graphs of `modules`, given to each of them (with its graph name).
    Graph names: `<method>` for the first graph of a method (`<method>_shard<k>` in shard k > 0),
    then `<method>_1`, ... (see the module docstring)."""
    graphs: List[QnnGraph] = []
    names: Dict[int, str] = {}
    counts: Dict[str, int] = {}
    for method, lowered in modules:
        for graph in graphs_of_blob(lowered.processed_bytes):
            index = counts.get(method, 0)
            counts[method] = index + 1
            if shard:
                graph.name = _free_name(f"{method}_shard{shard}" + (f"_{index}" if index else ""), taken)
            else:
                graph.name = method if index == 0 else _free_name(f"{method}_{index}", taken)
            graphs.append(graph)
            names.setdefault(id(lowered), graph.name)
    check_unique_graph_names(graphs)
    options = options_from_compile_specs(modules[0][1].compile_specs)
    merged = attach_qnn_context_for_options(
        serialize_graphs(graphs, share_static_data=True, online_prepare=online_prepare_of(options)),
        options,
        "weight-shared context" if shard is None else f"weight-shared context of shard {shard}",
    )
    for _, lowered in modules:
        lowered._processed_bytes = merged
        lowered._compile_specs = with_graph_name(lowered.compile_specs, names[id(lowered)])
    return merged
