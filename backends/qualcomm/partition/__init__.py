"""Upstream's module path (executorch.backends.qualcomm.partition): QnnPartitioner lives in
backends.qualcomm.partitioner."""
