"""Pass order, declared in one place.

EDGE_TRANSFORM_PASSES run (as ExecuTorch transform passes) in
to_edge_transform_and_lower_to_qnn before partitioning; PREPROCESS_PASSES run on each
delegated program inside QnnDelegate.preprocess, so that plain
to_edge_transform_and_lower(..., partitioner=[QnnPartitioner(specs)]) works too."""

from __future__ import annotations

from typing import Callable, List

from torch.export import ExportedProgram

from backends.qualcomm._passes.annotate_quant_attrs import annotate_quant_attrs
from backends.qualcomm._passes.convert_linear_to_conv2d import MarkLinearAsConv2d, convert_linear_to_conv2d
from backends.qualcomm._passes.duplicate_quantize import DuplicateQuantize
from backends.qualcomm._passes.fold_batch_norm import fold_batch_norm_into_conv
from backends.qualcomm._passes.fold_constant_subgraphs import FoldConstantSubgraphs
from backends.qualcomm._passes.fold_high_rank_shapes import fold_high_rank_shapes
from backends.qualcomm._passes.fold_pad_into_conv import fold_pad_into_conv
from backends.qualcomm._passes.fold_qdq import fold_qdq
from backends.qualcomm._passes.fold_reshape_chains import fold_reshape_chains
from backends.qualcomm._passes.insert_io_qdq import insert_io_qdq, quantize_integer_inputs, record_output_meta
from backends.qualcomm._passes.insert_requantize import insert_requantize
from backends.qualcomm._passes.layout_transform import annotate_layout
from backends.qualcomm._passes.mark_constants import mark_constants
from backends.qualcomm._passes.decompose_random_like import DecomposeRandomLike
from backends.qualcomm._passes.remove_identity_ops import RemoveIdentityOps
from backends.qualcomm._passes.resolve_debug_handle import ResolveDebugHandle


def edge_transform_passes(convert_linear_to_conv2d: bool = False) -> List[Callable]:
    """Edge passes; `convert_linear_to_conv2d` marks linear nodes to be lowered as 1x1 Conv2d."""
    optional = [MarkLinearAsConv2d()] if convert_linear_to_conv2d else []
    return [
        DecomposeRandomLike(),
        FoldConstantSubgraphs(),
        RemoveIdentityOps(),
        DuplicateQuantize(),
        *optional,
        ResolveDebugHandle(),
    ]  # ResolveDebugHandle stays last


def _annotate_layout(ep: ExportedProgram) -> ExportedProgram:
    annotate_layout(ep.graph_module)
    return ep


PREPROCESS_PASSES: List[Callable[[ExportedProgram], ExportedProgram]] = [
    mark_constants,
    record_output_meta,
    quantize_integer_inputs,
    annotate_quant_attrs,
    fold_qdq,
    insert_requantize,
    insert_io_qdq,
    fold_high_rank_shapes,
    fold_reshape_chains,
    convert_linear_to_conv2d,
    fold_pad_into_conv,
    fold_batch_norm_into_conv,
    _annotate_layout,
]


def run_preprocess_passes(ep: ExportedProgram) -> ExportedProgram:
    for run_pass in PREPROCESS_PASSES:
        ep = run_pass(ep)
    return ep
