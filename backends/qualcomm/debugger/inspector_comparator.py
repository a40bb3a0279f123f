"""Our comparators inside ExecuTorch's Inspector.calculate_numeric_gap.

The AOT reference is rounded to each dumped tensor's encoding (as in the debugger).

`Inspector(...).calculate_numeric_gap(InspectorComparator(SQNRComparator(), dumped), reference_graph=
"edge_after_transform/forward")`: each runtime tensor is dequantized and permuted back to
the PyTorch layout (from `dumped`, see dump_info.collect_dumped_tensors) before the metric."""

from __future__ import annotations

from typing import Any, Dict, List

import torch
from executorch.devtools.inspector.numerical_comparator.numerical_comparator_base import (
    IntermediateOutputMapping,
    NumericalComparatorBase,
)

from backends.qualcomm.debugger.comparators import NumericalComparator
from backends.qualcomm.debugger.dump_info import DumpedTensor


class InspectorComparator(NumericalComparatorBase):
    """A NumericalComparator with the delegate's dequantization and layout as preprocessing."""

    def __init__(self, comparator: NumericalComparator, dumped: Dict[int, List[DumpedTensor]]):
        super().__init__()
        self.comparator = comparator
        self.dumped = dumped

    def _infos(self, handle: tuple) -> List[DumpedTensor]:
        """The dumped tensors of a runtime handle tuple (its own handle and the folded ones)."""
        return next((self.dumped[h] for h in handle if h in self.dumped), [])

    def _restore(self, handle: tuple, value: Any, reference: Any) -> Any:
        infos = self._infos(handle)
        values = value if isinstance(value, (list, tuple)) else [value]
        references = reference if isinstance(reference, (list, tuple)) else [reference]
        restored = []
        for i, v in enumerate(values):
            ref = references[i] if i < len(references) else None
            dequantize = not isinstance(ref, torch.Tensor) or ref.is_floating_point()
            ok = i < len(infos) and isinstance(v, torch.Tensor)
            restored.append(infos[i].to_reference_layout(v, dequantize) if ok else v)
        return restored if isinstance(value, (list, tuple)) else restored[0]

    def _reference(self, handle: tuple, reference: Any) -> Any:
        infos = self._infos(handle)
        if isinstance(reference, torch.Tensor) and infos:
            return infos[0].in_own_encoding(reference)
        return reference

    def preprocessing(self, mapping: IntermediateOutputMapping) -> IntermediateOutputMapping:
        return {
            (aot_handle, self._reference(rt_handle, aot_value)): (
                rt_handle,
                self._restore(rt_handle, rt_value, aot_value),
            )
            for (aot_handle, aot_value), (rt_handle, rt_value) in mapping.items()
        }

    def element_compare(self, a: Any, b: Any) -> float:
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            return self.comparator.compare(a.to(torch.float64), b.to(torch.float64))
        return float("nan")
