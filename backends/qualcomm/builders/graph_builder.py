"""GraphBuilder: owns the QNN tensors and ops that builders emit for one delegate graph."""

from __future__ import annotations

import operator
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
import torch
from executorch.backends.transforms.utils import get_param_tensor, is_param_node
from torch.export import ExportedProgram

from backends.qualcomm.builders.qnn_op_types import QNN_OP_TYPES, QNN_QUANT_OP_TYPES, QnnOpType
from backends.qualcomm.builders.quant_encoding import QuantAttrs, qnn_quant_dtype, quant_params, stored_data
from backends.qualcomm.serialization.qnn_graph import (
    DataType,
    QnnGraph,
    QnnOp,
    QnnParam,
    QnnTensor,
    QuantParams,
    TensorType,
    uint32_tensor,
)
from backends.qualcomm.utils.constants import (
    CHANNEL_LAST_RANKS,
    DEBUG_HANDLE,
    LAYOUT_CHANNEL_FIRST,
    LAYOUT_CHANNEL_LAST,
    NCHW_TO_NHWC,
    QCOM_LAYOUT,
    QCOM_QUANT_ATTRS,
    channel_first_perm,
    channel_last_perm,
)
from backends.qualcomm.utils.errors import QnnLoweringError
from backends.qualcomm.utils.tensor_dump import DEBUG_ID_MARKER, dump_tensor_name

# A float16 tensor inside the delegate is FLOAT_32 (HTP computes float tensors in fp16 precision
# either way); graph inputs / outputs of dtype float16 are FLOAT_16, Cast at the boundary.
_TORCH_TO_QNN_DTYPE = {
    torch.float32: DataType.FLOAT_32,
    torch.float16: DataType.FLOAT_32,
    torch.int32: DataType.INT_32,
    torch.int64: DataType.INT_64,
    torch.bool: DataType.BOOL_8,
    torch.uint8: DataType.UINT_8,
    torch.int8: DataType.INT_8,
    torch.int16: DataType.INT_16,
}
_NUMPY_TO_QNN_DTYPE = {
    np.dtype(np.float32): DataType.FLOAT_32,
    np.dtype(np.int32): DataType.INT_32,
    np.dtype(np.int64): DataType.INT_64,
    np.dtype(np.bool_): DataType.BOOL_8,
    np.dtype(np.uint8): DataType.UINT_8,
    np.dtype(np.int8): DataType.INT_8,
    np.dtype(np.int16): DataType.INT_16,
}


_BITS_TYPE = {DataType.FLOAT_32: DataType.INT_32, DataType.FLOAT_16: DataType.INT_16}


def qnn_dtype(dtype: torch.dtype, node: Optional[torch.fx.Node] = None) -> int:
    if dtype not in _TORCH_TO_QNN_DTYPE:
        raise QnnLoweringError(f"dtype {dtype} has no QNN data type", node)
    return _TORCH_TO_QNN_DTYPE[dtype]


def permute_dims(dims: Sequence[int], perm: Sequence[int]) -> List[int]:
    return [int(dims[p]) for p in perm]


def moves_only_unit_dims(dims: Sequence[int], perm: Sequence[int]) -> bool:
    """True when a permutation keeps the order of the non-1 dims (a Reshape does it)."""
    kept = [p for p in perm if dims[p] != 1]
    return kept == sorted(kept)


def io_dim_order(val: object) -> Tuple[int, ...]:
    """The dim order of a graph input / output value; () when contiguous (or not a tensor)."""
    if not isinstance(val, torch.Tensor) or val.dim() < 2:
        return ()
    order = tuple(int(d) for d in val.dim_order())
    return () if order == tuple(range(val.dim())) else order


def inverse_perm(perm: Sequence[int]) -> List[int]:
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return inverse


def node_layout(node: torch.fx.Node) -> str:
    return node.meta.get(QCOM_LAYOUT, LAYOUT_CHANNEL_FIRST)


def logical_shape(node: torch.fx.Node) -> List[int]:
    val = node.meta.get("val")
    if isinstance(val, (tuple, list)):
        val = val[0]
    if not isinstance(val, torch.Tensor):
        raise QnnLoweringError("node has no tensor meta 'val'", node)
    return [int(d) for d in val.shape]


def stored_dims(shape: Sequence[int], layout: str) -> List[int]:
    """Dims as stored in the payload for a logical shape in `layout`."""
    if layout == LAYOUT_CHANNEL_LAST and len(shape) in CHANNEL_LAST_RANKS:
        return permute_dims(shape, channel_last_perm(len(shape)))
    return list(shape)


