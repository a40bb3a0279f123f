from backends.qualcomm._passes.pass_manager import edge_transform_passes, run_preprocess_passes

__all__ = ["edge_transform_passes", "run_preprocess_passes"]
