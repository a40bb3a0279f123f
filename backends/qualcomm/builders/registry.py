"""Builder registry: one NodeBuilder per op family, keyed by edge OpOverload objects."""

from __future__ import annotations

import enum
from typing import Callable, Dict, Iterable, List, Optional, Tuple, Type

import torch

from backends.qualcomm.builders.qnn_op_types import OP_TABLE
from backends.qualcomm.utils.constants import LAYOUT_CHANNEL_LAST

SupportResult = Tuple[bool, str]
SUPPORTED: SupportResult = (True, "")

# Float tensors: float16 ones (a model run in half) are computed as float32 inside the delegate
# (HTP in fp16 precision); only its graph inputs / outputs are FLOAT_16 (GraphBuilder).
FLOAT_DTYPES = (torch.float32, torch.float16)


def is_float_dtype(dtype: object) -> bool:
    """float32 or float16 (see FLOAT_DTYPES)."""
    return dtype in FLOAT_DTYPES


class LayoutPolicy(enum.Enum):
    """How an op treats the channel-last layout (read by the layout pass)."""

    CHANNEL_FIRST = "channel_first"  # needs logical (channel-first) inputs
    SENSITIVE = "sensitive"  # Conv2d/pools/Batchnorm: takes and produces NHWC
    AGNOSTIC = "agnostic"  # elementwise-like: works in either layout


class QuantFamily(enum.Enum):
    """How QnnQuantizer annotates a node (quantizer/annotators.py: one annotator per family)."""

    WEIGHTED = "weighted"  # activation in, weight per tensor / channel / block, derived bias
    COMPUTE = "compute"  # every tensor input and the output get activation encodings
    LAYER_NORM = "layer_norm"  # activation in and out, gamma / beta quantized
    SHARED = "shared"  # first input observed; the other inputs and the output share it
    EMBEDDING = "embedding"  # the table shares the output's encoding (or a per-row encoding)


def aten_ops(*names: str) -> List[torch._ops.OpOverload]:
    """torch.ops.aten overloads by "packet.overload" name: the export-level ops QnnQuantizer sees."""
    ops = []
    for name in names:
        packet, overload = name.split(".")
        ops.append(getattr(getattr(torch.ops.aten, packet), overload))
    return ops


# The op table's `quant` rule -> the annotator family of the aten ops it lists.
_TABLE_QUANT_FAMILIES = {"compute": QuantFamily.COMPUTE, "shared": QuantFamily.SHARED, "weighted": QuantFamily.WEIGHTED}


def table_quant_annotations(qnn_types: Iterable[str]) -> Dict[object, QuantFamily]:
    """The aten ops that the op table (ops.toml `aten`) maps to `qnn_types`, each with the family
    of its row's `quant` rule: a builder's quant_annotations without a list of its own."""
    annotations: Dict[object, QuantFamily] = {}
    for qnn_type in sorted(set(qnn_types)):
        row = OP_TABLE[qnn_type]
        family = _TABLE_QUANT_FAMILIES.get(row.quant)
        if family is None:
            raise TypeError(f"op table row {qnn_type}: quant = {row.quant!r} has no annotator family")
        annotations.update(dict.fromkeys(aten_ops(*row.aten), family))
    return annotations


class NodeBuilder:
    """Support check and lowering of one op family. Subclasses set `targets`."""

    targets: List[object] = []
    # Those of `targets` that ExecuTorch would decompose before partitioning and that this
    # builder lowers whole: the partitioner's ops_to_not_decompose is every builder's list.
    keep_whole: List[object] = []
    # The export-level (torch.ops.aten) ops that become this builder's nodes, and how QnnQuantizer
    # annotates each: the quantizer's op list and annotator choice are these and nothing else.
    quant_annotations: Dict[object, QuantFamily] = {}
    layout_policy: LayoutPolicy = LayoutPolicy.CHANNEL_FIRST
    # SENSITIVE builders: the input ranks they read channel-last (4: NHWC; conv: also NWC / NDHWC).
    channel_last_ranks: Tuple[int, ...] = (4,)
    # AGNOSTIC builders that also keep rank-3 / rank-5 tensors channel-last (elementwise ops,
    # whose every operand has the output's rank or broadcasts to it); others only rank 4.
    channel_last_any_rank: bool = False

    def is_supported(self, node: torch.fx.Node) -> SupportResult:
        """(supported, reason). Default: every tensor in/out is float32."""
        return check_float_io(node)

    def lowered_only_with(self, node: torch.fx.Node) -> List[torch.fx.Node]:
        """Nodes that must be delegated together with `node` for it to lower (e.g. a pad that
        only lowers folded into its convolutions). The partitioner rejects `node` when one of
        them stays on the CPU. Default: none."""
        return []

    def supports_channel_last(self, node: torch.fx.Node) -> bool:
        """AGNOSTIC builders: whether this node can read channel-last inputs."""
        return self.layout_policy is LayoutPolicy.AGNOSTIC

    def define_ops(self, node: torch.fx.Node, graph_builder) -> None:
        raise NotImplementedError(type(self).__name__)


_BUILDERS: Dict[object, NodeBuilder] = {}
_QUANT_FAMILIES: Dict[object, Tuple[QuantFamily, str]] = {}  # aten op -> (family, builder name)


def _aten_op_of(target: object) -> Optional[object]:
    return getattr(target, "_op", None)


