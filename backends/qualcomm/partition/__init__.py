"""Upstream's module path (<upstream>.partition): QnnPartitioner lives in
backends.qualcomm.partitioner."""
