"""QNN op types the builders may emit: generated at build time from the op table
(serialization/schema/ops.toml) into serialization.qnn_op_table_generated; re-exported here.
graph_builder checks every op a builder adds against them."""

from backends.qualcomm.serialization.qnn_op_table_generated import (  # noqa: F401
    DATA_MOVEMENT_OP_TYPES,
    LAYOUT_SENSITIVE_OP_TYPES,
    LUT_OP_TYPES,
    OP_TABLE,
    QNN_OP_TYPES,
    QNN_QUANT_OP_TYPES,
    OpTraits,
    QnnOpType,
)

__all__ = [
    "DATA_MOVEMENT_OP_TYPES",
    "LAYOUT_SENSITIVE_OP_TYPES",
    "LUT_OP_TYPES",
    "OP_TABLE",
    "QNN_OP_TYPES",
    "QNN_QUANT_OP_TYPES",
    "OpTraits",
    "QnnOpType",
]
