"""Partitions that compute constants only stay on the CPU (plain to_edge_transform_and_lower).

A partition whose inputs are all constants (Hugging Face Llama's position ids and causal mask,
built from `arange` in forward, cut off from the rest by CPU nodes) would be a delegate with no
graph inputs, which QNN refuses (contextGetBinarySize: error 30002). A partitioner may not change
the graph, so it cannot fold them: such a partition is left to ExecuTorch's CPU kernels when
they cover every node (else it stays delegated and runs on the host engine only).
`to_edge_transform_and_lower_to_qnn` folds them into constants before partitioning
(_passes/fold_constant_subgraphs.py), so nothing is computed at run time there."""

from __future__ import annotations

from typing import Dict, List, Set

import torch
from torch.export import ExportedProgram
from torch.fx.passes.infra.partitioner import Partition

from backends.qualcomm._passes.fold_constant_subgraphs import mutated_buffer_inputs
from backends.qualcomm.partitioner.cpu_kernels import has_cpu_kernel

CONSTANT_ONLY_REASON = (
    "computes constants only (no runtime input reaches it): QNN refuses a graph without inputs, so it "
    "runs on ExecuTorch's CPU kernels; to_edge_transform_and_lower_to_qnn folds it into constants"
)


def _constant_inputs(ep: ExportedProgram) -> Set[torch.fx.Node]:
    from backends.qualcomm.utils.constants import QCOM_CONSTANT

    mutated = mutated_buffer_inputs(ep)
    return {
        n
        for n in ep.graph_module.graph.nodes
        if n.op == "placeholder" and n.meta.get(QCOM_CONSTANT) and n.name not in mutated
    }


def constant_only_partitions(ep: ExportedProgram, partitions: List[Partition]) -> Dict[int, Partition]:
    """{index: partition} of the partitions no runtime input reaches, whose every node ExecuTorch
    can run on the CPU."""
    constants = _constant_inputs(ep)
    found = {}
    for index, partition in enumerate(partitions):
        nodes = set(partition.nodes)
        outside = {arg for n in nodes for arg in n.all_input_nodes if arg not in nodes}
        if all(arg in constants for arg in outside) and all(has_cpu_kernel(n) for n in nodes):
            found[index] = partition
    return found
