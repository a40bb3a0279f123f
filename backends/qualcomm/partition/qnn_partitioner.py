"""Upstream's module path <upstream>.partition.qnn_partitioner."""
from backends.qualcomm.partitioner.qnn_partitioner import QnnPartitioner

__all__ = ["QnnPartitioner"]
