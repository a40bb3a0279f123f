"""Upstream's module path <upstream>.utils.utils: the lowering helpers a
script imports from there."""
from backends.qualcomm.utils.compile_spec import generate_htp_compiler_spec, generate_qnn_executorch_compiler_spec
from backends.qualcomm.utils.lowering import to_edge_transform_and_lower_to_qnn
from backends.qualcomm.utils.upstream_compat import dump_context_from_pte, from_context_binary, skip_annotation

__all__ = ["dump_context_from_pte", "from_context_binary", "generate_htp_compiler_spec",
           "generate_qnn_executorch_compiler_spec", "skip_annotation", "to_edge_transform_and_lower_to_qnn"]
