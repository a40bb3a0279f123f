"""What one partitioning did: delegated nodes and delegates, nodes left on the CPU by op and reason."""

from __future__ import annotations

import logging
import operator
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Tuple

import torch

MAX_LISTED_GROUPS = 8
NOT_PARTITIONED = "supported, but left out of every partition"


@dataclass(frozen=True)
class CpuOpGroup:
    """Nodes of one op left on the CPU for one reason."""

    op: str
    reason: str
    count: int
    nodes: Tuple[str, ...]


@dataclass
class PartitionSummary:
    """delegated_nodes: compute nodes inside delegates; delegates: number of partitions;
    cpu_nodes: compute nodes left on the CPU, grouped in cpu_ops (most frequent first)."""

    delegated_nodes: int
    delegates: int
    cpu_nodes: int
    cpu_ops: List[CpuOpGroup] = field(default_factory=list)
    validation: str = ""  # one line on QNN's op validation (ops, partitions, time) when it ran

    @property
    def log_level(self) -> int:
        return logging.WARNING if self.cpu_nodes else logging.INFO

    def cpu_op_counts(self) -> Dict[str, int]:
        """{op: nodes of that op left on the CPU}."""
        counts: Counter = Counter()
        for group in self.cpu_ops:
            counts[group.op] += group.count
        return dict(counts)

    def __str__(self) -> str:
        text = self._nodes_text()
        return f"{text}\n{self.validation}" if self.validation else text

    def _nodes_text(self) -> str:
        head = (
            f"QnnPartitioner: {self.delegated_nodes} of {self.delegated_nodes + self.cpu_nodes} "
            f"nodes delegated in {self.delegates} delegate(s)"
        )
        if not self.cpu_nodes:
            return head + "; nothing left on the CPU"
        listed = [f"{g.op} x{g.count} ({g.reason})" for g in self.cpu_ops[:MAX_LISTED_GROUPS]]
        rest = self.cpu_ops[MAX_LISTED_GROUPS:]
        if rest:
            listed.append(f"... {len(rest)} more op/reason group(s), {sum(g.count for g in rest)} node(s)")
        return f"{head}; {self.cpu_nodes} left on the CPU: " + "; ".join(listed)


def op_name(node: torch.fx.Node) -> str:
    return getattr(node.target, "__name__", str(node.target))


def counts_as_compute(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target is not operator.getitem


def summarize(graph: torch.fx.Graph, tags: Mapping[torch.fx.Node, str], reasons: Mapping[str, str]) -> PartitionSummary:
    """`tags`: node -> delegation tag of every delegated node; `reasons`: node name -> why not."""
    nodes = [n for n in graph.nodes if counts_as_compute(n)]
    delegated = [n for n in nodes if n in tags]
    left = [n for n in nodes if n not in tags]
    groups: Dict[Tuple[str, str], List[str]] = {}
    for node in left:
        groups.setdefault((op_name(node), reasons.get(node.name, NOT_PARTITIONED)), []).append(node.name)
    cpu_ops = [CpuOpGroup(op, reason, len(names), tuple(names)) for (op, reason), names in groups.items()]
    cpu_ops.sort(key=lambda g: (-g.count, g.op, g.reason))
    return PartitionSummary(len(delegated), len(set(tags.values())), len(left), cpu_ops)
