"""Builders: one file per op family; importing this package registers them all."""

from backends.qualcomm.builders import (  # noqa: F401
    op_activation,
    op_attention,
    op_cast,
    op_constant,
    op_conv,
    op_cumsum,
    op_distance,
    op_elementwise,
    op_extreme,
    op_gather,
    op_getitem,
    op_grid_sample,
    op_im2col,
    op_index_put,
    op_index,
    op_logic,
    op_math,
    op_matmul,
    op_norm,
    op_pad,
    op_pool,
    op_pool_adaptive,
    op_quantize,
    op_reduce,
    op_prod,
    op_resize,
    op_scatter,
    op_shape,
    op_softmax,
    op_sort,
    op_split,
    op_topk,
    op_variance,
    op_view_index,
)
from backends.qualcomm.builders.graph_builder import GraphBuilder
from backends.qualcomm.builders.registry import LayoutPolicy, NodeBuilder, get_builder, register_builder

__all__ = ["GraphBuilder", "LayoutPolicy", "NodeBuilder", "get_builder", "register_builder"]