def register_builder(cls: Type[NodeBuilder]) -> Type[NodeBuilder]:
    """Class decorator: register one builder instance under each of its edge targets."""
    stray = [t for t in cls.keep_whole if t not in cls.targets]
    if stray:
        raise TypeError(f"{cls.__name__}.keep_whole names ops it does not lower: {stray}")
    for op in cls.quant_annotations:
        previous = _QUANT_FAMILIES.get(op)
        if previous is not None and previous[1] != cls.__name__:
            raise TypeError(f"{cls.__name__} and {previous[1]} both annotate {op}")
    _QUANT_FAMILIES.update({op: (family, cls.__name__) for op, family in cls.quant_annotations.items()})
    instance = cls()
    for target in cls.targets:
        _BUILDERS[target] = instance
        aten_op = _aten_op_of(target)
        if aten_op is not None:
            _BUILDERS.setdefault(aten_op, instance)
    return cls


def get_builder(target: object) -> Optional[NodeBuilder]:
    """The builder for an edge (or the matching aten) op, or None."""
    try:
        return _BUILDERS.get(target)
    except TypeError:  # unhashable target
        return None


def registered_targets() -> List[object]:
    return list(_BUILDERS)


def quant_family(target: object) -> Optional[QuantFamily]:
    """How QnnQuantizer annotates a node of (export-level) op `target`; None: not quantized."""
    try:
        entry = _QUANT_FAMILIES.get(target)
    except TypeError:  # unhashable target
        return None
    return entry[0] if entry is not None else None


def quant_annotated_ops() -> Dict[object, QuantFamily]:
    """Every op QnnQuantizer annotates, with its family (from the builders)."""
    return {op: family for op, (family, _) in _QUANT_FAMILIES.items()}


def ops_to_not_decompose() -> List[torch._ops.OpOverload]:
    """The aten ops of every builder's `keep_whole` (registration order, each once)."""
    ops: Dict[object, None] = {}
    for builder in dict.fromkeys(_BUILDERS.values()):
        for target in builder.keep_whole:
            ops[_aten_op_of(target) or target] = None
    return list(ops)


# ---- shared validation helpers -------------------------------------------------


def node_val(node: object) -> Optional[object]:
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def tensor_vals(node: torch.fx.Node) -> List[torch.Tensor]:
    """FakeTensors of a node's output (tuple outputs flattened)."""
    val = node_val(node)
    if isinstance(val, (tuple, list)):
        return [v for v in val if isinstance(v, torch.Tensor)]
    return [val] if isinstance(val, torch.Tensor) else []


def input_nodes(node: torch.fx.Node) -> List[torch.fx.Node]:
    return [n for n in node.all_input_nodes]


def check_float_io(node: torch.fx.Node, skip_inputs: Tuple[int, ...] = ()) -> SupportResult:
    """Every tensor input (except positions in skip_inputs) and output must be float32 / float16."""
    for i, arg in enumerate(node.args):
        if i in skip_inputs:
            continue
        args = arg if isinstance(arg, (list, tuple)) else [arg]
        for a in args:
            for val in tensor_vals(a) if isinstance(a, torch.fx.Node) else []:
                if val.dtype not in FLOAT_DTYPES:
                    return False, f"input {i} has dtype {val.dtype}; only float32 / float16 are supported"
    outputs = tensor_vals(node)
    if not outputs:
        return False, "output has no tensor meta"
    if outputs[0].dtype not in FLOAT_DTYPES:
        return False, f"output dtype {outputs[0].dtype}; only float32 / float16 are supported"
    return SUPPORTED


# Data movement ops move bytes: besides float32 / float16, integer and bool tensors (token ids,
# positions, masks; int64 is INT_64 in the payload, INT_32 on QNN, which has no 64-bit type).
DATA_DTYPES = (torch.float32, torch.float16, torch.int32, torch.int64, torch.bool, torch.uint8, torch.int8)


def check_data_io(node: torch.fx.Node, skip_inputs: Tuple[int, ...] = ()) -> SupportResult:
    """Every tensor input (except positions in skip_inputs) and the output have one of
    DATA_DTYPES, all the same one."""
    dtypes = set()
    for i, arg in enumerate(node.args):
        if i in skip_inputs:
            continue
        for a in arg if isinstance(arg, (list, tuple)) else [arg]:
            dtypes |= {v.dtype for v in (tensor_vals(a) if isinstance(a, torch.fx.Node) else [])}
    outputs = tensor_vals(node)
    if not outputs:
        return False, "output has no tensor meta"
    dtypes |= {v.dtype for v in outputs}
    unsupported = sorted(str(d) for d in dtypes if d not in DATA_DTYPES)
    if unsupported:
        return (
            False,
            f"dtype {', '.join(unsupported)} is not supported (float32, float16, int32, int64, bool, uint8, int8)",
        )
    if len(dtypes) > 1:
        return False, f"mixed dtypes {sorted(str(d) for d in dtypes)}"
    return SUPPORTED


def check_static_shapes(node: torch.fx.Node) -> SupportResult:
    for val in tensor_vals(node):
        if any(not isinstance(d, int) for d in val.shape):
            return False, f"dynamic shape {tuple(val.shape)} is not supported"
    return SUPPORTED


def first_failure(*checks: Callable[[], SupportResult]) -> SupportResult:
    """Run checks lazily; return the first failure or SUPPORTED."""
    for check in checks:
        ok, reason = check()
        if not ok:
            return ok, reason
    return SUPPORTED


def is_channel_last(node: object) -> bool:
    from backends.qualcomm.utils.constants import QCOM_LAYOUT

    return isinstance(node, torch.fx.Node) and node.meta.get(QCOM_LAYOUT) == LAYOUT_CHANNEL_LAST
