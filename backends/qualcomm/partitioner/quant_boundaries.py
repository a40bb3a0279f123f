"""Keep quantized tensors inside delegates.

The CPU runtime has no quantize/dequantize kernels and delegates take and return float
tensors, so a quantize node must sit in the same partition as the dequantize node that
reads it. The DuplicateQuantize edge pass gives every dequantize its own quantize node;
when the partitioner still put a pair apart (to avoid a cycle through CPU ops), the
quantize node moves to its consumer's partition, which then reads the float tensor.
A quantize whose consumers sit in several partitions (plain to_edge_transform_and_lower does
not run DuplicateQuantize, and a partitioner may not change the graph) stays where it is:
the delegates then exchange the quantized integer tensor, and preprocess gives both ends
the encoding (_passes/insert_io_qdq.py)."""

from __future__ import annotations

from typing import Dict, List

import torch
from torch.fx.passes.infra.partitioner import Partition

from backends.qualcomm.builders.quant_encoding import is_quantize


def keep_quantize_with_consumers(graph: torch.fx.Graph, partitions: List[Partition]) -> None:
    """Move each quantize node whose users all live in one other partition into it."""
    owner: Dict[torch.fx.Node, Partition] = {n: p for p in partitions for n in p.nodes}
    for q in [n for n in graph.nodes if is_quantize(n) and n in owner]:
        homes = {id(owner.get(u)): owner.get(u) for u in q.users}
        if len(homes) != 1:
            continue
        target = next(iter(homes.values()))
        if target is not None and target is not owner[q]:
            owner[q].remove_node(q)
            target.add_node(q)
            owner[q] = target
