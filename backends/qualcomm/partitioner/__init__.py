from backends.qualcomm.partitioner.qnn_partitioner import QnnPartitioner, check_node

__all__ = ["QnnPartitioner", "check_node"]
