"""QNN context binaries in and out of `.pte` programs.

- `context_binary_info(binary)`: what a context binary holds, read by Qualcomm's
  libQnnSystem.so (QnnSystemContext getBinaryInfo), never from our payload.
- `dump_context_from_pte(pte_path)`: each qnn-delegate delegate's context binary as
  `<method>_<index>.bin`, plus `<method>_<index>.json` (graphs, inputs / outputs, dtypes, shapes,
  encodings as QnnSystem reports them).
- `from_context_binary(path, op_name, soc_model, custom_info)`: a context binary made elsewhere
  (qnn-context-binary-generator, AI Hub, dump_context_from_pte) wrapped as a program whose one
  delegate runs it on QNN (upstream's return value: a dict with "edge_program_manager").

Such a delegate carries only the graph's inputs and outputs (`QnnPayload.context_binary_only`):
the ops exist only inside QNN's binary, so the QNN engine runs it under engine `auto` too (on x86
the HTP emulator) and engine `host` refuses it with an error naming the graph.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult

from backends.qualcomm.serialization import qnn_payload_generated as gen
from backends.qualcomm.serialization.payload_writer import QnnHtpSection, serialize_payload, wrap_context_binary
from backends.qualcomm.serialization.qnn_graph import QnnGraph, QnnTensor, QuantParams
from backends.qualcomm.utils.compile_spec import QcomChipset
from backends.qualcomm.utils.constants import QNN_BACKEND_ID
from backends.qualcomm.utils.errors import ContextBinaryError

# Upstream's custom-op namespace and node meta key for a wrapped context binary.
CUSTOM_OP_NAMESPACE = "qaisw"
META_CONTEXT_BLOB = "qnn_context_binary"

_DT = gen.QnnDataType
# QNN data type -> torch dtype of the ExecuTorch tensor a caller passes.
QNN_TO_TORCH = {
    _DT.FLOAT_32: torch.float32,
    _DT.FLOAT_16: torch.float16,
    _DT.INT_8: torch.int8,
    _DT.INT_16: torch.int16,
    _DT.INT_32: torch.int32,
    _DT.INT_64: torch.int64,
    _DT.UINT_8: torch.uint8,
    _DT.UINT_16: torch.uint16,
    _DT.UFIXED_POINT_8: torch.uint8,
    _DT.UFIXED_POINT_16: torch.uint16,
    _DT.SFIXED_POINT_8: torch.int8,
    _DT.SFIXED_POINT_16: torch.int16,
    _DT.BOOL_8: torch.bool,
}
_DTYPE_NAMES = {value: name for name, value in vars(_DT).items() if not name.startswith("_")}
# QNN's Qnn_QuantizationEncoding_t -> the payload's QnnQuantEncoding.
_QNN_ENCODING_TO_PAYLOAD = {0: 1, 1: 2, 2: 3, 3: 4, 5: 5}
_ENCODING_NAMES = {0: "scale_offset", 1: "axis_scale_offset", 2: "bw_scale_offset", 3: "bw_axis_scale_offset"}
_HTP_BACKEND_ID = 6


def _extension():
    from backends.qualcomm.utils.runtime_options import load_extension

    extension = load_extension()
    if extension is None:
        raise ContextBinaryError("the native extension backends.qualcomm._qnn_delegate is not built")
    return extension


def context_binary_info(binary: bytes, source: str = "context binary") -> Dict[str, Any]:
    """QnnSystem's view of `binary` (graphs with their input / output tensors, build id, API
    versions, SoC model). ContextBinaryError naming `source` when QNN cannot read it."""
    try:
        return _extension().qnn_context_binary_info(bytes(binary))
    except (ValueError, RuntimeError) as exc:
        raise ContextBinaryError(f"{source}: {exc}") from None


def _version(v: Dict[str, int]) -> str:
    return f"{v['major']}.{v['minor']}.{v['patch']}"


def _library_versions() -> Optional[Tuple[Tuple[int, int], Tuple[int, int], str]]:
    """((core major, minor), (HTP major, minor), text) of the loaded QNN library, or None."""
    loaded, text = _extension().qnn_library_status()
    if not loaded:
        return None
    import re

    found = re.search(r"core API (\d+)\.(\d+)\.\d+, HTP API (\d+)\.(\d+)\.\d+", text)
    if found is None:
        return None
    a, b, c, d = (int(x) for x in found.groups())
    return (a, b), (c, d), text


def check_context_binary(info: Dict[str, Any], soc_model: int, source: str) -> None:
    """ContextBinaryError when the binary is not for the HTP, was built for another SoC than
    `soc_model`, or by a newer QNN than the loaded library."""
    if info["backend_id"] != _HTP_BACKEND_ID:
        raise ContextBinaryError(
            f"{source} was built for QNN backend id {info['backend_id']}, not the HTP (id {_HTP_BACKEND_ID})"
        )
    built_for = int(info["soc_model"])
    if built_for and soc_model and built_for != int(soc_model):
        names = {int(c): c.name for c in QcomChipset}
        raise ContextBinaryError(
            f"{source} was built for SoC model {built_for} ({names.get(built_for, 'unknown')}), "
            f"not {names.get(int(soc_model), soc_model)} ({int(soc_model)}): build it for that SoC or pass "
            f"soc_model=QcomChipset.{names.get(built_for, built_for)}"
        )
    library = _library_versions()
    if library is None:
        return
    (core_major, core_minor), (htp_major, htp_minor), text = library
    core, htp = info["core_api"], info["backend_api"]
    if (
        core["major"] != core_major
        or htp["major"] != htp_major
        or (htp["major"], htp["minor"]) > (htp_major, htp_minor)
    ):
        raise ContextBinaryError(
            f"{source} was written by QNN build {info['build_id'] or '?'} (core API {_version(core)}, HTP API "
            f"{_version(htp)}); the loaded library is {text}: a context binary must come from the same or an "
            "older QNN release"
        )


def _payload_tensor(tensor: Dict[str, Any], index: int, kind: int) -> QnnTensor:
    quant = None
    encoding = _QNN_ENCODING_TO_PAYLOAD.get(int(tensor["encoding"]))
    if encoding is not None:
        quant = QuantParams(
            encoding=encoding,
            bitwidth=int(tensor["bitwidth"]) or 8,
            scale=float(tensor["scale"]),
            offset=int(tensor["offset"]),
            axis=int(tensor["axis"]),
            scales=list(tensor["scales"]) or None,
            offsets=list(tensor["offsets"]) or None,
        )
    return QnnTensor(
        id=index,
        name=str(tensor["name"]),
        type=kind,
        data_type=int(tensor["dtype"]),
        dims=list(tensor["dims"]),
        quant=quant,
    )


def wrap_foreign_context_binary(binary: bytes, graph: Dict[str, Any], soc_model: int) -> bytes:
    """A delegate blob running graph `graph` (an entry of context_binary_info's "graphs") of
    `binary` on QNN: a payload of the graph's inputs and outputs only, and the binary."""
    inputs, outputs = graph["inputs"], graph["outputs"]
    tensors = [_payload_tensor(t, i, gen.QnnTensorType.APP_WRITE) for i, t in enumerate(inputs)]
    tensors += [_payload_tensor(t, len(inputs) + i, gen.QnnTensorType.APP_READ) for i, t in enumerate(outputs)]
    payload_graph = QnnGraph(
        name=str(graph["name"]),
        tensors=tensors,
        inputs=list(range(len(inputs))),
        outputs=list(range(len(inputs), len(inputs) + len(outputs))),
    )
    ids = [int(t["id"]) for t in inputs] + [int(t["id"]) for t in outputs]
    payload = serialize_payload([payload_graph], context_binary_only=True)
    return wrap_context_binary(
        payload, QnnHtpSection(binary=bytes(binary), soc_model=int(soc_model), graphs=[(payload_graph.name, ids)])
    )


def _tensor_json(tensor: Dict[str, Any]) -> Dict[str, Any]:
    out = {
        "name": tensor["name"],
        "id": tensor["id"],
        "dtype": _DTYPE_NAMES.get(int(tensor["dtype"]), hex(int(tensor["dtype"]))),
        "shape": list(tensor["dims"]),
    }
    encoding = int(tensor["encoding"])
    if encoding in _ENCODING_NAMES:
        out["encoding"] = {"kind": _ENCODING_NAMES[encoding]}
        if encoding in (0, 2):
            out["encoding"].update(scale=tensor["scale"], offset=tensor["offset"])
        else:
            out["encoding"].update(axis=tensor["axis"], scales=list(tensor["scales"]), offsets=list(tensor["offsets"]))
        if tensor["bitwidth"]:
            out["encoding"]["bitwidth"] = tensor["bitwidth"]
    return out


def info_json(info: Dict[str, Any]) -> Dict[str, Any]:
    """context_binary_info as the JSON dump_context_from_pte writes."""
    return {
        "build_id": info["build_id"],
        "core_api": _version(info["core_api"]),
        "backend_api": _version(info["backend_api"]),
        "backend_id": info["backend_id"],
        "soc_model": info["soc_model"],
        "context_blob_size": info["context_blob_size"],
        "graphs": [
            {
                "name": g["name"],
                "inputs": [_tensor_json(t) for t in g["inputs"]],
                "outputs": [_tensor_json(t) for t in g["outputs"]],
            }
            for g in info["graphs"]
        ],
    }


def dump_context_from_pte(pte_path) -> List[str]:
    """Write the QNN context binary of each qnn-delegate delegate of the .pte next to it as
    upstream does (`<dir>/<method>_<delegate index>.bin`, what contextCreateFromBinary takes),
    with `<method>_<delegate index>.json`: QnnSystem's info on it. Delegates without a binary
    are skipped with a warning; a .pte with none raises ContextBinaryNotSupportedError. Returns
    the paths of the binaries."""
    import logging

    from executorch.exir._serialize._program import deserialize_pte_binary

    from backends.qualcomm.utils.errors import ContextBinaryNotSupportedError
    from backends.qualcomm.utils.qnn_context import qnn_binary_of

    path = Path(pte_path)
    program = deserialize_pte_binary(path.read_bytes()).program
    written, skipped = [], []
    for plan in program.execution_plan:
        for index, delegate in enumerate(plan.delegates):
            if delegate.id != QNN_BACKEND_ID:
                continue
            binary = qnn_binary_of(bytes(program.backend_delegate_data[delegate.processed.index].data))
            if binary is None:
                skipped.append(f"{plan.name}_{index}")
                continue
            target = path.parent / f"{plan.name}_{index}.bin"
            target.write_bytes(binary)
            info = context_binary_info(binary, f"{path} delegate {plan.name}_{index}")
            target.with_suffix(".json").write_text(json.dumps(info_json(info), indent=1) + "\n")
            written.append(str(target))
    if skipped:
        logging.getLogger("backends.qualcomm").warning(
            "dump_context_from_pte: no QNN context binary in delegate(s) %s", ", ".join(skipped)
        )
    if not written:
        raise ContextBinaryNotSupportedError(
            f"dump_context_from_pte: {path} has no QNN context binary to dump (its {len(skipped)} qnn-delegate "
            "delegate(s) were lowered without the QNN libraries, with QNN_DELEGATE_CONTEXT_BINARY=0, or QNN "
            "refused their graphs at lowering)"
        )
    return written


def _custom_tensors(entries: Sequence[Any], qnn_tensors: List[Dict[str, Any]], what: str) -> "OrderedDict":
    """custom_info's graph_inputs / graph_outputs (upstream: objects with GetName / GetDataType /
    GetDims; here also dicts with name / dtype / shape) as name -> zeros, checked against QNN's."""
    if len(entries) != len(qnn_tensors):
        raise ContextBinaryError(
            f"custom_info['{what}'] lists {len(entries)} tensors, the graph has {len(qnn_tensors)}"
        )
    out = OrderedDict()
    for entry, qnn in zip(entries, qnn_tensors):
        if isinstance(entry, dict):
            name, dtype, shape = entry["name"], entry.get("dtype"), entry["shape"]
        else:
            name, dtype, shape = entry.GetName(), entry.GetDataType(), entry.GetDims()
        torch_dtype = QNN_TO_TORCH[int(qnn["dtype"])]
        if dtype is not None and QNN_TO_TORCH.get(int(dtype), dtype) != torch_dtype:
            raise ContextBinaryError(f"custom_info['{what}'] tensor {name!r}: dtype {dtype} is not QNN's {torch_dtype}")
        numel = int(torch.Size(shape).numel())
        if numel != int(torch.Size(qnn["dims"]).numel()):
            raise ContextBinaryError(
                f"custom_info['{what}'] tensor {name!r}: shape {list(shape)} does not have the "
                f"{int(torch.Size(qnn['dims']).numel())} elements of QNN's {list(qnn['dims'])}"
            )
        out[str(name)] = torch.zeros(tuple(shape), dtype=torch_dtype)
    return out


def _qnn_tensors(tensors: List[Dict[str, Any]], source: str) -> "OrderedDict":
    out = OrderedDict()
    for t in tensors:
        dtype = QNN_TO_TORCH.get(int(t["dtype"]))
        if dtype is None:
            raise ContextBinaryError(
                f"{source}: tensor {t['name']!r} has QNN data type {_DTYPE_NAMES.get(int(t['dtype']), t['dtype'])}, "
                "which no ExecuTorch tensor type carries"
            )
        out[str(t["name"])] = torch.zeros(tuple(t["dims"]), dtype=dtype)
    return out


def from_context_binary(
    ctx_path: "str | bytes",
    op_name: str,
    soc_model: QcomChipset = QcomChipset.SM8650,
    custom_info: Optional[Dict] = None,
) -> Dict[str, Any]:
    """Wrap a QNN context binary made elsewhere as a program (upstream's signature and return
    value). `ctx_path`: a file path or the binary's bytes. The graph's inputs / outputs, dtypes
    and shapes come from QnnSystem; `custom_info` (upstream's keys) may pick the graph
    ("graph_name"), rename / reshape inputs and outputs ("graph_inputs", "graph_outputs": same
    count, dtype and element count as QNN's) and reorder them ("qnn_in_order",
    "executorch_in_order", "executorch_out_order"). Returns {"custom_op", "custom_module",
    "exported_program", "inputs", "outputs", "edge_program_manager"}; the method is named after
    the graph. ContextBinaryError when the binary cannot be read, is for another SoC or a newer
    QNN, or custom_info does not fit it."""
    from executorch.exir import EdgeCompileConfig, to_edge

    from backends.qualcomm.utils.compile_spec import (
        enum_option,
        generate_htp_compiler_spec,
        generate_qnn_executorch_compiler_spec,
    )

    soc = int(enum_option("soc_model", QcomChipset, soc_model))
    if isinstance(ctx_path, (bytes, bytearray)):
        binary, source = bytes(ctx_path), f"from_context_binary({op_name!r})"
    else:
        source = f"from_context_binary: {ctx_path}"
        try:
            binary = Path(ctx_path).read_bytes()
        except OSError as exc:
            raise ContextBinaryError(f"{source}: {exc.strerror}") from None
    info = context_binary_info(binary, source)
    check_context_binary(info, soc, source)
    custom_info = dict(custom_info or {})
    graphs = {g["name"]: g for g in info["graphs"]}
    graph_name = custom_info.get("graph_name", info["graphs"][0]["name"])
    if graph_name not in graphs:
        raise ContextBinaryError(f"{source}: no graph {graph_name!r} (graphs: {sorted(graphs)})")
    graph = graphs[graph_name]
    if "graph_inputs" in custom_info:
        inputs = _custom_tensors(custom_info["graph_inputs"], graph["inputs"], "graph_inputs")
    else:
        inputs = _qnn_tensors(graph["inputs"], source)
    if "graph_outputs" in custom_info:
        outputs = _custom_tensors(custom_info["graph_outputs"], graph["outputs"], "graph_outputs")
    else:
        outputs = _qnn_tensors(graph["outputs"], source)
    blob = wrap_foreign_context_binary(binary, graph, soc)
    bundle = _build_program(op_name, inputs, outputs, custom_info)
    edge = to_edge({graph_name: bundle["exported_program"]}, compile_config=EdgeCompileConfig(_check_ir_validity=False))
    for node in edge.exported_program(graph_name).graph.nodes:
        if node.op == "call_function" and CUSTOM_OP_NAMESPACE in str(node.target):
            node.meta[META_CONTEXT_BLOB] = blob
    specs = generate_qnn_executorch_compiler_spec(
        soc_model=soc,
        backend_options=generate_htp_compiler_spec(use_fp16=False),
        is_from_context_binary=True,
        graph_name=[graph_name],
    )
    bundle.update(inputs=inputs, outputs=outputs, edge_program_manager=edge.to_backend(ContextBinaryPartitioner(specs)))
    return bundle


def _build_program(op_name: str, inputs: "OrderedDict", outputs: "OrderedDict", custom_info: Dict) -> Dict[str, Any]:
    """A module whose forward calls the custom op qaisw::<op_name> (the context binary) on its
    inputs, exported (upstream's model that mimics the context binary)."""
    from torch.library import Library

    qnn_in_order = custom_info.get("qnn_in_order")
    executorch_in_order = custom_info.get("executorch_in_order")
    executorch_out_order = custom_info.get("executorch_out_order")
    library = Library(CUSTOM_OP_NAMESPACE, "FRAGMENT")
    library.define(f"{op_name}(Tensor[] inputs) -> Tensor[]")
    specs = [(tuple(v.shape), v.dtype) for v in outputs.values()]

    def op_impl(args: List[torch.Tensor]) -> List[torch.Tensor]:  # shapes only: QNN computes it
        return [torch.zeros(shape, dtype=dtype, device="meta") for shape, dtype in specs]

    library.impl(op_name, op_impl, "CompositeExplicitAutograd")
    op = getattr(getattr(torch.ops, CUSTOM_OP_NAMESPACE), op_name).default

    class ContextBinaryModule(torch.nn.Module):
        """forward(*executorch inputs) -> the context binary's outputs in ExecuTorch's order."""

        def forward(self, *args: torch.Tensor):
            if qnn_in_order:
                args = tuple(args[i] for i in qnn_in_order)
            results = op(list(args))
            if executorch_out_order:
                return tuple(results[i] for i in executorch_out_order)
            return tuple(results)

    example = tuple(inputs.values())
    if executorch_in_order:
        example = tuple(example[i] for i in executorch_in_order)
    module = ContextBinaryModule()
    program = torch.export.export(module, example, strict=False)
    return {"custom_op": library, "custom_module": module, "exported_program": program}


class ContextBinaryPartitioner(Partitioner):
    """Tags the custom-op node that stands for a wrapped context binary, and the getitem nodes
    that take its outputs apart (nothing else)."""

    def __init__(self, compile_specs) -> None:
        super().__init__()
        self.delegation_spec = DelegationSpec(QNN_BACKEND_ID, compile_specs)

    def partition(self, exported_program) -> PartitionResult:
        tags = {}
        for node in exported_program.graph_module.graph.nodes:
            if node.op == "call_function" and META_CONTEXT_BLOB in node.meta:
                for tagged in [node, *node.users]:
                    tagged.meta["delegation_tag"] = "context_binary"
                tags["context_binary"] = self.delegation_spec
        return PartitionResult(tagged_exported_program=exported_program, partition_tags=tags)


def wrapped_blob_of(edge_program) -> Optional[bytes]:
    """The delegate blob of a program made by from_context_binary (the custom-op node's meta)."""
    for node in edge_program.graph.nodes:
        if node.op == "call_function" and META_CONTEXT_BLOB in node.meta:
            return node.meta[META_CONTEXT_BLOB]
    return None