def _debug_handle(node: Optional[torch.fx.Node]) -> int:
    handle = node.meta.get(DEBUG_HANDLE, 0) if node is not None else 0
    if isinstance(handle, (tuple, list)):
        handle = handle[0] if handle else 0
    return int(handle) if isinstance(handle, int) else 0


class GraphBuilder:
    """Tensors by (node, layout), unique names, op list; the result is a QnnGraph."""

    def __init__(self, edge_program: ExportedProgram, graph_name: str, fp16_precision: bool):
        self.edge_program = edge_program
        self.graph = QnnGraph(graph_name, fp16_precision=fp16_precision)
        self._tensors: Dict[Tuple[torch.fx.Node, str], QnnTensor] = {}
        self._graph_inputs: Dict[torch.fx.Node, QnnTensor] = {}  # APP_WRITE tensor of each graph input
        self._input_bits: Dict[torch.fx.Node, QnnTensor] = {}  # input_bits() results
        self._tensor_names: Set[str] = set()
        self._op_names: Set[str] = set()
        self._shared: Dict[object, object] = {}

    # ---- names ----------------------------------------------------------------
    def _unique(self, base: str, taken: Set[str]) -> str:
        name, k = base, 1
        while name in taken:
            name = f"{base}_{k}"
            k += 1
        taken.add(name)
        return name

    # ---- tensors --------------------------------------------------------------
    def add_tensor(
        self,
        name: str,
        kind: int,
        data_type: int,
        dims: Sequence[int],
        data: Optional[np.ndarray] = None,
        quant: Optional[QuantParams] = None,
    ) -> QnnTensor:
        tensor = QnnTensor(
            len(self.graph.tensors),
            self._unique(name, self._tensor_names),
            kind,
            data_type,
            [int(d) for d in dims],
            quant,
            data,
        )
        self.graph.tensors.append(tensor)
        return tensor

    def static_tensor(self, name: str, array: np.ndarray, quant: Optional[QuantParams] = None) -> QnnTensor:
        """A STATIC tensor holding `array` (dims = array.shape)."""
        array = np.ascontiguousarray(array.astype(np.float32) if array.dtype == np.float16 else array)
        if array.dtype not in _NUMPY_TO_QNN_DTYPE:
            raise QnnLoweringError(f"static tensor '{name}' has unsupported dtype {array.dtype}")
        return self.add_tensor(
            name, TensorType.STATIC, _NUMPY_TO_QNN_DTYPE[array.dtype], list(array.shape), array, quant
        )

    def shared(self, key: object, make: Callable[[], object]) -> object:
        """One value per graph under `key` (tensors several nodes' ops read, emitted once by the
        first of them): `make()` builds it the first time."""
        if key not in self._shared:
            self._shared[key] = make()
        return self._shared[key]

    def shared_static(self, name: str, make: Callable[[], np.ndarray]) -> QnnTensor:
        """One STATIC tensor per graph under `name` (a table several ops read): `make()` gives
        its data the first time."""
        return self.shared(("static", name), lambda: self.static_tensor(name, make()))

    def native_tensor(
        self, name: str, dims: Sequence[int], data_type: int = DataType.FLOAT_32, quant: Optional[QuantParams] = None
    ) -> QnnTensor:
        return self.add_tensor(name, TensorType.NATIVE, data_type, dims, quant=quant)

    def like(self, source: QnnTensor, name: str, dims: Optional[Sequence[int]] = None) -> QnnTensor:
        """A NATIVE tensor with the data type and encoding of `source` (dims default to its own)."""
        return self.native_tensor(name, source.dims if dims is None else dims, source.data_type, source.quant)

    def quantized_static(
        self, name: str, values: np.ndarray, attrs: QuantAttrs, perm: Optional[Sequence[int]] = None
    ) -> QnnTensor:
        """A STATIC quantized tensor from integer `values` already in stored layout (`perm`:
        stored dims = logical dims[perm], used to place the encoding's axes)."""
        return self.add_tensor(
            name,
            TensorType.STATIC,
            qnn_quant_dtype(attrs),
            list(values.shape),
            stored_data(values, attrs),
            quant_params(attrs, perm),
        )

    def static_from_constant(
        self, node: torch.fx.Node, perm: Optional[Sequence[int]] = None, name: Optional[str] = None
    ) -> QnnTensor:
        """STATIC tensor of a constant placeholder, permuted by `perm`; quantized when the
        fold pass left an encoding on the placeholder."""
        array = self.constant_data(node).detach().contiguous().numpy()
        if perm is not None:
            array = array.transpose(perm)
        attrs = node.meta.get(QCOM_QUANT_ATTRS)
        if attrs is not None:
            return self.quantized_static(name or node.name, np.ascontiguousarray(array), attrs, perm)
        return self.static_tensor(name or node.name, array)

    def define_output(
        self, node: torch.fx.Node, dims: Optional[Sequence[int]] = None, dtype: Optional[torch.dtype] = None
    ) -> QnnTensor:
        """The NATIVE output tensor of `node` in its own layout (dims from meta unless given)."""
        layout = node_layout(node)
        if dims is None:
            dims = stored_dims(logical_shape(node), layout) if logical_shape(node) else self._zero_d_dims(node)
        val = node.meta.get("val")
        val = val[0] if isinstance(val, (tuple, list)) else val
        attrs = node.meta.get(QCOM_QUANT_ATTRS)
        if attrs is not None and dtype is None:
            tensor = self.native_tensor(node.name, dims, qnn_quant_dtype(attrs), quant_params(attrs))
        else:
            tensor = self.native_tensor(node.name, dims, qnn_dtype(dtype or val.dtype, node))
        self._tensors[(node, layout)] = tensor
        return tensor

    def _zero_d_dims(self, node: torch.fx.Node) -> List[int]:
        """Dims of a 0-d node's output: [1] when a 0-d input of it is computed as [1] (a reduction
        over every element: utils.one_element_dims), so that shapes agree along the chain; else []."""
        for arg in node.all_input_nodes:
            key = (arg, node_layout(arg))
            if not logical_shape(arg) and key in self._tensors:
                tensor = self._tensors[key]
                if list(tensor.dims) == [1] and tensor.type != TensorType.STATIC:
                    return [1]
        return []

    def alias(self, node: torch.fx.Node, source: torch.fx.Node) -> None:
        """`node` is the same tensor as `source` (getitem of output 0)."""
        self._tensors[(node, node_layout(node))] = self.tensor(source, node_layout(node))

    def bind(self, node: torch.fx.Node, tensor: QnnTensor) -> None:
        """`tensor` is the output of `node` in its own layout (getitem i of a multi-output op)."""
        self._tensors[(node, node_layout(node))] = tensor

    def has_tensor(self, node: torch.fx.Node) -> bool:
        return (node, node_layout(node)) in self._tensors

    def node_output_tensors(self, node: torch.fx.Node) -> List[QnnTensor]:
        """The output tensors of `node` in output order (its getitem users' for a multi-output op)."""
        getitems = sorted((u for u in node.users if u.target is operator.getitem), key=lambda u: u.args[1])
        found: List[QnnTensor] = []
        for source in getitems or [node]:
            tensor = self._tensors.get((source, node_layout(source)))
            if tensor is not None and all(t is not tensor for t in found):
                found.append(tensor)
        return found

    def promote_for_dump(self, owners: Dict[torch.fx.Node, int]) -> None:
        """dump_intermediate_outputs: the outputs of each owner node are named
        `<name>_debugID_<handle>`, and every NATIVE tensor becomes APP_READ (readable after
        execute; Graph.outputs stays the delegate outputs)."""
        for node, handle in owners.items():
            for tensor in self.node_output_tensors(node):
                if tensor.type in (TensorType.NATIVE, TensorType.APP_READ) and DEBUG_ID_MARKER not in tensor.name:
                    tensor.name = self._unique(dump_tensor_name(tensor.name, handle), self._tensor_names)
                    self._record_edge_dim_order(node, tensor)
        for tensor in self.graph.tensors:
            if tensor.type == TensorType.NATIVE:
                tensor.type = TensorType.APP_READ

    @staticmethod
    def _record_edge_dim_order(node: torch.fx.Node, tensor: QnnTensor) -> None:
        """A dumped channel-last tensor records the logical dim order it is stored in (as graph
        inputs / outputs do), so that the runtime logs it in the edge node's layout."""
        rank = len(tensor.dims)
        if not tensor.dim_order and node_layout(node) == LAYOUT_CHANNEL_LAST and rank in CHANNEL_LAST_RANKS:
            tensor.dim_order = list(channel_last_perm(rank))

    def constant_data(self, node: object) -> Optional[torch.Tensor]:
        """Data of a param/buffer/lifted-constant placeholder, else None."""
        if isinstance(node, torch.fx.Node) and node.op == "placeholder" and is_param_node(self.edge_program, node):
            return get_param_tensor(self.edge_program, node)
        return None

    def define_graph_input(self, node: torch.fx.Node) -> QnnTensor:
        """APP_WRITE tensor of a graph input, stored in the caller's dim order: a channels_last
        rank-4 input is the node's channel-last tensor as is; another non-contiguous order gets
        one Transpose to the logical dims. A float16 input is FLOAT_16, Cast to FLOAT_32; the
        uint8 codes of a quantized input are UFIXED_POINT_8 with their encoding."""
        shape = logical_shape(node)
        order = io_dim_order(node.meta["val"])
        attrs = node.meta.get(QCOM_QUANT_ATTRS)  # uint8 codes read as they are (insert_io_qdq)
        half = node.meta["val"].dtype == torch.float16
        if attrs is not None:
            data_type = qnn_quant_dtype(attrs)
        else:
            data_type = DataType.FLOAT_16 if half else qnn_dtype(node.meta["val"].dtype, node)
        tensor = self.add_tensor(
            node.name,
            TensorType.APP_WRITE,
            data_type,
            [shape[d] for d in order] if order else shape,
            quant=quant_params(attrs) if attrs is not None else None,
        )
        tensor.dim_order = list(order)
        self.graph.inputs.append(tensor.id)
        self._graph_inputs[node] = tensor
        value = self.cast(node, tensor, DataType.FLOAT_32, "float") if half else tensor
        if order == NCHW_TO_NHWC:
            self._tensors[(node, LAYOUT_CHANNEL_LAST)] = value
        else:
            self._tensors[(node, LAYOUT_CHANNEL_FIRST)] = self._in_logical_dims(node, value, order, "contiguous")
        return tensor

    def cast(self, node: torch.fx.Node, source: QnnTensor, data_type: int, suffix: str) -> QnnTensor:
        """`source` Cast to `data_type` (a NATIVE tensor of the same dims)."""
        out = self.native_tensor(f"{node.name}_{suffix}", source.dims, data_type)
        self.add_op(node, QnnOpType.Cast, [source], [out], suffix=suffix)
        return out

    def _in_logical_dims(self, node: torch.fx.Node, tensor: QnnTensor, order: Sequence[int], suffix: str) -> QnnTensor:
        """Graph input `tensor`, stored in dim order `order`, in the logical dims (one Transpose
        unless contiguous)."""
        if not order:
            return tensor
        logical = self.like(tensor, f"{node.name}_{suffix}", permute_dims(tensor.dims, inverse_perm(order)))
        self.add_op(
            node, QnnOpType.Transpose, [tensor], [logical], [uint32_tensor("perm", inverse_perm(order))], suffix=suffix
        )
        return logical

    def is_graph_input(self, node: object) -> bool:
        """True when `node` is a graph input of this delegate (a float one has input_bits)."""
        return node in self._graph_inputs

    def input_bits(self, node: torch.fx.Node) -> QnnTensor:
        """The caller's buffer of FLOAT_32 / FLOAT_16 graph input `node` read as INT_32 /
        INT_16: its exact IEEE bits (HTP holds floats without infinities, and QNN passes integer
        inputs unconverted), as an APP_WRITE tensor outside graph.inputs (bits_of_input), in the
        logical dims."""
        if node in self._input_bits:
            return self._input_bits[node]
        source = self._graph_inputs.get(node)
        if source is None or source.data_type not in _BITS_TYPE:
            raise QnnLoweringError("input_bits: not a FLOAT_32 / FLOAT_16 graph input of the delegate", node)
        bits = self.add_tensor(f"{node.name}_bits", TensorType.APP_WRITE, _BITS_TYPE[source.data_type], source.dims)
        bits.dim_order = list(source.dim_order)
        bits.bits_of_input = self.graph.inputs.index(source.id)
        self._input_bits[node] = self._in_logical_dims(node, bits, source.dim_order, "bits_contiguous")
        return self._input_bits[node]

    def _define_static_placeholder(self, node: torch.fx.Node, layout: str) -> QnnTensor:
        data = self.constant_data(node)
        if data is None:
            raise QnnLoweringError("placeholder is neither a graph input nor a constant", node)
        perm = (
            channel_last_perm(data.dim())
            if layout == LAYOUT_CHANNEL_LAST and data.dim() in CHANNEL_LAST_RANKS
            else None
        )
        tensor = self.static_from_constant(node, perm)
        self._tensors[(node, layout)] = tensor
        return tensor

    def tensor(self, node: torch.fx.Node, layout: Optional[str] = LAYOUT_CHANNEL_FIRST) -> QnnTensor:
        """The tensor of `node` in `layout` (default channel-first; None = the node's own
        layout), converting once per layout when needed (tensors of CHANNEL_LAST_RANKS only)."""
        own = node_layout(node)  # placeholders: channel-first unless a channels_last graph input
        layout = layout or own
        if (node, layout) in self._tensors:
            return self._tensors[(node, layout)]
        if node.op == "placeholder" and self.constant_data(node) is not None:
            return self._define_static_placeholder(node, layout)
        if (node, own) not in self._tensors:
            raise QnnLoweringError("tensor used before it was defined (unsupported producer?)", node)
        base = self._tensors[(node, own)]
        if len(base.dims) not in CHANNEL_LAST_RANKS or layout == own:
            return base
        converted = self._convert_layout(node, base, layout)
        self._tensors[(node, layout)] = converted
        return converted

    def _convert_layout(self, node: torch.fx.Node, base: QnnTensor, layout: str) -> QnnTensor:
        rank = len(base.dims)
        perm = channel_last_perm(rank) if layout == LAYOUT_CHANNEL_LAST else channel_first_perm(rank)
        dims = permute_dims(base.dims, perm)
        out = self.like(base, f"{node.name}_{layout}", dims)
        if moves_only_unit_dims(base.dims, perm):
            self.add_op(node, QnnOpType.Reshape, [base], [out], suffix=f"to_{layout}")
        else:
            self.add_op(node, QnnOpType.Transpose, [base], [out], [uint32_tensor("perm", perm)], suffix=f"to_{layout}")
        return out

    # ---- ops ------------------------------------------------------------------
    def add_op(
        self,
        node: Optional[torch.fx.Node],
        op_type: str,
        inputs: Sequence[QnnTensor],
        outputs: Sequence[QnnTensor],
        params: Sequence[QnnParam] = (),
        suffix: str = "",
    ) -> QnnOp:
        if op_type not in QNN_OP_TYPES and op_type not in QNN_QUANT_OP_TYPES:
            raise QnnLoweringError(
                f"builder emitted unknown QNN op type '{op_type}'"
                + (f" for node '{node.name}'" if node is not None else "")
            )
        base = node.name if node is not None else op_type.lower()
        name = self._unique(f"{base}_{suffix}" if suffix else base, self._op_names)
        op = QnnOp(name, op_type, [t.id for t in inputs], [t.id for t in outputs], list(params), _debug_handle(node))
        self.graph.ops.append(op)
        return op

    def define_graph_outputs(
        self, output_nodes: Sequence[object], dim_orders: Optional[Sequence[Sequence[int]]] = None
    ) -> None:
        """APP_READ tensors in output order, in the dim order the caller's tensor has
        (`dim_orders`, default contiguous; channels_last = the channel-last tensor); copies
        when a tensor repeats. A float16 output is FLOAT_16, Cast from FLOAT_32."""
        for i, node in enumerate(output_nodes):
            if not isinstance(node, torch.fx.Node):
                raise QnnLoweringError(f"graph output {node!r} is not a tensor node")
            order = tuple(dim_orders[i]) if dim_orders and dim_orders[i] else ()
            tensor = self._output_in_dim_order(node, order)
            val = node.meta.get("val")
            if isinstance(val, torch.Tensor) and val.dtype == torch.float16 and tensor.data_type == DataType.FLOAT_32:
                tensor = self.cast(node, tensor, DataType.FLOAT_16, "half")
            elif tensor.type != TensorType.NATIVE:
                copy = self.like(tensor, f"{node.name}_output")
                self.add_op(node, QnnOpType.Reshape, [tensor], [copy], suffix="output")
                tensor = copy
            tensor.type = TensorType.APP_READ
            tensor.dim_order = list(order)
            self.graph.outputs.append(tensor.id)

    def _output_in_dim_order(self, node: torch.fx.Node, order: Tuple[int, ...]) -> QnnTensor:
        if order == NCHW_TO_NHWC:
            return self.tensor(node, LAYOUT_CHANNEL_LAST)
        tensor = self.tensor(node, LAYOUT_CHANNEL_FIRST)
        if not order:
            return tensor
        stored = self.like(tensor, f"{node.name}_dim_order", [tensor.dims[d] for d in order])
        self.add_op(
            node, QnnOpType.Transpose, [tensor], [stored], [uint32_tensor("perm", list(order))], suffix="dim_order"
        )
        return stored
