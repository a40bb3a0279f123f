"""Intermediate-output debugger: compare every tensor the delegate dumps with the CPU reference."""

from backends.qualcomm.debugger.comparators import (
    CosineSimilarityComparator,
    MSEComparator,
    NumericalComparator,
    SQNRComparator,
)
from backends.qualcomm.debugger.inspector_comparator import InspectorComparator
from backends.qualcomm.debugger.qnn_intermediate_debugger import (
    EDGE_DIALECT_GRAPH_NAME,
    REFERENCE_GRAPH_NAME,
    DebugReport,
    QNNIntermediateDebugger,
)
from backends.qualcomm.debugger.reports import FAIL, NOT_COMPARED, PASS, ComparisonRow

__all__ = [
    "ComparisonRow",
    "CosineSimilarityComparator",
    "DebugReport",
    "EDGE_DIALECT_GRAPH_NAME",
    "FAIL",
    "InspectorComparator",
    "MSEComparator",
    "NOT_COMPARED",
    "NumericalComparator",
    "PASS",
    "QNNIntermediateDebugger",
    "REFERENCE_GRAPH_NAME",
    "SQNRComparator",
]
