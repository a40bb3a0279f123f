"""Our comparators inside ExecuTorch's Inspector.calculate_numeric_gap.

`Inspector(...).calculate_numeric_gap(InspectorComparator(SQNRComparator(), dumped), reference_graph=
"edge_after_transform/forward")`: each runtime tensor is dequantized and permuted back to
the PyTorch layout (from `dumped`, see dump_info.collect_dumped_tensors) before the metric."""
from __future__ import annotations

from typing import Any, Dict, List

import torch
from executorch.devtools.inspector.numerical_comparator.numerical_comparator_base import (
    IntermediateOutputMapping, NumericalComparatorBase,
)

from backends.qualcomm.debugger.comparators import NumericalComparator
from backends.qualcomm.debugger.dump_info import DumpedTensor


class InspectorComparator(NumericalComparatorBase):
    """A NumericalComparator with the delegate's dequantization and layout as preprocessing."""

    def __init__(self, comparator: NumericalComparator, dumped: Dict[int, List[DumpedTensor]]):
        super().__init__()
        self.comparator = comparator
        self.dumped = dumped

    def _restore(self, handle: tuple, value: Any) -> Any:
        infos = self.dumped.get(handle[0], []) if len(handle) == 1 else []
        if isinstance(value, torch.Tensor):
            return infos[0].to_reference_layout(value) if infos else value
        if isinstance(value, (list, tuple)):
            return [infos[i].to_reference_layout(v) if i < len(infos) and isinstance(v, torch.Tensor) else v
                    for i, v in enumerate(value)]
        return value

    def preprocessing(self, mapping: IntermediateOutputMapping) -> IntermediateOutputMapping:
        return {aot: (rt_handle, self._restore(rt_handle, rt_value)) for aot, (rt_handle, rt_value) in mapping.items()}

    def element_compare(self, a: Any, b: Any) -> float:
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            return self.comparator.compare(a.to(torch.float64), b.to(torch.float64))
        return float("nan")
